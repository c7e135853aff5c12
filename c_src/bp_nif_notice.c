/* bp_nif_notice.c -- tampered/3 and notice/4 of beamprobe_nif: write a
 * "tampered", "monitor" or "sample" event (c_src/bp_format.h) into the
 * calling thread's ring of a session, for the watchdog
 * (src/beamprobe_watch.erl) that saw another tool remove or replace what
 * the session installed, the shared system monitor
 * (src/beamprobe_monitor.erl) and the sampler (src/beamprobe_sampler.erl).
 *
 * Called by the session process on a normal scheduler.  The event is a
 * user event: counted in `events' when written, as a loss (ring_full) when
 * the ring has no room, never past a stopped session.  It bypasses the
 * event and rate limits (it says why events are missing) and the sinks'
 * `events'/`procs' filters (bp_collector.c, bp_sink_handler.c).
 */
#include <string.h>

#include "bp_atoms.h"
#include "bp_clock.h"
#include "bp_ctf.h"
#include "bp_nif.h"
#include "bp_ring.h"
#include "bp_session.h"

/* Longest text field: longer ones are cut (at a UTF-8 boundary). */
#define NOTICE_TEXT_MAX 1024
#define NOTICE_FIELDS 8

/* Copies binary b into p as a NUL-ended text field (NULs become '?', cut
 * at NOTICE_TEXT_MAX bytes without splitting a UTF-8 sequence).  Returns
 * the bytes written, NUL included. */
static size_t put_text(uint8_t *p, const ErlNifBinary *b)
{
	size_t n = b->size;

	if (n > NOTICE_TEXT_MAX) {
		n = NOTICE_TEXT_MAX;
		while (n > 0 && (b->data[n] & 0xC0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++)
		p[i] = b->data[i] ? b->data[i] : '?';
	p[n] = '\0';
	return n + 1;
}

/* Writes an event of class id whose fields (in wire order, as the schema
 * says: a binary for a string kind, a non-negative integer for an integer
 * kind) are the list `list', with key as its pid.  ok | {error, stopped |
 * no_buffer | ring_full}; badarg for fields that do not fit the class. */
static ERL_NIF_TERM write_notice(ErlNifEnv *env, struct bp_session *s,
				 uint16_t id, uint64_t key, ERL_NIF_TERM list)
{
	const struct bp_event_desc *d = &bp_event_descs[id];
	ErlNifBinary f[NOTICE_FIELDS];
	ErlNifUInt64 num[NOTICE_FIELDS];
	ERL_NIF_TERM head;
	struct bp_slot *sl;
	uint32_t max = BP_EVENT_HEADER_SIZE;
	uint8_t *start, *p;
	unsigned n = 0;

	while (enif_get_list_cell(env, list, &head, &list)) {
		if (n == d->nfields || n == NOTICE_FIELDS)
			return enif_make_badarg(env);
		switch (d->fields[n].type) {
		case BP_T_STR:
			if (!enif_inspect_binary(env, head, &f[n]))
				return enif_make_badarg(env);
			max += NOTICE_TEXT_MAX + 1;
			break;
		case BP_T_U8:
		case BP_T_U32:
		case BP_T_U64:
			if (!enif_get_uint64(env, head, &num[n]) ||
			    (d->fields[n].type == BP_T_U8 && num[n] > 0xFF) ||
			    (d->fields[n].type == BP_T_U32 &&
			     num[n] > 0xFFFFFFFFu))
				return enif_make_badarg(env);
			max += 8;
			break;
		}
		n++;
	}
	if (n != d->nfields || !enif_is_empty_list(env, list))
		return enif_make_badarg(env);
	if (!(sl = bp_session_slot(s)))
		return enif_make_tuple2(env, bp_atom.error,
					enif_make_atom(env, "no_buffer"));
	atomic_exchange_explicit(&sl->busy, 1, memory_order_seq_cst);
	if (atomic_load(&s->state) != BP_S_RUNNING) {
		atomic_store_explicit(&sl->busy, 0, memory_order_release);
		return enif_make_tuple2(env, bp_atom.error, bp_atom.stopped);
	}
	start = bp_ring_reserve(&sl->ring, max);
	if (!start) {
		bp_slot_drop(sl, BP_DROP_RING_FULL);
		atomic_store_explicit(&sl->busy, 0, memory_order_release);
		return enif_make_tuple2(env, bp_atom.error,
					enif_make_atom(env, "ring_full"));
	}
	p = start + bp_ev_header(start, id, bp_now(), key);
	for (unsigned i = 0; i < n; i++) {
		switch (d->fields[i].type) {
		case BP_T_STR:
			p += put_text(p, &f[i]);
			break;
		case BP_T_U8:
			*p++ = (uint8_t)num[i];
			break;
		case BP_T_U32:
			bp_put_u32(p, (uint32_t)num[i]);
			p += 4;
			break;
		case BP_T_U64:
			bp_put_u64(p, num[i]);
			p += 8;
			break;
		}
	}
	bp_ring_commit(&sl->ring, (uint32_t)(p - start));
	atomic_store_explicit(&sl->busy, 0, memory_order_release);
	return bp_atom.ok;
}

/* The key of a local pid or port, 0 for an atom (undefined); -1 for
 * anything else. */
static int notice_key(ErlNifEnv *env, ERL_NIF_TERM t, uint64_t *key)
{
	ErlNifPid pid;
	ErlNifPort port;

	*key = 0;
	if (enif_get_local_pid(env, t, &pid) ||
	    enif_get_local_port(env, t, &port))
		*key = (uint64_t)t;
	else if (!enif_is_atom(env, t))
		return -1;
	return 0;
}

/* tampered(Session, Pid | undefined, [What, Subject, How, Detail]) ->
 * ok | {error, stopped | no_buffer | ring_full}; badarg unless the list
 * holds exactly four binaries. */
ERL_NIF_TERM bp_nif_tampered(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	struct bp_session *s = bp_session_get(env, argv[0]);
	uint64_t key;

	(void)argc;
	if (!s || notice_key(env, argv[1], &key) < 0)
		return enif_make_badarg(env);
	return write_notice(env, s, BP_EV_TAMPERED, key, argv[2]);
}

/* notice(Session, monitor | sample, Pid | Port | undefined, Fields) ->
 * as tampered/3, for the "monitor" and "sample" classes
 * (src/beamprobe_monitor.erl, src/beamprobe_sampler.erl); Fields as the
 * schema lists them: binaries for text, integers for numbers. */
ERL_NIF_TERM bp_nif_notice(ErlNifEnv *env, int argc,
			   const ERL_NIF_TERM argv[])
{
	struct bp_session *s = bp_session_get(env, argv[0]);
	char kind[16];
	uint16_t id;
	uint64_t key;

	(void)argc;
	if (!s || !enif_get_atom(env, argv[1], kind, sizeof kind,
				 ERL_NIF_LATIN1) ||
	    notice_key(env, argv[2], &key) < 0)
		return enif_make_badarg(env);
	if (!strcmp(kind, "monitor"))
		id = BP_EV_MONITOR;
	else if (!strcmp(kind, "sample"))
		id = BP_EV_SAMPLE;
	else
		return enif_make_badarg(env);
	return write_notice(env, s, id, key, argv[3]);
}
