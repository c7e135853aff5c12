/* cmd_cluster.c -- `beamprobe cluster DIR': the node traces of a cluster
 * session read as one (bp_cluster.h): clock offsets with their recorded
 * and refined bounds, messages matched into flows across nodes, the
 * merged timeline (--print) and a Perfetto trace with flow arrows
 * (--perfetto FILE); and the offset solver, bp_cluster_solve().
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bp_pid_text.h"
#include "bp_cli.h"
#include "bp_cluster.h"
#include "bp_out.h"


#define INF BP_CLUSTER_INF

/* The offset solver (bp_cluster.h), here for bp_cluster.c's size. */

/* Bounds propagation over the constraints off[b] - off[a] >= k[a][b];
 * 0, or -1 when some node's bounds become empty. */
static int propagate(struct bp_cluster *c, const int64_t *k, const char *has)
{
	unsigned n = c->n;

	for (unsigned round = 0; round < n * n + 2; round++) {
		int changed = 0;

		for (unsigned a = 0; a < n; a++)
			for (unsigned b = 0; b < n; b++) {
				struct bp_cnode *na = &c->nodes[a], *nb = &c->nodes[b];
				int64_t v = k[a * n + b];

				if (!has[a * n + b])
					continue;
				if (na->lo > -INF &&
				    bp_cluster_add(na->lo, v) > nb->lo) {
					nb->lo = bp_cluster_add(na->lo, v);
					changed = 1;
				}
				if (nb->hi < INF &&
				    bp_cluster_sub(nb->hi, v) < na->hi) {
					na->hi = bp_cluster_sub(nb->hi, v);
					changed = 1;
				}
			}
		for (unsigned i = 0; i < n; i++)
			if (c->nodes[i].lo > c->nodes[i].hi)
				return -1;
		if (!changed)
			return 0;
	}
	return 0;
}

int64_t bp_cluster_pick(int64_t lo, int64_t hi)
{
	if (lo <= -INF && hi >= INF)
		return 0;
	if (lo <= -INF)
		return hi;
	if (hi >= INF)
		return lo;
	return bp_cluster_add(lo, bp_cluster_sub(hi, lo) / 2);
}

int bp_cluster_solve(struct bp_cluster *c)
{
	unsigned n = c->n;
	int64_t *k = calloc((size_t)n * n, sizeof *k);
	char *has = calloc((size_t)n * n, 1);
	int64_t rlo[BP_CLUSTER_MAX_NODES], rhi[BP_CLUSTER_MAX_NODES];

	if (!k || !has) {
		free(k);
		free(has);
		return -1;
	}
	for (uint32_t i = 0; i < c->nflows; i++) {
		const struct bp_cmsg *s = &c->sends[c->flows[i].send];
		const struct bp_cmsg *r = &c->recvs[c->flows[i].recv];
		size_t at = (size_t)s->node * n + r->node;
		int64_t v;

		if (!s->before)
			continue; /* nothing known to precede the send */
		v = bp_cluster_sub(bp_cluster_ts(s->before), bp_cluster_ts(r->ts));
		if (!has[at] || v > k[at])
			k[at] = v;
		has[at] = 1;
		c->nodes[r->node].constraints++;
		c->nodes[s->node].constraints++;
	}
	for (unsigned i = 0; i < n; i++) {
		struct bp_cnode *nd = &c->nodes[i];

		if ((int)i == c->control) {
			nd->lo = nd->hi = 0;
		} else if (nd->has_clock) {
			nd->lo = nd->rec_lo;
			nd->hi = nd->rec_hi;
		} else {
			nd->lo = -INF;
			nd->hi = INF;
		}
	}
	c->consistent = propagate(c, k, has) == 0;
	if (c->consistent) {
		for (unsigned i = 0; i < n; i++) {
			rlo[i] = c->nodes[i].lo;
			rhi[i] = c->nodes[i].hi;
		}
		for (unsigned i = 0; i < n; i++) {
			int64_t o = bp_cluster_pick(c->nodes[i].lo, c->nodes[i].hi);

			c->nodes[i].lo = c->nodes[i].hi = o;
			if (propagate(c, k, has) != 0)
				break; /* cannot happen for difference
					* constraints; keep what we have */
		}
		for (unsigned i = 0; i < n; i++) {
			c->nodes[i].off = c->nodes[i].lo;
			c->nodes[i].lo = rlo[i];
			c->nodes[i].hi = rhi[i];
		}
	} else {
		for (unsigned i = 0; i < n; i++) {
			struct bp_cnode *nd = &c->nodes[i];

			nd->lo = nd->has_clock ? nd->rec_lo : -INF;
			nd->hi = nd->has_clock ? nd->rec_hi : INF;
			nd->off = (int)i == c->control ? 0
				  : nd->has_clock ? nd->rec_off : 0;
		}
	}
	c->reversed = c->late_stamps = 0;
	for (uint32_t i = 0; i < c->nflows; i++) {
		struct bp_cflow *f = &c->flows[i];
		const struct bp_cmsg *s = &c->sends[f->send];
		const struct bp_cmsg *r = &c->recvs[f->recv];
		int64_t rt = bp_cluster_add(bp_cluster_ts(r->ts),
					    c->nodes[r->node].off),
			so = c->nodes[s->node].off;

		f->late = f->rev = 0;
		if (s->before &&
		    rt < bp_cluster_add(bp_cluster_ts(s->before), so)) {
			f->rev = 1;
			c->reversed++;
		} else if (rt < bp_cluster_add(bp_cluster_ts(s->ts), so)) {
			f->late = 1;
			c->late_stamps++;
		}
	}
	free(k);
	free(has);
	return 0;
}

