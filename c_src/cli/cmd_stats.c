/* cmd_stats.c -- `beamprobe stats DIR`: per-function call statistics
 * (from the call stacks of bp_model), per-process activity, the top
 * message flows and the events lost, as a table or --json.
 *
 * Memory is bounded by the number of distinct functions (one histogram of
 * 3.9 KiB each), processes (about 300 bytes each: a process's call stack
 * is freed when it exits) and sender/receiver pairs, not by trace
 * length; there is no cap (docs/beamprobe.1 says so).
 */
#include "bp_cli.h"
#include "bp_hist.h"
#include "bp_model.h"
#include "bp_out.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct fstat {
	uint64_t calls, returns, exceptions, unwound, open;
	uint64_t total, own, max;
	struct bp_hist *hist;   /* owned; NULL until a call completes */
};

/* A flow is keyed by its sender and its receiver's identity: the
 * receiver's pid key when the trace resolves it (a local pid, a
 * registered name held at the time, an alias whose owner the trace
 * shows), else the receiver's text (a port, a remote pid, an unknown
 * alias or name). */
struct flow {
	uint64_t from, to, count; /* to: pid key, or 0 */
	uint32_t to_text;       /* id in stats.texts: the text of the first
				 * send (the name or alias it went to) */
};

enum sort_key { S_CALLS, S_TOTAL, S_OWN, S_MEAN, S_MAX, S_P99 };

struct stats {
	struct bp_reader r;
	struct bp_model m;
	struct fstat *fs;       /* by function id; owned */
	uint32_t nfs;
	struct bp_map flow_idx; /* hash(from, to) -> index in flows */
	struct flow *flows;     /* owned */
	uint32_t nflows, capflows;
	struct bp_strtab texts; /* receivers' texts from send events */
	uint64_t events, first, last;
	uint64_t tampered; /* "tampered" events: another tool's changes */
	uint64_t monitor;  /* "monitor" events: the VM's system monitor */
	uint64_t samples;  /* "sample" events: counter samples */
	uint64_t annotations; /* beamprobe:annotate/1,2 events */
	int oom;
	enum sort_key sort;
	/* The trace says no call can have a return event (env returns =
	 * false): no call is known to end, so no call time is known. */
	int untimed;
};

static struct fstat *fstat_of(struct stats *st, uint32_t func)
{
	if (func >= st->nfs) {
		uint32_t n = st->nfs ? st->nfs : 64;
		while (n <= func)
			n *= 2;
		struct fstat *v = realloc(st->fs, n * sizeof *v);
		if (!v) {
			st->oom = 1;
			return NULL;
		}
		memset(v + st->nfs, 0, (n - st->nfs) * sizeof *v);
		st->fs = v;
		st->nfs = n;
	}
	return &st->fs[func];
}

static void on_frame_end(void *ctx, const struct bp_frame_end *fe)
{
	struct stats *st = ctx;
	struct fstat *f = fstat_of(st, fe->frame->func);

	if (!f)
		return;
	if (fe->how == BP_END_RETURN)
		f->returns++;
	else if (fe->how == BP_END_EXCEPTION)
		f->exceptions++;
	else if (fe->how == BP_END_OPEN)
		f->open++;
	else
		f->unwound++; /* unwound, or reset after lost events */
	f->total += fe->incl;
	f->own += fe->own;
	if (fe->incl > f->max)
		f->max = fe->incl;
	if (!f->hist) {
		f->hist = malloc(sizeof *f->hist);
		if (!f->hist) {
			st->oom = 1;
			return;
		}
		bp_hist_init(f->hist);
	}
	bp_hist_add(f->hist, fe->incl);
}

/* The identity a flow is keyed by (see struct flow). */
static uint64_t flow_ident(uint64_t to, uint32_t text)
{
	return to ? to : (1ull << 63 | text);
}

