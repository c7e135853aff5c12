/* gen_trace.c -- writes deterministic synthetic beamprobe traces for the
 * CLI tests and benchmarks, through the real writer (c_src/bp_ctf.c).
 *
 *   gen_trace basic DIR      the golden trace: 3 processes and a port on
 *                            2 streams, nested calls with known durations,
 *                            an exception, return_to, messages, GC,
 *                            scheduling, links, drops; small packets
 *   gen_trace big DIR N      about N events (benchmarks): 4 streams,
 *                            200 processes, 64 functions
 *   gen_trace flows DIR      sends to a pid, registered names, aliases
 *                            (a gen_server call and its reply), a port
 *                            and a remote pid (issue 7, item 12)
 *   gen_trace names DIR      register/unregister of one name by two
 *                            processes, names in raw and Erlang form, a
 *                            name with a newline (item 13)
 *   gen_trace exitsched DIR  a process exits while scheduled in, 165 ms
 *                            into a 2 s trace (item 14)
 *   gen_trace drops DIR      calls open when events are lost, a call
 *                            open at the end (item 15)
 *   gen_trace monitor DIR    system monitor reports and counter samples
 *   gen_trace late DIR       the first event 1 ms after the process
 *                            records (print --since/--until +SECS)
 *   gen_trace tampered DIR   calls, then another tool's change of the
 *                            session's tracing: one for a pattern (pid
 *                            0), one for a process (issue 8)
 *   gen_trace deep DIR N     N-deep direct recursion and N-deep mutual
 *                            recursion, every level with own time (17)
 *   gen_trace many DIR N     N short-lived processes (item 20)
 *   gen_trace xnode DIR      DIR/a and DIR/b, a two-node cluster trace
 *                            whose second pong is received 50 us before
 *                            its send's stamp (the VM stamps a send to
 *                            another node after it left), a process record
 *                            just before that send; b's recorded bounds
 *                            [-40, 40] us refine to [-25, 30]
 *   gen_trace xlost DIR      xnode, with c@h in cluster_nodes but no trace
 *                            of it, and 2 sends to it (1 to d@h, outside)
 *   gen_trace xname DIR      a follow session's two-node trace: a request
 *                            that sends to {Name, Node} (gen_xname)
 *
 * Known values of "basic" (all times in microseconds), checked by
 * test/cli/run.sh:
 *   my_server:handle_call/3  1 call, inclusive 100, own 75 (the largest)
 *   lists:seq/2              1 call, 20 / 20
 *   lists:reverse/1          1 call, 5 / 5
 *   worker:step/1            2 calls (20 ended by return_to, 30), 50 / 50
 *   worker:loop/1            1 call, still open at the end
 *   my_server:handle_info/2  1 call, exception, 20 / 15
 *   ets:lookup/2             1 call, exception, 5 / 5
 *   client:handle/1          1 call, 20 / 20
 *   total own time 190; 9 call events; lost: ring_full 2, too_big 1,
 *   overwritten 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../c_src/bp_ctf.h"

#define T0 1000000000ull               /* first timestamp, ns */
#define WALL0 1704196800ll             /* 2024-01-02 12:00:00 UTC */
#define US(x) (T0 + (uint64_t)(x) * 1000u)

struct ev {
	uint8_t b[4096];
	size_t n;
};

static struct ev *begin(struct ev *e, int id, uint64_t ts, uint64_t pid)
{
	e->n = bp_ev_header(e->b, (uint16_t)id, ts, pid);
	return e;
}

static struct ev *s_(struct ev *e, const char *s)
{
	size_t n = strlen(s) + 1;
	if (e->n + n > sizeof e->b) {
		fprintf(stderr, "gen_trace: event too big\n");
		exit(1);
	}
	memcpy(e->b + e->n, s, n);
	e->n += n;
	return e;
}

static struct ev *u64_(struct ev *e, uint64_t v)
{
	bp_put_u64(e->b + e->n, v);
	e->n += 8;
	return e;
}

static struct ev *u8_(struct ev *e, uint8_t v)
{
	e->b[e->n++] = v;
	return e;
}

static void add(struct bp_ctf_stream *st, struct ev *e, uint64_t discarded)
{
	int err = bp_ctf_stream_add(st, e->b, (uint32_t)e->n, discarded);
	if (err) {
		fprintf(stderr, "gen_trace: add: %s\n", strerror(err));
		exit(1);
	}
}

static void check(int err, const char *what)
{
	if (err) {
		fprintf(stderr, "gen_trace: %s: %s\n", what, strerror(err));
		exit(1);
	}
}

