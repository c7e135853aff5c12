/* bp_nif_render.c -- the term renderer (bp_term.c) as NIFs, for tests:
 * render/2, render_args/2 and render_mfa/3 of beamprobe_nif, in its NIF
 * table (bp_nif.c).
 *
 * Called on a normal scheduler by the calling process; not used by
 * sessions.
 */
#include <string.h>

#include "bp_atoms.h"
#include "bp_elixir.h"
#include "bp_nif.h"
#include "bp_term.h"

#define RENDER_BUF (65 * 1024)

static int capture_from(ErlNifEnv *env, ERL_NIF_TERM m, struct bp_capture *c)
{
	ERL_NIF_TERM cfg = enif_make_new_map(env);

	if (!enif_is_map(env, m))
		return 0;
	enif_make_map_put(env, cfg, bp_atom.capture, m, &cfg);
	return bp_nif_get_capture(env, cfg, c);
}

static ERL_NIF_TERM text_result(ErlNifEnv *env, const char *buf, size_t n)
{
	ERL_NIF_TERM bin;
	unsigned char *p = enif_make_new_binary(env, n, &bin);

	memcpy(p, buf, n);
	return bin;
}

/*
 * Renders t (or the argument list t) three times: without a cache, then
 * twice through one fresh cache of immediate texts (the first pass fills
 * it, the second hits it).  The three texts must be byte-identical (the
 * cache's promise, bp_term.h): a difference raises
 * {cache_mismatch, Plain, Filled, Hit}.  Every renderer test thus also
 * tests the cache.
 */
static ERL_NIF_TERM render_checked(ErlNifEnv *env, ERL_NIF_TERM t,
				   const struct bp_capture *c, int args)
{
	struct bp_term_cache *cache;
	char *buf;
	size_t n[3];
	ERL_NIF_TERM r;

	if (!(buf = enif_alloc(3 * RENDER_BUF)))
		return enif_raise_exception(env, bp_atom.enomem);
	if (!(cache = enif_alloc(sizeof *cache))) {
		enif_free(buf);
		return enif_raise_exception(env, bp_atom.enomem);
	}
	memset(cache, 0, sizeof *cache);
	for (int i = 0; i < 3; i++) {
		char *b = buf + (size_t)i * RENDER_BUF;
		struct bp_term_cache *k = i ? cache : NULL;
		n[i] = args ? bp_term_render_args_cached(env, t, c, b,
							  RENDER_BUF, k)
			    : bp_term_render_cached(env, t, c, b, RENDER_BUF,
						    k);
	}
	if (n[0] == n[1] && n[0] == n[2] && !memcmp(buf, buf + RENDER_BUF, n[0]) &&
	    !memcmp(buf, buf + 2 * RENDER_BUF, n[0])) {
		r = text_result(env, buf, n[0]);
	} else {
		r = enif_raise_exception(
			env, enif_make_tuple4(
				     env,
				     enif_make_atom(env, "cache_mismatch"),
				     text_result(env, buf, n[0]),
				     text_result(env, buf + RENDER_BUF, n[1]),
				     text_result(env, buf + 2 * RENDER_BUF,
						 n[2])));
	}
	enif_free(cache);
	enif_free(buf);
	return r;
}

/* render(Term, Capture) -> binary(). */
ERL_NIF_TERM bp_nif_render(ErlNifEnv *env, int argc,
			   const ERL_NIF_TERM argv[])
{
	struct bp_capture c;

	(void)argc;
	if (!capture_from(env, argv[1], &c))
		return enif_make_badarg(env);
	return render_checked(env, argv[0], &c, 0);
}

/* render_args(Args, Capture) -> binary(). */
ERL_NIF_TERM bp_nif_render_args(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	struct bp_capture c;

	(void)argc;
	if (!capture_from(env, argv[1], &c) || !enif_is_list(env, argv[0]))
		return enif_make_badarg(env);
	return render_checked(env, argv[0], &c, 1);
}

/* render_mfa(M, F, Arity) -> binary(). */
ERL_NIF_TERM bp_nif_render_mfa(ErlNifEnv *env, int argc,
			       const ERL_NIF_TERM argv[])
{
	char buf[2048];
	unsigned arity;

	(void)argc;
	if (!enif_get_uint(env, argv[2], &arity))
		return enif_make_badarg(env);
	return text_result(env, buf,
			   bp_term_render_mfa(env, argv[0], argv[1], arity, buf,
					      sizeof buf));
}

/* elixir_text(Text, Kind) -> binary(): the Elixir-syntax text of a
 * captured Erlang-syntax text (bp_elixir.h), for the shell printer.
 * Kind: term | args | mfa | name.  Bounded: O(size of Text). */
ERL_NIF_TERM bp_nif_elixir_text(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	static const char *const kinds[] = {"term", "args", "mfa", "name"};
	ErlNifBinary in;
	char kind[8], *buf;
	size_t cap, n;
	ERL_NIF_TERM r;
	int k = -1;

	(void)argc;
	if (!enif_inspect_binary(env, argv[0], &in) ||
	    in.size > RENDER_BUF ||
	    enif_get_atom(env, argv[1], kind, sizeof kind, ERL_NIF_LATIN1) <= 0)
		return enif_make_badarg(env);
	for (int i = 0; i < 4; i++)
		if (!strcmp(kind, kinds[i]))
			k = i;
	if (k < 0)
		return enif_make_badarg(env);
	cap = BP_ELIXIR_CAP(in.size);
	if (!(buf = enif_alloc(cap)))
		return enif_raise_exception(env, bp_atom.enomem);
	n = bp_elixir_text((const char *)in.data, in.size,
			   (enum bp_elixir_kind)k, buf, cap);
	r = text_result(env, buf, n);
	enif_free(buf);
	return r;
}
