/* test_ring.c -- unit tests of the SPSC trace ring (c_src/bp_ring.[ch]).
 *
 *  1. Oracle: a single thread drives a real ring and a naive model (a queue
 *     of records plus head/tail counters that follow the rule documented in
 *     bp_ring.h) with random reserve/commit/abandon/read operations; every
 *     reserve result (NULL or the exact address), every payload byte, head,
 *     tail and `evicted` must agree.  Both overflow modes, several sizes.
 *  2. Too big: a reservation whose aligned record exceeds cap/2 always
 *     fails, in both modes, without changing or evicting anything.
 *  3. Stress: one ring per producer thread, 4 producers, 1 consumer
 *     draining all rings concurrently.  Records are checksummed; sequence
 *     numbers must strictly increase and consumed + drops == attempted.
 *     Variants: small rings that fill often, a ring too big to fill (no
 *     drop, every record exactly once), and lossless retry on small rings.
 * The flight recorder (drop oldest) and the hot and cold parts: test_ring_parts.c.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "bp_ring.h"
#include "ring_util.h"
#include "tap.h"


/* ---- 1. oracle --------------------------------------------------------- */

/* A record as the model sees it: [start, rec) is filler (empty when no
 * padding was needed), [rec, end) the record itself. */
struct mrec {
	uint64_t start, rec, end, seq;
	uint32_t len;
	int aux; /* committed with bp_ring_commit_aux: not counted evicted */
};

struct model {
	uint64_t cap, head, tail, evicted;
	int drop_oldest;
	struct mrec *q; /* circular queue */
	size_t qcap, qfirst, qlen;
};

static struct mrec *mfront(struct model *m)
{
	return &m->q[m->qfirst];
}

static void mpop(struct model *m)
{
	m->qfirst = (m->qfirst + 1) % m->qcap;
	m->qlen--;
}

/* Where a record of max_len would start (rule of bp_ring.h): a record
 * never wraps, so if fewer than `need` bytes are left before the end of the
 * data, the rest is filler and the record starts at offset 0. */
static uint64_t mpad(const struct model *m, uint64_t need)
{
	uint64_t contig = m->cap - m->head % m->cap;

	return contig < need ? contig : 0;
}

/* Drop-oldest eviction, one filler or record at a time. */
static void mevict(struct model *m, uint64_t bytes)
{
	while (m->tail < m->head && m->head + bytes - m->tail > m->cap) {
		struct mrec *f = mfront(m);
		if (m->tail < f->rec) { /* filler first */
			m->tail = f->rec;
			continue;
		}
		m->tail = f->end;
		m->evicted += !f->aux;
		mpop(m);
	}
}

struct oracle_stats {
	unsigned long ops, writes, null_full, null_big, pads, abandoned, aux;
	unsigned long reads, partial_reads;
};

/* One reservation: returns what the model expects (1: success) and, for
 * successes, the pad.  Applies eviction to the model. */
static int mreserve(struct model *m, uint32_t max_len, uint64_t *pad,
		    struct oracle_stats *st)
{
	uint64_t need = bp_ring_align(BP_RING_HDR + (uint64_t)max_len);

	if (need > m->cap / 2) {
		st->null_big++;
		return 0;
	}
	*pad = mpad(m, need);
	if (m->head + *pad + need - m->tail > m->cap) {
		if (!m->drop_oldest) {
			st->null_full++;
			return 0;
		}
		mevict(m, *pad + need);
	}
	return 1;
}

static uint32_t pick_len(uint64_t *s, uint64_t cap)
{
	uint64_t half = cap / 2, r = tap_rand(s) % 100;

	if (r < 55)
		return (uint32_t)(tap_rand(s) % 33); /* small */
	if (r < 85)
		return (uint32_t)(tap_rand(s) % (half - 8 + 1)); /* up to the max */
	if (r < 95) /* around the limit: half-15 .. half+8 */
		return (uint32_t)(half - 15 + tap_rand(s) % 24);
	return (uint32_t)(half + tap_rand(s) % (2 * cap)); /* too big */
}