static void count_flow(struct stats *st, const struct bp_event *e)
{
	uint64_t to = bp_model_receiver(&st->m, e);
	uint32_t text = to ? BP_MAP_NONE
			   : bp_strtab_intern(&st->texts, e->str[BP_FLD(SEND, to_text)],
					      e->len[BP_FLD(SEND, to_text)]);
	uint64_t ident = flow_ident(to, text);
	uint64_t key = bp_hash_u64(e->pid) ^ (bp_hash_u64(ident) * 31);
	uint32_t i = bp_map_get(&st->flow_idx, key);

	while (i != BP_MAP_NONE &&
	       (st->flows[i].from != e->pid ||
		flow_ident(st->flows[i].to, st->flows[i].to_text) != ident))
		i = bp_map_get(&st->flow_idx, ++key); /* rare collision */
	if (i == BP_MAP_NONE) {
		if (st->nflows == st->capflows) {
			uint32_t cap = st->capflows ? st->capflows * 2 : 64;
			struct flow *v = realloc(st->flows, cap * sizeof *v);
			if (!v) {
				st->oom = 1;
				return;
			}
			st->flows = v;
			st->capflows = cap;
		}
		i = st->nflows;
		if (bp_map_put(&st->flow_idx, key, i) != 0) {
			st->oom = 1;
			return;
		}
		if (text == BP_MAP_NONE)
			text = bp_strtab_intern(&st->texts, e->str[BP_FLD(SEND, to_text)],
						e->len[BP_FLD(SEND, to_text)]);
		st->flows[st->nflows++] = (struct flow){e->pid, to, 0, text};
		if (to) /* keyed by pid: the text is only for display */
			st->flows[st->nflows - 1].to_text = text;
	}
	st->flows[i].count++;
}

static int cmp_flow_keys(const void *a, const void *b)
{
	const struct flow *fa = a, *fb = b;
	uint64_t ia = flow_ident(fa->to, fa->to_text),
		 ib = flow_ident(fb->to, fb->to_text);
	if (fa->from != fb->from)
		return fa->from < fb->from ? -1 : 1;
	return ia < ib ? -1 : ia > ib;
}

/* Sends to an alias whose owner the trace showed only later (e.g. by
 * receiving the reply) go to the owner; rows that then name the same
 * sender and receiver are merged. */
static void resolve_flows(struct stats *st)
{
	int changed = 0;

	for (uint32_t i = 0; i < st->nflows; i++) {
		struct flow *f = &st->flows[i];
		const struct bp_str *t = bp_strtab_get(&st->texts, f->to_text);
		if (f->to || f->to_text == BP_MAP_NONE)
			continue;
		uint64_t owner = bp_model_alias_owner(&st->m, t->s, t->len);
		if (owner) {
			f->to = owner;
			changed = 1;
		}
	}
	if (!changed)
		return;
	qsort(st->flows, st->nflows, sizeof *st->flows, cmp_flow_keys);
	uint32_t k = 0;
	for (uint32_t i = 0; i < st->nflows; i++) {
		if (k && st->flows[k - 1].from == st->flows[i].from &&
		    st->flows[k - 1].to && st->flows[k - 1].to == st->flows[i].to)
			st->flows[k - 1].count += st->flows[i].count;
		else
			st->flows[k++] = st->flows[i];
	}
	st->nflows = k;
}

static void consume(struct stats *st)
{
	const struct bp_event *e;

	while ((e = bp_reader_next(&st->r))) {
		struct bp_proc *p = bp_model_apply(&st->m, e);
		if (e->id == BP_EV_PROCESS || e->id == BP_EV_DROPS)
			continue;
		if (!st->events++)
			st->first = e->ts;
		st->last = e->ts;
		if (e->id == BP_EV_TAMPERED)
			st->tampered++;
		if (e->id == BP_EV_MONITOR)
			st->monitor++;
		if (e->id == BP_EV_SAMPLE)
			st->samples++;
		if (!p)
			continue;
		bp_model_count(p, e);
		if (e->id == BP_EV_ANNOTATION)
			st->annotations++;
		if (e->id == BP_EV_CALL && st->m.last_func != BP_MAP_NONE) {
			struct fstat *f = fstat_of(st, st->m.last_func);
			if (f)
				f->calls++;
		} else if (e->id == BP_EV_SEND || e->id == BP_EV_SEND_DEAD) {
			count_flow(st, e);
		}
	}
	/* Frames still open at the end end there (counted as open). */
	bp_model_finish(&st->m);
	/* So do runs, or at the process's exit. */
	for (uint32_t i = 0; i < st->m.nprocs; i++) {
		struct bp_proc *p = st->m.procs[i];
		if (p->scheduled) {
			p->sched_ns += bp_model_run_end(&st->m, p) -
				       p->sched_start;
			p->scheduled = 0;
		}
	}
	resolve_flows(st);
}

