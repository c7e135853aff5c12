/* bp_clock.c -- calibration and re-anchoring of the TSC trace clock (the
 * contract is in bp_clock.h). */
#include "bp_clock.h"

#include <stdio.h>
#include <string.h>

struct bp_clock bp_clock;

static uint64_t base_c, base_t; /* first anchor: long baseline for mult */
static _Atomic uint64_t last_anchor; /* ns of the last re-anchoring */
static _Atomic int writing;

static int tsc_trusted(void)
{
	char src[32] = "";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/"
			"current_clocksource",
			"r");

	if (!f)
		return 0;
	if (!fgets(src, sizeof src, f))
		src[0] = '\0';
	fclose(f);
	return strncmp(src, "tsc", 3) == 0 && (src[3] == '\n' || !src[3]);
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

void bp_clock_init(void)
{
	uint64_t c1, t1;
	struct timespec pause = {0, 20000000};

	if (bp_clock.use_tsc || !tsc_trusted() || !bp_clock_ticks())
		return; /* already done (upgrade), or clock_gettime */
	sample(&base_c, &base_t);
	nanosleep(&pause, NULL);
	sample(&c1, &t1);
	if (c1 <= base_c || t1 <= base_t)
		return;
	publish(c1, t1,
		(uint64_t)(((unsigned __int128)(t1 - base_t) << 32) /
			   (c1 - base_c)));
	atomic_store(&last_anchor, t1);
	bp_clock.use_tsc = 1;
}

void bp_clock_maintain(void)
{
	uint64_t c, t;
	int expected = 0;

	if (!bp_clock.use_tsc)
		return;
	t = bp_clock_mono();
	if (t - atomic_load(&last_anchor) < 1000000000ull)
		return;
	if (!atomic_compare_exchange_strong(&writing, &expected, 1))
		return; /* another collector is at it */
	sample(&c, &t);
	if (c > base_c && t > base_t)
		publish(c, t,
			(uint64_t)(((unsigned __int128)(t - base_t) << 32) /
				   (c - base_c)));
	atomic_store(&last_anchor, t);
	atomic_store(&writing, 0);
}
