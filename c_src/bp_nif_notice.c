/* bp_nif_notice.c -- tampered/3 of beamprobe_nif: writes a "tampered"
 * event (c_src/bp_format.h) into the calling thread's ring of a session,
 * for the watchdog (src/beamprobe_watch.erl) that saw another tool remove
 * or replace what the session installed.
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
#define NOTICE_FIELDS 4

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

/* tampered(Session, Pid | undefined, [What, Subject, How, Detail]) ->
 * ok | {error, stopped | no_buffer | ring_full}; badarg unless the list
 * holds exactly four binaries. */
ERL_NIF_TERM bp_nif_tampered(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	struct bp_session *s = bp_session_get(env, argv[0]);
	ErlNifBinary f[NOTICE_FIELDS];
	ERL_NIF_TERM list = argv[2], head;
	ErlNifPid pid;
	struct bp_slot *sl;
	uint64_t key = 0;
	uint32_t max = BP_EVENT_HEADER_SIZE;
	uint8_t *start, *p;
	int n = 0;

	(void)argc;
	if (!s)
		return enif_make_badarg(env);
	while (enif_get_list_cell(env, list, &head, &list)) {
		if (n == NOTICE_FIELDS || !enif_inspect_binary(env, head, &f[n]))
			return enif_make_badarg(env);
		n++;
	}
	if (n != NOTICE_FIELDS || !enif_is_empty_list(env, list))
		return enif_make_badarg(env);
	if (enif_get_local_pid(env, argv[1], &pid))
		key = (uint64_t)argv[1];
	else if (!enif_is_atom(env, argv[1]))
		return enif_make_badarg(env);
	for (int i = 0; i < n; i++)
		max += NOTICE_TEXT_MAX + 1;
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
	p = start + bp_ev_header(start, BP_EV_TAMPERED, bp_now(), key);
	for (int i = 0; i < n; i++)
		p += put_text(p, &f[i]);
	bp_ring_commit(&sl->ring, (uint32_t)(p - start));
	atomic_store_explicit(&sl->busy, 0, memory_order_release);
	return bp_atom.ok;
}
