/* cmd_request.c -- `beamprobe request DIR': the requests a follow session
 * (src/beamprobe_follow.erl) traced, each as one tree in time across its
 * processes (and the nodes of a cluster directory).
 *
 * A request starts at a call of the root function (env follow_root; or
 * --root M:F/A) and belongs to the process that made it until that call
 * returns.  Another process works for it from its receive of a message
 * a process of the request sent (a send matched to its receive: same
 * receiver and text, bp_cluster.h) -- the messages that carried the
 * seq_trace label that spread the tracing -- until it sends back to the
 * process that message came from (follow_other()), a new process's
 * spawn_reply to its parent aside (OTP 25 spawns by a labelled
 * spawn_request message: the child works for the request).  Receives of other
 * messages are left out, and counted (printed after the requests), as
 * are the events of processes working for no request then.  Limits: a process that takes the messages of
 * two followed requests out of their arrival order, or never answers
 * the process a request came from, may have sends shown in the wrong
 * request.  The depth (indentation) is the number of
 * messages between the root and the process.
 *
 * A request the follow session cut (its per-request budget, bp_follow.h)
 * has an annotation event `follow_cut' about its first process: the
 * request is marked "cut: events budget (N)" or "cut: ms budget (T)";
 * the counts of events cut (env follow_dropped_*) are printed at the end.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bp_cli.h"
#include "bp_cluster.h"
#include "bp_out.h"

/* A request a process received a message of and has not answered yet. */
#define PENDING 8
struct pending {
	uint32_t req, depth;
	unsigned rnode;  /* who sent it: a send back to it ends the entry */
	uint64_t rpid;
};

struct proc {
	uint32_t req;    /* the root's request, in its root call */
	uint32_t last;   /* the last request rooted here */
	uint32_t depth;
	int root;        /* the root process, in its root call */
	uint32_t npend;  /* requests it works for, oldest first */
	struct pending pend[PENDING];
};

struct request {
	unsigned node;
	uint64_t pid;
	int64_t start, end; /* control clock */
	uint64_t events;
	uint32_t procs;
	char cut[40];    /* "events budget (20)", or "" */
	struct bp_out lines;
};

struct state {
	struct proc *procs;
	uint32_t nprocs, capprocs;
	struct bp_map proc_of;       /* hash(node, pid) -> index */
	struct bp_map in_req;        /* hash(request, node, pid): counted */
	struct request *reqs;
	uint32_t nreqs, capreqs;
	uint32_t *pair_req, *pair_depth; /* per matched pair */
	uint8_t *pair_sent;  /* per matched pair: its send walked */
	uint64_t out_recv;   /* receives left out: of no request's message */
	uint64_t out_other;  /* other events left out: of a process that
				works for no request then */
};

static struct proc *proc(struct state *s, unsigned node, uint64_t pid)
{
	uint64_t k = bp_hash_u64(pid ^ ((uint64_t)node << 58));
	uint32_t i = bp_map_get(&s->proc_of, k);

	if (i != BP_MAP_NONE)
		return &s->procs[i];
	if (s->nprocs == s->capprocs) {
		uint32_t nc = s->capprocs ? s->capprocs * 2 : 256;
		struct proc *p = realloc(s->procs, nc * sizeof *p);

		if (!p)
			return NULL;
		s->procs = p;
		s->capprocs = nc;
	}
	if (bp_map_put(&s->proc_of, k, s->nprocs))
		return NULL;
	memset(&s->procs[s->nprocs], 0, sizeof *s->procs);
	return &s->procs[s->nprocs++];
}

static struct request *new_request(struct state *s)
{
	if (s->nreqs == s->capreqs) {
		uint32_t nc = s->capreqs ? s->capreqs * 2 : 16;
		struct request *r = realloc(s->reqs, nc * sizeof *r);

		if (!r)
			return NULL;
		s->reqs = r;
		s->capreqs = nc;
	}
	memset(&s->reqs[s->nreqs], 0, sizeof *s->reqs);
	bp_out_init_mem(&s->reqs[s->nreqs].lines);
	return &s->reqs[s->nreqs++];
}