static void oracle_write(struct bp_ring *r, struct model *m, uint64_t *s,
			 uint64_t *seq, int abandon, struct oracle_stats *st)
{
	uint32_t max_len = pick_len(s, m->cap), len;
	uint64_t pad = 0;
	int want = mreserve(m, max_len, &pad, st);
	uint8_t *p = bp_ring_reserve(r, max_len);

	check_u(p != NULL, want);
	if (!p || !want)
		return;
	uint64_t rec = m->head + pad;
	check_u((uint64_t)(p - r->part[1].data), rec % m->cap + BP_RING_HDR);
	/* The whole reservation lies inside the data, never wraps. */
	check(rec % m->cap + bp_ring_align(BP_RING_HDR + max_len) <= m->cap);
	if (pad)
		st->pads++;
	if (abandon) {
		/* Scribble and walk away: nothing may become visible. */
		memset(p, 0xEE, max_len);
		st->abandoned++;
		return;
	}
	len = max_len && tap_rand(s) % 4 == 0 ? (uint32_t)(tap_rand(s) % max_len)
					 : max_len;
	for (uint32_t i = 0; i < len; i++)
		p[i] = pat(*seq, i);
	int aux = tap_rand(s) % 8 == 0;
	if (aux) {
		bp_ring_commit_aux(r, len);
		st->aux++;
	} else {
		bp_ring_commit(r, len);
	}
	check(m->qlen < m->qcap);
	m->q[(m->qfirst + m->qlen++) % m->qcap] =
		(struct mrec){m->head, rec, rec + bp_ring_align(BP_RING_HDR + len),
			      *seq, len, aux};
	m->head = rec + bp_ring_align(BP_RING_HDR + len);
	(*seq)++;
	st->writes++;
}

/* Reads up to k records (k > queue length: until the reader says end). */
static void oracle_read(struct bp_ring *r, struct model *m, size_t k,
			struct oracle_stats *st)
{
	struct bp_ring_reader rd;
	const uint8_t *p;
	uint32_t len;
	size_t n;

	bp_ring_read_begin(r, &rd);
	for (n = 0; n < k; n++) {
		p = bp_ring_read_next(&rd, &len);
		if (m->qlen == 0) {
			check(p == NULL);
			break;
		}
		check(p != NULL);
		if (!p)
			break;
		struct mrec *f = mfront(m);
		check_u(len, f->len); /* BP_RING_AUX not passed on */
		check_u((uint64_t)(p - r->part[1].data), f->rec % m->cap + BP_RING_HDR);
		check_u(first_diff(p, len < f->len ? len : f->len, f->seq),
			len < f->len ? len : f->len);
		m->tail = f->end;
		mpop(m);
	}
	if (n == k && k <= m->qlen)
		st->partial_reads++;
	if (m->qlen == 0 && n < k)
		m->tail = m->head; /* read to the end of the snapshot */
	bp_ring_read_end(&rd);
	st->reads++;
}

static void oracle_run(uint64_t cap, int drop_oldest, unsigned long ops,
		       uint64_t seed)
{
	struct bp_ring r;
	struct model m = {0};
	struct oracle_stats st = {0};
	uint8_t *data = malloc(cap); /* exact size: ASan sees overruns */
	uint64_t s = seed, seq = 0;

	bp_ring_init(&r, data, cap, drop_oldest);
	m.cap = cap;
	m.drop_oldest = drop_oldest;
	m.qcap = cap / BP_RING_HDR + 1;
	m.q = calloc(m.qcap, sizeof *m.q);
	for (st.ops = 0; st.ops < ops; st.ops++) {
		uint64_t op = tap_rand(&s) % 100;
		if (op < 60)
			oracle_write(&r, &m, &s, &seq, 0, &st);
		else if (op < 65)
			oracle_write(&r, &m, &s, &seq, 1, &st);
		else if (op < 90)
			oracle_read(&r, &m, tap_rand(&s) % 6, &st);
		else
			oracle_read(&r, &m, SIZE_MAX, &st);
		check_u(ring_head(&r), m.head);
		check_u(ring_tail(&r), m.tail);
		check_u(ring_evicted(&r), m.evicted);
		check_u(bp_ring_used(&r), m.head - m.tail);
	}
	oracle_read(&r, &m, SIZE_MAX, &st);
	check_u(m.qlen, 0);
	check_u(bp_ring_used(&r), 0);
	ok_bulk("oracle cap=%" PRIu64 " %s: %lu ops, %lu records (%lu aux), "
		"%lu full, %lu too big, %lu pads, %lu evicted, %lu abandoned",
		cap, drop_oldest ? "drop-oldest" : "drop-newest", st.ops,
		st.writes, st.aux, st.null_full, st.null_big, st.pads,
		(unsigned long)m.evicted, st.abandoned);
	/* The random walk must have reached the interesting cases. */
	ok(st.pads > 0 && st.null_big > 0 && st.partial_reads > 0 &&
		   (drop_oldest ? m.evicted > 0 && st.null_full == 0
				: st.null_full > 0 && m.evicted == 0),
	   "oracle cap=%" PRIu64 " %s: wrap padding, full/evict, too big "
	   "and partial reads all exercised",
	   cap, drop_oldest ? "drop-oldest" : "drop-newest");
	free(m.q);
	free(data);
}

