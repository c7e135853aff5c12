/* test_ctf_direct.c -- the CTF writer's writes around the page cache
 * (c_src/bp_dio.[ch], O_DIRECT): streams of random events, random
 * flushes and forced empty packets written once with O_DIRECT and once
 * through the page cache hold the same packets once the direct file's
 * padding is taken out, with the same counts, and babeltrace2 prints the
 * same for both; a slow direct write sends the next blocks through the
 * page cache until the cool-down ends; a failure mid-stream leaves whole
 * packets and counts every event as written or lost.  The packet-by-packet
 * contract of the writer itself: test_ctf.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bp_ctf.h"
#include "bp_dio.h"
#include "bp_format.h"
#include "ctf_events.h"
#include "ctf_util.h"
#include "tap.h"

static uint64_t rng_state;

static uint32_t rnd(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33);
}

/*
 * The packets of a stream file with their padding taken out (packet_size
 * set to content_size), appended to *out; counts the packets and the
 * padded ones and checks the padding is zeros and every packet whole.
 * Returns 0 if the file is a sequence of sound packets up to its end.
 */
static int unpadded(const char *path, uint8_t **out, size_t *olen,
		    unsigned *npackets, unsigned *npadded)
{
	size_t flen, off = 0;
	uint8_t *f = slurp(path, &flen);
	int bad = f == NULL;

	*out = malloc(flen + 1);
	*olen = 0;
	*npackets = 0;
	*npadded = 0;
	while (!bad && off < flen) {
		const uint8_t *p = f + off;
		uint64_t content, psize;
		if (flen - off < BP_PACKET_HEADER_SIZE ||
		    bp_get_u32(p + BP_PKT_OFF_MAGIC) != BP_CTF_MAGIC) {
			bad = 1;
			break;
		}
		content = bp_get_u64(p + BP_PKT_OFF_CONTENT_SIZE) / 8;
		psize = bp_get_u64(p + BP_PKT_OFF_PACKET_SIZE) / 8;
		if (content < BP_PACKET_HEADER_SIZE || psize < content ||
		    psize - content >= BP_DIO_ALIGN || psize > flen - off) {
			bad = 1;
			break;
		}
		for (uint64_t i = content; i < psize; i++)
			bad |= p[i] != 0;
		*npackets += 1;
		*npadded += psize > content;
		memcpy(*out + *olen, p, content);
		bp_put_u64(*out + *olen + BP_PKT_OFF_PACKET_SIZE, content * 8);
		*olen += content;
		off += psize;
	}
	free(f);
	return bad;
}

/*
 * Writes one stream of valid events of every class (random classes and
 * flushes, forced empty packets) twice: through the page cache and with
 * O_DIRECT.  The files hold the same packets, the direct one with some
 * padded, and babeltrace2 reads both alike.
 */
