/* bp_hub.c -- hub membership: adding and removing sessions (control
 * context; the producer side is inline in bp_hub.h, the routing in
 * bp_tracer.c).  See bp_hub.h for the protocol. */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bp_atoms.h"
#include "bp_clock.h"
#include "bp_hub.h"

struct bp_hub bp_hub;
static ErlNifMutex *hub_mtx;

int bp_hub_init(void)
{
	if (!hub_mtx && !(hub_mtx = enif_mutex_create("bp_hub")))
		return -1;
	return 0;
}

/* Drawn once, at the first load (static: kept across reloads from the
 * same file, with the hub and the match specs that carry the tags). */
static uint64_t route_salt;

void bp_hub_route_atoms(ErlNifEnv *env)
{
	char name[64];

	if (!route_salt) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
			r = (uint64_t)bp_now() * 0x9E3779B97F4A7C15ull ^
			    (uint64_t)getpid() ^ (uint64_t)(uintptr_t)&r;
		route_salt = r | 1;
	}
	snprintf(name, sizeof name, "bp_route_%016llx",
		 (unsigned long long)route_salt);
	bp_atom.bp_route = enif_make_atom(env, name);
	snprintf(name, sizeof name, "bp_route_ret_%016llx",
		 (unsigned long long)route_salt);
	bp_atom.bp_route_ret = enif_make_atom(env, name);
}

void bp_hub_lock(void)
{
	enif_mutex_lock(hub_mtx);
}

void bp_hub_unlock(void)
{
	enif_mutex_unlock(hub_mtx);
}

static void member_free(struct bp_hub_member *m)
{
	if (!m)
		return;
	enif_free(m->set);
	enif_free(m->pats);
	if (m->s)
		enif_release_resource(m->s);
	enif_free(m);
}

static void set_put(struct bp_hub_member *m, uint64_t key)
{
	uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;

	for (;; h++) {
		uint64_t *v = &m->set[h & m->set_mask];
		if (*v == key)
			return;
		if (!*v) {
			*v = key;
			return;
		}
	}
}

/* The set from a list of local pids and ports (others are skipped). */
static int get_set(ErlNifEnv *env, ERL_NIF_TERM list, struct bp_hub_member *m)
{
	unsigned len, cap = 16;
	ERL_NIF_TERM head;
	ErlNifPid pid;
	ErlNifPort port;

	if (!enif_get_list_length(env, list, &len) || len > (1u << 26))
		return 0;
	if (len <= BP_HUB_FEW) {
		while (enif_get_list_cell(env, list, &head, &list))
			if (enif_get_local_pid(env, head, &pid) ||
			    enif_get_local_port(env, head, &port))
				m->few[m->nfew++] = (uint64_t)head;
		return 1;
	}
	while (cap < 2 * len)
		cap <<= 1;
	if (!(m->set = enif_alloc(cap * sizeof *m->set)))
		return 0;
	memset(m->set, 0, cap * sizeof *m->set);
	m->set_mask = cap - 1;
	while (enif_get_list_cell(env, list, &head, &list))
		if (enif_get_local_pid(env, head, &pid) ||
		    enif_get_local_port(env, head, &port))
			set_put(m, (uint64_t)head);
	return 1;
}

/* Patterns: a list of {M, F, A} with '_' for any. */
static int get_pats(ErlNifEnv *env, ERL_NIF_TERM list, struct bp_hub_member *m)
{
	ERL_NIF_TERM head, under = enif_make_atom(env, "_");
	unsigned len, i = 0;

	if (!enif_get_list_length(env, list, &len) || len > 100000)
		return 0;
	if (!len)
		return 1;
	if (!(m->pats = enif_alloc(len * sizeof *m->pats)))
		return 0;
	while (enif_get_list_cell(env, list, &head, &list)) {
		const ERL_NIF_TERM *e;
		struct bp_hub_pat *p = &m->pats[i];
		int n;
		if (!enif_get_tuple(env, head, &n, &e) || n != 3)
			return 0;
		memset(p, 0, sizeof *p);
		if (e[0] == under)
			p->wild |= 1;
		else if (enif_is_atom(env, e[0]))
			p->m = (uint64_t)e[0];
		else
			return 0;
		if (e[1] == under)
			p->wild |= 2;
		else if (enif_is_atom(env, e[1]))
			p->f = (uint64_t)e[1];
		else
			return 0;
		if (e[2] == under)
			p->wild |= 4;
		else if (!enif_get_uint(env, e[2], &p->arity))
			return 0;
		i++;
	}
	m->npats = i;
	return 1;
}

