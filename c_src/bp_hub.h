/* bp_hub.h -- the hub: the one tracer state of every process traced by
 * beamprobe's sessions, and the routing of each event to the sessions
 * that asked for it.
 *
 * On OTP 25 a process has one tracer.  Every session sets its process
 * flags with the tracer {tracer, beamprobe_nif, beamprobe_hub} (an atom:
 * no resource lookup per event); the hub holds up to BP_HUB_MAX (256)
 * members, as many as the highest max_sessions a test uses,
 * each a session (a resource reference held while it is a member) and
 * its filter: the event kinds it records, the processes it includes and
 * the functions it traces.  A producer enters the hub, and writes the
 * event into every member whose filter accepts it (bp_dispatch.c).
 *
 * Threads and contexts:
 *   producers  tracer callbacks, any scheduler thread (normal or dirty):
 *              bp_hub_enter/bp_hub_leave around the walk of the members.
 *   control    bp_hub_add/bp_hub_remove from the janitor and session
 *              processes (NIF calls), serialised by a mutex.
 *
 * Removal protocol (Dekker, as the session stop protocol): a producer
 * sets its thread's busy flag and then reads the live mask; remove clears
 * the member's bit (seq_cst), then waits until every busy flag is 0 (the
 * barriers between store and load are asymmetric, bp_membar.h): after
 * that no producer can still use the member, and its reference is
 * released.  A session's own stop protocol
 * (bp_session.h) also waits on these flags, so a producer inside the hub
 * needs no second busy flag per session.
 */
#ifndef BP_HUB_H
#define BP_HUB_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

#include "bp_membar.h"
#include "bp_session.h"

#define BP_HUB_WORDS 4
#define BP_HUB_MAX (64 * BP_HUB_WORDS)

/* Event kinds (a member's `kinds' mask). */
enum {
	BP_HK_CALL = 1u << 0,
	BP_HK_RETURN_TO = 1u << 1,
	BP_HK_SEND = 1u << 2,
	BP_HK_RECEIVE = 1u << 3,
	BP_HK_PROCS = 1u << 4,
	BP_HK_PORTS = 1u << 5,
	BP_HK_RUNNING = 1u << 6,
	BP_HK_GC = 1u << 7,
	BP_HK_META = 1u << 8, /* calls of its meta patterns (any process) */
};

/* Which processes a member includes. */
enum bp_hub_procs {
	BP_HP_ALL = 0,  /* every process and port */
	BP_HP_LIST,     /* the pids in `set' */
	BP_HP_EXISTING, /* the pids and ports in `set' (alive at start) */
	BP_HP_NEW,      /* any pid or port NOT in `set' (alive at start) */
};

/* A call pattern; a wildcard field matches anything. */
struct bp_hub_pat {
	uint64_t m, f; /* atom words */
	uint32_t arity;
	uint8_t wild; /* 1: m, 2: f, 4: arity */
};

struct bp_hub_member {
	struct bp_session *s; /* a resource reference is held */
	/* Render class: members of one class render every event into the
	 * same record (args mode, return/exception/call-info flags, capture
	 * limits), so a record written for one is copied into the others
	 * (bp_copy.h).  Numbered from 1 at bp_hub_add, never reused. */
	uint32_t render;
	uint32_t kinds;
	uint8_t procs; /* enum bp_hub_procs */
	uint32_t set_mask; /* open addressing table of set_mask + 1 words */
	uint64_t *set;     /* 0: empty entry */
	uint32_t nfew;     /* sets of up to BP_HUB_FEW pids: in few[] instead */
	uint64_t few[4];
	uint32_t npats;
	struct bp_hub_pat *pats;
};

struct bp_hub_busy {
	_Atomic uint32_t busy;
	char pad[60];
};

struct bp_hub {
	/* bit i % 64 of word i / 64: members[i] is in use.  Producers read
	 * words 0..nwords-1 (nwords only grows, under the control mutex). */
	_Atomic uint64_t live[BP_HUB_WORDS];
	_Atomic uint32_t nwords;
	/* Installed combined match specs (their calls carry a route in
	 * match_spec_result, beamprobe_combine.erl); 0: no call looks for
	 * one.  Set by the janitor before it installs them, cleared after it
	 * removes the last. */
	_Atomic uint32_t routes;
	struct bp_hub_member *_Atomic members[BP_HUB_MAX];
	struct bp_hub_busy busy[BP_MAX_SLOTS];
};

/* The one hub of the library (static data: survives reloads of the
 * library from the same file, which stays mapped, bp_restype.c). */
extern struct bp_hub bp_hub;