/* dir (created if need be) and its metadata with these env entries. */
static void metadata_env(const char *dir, const uint8_t uuid[16],
			 const struct bp_env_entry *env, size_t n)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		check(errno, dir);
	check(bp_ctf_write_metadata(dir, uuid, WALL0 * 1000000000ll - (int64_t)T0,
				    env, n),
	      "metadata");
}

static void metadata(const char *dir, const uint8_t uuid[16])
{
	static const struct bp_env_entry env[] = {
		{"node", "demo@testhost"},
		{"otp_release", "25"},
		{"hostname", "testhost"},
		{"start_time", "2024-01-02T12:00:00Z"},
	};
	metadata_env(dir, uuid, env, sizeof env / sizeof env[0]);
}

#define P1 0x10u   /* <0.100.0> my_server */
#define P2 0x20u   /* <0.101.0> client (name known only at the end) */
#define P3 0x30u   /* <0.102.0> worker */
#define PORT 0x40u /* #Port<0.5> */

static void process(struct bp_ctf_stream *st, uint64_t ts, uint64_t key,
		    const char *text, const char *name, const char *ic)
{
	struct ev e;
	add(st, s_(s_(s_(begin(&e, BP_EV_PROCESS, ts, key), text), name), ic),
	    0);
}

static void call(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		 const char *mfa, const char *args, const char *info)
{
	struct ev e;
	add(st, s_(s_(s_(begin(&e, BP_EV_CALL, ts, pid), mfa), args), info),
	    0);
}

static void ret(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		const char *mfa, const char *result)
{
	struct ev e;
	add(st, s_(s_(begin(&e, BP_EV_RETURN_FROM, ts, pid), mfa), result), 0);
}

static void exc(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		const char *mfa, const char *cls, const char *reason)
{
	struct ev e;
	add(st, s_(s_(s_(begin(&e, BP_EV_EXCEPTION_FROM, ts, pid), mfa), cls),
		   reason),
	    0);
}

static void send(struct bp_ctf_stream *st, int id, uint64_t ts, uint64_t pid,
		 uint64_t to, const char *to_text, const char *msg)
{
	struct ev e;
	add(st, s_(s_(u64_(begin(&e, id, ts, pid), to), to_text), msg), 0);
}

static void one_str(struct bp_ctf_stream *st, int id, uint64_t ts,
		    uint64_t pid, const char *s)
{
	struct ev e;
	add(st, s_(begin(&e, id, ts, pid), s), 0);
}

static void other(struct bp_ctf_stream *st, int id, uint64_t ts,
		  uint64_t pid, uint64_t o, const char *text)
{
	struct ev e;
	add(st, s_(u64_(begin(&e, id, ts, pid), o), text), 0);
}

/* spawn, spawned and port_open: other, other_text, then one string. */
static void spawn(struct bp_ctf_stream *st, int id, uint64_t ts,
		  uint64_t pid, uint64_t o, const char *text, const char *s)
{
	struct ev e;
	add(st, s_(s_(u64_(begin(&e, id, ts, pid), o), text), s), 0);
}

static void sched(struct bp_ctf_stream *st, int id, uint64_t ts,
		  uint64_t pid, const char *mfa, int exiting)
{
	struct ev e;
	add(st, u8_(s_(begin(&e, id, ts, pid), mfa), (uint8_t)exiting), 0);
}

static void gc(struct bp_ctf_stream *st, int id, uint64_t ts, uint64_t pid,
	       uint64_t heap)
{
	struct ev e;
	begin(&e, id, ts, pid);
	u64_(u64_(u64_(&e, heap), 233), 0);
	u64_(u64_(u64_(&e, 0), 0), 10);
	add(st, &e, 0);
}

static void drops(struct bp_ctf_stream *st, uint64_t ts,
		  const uint64_t d[BP_DROP_COUNT], uint64_t discarded)
{
	struct ev e;
	begin(&e, BP_EV_DROPS, ts, 0);
	for (int i = 0; i < BP_DROP_COUNT; i++)
		u64_(&e, d[i]);
	add(st, &e, discarded);
}

