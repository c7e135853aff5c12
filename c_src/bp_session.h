/* bp_session.h -- a tracing session: its per-thread rings, its state and
 * loss counters, and its collector thread.
 *
 * Threads and contexts:
 *   producers   tracer callbacks (bp_tracer.c) on any scheduler thread,
 *               normal or dirty; each OS thread gets a process-wide slot
 *               number on first use and writes only to its own slot's
 *               ring in each session.
 *   collector   one thread per session (bp_collector.c) draining the rings
 *               into CTF stream files.
 *   control     NIF calls from the session's Erlang process (bp_nif.c).
 *
 * Memory: one anonymous mapping per session holding max_slots slots of
 * (struct bp_slot + buffer bytes).  Only the slots of threads that
 * produce are touched (first by the collector, which maps each slot a
 * window ahead of its producer: bp_prefault.h), so resident memory is
 * bounded by buffer x producing threads; nothing is allocated on the
 * producer path.
 *
 * Stop/dump protocol (exact accounting without a lock on the hot path):
 * a producer sets slot->busy = 1 and then reads state (a barrier
 * between, bp_membar.h); it writes only if state is RUNNING and clears
 * busy when done.  The collector stores state (seq_cst), runs the
 * remover's barrier (bp_membar_sync), then waits until every slot's busy
 * is 0.  After that no producer can write until state is
 * RUNNING again, and every later event is counted as dropped.
 */
#ifndef BP_SESSION_H
#define BP_SESSION_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

#include "bp_clock.h"
#include "bp_counter.h"
#include "bp_ctf.h"
#include "bp_format.h"
#include "bp_membar.h"
#include "bp_ring.h"
#include "bp_term.h"

struct bp_follow;
struct bp_handler_sink;
struct bp_tcp_sink;

#define BP_MAX_SLOTS 256
#define BP_PID_CACHE 1024 /* per-slot "process event already written" set */
#define BP_MFA_CACHE 256  /* per-slot cache of rendered "m:f/a" texts */
#define BP_MFA_TEXT 104   /* longest text kept in the MFA cache */

/* A rendered "m:f/a", keyed by the atoms' term words (atoms are never
 * freed, so the words are stable for the VM's lifetime). */
struct bp_mfa_entry {
	uint64_t m, f;
	uint32_t arity;
	uint32_t len; /* 0: empty entry */
	char text[BP_MFA_TEXT];
};

enum bp_state {
	BP_S_RUNNING = 0,
	BP_S_PAUSED,   /* collector is dumping a flight-recorder window */
	BP_S_STOPPING, /* a limit or an overflow asked the session to end */
	BP_S_STOPPED,  /* final: producers drop everything */
};

enum bp_overflow { BP_OVF_DROP_NEWEST, BP_OVF_DROP_OLDEST, BP_OVF_STOP };
enum bp_args_mode { BP_ARGS_NONE, BP_ARGS_ARITY, BP_ARGS_FULL };

/* Why a session asked to be stopped (sent to the session process). */
enum bp_stop_reason {
	BP_SR_NONE = 0,
	BP_SR_EVENTS,   /* limits.events reached */
	BP_SR_BYTES,    /* limits.bytes reached */
	BP_SR_OVERFLOW, /* overflow => stop and an event was lost */
	BP_SR_IO_ERROR, /* writing the trace failed */
	BP_SR_OWNER_DEAD, /* the session process died without stopping */
	BP_SR_RATE,       /* on_rate => stop and the rate was exceeded */
};

#define BP_F_RETURN 1u     /* record return_from */
#define BP_F_EXCEPTIONS 2u /* record exception_from */
#define BP_F_MS_RESULT 4u  /* match specs may return a value (call info) */

/* One producing thread's part of a session. */
struct bp_slot {
	struct bp_ring ring;
	_Alignas(64) _Atomic uint32_t busy; /* see protocol above */
	_Atomic uint64_t drops[BP_DROP_COUNT]; /* written by the producer,
						* except io_error: collector */
	_Atomic uint64_t late_too_big; /* collector: could not fit a packet */
	_Atomic uint64_t late_limit;   /* collector: past the bytes limit
					* (not drops[limit], the producer's:
					* one writer each, bp_counter.h) */
	uint32_t index;                       /* slot number */
	uint64_t pid_seen[BP_PID_CACHE];      /* producer only; the key
						* last found or put here is
						* also ring.owner_word */
	struct bp_mfa_entry mfa[BP_MFA_CACHE]; /* producer only */
	struct bp_term_cache terms;            /* producer only */
};

