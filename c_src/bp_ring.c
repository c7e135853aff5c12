/* bp_ring.c -- slow paths of the SPSC trace ring: eviction and reading.
 * The algorithm and the memory-ordering contract are in bp_ring.h. */
#include "bp_ring.h"

void bp_ring_init(struct bp_ring *r, uint8_t *data, uint64_t cap,
		  int drop_oldest)
{
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	atomic_init(&r->evicted, 0);
	r->cached_tail = 0;
	r->reserved_at = 0;
	r->reserved_pad = 0;
	r->head_off = 0;
	r->reserved_off = 0;
	r->drop_oldest = (uint8_t)(drop_oldest != 0);
	r->cap = cap & ~(uint64_t)7u;
	r->data = data;
}

static uint32_t rec_total(const struct bp_ring *r, uint64_t at, uint32_t *len)
{
	const uint8_t *p = r->data + at % r->cap;
	uint32_t total;

	memcpy(&total, p, 4);
	memcpy(len, p + 4, 4);
	return total;
}

void bp__ring_evict(struct bp_ring *r, uint64_t need)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t n = 0;

	while (tail < head && head + need - tail > r->cap) {
		uint32_t len, total = rec_total(r, tail, &len);
		if (total < BP_RING_HDR || total % 8 || total > r->cap) {
			tail = head; /* cannot happen; recover by emptying */
			break;
		}
		if (len != BP_RING_PAD && !(len & BP_RING_AUX))
			n++;
		tail += total;
	}
	r->cached_tail = tail;
	atomic_store_explicit(&r->tail, tail, memory_order_release);
	if (n)
		atomic_fetch_add_explicit(&r->evicted, n, memory_order_relaxed);
}

void bp_ring_read_begin(struct bp_ring *r, struct bp_ring_reader *rd)
{
	rd->r = r;
	rd->pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	rd->head = atomic_load_explicit(&r->head, memory_order_acquire);
}

const uint8_t *bp_ring_read_next(struct bp_ring_reader *rd, uint32_t *len)
{
	struct bp_ring *r = rd->r;

	while (rd->pos < rd->head) {
		uint32_t l, total = rec_total(r, rd->pos, &l);
		if (l != BP_RING_PAD)
			l &= ~BP_RING_AUX;
		if (total < BP_RING_HDR || total % 8 || total > r->cap ||
		    (l != BP_RING_PAD && (uint64_t)l + BP_RING_HDR > total)) {
			rd->pos = rd->head;
			return NULL;
		}
		const uint8_t *p = r->data + rd->pos % r->cap + BP_RING_HDR;
		rd->pos += total;
		if (l == BP_RING_PAD)
			continue;
		*len = l;
		return p;
	}
	return NULL;
}

void bp_ring_read_end(struct bp_ring_reader *rd)
{
	atomic_store_explicit(&rd->r->tail, rd->pos, memory_order_release);
}
