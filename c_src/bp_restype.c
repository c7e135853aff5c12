/* bp_restype.c -- the resource types of struct bp_session across reloads
 * of the NIF library: every type that still has sessions, the current one
 * for new sessions, and the library pinned in memory.
 *
 * Called by load()/upgrade() (bp_nif.c) while erts loads the library, by
 * start/1 (bp_restype_alloc), by any scheduler
 * that looks a session term up (bp_session_get(): control NIFs and tracer
 * callbacks), and by the session destructor on whichever thread drops the
 * last reference (bp_restype_object_gone).
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <string.h>

#include "bp_restype.h"
#include "bp_session.h"

/* ---- reloads -------------------------------------------------------------
 *
 * What OTP does (erl_nif.c, OTP 25) and what it means here:
 * - code:load_file/1 while the module has NIF code: the new instance's
 *   load_nif calls upgrade(); enif_open_resource_type(..TAKEOVER) hands
 *   the existing "bp_session" type (same pointer) and its live objects to
 *   the new instance.
 * - purge of old code: erts "unloads" that instance: unload() is called,
 *   its resource types are unlinked from erts's list, and the library is
 *   dlclose()d once no object of its types is left.  A type that still has
 *   objects (a running session) lives on, owned by no instance, with its
 *   destructor; a later load (code:delete + purge + load) cannot take it
 *   over and gets a new type: the old sessions' terms no longer match
 *   bp_restype_current.  So every type that still has sessions is remembered
 *   (rts[], with a count of live objects) and bp_session_get() looks there
 *   after the current type.
 * - the collector threads and the destructor run code of this library
 *   after its instance is gone: load() pins the library in memory with
 *   dlopen(self, RTLD_NODELETE), so no dlclose ever unmaps it, and its
 *   static data (this table, the atoms, the clock) survives reloads from
 *   the same file.
 */

ErlNifResourceType *bp_restype_current;

#define BP_MAX_RT 64
static ErlNifResourceType *_Atomic rts[BP_MAX_RT];
static _Atomic uint32_t rt_live[BP_MAX_RT];
static _Atomic uint32_t rt_current;
static ErlNifMutex *rt_mtx; /* taken by load/upgrade and by the dtor */

/* The resource object: a session and the type slot it was created with. */
struct bp_session_res {
	struct bp_session s;
	uint32_t rt_slot;
};

/* A new, zeroed session of the current type. */
struct bp_session *bp_restype_alloc(void)
{
	struct bp_session_res *r;
	uint32_t slot;

	/* The slot, its type and its count change together (a reload may
	 * run on another thread). */
	enif_mutex_lock(rt_mtx);
	slot = atomic_load(&rt_current);
	r = enif_alloc_resource(atomic_load(&rts[slot]), sizeof *r);
	if (r) {
		memset(r, 0, sizeof *r);
		r->rt_slot = slot;
		atomic_fetch_add(&rt_live[slot], 1);
	}
	enif_mutex_unlock(rt_mtx);
	return r ? &r->s : NULL;
}

struct bp_session *bp_restype_get_old(ErlNifEnv *env, ERL_NIF_TERM t)
{
	void *p;

	for (uint32_t i = 0; i < BP_MAX_RT; i++) {
		ErlNifResourceType *rt = atomic_load(&rts[i]);
		if (rt && rt != bp_restype_current &&
		    enif_get_resource(env, t, rt, &p))
			return p;
	}
	return NULL;
}

/* The last session of a type is gone: unless it is the current type,
 * erts frees the type right after this destructor; forget it.  obj: the
 * resource object, from the session destructor. */
void bp_restype_object_gone(void *obj)
{
	uint32_t slot = ((struct bp_session_res *)obj)->rt_slot;

	if (slot >= BP_MAX_RT)
		return;
	if (rt_mtx)
		enif_mutex_lock(rt_mtx);
	if (atomic_fetch_sub(&rt_live[slot], 1) == 1 &&
	    slot != atomic_load(&rt_current))
		atomic_store(&rts[slot], NULL);
	if (rt_mtx)
		enif_mutex_unlock(rt_mtx);
}

/* Makes `rt' the current type, in the slot it already has or a free one
 * (a slot with no live session, not current: its type is gone or
 * about to be, as erts frees an unowned type with no objects). */
static int rt_register(ErlNifResourceType *rt)
{
	uint32_t cur = atomic_load(&rt_current), slot = BP_MAX_RT;

	if (!rt_mtx && !(rt_mtx = enif_mutex_create("bp_session_types")))
		return -1;
	enif_mutex_lock(rt_mtx);
	for (uint32_t i = 0; i < BP_MAX_RT; i++) {
		ErlNifResourceType *t = atomic_load(&rts[i]);
		if (t && i != cur && atomic_load(&rt_live[i]) == 0)
			atomic_store(&rts[i], t = NULL); /* dropped by erts */
		if (t == rt)
			slot = i;
	}
	for (uint32_t i = 0; slot == BP_MAX_RT && i < BP_MAX_RT; i++)
		if (!atomic_load(&rts[i]) && atomic_load(&rt_live[i]) == 0)
			slot = i;
	if (slot < BP_MAX_RT) {
		atomic_store(&rts[slot], rt);
		atomic_store(&rt_current, slot);
		bp_restype_current = rt;
	}
	enif_mutex_unlock(rt_mtx);
	return slot < BP_MAX_RT ? 0 : -1; /* 64 generations all alive */
}

/* Keeps this library mapped for the life of the process (see above). */
void bp_restype_pin_library(void)
{
	static int pinned;
	Dl_info info;

	if (pinned)
		return;
	if (dladdr((void *)&bp_restype_pin_library, &info) && info.dli_fname &&
	    dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE))
		pinned = 1; /* the handle is deliberately never closed */
}

/* Opens (creates or takes over) the "bp_session" type with destructor
 * `dtor' and makes it the current type.  0, or -1 on failure. */
int bp_restype_open(ErlNifEnv *env, ErlNifResourceDtor *dtor)
{
	ErlNifResourceType *rt = enif_open_resource_type(
		env, NULL, "bp_session", dtor,
		ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);

	return rt ? rt_register(rt) : -1;
}