/* Control node's clock of an event. */
int64_t bp_cluster_when(const struct bp_cluster *c, unsigned n, uint64_t ts)
{
	return bp_cluster_add(bp_cluster_ts(ts), c->nodes[n].off);
}

static int64_t when(const struct bp_cluster *c, unsigned n, uint64_t ts)
{
	return bp_cluster_when(c, n, ts);
}

int64_t bp_cluster_wall_base(const struct bp_cluster *c)
{
	return c->nodes[c->control >= 0 ? (unsigned)c->control : 0].wall_ns;
}

/* Opens every node's trace again for the time-ordered pass. */
int bp_cluster_open_all(const struct bp_cluster *c, struct bp_cluster_cursor *cur)
{
	for (unsigned i = 0; i < c->n; i++) {
		cur[i].open = bp_reader_open(&cur[i].r, c->nodes[i].dir,
					     BP_READER_QUIET) == 0;
		cur[i].e = cur[i].open ? bp_reader_next(&cur[i].r) : NULL;
	}
	return 0;
}

/* The next event in the merged timeline; its node in *node. */
const struct bp_event *bp_cluster_next(const struct bp_cluster *c,
				   struct bp_cluster_cursor *cur, unsigned *node)
{
	int best = -1;
	int64_t bt = 0;
	const struct bp_event *e;

	for (unsigned i = 0; i < c->n; i++) {
		int64_t t;

		if (!cur[i].e)
			continue;
		t = when(c, i, cur[i].e->ts);
		if (best < 0 || t < bt) {
			best = (int)i;
			bt = t;
		}
	}
	if (best < 0)
		return NULL;
	e = cur[best].e;
	*node = (unsigned)best;
	return e;
}

void bp_cluster_advance(struct bp_cluster_cursor *cur, unsigned node)
{
	cur[node].e = bp_reader_next(&cur[node].r);
}

void bp_cluster_close_all(const struct bp_cluster *c, struct bp_cluster_cursor *cur)
{
	for (unsigned i = 0; i < c->n; i++)
		if (cur[i].open)
			bp_reader_close(&cur[i].r);
}

void bp_cluster_out_pid(struct bp_out *o, uint64_t pid)
{
	char t[BP_PID_TEXT];

	if ((pid & 0xf) == 0x3)
		bp_out_mem(o, t, bp_pid_text(pid, t));
	else
		bp_out_str(o, "-");
}

