/* test_ctf.c -- unit tests of the CTF 1.8 trace writer and format
 * (c_src/bp_ctf.[ch], c_src/bp_format.[ch]).
 *
 *  1. The event-class table (bp_event_descs) matches the field lists of
 *     bp_format.h, written out by hand in ctf_events.h.
 *  2. A trace directory with the metadata and two streams of events of
 *     every class, a small packet size (many packets), a decreasing
 *     timestamp (the writer clamps it), a rising `discarded` count and a
 *     forced empty packet.  Then:
 *       a. the stream files are parsed back independently: magic, uuid,
 *          sizes vs file size, seq 0,1,2..., timestamps, the discarded
 *          value of each packet, packets filled as far as they go, every
 *          event decodes to what was written;
 *       b. every file is mode 0600 (even with umask 0);
 *       c. babeltrace2 reads the trace: exit status 0, one line per event
 *          in timestamp order with its name and field values, a
 *          "discarded" warning on stderr; a stream truncated mid-packet
 *          is rejected;
 *       d. bp_format_metadata: too-small buffers, the header line, the
 *          clock offset normalisation, env escaping.
 *  3. Error paths of the writer (EEXIST, EINVAL, EMSGSIZE, EBADF...).
 *  4. Faults: planted symlinks, a write that fails part-way.
 * They check the writer's packet-by-packet contract (each packet reaches
 * the file as it is closed): they run with bp_dio_enabled = 0, the writer
 * beamprobe falls back to where O_DIRECT is refused.  Writes around the
 * page cache (O_DIRECT): test_ctf_direct.c.
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
#include "bp_format.h"
#include "ctf_events.h"
#include "ctf_util.h"
#include "tap.h"

/* ---- 1. the event-class table -------------------------------------------- */

static void test_event_table(void)
{
	static const enum bp_field_type tmap[128] = {
		['b'] = BP_T_U8, ['w'] = BP_T_U32, ['q'] = BP_T_U64,
		['s'] = BP_T_STR};

	is_u(BP_EV_COUNT, NCLASSES, "BP_EV_COUNT matches the class list");
	for (unsigned id = 0; id < NCLASSES && id < BP_EV_COUNT; id++) {
		const struct bp_event_desc *d = &bp_event_descs[id];
		const struct cls *c = &classes[id];
		check(d->name && strcmp(d->name, c->name) == 0);
		check_u(d->nfields, strlen(c->types));
		for (unsigned f = 0; f < d->nfields && c->types[f]; f++) {
			check_u(d->fields[f].type,
				tmap[(unsigned char)c->types[f]]);
			check(strcmp(d->fields[f].name, c->fields[f]) == 0);
		}
	}
	ok_bulk("bp_event_descs: names, field names and types as documented");
	/* Named field access agrees with the wire order: the n-th string
	 * (integer) field of a class is BP_FLD n of it. */
	for (unsigned id = 0; id < NCLASSES && id < BP_EV_COUNT; id++) {
		const struct cls *c = &classes[id];
		unsigned ns = 0, nn = 0;
		for (unsigned f = 0; c->types[f]; f++)
			if (c->types[f] == 's')
				ns++;
			else
				nn++;
		check_u(ns + nn, bp_event_descs[id].nfields);
	}
	check_u(BP_FLD(SEND, to), 0);
	check_u(BP_FLD(SEND, to_text), 0);
	check_u(BP_FLD(SEND, message), 1);
	check_u(BP_FLD(SEND_DEAD, message), 1);
	check_u(BP_FLDPOS(SEND, message), 2);
	check_u(BP_FLD(PROCESS, initial_call), 2);
	check_u(BP_FLD(SCHED_IN, exiting), 0);
	check_u(BP_FLD(SCHED_OUT, mfa), 0);
	check_u(BP_FLD(GC_MAJOR_END, stack_size), 5);
	check_u(BP_FLD(SPAWN, mfa), 1);
	check_u(BP_FLD(EXCEPTION_FROM, reason), 2);
	check_u(BP_NFIELDS(DROPS), BP_DROP_COUNT);
	for (unsigned i = 0; i < BP_DROP_COUNT; i++)
		check(strcmp(bp_event_descs[BP_EV_DROPS].fields[i].name,
			     bp_drop_cause_names[i]) == 0);
	/* Every pid-valued field is of kind PID (written only as a local
	 * key), and every kind has the wire type its fields declare. */
	for (unsigned id = 0; id < BP_EV_COUNT; id++) {
		const struct bp_event_desc *d = &bp_event_descs[id];
		for (unsigned f = 0; f < d->nfields; f++) {
			const struct bp_field_desc *fd = &d->fields[f];
			if (!strcmp(fd->name, "to") || !strcmp(fd->name, "other"))
				check_u(fd->kind, BP_K_PID);
			if (fd->kind == BP_K_PID || fd->kind == BP_K_U64)
				check_u(fd->type, BP_T_U64);
			else if (fd->kind == BP_K_U8)
				check_u(fd->type, BP_T_U8);
			else if (fd->kind != BP_K_U32)
				check_u(fd->type, BP_T_STR);
		}
	}
	ok_bulk("schema: BP_FLD indices, drops fields = causes, kinds");
	/* The layout constants, against the table in bp_format.h. */
	check_u(BP_PACKET_HEADER_SIZE, 76);
	check_u(BP_EVENT_HEADER_SIZE, 18);
	check_u(BP_PKT_OFF_UUID, 4);
	check_u(BP_PKT_OFF_STREAM_ID, 20);
	check_u(BP_PKT_OFF_TS_BEGIN, 24);
	check_u(BP_PKT_OFF_TS_END, 32);
	check_u(BP_PKT_OFF_CONTENT_SIZE, 40);
	check_u(BP_PKT_OFF_PACKET_SIZE, 48);
	check_u(BP_PKT_OFF_DISCARDED, 56);
	check_u(BP_PKT_OFF_SEQ_NUM, 64);
	check_u(BP_PKT_OFF_THREAD_ID, 72);
	check_u(BP_EV_OFF_TS, 2);
	check_u(BP_EV_OFF_PID, 10);
	ok_bulk("packet and event offsets as in the table of bp_format.h");
	is_str(bp_drop_cause_names[BP_DROP_RING_FULL], "ring_full",
	       "drop cause names");
	is_str(bp_drop_cause_names[BP_DROP_DUMPING], "dumping",
	       "last drop cause name");
}