static void direct_vs_buffered(const char *tmp, unsigned seed, size_t cap,
			       unsigned nev, uint64_t *slow, unsigned *padded)
{
	char da[256], db[256], pa[300], pb[300], errpath[300];
	struct bp_ctf_stream sa, sb;
	struct tev *e = calloc(1, sizeof *e);
	uint8_t *ua = NULL, *ub = NULL;
	size_t la = 0, lb = 0;
	unsigned pada = 0, padb = 0, npkt;
	int direct, ea = 0, eb = 0, bada, badb;

	snprintf(da, sizeof da, "%s/dio-%u-a", tmp, seed);
	snprintf(db, sizeof db, "%s/dio-%u-b", tmp, seed);
	mkdir(da, 0700);
	mkdir(db, 0700);
	ea |= bp_ctf_write_metadata(da, uuid, offset_ns, env, 3);
	eb |= bp_ctf_write_metadata(db, uuid, offset_ns, env, 3);
	bp_dio_enabled = 0;
	ea |= bp_ctf_stream_open(&sa, da, 3, uuid, cap);
	bp_dio_enabled = 1;
	eb |= bp_ctf_stream_open(&sb, db, 3, uuid, cap);
	if (!ok(e && ea == 0 && eb == 0, "seed %u: both streams open", seed))
		return;
	direct = sb.dio.direct;
	rng_state = seed;
	for (unsigned i = 0; i < nev; i++) {
		uint32_t r = rnd();
		make_event(e, r % NCLASSES, 0, i);
		e->ts = 1000000 + 10u * i;
		encode(e);
		ea |= bp_ctf_stream_add(&sa, e->enc, e->len, i / 1000);
		eb |= bp_ctf_stream_add(&sb, e->enc, e->len, i / 1000);
		if (r % 1500 == 1) { /* the collector's periodic flush */
			ea |= bp_ctf_stream_flush(&sa, i / 1000, 0);
			eb |= bp_ctf_stream_flush(&sb, i / 1000, 0);
		} else if (r % 4000 == 2) { /* an empty packet: a new count */
			ea |= bp_ctf_stream_flush(&sa, i / 1000, 0);
			eb |= bp_ctf_stream_flush(&sb, i / 1000, 0);
			ea |= bp_ctf_stream_flush(&sa, i / 1000 + 1, 1);
			eb |= bp_ctf_stream_flush(&sb, i / 1000 + 1, 1);
		}
	}
	free(e);
	is_i(ea | eb, 0, "seed %u: %u events added and flushed, no error",
	     seed, nev);
	is_i(bp_ctf_stream_flush(&sa, nev / 1000, 0), 0, "seed %u: flush",
	     seed);
	is_i(bp_ctf_stream_flush(&sb, nev / 1000, 0), 0,
	     "seed %u: flush (O_DIRECT)", seed);
	ok(sa.events == sb.events && sa.aux_events == sb.aux_events &&
		   sa.events + sa.aux_events == nev && sb.lost == 0 &&
		   sb.bytes >= sa.bytes,
	   "seed %u: after a flush both have every event in the file: %llu + "
	   "%llu, %llu bytes (O_DIRECT: %llu + %llu, %llu bytes)",
	   seed, (unsigned long long)sa.events,
	   (unsigned long long)sa.aux_events, (unsigned long long)sa.bytes,
	   (unsigned long long)sb.events, (unsigned long long)sb.aux_events,
	   (unsigned long long)sb.bytes);
	*slow = sb.dio.slow;
	is_i(bp_ctf_stream_close(&sa, 0), 0, "seed %u: close", seed);
	is_i(bp_ctf_stream_close(&sb, 0), 0, "seed %u: close (O_DIRECT)", seed);
	snprintf(pa, sizeof pa, "%s/thread-003", da);
	snprintf(pb, sizeof pb, "%s/thread-003", db);
	bada = unpadded(pa, &ua, &la, &npkt, &pada);
	badb = unpadded(pb, &ub, &lb, &npkt, &padb);
	ok(!bada && !badb && pada == 0,
	   "seed %u: both files are whole packets to their end, padding all "
	   "zeros; %u padded with O_DIRECT, none without",
	   seed, padb);
	ok(la == lb && memcmp(ua, ub, la) == 0,
	   "seed %u: without their padding, the packets written with O_DIRECT "
	   "(%s) are byte for byte those written through the page cache",
	   seed, direct ? "on" : "refused here");
	free(ua);
	free(ub);
	*padded = padb;
	if (!direct)
		tap_diag("O_DIRECT was refused on %s: the direct path was not "
			 "exercised", db);
	else if (nev >= 10000)
		ok(padb > 0, "seed %u: blocks were written with O_DIRECT (%u "
			     "padded packets)", seed, padb);
	if (!have_babeltrace()) {
		tap_skip("babeltrace2 not installed");
		return;
	}
	{
		char *oa, *ob, *xa, *xb;
		int sta, stb;
		snprintf(errpath, sizeof errpath, "%s/dio-%u.err", tmp, seed);
		sta = run_babeltrace(da, errpath, &oa, &xa);
		stb = run_babeltrace(db, errpath, &ob, &xb);
		ok(sta == 0 && stb == 0 && strcmp(oa, ob) == 0 &&
			   strlen(oa) > 0,
		   "seed %u: babeltrace2 reads both (exit %d, %d) and prints "
		   "the same %zu bytes", seed, sta, stb, strlen(oa));
		if (stb != 0)
			tap_diag("stderr: %.2000s", xb);
		free(oa);
		free(ob);
		free(xa);
		free(xb);
	}
}

/* A direct stream whose writes fail part-way (file size limit, aligned:
 * a direct write is cut short, then EFBIG). */