static void out_field(struct bp_out *o, const struct bp_event *e, int i)
{
	bp_out_text(o, e->str[i], e->len[i]);
}

void bp_cluster_event_text(struct bp_out *o, const struct bp_event *e)
{
	switch (e->id) {
	case BP_EV_SEND:
	case BP_EV_SEND_DEAD:
		bp_out_str(o, "sent ");
		out_field(o, e, BP_FLD(SEND, message));
		bp_out_str(o, " to ");
		out_field(o, e, BP_FLD(SEND, to_text));
		break;
	case BP_EV_RECEIVE:
		bp_out_str(o, "received ");
		out_field(o, e, BP_FLD(RECEIVE, message));
		break;
	case BP_EV_CALL: {
		const char *m = e->str[BP_FLD(CALL, mfa)];
		const char *slash = strrchr(m, '/');

		bp_out_str(o, "call ");
		if (strcmp(e->str[BP_FLD(CALL, args)], "undefined") && slash) {
			/* m:f(Args) instead of m:f/N(Args) */
			bp_out_text(o, m, (size_t)(slash - m));
			out_field(o, e, BP_FLD(CALL, args));
		} else {
			out_field(o, e, BP_FLD(CALL, mfa));
		}
		break;
	}
	case BP_EV_RETURN_FROM:
		bp_out_str(o, "returned from ");
		out_field(o, e, BP_FLD(RETURN_FROM, mfa));
		bp_out_str(o, " -> ");
		out_field(o, e, BP_FLD(RETURN_FROM, result));
		break;
	default:
		bp_out_str(o, bp_event_name(e->id));
		if (e->id < BP_EV_COUNT) {
			const struct bp_event_desc *d = &bp_event_descs[e->id];
			int s = 0;

			for (unsigned i = 0; i < d->nfields && s < BP_EV_MAX_STR; i++)
				if (d->fields[i].type == BP_T_STR) {
					bp_out_char(o, ' ');
					out_field(o, e, s++);
				}
		}
		break;
	}
}

/* A latency, negative when the receive was stamped before the send (a
 * send to another node is stamped after it left, bp_cluster.h). */
static void out_sdur(struct bp_out *o, int64_t v)
{
	if (v < 0) {
		bp_out_char(o, '-');
		bp_out_dur(o, (uint64_t)0 - (uint64_t)v);
	} else {
		bp_out_dur(o, (uint64_t)v);
	}
}

static void print_event(struct bp_out *o, const struct bp_cluster *c,
			unsigned n, const struct bp_event *e,
			struct bp_clock_fmt *cf)
{
	uint32_t f = bp_cluster_flow_of(c, n, e);

	bp_out_clock(o, cf, bp_cluster_add(bp_cluster_wall_base(c),
					   when(c, n, e->ts)));
	bp_out_char(o, ' ');
	bp_out_str(o, c->nodes[n].name);
	bp_out_char(o, ' ');
	bp_cluster_out_pid(o, e->pid);
	bp_out_char(o, ' ');
	bp_cluster_event_text(o, e);
	if (f == BP_CLUSTER_NO_FLOW) {
		bp_out_str(o, " [no flow: not received in the traces]");
	} else if (f) {
		const struct bp_cflow *fl = &c->flows[f - 1];
		const struct bp_cmsg *s = &c->sends[fl->send];
		const struct bp_cmsg *r = &c->recvs[fl->recv];
		int64_t lat = bp_cluster_sub(when(c, r->node, r->ts),
					     when(c, s->node, s->ts));

		bp_out_str(o, " [flow ");
		bp_out_u64(o, f);
		if (e->id == BP_EV_RECEIVE) {
			bp_out_str(o, " from ");
			bp_out_str(o, c->nodes[s->node].name);
			bp_out_char(o, ' ');
			bp_cluster_out_pid(o, s->pid);
		} else {
			bp_out_str(o, " to ");
			bp_out_str(o, c->nodes[r->node].name);
		}
		bp_out_str(o, ", ");
		out_sdur(o, lat);
		if (fl->late) /* the VM's order, not a clock error */
			bp_out_str(o, ", send stamped after it left");
		if (fl->rev) /* a clock error: the bounds are wrong */
			bp_out_str(o, ", reversed: received before sent");
		bp_out_char(o, ']');
	}
	bp_out_char(o, '\n');
}

