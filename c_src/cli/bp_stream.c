/* bp_stream.c -- decodes one data stream (a file, or a memory buffer)
 * packet by packet.  Every read is bounds-checked against the packet's
 * content and the bytes actually present; damage is reported with the
 * file and byte offset and decoding resumes at the next packet when its
 * boundary is trustworthy, otherwise the rest of the stream is skipped.
 * A file is mapped a window at a time (MAP_WINDOW bytes, or a packet if
 * larger); in follow mode, where it grows, or where mmap fails, it is read
 * in large chunks into one buffer that holds at most a packet plus
 * read-ahead.  Either way memory does not depend on the file's size.
 */
#include "bp_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define READ_CHUNK (128u * 1024) /* minimum read size */
#define MAP_WINDOW (2u << 20)    /* minimum mapped window */

/* Little-endian loads: one unaligned load on LE hosts (the format is LE). */
static inline uint64_t ld64(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
#else
	return bp_get_u64(p);
#endif
}

static inline uint16_t ld16(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
#else
	return bp_get_u16(p);
#endif
}

void bp_diag_report(struct bp_diag *d, const char *file, int64_t off,
		    const char *fmt, ...)
{
	va_list ap;

	d->problems++;
	if (d->quiet)
		return;
	if (off >= 0)
		fprintf(stderr, "beamprobe: %s: offset %" PRId64 ": ", file,
			off);
	else
		fprintf(stderr, "beamprobe: %s: ", file);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int stream_init(struct bp_stream *s, const char *path,
		       const struct bp_meta *meta, struct bp_diag *diag)
{
	memset(s, 0, sizeof *s);
	s->fd = -1;
	s->path = strdup(path);
	if (!s->path)
		return ENOMEM;
	s->meta = meta;
	s->diag = diag;
	s->state = BP_STREAM_OK;
	return 0;
}

int bp_stream_open_file(struct bp_stream *s, const char *path,
			const struct bp_meta *meta, struct bp_diag *diag)
{
	struct stat st;
	int err = stream_init(s, path, meta, diag);

	if (err)
		return err;
	/* O_NONBLOCK: a FIFO or device in place of the file must not hang
	 * the open; only regular files are read. */
	s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (s->fd < 0 || fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err = s->fd < 0 || errno != 0 ? errno : EINVAL;
		if (s->fd >= 0 && !S_ISREG(st.st_mode))
			err = EINVAL;
		bp_stream_close(s);
		return err;
	}
	s->size = (uint64_t)st.st_size;
#ifdef POSIX_FADV_SEQUENTIAL
	posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
	return 0;
}

int bp_stream_open_mem(struct bp_stream *s, const char *name,
		       const uint8_t *data, size_t len,
		       const struct bp_meta *meta, struct bp_diag *diag)
{
	int err = stream_init(s, name, meta, diag);

	if (err)
		return err;
	s->mem = data;
	s->size = len;
	return 0;
}

/* Drops the mapped window, if any (data then holds nothing). */
static void unmap(struct bp_stream *s)
{
	if (s->map) {
		munmap(s->map, s->map_len);
		s->map = NULL;
		s->map_len = 0;
		s->data = s->buf;
	}
}

void bp_stream_close(struct bp_stream *s)
{
	unmap(s);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	free(s->buf);
	free(s->path);
	s->buf = NULL;
	s->data = NULL;
	s->path = NULL;
}

/* File offset of buffer position p. */
static inline uint64_t at(const struct bp_stream *s, size_t p)
{
	return s->buf_off + p;
}

/* Moves data[0] to file offset off (data[pos] stays the same byte). */
static void rebase(struct bp_stream *s, uint64_t off)
{
	size_t shift = (size_t)(off - s->buf_off);

	s->buf_off = off;
	s->pos -= shift;
	if (s->in_packet) {
		s->content_end -= shift;
		s->packet_end -= shift;
	}
}

/*
 * Maps a window of the file holding data[pos .. pos+need) and read-ahead,
 * from the page holding data[pos]; a zero page follows it, for the string
 * scans' reads past the data.  Returns 0, or -1 if mmap failed (then the
 * stream has no window).
 */
static int map_window(struct bp_stream *s, size_t need)
{
	static size_t page;
	uint64_t off = s->buf_off + s->pos;

	if (!page) {
		long ps = sysconf(_SC_PAGESIZE);
		page = ps > 0 ? (size_t)ps : 4096;
	}
	unmap(s);
	uint64_t start = off & ~(uint64_t)(page - 1);
	if (start >= s->size) { /* nothing left to map */
		rebase(s, off);
		s->len = s->pos;
		return 0;
	}
	size_t want = (size_t)(off - start) + need +
		      (need < MAP_WINDOW ? MAP_WINDOW : need);
	size_t n = s->size - start < want ? (size_t)(s->size - start) : want;
	size_t total = ((n + page - 1) & ~(page - 1)) + page;
	void *base = mmap(NULL, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	if (base == MAP_FAILED)
		return -1;
	if (mmap(base, n, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE,
		 s->fd, (off_t)start) == MAP_FAILED) {
		munmap(base, total);
		return -1;
	}
	s->map = base;
	s->map_len = total;
	s->data = base;
	rebase(s, start);
	s->len = n;
	return 0;
}

/*
 * Makes sure data[pos .. pos+need) is loaded, reading ahead.  Returns the
 * number of bytes available from pos (may be less than need at the end of
 * the data), or -1 on a read error (reported).
 */
static int64_t fill(struct bp_stream *s, size_t need)
{
	size_t avail = s->len - s->pos;

	if (avail >= need)
		return (int64_t)avail;
	/* A finished file is mapped (a growing one would need remapping). */
	if (s->fd >= 0 && !s->follow && !s->no_map) {
		if (map_window(s, need) == 0)
			return (int64_t)(s->len - s->pos);
		s->no_map = 1; /* e.g. not a regular file: read() it */
		rebase(s, s->buf_off + s->pos); /* the buffer, empty */
		s->len = 0;
	}
	/* Drop consumed bytes, then grow to fit need plus a chunk. */
	if (s->pos) {
		memmove(s->buf, s->buf + s->pos, avail);
		s->buf_off += s->pos;
		if (s->in_packet) {
			s->content_end -= s->pos;
			s->packet_end -= s->pos;
		}
		s->len = avail;
		s->pos = 0;
	}
	size_t want = need + READ_CHUNK;
	if (s->cap < want) {
		uint8_t *nb = realloc(s->buf, want + BP_STREAM_PAD);
		if (!nb) {
			bp_diag_report(s->diag, s->path, (int64_t)at(s, s->pos),
				       "out of memory");
			return -1;
		}
		/* Defined bytes past the data, for find_nul's wide reads. */
		memset(nb + s->len, 0, want + BP_STREAM_PAD - s->len);
		s->buf = nb;
		s->cap = want;
	}
	s->data = s->buf;
	uint64_t file_pos = s->buf_off + s->len;
	while (s->len < need && file_pos < s->size) {
		size_t room = s->cap - s->len;
		uint64_t left = s->size - file_pos;
		size_t n = left < room ? (size_t)left : room;
		if (s->mem) {
			memcpy(s->buf + s->len, s->mem + file_pos, n);
		} else {
			ssize_t r = pread(s->fd, s->buf + s->len, n,
					  (off_t)file_pos);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				bp_diag_report(s->diag, s->path,
					       (int64_t)file_pos, "read: %s",
					       strerror(errno));
				return -1;
			}
			if (r == 0) { /* file shrank */
				s->size = file_pos;
				break;
			}
			n = (size_t)r;
		}
		s->len += n;
		file_pos += n;
	}
	return (int64_t)(s->len - s->pos);
}

/* Stops the stream because of damage at file offset off. */
static int die(struct bp_stream *s, uint64_t off)
{
	if (s->size > off)
		s->damaged_bytes += s->size - off;
	s->state = BP_STREAM_DEAD;
	s->in_packet = 0;
	return 0;
}

/* Reads and checks the header of the packet at pos.  Returns 1 when a
 * packet is open, 0 when the stream ended, died or must wait. */
static int open_packet(struct bp_stream *s)
{
	const struct bp_meta *m = s->meta;
	int64_t avail = fill(s, BP_PACKET_HEADER_SIZE);
	uint64_t off = at(s, s->pos);
	const uint8_t *p;

	if (avail < 0)
		return die(s, off);
	if (avail == 0) {
		if (off == 0 && !s->follow) /* created, never written */
			bp_diag_report(s->diag, s->path, 0,
				       "empty stream file: no packet (the "
				       "tracer stopped before writing it?)");
		s->state = s->follow ? BP_STREAM_WAIT : BP_STREAM_END;
		return 0;
	}
	if (avail < BP_PACKET_HEADER_SIZE) {
		if (s->follow) {
			s->state = BP_STREAM_WAIT;
			return 0;
		}
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "truncated packet header (%" PRId64 " of %d "
			       "bytes); rest of this stream skipped",
			       avail, BP_PACKET_HEADER_SIZE);
		return die(s, off);
	}
	p = s->data + s->pos;
	uint32_t magic = bp_get_u32(p + BP_PKT_OFF_MAGIC);
	uint64_t content = bp_get_u64(p + BP_PKT_OFF_CONTENT_SIZE);
	uint64_t psize = bp_get_u64(p + BP_PKT_OFF_PACKET_SIZE);
	uint64_t seq = bp_get_u64(p + BP_PKT_OFF_SEQ_NUM);
	if (magic != BP_CTF_MAGIC) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "bad packet magic 0x%08" PRIx32 " (expected "
			       "0x%08x); rest of this stream skipped",
			       magic, BP_CTF_MAGIC);
		return die(s, off);
	}
	if (m->has_uuid && memcmp(p + BP_PKT_OFF_UUID, m->uuid, 16) != 0) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "packet uuid differs from the metadata's (a "
			       "file of another trace?); rest of this stream "
			       "skipped");
		return die(s, off);
	}
	if (bp_get_u32(p + BP_PKT_OFF_STREAM_ID) != 0) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "unknown stream_id %" PRIu32 "; rest of this "
			       "stream skipped",
			       bp_get_u32(p + BP_PKT_OFF_STREAM_ID));
		return die(s, off);
	}
	if (psize % 8 || content % 8 || psize / 8 > BP_PACKET_MAX ||
	    psize / 8 < BP_PACKET_HEADER_SIZE || content > psize ||
	    content / 8 < BP_PACKET_HEADER_SIZE) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "impossible packet_size %" PRIu64
			       " / content_size %" PRIu64 " bits; rest of "
			       "this stream skipped", psize, content);
		return die(s, off);
	}
	avail = fill(s, (size_t)(psize / 8));
	if (avail < 0)
		return die(s, off);
	p = s->data + s->pos; /* fill() may have moved the data */
	if ((uint64_t)avail < psize / 8) {
		if (s->follow) {
			s->state = BP_STREAM_WAIT;
			return 0;
		}
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "packet_size %" PRIu64 " exceeds file size (%"
			       PRId64 " bytes left): truncated packet, "
			       "%" PRIu64 " bytes lost; its complete events "
			       "are kept, rest of this stream skipped",
			       psize / 8, avail, psize / 8 - (uint64_t)avail);
		s->damaged_bytes += psize / 8 - (uint64_t)avail;
		s->state = BP_STREAM_DEAD; /* after this packet's events */
	}
	/* Sequence numbers only grow in a stream (0, 1, 2, ...): a lower
	 * one is a packet written again (a file appended to itself, a
	 * copy), whose events were counted already -- they were counted
	 * twice, and the report said "packets missing". */
	int again = s->next_seq != UINT64_MAX && seq < s->next_seq;
	if (again) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "packet_seq_num %" PRIu64 " after %" PRIu64
			       ": a packet repeated or out of order; its "
			       "events skipped (%" PRIu64 " bytes)", seq,
			       s->next_seq - 1,
			       content / 8 - BP_PACKET_HEADER_SIZE);
		s->damaged_bytes += content / 8 - BP_PACKET_HEADER_SIZE;
	} else if (seq != s->next_seq && s->next_seq != UINT64_MAX) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "packet_seq_num %" PRIu64 " where %" PRIu64
			       " was expected: packets missing", seq,
			       s->next_seq);
	}
	if (!again) {
		s->next_seq = seq + 1;
		s->discarded = bp_get_u64(p + BP_PKT_OFF_DISCARDED);
	}
	s->packets++;
	s->in_packet = 1;
	s->packet_end = s->pos + (size_t)(psize / 8);
	s->content_end = again ? s->pos + BP_PACKET_HEADER_SIZE
			       : s->pos + (size_t)(content / 8);
	if (s->packet_end > s->len) { /* truncated: decode what is there */
		s->packet_end = s->len;
		if (s->content_end > s->len)
			s->content_end = s->len;
	}
	s->pos += BP_PACKET_HEADER_SIZE;
	return 1;
}

