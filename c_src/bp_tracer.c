/* bp_tracer.c -- writing one event into one session: the hot path's
 * second half (which sessions an event goes to: bp_dispatch.c).
 *
 * Every function here runs in the context of the traced process (or port),
 * on whichever scheduler thread it is on, normal or dirty, concurrently
 * with every other scheduler.  Rules: no lock, no malloc, no enif_send, no
 * enif_make_* (but the atoms made in load()), no copy of the trace term;
 * everything bounded by the session's capture limits.
 *
 * Each writer: enter the session (slot lookup, loss counting, stop
 * protocol; through the hub the producer's hub busy flag stands for the
 * session's), reserve a record in the thread's ring, encode the event in
 * place (layout: bp_format.h), commit, leave.  bp_tracer_copy_event
 * writes a record rendered for another session that renders the event the
 * same way.  A process (or port) seen for the first time by this thread
 * in this session gets a "process" event first, so readers can print
 * <0.123.0> for the 64-bit key carried by every event.
 *
 * trace_call/5 is deliberately NOT exported: OTP 25 calls a tracer's
 * trace_call/5 with three arguments for meta-trace events and the VM
 * crashes (../shared/notes/tracer-facts.md, section 0.6).  Call events
 * reach trace/5 instead (bp_dispatch.c), which dispatches on the tag, so
 * this module is safe both as a process tracer and as a meta tracer.
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "bp_atoms.h"
#include "bp_nif.h"
#include "bp_session.h"
#include "bp_term.h"
#include "bp_tracer.h"
#include "bp_copy.h"
#include "bp_erts_layout.h"
#include "bp_usdt.h"

#define MFA_MAX BP_MFA_MAX /* bp_tracer.h */
#define PID_TEXT_MAX 64

/* Key of a local pid or port: the VM's immediate term word for it (valid
 * in any environment while the entity lives); 0 for anything else --
 * remote pids and ports are boxed terms on some heap, whose words must
 * never be stored (the handler sink turns keys back into terms). */
static inline uint64_t local_key(ErlNifEnv *env, ERL_NIF_TERM t)
{
	ErlNifPid pid;
	ErlNifPort port;

	/* A local pid or port is an immediate (tag 0x3 or 0x7, erl_term.h;
	 * remote ones are boxed): no call into the VM on a known layout. */
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return (t & ERTS_IMMED1_MASK) == ERTS_IMMED1_PID ||
			       (t & ERTS_IMMED1_MASK) == ERTS_IMMED1_PORT
			       ? (uint64_t)t
			       : 0;
	if (enif_get_local_pid(env, t, &pid) ||
	    enif_get_local_port(env, t, &port))
		return (uint64_t)t;
	return 0;
}

/* Text limit for one rendered term, NUL included. */
static inline uint32_t text_max(const struct bp_session *s)
{
	return s->capture.bytes + 1;
}

/*
 * The typed writers: an event is written field by field through `struct
 * wr', one writer per field kind of the schema (bp_format.h), so that a
 * PID field can only be written from a term, as a local key or 0.  Built
 * with -DBP_SCHEMA_CHECK (the test build of the NIF), every writer checks
 * that the field at the current position has its kind, and wr_end that
 * every field was written; in the release build `struct wr' is just the
 * write pointer and the checks compile to nothing.
 */
struct wr {
	uint8_t *p;
#ifdef BP_SCHEMA_CHECK
	uint16_t id;
	unsigned f;
#endif
};

#ifdef BP_SCHEMA_CHECK
#include <assert.h>
static void wr_want(struct wr *w, enum bp_field_kind k)
{
	const struct bp_event_desc *d = &bp_event_descs[w->id];

	assert(w->f < d->nfields && d->fields[w->f].kind == k);
	w->f++;
}
#else
#define wr_want(w, k) ((void)0)
#endif

static inline void wr_cstr(struct wr *w, enum bp_field_kind k, const char *str)
{
	size_t n = strlen(str) + 1;

	wr_want(w, k);
	memcpy(w->p, str, n);
	w->p += n;
}

/* Absent values are written as the atom undefined, never as "": babeltrace2
 * 2.0.4 prints a stale value for an empty string field (docs/format.md). */
static inline void wr_undefined(struct wr *w, enum bp_field_kind k)
{
	wr_want(w, k);
	memcpy(w->p, "undefined", 10);
	w->p += 10;
}

