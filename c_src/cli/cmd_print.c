/* cmd_print.c -- `beamprobe print DIR`: replays the events in time order,
 * one line each in Erlang syntax, indented by the process's call depth:
 *
 *   12:00:01.123456 <0.123.0> my_server call lists:seq(1, 10)
 *   12:00:01.123470 <0.123.0> my_server returned from lists:seq/2 -> [1,2]
 *
 * A first pass (bp_names_prepare) learns the names processes had when
 * the trace began (the tracer may only know them at the end); then names
 * follow register/unregister/exit events in time, so a line shows the
 * name its process held at that moment and --proc selects on it.
 * --follow tails a live trace.  --nodes DIR: the node traces of a
 * cluster (DIR/<node>, as `beamprobe attach --cluster' streams them),
 * each followed by a printer of its own, every line with its node's name
 * after the time, printed in the order they are read (the merged
 * timeline with clock offsets: `beamprobe cluster --print DIR').
 */
#define _GNU_SOURCE /* memmem, memrchr */
#include "bp_cli.h"
#include "bp_cluster.h"
#include "bp_filter.h"
#include "bp_model.h"
#include "bp_names.h"
#include "bp_out.h"

#include <dirent.h>
#include <getopt.h>

#include "../bp_elixir.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FOLLOW_POLL_NS 200000000L

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* A process's part of a line, " <0.123.0> name ", built once. */
struct label {
	char *s;              /* owned; NULL until built */
	uint32_t len;
	uint32_t gen;         /* bp_proc.gen it was built for */
};

struct printer {
	struct bp_reader r;
	struct bp_model m;
	struct bp_filter f;
	struct bp_out out;
	struct bp_out line;   /* --grep: the line is built here first */
	struct bp_clock_fmt clk;
	struct label *labels; /* owned; by bp_proc.index */
	uint32_t nlabels;
	/* --nodes: the node's name on every line, which goes whole into
	 * the printers' shared output. */
	const char *node;
	struct bp_out *shared;
	/* The trace says no call can have a return event (env returns =
	 * false): no call is known to end, so no line is indented. */
	int flat;
	/* --follow: the directory removed (or replaced) while followed. */
	int gone;
};

/* String field i of e, escaped only if the decoder saw a control
 * character in it. */
static inline void txt(struct bp_out *o, const struct bp_event *e, int i)
{
	if (e->ctl & (1u << i))
		bp_out_text(o, e->str[i], e->len[i]);
	else
		bp_out_mem(o, e->str[i], e->len[i]);
}

/* --syntax elixir: term texts are re-rendered in Elixir syntax at
 * display time (c_src/bp_elixir.h); 0: as captured (Erlang syntax). */
static int elixir;
static char *ex_buf; /* scratch for one converted field; owned */
static size_t ex_cap;

/* The text of string field i in the chosen syntax: *s, *n point to the
 * captured text or to ex_buf. */
static void field(const struct bp_event *e, int i, enum bp_elixir_kind k,
		  const char **s, uint32_t *n)
{
	size_t need = BP_ELIXIR_CAP((size_t)e->len[i]);

	*s = e->str[i];
	*n = e->len[i];
	if (!elixir || !*n)
		return;
	if (need > ex_cap) {
		char *b = realloc(ex_buf, need);
		if (!b)
			return; /* no memory: Erlang syntax */
		ex_buf = b;
		ex_cap = need;
	}
	*n = (uint32_t)bp_elixir_text(*s, *n, k, ex_buf, ex_cap);
	*s = ex_buf;
}

/* String field i, a term text (of kind k), in the chosen syntax. */
static void term_txt(struct bp_out *o, const struct bp_event *e, int i,
		     enum bp_elixir_kind k)
{
	const char *s;
	uint32_t n;

	field(e, i, k, &s, &n);
	if (e->ctl & (1u << i))
		bp_out_text(o, s, n);
	else
		bp_out_mem(o, s, n);
}

#define TERM(o, e, i) term_txt(o, e, i, BP_ELIXIR_TERM)
#define MFA(o, e, i) term_txt(o, e, i, BP_ELIXIR_MFA)