/* Skips the rest of the current packet after damage at pos. */
static void skip_packet(struct bp_stream *s, const char *what)
{
	uint64_t off = at(s, s->pos);
	size_t lost = s->content_end - s->pos;

	/* In a packet already reported as truncated, the cut event is the
	 * damage reported then. */
	if (s->state != BP_STREAM_DEAD) {
		bp_diag_report(s->diag, s->path, (int64_t)off,
			       "%s; rest of packet skipped (%zu bytes)", what,
			       lost);
		s->damaged_bytes += lost;
	}
	s->pos = s->packet_end;
	s->in_packet = 0;
}

static int is_text(const struct bp_event *e, int i, const char *t)
{
	size_t n = strlen(t);

	return e->len[i] == n && !memcmp(e->str[i], t, n);
}

/* The tracer never writes an empty string (babeltrace2 2.0.4 would show a
 * stale value): it writes `undefined' for an absent name, initial call,
 * argument list or function, and `true' for a call without match-spec
 * result (docs/format.md).  Readers see those as empty. */
static void absent_to_empty(struct bp_event *e)
{
	switch (e->id) {
	case BP_EV_PROCESS:
		if (is_text(e, BP_FLD(PROCESS, name), "undefined"))
			e->len[BP_FLD(PROCESS, name)] = 0;
		if (is_text(e, BP_FLD(PROCESS, initial_call), "undefined"))
			e->len[BP_FLD(PROCESS, initial_call)] = 0;
		break;
	case BP_EV_CALL:
		if (is_text(e, BP_FLD(CALL, args), "undefined"))
			e->len[BP_FLD(CALL, args)] = 0;
		if (is_text(e, BP_FLD(CALL, info), "true"))
			e->len[BP_FLD(CALL, info)] = 0;
		break;
	case BP_EV_SCHED_IN:
	case BP_EV_SCHED_OUT:
		if (is_text(e, BP_FLD(SCHED_IN, mfa), "undefined"))
			e->len[BP_FLD(SCHED_IN, mfa)] = 0;
		break;
	default:
		break;
	}
}