static void emit(const struct bp_cluster *c, struct request *r,
		 struct bp_clock_fmt *cf, unsigned n, const struct bp_event *e,
		 uint32_t depth)
{
	struct bp_out *o = &r->lines;
	int64_t t = bp_cluster_when(c, n, e->ts);

	bp_out_clock(o, cf, bp_cluster_add(bp_cluster_wall_base(c), t));
	bp_out_char(o, ' ');
	bp_out_str(o, c->nodes[n].name);
	bp_out_char(o, ' ');
	bp_out_spaces(o, 2 * (depth > 32 ? 32 : depth));
	bp_cluster_out_pid(o, e->pid);
	bp_out_char(o, ' ');
	bp_cluster_event_text(o, e);
	bp_out_char(o, '\n');
	r->events++;
	if (t > r->end)
		r->end = t;
}

/* Counts process (node, pid) in request q once. */
static void count_proc(struct state *s, uint32_t q, unsigned node,
		       uint64_t pid)
{
	uint64_t k = bp_hash_u64(bp_hash_u64(pid ^ ((uint64_t)node << 58)) ^ q);

	if (bp_map_get(&s->in_req, k) != BP_MAP_NONE)
		return;
	if (bp_map_put(&s->in_req, k, 1) == 0)
		s->reqs[q - 1].procs++;
}

static int is_root(const char *root, const struct bp_event *e)
{
	return root && (e->id == BP_EV_CALL || e->id == BP_EV_RETURN_FROM ||
			e->id == BP_EV_EXCEPTION_FROM) &&
	       strcmp(e->str[BP_FLD_MFA], root) == 0;
}

/*
 * A process other than a root in its root call.  A receive of a
 * request's message adds the request to the process's pending ones (it
 * is written under its request); the process's sends and other events
 * belong to the oldest pending request, which ends when the process
 * sends to the process it got that request's first message from (the
 * reply).  Receive events come when a message enters the queue (OTP 25),
 * so a process may have several pending; served in order, each send
 * lands in its own request.  Receives of other messages are left out.
 */
static int follow_other(const struct bp_cluster *c, struct state *s,
			struct bp_clock_fmt *cf, unsigned n,
			const struct bp_event *e, struct proc *p, uint32_t pair)
{
	if (e->id == BP_EV_RECEIVE) {
		uint32_t q = pair ? s->pair_req[pair - 1] : 0;
		uint32_t depth;
		int known = 0;

		if (!q) {
			s->out_recv++;
			return 0;
		}
		depth = s->pair_depth[pair - 1] + 1;
		for (uint32_t i = 0; i < p->npend; i++)
			if (p->pend[i].req == q) {
				p->pend[i].depth = depth; /* messages so far */
				known = 1;
			}
		if (!known) {
			const struct bp_cmsg *snd =
				&c->sends[c->pairs[pair - 1].send];

			if (p->npend == PENDING) {
				memmove(p->pend, p->pend + 1,
					(PENDING - 1) * sizeof *p->pend);
				p->npend--;
			}
			p->pend[p->npend].req = q;
			p->pend[p->npend].depth = depth;
			p->pend[p->npend].rnode = snd->node;
			p->pend[p->npend].rpid = snd->pid;
			p->npend++;
			count_proc(s, q, n, e->pid);
		}
		emit(c, &s->reqs[q - 1], cf, n, e, depth);
		return 0;
	}
	if (!p->npend) {
		if (e->id != BP_EV_DROPS)
			s->out_other++;
		return 0;
	}
	emit(c, &s->reqs[p->pend[0].req - 1], cf, n, e, p->pend[0].depth);
	if (e->id == BP_EV_SEND || e->id == BP_EV_SEND_DEAD) {
		const struct pending *h = &p->pend[0];
		int reply;

		if (pair) {
			const struct bp_cmsg *r = &c->recvs[c->pairs[pair - 1].recv];

			s->pair_req[pair - 1] = h->req;
			s->pair_depth[pair - 1] = h->depth;
			reply = r->node == h->rnode && r->pid == h->rpid;
		} else {
			reply = h->rnode == n &&
				e->num[BP_FLD(SEND, to)] == h->rpid;
		}
		/* A new process's spawn_reply to its parent (OTP 25 spawns
		 * by a spawn_request message, labelled: the child works for
		 * the request from it) is not the child's answer: what it
		 * does next is still the request's work. */
		if (reply && strncmp(e->str[BP_FLD(SEND, message)],
				     "{spawn_reply,", 13) == 0)
			reply = 0;
		if (reply) {
			memmove(p->pend, p->pend + 1,
				(p->npend - 1) * sizeof *p->pend);
			p->npend--;
		}
	}
	return 0;
}

