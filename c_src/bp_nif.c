/* bp_nif.c -- NIF library beamprobe_nif: load/upgrade, the session
 * resource, and the control calls made by beamprobe_session.erl.
 *
 * The same module is the erl_tracer module: its tracer callbacks are in
 * bp_tracer.c.  Control calls run on the caller's scheduler, none dirty,
 * none waiting: work that waits (on the disk, the collector, producers)
 * is done by the collector thread or a job's thread (bp_job.h), which
 * tells the caller by a message (a process in a dirty NIF of this module
 * is killed by a purge of its old code).  They never call exit()/abort().
 *
 * Elsewhere: start/1 and its config parsing in bp_nif_config.c, the
 * output directory and its metadata in bp_output.c, the resource types
 * across reloads in bp_restype.c, the renderer NIFs for tests in
 * bp_nif_render.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bp_atoms.h"
#include "bp_clock.h"
#include "bp_dio.h"
#include "bp_erts_layout.h"
#include "bp_follow.h"
#include "bp_hub.h"
#include "bp_job.h"
#include "bp_budget.h"
#include "bp_losses.h"
#include "bp_membar.h"
#include "bp_retstack.h"
#include "bp_nif.h"
#include "bp_output.h"
#include "bp_restype.h"
#include "bp_session.h"
#include "bp_sink_handler.h"
#include "bp_sink_lttng.h"
#include "bp_sink_tcp.h"
#include "bp_sink_tcp_auth.h"
#include "bp_term.h"
#include "bp_usdt.h"

struct bp_atoms bp_atom;


/* Sessions started and not yet stopped (or destroyed), node-wide: each
 * has a collector thread and a mapping, so their number is capped. */
static _Atomic int live_sessions;

ERL_NIF_TERM bp_nif_error2(ErlNifEnv *env, const char *what,
			   const char *why)
{
	return enif_make_tuple2(
		env, bp_atom.error,
		enif_make_tuple2(env, enif_make_atom(env, what),
				 enif_make_atom(env, why)));
}

ERL_NIF_TERM bp_nif_errno_atom(ErlNifEnv *env, int err)
{
	char name[64];
	const char *s;

	switch (err) {
	case EACCES: s = "eacces"; break;
	case ENOENT: s = "enoent"; break;
	case ENOSPC: s = "enospc"; break;
	case EEXIST: s = "eexist"; break;
	case ENOTDIR: s = "enotdir"; break;
	case EROFS: s = "erofs"; break;
	case ENOMEM: s = "enomem"; break;
	case ENAMETOOLONG: s = "enametoolong"; break;
	case ELOOP: s = "eloop"; break;
	case EIO: s = "eio"; break;
	case EFBIG: s = "efbig"; break;
	case EDQUOT: s = "edquot"; break;
	case EMFILE: s = "emfile"; break;
	case EAGAIN: s = "eagain"; break; /* a thread: RLIMIT_NPROC */
	case ENFILE: s = "enfile"; break;
	default:
		snprintf(name, sizeof name, "errno_%d", err);
		s = name;
	}
	return enif_make_atom(env, s);
}

ERL_NIF_TERM bp_nif_errno_term(ErlNifEnv *env, const char *what,
			       int err)
{
	return enif_make_tuple2(
		env, bp_atom.error,
		enif_make_tuple2(env, enif_make_atom(env, what),
				 bp_nif_errno_atom(env, err)));
}

/* ---- the session resource ------------------------------------------ */

/* Gives the session's place back (once). */
void bp_nif_session_release(struct bp_session *s)
{
	bp_budget_memory_give(s);
	if (atomic_exchange(&s->counted, 0)) {
		int n = atomic_load(&live_sessions);
		/* Never below 0 (a session of a previous library instance). */
		while (n > 0 &&
		       !atomic_compare_exchange_weak(&live_sessions, &n, n - 1))
			;
	}
}

/* Takes one of max places; 0 if all are taken.  Atomic: concurrent
 * starts never exceed max. */
int bp_nif_session_reserve(struct bp_session *s, int max)
{
	int n = atomic_load(&live_sessions);

	do {
		if (n >= max)
			return 0;
	} while (!atomic_compare_exchange_weak(&live_sessions, &n, n + 1));
	atomic_store(&s->counted, 1);
	return 1;
}

/* Ends the collector and joins it, once: of two callers (stopped/1 in two
 * processes), one joins; the other finds thread_started cleared. */
