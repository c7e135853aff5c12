/* bp_ring.h -- single-producer single-consumer byte ring for trace records.
 *
 * One ring per (session, producing OS thread).  The producer is the thread
 * running tracer callbacks; the consumer is the session's collector thread.
 * No lock, no allocation, no system call on either side.
 *
 * Layout: `cap` bytes of data holding variable-length records, each
 * starting on an 8-byte boundary with an 8-byte header:
 *
 *     u32 total     record size in bytes, header included, multiple of 8
 *     u32 len       payload bytes | BP_RING_AUX, or BP_RING_PAD for filler
 *
 * BP_RING_AUX marks auxiliary records (not counted when evicted: only user
 * events are counted as lost).
 *
 * A record never wraps: when the space left before the end of the data is
 * too small, the producer writes a PAD record covering it and starts at 0.
 *
 * `head` and `tail` are free-running byte counters (never wrap in practice:
 * 2^64 bytes).  The producer writes records, then publishes them by storing
 * head with release order; the consumer reads up to head (acquire), then
 * frees space by storing tail (release).
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
#define BP_RING_AUX 0x80000000u
#define BP_RING_HDR 8u

struct bp_ring {
	/* Producer's cache line. */
	_Atomic uint64_t head;   /* bytes published */
	uint64_t cached_tail;    /* producer's last view of tail */
	uint64_t reserved_at;    /* head position of the open reservation */
	uint64_t reserved_pad;   /* filler bytes before the reservation */
	uint64_t head_off;       /* head % cap, kept without a division */
	uint64_t reserved_off;   /* data offset of the open reservation */
	_Atomic uint64_t evicted; /* records evicted in drop-oldest mode */
	uint8_t drop_oldest;     /* overflow mode */
	/* Consumer's cache line. */
	_Alignas(64) _Atomic uint64_t tail; /* bytes consumed */
	/* Read-only after init. */
	_Alignas(64) uint64_t cap; /* data bytes, multiple of 8 */
	uint8_t *data;             /* cap bytes */
};

/* Initialises a ring over `cap` bytes at `data` (cap: multiple of 8,
 * >= 64).  Any thread, before the ring is shared. */
void bp_ring_init(struct bp_ring *r, uint8_t *data, uint64_t cap,
		  int drop_oldest);

static inline uint64_t bp_ring_align(uint64_t n)
{
	return (n + 7u) & ~(uint64_t)7u;
}

/* Evicts oldest records until `need` bytes are free (drop-oldest mode). */
void bp__ring_evict(struct bp_ring *r, uint64_t need);

/*
 * Reserves room for a payload of up to `max_len` bytes.  Returns where to
 * write the payload, or NULL when it does not fit (drop-newest mode: the
 * ring is full; either mode: the record -- 8-byte header + max_len, rounded
 * up to 8 -- exceeds half the ring).  Nothing is
 * visible to the consumer until bp_ring_commit().  Producer thread only.
 */
static inline uint8_t *bp_ring_reserve(struct bp_ring *r, uint32_t max_len)
{
	uint64_t need = bp_ring_align(BP_RING_HDR + (uint64_t)max_len);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t pos = r->head_off;
	uint64_t contig = r->cap - pos;
	uint64_t pad = contig < need ? contig : 0;

	if (need > r->cap / 2)
		return NULL;
	if (head + pad + need - r->cached_tail > r->cap) {
		r->cached_tail =
			atomic_load_explicit(&r->tail, memory_order_acquire);
		if (head + pad + need - r->cached_tail > r->cap) {
			if (!r->drop_oldest)
				return NULL;
			bp__ring_evict(r, pad + need);
		}
	}
	if (pad) {
		uint8_t *p = r->data + pos;
		uint32_t t32 = (uint32_t)pad, pad_mark = BP_RING_PAD;
		memcpy(p, &t32, 4);
		memcpy(p + 4, &pad_mark, 4);
		pos = 0;
	}
	r->reserved_at = head;
	r->reserved_pad = pad;
	r->reserved_off = pos;
	return r->data + pos + BP_RING_HDR;
}

/* Publishes the reserved record with its actual payload length (<= the
 * reserved max_len) and flags (0 or BP_RING_AUX).  Producer thread only. */
static inline void bp_ring_commit_flags(struct bp_ring *r, uint32_t len,
					uint32_t flags)
{
	uint64_t total = bp_ring_align(BP_RING_HDR + (uint64_t)len);
	uint8_t *p = r->data + r->reserved_off;
	uint32_t t32 = (uint32_t)total, l32 = len | flags;

	memcpy(p, &t32, 4);
	memcpy(p + 4, &l32, 4);
	r->head_off = r->reserved_off + total;
	if (r->head_off == r->cap)
		r->head_off = 0;
	atomic_store_explicit(&r->head, r->reserved_at + r->reserved_pad + total,
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

/* Bytes published and not yet consumed.  Any thread (approximate). */
static inline uint64_t bp_ring_used(struct bp_ring *r)
{
	return atomic_load_explicit(&r->head, memory_order_acquire) -
	       atomic_load_explicit(&r->tail, memory_order_acquire);
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
	uint64_t pos;  /* next byte to read */
	uint64_t head; /* snapshot of head */
};

void bp_ring_read_begin(struct bp_ring *r, struct bp_ring_reader *rd);
/* Next payload or NULL at the end of the snapshot.  Corrupt headers end
 * the pass (cannot happen unless memory is overwritten). */
const uint8_t *bp_ring_read_next(struct bp_ring_reader *rd, uint32_t *len);
/* Frees everything read so far. */
void bp_ring_read_end(struct bp_ring_reader *rd);

#endif /* BP_RING_H */
