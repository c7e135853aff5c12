/* bp_ring.h -- single-producer single-consumer byte ring for trace records.
 *
 * One ring per (session, producing OS thread).  The producer is the thread
 * running tracer callbacks; the consumer is the session's collector thread.
 * No lock, no allocation, no system call on either side.
 *
 * A ring is made of one or two parts, each a byte circle of `cap` bytes
 * holding variable-length records, each starting on an 8-byte boundary
 * with an 8-byte header:
 *
 *     u32 total     record size in bytes, header included, multiple of 8
 *     u32 len       payload bytes | BP_RING_AUX, or a marker:
 *                   BP_RING_PAD filler, BP_RING_SPILL / BP_RING_BACK
 *
 * BP_RING_AUX marks auxiliary records (not counted when evicted: only user
 * events are counted as lost).
 *
 * A record never wraps: when the space left before the end of a part's
 * data is too small, the producer writes a PAD record covering it and
 * starts at 0.
 *
 * Hot and cold parts.  Writing each record into memory that is not in the
 * producing core's cache is most of what a record costs (docs/
 * performance.md): an 8 MiB ring streams through the core's 1 MiB L2.  So
 * a ring of at least BP_RING_HOT_MIN bytes is split into a small hot part
 * (BP_RING_HOT bytes, which stays in cache while the consumer keeps up)
 * and a cold part (the rest); the capacity is the sum, as before.  The
 * producer writes to the hot part; when a record does not fit there it
 * writes a SPILL marker in the hot part and goes on in the cold part;
 * as soon as a record fits in the hot part again (the consumer freed
 * room) the producer writes a BACK marker in the cold part and returns to
 * the hot one.  The consumer follows the markers, so records are read in
 * the order they were written.  Each part always keeps 8 free bytes for
 * its marker (a record is accepted only if it fits with them).  A record
 * that fits in neither part is refused (drop newest).  Flight recorders
 * (drop oldest) have one part: their producer evicts, nobody drains.
 *
 * `head` and `tail` of a part are free-running byte counters (never wrap
 * in practice: 2^64 bytes).  The producer writes records, then publishes
 * them by storing head with release order; the consumer reads up to head
 * (acquire), then frees space by storing tail (release).
 *
 * Overflow modes:
 *   drop newest  a record that does not fit is not written; the caller
 *                counts it (bp_ring_reserve returns NULL).
 *   drop oldest  (flight recorder) the producer evicts the oldest records
 *                itself and counts them in `evicted`; used only while no
 *                consumer reads concurrently (see bp_session.h).
 */
#ifndef BP_RING_H
#define BP_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BP_RING_PAD 0xFFFFFFFFu
#define BP_RING_SPILL 0xFFFFFFFEu /* hot part: continue in the cold one */
#define BP_RING_BACK 0xFFFFFFFDu  /* cold part: continue in the hot one */
#define BP_RING_AUX 0x80000000u
#define BP_RING_HDR 8u
#define BP_RING_HOT ((uint64_t)512 << 10) /* hot part of a split ring */
#define BP_RING_HOT_MIN ((uint64_t)1 << 20) /* smallest ring split */
/* Parts of at least this size are large ones: the consumer evicts the
 * lines it has read and the producer asks for the lines it will write
 * ahead of time (bp__ring_ahead). */
#define BP_RING_LARGE_PART ((uint64_t)256 << 10)
#define BP_RING_AHEAD_BLOCK ((uint64_t)4096) /* asked for at a time */
#define BP_RING_AHEAD ((uint64_t)8192)       /* this far ahead */

/* One byte circle. */
struct bp_ring_part {
	/* Producer's cache line (cap and data: read-only after init). */
	_Atomic uint64_t head;   /* bytes published */
	uint64_t cached_tail;    /* producer's last view of tail */
	uint64_t head_off;       /* head % cap, kept without a division */
	uint64_t cap;            /* data bytes, multiple of 8 (0: no part) */
	uint8_t *data;           /* cap bytes */
	/* Consumer's cache line. */
	_Alignas(64) _Atomic uint64_t tail; /* bytes consumed */
};

struct bp_ring {
	/* Producer's state. */
	uint64_t reserved_at;    /* head position of the open reservation */
	uint64_t reserved_pad;   /* filler bytes before the reservation */
	uint64_t reserved_off;   /* data offset of the open reservation */
	uint8_t cur;             /* part written: 0 hot, 1 cold */
	uint8_t reserved_part;   /* part of the open reservation */
	uint8_t drop_oldest;     /* overflow mode */
	uint8_t ready;           /* 1 once initialised (zero memory: 0) */
	_Atomic uint64_t evicted; /* records evicted in drop-oldest mode */
	/* One word of the producer's own, on the line every reservation
	 * reads anyway (bp_session.h: the key whose process event was last
	 * known written).  0 after init. */
	uint64_t owner_word;
	/* Consumer's state (consumer only). */
	_Alignas(64) uint8_t rd_part; /* part being read */
	/* [0] hot (cap 0 when the ring is not split), [1] cold. */
	struct bp_ring_part part[2];
};