/* PID: the other party of a send, link, spawn or port open. */
static inline void wr_pid(ErlNifEnv *env, struct wr *w, ERL_NIF_TERM t)
{
	wr_want(w, BP_K_PID);
	bp_put_u64(w->p, local_key(env, t));
	w->p += 8;
}

static inline void wr_u8(struct wr *w, uint8_t v)
{
	wr_want(w, BP_K_U8);
	*w->p++ = v;
}

static inline void wr_u64(struct wr *w, uint64_t v)
{
	wr_want(w, BP_K_U64);
	bp_put_u64(w->p, v);
	w->p += 8;
}

/* TERM: needs text_max(s) bytes. */
static inline void wr_term(ErlNifEnv *env, const struct bp_session *s,
			   struct bp_slot *sl, struct wr *w, ERL_NIF_TERM t)
{
	wr_want(w, BP_K_TERM);
	w->p += bp_term_render_cached(env, t, &s->capture, (char *)w->p,
				      text_max(s), &sl->terms) + 1;
}

/* ATOM (undefined if t is not one): needs MFA_MAX bytes, enough for any
 * atom (255 characters, each escaped to at most 4 bytes, and quotes). */
static inline void wr_atom(ErlNifEnv *env, struct bp_slot *sl, struct wr *w,
			   ERL_NIF_TERM t)
{
	size_t n = bp_term_render_atom_cached(env, t, (char *)w->p, MFA_MAX,
					      &sl->terms);

	if (!n) {
		wr_undefined(w, BP_K_ATOM);
		return;
	}
	wr_want(w, BP_K_ATOM);
	w->p[n] = '\0';
	w->p += n + 1;
}

/* ARGS: "(a, b)" from a list; needs text_max(s) bytes. */
static inline void wr_args(ErlNifEnv *env, const struct bp_session *s,
			   struct bp_slot *sl, struct wr *w, ERL_NIF_TERM list)
{
	wr_want(w, BP_K_ARGS);
	w->p += bp_term_render_args_cached(env, list, &s->capture,
					   (char *)w->p, text_max(s),
					   &sl->terms) + 1;
}

void bp_mfa_decode(ErlNifEnv *env, ERL_NIF_TERM mfa, struct bp_mfa *d)
{
	int n;
	int64_t v;

	d->arity = 0;
	if ((!bp_erts_tuple(mfa, &n, &d->e) &&
	     !enif_get_tuple(env, mfa, &n, &d->e)) || n != 3) {
		d->state = -1;
		return;
	}
	d->state = 1;
	if (bp_erts_small(d->e[2], &v))
		d->arity = v >= 0 && v <= (int64_t)UINT32_MAX ? (unsigned)v : 0;
	else if (!enif_get_uint(env, d->e[2], &d->arity))
		enif_get_list_length(env, d->e[2], &d->arity);
}

/* The cache miss of wr_mfa: renders d's "m:f/arity" at w and keeps it in
 * entry c when it fits. */
static void wr_mfa_render(ErlNifEnv *env, struct wr *w,
			  const struct bp_mfa *d, struct bp_mfa_entry *c)
{
	uint8_t *p = w->p;
	size_t len = bp_term_render_mfa(env, d->e[0], d->e[1], d->arity,
					(char *)p, MFA_MAX);

	if (!len) { /* cannot happen for atoms; no half text */
		memcpy(p, "undefined", 10);
		w->p = p + 10;
		return;
	}
	p[len] = '\0';
	if (len < BP_MFA_TEXT) {
		c->m = (uint64_t)d->e[0];
		c->f = (uint64_t)d->e[1];
		c->arity = d->arity;
		memcpy(c->text, p, len + 1);
		c->len = (uint32_t)len;
	}
	w->p = p + len + 1;
}

/* MFA: "m:f/arity" from {M, F, Arity | Args} (undefined if it is not
 * one), decoded in d (or here if d has not been), through the slot's cache
 * of rendered texts.  Needs MFA_MAX. */
