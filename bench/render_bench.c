/* render_bench.c -- the term renderer (c_src/bp_term.c) alone, timed in a
 * loop: render_bench:run(Args, Capture, N) renders the argument list Args
 * N times (after one warm-up render) as the tracer does for a call with
 * `args => full', through one per-thread cache of immediate texts, and
 * returns {NsPerRender, Text}.  Built by bench/run.sh with the renderer's
 * sources; not part of the library.  Runs on a normal scheduler: keep N
 * small enough for a few ms per call.
 */
#include <string.h>
#include <time.h>
#include <erl_nif.h>

#include "bp_erts_layout.h"
#include "bp_snap.h"
#include "bp_term.h"

#define TEXT_MAX 65537

static __thread struct bp_term_cache cache;
static __thread char text[TEXT_MAX];
static __thread unsigned char snapshot[TEXT_MAX];

static int get_cap(ErlNifEnv *env, ERL_NIF_TERM m, struct bp_capture *c)
{
	const char *keys[4] = {"depth", "list", "binary", "bytes"};
	unsigned *vals[4] = {&c->depth, &c->list, &c->binary, &c->bytes};
	ERL_NIF_TERM v;

	for (int i = 0; i < 4; i++)
		if (!enif_get_map_value(env, m, enif_make_atom(env, keys[i]), &v) ||
		    !enif_get_uint(env, v, vals[i]))
			return 0;
	return c->bytes >= 16 && c->bytes < TEXT_MAX && c->depth && c->list;
}

static ERL_NIF_TERM run(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
	struct bp_capture c;
	struct timespec a, b;
	unsigned n;
	size_t len = 0;
	ERL_NIF_TERM bin;

	(void)argc;
	memset(&c, 0, sizeof c);
	if (!get_cap(env, argv[1], &c) || !enif_get_uint(env, argv[2], &n) ||
	    !n)
		return enif_make_badarg(env);
	len = bp_term_render_args_cached(env, argv[0], &c, text, c.bytes + 1,
					 &cache);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (unsigned i = 0; i < n; i++)
		bp_term_render_args_cached(env, argv[0], &c, text, c.bytes + 1,
					   &cache);
	clock_gettime(CLOCK_MONOTONIC, &b);
	memcpy(enif_make_new_binary(env, len, &bin), text, len);
	return enif_make_tuple2(
		env,
		enif_make_double(env, ((double)(b.tv_sec - a.tv_sec) * 1e9 +
				       (double)(b.tv_nsec - a.tv_nsec)) / n),
		bin);
}

static double ns_since(const struct timespec *a, unsigned n)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((double)(b.tv_sec - a->tv_sec) * 1e9 +
		(double)(b.tv_nsec - a->tv_nsec)) / n;
}

/* snap(Args, Capture, N) -> {SnapNs, SnapBytes, RenderFromSnapNs, Text}:
 * the deferred-rendering prototype (bench/bp_snap.c), each half timed
 * alone; Text is rendered from the snapshot. */
static ERL_NIF_TERM snap(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
	struct bp_capture c;
	struct timespec a;
	unsigned n;
	size_t len, slen;
	double sns, rns;
	ERL_NIF_TERM bin;

	(void)argc;
	memset(&c, 0, sizeof c);
	if (!get_cap(env, argv[1], &c) || !enif_get_uint(env, argv[2], &n) ||
	    !n || BP_SNAP_CAP(c.bytes) + c.binary + c.list > TEXT_MAX)
		return enif_make_badarg(env);
	slen = bp_snap_args(env, argv[0], &c, snapshot, TEXT_MAX, &cache);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (unsigned i = 0; i < n; i++)
		bp_snap_args(env, argv[0], &c, snapshot, TEXT_MAX, &cache);
	sns = ns_since(&a, n);
	len = bp_snap_render(snapshot, slen, &c, text, c.bytes + 1);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (unsigned i = 0; i < n; i++)
		bp_snap_render(snapshot, slen, &c, text, c.bytes + 1);
	rns = ns_since(&a, n);
	memcpy(enif_make_new_binary(env, len, &bin), text, len);
	return enif_make_tuple4(env, enif_make_double(env, sns),
				enif_make_uint64(env, slen),
				enif_make_double(env, rns), bin);
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
	(void)priv;
	(void)info;
	bp_erts_layout_check(env);
	return 0;
}

static ErlNifFunc funcs[] = {{"run", 3, run, 0}, {"snap", 3, snap, 0}};
ERL_NIF_INIT(render_bench, funcs, load, NULL, NULL, NULL)
