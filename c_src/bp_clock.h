/* bp_clock.h -- the trace clock: CLOCK_MONOTONIC nanoseconds, read cheaply.
 *
 * On x86-64, events are stamped from the TSC scaled to nanoseconds by a
 * mapping calibrated against CLOCK_MONOTONIC (~11 ns per read on the
 * project's machine instead of ~26 ns for clock_gettime) when the TSC can
 * be trusted:
 *   - the kernel's clocksource is "tsc" (invariant and synchronised
 *     across cores, or the kernel would not use it); or
 *   - the clocksource is "kvm-clock" (a guest: that clock is itself the
 *     TSC, scaled by the hypervisor's per-CPU parameters), the CPU says
 *     its TSC is invariant (constant_tsc and nonstop_tsc), and at load a
 *     thread pinned to each CPU of the process in turn finds the mapping
 *     within 2 us of CLOCK_MONOTONIC on every one (bp_clock.c).
 * BEAMPROBE_CLOCK=monotonic in the VM's environment turns the TSC off.
 * The mapping is re-anchored to CLOCK_MONOTONIC about once a second by the
 * collector threads, so it never drifts from the clock the metadata's
 * offset is computed for; a re-anchoring that finds the mapping more than
 * BP_CLOCK_JUMP_NS off (the TSC jumped) counts a jump and turns the TSC
 * off for good (the streams' timestamps are clamped never to go back).
 * Elsewhere the clock is clock_gettime(CLOCK_MONOTONIC).  Which one is in
 * use: beamprobe_nif:hub_stats(), `clock'.
 *
 * Readers are wait-free (a sequence counter; a read that finds the
 * mapping mid-write a few times is clock_gettime's): any thread.
 */
#ifndef BP_CLOCK_H
#define BP_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

struct bp_clock {
	_Atomic uint32_t seq;  /* odd while the mapping is being written */
	_Atomic int use_tsc;   /* 1: the TSC mapping; 0: clock_gettime */
	/* Re-anchorings that found the mapping more than BP_CLOCK_JUMP_NS
	 * off CLOCK_MONOTONIC (the TSC jumped, e.g. the guest moved): the
	 * clock is clock_gettime from the first one on. */
	_Atomic uint64_t jumps;
	_Atomic uint64_t c0;   /* TSC at the anchor */
	_Atomic uint64_t t0;   /* CLOCK_MONOTONIC ns at the anchor */
	_Atomic uint64_t mult; /* ns per TSC tick, 32.32 fixed point */
};

extern struct bp_clock bp_clock;

static inline uint64_t bp_clock_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static inline uint64_t bp_clock_ticks(void)
{
	return __builtin_ia32_rdtsc();
}
#else
static inline uint64_t bp_clock_ticks(void)
{
	return 0;
}
#endif

/* TSC value c in ns by the mapping (c0, t0, mult); t0 before c0. */
static inline uint64_t bp_clock_map(uint64_t c, uint64_t c0, uint64_t t0,
				    uint64_t mult)
{
	if (c < c0)
		return t0;
	return t0 + (uint64_t)(((unsigned __int128)(c - c0) * mult) >> 32);
}

/* Reads of the mapping that may find it being rewritten before bp_now
 * gives up on it for this read. */
#define BP_CLOCK_READ_TRIES 8

/* One read of the mapping: 1 with the time in *ns if it was not being
 * rewritten (the sequence even and unchanged across the read). */
static inline int bp__clock_try(uint64_t *ns)
{
	uint32_t s1, s2;
	uint64_t c0, t0, mult;

	/* Acquire loads (plain moves on x86): the second load of the
	 * sequence cannot come before them. */
	s1 = atomic_load_explicit(&bp_clock.seq, memory_order_acquire);
	c0 = atomic_load_explicit(&bp_clock.c0, memory_order_acquire);
	t0 = atomic_load_explicit(&bp_clock.t0, memory_order_acquire);
	mult = atomic_load_explicit(&bp_clock.mult, memory_order_acquire);
	s2 = atomic_load_explicit(&bp_clock.seq, memory_order_relaxed);
	if (__builtin_expect(s1 != s2 || (s1 & 1), 0))
		return 0;
	*ns = bp_clock_map(bp_clock_ticks(), c0, t0, mult);
	return 1;
}

/* bp_now when its first read found the mapping being rewritten: up to
 * BP_CLOCK_READ_TRIES - 1 more, then clock_gettime (bp_clock.c). */
uint64_t bp__clock_now_contended(void);

/* The trace clock now, in ns.  Any thread, lock-free and wait-free: a
 * reader never waits for the writer of the mapping.  A writer preempted
 * between its two sequence stores would otherwise keep every scheduler
 * that stamps an event spinning until the kernel ran it again; after
 * BP_CLOCK_READ_TRIES reads that find the mapping mid-write this read is
 * clock_gettime's, which the mapping is anchored to (within 2 us; the
 * streams' timestamps are clamped never to go back).  Inline: one read;
 * the retries are out of line. */
static inline uint64_t bp_now(void)
{
	uint64_t ns;

	if (!atomic_load_explicit(&bp_clock.use_tsc, memory_order_relaxed))
		return bp_clock_mono();
	if (__builtin_expect(bp__clock_try(&ns), 1))
		return ns;
	return bp__clock_now_contended();
}

/* Decides TSC or clock_gettime and calibrates (~20 ms).  From load(). */
void bp_clock_init(void);

/* Largest disagreement of the mapping with CLOCK_MONOTONIC at a
 * re-anchoring that is still drift (the calibration's few ppm over a
 * second), not a jump. */
#define BP_CLOCK_JUMP_NS 50000

/* Re-anchors the mapping now (the same checks as bp_clock_maintain):
 * when a session starts, before its metadata's clock offset is taken, so
 * that a mapping left alone while no session ran (no collector to
 * re-anchor it) starts fresh.  Any thread. */
void bp_clock_reanchor(void);

/* Tests: moves the mapping by ns and makes the next bp_clock_maintain()
 * due (the last anchoring a second ago), as a jump of the TSC would. */
void bp_clock_test_skew(int64_t ns);

/* Tests: leaves the mapping's sequence odd (hold), as a writer preempted
 * mid-write would, or even again (!hold). */
void bp_clock_test_hold(int hold);

/* Re-anchors the mapping to CLOCK_MONOTONIC if the last re-anchoring is
 * older than a second.  Collector threads; cheap when nothing to do. */
void bp_clock_maintain(void);

#endif /* BP_CLOCK_H */
