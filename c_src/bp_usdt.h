/* bp_usdt.h -- the USDT probes of the NIF (provider `beamprobe', c_src/
 * beamprobe_probes.d, docs/usdt.md): firing them for the events of the
 * sessions that have a usdt sink.
 *
 * The hot-path hook is bp_usdt_event(), called once an event's record is
 * committed: for a session without a usdt sink it costs one load and a
 * branch (s->usdt_kinds == 0); for a session with one, one more load of
 * the probe's is-enabled semaphore, which the kernel (uprobes), gdb or
 * SystemTap raise while they are attached.  Only then is the record
 * decoded (bp_usdt.c) and the probe fired with typed arguments pointing
 * into it.  An event goes to many hub members; its probe fires once,
 * with the longest of the usdt sessions' records (ev_ctx.usdt_rec,
 * bp_usdt_hub_fire).  Producer context: the rules of bp_tracer.c.
 */
#ifndef BP_USDT_H
#define BP_USDT_H

#include <stdint.h>
#include <erl_nif.h>

#include "bp_format.h"
#include "bp_session.h"
#include "bp_tracer.h"

/* The is-enabled semaphore of the probe of each event class (a zero word
 * for classes without one). */
extern volatile unsigned short *const bp_usdt_sem[BP_EV_COUNT];

/* -1 if every event class has its entry in bp_usdt_sem, else the first
 * class without one (checked when the NIF loads). */
int bp_usdt_sem_check(void);

/* Decodes record rec (an event of the schema, tracee `who') and fires its
 * probe, with the one-time process/function definitions first. */
void bp_usdt_fire(ErlNifEnv *env, ERL_NIF_TERM who, const uint8_t *rec,
		  uint32_t len);

static inline void bp_usdt_event(ErlNifEnv *env, const struct bp_session *s,
				 ERL_NIF_TERM who, const uint8_t *rec,
				 uint32_t len, struct ev_ctx *c)
{
	uint16_t id;
	uint32_t rank;

	if (__builtin_expect(!s->usdt_kinds, 1))
		return;
	id = bp_get_u16(rec);
	if (id >= BP_EV_COUNT || !((s->usdt_kinds >> id) & 1) ||
	    __builtin_expect(!*bp_usdt_sem[id], 1))
		return;
	if (!c->hub) { /* one session */
		bp_usdt_fire(env, who, rec, len);
		return;
	}
	/* Through the hub the probe fires once, after the walk of the
	 * members, with the richest record among the usdt sessions': one
	 * with the arguments (args => full) over one without ("undefined"),
	 * then the longest (the capture limits that cut the least).  The
	 * record stays in that session's ring until then: only this thread
	 * writes into its slot, and no other member's event goes there; the
	 * hub's busy flag holds the session's stop off. */
	rank = (len & 0x7fffffffu) |
	       (s->args_mode == BP_ARGS_FULL ? 0x80000000u : 0);
	if (!c->usdt_rec || rank > c->usdt_rank) {
		c->usdt_rec = rec;
		c->usdt_len = len;
		c->usdt_rank = rank;
	}
}

/* After the walk of the hub's members (still inside the hub): fires the
 * probe of the event with the record bp_usdt_event chose, if any. */
static inline void bp_usdt_hub_fire(ErlNifEnv *env, ERL_NIF_TERM who,
				    const struct ev_ctx *c)
{
	if (__builtin_expect(c->usdt_rec != NULL, 0))
		bp_usdt_fire(env, who, c->usdt_rec, c->usdt_len);
}

/* Process key has registered name `name' (an atom; 0 or `undefined':
 * none) for the `process' definition probe.  Any thread; bounded; a
 * busy table entry drops the update. */
void bp_usdt_name(uint64_t key, ERL_NIF_TERM name);

/* Is a tool attached to any probe of the session's usdt kinds?  (Tests,
 * info.)  Any thread. */
int bp_usdt_attached(uint64_t kinds);

/* beamprobe_nif:user_annotate(Tag, Term): writes an annotation event into
 * every session tracing the calling process and fires beamprobe:annotate;
 * `ok' at once when no session and no probe wants it. */
ERL_NIF_TERM bp_usdt_nif_annotate(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[]);

/* beamprobe_nif:usdt_enabled(Name): is probe beamprobe:Name's semaphore
 * raised (a tool attached)?  For tests and scripts that wait for bpftrace
 * to attach. */
ERL_NIF_TERM bp_usdt_nif_enabled(ErlNifEnv *env, int argc,
				 const ERL_NIF_TERM argv[]);

#endif /* BP_USDT_H */