struct bp_merge_in; /* bp_collector.c */

/* A process waiting for a session's collector to finish: the message
 * {beamprobe_stopped, Ref} it is sent, in env (bp_session.stop_waiters). */
struct bp_stop_waiter {
	ErlNifPid pid;
	ErlNifEnv *env;
	ERL_NIF_TERM ref;
	struct bp_stop_waiter *next;
};

struct bp_session {
	/* Read by producers on every event. */
	_Atomic int state;
	/* 1 while the collector sleeps with every ring empty (a futex word):
	 * the first producer to see it wakes the collector.  Written by the
	 * collector only when it goes to sleep (idle sessions, a few times a
	 * second), so it stays in the producers' read-mostly line. */
	_Atomic uint32_t sleeping;
	uint8_t overflow;  /* enum bp_overflow */
	uint8_t args_mode; /* enum bp_args_mode */
	uint32_t flags;    /* BP_F_* */
	/* What every event reads, next to each other (the struct is only
	 * 8-byte aligned: these 64 bytes span at most two lines). */
	uint32_t max_slots;
	uint64_t rate_n;      /* rate limit: events per window, 0 = none */
	uint64_t event_limit; /* 0 = none */
	size_t slot_stride;   /* bytes per slot in the mapping */
	uint8_t *region;      /* slot 0: map + this session's colour */
	uint64_t usdt_kinds; /* event ids whose USDT probes fire (bp_usdt.h) */
	struct bp_capture capture;
	struct bp_follow *follow; /* a follow session's per-request budget
				     (bp_follow.h); owned; else NULL */
	uint64_t buffer;      /* ring bytes per slot */
	uint8_t *map;         /* the mapping; owned */
	size_t region_size;   /* its size */
	struct bp_slot *_Atomic slots[BP_MAX_SLOTS];

	/* Written by many threads: kept off the read-mostly lines above.
	 * (Padding, not _Alignas: resources are only 8-byte aligned.) */
	char pad0[64];
	_Atomic uint64_t event_count; /* only with event_limit */
	char pad1[64];
	_Atomic uint64_t noslot_drops;
	char pad2[64];
	_Atomic int stop_reason; /* enum bp_stop_reason, first one wins */

	/* Rate limit at the source: at most rate_n events per window. */
	uint64_t rate_window;  /* ns */
	int rate_stop;         /* the first rate drop ends the session */
	char pad3[64];
	_Atomic uint64_t rate_start; /* window start (ns) */
	_Atomic uint64_t rate_count; /* events in the window */
	char pad4[64];

	/* Sinks. */
	int has_file;                     /* CTF files in dir */
	uint64_t file_kinds;              /* event kinds written to files */
	int has_lttng;                    /* LTTng-UST sink (bp_sink_lttng.c) */
	uint64_t lttng_kinds;             /* event kinds it fires */
	struct bp_handler_sink *handlers; /* nhandlers; owned */
	uint32_t nhandlers;
	struct bp_tcp_sink *tcp;          /* TCP stream (bp_sink_tcp.c) */
	uint64_t tcp_kinds;               /* event kinds it sends */

