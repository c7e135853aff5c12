/* bp_dispatch.c -- the erl_tracer callbacks: which sessions an event goes
 * to.
 *
 * Runs in the context of the traced process (or port), on any scheduler
 * thread, normal or dirty, concurrently with every other scheduler: the
 * rules of bp_tracer.c hold here too (no lock, no malloc, no enif_send).
 *
 * The tracer state says where an event goes: the atom beamprobe_hub (every
 * process traced by beamprobe's sessions, bp_hub.h) or beamprobe_hub_meta
 * (the meta patterns of meta sessions, whose calls of every process go to
 * the members that record meta calls): to every hub member
 * whose filter accepts it -- its event kinds, its processes, its
 * functions, or for a call the route a combined match spec sent
 * (beamprobe_combine.erl) -- rendered once, copied into the others that
 * render it the same way; a session resource (a tracer state of an older
 * beamprobe, e.g. across an upgrade): to that session.  Writing one event into one session: bp_tracer.c.
 */
#include <string.h>

#include "bp_atoms.h"
#include "bp_copy.h"
#include "bp_erts_layout.h"
#include "bp_follow.h"
#include "bp_hub.h"
#include "bp_nif.h"
#include "bp_retstack.h"
#include "bp_session.h"
#include "bp_tracer.h"

static inline struct bp_session *get_session(ErlNifEnv *env, ERL_NIF_TERM t)
{
	return bp_session_get(env, t);
}


/* enabled/3 and every enabled_* callback, one function: the VM calls the
 * callbacks through one indirect call site (erts_nif_call_function), and
 * on this machine's CPUs that call costs ~30 ns more per traced call when
 * enabled_call and enabled are two functions than when they are one (an
 * A/B of the do-nothing floor tracer both ways, docs/performance.md).
 * Every event kind: trace.  Whether the session still records is decided
 * once, in the trace callback (which counts a loss).  trace_status (the
 * VM asking whether the tracer is still wanted): a hub tracer is while
 * the hub has members (the janitor removes every flag when the last
 * session ends; this is the safety net); a session tracer state while its
 * session lives; else the tracer is removed.  The state beamprobe_discard
 * (the profile mode's: the call flag that call_time needs, and no event
 * at all, not even of other tools' patterns) discards every event and
 * stays. */
ERL_NIF_TERM bp_tracer_enabled(ErlNifEnv *env, int argc,
			       const ERL_NIF_TERM argv[])
{
	struct bp_session *s;

	(void)argc;
	if (argv[0] != bp_atom.trace_status)
		return __builtin_expect(argv[1] == bp_atom.beamprobe_discard, 0)
			       ? bp_atom.discard
			       : bp_atom.trace;
	if (argv[1] == bp_atom.beamprobe_discard)
		return bp_atom.trace;
	if (argv[1] == bp_atom.beamprobe_hub ||
	    argv[1] == bp_atom.beamprobe_hub_meta)
		return bp_hub_any() ? bp_atom.trace : bp_atom.remove;
	s = get_session(env, argv[1]);
	if (!s || atomic_load_explicit(&s->state, memory_order_relaxed) ==
			  BP_S_STOPPED)
		return bp_atom.remove;
	return bp_atom.trace;
}

typedef void (*writer_fn)(ErlNifEnv *env, struct bp_session *s,
			  const ERL_NIF_TERM argv[], int arg, struct ev_ctx *c);

/* Writes the event into member m: a copy of the record c holds when the
 * member that wrote it is of m's render class, else rendered by w. */
static inline __attribute__((always_inline)) void
hub_write(ErlNifEnv *env, const struct bp_hub_member *m,
	  const ERL_NIF_TERM argv[], writer_fn w, int arg, struct ev_ctx *c)
{
	if (c->rec && c->rec_render == m->render) {
		bp_tracer_copy_event(env, m->s, argv[2], c);
		return;
	}
	c->rec = NULL;
	w(env, m->s, argv, arg, c);
	c->rec_render = m->render;
}

/* Writes the event with w into every hub member that records `kind' (and
 * port events if the tracee is a port) and includes the tracee, or into the session of a session tracer state
 * (meta patterns). */
