/* bp_erts_layout.h -- reading terms straight from the VM's memory layout
 * (OTP 24/25, 64-bit), for the renderer (bp_term.c): boxed words, binaries
 * and sub-binaries, cons cells, small integers, local pids and the fun
 * entries of local funs.
 *
 * The NIF API has no bounded way to read some terms (enif_inspect_binary
 * copies an unaligned binary whole, %T converts a whole bignum), and it
 * costs a function call per element where one load does; so the renderer
 * reads the layouts of erl_term.h / erl_binary.h itself, only on a VM whose
 * release it knows (bp_erts_layout_ok(): OTP 24 or 25; the fun entry only
 * on 25), and falls back to the NIF API (or "...") elsewhere.  Nothing here
 * allocates, locks or writes the VM's memory.  Producer context, any
 * thread.
 */
#ifndef BP_ERTS_LAYOUT_H
#define BP_ERTS_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <erl_nif.h>

#include "bp_term.h"

/* ERTS term layout (erl_term.h; long stable, checked on OTP 25). */
#define ERTS_PRIMARY_MASK 0x3
#define ERTS_PRIMARY_BOXED 0x2
#define ERTS_PRIMARY_IMMED 0x3
#define ERTS_IMMED1_MASK 0xf
#define ERTS_IMMED1_PID 0x3
#define ERTS_IMMED1_PORT 0x7
#define ERTS_IMMED1_SMALL 0xf
#define ERTS_HEADER_TAG_MASK 0x3f
#define ERTS_HEADER_POS_BIG 0x08
#define ERTS_HEADER_NEG_BIG 0x0c
#define ERTS_HEADER_ARITY_SHIFT 6
#define ERTS_HEADER_REFC_BIN 0x20
#define ERTS_HEADER_HEAP_BIN 0x24
#define ERTS_HEADER_SUB_BIN 0x28
#define ERTS_HEADER_FLOAT 0x18
#define ERTS_HEADER_MAP 0x3c
#define ERTS_IMMED2_MASK 0x3f
#define ERTS_IMMED2_ATOM 0x0b
/* Whole header words (checked against terms the VM makes, by
 * bp_erts_layout_check): a float (one data word) and a flatmap (map
 * subtag, map type 0 in bits 6-7, "arity" 1 above them, erl_map.h). */
#define ERTS_FLOAT_HEADER ((1u << ERTS_HEADER_ARITY_SHIFT) | ERTS_HEADER_FLOAT)
#define ERTS_FLATMAP_HEADER (0x100u | ERTS_HEADER_MAP)
/* [] (erl_term.h of OTP 24/25: the immediate-2 tag 0x3b, zeros above). */
#define ERTS_NIL ((ERL_NIF_TERM)0x3b)

/* ProcBin, ErlHeapBin (header, size, data...) and ErlSubBin of OTP 25's
 * erl_binary.h (the same in OTP 24). */
struct erts_proc_bin {
	ERL_NIF_UINT thing_word, size;
	const void *next, *val;
	const unsigned char *bytes;
	ERL_NIF_UINT flags;
};

struct erts_sub_bin {
	ERL_NIF_UINT thing_word, size, offs;
	unsigned char bitsize, bitoffs, is_writable;
	ERL_NIF_TERM orig;
};

/* 1 if the running VM lays terms out as above: OTP 24 or 25 (OTP 26
 * changed binaries).  Asked once (bp__erts_layout_probe); elsewhere
 * bignums print as ... and binaries as <<...>> rather than read memory
 * laid out otherwise. */
extern atomic_int bp_erts_known; /* -1: not asked yet */
int bp__erts_layout_probe(void);

/* Decides bp_erts_known from the release and from terms made in env
 * ([], an atom, a float, a flatmap, a tuple, a cons cell: each must be
 * laid out as this file reads it).  From load(). */
void bp_erts_layout_check(ErlNifEnv *env);

static inline int bp_erts_layout_ok(void)
{
	int v = atomic_load_explicit(&bp_erts_known, memory_order_relaxed);

	return __builtin_expect(v >= 0, 1) ? v : bp__erts_layout_probe();
}

/* The words of boxed term t; NULL if t is not boxed or the layout is not
 * the one this file knows. */
static inline const ERL_NIF_UINT *bp_erts_boxed(ERL_NIF_TERM t)
{
	if ((t & ERTS_PRIMARY_MASK) != ERTS_PRIMARY_BOXED || !bp_erts_layout_ok())
		return NULL;
	return (const ERL_NIF_UINT *)(uintptr_t)(t & ~(ERL_NIF_TERM)ERTS_PRIMARY_MASK);
}

/* The arity and elements of tuple t from its header word (ARITYVAL: tag
 * 0, the arity above it); 0 if t is not a tuple or the layout is not one
 * this file knows (then the caller asks enif_get_tuple). */
static inline int bp_erts_tuple(ERL_NIF_TERM t, int *arity,
				const ERL_NIF_TERM **elems)
{
	const ERL_NIF_UINT *p = bp_erts_boxed(t);

	if (!p || sizeof(ERL_NIF_TERM) != 8 ||
	    (p[0] & ERTS_HEADER_TAG_MASK) != 0)
		return 0;
	*arity = (int)(p[0] >> ERTS_HEADER_ARITY_SHIFT);
	*elems = (const ERL_NIF_TERM *)(p + 1);
	return 1;
}

#define ERTS_PRIMARY_LIST 0x1