/* "m:f/2" + "(1, 2)" -> "m:f(1, 2)"; without args, "m:f/2". */
static void call_text(struct bp_out *o, const struct bp_event *e)
{
	const char *mfa;
	uint32_t n;
	char *own = NULL;

	field(e, BP_FLD(CALL, mfa), BP_ELIXIR_MFA, &mfa, &n);
	if (mfa == ex_buf && (own = malloc(n + 1))) { /* args reuse ex_buf */
		memcpy(own, mfa, n);
		mfa = own;
	}

	if (e->len[BP_FLD(CALL, args)]) {
		const char *slash = memrchr(mfa, '/', n);
		if (slash)
			n = (uint32_t)(slash - mfa);
		if (e->ctl & (1u << BP_FLD(CALL, mfa)))
			bp_out_text(o, mfa, n);
		else
			bp_out_mem(o, mfa, n);
		term_txt(o, e, BP_FLD(CALL, args), BP_ELIXIR_ARGS);
	} else if (e->ctl & (1u << BP_FLD(CALL, mfa))) {
		bp_out_text(o, mfa, n);
	} else {
		bp_out_mem(o, mfa, n);
	}
	free(own);
	/* The match specification's result: "true" (no action) is not
	 * shown (nor by the shell printer, src/beamprobe_printer.erl). */
	uint32_t il = e->len[BP_FLD(CALL, info)];
	if (il && !(il == 4 && !memcmp(e->str[BP_FLD(CALL, info)], "true", 4))) {
		bp_out_mem(o, " % ", 3);
		TERM(o, e, BP_FLD(CALL, info));
	}
}

static void gc_text(struct bp_out *o, const struct bp_event *e)
{
	static const char *const names[] = {
		" heap_size=", " heap_block_size=", " old_heap_size=",
		" old_heap_block_size=", " mbuf_size=", " stack_size="};
	bp_out_str(o, bp_event_name(e->id));
	for (int i = 0; i < 6; i++) {
		bp_out_str(o, names[i]);
		bp_out_u64(o, e->num[BP_FLD(GC_MINOR_START, heap_size) + i]);
	}
}

