/* test_ring_parts.c -- unit tests of the SPSC trace ring (c_src/bp_ring.[ch]),
 * continued from test_ring.c:
 *
 *  4. Flight recorder (drop oldest, no consumer): what is read back is the
 *     newest contiguous suffix and read + evicted == written (auxiliary
 *     records, BP_RING_AUX, are not counted as evicted).
 *  5. Hot and cold parts: a split ring under random writes and reads, one
 *     thread, against a FIFO model; the default split of a ring's sizes.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "ring_util.h"
#include "tap.h"

/* ---- 4. flight recorder --------------------------------------------------- */

/* Every fifth record is auxiliary (bp_ring_commit_aux) when aux is set:
 * evicting one is not a loss, so read + evicted counts user records. */
#define IS_AUX(aux, seq) ((aux) && (seq) % 5 == 4)

static void test_flight_recorder(uint64_t cap, uint64_t n, int aux,
				 uint64_t seed)
{
	struct bp_ring r;
	uint8_t *data = malloc(cap);
	uint32_t *lens = malloc(n * sizeof *lens);
	uint64_t s = seed, written = 0, read = 0, first = 0;
	uint64_t user_written = 0, user_read = 0;
	struct bp_ring_reader rd;
	const uint8_t *p;
	uint32_t len;

	bp_ring_init(&r, data, cap, 1);
	for (int round = 0; round < 3; round++) {
		/* Write without any consumer... */
		for (uint64_t k = 0; k < n / 3; k++) {
			uint32_t l = (uint32_t)(8 + tap_rand(&s) % (cap / 8));
			uint8_t *q = bp_ring_reserve(&r, l);
			check(q != NULL); /* drop-oldest never refuses */
			if (!q)
				continue;
			memcpy(q, &written, 8);
			for (uint32_t i = 0; i + 8 < l; i++)
				q[8 + i] = pat(written, i);
			lens[written] = l;
			if (IS_AUX(aux, written)) {
				bp_ring_commit_aux(&r, l);
			} else {
				bp_ring_commit(&r, l);
				user_written++;
			}
			written++;
		}
		/* ...then dump: the newest records, a contiguous suffix. */
		uint64_t got = 0;
		bp_ring_read_begin(&r, &rd);
		while ((p = bp_ring_read_next(&rd, &len))) {
			uint64_t seq;
			memcpy(&seq, p, 8);
			if (got == 0)
				first = seq;
			check_u(seq, first + got);
			check(seq < written);
			if (seq < written) {
				check_u(len, lens[seq]);
				check_u(first_diff(p + 8, len - 8, seq) + 8, len);
			}
			user_read += !IS_AUX(aux, seq);
			got++;
		}
		bp_ring_read_end(&rd);
		read += got;
		check(got > 0);
		check_u(first + got, written); /* ends with the newest */
		check_u(user_read + ring_evicted(&r), user_written);
		check_u(bp_ring_used(&r), 0);
	}
	ok_bulk("flight recorder cap=%" PRIu64 "%s: %" PRIu64 " written, %" PRIu64
		" read (newest, contiguous), %" PRIu64 " evicted",
		cap, aux ? " with aux records" : "", written, read,
		ring_evicted(&r));
	if (aux)
		is_u(user_read + ring_evicted(&r), user_written,
		     "flight recorder cap=%" PRIu64 ": user records read + "
		     "evicted == user records written (%" PRIu64 ")",
		     cap, user_written);
	else
		is_u(read + ring_evicted(&r), written,
		     "flight recorder cap=%" PRIu64 ": read + evicted == "
		     "written (%" PRIu64 ")",
		     cap, written);
	free(lens);
	free(data);
}

/* Fewer records than fit: nothing evicted, all read back in order. */
static void test_flight_recorder_no_evict(void)
{
	struct bp_ring r;
	uint8_t *data = malloc(4096);
	struct bp_ring_reader rd;
	const uint8_t *p;
	uint32_t len;
	uint64_t k = 0;

	bp_ring_init(&r, data, 4096, 1);
	for (uint64_t i = 0; i < 100; i++) { /* 100 * 32 B < 4096 */
		uint8_t *q = bp_ring_reserve(&r, 24);
		memcpy(q, &i, 8);
		bp_ring_commit(&r, 8);
	}
	bp_ring_read_begin(&r, &rd);
	while ((p = bp_ring_read_next(&rd, &len))) {
		uint64_t seq;
		memcpy(&seq, p, 8);
		check_u(seq, k);
		check_u(len, 8);
		k++;
	}
	bp_ring_read_end(&rd);
	check_u(k, 100);
	check_u(ring_evicted(&r), 0);
	ok_bulk("flight recorder under capacity: all 100 read, none evicted");
	free(data);
}

