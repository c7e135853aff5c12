/* bp_cluster.c -- a directory of node traces read as one (bp_cluster.h):
 * open it (its node traces, their names, the nodes missing, the node
 * numbers inside pids, the recorded clock bounds), then read the message
 * events and match sends to receives (bp_cluster_msg.c,
 * bp_cluster_match.c); the clock offsets are solved by
 * bp_cluster_solve(), cmd_cluster.c.
 */
#include "bp_cluster.h"
#include "bp_cluster_msg.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bp_cli.h"

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);

	if (!p)
		return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

static int has_metadata(const char *dir)
{
	struct stat st;
	char *m = join(dir, "metadata");
	int ok = m && stat(m, &st) == 0 && S_ISREG(st.st_mode);

	free(m);
	return ok;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The subdirectories of dir that hold a trace, sorted; their count, -1
 * if dir cannot be read.  A count above max is returned with none of
 * them in out (never a part chosen by readdir order). */
static int list_traces(const char *dir, char **out, int max)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char *p;
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		p = join(dir, de->d_name);
		if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode) &&
		    has_metadata(p)) {
			if (n < max)
				out[n] = p;
			else
				free(p);
			if (n < INT32_MAX)
				n++;
		} else {
			free(p);
		}
	}
	closedir(d);
	if (n > max) {
		for (int i = 0; i < max; i++)
			free(out[i]);
	} else if (n > 1) {
		qsort(out, (size_t)n, sizeof *out, cmp_str);
	}
	return n;
}

int bp_cluster_is_cluster_dir(const char *dir)
{
	char *subs[BP_CLUSTER_MAX_NODES];
	int n;

	if (has_metadata(dir))
		return 0;
	n = list_traces(dir, subs, BP_CLUSTER_MAX_NODES);
	for (int i = 0; i < n && i < BP_CLUSTER_MAX_NODES; i++)
		free(subs[i]);
	return n > 0;
}

static int env_i64(const struct bp_meta *m, const char *k, int64_t *v)
{
	const char *s = bp_meta_env(m, k);
	char *end;
	long long x;

	if (!s)
		return 0;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return 0;
	*v = x;
	return 1;
}

static int same_name(const char *a, const char *name, size_t n)
{
	return strlen(a) == n && memcmp(a, name, n) == 0;
}

/* Index of the node trace named so, -1 if none. */
static int node_index(const struct bp_cluster *c, const char *name, size_t n)
{
	if (n >= 2 && name[0] == '\'' && name[n - 1] == '\'') {
		name++;
		n -= 2;
	}
	for (unsigned i = 0; i < c->n; i++)
		if (same_name(c->nodes[i].name, name, n))
			return (int)i;
	return -1;
}

/* As a destination: node_index(), else n + k for c->missing[k]. */
int bp_cluster_dest_index(const struct bp_cluster *c, const char *name,
			  size_t n)
{
	int i = node_index(c, name, n);

	if (i >= 0)
		return i;
	if (n >= 2 && name[0] == '\'' && name[n - 1] == '\'') {
		name++;
		n -= 2;
	}
	for (unsigned k = 0; k < c->nmissing; k++)
		if (same_name(c->missing[k], name, n))
			return (int)(c->n + k);
	return -1;
}

/* The names of env cluster_nodes ("a@h,b@h") added to c->missing once
 * each (the traced ones are taken out once all are known).  0, or -1
 * out of memory. */
static int add_listed(struct bp_cluster *c, const char *s)
{
	while (s && *s) {
		size_t len = strcspn(s, ",");
		unsigned k;

		for (k = 0; k < c->nmissing; k++)
			if (same_name(c->missing[k], s, len))
				break;
		if (len && k == c->nmissing &&
		    c->nmissing < BP_CLUSTER_MAX_NODES) {
			if (!(c->missing[c->nmissing] = strndup(s, len)))
				return -1;
			c->nmissing++;
		}
		s += len;
		if (*s)
			s++;
	}
	return 0;
}

/* c->missing without the nodes that have a trace here. */
static void drop_traced(struct bp_cluster *c)
{
	unsigned k = 0;

	for (unsigned i = 0; i < c->nmissing; i++) {
		if (node_index(c, c->missing[i], strlen(c->missing[i])) >= 0)
			free(c->missing[i]);
		else
			c->missing[k++] = c->missing[i];
	}
	c->nmissing = k;
}

/* "num=node,num=node" into the node's table. */
static void parse_ids(struct bp_cluster *c, struct bp_cnode *nd,
		      const char *s)
{
	while (s && *s && nd->nids < BP_CLUSTER_MAX_NODES) {
		const char *eq = strchr(s, '='), *comma;
		char *end;
		long num;

		if (!eq)
			break;
		comma = strchr(eq, ',');
		if (!comma)
			comma = eq + strlen(eq);
		num = strtol(s, &end, 10);
		if (end == eq) {
			nd->id_num[nd->nids] = num;
			nd->id_node[nd->nids] = bp_cluster_dest_index(
				c, eq + 1, (size_t)(comma - eq - 1));
			nd->nids++;
		}
		s = *comma ? comma + 1 : comma;
	}
}