/* The part of the line after the process and indentation. */
static void describe(struct bp_out *o, const struct bp_event *e,
		     const struct bp_reader *r)
{
	switch (e->id) {
	case BP_EV_PROCESS:
		bp_out_str(o, "process ");
		txt(o, e, BP_FLD(PROCESS, pid));
		if (e->len[BP_FLD(PROCESS, name)]) {
			bp_out_str(o, " name ");
			txt(o, e, BP_FLD(PROCESS, name));
		}
		if (e->len[BP_FLD(PROCESS, initial_call)]) {
			bp_out_str(o, " initial_call ");
			txt(o, e, BP_FLD(PROCESS, initial_call));
		}
		break;
	case BP_EV_CALL:
		bp_out_str(o, "call ");
		call_text(o, e);
		break;
	case BP_EV_RETURN_FROM:
		bp_out_str(o, "returned from ");
		MFA(o, e, BP_FLD(RETURN_FROM, mfa));
		bp_out_mem(o, " -> ", 4);
		TERM(o, e, BP_FLD(RETURN_FROM, result));
		break;
	case BP_EV_EXCEPTION_FROM:
		bp_out_str(o, "exception from ");
		MFA(o, e, BP_FLD(EXCEPTION_FROM, mfa));
		bp_out_mem(o, ": ", 2);
		if (elixir) /* as Elixir's Exception.format_banner/2 */
			bp_out_str(o, "** (");
		txt(o, e, BP_FLD(EXCEPTION_FROM, class));
		if (elixir)
			bp_out_str(o, ") ");
		else
			bp_out_char(o, ':');
		TERM(o, e, BP_FLD(EXCEPTION_FROM, reason));
		break;
	case BP_EV_RETURN_TO:
		bp_out_str(o, "returned to ");
		MFA(o, e, BP_FLD(RETURN_TO, mfa));
		break;
	case BP_EV_SEND:
	case BP_EV_SEND_DEAD:
		bp_out_str(o, "sent ");
		TERM(o, e, BP_FLD(SEND, message));
		bp_out_str(o, " to ");
		TERM(o, e, BP_FLD(SEND, to_text));
		if (e->id == BP_EV_SEND_DEAD)
			bp_out_str(o, " (no such process)");
		break;
	case BP_EV_RECEIVE:
		bp_out_str(o, "received ");
		TERM(o, e, BP_FLD(RECEIVE, message));
		break;
	case BP_EV_SPAWN:
	case BP_EV_SPAWNED:
		bp_out_str(o, e->id == BP_EV_SPAWN ? "spawned " : "spawned by ");
		TERM(o, e, BP_FLD(SPAWN, other_text));
		bp_out_str(o, " as ");
		MFA(o, e, BP_FLD(SPAWN, mfa));
		break;
	case BP_EV_EXIT:
		bp_out_str(o, "exit ");
		TERM(o, e, BP_FLD(EXIT, reason));
		break;
	case BP_EV_LINK:
	case BP_EV_UNLINK:
	case BP_EV_GETTING_LINKED:
	case BP_EV_GETTING_UNLINKED:
		bp_out_str(o, bp_event_name(e->id));
		bp_out_char(o, ' ');
		TERM(o, e, BP_FLD(LINK, other_text));
		break;
	case BP_EV_REGISTER:
	case BP_EV_UNREGISTER:
		bp_out_str(o, bp_event_name(e->id));
		bp_out_char(o, ' ');
		term_txt(o, e, BP_FLD(REGISTER, name), BP_ELIXIR_NAME);
		break;
	case BP_EV_SCHED_IN:
	case BP_EV_SCHED_OUT:
		bp_out_str(o, e->id == BP_EV_SCHED_IN ? "scheduled in"
						       : "scheduled out");
		if (e->num[BP_FLD(SCHED_IN, exiting)])
			bp_out_str(o, " (exiting)");
		bp_out_char(o, ' ');
		MFA(o, e, BP_FLD(SCHED_IN, mfa));
		break;
	case BP_EV_GC_MINOR_START:
	case BP_EV_GC_MINOR_END:
	case BP_EV_GC_MAJOR_START:
	case BP_EV_GC_MAJOR_END:
		gc_text(o, e);
		break;
	case BP_EV_PORT_OPEN:
		bp_out_str(o, "port_open ");
		txt(o, e, BP_FLD(PORT_OPEN, name));
		bp_out_str(o, " by ");
		TERM(o, e, BP_FLD(PORT_OPEN, other_text));
		break;
	case BP_EV_PORT_CLOSED:
		bp_out_str(o, "port_closed ");
		TERM(o, e, BP_FLD(PORT_CLOSED, reason));
		break;
	case BP_EV_ANNOTATION: /* beamprobe:annotate/1,2 */
		bp_out_str(o, "annotation ");
		if (strcmp(e->str[BP_FLD(ANNOTATION, tag)], "undefined")) {
			TERM(o, e, BP_FLD(ANNOTATION, tag));
			bp_out_str(o, ": ");
		}
		TERM(o, e, BP_FLD(ANNOTATION, value));
		break;
	case BP_EV_DROPS: {
		int any = 0;
		bp_out_str(o, "lost events:");
		for (int c = 0; c < BP_DROP_COUNT; c++) {
			if (!e->num[BP_FLD(DROPS, ring_full) + c])
				continue;
			bp_out_char(o, ' ');
			bp_out_str(o, bp_drop_cause_names[c]);
			bp_out_char(o, '=');
			bp_out_u64(o, e->num[BP_FLD(DROPS, ring_full) + c]);
			any = 1;
		}
		if (!any)
			bp_out_str(o, " none");
		break;
	}
	case BP_EV_TAMPERED:
		/* "tampered pattern m:f/1 removed: <detail>" */
		bp_out_str(o, "tampered ");
		txt(o, e, BP_FLD(TAMPERED, what));
		bp_out_char(o, ' ');
		txt(o, e, BP_FLD(TAMPERED, subject));
		bp_out_char(o, ' ');
		txt(o, e, BP_FLD(TAMPERED, how));
		if (e->len[BP_FLD(TAMPERED, detail)]) {
			bp_out_mem(o, ": ", 2);
			txt(o, e, BP_FLD(TAMPERED, detail));
		}
		break;
	case BP_EV_MONITOR:
		/* "monitor long_gc <0.90.0> 120 ms: [{timeout,120},...]" */
		bp_out_str(o, "monitor ");
		txt(o, e, BP_FLD(MONITOR, what));
		bp_out_char(o, ' ');
		txt(o, e, BP_FLD(MONITOR, process));
		if (e->num[BP_FLD(MONITOR, duration_ms)]) {
			bp_out_char(o, ' ');
			bp_out_u64(o, e->num[BP_FLD(MONITOR, duration_ms)]);
			bp_out_str(o, " ms");
		}
		if (e->len[BP_FLD(MONITOR, port)]) {
			bp_out_str(o, " on ");
			txt(o, e, BP_FLD(MONITOR, port));
		}
		if (e->len[BP_FLD(MONITOR, detail)]) {
			bp_out_mem(o, ": ", 2);
			txt(o, e, BP_FLD(MONITOR, detail));
		}
		break;
	case BP_EV_SAMPLE: {
		/* "sample run_queue 3", "sample message_queue_len <0.90.0> 7",
		 * "sample scheduler_utilization 0.250000" */
		uint64_t v = e->num[BP_FLD(SAMPLE, value)];
		uint64_t sc = e->num[BP_FLD(SAMPLE, scale)];
		bp_out_str(o, "sample ");
		txt(o, e, BP_FLD(SAMPLE, counter));
		if (e->len[BP_FLD(SAMPLE, process)]) {
			bp_out_char(o, ' ');
			txt(o, e, BP_FLD(SAMPLE, process));
		}
		bp_out_char(o, ' ');
		if (sc > 1) {
			char num[64];
			snprintf(num, sizeof num, "%.6f",
				 (double)v / (double)sc);
			bp_out_str(o, num);
		} else {
			bp_out_u64(o, v);
		}
		break;
	}
	default: /* a class added by a later format minor version */
		bp_out_str(o, r->meta.classes[e->cls].name);
		break;
	}
}

