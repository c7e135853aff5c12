/* bp_dio.h -- appending whole records (CTF packets) to a file without
 * going through the page cache.
 *
 * Why: a session writing every event of a busy process writes 100-200 MB/s
 * per stream.  Through the page cache every 4 KiB of it costs the kernel a
 * page, and the node's own cached files are evicted to make room: 8 such
 * sessions tracing 2 M calls grew the page cache by 760-764 MiB, and their
 * collectors spent 27-34 ns of kernel time per event each, on the cores
 * the traced node runs on.  Written with O_DIRECT in blocks of 512 KiB:
 * 0-5 MiB and 7-17 ns (docs/performance/stops-24-28.md, "Trace files
 * written around the page cache"; bench/run.sh files).
 *
 * How: records are built in place in an aligned staging buffer
 * (bp_dio_room, bp_dio_commit).  The buffer is written when it cannot take
 * another record of the largest size, and at each bp_dio_sync.  A direct
 * write must end on an aligned offset, and the file must end at a
 * record's end whenever the writer is killed (a trace whose last packet is
 * cut is refused whole by babeltrace2).  So the record that ends a block
 * is padded to the next aligned offset: before committing it, the caller
 * asks bp_dio_pad_for how many bytes to add (CTF packets can carry padding:
 * packet_size > content_size).  The block is then one O_DIRECT write.  A
 * sync with less than BP_DIO_SYNC_MIN new bytes (a quiet stream, flushed
 * every 100 ms) pads nothing and writes the new bytes through the page
 * cache (O_DIRECT cleared for that one write); their unaligned end stays
 * at the buffer's front, to be written again by the next direct write.
 * Every write ends at a record's end.
 *
 * A direct write waits for the device, and while it waits the collector
 * does not drain the rings (8 MiB each hold ~50 ms of a busy stream).  So
 * a direct write that takes bp_dio_slow_ns or more (10 ms) sends the
 * stream's next blocks through the page cache, which absorbs a slow or
 * stalled device as it always did, for bp_dio_cool_ns (5 s); then direct
 * writes resume.  `slow' counts those writes.
 *
 * A write that fails is cut back (ftruncate) to the last whole record.
 *
 * Where O_DIRECT cannot be set or a direct write is refused (EINVAL: a
 * file system without it, stricter alignment), the writer falls back for
 * good to writing each record as it is committed, through the page cache,
 * which is what beamprobe did before.
 *
 * Accounting: bp_dio_commit takes the record's counts (events, auxiliary
 * events); they reach `in_file` once the record is in the file.
 * One writer thread per bp_dio; no locking.
 */
#ifndef BP_DIO_H
#define BP_DIO_H

#include <stddef.h>
#include <stdint.h>

#define BP_DIO_ALIGN 4096u
#define BP_DIO_STAGE ((size_t)512 << 10) /* direct writes of about this */
#define BP_DIO_SYNC_MIN ((size_t)64 << 10) /* a sync's least direct write */

/* Counts of what is in the file: whole records only. */
struct bp_dio_count {
	uint64_t bytes, events, aux;
};

struct bp_dio {
	int fd;
	int direct;          /* 1 while O_DIRECT is set on fd */
	uint8_t *buf;        /* staging, BP_DIO_ALIGN-aligned; owned */
	size_t cap;          /* its size */
	size_t rec_max;      /* largest record bp_dio_room is asked for */
	uint64_t base;       /* file offset of buf[0] (aligned when direct) */
	size_t len;          /* committed bytes in buf */
	size_t done;         /* of which already in the file (the
				unaligned end of the last block) */
	struct bp_dio_count cum;     /* everything committed */
	struct bp_dio_count in_file; /* of which in the file */
	int err;             /* first error; every later call returns it */
	int cached;          /* 1: through the page cache until cached_until */
	uint64_t cached_until; /* CLOCK_MONOTONIC ns */
	uint64_t slow;       /* direct writes that took bp_dio_slow_ns or more */
};

/* Whether bp_dio_init tries O_DIRECT at all: 1 unless the environment
 * has BEAMPROBE_NO_DIRECT_IO set (read once, by bp_dio_configure, before
 * any writer thread exists: at NIF load, at a CLI's start). */
extern int bp_dio_enabled;
void bp_dio_configure(void);
/* A direct write this slow (ns) sends the next blocks through the page
 * cache for bp_dio_cool_ns.  Set only before any writer exists (tests). */
extern uint64_t bp_dio_slow_ns, bp_dio_cool_ns;

/*
 * Sets d up to write fd (a new, empty file opened for writing) with
 * records of at most rec_max bytes; tries O_DIRECT if bp_dio_enabled.
 * Returns 0 or ENOMEM.
 */
int bp_dio_init(struct bp_dio *d, int fd, size_t rec_max);

/* Where to build the next record (rec_max bytes of room, and
 * BP_DIO_ALIGN more for its padding).  Stable until the next
 * bp_dio_commit or bp_dio_sync. */
static inline uint8_t *bp_dio_room(struct bp_dio *d)
{
	return d->buf + d->len;
}

/* Bytes of padding to add to a record of len bytes about to be committed
 * so that it ends a direct block: 0 unless committing it will write the
 * buffer (it is full then) or, with `syncing', the bp_dio_sync that
 * follows will have at least BP_DIO_SYNC_MIN bytes to write.  Less than
 * BP_DIO_ALIGN; there is room for it after the record's rec_max bytes. */
size_t bp_dio_pad_for(const struct bp_dio *d, size_t len, int syncing);

/*
 * Commits the record of len bytes (its padding included) built at
 * bp_dio_room(), holding the given counts.  May write to the file.
 * Returns 0 or an errno value; on an error the file is cut back to its
 * whole records, the records not in
 * it are given up (their counts are never added to in_file), and the
 * writer fails: every later call returns the error.
 */
int bp_dio_commit(struct bp_dio *d, size_t len, uint64_t events,
		  uint64_t aux);

/* Writes everything committed to the file.  Returns 0 or an errno value
 * (as bp_dio_commit). */
int bp_dio_sync(struct bp_dio *d);

/* Counts committed and not in the file (given up after an error). */
struct bp_dio_count bp_dio_pending(const struct bp_dio *d);

/* pwrite()s all of p at off, retrying on EINTR and short writes.
 * Returns 0 or an errno value (EIO for a write of 0 bytes). */
int bp_dio_pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off);

/* Frees the buffer; the fd is the caller's to close.  Does not write. */
void bp_dio_free(struct bp_dio *d);

#endif /* BP_DIO_H */
