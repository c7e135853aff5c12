/* bp_sink_handler.c -- the Erlang handler sink: the collector thread turns
 * events into maps and sends them, in batches, to a handler process
 * (src/beamprobe_handler.erl), with credit-based flow control.
 *
 * A sink starts with `credits` batches it may send; each batch sent takes
 * one, each beamprobe_nif:ack/2 from the handler gives one back.  With no
 * credit left, a full batch is dropped and its events counted (the handler
 * learns how many in its next batch, as a #{event => dropped} map), so the
 * handler's mailbox never holds more than `credits` batches (and, at the
 * session's end, one last #{event => dropped} map sent without a credit:
 * losses since the last report would otherwise never be told) and the
 * node's memory stays bounded however slow the handler is.
 *
 * The account is exact: a batch sent is `in_flight' until the handler
 * acknowledges it (then `delivered'), or until the handler is found dead
 * (then `dropped': nobody will ever handle it).  Acks come in send order
 * (one mailbox), so the sizes of the batches in flight wait in a FIFO of
 * at most credits_max entries (bp_sink_handler.h), lock-free.
 *
 * Collector thread only, except bp_handler_ack and bp_handler_counts (any
 * thread).
 */
#include <string.h>
#include <time.h>

#include "bp_atoms.h"
#include "bp_sink_handler.h"

/* Atoms for event names and field names, made once in load(). */
static ERL_NIF_TERM ev_atoms[BP_EV_COUNT];
static ERL_NIF_TERM field_atoms[BP_EV_COUNT][16];
static ERL_NIF_TERM a_event, a_ts, a_pid, a_count, a_dropped,
	a_beamprobe_events, a_slow_output, a_session_wide,
	a_causes[BP_DROP_COUNT];

void bp_handler_load(ErlNifEnv *env)
{
	for (unsigned id = 0; id < BP_EV_COUNT; id++) {
		const struct bp_event_desc *d = &bp_event_descs[id];
		if (!d->name)
			continue;
		ev_atoms[id] = enif_make_atom(env, d->name);
		for (unsigned f = 0; f < d->nfields && f < 16; f++)
			field_atoms[id][f] = enif_make_atom(env, d->fields[f].name);
	}
	a_event = enif_make_atom(env, "event");
	a_ts = enif_make_atom(env, "ts");
	a_pid = enif_make_atom(env, "pid");
	a_count = enif_make_atom(env, "count");
	a_dropped = enif_make_atom(env, "dropped");
	a_beamprobe_events = enif_make_atom(env, "beamprobe_events");
	a_slow_output = enif_make_atom(env, "slow_output");
	a_session_wide = enif_make_atom(env, "session_wide");
	for (int c = 0; c < BP_DROP_COUNT; c++)
		a_causes[c] = enif_make_atom(env, bp_drop_cause_names[c]);
}

/* A key (the event header's pid, or a field of kind PID) is the VM's
 * immediate term word of a local pid or port (bp_tracer.c writes nothing
 * else there), valid in any environment; 0 means none.  Only those two
 * places are turned into terms: any other integer is an integer. */
static ERL_NIF_TERM key_term(uint64_t key)
{
	return key ? (ERL_NIF_TERM)key : bp_atom.undefined;
}

static ERL_NIF_TERM bin_term(ErlNifEnv *env, const char *s, size_t n)
{
	ERL_NIF_TERM t;
	unsigned char *p = enif_make_new_binary(env, n, &t);

	memcpy(p, s, n);
	return t;
}

/* What a binary of n bytes takes in a message: a heap binary (2 words
 * and the bytes) up to 64 bytes, else a ProcBin (6 words) and the
 * off-heap Binary (its header and the bytes). */
static uint64_t bin_bytes(size_t n)
{
	return n <= 64 ? 16 + ((n + 7) & ~(size_t)7) : 48 + 48 + n;
}

/* Decodes one event (written by bp_tracer.c, so well-formed; still
 * bounds-checked) into a map, and adds the bytes it takes in a message
 * to *size (the list cell, the flatmap and its keys tuple, a word each
 * and 2 more for each integer, which may be a bignum, and the binaries).
 * Returns 0 on a malformed event. */