/* Writes p's label: " <0.123.0> name " (cached until p changes). */
static void label(struct printer *pr, struct bp_out *o,
		  const struct bp_proc *p)
{
	struct label *l = NULL;

	if (p->index >= pr->nlabels) {
		uint32_t n = pr->nlabels ? pr->nlabels : 256;
		while (n <= p->index)
			n *= 2;
		struct label *v = realloc(pr->labels, n * sizeof *v);
		if (v) {
			memset(v + pr->nlabels, 0,
			       (n - pr->nlabels) * sizeof *v);
			pr->labels = v;
			pr->nlabels = n;
		}
	}
	if (p->index < pr->nlabels)
		l = &pr->labels[p->index];
	if (l && (!l->s || l->gen != p->gen)) {
		const char *t = bp_proc_text(p), *nm = p->name;
		char nbuf[BP_ELIXIR_CAP(256)];
		if (elixir && nm && strlen(nm) < 256) {
			bp_elixir_text(nm, strlen(nm), BP_ELIXIR_NAME, nbuf,
				       sizeof nbuf);
			nm = nbuf;
		}
		size_t tn = strlen(t), nn = nm ? strlen(nm) : 0;
		int hash = elixir && *t == '<'; /* #PID<0.1.0> */
		char *c = malloc(tn + nn + 7);
		if (c) {
			char *d = c;
			*d++ = ' ';
			if (hash) {
				memcpy(d, "#PID", 4);
				d += 4;
			}
			memcpy(d, t, tn);
			d += tn;
			if (nm) {
				*d++ = ' ';
				memcpy(d, nm, nn);
				d += nn;
			}
			*d++ = ' ';
			free(l->s);
			l->s = c;
			l->len = (uint32_t)(d - c);
			l->gen = p->gen;
		}
	}
	if (l && l->s && l->gen == p->gen) {
		bp_out_mem(o, l->s, l->len);
		return;
	}
	bp_out_char(o, ' '); /* out of memory: unbuffered */
	if (elixir && *bp_proc_text(p) == '<')
		bp_out_str(o, "#PID");
	bp_out_str(o, bp_proc_text(p));
	if (p->name) {
		bp_out_char(o, ' ');
		bp_out_str(o, p->name);
	}
	bp_out_char(o, ' ');
}

