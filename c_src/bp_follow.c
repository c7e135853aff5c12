/* bp_follow.c -- the per-request budget of a follow session: see
 * bp_follow.h.  Producer context (bp_tracer.c's rules: no lock, no
 * malloc, no enif_make_*), but for bp_follow_new/free.
 *
 * Who writes what: a process's entry in `procs' is written only in that
 * process's own context (its root call, its receives), so one writer per
 * key; an entry is claimed (CAS to BUSY, then its request, then its key)
 * by the process it is for, from an empty entry or one whose request has
 * left the table.  A message's entry is put by its sender and taken out
 * (key back to 0) by its receiver.  Readers check the key again after
 * reading the request, so an entry reclaimed meanwhile reads as absent.
 */
#include <stdio.h>
#include <string.h>

#include "bp_atoms.h"
#include "bp_clock.h"
#include "bp_follow.h"
#include "bp_session.h"
#include "bp_tracer.h"

#define BUSY (~(uint64_t)0)
#define PROBE 16     /* entries looked at for one key */
#define REQ_PROBE 64 /* request slots tried for a new request */
#define PROCS_PER_REQ 8
#define MSGS_PER_REQ 16

static inline void count(struct bp_follow *f, enum bp_follow_count i)
{
	atomic_fetch_add_explicit(&f->count[i].v, 1, memory_order_relaxed);
}

/* A labelled event placed in no request, not written.  Once the tables
 * have been full (a process or message not held), such an event may be
 * what followed the one not held -- the receive of a message not
 * remembered, what that process did next -- so from then on it counts as
 * the table's loss, not as outside: the count errs towards loss. */
static inline void outside(struct bp_follow *f)
{
	count(f, atomic_load_explicit(&f->count[BP_FC_TABLE].v,
				      memory_order_relaxed)
			 ? BP_FC_TABLE
			 : BP_FC_OUTSIDE);
}