/* ---- 2. too big --------------------------------------------------------- */

static void test_too_big(uint64_t cap, int drop_oldest)
{
	struct bp_ring r;
	uint8_t *data = malloc(cap);
	uint32_t lens[] = {(uint32_t)cap / 2 + 1, (uint32_t)cap, UINT32_MAX - 7,
			   UINT32_MAX};

	bp_ring_init(&r, data, cap, drop_oldest);
	/* Leave a couple of records in so that eviction would be possible. */
	for (int i = 0; i < 2; i++) {
		uint8_t *p = bp_ring_reserve(&r, 8);
		check(p != NULL);
		if (p)
			bp_ring_commit(&r, 8);
	}
	uint64_t head = ring_head(&r), tail = ring_tail(&r);
	/* Boundary: exactly the rule of bp_ring.h (record incl. header).
	 * Lengths that do fit are tried on an empty ring below (here they
	 * could evict, or find the ring full). */
	for (uint32_t l = (uint32_t)cap / 2 - 24; l <= cap / 2 + 16; l++) {
		if (bp_ring_align(BP_RING_HDR + l) <= cap / 2)
			continue;
		check(bp_ring_reserve(&r, l) == NULL);
		check_u(ring_head(&r), head);
	}
	/* Anything over cap/2 always fails. */
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		check(bp_ring_reserve(&r, lens[i]) == NULL);
	check_u(ring_head(&r), head);
	if (drop_oldest) {
		/* A too-big reservation must not evict anything. */
		check_u(ring_evicted(&r), 0);
		check_u(ring_tail(&r), tail);
	}
	/* An empty ring accepts a record (header included, 8-aligned) of up
	 * to cap/2 bytes, i.e. a payload of up to (cap/2 & ~7) - 8. */
	uint32_t max_ok = (uint32_t)(cap / 2 & ~(uint64_t)7) - BP_RING_HDR;
	bp_ring_init(&r, data, cap, drop_oldest);
	check(bp_ring_reserve(&r, max_ok) != NULL);
	check(bp_ring_reserve(&r, max_ok + 1) == NULL);
	ok_bulk("too big: cap=%" PRIu64 " %s: reserve of > cap/2 fails, "
		"changes nothing",
		cap, drop_oldest ? "drop-oldest" : "drop-newest");
	free(data);
}

static void test_init(void)
{
	static uint8_t data[4100];
	struct bp_ring r;

	bp_ring_init(&r, data, sizeof data, 0);
	is_u(r.part[1].cap, 4096, "init rounds cap down to a multiple of 8");
	is_u(r.part[0].cap, 0, "a ring under 1 MiB has one part");
	is_u(bp_ring_used(&r), 0, "a new ring is empty");
	struct bp_ring_reader rd;
	uint32_t len;
	bp_ring_read_begin(&r, &rd);
	ok(bp_ring_read_next(&rd, &len) == NULL, "reading an empty ring ends");
	bp_ring_read_end(&rd);
	is_u(ring_tail(&r), 0, "empty read pass leaves tail at 0");
}

