/* bp_clock.c -- calibration and re-anchoring of the TSC trace clock (the
 * contract is in bp_clock.h). */
#define _GNU_SOURCE
#include "bp_clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bp_clock bp_clock;

static uint64_t base_c, base_t; /* first anchor: long baseline for mult */
static _Atomic uint64_t last_anchor; /* ns of the last re-anchoring */
static _Atomic int writing;

/* 1 if the first "flags" line of /proc/cpuinfo has `flag'. */
static int cpu_flag(const char *flag)
{
	char line[8192];
	size_t n = strlen(flag);
	int found = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "flags", 5) == 0) {
			for (char *q = line; (q = strstr(q, flag)); q += n)
				if (q[-1] == ' ' &&
				    (q[n] == ' ' || q[n] == '\n' || !q[n]))
					found = 1;
			break;
		}
	fclose(f);
	return found;
}

/* How far the TSC may be trusted: 0 no (clock_gettime); 1 the kernel's
 * clocksource is the TSC; 2 the clocksource is kvm-clock, which is itself
 * the TSC scaled by the hypervisor's parameters, on a CPU whose TSC is
 * invariant (constant_tsc, nonstop_tsc): trusted once tsc_in_step() has
 * found it in step on every CPU.  BEAMPROBE_CLOCK=monotonic: 0. */
static int tsc_trusted(void)
{
	char src[32] = "";
	const char *env = getenv("BEAMPROBE_CLOCK");
	FILE *f;

	if (env && strcmp(env, "monotonic") == 0)
		return 0;
	f = fopen("/sys/devices/system/clocksource/clocksource0/"
		  "current_clocksource",
		  "r");
	if (!f)
		return 0;
	if (!fgets(src, sizeof src, f))
		src[0] = '\0';
	fclose(f);
	src[strcspn(src, "\n")] = '\0';
	if (strcmp(src, "tsc") == 0)
		return 1;
	if (strcmp(src, "kvm-clock") == 0 && cpu_flag("constant_tsc") &&
	    cpu_flag("nonstop_tsc"))
		return 2;
	return 0;
}

/* Takes a (ticks, ns) pair with the smallest read window. */
static void sample(uint64_t *c, uint64_t *t)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 5; i++) {
		uint64_t a = bp_clock_ticks(), ns = bp_clock_mono(),
			 b = bp_clock_ticks();
		if (b - a < best) {
			best = b - a;
			*c = a + (b - a) / 2;
			*t = ns;
		}
	}
}

static void publish(uint64_t c0, uint64_t t0, uint64_t mult)
{
	uint32_t s = atomic_load_explicit(&bp_clock.seq, memory_order_relaxed);

	atomic_store_explicit(&bp_clock.seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&bp_clock.c0, c0, memory_order_relaxed);
	atomic_store_explicit(&bp_clock.t0, t0, memory_order_relaxed);
	atomic_store_explicit(&bp_clock.mult, mult, memory_order_relaxed);
	atomic_store_explicit(&bp_clock.seq, s + 2, memory_order_release);
}

/* ns per tick (32.32 fixed point) from the first anchor to (c, t). */
static uint64_t calibrated_mult(uint64_t c, uint64_t t)
{
	return (uint64_t)(((unsigned __int128)(t - base_t) << 32) /
			  (c - base_c));
}

/* The largest difference between CPUs of (TSC mapped to ns) - CLOCK_
 * MONOTONIC that still counts as in step: a few reads' windows. */
#define IN_STEP_NS 2000

struct step {
	uint64_t c0, t0, mult;
	int ok;
};

/* On a thread of its own, pinned to each CPU the process may run on in
 * turn (at most 256): the TSC mapped by (c0, t0, mult) against
 * CLOCK_MONOTONIC; ok if they differ by the same amount everywhere. */
static void *in_step_main(void *arg)
{
	struct step *st = arg;
	cpu_set_t all, one;
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	int seen = 0;

	if (sched_getaffinity(0, sizeof all, &all) != 0)
		return NULL;
	for (int cpu = 0; cpu < CPU_SETSIZE && seen < 256; cpu++) {
		uint64_t c, t;
		int64_t d;

		if (!CPU_ISSET(cpu, &all))
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof one, &one) != 0)
			return NULL;
		sample(&c, &t);
		d = (int64_t)bp_clock_map(c, st->c0, st->t0, st->mult) -
		    (int64_t)t;
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
		seen++;
	}
	st->ok = seen > 0 && hi - lo <= IN_STEP_NS;
	return NULL;
}