static void format_line(struct printer *pr, struct bp_out *o,
			const struct bp_event *e, const struct bp_proc *p,
			uint32_t depth)
{
	bp_out_clock(o, &pr->clk, bp_reader_wall(&pr->r, e->ts));
	if (pr->node) {
		bp_out_char(o, ' ');
		bp_out_str(o, pr->node);
	}
	if (p)
		label(pr, o, p);
	else
		bp_out_mem(o, " - ", 3); /* node-wide events (drops) */
	if (depth)
		bp_out_spaces(o, 2 * (size_t)(depth < 256 ? depth : 256));
	describe(o, e, &pr->r);
	bp_out_char(o, '\n');
}

/* Handles one event.  Returns 0 to go on, 1 past --until. */
static int print_event(struct printer *pr, const struct bp_event *e)
{
	struct bp_proc *p = e->pid ? bp_model_proc(&pr->m, e->pid) : NULL;
	uint32_t before = p ? p->depth + p->lost_depth : 0;

	bp_model_apply_to(&pr->m, p, e);
	if (pr->f.anchor_pending && e->id != BP_EV_PROCESS &&
	    e->id != BP_EV_DROPS)
		bp_filter_anchor(&pr->f, &pr->r, e->ts);
	if (e->ts < pr->f.since)
		return 0;
	if (e->ts > pr->f.until)
		return !pr->r.follow;
	if (!bp_filter_match(&pr->f, e, p))
		return 0;
	uint32_t depth = p && !pr->flat ? (e->id == BP_EV_CALL ? before
						 : p->depth + p->lost_depth)
				       : 0;
	if (!pr->f.grep && !pr->shared) {
		format_line(pr, &pr->out, e, p, depth);
		return 0;
	}
	pr->line.len = 0;
	format_line(pr, &pr->line, e, p, depth);
	if (pr->line.len && (!pr->f.grep ||
			     memmem(pr->line.buf, pr->line.len, pr->f.grep,
				    strlen(pr->f.grep))))
		bp_out_mem(pr->shared ? pr->shared : &pr->out, pr->line.buf,
			   pr->line.len);
	return 0;
}

/* A followed trace is complete once its receiver wrote DIR/.complete. */
static int trace_complete(struct printer *pr)
{
	char path[4200];

	snprintf(path, sizeof path, "%s/.complete", pr->r.dir);
	return access(path, F_OK) == 0;
}

/* The followed directory is the one we started on: not removed, not
 * replaced by another of its name (its inode). */
static int same_dir(const char *dir, const struct stat *first)
{
	struct stat st;

	return stat(dir, &st) == 0 && st.st_ino == first->st_ino &&
	       st.st_dev == first->st_dev;
}

/*
 * At the end of a trace whose session recorded its losses at stop (env
 * session_lost): those no stream file tells of (a bytes limit no file
 * fit in, a thread that only lost events, files not creatable), on a
 * line of their own, which the filters treat as a drops event's (no
 * process; not after an --until, which ends before the stop).
 */
