/* export_trace_event.c -- `export --format perfetto`: Chrome trace-event
 * JSON, as read by ui.perfetto.dev and chrome://tracing.
 *
 * Layout: trace "process" 1 is the Erlang node, with one track (tid) per
 * Erlang process or port, named by its pid text and registered name;
 * calls are nested B/E slices, GC runs are X slices on the same track,
 * sends and receives are zero-length X slices joined by flow arrows
 * (s/f, "bp":"e"), other events are instants (a system monitor report
 * too: on its process's track); counter samples are "C" events, one
 * counter track per counter name.  Trace "process" 2,
 * "scheduling", has a track per process with an X slice per run
 * (sched_in -> sched_out): scheduling slices cross call boundaries, so
 * they cannot share the call track.  Timestamps are microseconds from
 * the first event.
 *
 * A receive is matched to the oldest pending send to that receiver with
 * the same message text (FIFO), the receiver being a local pid, a name
 * or an alias resolved by bp_model_receiver; failing that, to the oldest
 * pending send of that text whose receiver was not known (a remote pid,
 * an alias the trace did not show the owner of).  Calls still open at
 * the end, or reset after lost events, end there (bp_model.h) with
 * "open_at_end" / "events_lost" in their E event's args.  Pending sends are bounded (MAX_PENDING),
 * older unmatched ones are simply never drawn as arrows.
 */
#include "bp_export.h"
#include "bp_cli.h"
#include "bp_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING (1u << 20)

struct pending {          /* a send waiting for its receive */
	uint64_t ts;
	uint32_t tid;
	uint32_t next;        /* next in queue or free list */
};

struct queue {
	uint32_t head, tail;  /* pending indices */
	uint32_t next_free;
};

struct te {
	struct bp_out *o;
	struct bp_model m;
	uint64_t start, last;
	struct bp_map qidx;       /* hash(receiver, message) -> queue */
	struct queue *qs;
	uint32_t nqs, capqs, free_q;
	struct pending *ps;
	uint32_t nps, capps, free_p, live;
	uint64_t flows;
	int oom;
	/* The trace has no return events (env returns = false): a call is
	 * an instant, not a slice that would last to the trace's end. */
	int untimed;
};

static void head(struct te *t, const char *ph, const struct bp_proc *p,
		 int pid, uint64_t ts)
{
	struct bp_out *o = t->o;

	bp_out_str(o, ",\n{\"ph\":\"");
	bp_out_str(o, ph);
	bp_out_str(o, pid == 1 ? "\",\"pid\":1,\"tid\":" : "\",\"pid\":2,\"tid\":");
	bp_out_u64(o, p ? p->index + 1 : 0);
	bp_out_str(o, ",\"ts\":");
	bp_out_us3(o, ts > t->start ? ts - t->start : 0);
}

static void name(struct te *t, const char *s, size_t n, const char *cat)
{
	bp_out_str(t->o, ",\"name\":");
	bp_out_json_str(t->o, s, n);
	bp_out_str(t->o, ",\"cat\":\"");
	bp_out_str(t->o, cat);
	bp_out_char(t->o, '"');
}

/* ,"args":{"k":"v"} for up to two pairs (k2 NULL: one). */
static void args(struct te *t, const char *k1, const char *v1, size_t n1,
		 const char *k2, const char *v2, size_t n2)
{
	struct bp_out *o = t->o;

	bp_out_str(o, ",\"args\":{\"");
	bp_out_str(o, k1);
	bp_out_str(o, "\":");
	bp_out_json_str(o, v1, n1);
	if (k2) {
		bp_out_str(o, ",\"");
		bp_out_str(o, k2);
		bp_out_str(o, "\":");
		bp_out_json_str(o, v2, n2);
	}
	bp_out_char(o, '}');
}

/* Whether the function of the event just applied (the model's
 * last_func) has no call times: a trace without returns, or a function
 * traced without a return event for every call.  Its calls and returns
 * are instants. */
