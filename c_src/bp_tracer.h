/* bp_tracer.h -- writing one event into one session (bp_tracer.c), for
 * the tracer callbacks that decide which sessions an event goes to
 * (bp_dispatch.c).  Producer context: see bp_tracer.c for the rules. */
#ifndef BP_TRACER_H
#define BP_TRACER_H

#include <stdint.h>
#include <erl_nif.h>

#include "bp_atoms.h"
#include "bp_erts_layout.h"

struct bp_session;

/* The longest "m:f/arity" text, NUL included: an atom of compiled code is
 * at most 255 bytes of UTF-8, so 255 characters, each written in at most 4
 * bytes ('\001', '\200' in ~p's syntax, a 4-byte UTF-8 character) between
 * quotes: 1022 bytes; then ':', '/', an arity of up to 10 digits and the
 * NUL.  (It was 1040, "two quoted 255-char latin-1 atoms in UTF-8": a
 * module of 255 quote characters with a function of 255 control
 * characters, 1539 bytes, was recorded as `undefined'.) */
#define BP_MFA_MAX (2 * 1022 + 2 + 10 + 1)

/* How an event is being written: through the hub (the producer's hub
 * busy flag stands for the session's, bp_hub.h), and the last record
 * written for this event, which members that render it the same way get
 * as a copy (render once, copy for the others). */
/* {M, F, Arity | Args} of a call event, decoded once per event (by the
 * hub, for every member it writes to). */
struct bp_mfa {
	int state; /* 0: not decoded yet, 1: valid, -1: not an MFA */
	unsigned arity;
	const ERL_NIF_TERM *e; /* the tuple's three elements */
};

/* Decodes mfa into d (state 1, or -1 if it is not a 3-tuple). */
void bp_mfa_decode(ErlNifEnv *env, ERL_NIF_TERM mfa, struct bp_mfa *d);

struct ev_ctx {
	int hub;
	uint32_t len;
	const uint8_t *rec; /* in the ring of the session that wrote it */
	uint32_t rec_render; /* its render class (bp_hub_member.render) */
	int has_info;      /* a routed call with this member's call info */
	ERL_NIF_TERM info; /* (its `message' action's value) */
	/* The richest record written for a session whose usdt sink fires
	 * the event's probe (NULL: none; usdt_rank: bp_usdt.h); fired once
	 * the walk of the members is over (bp_usdt_hub_fire). */
	const uint8_t *usdt_rec;
	uint32_t usdt_len, usdt_rank;
	struct bp_mfa mfa; /* call events: argv[3] decoded (state 0: not) */
};

/* Every callback clears one of these ({.hub = 1}).  Up to 64 bytes gcc
 * clears it with a few stores; a larger one it clears with `rep stos',
 * whose start-up costs tens of cycles per event (a 96-byte ev_ctx,
 * cleared once per member, added ≈ 40 ns per call with 8 sessions:
 * docs/performance/stops-24-28.md, "Overlapping sessions written once"). */
_Static_assert(sizeof(struct ev_ctx) <= 64,
	       "struct ev_ctx is cleared per event: keep it to one line");

/* The value of key k (an atom) in the callback's options map opts, or
 * `undefined' with *found = 0.  A flat map (what the VM passes: a few
 * keys) is read from its words, the keys compared as atom words; any
 * other map through enif_get_map_value. */
static inline ERL_NIF_TERM bp_tracer_opt(ErlNifEnv *env, ERL_NIF_TERM opts,
					 ERL_NIF_TERM k, int *found)
{
	ERL_NIF_TERM v = bp_atom.undefined;
	const ERL_NIF_TERM *ks, *vs;
	size_t n;

	if (bp_erts_flatmap(opts, &n, &ks, &vs)) {
		for (size_t i = 0; i < n; i++)
			if (ks[i] == k) {
				*found = 1;
				return vs[i];
			}
		*found = 0;
		return v;
	}
	*found = enif_is_map(env, opts) && enif_get_map_value(env, opts, k, &v);
	return v;
}

/* The writers: each writes the event of the callback arguments argv into
 * session s (or nothing, counting the loss), and on success leaves the
 * record in c.  `arg': for calls, whether the match-spec result is the
 * hub's route (then c may hold the member's call info); for messages,
 * 1 for send, 0 for receive; unused by the others. */
void bp_tracer_write_call(ErlNifEnv *env, struct bp_session *s,
			  const ERL_NIF_TERM argv[], int routed,
			  struct ev_ctx *c);
void bp_tracer_write_message(ErlNifEnv *env, struct bp_session *s,
			     const ERL_NIF_TERM argv[], int is_send,
			     struct ev_ctx *c);
void bp_tracer_write_procs_ports(ErlNifEnv *env, struct bp_session *s,
				 const ERL_NIF_TERM argv[], int unused,
				 struct ev_ctx *c);
void bp_tracer_write_running(ErlNifEnv *env, struct bp_session *s,
			     const ERL_NIF_TERM argv[], int unused,
			     struct ev_ctx *c);
void bp_tracer_write_gc(ErlNifEnv *env, struct bp_session *s,
			const ERL_NIF_TERM argv[], int unused,
			struct ev_ctx *c);

/* A follow session's send (is_send: to `other') or receive of msg by the
 * tracee, from a seq_trace event (bp_follow.c). */
void bp_tracer_write_msg(ErlNifEnv *env, struct bp_session *s, int is_send,
			 ERL_NIF_TERM tracee, ERL_NIF_TERM other,
			 ERL_NIF_TERM msg, struct ev_ctx *c);

/* A follow session's request was cut (bp_follow.h): an annotation event
 * `follow_cut' with value text `value' ({events, N} or {ms, T}) about the
 * request's first process, whose local pid term word is root. */
void bp_tracer_write_cut(ErlNifEnv *env, struct bp_session *s, uint64_t root,
			 const char *value, struct ev_ctx *c);

/* beamprobe:annotate(Tag, Value) of process `who' (the caller) into s. */
void bp_tracer_write_annotation(ErlNifEnv *env, struct bp_session *s,
				ERL_NIF_TERM who, ERL_NIF_TERM tag,
				ERL_NIF_TERM value, struct ev_ctx *c);

#endif /* BP_TRACER_H */