static uint32_t pow2(uint64_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

struct bp_follow *bp_follow_new(uint64_t events, uint64_t ms,
				uint32_t requests)
{
	struct bp_follow *f;

	if (events < 1 || ms < 1 || requests < 1 ||
	    requests > BP_FOLLOW_MAX_REQUESTS)
		return NULL;
	f = enif_alloc(sizeof *f);
	if (!f)
		return NULL;
	memset(f, 0, sizeof *f);
	f->events = events;
	f->ms_ns = ms * 1000000ull;
	f->nreqs = pow2(requests);
	f->nprocs = f->nreqs * PROCS_PER_REQ;
	f->nmsgs = f->nreqs * MSGS_PER_REQ;
	f->reqs = enif_alloc(sizeof *f->reqs * f->nreqs);
	f->procs = enif_alloc(sizeof *f->procs * f->nprocs);
	f->msgs = enif_alloc(sizeof *f->msgs * f->nmsgs);
	if (!f->reqs || !f->procs || !f->msgs) {
		bp_follow_free(f);
		return NULL;
	}
	memset(f->reqs, 0, sizeof *f->reqs * f->nreqs);
	memset(f->procs, 0, sizeof *f->procs * f->nprocs);
	memset(f->msgs, 0, sizeof *f->msgs * f->nmsgs);
	return f;
}

void bp_follow_free(struct bp_follow *f)
{
	if (!f)
		return;
	if (f->reqs)
		enif_free(f->reqs);
	if (f->procs)
		enif_free(f->procs);
	if (f->msgs)
		enif_free(f->msgs);
	enif_free(f);
}

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* The key of message (sender key, serial): never 0 or BUSY. */
static inline uint64_t msg_key(uint64_t pid, uint64_t serial)
{
	uint64_t k = mix(pid * 0x9E3779B97F4A7C15ull ^ serial) | 1;

	return k == BUSY ? 1 : k;
}

static inline struct bp_follow_req *req_of(struct bp_follow *f, uint64_t h)
{
	return &f->reqs[h & (f->nreqs - 1)];
}

/* Is request h still in the table? */
static inline int live(struct bp_follow *f, uint64_t h)
{
	return h && atomic_load(&req_of(f, h)->id) == h;
}

/* Request of an entry's key k in table t (n entries), 0 if none. */
static uint64_t ent_get(struct bp_follow_ent *t, uint32_t n, uint64_t k,
			int take)
{
	uint32_t i = (uint32_t)mix(k) & (n - 1);

	for (int p = 0; p < PROBE; p++, i = (i + 1) & (n - 1)) {
		struct bp_follow_ent *e = &t[i];
		uint64_t h;

		if (atomic_load(&e->key) != k)
			continue;
		h = atomic_load(&e->req);
		if (atomic_load(&e->key) != k)
			return 0; /* reclaimed meanwhile */
		if (take) {
			uint64_t kk = k;
			if (!atomic_compare_exchange_strong(&e->key, &kk, 0))
				return 0;
		}
		return h;
	}
	return 0;
}

/* Sets k -> h in table t: k's entry, else an empty one or one whose
 * request has left the table (fresh: k has no entry yet).  0 if none
 * within the probe. */
static int ent_put(struct bp_follow *f, struct bp_follow_ent *t, uint32_t n,
		   uint64_t k, uint64_t h, int fresh)
{
	uint32_t i0 = (uint32_t)mix(k) & (n - 1), i = i0;

	/* k's entry first (unless k is new: a message's): only k's writer
	 * puts k, so there is at most one. */
	for (int p = 0; p < PROBE && !fresh; p++, i = (i + 1) & (n - 1))
		if (atomic_load(&t[i].key) == k) {
			atomic_store(&t[i].req, h);
			return 1;
		}
	i = i0;
	for (int p = 0; p < PROBE; p++, i = (i + 1) & (n - 1)) {
		struct bp_follow_ent *e = &t[i];
		uint64_t old = atomic_load(&e->key);

		if (old == BUSY || (old && (live(f, atomic_load(&e->req)) ||
					    live(f, atomic_load(&e->own)))))
			continue;
		if (!atomic_compare_exchange_strong(&e->key, &old, BUSY))
			continue;
		atomic_store(&e->req, h);
		atomic_store(&e->own, 0);
		atomic_store(&e->key, k);
		return 1;
	}
	return 0;
}

/* pid's entry in procs, NULL if none.  Only pid's own events use it. */
static struct bp_follow_ent *proc_ent(struct bp_follow *f, uint64_t pid)
{
	uint32_t i = (uint32_t)mix(pid) & (f->nprocs - 1);

	for (int p = 0; p < PROBE; p++, i = (i + 1) & (f->nprocs - 1))
		if (atomic_load(&f->procs[i].key) == pid)
			return &f->procs[i];
	return NULL;
}

/* The request pid is the root of, in its root call: 0 if none. */
static uint64_t own_get(struct bp_follow *f, uint64_t pid)
{
	struct bp_follow_ent *e = proc_ent(f, pid);
	uint64_t h = e ? atomic_load(&e->own) : 0;

	if (!e || atomic_load(&e->key) != pid || !live(f, h) ||
	    atomic_load(&req_of(f, h)->root) != pid ||
	    !atomic_load(&req_of(f, h)->open))
		return 0;
	return h;
}

static inline uint64_t proc_get(struct bp_follow *f, uint64_t pid)
{
	return ent_get(f->procs, f->nprocs, pid, 0);
}

/* proc[pid] = h (h 0: works for no request); with own, pid is h's
 * root.  Counts a full table. */
static void proc_set(struct bp_follow *f, uint64_t pid, uint64_t h, int own)
{
	struct bp_follow_ent *e;

	if (!h) {
		if ((e = proc_ent(f, pid)))
			atomic_store(&e->req, 0);
		return;
	}
	if (!ent_put(f, f->procs, f->nprocs, pid, h, 0)) {
		count(f, BP_FC_TABLE);
		return;
	}
	if (own && (e = proc_ent(f, pid)))
		atomic_store(&e->own, h);
}

/* A new request whose first process is pid, started at now: its handle,
 * or 0 if every slot tried holds a request in its root call and younger
 * than ms (counted). */
static uint64_t new_request(struct bp_follow *f, uint64_t pid, uint64_t now,
			    int open)
{
	uint32_t tries = f->nreqs < REQ_PROBE ? f->nreqs : REQ_PROBE;

	for (uint32_t t = 0; t < tries; t++) {
		uint64_t c = atomic_fetch_add(&f->cursor, 1);
		struct bp_follow_req *r = &f->reqs[c & (f->nreqs - 1)];
		uint64_t id = atomic_load(&r->id), h;

		if (id == BUSY) /* being set up by another thread */
			continue;
		/* (start may be later than now: set by another thread.) */
		if (id && atomic_load(&r->open) &&
		    now < atomic_load(&r->start) + f->ms_ns)
			continue; /* in its root call, within its time */
		if (!atomic_compare_exchange_strong(&r->id, &id, BUSY))
			continue;
		h = ((atomic_fetch_add(&f->seq, 1) + 1) << 16) |
		    (c & (f->nreqs - 1));
		atomic_store(&r->start, now);
		atomic_store(&r->used, 0);
		atomic_store(&r->root, pid);
		atomic_store(&r->open, (uint32_t)open);
		atomic_store(&r->cut, 0);
		atomic_store(&r->id, h);
		count(f, BP_FC_STARTED);
		return h;
	}
	count(f, BP_FC_REFUSED);
	return 0;
}

/* Takes one event of request h at now: 1 to write it, 0 if it is past the
 * request's budget or the request has left the table (counted; the first
 * cut of a request is marked in the trace). */
static int take(ErlNifEnv *env, struct bp_session *s, struct bp_follow *f,
		uint64_t h, uint64_t now, struct ev_ctx *c)
{
	struct bp_follow_req *r = req_of(f, h);
	uint64_t start = atomic_load(&r->start), n;
	uint32_t zero = 0;
	char text[48];
	int why;

	if (atomic_load(&r->id) != h) {
		count(f, BP_FC_TABLE);
		return 0;
	}
	if (now > start && now - start > f->ms_ns) {
		why = BP_FC_MS;
	} else {
		n = atomic_fetch_add(&r->used, 1);
		if (n < f->events)
			return 1;
		why = BP_FC_EVENTS;
	}
	count(f, (enum bp_follow_count)why);
	if (atomic_compare_exchange_strong(&r->cut, &zero, 1)) {
		count(f, BP_FC_CUT);
		if (why == BP_FC_MS)
			snprintf(text, sizeof text, "{ms,%llu}",
				 (unsigned long long)(f->ms_ns / 1000000));
		else
			snprintf(text, sizeof text, "{events,%llu}",
				 (unsigned long long)f->events);
		bp_tracer_write_cut(env, s, atomic_load(&r->root), text, c);
	}
	return 0;
}

/* The key of a process on another node (or a name): its hash. */
static inline uint64_t remote_key(ERL_NIF_TERM t)
{
	return enif_hash(ERL_NIF_INTERNAL_HASH, t, 0x6270666f6c6c6f77ull) |
	       2;
}

static inline uint64_t local_pid(ErlNifEnv *env, ERL_NIF_TERM t)
{
	ErlNifPid p;

	return enif_get_local_pid(env, t, &p) ? (uint64_t)t : 0;
}

/* A root call whose match spec said the caller's label is its own. */
static int is_labelled(ErlNifEnv *env, ERL_NIF_TERM opts)
{
	int found;
	ERL_NIF_TERM r = bp_tracer_opt(env, opts, bp_atom.match_spec_result,
				       &found);

	return found && r == bp_atom.beamprobe_follow_labelled;
}

void bp_follow_call(ErlNifEnv *env, struct bp_session *s,
		    const ERL_NIF_TERM argv[], struct ev_ctx *c)
{
	struct bp_follow *f = s->follow;
	uint64_t pid = local_pid(env, argv[2]), now = bp_now(), h;
	struct bp_follow_req *r;

	if (!pid)
		return;
	/* The request pid is the root of, in its root call (it may have
	 * taken messages of other requests meanwhile). */
	h = own_get(f, pid);
	r = req_of(f, h);
	if (argv[0] == bp_atom.call) {
		/* The caller's seq_trace token is the application's: the
		 * root's match spec left it alone (beamprobe_follow,
		 * root_ms/1) and the call is not followed.  (Nor is its
		 * return traced: no event here, no count.) */
		if (!h && is_labelled(env, argv[4])) {
			count(f, BP_FC_LABELLED);
			return;
		}
		if (h) {
			/* A root call inside its own root call: the same
			 * request. */
			atomic_fetch_add(&r->open, 1);
		} else {
			h = new_request(f, pid, now, 1);
			proc_set(f, pid, h, 1);
			if (!h)
				return;
		}
		if (take(env, s, f, h, now, c))
			bp_tracer_write_call(env, s, argv, 0, c);
		return;
	}
	if (argv[0] != bp_atom.return_from &&
	    argv[0] != bp_atom.exception_from)
		return;
	if (!h) {
		outside(f);
		return;
	}
	if (take(env, s, f, h, now, c))
		bp_tracer_write_call(env, s, argv, 0, c);
	/* The root call has returned: the root works for it no more. */
	if (atomic_fetch_sub(&r->open, 1) == 1) {
		struct bp_follow_ent *e = proc_ent(f, pid);
		if (e && atomic_load(&e->req) == h)
			atomic_store(&e->req, 0);
		if (e)
			atomic_store(&e->own, 0);
	}
}

/* A serial of a seq_trace event: Lamport clocks carried by every
 * labelled message (a process takes the largest it sees, so one far
 * ahead spreads), small integers that wrap: seen negative on OTP 25.2.3
 * (the suite's second follow session).  Any 64-bit value, compared for
 * equality only. */
static int serial_of(ErlNifEnv *env, ERL_NIF_TERM t, uint64_t *v)
{
	ErlNifSInt64 i;
	ErlNifUInt64 u;

	if (enif_get_int64(env, t, &i)) {
		*v = (uint64_t)i;
		return 1;
	}
	if (enif_get_uint64(env, t, &u)) {
		*v = u;
		return 1;
	}
	return 0;
}

/* Is a seq_trace label this session's?  A cluster follow session gives
 * every node's session the same label (src/beamprobe_cluster.erl), so a
 * request that came from another node of the session carries it too.
 * The application's own labels, other tools', and those an earlier or
 * unrelated follow session (of this node or another) left in a
 * process's token are none of ours: not recorded, and not new requests
 * (before, any other node's follow label was taken). */
static int our_label(ErlNifEnv *env, struct bp_session *s, ERL_NIF_TERM l)
{
	ErlNifUInt64 v;

	return enif_get_uint64(env, l, &v) && v == s->follow->label;
}

void bp_follow_seq(ErlNifEnv *env, struct bp_session *s,
		   const ERL_NIF_TERM argv[], struct ev_ctx *c)
{
	struct bp_follow *f = s->follow;
	const ERL_NIF_TERM *info, *ser;
	uint64_t prev, serial;
	uint64_t from, to, now, h;
	int n;

	if (!our_label(env, s, argv[2]) ||
	    !enif_get_tuple(env, argv[3], &n, &info) || n != 5 ||
	    !enif_get_tuple(env, info[1], &n, &ser) || n != 2 ||
	    !serial_of(env, ser[0], &prev) || !serial_of(env, ser[1], &serial))
		return;
	from = local_pid(env, info[2]);
	to = local_pid(env, info[3]);
	now = bp_now();
	if (info[0] == bp_atom.send) {
		if (!from)
			return;
		h = proc_get(f, from);
		if (!h) {
			outside(f);
			return;
		}
		/* To another node: keyed by the receiver, whose first send
		 * after taking it names this serial as its previous one. */
		if (!ent_put(f, f->msgs, f->nmsgs,
			     msg_key(to ? from : remote_key(info[3]), serial), h,
			     1))
			count(f, BP_FC_TABLE); /* its receive will be outside */
		if (take(env, s, f, h, now, c))
			bp_tracer_write_msg(env, s, 1, info[2], info[3],
					    info[4], c);
		return;
	}
	if (info[0] != bp_atom.receive || !to)
		return;
	if (from) {
		/* Of the request its send was of; a message of no request
		 * taken by a root in its root call: of the root's. */
		h = ent_get(f->msgs, f->nmsgs, msg_key(from, serial), 1);
		if (!h)
			h = own_get(f, to);
	} else {
		/* From another node: the sender's first send after taking a
		 * message this node sent for a request belongs to it; else,
		 * to a root in its root call, to its request; else a new
		 * part of the request on this node. */
		h = ent_get(f->msgs, f->nmsgs,
			    msg_key(remote_key(info[2]), prev), 1);
		if (!live(f, h)) {
			h = own_get(f, to);
			if (!h)
				h = new_request(f, to, now, 0);
		}
	}
	proc_set(f, to, h, 0); /* 0: it works for no request now */
	if (!h) {
		outside(f);
		return;
	}
	if (take(env, s, f, h, now, c))
		bp_tracer_write_msg(env, s, 0, info[3], info[2], info[4], c);
}