/* Creates the control mutex (load()).  0 or -1. */
int bp_hub_init(void);

/* Sets bp_atom.bp_route and bp_atom.bp_route_ret, the tags of the routes
 * in combined match specs (beamprobe_combine.erl), to `bp_route_<salt>'
 * and `bp_route_ret_<salt>', the salt drawn at random at the first load:
 * the tracer takes a match-spec result for a route only with these tags,
 * which no traced term carries (a session's `message' action sending an
 * argument shaped like a route would otherwise route its calls into
 * other sessions).  load(), after the atoms. */
void bp_hub_route_atoms(ErlNifEnv *env);

/* Makes s a member with the filter in map `spec' (see beamprobe_nif:
 * hub_add/2).  Returns the member number, or -1 when the hub is full and
 * -2 when the spec is malformed.  Control context. */
int bp_hub_add(ErlNifEnv *env, struct bp_session *s, ERL_NIF_TERM spec);

/* Removes member i (if it is one) and releases its session once no
 * producer can use it.  Control context (waits for producers). */
void bp_hub_remove(int i);

/* Holds members[] still (no add or remove meanwhile).  Control context. */
void bp_hub_lock(void);
void bp_hub_unlock(void);

/* Waits until no producer is inside the hub.  Any non-producer thread. */
void bp_hub_quiesce(void);

/* The same after the caller has run bp_membar_sync() itself, since it
 * stored what producers must see (bp_session_quiesce). */
void bp_hub_wait_idle(void);

/* Enters the hub: copies the live masks into live[] and returns the
 * number of words to walk (0: no member, then no leave).  `idx' receives
 * the thread's slot.  Producer context. */
static inline uint32_t bp_hub_enter(int *idx, uint64_t live[BP_HUB_WORDS])
{
	int i = bp_thread_slot();
	uint32_t n, any = 0;

	if (__builtin_expect(i < 0, 0))
		return 0; /* no slot: the sessions count nothing (rare) */
	bp_membar_busy(&bp_hub.busy[i].busy);
	n = atomic_load_explicit(&bp_hub.nwords, memory_order_relaxed);
	for (uint32_t w = 0; w < n; w++) {
		live[w] = atomic_load_explicit(&bp_hub.live[w],
					       memory_order_seq_cst);
		any |= live[w] != 0;
	}
	if (!any) {
		atomic_store_explicit(&bp_hub.busy[i].busy, 0,
				      memory_order_release);
		return 0;
	}
	*idx = i;
	return n;
}

/* Is any member live?  Any thread. */
static inline int bp_hub_any(void)
{
	uint32_t n = atomic_load_explicit(&bp_hub.nwords, memory_order_relaxed);

	for (uint32_t w = 0; w < n; w++)
		if (atomic_load_explicit(&bp_hub.live[w], memory_order_relaxed))
			return 1;
	return 0;
}

static inline void bp_hub_leave(int idx)
{
	atomic_store_explicit(&bp_hub.busy[idx].busy, 0,
			      memory_order_release);
}

#define BP_HUB_FEW 4

static inline int bp_hub_in_set(const struct bp_hub_member *m, uint64_t key)
{
	uint64_t h;

	if (!m->set) {
		/* A few pids (procs => [P]): compared in place, no table. */
		for (uint32_t i = 0; i < m->nfew; i++)
			if (m->few[i] == key)
				return 1;
		return 0;
	}
	h = (key * 0x9E3779B97F4A7C15ull) >> 20;
	for (uint32_t n = 0; n <= m->set_mask; n++, h++) {
		uint64_t v = m->set[h & m->set_mask];
		if (v == key)
			return 1;
		if (!v)
			return 0;
	}
	return 0;
}

/* Does member m include the process or port with term word `key'? */
static inline int bp_hub_includes(const struct bp_hub_member *m, uint64_t key)
{
	switch (m->procs) {
	case BP_HP_ALL: return 1;
	case BP_HP_NEW: return !bp_hub_in_set(m, key);
	default: return bp_hub_in_set(m, key);
	}
}

/* Does member m trace function {mw, fw, arity} (atom words)? */
static inline int bp_hub_traces(const struct bp_hub_member *m, uint64_t mw,
				uint64_t fw, uint32_t arity)
{
	for (uint32_t i = 0; i < m->npats; i++) {
		const struct bp_hub_pat *p = &m->pats[i];
		if (((p->wild & 1) || p->m == mw) &&
		    ((p->wild & 2) || p->f == fw) &&
		    ((p->wild & 4) || p->arity == arity))
			return 1;
	}
	return 0;
}

#endif /* BP_HUB_H */
