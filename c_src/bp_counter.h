/* bp_counter.h -- adding to a counter that one thread writes and others
 * only read (a slot's drop counts, a ring's evicted records).
 *
 * With a single writer, a relaxed load and store is exact: no other
 * thread's add can fall between them.  It is not a locked instruction: a
 * locked add (atomic_fetch_add) is a full barrier on x86, and on the
 * tracer's hot path it would wait for every store still in flight -- the
 * records just written into this and the other sessions' rings
 * (docs/performance/stops-24-28.md, "Where an extra session's ≈ 20 ns
 * go").  Readers see the count with relaxed loads.
 */
#ifndef BP_COUNTER_H
#define BP_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

/* *c += n; only c's one writer thread calls it. */
static inline void bp_counter_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c,
			      atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

#endif /* BP_COUNTER_H */
