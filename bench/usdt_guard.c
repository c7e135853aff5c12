/* bench/usdt_guard.c -- `make bench' (bash bench/run.sh usdt): the cost of
 * the USDT hook per event when no tool is attached, measured on the real
 * inline hook (bp_usdt_event, c_src/bp_usdt.h) and the real semaphores
 * (the dtrace -G object), around a stand-in for an event's write (a
 * 64-byte record copied into a ring).  End-to-end figures in a VM cannot
 * resolve a few ns next to a ~500 ns traced call; this can.
 *
 * Prints ns per event for: the write alone, the write + hook of a session
 * without a usdt sink (one load and a branch), and the write + hook of a
 * session with a usdt sink for every kind (one more load: the probe's
 * semaphore).  Minimum of 7 interleaved rounds. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bp_usdt.h"
#include "beamprobe_probes.h"

static unsigned short zero;
#define SEM(n) ((volatile unsigned short *)&beamprobe_##n##_semaphore)
volatile unsigned short *const bp_usdt_sem[BP_EV_COUNT] = {
	[BP_EV_PROCESS] = &zero, [BP_EV_CALL] = SEM(call),
};
static unsigned long fired;
void bp_usdt_fire(ErlNifEnv *env, ERL_NIF_TERM who, const uint8_t *rec,
		  uint32_t len)
{
	(void)env, (void)who, (void)rec, (void)len;
	fired++;
}

#define RING 4096
static uint8_t ring[RING];
static uint8_t rec[64];

__attribute__((noinline)) static void write_plain(struct bp_session *s,
						  unsigned i)
{
	(void)s;
	memcpy(ring + (i * 64) % RING, rec, 64);
}

__attribute__((noinline)) static void write_hooked(struct bp_session *s,
						   unsigned i)
{
	struct ev_ctx c = {.hub = 1};
	uint8_t *p = ring + (i * 64) % RING;

	memcpy(p, rec, 64);
	bp_usdt_event(NULL, s, 0, p, 64, &c);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static double run(void (*w)(struct bp_session *, unsigned),
		  struct bp_session *s, unsigned n)
{
	double t0 = now();
	for (unsigned i = 0; i < n; i++)
		w(s, i);
	return (now() - t0) / n;
}

int main(int argc, char **argv)
{
	static struct bp_session off, on;
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 50000000u;
	double b = 1e9, h0 = 1e9, h1 = 1e9;

	bp_put_u16(rec, BP_EV_CALL);
	on.usdt_kinds = ~0ull;
	for (int r = 0; r < 7; r++) {
		double x = run(write_plain, &off, n), y = run(write_hooked, &off, n),
		       z = run(write_hooked, &on, n);
		b = x < b ? x : b;
		h0 = y < h0 ? y : h0;
		h1 = z < h1 ? z : h1;
	}
	printf("usdt hook, detached: write alone %.2f ns; + hook, session "
	       "without a usdt sink %+.2f ns; + hook, session with a usdt sink "
	       "%+.2f ns per event; target < 2 ns: %s (%lu fired: 0 expected)\n",
	       b, h0 - b, h1 - b, h1 - b < 2.0 ? "yes" : "NO", fired);
	return fired != 0;
}