static void session_join(struct bp_session *s)
{
	int mine;

	if (!s->mtx) /* a start that failed before making it */
		return;
	enif_mutex_lock(s->mtx);
	mine = s->thread_started;
	s->thread_started = 0;
	s->cmd_stop = 1;
	enif_mutex_unlock(s->mtx);
	if (!mine)
		return;
	bp__session_wake(s);
	enif_thread_join(s->tid, NULL);
}

/* Closes the trace directory once the collector has finished (no stream
 * is opened in it after that).  At stop, not only in the destructor: the
 * resource lives on until the last process holding a reference to it has
 * garbage collected, and a stopped session kept its directory open (and
 * a removed one's inode alive) until then. */
static void close_dir(struct bp_session *s)
{
	int fd;

	if (!s->mtx) /* a start that failed before opening the directory */
		return;
	enif_mutex_lock(s->mtx);
	fd = s->dirfd;
	s->dirfd = -1;
	enif_mutex_unlock(s->mtx);
	if (fd >= 0)
		close(fd);
}

static void session_dtor(ErlNifEnv *env, void *obj)
{
	struct bp_session *s = obj;

	(void)env;
	bp_restype_object_gone(obj);
	session_join(s);
	bp_nif_session_release(s);
	if (s->dirfd >= 0)
		close(s->dirfd);
	s->dirfd = -1;
	if (s->streams) {
		for (uint32_t i = 0; i < s->max_slots; i++)
			bp_ctf_stream_close(&s->streams[i], 0);
		enif_free(s->streams);
	}
	if (s->prefault_done)
		enif_free(s->prefault_done);
	if (s->merge)
		enif_free(s->merge);
	if (s->handlers) {
		for (uint32_t i = 0; i < s->nhandlers; i++)
			bp_handler_free(&s->handlers[i]);
		enif_free(s->handlers);
	}
	bp_tcp_free(s->tcp);
	s->tcp = NULL;
	bp_follow_free(s->follow);
	s->follow = NULL;
	if (s->map)
		munmap(s->map, s->region_size);
	if (s->dump_env)
		enif_free_env(s->dump_env);
	if (s->start_env) /* a start whose thread was never made */
		enif_free_env(s->start_env);
	if (s->start_lttng)
		enif_free(s->start_lttng);
	if (s->mtx) { /* waiters of a session never started: none told */
		enif_mutex_lock(s->mtx);
		bp_session_tell_stopped(s, NULL);
		enif_mutex_unlock(s->mtx);
	}
	if (s->cond)
		enif_cond_destroy(s->cond);
	if (s->mtx)
		enif_mutex_destroy(s->mtx);
}

/* make_dir(Dir :: iodata()) -> {ok, Ref} | {error, {job, Why}}: the
 * trace directory created or checked (bp_output.c) by a job (bp_job.h),
 * which sends {beamprobe_done, Ref, created | existing | {error, Why}}. */
static ERL_NIF_TERM nif_make_dir(ErlNifEnv *env, int argc,
				 const ERL_NIF_TERM argv[])
{
	(void)argc;
	if (!bp_output_path_ok(env, argv[0]))
		return enif_make_badarg(env);
	return bp_job_start(env, bp_output_make_dir, argv[0]);
}

/* create_file(File :: iodata()) -> {ok, Ref} | {error, {job, Why}}: a new
 * empty file, 0600 from the first instant (bp_output.c), by a job that
 * sends {beamprobe_done, Ref, ok | {error, Why}}. */
static ERL_NIF_TERM nif_create_file(ErlNifEnv *env, int argc,
				    const ERL_NIF_TERM argv[])
{
	(void)argc;
	if (!bp_output_path_ok(env, argv[0]))
		return enif_make_badarg(env);
	return bp_job_start(env, bp_output_create_file, argv[0]);
}

/* start(Config) -> {ok, Session, Ref} | {error, {What, Why}}: the
 * session made, its collector thread started; that thread opens the
 * directory, writes the metadata and sends {beamprobe_started, Ref, ok |
 * {error, {What, Why}}} (bp_nif_config.c).  Not dirty, and it never
 * waits on the disk: a process in a dirty NIF of beamprobe_nif is
 * executing the module's code, and a hard purge of the module's old code
 * after a reload kills it (beamprobe_nif_wait:start/1 waits instead). */
static ERL_NIF_TERM nif_start(ErlNifEnv *env, int argc,
			      const ERL_NIF_TERM argv[])
{
	struct bp_session *s = NULL;
	int ok = 0;
	ERL_NIF_TERM r = bp_nif_start_session(env, argv[0], &s, &ok);

	(void)argc;
	if (!ok && s)
		bp_nif_session_release(s); /* a failed start holds no place */
	return r;
}