static ERL_NIF_TERM dispatch(ErlNifEnv *env, const ERL_NIF_TERM argv[],
			     uint32_t kind, writer_fn w, int arg)
{
	struct bp_session *s;

	if (argv[1] == bp_atom.beamprobe_hub) {
		uint64_t live[BP_HUB_WORDS], key = (uint64_t)argv[2];
		struct ev_ctx c = {.hub = 1};
		uint32_t nw;
		int idx;

		if (!(nw = bp_hub_enter(&idx, live)))
			return bp_atom.ok;
		/* Ports are traced only for members that record port events
		 * (a port also sends messages: not to a send-only member). */
		if (bp_erts_is_local_port(env, argv[2])) /* a tracee: local */
			kind |= BP_HK_PORTS;
		for (uint32_t wd = 0; wd < nw; wd++)
			while (live[wd]) {
				int i = (int)wd * 64 + __builtin_ctzll(live[wd]);
				struct bp_hub_member *m = atomic_load_explicit(
					&bp_hub.members[i], memory_order_acquire);
				live[wd] &= live[wd] - 1;
				if (m && (m->kinds & kind) == kind &&
				    bp_hub_includes(m, key))
					hub_write(env, m, argv, w, arg, &c);
			}
		bp_usdt_hub_fire(env, argv[2], &c);
		bp_hub_leave(idx);
		return bp_atom.ok;
	}
	if (argv[1] != bp_atom.beamprobe_hub_meta &&
	    (s = get_session(env, argv[1]))) {
		struct ev_ctx c = {.hub = 0};
		w(env, s, argv, arg, &c);
	}
	return bp_atom.ok;
}

/* Call info in a route: at most this many members' (more: "true"). */
#define ROUTE_INFOS 16

struct route_info {
	int member;
	ERL_NIF_TERM info;
};

/* The hub's route in a call's match-spec result: {bp_route, E1, ...,
 * Ek} (the tag salted, bp_hub_route_atoms: no traced term carries it)
 * where Ei is V = Member + 256 * Returns (an integer), or {V, Info} for
 * a member whose clause has a `message' action, when that member's
 * condition held, else false or 'EXIT' (docs/design.md); Returns: 1 if
 * its clause asks for return_trace, 3 for exception_trace.  The tag is
 * bp_route_ret when the VM traces this call's return (a clause asking
 * for it matched): then *ret is set, with the members its return_from
 * (rmask) and exception_from (xmask) go to.  The first element of a
 * member counts (its first matching clause, as the VM runs one clause).
 * Sets the members in mask and their infos in infos; returns 0 if the
 * result is no route. */
static int call_route(ErlNifEnv *env, ERL_NIF_TERM opts,
		      uint64_t mask[BP_HUB_WORDS],
		      struct route_info infos[ROUTE_INFOS], int *ninfos,
		      int *ret, uint64_t rmask[BP_HUB_WORDS],
		      uint64_t xmask[BP_HUB_WORDS])
{
	ERL_NIF_TERM r;
	const ERL_NIF_TERM *e, *mi;
	int n, found, arity;

	r = bp_tracer_opt(env, opts, bp_atom.match_spec_result, &found);
	if (!found || !enif_get_tuple(env, r, &n, &e) || n < 1 ||
	    (e[0] != bp_atom.bp_route && e[0] != bp_atom.bp_route_ret))
		return 0;
	*ret = e[0] == bp_atom.bp_route_ret;
	for (int i = 1; i < n; i++) {
		int v, has = 0, rf;
		if (enif_get_int(env, e[i], &v))
			;
		else if (enif_get_tuple(env, e[i], &arity, &mi) && arity == 2 &&
			 enif_get_int(env, mi[0], &v))
			has = 1;
		else
			continue;
		rf = v >> 8;
		v &= 255;
		if (v < 0 || v >= BP_HUB_MAX || (mask[v / 64] & (1ull << (v % 64))))
			continue;
		mask[v / 64] |= 1ull << (v % 64);
		if (rf & 1)
			rmask[v / 64] |= 1ull << (v % 64);
		if (rf & 2)
			xmask[v / 64] |= 1ull << (v % 64);
		if (has && *ninfos < ROUTE_INFOS) {
			infos[*ninfos].member = v;
			infos[(*ninfos)++].info = mi[1];
		}
	}
	return 1;
}

static inline int member_info(const struct route_info *infos, int n, int m,
			      ERL_NIF_TERM *info)
{
	for (int i = 0; i < n; i++)
		if (infos[i].member == m) {
			*info = infos[i].info;
			return 1;
		}
	return 0;
}

/* Call events through the hub: a call goes to the members its match
 * spec's route names, or without a route to the members whose patterns
 * name the function; return_from and exception_from of a routed call to
 * the members whose clause asked for them (bp_retstack.h), else to the
 * members whose patterns name the function (and that asked for them,
 * bp_tracer_write_call); return_to to the members that record it. */