static inline void wr_mfa(ErlNifEnv *env, struct bp_slot *sl, struct wr *w,
			  ERL_NIF_TERM mfa, struct bp_mfa *d,
			  const ERL_NIF_TERM **elems_out)
{
	struct bp_mfa_entry *c;
	struct bp_mfa local;
	uint64_t h;

	if (!d)
		d = &local, d->state = 0;
	if (!d->state)
		bp_mfa_decode(env, mfa, d);
	if (d->state < 0) {
		wr_undefined(w, BP_K_MFA);
		return;
	}
	wr_want(w, BP_K_MFA);
	if (elems_out)
		*elems_out = d->e;
	h = ((uint64_t)d->e[0] * 0x9E3779B97F4A7C15ull) ^
	    ((uint64_t)d->e[1] >> 3) ^ d->arity;
	c = &sl->mfa[(h ^ (h >> 29)) % BP_MFA_CACHE];
	if (__builtin_expect(c->len && c->m == (uint64_t)d->e[0] &&
				     c->f == (uint64_t)d->e[1] &&
				     c->arity == d->arity,
			     1)) {
		/* A fixed-size copy for the usual short text (the record
		 * has room: MFA_MAX; bytes past the NUL are overwritten by
		 * the next field or lie past the record's end). */
		if (c->len < 32)
			memcpy(w->p, c->text, 32);
		else
			memcpy(w->p, c->text, c->len + 1);
		w->p += c->len + 1;
		return;
	}
	wr_mfa_render(env, w, d, c);
}

/* Starts event `id' about the entity with key `key' at start. */
static inline struct wr wr_begin(uint8_t *start, int id, uint64_t key)
{
	struct wr w;

	w.p = start + bp_ev_header(start, (uint16_t)id, bp_now(), key);
#ifdef BP_SCHEMA_CHECK
	w.id = (uint16_t)id;
	w.f = 0;
#endif
	return w;
}

/* Length of the finished event (every field written). */
static inline uint32_t wr_len(const struct wr *w, const uint8_t *start)
{
#ifdef BP_SCHEMA_CHECK
	assert(w->f == bp_event_descs[w->id].nfields);
#endif
	return (uint32_t)(w->p - start);
}

/* Ends an event: commits its bytes (and remembers them in c), fires its
 * USDT probe if the session has a usdt sink and a tool is attached. */
static inline void finish(ErlNifEnv *env, const struct bp_session *s,
			  ERL_NIF_TERM who, struct bp_slot *sl, uint8_t *start,
			  const struct wr *w, struct ev_ctx *c)
{
	uint32_t len = wr_len(w, start);

	bp_ring_commit(&sl->ring, len);
	c->rec = start;
	c->len = len;
	bp_usdt_event(env, s, who, start, len, c);
}

static inline void ev_leave(struct bp_slot *sl, const struct ev_ctx *c)
{
	if (!c->hub)
		bp_session_leave(sl);
}

/*
 * Writes a "process" event for key the first time this slot sees it.
 * Inside enter/leave.  A process event that does not fit is retried at the
 * entity's next event (it is not a user event, so not counted as a loss).
 */
void bp__tracer_note_entity_write(ErlNifEnv *env, struct bp_slot *sl,
				  ERL_NIF_TERM who, uint64_t key,
				  uint64_t *seen)
{
	uint8_t *start;
	struct wr w;
	int n;

	start = bp_ring_reserve(&sl->ring, BP_EVENT_HEADER_SIZE +
						   PID_TEXT_MAX + 20);
	if (!start)
		return;
	w = wr_begin(start, BP_EV_PROCESS, key);
	wr_want(&w, BP_K_TEXT);
	/* The %T text of a local pid or port, through the slot's cache and
	 * without the formatter for pids (bp_term.c). */
	n = (int)bp_term_render_cached(env, who, NULL, (char *)w.p,
				       PID_TEXT_MAX, &sl->terms);
	if (n <= 0 || w.p[n - 1] != '>')
		w.p[(n = 1) - 1] = '?'; /* cut: cannot happen for local */
	w.p[n] = '\0';
	w.p += n + 1;
	wr_undefined(&w, BP_K_ATOM); /* name: see beamprobe_session */
	wr_undefined(&w, BP_K_MFA);  /* initial call */
	bp_ring_commit_aux(&sl->ring, wr_len(&w, start));
	*seen = key;
	sl->ring.owner_word = key;
}

