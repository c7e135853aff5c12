/* clock_shift.c -- an LD_PRELOAD library for the cluster suite: moves a
 * process's CLOCK_MONOTONIC by the signed 64-bit nanoseconds in the
 * first 8 bytes (host order) of the file $BP_CLOCK_SHIFT_FILE, read at
 * every clock_gettime() call, so that a test can step a node's clock
 * while it runs (pwrite the file).  Without the variable, or if the file
 * cannot be mapped, the clock is left alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const volatile int64_t *clock_shift_ns;
static int (*clock_shift_real)(clockid_t, struct timespec *);

__attribute__((constructor)) static void clock_shift_init(void)
{
	const char *path = getenv("BP_CLOCK_SHIFT_FILE");
	void *p;
	int fd;

	clock_shift_real = (int (*)(clockid_t, struct timespec *))dlsym(
		RTLD_NEXT, "clock_gettime");
	if (!path || (fd = open(path, O_RDONLY)) < 0)
		return;
	p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		clock_shift_ns = p;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int r = clock_shift_real(id, ts);
	int64_t ns;

	if (r != 0 || id != CLOCK_MONOTONIC || !clock_shift_ns)
		return r;
	ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec +
	     *clock_shift_ns;
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	return r;
}