/* ---- writing the trace ------------------------------------------------------ */

#define NSTREAMS 2
#define PER_STREAM 130
#define PACKET_CAP 512
#define MAXPKT 256

static const uint32_t thread_ids[NSTREAMS] = {0, 7};
/* Events in whole packets in the file, user and process/drops ones. */
#define TOTAL(s) ((s)->events + (s)->aux_events)

/* What the writer was asked to do, per stream: events and packets. */
struct expect {
	struct tev ev[PER_STREAM];
	unsigned npkt;
	struct {
		uint64_t discarded;
		unsigned first, nev; /* events [first, first + nev) */
		int full;            /* written because an event did not fit */
	} pkt[MAXPKT];
	uint64_t final_discarded;
};

static struct expect ex[NSTREAMS];

/* Records the packets the call just wrote (seen through s->seq). */
static void note_packets(struct bp_ctf_stream *s, struct expect *x,
			 uint64_t seq0, uint64_t events0, uint64_t discarded,
			 unsigned *next_ev, int full)
{
	for (uint64_t q = seq0; q < s->seq && x->npkt < MAXPKT; q++) {
		unsigned n = (unsigned)(TOTAL(s) - events0);
		if (q == 0) { /* every stream starts with an empty packet */
			x->pkt[x->npkt].discarded = 0;
			x->pkt[x->npkt].first = *next_ev;
			x->pkt[x->npkt].nev = 0;
			x->pkt[x->npkt].full = 0;
			x->npkt++;
			continue;
		}
		x->pkt[x->npkt].discarded = discarded;
		x->pkt[x->npkt].first = *next_ev;
		x->pkt[x->npkt].nev = q + 1 == s->seq ? n : 0;
		x->pkt[x->npkt].full = full;
		*next_ev += x->pkt[x->npkt].nev;
		x->npkt++;
	}
}