/* ---- 3. concurrent stress ----------------------------------------------- */

/* Record: u32 producer id, u32 record length, u64 seq, u32 checksum, then
 * pseudo-random bytes.  The checksum covers everything but itself. */
#define REC_HDR 20u

static uint32_t fnv1a(uint32_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static uint32_t rec_sum(const uint8_t *rec, uint32_t len)
{
	uint32_t h = fnv1a(2166136261u, rec, 16);

	return fnv1a(h, rec + REC_HDR, len - REC_HDR);
}

#define NPROD 4

struct producer {
	struct bp_ring ring;
	uint8_t *data;
	pthread_t th;
	uint32_t id, max_payload;
	uint64_t limit;    /* records to attempt, 0: until `stop` */
	uint32_t work;     /* up to this many PRNG steps between records */
	int lossless;      /* retry a NULL reserve instead of dropping */
	_Atomic int *stop; /* set by the main thread when limit == 0 */
	uint64_t attempted, drops, retries; /* results */
	_Atomic int filled; /* set at the first drop, for the consumer */
};

struct consumer_view {
	uint64_t consumed, next_min, torn, bad_order, bad_id, bad_len;
	uint64_t err_seq, err_prev; /* first ordering error */
	uint8_t *seen;              /* bitmap, when counting exactly-once */
	uint64_t seen_cap, dup;
};

struct stress {
	struct producer p[NPROD];
	struct consumer_view v[NPROD];
	_Atomic int stop, producers_done;
	uint64_t passes;
};

static void *producer_main(void *arg)
{
	struct producer *pr = arg;
	uint64_t s = 0x9E3779B97F4A7C15ULL * (pr->id + 1);
	_Atomic int *stop = pr->stop;
	uint64_t run_of_drops = 0;

	for (uint64_t seq = 0;; seq++) {
		if (pr->limit ? seq >= pr->limit
			      : (seq % 256 == 0 &&
				 atomic_load_explicit(stop, memory_order_relaxed)))
			break;
		if (pr->work) { /* the tracer's own work between events */
			for (uint64_t w = tap_rand(&s) % pr->work; w; w--)
				tap_rand(&s);
		}
		uint32_t plen = (uint32_t)(tap_rand(&s) % (pr->max_payload + 1));
		uint32_t len = REC_HDR + plen;
		/* Sometimes reserve more than is committed. */
		uint32_t max_len = len + (tap_rand(&s) % 4 == 0 ? 24 : 0);
		uint8_t *p;

		pr->attempted++;
		while (!(p = bp_ring_reserve(&pr->ring, max_len))) {
			if (!pr->lossless) {
				if (!pr->drops++)
					atomic_store_explicit(
						&pr->filled, 1,
						memory_order_relaxed);
				break;
			}
			pr->retries++;
			sched_yield();
		}
		if (!p) {
			/* A full ring drops in nanoseconds; with more threads
			 * than CPUs, give the consumer a chance now and then
			 * (a real tracer thread has other work to do). */
			if (++run_of_drops % 64 == 0)
				sched_yield();
			continue;
		}
		run_of_drops = 0;
		memcpy(p, &pr->id, 4);
		memcpy(p + 4, &len, 4);
		memcpy(p + 8, &seq, 8);
		for (uint32_t i = 0; i < plen; i++)
			p[REC_HDR + i] = (uint8_t)tap_rand(&s);
		uint32_t sum = rec_sum(p, len);
		memcpy(p + 16, &sum, 4);
		bp_ring_commit(&pr->ring, len);
	}
	return NULL;
}

static void consume(struct consumer_view *v, uint32_t ring_id,
		    const uint8_t *p, uint32_t len)
{
	uint32_t id, rlen, sum;
	uint64_t seq;

	if (len < REC_HDR) {
		v->bad_len++;
		return;
	}
	memcpy(&id, p, 4);
	memcpy(&rlen, p + 4, 4);
	memcpy(&seq, p + 8, 8);
	memcpy(&sum, p + 16, 4);
	if (rlen != len)
		v->bad_len++;
	if (id != ring_id)
		v->bad_id++;
	if (rlen == len && sum != rec_sum(p, len))
		v->torn++;
	if (seq < v->next_min) {
		if (!v->bad_order++) {
			v->err_seq = seq;
			v->err_prev = v->next_min - 1;
		}
	}
	v->next_min = seq + 1;
	if (v->seen) {
		if (seq >= v->seen_cap || (v->seen[seq / 8] >> (seq % 8)) & 1)
			v->dup++;
		else
			v->seen[seq / 8] |= (uint8_t)(1u << (seq % 8));
	}
	v->consumed++;
}

/* One pass over every ring; returns the number of records read. */
static uint64_t drain(struct stress *st)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < NPROD; i++) {
		struct bp_ring_reader rd;
		const uint8_t *p;
		uint32_t len, n = 0;

		bp_ring_read_begin(&st->p[i].ring, &rd);
		while ((p = bp_ring_read_next(&rd, &len))) {
			consume(&st->v[i], i, p, len);
			if (++n % 64 == 0) /* free space early, like the collector */
				bp_ring_read_end(&rd);
		}
		bp_ring_read_end(&rd);
		total += n;
	}
	st->passes++;
	return total;
}