static uint64_t completed(const struct fstat *f)
{
	return f->returns + f->exceptions + f->unwound + f->open;
}

static uint64_t mean(const struct fstat *f)
{
	uint64_t n = completed(f);
	return n ? f->total / n : 0;
}

static uint64_t quantile(const struct fstat *f, double q)
{
	return f->hist ? bp_hist_quantile(f->hist, q) : 0;
}

static struct stats *sort_ctx;

static uint64_t sort_value(const struct fstat *f)
{
	switch (sort_ctx->sort) {
	case S_CALLS: return f->calls;
	case S_OWN: return f->own;
	case S_MEAN: return mean(f);
	case S_MAX: return f->max;
	case S_P99: return quantile(f, 0.99);
	case S_TOTAL: break;
	}
	return f->total;
}

static int cmp_funcs(const void *a, const void *b)
{
	const struct fstat *fa = &sort_ctx->fs[*(const uint32_t *)a],
			   *fb = &sort_ctx->fs[*(const uint32_t *)b];
	uint64_t va = sort_value(fa), vb = sort_value(fb);
	if (va != vb)
		return va < vb ? 1 : -1;
	if (fa->calls != fb->calls)
		return fa->calls < fb->calls ? 1 : -1;
	return strcmp(bp_model_func_name(&sort_ctx->m, *(const uint32_t *)a),
		      bp_model_func_name(&sort_ctx->m, *(const uint32_t *)b));
}

static int cmp_procs(const void *a, const void *b)
{
	const struct bp_proc *pa = *(struct bp_proc *const *)a,
			     *pb = *(struct bp_proc *const *)b;
	if (pa->events != pb->events)
		return pa->events < pb->events ? 1 : -1;
	return pa->index < pb->index ? -1 : 1;
}

static int cmp_flows(const void *a, const void *b)
{
	const struct flow *fa = a, *fb = b;
	if (fa->count != fb->count)
		return fa->count < fb->count ? 1 : -1;
	if (fa->from != fb->from)
		return fa->from < fb->from ? -1 : 1;
	return fa->to < fb->to ? -1 : fa->to > fb->to;
}

/* Label of the receiver of flow f: its process if known, else its text. */
static void flow_end(struct stats *st, struct bp_out *o, uint64_t key,
		     uint32_t text, int json)
{
	const struct bp_proc *p = key ? bp_model_find(&st->m, key) : NULL;
	const char *s = p ? bp_proc_text(p)
		      : text != BP_MAP_NONE ? st->texts.strs[text].s : "?";
	const char *name = p ? bp_proc_last_name(p) : NULL;
	/* The name or alias the messages went to, if not the pid itself. */
	const char *via = p && text != BP_MAP_NONE &&
					  strcmp(st->texts.strs[text].s, s) &&
					  (!name || strcmp(st->texts.strs[text].s,
							   name))
				  ? st->texts.strs[text].s
				  : NULL;
	if (json) {
		bp_out_json_str(o, s, strlen(s));
		if (via) {
			bp_out_str(o, ",\"via\":");
			bp_out_json_str(o, via, strlen(via));
		}
		return;
	}
	bp_out_text(o, s, strlen(s));
	if (name) {
		bp_out_char(o, ' ');
		bp_out_text(o, name, strlen(name));
	}
	if (via) {
		bp_out_str(o, " via ");
		bp_out_text(o, via, strlen(via));
	}
}

/* Text table cell: a duration right-aligned in 11 columns. */
static void dur_cell(struct bp_out *o, uint64_t ns)
{
	struct bp_out tmp;
	bp_out_init_mem(&tmp);
	bp_out_dur(&tmp, ns);
	bp_out_char(&tmp, '\0');
	bp_out_pad(o, tmp.buf ? tmp.buf : "?", 11, 1);
	bp_out_close(&tmp);
}

static void json_key(struct bp_out *o, const char *k, uint64_t v, int comma)
{
	if (comma)
		bp_out_char(o, ',');
	bp_out_char(o, '"');
	bp_out_str(o, k);
	bp_out_mem(o, "\":", 2);
	bp_out_u64(o, v);
}