/* Common prologue: session, slot, entity; NULL if not to be written. */
static inline struct bp_slot *open_event(ErlNifEnv *env, struct bp_session *s,
					 ERL_NIF_TERM tracee, uint64_t *key,
					 const struct ev_ctx *c)
{
	struct bp_slot *sl = bp__session_enter(s, !c->hub);

	if (!sl)
		return NULL;
	/* The tracee is always a local pid or port (an immediate word) */
	*key = (uint64_t)tracee;
	bp_tracer_note_entity(env, sl, tracee, *key);
	return sl;
}


/*
 * A `stack' action's process dump, as "stack: m:f/1 <- m:g/3 <- ..." from
 * its "Return addr" lines, innermost caller first (at most 64 KiB
 * scanned).
 * Returns 0 if bin is not a process dump.
 */
static size_t render_stack(const ErlNifBinary *bin, char *out, size_t cap)
{
	static const char head[] = "stack:";
	const char *d = (const char *)bin->data;
	size_t n = bin->size < 65536 ? bin->size : 65536, len, i = 0;
	int frames = 0;

	if (n < 6 || memcmp(d, "=proc:", 6) != 0 || cap < sizeof head + 8)
		return 0;
	memcpy(out, head, sizeof head - 1);
	len = sizeof head - 1;
	while (i < n) {
		const char *line = d + i, *nl = memchr(line, '\n', n - i);
		size_t ll = nl ? (size_t)(nl - line) : n - i;
		i += ll + 1;
		/* Only return addresses: the dump's "Program counter" is
		 * where the process was last descheduled, stale while a
		 * match-spec action runs. */
		if (!memmem(line, ll, "Return addr", 11))
			continue;
		const char *open = memchr(line, '(', ll);
		const char *plus =
			open ? memmem(open, ll - (size_t)(open - line), " + ", 3)
			     : NULL;
		if (!open || !plus || plus - open < 2)
			continue;
		size_t fl = (size_t)(plus - open - 1);
		if (len + fl + 8 >= cap) {
			memcpy(out + len, " ...", 4);
			len += 4;
			break;
		}
		if (frames++) {
			memcpy(out + len, " <-", 3);
			len += 3;
		}
		out[len++] = ' ';
		memcpy(out + len, open + 1, fl);
		len += fl;
	}
	out[len] = '\0';
	return len;
}

/* A match-spec result (TERM): the caller {M,F,A}, a process dump (stack)
 * or both as {Caller, Dump}; anything else rendered as a term. */
static void wr_ms_result(ErlNifEnv *env, const struct bp_session *s,
			 struct bp_slot *sl, struct wr *w, ERL_NIF_TERM info)
{
	const ERL_NIF_TERM *e;
	ErlNifBinary bin;
	size_t n;
	int arity;
	char *out = (char *)w->p;

	if (enif_get_tuple(env, info, &arity, &e) && arity == 2 &&
	    enif_is_binary(env, e[1]) && enif_inspect_binary(env, e[1], &bin)) {
		n = bp_term_render(env, e[0], &s->capture, out, text_max(s));
		if (n + 16 < text_max(s)) {
			size_t k;
			out[n] = ' ';
			k = render_stack(&bin, out + n + 1, text_max(s) - n - 1);
			if (k)
				n += 1 + k;
			out[n] = '\0';
		}
		wr_want(w, BP_K_TERM);
		w->p += n + 1;
		return;
	}
	if (enif_is_binary(env, info) && enif_inspect_binary(env, info, &bin) &&
	    (n = render_stack(&bin, out, text_max(s)))) {
		wr_want(w, BP_K_TERM);
		w->p += n + 1;
		return;
	}
	wr_term(env, s, sl, w, info);
}

/* Call events: call, return_from, exception_from, return_to.  `routed':
 * the match-spec result is the hub's route, not call info. */
void bp_tracer_write_call(ErlNifEnv *env, struct bp_session *s,
			  const ERL_NIF_TERM argv[], int routed,
			  struct ev_ctx *c)
{
	ERL_NIF_TERM tag = argv[0];
	const ERL_NIF_TERM *e = NULL;
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;
	int found;