/* The clock bounds the messages contradict, said on stderr in every
 * mode (the summary also says it): the merged timeline may be wrong, so
 * the exit status is 2 (bp_cmd_cluster), as for a damaged trace; before,
 * only --print and --perfetto said it, and every mode exited 0. */
static void warn_clock(const struct bp_cluster *c)
{
	if (!c->consistent || c->reversed)
		bp_cli_error("%s: the messages contradict the recorded clock "
			     "bounds (consistent: %s): recorded offsets used, "
			     "%u flow%s received before sent (reversed)",
			     c->dir, c->consistent ? "true" : "false",
			     c->reversed, c->reversed == 1 ? "" : "s");
}

static int do_print(const struct bp_cluster *c, const char *path)
{
	struct bp_cluster_cursor cur[BP_CLUSTER_MAX_NODES];
	struct bp_clock_fmt cf;
	struct bp_out o;
	const struct bp_event *e;
	unsigned n;
	int err;

	if ((err = bp_out_open(&o, path))) {
		bp_cli_error("%s: %s", path ? path : "stdout", strerror(err));
		return BP_EXIT_DAMAGED;
	}
	bp_clock_fmt_init(&cf);
	bp_cluster_open_all(c, cur);
	while ((e = bp_cluster_next(c, cur, &n))) {
		print_event(&o, c, n, e, &cf);
		bp_cluster_advance(cur, n);
	}
	bp_cluster_close_all(c, cur);
	if ((err = bp_out_close(&o))) {
		bp_cli_error("%s: %s", path ? path : "stdout", strerror(err));
		return BP_EXIT_DAMAGED;
	}
	return BP_EXIT_OK;
}

static void te_head(struct bp_out *o, const char *ph, unsigned node,
		    uint64_t pid, uint64_t ns)
{
	bp_out_str(o, ",\n{\"ph\":\"");
	bp_out_str(o, ph);
	bp_out_str(o, "\",\"pid\":");
	bp_out_u64(o, node + 1);
	bp_out_str(o, ",\"tid\":");
	bp_out_u64(o, (pid & 0xf) == 0x3 ? bp_pid_data(pid) : 0);
	bp_out_str(o, ",\"ts\":");
	bp_out_us3(o, ns);
}

/* Chrome trace-event JSON: a process per node, a thread per Erlang
 * process, every event an instant (messages a 1 us slice), and each flow
 * an arrow (s/f pair, id = flow number) from its send to its receive. */