static int untimed_func(struct te *t)
{
	return t->untimed || (t->m.last_func != BP_MAP_NONE &&
			      bp_model_untimed(&t->m, t->m.last_func));
}

static void on_end(void *ctx, const struct bp_frame_end *fe)
{
	struct te *t = ctx;

	if (t->untimed) /* its call was an instant */
		return;
	head(t, "E", fe->proc, 1, fe->end);
	if (fe->how == BP_END_EXCEPTION)
		bp_out_str(t->o, ",\"args\":{\"exception\":true}");
	else if (fe->how == BP_END_LOST) /* stack reset: events lost */
		bp_out_str(t->o, ",\"args\":{\"events_lost\":true}");
	else if (fe->how == BP_END_OPEN)
		bp_out_str(t->o, ",\"args\":{\"open_at_end\":true}");
	bp_out_char(t->o, '}');
}

static void slice(struct te *t, struct bp_proc *p, int pid, uint64_t from,
		  uint64_t to, const char *nm, const char *cat)
{
	if (pid == 2)
		p->user = 1; /* has a scheduling track */
	head(t, "X", p, pid, from);
	bp_out_str(t->o, ",\"dur\":");
	bp_out_us3(t->o, to - from);
	name(t, nm, strlen(nm), cat);
	bp_out_char(t->o, '}');
}

static uint64_t qkey(uint64_t receiver, const char *msg, size_t n)
{
	return bp_hash_u64(receiver) ^ bp_hash_bytes(msg, n);
}

/* A send waits in the queue of (receiver, message): the receiver's pid
 * key when the trace resolves it (bp_model_receiver: local pids, names,
 * aliases), else 0, a queue any receiver of that message may take from. */
static void note_send(struct te *t, const struct bp_proc *p,
		      const struct bp_event *e)
{
	uint64_t key = qkey(bp_model_receiver(&t->m, e), e->str[BP_FLD(SEND, message)],
			    e->len[BP_FLD(SEND, message)]);
	uint32_t qi = bp_map_get(&t->qidx, key), pi;

	if (t->live >= MAX_PENDING)
		return;
	if (t->free_p != BP_MAP_NONE) {
		pi = t->free_p;
		t->free_p = t->ps[pi].next;
	} else {
		if (t->nps == t->capps) {
			uint32_t cap = t->capps ? t->capps * 2 : 1024;
			struct pending *v = realloc(t->ps, cap * sizeof *v);
			if (!v) {
				t->oom = 1;
				return;
			}
			t->ps = v;
			t->capps = cap;
		}
		pi = t->nps++;
	}
	t->ps[pi] = (struct pending){e->ts, p->index + 1, BP_MAP_NONE};
	if (qi == BP_MAP_NONE) {
		if (t->free_q != BP_MAP_NONE) {
			qi = t->free_q;
			t->free_q = t->qs[qi].next_free;
		} else {
			if (t->nqs == t->capqs) {
				uint32_t cap = t->capqs ? t->capqs * 2 : 1024;
				struct queue *v = realloc(t->qs, cap * sizeof *v);
				if (!v) {
					t->oom = 1;
					return;
				}
				t->qs = v;
				t->capqs = cap;
			}
			qi = t->nqs++;
		}
		if (bp_map_put(&t->qidx, key, qi) != 0) {
			t->oom = 1;
			return;
		}
		t->qs[qi] = (struct queue){pi, pi, BP_MAP_NONE};
	} else {
		t->ps[t->qs[qi].tail].next = pi;
		t->qs[qi].tail = pi;
	}
	t->live++;
}

