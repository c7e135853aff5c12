/* bp_usdt.c -- firing the USDT probes (bp_usdt.h; the probes:
 * c_src/beamprobe_probes.d, documented in docs/usdt.md) and
 * beamprobe:annotate/1,2 (the dyntrace:p of beamprobe).
 *
 * Runs in producer context (tracer callbacks, and the annotate NIF in the
 * calling process): no lock, no malloc, everything bounded.  Probe string
 * arguments point into the committed record (still in the ring while the
 * probe fires: the collector only reads published records, it never
 * overwrites them while the producer is inside) or into stack buffers.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "beamprobe_probes.h"
#include "bp_atoms.h"
#include "bp_hub.h"
#include "bp_nif.h"
#include "bp_term.h"
#include "bp_usdt.h"

static unsigned short no_probe; /* classes without a probe: never raised */

#define SEM(n) ((volatile unsigned short *)&beamprobe_##n##_semaphore)
volatile unsigned short *const bp_usdt_sem[BP_EV_COUNT] = {
	[BP_EV_PROCESS] = &no_probe,
	[BP_EV_CALL] = SEM(call),
	[BP_EV_RETURN_FROM] = SEM(return_from),
	[BP_EV_EXCEPTION_FROM] = SEM(exception_from),
	[BP_EV_RETURN_TO] = SEM(return_to),
	[BP_EV_SEND] = SEM(send),
	[BP_EV_SEND_DEAD] = SEM(send_to_non_existing_process),
	[BP_EV_RECEIVE] = SEM(receive),
	[BP_EV_SPAWN] = SEM(spawn),
	[BP_EV_SPAWNED] = SEM(spawned),
	[BP_EV_EXIT] = SEM(exit),
	[BP_EV_LINK] = SEM(link),
	[BP_EV_UNLINK] = SEM(unlink),
	[BP_EV_GETTING_LINKED] = SEM(getting_linked),
	[BP_EV_GETTING_UNLINKED] = SEM(getting_unlinked),
	[BP_EV_REGISTER] = SEM(register),
	[BP_EV_UNREGISTER] = SEM(unregister),
	[BP_EV_SCHED_IN] = SEM(sched_in),
	[BP_EV_SCHED_OUT] = SEM(sched_out),
	[BP_EV_GC_MINOR_START] = SEM(gc_start),
	[BP_EV_GC_MINOR_END] = SEM(gc_end),
	[BP_EV_GC_MAJOR_START] = SEM(gc_start),
	[BP_EV_GC_MAJOR_END] = SEM(gc_end),
	[BP_EV_PORT_OPEN] = SEM(port_open),
	[BP_EV_PORT_CLOSED] = SEM(port_closed),
	[BP_EV_DROPS] = &no_probe,
	[BP_EV_TAMPERED] = &no_probe,
	[BP_EV_MONITOR] = &no_probe,
	[BP_EV_SAMPLE] = &no_probe,
	[BP_EV_ANNOTATION] = SEM(annotate),
};

/* The probe of class i (c_src/beamprobe_probes.d), NULL for a class
 * without one.  Every class has an entry above (a missing one was a NULL
 * semaphore pointer, read by usdt_enabled/1): bp_usdt_sem_check() says
 * which is missing. */
static const char *probe_name(unsigned i)
{
	if (bp_usdt_sem[i] == &no_probe)
		return NULL;
	switch (i) {
	case BP_EV_ANNOTATION:
		return "annotate";
	case BP_EV_GC_MINOR_START:
		return "gc_start";
	case BP_EV_GC_MINOR_END:
		return "gc_end";
	case BP_EV_GC_MAJOR_START: /* the same probes as the minor ones */
	case BP_EV_GC_MAJOR_END:
		return NULL;
	default:
		return bp_event_descs[i].name;
	}
}

int bp_usdt_sem_check(void)
{
	for (unsigned i = 0; i < BP_EV_COUNT; i++)
		if (!bp_usdt_sem[i])
			return (int)i;
	return -1;
}

