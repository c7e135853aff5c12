/* bp_session.c -- session slots, loss totals and the stop protocol
 * (see bp_session.h for the contract and the threads involved). */
#include "bp_session.h"
#include "bp_hub.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic int next_slot;
__thread int bp__tls_slot __attribute__((tls_model("initial-exec"))) = -1;

int bp__thread_slot_new(void)
{
	if (bp__tls_slot >= 0)
		return bp__tls_slot;
	int n = atomic_fetch_add_explicit(&next_slot, 1, memory_order_relaxed);
	if (n >= BP_MAX_SLOTS)
		return -1; /* tls_slot stays -1: checked again, stays full */
	bp__tls_slot = n;
	return n;
}

struct bp_slot *bp__session_slot_create(struct bp_session *s, int idx)
{
	/* Only the thread owning slot idx ever creates it: no race. */
	struct bp_slot *sl =
		(struct bp_slot *)(s->region + (size_t)idx * s->slot_stride);
	uint8_t *data = (uint8_t *)sl + ((sizeof *sl + 63) & ~(size_t)63);

	bp_ring_init(&sl->ring, data, s->buffer,
		     s->overflow == BP_OVF_DROP_OLDEST);
	atomic_init(&sl->busy, 0);
	for (int i = 0; i < BP_DROP_COUNT; i++)
		atomic_init(&sl->drops[i], 0);
	atomic_init(&sl->late_too_big, 0);
	atomic_init(&sl->late_limit, 0);
	sl->index = (uint32_t)idx;
	/* The mapping is zero-filled: pid_seen starts empty (0 is no pid). */
	atomic_store_explicit(&s->slots[idx], sl, memory_order_release);
	return sl;
}

void bp_session_tell_stopped(struct bp_session *s, ErlNifEnv *caller_env)
{
	struct bp_stop_waiter *w;

	while ((w = s->stop_waiters)) {
		s->stop_waiters = w->next;
		enif_send(caller_env, &w->pid, w->env,
			  enif_make_tuple2(w->env,
					   enif_make_atom(w->env,
							  "beamprobe_stopped"),
					   w->ref));
		enif_free_env(w->env);
		enif_free(w);
	}
}

size_t bp_session_color(void)
{
	static _Atomic uint32_t next;
	uint32_t n = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);

	return (size_t)(n % 15) * (4096 + 64);
}

void bp__session_wake(struct bp_session *s)
{
	if (atomic_exchange_explicit(&s->sleeping, 0, memory_order_seq_cst))
		syscall(SYS_futex, (uint32_t *)&s->sleeping, FUTEX_WAKE_PRIVATE,
			1, NULL, NULL, 0);
}

void bp_session_request_stop(struct bp_session *s, enum bp_stop_reason r)
{
	int none = BP_SR_NONE;
	int st = atomic_load(&s->state);

	atomic_compare_exchange_strong(&s->stop_reason, &none, (int)r);
	/* From RUNNING, and from PAUSED too: a request made while a
	 * flight-recorder dump holds the producers off (the dump's own write
	 * failing, or a producer that read RUNNING just before the pause)
	 * must not be lost when the dump sets RUNNING again (it does so
	 * only from PAUSED). */
	while (st == BP_S_RUNNING || st == BP_S_PAUSED)
		if (atomic_compare_exchange_weak(&s->state, &st,
						 BP_S_STOPPING)) {
			bp__session_wake(s); /* so that it tells the session */
			return;
		}
}

/* The sum over s's slots of what slot_drops says of each, with the
 * events of threads that had no slot. */
static void sum_drops(struct bp_session *s, uint64_t out[BP_DROP_COUNT],
		      void (*slot_drops)(struct bp_slot *,
					 uint64_t[BP_DROP_COUNT]))
{
	for (int c = 0; c < BP_DROP_COUNT; c++)
		out[c] = 0;
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		uint64_t d[BP_DROP_COUNT];

		if (!sl)
			continue;
		slot_drops(sl, d);
		for (int c = 0; c < BP_DROP_COUNT; c++)
			out[c] += d[c];
	}
	out[BP_DROP_NO_BUFFER] +=
		atomic_load_explicit(&s->noslot_drops, memory_order_relaxed);
}

void bp_session_drops(struct bp_session *s, uint64_t out[BP_DROP_COUNT])
{
	sum_drops(s, out, bp_slot_drops);
}

void bp_session_source_drops(struct bp_session *s, uint64_t out[BP_DROP_COUNT])
{
	sum_drops(s, out, bp_slot_source_drops);
}

void bp_slot_source_drops(struct bp_slot *sl, uint64_t d[BP_DROP_COUNT])
{
	bp__slot_counted(sl, d); /* bp_slot_drops without the file sink's */
	d[BP_DROP_IO_ERROR] = 0; /* only the collector counts them */
}

void bp_session_quiesce(struct bp_session *s)
{
	/* The caller stored the new state with seq_cst; after the remover's
	 * barrier (bp_membar.h) busy is read below, completing the Dekker
	 * pair of bp_session_enter. */
	bp_membar_sync();
	for (uint32_t i = 0; i < s->max_slots; i++) {
		struct bp_slot *sl =
			atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (!sl)
			continue;
		while (atomic_load_explicit(&sl->busy, memory_order_seq_cst))
			sched_yield();
	}
	bp_hub_wait_idle(); /* the barrier above serves the hub's flags too */
}

int bp__session_rate_ok(struct bp_session *s)
{
	uint64_t now = bp_now();
	uint64_t start = atomic_load_explicit(&s->rate_start,
					      memory_order_relaxed);

	if (now - start >= s->rate_window) {
		/* One thread opens the new window; the others count in it. */
		if (atomic_compare_exchange_strong(&s->rate_start, &start, now))
			atomic_store_explicit(&s->rate_count, 0,
					      memory_order_relaxed);
	}
	return atomic_fetch_add_explicit(&s->rate_count, 1,
					 memory_order_relaxed) < s->rate_n;
}
