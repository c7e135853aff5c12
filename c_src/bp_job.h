/* bp_job.h -- NIF work that waits (on the disk, on other threads) done in
 * a thread of its own, the NIF returning at once.
 *
 * Why: a process inside a dirty NIF of beamprobe_nif is executing the
 * module's code, and the hard purge of the module's old code after a
 * reload (code:load_file/1 then code:purge/1) kills every such process.
 * So no control NIF waits: it starts a job and returns {ok, Ref}; the job
 * sends the caller {beamprobe_done, Ref, Result}, which it waits for in
 * its own code (beamprobe_nif_wait.erl).
 */
#ifndef BP_JOB_H
#define BP_JOB_H

#include <erl_nif.h>

/* What a job does: its result, made in env (a process-independent env,
 * never enif_make_badarg: the NIF checked arg).  Runs in the job's thread,
 * not a scheduler. */
typedef ERL_NIF_TERM bp_job_fn(ErlNifEnv *env, ERL_NIF_TERM arg);

/* Runs fn(arg) in a new detached thread (the library is pinned: its code
 * stays mapped, bp_restype.c).  Returns {ok, Ref}, or {error, {job,
 * Errno}} if no thread could be made (nothing was done).  A NIF's. */
ERL_NIF_TERM bp_job_start(ErlNifEnv *env, bp_job_fn *fn, ERL_NIF_TERM arg);

#endif