/* "{events,20}" -> "events budget (20)". */
static void mark_cut(struct request *r, const char *v)
{
	const char *comma = strchr(v, ',');
	int kind = comma && v[0] == '{' ? (int)(comma - v - 1) : 0;
	int num = comma ? (int)strcspn(comma + 1, "}") : 0;

	if (kind <= 0 || kind > 8 || num <= 0 || num > 20)
		snprintf(r->cut, sizeof r->cut, "budget");
	else
		snprintf(r->cut, sizeof r->cut, "%.*s budget (%.*s)", kind,
			 v + 1, num, comma + 1);
}

/* A receive met before its send: the VM stamps a send to another node
 * after the message left (bp_cluster.h), so the receive can come first in
 * the merged timeline.  The sender has sent it by then, for the request
 * it serves now: taken from its state, as its send would give it.
 * 0, or -1 out of memory. */
static int early_receive(const struct bp_cluster *c, struct state *s,
			 uint32_t pair)
{
	const struct bp_cmsg *snd = &c->sends[c->pairs[pair - 1].send];
	struct proc *q = proc(s, snd->node, snd->pid);

	if (!q)
		return -1;
	if (q->root && q->req) {
		s->pair_req[pair - 1] = q->req;
		s->pair_depth[pair - 1] = q->depth;
	} else if (!q->root && q->npend) {
		s->pair_req[pair - 1] = q->pend[0].req;
		s->pair_depth[pair - 1] = q->pend[0].depth;
	}
	return 0;
}

static int walk(const struct bp_cluster *c, struct state *s,
		const char *root_opt)
{
	struct bp_cluster_cursor cur[BP_CLUSTER_MAX_NODES];
	const char *roots[BP_CLUSTER_MAX_NODES];
	struct bp_clock_fmt cf;
	const struct bp_event *e;
	unsigned n;
	int rc = 0;

	bp_clock_fmt_init(&cf);
	bp_cluster_open_all(c, cur);
	for (unsigned i = 0; i < c->n; i++)
		roots[i] = root_opt ? root_opt
			   : cur[i].open ? bp_meta_env(&cur[i].r.meta, "follow_root")
					 : NULL;
	while (rc == 0 && (e = bp_cluster_next(c, cur, &n))) {
		uint32_t pair = bp_cluster_pair_of(c, n, e);
		struct proc *p;

		if (pair && e->id == BP_EV_RECEIVE && !s->pair_sent[pair - 1] &&
		    early_receive(c, s, pair) != 0) {
			rc = -1;
			break;
		}
		if (pair && e->id != BP_EV_RECEIVE)
			s->pair_sent[pair - 1] = 1;
		p = proc(s, n, e->pid); /* after early_receive's proc() */
		if (!p) {
			rc = -1;
			break;
		}
		if (e->id == BP_EV_ANNOTATION &&
		    strcmp(e->str[BP_FLD(ANNOTATION, tag)], "follow_cut") == 0) {
			/* About the cut request's first process. */
			uint32_t q = p->last ? p->last
				     : p->npend ? p->pend[0].req : 0;
			if (q)
				mark_cut(&s->reqs[q - 1],
					 e->str[BP_FLD(ANNOTATION, value)]);
			bp_cluster_advance(cur, n);
			continue;
		}
		if (e->id == BP_EV_PROCESS) {
			/* A name (written at the session's end), not something
			 * the process did. */
			bp_cluster_advance(cur, n);
			continue;
		}
		if (e->id == BP_EV_CALL && is_root(roots[n], e) && !p->root) {
			struct request *r = new_request(s);

			if (!r) {
				rc = -1;
				break;
			}
			r->node = n;
			r->pid = e->pid;
			r->start = r->end = bp_cluster_when(c, n, e->ts);
			count_proc(s, s->nreqs, n, e->pid);
			p->req = s->nreqs;
			p->last = s->nreqs;
			p->depth = 0;
			p->root = 1;
		} else if (!p->root) {
			rc = follow_other(c, s, &cf, n, e, p, pair);
			bp_cluster_advance(cur, n);
			continue;
		} else if (e->id == BP_EV_RECEIVE) {
			uint32_t q = pair ? s->pair_req[pair - 1] : 0;

			if (q != p->req) {
				/* Not the root's request: left out. */
				s->out_recv++;
				bp_cluster_advance(cur, n);
				continue;
			}
		}
		if (p->req) {
			emit(c, &s->reqs[p->req - 1], &cf, n, e, p->depth);
			if (pair && (e->id == BP_EV_SEND || e->id == BP_EV_SEND_DEAD)) {
				s->pair_req[pair - 1] = p->req;
				s->pair_depth[pair - 1] = p->depth;
			}
			if (e->id != BP_EV_CALL && is_root(roots[n], e)) {
				p->root = 0;
				p->req = 0;
			}
		}
		bp_cluster_advance(cur, n);
	}
	bp_cluster_close_all(c, cur);
	return rc;
}