static int open_dir(struct bp_cluster *c, const char *dir, int single);

/* env key k as an integer: 1, 0 if absent, -1 (said) if not one. */
static int clock_key(const struct bp_cnode *nd, const struct bp_meta *m,
		     const char *k, int64_t *v)
{
	const char *t = bp_meta_env(m, k);

	if (!t)
		return 0;
	if (env_i64(m, k, v))
		return 1;
	bp_cli_error("%s: %s = \"%.40s\" is not an integer: the recorded clock "
		     "bounds are ignored", nd->dir, k, t);
	return -1;
}

/* The recorded offset bounds of node i, checked (bp_cluster.h). */
static void read_clock(struct bp_cluster *c, unsigned i,
		       const struct bp_meta *m)
{
	struct bp_cnode *nd = &c->nodes[i];
	int64_t lo = 0, hi = 0, off = 0, wall;
	int klo = clock_key(nd, m, "clock_offset_lo_ns", &lo);
	int khi = clock_key(nd, m, "clock_offset_hi_ns", &hi);
	int koff = clock_key(nd, m, "clock_offset_ns", &off);

	nd->has_clock = 0;
	nd->rec_off = 0;
	if (klo < 0 || khi < 0 || koff < 0) {
		nd->clock_refused = 1;
		return;
	}
	if (!klo || !khi)
		return; /* none recorded */
	nd->clock_refused = 1;
	if (lo > hi) {
		bp_cli_error("%s: clock_offset_lo_ns %" PRId64 " > clock_offset_hi_ns "
			     "%" PRId64 ": the recorded clock bounds are ignored",
			     nd->dir, lo, hi);
		return;
	}
	if (lo < -BP_CLUSTER_MAX_OFF_NS || hi > BP_CLUSTER_MAX_OFF_NS) {
		bp_cli_error("%s: recorded clock offset bounds [%" PRId64 ", %" PRId64
			     "] ns are beyond +-%" PRId64 " ns: implausible, "
			     "ignored", nd->dir, lo, hi,
			     (int64_t)BP_CLUSTER_MAX_OFF_NS);
		return;
	}
	if (c->control >= 0 && (int)i != c->control) {
		wall = bp_cluster_sub(nd->wall_ns, c->nodes[c->control].wall_ns);
		if (bp_cluster_sub(lo, wall) > BP_CLUSTER_WALL_TOL_NS ||
		    bp_cluster_sub(wall, hi) > BP_CLUSTER_WALL_TOL_NS) {
			bp_cli_error("%s: recorded clock offset bounds [%" PRId64
				     ", %" PRId64 "] ns are more than %" PRId64
				     " s from the %" PRId64 " ns the wall clocks "
				     "of this trace and the control node's give: "
				     "implausible, ignored", nd->dir, lo, hi,
				     (int64_t)(BP_CLUSTER_WALL_TOL_NS / 1000000000),
				     wall);
			return;
		}
	}
	nd->clock_refused = 0;
	nd->has_clock = 1;
	nd->rec_lo = lo;
	nd->rec_hi = hi;
	nd->rec_off = koff && off >= lo && off <= hi ? off
						      : bp_cluster_pick(lo, hi);
}

int bp_cluster_open(struct bp_cluster *c, const char *dir)
{
	return open_dir(c, dir, 0);
}

int bp_cluster_open_any(struct bp_cluster *c, const char *dir)
{
	return open_dir(c, dir, 1);
}

