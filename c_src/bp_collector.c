/* bp_collector.c -- the session's collector thread: drains every slot's
 * ring into that slot's CTF stream file, flushes packets, enforces the
 * byte limit, runs flight-recorder dumps and the final drain at stop.
 *
 * Runs on its own thread (not a scheduler: enif_monotonic_time and
 * process-bound calls are not available; enif_send with a NULL env is).
 */
#include "bp_session.h"
#include "bp_sink_handler.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define FLUSH_NS 100000000ull /* write a partial packet after 100 ms */
#define IDLE_SLEEP_NS 2000000 /* poll period when idle */
#define RELEASE_EVERY 256     /* records between freeing ring space */

static void note_io_error(struct bp_session *s, int err)
{
	int zero = 0;

	if (atomic_compare_exchange_strong(&s->io_error, &zero, err))
		bp_session_request_stop(s, BP_SR_IO_ERROR);
}

static uint64_t slot_discarded(struct bp_slot *sl)
{
	uint64_t n = atomic_load_explicit(&sl->ring.evicted,
					  memory_order_relaxed);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		n += atomic_load_explicit(&sl->drops[c], memory_order_relaxed);
	return n;
}

static struct bp_ctf_stream *stream_for(struct bp_session *s, uint32_t idx)
{
	struct bp_ctf_stream *st = &s->streams[idx];

	if (st->fd < 0 && !st->err) {
		int err = bp_ctf_stream_open(st, s->dir, idx, s->uuid,
					     s->packet_size);
		if (err) {
			st->err = err;
			note_io_error(s, err);
		}
	}
	return st->fd >= 0 ? st : NULL;
}

static void write_event(struct bp_session *s, struct bp_ctf_stream *st,
			const uint8_t *ev, uint32_t len, uint64_t discarded)
{
	uint64_t before = st->bytes;
	int err = bp_ctf_stream_add(st, ev, len, discarded);

	if (err) {
		if (err != EMSGSIZE)
			note_io_error(s, err);
		return;
	}
	if (st->bytes != before)
		atomic_fetch_add_explicit(&s->bytes, st->bytes - before,
					  memory_order_relaxed);
}

/* Counts one event and hands it to every sink that wants it. */
static void add_event(struct bp_session *s, struct bp_ctf_stream *st,
		      const uint8_t *ev, uint32_t len, uint64_t discarded)
{
	uint16_t id = bp_get_u16(ev + BP_EV_OFF_ID);
	int aux = id == BP_EV_PROCESS || id == BP_EV_DROPS;

	atomic_fetch_add_explicit(aux ? &s->aux_events : &s->events, 1,
				  memory_order_relaxed);
	if (st && (aux || (id < 64 && (s->file_kinds & (1ull << id)))))
		write_event(s, st, ev, len, discarded);
	for (uint32_t i = 0; i < s->nhandlers; i++)
		bp_handler_add(s, &s->handlers[i], ev, len);
}

static void flush_handlers(struct bp_session *s, int final)
{
	for (uint32_t i = 0; i < s->nhandlers; i++) {
		struct bp_handler_sink *h = &s->handlers[i];
		if (final || atomic_load(&h->credits) > 0)
			bp_handler_flush(s, h, final);
	}
}

static void flush_stream(struct bp_session *s, struct bp_slot *sl,
			 int force)
{
	struct bp_ctf_stream *st = &s->streams[sl->index];
	uint64_t before = st->bytes;
	int err;

	if (st->fd < 0)
		return;
	err = bp_ctf_stream_flush(st, slot_discarded(sl), force);
	if (err)
		note_io_error(s, err);
	atomic_fetch_add_explicit(&s->bytes, st->bytes - before,
				  memory_order_relaxed);
}

/* Moves every published record of sl into its stream.  Returns the number
 * of records moved. */
static uint64_t drain_slot(struct bp_session *s, struct bp_slot *sl)
{
	struct bp_ring_reader rd;
	struct bp_ctf_stream *st = NULL;
	const uint8_t *p;
	uint32_t len;
	uint64_t n = 0, discarded = slot_discarded(sl);

	bp_ring_read_begin(&sl->ring, &rd);
	while ((p = bp_ring_read_next(&rd, &len))) {
		if (s->has_file && !st)
			st = stream_for(s, sl->index); /* NULL: cannot write */
		add_event(s, st, p, len, discarded);
		if (++n % RELEASE_EVERY == 0)
			bp_ring_read_end(&rd);
	}
	bp_ring_read_end(&rd);
	return n;
}

static uint64_t drain_all(struct bp_session *s)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (sl)
			n += drain_slot(s, sl);
	}
	return n;
}

static void flush_all(struct bp_session *s, int force)
{
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (sl)
			flush_stream(s, sl, force);
	}
}

/* Writes one "drops" event per stream with its slot's loss counts (the
 * session-wide no_buffer count goes to the first stream). */