static void gen_basic(const char *dir)
{
	static const uint8_t uuid[16] = {0xbe, 0xa4, 0x9b, 0x0b, 1, 2, 3, 4,
					 5, 6, 7, 8, 9, 10, 11, 12};
	struct bp_ctf_stream a, b;

	metadata(dir, uuid);
	check(bp_ctf_stream_open(&a, dir, 0, uuid, 256), "thread-000");
	check(bp_ctf_stream_open(&b, dir, 1, uuid, 256), "thread-001");

	/* Stream 0: my_server, then the worker. */
	process(&a, US(0), P1, "<0.100.0>", "my_server", "my_server:init/1");
	sched(&a, BP_EV_SCHED_IN, US(0), P1, "gen_server:loop/7", 0);
	call(&a, US(1), P1, "my_server:handle_call/3",
	     "(ping, {<0.101.0>,[alias|#Ref<0.1.2.3>]}, #{n => 1})", "");
	call(&a, US(11), P1, "lists:seq/2", "(1, 10)", "");
	ret(&a, US(31), P1, "lists:seq/2", "[1,2,3,4,5,6,7,8,9,10]");
	call(&a, US(41), P1, "lists:reverse/1", "([1,2,3])", "caller_info");
	ret(&a, US(46), P1, "lists:reverse/1", "[3,2,1]");
	send(&a, BP_EV_SEND, US(51), P1, P2, "<0.101.0>", "{reply,pong}");
	gc(&a, BP_EV_GC_MINOR_START, US(61), P1, 100);
	gc(&a, BP_EV_GC_MINOR_END, US(71), P1, 50);
	ret(&a, US(101), P1, "my_server:handle_call/3",
	    "{reply,pong,#{n => 2}}");
	sched(&a, BP_EV_SCHED_OUT, US(110), P1, "gen_server:loop/7", 0);
	process(&a, US(150), P3, "<0.102.0>", "", "worker:start/1");
	spawn(&a, BP_EV_SPAWNED, US(150), P3, P2, "<0.101.0>",
	      "worker:start(1)");
	call(&a, US(160), P3, "worker:loop/1", "(1)", "");
	call(&a, US(170), P3, "worker:step/1", "(1)", "");
	one_str(&a, BP_EV_RETURN_TO, US(190), P3, "worker:loop/1");
	call(&a, US(200), P3, "worker:step/1", "(2)", "");
	ret(&a, US(230), P3, "worker:step/1", "ok");
	one_str(&a, BP_EV_RECEIVE, US(240), P1, "hello");
	call(&a, US(250), P1, "my_server:handle_info/2", "(hello, #{n => 2})",
	     "");
	call(&a, US(260), P1, "ets:lookup/2", "(tab, key)", "");
	exc(&a, US(265), P1, "ets:lookup/2", "error", "badarg");
	exc(&a, US(270), P1, "my_server:handle_info/2", "error", "badarg");
	one_str(&a, BP_EV_EXIT, US(280), P1,
		"{badarg,[{ets,lookup,[tab,key],[]}]}");
	{
		uint64_t d[BP_DROP_COUNT] = {0};
		d[BP_DROP_RING_FULL] = 2;
		d[BP_DROP_TOO_BIG] = 1;
		drops(&a, US(300), d, 3);
	}
	check(bp_ctf_stream_close(&a, 3), "close thread-000");

	/* Stream 1: the client, the port, and my_server after migrating. */
	process(&b, US(5), P2, "<0.101.0>", "", "");
	sched(&b, BP_EV_SCHED_IN, US(5), P2, "client:run/0", 0);
	other(&b, BP_EV_LINK, US(6), P2, P1, "<0.100.0>");
	one_str(&b, BP_EV_RECEIVE, US(56), P2, "{reply,pong}");
	call(&b, US(61), P2, "client:handle/1", "({reply,pong})", "");
	ret(&b, US(81), P2, "client:handle/1", "ok");
	send(&b, BP_EV_SEND, US(90), P2, P1, "<0.100.0>", "hello");
	send(&b, BP_EV_SEND_DEAD, US(95), P2, 0x99, "<0.999.0>", "ping");
	spawn(&b, BP_EV_SPAWN, US(130), P2, P3, "<0.102.0>", "worker:start(1)");
	process(&b, US(140), PORT, "#Port<0.5>", "", "");
	spawn(&b, BP_EV_PORT_OPEN, US(140), PORT, P2, "<0.101.0>", "cat");
	other(&b, BP_EV_GETTING_LINKED, US(145), PORT, P2, "<0.101.0>");
	one_str(&b, BP_EV_REGISTER, US(180), P2, "client");
	gc(&b, BP_EV_GC_MAJOR_START, US(185), P2, 400);
	gc(&b, BP_EV_GC_MAJOR_END, US(195), P2, 120);
	one_str(&b, BP_EV_PORT_CLOSED, US(210), PORT, "normal");
	other(&b, BP_EV_UNLINK, US(220), P2, P1, "<0.100.0>");
	process(&b, US(235), P1, "<0.100.0>", "", "");
	sched(&b, BP_EV_SCHED_IN, US(235), P1, "gen_server:loop/7", 0);
	sched(&b, BP_EV_SCHED_OUT, US(290), P2, "client:run/0", 0);
	process(&b, US(295), P2, "<0.101.0>", "client", "client:run/0");
	{
		uint64_t d[BP_DROP_COUNT] = {0};
		d[BP_DROP_OVERWRITTEN] = 1;
		drops(&b, US(300), d, 1);
	}
	check(bp_ctf_stream_close(&b, 1), "close thread-001");
}