static int do_perfetto(const struct bp_cluster *c, const char *path)
{
	struct bp_cluster_cursor cur[BP_CLUSTER_MAX_NODES];
	struct bp_out o;
	const struct bp_event *e;
	unsigned n;
	int64_t base = INT64_MAX;
	struct bp_map named;
	int err;

	if ((err = bp_out_open(&o, path))) {
		bp_cli_error("%s: %s", path, strerror(err));
		return BP_EXIT_DAMAGED;
	}
	bp_map_init(&named);
	bp_cluster_open_all(c, cur);
	for (unsigned i = 0; i < c->n; i++)
		if (cur[i].e && when(c, i, cur[i].e->ts) < base)
			base = when(c, i, cur[i].e->ts);
	bp_out_str(&o, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"
		       "{\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\","
		       "\"args\":{\"name\":\"beamprobe cluster\"}}");
	for (unsigned i = 0; i < c->n; i++) {
		bp_out_str(&o, ",\n{\"ph\":\"M\",\"pid\":");
		bp_out_u64(&o, i + 1);
		bp_out_str(&o, ",\"name\":\"process_name\",\"args\":{\"name\":");
		bp_out_json_str(&o, c->nodes[i].name, strlen(c->nodes[i].name));
		bp_out_str(&o, ",\"clock_offset_ns\":");
		bp_out_i64(&o, c->nodes[i].off);
		bp_out_str(&o, "}}");
	}
	while ((e = bp_cluster_next(c, cur, &n))) {
		uint64_t ns = (uint64_t)bp_cluster_sub(when(c, n, e->ts), base);
		uint32_t f = bp_cluster_flow_of(c, n, e);
		uint64_t tk = ((uint64_t)n << 32) ^ bp_pid_data(e->pid);
		const char *name = bp_event_name(e->id);
		int msg = e->id == BP_EV_SEND || e->id == BP_EV_SEND_DEAD ||
			  e->id == BP_EV_RECEIVE;

		if ((e->pid & 0xf) == 0x3 && bp_map_get(&named, tk) == BP_MAP_NONE) {
			char t[BP_PID_TEXT];

			(void)bp_map_put(&named, tk, 1);
			bp_out_str(&o, ",\n{\"ph\":\"M\",\"pid\":");
			bp_out_u64(&o, n + 1);
			bp_out_str(&o, ",\"tid\":");
			bp_out_u64(&o, bp_pid_data(e->pid));
			bp_out_str(&o, ",\"name\":\"thread_name\",\"args\":{\"name\":");
			bp_out_json_str(&o, t, bp_pid_text(e->pid, t));
			bp_out_str(&o, "}}");
		}
		te_head(&o, msg ? "X" : "i", n, e->pid, ns);
		if (msg)
			bp_out_str(&o, ",\"dur\":1");
		else
			bp_out_str(&o, ",\"s\":\"t\"");
		bp_out_str(&o, ",\"cat\":\"beam\",\"name\":");
		bp_out_json_str(&o, name, strlen(name));
		if (msg) {
			int i = e->id == BP_EV_RECEIVE ? BP_FLD(RECEIVE, message)
						       : BP_FLD(SEND, message);

			bp_out_str(&o, ",\"args\":{\"message\":");
			bp_out_json_str(&o, e->str[i], e->len[i]);
			bp_out_char(&o, '}');
		}
		bp_out_char(&o, '}');
		if (f && f != BP_CLUSTER_NO_FLOW) {
			te_head(&o, e->id == BP_EV_RECEIVE ? "f" : "s", n,
				e->pid, ns + 1);
			bp_out_str(&o, e->id == BP_EV_RECEIVE ? ",\"bp\":\"e\"" : "");
			bp_out_str(&o, ",\"cat\":\"message\",\"name\":\"message\","
				       "\"id\":");
			bp_out_u64(&o, f);
			bp_out_char(&o, '}');
		}
		bp_cluster_advance(cur, n);
	}
	bp_out_str(&o, "\n]}\n");
	bp_cluster_close_all(c, cur);
	bp_map_free(&named);
	if ((err = bp_out_close(&o))) {
		bp_cli_error("%s: %s", path, strerror(err));
		return BP_EXIT_DAMAGED;
	}
	return BP_EXIT_OK;
}

/* Per ordered node pair: flows and their latency on the merged clock. */
struct pair {
	uint64_t flows;
	int64_t min, max;
	__int128 sum;  /* of int64 latencies: cannot overflow */
};

static void pairs(const struct bp_cluster *c, struct pair *p)
{
	memset(p, 0, sizeof *p * c->n * c->n);
	for (uint32_t i = 0; i < c->nflows; i++) {
		const struct bp_cmsg *s = &c->sends[c->flows[i].send];
		const struct bp_cmsg *r = &c->recvs[c->flows[i].recv];
		struct pair *q = &p[s->node * c->n + r->node];
		int64_t lat = bp_cluster_sub(when(c, r->node, r->ts),
					     when(c, s->node, s->ts));

		if (!q->flows || lat < q->min)
			q->min = lat;
		if (!q->flows || lat > q->max)
			q->max = lat;
		q->sum += lat;
		q->flows++;
	}
}

