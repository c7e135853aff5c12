/* bp_collector.c -- the session's collector thread: drains every slot's
 * ring into that slot's CTF stream file, flushes packets, enforces the
 * byte limit, runs flight-recorder dumps and the final drain at stop.
 *
 * Runs on its own thread (not a scheduler: enif_monotonic_time and
 * process-bound calls are not available; enif_send with a NULL env is).
 */
#include "bp_budget.h"
#include "bp_counter.h"
#include "bp_output.h"
#include "bp_prefault.h"
#include "bp_session.h"
#include "bp_sink_handler.h"
#include "bp_sink_lttng.h"
#include "bp_sink_tcp.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_NS 100000000ull /* write a partial packet after 100 ms */
#define POLL_NS 2000000       /* poll period while traffic is recent */
#define DEEP_AFTER_NS 100000000ull /* idle this long: sleep until woken */
#define RELEASE_EVERY 256     /* records between freeing ring space */

static void note_io_error(struct bp_session *s, int err)
{
	int zero = 0;

	if (atomic_compare_exchange_strong(&s->io_error, &zero, err))
		bp_session_request_stop(s, BP_SR_IO_ERROR);
}

static struct bp_slot *slot_at(struct bp_session *s, uint32_t i)
{
	return atomic_load_explicit(&s->slots[i], memory_order_acquire);
}

static uint64_t slot_discarded(struct bp_slot *sl)
{
	uint64_t d[BP_DROP_COUNT], n = 0;

	bp_slot_drops(sl, d);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		n += d[c];
	return n;
}

/* Moves what stream idx wrote (whole packets) or lost since the last look
 * into the session's counters. */
static void account(struct bp_session *s, uint32_t idx)
{
	struct bp_ctf_stream *st = &s->streams[idx];
	struct bp_slot *sl;

	if (st->bytes == st->seen_bytes && st->events == st->seen_events &&
	    st->aux_events == st->seen_aux && st->lost == st->seen_lost)
		return; /* the common case: no packet written since */
	sl = slot_at(s, idx);
	atomic_fetch_add_explicit(&s->bytes, st->bytes - st->seen_bytes,
				  memory_order_relaxed);
	st->seen_bytes = st->bytes;
	if (st->events >= st->seen_events)
		atomic_fetch_add_explicit(&s->events,
					  st->events - st->seen_events,
					  memory_order_relaxed);
	else /* the file was removed: its events are lost after all */
		atomic_fetch_sub_explicit(&s->events,
					  st->seen_events - st->events,
					  memory_order_relaxed);
	st->seen_events = st->events;
	atomic_fetch_add_explicit(&s->aux_events, st->aux_events - st->seen_aux,
				  memory_order_relaxed);
	st->seen_aux = st->aux_events;
	if (sl)
		bp_counter_add(&sl->drops[BP_DROP_IO_ERROR],
			    st->lost - st->seen_lost);
	bp_tcp_file_lost(s->tcp, idx, st->lost - st->seen_lost);
	st->seen_lost = st->lost;
}

/*
 * The bytes limit bounds the stream files, checked before each event goes
 * into one (checked after each pass, it let a pass of 8 MiB rings take a
 * 1 MiB trace to 1.69 MB).  A stream's share is its file's size once what
 * it holds is written (stream_size), plus room for what comes whatever is
 * refused (stream_keep): its drops event and a packet header for it
 * (write_drops), and a block's padding when its next sync may write a
 * direct block (bp_dio.h).  file_proj is the sum of the shares of the
 * streams with anything in them; an event is written only if the sum
 * stays within the limit with it.
 */
#define KEEP_FIXED (BP_PACKET_HEADER_SIZE + BP_EVENT_HEADER_SIZE + 8 * BP_DROP_COUNT)

static uint64_t stream_size(const struct bp_ctf_stream *st)
{
	uint64_t n = st->dio.cum.bytes;

	if (st->nevents)
		n += st->len + (st->seq == 0 ? BP_PACKET_HEADER_SIZE : 0);
	return n;
}

/* The room st keeps once `more' bytes more are in it (see above): a sync
 * pads only with BP_DIO_SYNC_MIN new bytes or a nearly full staging
 * buffer (bp_dio_pad_for); counted with the drops event it will take. */
