/* bp_lttng_ev.h -- one beamprobe event decoded for the LTTng-UST
 * tracepoints of bp_lttng_tp.h: the header's timestamp and process key,
 * and each field by its wire position (num[] for integer kinds, str[] for
 * string kinds, NUL-ended, pointing into the ring record). */
#ifndef BP_LTTNG_EV_H
#define BP_LTTNG_EV_H

#include <stdint.h>

#define BP_LTTNG_MAX_FIELDS 16

struct bp_lttng_ev {
	uint64_t ts;
	uint64_t key;
	uint64_t session; /* the session's first 8 uuid bytes (info/1's
			     lttng_session) */
	uint64_t num[BP_LTTNG_MAX_FIELDS];
	const char *str[BP_LTTNG_MAX_FIELDS];
};

#endif /* BP_LTTNG_EV_H */
