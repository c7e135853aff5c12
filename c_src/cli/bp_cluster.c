/* bp_cluster.c -- a directory of node traces read as one (bp_cluster.h):
 * open, read the message events, match sends to receives (the clock
 * offsets are solved by bp_cluster_solve(), cmd_cluster.c).
 */
#include "bp_cluster.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../bp_pid_text.h"
#include "bp_cli.h"

#define INF BP_CLUSTER_INF

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
static int dest_index(const struct bp_cluster *c, const char *name, size_t n)
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
			nd->id_node[nd->nids] =
				dest_index(c, eq + 1, (size_t)(comma - eq - 1));
			nd->nids++;
		}
		s = *comma ? comma + 1 : comma;
	}
}

static int node_of_num(const struct bp_cnode *nd, int self, long num)
{
	if (num == 0)
		return self;
	for (unsigned i = 0; i < nd->nids; i++)
		if (nd->id_num[i] == num)
			return nd->id_node[i];
	return -1;
}

/* A growable scratch buffer. */
struct buf {
	char *p;
	size_t n, cap;
};

static int buf_put(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *p = realloc(b->p, cap);

		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/* Hash of the message text with every `<N.' (pids, #Ref<, #Port<) made
 * global: N replaced by the index of the node it names here. */
static uint64_t norm_hash(const struct bp_cnode *nd, int self, const char *s,
			  size_t n, struct buf *b)
{
	size_t i = 0, start = 0;

	b->n = 0;
	while (i < n) {
		if (s[i] == '<' && i + 1 < n && isdigit((unsigned char)s[i + 1])) {
			size_t j = i + 1;
			long num = 0;

			while (j < n && isdigit((unsigned char)s[j]) && j - i < 10)
				num = num * 10 + (s[j++] - '0');
			if (j < n && s[j] == '.') {
				char tmp[24];
				int node = node_of_num(nd, self, num);
				int k = node >= 0
						? snprintf(tmp, sizeof tmp, "<@%d", node)
						: snprintf(tmp, sizeof tmp, "<?%ld@%d",
							   num, self);

				if (buf_put(b, s + start, i - start) ||
				    buf_put(b, tmp, (size_t)k))
					return bp_hash_bytes(s, n);
				start = i = j;
				continue;
			}
		}
		i++;
	}
	if (buf_put(b, s + start, n - start))
		return bp_hash_bytes(s, n);
	/* The first BP_CLUSTER_MSG_PREFIX bytes only: a text cut by the
	 * capture limits is cut at another place on each node when the node
	 * numbers inside it differ in length. */
	return bp_hash_bytes(b->p, b->n < BP_CLUSTER_MSG_PREFIX
					   ? b->n : BP_CLUSTER_MSG_PREFIX);
}

static uint64_t msg_key(int kind, int dnode, const char *ident, size_t n,
			uint64_t mh)
{
	uint64_t k = bp_hash_u64(mh ^ bp_hash_u64(bp_hash_bytes(ident, n) ^
						 ((uint64_t)kind << 60) ^
						 ((uint64_t)(unsigned)dnode << 48)));
	return k ? k : 1;
}

static int push(struct bp_cmsg **a, uint32_t *n, uint32_t *cap,
		const struct bp_cmsg *m)
{
	if (*n == *cap) {
		uint32_t nc = *cap ? *cap * 2 : 1024;
		struct bp_cmsg *p = realloc(*a, nc * sizeof **a);

		if (!p)
			return -1;
		*a = p;
		*cap = nc;
	}
	(*a)[(*n)++] = *m;
	return 0;
}

/* "N.S" of "<X.N.S>" (s at '<'), or 0. */
static size_t pid_ident(const char *s, size_t n, const char **id, long *x)
{
	const char *dot, *end;
	char *e;

	if (n < 7 || s[0] != '<' || !isdigit((unsigned char)s[1]))
		return 0;
	*x = strtol(s + 1, &e, 10);
	dot = e;
	if (dot >= s + n || *dot != '.')
		return 0;
	end = memchr(dot, '>', (size_t)(s + n - dot));
	if (!end || end != s + n - 1)
		return 0;
	*id = dot + 1;
	return (size_t)(end - dot - 1);
}

/* Names of processes as they change (process and register events). */
struct names {
	struct bp_map of;     /* pid -> string id */
	struct bp_map last;   /* pid -> the last name it had, kept after an
				 unregister */
	struct bp_strtab tab;
};

static const char *name_in(const struct names *nm, const struct bp_map *m,
			   uint64_t pid, size_t *n)
{
	uint32_t id = bp_map_get(m, pid);
	const struct bp_str *s;

	if (id == BP_MAP_NONE)
		return NULL;
	s = bp_strtab_get(&nm->tab, id);
	*n = s->len;
	return s->s;
}

/* Hash of a name on node n (c->named). */
static uint64_t name_hash(int n, const char *s, size_t len)
{
	return bp_hash_u64(bp_hash_bytes(s, len) ^ (uint64_t)(unsigned)n);
}

/* 0, or -1 out of memory. */
static int set_name(struct bp_cluster *c, int node, struct names *nm,
		    uint64_t pid, const char *s, size_t n)
{
	uint32_t id;

	/* `undefined': no name known here (the tracer's first sight of a
	 * process), not an unregistering. */
	if (n == 0 || (n == 9 && memcmp(s, "undefined", 9) == 0))
		return 0;
	id = bp_strtab_intern(&nm->tab, s, n);
	if (id == BP_MAP_NONE || bp_map_put(&nm->of, pid, id) ||
	    bp_map_put(&nm->last, pid, id) ||
	    bp_map_put(&c->named, name_hash(node, s, n), 1))
		return -1;
	return 0;
}

static int read_node(struct bp_cluster *c, unsigned idx, struct buf *b)
{
	struct bp_cnode *nd = &c->nodes[idx];
	struct bp_reader r;
	const struct bp_event *e;
	struct names nm;
	uint64_t *last = NULL; /* per stream: ts of its last record read,
				  process and drops records aside */
	uint32_t nlast = 0, first_recv = c->nrecvs;
	int rc = 0;

	if (bp_reader_open(&r, nd->dir, 0) != 0)
		return -1;
	memset(&nm, 0, sizeof nm);
	bp_map_init(&nm.of);
	bp_map_init(&nm.last);
	bp_strtab_init(&nm.tab);
	while ((e = bp_reader_next(&r)) && rc == 0) {
		struct bp_cmsg m;
		const char *id;
		size_t idn;
		long x;

		if (e->id != BP_EV_PROCESS && e->id != BP_EV_DROPS)
			nd->events++; /* as info and stats count them */
		memset(&m, 0, sizeof m);
		m.ts = e->ts;
		m.pid = e->pid;
		m.off = e->off;
		m.stream = e->stream;
		m.node = (uint16_t)idx;
		if (e->stream >= nlast) {
			uint32_t nn = e->stream + 16;
			uint64_t *l = realloc(last, nn * sizeof *l);

			if (!l) {
				rc = -1;
				break;
			}
			memset(l + nlast, 0, (nn - nlast) * sizeof *l);
			last = l;
			nlast = nn;
		}
		m.before = last[e->stream];
		if (e->id != BP_EV_PROCESS && e->id != BP_EV_DROPS)
			last[e->stream] = e->ts;
		switch (e->id) {
		case BP_EV_PROCESS:
			rc = set_name(c, (int)idx, &nm, e->pid,
				      e->str[BP_FLD(PROCESS, name)],
				      e->len[BP_FLD(PROCESS, name)]);
			break;
		case BP_EV_REGISTER:
			rc = set_name(c, (int)idx, &nm, e->pid,
				      e->str[BP_FLD(REGISTER, name)],
				      e->len[BP_FLD(REGISTER, name)]);
			break;
		case BP_EV_UNREGISTER:
			bp_map_del(&nm.of, e->pid);
			break;
		case BP_EV_SEND:
		case BP_EV_SEND_DEAD: {
			const char *to = e->str[BP_FLD(SEND, to_text)];
			size_t ton = e->len[BP_FLD(SEND, to_text)];
			uint64_t mh = norm_hash(nd, (int)idx,
						e->str[BP_FLD(SEND, message)],
						e->len[BP_FLD(SEND, message)], b);
			int dn;

			if ((idn = pid_ident(to, ton, &id, &x))) {
				dn = node_of_num(nd, (int)idx, x);
				if (dn < 0) {
					c->outside_sends++;
					break;
				}
				m.key = msg_key(0, dn, id, idn, mh);
			} else if (ton > 2 && to[0] == '{' && to[ton - 1] == '}') {
				const char *comma = NULL;

				for (size_t i = ton - 1; i > 0; i--)
					if (to[i] == ',') {
						comma = to + i;
						break;
					}
				if (!comma)
					break;
				dn = dest_index(c, comma + 1,
						(size_t)(to + ton - 1 - comma - 1));
				if (dn < 0) {
					c->outside_sends++;
					break;
				}
				m.key = msg_key(1, dn, to + 1,
						(size_t)(comma - to - 1), mh);
				m.name = name_hash(dn, to + 1,
						   (size_t)(comma - to - 1));
			} else if (ton > 6 && memcmp(to, "#Ref<", 5) == 0 &&
				   isdigit((unsigned char)to[5])) {
				/* An alias (gen_server replies): the receiver
				 * is not named; the node and the message are. */
				dn = node_of_num(nd, (int)idx, strtol(to + 5, NULL, 10));
				if (dn < 0) {
					c->outside_sends++;
					break;
				}
				m.key = msg_key(2, dn, "", 0, mh);
			} else if (ton > 0 && to[0] != '<' && to[0] != '#') {
				dn = (int)idx;
				m.key = msg_key(1, dn, to, ton, mh);
				m.name = name_hash(dn, to, ton);
			} else {
				break;
			}
			m.dnode = (uint16_t)dn;
			m.mh = mh;
			rc = push(&c->sends, &c->nsends, &c->capsends, &m);
			break;
		}
		case BP_EV_RECEIVE: {
			char t[BP_PID_TEXT];
			size_t tn, nn;
			const char *name;
			uint64_t mh;

			if (!e->pid || (e->pid & 0xf) != 0x3)
				break; /* ports and unknown keys */
			tn = bp_pid_text(e->pid, t);
			mh = norm_hash(nd, (int)idx,
				       e->str[BP_FLD(RECEIVE, message)],
				       e->len[BP_FLD(RECEIVE, message)], b);
			if (!(idn = pid_ident(t, tn, &id, &x)))
				break;
			m.key = msg_key(0, (int)idx, id, idn, mh);
			m.mh = mh;
			if ((name = name_in(&nm, &nm.of, e->pid, &nn)))
				m.key2 = msg_key(1, (int)idx, name, nn, mh);
			m.key3 = msg_key(2, (int)idx, "", 0, mh);
			m.dnode = (uint16_t)idx;
			rc = push(&c->recvs, &c->nrecvs, &c->caprecvs, &m);
			break;
		}
		default:
			break;
		}
	}
	/* A receive by a process not named then: the last name its trace
	 * gives it (a follow session names its processes at its end). */
	for (uint32_t i = first_recv; i < c->nrecvs && rc == 0; i++) {
		struct bp_cmsg *m = &c->recvs[i];
		const char *name;
		size_t nn;

		if (!m->key2 && (name = name_in(&nm, &nm.last, m->pid, &nn)))
			m->key2 = msg_key(1, (int)idx, name, nn, m->mh);
	}
	free(last);
	c->problems += r.diag.problems;
	bp_map_free(&nm.of);
	bp_map_free(&nm.last);
	bp_strtab_free(&nm.tab);
	bp_reader_close(&r);
	return rc;
}

/* Corrected time of a message with the recorded offsets. */
static int64_t cts(const struct bp_cluster *c, const struct bp_cmsg *m)
{
	return bp_cluster_add(bp_cluster_ts(m->ts), c->nodes[m->node].rec_off);
}

static const struct bp_cluster *sort_c;

static int cmp_send(const void *a, const void *b)
{
	const struct bp_cmsg *x = a, *y = b;
	int64_t tx, ty;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	tx = cts(sort_c, x);
	ty = cts(sort_c, y);
	return tx < ty ? -1 : tx > ty;
}

static int cmp_recv(const void *a, const void *b)
{
	int64_t tx = cts(sort_c, a), ty = cts(sort_c, b);

	return tx < ty ? -1 : tx > ty;
}

/* First send with key k at or after the cursor; its index or -1. */
static int64_t head(struct bp_cluster *c, struct bp_map *cur, uint64_t k)
{
	uint32_t p = bp_map_get(cur, k);

	if (p == BP_MAP_NONE) {
		uint32_t lo = 0, hi = c->nsends;

		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;

			if (c->sends[mid].key < k)
				lo = mid + 1;
			else
				hi = mid;
		}
		p = lo;
		(void)bp_map_put(cur, k, p);
	}
	if (p < c->nsends && c->sends[p].key == k)
		return p;
	return -1;
}