static int write_trace(const char *dir)
{
	struct bp_ctf_stream st[NSTREAMS];
	unsigned written[NSTREAMS] = {0, 0};
	int err;

	err = bp_ctf_write_metadata(dir, uuid, offset_ns, env, 3);
	is_i(err, 0, "bp_ctf_write_metadata");
	for (int k = 0; k < NSTREAMS; k++) {
		err = bp_ctf_stream_open(&st[k], dir, thread_ids[k], uuid,
					 PACKET_CAP);
		is_i(err, 0, "bp_ctf_stream_open thread %u", thread_ids[k]);
		if (err)
			return -1;
	}
	/* Interleave the two streams, as the collector does. */
	for (unsigned i = 0; i < PER_STREAM; i++) {
		for (int k = 0; k < NSTREAMS; k++) {
			struct tev *e = &ex[k].ev[i];
			struct bp_ctf_stream *s = &st[k];
			uint64_t seq0 = s->seq, ev0 = TOTAL(s), disc;

			/* Stride 1: every class appears, whatever NCLASSES is (a
			 * stride sharing a factor with it skips classes). */
			make_event(e, (i + (unsigned)k * 3) % NCLASSES, k, i);
			/* Stream 0 at 10i, stream 1 at 10i + 5: all distinct
			 * across streams, so babeltrace2's order is known. */
			e->ts = 1000000 + 10u * i + 5u * (unsigned)k;
			e->ts_out = e->ts;
			if (k == 0 && i == 40) { /* goes back in time */
				e->ts = ex[k].ev[i - 1].ts_out - 3;
				e->ts_out = ex[k].ev[i - 1].ts_out;
			}
			encode(e);
			/* Stream 0 loses 2 events every 25; stream 1 has
			 * losses only after event 60 (and 90: see below). */
			disc = k == 0 ? i / 25 * 2 : i < 60 ? 0 : i <= 90 ? 3 : 6;
			err = bp_ctf_stream_add(s, e->enc, e->len, disc);
			check_u(err, 0);
			note_packets(s, &ex[k], seq0, ev0, disc, &written[k], 1);
			check_u(s->last_ts, e->ts_out);
			if (k == 1 && i == 90) {
				/* Explicit flush, then an empty packet that
				 * only records a new loss count. */
				seq0 = s->seq;
				ev0 = TOTAL(s);
				check_u(bp_ctf_stream_flush(s, 4, 0), 0);
				note_packets(s, &ex[k], seq0, ev0, 4,
					     &written[k], 0);
				seq0 = s->seq;
				check_u(bp_ctf_stream_flush(s, 4, 0), 0);
				check_u(s->seq, seq0); /* nothing to write */
				check_u(bp_ctf_stream_flush(s, 6, 1), 0);
				note_packets(s, &ex[k], seq0, TOTAL(s), 6,
					     &written[k], 0);
			}
		}
	}
	for (int k = 0; k < NSTREAMS; k++) {
		uint64_t seq0 = st[k].seq, ev0 = TOTAL(&st[k]);
		uint64_t disc = k == 0 ? 12 : 7;

		ex[k].final_discarded = disc;
		check_u(bp_ctf_stream_flush(&st[k], disc, 0), 0);
		note_packets(&st[k], &ex[k], seq0, ev0, disc, &written[k], 0);
		check_u(TOTAL(&st[k]), PER_STREAM);
		check_u(written[k], PER_STREAM);
		check_u(bp_ctf_stream_close(&st[k], disc), 0);
		check_u(st[k].fd, -1);
		check(st[k].buf == NULL);
		check_u(bp_ctf_stream_close(&st[k], disc), 0); /* twice: ok */
	}
	ok_bulk("wrote %d streams of %d events, packets of <= %d bytes",
		NSTREAMS, PER_STREAM, PACKET_CAP);
	return 0;
}

/* ---- a. parsing the stream files back ---------------------------------- */