/* A time key: null where the trace cannot know it (untimed). */
static void json_time(struct bp_out *o, int untimed, const char *k,
		      uint64_t v)
{
	if (!untimed) {
		json_key(o, k, v, 1);
		return;
	}
	bp_out_str(o, ",\"");
	bp_out_str(o, k);
	bp_out_str(o, "\":null");
}

/* A time cell of the text table: "-" where the trace cannot know it. */
static void time_cell(struct bp_out *o, int untimed, uint64_t ns)
{
	if (untimed)
		bp_out_pad(o, "-", 11, 1);
	else
		dur_cell(o, ns);
}

static void report_functions(struct stats *st, struct bp_out *o, int json,
			     uint64_t top)
{
	uint32_t n = st->m.funcs.n, *idx = malloc((n + 1) * sizeof *idx);
	uint64_t calls = 0, own = 0, total = 0, open = 0, untimed = 0;

	if (!idx) {
		st->oom = 1;
		return;
	}
	uint32_t kept = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct fstat *f = fstat_of(st, i);
		if (!f) {
			free(idx);
			return;
		}
		if (!f->calls) /* only named by a return_to or a return */
			continue;
		idx[kept++] = i;
		untimed += !st->untimed && bp_model_untimed(&st->m, i);
		calls += f->calls;
		own += f->own;
		total += f->total;
		open += f->open;
	}
	n = kept;
	qsort(idx, n, sizeof *idx, cmp_funcs);
	if (json) {
		json_key(o, "total_calls", calls, 1);
		json_time(o, st->untimed, "total_own_ns", own);
		json_time(o, st->untimed, "open_calls", open);
		bp_out_str(o, st->untimed ? ",\"call_times\":\"unknown\""
			      : untimed   ? ",\"call_times\":\"partial\""
					  : ",\"call_times\":\"measured\"");
		bp_out_str(o, ",\"functions\":[");
	} else {
		bp_out_str(o, "Functions: ");
		bp_out_u64(o, n);
		bp_out_str(o, ", ");
		bp_out_u64(o, calls);
		if (st->untimed) { /* (sorted by calls: nothing else known) */
			bp_out_str(o, " calls; call times unknown: the trace "
				      "has no return events (recorded without "
				      "return)");
		} else {
			bp_out_str(o, " calls, own time ");
			bp_out_dur(o, own);
			if (open) {
				bp_out_str(o, ", ");
				bp_out_u64(o, open);
				bp_out_str(o, " still open at the end");
			}
		}
		if (untimed) { /* (0 when st->untimed) */
			bp_out_str(o, "; ");
			bp_out_u64(o, untimed);
			bp_out_str(o, untimed == 1 ? " function" : " functions");
			bp_out_str(o, " traced without a return event for "
				      "every call: times unknown (-)");
		}
		bp_out_str(o, "; sorted by ");
		bp_out_str(o, (const char *[]){"calls", "total", "own", "mean",
					       "max", "p99"}[st->sort]);
		bp_out_str(o, "\n     calls      total        own       mean"
			      "        max        p50        p99   open  "
			      "function\n");
	}
	for (uint32_t k = 0; k < n && k < top; k++) {
		const struct fstat *f = &st->fs[idx[k]];
		const char *name = bp_model_func_name(&st->m, idx[k]);
		int u = st->untimed || bp_model_untimed(&st->m, idx[k]);
		if (json) {
			bp_out_str(o, k ? ",{\"function\":" : "{\"function\":");
			bp_out_json_str(o, name, strlen(name));
			json_key(o, "calls", f->calls, 1);
			json_key(o, "returns", f->returns, 1);
			json_key(o, "exceptions", f->exceptions, 1);
			json_key(o, "unwound", f->unwound, 1);
			json_time(o, u, "open", f->open);
			json_time(o, u, "total_ns", f->total);
			json_time(o, u, "own_ns", f->own);
			json_time(o, u, "mean_ns", mean(f));
			json_time(o, u, "max_ns", f->max);
			json_time(o, u, "p50_ns", quantile(f, 0.5));
			json_time(o, u, "p99_ns", quantile(f, 0.99));
			bp_out_char(o, '}');
			continue;
		}
		bp_out_u64_w(o, f->calls, 10);
		time_cell(o, u, f->total);
		time_cell(o, u, f->own);
		time_cell(o, u, mean(f));
		time_cell(o, u, f->max);
		time_cell(o, u, quantile(f, 0.5));
		time_cell(o, u, quantile(f, 0.99));
		if (u)
			bp_out_pad(o, "-", 7, 1);
		else
			bp_out_u64_w(o, f->open, 7);
		bp_out_mem(o, "  ", 2);
		bp_out_text(o, name, strlen(name));
		bp_out_char(o, '\n');
	}
	if (json)
		bp_out_char(o, ']');
	else if (n > top)
		bp_out_str(o, "  ...\n");
	free(idx);
	(void)total;
}