/* Whether every producer has dropped a record (or all are done). */
static int all_filled(struct stress *st)
{
	if (atomic_load_explicit(&st->producers_done, memory_order_acquire))
		return 1;
	for (uint32_t i = 0; i < NPROD; i++)
		if (!atomic_load_explicit(&st->p[i].filled,
					  memory_order_relaxed))
			return 0;
	return 1;
}

static void *consumer_main(void *arg)
{
	struct stress *st = arg;

	/* A timed run that may drop asserts its rings did fill: the consumer
	 * starts reading only once each has, so that a fast consumer (or a
	 * slow producer on a loaded machine) cannot make the run lossless
	 * by chance.  Producers drop within microseconds of a full ring. */
	if (!st->p[0].limit && !st->p[0].lossless)
		while (!all_filled(st))
			sched_yield();
	while (!atomic_load_explicit(&st->producers_done, memory_order_acquire))
		if (!drain(st))
			sched_yield(); /* idle: let producers have the CPU */
	drain(st); /* everything published before the producers ended */
	return NULL;
}

/* Hot part of the stress rings: (uint64_t)-1 for bp_ring_init's default. */
static uint64_t stress_hot = (uint64_t)-1;

/* Runs one stress variant; returns nothing, reports TAP lines. */
static void stress_run(const char *name, uint64_t cap, uint32_t max_payload,
		       uint32_t work, double seconds, uint64_t limit,
		       int lossless, int exactly_once)
{
	static struct stress st; /* static: _Alignas(64) members */
	pthread_t cons;
	double t0, t1;
	uint64_t attempted = 0, consumed = 0, drops = 0, retries = 0;

	memset(&st, 0, sizeof st);
	for (uint32_t i = 0; i < NPROD; i++) {
		struct producer *pr = &st.p[i];
		pr->data = malloc(cap);
		if (stress_hot == (uint64_t)-1)
			bp_ring_init(&pr->ring, pr->data, cap, 0);
		else
			bp_ring_init_split(&pr->ring, pr->data, cap, stress_hot,
					   0);
		pr->id = i;
		pr->max_payload = max_payload;
		pr->limit = limit;
		pr->work = work;
		pr->lossless = lossless;
		pr->stop = &st.stop;
		if (exactly_once) {
			st.v[i].seen_cap = limit;
			st.v[i].seen = calloc(limit / 8 + 1, 1);
		}
	}
	t0 = now_s();
	pthread_create(&cons, NULL, consumer_main, &st);
	for (uint32_t i = 0; i < NPROD; i++)
		pthread_create(&st.p[i].th, NULL, producer_main, &st.p[i]);
	if (!limit) {
		struct timespec ts = {(time_t)seconds,
				      (long)((seconds - (time_t)seconds) * 1e9)};
		nanosleep(&ts, NULL);
		atomic_store_explicit(&st.stop, 1, memory_order_relaxed);
	}
	for (uint32_t i = 0; i < NPROD; i++)
		pthread_join(st.p[i].th, NULL);
	atomic_store_explicit(&st.producers_done, 1, memory_order_release);
	pthread_join(cons, NULL);
	t1 = now_s();

	for (uint32_t i = 0; i < NPROD; i++) {
		struct producer *pr = &st.p[i];
		struct consumer_view *v = &st.v[i];
		check_u(v->torn, 0);
		check_u(v->bad_len, 0);
		check_u(v->bad_id, 0);
		check_u(v->bad_order, 0);
		if (v->bad_order)
			tap_diag("producer %u: seq %" PRIu64 " after %" PRIu64,
				 i, v->err_seq, v->err_prev);
		check_u(v->consumed + pr->drops, pr->attempted);
		check_u(bp_ring_used(&pr->ring), 0);
		if (exactly_once) {
			uint64_t missing = 0;
			for (uint64_t q = 0; q < limit; q++)
				missing += !((v->seen[q / 8] >> (q % 8)) & 1);
			check_u(pr->drops, 0);
			check_u(v->dup, 0);
			check_u(missing, 0);
			check_u(v->consumed, limit);
		}
		attempted += pr->attempted;
		consumed += v->consumed;
		drops += pr->drops;
		retries += pr->retries;
	}
	ok_bulk("stress %s: %d producers, ring %" PRIu64 " B: no torn record, "
		"seq increasing, consumed + dropped == attempted%s",
		name, NPROD, cap, exactly_once ? ", each record exactly once" : "");
	tap_diag("  %.2f s, %" PRIu64 " attempted, %" PRIu64 " consumed "
		 "(%.2f M/s), %" PRIu64 " dropped (%.1f%%), %" PRIu64
		 " full retries, %" PRIu64 " consumer passes",
		 t1 - t0, attempted, consumed, consumed / (t1 - t0) / 1e6, drops,
		 attempted ? 100.0 * (double)drops / (double)attempted : 0.0,
		 retries, st.passes);
	if (!limit && !lossless)
		ok(drops > 0 && consumed > 0,
		   "stress %s: the rings did fill (%" PRIu64 " drops)", name,
		   drops);
	for (uint32_t i = 0; i < NPROD; i++) {
		free(st.p[i].data);
		free(st.v[i].seen);
	}
}


