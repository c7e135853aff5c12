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
#include <erl_nif.h>

/* Capture limits (0 in a field means the default). */
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
 * Renders term t like io_lib:format("~0p") would (atoms quoted when needed,
 * printable lists as "strings", printable binaries as <<"text">>, floats in
 * shortest round-trip form, pids/ports/refs/funs as #Port<..>, #Ref<..>,
 * #Fun<..>), cut by the limits in c.  Writes at most min(cap, c->bytes + 1)
 * bytes including the NUL into buf; returns the text length (excluding the
 * NUL).  cap must be >= 8.
 */
size_t bp_term_render(ErlNifEnv *env, ERL_NIF_TERM t,
		      const struct bp_capture *c, char *buf, size_t cap);

/* Renders the elements of list `args` separated by ", " inside
 * parentheses: "(1, foo, <<\"x\">>)".  Same limits and contract as
 * bp_term_render (the `list` limit applies to the argument count). */
size_t bp_term_render_args(ErlNifEnv *env, ERL_NIF_TERM args,
			   const struct bp_capture *c, char *buf, size_t cap);

/* Renders an atom, quoted where Erlang needs quotes ('Elixir.Foo', 'a b',
 * 'receive'); latin-1 text converted to UTF-8.  Returns the length, or 0
 * if t is not an atom or does not fit. */
size_t bp_term_render_atom(ErlNifEnv *env, ERL_NIF_TERM t, char *buf,
			   size_t cap);

/* Renders "Module:Function/Arity" (atoms quoted as needed).  Returns the
 * length, 0 if it does not fit in cap. */
size_t bp_term_render_mfa(ErlNifEnv *env, ERL_NIF_TERM m, ERL_NIF_TERM f,
			  unsigned arity, char *buf, size_t cap);

#endif /* BP_TERM_H */