	/* Collector. */
	uint64_t byte_limit; /* 0 = none */
	/* The stream files' size once what they hold is written, with the
	 * room each keeps (the bytes limit, bp_collector.c); collector-owned. */
	uint64_t file_proj;
	int file_full; /* an event was refused: every later one is too */
	char dir[4096];
	int dirfd;           /* the trace directory (O_NOFOLLOW), or -1 */
	int dir_gone;        /* collector: the directory was removed */
	uint8_t uuid[16];
	uint64_t lttng_id;   /* its id in LTTng events: bp_lttng_session_id */
	size_t packet_size;
	struct bp_ctf_stream *streams; /* max_slots entries; collector-owned */
	/* The drain's readers, one per slot (bp_collector.c: the slots'
	 * records merged by timestamp); max_slots entries; collector-owned. */
	struct bp_merge_in *merge;
	/* Ring memory mapped ahead of the producers (bp_prefault.h). */
	uint64_t *prefault_done;     /* bytes per slot; max_slots entries;
					collector-owned */
	int prefault_off;            /* madvise refused: map nothing ahead */
	_Atomic uint64_t prefaulted; /* bytes mapped ahead, all slots */
	_Atomic uint64_t file_buffers; /* the stream files' write buffers'
					  bytes (bp_dio.h), all slots */
	_Atomic uint64_t events;       /* user events in the files (whole
					  packets) or delivered to sinks
					  other than the file */
	_Atomic uint64_t bytes;        /* bytes written */
	_Atomic uint64_t aux_events;   /* process/drops events written */
	_Atomic int io_error;          /* first errno from writing */
	ErlNifPid notify;              /* session process */
	int has_notify;
	int notified;

	/* start/1's I/O, done by the collector thread before it collects
	 * (bp_nif_config.c): the LTTng provider's path (or NULL), the
	 * metadata's env list, and who is sent {beamprobe_started, Ref,
	 * Result} once it is done.  Owned by that thread. */
	ErlNifEnv *start_env;
	ERL_NIF_TERM start_envlist, start_ref;
	ErlNifPid start_pid;
	char *start_lttng;

	ErlNifTid tid;
	int thread_started;
	ErlNifMutex *mtx;  /* control <-> collector commands */
	ErlNifCond *cond;
	int cmd_dump;      /* a dump is requested (under mtx) */
	uint64_t dumps_done; /* under mtx */
	/* Who asked for the dump not yet told it is done (under mtx): the
	 * collector sends it {beamprobe_dumped, N} once dumps_done reaches
	 * dump_target, or when it finishes (bp_collector_dumped). */
	ErlNifPid dump_pid;
	ErlNifEnv *dump_env; /* the message's, made by nif_dump */
	int dump_waiting;
	uint64_t dump_target;
	/* Who asked stop/1 (nif_stop) and is not yet told that the
	 * collector has finished (under mtx): each is sent
	 * {beamprobe_stopped, Ref} once, by the collector as it ends
	 * (bp_session_told_stopped), then freed. */
	struct bp_stop_waiter *stop_waiters;
	int cmd_stop;      /* stop requested (under mtx) */
	int finished;      /* collector ended (under mtx) */
	_Atomic int counted; /* holds one of the node's session places */
	_Atomic uint64_t mem_taken; /* ring memory budget held (bp_budget.h) */
	uint64_t fds_taken; /* descriptors start/1 took for its I/O, given
			       back by the collector thread once it is done */
};

/*
 * Colours.  Every session's mapping starts on a page (a 2 MiB page, for
 * a large one), and its slots, ring headers and records lie at the same
 * offsets in each: the lines an event touches in N overlapping sessions
 * would all fall in the same L1 set (4 KiB apart in the index bits) and
 * the same L2 set (64 KiB), more than the ways, and evict each other on
 * every event.  So each session's slots start at a colour of its own: a
 * multiple of 4096 + 64 bytes below BP_SESSION_COLORS, which moves the
 * lines of the first 15 sessions to distinct sets of both caches.
 */
#define BP_SESSION_COLORS 65536u

/* The colour of the next session (round robin).  Any thread. */
size_t bp_session_color(void);

/* The calling thread's slot number, -1 until it has one (initial-exec:
 * a plain %fs-relative load, no __tls_get_addr call). */
extern __thread int bp__tls_slot __attribute__((tls_model("initial-exec")));
int bp__thread_slot_new(void);

/* Process-wide slot number of the calling thread, or -1 if all
 * BP_MAX_SLOTS are taken.  Any thread; lock-free. */
static inline int bp_thread_slot(void)
{
	int i = bp__tls_slot;

	return __builtin_expect(i >= 0, 1) ? i : bp__thread_slot_new();
}

/* The calling thread's slot in s, created on first use (no allocation:
 * carved from s->region).  NULL if the thread has no slot in s (counted as
 * a no_buffer drop by the caller).  Producer context. */
struct bp_slot *bp__session_slot_create(struct bp_session *s, int idx);

