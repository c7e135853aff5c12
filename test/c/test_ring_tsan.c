/* test_ring_tsan.c -- the trace ring (c_src/bp_ring.h/.c) under real
 * threads, built with -fsanitize=thread (and, in the plain test build, with
 * ASan + UBSan).  Any data race, torn record or lost count fails.
 *
 * Variants (each a producer thread and a consumer thread on one ring):
 *
 *   drop_newest  the consumer reads concurrently; a full ring makes
 *                bp_ring_reserve() return NULL and the producer counts the
 *                loss.  Asserts: read + dropped == produced, per kind (user
 *                and aux records), the same set of sequence numbers that the
 *                producer committed is read, in order, with intact bytes.
 *   drop_oldest  the flight recorder: the producer evicts the oldest
 *                records itself; the consumer reads only after holding the
 *                producer off with the session's busy/state protocol
 *                (bp_session.h: seq_cst busy exchange + state load vs state
 *                store + fence + wait for busy == 0).  Asserts: read +
 *                evicted + refused-while-paused == produced for user
 *                records, aux records never counted as evicted, order and
 *                bytes intact.
 *
 * Records have random lengths (reserve max, commit shorter), so the ring
 * wraps thousands of times with PAD records; every 7th record is committed
 * with bp_ring_commit_aux().
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "bp_ring.h"
#include "tap.h"

#define HDR 16 /* payload: u64 seq, u32 len, u32 flags (1 = aux) */

enum { RUNNING = 0, PAUSED = 1 };

struct run {
	struct bp_ring ring;
	uint8_t *data;
	uint64_t cap, produce; /* records to produce */
	uint32_t max_payload;
	int drop_oldest;
	/* busy/state protocol (drop_oldest only) */
	_Atomic uint32_t busy, state;
	_Atomic int done;
	_Atomic uint64_t progress; /* records attempted so far */
	_Atomic int overflowed; /* set at the first user record dropped */
	_Atomic uint64_t drains; /* consumer passes that read something */
	/* producer results */
	uint64_t prod_user, prod_aux, drop_user, drop_aux, paused_user,
		paused_aux;
	uint8_t *committed; /* bitmap of seqs committed (producer-owned) */
	/* consumer results */
	uint64_t read_user, read_aux, bad_bytes, bad_order, bad_len, passes;
	uint64_t last_seq;
	int any_read;
	uint8_t *seen; /* bitmap of seqs read (consumer-owned) */
};