/* Is t a list (a cons cell or [])?  Is it a local port (an immediate)?
 * From the word on a known layout, else through the NIF API. */
static inline int bp_erts_is_list(ErlNifEnv *env, ERL_NIF_TERM t)
{
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return (t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST ||
		       t == ERTS_NIL;
	return enif_is_list(env, t);
}

static inline int bp_erts_is_local_port(ErlNifEnv *env, ERL_NIF_TERM t)
{
	ErlNifPort port;

	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return (t & ERTS_IMMED1_MASK) == ERTS_IMMED1_PORT;
	return enif_get_local_port(env, t, &port);
}

/* The double of float t (boxed, FLOAT header, the value in word 1); 0 if
 * t is not a float of this layout. */
static inline int bp_erts_float(ERL_NIF_TERM t, double *d)
{
	const ERL_NIF_UINT *p = bp_erts_boxed(t);

	if (!p || sizeof(ERL_NIF_TERM) != 8 || p[0] != ERTS_FLOAT_HEADER)
		return 0;
	memcpy(d, p + 1, sizeof *d);
	return 1;
}

/* A flat map (up to 32 keys: erl_map.h's flatmap_t, the header, the
 * size, the boxed tuple of the keys, then the values): its size, keys and
 * values in the order enif_map_iterator walks them; 0 if t is not one
 * (a hashmap, or not this layout), then the caller uses the iterator.
 * The keys tuple's arity must equal the size. */
static inline int bp_erts_flatmap(ERL_NIF_TERM t, size_t *n,
				  const ERL_NIF_TERM **keys,
				  const ERL_NIF_TERM **vals)
{
	const ERL_NIF_UINT *p = bp_erts_boxed(t), *k;

	if (!p || sizeof(ERL_NIF_TERM) != 8 || p[0] != ERTS_FLATMAP_HEADER ||
	    !(k = bp_erts_boxed(p[2])) ||
	    (k[0] & ERTS_HEADER_TAG_MASK) != 0 ||
	    k[0] >> ERTS_HEADER_ARITY_SHIFT != p[1])
		return 0;
	*n = p[1];
	*keys = (const ERL_NIF_TERM *)(k + 1);
	*vals = (const ERL_NIF_TERM *)(p + 3);
	return 1;
}

/* The head and tail of list cell t from the cons cell's two words
 * (primary tag 0x1, erl_term.h); 0 if t is not a cell or the layout is
 * not known (then the caller asks enif_get_list_cell). */
static inline int bp_erts_cell(ERL_NIF_TERM t, ERL_NIF_TERM *hd,
			       ERL_NIF_TERM *tl)
{
	if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST &&
	    sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		const ERL_NIF_TERM *p =
			(const ERL_NIF_TERM *)(uintptr_t)(t - ERTS_PRIMARY_LIST);

		*hd = p[0];
		*tl = p[1];
		return 1;
	}
	return 0;
}

/* 1 with *v the value if t is a small integer (immediate, tag 0xF, the
 * signed value above it) on a layout this file knows. */
static inline int bp_erts_small(ERL_NIF_TERM t, int64_t *v)
{
	if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL &&
	    sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		*v = (int64_t)t >> 4;
		return 1;
	}
	return 0;
}

/* A bitstring as ERTS lays it out: its bytes start at bit `bitoffs` of
 * p[0]; `size` whole bytes then `bitsize` (0-7) more bits. */
struct bview {
	const unsigned char *p;
	size_t size;
	unsigned bitoffs, bitsize;
};

/* Reads the bitstring t from the ERTS layout, without the copy that
 * enif_inspect_binary makes of a binary at a non-byte bit offset and
 * without enif_inspect_binary's side effect on a writable binary (it
 * shrinks it, so the owner's next append copies it whole).  0 if the
 * layout is not one this file knows (then nothing is read). */
int bp_erts_bin_view(ERL_NIF_TERM t, struct bview *v);

/* Byte i < v->size of the bitstring. */
static inline unsigned bv_byte(const struct bview *v, size_t i)
{
	const unsigned char *p = v->p + i;

	if (!v->bitoffs)
		return p[0];
	return (unsigned char)(p[0] << v->bitoffs | p[1] >> (8 - v->bitoffs));
}

/* The last v->bitsize (1-7) bits, as an integer. */
static inline unsigned bv_tail(const struct bview *v)
{
	const unsigned char *p = v->p + v->size;
	unsigned w = (unsigned)p[0] << 8, end = v->bitoffs + v->bitsize;

	if (end > 8)
		w |= p[1];
	return (w >> (16 - end)) & ((1u << v->bitsize) - 1);
}

/* Local funs (OTP 25, 64-bit): the fields of local fun t's entry into
 * f (fe, module, index, uniq); 0 if t is not a local fun of that layout
 * (nothing but its own words is read then).  See bp_erts_layout.c. */
int bp_erts_fun_fields(ERL_NIF_TERM t, struct bp_term_fun *f);

/* 1 if text (%T of a local fun) ends in ".<index>.<uniq>>", the values
 * read from the fun's entry. */
int bp_erts_fun_text_matches(const char *text, size_t n,
			     const struct bp_term_fun *f);

/* The text of local pid t, "<0.Number.Serial>", from its word, checked
 * against %T on the first pids (see bp_erts_layout.c); 1 with the text in
 * out (>= 64 bytes) and its length in *len, 0 if not used. */
int bp_erts_pid_text(ERL_NIF_TERM t, char *out, size_t *len);

#endif /* BP_ERTS_LAYOUT_H */