	if ((tag == bp_atom.return_from && !(s->flags & BP_F_RETURN)) ||
	    (tag == bp_atom.exception_from && !(s->flags & BP_F_EXCEPTIONS)))
		return; /* implied by exception_trace, not asked */
	if (!(sl = open_event(env, s, argv[2], &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE +
							MFA_MAX +
							3 * text_max(s))))
		goto out;
	if (tag == bp_atom.call) {
		ERL_NIF_TERM info;
		w = wr_begin(start, BP_EV_CALL, key);
		wr_mfa(env, sl, &w, argv[3], &c->mfa, &e);
		if (s->args_mode == BP_ARGS_FULL && e &&
		    bp_erts_is_list(env, e[2]))
			wr_args(env, s, sl, &w, e[2]);
		else
			wr_undefined(&w, BP_K_ARGS);
		found = 0;
		if ((s->flags & BP_F_MS_RESULT) && !routed)
			info = bp_tracer_opt(env, argv[4], bp_atom.match_spec_result,
				   &found);
		else if ((s->flags & BP_F_MS_RESULT) && c->has_info) {
			info = c->info; /* this member's part of the route */
			found = 1;
		}
		if (found) {
			wr_ms_result(env, s, sl, &w, info);
		} else {
			wr_cstr(&w, BP_K_TERM, "true");
		}
	} else if (tag == bp_atom.return_from) {
		w = wr_begin(start, BP_EV_RETURN_FROM, key);
		wr_mfa(env, sl, &w, argv[3], &c->mfa, NULL);
		wr_term(env, s, sl, &w, bp_tracer_opt(env, argv[4], bp_atom.extra, &found));
	} else if (tag == bp_atom.exception_from) {
		ERL_NIF_TERM x = bp_tracer_opt(env, argv[4], bp_atom.extra, &found);
		const ERL_NIF_TERM *cv;
		int n;
		w = wr_begin(start, BP_EV_EXCEPTION_FROM, key);
		wr_mfa(env, sl, &w, argv[3], &c->mfa, NULL);
		if (enif_get_tuple(env, x, &n, &cv) && n == 2) {
			wr_atom(env, sl, &w, cv[0]);
			wr_term(env, s, sl, &w, cv[1]);
		} else {
			wr_cstr(&w, BP_K_ATOM, "error");
			wr_term(env, s, sl, &w, x);
		}
	} else if (tag == bp_atom.return_to) {
		w = wr_begin(start, BP_EV_RETURN_TO, key);
		wr_mfa(env, sl, &w, argv[3], &c->mfa, NULL);
	} else {
		goto out; /* reservation dropped: nothing published */
	}
	finish(env, s, argv[2], sl, start, &w, c);
out:
	ev_leave(sl, c);
}

/* A send (id BP_EV_SEND or BP_EV_SEND_DEAD, to `to') or a receive
 * (BP_EV_RECEIVE) of msg by the tracee. */
static void write_msg(ErlNifEnv *env, struct bp_session *s, int id,
		      ERL_NIF_TERM tracee, ERL_NIF_TERM to, ERL_NIF_TERM msg,
		      struct ev_ctx *c)
{
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;

	if (!(sl = open_event(env, s, tracee, &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE + 8 +
							2 * text_max(s))))
		goto out;
	w = wr_begin(start, id, key);
	if (id != BP_EV_RECEIVE) {
		wr_pid(env, &w, to);
		wr_term(env, s, sl, &w, to);
	}
	wr_term(env, s, sl, &w, msg);
	finish(env, s, tracee, sl, start, &w, c);
out:
	ev_leave(sl, c);
}

void bp_tracer_write_message(ErlNifEnv *env, struct bp_session *s,
			     const ERL_NIF_TERM argv[], int is_send,
			     struct ev_ctx *c)
{
	int found;

	if (is_send)
		write_msg(env, s,
			  argv[0] == bp_atom.send ? BP_EV_SEND
						  : BP_EV_SEND_DEAD,
			  argv[2], bp_tracer_opt(env, argv[4], bp_atom.extra, &found),
			  argv[3], c);
	else
		write_msg(env, s, BP_EV_RECEIVE, argv[2], 0, argv[3], c);
}

void bp_tracer_write_msg(ErlNifEnv *env, struct bp_session *s, int is_send,
			 ERL_NIF_TERM tracee, ERL_NIF_TERM other,
			 ERL_NIF_TERM msg, struct ev_ctx *c)
{
	write_msg(env, s, is_send ? BP_EV_SEND : BP_EV_RECEIVE, tracee, other,
		  msg, c);
}