/* ---- 5. hot and cold parts ------------------------------------------------ */

/*
 * A split ring driven by random writes (reserve, commit shorter, some
 * abandoned) and reads of random length, one thread.  Asserts: records
 * come out in the order they were committed with their bytes intact (a
 * FIFO of sequence numbers is the model), read + refused == attempted,
 * a refusal happens only when neither part has room (used bytes + the
 * record and its padding in each part + the two markers' room > the
 * capacity) or the record is bigger than bp_ring_max_len(), and the
 * producer went to the cold part and back many times.
 */
static void copy_plain(uint8_t *d, const uint8_t *src, uint32_t len)
{
	memcpy(d, src, len);
}

/* use_put: half the records are written whole with bp_ring_put (the
 * copy path of overlapping sessions) instead of reserve + commit. */
static void test_split(uint64_t cap, uint64_t hot, unsigned long ops,
		       uint64_t seed, int use_put)
{
	uint8_t *src = malloc(hot);
	struct bp_ring r;
	uint8_t *data = malloc(cap);
	uint64_t s = seed, seq = 0, qhead = 0, qtail = 0;
	uint64_t *q = calloc(ops + 1, sizeof *q);
	unsigned long spills = 0, backs = 0, refused = 0, refused_big = 0,
		      early = 0, bad = 0, reads = 0, writes = 0, puts = 0;
	uint8_t cur;

	bp_ring_init_split(&r, data, cap, hot, 0);
	cur = r.cur;
	for (unsigned long i = 0; i < ops; i++) {
		uint64_t op = tap_rand(&s) % 100;
		int phase = (int)(i / 3000 % 3); /* mixed, fill, drain */
		if (phase == 1 ? op < 97 : phase == 2 ? op < 30 : op < 62) {
			uint32_t len = 12 + (uint32_t)(tap_rand(&s) %
						       (tap_rand(&s) % 50 == 0
							    ? hot
							    : hot / 16 + 1));
			uint32_t max = len + (uint32_t)(tap_rand(&s) % 24);
			uint64_t used = bp_ring_used(&r);
			if (tap_rand(&s) % 300 == 0)
				max = (uint32_t)bp_ring_max_len(&r) + 1 +
				      (uint32_t)(tap_rand(&s) % 64);
			if (use_put && op % 2 && op >= 2 && max <= hot) {
				/* A whole record, bytes as below. */
				uint64_t needp = bp_ring_align(BP_RING_HDR + len);
				memcpy(src, &seq, 8);
				memcpy(src + 8, &len, 4);
				for (uint32_t k = 12; k < len; k++)
					src[k] = pat(seq, k - 12);
				if (!bp_ring_put(&r, src, len, copy_plain)) {
					refused++;
					if (len > bp_ring_max_len(&r))
						refused_big++;
					else if (used + 4 * needp + 16 <= cap)
						early++;
				} else {
					q[qtail++] = seq++;
					writes++;
					puts++;
				}
				if (r.cur != cur) {
					r.cur ? spills++ : backs++;
					cur = r.cur;
				}
				continue;
			}
			uint8_t *p = bp_ring_reserve(&r, max);
			uint64_t need = bp_ring_align(BP_RING_HDR + max);
			if (r.cur != cur) {
				r.cur ? spills++ : backs++;
				cur = r.cur;
			}
			if (!p) {
				refused++;
				if (max > bp_ring_max_len(&r))
					refused_big++;
				else if (used + 4 * need + 16 <= cap)
					early++;
				continue;
			}
			if (op < 2)
				continue; /* abandoned reservation */
			memcpy(p, &seq, 8);
			memcpy(p + 8, &len, 4);
			for (uint32_t k = 12; k < len; k++)
				p[k] = pat(seq, k - 12);
			if (op % 5 == 0)
				bp_ring_commit_aux(&r, len);
			else
				bp_ring_commit(&r, len);
			q[qtail++] = seq++;
			writes++;
		} else {
			struct bp_ring_reader rd;
			const uint8_t *p;
			uint32_t len;
			uint64_t n = op < 90 || phase == 1 ? tap_rand(&s) % 8
							: UINT64_MAX;
			bp_ring_read_begin(&r, &rd);
			while (n-- && (p = bp_ring_read_next(&rd, &len))) {
				uint64_t got;
				uint32_t l2;
				memcpy(&got, p, 8);
				memcpy(&l2, p + 8, 4);
				if (qhead == qtail || got != q[qhead] ||
				    l2 != len || first_diff(p + 12, len - 12,
							    got) != len - 12)
					bad++;
				qhead++;
				reads++;
			}
			bp_ring_read_end(&rd);
		}
	}
	/* Drain. */
	for (int pass = 0; pass < 3; pass++) {
		struct bp_ring_reader rd;
		const uint8_t *p;
		uint32_t len;
		bp_ring_read_begin(&r, &rd);
		while ((p = bp_ring_read_next(&rd, &len))) {
			uint64_t got;
			memcpy(&got, p, 8);
			if (qhead == qtail || got != q[qhead])
				bad++;
			qhead++;
			reads++;
		}
		bp_ring_read_end(&rd);
	}
	is_u(bad, 0, "split cap=%" PRIu64 " hot=%" PRIu64 ": %lu records read "
	     "in commit order, bytes intact", cap, hot, reads);
	is_u(reads, writes, "split cap=%" PRIu64 " hot=%" PRIu64
	     ": every committed record read", cap, hot);
	is_u(bp_ring_used(&r), 0, "split cap=%" PRIu64 ": empty at the end",
	     cap);
	is_u(early, 0, "split cap=%" PRIu64 " hot=%" PRIu64 ": no record "
	     "refused while both parts had room (%lu refused, %lu too big)",
	     cap, hot, refused, refused_big);
	ok(spills > 10 && backs > 10 && refused > refused_big &&
		   refused_big > 0,
	   "split cap=%" PRIu64 " hot=%" PRIu64 ": %lu spills to the cold "
	   "part, %lu returns, %lu refused when full, %lu too big", cap, hot,
	   spills, backs, refused - refused_big, refused_big);
	if (use_put)
		ok(puts > ops / 10, "split cap=%" PRIu64 " hot=%" PRIu64
		   ": %lu records written whole (bp_ring_put)", cap, hot, puts);
	free(q);
	free(data);
	free(src);
}