static int event_map(ErlNifEnv *env, const uint8_t *ev, uint32_t len,
		     ERL_NIF_TERM *out, uint64_t *size)
{
	uint16_t id = bp_get_u16(ev + BP_EV_OFF_ID);
	const struct bp_event_desc *d;
	ERL_NIF_TERM keys[19], vals[19];
	unsigned n = 0;
	uint32_t off = BP_EVENT_HEADER_SIZE;

	if (id >= BP_EV_COUNT || !(d = &bp_event_descs[id])->name ||
	    d->nfields > 16)
		return 0;
	uint64_t bytes = 0;

	keys[n] = a_event;
	vals[n++] = ev_atoms[id];
	keys[n] = a_ts;
	vals[n++] = enif_make_uint64(env, bp_get_u64(ev + BP_EV_OFF_TS));
	keys[n] = a_pid;
	vals[n++] = key_term(bp_get_u64(ev + BP_EV_OFF_PID));
	for (unsigned f = 0; f < d->nfields; f++) {
		const struct bp_field_desc *fd = &d->fields[f];
		ERL_NIF_TERM v;
		if (fd->type == BP_T_STR) {
			const uint8_t *z = memchr(ev + off, 0, len - off);
			if (!z)
				return 0;
			v = bin_term(env, (const char *)ev + off,
				     (size_t)(z - (ev + off)));
			bytes += bin_bytes((size_t)(z - (ev + off)));
			off = (uint32_t)(z - ev) + 1;
		} else {
			uint32_t w = fd->type == BP_T_U8 ? 1 : fd->type == BP_T_U32 ? 4 : 8;
			uint64_t x;
			if (off + w > len)
				return 0;
			x = w == 1 ? ev[off] : w == 4 ? bp_get_u32(ev + off)
						      : bp_get_u64(ev + off);
			off += w;
			v = fd->kind == BP_K_PID ? key_term(x)
						 : enif_make_uint64(env, x);
		}
		keys[n] = field_atoms[id][f];
		vals[n++] = v;
	}
	/* cons 2 + map 3 + n values + keys tuple 1 + n; ts and the fields'
	 * integers up to 2 words each. */
	bytes += 8 * (2 + 3 + n + 1 + n) + 16 * (n - 2);
	if (!enif_make_map_from_arrays(env, keys, vals, n, out))
		return 0;
	*size += bytes;
	return 1;
}

static int wanted(const struct bp_handler_sink *h, const uint8_t *ev)
{
	uint16_t id = bp_get_u16(ev + BP_EV_OFF_ID);
	uint64_t key;

	if (id == BP_EV_PROCESS || id == BP_EV_DROPS)
		return 0; /* handlers get pids as terms: no need */
	if (id == BP_EV_TAMPERED || id == BP_EV_MONITOR || id == BP_EV_SAMPLE)
		return 1; /* says why events are missing, or the VM's state:
			   * every handler */
	if (id >= 64 || !(h->kinds & (1ull << id)))
		return 0;
	if (!h->npids)
		return 1;
	key = bp_get_u64(ev + BP_EV_OFF_PID);
	for (uint32_t i = 0; i < h->npids; i++)
		if (h->pids[i] == key)
			return 1;
	return 0;
}

static void reset_batch(struct bp_handler_sink *h)
{
	enif_clear_env(h->env);
	h->list = enif_make_list(h->env, 0);
	h->n -= h->open_n;
	h->open_n = 0;
	h->bytes = 0;
}

/* Drops every closed batch (their events are no longer waiting). */
static void clear_closed(struct bp_handler_sink *h)
{
	for (uint32_t i = 0; i < h->nclosed; i++) {
		h->n -= h->closed[i].n;
		enif_free_env(h->closed[i].env);
	}
	h->nclosed = 0;
}

/* The open batch has reached BP_HANDLER_BATCH_BYTES: it waits, closed,
 * for a credit of its own, and a new one opens.  Without the memory for
 * that it stays open (a bigger message, nothing lost). */
static void close_batch(struct bp_handler_sink *h)
{
	ErlNifEnv *env;

	if (h->nclosed == h->closed_cap) {
		uint32_t cap = h->closed_cap ? 2 * h->closed_cap : 8;
		void *p = enif_realloc(h->closed, cap * sizeof *h->closed);
		if (!p)
			return;
		h->closed = p;
		h->closed_cap = cap;
	}
	if (!(env = enif_alloc_env()))
		return;
	h->closed[h->nclosed].env = h->env;
	h->closed[h->nclosed].list = h->list;
	h->closed[h->nclosed++].n = h->open_n;
	h->env = env;
	h->list = enif_make_list(env, 0);
	h->open_n = 0;
	h->bytes = 0;
}