/*
 * The NUL ending the string at p, or NULL if there is none before end.
 * Sets *ctl when the string holds a control character (< 0x20, 0x7f).
 * Tests 16 bytes at a time with SSE2 (8 with plain words on other
 * little-endian hosts), reading up to 15 bytes past end: the data has
 * BP_STREAM_PAD readable bytes after it.
 */
static inline const uint8_t *find_nul(const uint8_t *p, const uint8_t *end,
				      int *ctl)
{
#if defined(__SSE2__)
	const __m128i below = _mm_set1_epi8(0x1f), del = _mm_set1_epi8(0x7f);

	for (; p < end; p += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		/* 0xff in each byte <= 0x1f (unsigned) or == 0x7f. */
		__m128i m = _mm_or_si128(
			_mm_cmpeq_epi8(_mm_min_epu8(v, below), v),
			_mm_cmpeq_epi8(v, del));
		unsigned bits = (unsigned)_mm_movemask_epi8(m);
		if (!bits)
			continue;
		const uint8_t *q = p + __builtin_ctz(bits);
		if (q >= end)
			return NULL;
		if (*q == 0)
			return q;
		*ctl = 1; /* rare: finish byte by byte */
		return memchr(q, 0, (size_t)(end - q));
	}
	return NULL;
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	const uint64_t ones = 0x0101010101010101ull, high = ones * 0x80;

	for (; p < end; p += 8) {
		uint64_t w, x, m;
		memcpy(&w, p, 8);
		x = w ^ (ones * 0x7f);
		/* High bit of each byte < 0x20 or == 0x7f; exact for the
		 * lowest such byte (borrows only spoil the bytes above). */
		m = ((w - ones * 0x20) & ~w & high) | ((x - ones) & ~x & high);
		if (!m)
			continue;
		const uint8_t *q = p + (__builtin_ctzll(m) >> 3);
		if (q >= end)
			return NULL;
		if (*q == 0)
			return q;
		*ctl = 1; /* rare: finish byte by byte */
		return memchr(q, 0, (size_t)(end - q));
	}
	return NULL;
#else
	const uint8_t *z = memchr(p, 0, (size_t)(end - p));
	for (const uint8_t *q = p; z && q < z; q++)
		if (*q < 0x20 || *q == 0x7f)
			*ctl = 1;
	return z;
#endif
}