static void parse_stream(const char *dir, int k)
{
	char path[512];
	size_t flen, off = 0;
	uint8_t *f;
	unsigned pk = 0, evi = 0;
	uint64_t prev_end = 0, last_disc = 0;
	struct expect *x = &ex[k];

	snprintf(path, sizeof path, "%s/thread-%03u", dir, thread_ids[k]);
	f = slurp(path, &flen);
	ok(f != NULL && flen > 0, "stream file %s exists", path + strlen(dir));
	if (!f)
		return;
	/* Offsets are the literal ones of the table in bp_format.h. */
	while (off < flen) {
		const uint8_t *p = f + off;
		if (flen - off < BP_PACKET_HEADER_SIZE) {
			check(!"partial packet header at end of file");
			break;
		}
		uint64_t csize = rd_le(p + 40, 8), psize = rd_le(p + 48, 8);
		uint64_t b = rd_le(p + 24, 8), e = rd_le(p + 32, 8);
		check_u(rd_le(p + 0, 4), 0xC1FC1FC1u);
		check(memcmp(p + 4, uuid, 16) == 0);
		check_u(rd_le(p + 20, 4), 0);
		check_u(csize, psize);
		check_u(psize % 8, 0);
		check(psize / 8 >= BP_PACKET_HEADER_SIZE);
		check(psize / 8 <= PACKET_CAP);
		check(psize / 8 <= flen - off);
		check_u(rd_le(p + 64, 8), pk);
		check_u(rd_le(p + 72, 4), thread_ids[k]);
		check(b <= e);
		check(prev_end <= b);
		if (psize / 8 < BP_PACKET_HEADER_SIZE || psize / 8 > flen - off)
			break;
		if (pk < x->npkt) {
			check_u(rd_le(p + 56, 8), x->pkt[pk].discarded);
			check_u(evi, x->pkt[pk].first);
		}
		check(rd_le(p + 56, 8) >= last_disc); /* a running total */
		last_disc = rd_le(p + 56, 8);
		/* Events. */
		size_t end = psize / 8, eo = BP_PACKET_HEADER_SIZE;
		unsigned nev = 0;
		while (eo < end && evi < PER_STREAM) {
			const struct tev *t = &x->ev[evi];
			uint32_t n = decode_check(p + eo, end - eo, t);
			check_u(n, t->len);
			if (!n)
				break;
			if (nev == 0)
				check_u(b, t->ts_out);
			check(t->ts_out >= b && t->ts_out <= e);
			if (eo + n == end)
				check_u(e, t->ts_out);
			eo += n;
			evi++;
			nev++;
		}
		check_u(eo, end);
		if (pk < x->npkt)
			check_u(nev, x->pkt[pk].nev);
		/* A packet written by add: the next event did not fit. */
		if (pk < x->npkt && x->pkt[pk].full && evi < PER_STREAM)
			check(end + x->ev[evi].len > PACKET_CAP);
		if (nev == 0 && pk == 0) /* the first: the next one's start */
			check_u(b, rd_le(p + end + 24, 8));
		else if (nev == 0) /* empty packet: last timestamp repeated */
			check_u(b, prev_end);
		prev_end = e;
		off += end;
		pk++;
	}
	check_u(off, flen);
	check_u(pk, x->npkt);
	check_u(evi, PER_STREAM);
	check_u(last_disc, x->final_discarded);
	ok_bulk("thread-%03u parsed back: %u packets, %u events, magic, uuid, "
		"sizes, seq, timestamps, discarded, every event",
		thread_ids[k], pk, evi);
	ok(pk >= 5, "thread-%03u has several packets (%u)", thread_ids[k], pk);
	free(f);
}

/* ---- b. file modes ------------------------------------------------------- */

static void check_mode(const char *dir, const char *name)
{
	char path[512];
	struct stat sb;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!ok(stat(path, &sb) == 0, "stat %s", name))
		return;
	is_u(sb.st_mode & 07777, 0600, "%s is mode 0600 (umask was 0)", name);
}

/* ---- c. babeltrace2 ------------------------------------------------------- */

static int by_time(const void *a, const void *b)
{
	const struct tev *x = *(const struct tev *const *)a;
	const struct tev *y = *(const struct tev *const *)b;

	if (x->ts_out != y->ts_out)
		return x->ts_out < y->ts_out ? -1 : 1;
	if (x->stream != y->stream)
		return x->stream - y->stream;
	return x < y ? -1 : x > y; /* file order within a stream */
}

/* Checks that line contains needle; shows the line on failure. */
static void line_has(const char *line, size_t n, const char *needle)
{
	char *l = strndup(line, n);

	tap_bulk_checks++;
	if (!strstr(l, needle)) {
		char msg[1024];
		snprintf(msg, sizeof msg, "line lacks '%s': %.600s", needle, l);
		tap_bulk_fail(__FILE__, __LINE__, msg);
	}
	free(l);
}

/* Every event on its own line, in timestamp order, with its name, its pid
 * and every field value. */
static void check_lines(const char *out)
{
	static const struct tev *all[NSTREAMS * PER_STREAM];
	const char *line = out;
	unsigned n = 0, lines = 0;
	char needle[160];

	for (int k = 0; k < NSTREAMS; k++)
		for (unsigned i = 0; i < PER_STREAM; i++)
			all[n++] = &ex[k].ev[i];
	qsort(all, n, sizeof all[0], by_time);
	for (const char *c = out; *c; c++)
		lines += *c == '\n';
	is_u(lines, n, "babeltrace2 prints one line per event");
	for (unsigned j = 0; j < n && *line; j++) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		const struct tev *e = all[j];
		const struct cls *c = &classes[e->id];

		snprintf(needle, sizeof needle, " %s: ", c->name);
		line_has(line, len, needle);
		snprintf(needle, sizeof needle, "{ pid = %" PRIu64 " }", e->pid);
		line_has(line, len, needle);
		for (unsigned f = 0; c->types[f]; f++) {
			/* babeltrace2 2.0.4 shows an empty string as the
			 * value of an earlier event's string (fixed upstream
			 * in review.lttng.org/c/babeltrace/+/4528); the file
			 * itself is checked by parse_stream(). */
			if (c->types[f] == 's' && !e->s[f][0])
				snprintf(needle, sizeof needle, "%s = \"",
					 c->fields[f]);
			else if (c->types[f] == 's')
				snprintf(needle, sizeof needle, "%s = \"%s\"",
					 c->fields[f], e->s[f]);
			else
				snprintf(needle, sizeof needle,
					 "%s = %" PRIu64, c->fields[f], e->u[f]);
			line_has(line, len, needle);
		}
		line = eol ? eol + 1 : line + len;
	}
	ok_bulk("babeltrace2: %u lines in timestamp order, each with the "
		"event name, pid and every field value", n);
}

