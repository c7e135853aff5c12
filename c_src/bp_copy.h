/* bp_copy.h -- an event written once, copied into the other sessions
 * that render it alike: the per-extra-session part of the hot path
 * (bp_dispatch.c), and the tracee's "process" event check every writer
 * shares (bp_tracer.c).
 *
 * Inline so that what an overlapping session costs per event is its own
 * work only -- its enter (state, limits), the process check, the
 * reservation, the copy, the commit -- with no call, no second lookup of
 * the thread's slot number and no render comparison (hub members carry a
 * render class, bp_hub.h).  Producer context: the rules of bp_tracer.c.
 */
#ifndef BP_COPY_H
#define BP_COPY_H

#include <stdint.h>
#include <string.h>
#include <erl_nif.h>

#include "bp_session.h"
#include "bp_tracer.h"
#include "bp_usdt.h"

/* Writes the "process" event of key into sl, and notes it written
 * (bp_tracer.c).  Inside enter/leave. */
void bp__tracer_note_entity_write(ErlNifEnv *env, struct bp_slot *sl,
				  ERL_NIF_TERM who, uint64_t key,
				  uint64_t *seen);

/* The tracee's process event is written once per slot: checked first
 * against the last key found (ring.owner_word, on the line the
 * reservation reads anyway: a run of events of one process touches no
 * other line), then against the set. */
static inline __attribute__((always_inline)) void
bp_tracer_note_entity(ErlNifEnv *env, struct bp_slot *sl, ERL_NIF_TERM who,
		      uint64_t key)
{
	uint64_t *seen;

	if (__builtin_expect(sl->ring.owner_word == key, 1))
		return; /* (key 0, not a local entity: nothing to write) */
	seen = &sl->pid_seen[(key >> 4) % BP_PID_CACHE];
	if (*seen == key || key == 0) {
		sl->ring.owner_word = key;
		return;
	}
	bp__tracer_note_entity_write(env, sl, who, key, seen);
}

/* Copies a record of len bytes (a whole event, >= its header) without a
 * call: two overlapping moves of the largest power of two <= len, as
 * memcpy does, inline for the usual 24-128 bytes. */
static inline __attribute__((always_inline)) void
bp_copy_record(uint8_t *dst, const uint8_t *src, uint32_t len)
{
	if (len >= 32 && len <= 64) {
		uint8_t a[32], b[32];
		memcpy(a, src, 32);
		memcpy(b, src + len - 32, 32);
		memcpy(dst, a, 32);
		memcpy(dst + len - 32, b, 32);
	} else if (len >= 16 && len < 32) {
		uint8_t a[16], b[16];
		memcpy(a, src, 16);
		memcpy(b, src + len - 16, 16);
		memcpy(dst, a, 16);
		memcpy(dst + len - 16, b, 16);
	} else {
		memcpy(dst, src, len);
	}
}

/* Writes the record c holds (rendered for another session of the same
 * render class) into s: its process event first if s has not seen the
 * tracee, the limits and loss accounting of s as for any event. */
static inline __attribute__((always_inline)) void
bp_tracer_copy_event(ErlNifEnv *env, struct bp_session *s,
		     ERL_NIF_TERM tracee, struct ev_ctx *c)
{
	struct bp_slot *sl = bp__session_enter(s, !c->hub);

	if (!sl)
		return;
	/* The tracee is always a local pid or port (an immediate word). */
	bp_tracer_note_entity(env, sl, tracee, (uint64_t)tracee);
	if (bp_ring_put(&sl->ring, c->rec, c->len, bp_copy_record))
		bp_usdt_event(env, s, tracee, c->rec, c->len, c);
	else
		bp_session_lost(s, sl, c->len);
	if (!c->hub)
		bp_session_leave(sl);
}

#endif /* BP_COPY_H */
