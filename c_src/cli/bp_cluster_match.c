/* bp_cluster_match.c -- sends matched with receives across a cluster
 * directory's node traces (bp_cluster_msg.h): pairs (same node or not)
 * and flows (across nodes), without trusting the recorded clock offsets
 * beyond their widths plus BP_CLUSTER_MATCH_SLACK_NS (bp_cluster.h).
 */
#include "bp_cluster_msg.h"

#include <stdlib.h>

#define INF BP_CLUSTER_INF

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

int bp_cluster_match(struct bp_cluster *c)
{
	struct bp_map cur;

	/* A send to a name no process has in the receiving node's trace
	 * (a follow session's trace names none): its receiver is known by
	 * its node only, as for an alias. */
	for (uint32_t i = 0; i < c->nsends; i++) {
		struct bp_cmsg *s = &c->sends[i];

		if (s->name && bp_map_get(&c->named, s->name) == BP_MAP_NONE)
			s->key = bp_cluster_msg_key(2, s->dnode, "", 0, s->mh);
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