static void report_processes(struct stats *st, struct bp_out *o, int json,
			     uint64_t top)
{
	uint32_t n = st->m.nprocs;
	struct bp_proc **v = malloc((n + 1) * sizeof *v);

	if (!v) {
		st->oom = 1;
		return;
	}
	/* Only processes with events: a trace also names every process the
	 * node had (process events), most of which did nothing traced. */
	uint32_t kept = 0;
	for (uint32_t i = 0; i < n; i++)
		if (st->m.procs[i]->events)
			v[kept++] = st->m.procs[i];
	n = kept;
	qsort(v, n, sizeof *v, cmp_procs);
	if (json) {
		bp_out_str(o, ",\"processes\":[");
	} else {
		bp_out_str(o, "\nProcesses: ");
		bp_out_u64(o, n);
		bp_out_str(o, "\n    events    sent    recv     gc    gc time"
			      "  sched time  process\n");
	}
	for (uint32_t k = 0; k < n && k < top; k++) {
		const struct bp_proc *p = v[k];
		const char *text = bp_proc_text(p);
		if (json) {
			bp_out_str(o, k ? ",{\"pid\":" : "{\"pid\":");
			bp_out_json_str(o, text, strlen(text));
			bp_out_str(o, ",\"name\":");
			if (bp_proc_last_name(p))
				bp_out_json_str(o, bp_proc_last_name(p),
						strlen(bp_proc_last_name(p)));
			else
				bp_out_str(o, "null");
			json_key(o, "events", p->events, 1);
			json_key(o, "sent", p->sent, 1);
			json_key(o, "received", p->received, 1);
			json_key(o, "gc_count", p->gc_count, 1);
			json_key(o, "gc_ns", p->gc_ns, 1);
			json_key(o, "sched_ns", p->sched_ns, 1);
			bp_out_char(o, '}');
			continue;
		}
		bp_out_u64_w(o, p->events, 10);
		bp_out_u64_w(o, p->sent, 8);
		bp_out_u64_w(o, p->received, 8);
		bp_out_u64_w(o, p->gc_count, 7);
		dur_cell(o, p->gc_ns);
		bp_out_char(o, ' ');
		dur_cell(o, p->sched_ns);
		bp_out_mem(o, "  ", 2);
		bp_out_text(o, text, strlen(text));
		if (bp_proc_last_name(p)) {
			bp_out_char(o, ' ');
			bp_out_text(o, bp_proc_last_name(p),
				    strlen(bp_proc_last_name(p)));
		}
		bp_out_char(o, '\n');
	}
	if (json)
		bp_out_char(o, ']');
	else if (n > top)
		bp_out_str(o, "  ...\n");
	free(v);
}

static void report_flows(struct stats *st, struct bp_out *o, int json,
			 uint64_t top)
{
	if (st->nflows)
		qsort(st->flows, st->nflows, sizeof *st->flows, cmp_flows);
	if (json)
		bp_out_str(o, ",\"flows\":[");
	else if (st->nflows)
		bp_out_str(o, "\nMessage flows\n     count  sender -> "
			      "receiver\n");
	for (uint32_t k = 0; k < st->nflows && k < top; k++) {
		const struct flow *f = &st->flows[k];
		if (json) {
			bp_out_str(o, k ? ",{\"from\":" : "{\"from\":");
			flow_end(st, o, f->from, BP_MAP_NONE, 1);
			bp_out_str(o, ",\"to\":");
			flow_end(st, o, f->to, f->to_text, 1);
			json_key(o, "count", f->count, 1);
			bp_out_char(o, '}');
			continue;
		}
		bp_out_u64_w(o, f->count, 10);
		bp_out_mem(o, "  ", 2);
		flow_end(st, o, f->from, BP_MAP_NONE, 0);
		bp_out_str(o, " -> ");
		flow_end(st, o, f->to, f->to_text, 0);
		bp_out_char(o, '\n');
	}
	if (json)
		bp_out_char(o, ']');
	else if (st->nflows > top)
		bp_out_str(o, "  ...\n");
}