static uint64_t stream_keep(const struct bp_ctf_stream *st, uint64_t more)
{
	const struct bp_dio *d = &st->dio;
	uint64_t end = d->len + (st->nevents ? st->len : 0) + more + KEEP_FIXED;

	if (d->buf && !d->direct)
		return KEEP_FIXED; /* page-cache writes: never padded, and
				      never direct again (bp_dio.h) */
	if (end - d->done >= BP_DIO_SYNC_MIN ||
	    (d->cap && d->cap < end + d->rec_max + BP_DIO_ALIGN))
		return KEEP_FIXED + BP_DIO_ALIGN;
	return KEEP_FIXED;
}

static uint64_t stream_share(const struct bp_ctf_stream *st)
{
	uint64_t n = stream_size(st);

	return n ? n + stream_keep(st, 0) : 0;
}

/* 1 if ev (len bytes) may go into st, whose share is `share'
 * (stream_share), within the bytes limit.  A drops event of a stream
 * that holds something takes the room kept for it. */
static int within_limit(const struct bp_session *s,
			const struct bp_ctf_stream *st, uint64_t share,
			uint32_t len, int drops)
{
	uint64_t grow = len;

	if (!s->byte_limit)
		return 1;
	if (drops && share)
		return 1;
	if (s->file_full)
		return 0; /* no event after one refused (its process event,
			     say) */
	if (st->fd < 0) /* not open yet: its empty first packet and one */
		grow += 2 * BP_PACKET_HEADER_SIZE;
	else if (!st->nevents)
		grow += st->len + (st->seq == 0 ? BP_PACKET_HEADER_SIZE : 0);
	else if (st->len + len > st->cap) /* a new packet, the last padded */
		grow += (st->dio.direct ? BP_DIO_ALIGN : 0) +
			BP_PACKET_HEADER_SIZE;
	return s->file_proj - share + stream_size(st) + grow +
		       stream_keep(st, grow) <=
	       s->byte_limit;
}

/* An event past the bytes limit: counted as the limit's (user events),
 * and the session ends.  In late_limit: the producer adds to
 * drops[limit] after the stop, and a counter has one writer (two lost
 * 9 to 25 of 40,000 counts). */
static void refuse(struct bp_session *s, struct bp_slot *sl, int aux)
{
	if (!aux)
		bp_counter_add(&sl->late_limit, 1);
	s->file_full = 1;
	bp_session_request_stop(s, BP_SR_BYTES);
}

/* Moves st's share in file_proj from `before' to what it is now. */
static void reproject(struct bp_session *s, const struct bp_ctf_stream *st,
		      uint64_t before)
{
	s->file_proj = s->file_proj - before + stream_share(st);
}

/* The stream of slot idx for an event of len bytes, its file made if
 * need be; NULL if the file cannot be made, or (*refused) if the bytes
 * limit has no room for one more (no empty file is made for it). */
static struct bp_ctf_stream *stream_for(struct bp_session *s, uint32_t idx,
					uint32_t len, int *refused)
{
	struct bp_ctf_stream *st = &s->streams[idx];

	*refused = 0;
	if (st->fd < 0 && !st->err) {
		int err;
		if (!within_limit(s, st, stream_share(st), len, 0)) {
			*refused = 1;
			return NULL;
		}
		uint64_t nfree, lim;
		err = s->dirfd < 0 ? EBADF
		      : s->dir_gone ? ENOENT
		      /* the node's reserve of descriptors (bp_budget.h) */
		      : !bp_budget_fds_take(1, &nfree, &lim) ? EMFILE
							     : 0;
		if (!err) {
			err = bp_ctf_stream_open_at(st, s->dirfd, idx, s->uuid,
						    s->packet_size);
			bp_budget_fds_give(1);
		}
		if (err) {
			st->err = err;
			note_io_error(s, err);
		} else {
			atomic_fetch_add_explicit(&s->file_buffers,
						  st->dio.cap,
						  memory_order_relaxed);
		}
	}
	return st->fd >= 0 ? st : NULL;
}

/* Adds ev to st; an event that cannot be written is counted as lost (one
 * past the bytes limit as the limit's, and the session ends): 1 then. */