/* Per producer thread (its slot, bp_thread_slot; no TLS: the library's
 * static TLS block has room for one int): the OS thread id, and which
 * keys the thread has defined and when (direct-mapped: a collision
 * defines a key again, harmlessly).  A definition is repeated after
 * DEF_RENEW ns, so that a script attached later learns every key within
 * a second of its next event.  Threads without a slot share row
 * BP_MAX_SLOTS and may define a key twice or not at all: definitions are
 * a convenience, every probe carries its own key (the row's tid is not
 * theirs: tid() asks the kernel). */
#define DEF_CACHE 128
#define DEF_RENEW 1000000000ull
struct def { uint64_t key, at; };
struct def_row {
	uint64_t tid;
	struct def procs[DEF_CACHE];
	struct def funs[DEF_CACHE];
};
static struct def_row rows[BP_MAX_SLOTS + 1];

static inline struct def_row *row(void)
{
	int i = bp_thread_slot();

	return &rows[i < 0 || i >= BP_MAX_SLOTS ? BP_MAX_SLOTS : i];
}

/* The calling thread's OS id: remembered in its own row, asked of the
 * kernel each time by a thread without a slot (the row it shares with
 * every other such thread would give them all the first one's id). */
static inline uint64_t tid(void)
{
	struct def_row *r = row();

	if (r == &rows[BP_MAX_SLOTS]) /* shared: not this thread's */
		return (uint64_t)syscall(SYS_gettid);
	if (!r->tid)
		r->tid = (uint64_t)syscall(SYS_gettid);
	return r->tid;
}

/* A function's key: FNV-1a of its m:f/a text (never 0). */
static uint64_t fun_key(const char *s, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h ? h : 1;
}

/* Is key defined (recently) in d?  If not, marks it (now). */
static int defined(struct def *d, uint64_t key)
{
	uint64_t now = bp_now();

	if (d->key == key && now - d->at < DEF_RENEW)
		return 1;
	d->key = key;
	d->at = now;
	return 0;
}

static uint64_t define_fun(const char *mfa, uint32_t n)
{
	uint64_t k = fun_key(mfa, n);

	if (BEAMPROBE_FUNCTION_ENABLED() &&
	    !defined(&row()->funs[(k >> 7) % DEF_CACHE], k))
		BEAMPROBE_FUNCTION(k, mfa, n);
	return k;
}

/* The registered names of processes, as far as beamprobe knows them: no
 * NIF call gives a process's name, so the names come from where the
 * sessions learn them (bp_usdt_name: the `process' events a session
 * writes from process_info/2 at its start, dump and stop, and the
 * register/unregister trace events).  A direct-mapped table of (key,
 * atom) pairs under a per-entry sequence word: any thread reads, writers
 * that find an entry busy give up (a name is a convenience: a miss
 * defines the process with an empty name, as a key the table never saw).
 * Atoms are immediates valid in every environment and never freed. */
#define NAME_CACHE 4096
#define NAME_TEXT_MAX 1100 /* an atom, quoted and escaped */
struct name_ent {
	_Atomic uint32_t seq; /* odd while written */
	_Atomic uint64_t key, atom;
};
static struct name_ent names[NAME_CACHE];

static inline struct name_ent *name_ent(uint64_t key)
{
	return &names[(key >> 4) % NAME_CACHE];
}

void bp_usdt_name(uint64_t key, ERL_NIF_TERM name)
{
	struct name_ent *e = name_ent(key);
	uint32_t v = atomic_load_explicit(&e->seq, memory_order_relaxed);

	if (!key || (v & 1) ||
	    !atomic_compare_exchange_strong_explicit(&e->seq, &v, v + 1,
						     memory_order_acquire,
						     memory_order_relaxed))
		return;
	atomic_store_explicit(&e->key, key, memory_order_relaxed);
	atomic_store_explicit(&e->atom, (uint64_t)name, memory_order_relaxed);
	atomic_store_explicit(&e->seq, v + 2, memory_order_release);
}