/* Bytes of a fixed-size wire type; 0 for strings. */
static const uint8_t wire_size[] = {
	[BP_W_U8] = 1, [BP_W_U16] = 2, [BP_W_U32] = 4, [BP_W_U64] = 8,
	[BP_W_STR] = 0};

/* Delivers the trailing fields that a trace of an older minor format
 * lacks (see bp_meta.c map_classes): 0, or the text "undefined". */
static void absent_fields(const struct bp_class *c, struct bp_event *e,
			  unsigned ns, unsigned nn)
{
	const struct bp_event_desc *d = &bp_event_descs[c->id];

	for (unsigned f = d->nfields - c->missing; f < d->nfields; f++) {
		if (d->fields[f].type == BP_T_STR) {
			if (ns < BP_EV_MAX_STR) {
				e->str[ns] = "undefined";
				e->len[ns++] = 9;
			}
		} else if (nn < BP_EV_MAX_NUM) {
			e->num[nn++] = 0;
		}
	}
}

/*
 * Walks the fields of an event of class c from p (end: end of the packet
 * content), storing them into e, or only checking them when e is NULL.
 * Returns the end of the event, or NULL on damage (the packet has been
 * skipped).
 */
static inline __attribute__((always_inline)) const uint8_t *
fields(struct bp_stream *s, const struct bp_class *c, const uint8_t *p,
       const uint8_t *end, struct bp_event *e, uint64_t off)
{
	unsigned ns = 0, nn = 0;
	char what[128];

	for (unsigned f = 0; f < c->nfields; f++) {
		unsigned t = c->types[f];
		if (t == BP_W_STR) {
			int ctl = 0;
			const uint8_t *z = find_nul(p, end, &ctl);
			if (!z) {
				snprintf(what, sizeof what,
					 "unterminated string in \"%s\" event "
					 "at offset %" PRIu64, c->name, off);
				skip_packet(s, what);
				return NULL;
			}
			if (e && ns < BP_EV_MAX_STR) {
				e->str[ns] = (const char *)p;
				e->len[ns] = (uint32_t)(z - p);
				e->ctl |= (uint8_t)(ctl << ns);
				ns++;
			}
			p = z + 1;
			continue;
		}
		size_t w = wire_size[t];
		if ((size_t)(end - p) < w) {
			snprintf(what, sizeof what,
				 "truncated \"%s\" event at offset %" PRIu64,
				 c->name, off);
			skip_packet(s, what);
			return NULL;
		}
		if (e && nn < BP_EV_MAX_NUM)
			e->num[nn++] = w == 8   ? ld64(p)
				       : w == 1 ? p[0]
				       : w == 2 ? ld16(p)
						: bp_get_u32(p);
		p += w;
	}
	if (__builtin_expect(e && c->missing, 0))
		absent_fields(c, e, ns, nn);
	return p;
}

