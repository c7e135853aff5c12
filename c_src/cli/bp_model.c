/* bp_model.c -- process table and call-stack reconstruction (the rules
 * are stated once, in bp_model.h). */
#define _GNU_SOURCE /* memmem */
#include "bp_model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bp_model_init(struct bp_model *m, bp_frame_end_fn on_end, void *ctx)
{
	memset(m, 0, sizeof *m);
	bp_map_init(&m->by_key);
	bp_strtab_init(&m->funcs);
	bp_strtab_init(&m->names);
	bp_strtab_init(&m->aliases);
	memset(m->func_cache, 0xff, sizeof m->func_cache);
	m->on_end = on_end;
	m->ctx = ctx;
}

void bp_model_free(struct bp_model *m)
{
	for (uint32_t i = 0; i < m->nprocs; i++) {
		struct bp_proc *p = m->procs[i];
		free(p->text);
		free(p->name);
		free(p->old_name);
		free(p->initial_call);
		free(p->stack);
		free(p);
	}
	free(m->procs);
	bp_map_free(&m->by_key);
	bp_strtab_free(&m->funcs);
	bp_strtab_free(&m->names);
	bp_strtab_free(&m->aliases);
	free(m->holder);
	free(m->alias_owner);
	free(m->streams);
	bp_calls_free(&m->untimed);
	bp_calls_free(&m->timed);
	free(m->timing);
	memset(m, 0, sizeof *m);
}

int bp_model_read_env(struct bp_model *m, const struct bp_meta *meta)
{
	bp_calls_free(&m->untimed);
	bp_calls_free(&m->timed);
	if (bp_calls_parse(&m->untimed, bp_meta_env(meta, "untimed_calls")) <
		    0 ||
	    bp_calls_parse(&m->timed, bp_meta_env(meta, "timed_calls")) < 0) {
		m->oom = 1;
		return -1;
	}
	return 0;
}

int bp_model_untimed(struct bp_model *m, uint32_t func)
{
	if ((!m->untimed.n && !m->untimed.cut) || func >= m->funcs.n)
		return 0;
	if (func >= m->ntiming) {
		uint32_t n = m->ntiming ? m->ntiming : 256;
		uint8_t *t;
		while (n <= func)
			n *= 2;
		if (!(t = realloc(m->timing, n))) {
			m->oom = 1;
			return 0;
		}
		memset(t + m->ntiming, 0, n - m->ntiming);
		m->timing = t;
		m->ntiming = n;
	}
	if (!m->timing[func]) {
		const struct bp_str *f = &m->funcs.strs[func];
		m->timing[func] =
			bp_calls_untimed(&m->timed, &m->untimed, f->s, f->len)
				? 2
				: 1;
	}
	return m->timing[func] == 2;
}

struct bp_proc *bp_model_find(const struct bp_model *m, uint64_t key)
{
	uint32_t i = bp_map_get(&m->by_key, key);
	return i == BP_MAP_NONE ? NULL : m->procs[i];
}

/* Slot of key in m->cache (multiplicative hash: the top bits). */
static inline struct bp_proc **cache_slot(struct bp_model *m, uint64_t key)
{
	return &m->cache[(key * 0x9e3779b97f4a7c15ull) >>
			 (64 - BP_MODEL_CACHE_BITS)];
}

struct bp_proc *bp_model_proc(struct bp_model *m, uint64_t key)
{
	struct bp_proc **slot = cache_slot(m, key), *p = *slot;
	uint32_t i;

	if (p && p->key == key)
		return p;
	i = bp_map_get(&m->by_key, key);
	if (i != BP_MAP_NONE)
		return *slot = m->procs[i];
	if (m->nprocs == m->capprocs) {
		uint32_t cap = m->capprocs ? m->capprocs * 2 : 64;
		struct bp_proc **v = realloc(m->procs, cap * sizeof *v);
		if (!v)
			goto oom;
		m->procs = v;
		m->capprocs = cap;
	}
	p = calloc(1, sizeof *p);
	if (!p)
		goto oom;
	if (bp_map_put(&m->by_key, key, m->nprocs) != 0) {
		free(p);
		goto oom;
	}
	p->key = key;
	p->index = m->nprocs;
	snprintf(p->keytext, sizeof p->keytext, "<pid:%" PRIx64 ">", key);
	m->procs[m->nprocs++] = p;
	return *slot = p;
oom:
	m->oom = 1;
	return NULL;
}