static int write_event(struct bp_session *s, struct bp_slot *sl,
		       struct bp_ctf_stream *st, const uint8_t *ev,
		       uint32_t len, uint64_t discarded, int aux)
{
	uint64_t before = stream_share(st);
	int err;

	if (!within_limit(s, st, before, len,
			  bp_get_u16(ev + BP_EV_OFF_ID) == BP_EV_DROPS)) {
		refuse(s, sl, aux);
		return 1;
	}
	err = bp_ctf_stream_add(st, ev, len, discarded);
	reproject(s, st, before);
	if (err == EMSGSIZE) {
		if (!aux)
			bp_counter_add(&sl->late_too_big, 1);
	} else if (err) {
		note_io_error(s, err);
		if (!aux)
			bp_counter_add(&sl->drops[BP_DROP_IO_ERROR], 1);
	}
	return err != 0;
}

/* Counts one event and hands it to every sink that wants it.  An event
 * for the file counts as written only once its packet is in the file. */
static void add_event(struct bp_session *s, struct bp_slot *sl,
		      const uint8_t *ev, uint32_t len, uint64_t discarded)
{
	uint16_t id = bp_get_u16(ev + BP_EV_OFF_ID);
	int aux = id == BP_EV_PROCESS || id == BP_EV_DROPS;
	/* Internal classes go to the file whatever its `events' say. */
	int always = aux || id == BP_EV_TAMPERED || id == BP_EV_MONITOR ||
		     id == BP_EV_SAMPLE;
	int file_lost = 0; /* the files lost it (the stream may too) */

	if (s->has_file &&
	    (always || (id < 64 && (s->file_kinds & (1ull << id))))) {
		int refused;
		struct bp_ctf_stream *st =
			stream_for(s, sl->index, len, &refused);
		if (st)
			file_lost = write_event(s, sl, st, ev, len, discarded,
						aux);
		else if (refused) {
			refuse(s, sl, aux);
			file_lost = 1;
		} else if (!aux) { /* the stream file cannot be created */
			bp_counter_add(&sl->drops[BP_DROP_IO_ERROR], 1);
			file_lost = 1;
		}
	} else {
		atomic_fetch_add_explicit(aux ? &s->aux_events : &s->events, 1,
					  memory_order_relaxed);
	}
	for (uint32_t i = 0; i < s->nhandlers; i++)
		bp_handler_add(s, &s->handlers[i], ev, len);
	if (s->tcp && (always || (id < 64 && (s->tcp_kinds & (1ull << id)))))
		bp_tcp_add(s, sl, ev, len, file_lost);
	if (s->has_lttng &&
	    (always || (id < 64 && (s->lttng_kinds & (1ull << id)))))
		bp_lttng_emit(ev, len, s->lttng_id);
}

static void flush_handlers(struct bp_session *s, int final)
{
	if (final)
		bp_handler_finish_wait(s);
	for (uint32_t i = 0; i < s->nhandlers; i++)
		bp_handler_flush(s, &s->handlers[i], final);
}

static void flush_stream(struct bp_session *s, struct bp_slot *sl,
			 int force)
{
	struct bp_ctf_stream *st = &s->streams[sl->index];
	uint64_t before = stream_share(st);
	int err;

	if (st->fd < 0)
		return;
	err = bp_ctf_stream_flush(st, slot_discarded(sl), force);
	reproject(s, st, before);
	if (err)
		note_io_error(s, err);
	account(s, sl->index);
}

/* Notices trace files removed under us (rm -rf of the directory): the
 * events in them are lost, and so is everything after. */
static void check_files(struct bp_session *s)
{
	struct stat sb;

	if (s->dirfd >= 0 && !s->dir_gone && fstat(s->dirfd, &sb) == 0 &&
	    sb.st_nlink == 0) {
		s->dir_gone = 1;
		note_io_error(s, ENOENT);
	}
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_ctf_stream *st = &s->streams[i];
		if (st->fd < 0 || st->err)
			continue;
		if (!s->dir_gone &&
		    (fstat(st->fd, &sb) != 0 || sb.st_nlink != 0))
			continue;
		st->lost += st->events;
		st->events = 0;
		bp_ctf_stream_fail(st, ENOENT);
		note_io_error(s, ENOENT);
		account(s, i);
	}
}