static void json_i64_or_null(struct bp_out *o, int64_t v)
{
	if (v <= -(INT64_MAX / 8) || v >= INT64_MAX / 8)
		bp_out_str(o, "null");
	else
		bp_out_i64(o, v);
}

static int do_json(const struct bp_cluster *c, struct pair *p)
{
	struct bp_out o;
	int first = 1;

	bp_out_open(&o, NULL);
	bp_out_str(&o, "{\"nodes\": ");
	bp_out_u64(&o, c->n);
	bp_out_str(&o, ", \"control\": ");
	if (c->control >= 0)
		bp_out_json_str(&o, c->nodes[c->control].name,
				strlen(c->nodes[c->control].name));
	else
		bp_out_str(&o, "null");
	bp_out_str(&o, ", \"consistent\": ");
	bp_out_str(&o, c->consistent ? "true" : "false");
	bp_out_str(&o, ", \"flows\": ");
	bp_out_u64(&o, c->nflows);
	bp_out_str(&o, ", \"reversed\": ");
	bp_out_u64(&o, c->reversed);
	bp_out_str(&o, ", \"late_send_stamps\": ");
	bp_out_u64(&o, c->late_stamps);
	bp_out_str(&o, ", \"unmatched_sends\": ");
	bp_out_u64(&o, c->unmatched_sends);
	bp_out_str(&o, ", \"local_matched\": ");
	bp_out_u64(&o, c->local_matched);
	bp_out_str(&o, ", \"outside_sends\": ");
	bp_out_u64(&o, c->outside_sends);
	bp_out_str(&o, ",\n \"missing_nodes\": [");
	for (unsigned k = 0; k < c->nmissing; k++) {
		bp_out_str(&o, k ? ", {\"node\": " : "{\"node\": ");
		bp_out_json_str(&o, c->missing[k], strlen(c->missing[k]));
		bp_out_str(&o, ", \"sends\": ");
		bp_out_u64(&o, c->missing_sends[k]);
		bp_out_char(&o, '}');
	}
	bp_out_char(&o, ']');
	bp_out_str(&o, ",\n \"lost_nodes\": [");
	for (unsigned i = 0, k = 0; i < c->n; i++)
		if (c->nodes[i].lost) {
			bp_out_str(&o, k++ ? ", {\"node\": " : "{\"node\": ");
			bp_out_json_str(&o, c->nodes[i].name,
					strlen(c->nodes[i].name));
			bp_out_str(&o, ", \"lost\": ");
			bp_out_json_str(&o, c->nodes[i].lost,
					strlen(c->nodes[i].lost));
			bp_out_char(&o, '}');
		}
	bp_out_char(&o, ']');
	bp_out_str(&o, ",\n \"offsets\": [");
	for (unsigned i = 0; i < c->n; i++) {
		const struct bp_cnode *nd = &c->nodes[i];

		bp_out_str(&o, i ? ",\n  {" : "\n  {");
		bp_out_str(&o, "\"node\": ");
		bp_out_json_str(&o, nd->name, strlen(nd->name));
		bp_out_str(&o, ", \"recorded\": ");
		bp_out_str(&o, nd->has_clock ? "true" : "false");
		bp_out_str(&o, ", \"recorded_refused\": ");
		bp_out_str(&o, nd->clock_refused ? "true" : "false");
		bp_out_str(&o, ", \"recorded_lo_ns\": ");
		json_i64_or_null(&o, nd->has_clock ? nd->rec_lo : INT64_MAX);
		bp_out_str(&o, ", \"recorded_hi_ns\": ");
		json_i64_or_null(&o, nd->has_clock ? nd->rec_hi : INT64_MAX);
		bp_out_str(&o, ", \"refined_lo_ns\": ");
		json_i64_or_null(&o, nd->lo);
		bp_out_str(&o, ", \"refined_hi_ns\": ");
		json_i64_or_null(&o, nd->hi);
		bp_out_str(&o, ", \"offset_ns\": ");
		bp_out_i64(&o, nd->off);
		bp_out_str(&o, ", \"events\": ");
		bp_out_u64(&o, nd->events);
		bp_out_str(&o, "}");
	}
	bp_out_str(&o, "]");
	bp_cluster_lost_json(c, &o);
	bp_out_str(&o, ",\n \"pairs\": [");
	for (unsigned a = 0; a < c->n; a++)
		for (unsigned b = 0; b < c->n; b++) {
			const struct pair *q = &p[a * c->n + b];

			if (!q->flows)
				continue;
			bp_out_str(&o, first ? "\n  {\"from\": " : ",\n  {\"from\": ");
			first = 0;
			bp_out_json_str(&o, c->nodes[a].name, strlen(c->nodes[a].name));
			bp_out_str(&o, ", \"to\": ");
			bp_out_json_str(&o, c->nodes[b].name, strlen(c->nodes[b].name));
			bp_out_str(&o, ", \"count\": ");
			bp_out_u64(&o, q->flows);
			bp_out_str(&o, ", \"min_latency_ns\": ");
			bp_out_i64(&o, q->min);
			bp_out_str(&o, ", \"mean_latency_ns\": ");
			bp_out_i64(&o, (int64_t)(q->sum / (__int128)q->flows));
			bp_out_str(&o, ", \"max_latency_ns\": ");
			bp_out_i64(&o, q->max);
			bp_out_str(&o, "}");
		}
	bp_out_str(&o, "]}\n");
	return bp_out_close(&o) ? BP_EXIT_DAMAGED : BP_EXIT_OK;
}