static ERL_NIF_TERM hub_call(ErlNifEnv *env, const ERL_NIF_TERM argv[],
			     int meta)
{
	ERL_NIF_TERM tag = argv[0];
	/* route, rmask, xmask and c2 are set only on the paths that use
	 * them: zeroing them on every call event costs the single session. */
	uint64_t live[BP_HUB_WORDS], route[BP_HUB_WORDS];
	uint64_t key = (uint64_t)argv[2], mw = 0, fw = 0;
	unsigned arity = 0;
	int idx, routed = 0, is_ret_to = tag == bp_atom.return_to;
	uint32_t kind = meta	    ? BP_HK_META
			: is_ret_to ? BP_HK_RETURN_TO
				    : BP_HK_CALL,
		 nw;
	/* Meta events (the meta patterns apply to every process) have a
	 * return stack of their own per process. */
	uint64_t rkey = meta ? (uint64_t)argv[2] ^ BP_RET_META
			     : (uint64_t)argv[2];
	struct ev_ctx c = {.hub = 1};
	struct route_info infos[ROUTE_INFOS];
	struct ev_ctx c2;
	uint64_t rmask[BP_HUB_WORDS], xmask[BP_HUB_WORDS];
	int ninfos = 0, ret = 0;
	uint32_t routes;

	if (!(nw = bp_hub_enter(&idx, live)))
		return bp_atom.ok;
	routes = atomic_load_explicit(&bp_hub.routes, memory_order_relaxed);
	if (tag == bp_atom.call && routes) {
		memset(route, 0, sizeof route);
		memset(rmask, 0, sizeof rmask);
		memset(xmask, 0, sizeof xmask);
		routed = call_route(env, argv[4], route, infos, &ninfos, &ret,
				    rmask, xmask);
	}
	if (!routed || ret) {
		bp_mfa_decode(env, argv[3], &c.mfa);
		if (c.mfa.state > 0) {
			mw = (uint64_t)c.mfa.e[0];
			fw = (uint64_t)c.mfa.e[1];
			arity = c.mfa.arity;
		}
	}
	if (ninfos) {
		c2 = (struct ev_ctx){.hub = 1, .has_info = 1};
		/* Field by field: a whole-struct copy right after the
		 * decoder's stores stalls on store forwarding. */
		c2.mfa.state = c.mfa.state;
		c2.mfa.arity = c.mfa.arity;
		c2.mfa.e = c.mfa.e;
	}
	if (ret) {
		/* The VM will trace this call's return: remember whose. */
		struct bp_ret_frame *fr = bp_retstack_push(env, rkey);
		if (fr) {
			fr->m = mw;
			fr->f = fw;
			fr->arity = arity;
			memcpy(fr->ret, rmask, sizeof fr->ret);
			memcpy(fr->exc, xmask, sizeof fr->exc);
		}
	} else if (routes && (tag == bp_atom.return_from ||
			      tag == bp_atom.exception_from)) {
		/* The return of a routed call goes where its frame says. */
		struct bp_ret_frame fr;
		if (bp_retstack_pop(rkey, mw, fw, arity, &fr)) {
			routed = 1;
			memcpy(route,
			       tag == bp_atom.return_from ? fr.ret : fr.exc,
			       sizeof route);
		}
	}
	for (uint32_t wd = 0; wd < nw; wd++)
		while (live[wd]) {
			int b = __builtin_ctzll(live[wd]);
			struct bp_hub_member *m = atomic_load_explicit(
				&bp_hub.members[wd * 64 + b],
				memory_order_acquire);
			live[wd] &= live[wd] - 1;
			/* (A meta member's processes are all but those it
			 * excludes: `exclude', beamprobe_janitor.erl.) */
			if (!m || !(m->kinds & kind) ||
			    !bp_hub_includes(m, key))
				continue;
			if (!is_ret_to &&
			    (routed ? !(route[wd] & (1ull << b))
				    : !bp_hub_traces(m, mw, fw, arity)))
				continue;
			if (ninfos && member_info(infos, ninfos, wd * 64 + b,
						  &c2.info)) {
				/* Its own call info: rendered for it alone. */
				bp_tracer_write_call(env, m->s, argv, routed, &c2);
				continue;
			}
			hub_write(env, m, argv, bp_tracer_write_call, routed, &c);
		}
	/* Members with call info of their own were written with c2. */
	if (ninfos && c2.usdt_rec &&
	    (!c.usdt_rec || c2.usdt_rank > c.usdt_rank)) {
		c.usdt_rec = c2.usdt_rec;
		c.usdt_len = c2.usdt_len;
	}
	bp_usdt_hub_fire(env, argv[2], &c);
	bp_hub_leave(idx);
	return bp_atom.ok;
}