/* ---- stop / info / dump -------------------------------------------- */

static struct bp_session *arg_session(ErlNifEnv *env, ERL_NIF_TERM t)
{
	return bp_session_get(env, t);
}

static ERL_NIF_TERM stats_map(ErlNifEnv *env, struct bp_session *s)
{
	struct bp_losses l;
	ERL_NIF_TERM dropped = enif_make_new_map(env), m, st;
	static const char *const reasons[] = {"none", "events", "bytes",
					      "overflow", "io_error",
					      "owner_dead", "rate"};
	int sr = atomic_load(&s->stop_reason);

	bp_losses_get(s, &l);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		enif_make_map_put(env, dropped,
				  enif_make_atom(env, bp_drop_cause_names[c]),
				  enif_make_uint64(env, l.d[c]), &dropped);
	for (int c = 0; c < BP_SL_COUNT; c++)
		if (l.has[c])
			enif_make_map_put(
				env, dropped,
				enif_make_atom(env, bp_session_loss_names[c]),
				enif_make_uint64(env, l.sl[c]), &dropped);
	enif_make_map_put(env, dropped, bp_atom.total,
			  enif_make_uint64(env, l.total), &dropped);
	switch (atomic_load(&s->state)) {
	case BP_S_RUNNING: st = bp_atom.running; break;
	case BP_S_PAUSED: st = bp_atom.paused; break;
	case BP_S_STOPPING: st = bp_atom.stopping; break;
	default: st = bp_atom.stopped; break;
	}
	uint32_t threads = 0;
	for (uint32_t i = 0; i < s->max_slots; i++)
		threads += atomic_load(&s->slots[i]) != NULL;
	ERL_NIF_TERM keys[] = {bp_atom.events,	 bp_atom.aux_events,
			       bp_atom.bytes,	 bp_atom.dropped,
			       bp_atom.state,	 bp_atom.stop_reason,
			       bp_atom.io_error, bp_atom.threads,
			       bp_atom.memory,	 bp_atom.prefaulted};
	int ioe = atomic_load(&s->io_error);
	ERL_NIF_TERM vals[] = {
		enif_make_uint64(env, atomic_load(&s->events)),
		enif_make_uint64(env, atomic_load(&s->aux_events)),
		enif_make_uint64(env, atomic_load(&s->bytes)),
		dropped,
		st,
		enif_make_atom(env, reasons[sr < 7 && sr >= 0 ? sr : 0]),
		ioe ? bp_nif_errno_term(env, "file", ioe) : bp_atom.none,
		enif_make_uint(env, threads),
		enif_make_uint64(env, (uint64_t)threads * s->slot_stride +
					      atomic_load_explicit(
						      &s->file_buffers,
						      memory_order_relaxed)),
		enif_make_uint64(env, atomic_load(&s->prefaulted)),
	};
	if (!enif_make_map_from_arrays(env, keys, vals, 10, &m))
		return enif_make_badarg(env);
	ERL_NIF_TERM sinks = enif_make_list(env, 0);
	for (uint32_t i = s->nhandlers; i-- > 0;) {
		struct bp_handler_sink *h = &s->handlers[i];
		uint64_t dl, dr, fl, sl;
		bp_handler_counts(h, &dl, &dr, &fl, &sl);
		/* dropped by cause: slow_output (no credit), handler_down */
		ERL_NIF_TERM hk[5] = {bp_atom.delivered, bp_atom.dropped,
				      bp_atom.in_flight, bp_atom.slow_output,
				      bp_atom.handler_down};
		ERL_NIF_TERM hv[5] = {enif_make_uint64(env, dl),
				      enif_make_uint64(env, dr),
				      enif_make_uint64(env, fl),
				      enif_make_uint64(env, sl),
				      enif_make_uint64(env, dr - sl)};
		ERL_NIF_TERM hm;
		if (enif_make_map_from_arrays(env, hk, hv, 5, &hm))
			sinks = enif_make_list_cell(env, hm, sinks);
	}
	enif_make_map_put(env, m, bp_atom.handlers, sinks, &m);
	if (l.has_tcp) {
		/* Each sink's own losses: what its trace says (bp_losses.h). */
		ERL_NIF_TERM by = enif_make_new_map(env);
		if (l.has_file)
			enif_make_map_put(env, by, enif_make_atom(env, "file"),
					  enif_make_uint64(env, l.file), &by);
		enif_make_map_put(env, by, enif_make_atom(env, "tcp"),
				  enif_make_uint64(env, l.tcp), &by);
		enif_make_map_put(env, m, enif_make_atom(env, "lost_by_sink"),
				  by, &m);
	}
	if (s->follow) {
		ERL_NIF_TERM fk[] = {enif_make_atom(env, "started"),
				     enif_make_atom(env, "cut"),
				     enif_make_atom(env, "refused"),
				     enif_make_atom(env, "outside"),
				     enif_make_atom(env, "labelled")};
		ERL_NIF_TERM fv[] = {
			enif_make_uint64(env, bp_follow_count(s->follow,
							      BP_FC_STARTED)),
			enif_make_uint64(env,
					 bp_follow_count(s->follow, BP_FC_CUT)),
			enif_make_uint64(env, bp_follow_count(s->follow,
							      BP_FC_REFUSED)),
			enif_make_uint64(env, bp_follow_count(s->follow,
							      BP_FC_OUTSIDE)),
			enif_make_uint64(env, bp_follow_count(s->follow,
							      BP_FC_LABELLED))};
		ERL_NIF_TERM fm;
		if (enif_make_map_from_arrays(env, fk, fv, 5, &fm))
			enif_make_map_put(env, m, enif_make_atom(env, "requests"),
					  fm, &m);
	}
	if (s->has_lttng)
		enif_make_map_put(env, m, enif_make_atom(env, "lttng_session"),
				  enif_make_uint64(env, s->lttng_id),
				  &m);
	if (s->tcp) {
		struct bp_tcp_counts tc;
		ERL_NIF_TERM tm;
		bp_tcp_counts(s->tcp, &tc);
		ERL_NIF_TERM tk[] = {
			enif_make_atom(env, "packets_sent"),
			enif_make_atom(env, "bytes_sent"),
			enif_make_atom(env, "connects"),
			enif_make_atom(env, "disconnects"),
			enif_make_atom(env, "packets_dropped"),
			enif_make_atom(env, "events_dropped"),
			enif_make_atom(env, "refused"),
			enif_make_atom(env, "events_unconfirmed"),
			enif_make_atom(env, "auth_failures"),
			enif_make_atom(env, "auth_failure"),
			enif_make_atom(env, "connected")};
		ERL_NIF_TERM tv[] = {
			enif_make_uint64(env, tc.packets_sent),
			enif_make_uint64(env, tc.bytes_sent),
			enif_make_uint64(env, tc.connects),
			enif_make_uint64(env, tc.disconnects),
			enif_make_uint64(env, tc.packets_dropped),
			enif_make_uint64(env, tc.events_dropped),
			enif_make_uint64(env, tc.refused),
			enif_make_uint64(env, tc.events_unconfirmed),
			enif_make_uint64(env, tc.auth_failures),
			enif_make_atom(env, bp_tcp_auth_reason(tc.auth_failure)),
			tc.connected ? bp_atom.true_ : bp_atom.false_};
		if (enif_make_map_from_arrays(env, tk, tv, 11, &tm))
			enif_make_map_put(env, m, enif_make_atom(env, "stream"),
					  tm, &m);
	}
	return m;
}