/* Whether events of class c are delivered (see bp_stream.only). */
static inline int wanted(const struct bp_stream *s, const struct bp_class *c)
{
	return !s->only || (c->id < 64 && (s->only >> c->id & 1));
}

/* Decodes the event at pos (inside the open packet).  Returns 1 for an
 * event in s->ev, 0 on damage (the packet has been skipped) or for an
 * event skipped because of s->only. */
static int decode(struct bp_stream *s)
{
	const uint8_t *base = s->data, *p = base + s->pos,
		      *end = base + s->content_end;
	struct bp_event *e = &s->ev;
	uint64_t off = at(s, s->pos);
	char what[128];

	if (end - p < BP_EVENT_HEADER_SIZE) {
		skip_packet(s, "truncated event header");
		return 0;
	}
	uint16_t cls = ld16(p + BP_EV_OFF_ID);
	const struct bp_class *c =
		cls < BP_META_MAX_CLASSES ? &s->meta->classes[cls] : NULL;
	if (!c || !c->defined || c->bad) {
		snprintf(what, sizeof what, "event id %u %s", cls,
			 c && c->bad ? "has undecodable fields"
				     : "not in the metadata");
		skip_packet(s, what);
		return 0;
	}
	if (!wanted(s, c)) {
		p = fields(s, c, p + BP_EVENT_HEADER_SIZE, end, NULL, off);
		if (p)
			s->pos = (size_t)(p - base);
		return 0;
	}
	e->cls = cls;
	e->id = c->id;
	e->ts = ld64(p + BP_EV_OFF_TS);
	e->pid = ld64(p + BP_EV_OFF_PID);
	e->off = off;
	e->discarded = s->discarded;
	e->packet = s->packets;
	e->ctl = 0;
	for (int i = 0; i < BP_EV_MAX_STR; i++) { /* absent: empty */
		e->str[i] = "";
		e->len[i] = 0;
	}
	memset(e->num, 0, sizeof e->num);
	p = fields(s, c, p + BP_EVENT_HEADER_SIZE, end, e, off);
	if (!p)
		return 0;
	absent_to_empty(e);
	s->pos = (size_t)(p - base);
	if (e->ts < s->last_ts) /* writers keep streams monotonic */
		e->ts = s->last_ts;
	s->last_ts = e->ts;
	return 1;
}