/* Initialises a ring over `cap` bytes at `data` (cap: multiple of 8,
 * >= 64), split into a hot and a cold part when cap >= BP_RING_HOT_MIN
 * and not drop_oldest.  Any thread, before the ring is shared. */
void bp_ring_init(struct bp_ring *r, uint8_t *data, uint64_t cap,
		  int drop_oldest);
/* The same with the hot part's size given (0: one part; else a multiple
 * of 8, >= 64, <= cap / 2).  For tests. */
void bp_ring_init_split(struct bp_ring *r, uint8_t *data, uint64_t cap,
			uint64_t hot, int drop_oldest);

static inline uint64_t bp_ring_align(uint64_t n)
{
	return (n + 7u) & ~(uint64_t)7u;
}

/* Largest payload a reservation can ever get (smaller ones may still be
 * refused by a full ring). */
static inline uint64_t bp_ring_max_len(const struct bp_ring *r)
{
	uint64_t half = r->part[1].cap / 2 & ~(uint64_t)7u;

	return half >= BP_RING_HDR ? half - BP_RING_HDR : 0;
}

/* Evicts oldest records until `need` bytes are free (drop-oldest mode). */
void bp__ring_evict(struct bp_ring *r, uint64_t need);
/* The record does not fit in the part being written: places it in the
 * other part if it fits there (writing the SPILL or BACK marker that
 * sends the consumer over).  Returns the part and its filler in *pad, or
 * -1 (refused: full, or too big). */
int bp__ring_place(struct bp_ring *r, uint64_t need, uint64_t *pad);

/* Asks the cache for the block of part p BP_RING_AHEAD bytes past data
 * offset `to' (prefetch: no byte changes, no fault).  bp_ring.c. */
void bp__ring_ahead_block(const struct bp_ring_part *p, uint64_t to);

/* The producer moved from data offset `from' to `to' in part p.  When it
 * enters a new 4 KiB block of a large part, asks for the whole block
 * 8 KiB ahead.  Why: the consumer has evicted every line it read
 * (bp_ring_read_end), so each line the producer comes round to misses
 * to memory, and the VM's fence after the tracer callback returns waits
 * for that miss -- on this project's machine ~60 ns per call event.
 * Asked for 64 lines at once, the misses overlap and complete long
 * before the producer gets there (docs/performance/stops-22-23.md, "The
 * VM's call site, lines asked for ahead, the TSC under kvm-clock").  Once
 * per 4 KiB of records: a shift and a compare per record. */
static inline __attribute__((always_inline)) void
bp__ring_ahead(const struct bp_ring_part *p, uint64_t from, uint64_t to)
{
	if (__builtin_expect(((from ^ to) & ~(BP_RING_AHEAD_BLOCK - 1)) != 0,
			     0) &&
	    p->cap >= BP_RING_LARGE_PART)
		bp__ring_ahead_block(p, to);
}

/* Room for `need` bytes (+ `keep`) at the head of part p: the filler
 * needed before it in *pad, 1 if it fits. */
static inline __attribute__((always_inline)) int
bp__ring_fits(struct bp_ring_part *p, uint64_t need,
				uint64_t keep, uint64_t *pad)
{
	uint64_t head = atomic_load_explicit(&p->head, memory_order_relaxed);
	uint64_t contig = p->cap - p->head_off;

	*pad = contig < need ? contig : 0;
	if (head + *pad + need + keep - p->cached_tail <= p->cap)
		return 1;
	p->cached_tail = atomic_load_explicit(&p->tail, memory_order_acquire);
	return head + *pad + need + keep - p->cached_tail <= p->cap;
}

/* Writes a record header (or a marker: len = BP_RING_PAD, ...) at q. */
static inline void bp__ring_hdr(uint8_t *q, uint64_t total, uint32_t len)
{
	uint32_t t32 = (uint32_t)total;

	memcpy(q, &t32, 4);
	memcpy(q + 4, &len, 4);
}

/*
 * Reserves room for a payload of up to `max_len` bytes.  Returns where to
 * write the payload, or NULL when it does not fit (drop-newest mode: the
 * ring is full; either mode: max_len > bp_ring_max_len()).  Nothing is
 * visible to the consumer until bp_ring_commit().  Producer thread only.
 */
static inline __attribute__((always_inline)) uint8_t *
bp_ring_reserve(struct bp_ring *r, uint32_t max_len)
{
	uint64_t need = bp_ring_align(BP_RING_HDR + (uint64_t)max_len);
	uint64_t pad;
	int k = r->cur;
	struct bp_ring_part *p;

	if (r->part[0].cap == 0) { /* one part */
		p = &r->part[1];
		if (need > p->cap / 2)
			return NULL;
		if (!bp__ring_fits(p, need, 0, &pad)) {
			if (!r->drop_oldest)
				return NULL;
			bp__ring_evict(r, pad + need);
		}
		k = 1;
	} else if (k == 0 && need <= r->part[0].cap / 2 &&
		   bp__ring_fits(&r->part[0], need, 8, &pad)) {
		p = &r->part[0]; /* the hot part: the fast path */
	} else {
		k = bp__ring_place(r, need, &pad);
		if (k < 0)
			return NULL;
		p = &r->part[k];
	}
	uint64_t pos = p->head_off;
	if (pad) {
		bp__ring_hdr(p->data + pos, pad, BP_RING_PAD);
		pos = 0;
	}
	r->reserved_part = (uint8_t)k;
	r->reserved_at = atomic_load_explicit(&p->head, memory_order_relaxed);
	r->reserved_pad = pad;
	r->reserved_off = pos;
	return p->data + pos + BP_RING_HDR;
}

