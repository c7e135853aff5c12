/* bp_follow.h -- the per-request budget of a follow session
 * (src/beamprobe_follow.erl): which request each event of the session
 * belongs to, and whether that request may still record it.
 *
 * A follow session's events are the root function's call and return in
 * the process that calls it, and the seq_trace `send' and `receive'
 * events of the messages that carry the session's seq_trace label (the
 * session is the node's system seq_trace tracer).  On OTP 25 every
 * request carries the same label, so requests are told apart here:
 *
 *   root call in P        a new request R (or the same one for a nested
 *                         call of the root in P's own root call);
 *                         proc[P] = R, own[P] = R; none if P carries a
 *                         seq_trace label of its own (the root's match
 *                         spec left it as it was and said so: counted
 *                         as labelled; its return is not traced)
 *   send by P             of proc[P]; msg[(P, serial)] = R, or for a
 *                         receiver X on another node msg[(X, serial)] = R
 *   receive by Q of a     msg[(From, serial)] (taken out), else Q's
 *     local message       request if Q is a root in its root call;
 *                         proc[Q] = R
 *   receive by Q of a     msg[(From, previous serial)]: From's first send
 *     remote message      after taking a message this node sent it for
 *                         R names that message's serial as its previous
 *                         one; else Q's request if Q is a root in its
 *                         root call; else a new part of the request on
 *                         this node (its own R and budget)
 *   root return in P      of own[P] (P may have taken messages of other
 *                         requests meanwhile); at the outermost return
 *                         P no longer works for it
 *
 * Each request has its own event count and start time: an event past
 * `events' or more than `ms' after the request's start is not written
 * and counted (request_events, request_ms), and the first such event of
 * a request writes an annotation event `follow_cut' ({events, N} or
 * {ms, T}) about the request's first process.  An event of no request
 * (a process that still holds the label after its request ended) is not
 * written and not a loss (outside).
 *
 * Bounded memory, allocated when the session starts: `requests' request
 * slots, taken in turn (a slot is taken by a new request when the
 * request in it has left its root call or is older than `ms'; none free
 * among the next 64 in turn: the new request is refused, counted; the
 * slots in turn hold the oldest requests), 8 process entries and 16 message
 * entries per request slot (an entry whose request has left the table is
 * reused; no room: counted as request_table).  No lock, no allocation:
 * atomics only, any scheduler thread.
 */
#ifndef BP_FOLLOW_H
#define BP_FOLLOW_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

struct bp_session;
struct ev_ctx;

#define BP_FOLLOW_MAX_REQUESTS 16384

struct bp_follow_req {
	_Atomic uint64_t id;    /* handle of the request here; 0 never
				   used, ~0 being set up */
	_Atomic uint64_t start; /* ns: its root call (or first receive) */
	_Atomic uint64_t used;  /* its events so far (written or cut) */
	_Atomic uint64_t root;  /* key of its first process */
	_Atomic uint32_t open;  /* root calls of it not yet returned */
	_Atomic uint32_t cut;   /* its first cut was marked */
};

struct bp_follow_ent {
	_Atomic uint64_t key; /* 0 empty, ~0 being written */
	_Atomic uint64_t req; /* request handle */
	_Atomic uint64_t own; /* a process's: the request it is the root of
				 (in its root call); a message's: 0 */
};

/* Counters: per cause, padded (many threads). */
enum bp_follow_count {
	BP_FC_STARTED,   /* requests (and parts) started */
	BP_FC_CUT,       /* requests cut (events or ms) */
	BP_FC_REFUSED,   /* root calls refused: no free request slot */
	BP_FC_EVENTS,    /* events past a request's events budget */
	BP_FC_MS,        /* events past a request's ms budget */
	BP_FC_TABLE,     /* events lost to a full table or an evicted request */
	BP_FC_OUTSIDE,   /* labelled events of no request (not written) */
	BP_FC_LABELLED,  /* root calls not followed: the caller's seq_trace
			    token was its own (the application's label) */
	BP_FC_COUNT
};

/* A follow session's seq_trace label (src/beamprobe_follow.erl, label/2):
 * a small integer, never a boxed term.  OTP 25's match spec action
 * {set_seq_token, label, {const, L}} stores a pointer to L in the match
 * spec's own heap in the caller's token without copying it: once the root
 * pattern was removed and its match spec freed, a process labelled just
 * before sent a token whose label was freed memory (the VM crashed
 * copying it: "eheap_alloc: Cannot allocate 17 TB").  Bits 48-57 mark the
 * label as beamprobe's, bits 24-47 are a hash of the node's name, bits
 * 0-23 the session's serial on that node. */
#define BP_FOLLOW_LABEL_MAGIC 0x2DFull

static inline int bp_follow_is_label(uint64_t l)
{
	return (l >> 48) == BP_FOLLOW_LABEL_MAGIC;
}

struct bp_follow {
	uint64_t label;  /* this session's seq_trace label */
	uint64_t events; /* per-request event budget */
	uint64_t ms_ns;  /* per-request time budget */
	uint32_t nreqs, nprocs, nmsgs; /* powers of two */
	struct bp_follow_req *reqs;
	struct bp_follow_ent *procs, *msgs;
	char pad0[64];
	_Atomic uint64_t cursor; /* next request slot to try */
	char pad1[64];
	_Atomic uint64_t seq;    /* request numbers */
	char pad2[64];
	struct {
		_Atomic uint64_t v;
		char pad[56];
	} count[BP_FC_COUNT];
};

/* Allocates the tables: events >= 1, ms >= 1, requests in 1..
 * BP_FOLLOW_MAX_REQUESTS (rounded up to a power of two).  NULL if out of
 * memory.  Control context. */
struct bp_follow *bp_follow_new(uint64_t events, uint64_t ms,
				uint32_t requests);
void bp_follow_free(struct bp_follow *f);

/* A call, return_from or exception_from event of a follow session
 * (argv as trace/5's): written if its request's budget allows. */
void bp_follow_call(ErlNifEnv *env, struct bp_session *s,
		    const ERL_NIF_TERM argv[], struct ev_ctx *c);

/* A seq_trace event of a follow session: trace(seq_trace, Session,
 * Label, {send | 'receive', {Previous, Serial}, From, To, Message},
 * Opts), called in the sender (send) or the receiver (receive). */
void bp_follow_seq(ErlNifEnv *env, struct bp_session *s,
		   const ERL_NIF_TERM argv[], struct ev_ctx *c);

static inline uint64_t bp_follow_count(const struct bp_follow *f,
				       enum bp_follow_count i)
{
	return atomic_load_explicit(&f->count[i].v, memory_order_relaxed);
}

#endif /* BP_FOLLOW_H */