/* One slot's reader in a merged drain. */
struct bp_merge_in {
	struct bp_slot *sl;
	struct bp_ring_reader rd;
	struct bp_ring_reader back; /* rd before p was read */
	const uint8_t *p; /* its next record (read, not yet added) */
	uint32_t len;
	uint64_t ts, n, discarded;
};

/* Reads in[j]'s next record; when its ring has none left, frees what was
 * read and drops in[j] (the last reader takes its place).  Returns 1 if
 * in[j] now holds a record. */
static int merge_next(struct bp_merge_in *in, uint32_t j, uint32_t *k)
{
	in[j].back = in[j].rd;
	if ((in[j].p = bp_ring_read_next(&in[j].rd, &in[j].len))) {
		in[j].ts = bp_get_u64(in[j].p + BP_EV_OFF_TS);
		return 1;
	}
	bp_ring_read_end(&in[j].rd);
	in[j] = in[--*k];
	return 0;
}

/* The cut of a pass while producers write (drain_all). */
static uint64_t live_cut(void)
{
	uint64_t now = bp_now();

	return now > BP_CLOCK_JUMP_NS ? now - BP_CLOCK_JUMP_NS : 0;
}

/* A test build's pause between two slots' heads (BEAMPROBE_TEST_DRAIN_GAP_US,
 * read at load): what a collector preempted there does, on demand. */
#ifdef BP_SCHEMA_CHECK
#include <stdlib.h>
static void test_gap(void)
{
	static long us = -1;
	const char *e;

	if (us < 0)
		us = (e = getenv("BEAMPROBE_TEST_DRAIN_GAP_US")) ? atol(e) : 0;
	if (us > 0) {
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
}
#else
static inline void test_gap(void) {}
#endif

/* Moves the published records of every slot into the sinks, in
 * timestamp order across the slots (each slot's own order kept): what a
 * handler or an LTTng sink receives is one sequence, and a process that
 * moved to another scheduler thread (another slot) would otherwise have
 * its later events delivered before its earlier ones.  The file sink
 * keeps one stream per slot either way.  Each slot's head is read once,
 * all of them before the first record is moved, so records published
 * during the pass wait for the next one.
 *
 * The heads are read one slot after the other, and a process can move
 * between two of those reads: its event in the slot read first is not
 * in this pass, its later one in the slot read next is.  So a pass moves
 * only the records stamped before `cut', a time read before the first
 * head (less the clock's largest re-anchoring step, bp_clock.h): any
 * event that follows one missing from the pass was stamped after that
 * one was published, so after the first head's read, and waits with it.
 * The rest stays in the rings for the next pass.  cut = UINT64_MAX when
 * no producer can write (quiesced).  Returns the number of records
 * moved. */
static uint64_t drain_all(struct bp_session *s, uint64_t cut)
{
	struct bp_merge_in *in = s->merge;
	uint32_t k = 0;
	uint64_t moved = 0;

	if (!in)
		return 0; /* cannot happen: start allocates it first */
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl = slot_at(s, i);
		if (!sl || !bp_ring_used(&sl->ring))
			continue;
		if (k)
			test_gap();
		in[k].sl = sl;
		in[k].n = 0;
		in[k].discarded = slot_discarded(sl);
		bp_ring_read_begin(&sl->ring, &in[k].rd);
		k++;
	}
	for (uint32_t j = 0; j < k;)
		j += (uint32_t)merge_next(in, j, &k);
	while (k) {
		uint32_t m = 0;
		for (uint32_t j = 1; j < k; j++)
			if (in[j].ts < in[m].ts)
				m = j;
		if (in[m].ts >= cut) {
			/* This record and every later one wait: each reader
			 * is put back before the record it holds. */
			for (uint32_t j = 0; j < k; j++) {
				in[j].rd = in[j].back;
				bp_ring_read_end(&in[j].rd);
			}
			break;
		}
		add_event(s, in[m].sl, in[m].p, in[m].len, in[m].discarded);
		moved++;
		/* The record is consumed: free its room now and then. */
		if (++in[m].n % RELEASE_EVERY == 0)
			bp_ring_read_end(&in[m].rd);
		(void)merge_next(in, m, &k);
	}
	/* What the streams wrote, once per pass (not per event). */
	if (moved && s->has_file)
		for (uint32_t i = 0; i < s->max_slots; i++)
			if (s->streams[i].fd >= 0)
				account(s, i);
	return moved;
}