static inline struct bp_slot *bp_session_slot(struct bp_session *s)
{
	int idx = bp_thread_slot();
	struct bp_slot *sl;

	if (idx < 0 || (uint32_t)idx >= s->max_slots)
		return NULL;
	/* Slot idx is at a fixed place in the mapping, and only this thread
	 * ever creates it or writes its producer state (slot numbers are
	 * never reused): its ring's own `ready' byte says whether it is
	 * there, on the line the reservation reads next; no load of
	 * s->slots[] (for the collector), one cache line less per event and
	 * session.  An untouched page reads as zeros. */
	sl = (struct bp_slot *)(s->region + (size_t)idx * s->slot_stride);
	return __builtin_expect(sl->ring.ready, 1)
		       ? sl
		       : bp__session_slot_create(s, idx);
}

static inline void bp_slot_drop(struct bp_slot *sl, enum bp_drop_cause c)
{
	bp_counter_add(&sl->drops[c], 1); /* the slot's thread: its only writer */
}

/* sl's counters as they are (the producer's, and the collector's
 * io_error), with the records evicted as `overwritten'.  Any thread. */
static inline void bp__slot_counted(struct bp_slot *sl,
				    uint64_t d[BP_DROP_COUNT])
{
	for (int c = 0; c < BP_DROP_COUNT; c++)
		d[c] = atomic_load_explicit(&sl->drops[c],
					    memory_order_relaxed);
	d[BP_DROP_OVERWRITTEN] +=
		atomic_load_explicit(&sl->ring.evicted, memory_order_relaxed);
}

/* sl's losses by cause: its producer's, with those the collector counts
 * for it (records evicted, events too big for a packet or past the bytes
 * limit, not writable).  Any thread. */
static inline void bp_slot_drops(struct bp_slot *sl, uint64_t d[BP_DROP_COUNT])
{
	bp__slot_counted(sl, d);
	d[BP_DROP_TOO_BIG] +=
		atomic_load_explicit(&sl->late_too_big, memory_order_relaxed);
	d[BP_DROP_LIMIT] +=
		atomic_load_explicit(&sl->late_limit, memory_order_relaxed);
}

/* Wakes the collector if it sleeps (see `sleeping').  Any thread. */
void bp__session_wake(struct bp_session *s);

/* Sends {beamprobe_stopped, Ref} to every process waiting in
 * stop_waiters (dead ones are skipped by enif_send) and frees them.  Under
 * mtx, from a thread that is not a scheduler (the collector as it ends) or
 * with caller_env, the calling NIF's env (NULL from other threads). */
void bp_session_tell_stopped(struct bp_session *s, ErlNifEnv *caller_env);

/* Asks the session to end for reason r (first reason wins).  Any thread. */
void bp_session_request_stop(struct bp_session *s, enum bp_stop_reason r);

/* Takes one event from the rate window; 0 if the window is full.
 * Producer context (lock-free). */
int bp__session_rate_ok(struct bp_session *s);

/*
 * Enters the session to write one event: returns the slot to write to, or
 * NULL when the event must not be written (the loss is already counted).
 * On success the caller must call bp_session_leave().  Producer context.
 */