/* "name = value" for the first u64 field above 2^32 that was written. */
static const char *big_u64_needle(void)
{
	static char needle[96];

	for (unsigned i = 0; i < PER_STREAM; i++) {
		const struct tev *e = &ex[0].ev[i];
		const struct cls *c = &classes[e->id];
		for (unsigned f = 0; c->types[f]; f++) {
			if (c->types[f] == 'q' && e->u[f] > UINT32_MAX) {
				snprintf(needle, sizeof needle,
					 "%s = %" PRIu64, c->fields[f], e->u[f]);
				return needle;
			}
		}
	}
	return "(no big u64 written)";
}

/* The losses babeltrace2 reports on stderr add up, per stream, to the
 * rise of events_discarded from the first packet to the last. */
static void check_discarded(const char *err)
{
	uint64_t sum[NSTREAMS] = {0};
	const char *p = err;

	while ((p = strstr(p, "Tracer discarded "))) {
		uint64_t n = strtoull(p + 17, NULL, 10);
		const char *nl = strchr(p, '\n'), *w = strstr(p, "/thread-");
		if (w && (!nl || w < nl)) {
			unsigned tid = (unsigned)strtoul(w + 8, NULL, 10);
			for (int k = 0; k < NSTREAMS; k++)
				if (tid == thread_ids[k])
					sum[k] += n;
		}
		p += 17;
	}
	for (int k = 0; k < NSTREAMS; k++)
		is_u(sum[k], ex[k].final_discarded - ex[k].pkt[0].discarded,
		     "babeltrace2 reports thread-%03u's losses: the rise of "
		     "events_discarded",
		     thread_ids[k]);
}

static void test_babeltrace(const char *tmp, const char *dir)
{
	char errpath[512], tdir[256], path[512];
	char *out, *err;
	int st;

	if (!have_babeltrace()) {
		tap_skip("babeltrace2 not installed");
		return;
	}
	snprintf(errpath, sizeof errpath, "%s/bt.err", tmp);
	st = run_babeltrace(dir, errpath, &out, &err);
	is_i(st, 0, "babeltrace2 DIR exits with status 0");
	if (st != 0)
		tap_diag("stderr: %.2000s", err);
	for (unsigned id = 0; id < NCLASSES; id++) {
		char needle[64];
		snprintf(needle, sizeof needle, " %s: ", classes[id].name);
		tap_bulk_checks++;
		if (!strstr(out, needle))
			tap_bulk_fail(__FILE__, __LINE__, classes[id].name);
	}
	ok_bulk("babeltrace2 output names all %zu event classes", NCLASSES);
	has_str(out, "mfa = \"lists:seq/2\"", "babeltrace2 shows a string field");
	has_str(out, "exiting = 1", "babeltrace2 shows a u8 field");
	has_str(out, big_u64_needle(), "babeltrace2 shows a full u64");
	check_lines(out);
	has_str(err, "discarded", "babeltrace2 warns about discarded events");
	check_discarded(err);
	free(out);
	free(err);

	/* A stream cut at a packet boundary is still a valid trace... */
	size_t flen;
	uint8_t *f;
	FILE *w;
	snprintf(path, sizeof path, "%s/thread-000", dir);
	f = slurp(path, &flen);
	uint64_t p0 = f && flen > 76 ? rd_le(f + 48, 8) / 8 : 0;
	uint64_t p1 = p0 && flen > p0 + 76 ? rd_le(f + p0 + 48, 8) / 8 : 0;
	if (!ok(p0 && p1, "stream has two packets to cut")) {
		free(f);
		return;
	}
	for (int cut = 0; cut < 2; cut++) {
		size_t keep = cut ? p0 + p1 / 2 : p0 + p1;
		snprintf(tdir, sizeof tdir, "%s/cut%d", tmp, cut);
		mkdir(tdir, 0700);
		check_u(bp_ctf_write_metadata(tdir, uuid, offset_ns, NULL, 0),
			0);
		snprintf(path, sizeof path, "%s/thread-000", tdir);
		w = fopen(path, "wb");
		check(w && fwrite(f, 1, keep, w) == keep);
		if (w)
			fclose(w);
		snprintf(errpath, sizeof errpath, "%s/cut%d.err", tmp, cut);
		st = run_babeltrace(tdir, errpath, &out, &err);
		if (cut == 0)
			is_i(st, 0, "babeltrace2 reads a stream cut between "
				    "packets");
		else
			ok(st != 0,
			   "babeltrace2 rejects a stream cut mid-packet "
			   "(status %d)",
			   st);
		free(out);
		free(err);
	}
	free(f);
}