static int open_dir(struct bp_cluster *c, const char *dir, int single)
{
	char *subs[BP_CLUSTER_MAX_NODES];
	struct bp_cluster_buf b = {0};
	int n;

	memset(c, 0, sizeof *c);
	c->control = -1;
	bp_map_init(&c->flow_of);
	bp_map_init(&c->pair_of);
	bp_map_init(&c->named);
	if (single && has_metadata(dir)) {
		n = (subs[0] = strdup(dir)) ? 1 : -1;
		if (n < 0)
			errno = ENOMEM;
	} else {
		n = list_traces(dir, subs, BP_CLUSTER_MAX_NODES);
	}
	if (n < 0) {
		bp_cli_error("%s: %s", dir, strerror(errno));
		return -1;
	}
	if (n > BP_CLUSTER_MAX_NODES) {
		bp_cli_error("%s: %d node traces, more than the %d beamprobe reads "
			     "as one cluster; none read (move some out, or read "
			     "each DIR/<node> on its own)", dir, n,
			     BP_CLUSTER_MAX_NODES);
		return -1;
	}
	if (n == 0) {
		bp_cli_error("%s: no node traces in it (subdirectories with a "
			     "metadata file, as a cluster session writes them)",
			     dir);
		return -1;
	}
	c->dir = strdup(dir);
	for (int i = 0; i < n; i++) {
		struct bp_cnode *nd = &c->nodes[c->n];
		struct bp_reader r;
		const char *name;

		nd->dir = subs[i];
		c->n++;
		if (bp_reader_open(&r, nd->dir, BP_READER_QUIET |
						     BP_READER_UNPRIMED) != 0) {
			bp_cli_error("%s: cannot read the trace", nd->dir);
			bp_cluster_close(c);
			return -1;
		}
		name = bp_meta_env(&r.meta, "node");
		nd->name = strdup(name ? name : strrchr(nd->dir, '/') + 1);
		nd->wall_ns = r.meta.offset_ns;
		/* Resolved below, once every node's name is known. */
		if (!c->control_name &&
		    (name = bp_meta_env(&r.meta, "cluster_control")))
			c->control_name = strdup(name);
		if (add_listed(c, bp_meta_env(&r.meta, "cluster_nodes"))) {
			bp_reader_close(&r);
			bp_cli_error("%s: out of memory", nd->dir);
			bp_cluster_close(c);
			return -1;
		}
		bp_reader_close(&r);
		if (!nd->name) {
			bp_cluster_close(c);
			return -1;
		}
	}
	drop_traced(c);
	if (c->control_name)
		c->control = node_index(c, c->control_name,
					strlen(c->control_name));
	/* Ids need every node's name first; clocks the control node's. */
	for (unsigned i = 0; i < c->n; i++) {
		struct bp_reader r;
		const char *lost;

		if (bp_reader_open(&r, c->nodes[i].dir, BP_READER_QUIET |
							      BP_READER_UNPRIMED) == 0) {
			parse_ids(c, &c->nodes[i], bp_meta_env(&r.meta, "dist_ids"));
			read_clock(c, i, &r.meta);
			lost = bp_meta_env(&r.meta, "cluster_lost");
			if (lost && !(c->nodes[i].lost = strdup(lost))) {
				bp_reader_close(&r);
				bp_cli_error("%s: out of memory", dir);
				bp_cluster_close(c);
				return -1;
			}
			bp_reader_close(&r);
		}
	}
	for (unsigned i = 0; i < c->n; i++)
		if (bp_cluster_read_node(c, i, &b) != 0) {
			free(b.p);
			bp_cli_error("%s: out of memory", c->nodes[i].dir);
			bp_cluster_close(c);
			return -1;
		}
	free(b.p);
	if (bp_cluster_match(c) != 0 || bp_cluster_solve(c) != 0) {
		bp_cli_error("%s: out of memory", dir);
		bp_cluster_close(c);
		return -1;
	}
	for (unsigned k = 0; k < c->nmissing; k++) {
		bp_cli_error("%s: node %s ran the session (env cluster_nodes) "
			     "but its trace %s/ is not here: its events are "
			     "missing; %" PRIu64 " send%s to it counted as not "
			     "received", dir, c->missing[k], c->missing[k],
			     c->missing_sends[k],
			     c->missing_sends[k] == 1 ? "" : "s");
		c->problems++;
	}
	for (unsigned i = 0; i < c->n; i++)
		if (c->nodes[i].lost) {
			bp_cli_error("%s: node %s was lost mid-session (env "
				     "cluster_lost: seconds in, reason: %s): "
				     "its session ended there and its trace "
				     "stops at that point",
				     dir, c->nodes[i].name, c->nodes[i].lost);
			c->problems++;
		}
	return 0;
}

uint32_t bp_cluster_pair_of(const struct bp_cluster *c, unsigned node,
			    const struct bp_event *e)
{
	uint32_t f;

	if (e->id != BP_EV_SEND && e->id != BP_EV_SEND_DEAD &&
	    e->id != BP_EV_RECEIVE)
		return 0;
	f = bp_map_get(&c->pair_of, bp_cluster_ev_key(node, e->stream, e->off));
	return f == BP_MAP_NONE ? 0 : f;
}

uint32_t bp_cluster_flow_of(const struct bp_cluster *c, unsigned node,
			    const struct bp_event *e)
{
	uint32_t f;

	if (e->id != BP_EV_SEND && e->id != BP_EV_SEND_DEAD &&
	    e->id != BP_EV_RECEIVE)
		return 0;
	f = bp_map_get(&c->flow_of, bp_cluster_ev_key(node, e->stream, e->off));
	return f == BP_MAP_NONE ? 0 : f;
}

void bp_cluster_close(struct bp_cluster *c)
{
	for (unsigned i = 0; i < c->n; i++) {
		free(c->nodes[i].name);
		free(c->nodes[i].dir);
		free(c->nodes[i].lost);
	}
	free(c->sends);
	free(c->recvs);
	free(c->flows);
	free(c->pairs);
	free(c->dir);
	free(c->control_name);
	for (unsigned k = 0; k < c->nmissing; k++)
		free(c->missing[k]);
	bp_map_free(&c->flow_of);
	bp_map_free(&c->pair_of);
	bp_map_free(&c->named);
	memset(c, 0, sizeof *c);
	c->control = -1;
}