static void print_unstreamed(struct printer *pr)
{
	struct bp_loss_report l;
	struct bp_event e;
	struct bp_out *o = &pr->line;

	bp_reader_loss_report(&pr->r, &l);
	if (!l.no_stream || interrupted ||
	    pr->f.until_spec.kind != BP_TIME_NONE)
		return;
	memset(&e, 0, sizeof e);
	e.id = BP_EV_DROPS;
	if (!bp_filter_match(&pr->f, &e, NULL))
		return;
	o->len = 0;
	bp_out_str(o, "lost events in no stream file: ");
	bp_out_u64(o, l.no_stream);
	bp_out_str(o, " (recorded at the session's stop; its losses:");
	for (int c = 0; c < BP_DROP_COUNT; c++) {
		if (!pr->r.session_lost[c])
			continue;
		bp_out_char(o, ' ');
		bp_out_str(o, bp_drop_cause_names[c]);
		bp_out_char(o, '=');
		bp_out_u64(o, pr->r.session_lost[c]);
	}
	for (int c = 0; c < BP_SL_COUNT; c++) {
		if (!pr->r.session_lost_more[c])
			continue;
		bp_out_char(o, ' ');
		bp_out_str(o, bp_session_loss_names[c]);
		bp_out_char(o, '=');
		bp_out_u64(o, pr->r.session_lost_more[c]);
	}
	if (pr->r.session_lost_other) {
		bp_out_str(o, " other_causes=");
		bp_out_u64(o, pr->r.session_lost_other);
	}
	bp_out_str(o, ")\n");
	if (o->len && (!pr->f.grep || memmem(o->buf, o->len, pr->f.grep,
					     strlen(pr->f.grep))))
		bp_out_mem(&pr->out, o->buf, o->len);
}

static void run(struct printer *pr)
{
	const struct bp_event *e;
	int complete = 0;
	struct stat first;

	if (pr->r.follow && stat(pr->r.dir, &first) != 0)
		pr->r.follow = 0;
	for (;;) {
		while (!interrupted && (e = bp_reader_next(&pr->r)))
			if (print_event(pr, e))
				return;
		if (!pr->r.follow) {
			print_unstreamed(pr);
			return;
		}
		if (interrupted || complete)
			return;
		/* Removed while followed: nothing more can come (it waited
		 * forever). */
		if (!same_dir(pr->r.dir, &first)) {
			bp_out_flush(&pr->out);
			fprintf(stderr, "beamprobe: %s: the trace directory was "
				"removed while followed\n", pr->r.dir);
			pr->gone = 1;
			return;
		}
		/* Seen before the last refresh: everything is read after it. */
		complete = trace_complete(pr);
		bp_out_flush(&pr->out);
		struct timespec ts = {0, FOLLOW_POLL_NS};
		nanosleep(&ts, NULL);
		if (!interrupted)
			bp_reader_refresh(&pr->r);
	}
}

/* --follow on a directory whose metadata is not there yet (receive or
 * attach started, the session not yet connected): waits for it, as
 * --nodes waits for each node's, instead of decoding without it (no
 * wall-clock offset, no returns flag: wrong times and indentation, and
 * exit 2).  Stops waiting at DIR/.complete or SIGINT; a DIR that does not
 * exist is not waited for (a mistyped name fails at once). */
static void wait_metadata(const char *dir)
{
	char path[4200];
	struct stat st;
	int said = 0;

	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
	    bp_cluster_is_cluster_dir(dir))
		return;
	while (!interrupted) {
		snprintf(path, sizeof path, "%s/metadata", dir);
		if (access(path, F_OK) == 0)
			return;
		snprintf(path, sizeof path, "%s/.complete", dir);
		if (access(path, F_OK) == 0)
			return;
		if (!said++)
			fprintf(stderr, "beamprobe: %s: waiting for the trace "
				"to start (its metadata file), ^C to stop\n",
				dir);
		struct timespec ts = {0, FOLLOW_POLL_NS};
		nanosleep(&ts, NULL);
	}
}

/* ---- --nodes DIR ------------------------------------------------------ */

#define NODES_MAX 64

struct node_printers {
	struct printer *p[NODES_MAX];
	char *name[NODES_MAX];
	int n;
};