/* About n events: round-robin over processes doing nested calls and
 * messages; each process writes to stream key % NSTREAMS. */
static void gen_big(const char *dir, uint64_t n)
{
	enum { NSTREAMS = 4, NPROCS = 200, NFUNCS = 64 };
	static const uint8_t uuid[16] = {0xb1, 0x6, 0, 0, 1, 2, 3, 4,
					 5, 6, 7, 8, 9, 10, 11, 12};
	static struct bp_ctf_stream st[NSTREAMS];
	char funcs[NFUNCS][32], texts[NPROCS][16], msg[64];
	uint64_t ts = T0, done = 0, it = 0;

	metadata(dir, uuid);
	for (int i = 0; i < NSTREAMS; i++)
		check(bp_ctf_stream_open(&st[i], dir, (uint32_t)i, uuid,
					 64 * 1024),
		      "stream");
	for (int f = 0; f < NFUNCS; f++)
		snprintf(funcs[f], sizeof funcs[f], "mod_%d:fun_%d/2", f / 8,
			 f);
	for (int p = 0; p < NPROCS; p++) {
		snprintf(texts[p], sizeof texts[p], "<0.%d.0>", 100 + p);
		process(&st[p % NSTREAMS], ts, 0x100 + (uint64_t)p, texts[p],
			p % 10 == 0 ? "named_proc" : "", "proc_lib:init_p/5");
	}
	while (done < n) {
		int p = (int)(it % NPROCS), q = (int)((it * 7 + 3) % NPROCS);
		uint64_t key = 0x100 + (uint64_t)p, qkey = 0x100 + (uint64_t)q;
		struct bp_ctf_stream *s = &st[p % NSTREAMS],
				     *qs = &st[q % NSTREAMS];
		const char *f1 = funcs[it % NFUNCS],
			   *f2 = funcs[(it * 5 + 1) % NFUNCS];
		it++;
		call(s, ts += 100, key, f1, "(1, {foo, bar})", "");
		call(s, ts += 100, key, f2, "([1,2,3], 42)", "");
		ret(s, ts += 250, key, f2, "{ok,[3,2,1]}");
		snprintf(msg, sizeof msg, "{request,%llu}",
			 (unsigned long long)it);
		send(s, BP_EV_SEND, ts += 50, key, qkey, texts[q], msg);
		one_str(qs, BP_EV_RECEIVE, ts += 50, qkey, msg);
		ret(s, ts += 100, key, f1, "ok");
		done += 6;
		if (it % 16 == 0) {
			gc(s, BP_EV_GC_MINOR_START, ts += 10, key, 1000);
			gc(s, BP_EV_GC_MINOR_END, ts += 500, key, 400);
			sched(s, BP_EV_SCHED_OUT, ts += 10, key, f1, 0);
			sched(s, BP_EV_SCHED_IN, ts += 10, key, f1, 0);
			done += 4;
		}
	}
	for (int i = 0; i < NSTREAMS; i++) {
		uint64_t d[BP_DROP_COUNT] = {0};
		drops(&st[i], ts, d, 0);
		check(bp_ctf_stream_close(&st[i], 0), "close");
	}
}

static const uint8_t uuid7[16] = {0x7e, 0x57, 7, 7, 1, 2, 3, 4,
				  5, 6, 7, 8, 9, 10, 11, 12};

static void gen_flows(const char *dir)
{
	struct bp_ctf_stream a;
	const char *call = "{'$gen_call',{<0.101.0>,[alias|#Ref<0.5.6.7>]},req}";
	const char *reply = "{[alias|#Ref<0.5.6.7>],ok}";

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, US(0), P1, "<0.100.0>", "", "");
	process(&a, US(0), P2, "<0.101.0>", "", "");
	process(&a, US(0), P3, "<0.102.0>", "", "");
	one_str(&a, BP_EV_REGISTER, US(1), P3, "n1");
	send(&a, BP_EV_SEND, US(10), P1, 0, "n1", "a");
	one_str(&a, BP_EV_RECEIVE, US(11), P3, "a");
	send(&a, BP_EV_SEND, US(12), P1, 0, "n2", "b");
	send(&a, BP_EV_SEND, US(13), P1, 0, "n3", "c");
	send(&a, BP_EV_SEND, US(14), P1, 0, "#Ref<0.9.9.9>", "d");
	send(&a, BP_EV_SEND, US(15), P1, 0, "#Port<0.7>", "e");
	send(&a, BP_EV_SEND, US(16), P1, 0, "<9999.1.0>", "f");
	send(&a, BP_EV_SEND, US(20), P2, 0, "n1", call);
	one_str(&a, BP_EV_RECEIVE, US(21), P3, call);
	send(&a, BP_EV_SEND, US(22), P3, 0, "#Ref<0.5.6.7>", reply);
	one_str(&a, BP_EV_RECEIVE, US(23), P2, reply);
	send(&a, BP_EV_SEND, US(24), P1, P2, "<0.101.0>", "g");
	one_str(&a, BP_EV_RECEIVE, US(25), P2, "g");
	check(bp_ctf_stream_close(&a, 0), "close");
}