static uint64_t in_flight_batches(struct bp_handler_sink *h)
{
	return atomic_load(&h->q_head) - atomic_load(&h->q_tail);
}

static int has_credit(struct bp_handler_sink *h)
{
	return in_flight_batches(h) < h->credits_max;
}

/* Takes the oldest batch in flight off the queue and moves its events from
 * in_flight to `to'.  Returns 0 when none is in flight.  Any thread; safe
 * against other takers (compare-and-swap on q_tail): a taker with a stale
 * q_tail may read a reused place, but its swap then fails. */
static int take_oldest(struct bp_handler_sink *h, _Atomic uint64_t *to)
{
	uint64_t t = atomic_load(&h->q_tail);
	uint32_t n;

	for (;;) {
		if (t == atomic_load(&h->q_head))
			return 0;
		n = atomic_load_explicit(&h->q_size[t % BP_HANDLER_MAX_CREDITS],
					 memory_order_relaxed);
		if (atomic_compare_exchange_weak(&h->q_tail, &t, t + 1))
			break;
	}
	atomic_fetch_add(&h->moves_begun, 1);
	atomic_fetch_add(to, n);
	atomic_fetch_sub(&h->in_flight, n);
	atomic_fetch_add(&h->moves_done, 1);
	return 1;
}

/* A batch of n events is about to be sent: in flight.  Collector thread,
 * with a credit (a free place). */
static void push_in_flight(struct bp_handler_sink *h, uint32_t n)
{
	uint64_t hd = atomic_load_explicit(&h->q_head, memory_order_relaxed);

	atomic_fetch_add(&h->in_flight, n); /* before anyone can take it */
	atomic_store_explicit(&h->q_size[hd % BP_HANDLER_MAX_CREDITS], n,
			      memory_order_relaxed);
	atomic_store(&h->q_head, hd + 1); /* publishes the size */
}

/* The handler process is gone: its open batch and every batch in its
 * mailbox are lost, and so is every later event meant for it. */
static void handler_gone(struct bp_handler_sink *h)
{
	h->dead = 1;
	if (h->n)
		atomic_fetch_add(&h->dropped, h->n);
	clear_closed(h);
	reset_batch(h);
	h->pending_drops = 0;
	h->pending_slow = 0;
	memset(h->pending_cause, 0, sizeof h->pending_cause);
	while (take_oldest(h, &h->dropped))
		;
}

/* Is the handler process alive?  From the collector thread, with an
 * environment of its own (as bp_collector.c's session_process_alive). */
static int handler_alive(struct bp_handler_sink *h)
{
	ErlNifEnv *env = enif_alloc_env();
	int alive;

	if (!env)
		return 1; /* cannot tell: ask again later */
	alive = enif_is_process_alive(env, &h->pid);
	enif_free_env(env);
	return alive;
}

/* Adds the events lost at the source since the last look (full rings, rate
 * limits; not the limit/stop ones) to what the handler will be told.  Not
 * io_error either: those are the file sink's losses, events the handler
 * was given all the same (bp_collector.c, add_event); it was told of
 * them as its own. */
static void note_source_drops(struct bp_session *s, struct bp_handler_sink *h)
{
	uint64_t d[BP_DROP_COUNT];

	bp_session_drops(s, d);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		if (c != BP_DROP_LIMIT && c != BP_DROP_STOPPED &&
		    c != BP_DROP_IO_ERROR && d[c] > h->src_seen[c]) {
			h->pending_drops += d[c] - h->src_seen[c];
			h->pending_cause[c] += d[c] - h->src_seen[c];
			h->src_seen[c] = d[c];
		}
}

/* Sends one batch: the oldest closed one, else the open one (with the
 * loss reports, if any), as {beamprobe_events, Index, Events}.  With a
 * credit, or without one for the last loss report (final). */