static void out_bound(struct bp_out *o, int64_t v)
{
	if (v <= -(INT64_MAX / 8))
		bp_out_str(o, "-inf");
	else if (v >= INT64_MAX / 8)
		bp_out_str(o, "+inf");
	else
		bp_out_i64(o, v);
}

static int do_text(const struct bp_cluster *c, struct pair *p)
{
	struct bp_out o;

	bp_out_open(&o, NULL);
	bp_out_str(&o, "Cluster: ");
	bp_out_u64(&o, c->n);
	bp_out_str(&o, " node traces, control node ");
	if (c->control >= 0) {
		bp_out_str(&o, c->nodes[c->control].name);
	} else if (c->control_name) {
		bp_out_str(&o, c->control_name);
		bp_out_str(&o, " (its own trace is not here; times are shown "
			       "with the first node's wall clock)");
	} else {
		bp_out_str(&o, "unknown (no cluster_control)");
	}
	for (unsigned k = 0; k < c->nmissing; k++) {
		bp_out_str(&o, k ? ", " : "\nMissing node traces (the session ran "
					 "on them): ");
		bp_out_str(&o, c->missing[k]);
		bp_out_str(&o, " (");
		bp_out_u64(&o, c->missing_sends[k]);
		bp_out_str(&o, c->missing_sends[k] == 1 ? " send to it not received)"
							: " sends to it not received)");
	}
	for (unsigned i = 0, k = 0; i < c->n; i++)
		if (c->nodes[i].lost) {
			bp_out_str(&o, k++ ? ", " : "\nLost mid-session (their "
						    "traces end there): ");
			bp_out_str(&o, c->nodes[i].name);
			bp_out_str(&o, " (after ");
			bp_out_str(&o, c->nodes[i].lost);
			bp_out_str(&o, ")");
		}
	bp_out_str(&o, "\nClock offsets (ns, added to a node's timestamps "
		       "to get the control node's clock):\n");
	for (unsigned i = 0; i < c->n; i++) {
		const struct bp_cnode *nd = &c->nodes[i];

		bp_out_str(&o, "  ");
		bp_out_pad(&o, nd->name, 32, 0);
		bp_out_str(&o, " offset ");
		bp_out_i64(&o, nd->off);
		bp_out_str(&o, "  recorded [");
		if (nd->has_clock) {
			bp_out_i64(&o, nd->rec_lo);
			bp_out_str(&o, ", ");
			bp_out_i64(&o, nd->rec_hi);
		} else {
			bp_out_str(&o, nd->clock_refused ? "refused" : "none");
		}
		bp_out_str(&o, "]  refined [");
		out_bound(&o, nd->lo);
		bp_out_str(&o, ", ");
		out_bound(&o, nd->hi);
		bp_out_str(&o, "]  events ");
		bp_out_u64(&o, nd->events);
		bp_out_char(&o, '\n');
	}
	if (!c->consistent)
		bp_out_str(&o, "  the messages contradict the recorded bounds: "
			       "recorded offsets used\n");
	bp_cluster_lost_text(c, &o);
	bp_out_str(&o, "Flows (cross-node messages matched send -> receive): ");
	bp_out_u64(&o, c->nflows);
	bp_out_str(&o, ", reversed ");
	bp_out_u64(&o, c->reversed);
	bp_out_str(&o, ", sends stamped after they left ");
	bp_out_u64(&o, c->late_stamps);
	bp_out_str(&o, ", sends not received in the traces ");
	bp_out_u64(&o, c->unmatched_sends);
	if (c->outside_sends) {
		bp_out_str(&o, ", sends to nodes outside the cluster ");
		bp_out_u64(&o, c->outside_sends);
	}
	bp_out_char(&o, '\n');
	for (unsigned a = 0; a < c->n; a++)
		for (unsigned b = 0; b < c->n; b++) {
			const struct pair *q = &p[a * c->n + b];

			if (!q->flows)
				continue;
			bp_out_str(&o, "  ");
			bp_out_str(&o, c->nodes[a].name);
			bp_out_str(&o, " -> ");
			bp_out_str(&o, c->nodes[b].name);
			bp_out_str(&o, ": ");
			bp_out_u64(&o, q->flows);
			bp_out_str(&o, " messages, latency min ");
			out_sdur(&o, q->min);
			bp_out_str(&o, " mean ");
			out_sdur(&o, (int64_t)(q->sum / (__int128)q->flows));
			bp_out_str(&o, " max ");
			out_sdur(&o, q->max);
			bp_out_char(&o, '\n');
		}
	return bp_out_close(&o) ? BP_EXIT_DAMAGED : BP_EXIT_OK;
}

