/* bp_budget.c -- node-wide budgets of ring memory and descriptors (see
 * bp_budget.h). */
#include "bp_budget.h"
#include "bp_session.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Worst-case resident bytes of the live sessions' rings. */
static _Atomic uint64_t ring_bytes;

/* The value of a cgroup memory limit file (v2 memory.max, v1
 * memory.limit_in_bytes), 0 when absent or "max". */
static uint64_t read_limit(const char *path)
{
	char buf[64];
	unsigned long long v;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return (uint64_t)v;
}

/* The memory limit of this process's cgroup, 0 if none. */
static uint64_t cgroup_limit(void)
{
	char line[4096], path[4200];
	uint64_t lim = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (f) {
		while (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = '\0';
			if (strncmp(line, "0::", 3) == 0) {
				snprintf(path, sizeof path,
					 "/sys/fs/cgroup%s/memory.max",
					 line + 3);
				lim = read_limit(path);
				break;
			}
		}
		fclose(f);
	}
	if (!lim)
		lim = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
	return lim;
}

uint64_t bp_budget_memory_default(void)
{
	static _Atomic uint64_t cached;
	uint64_t m = atomic_load(&cached);

	if (!m) {
		long pages = sysconf(_SC_PHYS_PAGES);
		long psz = sysconf(_SC_PAGESIZE);
		uint64_t cg = cgroup_limit();

		m = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz
					 : 1ull << 32;
		if (cg && cg < m)
			m = cg;
		m /= 2;
		atomic_store(&cached, m);
	}
	return m;
}

int bp_budget_memory_take(struct bp_session *s, uint64_t need, uint64_t max,
			  uint64_t *in_use)
{
	uint64_t n = atomic_load(&ring_bytes);

	do {
		if (need > max || n > max - need) {
			*in_use = n;
			return 0;
		}
	} while (!atomic_compare_exchange_weak(&ring_bytes, &n, n + need));
	atomic_store(&s->mem_taken, need);
	return 1;
}

void bp_budget_memory_give(struct bp_session *s)
{
	uint64_t need = atomic_exchange(&s->mem_taken, 0);
	uint64_t n = atomic_load(&ring_bytes);

	/* Never below 0 (a session of a previous library instance). */
	while (need &&
	       !atomic_compare_exchange_weak(&ring_bytes, &n,
					     n > need ? n - need : 0))
		;
}

uint64_t bp_budget_fd_reserve(uint64_t limit)
{
	return limit / 8 > 16 ? limit / 8 : 16;
}

/* Taken descriptors not yet given back, under fd_mtx. */
static pthread_mutex_t fd_mtx = PTHREAD_MUTEX_INITIALIZER;
static uint64_t fds_pending;

/* Descriptors open now, in *open: 0; -1 if none is free to count them;
 * 1 if they cannot be counted (no /proc: not short). */
static int fds_open(uint64_t *open)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	*open = 0;
	if (!d)
		return errno == EMFILE || errno == ENFILE ? -1 : 1;
	while ((e = readdir(d)))
		*open += e->d_name[0] != '.';
	closedir(d);
	if (*open > 0)
		(*open)--; /* the directory's own descriptor */
	return 0;
}

int bp_budget_fds_take(uint64_t need, uint64_t *free_fds, uint64_t *limit)
{
	struct rlimit rl;
	uint64_t open;
	int ok;

	*free_fds = 0;
	*limit = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1;
	*limit = (uint64_t)rl.rlim_cur;
	pthread_mutex_lock(&fd_mtx);
	switch (fds_open(&open)) {
	case -1:
		ok = 0; /* none left: short */
		break;
	case 1:
		ok = 1;
		break;
	default:
		open += fds_pending;
		*free_fds = open < *limit ? *limit - open : 0;
		ok = *free_fds >= need + bp_budget_fd_reserve(*limit);
	}
	if (ok)
		fds_pending += need;
	pthread_mutex_unlock(&fd_mtx);
	return ok;
}

void bp_budget_fds_give(uint64_t n)
{
	pthread_mutex_lock(&fd_mtx);
	fds_pending = fds_pending > n ? fds_pending - n : 0;
	pthread_mutex_unlock(&fd_mtx);
}