int main(void)
{
	static const uint64_t caps[] = {64, 72, 256, 1000, 4096, 65536};

	setvbuf(stdout, NULL, _IOLBF, 0);
	tap_diag("test_ring: SPSC ring (c_src/bp_ring.[ch])");
	test_init();
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		for (int mode = 0; mode < 2; mode++) {
			oracle_run(caps[i], mode, caps[i] > 4096 ? 50000 : 200000,
				   0x1234 + i * 7 + mode);
			test_too_big(caps[i], mode);
		}
	}

	/* Back to back: the rings are full most of the time. */
	stress_run("drop 4 KiB", 4096, 200, 0, 2.0, 0, 0, 0);
	/* With some work between records: fills now and then. */
	stress_run("drop 64 KiB", 65536, 1000, 400, 2.0, 0, 0, 0);
	/* 200000 records of <= 20+48+24 bytes (+8 header) fit in 32 MiB. */
	stress_run("no-drop 32 MiB", 32u << 20, 48, 0, 0, 200000, 0, 1);
	/* Producers wait for room: wraps all the time, nothing lost. */
	stress_run("lossless retry 4 KiB", 4096, 200, 0, 0, 500000, 1, 1);

	/* Split rings under threads: spills and returns while the consumer
	 * reads concurrently. */
	stress_hot = 1024;
	stress_run("split drop 16 KiB, hot 1 KiB", 16384, 200, 0, 2.0, 0, 0, 0);
	stress_hot = 4096;
	stress_run("split drop 64 KiB, hot 4 KiB", 65536, 1000, 400, 2.0, 0, 0,
		   0);
	stress_run("split lossless retry 64 KiB, hot 4 KiB", 65536, 200, 0, 0,
		   500000, 1, 1);
	stress_hot = (uint64_t)-1;
	return tap_done();
}