static void match_receive(struct te *t, const struct bp_proc *p,
			  const struct bp_event *e)
{
	uint64_t key = qkey(e->pid, e->str[BP_FLD(RECEIVE, message)],
			    e->len[BP_FLD(RECEIVE, message)]);
	uint32_t qi = bp_map_get(&t->qidx, key);

	if (qi == BP_MAP_NONE) { /* a send whose receiver was not known */
		key = qkey(0, e->str[BP_FLD(RECEIVE, message)],
			   e->len[BP_FLD(RECEIVE, message)]);
		qi = bp_map_get(&t->qidx, key);
	}
	if (qi == BP_MAP_NONE)
		return;
	struct queue *q = &t->qs[qi];
	uint32_t pi = q->head;
	struct pending s = t->ps[pi];
	q->head = s.next;
	t->ps[pi].next = t->free_p;
	t->free_p = pi;
	t->live--;
	if (q->head == BP_MAP_NONE) {
		bp_map_del(&t->qidx, key);
		q->next_free = t->free_q;
		t->free_q = qi;
	}
	uint64_t id = ++t->flows;
	struct bp_out *o = t->o;
	bp_out_str(o, ",\n{\"ph\":\"s\",\"pid\":1,\"tid\":");
	bp_out_u64(o, s.tid);
	bp_out_str(o, ",\"ts\":");
	bp_out_us3(o, s.ts - t->start);
	bp_out_str(o, ",\"name\":\"message\",\"cat\":\"message\",\"id\":");
	bp_out_u64(o, id);
	bp_out_char(o, '}');
	head(t, "f", p, 1, e->ts);
	bp_out_str(o, ",\"bp\":\"e\",\"name\":\"message\",\"cat\":\"message\","
		      "\"id\":");
	bp_out_u64(o, id);
	bp_out_char(o, '}');
}

/* Another tool changed the session's tracing: a global instant, named
 * "tampered: pattern m:f/1 removed", with the detail. */
static void tampered(struct te *t, const struct bp_event *e)
{
	char nm[512];
	int n = snprintf(nm, sizeof nm, "tampered: %.*s %.*s %.*s",
			 (int)e->len[BP_FLD(TAMPERED, what)],
			 e->str[BP_FLD(TAMPERED, what)],
			 (int)e->len[BP_FLD(TAMPERED, subject)],
			 e->str[BP_FLD(TAMPERED, subject)],
			 (int)e->len[BP_FLD(TAMPERED, how)],
			 e->str[BP_FLD(TAMPERED, how)]);

	if (n < 0)
		return;
	head(t, "i", NULL, 1, e->ts);
	bp_out_str(t->o, ",\"s\":\"g\"");
	name(t, nm, (size_t)n < sizeof nm ? (size_t)n : sizeof nm - 1,
	     "beamprobe");
	args(t, "detail", e->str[BP_FLD(TAMPERED, detail)],
	     e->len[BP_FLD(TAMPERED, detail)], NULL, NULL, 0);
	bp_out_char(t->o, '}');
}

/* A report of the VM's system monitor: an instant on the process's track
 * (global when the event names no process), "long_gc (12 ms)". */
static void monitor(struct te *t, struct bp_proc *p, const struct bp_event *e)
{
	char nm[128];
	uint64_t ms = e->num[BP_FLD(MONITOR, duration_ms)];
	int n = ms ? snprintf(nm, sizeof nm, "%.*s (%llu ms)",
			      (int)e->len[BP_FLD(MONITOR, what)],
			      e->str[BP_FLD(MONITOR, what)],
			      (unsigned long long)ms)
		   : snprintf(nm, sizeof nm, "%.*s",
			      (int)e->len[BP_FLD(MONITOR, what)],
			      e->str[BP_FLD(MONITOR, what)]);

	if (n < 0)
		return;
	head(t, "i", p, 1, e->ts);
	bp_out_str(t->o, p ? ",\"s\":\"t\"" : ",\"s\":\"g\"");
	name(t, nm, (size_t)n < sizeof nm ? (size_t)n : sizeof nm - 1,
	     "monitor");
	if (e->len[BP_FLD(MONITOR, port)])
		args(t, "detail", e->str[BP_FLD(MONITOR, detail)],
		     e->len[BP_FLD(MONITOR, detail)], "port",
		     e->str[BP_FLD(MONITOR, port)],
		     e->len[BP_FLD(MONITOR, port)]);
	else
		args(t, "detail", e->str[BP_FLD(MONITOR, detail)],
		     e->len[BP_FLD(MONITOR, detail)], NULL, NULL, 0);
	bp_out_char(t->o, '}');
}

