/* bp_sink_lttng.c -- the LTTng-UST sink: hands a session's events to the
 * tracepoint provider `beamprobe' (c_src/lttng/bp_lttng.c, built as
 * priv/beamprobe_lttng.so).
 *
 * The provider is dlopen()ed the first time a session asks for the sink
 * (from start/1, on a dirty I/O scheduler: liblttng-ust's constructor may
 * wait for the session daemon, LTTNG_UST_REGISTER_TIMEOUT, 3 s by
 * default) and never dlclose()d: unloading a registered provider is not
 * safe (lttng-ust(3)).  The handle is process-wide: a purge and reload of
 * the NIF finds the provider loaded already (dlopen returns it again).
 * Nothing in the NIF links against liblttng-ust.
 */
#include "bp_sink_lttng.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

typedef int (*emit_fn)(const uint8_t *, uint32_t, uint64_t);

static _Atomic(emit_fn) emit;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

int bp_lttng_load(const char *path, char *why, size_t n)
{
	void *h;
	emit_fn f;
	int ret = 0;

	if (atomic_load(&emit))
		return 0;
	pthread_mutex_lock(&load_lock);
	if (atomic_load(&emit))
		goto out;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, n, "cannot load %s: %s", path, e ? e : "?");
		ret = -1;
		goto out;
	}
	f = (emit_fn)dlsym(h, "bp_lttng_emit_session");
	if (!f) {
		snprintf(why, n, "%s has no bp_lttng_emit_session (a provider "
			 "of another beamprobe release, loaded first by this "
			 "OS process?)", path);
		ret = -1; /* kept loaded all the same: never dlclose */
		goto out;
	}
	atomic_store(&emit, f);
out:
	pthread_mutex_unlock(&load_lock);
	return ret;
}

void bp_lttng_emit(const uint8_t *ev, uint32_t len, uint64_t session)
{
	emit_fn f = atomic_load_explicit(&emit, memory_order_acquire);

	if (f)
		(void)f(ev, len, session);
}

uint64_t bp_lttng_session_id(const uint8_t uuid[16])
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | uuid[i];
	return v;
}