/* Publishes the reserved record with its actual payload length (<= the
 * reserved max_len) and flags (0 or BP_RING_AUX).  Producer thread only. */
static inline void bp_ring_commit_flags(struct bp_ring *r, uint32_t len,
					uint32_t flags)
{
	struct bp_ring_part *p = &r->part[r->reserved_part];
	uint64_t total = bp_ring_align(BP_RING_HDR + (uint64_t)len);
	bp__ring_hdr(p->data + r->reserved_off, total, len | flags);
	p->head_off = r->reserved_off + total;
	if (p->head_off == p->cap)
		p->head_off = 0;
	bp__ring_ahead(p, r->reserved_off, p->head_off);
	atomic_store_explicit(&p->head, r->reserved_at + r->reserved_pad + total,
			      memory_order_release);
}

static inline void bp_ring_commit(struct bp_ring *r, uint32_t len)
{
	bp_ring_commit_flags(r, len, 0);
}

/* Same, for an auxiliary record (see BP_RING_AUX). */
static inline void bp_ring_commit_aux(struct bp_ring *r, uint32_t len)
{
	bp_ring_commit_flags(r, len, BP_RING_AUX);
}

/* Writes a whole record of len payload bytes from src (not inside the
 * ring): reserve, copy and commit in one, keeping no reservation state on
 * the hot part's fast path.  0 if it does not fit, as bp_ring_reserve.
 * copy(dst, src, len) moves the payload.  Producer thread only. */
static inline __attribute__((always_inline)) int
bp_ring_put(struct bp_ring *r, const uint8_t *src, uint32_t len,
	    void (*copy)(uint8_t *, const uint8_t *, uint32_t))
{
	uint64_t total = bp_ring_align(BP_RING_HDR + (uint64_t)len), pad;
	struct bp_ring_part *p = &r->part[0];
	uint8_t *d;

	if (__builtin_expect(r->cur == 0 && total <= p->cap / 2 &&
				     bp__ring_fits(p, total, 8, &pad),
			     1)) {
		uint64_t head = atomic_load_explicit(&p->head,
						     memory_order_relaxed);
		uint64_t pos = p->head_off;

		if (pad) {
			bp__ring_hdr(p->data + pos, pad, BP_RING_PAD);
			pos = 0;
		}
		copy(p->data + pos + BP_RING_HDR, src, len);
		bp__ring_hdr(p->data + pos, total, len);
		p->head_off = pos + total == p->cap ? 0 : pos + total;
		bp__ring_ahead(p, pos, p->head_off);
		atomic_store_explicit(&p->head, head + pad + total,
				      memory_order_release);
		return 1;
	}
	if (!(d = bp_ring_reserve(r, len)))
		return 0;
	copy(d, src, len);
	bp_ring_commit(r, len);
	return 1;
}

/* Bytes published and not yet consumed.  Any thread (approximate). */
static inline uint64_t bp_ring_used(struct bp_ring *r)
{
	uint64_t n = 0;

	for (int i = 0; i < 2; i++)
		n += atomic_load_explicit(&r->part[i].head,
					  memory_order_acquire) -
		     atomic_load_explicit(&r->part[i].tail,
					  memory_order_acquire);
	return n;
}

/* Bytes published since init, both parts.  Any thread (approximate). */
static inline uint64_t bp_ring_written(struct bp_ring *r)
{
	return atomic_load_explicit(&r->part[0].head, memory_order_relaxed) +
	       atomic_load_explicit(&r->part[1].head, memory_order_relaxed);
}

/*
 * Consumer side.  A read pass:
 *
 *     struct bp_ring_reader rd;
 *     bp_ring_read_begin(r, &rd);
 *     while ((p = bp_ring_read_next(&rd, &len)))  ... use p[0..len) ...
 *     bp_ring_read_end(&rd);      // frees what was read
 *
 * Consumer thread only (or, in drop-oldest mode, while producers are held
 * off by the session's busy/state protocol).
 */
struct bp_ring_reader {
	struct bp_ring *r;
	uint64_t pos[2];  /* next byte to read, per part */
	uint64_t head[2]; /* snapshot of head, per part */
	int part;         /* part being read */
};

void bp_ring_read_begin(struct bp_ring *r, struct bp_ring_reader *rd);
/* Next payload or NULL at the end of the snapshot.  Corrupt headers end
 * the pass (cannot happen unless memory is overwritten). */
const uint8_t *bp_ring_read_next(struct bp_ring_reader *rd, uint32_t *len);
/* Frees everything read so far. */
void bp_ring_read_end(struct bp_ring_reader *rd);

#endif /* BP_RING_H */