static void direct_fails(const char *tmp)
{
	char dir[256], path[300];
	struct bp_ctf_stream s;
	struct rlimit old, lim;
	struct stat sb;
	uint8_t ev[200];
	unsigned added = 0;
	int err = 0;

	snprintf(dir, sizeof dir, "%s/dio-fail", tmp);
	mkdir(dir, 0700);
	signal(SIGXFSZ, SIG_IGN);
	if (!ok(bp_ctf_stream_open(&s, dir, 1, uuid, 65536) == 0,
		"open a stream with O_DIRECT"))
		return;
	ok(s.dio.direct, "O_DIRECT is on for it");
	memset(ev, 7, sizeof ev);
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 600 * 1024;
	ok(setrlimit(RLIMIT_FSIZE, &lim) == 0, "file size limit 600 KiB");
	for (unsigned i = 0; i < 8000 && !err; i++) {
		bp_ev_header(ev, BP_EV_RETURN_TO, 100 + i, 7);
		err = bp_ctf_stream_add(&s, ev, sizeof ev, 0);
		added += err == 0;
	}
	if (!err)
		err = bp_ctf_stream_flush(&s, 0, 0);
	setrlimit(RLIMIT_FSIZE, &old);
	is_i(err, EFBIG, "the write error is returned");
	ok(s.bytes > 0 && s.bytes <= 600 * 1024,
	   "the file kept what was written before (%llu bytes)",
	   (unsigned long long)s.bytes);
	if (fstat(s.fd, &sb) != 0)
		sb.st_size = -1;
	ok((uint64_t)sb.st_size == s.bytes,
	   "the file was cut back to its whole packets (%lld bytes)",
	   (long long)sb.st_size);
	is_u(s.events + s.lost, added,
	   "every event added is in the file or lost (%llu + %llu)",
	   (unsigned long long)s.events, (unsigned long long)s.lost);
	ok(s.lost > 0, "the packets not written are counted lost");
	is_i(bp_ctf_stream_close(&s, 0), EFBIG, "close reports the error");
	/* The file parses: packets back to back up to its end. */
	snprintf(path, sizeof path, "%s/thread-001", dir);
	{
		uint8_t *u = NULL;
		size_t ulen;
		unsigned n, npad;
		int bad = unpadded(path, &u, &ulen, &n, &npad);
		ok(!bad && n > 1, "the file is %u whole packets, nothing after",
		   n);
		free(u);
	}
}

static void test_direct(const char *tmp)
{
	uint64_t slow;
	unsigned padded;

	/* Small packets (many per block, the end of a block mid-packet),
	 * the default 64 KiB and the largest. */
	direct_vs_buffered(tmp, 1, 1024, 30000, &slow, &padded);
	direct_vs_buffered(tmp, 2, 65536, 60000, &slow, &padded);
	direct_vs_buffered(tmp, 3, BP_PACKET_MAX, 40000, &slow, &padded);
	direct_vs_buffered(tmp, 4, 4096, 300, &slow, &padded); /* < a block */
	/* Every direct write "slow": after the first block, the page cache
	 * takes the rest for the cool-down, then direct writes resume. */
	bp_dio_slow_ns = 0;
	bp_dio_cool_ns = 3600ull * 1000000000ull;
	direct_vs_buffered(tmp, 5, 65536, 60000, &slow, &padded);
	ok(slow == 1 && padded == 1,
	   "a slow direct write: the next blocks go through the page cache "
	   "(%llu slow write, %u padded packet)", (unsigned long long)slow,
	   padded);
	bp_dio_cool_ns = 0;
	direct_vs_buffered(tmp, 6, 65536, 60000, &slow, &padded);
	ok(slow > 1 && slow == padded,
	   "a cool-down over: direct writes resume (%llu slow writes, %u "
	   "padded packets)", (unsigned long long)slow, padded);
	bp_dio_slow_ns = 10000000ull;
	bp_dio_cool_ns = 5000000000ull;
	direct_fails(tmp);
}

int main(void)
{
	char tmp[] = "/tmp/bp_test_ctf_direct.XXXXXX";

	setvbuf(stdout, NULL, _IOLBF, 0);
	tap_diag("test_ctf_direct: CTF writer around the page cache "
		 "(c_src/bp_ctf, bp_dio)");
	if (!ok(mkdtemp(tmp) != NULL, "mkdtemp"))
		return tap_done();
	bp_dio_enabled = 1;
	test_direct(tmp);
	return ctf_finish(tmp);
}