/* A counter sample: a "C" event of the node's trace process, one counter
 * track per name ("run_queue", "message_queue_len <0.81.0>"), the value
 * divided by its scale. */
static void sample(struct te *t, const struct bp_event *e)
{
	struct bp_out *o = t->o;
	uint64_t v = e->num[BP_FLD(SAMPLE, value)];
	uint64_t sc = e->num[BP_FLD(SAMPLE, scale)];
	char nm[256], num[64];
	int n;

	if (e->len[BP_FLD(SAMPLE, process)])
		n = snprintf(nm, sizeof nm, "%.*s %.*s",
			     (int)e->len[BP_FLD(SAMPLE, counter)],
			     e->str[BP_FLD(SAMPLE, counter)],
			     (int)e->len[BP_FLD(SAMPLE, process)],
			     e->str[BP_FLD(SAMPLE, process)]);
	else
		n = snprintf(nm, sizeof nm, "%.*s",
			     (int)e->len[BP_FLD(SAMPLE, counter)],
			     e->str[BP_FLD(SAMPLE, counter)]);
	if (n < 0)
		return;
	if (sc > 1)
		snprintf(num, sizeof num, "%.6f", (double)v / (double)sc);
	else
		snprintf(num, sizeof num, "%llu", (unsigned long long)v);
	bp_out_str(o, ",\n{\"ph\":\"C\",\"pid\":1,\"tid\":0,\"ts\":");
	bp_out_us3(o, e->ts > t->start ? e->ts - t->start : 0);
	name(t, nm, (size_t)n < sizeof nm ? (size_t)n : sizeof nm - 1,
	     "sample");
	bp_out_str(o, ",\"args\":{\"value\":");
	bp_out_str(o, num);
	bp_out_str(o, "}}");
}

