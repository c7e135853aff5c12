/* bp_lttng.c -- the LTTng-UST tracepoint provider `beamprobe', built as
 * its own shared object (priv/beamprobe_lttng.so, linked with
 * liblttng-ust) so that nothing else links against liblttng-ust.  The NIF
 * dlopen()s it only for a session with an `output => lttng' sink and
 * never dlclose()s it (c_src/bp_sink_lttng.c): a registered provider must
 * not be unloaded, and a purge of the NIF does not unload it.
 *
 * Its one entry point, bp_lttng_emit_session(), runs on a session's collector
 * thread (never a traced process): it decodes one ring record (the layout
 * of c_src/bp_format.h) and fires the tracepoint of its class, whose
 * fields are the record's fields by their schema names, plus `ts' (the
 * event's own timestamp, CLOCK_MONOTONIC ns), `key' (its process key) and
 * `session' (which session recorded it).
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "bp_lttng_tp.h"

#include <string.h>

#include "../bp_format.h"
#include "bp_lttng_fire.h"

/* Decodes ev (len bytes) into d.  0, or -1 for a record that does not
 * match its class (then nothing is fired). */
static int decode(const uint8_t *ev, uint32_t len, struct bp_lttng_ev *d,
		  unsigned *id)
{
	const struct bp_event_desc *c;
	uint32_t off = BP_EVENT_HEADER_SIZE;

	if (len < BP_EVENT_HEADER_SIZE)
		return -1;
	*id = bp_get_u16(ev + BP_EV_OFF_ID);
	if (*id >= BP_EV_COUNT || !bp_event_descs[*id].name)
		return -1;
	c = &bp_event_descs[*id];
	if (c->nfields > BP_LTTNG_MAX_FIELDS)
		return -1;
	d->ts = bp_get_u64(ev + BP_EV_OFF_TS);
	d->key = bp_get_u64(ev + BP_EV_OFF_PID);
	for (unsigned f = 0; f < c->nfields; f++) {
		const uint8_t *nul;
		switch (c->fields[f].type) {
		case BP_T_U8:
			if (len - off < 1)
				return -1;
			d->num[f] = ev[off];
			off += 1;
			break;
		case BP_T_U32:
			if (len - off < 4)
				return -1;
			d->num[f] = bp_get_u32(ev + off);
			off += 4;
			break;
		case BP_T_U64:
			if (len - off < 8)
				return -1;
			d->num[f] = bp_get_u64(ev + off);
			off += 8;
			break;
		case BP_T_STR:
			nul = memchr(ev + off, 0, len - off);
			if (!nul)
				return -1;
			d->str[f] = (const char *)(ev + off);
			off = (uint32_t)(nul - ev) + 1;
			break;
		}
	}
	return 0;
}

/* Fires the tracepoint of one beamprobe event record of session
 * `session' (its id: two sessions recording the same event into LTTng
 * fire it twice, told apart by this field).  Returns 1 if it was fired,
 * 0 if the record was malformed.  (Named anew when its arguments
 * changed: a NIF never calls a provider of another release, which stays
 * loaded in the OS process, with arguments it does not take.) */
__attribute__((visibility("default"))) int
bp_lttng_emit_session(const uint8_t *ev, uint32_t len, uint64_t session)
{
	struct bp_lttng_ev d;
	unsigned id;

	if (decode(ev, len, &d, &id))
		return 0;
	d.session = session;
	bp_lttng_fire(id, &d);
	return 1;
}