/* A printer for each node trace that appeared (its metadata is there). */
static void nodes_scan(struct node_printers *np, const char *dir,
		       struct bp_out *out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4200];

	if (!d)
		return;
	while (np->n < NODES_MAX && (e = readdir(d))) {
		int known = 0;
		if (e->d_name[0] == '.')
			continue;
		for (int i = 0; i < np->n; i++)
			known |= !strcmp(np->name[i], e->d_name);
		snprintf(path, sizeof path, "%s/%s/metadata", dir, e->d_name);
		if (known || access(path, F_OK) != 0)
			continue;
		struct printer *pr = calloc(1, sizeof *pr);
		char *name = strdup(e->d_name);
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (!pr || !name) {
			free(pr);
			free(name);
			break;
		}
		bp_filter_init(&pr->f);
		bp_model_init(&pr->m, NULL, NULL);
		bp_names_prepare(&pr->m, path);
		if (bp_reader_open(&pr->r, path, BP_READER_FOLLOW) != 0) {
			bp_model_free(&pr->m);
			bp_filter_free(&pr->f);
			free(pr);
			free(name);
			continue; /* tried again at the next round */
		}
		bp_filter_resolve(&pr->f, &pr->r);
		pr->flat = bp_meta_no_returns(&pr->r.meta);
		bp_model_read_env(&pr->m, &pr->r.meta);
		bp_clock_fmt_init(&pr->clk);
		bp_out_init_mem(&pr->line);
		pr->node = name;
		pr->shared = out;
		np->p[np->n] = pr;
		np->name[np->n++] = name;
	}
	closedir(d);
}

/* Follows every node trace under dir until dir/.complete (written once
 * every stream is in) was seen before a last read. */
static int print_nodes(const char *dir)
{
	static struct node_printers np;
	struct bp_out out;
	char mark[4200];
	int complete = 0, rc = BP_EXIT_OK, err;

	memset(&np, 0, sizeof np);
	snprintf(mark, sizeof mark, "%s/.complete", dir);
	if ((err = bp_out_open(&out, NULL)) != 0) {
		bp_cli_error("standard output: %s", strerror(err));
		return BP_EXIT_DAMAGED;
	}
	for (;;) {
		nodes_scan(&np, dir, &out);
		for (int i = 0; i < np.n; i++) {
			const struct bp_event *e;
			while (!interrupted && (e = bp_reader_next(&np.p[i]->r)))
				print_event(np.p[i], e);
		}
		if (interrupted || complete)
			break;
		complete = access(mark, F_OK) == 0;
		bp_out_flush(&out);
		struct timespec ts = {0, FOLLOW_POLL_NS};
		nanosleep(&ts, NULL);
		for (int i = 0; i < np.n && !interrupted; i++)
			bp_reader_refresh(&np.p[i]->r);
	}
	err = bp_out_close(&out);
	for (int i = 0; i < np.n; i++) {
		struct printer *pr = np.p[i];
		int r = bp_cli_finish(&pr->r, err, "standard output",
				      BP_EXIT_OK);
		if (r != BP_EXIT_OK)
			rc = r;
		err = 0;
		bp_out_close(&pr->line);
		bp_reader_close(&pr->r);
		bp_model_free(&pr->m);
		bp_filter_free(&pr->f);
		for (uint32_t j = 0; j < pr->nlabels; j++)
			free(pr->labels[j].s);
		free(pr->labels);
		free(pr);
		free(np.name[i]);
	}
	return rc;
}