/* ---- d. metadata text --------------------------------------------------------- */

static int64_t line_value(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtoll(p + strlen(key), NULL, 10) : INT64_MIN;
}

static void test_metadata(const char *dir)
{
	static const int64_t offs[] = {0, 1, -1, 999999999, -999999999,
				       1000000000, -1000000000, -1500000000,
				       1700000000123456789LL, INT64_MAX,
				       INT64_MIN};
	char *big = malloc(65536), *buf, path[512], us[37];
	int n = bp_format_metadata(big, 65536, uuid, 0, NULL, 0);

	ok(n > 0 && (size_t)n == strlen(big), "metadata length %d returned", n);
	ok(strncmp(big, "/* CTF 1.8 */", 13) == 0,
	   "metadata starts with /* CTF 1.8 */");
	/* Too small, down to nothing: -1, and no overrun (exact mallocs). */
	size_t sizes[] = {0, 1, 13, (size_t)n / 2, (size_t)n - 1, (size_t)n};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		buf = malloc(sizes[i] ? sizes[i] : 1);
		check_u(bp_format_metadata(buf, sizes[i], uuid, 0, NULL, 0),
			(uint64_t)-1);
		free(buf);
	}
	ok_bulk("bp_format_metadata: too-small buffer (0 .. len) returns -1");
	buf = malloc((size_t)n + 1);
	is_i(bp_format_metadata(buf, (size_t)n + 1, uuid, 0, NULL, 0), n,
	     "bp_format_metadata: len + 1 bytes is enough");
	is_str(buf, big, "same text either way");
	free(buf);

	bp_format_uuid(uuid, us);
	is_str(us, "deadbeef-0123-4567-89ab-cdef10325476", "bp_format_uuid");
	has_str(big, "uuid = \"deadbeef-0123-4567-89ab-cdef10325476\";",
		"metadata carries the uuid");

	for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
		check(bp_format_metadata(big, 65536, uuid, offs[i], NULL, 0) >
		      0);
		int64_t s = line_value(big, "offset_s = ");
		int64_t o = line_value(big, "\toffset = ");
		check(o >= 0 && o < 1000000000);
		check((__int128)s * 1000000000 + o == (__int128)offs[i]);
	}
	ok_bulk("clock offset: 0 <= offset < 1e9 and offset_s * 1e9 + offset "
		"== offset_ns, negative values included");
	bp_format_metadata(big, 65536, uuid, -1, NULL, 0);
	has_str(big, "\toffset_s = -1;\n\toffset = 999999999;\n",
		"offset_ns = -1 gives offset_s = -1, offset = 999999999");

	/* The metadata file is what bp_format_metadata makes, with env. */
	size_t flen;
	char *file;
	n = bp_format_metadata(big, 65536, uuid, offset_ns, env, 3);
	snprintf(path, sizeof path, "%s/metadata", dir);
	file = (char *)slurp(path, &flen);
	ok(file && flen == (size_t)n && memcmp(file, big, flen) == 0,
	   "metadata file == bp_format_metadata text");
	has_str(file, "\tquoted = \"a\\\"b\\\\c d\";\n",
		"env values are escaped (quote, backslash, control char)");
	has_str(file, "\tnode = \"bp@host\";\n", "env entry written");
	free(file);
	free(big);
}

/* ---- 3. error paths ------------------------------------------------------------ */