/* The name of key into buf (cap bytes, NUL-terminated): its length, 0 if
 * not known. */
static uint32_t name_of(ErlNifEnv *env, uint64_t key, char *buf, size_t cap)
{
	struct name_ent *e = name_ent(key);
	uint32_t v1 = atomic_load_explicit(&e->seq, memory_order_acquire), v2;
	uint64_t k, a;
	size_t n;

	if (v1 & 1)
		return 0;
	k = atomic_load_explicit(&e->key, memory_order_relaxed);
	a = atomic_load_explicit(&e->atom, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	v2 = atomic_load_explicit(&e->seq, memory_order_relaxed);
	if (v1 != v2 || k != key || !a || !enif_is_atom(env, (ERL_NIF_TERM)a))
		return 0;
	n = bp_term_render_atom(env, (ERL_NIF_TERM)a, buf, cap - 1);
	if (!n || n >= cap)
		return 0;
	buf[n] = '\0';
	return (uint32_t)n;
}

static void define_proc(ErlNifEnv *env, ERL_NIF_TERM who, uint64_t key)
{
	char text[64], name[NAME_TEXT_MAX];
	uint32_t nl;
	int n;

	if (!BEAMPROBE_PROCESS_ENABLED() ||
	    defined(&row()->procs[(key >> 4) % DEF_CACHE], key))
		return;
	n = enif_snprintf(text, sizeof text, "%T", who);
	if (n <= 0 || n >= (int)sizeof text)
		return;
	nl = name_of(env, key, name, sizeof name);
	if (!nl)
		name[0] = '\0';
	BEAMPROBE_PROCESS(key, text, (uint32_t)n, name, nl);
}

/* The fields of one record: integers and (pointer, length) strings in
 * schema order. */
struct fields {
	uint64_t num[12];
	const char *str[6];
	uint32_t len[6];
	unsigned nn, ns;
};

static int decode(const uint8_t *rec, uint32_t len, struct fields *f)
{
	uint16_t id = bp_get_u16(rec);
	const struct bp_event_desc *d = &bp_event_descs[id];
	const uint8_t *p = rec + BP_EVENT_HEADER_SIZE, *end = rec + len;

	f->nn = f->ns = 0;
	for (unsigned i = 0; i < d->nfields; i++) {
		switch (d->fields[i].type) {
		case BP_T_U8:
			if (p + 1 > end || f->nn >= 12)
				return 0;
			f->num[f->nn++] = *p++;
			break;
		case BP_T_U32:
			if (p + 4 > end || f->nn >= 12)
				return 0;
			f->num[f->nn++] = bp_get_u32(p);
			p += 4;
			break;
		case BP_T_U64:
			if (p + 8 > end || f->nn >= 12)
				return 0;
			f->num[f->nn++] = bp_get_u64(p);
			p += 8;
			break;
		case BP_T_STR: {
			const uint8_t *z = memchr(p, 0, (size_t)(end - p));
			if (!z || f->ns >= 6)
				return 0;
			f->str[f->ns] = (const char *)p;
			f->len[f->ns++] = (uint32_t)(z - p);
			p = z + 1;
			break;
		}
		}
	}
	return 1;
}

void bp_usdt_fire(ErlNifEnv *env, ERL_NIF_TERM who, const uint8_t *rec,
		  uint32_t len)
{
	uint16_t id = bp_get_u16(rec);
	uint64_t key = bp_get_u64(rec + BP_EV_OFF_PID), t = tid(), fk = 0;
	struct fields f;

	if (len < BP_EVENT_HEADER_SIZE || !decode(rec, len, &f))
		return;
	define_proc(env, who, key);
	switch (id) {
	case BP_EV_CALL:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_CALL(key, t, fk, f.str[0], f.len[0], f.str[1]);
		break;
	case BP_EV_RETURN_FROM:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_RETURN_FROM(key, t, fk, f.str[0], f.len[0],
				      f.str[1]);
		break;
	case BP_EV_EXCEPTION_FROM:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_EXCEPTION_FROM(key, t, fk, f.str[0], f.str[1],
					 f.str[2]);
		break;
	case BP_EV_RETURN_TO:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_RETURN_TO(key, t, fk, f.str[0], f.len[0]);
		break;
	case BP_EV_SEND: /* to, to_text, message */
		BEAMPROBE_SEND(key, t, f.num[0], f.str[1], f.len[1], f.str[0]);
		break;
	case BP_EV_SEND_DEAD:
		BEAMPROBE_SEND_TO_NON_EXISTING_PROCESS(key, t, f.num[0],
						       f.str[1], f.len[1],
						       f.str[0]);
		break;
	case BP_EV_RECEIVE:
		BEAMPROBE_RECEIVE(key, t, f.str[0], f.len[0]);
		break;
	case BP_EV_SPAWN: /* other, other_text, mfa */
		BEAMPROBE_SPAWN(key, t, f.num[0], f.str[1], f.len[1]);
		break;
	case BP_EV_SPAWNED:
		BEAMPROBE_SPAWNED(key, t, f.num[0], f.str[1], f.len[1]);
		break;
	case BP_EV_EXIT:
		BEAMPROBE_EXIT(key, t, f.str[0], f.len[0]);
		break;
	case BP_EV_LINK:
		BEAMPROBE_LINK(key, t, f.num[0]);
		break;
	case BP_EV_UNLINK:
		BEAMPROBE_UNLINK(key, t, f.num[0]);
		break;
	case BP_EV_GETTING_LINKED:
		BEAMPROBE_GETTING_LINKED(key, t, f.num[0]);
		break;
	case BP_EV_GETTING_UNLINKED:
		BEAMPROBE_GETTING_UNLINKED(key, t, f.num[0]);
		break;
	case BP_EV_REGISTER:
		BEAMPROBE_REGISTER(key, t, f.str[0], f.len[0]);
		break;
	case BP_EV_UNREGISTER:
		BEAMPROBE_UNREGISTER(key, t, f.str[0], f.len[0]);
		break;
	case BP_EV_SCHED_IN:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_SCHED_IN(key, t, fk, f.str[0], f.len[0],
				   (uint32_t)f.num[0]);
		break;
	case BP_EV_SCHED_OUT:
		fk = define_fun(f.str[0], f.len[0]);
		BEAMPROBE_SCHED_OUT(key, t, fk, f.str[0], f.len[0],
				    (uint32_t)f.num[0]);
		break;
	case BP_EV_GC_MINOR_START:
	case BP_EV_GC_MAJOR_START:
		BEAMPROBE_GC_START(key, t, (uint32_t)(id == BP_EV_GC_MAJOR_START),
				   f.num[0], f.num[2], f.num[4]);
		break;
	case BP_EV_GC_MINOR_END:
	case BP_EV_GC_MAJOR_END:
		BEAMPROBE_GC_END(key, t, (uint32_t)(id == BP_EV_GC_MAJOR_END),
				 f.num[0], f.num[2], f.num[4]);
		break;
	case BP_EV_PORT_OPEN: /* other, other_text, name */
		BEAMPROBE_PORT_OPEN(key, t, f.num[0], f.str[1], f.len[1]);
		break;
	case BP_EV_PORT_CLOSED:
		BEAMPROBE_PORT_CLOSED(key, t, f.str[0], f.len[0]);
		break;
	case BP_EV_ANNOTATION:
		BEAMPROBE_ANNOTATE(key, t, f.str[0], f.len[0], f.str[1],
				   f.len[1]);
		break;
	default:
		break;
	}
}

int bp_usdt_attached(uint64_t kinds)
{
	for (unsigned i = 0; i < BP_EV_COUNT && i < 64; i++)
		if (((kinds >> i) & 1) && *bp_usdt_sem[i])
			return 1;
	return 0;
}

/* Annotations are rendered with the default capture limits. */
static const struct bp_capture annotate_capture = {
	BP_CAPTURE_DEFAULT_DEPTH, BP_CAPTURE_DEFAULT_LIST,
	BP_CAPTURE_DEFAULT_BINARY, BP_CAPTURE_DEFAULT_BYTES};

ERL_NIF_TERM bp_usdt_nif_annotate(ErlNifEnv *env, int argc,
				  const ERL_NIF_TERM argv[])
{
	int probe = BEAMPROBE_ANNOTATE_ENABLED() != 0;
	ErlNifPid self;
	ERL_NIF_TERM who;
	uint64_t key;
	unsigned written = 0;

	(void)argc;
	if (!probe && !bp_hub_any())
		return bp_atom.ok; /* nobody wants it */
	if (!enif_self(env, &self))
		return bp_atom.ok; /* not called by a process */
	who = enif_make_pid(env, &self);
	key = (uint64_t)who;
	if (bp_hub_any()) {
		uint64_t live[BP_HUB_WORDS];
		/* Not bp_usdt_hub_fire: the probe fires once, below, with
		 * the default capture limits. */
		struct ev_ctx c = {.hub = 1, .has_info = 0};
		uint32_t nw;
		int idx;

		if ((nw = bp_hub_enter(&idx, live))) {
			for (uint32_t w = 0; w < nw; w++)
				for (uint64_t b = live[w]; b; b &= b - 1) {
					int i = (int)(w * 64) + __builtin_ctzll(b);
					struct bp_hub_member *m = atomic_load_explicit(
						&bp_hub.members[i],
						memory_order_acquire);
					if (!m || !bp_hub_includes(m, key))
						continue;
					bp_tracer_write_annotation(env, m->s, who,
								   argv[0],
								   argv[1], &c);
					written++;
				}
			bp_hub_leave(idx);
		}
	}
	if (probe) {
		char tag[BP_CAPTURE_DEFAULT_BYTES + 1],
			val[BP_CAPTURE_DEFAULT_BYTES + 1];
		size_t tl = bp_term_render(env, argv[0], &annotate_capture, tag,
					   sizeof tag),
		       vl = bp_term_render(env, argv[1], &annotate_capture, val,
					   sizeof val);
		tag[tl < sizeof tag ? tl : sizeof tag - 1] = '\0';
		val[vl < sizeof val ? vl : sizeof val - 1] = '\0';
		define_proc(env, who, key);
		BEAMPROBE_ANNOTATE(key, tid(), tag, (uint32_t)tl, val,
				   (uint32_t)vl);
	}
	(void)written;
	return bp_atom.ok;
}

ERL_NIF_TERM bp_usdt_nif_enabled(ErlNifEnv *env, int argc,
				 const ERL_NIF_TERM argv[])
{
	char name[64];
	int got;

	(void)argc;
	got = enif_get_atom(env, argv[0], name, sizeof name, ERL_NIF_LATIN1);
	if (got <= 0 || strlen(name) + 1 != (size_t)got) /* no NUL inside */
		return enif_make_badarg(env);
	if (!strcmp(name, "process"))
		return BEAMPROBE_PROCESS_ENABLED() ? bp_atom.true_
						   : bp_atom.false_;
	if (!strcmp(name, "function"))
		return BEAMPROBE_FUNCTION_ENABLED() ? bp_atom.true_
						    : bp_atom.false_;
	for (unsigned i = 0; i < BP_EV_COUNT; i++) {
		const char *n = probe_name(i);
		if (n && !strcmp(n, name))
			return *bp_usdt_sem[i] ? bp_atom.true_ : bp_atom.false_;
	}
	return enif_make_badarg(env); /* not a probe */
}