int bp_cmd_cluster(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"print", no_argument, NULL, 'p'},
		{"perfetto", required_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	const char *perfetto = NULL;
	int json = 0, print = 0, ch, rc;
	struct bp_cluster c;
	struct pair *p;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+hjpP:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			return bp_cli_help("cluster");
		case 'j':
			json = 1;
			break;
		case 'p':
			print = 1;
			break;
		case 'P':
			perfetto = optarg;
			break;
		default:
			return bp_cli_usage("cluster", "unknown option '%s'",
					    argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return bp_cli_usage("cluster", "expected one directory");
	if (json + print > 1)
		return bp_cli_usage("cluster", "--json and --print exclude each other");
	if (bp_cluster_open(&c, argv[optind]) != 0)
		return BP_EXIT_DAMAGED;
	p = calloc((size_t)c.n * c.n, sizeof *p);
	if (!p) {
		bp_cluster_close(&c);
		return BP_EXIT_DAMAGED;
	}
	pairs(&c, p);
	rc = BP_EXIT_OK;
	warn_clock(&c);
	if (perfetto)
		rc = do_perfetto(&c, perfetto);
	if (rc == BP_EXIT_OK)
		rc = print ? do_print(&c, NULL) : json ? do_json(&c, p)
						      : perfetto ? BP_EXIT_OK
								 : do_text(&c, p);
	if (rc == BP_EXIT_OK && c.problems) {
		bp_cli_error("%s: %u problem%s in the node traces; the output "
			     "covers the part that could be read", c.dir,
			     c.problems, c.problems == 1 ? "" : "s");
		rc = BP_EXIT_DAMAGED;
	}
	if (rc == BP_EXIT_OK && (!c.consistent || c.reversed))
		rc = BP_EXIT_DAMAGED;
	free(p);
	bp_cluster_close(&c);
	return rc;
}
