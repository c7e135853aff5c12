/* bp_membar.c -- the remover's side of the asymmetric barriers
 * (bp_membar.h). */
#include <linux/membarrier.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bp_membar.h"

int bp_membar_fast;
static _Atomic uint64_t failures;

static long membarrier(int cmd)
{
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

void bp_membar_sync(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (bp_membar_fast &&
	    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
		atomic_fetch_add_explicit(&failures, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
}

uint64_t bp_membar_failures(void)
{
	return atomic_load_explicit(&failures, memory_order_relaxed);
}