static void report_losses(struct stats *st, struct bp_out *o, int json)
{
	struct bp_loss_report l;

	bp_reader_loss_report(&st->r, &l);
	if (st->annotations && json) {
		json_key(o, "annotations", st->annotations, 1);
	} else if (st->annotations) {
		bp_out_str(o, "\nAnnotations: ");
		bp_out_u64(o, st->annotations);
		bp_out_char(o, '\n');
	}
	if (json) {
		bp_out_str(o, ",\"lost\":{");
		json_key(o, "total", l.total, 0);
		json_key(o, "events_discarded", l.discarded, 1);
		json_key(o, "missing_from_files", l.missing, 1);
		json_key(o, "in_no_stream", l.no_stream, 1);
		json_key(o, "other_causes", l.other, 1);
		json_key(o, "tcp_stream_only", l.stream_only, 1);
		bp_out_str(o, ",\"by_cause\":{");
		for (int c = 0; c < BP_DROP_COUNT; c++)
			json_key(o, bp_drop_cause_names[c], l.by_cause[c], c);
		for (int c = 0; c < BP_SL_COUNT; c++)
			if (c != BP_SL_STREAM)
				json_key(o, bp_session_loss_names[c],
					 l.more[c], 1);
		bp_out_str(o, "}}");
		json_key(o, "unmatched_returns", st->m.unmatched, 1);
		json_key(o, "stack_resets", st->m.resets, 1);
		json_key(o, "tampered", st->tampered, 1);
		json_key(o, "monitor", st->monitor, 1);
		json_key(o, "samples", st->samples, 1);
		bp_out_str(o, ",\"damaged\":");
		bp_out_str(o, st->r.diag.problems ? "true" : "false");
		return;
	}
	bp_out_str(o, "\nLost events: ");
	bp_out_u64(o, l.total);
	for (int c = 0; c < BP_DROP_COUNT; c++) {
		if (!l.by_cause[c])
			continue;
		bp_out_str(o, "  ");
		bp_out_str(o, bp_drop_cause_names[c]);
		bp_out_char(o, '=');
		bp_out_u64(o, l.by_cause[c]);
	}
	for (int c = 0; c < BP_SL_COUNT; c++) {
		if (!l.more[c])
			continue;
		bp_out_str(o, "  ");
		bp_out_str(o, bp_session_loss_names[c]);
		bp_out_char(o, '=');
		bp_out_u64(o, l.more[c]);
	}
	if (l.other) {
		bp_out_str(o, "  other_causes=");
		bp_out_u64(o, l.other);
	}
	if (l.unattributed) {
		bp_out_str(o, "  unattributed=");
		bp_out_u64(o, l.unattributed);
	}
	if (l.missing) {
		bp_out_str(o, "  missing_from_files=");
		bp_out_u64(o, l.missing);
	}
	if (l.no_stream) {
		bp_out_str(o, "  (in_no_stream_file=");
		bp_out_u64(o, l.no_stream);
		bp_out_char(o, ')');
	}
	if (l.stream_only) {
		bp_out_str(o, "  (tcp_stream_only=");
		bp_out_u64(o, l.stream_only);
		bp_out_char(o, ')');
	}
	bp_out_char(o, '\n');
	if (st->m.resets) {
		bp_out_str(o, "Call stacks reset after lost events: ");
		bp_out_u64(o, st->m.resets);
		bp_out_char(o, '\n');
	}
	if (st->m.unmatched) {
		bp_out_str(o, "Returns without a traced call: ");
		bp_out_u64(o, st->m.unmatched);
		bp_out_char(o, '\n');
	}
	if (st->tampered) {
		/* Events are missing from then on: say so, and where. */
		bp_out_str(o, "Changed by another tool (patterns or flags "
			      "removed or replaced): ");
		bp_out_u64(o, st->tampered);
		bp_out_str(o, " (beamprobe print shows them as \"tampered\")\n");
	}
	if (st->monitor) {
		bp_out_str(o, "System monitor reports (long_gc, long_schedule, "
			      "large_heap, busy ports): ");
		bp_out_u64(o, st->monitor);
		bp_out_str(o, " (beamprobe print shows them as \"monitor\")\n");
	}
	if (st->samples) {
		bp_out_str(o, "Counter samples: ");
		bp_out_u64(o, st->samples);
		bp_out_char(o, '\n');
	}
}