static int64_t width(const struct bp_cnode *n)
{
	return n->has_clock ? bp_cluster_sub(n->rec_hi, n->rec_lo) : INF / 4;
}

static int match(struct bp_cluster *c)
{
	struct bp_map cur;

	/* A send to a name no process has in the receiving node's trace
	 * (a follow session's trace names none): its receiver is known by
	 * its node only, as for an alias. */
	for (uint32_t i = 0; i < c->nsends; i++) {
		struct bp_cmsg *s = &c->sends[i];

		if (s->name && bp_map_get(&c->named, s->name) == BP_MAP_NONE)
			s->key = msg_key(2, s->dnode, "", 0, s->mh);
	}
	sort_c = c;
	if (c->nsends)
		qsort(c->sends, c->nsends, sizeof *c->sends, cmp_send);
	if (c->nrecvs)
		qsort(c->recvs, c->nrecvs, sizeof *c->recvs, cmp_recv);
	bp_map_init(&cur);
	for (uint32_t i = 0; i < c->nrecvs; i++) {
		struct bp_cmsg *r = &c->recvs[i];
		int64_t best = -1;
		uint64_t keys[3] = {r->key, r->key2, r->key3};

		for (int k = 0; k < 3; k++) {
			int64_t p;
			struct bp_cmsg *s;

			if (!keys[k] || (p = head(c, &cur, keys[k])) < 0)
				continue;
			s = &c->sends[p];
			if (cts(c, s) >
			    bp_cluster_add(bp_cluster_add(cts(c, r),
						  BP_CLUSTER_MATCH_SLACK_NS),
					   bp_cluster_add(width(&c->nodes[s->node]),
							  width(&c->nodes[r->node]))))
				continue;
			if (best < 0 || cts(c, s) < cts(c, &c->sends[best]))
				best = p;
		}
		if (best < 0)
			continue;
		(void)bp_map_put(&cur, c->sends[best].key, (uint32_t)best + 1);
		if (c->npairs == c->cappairs) {
			uint32_t nc = c->cappairs ? c->cappairs * 2 : 1024;
			struct bp_cflow *f = realloc(c->pairs, nc * sizeof *f);

			if (!f) {
				bp_map_free(&cur);
				return -1;
			}
			c->pairs = f;
			c->cappairs = nc;
		}
		c->pairs[c->npairs].send = (uint32_t)best;
		c->pairs[c->npairs].recv = i;
		c->npairs++;
		if (bp_map_put(&c->pair_of,
			       bp_cluster_ev_key(c->sends[best].node,
						 c->sends[best].stream,
						 c->sends[best].off),
			       c->npairs) ||
		    bp_map_put(&c->pair_of,
			       bp_cluster_ev_key(r->node, r->stream, r->off),
			       c->npairs)) {
			bp_map_free(&cur);
			return -1;
		}
		if (c->sends[best].node == r->node) {
			c->local_matched++;
			continue;
		}
		if (c->nflows == c->capflows) {
			uint32_t nc = c->capflows ? c->capflows * 2 : 1024;
			struct bp_cflow *f = realloc(c->flows, nc * sizeof *f);

			if (!f) {
				bp_map_free(&cur);
				return -1;
			}
			c->flows = f;
			c->capflows = nc;
		}
		c->flows[c->nflows].send = (uint32_t)best;
		c->flows[c->nflows].recv = i;
		c->flows[c->nflows].late = 0;
		c->flows[c->nflows].rev = 0;
		c->nflows++;
		c->sends[best].flow = c->nflows;
		r->flow = c->nflows;
	}
	bp_map_free(&cur);
	for (uint32_t i = 0; i < c->nsends; i++) {
		const struct bp_cmsg *s = &c->sends[i];

		if (s->flow || s->dnode == s->node)
			continue;
		c->unmatched_sends++;
		if (s->dnode >= c->n)
			c->missing_sends[s->dnode - c->n]++;
		if (bp_map_put(&c->flow_of,
			       bp_cluster_ev_key(s->node, s->stream, s->off),
			       BP_CLUSTER_NO_FLOW))
			return -1;
	}
	for (uint32_t i = 0; i < c->nflows; i++) {
		const struct bp_cmsg *s = &c->sends[c->flows[i].send];
		const struct bp_cmsg *r = &c->recvs[c->flows[i].recv];

		if (bp_map_put(&c->flow_of,
			       bp_cluster_ev_key(s->node, s->stream, s->off),
			       i + 1) ||
		    bp_map_put(&c->flow_of,
			       bp_cluster_ev_key(r->node, r->stream, r->off),
			       i + 1))
			return -1;
	}
	return 0;
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
	struct buf b = {0};
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

		if (bp_reader_open(&r, c->nodes[i].dir, BP_READER_QUIET |
							      BP_READER_UNPRIMED) == 0) {
			parse_ids(c, &c->nodes[i], bp_meta_env(&r.meta, "dist_ids"));
			read_clock(c, i, &r.meta);
			bp_reader_close(&r);
		}
	}
	for (unsigned i = 0; i < c->n; i++)
		if (read_node(c, i, &b) != 0) {
			free(b.p);
			bp_cli_error("%s: out of memory", c->nodes[i].dir);
			bp_cluster_close(c);
			return -1;
		}
	free(b.p);
	if (match(c) != 0 || bp_cluster_solve(c) != 0) {
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