static void test_split_default(void)
{
	static uint8_t data[(8u << 20) + 64];
	struct bp_ring r;

	bp_ring_init(&r, data, 8u << 20, 0);
	is_u(r.part[0].cap, BP_RING_HOT, "an 8 MiB ring has a hot part");
	is_u(r.part[0].cap + r.part[1].cap, 8u << 20,
	     "the two parts hold the whole buffer");
	bp_ring_init(&r, data, 8u << 20, 1);
	is_u(r.part[0].cap, 0, "a flight recorder has one part");
	bp_ring_init(&r, data, BP_RING_HOT_MIN - 8, 0);
	is_u(r.part[0].cap, 0, "a ring under BP_RING_HOT_MIN has one part");
}
int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	tap_diag("test_ring_parts: flight recorder, hot and cold parts (c_src/bp_ring.[ch])");
	test_flight_recorder(4096, 30000, 0, 42);
	test_flight_recorder(256, 3000, 0, 43);
	test_flight_recorder(65536, 60000, 0, 44);
	test_flight_recorder(4096, 30000, 1, 45);
	test_flight_recorder(256, 3000, 1, 46);
	test_flight_recorder_no_evict();

	test_split_default();
	test_split(65536, 4096, 400000, 77, 0);
	test_split(65536, 8192, 400000, 78, 0);
	test_split(1u << 20, BP_RING_HOT, 200000, 79, 0);
	test_split(65536, 4096, 400000, 80, 1);
	test_split(1u << 20, BP_RING_HOT, 200000, 81, 1);
	return tap_done();
}