int bp_cmd_print(int argc, char **argv)
{
	enum { O_PID = 256, O_PROC, O_MFA, O_EVENT, O_SINCE, O_UNTIL, O_GREP,
	       O_SYNTAX, O_NODES };
	static const struct option opts[] = {
		{"pid", required_argument, 0, O_PID},
		{"proc", required_argument, 0, O_PROC},
		{"mfa", required_argument, 0, O_MFA},
		{"event", required_argument, 0, O_EVENT},
		{"since", required_argument, 0, O_SINCE},
		{"until", required_argument, 0, O_UNTIL},
		{"grep", required_argument, 0, O_GREP},
		{"syntax", required_argument, 0, O_SYNTAX},
		{"follow", no_argument, 0, 'f'},
		{"nodes", no_argument, 0, O_NODES},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static struct printer pr;
	int c, follow = 0, nodes = 0, filters = 0, rc = BP_EXIT_USAGE, err;
	char bad[64];

	memset(&pr, 0, sizeof pr);
	bp_filter_init(&pr.f);
	optind = 1;
	while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
		switch (c) {
		case O_PID:
		case O_PROC:
		case O_MFA:
			if (bp_strlist_add(c == O_PID    ? &pr.f.pids
					   : c == O_PROC ? &pr.f.procs
							 : &pr.f.mfas,
					   optarg)) {
				bp_cli_usage("print", "bad list '%s'", optarg);
				goto out;
			}
			if (c == O_PID && bp_filter_check_pids(&pr.f.pids, bad,
							       sizeof bad)) {
				bp_cli_usage("print", "--pid: '%s' is not a pid "
					     "or port ('<0.123.0>', "
					     "'#Port<0.5>')", bad);
				goto out;
			}
			break;
		case O_EVENT:
			if (bp_filter_add_kinds(&pr.f, optarg, bad, sizeof bad)) {
				bp_cli_usage("print", "unknown event kind '%s'",
					     bad);
				goto out;
			}
			break;
		case O_SINCE:
		case O_UNTIL:
			if (bp_time_spec_parse(optarg, c == O_SINCE
							       ? &pr.f.since_spec
							       : &pr.f.until_spec)) {
				bp_cli_usage("print", "bad time '%s' (expected "
					     "HH:MM:SS[.frac] or +SECONDS)",
					     optarg);
				goto out;
			}
			break;
		case O_GREP:
			pr.f.grep = optarg;
			break;
		case O_SYNTAX:
			if (!strcmp(optarg, "elixir")) {
				elixir = 1;
			} else if (!strcmp(optarg, "erlang")) {
				elixir = 0;
			} else {
				bp_cli_usage("print", "unknown syntax '%s' "
					     "(expected erlang or elixir)",
					     optarg);
				goto out;
			}
			break;
		case 'f':
			follow = 1;
			break;
		case O_NODES:
			nodes = 1;
			break;
		case 'h':
			rc = bp_cli_help("print");
			goto out;
		default:
			bp_cli_usage("print", "bad option");
			goto out;
		}
	}
	if (optind != argc - 1) {
		bp_cli_usage("print", "expected one trace directory");
		goto out;
	}
	filters = pr.f.pids.n || pr.f.procs.n || pr.f.mfas.n || pr.f.grep ||
		  pr.f.kinds || pr.f.unknown_kind ||
		  pr.f.since_spec.kind != BP_TIME_NONE ||
		  pr.f.until_spec.kind != BP_TIME_NONE;
	if (nodes && (!follow || filters)) {
		bp_cli_usage("print", "--nodes goes with --follow, and without "
			     "filters");
		goto out;
	}
	if (follow) { /* (--nodes goes with it) */
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_sigint;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	if (nodes) {
		rc = print_nodes(argv[optind]);
		goto out;
	}
	if (follow) {
		wait_metadata(argv[optind]);
		if (interrupted) {
			rc = BP_EXIT_OK;
			goto out;
		}
	}
	bp_model_init(&pr.m, NULL, NULL);
	bp_names_prepare(&pr.m, argv[optind]);
	if (bp_cli_open(&pr.r, argv[optind],
			follow ? BP_READER_FOLLOW : 0) != 0) {
		rc = BP_EXIT_DAMAGED;
		bp_model_free(&pr.m);
		goto out;
	}
	bp_filter_resolve(&pr.f, &pr.r);
	pr.flat = bp_meta_no_returns(&pr.r.meta);
	bp_model_read_env(&pr.m, &pr.r.meta);
	bp_clock_fmt_init(&pr.clk);
	bp_out_init_mem(&pr.line);
	if ((err = bp_out_open(&pr.out, NULL)) == 0) {
		run(&pr);
		err = bp_out_close(&pr.out);
	}
	bp_out_close(&pr.line);
	rc = bp_cli_finish(&pr.r, err, "standard output", BP_EXIT_OK);
	if (pr.gone && rc == BP_EXIT_OK)
		rc = BP_EXIT_DAMAGED;
	bp_reader_close(&pr.r);
	bp_model_free(&pr.m);
	for (uint32_t i = 0; i < pr.nlabels; i++)
		free(pr.labels[i].s);
	free(pr.labels);
out:
	bp_filter_free(&pr.f);
	free(ex_buf);
	ex_buf = NULL;
	ex_cap = 0;
	elixir = 0;
	return rc;
}
