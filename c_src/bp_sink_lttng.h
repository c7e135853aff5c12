/* bp_sink_lttng.h -- the LTTng-UST sink (see bp_sink_lttng.c). */
#ifndef BP_SINK_LTTNG_H
#define BP_SINK_LTTNG_H

#include <stddef.h>
#include <stdint.h>

/* Loads the provider object at path (once per OS process; never
 * unloaded).  0, or -1 with the reason in why. */
int bp_lttng_load(const char *path, char *why, size_t n);

/* Fires the tracepoint of one event record, if the provider is loaded.
 * Collector thread. */
void bp_lttng_emit(const uint8_t *ev, uint32_t len);

#endif /* BP_SINK_LTTNG_H */