static void send_one(struct bp_handler_sink *h)
{
	struct bp_handler_batch b;
	int open = h->nclosed == 0;
	ERL_NIF_TERM msg;

	if (open) {
		b.env = h->env;
		b.list = h->list;
		b.n = h->open_n;
	} else {
		b = h->closed[0];
		memmove(h->closed, h->closed + 1,
			--h->nclosed * sizeof *h->closed);
	}
	if (open && h->pending_drops) {
		/* #{event => dropped, count => N, Cause => N...}: one key per
		 * cause that lost events (rate, ring_full, ..., slow_output),
		 * and session_wide => N: of count, the losses at the source.
		 * Those are counted per cause and thread before the event is
		 * known (the rate and limit checks come before its kind, and
		 * the rings hold every kind and process), so they are the
		 * session's, of any kind and process, not only of those this
		 * handler's `events' and `procs' select; slow_output losses
		 * are this handler's own. */
		ERL_NIF_TERM k[4 + BP_DROP_COUNT], v[4 + BP_DROP_COUNT], m;
		unsigned nk = 2;
		uint64_t wide = 0;
		k[0] = a_event;
		v[0] = a_dropped;
		k[1] = a_count;
		v[1] = enif_make_uint64(b.env, h->pending_drops);
		for (int c = 0; c < BP_DROP_COUNT; c++)
			if (h->pending_cause[c]) {
				k[nk] = a_causes[c];
				v[nk++] = enif_make_uint64(b.env,
							   h->pending_cause[c]);
				wide += h->pending_cause[c];
			}
		if (h->pending_slow) {
			k[nk] = a_slow_output;
			v[nk++] = enif_make_uint64(b.env, h->pending_slow);
		}
		if (wide) {
			k[nk] = a_session_wide;
			v[nk++] = enif_make_uint64(b.env, wide);
		}
		if (enif_make_map_from_arrays(b.env, k, v, nk, &m))
			b.list = enif_make_list_cell(b.env, m, b.list);
		h->pending_drops = 0;
		h->pending_slow = 0;
		memset(h->pending_cause, 0, sizeof h->pending_cause);
	}
	enif_make_reverse_list(b.env, b.list, &b.list);
	msg = enif_make_tuple3(b.env, a_beamprobe_events,
			       enif_make_uint(b.env, h->index), b.list);
	/* In flight before the send: the handler may ack at once.  A batch
	 * of loss reports only (n == 0) takes a credit and an ack too; the
	 * final one sent without a credit (n == 0) takes no place: its ack,
	 * after those of every batch sent before it (one mailbox, acks in
	 * order), finds none in flight and is ignored (bp_handler_ack). */
	if (has_credit(h))
		push_in_flight(h, b.n);
	h->n -= b.n;
	if (open)
		h->open_n = 0;
	/* A successful send invalidates the terms of the env, not the env
	 * itself: reset_batch clears it for the next batch (erl_nif(3),
	 * enif_send).  A new env here would leak the old one per batch. */
	if (!enif_send(NULL, &h->pid, b.env, msg)) {
		if (!open)
			enif_free_env(b.env);
		handler_gone(h); /* this batch too is in flight: dropped */
		return;
	}
	if (open)
		reset_batch(h);
	else
		enif_free_env(b.env);
}

/* Every event waiting (closed batches and open) is dropped for want of
 * a credit: counted, and told in the next batch. */
static void drop_waiting(struct bp_session *s, struct bp_handler_sink *h)
{
	h->pending_drops += h->n;
	h->pending_slow += h->n;
	atomic_fetch_add(&h->dropped, h->n);
	atomic_fetch_add(&h->dropped_slow, h->n); /* after dropped */
	if (h->overflow_stop)
		bp_session_request_stop(s, BP_SR_OVERFLOW);
	clear_closed(h);
	reset_batch(h);
}

/* Sends the waiting batches, one per credit; without a credit, drops
 * every event waiting (counted) when called for that: batch_max events
 * wait (bp_handler_add), or final. */
static void send_batch(struct bp_session *s, struct bp_handler_sink *h,
		       int final)
{
	if (h->dead)
		return;
	note_source_drops(s, h);
	if (h->n == 0 && !h->pending_drops)
		return;
	/* Drops alone are reported at most once a second (and at the end):
	 * an overloaded session must not flood the handler with them. */
	if (h->n == 0 && !final && bp_now() - h->last_report < 1000000000ull)
		return;
	if (h->n && !has_credit(h)) {
		drop_waiting(s, h);
		if (!final)
			return;
	}
	/* Only drops to report: they wait for a credit, except at the end,
	 * where nothing would report them after: the last report goes
	 * without one (one small message more than `credits', once). */
	if (!has_credit(h) && (!final || !h->pending_drops))
		return;
	h->last_report = bp_now();
	while (h->nclosed && has_credit(h) && !h->dead)
		send_one(h);
	if (h->dead)
		return;
	if (!has_credit(h)) {
		if (!final)
			return; /* the rest at the next credits */
		if (h->n)
			drop_waiting(s, h);
	}
	if (h->open_n || h->pending_drops)
		send_one(h);
}

