/* bp_job.c -- NIF work that waits, in a thread of its own (bp_job.h). */
#include <pthread.h>

#include "bp_atoms.h"
#include "bp_job.h"
#include "bp_nif.h"

struct bp_job {
	bp_job_fn *fn;
	ErlNifEnv *env; /* arg, ref and the result message */
	ERL_NIF_TERM arg, ref;
	ErlNifPid pid;
};

static void job_free(struct bp_job *j)
{
	enif_free_env(j->env);
	enif_free(j);
}

static void *job_main(void *p)
{
	struct bp_job *j = p;
	ErlNifEnv *env = j->env;
	ERL_NIF_TERM r = j->fn(env, j->arg);

	/* A caller that has died meanwhile: not sent, nothing else to do. */
	enif_send(NULL, &j->pid, env,
		  enif_make_tuple3(env, enif_make_atom(env, "beamprobe_done"),
				   j->ref, r));
	job_free(j);
	return NULL;
}

ERL_NIF_TERM bp_job_start(ErlNifEnv *env, bp_job_fn *fn, ERL_NIF_TERM arg)
{
	struct bp_job *j = enif_alloc(sizeof *j);
	ERL_NIF_TERM ref = enif_make_ref(env);
	pthread_attr_t attr;
	pthread_t tid;
	int err;

	if (!j)
		return bp_nif_error2(env, "job", "enomem");
	if (!(j->env = enif_alloc_env())) {
		enif_free(j);
		return bp_nif_error2(env, "job", "enomem");
	}
	if (!enif_self(env, &j->pid)) {
		job_free(j);
		return enif_make_badarg(env);
	}
	j->fn = fn;
	j->arg = enif_make_copy(j->env, arg);
	j->ref = enif_make_copy(j->env, ref);
	if ((err = pthread_attr_init(&attr)) == 0) {
		err = pthread_attr_setdetachstate(&attr,
						  PTHREAD_CREATE_DETACHED);
		if (!err)
			err = pthread_create(&tid, &attr, job_main, j);
		pthread_attr_destroy(&attr);
	}
	if (err) {
		job_free(j);
		return bp_nif_errno_term(env, "job", err);
	}
	return enif_make_tuple2(env, bp_atom.ok, ref);
}