static void gen_names(const char *dir)
{
	struct bp_ctf_stream a;
	const uint64_t P4 = 0x50, P5 = 0x60, P6 = 0x70, P7 = 0x80;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, US(0), P1, "<0.100.0>", "srv", "");
	process(&a, US(0), P2, "<0.101.0>", "", "");
	process(&a, US(0), P5, "<0.104.0>", "'x y'", "");
	call(&a, US(10), P1, "foo:a/0", "", "");
	ret(&a, US(11), P1, "foo:a/0", "ok");
	one_str(&a, BP_EV_UNREGISTER, US(20), P1, "srv");
	call(&a, US(30), P1, "foo:b/0", "", "");
	ret(&a, US(31), P1, "foo:b/0", "ok");
	call(&a, US(35), P2, "foo:c/0", "", "");
	ret(&a, US(36), P2, "foo:c/0", "ok");
	one_str(&a, BP_EV_REGISTER, US(40), P2, "srv");
	call(&a, US(50), P2, "foo:d/0", "", "");
	ret(&a, US(51), P2, "foo:d/0", "ok");
	one_str(&a, BP_EV_REGISTER, US(60), P3, "'my name'");
	call(&a, US(61), P3, "foo:e/0", "", "");
	ret(&a, US(62), P3, "foo:e/0", "ok");
	one_str(&a, BP_EV_REGISTER, US(70), P4, "'a\\nb'");
	call(&a, US(71), P4, "foo:f/0", "", "");
	ret(&a, US(72), P4, "foo:f/0", "ok");
	/* Named without register events: at the start in Erlang form, at
	 * the end in raw text; and only at the end, raw, with a newline. */
	call(&a, US(80), P5, "foo:g/0", "", "");
	ret(&a, US(81), P5, "foo:g/0", "ok");
	call(&a, US(85), P6, "foo:h/0", "", "");
	ret(&a, US(86), P6, "foo:h/0", "ok");
	/* `maybe' is a plain atom on OTP 25 (the tracer writes it unquoted). */
	one_str(&a, BP_EV_REGISTER, US(90), P7, "maybe");
	call(&a, US(91), P7, "foo:i/0", "", "");
	ret(&a, US(92), P7, "foo:i/0", "ok");
	/* End-of-session annotations, names in raw atom text. */
	process(&a, US(100), P5, "<0.104.0>", "x y", "");
	process(&a, US(100), P6, "<0.105.0>", "c\nd", "");
	process(&a, US(100), P1, "<0.100.0>", "", "");
	process(&a, US(100), P2, "<0.101.0>", "srv", "");
	process(&a, US(100), P3, "<0.102.0>", "my name", "");
	process(&a, US(100), P4, "<0.103.0>", "a\nb", "");
	process(&a, US(100), P7, "<0.106.0>", "maybe", "");
	check(bp_ctf_stream_close(&a, 0), "close");
}

#define MS(x) (T0 + (uint64_t)(x) * 1000000u)

static void gen_exitsched(const char *dir)
{
	struct bp_ctf_stream a;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, MS(0), P1, "<0.100.0>", "", "");
	process(&a, MS(0), P2, "<0.101.0>", "", "");
	sched(&a, BP_EV_SCHED_IN, MS(0), P1, "w:run/0", 0);
	call(&a, MS(1), P1, "w:run/0", "()", "");
	one_str(&a, BP_EV_EXIT, MS(165), P1, "killed");
	for (int i = 0; i < 10; i++) {
		sched(&a, BP_EV_SCHED_IN, MS(200 * i), P2, "x:y/0", 0);
		sched(&a, BP_EV_SCHED_OUT, MS(200 * i + 100), P2, "x:y/0", 0);
	}
	one_str(&a, BP_EV_RECEIVE, MS(1998), P2, "tick");
	check(bp_ctf_stream_close(&a, 0), "close");
}

