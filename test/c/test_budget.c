/* test_budget.c -- the node's reserve of file descriptors
 * (c_src/bp_budget.h): takers that open descriptors concurrently never
 * leave the process fewer than the reserve free.
 *
 * Eight threads each take one descriptor, open it, give the take back,
 * and go on until a take is refused; the limit (RLIMIT_NOFILE) is set to
 * what is open + 64, so the reserve is 16.  Whatever the interleaving, at
 * the end at least 16 descriptors are free, and the refusals came only
 * once fewer than 17 were.  With a check that counted /proc/self/fd and
 * did not count the takes being opened (stop 44 before this test), two
 * takers passed on the same free descriptor: a full test run once left a
 * node 15 of its 16.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bp_budget.h"
#include "tap.h"

#define THREADS 8
#define MAX_PER 64

static _Atomic int go;
static int fds[THREADS][MAX_PER];
static int nfds[THREADS];

static uint64_t open_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	uint64_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;
}

static void *taker(void *arg)
{
	int t = (int)(intptr_t)arg;
	uint64_t nfree, lim;

	while (!atomic_load(&go))
		;
	while (nfds[t] < MAX_PER && bp_budget_fds_take(1, &nfree, &lim)) {
		int fd;

		/* The window between the count and the open, where a second
		 * taker counted the same free descriptor (a start/1 takes its
		 * descriptors, its collector thread opens them later). */
		usleep(50);
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		bp_budget_fds_give(1);
		if (fd < 0)
			break;
		fds[t][nfds[t]++] = fd;
	}
	return NULL;
}

int main(void)
{
	struct rlimit rl;
	uint64_t limit, nfree, lim;
	int rounds_ok = 1;

	for (int round = 0; round < 50 && rounds_ok; round++) {
		pthread_t th[THREADS];
		uint64_t left;

		limit = open_count() + 64;
		rl.rlim_cur = limit;
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			return 1;
		rl.rlim_cur = limit;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			ok(0, "setrlimit(%llu)", (unsigned long long)limit);
			return tap_done();
		}
		atomic_store(&go, 0);
		for (int t = 0; t < THREADS; t++) {
			nfds[t] = 0;
			pthread_create(&th[t], NULL, taker, (void *)(intptr_t)t);
		}
		atomic_store(&go, 1);
		for (int t = 0; t < THREADS; t++)
			pthread_join(th[t], NULL);
		left = limit - open_count();
		if (left < bp_budget_fd_reserve(limit)) {
			ok(0, "round %d: %llu free of a reserve of %llu", round,
			   (unsigned long long)left,
			   (unsigned long long)bp_budget_fd_reserve(limit));
			rounds_ok = 0;
		}
		if (left > bp_budget_fd_reserve(limit) + 1) {
			ok(0, "round %d: refused with %llu free", round,
			   (unsigned long long)left);
			rounds_ok = 0;
		}
		for (int t = 0; t < THREADS; t++)
			for (int i = 0; i < nfds[t]; i++)
				close(fds[t][i]);
	}
	ok(rounds_ok, "50 rounds of 8 concurrent takers: the reserve of 16 "
		      "kept, and refusals only at it");
	/* A take is given back: the same descriptors can be taken again. */
	ok(bp_budget_fds_take(1, &nfree, &lim), "a take after the rounds");
	bp_budget_fds_give(1);
	is_u(lim, limit, "the limit is the one set");
	return tap_done();
}
