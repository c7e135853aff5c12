/* bp_membar.c -- the remover's side of the asymmetric barriers
 * (bp_membar.h). */
#include <linux/membarrier.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bp_membar.h"

int bp_membar_fast;
static _Atomic uint64_t failures;

int bp_membar_test_refuse;

static long membarrier(int cmd)
{
	if (cmd == MEMBARRIER_CMD_PRIVATE_EXPEDITED && bp_membar_test_refuse)
		return -1;
	return syscall(SYS_membarrier, cmd, 0, 0);
}

int bp_membar_init(void)
{
	const char *force = getenv("BEAMPROBE_BARRIER");
	long cmds;

	if (bp_membar_fast)
		return 1;
	/* BEAMPROBE_BARRIER=fence: full barriers on both sides, as on a
	 * kernel without membarrier (for tests and for comparison). */
	if (force && !strcmp(force, "fence"))
		return 0;
	cmds = membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
	    !(cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED))
		return 0;
	if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
		return 0;
	/* Producers start using the plain store only after this (the flag is
	 * set at load, before any tracer callback can run). */
	bp_membar_fast = 1;
	return 1;
}

/* The expedited barrier failed (never seen; the kernel documents ENOMEM
 * on some configurations): producers' busy stores are plain ones, so the
 * remover's own fence is not enough.  Try again; then the global
 * membarrier (an RCU grace period: every CPU has passed a full barrier);
 * then wait 10 ms, far longer than a store buffer holds a store. */
static void sync_slow(void)
{
	struct timespec ts = {0, 10 * 1000 * 1000};

	atomic_fetch_add_explicit(&failures, 1, memory_order_relaxed);
	for (int i = 0; i < 3; i++)
		if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
			return;
	if (membarrier(MEMBARRIER_CMD_GLOBAL) == 0)
		return;
	nanosleep(&ts, NULL);
}

void bp_membar_sync(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (bp_membar_fast &&
	    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
		sync_slow();
	atomic_thread_fence(memory_order_seq_cst);
}

uint64_t bp_membar_failures(void)
{
	return atomic_load_explicit(&failures, memory_order_relaxed);
}