static void gen_drops(const char *dir)
{
	struct bp_ctf_stream a, b;
	uint64_t d[BP_DROP_COUNT] = {0};

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	check(bp_ctf_stream_open(&b, dir, 1, uuid7, 4096), "thread-001");
	process(&a, US(0), P1, "<0.100.0>", "", "");
	process(&b, US(0), P2, "<0.101.0>", "", "");
	call(&a, US(1), P1, "m:outer/0", "()", "");
	call(&a, US(2), P1, "m:inner/0", "()", "");
	d[BP_DROP_RING_FULL] = 5;
	drops(&a, US(10), d, 0);
	call(&a, US(20), P1, "m:after/0", "()", "");
	ret(&a, US(30), P1, "m:after/0", "ok");
	call(&b, US(5), P2, "m:open/0", "()", "");
	call(&b, US(6), P2, "m:leaf/0", "()", "");
	ret(&b, US(8), P2, "m:leaf/0", "ok");
	/* return_to an unknown function, a return without a call: named,
	 * never called (stats must not list them) */
	one_str(&b, BP_EV_RETURN_TO, US(9), P2, "?");
	ret(&b, US(9), P2, "m:ghost/0", "ok");
	one_str(&b, BP_EV_RECEIVE, US(40) + 500, P2, "x"); /* sub-us */
	check(bp_ctf_stream_close(&a, 5), "close");
	check(bp_ctf_stream_close(&b, 0), "close");
}

/* "tampered": what / subject / how / detail, all text. */
static void tampered(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		     const char *what, const char *subject, const char *how,
		     const char *detail)
{
	struct ev e;
	add(st, s_(s_(s_(s_(begin(&e, BP_EV_TAMPERED, ts, pid), what),
			 subject), how), detail), 0);
}

static void gen_tampered(const char *dir)
{
	struct bp_ctf_stream a;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, US(0), P1, "<0.100.0>", "", "");
	call(&a, US(1), P1, "m:f/1", "(1)", "");
	ret(&a, US(2), P1, "m:f/1", "1");
	tampered(&a, US(3), 0, "pattern", "m:f/1", "removed",
		 "the trace pattern is gone");
	tampered(&a, US(4), P1, "procs", "<0.100.0>", "replaced",
		 "now traced by <0.90.0> with flags [call]");
	one_str(&a, BP_EV_RECEIVE, US(5), P1, "x");
	check(bp_ctf_stream_close(&a, 0), "close");
}

/* "late": the process records written at the session's start, the
 * first event 1 ms later (a session waiting for its first call); --since
 * and --until +SECS count from that event. */
static void gen_late(const char *dir)
{
	struct bp_ctf_stream a;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, US(0), P1, "<0.100.0>", "", "");
	call(&a, US(1000), P1, "m:f/1", "(1)", "");
	ret(&a, US(1001), P1, "m:f/1", "1");
	call(&a, US(1002), P1, "m:f/1", "(2)", "");
	ret(&a, US(1003), P1, "m:f/1", "2");
	check(bp_ctf_stream_close(&a, 0), "close");
}

/* "monitor": a system monitor report (what, process, duration_ms, other,
 * detail); "sample": a counter (counter, value, scale, process). */
static void mon(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		const char *what, const char *proc, uint64_t ms,
		const char *other, const char *detail)
{
	struct ev e;
	add(st, s_(s_(u64_(s_(s_(begin(&e, BP_EV_MONITOR, ts, pid), what),
			      proc), ms), other), detail), 0);
}

static void sample(struct bp_ctf_stream *st, uint64_t ts, uint64_t pid,
		   const char *counter, uint64_t v, uint32_t scale,
		   const char *proc)
{
	struct ev e;
	begin(&e, BP_EV_SAMPLE, ts, pid);
	s_(&e, counter);
	u64_(&e, v);
	bp_put_u32(e.b + e.n, scale);
	e.n += 4;
	add(st, s_(&e, proc), 0);
}

static void gen_monitor(const char *dir)
{
	struct bp_ctf_stream a;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 4096), "thread-000");
	process(&a, US(0), P1, "<0.100.0>", "", "");
	call(&a, US(1), P1, "m:f/1", "(1)", "");
	mon(&a, US(2), P1, "long_gc", "<0.100.0>", 42, "",
	    "[{timeout,42},{heap_size,100}]");
	mon(&a, US(3), P1, "busy_port", "<0.100.0>", 0, "#Port<0.7>", "");
	sample(&a, US(4), 0, "run_queue", 3, 1, "");
	sample(&a, US(5), 0, "scheduler_utilization", 250000, 1000000, "");
	sample(&a, US(6), P1, "message_queue_len", 7, 1, "<0.100.0>");
	sample(&a, US(7), 0, "run_queue", 5, 1, "");
	ret(&a, US(8), P1, "m:f/1", "1");
	check(bp_ctf_stream_close(&a, 0), "close");
}