/* stop(Session) -> {ok, Ref}: asks the collector to end (final drain,
 * files closed); it sends the caller {beamprobe_stopped, Ref} once it has
 * (at once if it already has, or never ran).  Then stopped/1 gives the
 * counters.  Not dirty, and it never waits: a process in a dirty NIF of
 * beamprobe_nif is executing the module's code, and the hard purge of
 * the module's old code after a reload kills it (a session process, or
 * the janitor, waiting in a dirty stop() was killed so).  The caller
 * waits for the message in its own code (beamprobe_nif_wait). */
static ERL_NIF_TERM nif_stop(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	struct bp_stop_waiter *w;
	ERL_NIF_TERM ref = enif_make_ref(env);

	(void)argc;
	if (!s)
		return enif_make_badarg(env);
	if (!(w = enif_alloc(sizeof *w)))
		return bp_nif_error2(env, "stop", "enomem");
	if (!(w->env = enif_alloc_env())) {
		enif_free(w);
		return bp_nif_error2(env, "stop", "enomem");
	}
	if (!enif_self(env, &w->pid)) {
		enif_free_env(w->env);
		enif_free(w);
		return enif_make_badarg(env);
	}
	w->ref = enif_make_copy(w->env, ref);
	if (!s->mtx) { /* a start that failed before making it: nothing ran */
		w->next = NULL;
		s->stop_waiters = w;
		bp_session_tell_stopped(s, env);
		return enif_make_tuple2(env, bp_atom.ok, ref);
	}
	enif_mutex_lock(s->mtx);
	w->next = s->stop_waiters;
	s->stop_waiters = w;
	s->cmd_stop = 1;
	if (s->finished || !s->thread_started)
		bp_session_tell_stopped(s, env);
	enif_mutex_unlock(s->mtx);
	bp__session_wake(s);
	return enif_make_tuple2(env, bp_atom.ok, ref);
}

