/* floor_tracer.c -- a do-nothing erl_tracer NIF: the VM's own cost of
 * calling a NIF tracer (breakpoint, match spec, enabled checks, the trace
 * callback), the floor beamprobe's tracer is compared with in `make bench`. */
#include <erl_nif.h>

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

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
	(void)priv; (void)info;
	atom_trace = enif_make_atom(env, "trace");
	atom_ok = enif_make_atom(env, "ok");
	return 0;
}

static ErlNifFunc funcs[] = {
	{"enabled", 3, enabled, 0},
	{"enabled_call", 3, enabled, 0},
	{"trace", 5, trace, 0},
	{"trace_call", 5, trace, 0},
};

ERL_NIF_INIT(floor_tracer, funcs, load, NULL, NULL, NULL)
