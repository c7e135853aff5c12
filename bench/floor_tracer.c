/* floor_tracer.c -- a do-nothing erl_tracer NIF: the VM's own cost of
 * calling a NIF tracer (breakpoint, match spec, enabled checks, the trace
 * callback), the floor beamprobe's tracer is compared with in `make bench`.
 * Every callback of the erl_tracer behaviour is implemented (enabled_* says
 * trace, trace_* does nothing), so that each event kind of the per-kind
 * bench (bench/beamprobe_kinds_bench.erl) goes through its own callback, as
 * it does in beamprobe's tracer. */
#include <erl_nif.h>
#include <time.h>

static ERL_NIF_TERM atom_trace, atom_ok;

static ERL_NIF_TERM enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
	(void)env; (void)argc; (void)argv;
	return atom_trace;
}

static ERL_NIF_TERM trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
	(void)env; (void)argc; (void)argv;
	return atom_ok;
}

/* thread_cpu_ns(): CPU time of the calling scheduler thread, in ns (for
 * benches on a busy machine: time the thread was not running does not
 * count). */
static ERL_NIF_TERM thread_cpu_ns(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	struct timespec ts;

	(void)argc; (void)argv;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return enif_make_uint64(env, (ErlNifUInt64)ts.tv_sec * 1000000000u +
					     (ErlNifUInt64)ts.tv_nsec);
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
	(void)priv; (void)info;
	atom_trace = enif_make_atom(env, "trace");
	atom_ok = enif_make_atom(env, "ok");
	return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old, ERL_NIF_TERM info)
{
	(void)old;
	return load(env, priv, info);
}

static ErlNifFunc funcs[] = {
	{"thread_cpu_ns", 0, thread_cpu_ns, 0},
	{"enabled", 3, enabled, 0},
	{"enabled_call", 3, enabled, 0},
	{"enabled_send", 3, enabled, 0},
	{"enabled_receive", 3, enabled, 0},
	{"enabled_procs", 3, enabled, 0},
	{"enabled_ports", 3, enabled, 0},
	{"enabled_running_procs", 3, enabled, 0},
	{"enabled_running_ports", 3, enabled, 0},
	{"enabled_garbage_collection", 3, enabled, 0},
	{"trace", 5, trace, 0},
	{"trace_call", 5, trace, 0},
	{"trace_send", 5, trace, 0},
	{"trace_receive", 5, trace, 0},
	{"trace_procs", 5, trace, 0},
	{"trace_ports", 5, trace, 0},
	{"trace_running_procs", 5, trace, 0},
	{"trace_running_ports", 5, trace, 0},
	{"trace_garbage_collection", 5, trace, 0},
};

ERL_NIF_INIT(floor_tracer, funcs, load, NULL, upgrade, NULL)