/* stopped(Session) -> {ok, Stats} | {error, running}: once stop/1's
 * message came, the collector has ended: joined (it is returning), the
 * session's place given back, its directory closed; its counters. */
static ERL_NIF_TERM nif_stopped(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	int ended = 1;

	(void)argc;
	if (!s)
		return enif_make_badarg(env);
	if (s->mtx) {
		enif_mutex_lock(s->mtx);
		ended = s->finished || !s->thread_started;
		enif_mutex_unlock(s->mtx);
	}
	if (!ended)
		return enif_make_tuple2(env, bp_atom.error, bp_atom.running);
	session_join(s); /* at its return: not a wait */
	atomic_store(&s->state, BP_S_STOPPED);
	bp_nif_session_release(s);
	close_dir(s);
	return enif_make_tuple2(env, bp_atom.ok, stats_map(env, s));
}

/* info(Session) -> Stats. */
static ERL_NIF_TERM nif_info(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);

	(void)argc;
	return s ? stats_map(env, s) : enif_make_badarg(env);
}

/* dump(Session) -> {ok, N} | {error, not_flight_recorder | stopped}: asks
 * the collector to write the flight-recorder window now; it sends the
 * caller {beamprobe_dumped, M}, M >= N, once it has (or once it has
 * finished: the final drain writes the window).  Not dirty, and it never
 * waits: a process in a dirty NIF of beamprobe_nif is executing the
 * module's code, and a hard purge of the module's old code after a
 * reload (code:purge/1) kills it; the session process waiting in a dirty
 * dump() was killed so.  It waits for the message in its own code. */
static ERL_NIF_TERM nif_dump(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	uint64_t target;

	(void)argc;
	if (!s)
		return enif_make_badarg(env);
	if (s->overflow != BP_OVF_DROP_OLDEST)
		return enif_make_tuple2(env, bp_atom.error,
					bp_atom.not_flight_recorder);
	enif_mutex_lock(s->mtx);
	if (!s->thread_started || s->finished || s->cmd_stop) {
		enif_mutex_unlock(s->mtx);
		return enif_make_tuple2(env, bp_atom.error, bp_atom.stopped);
	}
	if (!s->dump_env)
		s->dump_env = enif_alloc_env();
	if (!s->dump_env || !enif_self(env, &s->dump_pid)) {
		enif_mutex_unlock(s->mtx);
		return enif_make_badarg(env);
	}
	target = s->dumps_done + 1;
	s->cmd_dump = 1;
	s->dump_waiting = 1;
	s->dump_target = target;
	enif_mutex_unlock(s->mtx);
	bp__session_wake(s);
	return enif_make_tuple2(env, bp_atom.ok,
				enif_make_uint64(env, target));
}

/* Room for an atom or m:f/a as bp_term renders them (255-character atoms
 * with every character escaped to 4 bytes, quoted). */
#define ANNOTATE_TEXT_MAX 2100

/* An ATOM field (schema kind) into p (ANNOTATE_TEXT_MAX bytes): the atom
 * in Erlang syntax, as the tracer writes `register' events, or undefined.
 * Returns the length with the NUL. */
static size_t annotate_atom(ErlNifEnv *env, char *p, ERL_NIF_TERM a)
{
	size_t n = bp_term_render_atom(env, a, p, ANNOTATE_TEXT_MAX);

	if (!n) {
		memcpy(p, "undefined", 10);
		return 10;
	}
	p[n] = '\0';
	return n + 1;
}

/* An MFA field into p (ANNOTATE_TEXT_MAX bytes): m:f/a from {M, F, A}, a
 * port's name as given (a binary of at most 1024 bytes), else undefined.
 * Returns the length with the NUL. */
static size_t annotate_mfa(ErlNifEnv *env, char *p, ERL_NIF_TERM t)
{
	const ERL_NIF_TERM *e;
	ErlNifBinary b;
	unsigned arity;
	size_t n = 0;
	int ar;

	if (enif_get_tuple(env, t, &ar, &e) && ar == 3 &&
	    enif_is_atom(env, e[0]) && enif_is_atom(env, e[1]) &&
	    enif_get_uint(env, e[2], &arity) && arity < 256)
		n = bp_term_render_mfa(env, e[0], e[1], arity, p,
				       ANNOTATE_TEXT_MAX);
	else if (enif_inspect_binary(env, t, &b) && b.size && b.size <= 1024 &&
		 !memchr(b.data, 0, b.size)) {
		memcpy(p, b.data, b.size);
		n = b.size;
	}
	if (!n) {
		memcpy(p, "undefined", 10);
		return 10;
	}
	p[n] = '\0';
	return n + 1;
}