struct bp_merge_in *bp_collector_merge_alloc(uint32_t n)
{
	return enif_alloc(sizeof(struct bp_merge_in) * (n ? n : 1));
}


static void flush_all(struct bp_session *s, int force)
{
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl = slot_at(s, i);
		if (sl)
			flush_stream(s, sl, force);
	}
	if (s->tcp)
		bp_tcp_flush(s, force);
}

/* Writes one "drops" event per stream with its slot's loss counts (the
 * session-wide no_buffer count goes to the first stream). */
static void write_drops(struct bp_session *s)
{
	uint64_t noslot =
		atomic_load_explicit(&s->noslot_drops, memory_order_relaxed);
	uint8_t ev[BP_EVENT_HEADER_SIZE + 8 * BP_DROP_COUNT];

	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl = slot_at(s, i);
		struct bp_ctf_stream *st;
		uint64_t d[BP_DROP_COUNT], any = noslot;
		size_t off;
		int refused;

		if (!sl)
			continue;
		bp_slot_drops(sl, d);
		for (int c = 0; c < BP_DROP_COUNT; c++)
			any |= d[c];
		d[BP_DROP_NO_BUFFER] += noslot;
		if (!any && s->streams[i].fd < 0)
			continue; /* nothing to say, no file to say it in */
		noslot = 0;
		off = bp_ev_header(ev, BP_EV_DROPS, bp_now(), 0);
		for (int c = 0; c < BP_DROP_COUNT; c++, off += 8)
			bp_put_u64(ev + off, d[c]);
		/* The LTTng trace is told its own (it has no packet header's
		 * events_discarded to say losses): those at the source, not
		 * the files' (bp_slot_source_drops), events it was given. */
		if (s->has_lttng) {
			uint8_t lev[sizeof ev];
			size_t loff;
			uint64_t sd[BP_DROP_COUNT];
			bp_slot_source_drops(sl, sd);
			sd[BP_DROP_NO_BUFFER] = d[BP_DROP_NO_BUFFER];
			loff = bp_ev_header(lev, BP_EV_DROPS,
					    bp_get_u64(ev + BP_EV_OFF_TS), 0);
			for (int c = 0; c < BP_DROP_COUNT; c++, loff += 8)
				bp_put_u64(lev + loff, sd[c]);
			bp_lttng_emit(lev, (uint32_t)loff, s->lttng_id);
		}
		/* (No file only for it past the bytes limit: `refused'.) */
		if (!s->has_file ||
		    !(st = stream_for(s, i, (uint32_t)off, &refused)))
			continue;
		write_event(s, sl, st, ev, (uint32_t)off, slot_discarded(sl), 1);
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
		drain_all(s, live_cut()); /* stopping: the final drain
					     follows anyway */
		return;
	}
	bp_session_quiesce(s);
	drain_all(s, UINT64_MAX);
	flush_all(s, 0);
	/* Process events of the dumped window are gone from the rings. */
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (sl) {
			memset(sl->pid_seen, 0, sizeof sl->pid_seen);
			sl->ring.owner_word = 0;
		}
	}
	int paused = BP_S_PAUSED;
	atomic_compare_exchange_strong(&s->state, &paused, BP_S_RUNNING);
}

void bp_collector_finish(struct bp_session *s)
{
	atomic_store(&s->state, BP_S_STOPPED);
	bp_session_quiesce(s);
	drain_all(s, UINT64_MAX);
	flush_handlers(s, 1);
	if (s->tcp)
		bp_tcp_finish(s);
	write_drops(s);
	check_files(s);
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl = slot_at(s, i);
		struct bp_ctf_stream *st = &s->streams[i];
		int err;

		if (!sl || st->fd < 0)
			continue;
		err = bp_ctf_stream_close(st, slot_discarded(sl));
		if (err)
			note_io_error(s, err);
		account(s, i);
	}
	/* What the files hold, for readers to tell one removed or cut
	 * later; a directory already gone has its io_error. */
	if (s->has_file && !s->dir_gone) {
		int err = bp_output_record_streams(s);
		if (err)
			note_io_error(s, err);
	}
}