int bp_stream_next(struct bp_stream *s)
{
	for (;;) {
		if (s->in_packet) {
			if (s->pos < s->content_end) {
				if (!decode(s))
					continue;
				struct bp_event *e = &s->ev;
				s->events++;
				s->aux += e->id == BP_EV_PROCESS ||
					  e->id == BP_EV_DROPS;
				if (!s->has_ts) {
					s->first_ts = e->ts;
					s->has_ts = 1;
				}
				s->end_ts = e->ts;
				if (e->id == BP_EV_DROPS) {
					for (int i = 0; i < BP_DROP_COUNT; i++)
						s->drops[i] += e->num[BP_FLD(
							DROPS, ring_full) + i];
					s->has_drops = 1;
				}
				return 1;
			}
			s->pos = s->packet_end;
			s->in_packet = 0;
		}
		if (s->state != BP_STREAM_OK)
			return 0;
		if (!open_packet(s))
			return 0;
	}
}

int bp_stream_refresh(struct bp_stream *s)
{
	struct stat st;

	if (s->state != BP_STREAM_WAIT || s->fd < 0)
		return 0;
	if (fstat(s->fd, &st) != 0 || (uint64_t)st.st_size <= s->size)
		return 0;
	s->size = (uint64_t)st.st_size;
	s->state = BP_STREAM_OK;
	return 1;
}

void bp_stream_seek(struct bp_stream *s, uint64_t off)
{
	unmap(s);
	s->buf_off = off;
	s->len = s->pos = 0;
	s->in_packet = 0;
	s->state = BP_STREAM_OK;
	s->next_seq = UINT64_MAX; /* any */
	s->last_ts = 0;
}

/* Reads n bytes at file offset off; returns 0, or -1 if not all there. */
static int read_at(const struct bp_stream *s, uint64_t off, uint8_t *buf,
		   size_t n)
{
	if (off > s->size || s->size - off < n)
		return -1;
	if (s->mem) {
		memcpy(buf, s->mem + off, n);
		return 0;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(s->fd, buf + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

uint64_t bp_stream_last_packets(struct bp_stream *s, uint64_t *offs,
				uint32_t max, uint64_t *count)
{
	uint8_t h[BP_PACKET_HEADER_SIZE];
	uint64_t off = 0, n = 0;

	while (read_at(s, off, h, sizeof h) == 0) {
		uint64_t psize = bp_get_u64(h + BP_PKT_OFF_PACKET_SIZE) / 8;
		if (bp_get_u32(h + BP_PKT_OFF_MAGIC) != BP_CTF_MAGIC ||
		    psize < BP_PACKET_HEADER_SIZE || psize > BP_PACKET_MAX)
			break; /* damaged: the packets before it are known */
		offs[n++ % max] = off;
		off += psize;
	}
	*count = n;
	return off;
}