/* annotate(Session, [{PidOrPort, Name :: atom(), InitialCall :: mfa() |
 * binary() | undefined}]) -> {ok, Written}: process events with names,
 * from the session process; fields as the schema's kinds say (bp_format.h:
 * name ATOM, initial_call MFA), rendered like the tracer's.  Not counted
 * as events nor against limits. */
static ERL_NIF_TERM nif_annotate(ErlNifEnv *env, int argc,
				 const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	ERL_NIF_TERM list = argv[1], head;
	struct bp_slot *sl;
	unsigned written = 0;

	(void)argc;
	if (!s || !enif_is_list(env, list))
		return enif_make_badarg(env);
	if (!(sl = bp_session_slot(s)))
		return enif_make_tuple2(env, bp_atom.ok, enif_make_uint(env, 0));
	atomic_exchange_explicit(&sl->busy, 1, memory_order_seq_cst);
	if (atomic_load(&s->state) == BP_S_RUNNING) {
		while (enif_get_list_cell(env, list, &head, &list)) {
			const ERL_NIF_TERM *e;
			char name[ANNOTATE_TEXT_MAX], ic[ANNOTATE_TEXT_MAX];
			size_t nl, il;
			int n, len;
			uint8_t *start, *p;
			if (!enif_get_tuple(env, head, &n, &e) || n != 3 ||
			    !enif_is_atom(env, e[1]) ||
			    !(enif_is_pid(env, e[0]) || enif_is_port(env, e[0])))
				continue;
			/* the name for the usdt `process' probe, too */
			bp_usdt_name((uint64_t)e[0],
				     e[1] == bp_atom.undefined ? 0 : e[1]);
			nl = annotate_atom(env, name, e[1]);
			il = annotate_mfa(env, ic, e[2]);
			start = bp_ring_reserve(&sl->ring,
						(uint32_t)(BP_EVENT_HEADER_SIZE +
							   64 + nl + il));
			if (!start)
				break;
			p = start + bp_ev_header(start, BP_EV_PROCESS, bp_now(),
						 (uint64_t)e[0]);
			len = enif_snprintf((char *)p, 64, "%T", e[0]);
			if (len <= 0 || len >= 64)
				p[(len = 1) - 1] = '?';
			p[len] = '\0';
			p += len + 1;
			memcpy(p, name, nl);
			p += nl;
			memcpy(p, ic, il);
			p += il;
			bp_ring_commit_aux(&sl->ring, (uint32_t)(p - start));
			written++;
		}
	}
	atomic_store_explicit(&sl->busy, 0, memory_order_release);
	return enif_make_tuple2(env, bp_atom.ok, enif_make_uint(env, written));
}

/* ack(Session, SinkIndex) -> ok: the handler consumed one batch. */
static ERL_NIF_TERM nif_ack(ErlNifEnv *env, int argc,
			    const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	unsigned i;

	(void)argc;
	if (!s || !enif_get_uint(env, argv[1], &i) || i >= s->nhandlers)
		return enif_make_badarg(env);
	bp_handler_ack(&s->handlers[i]);
	return bp_atom.ok;
}

/* live_sessions() -> integer(): sessions holding a place (for tests). */
static ERL_NIF_TERM nif_live_sessions(ErlNifEnv *env, int argc,
				      const ERL_NIF_TERM argv[])
{
	(void)argc;
	(void)argv;
	return enif_make_int(env, atomic_load(&live_sessions));
}

/* ---- the hub (bp_hub.h) ---------------------------------------------- */

/* hub_add(Session, Spec) -> {ok, Member} | {error, hub_full | badarg}:
 * Session records the events its filter Spec accepts. */
static ERL_NIF_TERM nif_hub_add(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	struct bp_session *s = arg_session(env, argv[0]);
	int i;

	(void)argc;
	if (!s || !enif_is_map(env, argv[1]))
		return enif_make_badarg(env);
	i = bp_hub_add(env, s, argv[1]);
	if (i == -1)
		return enif_make_tuple2(env, bp_atom.error,
					enif_make_atom(env, "hub_full"));
	if (i < 0)
		return enif_make_tuple2(env, bp_atom.error, bp_atom.badarg);
	return enif_make_tuple2(env, bp_atom.ok, enif_make_int(env, i));
}

