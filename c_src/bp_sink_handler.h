/* bp_sink_handler.h -- the Erlang handler sink (see bp_sink_handler.c). */
#ifndef BP_SINK_HANDLER_H
#define BP_SINK_HANDLER_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

#include "bp_session.h"

#define BP_HANDLER_MAX_PIDS 64
#define BP_HANDLER_MAX_CREDITS 64 /* credits_max at most (bp_nif.c checks) */
/* A batch message holds at most batch_max events and about this many
 * bytes of terms (the maps as the VM lays them out, off-heap binaries
 * included, bp_sink_handler.c event_map): a batch that reaches it is
 * closed (at most this plus one event, ~130 KiB with the largest
 * capture) and the next one opened.  Closed batches wait for a credit
 * each; the events waiting, closed and open, are at most batch_max, as
 * one open batch was before, and the closed batches at most
 * BP_HANDLER_CLOSED_MAX: past either, what waits is dropped (counted as
 * slow_output).  So a sink holds at most about credits_max + 17 MiB of
 * terms: its batches in flight, closed and open. */
#define BP_HANDLER_BATCH_BYTES (1u << 20)
#define BP_HANDLER_CLOSED_MAX 16
/* At the session's end the closed batches wait this long at most for
 * their credits (then they are dropped, counted as slow_output). */
#define BP_HANDLER_FINISH_NS 1000000000ull

struct bp_handler_batch {
	ErlNifEnv *env;
	ERL_NIF_TERM list; /* newest first */
	uint32_t n;
};

struct bp_handler_sink {
	ErlNifPid pid;         /* the handler process */
	uint32_t index;        /* sink number, in every batch message */
	uint64_t kinds;        /* bit (1 << event id) per wanted kind */
	uint32_t npids;        /* 0: every process */
	uint64_t pids[BP_HANDLER_MAX_PIDS];
	uint32_t batch_max;    /* events per batch */
	uint32_t credits_max;  /* batches in flight at most */
	int overflow_stop;     /* a dropped batch ends the session */
	/* Batches sent and not yet acknowledged, oldest first: their event
	 * counts in q_size[q_tail % N .. q_head % N).  One producer (the
	 * collector, in send_batch: size, then q_head); consumers take the
	 * oldest entry by a compare-and-swap on q_tail: bp_handler_ack (any
	 * thread) and the collector when it finds the handler dead.  A
	 * credit is a free place: q_head - q_tail < credits_max. */
	_Atomic uint32_t q_size[BP_HANDLER_MAX_CREDITS];
	_Atomic uint64_t q_head, q_tail;
	/* Events given to the handler = delivered + dropped + in_flight. */
	_Atomic uint64_t delivered, dropped, in_flight;
	/* Of dropped, those dropped for want of a credit (the handler too
	 * slow; added after dropped, so a reader that reads it first sees
	 * at most dropped); the rest were lost with the handler (dead). */
	_Atomic uint64_t dropped_slow;
	/* A move between two counts is bracketed by these (begun, then
	 * done), so that bp_handler_counts can read a consistent triple. */
	_Atomic uint64_t moves_begun, moves_done;
	/* Collector-owned batch under construction. */
	ErlNifEnv *env;
	ERL_NIF_TERM list;
	uint32_t n;             /* events waiting: closed batches and open */
	uint32_t open_n;        /* of which in the open batch */
	uint64_t bytes;         /* the open batch's terms, estimated */
	/* Closed batches waiting for a credit, oldest first (collector). */
	struct bp_handler_batch *closed;
	uint32_t nclosed, closed_cap;
	uint64_t pending_drops; /* to report in the next batch */
	/* ... of which, per source cause (BP_DROP_*) and for want of a
	 * credit (the handler too slow): the `dropped' map says which. */
	uint64_t pending_cause[BP_DROP_COUNT];
	uint64_t pending_slow;
	uint64_t src_seen[BP_DROP_COUNT]; /* source drops already reported */
	uint64_t last_report;   /* when the last batch was sent (ns) */
	uint64_t last_check;    /* when we last asked if it is alive (ns) */
	int dead;
};

/* Makes the atoms; from load(). */
void bp_handler_load(ErlNifEnv *env);
/* Allocates the batch environment.  Returns 0 or -1 (no memory). */
int bp_handler_init(struct bp_handler_sink *h);
void bp_handler_free(struct bp_handler_sink *h);
/* Adds one event (filtered by kinds and pids); sends a full batch.
 * Collector thread. */
void bp_handler_add(struct bp_session *s, struct bp_handler_sink *h,
		    const uint8_t *ev, uint32_t len);
/* Sends the open batch if it holds a credit, or pending loss reports (at
 * most once a second unless `final').  Finds a dead handler out: at
 * `final', and at most once a second while it holds no credit; its
 * in-flight batches then count as dropped.  Collector thread. */
void bp_handler_flush(struct bp_session *s, struct bp_handler_sink *h,
		      int final);
/* At the end, before the final flushes: batches split off by size wait
 * for their credits, BP_HANDLER_FINISH_NS in all for every handler of
 * the session (not each in turn: 4 blocked handlers made stop/1 wait
 * 4 s), so that what one batch would have carried is not lost for being
 * split.  Collector thread. */
void bp_handler_finish_wait(struct bp_session *s);
/* The oldest batch in flight was consumed: its events count as
 * delivered, its credit comes back.  Any thread. */
void bp_handler_ack(struct bp_handler_sink *h);
/* delivered, dropped, in_flight, read together, and of dropped those for
 * want of a credit (*slow <= *dropped).  Any thread. */
void bp_handler_counts(struct bp_handler_sink *h, uint64_t *delivered,
		       uint64_t *dropped, uint64_t *in_flight, uint64_t *slow);

#endif /* BP_SINK_HANDLER_H */