static void test_errors(const char *tmp)
{
	char dir[256], missing[256];
	struct bp_ctf_stream s, s2;
	uint8_t ev[BP_PACKET_MAX];

	snprintf(dir, sizeof dir, "%s/errors", tmp);
	snprintf(missing, sizeof missing, "%s/no/such/dir", tmp);
	mkdir(dir, 0700);
	memset(ev, 0, sizeof ev);

	is_i(bp_ctf_write_metadata(missing, uuid, 0, NULL, 0), ENOENT,
	     "metadata in a missing directory: ENOENT");
	is_i(bp_ctf_stream_open(&s, missing, 1, uuid, 4096), ENOENT,
	     "stream in a missing directory: ENOENT");
	ok(s.fd == -1 && s.buf == NULL, "failed open leaves fd -1, no buffer");
	is_i(bp_ctf_stream_open(&s, dir, 1, uuid, BP_PACKET_HEADER_SIZE + 63),
	     EINVAL, "packet_cap < header + 64: EINVAL");
	ok(s.fd == -1 && s.buf == NULL, "EINVAL leaves fd -1, no buffer");
	is_i(bp_ctf_stream_close(&s, 0), 0, "closing a never-opened stream");

	is_i(bp_ctf_stream_open(&s, dir, 1, uuid, BP_PACKET_HEADER_SIZE + 64),
	     0, "smallest packet_cap accepted");
	is_i(bp_ctf_stream_open(&s2, dir, 1, uuid, 4096), EEXIST,
	     "the same stream file twice: EEXIST (O_EXCL)");
	ok(s2.fd == -1 && s2.buf == NULL, "EEXIST leaves fd -1, no buffer");

	bp_ev_header(ev, BP_EV_RETURN_TO, 5, 6);
	is_i(bp_ctf_stream_add(&s, ev, BP_EVENT_HEADER_SIZE - 1, 0), EMSGSIZE,
	     "event shorter than its header: EMSGSIZE");
	is_i(bp_ctf_stream_add(&s, ev, 65, 0), EMSGSIZE,
	     "event larger than a packet's room: EMSGSIZE");
	is_i(bp_ctf_stream_add(&s, ev, 30, 0), 0, "event of 30 bytes");
	bp_ev_header(ev, BP_EV_RETURN_TO, 6, 6);
	is_i(bp_ctf_stream_add(&s, ev, 34, 0), 0,
	     "event of 34 bytes: the packet is exactly full");
	is_u(s.seq, 0, "an exactly full packet is not written yet");
	is_u(s.len, BP_PACKET_HEADER_SIZE + 64, "packet holds both events");
	is_i(bp_ctf_stream_flush(&s, 0, 0), 0, "flush");
	is_u(s.bytes, 2 * BP_PACKET_HEADER_SIZE + 64,
	     "an empty first packet, then a packet of exactly cap bytes");
	is_i(bp_ctf_stream_add(&s, ev, 64, 0), 0, "event filling a packet");
	is_u(s.seq, 2, "not written yet");
	is_i(bp_ctf_stream_add(&s, ev, 18, 0), 0, "next event");
	is_u(s.seq, 3, "the full packet was written first");
	is_u(s.bytes, 3 * BP_PACKET_HEADER_SIZE + 2 * 64, "bytes written");
	is_i(bp_ctf_stream_close(&s, 0), 0, "close");
	is_u(s.bytes, 4 * BP_PACKET_HEADER_SIZE + 2 * 64 + 18, "close flushed");
	is_u(s.events, 4, "events written");
	is_i(bp_ctf_stream_flush(&s, 0, 1), EBADF, "flush after close: EBADF");

	is_i(bp_ctf_stream_open(&s, dir, 2, uuid, 4u * BP_PACKET_MAX), 0,
	     "oversized packet_cap accepted");
	is_u(s.cap, BP_PACKET_MAX, "packet_cap clamped to BP_PACKET_MAX");
	is_i(bp_ctf_stream_add(&s, ev, BP_PACKET_MAX - BP_PACKET_HEADER_SIZE,
			       0),
	     0, "largest event");
	is_i(bp_ctf_stream_close(&s, 0), 0, "close");
}

/* ---- 4. faults: planted links, a write that fails part-way ------------------ */

static void read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