void bp_handler_add(struct bp_session *s, struct bp_handler_sink *h,
		    const uint8_t *ev, uint32_t len)
{
	ERL_NIF_TERM m;

	if (!wanted(h, ev))
		return;
	if (h->dead) { /* the handler is gone: its events are lost */
		atomic_fetch_add(&h->dropped, 1);
		return;
	}
	if (!event_map(h->env, ev, len, &m, &h->bytes))
		return;
	h->list = enif_make_list_cell(h->env, m, h->list);
	h->open_n++;
	if (++h->n >= h->batch_max) {
		send_batch(s, h, 0);
	} else if (h->bytes >= BP_HANDLER_BATCH_BYTES) {
		close_batch(h);
		if (has_credit(h))
			send_batch(s, h, 0);
		else if (h->nclosed > BP_HANDLER_CLOSED_MAX)
			/* What waits is bounded in bytes too (by `batch'
			 * events only, the 64 KiB events for a handler holding
			 * its credits piled up to 6.4 GB at batch 100,000). */
			drop_waiting(s, h);
	}
}

void bp_handler_flush(struct bp_session *s, struct bp_handler_sink *h,
		      int final)
{
	/* A handler that died with batches in its mailbox gives no credit
	 * back, so no send fails to tell us: ask, when it holds none (at
	 * most once a second), and at the end. */
	if (!h->dead && (final || (!has_credit(h) &&
				   bp_now() - h->last_check >= 1000000000ull))) {
		h->last_check = bp_now();
		if (!handler_alive(h))
			handler_gone(h);
	}
	/* Without a credit only `final' sends (or drops) the open batch. */
	if (final || has_credit(h))
		send_batch(s, h, final);
}

void bp_handler_finish_wait(struct bp_session *s)
{
	uint64_t until = bp_now() + BP_HANDLER_FINISH_NS;
	struct timespec ts = {0, 1000000};

	for (uint32_t i = 0; i < s->nhandlers; i++) {
		struct bp_handler_sink *h = &s->handlers[i];

		if (!h->dead && h->nclosed && !handler_alive(h))
			handler_gone(h);
	}
	for (;;) {
		int waiting = 0;

		for (uint32_t i = 0; i < s->nhandlers; i++) {
			struct bp_handler_sink *h = &s->handlers[i];

			if (h->dead || !h->nclosed)
				continue;
			if (has_credit(h))
				send_batch(s, h, 0);
			waiting |= h->nclosed && !h->dead;
		}
		if (!waiting || bp_now() >= until)
			return;
		nanosleep(&ts, NULL);
	}
}

int bp_handler_init(struct bp_handler_sink *h)
{
	h->env = enif_alloc_env();
	if (!h->env)
		return -1;
	h->list = enif_make_list(h->env, 0);
	return 0;
}

void bp_handler_free(struct bp_handler_sink *h)
{
	clear_closed(h);
	enif_free(h->closed);
	h->closed = NULL;
	h->closed_cap = 0;
	if (h->env)
		enif_free_env(h->env);
	h->env = NULL;
}

void bp_handler_ack(struct bp_handler_sink *h)
{
	/* An ack with nothing in flight (not from the handler) is ignored. */
	(void)take_oldest(h, &h->delivered);
}

void bp_handler_counts(struct bp_handler_sink *h, uint64_t *delivered,
		       uint64_t *dropped, uint64_t *in_flight, uint64_t *slow)
{
	/* Before dropped: it grows after it (send_batch), so *slow <=
	 * *dropped. */
	*slow = atomic_load(&h->dropped_slow);
	/* Consistent when no move was under way before or during the reads
	 * (moves_begun unchanged and equal to moves_done); a move is a few
	 * instructions, so a retry or two at most.  Single-count changes
	 * need no bracket: any reading is the account at some instant. */
	for (int tries = 0; tries < 1000; tries++) {
		uint64_t done = atomic_load(&h->moves_done);
		*delivered = atomic_load(&h->delivered);
		*dropped = atomic_load(&h->dropped);
		*in_flight = atomic_load(&h->in_flight);
		if (atomic_load(&h->moves_begun) == done)
			return;
	}
}
