/* test_membar.c -- the asymmetric barriers of c_src/bp_membar.h, by the
 * store-buffering litmus test they exist for.
 *
 * Two threads on two CPUs, in lockstep rounds.  The producer sets its busy
 * flag the way the hot path does (bp_membar_busy) and reads the live
 * flag; the remover stores the live flag (seq_cst, as bp_hub_remove does),
 * runs its barrier (bp_membar_sync) and reads the busy flag.  If both read
 * 0, a producer would use a member its remover has already freed: the
 * outcome must never occur.  A control run with the remover's barrier
 * left out must show it (on x86 the producer's store waits in its store
 * buffer), else the test could not tell a working barrier from none.
 * What it cannot tell: the membarrier from any delay of microseconds on
 * the remover's side (the producer's store buffer drains by then in
 * practice); the guarantee is the kernel's (membarrier(2)).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "bp_membar.h"
#include "tap.h"

enum mode { PROPER, CONTROL };

static _Atomic uint32_t busy, live;
static _Atomic uint32_t go, producer_done;
static int r_producer;
static enum mode mode;
static unsigned rounds;

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* The producer: round r starts when the remover publishes go = r. */
static void *producer(void *arg)
{
	(void)arg;
	pin(0);
	for (uint32_t r = 1; r <= rounds; r++) {
		while (atomic_load_explicit(&go, memory_order_acquire) != r)
			;
		bp_membar_busy(&busy);
		r_producer = (int)atomic_load_explicit(&live,
						       memory_order_relaxed);
		atomic_store_explicit(&producer_done, r, memory_order_release);
	}
	return NULL;
}

/* The remover, which also runs the rounds (two threads on two CPUs:
 * nobody else spins).  Returns the count of rounds where both read 0. */
static unsigned remover(void)
{
	unsigned forbidden = 0, seed = 12345;

	pin(1);
	for (uint32_t r = 1; r <= rounds; r++) {
		int r_remover;
		unsigned delay;

		atomic_store(&busy, 0);
		atomic_store(&live, 0);
		atomic_store_explicit(&go, r, memory_order_release);
		/* A varying head start for the producer, which sees go a
		 * cross-core transfer later: the two halves overlap in some
		 * rounds whatever that latency is. */
		seed = seed * 1103515245u + 12345u;
		delay = 40 + (seed >> 16) % 100;
		for (volatile unsigned i = 0; i < delay; i++)
			;
		atomic_store_explicit(&live, 1, memory_order_seq_cst);
		if (mode == PROPER)
			bp_membar_sync();
		r_remover = (int)atomic_load_explicit(&busy,
						      memory_order_relaxed);
		while (atomic_load_explicit(&producer_done,
					    memory_order_acquire) != r)
			;
		forbidden += !r_producer && !r_remover;
	}
	return forbidden;
}

/* Runs n rounds; returns how many ended with both reads 0. */
static unsigned run(enum mode m, unsigned n)
{
	pthread_t a;
	unsigned forbidden;

	mode = m;
	rounds = n;
	atomic_store(&go, 0);
	atomic_store(&producer_done, 0);
	pthread_create(&a, NULL, producer, NULL);
	forbidden = remover();
	pthread_join(a, NULL);
	return forbidden;
}

int main(void)
{
	unsigned n = 100000, bad;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (cpus < 2) {
		tap_skip("one CPU online: the litmus needs two");
		return tap_done();
	}
	if (!bp_membar_init()) {
		tap_skip("membarrier(PRIVATE_EXPEDITED) refused by this "
			 "kernel: beamprobe uses full barriers on both sides");
	} else {
		ok(bp_membar_fast, "membarrier registered: producers use a "
				   "plain store");
		bad = run(PROPER, n);
		is_u(bad, 0, "membarrier: no round where both missed the "
			     "other (%u rounds)", n);
		is_u(bp_membar_failures(), 0, "no membarrier call failed");
		/* The remover's fallback when the expedited call fails: the
		 * global membarrier (a grace period per round: few rounds). */
		bp_membar_test_refuse = 1;
		bad = run(PROPER, 200);
		bp_membar_test_refuse = 0;
		is_u(bad, 0, "expedited membarrier failing: no round where both "
			     "missed the other (200 rounds)");
		is_u(bp_membar_failures(), 200, "each failed call counted");
	}
	/* The fallback: a locked exchange on the producer's side. */
	bp_membar_fast = 0;
	bad = run(PROPER, n);
	is_u(bad, 0, "fence fallback: no round where both missed the other "
		     "(%u rounds)", n);
	/* The control: plain store, and no barrier on the remover's side. */
	bp_membar_fast = 1;
	bad = run(CONTROL, 4 * n);
	if (bad)
		ok(bad > 0, "control without the remover's barrier shows the "
			    "reordering (%u of %u rounds)", bad, 4 * n);
	else
		tap_skip("control: no reordering seen in %u rounds here; the "
			 "rounds above cannot show what the barrier prevents",
			 4 * n);
	return tap_done();
}