static void report(struct stats *st, struct bp_out *o, int json,
		   uint64_t top)
{
	const char *node = bp_meta_env(&st->r.meta, "node");

	if (json) {
		bp_out_str(o, "{\"trace\":");
		bp_out_json_str(o, st->r.dir, strlen(st->r.dir));
		bp_out_str(o, ",\"node\":");
		if (node)
			bp_out_json_str(o, node, strlen(node));
		else
			bp_out_str(o, "null");
		json_key(o, "events", st->events, 1);
		json_key(o, "duration_ns", st->last - st->first, 1);
	} else {
		bp_out_str(o, "Trace ");
		bp_out_text(o, st->r.dir, strlen(st->r.dir));
		if (node) {
			bp_out_str(o, " (node ");
			bp_out_text(o, node, strlen(node));
			bp_out_char(o, ')');
		}
		bp_out_str(o, ": ");
		bp_out_u64(o, st->events);
		bp_out_str(o, " events over ");
		bp_out_dur(o, st->last - st->first);
		bp_out_str(o, "\n\n");
	}
	report_functions(st, o, json, top);
	report_processes(st, o, json, top);
	report_flows(st, o, json, top);
	report_losses(st, o, json);
	if (json)
		bp_out_str(o, "}\n");
}

int bp_cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{"sort", required_argument, 0, 's'},
		{"top", required_argument, 0, 'n'},
		{"json", no_argument, 0, 'j'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static const char *const sorts[] = {"calls", "total", "own",
					    "mean",  "max",   "p99"};
	static struct stats st;
	long long top = 20;
	int c, json = 0, err, rc;

	memset(&st, 0, sizeof st);
	st.sort = S_TOTAL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': {
			size_t k = 0;
			while (k < 6 && strcmp(sorts[k], optarg))
				k++;
			if (k == 6)
				return bp_cli_usage("stats", "bad --sort '%s' "
						    "(calls, total, own, mean, "
						    "max or p99)", optarg);
			st.sort = (enum sort_key)k;
			break;
		}
		case 'n':
			if ((top = bp_cli_count(optarg)) < 0)
				return bp_cli_usage("stats", "bad --top '%s'",
						    optarg);
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			return bp_cli_help("stats");
		default:
			return bp_cli_usage("stats", "bad option");
		}
	}
	if (optind != argc - 1)
		return bp_cli_usage("stats", "expected one trace directory");
	if (bp_cli_open(&st.r, argv[optind], 0) != 0)
		return BP_EXIT_DAMAGED;
	if ((st.untimed = bp_meta_no_returns(&st.r.meta)))
		st.sort = S_CALLS; /* no time to sort by */
	bp_model_init(&st.m, on_frame_end, &st);
	bp_model_read_env(&st.m, &st.r.meta);
	bp_strtab_init(&st.texts);
	consume(&st);
	struct bp_out o;
	if ((err = bp_out_open(&o, NULL)) == 0) {
		sort_ctx = &st;
		report(&st, &o, json, top ? (uint64_t)top : UINT64_MAX);
		err = bp_out_close(&o);
	}
	if (st.oom || st.m.oom)
		bp_cli_error("out of memory: statistics are incomplete");
	rc = bp_cli_finish(&st.r, err, "standard output",
			   st.oom || st.m.oom ? BP_EXIT_DAMAGED : BP_EXIT_OK);
	for (uint32_t i = 0; i < st.nfs; i++)
		free(st.fs[i].hist);
	free(st.fs);
	free(st.flows);
	bp_map_free(&st.flow_idx);
	bp_strtab_free(&st.texts);
	bp_model_free(&st.m);
	bp_reader_close(&st.r);
	return rc;
}