/* The job of hub_remove/1 (bp_job.h): Member out of the hub, its
 * producers waited for. */
static ERL_NIF_TERM hub_remove_job(ErlNifEnv *env, ERL_NIF_TERM arg)
{
	int i;

	if (enif_get_int(env, arg, &i))
		bp_hub_remove(i);
	return bp_atom.ok;
}

/* hub_remove(Member) -> {ok, Ref} | {error, {job, Why}}: a job takes the
 * member out of the hub and sends {beamprobe_done, Ref, ok} once no
 * producer writes into the member's session through the hub. */
static ERL_NIF_TERM nif_hub_remove(ErlNifEnv *env, int argc,
				   const ERL_NIF_TERM argv[])
{
	int i;

	(void)argc;
	if (!enif_get_int(env, argv[0], &i) || i < 0 || i >= BP_HUB_MAX)
		return enif_make_badarg(env);
	return bp_job_start(env, hub_remove_job, argv[0]);
}

/* hub_list() -> [{Member, SessionPid | undefined}]: the hub's members
 * with the process of their session (for a restarted janitor: members no
 * running session claims are orphans). */
static ERL_NIF_TERM nif_hub_list(ErlNifEnv *env, int argc,
				 const ERL_NIF_TERM argv[])
{
	ERL_NIF_TERM l = enif_make_list(env, 0);

	(void)argc;
	(void)argv;
	bp_hub_lock();
	for (int i = BP_HUB_MAX; i-- > 0;) {
		struct bp_hub_member *m = atomic_load(&bp_hub.members[i]);
		if (!m)
			continue;
		l = enif_make_list_cell(
			env,
			enif_make_tuple2(env, enif_make_int(env, i),
					 m->s->has_notify
						 ? enif_make_pid(env, &m->s->notify)
						 : bp_atom.undefined),
			l);
	}
	bp_hub_unlock();
	return l;
}

/* hub_stats() -> #{members, routes, return_frames_lost, barrier,
 * barrier_failures, clock, clock_jumps}. */
static ERL_NIF_TERM nif_hub_stats(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	ERL_NIF_TERM k[7], v[7], m;
	int n = 0;

	(void)argc;
	(void)argv;
	for (int w = 0; w < BP_HUB_WORDS; w++)
		n += __builtin_popcountll(atomic_load(&bp_hub.live[w]));
	k[0] = enif_make_atom(env, "members");
	v[0] = enif_make_int(env, n);
	k[1] = enif_make_atom(env, "routes");
	v[1] = enif_make_uint(env, atomic_load(&bp_hub.routes));
	k[2] = enif_make_atom(env, "return_frames_lost");
	v[2] = enif_make_uint64(env, atomic_load(&bp_retstack_lost));
	/* How the producers' busy flags are ordered (bp_membar.h). */
	k[3] = enif_make_atom(env, "barrier");
	v[3] = enif_make_atom(env, bp_membar_fast ? "membarrier" : "fence");
	k[4] = enif_make_atom(env, "barrier_failures");
	v[4] = enif_make_uint64(env, bp_membar_failures());
	/* How events are stamped (bp_clock.h). */
	k[5] = enif_make_atom(env, "clock");
	v[5] = enif_make_atom(env, atomic_load(&bp_clock.use_tsc) ? "tsc"
								  : "monotonic");
	k[6] = enif_make_atom(env, "clock_jumps");
	v[6] = enif_make_uint64(env, atomic_load(&bp_clock.jumps));
	if (!enif_make_map_from_arrays(env, k, v, 7, &m))
		return enif_make_badarg(env);
	return m;
}

/* hub_routes(N) -> ok: N combined match specs are (about to be)
 * installed; calls look for a route only while N > 0. */
static ERL_NIF_TERM nif_hub_routes(ErlNifEnv *env, int argc,
				   const ERL_NIF_TERM argv[])
{
	unsigned n;

	(void)argc;
	if (!enif_get_uint(env, argv[0], &n))
		return enif_make_badarg(env);
	atomic_store(&bp_hub.routes, n);
	return bp_atom.ok;
}

/* hub_route_tags() -> {RouteTag, RouteRetTag} (bp_hub_route_atoms). */
static ERL_NIF_TERM nif_hub_route_tags(ErlNifEnv *env, int argc,
				       const ERL_NIF_TERM argv[])
{
	(void)argc;
	(void)argv;
	return enif_make_tuple2(env, bp_atom.bp_route, bp_atom.bp_route_ret);
}