/* Call events (call, return_from, exception_from, return_to). */
ERL_NIF_TERM bp_tracer_trace_call(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	struct bp_session *s;

	(void)argc;
	if (argv[1] == bp_atom.beamprobe_hub)
		return hub_call(env, argv, 0);
	if (argv[1] == bp_atom.beamprobe_hub_meta)
		return hub_call(env, argv, 1);
	if ((s = get_session(env, argv[1]))) {
		struct ev_ctx c = {.hub = 0};
		if (s->follow)
			bp_follow_call(env, s, argv, &c);
		else
			bp_tracer_write_call(env, s, argv, 0, &c);
	}
	return bp_atom.ok;
}

/* trace_send/5: send, send_to_non_existing_process. */
ERL_NIF_TERM bp_tracer_trace_send(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	(void)argc;
	return dispatch(env, argv, BP_HK_SEND, bp_tracer_write_message, 1);
}

/* trace_receive/5: 'receive'. */
ERL_NIF_TERM bp_tracer_trace_receive(ErlNifEnv *env, int argc,
				     const ERL_NIF_TERM argv[])
{
	(void)argc;
	return dispatch(env, argv, BP_HK_RECEIVE, bp_tracer_write_message, 0);
}

/* The `spawned' event of one of beamprobe's own processes: started as
 * beamprobe_own:own/2 (beamprobe_own.erl), the one event the VM makes of
 * it before it turns sensitive (the flags of new processes, which another
 * session set, apply from its creation).  Not recorded: a session
 * recording process events of new processes recorded the processes
 * another session's start spawned. */
static inline int own_spawned(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
	const ERL_NIF_TERM *e;
	int found, n;
	ERL_NIF_TERM x;

	if (argv[0] != bp_atom.spawned)
		return 0;
	x = bp_tracer_opt(env, argv[4], bp_atom.extra, &found);
	return found && enif_get_tuple(env, x, &n, &e) && n == 3 &&
	       e[0] == bp_atom.beamprobe_own;
}

ERL_NIF_TERM bp_tracer_trace_procs(ErlNifEnv *env, int argc,
				   const ERL_NIF_TERM argv[])
{
	(void)argc;
	if (own_spawned(env, argv))
		return bp_atom.ok;
	return dispatch(env, argv, BP_HK_PROCS, bp_tracer_write_procs_ports, 0);
}

ERL_NIF_TERM bp_tracer_trace_ports(ErlNifEnv *env, int argc,
				   const ERL_NIF_TERM argv[])
{
	(void)argc;
	return dispatch(env, argv, BP_HK_PORTS, bp_tracer_write_procs_ports, 0);
}

ERL_NIF_TERM bp_tracer_trace_running_procs(ErlNifEnv *env, int argc,
					   const ERL_NIF_TERM argv[])
{
	(void)argc;
	return dispatch(env, argv, BP_HK_RUNNING, bp_tracer_write_running, 0);
}

ERL_NIF_TERM bp_tracer_trace_gc(ErlNifEnv *env, int argc,
				const ERL_NIF_TERM argv[])
{
	(void)argc;
	return dispatch(env, argv, BP_HK_GC, bp_tracer_write_gc, 0);
}

/* A seq_trace event of a node whose system seq_trace tracer is a session
 * (a follow session, src/beamprobe_follow.erl): trace(seq_trace, State,
 * Label, {send | 'receive', Serial, From, To, Message}, Opts), called in
 * the sender at its send and in the receiver when it takes the message:
 * written as a `send' of From or a `receive' of To, within the budget of
 * the request it belongs to (bp_follow.c).  Other seq_trace events, and
 * those of a session without a follow budget, are not recorded. */
static ERL_NIF_TERM seq_event(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
	struct bp_session *s = get_session(env, argv[1]);

	if (s && s->follow) {
		struct ev_ctx c = {.hub = 0};
		bp_follow_seq(env, s, argv, &c);
	}
	return bp_atom.ok;
}

/* trace/5: call events (no trace_call/5, see the top of this file), a
 * seq_trace send or receive (seq_event()); anything else without a specific
 * callback is not recorded. */
ERL_NIF_TERM bp_tracer_trace(ErlNifEnv *env, int argc,
			     const ERL_NIF_TERM argv[])
{
	ERL_NIF_TERM tag = argv[0];

	if (tag == bp_atom.call || tag == bp_atom.return_from ||
	    tag == bp_atom.exception_from || tag == bp_atom.return_to)
		return bp_tracer_trace_call(env, argc, argv);
	if (tag == bp_atom.seq_trace)
		return seq_event(env, argv);
	return bp_atom.ok;
}
