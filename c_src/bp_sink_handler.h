/* bp_sink_handler.h -- the Erlang handler sink (see bp_sink_handler.c). */
#ifndef BP_SINK_HANDLER_H
#define BP_SINK_HANDLER_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

#include "bp_session.h"

#define BP_HANDLER_MAX_PIDS 64

struct bp_handler_sink {
	ErlNifPid pid;         /* the handler process */
	uint32_t index;        /* sink number, in every batch message */
	uint64_t kinds;        /* bit (1 << event id) per wanted kind */
	uint32_t npids;        /* 0: every process */
	uint64_t pids[BP_HANDLER_MAX_PIDS];
	uint32_t batch_max;    /* events per batch */
	uint32_t credits_max;  /* batches in flight at most */
	int overflow_stop;     /* a dropped batch ends the session */
	_Atomic int32_t credits;
	_Atomic uint64_t delivered, dropped;
	/* Collector-owned batch under construction. */
	ErlNifEnv *env;
	ERL_NIF_TERM list;
	uint32_t n;
	uint64_t pending_drops; /* to report in the next batch */
	uint64_t src_seen;      /* source drops already reported */
	uint64_t last_report;   /* when the last batch was sent (ns) */
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
/* Sends the open batch, or pending loss reports (at most once a second
 * unless `final').  Collector thread. */
void bp_handler_flush(struct bp_session *s, struct bp_handler_sink *h,
		      int final);
/* One batch consumed: one credit back.  Any thread. */
void bp_handler_ack(struct bp_handler_sink *h);

#endif /* BP_SINK_HANDLER_H */
