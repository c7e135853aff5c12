/* bp_sink_lttng.h -- the LTTng-UST sink (see bp_sink_lttng.c). */
#ifndef BP_SINK_LTTNG_H
#define BP_SINK_LTTNG_H

#include <stddef.h>
#include <stdint.h>

/* Loads the provider object at path (once per OS process; never
 * unloaded).  0, or -1 with the reason in why. */
int bp_lttng_load(const char *path, char *why, size_t n);

/* Fires the tracepoint of one event record of the session with id
 * `session', if the provider is loaded.  Collector thread. */
void bp_lttng_emit(const uint8_t *ev, uint32_t len, uint64_t session);

/* A session's id in LTTng events (their `session' field) and in
 * info/1 (`lttng_session'): its uuid's first 8 bytes, big endian. */
uint64_t bp_lttng_session_id(const uint8_t uuid[16]);

#endif /* BP_SINK_LTTNG_H */