static void event(struct te *t, const struct bp_event *e)
{
	struct bp_proc *p = e->pid ? bp_model_proc(&t->m, e->pid) : NULL;
	uint32_t depth = p ? p->depth : 0;

	if (e->id == BP_EV_TAMPERED) {
		tampered(t, e);
		return;
	}
	if (e->id == BP_EV_SAMPLE) {
		sample(t, e);
		return;
	}
	if (e->id == BP_EV_MONITOR) {
		monitor(t, p, e);
		return;
	}
	if (!p) {
		bp_model_apply(&t->m, e);
		return;
	}
	/* Pairings read the start before bp_model_count updates it. */
	if ((e->id == BP_EV_GC_MINOR_END || e->id == BP_EV_GC_MAJOR_END) &&
	    p->in_gc)
		slice(t, p, 1, p->gc_start, e->ts,
		      e->id == BP_EV_GC_MINOR_END ? "gc_minor" : "gc_major",
		      "gc");
	if (bp_model_ends_run(p, e))
		slice(t, p, 2, p->sched_start, e->ts, "running", "sched");
	bp_model_apply_to(&t->m, p, e); /* E events of popped frames */
	bp_model_count(p, e);
	switch (e->id) {
	case BP_EV_RETURN_FROM:
	case BP_EV_EXCEPTION_FROM:
		/* The end of a slice (on_end), or where its call was an
		 * instant (a match spec with return_trace in some clauses
		 * only), an instant too. */
		if (untimed_func(t)) {
			int ret = e->id == BP_EV_RETURN_FROM;
			head(t, "i", p, 1, e->ts);
			bp_out_str(t->o, ",\"s\":\"t\"");
			name(t, e->str[BP_FLD_MFA], e->len[BP_FLD_MFA],
			     ret ? "return" : "exception");
			if (ret)
				args(t, "result",
				     e->str[BP_FLD(RETURN_FROM, result)],
				     e->len[BP_FLD(RETURN_FROM, result)], NULL,
				     NULL, 0);
			else
				args(t, "class",
				     e->str[BP_FLD(EXCEPTION_FROM, class)],
				     e->len[BP_FLD(EXCEPTION_FROM, class)],
				     "reason",
				     e->str[BP_FLD(EXCEPTION_FROM, reason)],
				     e->len[BP_FLD(EXCEPTION_FROM, reason)]);
			bp_out_char(t->o, '}');
		}
		break;
	case BP_EV_PROCESS:
	case BP_EV_RETURN_TO:
	case BP_EV_SCHED_IN:
	case BP_EV_SCHED_OUT:
	case BP_EV_GC_MINOR_START:
	case BP_EV_GC_MAJOR_START:
	case BP_EV_GC_MINOR_END:
	case BP_EV_GC_MAJOR_END:
		break;
	case BP_EV_CALL: {
		/* A slice's begin if pushed (not beyond the cap), or an
		 * instant where no call is known to end: in a trace without
		 * returns, or of a function traced without them. */
		int inst = untimed_func(t);
		if (inst || p->depth > depth) {
			head(t, inst ? "i" : "B", p, 1, e->ts);
			if (inst)
				bp_out_str(t->o, ",\"s\":\"t\"");
			name(t, e->str[BP_FLD(CALL, mfa)],
			     e->len[BP_FLD(CALL, mfa)], "call");
			if (e->len[BP_FLD(CALL, args)])
				args(t, "args", e->str[BP_FLD(CALL, args)],
				     e->len[BP_FLD(CALL, args)], NULL, NULL,
				     0);
			bp_out_char(t->o, '}');
		}
		break;
	}
	case BP_EV_SEND:
	case BP_EV_SEND_DEAD:
		head(t, "X", p, 1, e->ts);
		bp_out_str(t->o, ",\"dur\":0");
		name(t, e->id == BP_EV_SEND ? "send" : "send (no process)",
		     e->id == BP_EV_SEND ? 4 : 17, "message");
		args(t, "to", e->str[BP_FLD(SEND, to_text)],
		     e->len[BP_FLD(SEND, to_text)], "message",
		     e->str[BP_FLD(SEND, message)],
		     e->len[BP_FLD(SEND, message)]);
		bp_out_char(t->o, '}');
		if (e->id == BP_EV_SEND)
			note_send(t, p, e);
		break;
	case BP_EV_RECEIVE:
		head(t, "X", p, 1, e->ts);
		bp_out_str(t->o, ",\"dur\":0");
		name(t, "receive", 7, "message");
		args(t, "message", e->str[BP_FLD(RECEIVE, message)],
		     e->len[BP_FLD(RECEIVE, message)], NULL, NULL, 0);
		bp_out_char(t->o, '}');
		match_receive(t, p, e);
		break;
	case BP_EV_ANNOTATION: { /* an instant on the process track, named
				  * by its tag */
		const char *tg = e->str[BP_FLD(ANNOTATION, tag)];
		uint32_t tl = e->len[BP_FLD(ANNOTATION, tag)];
		if (tl == 9 && !memcmp(tg, "undefined", 9)) {
			tg = "annotation";
			tl = 10;
		}
		head(t, "i", p, 1, e->ts);
		bp_out_str(t->o, ",\"s\":\"t\"");
		name(t, tg, tl, "annotation");
		args(t, "tag", e->str[BP_FLD(ANNOTATION, tag)],
		     e->len[BP_FLD(ANNOTATION, tag)], "value",
		     e->str[BP_FLD(ANNOTATION, value)],
		     e->len[BP_FLD(ANNOTATION, value)]);
		bp_out_char(t->o, '}');
		break;
	}
	default: { /* spawn, exit, links, register, ports, ...: instants */
		const char *n = e->id == BP_EV_UNKNOWN ? "unknown"
						       : bp_event_name(e->id);
		head(t, "i", p, 1, e->ts);
		bp_out_str(t->o, ",\"s\":\"t\"");
		name(t, n, strlen(n), "proc");
		/* Any class: its first two string fields, whatever they are */
		if (e->len[0])
			args(t, "detail", e->str[0], e->len[0],
			     e->len[1] ? "more" : NULL, e->str[1], e->len[1]);
		bp_out_char(t->o, '}');
		break;
	}
	}
}

