/* bp_term.h -- bounded rendering of Erlang terms as Erlang-syntax text.
 *
 * Runs on the tracer's hot path, in the traced process's context (normal or
 * dirty scheduler thread): no malloc, no lock, no enif_make_*, no copy of
 * the term.  Work is bounded by the capture limits, never by the size of
 * the term: a 100 MB binary costs the same as a 100 byte one.
 *
 * Where a limit cuts the term the text shows "..." in its place, e.g.
 *   [1,2,3|...]   <<"abc"...>>   {a,{b,{...}}}   #{a => 1,...}
 * Output is NUL-terminated UTF-8 and always fits the given buffer.
 */
#ifndef BP_TERM_H
#define BP_TERM_H

#include <stddef.h>
#include <stdint.h>
#include <erl_nif.h>

/* Capture limits (0 in depth, list or bytes means the default; binary 0
 * shows no byte of a binary: <<...>>). */
struct bp_capture {
	unsigned depth;  /* nesting depth shown; default 4 */
	unsigned list;   /* elements shown per list/tuple/map; default 16 */
	unsigned binary; /* bytes shown per binary; default 64 */
	unsigned bytes;  /* text bytes per rendered term; default 512 */
};

#define BP_CAPTURE_DEFAULT_DEPTH 4
#define BP_CAPTURE_DEFAULT_LIST 16
#define BP_CAPTURE_DEFAULT_BINARY 64
#define BP_CAPTURE_DEFAULT_BYTES 512

/*
 * A cache of the rendered texts of immediate atoms, local pids and local
 * ports, keyed by the term word: the text of such a term is a function of
 * its word alone for the life of the VM (atoms are never freed, a local
 * pid or port prints as <0.N.S> / #Port<0.N> from its own bits), so an
 * entry never goes stale.  Boxed terms (remote pids and ports, refs, funs)
 * are never cached: their words are heap addresses.  Only texts that are
 * written as one token (unquoted ASCII atoms, pids, ports) are kept, so a
 * cached text is cut exactly as the uncached one.  Single writer (one per
 * ring slot), zero-initialised memory is an empty cache; no allocation.
 */
#define BP_TERM_IMM_CACHE 64 /* entries, a power of two */
#define BP_TERM_IMM_TEXT 31  /* longest text kept */

struct bp_term_imm {
	uint64_t word; /* 0: empty (no immediate term is 0) */
	uint8_t len;
	char text[BP_TERM_IMM_TEXT];
};

/*
 * Local funs (#Fun<m.1.2345>), keyed by their fun entry: the VM's
 * ErlFunEntry pointer in the fun's word 1 and the fields %T prints from it
 * (module atom, index, old uniq), read from OTP 25's layout.  An entry is
 * made only from a %T text that equals the text built from those fields,
 * and served only while the fields still hold the same values, so a text
 * is never made up from a misread layout.  Single writer, like the above.
 */
#define BP_TERM_FUN_CACHE 16 /* entries, a power of two */
#define BP_TERM_FUN_TEXT 86  /* longest text kept */

struct bp_term_fun {
	uint64_t fe, module; /* 0: empty */
	int32_t index, uniq;
	uint8_t len;
	char text[BP_TERM_FUN_TEXT];
};

struct bp_term_cache {
	struct bp_term_imm e[BP_TERM_IMM_CACHE];
	struct bp_term_fun fun[BP_TERM_FUN_CACHE];
};

/*
 * Renders term t like io_lib:format("~0p") would (atoms quoted when needed,
 * printable lists as "strings", printable binaries as <<"text">>, floats in
 * shortest round-trip form, pids/ports/refs/funs as #Port<..>, #Ref<..>,
 * #Fun<..>), cut by the limits in c.  Writes at most min(cap, c->bytes + 1)
 * bytes including the NUL into buf; returns the text length (excluding the
 * NUL).  cap must be >= 8.
 */
size_t bp_term_render(ErlNifEnv *env, ERL_NIF_TERM t,
		      const struct bp_capture *c, char *buf, size_t cap);

/* bp_term_render through cache (NULL: none); byte-identical output. */
size_t bp_term_render_cached(ErlNifEnv *env, ERL_NIF_TERM t,
			     const struct bp_capture *c, char *buf, size_t cap,
			     struct bp_term_cache *cache);

/* Renders the elements of list `args` separated by ", " inside
 * parentheses: "(1, foo, <<\"x\">>)".  Same limits and contract as
 * bp_term_render (the `list` limit applies to the argument count). */
size_t bp_term_render_args(ErlNifEnv *env, ERL_NIF_TERM args,
			   const struct bp_capture *c, char *buf, size_t cap);

/* bp_term_render_args through cache (NULL: none). */
size_t bp_term_render_args_cached(ErlNifEnv *env, ERL_NIF_TERM args,
				  const struct bp_capture *c, char *buf,
				  size_t cap, struct bp_term_cache *cache);

/* Renders an atom, quoted where Erlang needs quotes ('Elixir.Foo', 'a b',
 * 'receive'); latin-1 text converted to UTF-8.  Returns the length, or 0
 * if t is not an atom or does not fit. */
size_t bp_term_render_atom(ErlNifEnv *env, ERL_NIF_TERM t, char *buf,
			   size_t cap);

/* bp_term_render_atom through cache (NULL: none). */
size_t bp_term_render_atom_cached(ErlNifEnv *env, ERL_NIF_TERM t, char *buf,
				  size_t cap, struct bp_term_cache *cache);

/* Renders "Module:Function/Arity" (atoms quoted as needed).  Returns the
 * length, 0 if it does not fit in cap. */
size_t bp_term_render_mfa(ErlNifEnv *env, ERL_NIF_TERM m, ERL_NIF_TERM f,
			  unsigned arity, char *buf, size_t cap);

#endif /* BP_TERM_H */
