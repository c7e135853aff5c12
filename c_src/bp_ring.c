/* bp_ring.c -- slow paths of the SPSC trace ring: init, eviction, the
 * switches between the hot and cold parts, and reading.  The algorithm and
 * the memory-ordering contract are in bp_ring.h. */
#include "bp_ring.h"
#include "bp_counter.h"

static void part_init(struct bp_ring_part *p, uint8_t *data, uint64_t cap)
{
	atomic_init(&p->head, 0);
	atomic_init(&p->tail, 0);
	p->cached_tail = 0;
	p->head_off = 0;
	p->cap = cap & ~(uint64_t)7u;
	p->data = cap ? data : NULL;
}

void bp_ring_init_split(struct bp_ring *r, uint8_t *data, uint64_t cap,
			uint64_t hot, int drop_oldest)
{
	cap &= ~(uint64_t)7u;
	hot &= ~(uint64_t)7u;
	if (drop_oldest || hot < 64 || hot > cap / 2)
		hot = 0;
	atomic_init(&r->evicted, 0);
	r->reserved_at = 0;
	r->reserved_pad = 0;
	r->reserved_off = 0;
	r->cur = hot ? 0 : 1;
	r->reserved_part = r->cur;
	r->rd_part = r->cur;
	r->drop_oldest = (uint8_t)(drop_oldest != 0);
	r->owner_word = 0;
	part_init(&r->part[0], data, hot);
	part_init(&r->part[1], data + hot, cap - hot);
	r->ready = 1;
}

void bp_ring_init(struct bp_ring *r, uint8_t *data, uint64_t cap,
		  int drop_oldest)
{
	bp_ring_init_split(r, data, cap,
			   cap >= BP_RING_HOT_MIN ? BP_RING_HOT : 0,
			   drop_oldest);
}

static uint32_t rec_total(const struct bp_ring_part *p, uint64_t at,
			  uint32_t *len)
{
	const uint8_t *q = p->data + at % p->cap;
	uint32_t total;

	memcpy(&total, q, 4);
	memcpy(len, q + 4, 4);
	return total;
}

void bp__ring_evict(struct bp_ring *r, uint64_t need)
{
	struct bp_ring_part *p = &r->part[1]; /* drop oldest: one part */
	uint64_t head = atomic_load_explicit(&p->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&p->tail, memory_order_relaxed);
	uint64_t n = 0;

	while (tail < head && head + need - tail > p->cap) {
		uint32_t len, total = rec_total(p, tail, &len);
		if (total < BP_RING_HDR || total % 8 || total > p->cap) {
			tail = head; /* cannot happen; recover by emptying */
			break;
		}
		if (len != BP_RING_PAD && !(len & BP_RING_AUX))
			n++;
		tail += total;
	}
	p->cached_tail = tail;
	atomic_store_explicit(&p->tail, tail, memory_order_release);
	if (n) /* the producer is evicted's only writer */
		bp_counter_add(&r->evicted, n);
}

/* Writes and publishes an 8-byte marker at p's head (room for it is always
 * kept free; a marker never needs a PAD: head_off < cap, 8-aligned). */
static void put_marker(struct bp_ring_part *p, uint32_t mark)
{
	uint64_t head = atomic_load_explicit(&p->head, memory_order_relaxed);

	bp__ring_hdr(p->data + p->head_off, BP_RING_HDR, mark);
	p->head_off += BP_RING_HDR;
	if (p->head_off == p->cap)
		p->head_off = 0;
	atomic_store_explicit(&p->head, head + BP_RING_HDR,
			      memory_order_release);
}

int bp__ring_place(struct bp_ring *r, uint64_t need, uint64_t *pad)
{

	struct bp_ring_part *hot = &r->part[0], *cold = &r->part[1];

	if (r->cur == 1) {
		/* In the cold part: back to the hot one as soon as it has
		 * room (the consumer reads the cold part up to the BACK
		 * marker first). */
		if (need <= hot->cap / 2 && bp__ring_fits(hot, need, 8, pad)) {
			put_marker(cold, BP_RING_BACK);
			r->cur = 0;
			return 0;
		}
		if (need <= cold->cap / 2 && bp__ring_fits(cold, need, 8, pad))
			return 1;
		return -1;
	}
	/* The hot part is full or the record too big for it. */
	if (need > cold->cap / 2 || !bp__ring_fits(cold, need, 8, pad))
		return -1;
	put_marker(hot, BP_RING_SPILL);
	r->cur = 1;
	return 1;
}

void bp_ring_read_begin(struct bp_ring *r, struct bp_ring_reader *rd)
{
	rd->r = r;
	rd->part = r->rd_part;
	for (int i = 0; i < 2; i++) {
		rd->pos[i] = atomic_load_explicit(&r->part[i].tail,
						  memory_order_relaxed);
		rd->head[i] = atomic_load_explicit(&r->part[i].head,
						   memory_order_acquire);
	}
}

/* How far ahead of its position the consumer asks for lines. */
#define READ_AHEAD 1024u