void bp_tracer_write_cut(ErlNifEnv *env, struct bp_session *s, uint64_t root,
			 const char *value, struct ev_ctx *c)
{
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;

	/* root is a local pid's term word (bp_follow.c). */
	if (!(sl = open_event(env, s, (ERL_NIF_TERM)root, &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE + 16 +
							strlen(value))))
		goto out;
	w = wr_begin(start, BP_EV_ANNOTATION, key);
	wr_cstr(&w, BP_K_TERM, "follow_cut");
	wr_cstr(&w, BP_K_TERM, value);
	finish(env, s, (ERL_NIF_TERM)root, sl, start, &w, c);
out:
	ev_leave(sl, c);
}

/* MFARGS: "m:f(args)" from {M, F, Args}, else the term.  Needs
 * 2 * MFA_MAX + text_max(s). */
static void wr_mfargs(ErlNifEnv *env, const struct bp_session *s,
		      struct bp_slot *sl, struct wr *w, ERL_NIF_TERM t)
{
	const ERL_NIF_TERM *e;
	size_t m, f;
	int n;
	char *q = (char *)w->p;

	wr_want(w, BP_K_MFARGS);
	if ((bp_erts_tuple(t, &n, &e) || enif_get_tuple(env, t, &n, &e)) &&
	    n == 3 &&
	    (m = bp_term_render_atom_cached(env, e[0], q, MFA_MAX,
					    &sl->terms)) &&
	    (f = bp_term_render_atom_cached(env, e[1], q + m + 1, MFA_MAX,
					    &sl->terms)) &&
	    bp_erts_is_list(env, e[2])) {
		q[m] = ':';
		q += m + 1 + f;
		w->p = (uint8_t *)q +
		       bp_term_render_args_cached(env, e[2], &s->capture, q,
						  text_max(s), &sl->terms) +
		       1;
		return;
	}
	w->p += bp_term_render_cached(env, t, &s->capture, (char *)w->p,
				      text_max(s), &sl->terms) + 1;
}

/* trace_procs/5 (and trace_ports/5 for the tags they share). */
void bp_tracer_write_procs_ports(ErlNifEnv *env, struct bp_session *s,
				 const ERL_NIF_TERM argv[], int unused,
				 struct ev_ctx *c)
{
	ERL_NIF_TERM tag = argv[0], term = argv[3];
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;
	int found, id;

	(void)unused;
	if (!(sl = open_event(env, s, argv[2], &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE + 8 +
							2 * MFA_MAX +
							2 * text_max(s))))
		goto out;
	if (tag == bp_atom.spawn || tag == bp_atom.spawned) {
		w = wr_begin(start,
			     tag == bp_atom.spawn ? BP_EV_SPAWN : BP_EV_SPAWNED,
			     key);
		wr_pid(env, &w, term);
		wr_term(env, s, sl, &w, term);
		wr_mfargs(env, s, sl, &w, bp_tracer_opt(env, argv[4], bp_atom.extra, &found));
	} else if (tag == bp_atom.exit) {
		w = wr_begin(start, BP_EV_EXIT, key);
		wr_term(env, s, sl, &w, term);
	} else if (tag == bp_atom.link || tag == bp_atom.unlink ||
		   tag == bp_atom.getting_linked ||
		   tag == bp_atom.getting_unlinked) {
		id = tag == bp_atom.link	     ? BP_EV_LINK
		     : tag == bp_atom.unlink	     ? BP_EV_UNLINK
		     : tag == bp_atom.getting_linked ? BP_EV_GETTING_LINKED
						     : BP_EV_GETTING_UNLINKED;
		w = wr_begin(start, id, key);
		wr_pid(env, &w, term);
		wr_term(env, s, sl, &w, term);
	} else if (tag == bp_atom.register_ || tag == bp_atom.unregister) {
		w = wr_begin(start,
			     tag == bp_atom.register_ ? BP_EV_REGISTER
						      : BP_EV_UNREGISTER,
			     key);
		wr_atom(env, sl, &w, term);
		/* the name for the usdt `process' probe */
		bp_usdt_name(key, tag == bp_atom.register_ ? term : 0);
	} else if (tag == bp_atom.open) {
		w = wr_begin(start, BP_EV_PORT_OPEN, key);
		wr_pid(env, &w, term);
		wr_term(env, s, sl, &w, term);
		wr_term(env, s, sl, &w, bp_tracer_opt(env, argv[4], bp_atom.extra, &found));
	} else if (tag == bp_atom.closed) {
		w = wr_begin(start, BP_EV_PORT_CLOSED, key);
		wr_term(env, s, sl, &w, term);
	} else {
		goto out;
	}
	finish(env, s, argv[2], sl, start, &w, c);
out:
	ev_leave(sl, c);
}

