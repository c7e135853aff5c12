/* bp_elixir_parse.h -- internal to bp_elixir.c and bp_elixir_parse.c:
 * the tree the parser builds from captured Erlang-syntax text (one node
 * per term, decoded characters in a side array) for the writer to print
 * in Elixir syntax.  bp_elixir.h is the interface.
 */
#ifndef BP_ELIXIR_PARSE_H
#define BP_ELIXIR_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define NONE UINT32_MAX
#define MAX_NEST 200

enum ntype {
	N_ATOM, /* cps: the atom's characters */
	N_NUM,  /* span: the number's text */
	N_STR,  /* cps: a printable list's characters ("abc") */
	N_BIN,  /* cps: bytes; bits/tail: a bitstring's last bits */
	N_LIST, N_TUPLE, N_MAP,
	N_PID, N_PORT, N_REF, N_FUN, /* span: the whole token */
	N_EXTFUN,                    /* kids: module, function, arity */
	N_CUT,                       /* "..." */
	N_RAW                        /* span: copied as it is */
};

struct node {
	uint8_t type;
	uint8_t cut;     /* STR/BIN: "..." after it; BIN: <<...>> */
	uint8_t bits;    /* BIN: bits in the tail value, 0 if none */
	uint8_t open;    /* container whose text stops before its end */
	uint32_t off, len; /* span in the input, or range in cps */
	uint32_t tailv;  /* BIN: the tail value */
	uint32_t kid, next; /* first child, next sibling */
	uint32_t tail;   /* LIST: the tail after '|', or NONE */
};

struct px {
	const char *s;
	size_t n, i;
	struct node *nd;
	size_t nn, ncap;
	uint32_t *cp;
	size_t ncp, cpcap;
	unsigned nest;
};

/* The term at p->i (a node index; NONE when out of nodes).  Never reads
 * past p->n; a text that stops early leaves its containers open. */
uint32_t bp_exp_term(struct px *p);

/* The atom at p->i ('quoted' or bare); N_RAW with no text if none. */
uint32_t bp_exp_atom(struct px *p);

/* Skips spaces at p->i. */
void bp_exp_skip_sp(struct px *p);

#endif