/* 1 if the TSC is in step on every CPU of the process (see in_step_main);
 * 0 if not, or if that cannot be checked. */
static int tsc_in_step(uint64_t c0, uint64_t t0, uint64_t mult)
{
	struct step st = {c0, t0, mult, 0};
	pthread_t th;

	if (pthread_create(&th, NULL, in_step_main, &st) != 0)
		return 0;
	pthread_join(th, NULL);
	return st.ok;
}

void bp_clock_init(void)
{
	uint64_t c1, t1;
	struct timespec pause = {0, 20000000};
	uint64_t mult;
	int trust;

	if (atomic_load(&bp_clock.use_tsc) || atomic_load(&bp_clock.jumps) ||
	    !(trust = tsc_trusted()) || !bp_clock_ticks())
		return; /* already done (upgrade), jumped, or clock_gettime */
	sample(&base_c, &base_t);
	nanosleep(&pause, NULL);
	sample(&c1, &t1);
	if (c1 <= base_c || t1 <= base_t)
		return;
	mult = calibrated_mult(c1, t1);
	if (trust == 2 && !tsc_in_step(c1, t1, mult))
		return;
	publish(c1, t1, mult);
	atomic_store(&last_anchor, t1);
	atomic_store(&bp_clock.use_tsc, 1);
}

void bp_clock_test_skew(int64_t ns)
{
	publish(atomic_load(&bp_clock.c0),
		atomic_load(&bp_clock.t0) + (uint64_t)ns,
		atomic_load(&bp_clock.mult));
	atomic_store(&last_anchor, bp_clock_mono() - 1000000000ull);
}

uint64_t bp__clock_now_contended(void)
{
	uint64_t ns;

	for (int tries = 1; tries < BP_CLOCK_READ_TRIES; tries++) {
#if defined(__x86_64__)
		__builtin_ia32_pause();
#endif
		if (bp__clock_try(&ns))
			return ns;
	}
	return bp_clock_mono();
}

void bp_clock_test_hold(int hold)
{
	uint32_t s = atomic_load(&bp_clock.seq);

	if (!!hold != !!(s & 1))
		atomic_store(&bp_clock.seq, s + 1);
}

/* Re-anchors the mapping to CLOCK_MONOTONIC now (force) or if the last
 * re-anchoring is older than a second; checks first that the current
 * mapping still puts this instant where CLOCK_MONOTONIC does, within
 * BP_CLOCK_JUMP_NS plus 100 ppm of the time since the last anchoring
 * (the calibration's drift, a few ppm here); further off, the TSC jumped:
 * counted, and clock_gettime from now on. */
static void anchor(int force)
{
	uint64_t c, t, last, m, slack;
	int expected = 0;

	if (!atomic_load(&bp_clock.use_tsc))
		return;
	t = bp_clock_mono();
	last = atomic_load(&last_anchor);
	if (!force && t - last < 1000000000ull)
		return;
	if (!atomic_compare_exchange_strong(&writing, &expected, 1))
		return; /* another thread is at it */
	sample(&c, &t);
	/* Where the current mapping puts that instant. */
	m = bp_clock_map(c, atomic_load(&bp_clock.c0),
			 atomic_load(&bp_clock.t0), atomic_load(&bp_clock.mult));
	slack = BP_CLOCK_JUMP_NS + (t > last ? t - last : 0) / 10000;
	if (m > t + slack || t > m + slack) {
		atomic_fetch_add(&bp_clock.jumps, 1);
		atomic_store(&bp_clock.use_tsc, 0);
		atomic_store(&writing, 0);
		return;
	}
	if (c > base_c && t > base_t)
		publish(c, t, calibrated_mult(c, t));
	atomic_store(&last_anchor, t);
	atomic_store(&writing, 0);
}

void bp_clock_maintain(void)
{
	anchor(0);
}

void bp_clock_reanchor(void)
{
	anchor(1);
}
