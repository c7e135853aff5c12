/* bp_nif.h -- what the NIF entry points share: the session lookup, the
 * errors and capture options of bp_nif.c, start/1 (bp_nif_config.c),
 * and the tracer callbacks
 * (bp_dispatch.c) and renderer NIFs (bp_nif_render.c) for the NIF function
 * table. */
#ifndef BP_NIF_H
#define BP_NIF_H

#include <erl_nif.h>

#include "bp_restype.h"

struct bp_session;
struct bp_capture;

/* The session of a resource term, or NULL: of the current resource type,
 * or of an older one that still has sessions (bp_restype.c, "reloads"). */
static inline struct bp_session *bp_session_get(ErlNifEnv *env,
						ERL_NIF_TERM t)
{
	void *p;

	if (enif_get_resource(env, t, bp_restype_current, &p))
		return p;
	return bp_restype_get_old(env, t);
}

/* An errno value as an atom: eacces, enoent, ... or errno_N. */
ERL_NIF_TERM bp_nif_errno_atom(ErlNifEnv *env, int err);
/* {error, {What, Why}} with both atoms. */
ERL_NIF_TERM bp_nif_error2(ErlNifEnv *env, const char *what,
			   const char *why);
/* {error, {What, Errno atom}}. */
ERL_NIF_TERM bp_nif_errno_term(ErlNifEnv *env, const char *what,
			       int err);

/* Takes one of max node-wide session places for s (bp_nif.c); 0 if all
 * are taken.  The place is given back when s is stopped or destroyed. */
int bp_nif_session_reserve(struct bp_session *s, int max);

/* Gives s's place back (once; bp_nif.c). */
void bp_nif_session_release(struct bp_session *s);

/* start/1's work (bp_nif_config.c): a session from its config map.
 * *sp is the session once allocated (its place is to be given back by
 * the caller unless *ok is set); the result is {ok, Session, Ref}, its
 * collector thread then doing the I/O (the trace directory, the
 * metadata) and sending the caller {beamprobe_started, Ref, ok | {error,
 * {What, Why}}}, or {error, {What, Why}} at once. */
ERL_NIF_TERM bp_nif_start_session(ErlNifEnv *env, ERL_NIF_TERM cfg,
				  struct bp_session **sp, int *ok);

/* The capture limits of a config map's `capture' key into c (defaults if
 * absent); 0 if they are malformed or out of range. */
int bp_nif_get_capture(ErlNifEnv *env, ERL_NIF_TERM cfg,
		       struct bp_capture *c);

/* tampered/3: bp_nif_notice.c, a "tampered" event from the session. */
ERL_NIF_TERM bp_nif_tampered(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[]);
/* notice/4: bp_nif_notice.c, a "monitor" or "sample" event. */
ERL_NIF_TERM bp_nif_notice(ErlNifEnv *env, int argc,
			   const ERL_NIF_TERM argv[]);

/* render/2, render_args/2, render_mfa/3: bp_nif_render.c, for tests. */
ERL_NIF_TERM bp_nif_render(ErlNifEnv *env, int argc,
			   const ERL_NIF_TERM argv[]);
ERL_NIF_TERM bp_nif_render_args(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[]);
/* elixir_text/2: bp_nif_render.c, for the shell printer (bp_elixir.h). */
ERL_NIF_TERM bp_nif_elixir_text(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[]);
ERL_NIF_TERM bp_nif_render_mfa(ErlNifEnv *env, int argc,
			       const ERL_NIF_TERM argv[]);

#define BP_TRACER_NIFS(N)                                                  \
	N(enabled, 3, bp_tracer_enabled)                                   \
	N(enabled_call, 3, bp_tracer_enabled)                              \
	N(enabled_send, 3, bp_tracer_enabled)                              \
	N(enabled_receive, 3, bp_tracer_enabled)                           \
	N(enabled_procs, 3, bp_tracer_enabled)                             \
	N(enabled_ports, 3, bp_tracer_enabled)                             \
	N(enabled_running_procs, 3, bp_tracer_enabled)                     \
	N(enabled_garbage_collection, 3, bp_tracer_enabled)                \
	N(trace, 5, bp_tracer_trace)                                       \
	N(trace_send, 5, bp_tracer_trace_send)                             \
	N(trace_receive, 5, bp_tracer_trace_receive)                       \
	N(trace_procs, 5, bp_tracer_trace_procs)                           \
	N(trace_ports, 5, bp_tracer_trace_ports)                           \
	N(trace_running_procs, 5, bp_tracer_trace_running_procs)           \
	N(trace_garbage_collection, 5, bp_tracer_trace_gc)

#define BP__DECL(name, arity, fn)                                          \
	ERL_NIF_TERM fn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
BP_TRACER_NIFS(BP__DECL)
#undef BP__DECL

/* Call events (call, return_from, exception_from, return_to), reached
 * through trace/5: trace_call/5 is deliberately not exported, see
 * bp_tracer.c. */
ERL_NIF_TERM bp_tracer_trace_call(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[]);

#endif /* BP_NIF_H */