static inline __attribute__((always_inline)) struct bp_slot *
bp__session_enter(struct bp_session *s,
						 int own_busy)
{
	struct bp_slot *sl = bp_session_slot(s);
	int st;

	if (!sl) {
		atomic_fetch_add_explicit(&s->noslot_drops, 1,
					  memory_order_relaxed);
		return NULL;
	}
	/* Busy store, barrier, state load: the producer's half of the Dekker
	 * protocol (bp_membar.h: a plain store when the remover's half is a
	 * membarrier, else one locked xchg).  A producer inside the hub has
	 * set its hub busy flag instead, which bp_session_quiesce() also
	 * waits on (bp_hub.h). */
	if (own_busy)
		bp_membar_busy(&sl->busy);
	st = atomic_load_explicit(&s->state, memory_order_seq_cst);
	if (st != BP_S_RUNNING) {
		int sr = atomic_load_explicit(&s->stop_reason,
					      memory_order_relaxed);
		/* Events after the events or bytes limit: its losses. */
		bp_slot_drop(sl, st == BP_S_PAUSED ? BP_DROP_DUMPING
				 : sr == BP_SR_EVENTS || sr == BP_SR_BYTES
					 ? BP_DROP_LIMIT
					 : BP_DROP_STOPPED);
		if (own_busy)
			atomic_store_explicit(&sl->busy, 0,
					      memory_order_release);
		return NULL;
	}
	if (s->rate_n && !bp__session_rate_ok(s)) {
		bp_slot_drop(sl, BP_DROP_RATE);
		if (own_busy)
			atomic_store_explicit(&sl->busy, 0,
					      memory_order_release);
		if (s->rate_stop)
			bp_session_request_stop(s, BP_SR_RATE);
		return NULL;
	}
	/* The idle -> busy transition: one relaxed load per event, a wake-up
	 * (syscall) only when the collector sleeps. */
	if (__builtin_expect(atomic_load_explicit(&s->sleeping,
						  memory_order_relaxed), 0))
		bp__session_wake(s);
	if (s->event_limit) {
		uint64_t n = atomic_fetch_add_explicit(&s->event_count, 1,
						       memory_order_relaxed);
		if (n >= s->event_limit) {
			bp_slot_drop(sl, BP_DROP_LIMIT);
			if (own_busy)
				atomic_store_explicit(&sl->busy, 0,
						      memory_order_release);
			return NULL;
		}
		/* The last event allowed: record it, and end the session now
		 * rather than at the next event (which may never come). */
		if (n + 1 == s->event_limit)
			bp_session_request_stop(s, BP_SR_EVENTS);
	}
	return sl;
}

static inline struct bp_slot *bp_session_enter(struct bp_session *s)
{
	return bp__session_enter(s, 1);
}

static inline void bp_session_leave(struct bp_slot *sl)
{
	atomic_store_explicit(&sl->busy, 0, memory_order_release);
}

/* Counts an event of max_len bytes that did not fit in sl's ring (and
 * ends the session under overflow => stop).  Producer context. */
static inline void bp_session_lost(struct bp_session *s, struct bp_slot *sl,
				   uint32_t max_len)
{
	bp_slot_drop(sl, max_len > bp_ring_max_len(&sl->ring)
			     ? BP_DROP_TOO_BIG
			     : BP_DROP_RING_FULL);
	if (s->overflow == BP_OVF_STOP)
		bp_session_request_stop(s, BP_SR_OVERFLOW);
}

/* Reserves room for an event in sl's ring; on failure counts the loss.
 * Producer context. */
static inline __attribute__((always_inline)) uint8_t *
bp_session_reserve(struct bp_session *s, struct bp_slot *sl, uint32_t max_len)
{
	uint8_t *p = bp_ring_reserve(&sl->ring, max_len);

	if (!p)
		bp_session_lost(s, sl, max_len);
	return p;
}


/* Sums drops of every cause over all slots (+ evictions, no_buffer). */
void bp_session_drops(struct bp_session *s, uint64_t out[BP_DROP_COUNT]);

/* sl's losses that every sink lacks: those at the source (rings, rate,
 * the events limit, the stop, records evicted), not the file sink's own
 * (bp_collector.c: past the bytes limit, too big for a file packet, not
 * writable: late_limit, late_too_big, io_error), events the other sinks
 * were given all the same.  What a TCP stream's or an LTTng trace's
 * drops events say. */
void bp_slot_source_drops(struct bp_slot *sl, uint64_t d[BP_DROP_COUNT]);

/* bp_slot_source_drops summed over every slot, with no_buffer. */
void bp_session_source_drops(struct bp_session *s, uint64_t out[BP_DROP_COUNT]);

/* Waits until no producer is inside s (see protocol; a producer inside
 * the hub counts as inside every member, bp_hub.h).  Collector/control. */
void bp_session_quiesce(struct bp_session *s);

/* The drain's readers for n slots (bp_collector.c), or NULL;
 * enif_free'd with the session. */
struct bp_merge_in *bp_collector_merge_alloc(uint32_t n);

/* Collector thread entry point (bp_collector.c). */
void *bp_collector_main(void *arg);

/* Runs the final drain synchronously (used when the thread could not be
 * started).  Collector/control context. */
void bp_collector_finish(struct bp_session *s);

#endif /* BP_SESSION_H */
