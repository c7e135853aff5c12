/* bp_membar.h -- asymmetric memory barriers for the producers' busy flags.
 *
 * The hub and the sessions guard what producers use with a Dekker pair
 * (bp_hub.h, bp_session.h): a producer sets its busy flag and then reads
 * the live mask or the session state; a remover changes the mask or the
 * state and then waits until every busy flag reads 0.  Each side needs a
 * full barrier between its store and its load.  Producers run on every
 * traced event, removers a few times per session: so the producer's side
 * is a plain store and a compiler barrier, and the remover's side is
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running
 * thread of the process execute a full barrier before it returns (a thread
 * not running has passed one in the context switch).  Either a producer's
 * busy store is visible to the remover's reads that follow the membarrier,
 * or the producer's load comes after that barrier and sees the remover's
 * store (the argument of liburcu's and folly's asymmetric barriers).
 *
 * Where the kernel refuses membarrier (older than 4.14, a seccomp filter),
 * or the environment says BEAMPROBE_BARRIER=fence when the library loads,
 * bp_membar_init() leaves bp_membar_fast at 0 and both sides use a full
 * barrier (a locked exchange on the producer's side).
 */
#ifndef BP_MEMBAR_H
#define BP_MEMBAR_H

#include <stdatomic.h>
#include <stdint.h>

/* 1 once the process is registered for expedited private membarrier;
 * set by bp_membar_init() before any producer runs, never cleared. */
extern int bp_membar_fast;

/* Registers the process (once; again after a reload is harmless).
 * Returns bp_membar_fast. */
int bp_membar_init(void);

/* Producer: sets *busy to 1, ordered before the producer's later loads
 * against bp_membar_sync() on the remover's side. */
static inline void bp_membar_busy(_Atomic uint32_t *busy)
{
	if (__builtin_expect(bp_membar_fast, 1)) {
		atomic_store_explicit(busy, 1, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_exchange_explicit(busy, 1, memory_order_seq_cst);
	}
}

/* Remover: after storing what producers must see (seq_cst) and before
 * reading their busy flags.  Blocks for the kernel's round of barriers
 * (microseconds); control context only. */
void bp_membar_sync(void);

/* Number of membarrier calls that failed after registration (expected
 * 0; the remover then retries, falls back to the global membarrier, and
 * at last waits 10 ms: bp_membar.c). */
uint64_t bp_membar_failures(void);

/* Tests only (test/c/test_membar.c): while non-zero, every expedited
 * membarrier call fails, so that the fallback of bp_membar_sync runs. */
extern int bp_membar_test_refuse;

#endif