/* Do sessions a and b render every event the same way (same record)? */
static int same_render(const struct bp_session *a, const struct bp_session *b)
{
	const uint32_t f = BP_F_RETURN | BP_F_EXCEPTIONS | BP_F_MS_RESULT;

	return a->args_mode == b->args_mode && (a->flags & f) == (b->flags & f) &&
	       a->capture.depth == b->capture.depth &&
	       a->capture.list == b->capture.list &&
	       a->capture.binary == b->capture.binary &&
	       a->capture.bytes == b->capture.bytes;
}

/* The render class of s: that of a member that renders alike, else a
 * new one.  Under hub_mtx. */
static uint32_t render_class(const struct bp_session *s)
{
	static uint32_t next_class;

	for (int i = 0; i < BP_HUB_MAX; i++) {
		struct bp_hub_member *o = atomic_load(&bp_hub.members[i]);
		if (o && same_render(o->s, s))
			return o->render;
	}
	return ++next_class;
}

int bp_hub_add(ErlNifEnv *env, struct bp_session *s, ERL_NIF_TERM spec)
{
	struct bp_hub_member *m = enif_alloc(sizeof *m);
	ERL_NIF_TERM v;
	unsigned kinds;
	int slot = -1;

	if (!m)
		return -2;
	memset(m, 0, sizeof *m);
	if (!enif_get_map_value(env, spec, bp_atom.kinds, &v) ||
	    !enif_get_uint(env, v, &kinds))
		goto bad;
	m->kinds = kinds;
	if (!enif_get_map_value(env, spec, enif_make_atom(env, "procs"), &v))
		goto bad;
	if (enif_is_identical(v, enif_make_atom(env, "all")))
		m->procs = BP_HP_ALL;
	else if (enif_is_identical(v, enif_make_atom(env, "new")))
		m->procs = BP_HP_NEW;
	else if (enif_is_identical(v, enif_make_atom(env, "existing")))
		m->procs = BP_HP_EXISTING;
	else if (enif_is_identical(v, bp_atom.list))
		m->procs = BP_HP_LIST;
	else
		goto bad;
	if (m->procs != BP_HP_ALL &&
	    (!enif_get_map_value(env, spec, bp_atom.pids, &v) ||
	     !get_set(env, v, m)))
		goto bad;
	if (!enif_get_map_value(env, spec, enif_make_atom(env, "calls"), &v) ||
	    !get_pats(env, v, m))
		goto bad;
	enif_mutex_lock(hub_mtx);
	for (int i = 0; i < BP_HUB_MAX; i++)
		if (!atomic_load(&bp_hub.members[i])) {
			slot = i;
			break;
		}
	if (slot >= 0) {
		enif_keep_resource(s);
		m->s = s;
		m->render = render_class(s);
		atomic_store(&bp_hub.members[slot], m);
		if (atomic_load(&bp_hub.nwords) < (uint32_t)slot / 64 + 1)
			atomic_store(&bp_hub.nwords, (uint32_t)slot / 64 + 1);
		atomic_fetch_or(&bp_hub.live[slot / 64], 1ull << (slot % 64));
	}
	enif_mutex_unlock(hub_mtx);
	if (slot < 0)
		member_free(m);
	return slot;
bad:
	member_free(m);
	return -2;
}

void bp_hub_wait_idle(void)
{
	for (int i = 0; i < BP_MAX_SLOTS; i++)
		while (atomic_load_explicit(&bp_hub.busy[i].busy,
					    memory_order_seq_cst))
			sched_yield();
}

void bp_hub_quiesce(void)
{
	bp_membar_sync(); /* the remover's half of bp_membar_busy() */
	bp_hub_wait_idle();
}

void bp_hub_remove(int i)
{
	struct bp_hub_member *m;

	if (i < 0 || i >= BP_HUB_MAX)
		return;
	enif_mutex_lock(hub_mtx);
	m = atomic_load(&bp_hub.members[i]);
	if (m) {
		atomic_fetch_and(&bp_hub.live[i / 64], ~(1ull << (i % 64)));
		bp_hub_quiesce();
		atomic_store(&bp_hub.members[i], NULL);
	}
	enif_mutex_unlock(hub_mtx);
	member_free(m);
}
