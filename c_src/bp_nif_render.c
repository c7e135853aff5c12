/* bp_nif_render.c -- the term renderer (bp_term.c) as NIFs, for tests:
 * render/2, render_args/2 and render_mfa/3 of beamprobe_nif, in its NIF
 * table (bp_nif.c).
 *
 * Called on a normal scheduler by the calling process; not used by
 * sessions.
 */
#include <string.h>

#include "bp_atoms.h"
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

/* render(Term, Capture) -> binary(). */
ERL_NIF_TERM bp_nif_render(ErlNifEnv *env, int argc,
			   const ERL_NIF_TERM argv[])
{
	struct bp_capture c;
	char *buf;
	ERL_NIF_TERM r;

	(void)argc;
	if (!capture_from(env, argv[1], &c))
		return enif_make_badarg(env);
	if (!(buf = enif_alloc(RENDER_BUF)))
		return enif_raise_exception(env, bp_atom.enomem);
	r = text_result(env, buf,
			bp_term_render(env, argv[0], &c, buf, RENDER_BUF));
	enif_free(buf);
	return r;
}

/* render_args(Args, Capture) -> binary(). */
ERL_NIF_TERM bp_nif_render_args(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	struct bp_capture c;
	char *buf;
	ERL_NIF_TERM r;

	(void)argc;
	if (!capture_from(env, argv[1], &c) || !enif_is_list(env, argv[0]))
		return enif_make_badarg(env);
	if (!(buf = enif_alloc(RENDER_BUF)))
		return enif_raise_exception(env, bp_atom.enomem);
	r = text_result(env, buf,
			bp_term_render_args(env, argv[0], &c, buf, RENDER_BUF));
	enif_free(buf);
	return r;
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
