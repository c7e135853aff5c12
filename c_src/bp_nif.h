/* bp_nif.h -- what the NIF entry points share: the session resource type
 * and the tracer callbacks (bp_tracer.c) for the NIF function table. */
#ifndef BP_NIF_H
#define BP_NIF_H

#include <erl_nif.h>

/* Resource type of struct bp_session; set in load()/upgrade().  Sessions
 * created by an earlier instance of the library whose type erts dropped
 * (the module deleted and purged, then loaded again) have an older type:
 * bp_session_get() finds those too (bp_nif.c, "Reloads"). */
extern ErlNifResourceType *bp_session_rt;

struct bp_session;
struct bp_session *bp_session_get_old(ErlNifEnv *env, ERL_NIF_TERM t);

/* The session of a resource term, or NULL. */
static inline struct bp_session *bp_session_get(ErlNifEnv *env,
						ERL_NIF_TERM t)
{
	void *p;

	if (enif_get_resource(env, t, bp_session_rt, &p))
		return p;
	return bp_session_get_old(env, t);
}

#define BP_TRACER_NIFS(N)                                                  \
	N(enabled, 3, bp_tracer_enabled)                                   \
	N(enabled_call, 3, bp_tracer_enabled_kind)                              \
	N(enabled_send, 3, bp_tracer_enabled_kind)                              \
	N(enabled_receive, 3, bp_tracer_enabled_kind)                           \
	N(enabled_procs, 3, bp_tracer_enabled_kind)                             \
	N(enabled_ports, 3, bp_tracer_enabled_kind)                             \
	N(enabled_running_procs, 3, bp_tracer_enabled_kind)                     \
	N(enabled_garbage_collection, 3, bp_tracer_enabled_kind)                \
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
