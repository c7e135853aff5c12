/* bp_dio.c -- whole records appended to a file around the page cache
 * (see bp_dio.h). */
#define _GNU_SOURCE /* O_DIRECT */
#include "bp_dio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ALIGN_DOWN(n) ((n) & ~(size_t)(BP_DIO_ALIGN - 1))

int bp_dio_enabled = 1;
uint64_t bp_dio_slow_ns = 10000000ull;  /* 10 ms */
uint64_t bp_dio_cool_ns = 5000000000ull; /* 5 s */

static uint64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void bp_dio_configure(void)
{
	int on = getenv("BEAMPROBE_NO_DIRECT_IO") == NULL;

	if (bp_dio_enabled != on) /* a reload: writers may be reading it */
		bp_dio_enabled = on;
}

static int set_direct(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 ||
	    fcntl(fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) != 0)
		return errno;
	return 0;
}

int bp_dio_init(struct bp_dio *d, int fd, size_t rec_max)
{
	/* Room for a record of rec_max and its padding at all times, after
	 * a block's unaligned end (< BP_DIO_ALIGN). */
	size_t cap = rec_max + 2 * BP_DIO_ALIGN;
	void *p;

	memset(d, 0, sizeof *d);
	d->fd = fd;
	d->rec_max = rec_max;
	if (bp_dio_enabled)
		cap += BP_DIO_STAGE;
	cap = ALIGN_DOWN(cap + BP_DIO_ALIGN - 1);
	if (posix_memalign(&p, BP_DIO_ALIGN, cap) != 0)
		return ENOMEM;
	d->buf = p;
	d->cap = cap;
	d->direct = bp_dio_enabled && set_direct(fd, 1) == 0;
	return 0;
}

void bp_dio_free(struct bp_dio *d)
{
	free(d->buf);
	d->buf = NULL;
	d->len = d->done = 0;
}

int bp_dio_pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (w == 0)
			return EIO;
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/* A write failed: cut the file back to its whole records, give up the
 * rest. */
static int fail(struct bp_dio *d, int err)
{
	int r;

	do
		r = ftruncate(d->fd, (off_t)d->in_file.bytes);
	while (r != 0 && errno == EINTR);
	d->err = err;
	return err;
}

/* Writes buf[done, len) through the page cache; the buffer is then
 * empty. */
static int write_rest(struct bp_dio *d)
{
	int err = bp_dio_pwrite_all(d->fd, d->buf + d->done,
				    d->len - d->done, d->base + d->done);

	if (err)
		return fail(d, err);
	d->base += d->len;
	d->len = d->done = 0;
	d->in_file = d->cum;
	return 0;
}

/* O_DIRECT refused (EINVAL at a write: the file system or the device
 * wants something else): write through the page cache from now on. */
static int fall_back(struct bp_dio *d)
{
	d->direct = 0;
	(void)set_direct(d->fd, 0);
	return write_rest(d);
}

/*
 * Writes everything committed.  A block that ends on an aligned offset
 * (its last record padded: bp_dio_pad_for) is written whole with
 * O_DIRECT; any other only from what is not in the file yet, through the
 * page cache.  Either way one write, which ends at a record's end.  The
 * last unaligned bytes stay at the buffer's front, to be written again by
 * the next direct write, which must start at an aligned offset.
 */
static int drain(struct bp_dio *d)
{
	size_t pre;
	int err;

	if (d->len == d->done)
		return 0;
	if (d->cached && mono_ns() >= d->cached_until)
		d->cached = 0; /* the next block goes direct again */
	if (d->len % BP_DIO_ALIGN == 0) {
		uint64_t t0 = mono_ns(), took;
		err = bp_dio_pwrite_all(d->fd, d->buf, d->len, d->base);
		if (err == EINVAL)
			return fall_back(d);
		if (err)
			return fail(d, err);
		if ((took = mono_ns() - t0) >= bp_dio_slow_ns) {
			/* The device is slow: the page cache absorbs the next
			 * blocks, so the collector does not wait on it. */
			d->slow++;
			d->cached = 1;
			d->cached_until = t0 + took + bp_dio_cool_ns;
		}
	} else {
		if ((err = set_direct(d->fd, 0)))
			return fail(d, err);
		err = bp_dio_pwrite_all(d->fd, d->buf + d->done,
					d->len - d->done, d->base + d->done);
		if (err)
			return fail(d, err);
		if (set_direct(d->fd, 1) != 0)
			d->direct = 0; /* cannot set it again: without */
	}
	d->in_file = d->cum;
	pre = ALIGN_DOWN(d->len);
	memmove(d->buf, d->buf + pre, d->len - pre);
	d->base += pre;
	d->len -= pre;
	d->done = d->len;
	return 0;
}

/* Would committing len more bytes now write a block (staging full, or a
 * sync with at least BP_DIO_SYNC_MIN new bytes)? */
size_t bp_dio_pad_for(const struct bp_dio *d, size_t len, int syncing)
{
	size_t end = d->len + len;

	if (!d->direct || d->cached ||
	    (d->cap - end >= d->rec_max + BP_DIO_ALIGN &&
	     !(syncing && end - d->done >= BP_DIO_SYNC_MIN)))
		return 0;
	return ALIGN_DOWN(end + BP_DIO_ALIGN - 1) - end;
}

int bp_dio_commit(struct bp_dio *d, size_t len, uint64_t events,
		  uint64_t aux)
{
	if (d->err)
		return d->err;
	d->len += len;
	d->cum.bytes += len;
	d->cum.events += events;
	d->cum.aux += aux;
	if (!d->direct)
		return write_rest(d);
	if (d->cap - d->len < d->rec_max + BP_DIO_ALIGN)
		return drain(d);
	return 0;
}

int bp_dio_sync(struct bp_dio *d)
{
	if (d->err)
		return d->err;
	if (!d->direct)
		return 0;
	return drain(d);
}

struct bp_dio_count bp_dio_pending(const struct bp_dio *d)
{
	return (struct bp_dio_count){d->cum.bytes - d->in_file.bytes,
				     d->cum.events - d->in_file.events,
				     d->cum.aux - d->in_file.aux};
}