static void gen_deep(const char *dir, int n)
{
	struct bp_ctf_stream a;
	uint64_t ts = T0;

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 64 * 1024), "thread-000");
	process(&a, ts, P1, "<0.100.0>", "", "");
	process(&a, ts, P2, "<0.101.0>", "", "");
	for (int i = 0; i < n; i++) { /* a return-traced tail loop */
		call(&a, ts += 10, P1, "m:loop/1", "(1)", "");
		call(&a, ts += 10, P1, "m:work/0", "()", "");
		ret(&a, ts += 10, P1, "m:work/0", "ok");
	}
	for (int i = 0; i < n; i++)
		ret(&a, ts += 10, P1, "m:loop/1", "ok");
	for (int i = 0; i < n; i++) /* mutual recursion */
		call(&a, ts += 10, P2, i % 2 ? "m:odd/1" : "m:even/1", "(1)",
		     "");
	for (int i = n; i-- > 0;)
		ret(&a, ts += 10, P2, i % 2 ? "m:odd/1" : "m:even/1", "ok");
	check(bp_ctf_stream_close(&a, 0), "close");
}

static void gen_many(const char *dir, uint64_t n)
{
	struct bp_ctf_stream a;
	uint64_t ts = T0;
	char text[32];

	metadata(dir, uuid7);
	check(bp_ctf_stream_open(&a, dir, 0, uuid7, 256 * 1024), "thread-000");
	for (uint64_t i = 0; i < n; i++) {
		uint64_t key = 0x1000 + i * 16;
		snprintf(text, sizeof text, "<0.%llu.0>",
			 (unsigned long long)(1000 + i));
		process(&a, ts += 10, key, text, "", "proc_lib:init_p/5");
		sched(&a, BP_EV_SCHED_IN, ts += 10, key, "m:f/0", 0);
		call(&a, ts += 10, key, "m:f/0", "()", "");
		ret(&a, ts += 10, key, "m:f/0", "ok");
		one_str(&a, BP_EV_EXIT, ts += 10, key, "normal");
		sched(&a, BP_EV_SCHED_OUT, ts += 10, key, "m:f/0", 2);
	}
	check(bp_ctf_stream_close(&a, 0), "close");
}

/* A node of the xnode cluster: its trace directory, with the env of a
 * cluster session's node (src/beamprobe_cluster.erl). */
static int follow;
/* xlost: the session also ran on c@h, whose trace is lost. */
static int lost;

static void xnode_metadata(const char *dir, const char *node,
			   const char *ids, const char *lo, const char *hi)
{
	const struct bp_env_entry env[] = {
		{"follow_root", "m:f/0"},
		{"node", node},
		{"otp_release", "25"},
		{"hostname", "h"},
		{"start_time", "2024-01-02T12:00:00Z"},
		{"cluster_control", "a@h"},
		{"cluster_nodes", lost ? "a@h,b@h,c@h" : "a@h,b@h"},
		{"dist_ids", ids},
		{"clock_offset_ns", "0"},
		{"clock_offset_lo_ns", lo},
		{"clock_offset_hi_ns", hi},
	};
	/* follow_root only in the follow session's traces (xname). */
	metadata_env(dir, uuid7, env + !follow, sizeof env / sizeof env[0] - !follow);
}

/* Local pid <0.N.0> as the VM's immediate word (the key events carry). */
#define XPID(n) (((uint64_t)(n) << 4) | 0x3u)

static void gen_xnode(const char *dir)
{
	struct bp_ctf_stream a, b0, b1;
	char path[4096];

	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		check(errno, dir);
	snprintf(path, sizeof path, "%s/a", dir);
	xnode_metadata(path, "a@h", lost ? "0=a@h,7=b@h,9=c@h" : "0=a@h,7=b@h",
		       "0", "0");
	check(bp_ctf_stream_open(&a, path, 0, uuid7, 4096), "a/thread-000");
	snprintf(path, sizeof path, "%s/b", dir);
	xnode_metadata(path, "b@h", lost ? "8=a@h,0=b@h,9=c@h" : "8=a@h,0=b@h",
		       "-40000", "40000");
	check(bp_ctf_stream_open(&b0, path, 0, uuid7, 4096), "b/thread-000");
	check(bp_ctf_stream_open(&b1, path, 1, uuid7, 4096), "b/thread-001");
	call(&a, US(5), XPID(100), "m:f/0", "()", "");
	send(&a, BP_EV_SEND, US(10), XPID(100), 0, "<7.200.0>", "{ping,1}");
	one_str(&b0, BP_EV_RECEIVE, US(30), XPID(200), "{ping,1}");
	send(&b0, BP_EV_SEND, US(35), XPID(200), 0, "<8.100.0>", "{pong,1}");
	one_str(&a, BP_EV_RECEIVE, US(60), XPID(100), "{pong,1}");
	send(&a, BP_EV_SEND, US(100), XPID(100), 0, "<7.200.0>", "{ping,2}");
	call(&b1, US(110), XPID(300), "m:g/0", "()", "");
	one_str(&b0, BP_EV_RECEIVE, US(120), XPID(200), "{ping,2}");
	one_str(&a, BP_EV_RECEIVE, US(150), XPID(100), "{pong,2}");
	/* The sender moved to thread 1, which notes it first, then the
	 * send: stamped 50 us after its receive on a. */
	process(&b1, US(199), XPID(200), "<0.200.0>", "", "");
	send(&b1, BP_EV_SEND, US(200), XPID(200), 0, "<8.100.0>", "{pong,2}");
	if (lost) {
		/* Three sends to c@h, by pid, by name and to a node outside
		 * the cluster. */
		send(&a, BP_EV_SEND, US(300), XPID(100), 0, "<9.50.0>", "{ping,3}");
		send(&a, BP_EV_SEND, US(310), XPID(100), 0, "{echo,c@h}", "{ping,4}");
		send(&b1, BP_EV_SEND, US(320), XPID(200), 0, "{echo,d@h}", "{ping,5}");
	}
	check(bp_ctf_stream_close(&a, 0), "close");
	check(bp_ctf_stream_close(&b0, 0), "close");
	check(bp_ctf_stream_close(&b1, 0), "close");
}