const uint8_t *bp_ring_read_next(struct bp_ring_reader *rd, uint32_t *len)
{
	struct bp_ring *r = rd->r;

	for (;;) {
		int k = rd->part;
		struct bp_ring_part *p = &r->part[k];

		if (rd->pos[k] >= rd->head[k])
			return NULL;
		uint32_t l, total = rec_total(p, rd->pos[k], &l);
		int marker = l == BP_RING_PAD || l == BP_RING_SPILL ||
			     l == BP_RING_BACK;
		if (!marker)
			l &= ~BP_RING_AUX;
		if (total < BP_RING_HDR || total % 8 || total > p->cap ||
		    (!marker && (uint64_t)l + BP_RING_HDR > total) ||
		    (l == BP_RING_SPILL && k != 0) ||
		    (l == BP_RING_BACK && k != 1)) {
			rd->pos[k] = rd->head[k];
			return NULL;
		}
		const uint8_t *q = p->data + rd->pos[k] % p->cap + BP_RING_HDR;
		/* Once per 64 bytes read, ask for the line READ_AHEAD bytes
		 * on if it is wholly published (a line the producer may still
		 * write must stay in its cache alone): the lines come from
		 * the producer's core, where the record header's load waited
		 * for each in turn (docs/performance/stop-29.md, "The
		 * collector asks for the ring's lines ahead"). */
		if (((rd->pos[k] ^ (rd->pos[k] + total)) & ~(uint64_t)63) &&
		    ((rd->pos[k] + READ_AHEAD) | 63) < rd->head[k] &&
		    p->cap >= 2 * READ_AHEAD)
			__builtin_prefetch(
				p->data + (rd->pos[k] + READ_AHEAD) % p->cap, 0,
				0);
		rd->pos[k] += total;
		if (l == BP_RING_SPILL || l == BP_RING_BACK) {
			rd->part = 1 - k;
			continue;
		}
		if (l == BP_RING_PAD)
			continue;
		*len = l;
		return q;
	}
}

#if defined(__x86_64__)
#include <cpuid.h>

/* 1 if the CPU has CLFLUSHOPT (CPUID.7.0:EBX[23]), 0 if only CLFLUSH;
 * -1 until asked (a benign race: every thread finds the same). */
static _Atomic int has_clflushopt = -1;

static int clflushopt_ok(void)
{
	int v = atomic_load_explicit(&has_clflushopt, memory_order_relaxed);
	unsigned a, b, c, d;

	if (v < 0) {
		v = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
		atomic_store_explicit(&has_clflushopt, v, memory_order_relaxed);
	}
	return v;
}

/* 1 if the CPU has PREFETCHW (CPUID.80000001H:ECX[8]), else 0 (then a
 * read prefetch: the line comes in exclusive when no other cache holds
 * it, which is the case after the consumer's eviction); -1 until asked. */
static _Atomic int has_prefetchw = -1;

static int prefetchw_ok(void)
{
	int v = atomic_load_explicit(&has_prefetchw, memory_order_relaxed);
	unsigned a, b, c, d;

	if (v < 0) {
		v = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c >> 8 & 1);
		atomic_store_explicit(&has_prefetchw, v, memory_order_relaxed);
	}
	return v;
}
#endif

void bp__ring_ahead_block(const struct bp_ring_part *p, uint64_t to)
{
	/* cap >= BP_RING_LARGE_PART > BP_RING_AHEAD + BP_RING_AHEAD_BLOCK and
	 * to < cap: one subtraction wraps (no division per line). */
	uint64_t o = (to & ~(BP_RING_AHEAD_BLOCK - 1)) + BP_RING_AHEAD;
#if defined(__x86_64__)
	int w = prefetchw_ok();
#endif

	if (o >= p->cap)
		o -= p->cap;
	for (uint64_t i = 0; i < BP_RING_AHEAD_BLOCK; i += 64, o += 64) {
		if (o >= p->cap)
			o -= p->cap;
#if defined(__x86_64__)
		if (w)
			__asm__ volatile("prefetchw (%0)" : : "r"(p->data + o));
		else
			__builtin_prefetch(p->data + o, 1, 3);
#else
		__builtin_prefetch(p->data + o, 1, 3);
#endif
	}
}

/* Evicts the whole cache lines of part p's bytes [from, to) (free-running
 * positions) from every cache, once the consumer has read them: else the
 * consumer's core keeps a shared copy of each line, and the producer, when
 * it comes round to the line again, must first have that copy invalidated
 * -- a cross-core round trip per line that its next fence waits for
 * (docs/performance/stops-22-23.md, "The collector's copies of the
 * lines").  A line only partly read is left for the next pass.  A flush
 * writes back what it evicts: no byte changes, so a line the producer
 * writes at the same moment is only slower.  Consumer thread. */
static void evict_read(const struct bp_ring_part *p, uint64_t from,
		       uint64_t to)
{
#if defined(__x86_64__)
	uintptr_t base = (uintptr_t)p->data, a, b;
	int opt;

	/* A small ring (tests, a small `buffer'): the producer is always a
	 * few lines ahead, where flushing would only make both miss. */
	if (p->cap < BP_RING_LARGE_PART || to <= from)
		return;
	if (to - from > p->cap)
		from = to - p->cap;
	opt = clflushopt_ok();
	while (from < to) {
		uint64_t off = from % p->cap,
			 n = to - from < p->cap - off ? to - from : p->cap - off;
		/* From the line holding `from' (its bytes before `from' were
		 * read in an earlier pass) to the last whole line read. */
		a = (base + off) & ~(uintptr_t)63;
		b = (base + off + n) & ~(uintptr_t)63;
		for (; a < b; a += 64) {
			if (opt)
				__asm__ volatile(".byte 0x66; clflush (%0)"
						 : : "r"(a) : "memory");
			else
				__asm__ volatile("clflush (%0)"
						 : : "r"(a) : "memory");
		}
		from += n;
	}
#else
	(void)p;
	(void)from;
	(void)to;
#endif
}

void bp_ring_read_end(struct bp_ring_reader *rd)
{
	struct bp_ring *r = rd->r;

	r->rd_part = (uint8_t)rd->part;
	for (int i = 0; i < 2; i++) {
		struct bp_ring_part *p = &r->part[i];
		evict_read(p,
			   atomic_load_explicit(&p->tail, memory_order_relaxed),
			   rd->pos[i]);
		atomic_store_explicit(&p->tail, rd->pos[i],
				      memory_order_release);
	}
}