static uint8_t pat(uint64_t seq, uint32_t i)
{
	return (uint8_t)((seq * 131u) ^ (i * 7u) ^ (seq >> 8));
}

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void bit_set(uint8_t *b, uint64_t i)
{
	b[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void *producer(void *arg)
{
	struct run *r = arg;
	uint64_t s = 0x2545F4914F6CDD1DULL;

	for (uint64_t seq = 0; seq < r->produce; seq++) {
		uint32_t aux = seq % 7 == 3;
		uint32_t len = HDR + (uint32_t)(xs(&s) % (r->max_payload - HDR + 1));
		uint32_t max = len + (uint32_t)(xs(&s) % 24); /* commit shorter */
		uint8_t *p;

		if (r->drop_oldest) {
			atomic_exchange_explicit(&r->busy, 1,
						 memory_order_seq_cst);
			if (atomic_load_explicit(&r->state,
						 memory_order_seq_cst) != RUNNING) {
				aux ? r->paused_aux++ : r->paused_user++;
				aux ? r->prod_aux++ : r->prod_user++;
				atomic_store_explicit(&r->busy, 0,
						      memory_order_release);
				continue;
			}
		}
		aux ? r->prod_aux++ : r->prod_user++;
		p = bp_ring_reserve(&r->ring, max);
		if (!p) {
			uint64_t d0 = atomic_load_explicit(
				&r->drains, memory_order_relaxed);
			aux ? r->drop_aux++ : r->drop_user++;
			if (!aux)
				atomic_store_explicit(&r->overflowed, 1,
						      memory_order_relaxed);
			/* A full ring: wait (a bounded while) for the consumer
			 * to read, or a run whose consumer is slow to be
			 * scheduled is all drops and the ring hardly wraps
			 * (seen: 4 wraps of a 64 KiB ring in 200,000
			 * records, 12 consumer passes). */
			for (int i = 0; i < 100000 &&
					atomic_load_explicit(
						&r->drains,
						memory_order_relaxed) == d0;
			     i++)
				sched_yield();
		} else {
			uint32_t flags = aux;
			memcpy(p, &seq, 8);
			memcpy(p + 8, &len, 4);
			memcpy(p + 12, &flags, 4);
			for (uint32_t i = HDR; i < len; i++)
				p[i] = pat(seq, i);
			if (aux)
				bp_ring_commit_aux(&r->ring, len);
			else
				bp_ring_commit(&r->ring, len);
			bit_set(r->committed, seq);
		}
		if (r->drop_oldest)
			atomic_store_explicit(&r->busy, 0,
					      memory_order_release);
		atomic_store_explicit(&r->progress, seq + 1,
				      memory_order_relaxed);
		if (seq % 4096 == 0)
			sched_yield(); /* let the consumer interleave */
	}
	atomic_store_explicit(&r->done, 1, memory_order_release);
	return NULL;
}

static int drain(struct run *r)
{
	struct bp_ring_reader rd;
	const uint8_t *p;
	uint32_t len;
	int n = 0;

	bp_ring_read_begin(&r->ring, &rd);
	while ((p = bp_ring_read_next(&rd, &len))) {
		uint64_t seq;
		uint32_t want, flags;
		memcpy(&seq, p, 8);
		memcpy(&want, p + 8, 4);
		memcpy(&flags, p + 12, 4);
		n++;
		if (len != want || len < HDR || seq >= r->produce) {
			r->bad_len++;
			continue;
		}
		if (r->any_read && seq <= r->last_seq)
			r->bad_order++;
		r->last_seq = seq;
		r->any_read = 1;
		for (uint32_t i = HDR; i < len; i++)
			if (p[i] != pat(seq, i)) {
				r->bad_bytes++;
				break;
			}
		flags ? r->read_aux++ : r->read_user++;
		bit_set(r->seen, seq);
	}
	bp_ring_read_end(&rd);
	return n;
}

static void *consumer(void *arg)
{
	struct run *r = arg;
	uint64_t next = 0;

	/* The small rings must overflow (asserted below): read nothing until
	 * the producer has been refused once, so that the timing of a run
	 * (a slow producer under a sanitizer or on a loaded machine) cannot
	 * keep every record in. */
	if (!r->drop_oldest && r->cap < (256u << 10))
		while (!atomic_load_explicit(&r->overflowed,
					     memory_order_relaxed) &&
		       !atomic_load_explicit(&r->done, memory_order_acquire))
			sched_yield();
	for (;;) {
		int done = atomic_load_explicit(&r->done, memory_order_acquire);
		if (r->drop_oldest && !done &&
		    atomic_load_explicit(&r->progress, memory_order_relaxed) <
			    next) {
			sched_yield();
			continue;
		}
		if (r->drop_oldest) {
			/* Every 3000 records, dump a window: hold the
			 * producer off (the collector's protocol). */
			atomic_store_explicit(&r->state, PAUSED,
					      memory_order_seq_cst);
			atomic_thread_fence(memory_order_seq_cst);
			while (atomic_load_explicit(&r->busy,
						    memory_order_acquire))
				sched_yield();
			drain(r);
			atomic_store_explicit(&r->state, RUNNING,
					      memory_order_seq_cst);
			r->passes++;
			next = atomic_load_explicit(&r->progress,
						    memory_order_relaxed) +
			       3000;
		} else if (drain(r)) {
			r->passes++;
			atomic_fetch_add_explicit(&r->drains, 1,
						  memory_order_relaxed);
		} else {
			sched_yield();
		}
		if (done)
			break;
	}
	drain(r); /* everything committed before done */
	return NULL;
}

static void variant(const char *name, uint64_t cap, uint64_t hot,
		    uint32_t max_payload, uint64_t produce, int drop_oldest)
{
	static struct run r; /* static: _Alignas(64) ring members */
	pthread_t pt, ct;
	uint64_t missing = 0, extra = 0, evicted;

	memset(&r, 0, sizeof r);
	r.cap = cap;
	r.data = malloc(cap);
	r.produce = produce;
	r.max_payload = max_payload;
	r.drop_oldest = drop_oldest;
	r.committed = calloc(produce / 8 + 1, 1);
	r.seen = calloc(produce / 8 + 1, 1);
	bp_ring_init_split(&r.ring, r.data, cap, hot, drop_oldest);
	pthread_create(&ct, NULL, consumer, &r);
	pthread_create(&pt, NULL, producer, &r);
	pthread_join(pt, NULL);
	pthread_join(ct, NULL);

	evicted = atomic_load(&r.ring.evicted);
	for (uint64_t i = 0; i < produce / 8 + 1; i++) {
		missing += (uint64_t)__builtin_popcount(r.committed[i] &
							(uint8_t)~r.seen[i]);
		extra += (uint64_t)__builtin_popcount(r.seen[i] &
						      (uint8_t)~r.committed[i]);
	}
	tap_diag("%s: produced %" PRIu64 " user + %" PRIu64 " aux, read %"
		 PRIu64 " + %" PRIu64 ", dropped %" PRIu64 " + %" PRIu64
		 ", evicted %" PRIu64 ", refused while paused %" PRIu64
		 ", %" PRIu64 " read passes, ring wrapped %" PRIu64 " times",
		 name, r.prod_user, r.prod_aux, r.read_user, r.read_aux,
		 r.drop_user, r.drop_aux, evicted, r.paused_user, r.passes,
		 bp_ring_written(&r.ring) / cap);
	is_u(r.prod_user + r.prod_aux, produce, "%s: every record attempted",
	     name);
	is_u(r.bad_len, 0, "%s: no torn or bad-length record", name);
	is_u(r.bad_bytes, 0, "%s: payload bytes intact", name);
	is_u(r.bad_order, 0, "%s: records read in order", name);
	is_u(extra, 0, "%s: nothing read that was not committed", name);
	is_u(bp_ring_used(&r.ring), 0, "%s: ring empty at the end", name);
	ok(bp_ring_written(&r.ring) / cap > 10,
	   "%s: the ring wrapped more than 10 times", name);
	if (!drop_oldest) {
		is_u(missing, 0, "%s: every committed record read", name);
		is_u(r.read_user + r.drop_user, r.prod_user,
		     "%s: user records: read + dropped == produced", name);
		is_u(r.read_aux + r.drop_aux, r.prod_aux,
		     "%s: aux records: read + dropped == produced", name);
		is_u(evicted, 0, "%s: nothing evicted", name);
		/* The small rings must overflow (the refusal path under
		 * threads); a ring of 512 KiB is there for the consumer's
		 * evictions and may keep up, depending on the timing. */
		if (cap < (256u << 10))
			ok(r.drop_user > 0, "%s: the ring overflowed", name);
	} else {
		is_u(r.drop_user + r.drop_aux, 0,
		     "%s: reserve never fails", name);
		is_u(r.read_user + evicted + r.paused_user, r.prod_user,
		     "%s: user records: read + evicted + refused == produced",
		     name);
		is_u(missing - (r.prod_aux - r.paused_aux - r.read_aux),
		     evicted, "%s: evicted == committed user records not read "
		     "(aux evictions not counted)", name);
		ok(evicted > 0, "%s: records were evicted", name);
	}
	free(r.data);
	free(r.committed);
	free(r.seen);
}

int main(void)
{
	/* Small rings: many wraps and overflows in a short run. */
	variant("drop_newest cap=4096", 4096, 0, 200, 400000, 0);
	variant("drop_newest cap=65536", 65536, 0, 1500, 200000, 0);
	variant("drop_oldest cap=4096", 4096, 0, 200, 400000, 1);
	variant("drop_oldest cap=65536", 65536, 0, 1500, 200000, 1);
	/* Split rings: the producer spills to the cold part and comes back
	 * while the consumer reads. */
	variant("split drop_newest cap=8192 hot=1024", 8192, 1024, 200, 400000,
		0);
	variant("split drop_newest cap=65536 hot=4096", 65536, 4096, 1500,
		200000, 0);
	/* Parts of >= 256 KiB: the consumer evicts the lines it has read
	 * from every cache (bp_ring.c, evict_read) while the producer writes
	 * next to them: no byte may change. */
	variant("split drop_newest cap=512KiB hot=256KiB", 1 << 19, 256 << 10,
		1500, 200000, 0);
	return tap_done();
}