/* Is there anything for the collector to do right now? */
static int has_work(struct bp_session *s)
{
	int cmd;

	enif_mutex_lock(s->mtx);
	cmd = s->cmd_stop || s->cmd_dump;
	enif_mutex_unlock(s->mtx);
	if (cmd || (atomic_load(&s->state) == BP_S_STOPPING && !s->notified))
		return 1;
	if (s->overflow == BP_OVF_DROP_OLDEST)
		return 0; /* a flight recorder's rings are read at dumps only */
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl = slot_at(s, i);
		if (sl && bp_ring_used(&sl->ring))
			return 1;
	}
	return 0;
}

/*
 * Sleeps up to ns with `sleeping' set, until a producer (its first event,
 * bp_session_enter), a command or a stop request wakes us.  Returns 1 if
 * woken.  A producer that read `sleeping' just before it was set is not
 * seen: its event waits at most ns (<= FLUSH_NS), the same bound as a
 * partial packet.
 */
static int idle_wait(struct bp_session *s, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull),
			      (long)(ns % 1000000000ull)};

	atomic_store(&s->sleeping, 1);
	if (has_work(s)) {
		atomic_store(&s->sleeping, 0);
		return 1;
	}
	syscall(SYS_futex, (uint32_t *)&s->sleeping, FUTEX_WAIT_PRIVATE, 1, &ts,
		NULL, 0);
	return atomic_exchange(&s->sleeping, 0) == 0;
}

/* Tells the process waiting for a dump (nif_dump) that it is done, or
 * that the collector has finished (its final drain wrote the window).
 * Under mtx. */
static void dumped(struct bp_session *s, int finished)
{
	ErlNifEnv *env = s->dump_env;

	if (!s->dump_waiting || (!finished && s->dumps_done < s->dump_target))
		return;
	s->dump_waiting = 0;
	enif_send(NULL, &s->dump_pid, env,
		  enif_make_tuple2(env, enif_make_atom(env, "beamprobe_dumped"),
				   enif_make_uint64(env, s->dumps_done)));
	enif_clear_env(env); /* for the next dump, sent or not */
}

void *bp_collector_main(void *arg)
{
	struct bp_session *s = arg;
	uint64_t last_flush = bp_now(), last_busy = last_flush;
	int drop_oldest = s->overflow == BP_OVF_DROP_OLDEST;

	for (;;) {
		int stop, want_dump, mapping;
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
			dumped(s, 0);
			enif_mutex_unlock(s->mtx);
		}
		if (!drop_oldest)
			moved = drain_all(s, live_cut());
		/* Ring pages mapped before the producers reach them (a step
		 * between drains; bp_prefault.h). */
		mapping = bp_prefault_step(s);
		flush_handlers(s, 0);
		if (s->tcp)
			bp_tcp_pump(s);
		bp_clock_maintain();
		now = bp_now();
		if (now - last_flush >= FLUSH_NS) {
			flush_all(s, 0);
			check_files(s);
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
		if (moved || want_dump) {
			last_busy = now;
			continue;
		}
		if (mapping)
			continue; /* more to map: no sleep meanwhile */
		if (now - last_busy < DEEP_AFTER_NS) {
			/* Recent traffic: poll, without waking producers. */
			struct timespec ts = {0, POLL_NS};
			enif_mutex_lock(s->mtx);
			stop = s->cmd_stop || s->cmd_dump;
			enif_mutex_unlock(s->mtx);
			if (!stop)
				nanosleep(&ts, NULL);
		} else {
			/* Idle: sleep until the next flush is due, or woken. */
			uint64_t due = last_flush + FLUSH_NS;
			now = bp_now();
			if (idle_wait(s, due > now + 1000000 ? due - now
							     : 1000000))
				last_busy = bp_now();
		}
	}
	bp_collector_finish(s);
	enif_mutex_lock(s->mtx);
	s->finished = 1;
	dumped(s, 1);
	bp_session_tell_stopped(s, NULL);
	enif_mutex_unlock(s->mtx);
	return NULL;
}