static void print(const struct bp_cluster *c, const struct state *s,
		  struct bp_out *o, long only)
{
	for (uint32_t i = 0; i < s->nreqs; i++) {
		const struct request *r = &s->reqs[i];

		if (only > 0 && (uint32_t)only != i + 1)
			continue;
		bp_out_str(o, "Request ");
		bp_out_u64(o, i + 1);
		bp_out_str(o, ": root ");
		bp_cluster_out_pid(o, r->pid);
		bp_out_str(o, " on ");
		bp_out_str(o, c->nodes[r->node].name);
		bp_out_str(o, ", ");
		bp_out_u64(o, r->events);
		bp_out_str(o, " events, ");
		bp_out_u64(o, r->procs);
		bp_out_str(o, r->procs == 1 ? " process, " : " processes, ");
		bp_out_dur(o, (uint64_t)bp_cluster_sub(r->end, r->start));
		if (r->cut[0]) {
			bp_out_str(o, ", cut: ");
			bp_out_str(o, r->cut);
		}
		bp_out_char(o, '\n');
		bp_out_mem(o, r->lines.buf, r->lines.len);
	}
}

/* The events of the trace that are in no request, said. */
static void print_left_out(const struct state *s, struct bp_out *o)
{
	if (!s->nreqs || !(s->out_recv | s->out_other))
		return;
	bp_out_str(o, "Left out (in no request): ");
	bp_out_u64(o, s->out_recv);
	bp_out_str(o, s->out_recv == 1 ? " receive" : " receives");
	bp_out_str(o, " of messages no request's process is seen sending, ");
	bp_out_u64(o, s->out_other);
	bp_out_str(o, s->out_other == 1 ? " other event" : " other events");
	bp_out_str(o, " of processes then working for no request\n");
}

/* The events the per-request budget cut, summed over the nodes (env
 * follow_dropped_*, written when the follow session stopped). */
static void print_cut_counts(const struct bp_cluster *c, struct bp_out *o)
{
	static const char *const keys[] = {"follow_dropped_request_events",
					   "follow_dropped_request_ms",
					   "follow_dropped_request_table",
					   "follow_refused"};
	unsigned long long v[4] = {0, 0, 0, 0};
	struct bp_cluster_cursor cur[BP_CLUSTER_MAX_NODES];
	int any = 0;

	bp_cluster_open_all(c, cur);
	for (unsigned i = 0; i < c->n; i++)
		for (int k = 0; k < 4 && cur[i].open; k++) {
			const char *t = bp_meta_env(&cur[i].r.meta, keys[k]);
			if (t) {
				v[k] += strtoull(t, NULL, 10);
				any = 1;
			}
		}
	bp_cluster_close_all(c, cur);
	if (!any || !(v[0] | v[1] | v[2] | v[3]))
		return;
	bp_out_str(o, "Per-request budget: ");
	bp_out_u64(o, v[0]);
	bp_out_str(o, " events cut by the events budget, ");
	bp_out_u64(o, v[1]);
	bp_out_str(o, " by the ms budget, ");
	bp_out_u64(o, v[2]);
	bp_out_str(o, " lost to the request table; ");
	bp_out_u64(o, v[3]);
	bp_out_str(o, v[3] == 1 ? " request refused (table full)\n"
				: " requests refused (table full)\n");
}

