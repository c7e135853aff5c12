/* bp_cluster_msg.c -- the message events of each node trace of a cluster
 * directory (bp_cluster_msg.h): sends and receives, each with the key
 * that identifies it across nodes (bp_cluster.h, "Message identity"):
 * the receiver (a pid, a registered name, or only its node) and the
 * message text with the node numbers inside it made global.
 */
#include "bp_cluster_msg.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bp_pid_text.h"

/* The node that number num names in node nd's pids, refs and ports (0:
 * nd itself, self), from its env dist_ids; -1 if unknown. */
static int node_of_num(const struct bp_cnode *nd, int self, long num)
{
	if (num == 0)
		return self;
	for (unsigned i = 0; i < nd->nids; i++)
		if (nd->id_num[i] == num)
			return nd->id_node[i];
	return -1;
}

/* A growable scratch buffer: n bytes more. */
static int buf_put(struct bp_cluster_buf *b, const char *s, size_t n)
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
			  size_t n, struct bp_cluster_buf *b)
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

uint64_t bp_cluster_msg_key(int kind, int dnode, const char *ident,
			    size_t n, uint64_t mh)
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

int bp_cluster_read_node(struct bp_cluster *c, unsigned idx,
			 struct bp_cluster_buf *b)
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
				m.key = bp_cluster_msg_key(0, dn, id, idn, mh);
			} else if (ton > 2 && to[0] == '{' && to[ton - 1] == '}') {
				const char *comma = NULL;

				for (size_t i = ton - 1; i > 0; i--)
					if (to[i] == ',') {
						comma = to + i;
						break;
					}
				if (!comma)
					break;
				dn = bp_cluster_dest_index(c, comma + 1,
						(size_t)(to + ton - 1 - comma - 1));
				if (dn < 0) {
					c->outside_sends++;
					break;
				}
				m.key = bp_cluster_msg_key(1, dn, to + 1,
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
				m.key = bp_cluster_msg_key(2, dn, "", 0, mh);
			} else if (memchr(to, '@', ton) &&
				   (dn = bp_cluster_dest_index(c, to, ton)) >= 0 &&
				   dn != (int)idx) {
				/* To another node of the session by its name:
				 * a spawn on it (spawn_request, erpc's call),
				 * the receiver not yet a pid when sent.  The
				 * node and the message are known. */
				m.key = bp_cluster_msg_key(2, dn, "", 0, mh);
			} else if (ton > 0 && to[0] != '<' && to[0] != '#') {
				dn = (int)idx;
				m.key = bp_cluster_msg_key(1, dn, to, ton, mh);
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
			m.key = bp_cluster_msg_key(0, (int)idx, id, idn, mh);
			m.mh = mh;
			if ((name = name_in(&nm, &nm.of, e->pid, &nn)))
				m.key2 = bp_cluster_msg_key(1, (int)idx, name,
							    nn, mh);
			m.key3 = bp_cluster_msg_key(2, (int)idx, "", 0, mh);
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
			m->key2 = bp_cluster_msg_key(1, (int)idx, name, nn,
						     m->mh);
	}
	free(last);
	c->problems += r.diag.problems;
	/* Read to its end: its losses, as stats tells them. */
	bp_reader_loss_report(&r, &nd->loss);
	bp_map_free(&nm.of);
	bp_map_free(&nm.last);
	bp_strtab_free(&nm.tab);
	bp_reader_close(&r);
	return rc;
}