/* trace_running_procs/5: in, out, in_exiting, out_exiting, out_exited. */
void bp_tracer_write_running(ErlNifEnv *env, struct bp_session *s,
			     const ERL_NIF_TERM argv[], int unused,
			     struct ev_ctx *c)
{
	ERL_NIF_TERM tag = argv[0];
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;
	int in, exiting;

	(void)unused;
	in = tag == bp_atom.in || tag == bp_atom.in_exiting;
	exiting = tag == bp_atom.in_exiting || tag == bp_atom.out_exiting ? 1
		  : tag == bp_atom.out_exited				  ? 2
									  : 0;
	if (!(sl = open_event(env, s, argv[2], &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl,
					 BP_EVENT_HEADER_SIZE + MFA_MAX + 1)))
		goto out;
	w = wr_begin(start, in ? BP_EV_SCHED_IN : BP_EV_SCHED_OUT, key);
	wr_mfa(env, sl, &w, argv[3], &c->mfa, NULL); /* undefined: not one */
	wr_u8(&w, (uint8_t)exiting);
	finish(env, s, argv[2], sl, start, &w, c);
out:
	ev_leave(sl, c);
}

/* trace_garbage_collection/5: gc_{minor,major}_{start,end}. */
void bp_tracer_write_gc(ErlNifEnv *env, struct bp_session *s,
			const ERL_NIF_TERM argv[], int unused,
			struct ev_ctx *c)
{
	ERL_NIF_TERM tag = argv[0], list = argv[3], head;
	const ERL_NIF_TERM keys[6] = {bp_atom.heap_size,
				      bp_atom.heap_block_size,
				      bp_atom.old_heap_size,
				      bp_atom.old_heap_block_size,
				      bp_atom.mbuf_size, bp_atom.stack_size};
	ErlNifUInt64 vals[6] = {0, 0, 0, 0, 0, 0};
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;
	int id, guard = 0;

	(void)unused;
	id = tag == bp_atom.gc_minor_start   ? BP_EV_GC_MINOR_START
	     : tag == bp_atom.gc_minor_end   ? BP_EV_GC_MINOR_END
	     : tag == bp_atom.gc_major_start ? BP_EV_GC_MAJOR_START
	     : tag == bp_atom.gc_major_end   ? BP_EV_GC_MAJOR_END
					     : -1;
	if (id < 0)
		return;
	while (guard++ < 32 && enif_get_list_cell(env, list, &head, &list)) {
		const ERL_NIF_TERM *kv;
		int n;
		if (!enif_get_tuple(env, head, &n, &kv) || n != 2)
			continue;
		for (int i = 0; i < 6; i++)
			if (kv[0] == keys[i])
				enif_get_uint64(env, kv[1], &vals[i]);
	}
	if (!(sl = open_event(env, s, argv[2], &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE + 48)))
		goto out;
	w = wr_begin(start, id, key);
	for (int i = 0; i < 6; i++)
		wr_u64(&w, vals[i]);
	finish(env, s, argv[2], sl, start, &w, c);
out:
	ev_leave(sl, c);
}

void bp_tracer_write_annotation(ErlNifEnv *env, struct bp_session *s,
				ERL_NIF_TERM who, ERL_NIF_TERM tag,
				ERL_NIF_TERM value, struct ev_ctx *c)
{
	struct bp_slot *sl;
	uint8_t *start;
	struct wr w;
	uint64_t key;

	if (!(sl = open_event(env, s, who, &key, c)))
		return;
	if (!(start = bp_session_reserve(s, sl, BP_EVENT_HEADER_SIZE +
							2 * text_max(s))))
		goto out;
	w = wr_begin(start, BP_EV_ANNOTATION, key);
	wr_term(env, s, sl, &w, tag);
	wr_term(env, s, sl, &w, value);
	finish(env, s, who, sl, start, &w, c);
out:
	ev_leave(sl, c);
}