/* A follow session's two-node trace: a request on a sends to names on b,
 * {echo,b@h} (a process the trace never names, as a follow session's
 * first-sight records give `undefined') and {srv,b@h} (named only by
 * the process record written at the session's end); b's replies go to
 * the root's pid.  Another process on b receives a message of no
 * request. */
static void gen_xname(const char *dir)
{
	struct bp_ctf_stream a, b;
	char path[4096];

	follow = 1;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		check(errno, dir);
	snprintf(path, sizeof path, "%s/a", dir);
	xnode_metadata(path, "a@h", "0=a@h,7=b@h", "0", "0");
	check(bp_ctf_stream_open(&a, path, 0, uuid7, 4096), "a/thread-000");
	snprintf(path, sizeof path, "%s/b", dir);
	xnode_metadata(path, "b@h", "8=a@h,0=b@h", "-40000", "40000");
	check(bp_ctf_stream_open(&b, path, 0, uuid7, 4096), "b/thread-000");
	call(&a, US(5), XPID(100), "m:f/0", "()", "");
	send(&a, BP_EV_SEND, US(10), XPID(100), 0, "{echo,b@h}", "{ping,1}");
	process(&b, US(20), XPID(200), "<0.200.0>", "undefined", "undefined");
	one_str(&b, BP_EV_RECEIVE, US(30), XPID(200), "{ping,1}");
	send(&b, BP_EV_SEND, US(35), XPID(200), 0, "<8.100.0>", "{pong,1}");
	one_str(&a, BP_EV_RECEIVE, US(60), XPID(100), "{pong,1}");
	send(&a, BP_EV_SEND, US(70), XPID(100), 0, "{srv,b@h}", "{ask,1}");
	one_str(&b, BP_EV_RECEIVE, US(80), XPID(201), "{ask,1}");
	send(&b, BP_EV_SEND, US(85), XPID(201), 0, "<8.100.0>", "{answer,1}");
	one_str(&a, BP_EV_RECEIVE, US(100), XPID(100), "{answer,1}");
	ret(&a, US(110), XPID(100), "m:f/0", "ok");
	one_str(&b, BP_EV_RECEIVE, US(120), XPID(300), "{stray}");
	process(&b, US(200), XPID(201), "<0.201.0>", "srv", "undefined");
	check(bp_ctf_stream_close(&a, 0), "close");
	check(bp_ctf_stream_close(&b, 0), "close");
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "xlost") == 0) {
		lost = 1;
		gen_xnode(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "xname") == 0) {
		gen_xname(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "xnode") == 0) {
		gen_xnode(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "flows") == 0) {
		gen_flows(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "names") == 0) {
		gen_names(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "exitsched") == 0) {
		gen_exitsched(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "drops") == 0) {
		gen_drops(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "monitor") == 0) {
		gen_monitor(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "tampered") == 0) {
		gen_tampered(argv[2]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "late") == 0) {
		gen_late(argv[2]);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "deep") == 0) {
		gen_deep(argv[2], atoi(argv[3]));
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "many") == 0) {
		gen_many(argv[2], strtoull(argv[3], NULL, 10));
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "basic") == 0) {
		gen_basic(argv[2]);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "big") == 0) {
		gen_big(argv[2], strtoull(argv[3], NULL, 10));
		return 0;
	}
	fprintf(stderr, "usage: gen_trace basic|flows|names|exitsched|drops|"
			"tampered|late|xnode|xname|xlost DIR | gen_trace big|deep|many DIR N\n");
	return 1;
}