static inline uint64_t load64(const char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t load32(const char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* Whether a[0..n) == b[0..n); short names without a call to memcmp. */
static inline int same_bytes(const char *a, const char *b, size_t n)
{
	if (n >= 8 && n <= 16)
		return !((load64(a) ^ load64(b)) |
			 (load64(a + n - 8) ^ load64(b + n - 8)));
	return !memcmp(a, b, n);
}

/* Slot of name s (n bytes) in m->func_cache: a hash of its first, middle
 * and last bytes and its length, cheap rather than thorough (hits are
 * checked against the name). */
static inline uint32_t *func_slot(struct bp_model *m, const char *s,
				  size_t n)
{
	uint64_t h = n;

	if (n >= 8) {
		h ^= load64(s) ^ (load64(s + n - 8) * 0x9e3779b97f4a7c15ull);
		if (n > 16)
			h ^= load64(s + n / 2 - 4) * 0xc2b2ae3d27d4eb4full;
	} else if (n >= 4) {
		h ^= load32(s) ^ ((uint64_t)load32(s + n - 4) << 32);
	} else if (n) {
		h ^= (uint64_t)(uint8_t)s[0] << 8 ^
		     (uint64_t)(uint8_t)s[n / 2] << 16 ^
		     (uint64_t)(uint8_t)s[n - 1] << 24;
	}
	h *= 0xff51afd7ed558ccdull;
	return &m->func_cache[h >> (64 - BP_MODEL_FUNC_CACHE_BITS)];
}

uint32_t bp_model_func(struct bp_model *m, const char *s, size_t len)
{
	uint32_t *slot = func_slot(m, s, len), id = *slot;

	if (id != BP_MAP_NONE) {
		const struct bp_str *f = bp_strtab_get(&m->funcs, id);
		if (f->len == len && same_bytes(f->s, s, len))
			return id;
	}
	id = bp_strtab_intern(&m->funcs, s, len);
	if (id == BP_MAP_NONE)
		m->oom = 1;
	else
		*slot = id;
	return id;
}

/* Replaces *dst (a text of p) by a copy of s when s is not empty. */
static void merge_text(struct bp_model *m, struct bp_proc *p, char **dst,
		       const char *s, size_t n)
{
	if (n == 0 || (*dst && strlen(*dst) == n && !memcmp(*dst, s, n)))
		return;
	char *c = malloc(n + 1);
	if (!c) {
		m->oom = 1;
		return;
	}
	memcpy(c, s, n);
	c[n] = '\0';
	free(*dst);
	*dst = c;
	p->gen++;
}

static void push(struct bp_model *m, struct bp_proc *p, uint32_t func,
		 uint64_t ts)
{
	if (p->lost_depth || p->depth == BP_MODEL_MAX_DEPTH) {
		p->lost_depth++;
		m->overflow++;
		return;
	}
	if (p->depth == p->cap) {
		uint32_t cap = p->cap ? p->cap * 2 : 4;
		struct bp_frame *v = realloc(p->stack, cap * sizeof *v);
		if (!v) {
			m->oom = 1;
			p->lost_depth++;
			return;
		}
		p->stack = v;
		p->cap = cap;
	}
	p->stack[p->depth++] = (struct bp_frame){func, 0, ts, 0};
}

/* Pops frames until depth == keep; the last one popped ends as `how`,
 * the others unwound. */
static void pop_to(struct bp_model *m, struct bp_proc *p, uint32_t keep,
		   uint64_t ts, enum bp_end_how how)
{
	while (p->depth > keep) {
		struct bp_frame *f = &p->stack[p->depth - 1];
		struct bp_frame *parent =
			p->depth > 1 ? &p->stack[p->depth - 2] : NULL;
		struct bp_frame_end fe;
		fe.proc = p;
		fe.frame = f;
		fe.parent = parent;
		fe.level = p->depth - 1;
		fe.end = ts;
		fe.incl = ts > f->start ? ts - f->start : 0;
		fe.own = fe.incl > f->child ? fe.incl - f->child : 0;
		fe.how = p->depth - 1 == keep || how >= BP_END_LOST
				 ? how
				 : BP_END_UNWOUND;
		if (parent)
			parent->child += fe.incl;
		if (m->on_end)
			m->on_end(m->ctx, &fe);
		p->depth--;
	}
}

/* Index of the topmost frame of func, or -1. */
static int64_t find_frame(const struct bp_proc *p, uint32_t func)
{
	for (int64_t i = (int64_t)p->depth - 1; i >= 0; i--)
		if (p->stack[i].func == func)
			return i;
	return -1;
}

static void do_return(struct bp_model *m, struct bp_proc *p, uint32_t func,
		      uint64_t ts, enum bp_end_how how)
{
	if (p->lost_depth) { /* belongs to a call that was not stored */
		p->lost_depth--;
		return;
	}
	int64_t k = find_frame(p, func);
	if (k < 0) {
		/* A function whose pattern has return events for some of
		 * its calls only pushes no frame: its returns are expected. */
		if (!bp_model_untimed(m, func))
			m->unmatched++;
		return;
	}
	pop_to(m, p, (uint32_t)k, ts, how);
}

static void do_return_to(struct bp_model *m, struct bp_proc *p,
			 uint32_t func, uint64_t ts)
{
	int64_t k = find_frame(p, func);

	if (k >= 0) {
		p->lost_depth = 0;
		pop_to(m, p, (uint32_t)k + 1, ts, BP_END_UNWOUND);
	} else if (!p->just_returned) {
		if (p->lost_depth)
			p->lost_depth--;
		else if (p->depth)
			pop_to(m, p, p->depth - 1, ts, BP_END_RETURN);
	}
}

/* Function id of e's mfa; usually the top frame's, so try that before
 * hashing. */
static uint32_t top_or_intern(struct bp_model *m, const struct bp_proc *p,
			      const struct bp_event *e)
{
	if (p->depth) {
		uint32_t f = p->stack[p->depth - 1].func;
		const struct bp_str *s = bp_strtab_get(&m->funcs, f);
		if (s->len == e->len[BP_FLD_MFA] &&
		    same_bytes(s->s, e->str[BP_FLD_MFA], s->len))
			return f;
	}
	return bp_model_func(m, e->str[BP_FLD_MFA], e->len[BP_FLD_MFA]);
}

/* Grows a by-id array of pid keys to hold id. */
static int grow_keys(struct bp_model *m, uint64_t **v, uint32_t n,
		     uint32_t id)
{
	if (id < n)
		return 0;
	uint32_t cap = n ? n : 16;
	while (cap <= id)
		cap *= 2;
	uint64_t *w = realloc(*v, cap * sizeof *w);
	if (!w) {
		m->oom = 1;
		return -1;
	}
	memset(w + n, 0, (cap - n) * sizeof *w);
	*v = w;
	return 0;
}

/* Capacity of m->holder / m->alias_owner: the table size when grown. */
static uint32_t keys_cap(uint32_t used)
{
	uint32_t cap = 16;
	while (cap < used)
		cap *= 2;
	return used ? cap : 0;
}

static void drop_name(struct bp_model *m, struct bp_proc *p)
{
	if (!p->name)
		return;
	uint32_t id = bp_strtab_find(&m->names, p->name, strlen(p->name));
	if (id != BP_MAP_NONE && m->holder[id] == p->key)
		m->holder[id] = 0;
	free(p->old_name);
	p->old_name = p->name;
	p->name = NULL;
	p->gen++;
}

void bp_model_set_name(struct bp_model *m, struct bp_proc *p,
		       const char *s, size_t n)
{
	char buf[1024];
	size_t k;

	if (!s) {
		drop_name(m, p);
		return;
	}
	k = bp_name_norm(buf, sizeof buf, s, n);

	if (p->name && strlen(p->name) == k && !memcmp(p->name, buf, k))
		return;
	drop_name(m, p);
	uint32_t before = m->names.n;
	uint32_t id = bp_strtab_intern(&m->names, buf, k);
	if (id == BP_MAP_NONE ||
	    grow_keys(m, &m->holder, keys_cap(before), id) != 0) {
		m->oom = 1;
		return;
	}
	if (m->holder[id] && m->holder[id] != p->key) {
		struct bp_proc *q = bp_model_find(m, m->holder[id]);
		if (q) /* a name has one holder: the old one lost it */
			drop_name(m, q);
	}
	m->holder[id] = p->key;
	p->name = strdup(m->names.strs[id].s);
	if (!p->name)
		m->oom = 1;
	p->gen++;
}

/* Learns the owner of an alias from message text: a '$gen_call' whose
 * reply tag is [alias|Ref] sent by its owner (received == 0), or a reply
 * {[alias|Ref], _} received by it (received == 1). */
static void learn_alias(struct bp_model *m, uint64_t owner, const char *s,
			size_t n, int received)
{
	static const char call[] = "{'$gen_call',{", tag[] = "[alias|#Ref<",
			  reply[] = "{[alias|#Ref<";
	const char *a = NULL, *end;

	if (!owner)
		return;
	if (received) {
		if (n > sizeof reply && !memcmp(s, reply, sizeof reply - 1))
			a = s + 7;
	} else if (n > sizeof call && !memcmp(s, call, sizeof call - 1))
		a = memmem(s, n, tag, sizeof tag - 1),
		a = a ? a + 7 : NULL;
	if (!a || !(end = memchr(a, '>', (size_t)(s + n - a))))
		return;
	uint32_t before = m->aliases.n;
	uint32_t id = bp_strtab_intern(&m->aliases, a, (size_t)(end + 1 - a));
	if (id == BP_MAP_NONE ||
	    grow_keys(m, &m->alias_owner, keys_cap(before), id) != 0) {
		m->oom = 1;
		return;
	}
	m->alias_owner[id] = owner;
}

uint64_t bp_model_alias_owner(const struct bp_model *m, const char *s,
			      size_t n)
{
	uint32_t id = bp_strtab_find(&m->aliases, s, n);
	return id == BP_MAP_NONE ? 0 : m->alias_owner[id];
}

uint64_t bp_model_receiver(struct bp_model *m, const struct bp_event *e)
{
	char buf[1024];

	const char *to = e->str[BP_FLD(SEND, to_text)];
	uint32_t n = e->len[BP_FLD(SEND, to_text)];

	if (e->num[BP_FLD(SEND, to)])
		return e->num[BP_FLD(SEND, to)];
	if (n > 5 && !memcmp(to, "#Ref<", 5))
		return bp_model_alias_owner(m, to, n);
	size_t k = bp_name_norm(buf, sizeof buf, to, n);
	uint32_t id = bp_strtab_find(&m->names, buf, k);
	return id == BP_MAP_NONE ? 0 : m->holder[id];
}

/* A loss on e's stream (the rule in bp_model.h): the stacks of the
 * processes last seen there are reset. */
static void check_loss(struct bp_model *m, const struct bp_event *e)
{
	uint32_t s = e->stream;
	int lost = 0;

	if (s >= m->nstreams) {
		uint32_t n = m->nstreams ? m->nstreams : 8;
		while (n <= s)
			n *= 2;
		struct bp_model_stream *v = realloc(m->streams, n * sizeof *v);
		if (!v) {
			m->oom = 1;
			return;
		}
		memset(v + m->nstreams, 0, (n - m->nstreams) * sizeof *v);
		m->streams = v;
		m->nstreams = n;
	}
	struct bp_model_stream *st = &m->streams[s];
	if (st->pending && e->packet != st->pending) {
		st->pending = 0;
		lost = 1;
	}
	if (e->discarded > st->discarded) {
		st->discarded = e->discarded;
		st->pending = e->packet;
	}
	if (e->id == BP_EV_DROPS)
		for (int c = 0; c < BP_DROP_COUNT; c++)
			if (e->num[c]) {
				lost = 1;
				st->pending = 0;
			}
	if (!lost)
		return;
	for (uint32_t i = 0; i < m->nprocs; i++) {
		struct bp_proc *p = m->procs[i];
		if (p->stream != s || (!p->depth && !p->lost_depth))
			continue;
		m->resets++;
		pop_to(m, p, 0, p->last_ts, BP_END_LOST);
		p->lost_depth = 0;
		p->just_returned = 0;
	}
}

struct bp_proc *bp_model_apply(struct bp_model *m, const struct bp_event *e)
{
	return bp_model_apply_to(m, NULL, e);
}

struct bp_proc *bp_model_apply_to(struct bp_model *m, struct bp_proc *p,
				  const struct bp_event *e)
{
	uint32_t func;

	m->last_func = BP_MAP_NONE;
	if (e->id != BP_EV_PROCESS && e->id != BP_EV_DROPS) {
		if (!m->nevents++)
			m->first_ts = e->ts;
		m->last_ts = e->ts;
	}
	check_loss(m, e);
	if (!p) {
		if (e->pid == 0 && e->id != BP_EV_PROCESS)
			return NULL;
		p = bp_model_proc(m, e->pid);
		if (!p)
			return NULL;
	}
	if (e->id != BP_EV_PROCESS) {
		p->stream = e->stream;
		p->last_ts = e->ts;
		if ((e->id == BP_EV_SCHED_IN || e->id == BP_EV_SCHED_OUT) &&
		    e->num[BP_FLD(SCHED_IN, exiting)])
			p->exited = 1;
	}
	switch (e->id) {
	case BP_EV_PROCESS:
		merge_text(m, p, &p->text, e->str[BP_FLD(PROCESS, pid)],
			   e->len[BP_FLD(PROCESS, pid)]);
		if (e->len[BP_FLD(PROCESS, name)])
			bp_model_set_name(m, p, e->str[BP_FLD(PROCESS, name)],
					  e->len[BP_FLD(PROCESS, name)]);
		merge_text(m, p, &p->initial_call,
			   e->str[BP_FLD(PROCESS, initial_call)],
			   e->len[BP_FLD(PROCESS, initial_call)]);
		break;
	case BP_EV_REGISTER:
		bp_model_set_name(m, p, e->str[BP_FLD(REGISTER, name)],
				  e->len[BP_FLD(REGISTER, name)]);
		break;
	case BP_EV_UNREGISTER:
		drop_name(m, p);
		break;
	case BP_EV_EXIT:
		p->exited = 1;
		pop_to(m, p, 0, e->ts, BP_END_UNWOUND);
		p->lost_depth = 0;
		drop_name(m, p);
		free(p->stack); /* a dead process needs no stack: what is
				 * kept per process stays small (counters,
				 * texts) */
		p->stack = NULL;
		p->cap = 0;
		break;
	case BP_EV_SEND:
		learn_alias(m, e->pid, e->str[BP_FLD(SEND, message)], e->len[BP_FLD(SEND, message)], 0);
		break;
	case BP_EV_RECEIVE:
		learn_alias(m, e->pid, e->str[BP_FLD(RECEIVE, message)],
			    e->len[BP_FLD(RECEIVE, message)], 1);
		break;
	case BP_EV_CALL:
		func = m->last_func = bp_model_func(
			m, e->str[BP_FLD(CALL, mfa)], e->len[BP_FLD(CALL, mfa)]);
		if (func != BP_MAP_NONE && !bp_model_untimed(m, func))
			push(m, p, func, e->ts);
		p->just_returned = 0;
		break;
	case BP_EV_RETURN_FROM:
	case BP_EV_EXCEPTION_FROM:
		func = m->last_func = top_or_intern(m, p, e);
		if (func != BP_MAP_NONE)
			do_return(m, p, func, e->ts,
				  e->id == BP_EV_RETURN_FROM
					  ? BP_END_RETURN
					  : BP_END_EXCEPTION);
		p->just_returned = 1;
		break;
	case BP_EV_RETURN_TO:
		func = m->last_func =
			bp_model_func(m, e->str[BP_FLD(RETURN_TO, mfa)],
				      e->len[BP_FLD(RETURN_TO, mfa)]);
		if (func != BP_MAP_NONE)
			do_return_to(m, p, func, e->ts);
		p->just_returned = 0;
		break;
	default:
		break;
	}
	return p;
}

void bp_model_unwind(struct bp_model *m, struct bp_proc *p, uint64_t ts,
		     enum bp_end_how how)
{
	pop_to(m, p, 0, ts, how);
	p->lost_depth = 0;
}

void bp_model_finish(struct bp_model *m)
{
	for (uint32_t i = 0; i < m->nprocs; i++)
		bp_model_unwind(m, m->procs[i], m->last_ts, BP_END_OPEN);
}

void bp_model_count(struct bp_proc *p, const struct bp_event *e)
{
	switch (e->id) {
	case BP_EV_PROCESS:
		return; /* metadata, not activity */
	case BP_EV_SEND:
	case BP_EV_SEND_DEAD:
		p->sent++;
		break;
	case BP_EV_RECEIVE:
		p->received++;
		break;
	case BP_EV_GC_MINOR_START:
	case BP_EV_GC_MAJOR_START:
		p->in_gc = 1;
		p->gc_start = e->ts;
		break;
	case BP_EV_GC_MINOR_END:
	case BP_EV_GC_MAJOR_END:
		if (p->in_gc) {
			p->gc_count++;
			p->gc_ns += e->ts - p->gc_start;
			p->in_gc = 0;
		}
		break;
	case BP_EV_SCHED_IN:
		p->scheduled = 1;
		p->sched_start = e->ts;
		break;
	case BP_EV_SCHED_OUT:
	case BP_EV_EXIT:
		if (p->scheduled) {
			p->sched_ns += e->ts - p->sched_start;
			p->scheduled = 0;
		}
		break;
	default:
		break;
	}
	p->events++;
}