/* hub_members() -> N: the number of the hub's members (for tests). */
static ERL_NIF_TERM nif_hub_members(ErlNifEnv *env, int argc,
				    const ERL_NIF_TERM argv[])
{
	int n = 0;

	(void)argc;
	(void)argv;
	for (int w = 0; w < BP_HUB_WORDS; w++)
		n += __builtin_popcountll(atomic_load(&bp_hub.live[w]));
	return enif_make_int(env, n);
}

/* ---- clock, is_loaded, thread_slot ---------------------------------- */

/* clock() -> integer(): the trace clock now (CLOCK_MONOTONIC ns). */
static ERL_NIF_TERM nif_clock(ErlNifEnv *env, int argc,
			      const ERL_NIF_TERM argv[])
{
	(void)argc;
	(void)argv;
	return enif_make_uint64(env, bp_now());
}

/* is_loaded() -> true (the Erlang stub raises: the library is not loaded). */
static ERL_NIF_TERM nif_is_loaded(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	(void)argc;
	(void)argv;
	return bp_atom.true_;
}

/* thread_slot() -> integer(): the caller's thread slot (for tests). */
static ERL_NIF_TERM nif_thread_slot(ErlNifEnv *env, int argc,
				    const ERL_NIF_TERM argv[])
{
	(void)argc;
	(void)argv;
	return enif_make_int(env, bp_thread_slot());
}

/* ---- load, upgrade, unload -----------------------------------------------
 *
 * What reloads of the library mean for sessions, and the resource types
 * kept across them: bp_restype.c.
 */

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
	(void)priv;
	(void)info;
	bp_restype_pin_library();
#define BP__MAKE_ATOM(name, text) bp_atom.name = enif_make_atom(env, text);
	BP_ATOMS(BP__MAKE_ATOM)
#undef BP__MAKE_ATOM
	bp_hub_route_atoms(env);
	bp_handler_load(env);
	bp_erts_layout_check(env);
	bp_clock_init();
	bp_dio_configure();
	bp_membar_init(); /* else the busy flags keep full barriers */
	if (bp_usdt_sem_check() >= 0)
		return -1; /* an event class without its USDT entry */
	if (bp_hub_init())
		return -1;
	return bp_restype_open(env, session_dtor);
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv,
		   ERL_NIF_TERM info)
{
	(void)old_priv;
	return load(env, priv, info);
}

/* The instance is purged.  Nothing to free: running sessions keep their
 * resource type (erts keeps it while they live) and their threads keep
 * running code that stays mapped (bp_restype_pin_library). */
static void unload(ErlNifEnv *env, void *priv)
{
	(void)env;
	(void)priv;
}

static ErlNifFunc nif_funcs[] = {
#define BP__FUNC(name, arity, fn) {#name, arity, fn, 0},
	BP_TRACER_NIFS(BP__FUNC)
#undef BP__FUNC
	{"start", 1, nif_start, 0},
	{"stop", 1, nif_stop, 0},
	{"stopped", 1, nif_stopped, 0},
	{"info", 1, nif_info, 0},
	{"dump", 1, nif_dump, 0},
	{"annotate", 2, nif_annotate, 0},
	{"tampered", 3, bp_nif_tampered, 0},
	{"notice", 4, bp_nif_notice, 0},
	{"ack", 2, nif_ack, 0},
	{"make_dir", 1, nif_make_dir, 0},
	{"create_file", 1, nif_create_file, 0},
	{"live_sessions", 0, nif_live_sessions, 0},
	{"render", 2, bp_nif_render, 0},
	{"render_args", 2, bp_nif_render_args, 0},
	{"render_mfa", 3, bp_nif_render_mfa, 0},
	{"elixir_text", 2, bp_nif_elixir_text, 0},
	{"thread_slot", 0, nif_thread_slot, 0},
	{"clock", 0, nif_clock, 0},
	{"is_loaded", 0, nif_is_loaded, 0},
	{"hub_add", 2, nif_hub_add, 0},
	{"hub_remove", 1, nif_hub_remove, 0},
	{"hub_members", 0, nif_hub_members, 0},
	{"hub_routes", 1, nif_hub_routes, 0},
	{"hub_route_tags", 0, nif_hub_route_tags, 0},
	{"hub_list", 0, nif_hub_list, 0},
	{"hub_stats", 0, nif_hub_stats, 0},
	{"user_annotate", 2, bp_usdt_nif_annotate, 0},
	{"usdt_enabled", 1, bp_usdt_nif_enabled, 0},
};

ERL_NIF_INIT(beamprobe_nif, nif_funcs, load, NULL, upgrade, unload)
