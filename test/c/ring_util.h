/* ring_util.h -- what the ring's unit tests share (test_ring.c,
 * test_ring_parts.c): the payload pattern and the ring's counters. */
#ifndef RING_UTIL_H
#define RING_UTIL_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "bp_ring.h"


/* Payload byte i of the record with sequence number seq. */
static inline uint8_t pat(uint64_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + (seq >> 7) + (i >> 8) * 13u);
}

/* Index of the first byte of p[0..n) that differs from pat(seq, i), or n.
 * Bulk-checks one number per record instead of one per byte. */
static inline uint32_t first_diff(const uint8_t *p, uint32_t n, uint64_t seq)
{
	for (uint32_t i = 0; i < n; i++)
		if (p[i] != pat(seq, i))
			return i;
	return n;
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t ring_head(struct bp_ring *r)
{
	return atomic_load_explicit(&r->part[1].head, memory_order_relaxed);
}

static inline uint64_t ring_tail(struct bp_ring *r)
{
	return atomic_load_explicit(&r->part[1].tail, memory_order_relaxed);
}

static inline uint64_t ring_evicted(struct bp_ring *r)
{
	return atomic_load_explicit(&r->evicted, memory_order_relaxed);
}
#endif