static void test_faults(const char *tmp)
{
	char dir[256], victim[300], path[300], link[300], got[64];
	struct bp_ctf_stream s;
	struct rlimit old, lim;
	struct stat sb;
	uint8_t ev[100], hdr[BP_PACKET_HEADER_SIZE];
	FILE *f;
	int dfd, rfd, err = 0;

	snprintf(dir, sizeof dir, "%s/faults", tmp);
	snprintf(victim, sizeof victim, "%s/victim", tmp);
	mkdir(dir, 0700);
	f = fopen(victim, "wb");
	if (f) {
		fputs("precious", f);
		fclose(f);
	}

	/* Links planted in the directory are never followed. */
	snprintf(path, sizeof path, "%s/metadata", dir);
	ok(symlink(victim, path) == 0, "metadata -> victim planted");
	is_i(bp_ctf_write_metadata(dir, uuid, 0, NULL, 0), EEXIST,
	     "metadata over a planted symlink: EEXIST, not followed");
	snprintf(path, sizeof path, "%s/thread-005", dir);
	ok(symlink(victim, path) == 0, "thread-005 -> victim planted");
	is_i(bp_ctf_stream_open(&s, dir, 5, uuid, 4096), EEXIST,
	     "stream over a planted symlink: EEXIST, not followed");
	read_small(victim, got, sizeof got);
	is_str(got, "precious", "the link's target is untouched");
	snprintf(link, sizeof link, "%s/dirlink", tmp);
	ok(symlink(dir, link) == 0, "dirlink -> faults");
	dfd = bp_ctf_open_dir(link);
	ok(dfd < 0, "a symlinked directory is not opened (%d)", dfd);
	if (dfd >= 0)
		close(dfd);
	is_i(bp_ctf_write_metadata(link, uuid, 0, NULL, 0), -bp_ctf_open_dir(link),
	     "nor written into");

	/* A packet write that fails part-way (file size limit: EFBIG after a
	 * short write) is cut off again; its events are lost, not written. */
	signal(SIGXFSZ, SIG_IGN);
	dfd = bp_ctf_open_dir(dir);
	if (!ok(dfd >= 0, "open the directory"))
		return;
	is_i(bp_ctf_stream_open_at(&s, dfd, 1, uuid, 1024), 0, "open thread-001");
	memset(ev, 0, sizeof ev);
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 1500;
	ok(setrlimit(RLIMIT_FSIZE, &lim) == 0, "file size limit 1500 bytes");
	for (unsigned i = 0; i < 30; i++) {
		bp_ev_header(ev, BP_EV_RETURN_TO, 100 + i, 7);
		int e = bp_ctf_stream_add(&s, ev, sizeof ev, 3);
		if (e && !err) {
			err = e;
			is_u(i, 18, "the 19th event meets the error (its packet "
				    "is the second one to be written)");
		}
	}
	setrlimit(RLIMIT_FSIZE, &old);
	is_i(err, EFBIG, "the write error is returned");
	is_i(s.err, EFBIG, "the stream keeps its error");
	is_u(s.bytes, BP_PACKET_HEADER_SIZE + BP_PACKET_HEADER_SIZE + 900,
	     "bytes: the empty first packet and one whole packet");
	is_u(s.events, 9, "events in the file: the whole packet's");
	is_u(s.lost, 9, "events lost: the packet that failed");
	is_i(bp_ctf_stream_add(&s, ev, sizeof ev, 3), EFBIG,
	     "a failed stream refuses events");
	ok(fstat(s.fd, &sb) == 0 && (uint64_t)sb.st_size == s.bytes,
	   "the file was cut back to its whole packets (%lld bytes)",
	   (long long)sb.st_size);
	snprintf(path, sizeof path, "%s/thread-001", dir);
	rfd = open(path, O_RDONLY | O_CLOEXEC);
	ok(pread(rfd, hdr, sizeof hdr, BP_PACKET_HEADER_SIZE) ==
		   (ssize_t)sizeof hdr &&
		   bp_get_u64(hdr + BP_PKT_OFF_PACKET_SIZE) == 976 * 8,
	   "the second packet is whole");
	ok(pread(rfd, hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
		   bp_get_u64(hdr + BP_PKT_OFF_DISCARDED) == 0 &&
		   bp_get_u64(hdr + BP_PKT_OFF_PACKET_SIZE) ==
			   BP_PACKET_HEADER_SIZE * 8,
	   "the first packet is empty, with events_discarded 0");
	if (rfd >= 0)
		close(rfd);
	is_i(bp_ctf_stream_close(&s, 3), EFBIG, "close reports the error");
	close(dfd);
}

/* ---- main ---------------------------------------------------------------------- */

int main(void)
{
	char tmp[] = "/tmp/bp_test_ctf.XXXXXX", dir[256];
	mode_t old;

	setvbuf(stdout, NULL, _IOLBF, 0);
	tap_diag("test_ctf: CTF writer and format (c_src/bp_ctf, bp_format)");
	if (!ok(mkdtemp(tmp) != NULL, "mkdtemp"))
		return tap_done();
	snprintf(dir, sizeof dir, "%s/trace", tmp);
	mkdir(dir, 0700);

	test_event_table();
	bp_dio_enabled = 0; /* see the top of this file */
	old = umask(0); /* the writer itself must ask for 0600 */
	if (write_trace(dir) == 0) {
		umask(old);
		for (int k = 0; k < NSTREAMS; k++)
			parse_stream(dir, k);
		check_mode(dir, "metadata");
		check_mode(dir, "thread-000");
		check_mode(dir, "thread-007");
		test_babeltrace(tmp, dir);
	}
	umask(old);
	test_metadata(dir);
	test_errors(tmp);
	test_faults(tmp);

	return ctf_finish(tmp);
}