void bp_export_json_proc_label(struct bp_out *o, const struct bp_proc *p)
{
	struct bp_out tmp;

	const char *nm = bp_proc_last_name(p);

	if (!nm) {
		bp_out_json_str(o, bp_proc_text(p), strlen(bp_proc_text(p)));
		return;
	}
	bp_out_init_mem(&tmp);
	bp_out_str(&tmp, bp_proc_text(p));
	bp_out_char(&tmp, ' ');
	bp_out_str(&tmp, nm);
	bp_out_json_str(o, tmp.buf ? tmp.buf : "", tmp.len);
	bp_out_close(&tmp);
}

static void thread_names(struct te *t, int pid)
{
	for (uint32_t i = 0; i < t->m.nprocs; i++) {
		const struct bp_proc *p = t->m.procs[i];
		struct bp_out *o = t->o;
		if (pid == 2 && !p->user)
			continue;
		bp_out_str(o, pid == 1 ? ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":"
				       : ",\n{\"ph\":\"M\",\"pid\":2,\"tid\":");
		bp_out_u64(o, p->index + 1);
		bp_out_str(o, ",\"name\":\"thread_name\",\"args\":{\"name\":");
		bp_export_json_proc_label(o, p);
		bp_out_str(o, "}},\n{\"ph\":\"M\",\"pid\":");
		bp_out_char(o, pid == 1 ? '1' : '2');
		bp_out_str(o, ",\"tid\":");
		bp_out_u64(o, p->index + 1);
		bp_out_str(o, ",\"name\":\"thread_sort_index\",\"args\":"
			      "{\"sort_index\":");
		bp_out_u64(o, p->index + 1);
		bp_out_str(o, "}}");
	}
}

int bp_export_perfetto(struct bp_reader *r, struct bp_out *o)
{
	struct te t;
	const struct bp_event *e;
	const char *node = bp_meta_env(&r->meta, "node");

	memset(&t, 0, sizeof t);
	t.o = o;
	t.free_p = t.free_q = BP_MAP_NONE;
	t.start = r->start_ts == UINT64_MAX ? 0 : r->start_ts;
	t.last = t.start;
	t.untimed = bp_meta_no_returns(&r->meta);
	bp_model_init(&t.m, on_end, &t);
	bp_model_read_env(&t.m, &r->meta);
	bp_out_str(o, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"creator\":"
		      "\"beamprobe " BP_VERSION "\"},\"traceEvents\":[\n"
		      "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":"
		      "\"process_name\",\"args\":{\"name\":");
	bp_out_json_str(o, node ? node : "beam", strlen(node ? node : "beam"));
	bp_out_str(o, "}},\n{\"ph\":\"M\",\"pid\":2,\"tid\":0,\"name\":"
		      "\"process_name\",\"args\":{\"name\":\"scheduling\"}}");
	while ((e = bp_reader_next(r))) {
		event(&t, e);
		t.last = e->ts;
	}
	/* Close what is still open at the end of the trace. */
	bp_model_finish(&t.m);
	for (uint32_t i = 0; i < t.m.nprocs; i++) {
		struct bp_proc *p = t.m.procs[i];
		if (p->scheduled)
			slice(&t, p, 2, p->sched_start,
			      bp_model_run_end(&t.m, p), "running", "sched");
	}
	thread_names(&t, 1);
	thread_names(&t, 2);
	bp_out_str(o, "\n]}\n");
	int oom = t.oom || t.m.oom;
	bp_model_free(&t.m);
	bp_map_free(&t.qidx);
	free(t.qs);
	free(t.ps);
	if (oom)
		bp_cli_error("out of memory: export incomplete");
	return oom ? -1 : 0;
}