/* The root calls not followed because their caller carried a seq_trace
 * label of its own (env follow_labelled, summed over the nodes): the
 * session left the application's label alone (src/beamprobe_follow.erl). */
static void print_labelled(const struct bp_cluster *c, struct bp_out *o)
{
	struct bp_cluster_cursor cur[BP_CLUSTER_MAX_NODES];
	unsigned long long n = 0;

	bp_cluster_open_all(c, cur);
	for (unsigned i = 0; i < c->n; i++) {
		const char *t = cur[i].open ? bp_meta_env(&cur[i].r.meta,
							  "follow_labelled")
					    : NULL;
		if (t)
			n += strtoull(t, NULL, 10);
	}
	bp_cluster_close_all(c, cur);
	if (!n)
		return;
	bp_out_str(o, "Not followed: ");
	bp_out_u64(o, n);
	bp_out_str(o, n == 1 ? " root call" : " root calls");
	bp_out_str(o, " whose caller carried a seq_trace label of its own "
		      "(left as it was)\n");
}

int bp_cmd_request(int argc, char **argv)
{
	static const struct option opts[] = {
		{"root", required_argument, NULL, 'r'},
		{"request", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	const char *root = NULL;
	long long only = 0;
	struct bp_cluster c;
	struct state s;
	struct bp_out o;
	int ch, rc = BP_EXIT_OK;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+hr:n:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			return bp_cli_help("request");
		case 'r':
			root = optarg;
			break;
		case 'n':
			if ((only = bp_cli_count(optarg)) < 1)
				return bp_cli_usage("request", "bad request number '%s'",
						    optarg);
			break;
		default:
			return bp_cli_usage("request", "unknown option '%s'",
					    argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return bp_cli_usage("request", "expected one directory");
	if (bp_cluster_open_any(&c, argv[optind]) != 0)
		return BP_EXIT_DAMAGED;
	memset(&s, 0, sizeof s);
	bp_map_init(&s.proc_of);
	bp_map_init(&s.in_req);
	s.pair_req = calloc(c.npairs + 1, sizeof *s.pair_req);
	s.pair_depth = calloc(c.npairs + 1, sizeof *s.pair_depth);
	s.pair_sent = calloc(c.npairs + 1, sizeof *s.pair_sent);
	if (!s.pair_req || !s.pair_depth || !s.pair_sent ||
	    walk(&c, &s, root) != 0) {
		bp_cli_error("%s: out of memory", argv[optind]);
		rc = BP_EXIT_DAMAGED;
	} else {
		bp_out_open(&o, NULL);
		if (only > 0 && s.nreqs > 0 && (uint64_t)only > s.nreqs) {
			/* printed nothing, exit 0: as if request N were
			 * there and empty */
			bp_cli_error("%s: no request %lld: the trace has %u "
				     "request%s", argv[optind], only, s.nreqs,
				     s.nreqs == 1 ? "" : "s");
			rc = BP_EXIT_USAGE;
		} else if (s.nreqs == 0)
			bp_out_str(&o, "No request: no call of the root function "
				       "in the trace (env follow_root, or "
				       "--root M:F/A)\n");
		print(&c, &s, &o, (long)only);
		if (!only) {
			print_left_out(&s, &o);
			print_cut_counts(&c, &o);
			print_labelled(&c, &o);
		}
		if (bp_out_close(&o))
			rc = BP_EXIT_DAMAGED;
	}
	for (uint32_t i = 0; i < s.nreqs; i++)
		bp_out_close(&s.reqs[i].lines);
	free(s.reqs);
	free(s.procs);
	free(s.pair_req);
	free(s.pair_depth);
	free(s.pair_sent);
	bp_map_free(&s.proc_of);
	bp_map_free(&s.in_req);
	if (rc == BP_EXIT_OK && c.problems) {
		bp_cli_error("%s: %u problem%s in the trace; the output covers "
			     "the part that could be read", c.dir, c.problems,
			     c.problems == 1 ? "" : "s");
		rc = BP_EXIT_DAMAGED;
	}
	bp_cluster_close(&c);
	return rc;
}