static void write_drops(struct bp_session *s)
{
	uint64_t noslot =
		atomic_load_explicit(&s->noslot_drops, memory_order_relaxed);
	uint8_t ev[BP_EVENT_HEADER_SIZE + 8 * BP_DROP_COUNT];

	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		struct bp_ctf_stream *st;
		uint64_t d[BP_DROP_COUNT], any = noslot;
		size_t off;

		if (!sl)
			continue;
		for (int c = 0; c < BP_DROP_COUNT; c++) {
			d[c] = atomic_load_explicit(&sl->drops[c],
						    memory_order_relaxed);
			any |= d[c];
		}
		d[BP_DROP_OVERWRITTEN] += atomic_load_explicit(
			&sl->ring.evicted, memory_order_relaxed);
		d[BP_DROP_NO_BUFFER] += noslot;
		any |= d[BP_DROP_OVERWRITTEN];
		if (!any && s->streams[i].fd < 0)
			continue; /* nothing to say, no file to say it in */
		noslot = 0;
		if (!s->has_file || !(st = stream_for(s, i)))
			continue;
		off = bp_ev_header(ev, BP_EV_DROPS, bp_now(), 0);
		for (int c = 0; c < BP_DROP_COUNT; c++, off += 8)
			bp_put_u64(ev + off, d[c]);
		atomic_fetch_add_explicit(&s->aux_events, 1,
					  memory_order_relaxed);
		write_event(s, st, ev, (uint32_t)off, slot_discarded(sl));
	}
}

static void notify_stop(struct bp_session *s)
{
	ErlNifEnv *env;
	const char *why;

	if (!s->has_notify || s->notified)
		return;
	s->notified = 1;
	switch (atomic_load(&s->stop_reason)) {
	case BP_SR_EVENTS: why = "events"; break;
	case BP_SR_BYTES: why = "bytes"; break;
	case BP_SR_OVERFLOW: why = "overflow"; break;
	case BP_SR_IO_ERROR: why = "io_error"; break;
	case BP_SR_RATE: why = "rate"; break;
	default: why = "unknown"; break;
	}
	env = enif_alloc_env();
	if (!env)
		return;
	enif_send(NULL, &s->notify, env,
		  enif_make_tuple2(env, enif_make_atom(env, "beamprobe_stop"),
				   enif_make_atom(env, why)));
	enif_free_env(env);
}

static int session_process_alive(struct bp_session *s)
{
	ErlNifEnv *env;
	int alive;

	if (!s->has_notify)
		return 1;
	if (!(env = enif_alloc_env()))
		return 1;
	alive = enif_is_process_alive(env, &s->notify);
	enif_free_env(env);
	return alive;
}

/* Flight-recorder dump: hold producers off, write the windows, resume. */
static void dump(struct bp_session *s)
{
	int running = BP_S_RUNNING;

	if (!atomic_compare_exchange_strong(&s->state, &running, BP_S_PAUSED)) {
		drain_all(s); /* stopping: the final drain follows anyway */
		return;
	}
	bp_session_quiesce(s);
	drain_all(s);
	flush_all(s, 0);
	/* Process events of the dumped window are gone from the rings. */
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (sl)
			memset(sl->pid_seen, 0, sizeof sl->pid_seen);
	}
	int paused = BP_S_PAUSED;
	atomic_compare_exchange_strong(&s->state, &paused, BP_S_RUNNING);
}

void bp_collector_finish(struct bp_session *s)
{
	atomic_store(&s->state, BP_S_STOPPED);
	bp_session_quiesce(s);
	drain_all(s);
	flush_handlers(s, 1);
	write_drops(s);
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		struct bp_ctf_stream *st = &s->streams[i];
		uint64_t before = st->bytes;
		int err;

		if (!sl || st->fd < 0)
			continue;
		err = bp_ctf_stream_close(st, slot_discarded(sl));
		if (err)
			note_io_error(s, err);
		atomic_fetch_add_explicit(&s->bytes, st->bytes - before,
					  memory_order_relaxed);
	}
}

void *bp_collector_main(void *arg)
{
	struct bp_session *s = arg;
	uint64_t last_flush = bp_now();
	int drop_oldest = s->overflow == BP_OVF_DROP_OLDEST;

	for (;;) {
		int stop, want_dump;
		uint64_t moved = 0, now;

		enif_mutex_lock(s->mtx);
		stop = s->cmd_stop;
		want_dump = s->cmd_dump;
		enif_mutex_unlock(s->mtx);
		if (stop)
			break;
		if (want_dump) {
			dump(s);
			enif_mutex_lock(s->mtx);
			s->cmd_dump = 0;
			s->dumps_done++;
			enif_cond_broadcast(s->cond);
			enif_mutex_unlock(s->mtx);
		}
		if (!drop_oldest)
			moved = drain_all(s);
		flush_handlers(s, 0);
		bp_clock_maintain();
		now = bp_now();
		if (now - last_flush >= FLUSH_NS) {
			flush_all(s, 0);
			last_flush = now;
			if (!session_process_alive(s)) {
				/* Nobody will stop us: end the session here;
				 * enabled/3 then removes the tracer. */
				int none = BP_SR_NONE;
				atomic_compare_exchange_strong(
					&s->stop_reason, &none,
					BP_SR_OWNER_DEAD);
				break;
			}
		}
		if (s->byte_limit &&
		    atomic_load_explicit(&s->bytes, memory_order_relaxed) >=
			    s->byte_limit)
			bp_session_request_stop(s, BP_SR_BYTES);
		if (atomic_load(&s->state) == BP_S_STOPPING)
			notify_stop(s);
		if (!moved) {
			struct timespec ts = {0, IDLE_SLEEP_NS};
			enif_mutex_lock(s->mtx);
			if (!s->cmd_stop && !s->cmd_dump) {
				enif_mutex_unlock(s->mtx);
				nanosleep(&ts, NULL);
			} else {
				enif_mutex_unlock(s->mtx);
			}
		}
	}
	bp_collector_finish(s);
	enif_mutex_lock(s->mtx);
	s->finished = 1;
	enif_cond_broadcast(s->cond);
	enif_mutex_unlock(s->mtx);
	return NULL;
}
