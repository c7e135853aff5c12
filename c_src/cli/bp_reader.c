/* bp_reader.c -- opens a beamprobe trace directory (or an in-memory
 * trace) and merges its streams in time order with a binary min-heap
 * keyed by each stream's next event.  Streams are decoded by bp_stream.c,
 * the metadata by bp_meta.c (see bp_reader.h for the layering).
 */
#include "bp_reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define METADATA_MAX (16u << 20)

static const char *const event_names[BP_EV_COUNT] = {
#define BP__NAME(name, id, str, fields, cat) [id] = str,
	BP_EVENTS(BP__NAME)
#undef BP__NAME
};

const char *bp_event_name(uint16_t id)
{
	return id < BP_EV_COUNT ? event_names[id] : "unknown";
}

uint16_t bp_event_id_of(const char *name, size_t len)
{
	for (uint16_t i = 0; i < BP_EV_COUNT; i++)
		if (strlen(event_names[i]) == len &&
		    memcmp(event_names[i], name, len) == 0)
			return i;
	return BP_EV_UNKNOWN;
}

/* Heap order: earlier timestamp first, then lower stream index. */
static inline int before(const struct bp_reader *r, uint32_t a, uint32_t b)
{
	uint64_t ta = r->streams[a]->ev.ts, tb = r->streams[b]->ev.ts;
	return ta < tb || (ta == tb && a < b);
}

static void sift_down(struct bp_reader *r, uint32_t i)
{
	uint32_t *h = r->heap, n = r->nheap, x = h[i];

	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && before(r, h[c + 1], h[c]))
			c++;
		if (!before(r, h[c], x))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

static void heap_push(struct bp_reader *r, uint32_t s)
{
	uint32_t i = r->nheap++;

	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!before(r, s, r->heap[parent]))
			break;
		r->heap[i] = r->heap[parent];
		i = parent;
	}
	r->heap[i] = s;
}

/* Loads the first event of stream i and puts it on the heap. */
static void prime(struct bp_reader *r, uint32_t i)
{
	struct bp_stream *s = r->streams[i];

	if (r->unprimed)
		return;
	if (bp_stream_next(s)) {
		heap_push(r, i);
		if (s->ev.ts < r->start_ts)
			r->start_ts = s->ev.ts;
	}
}

static int add_stream(struct bp_reader *r, struct bp_stream *s)
{
	if (r->nstreams == r->capstreams) {
		uint32_t cap = r->capstreams ? r->capstreams * 2 : 16;
		struct bp_stream **v =
			realloc(r->streams, cap * sizeof *v);
		uint32_t *h = realloc(r->heap, cap * sizeof *h);
		if (v)
			r->streams = v;
		if (h)
			r->heap = h;
		if (!v || !h)
			return -1;
		r->capstreams = cap;
	}
	s->follow = r->follow;
	s->only = r->only;
	r->streams[r->nstreams++] = s;
	return 0;
}

static void reader_init(struct bp_reader *r, unsigned flags)
{
	memset(r, 0, sizeof *r);
	bp_meta_builtin(&r->meta);
	r->follow = !!(flags & BP_READER_FOLLOW);
	r->diag.quiet = !!(flags & BP_READER_QUIET);
	if (flags & BP_READER_PROCESS_ONLY)
		r->only = 1ull << BP_EV_PROCESS;
	if (flags & BP_READER_NAMES_ONLY)
		r->only = 1ull << BP_EV_REGISTER | 1ull << BP_EV_UNREGISTER;
	r->unprimed = !!(flags & BP_READER_UNPRIMED);
	r->current = -1;
	r->start_ts = UINT64_MAX;
}

static void load_metadata(struct bp_reader *r, const char *text, size_t len,
			  const char *path)
{
	char err[256];
	size_t erroff = 0;

	if (bp_meta_parse(&r->meta, text, len, err, sizeof err, &erroff) != 0)
		bp_diag_report(&r->diag, path, (int64_t)erroff,
			       "%s; decoding with the built-in format %d.%d "
			       "and without wall-clock offset", err,
			       BP_FORMAT_MAJOR, BP_FORMAT_MINOR);
}

static void read_metadata(struct bp_reader *r)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%s/metadata", r->dir);
	/* O_NONBLOCK: a FIFO named metadata must not hang the open. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		r->meta_missing = 1;
		bp_diag_report(&r->diag, path, -1,
			       "not a regular file; decoding with the built-in "
			       "format %d.%d and without wall-clock offset",
			       BP_FORMAT_MAJOR, BP_FORMAT_MINOR);
		close(fd);
		return;
	}
	if (fd < 0 || fstat(fd, &st) != 0) {
		r->meta_missing = 1;
		bp_diag_report(&r->diag, path, -1,
			       "%s; decoding with the built-in format %d.%d "
			       "and without wall-clock offset",
			       strerror(errno), BP_FORMAT_MAJOR,
			       BP_FORMAT_MINOR);
		if (fd >= 0)
			close(fd);
		return;
	}
	r->metadata_size = (uint64_t)st.st_size;
	size_t len = st.st_size > METADATA_MAX ? METADATA_MAX
					       : (size_t)st.st_size;
	char *text = malloc(len + 1);
	size_t got = 0;
	while (text && got < len) {
		ssize_t n = read(fd, text + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (!text) {
		bp_diag_report(&r->diag, path, -1, "out of memory");
		return;
	}
	load_metadata(r, text, got, path);
	free(text);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is name a data stream file name not yet open? */
static int known_stream(const struct bp_reader *r, const char *path)
{
	for (uint32_t i = 0; i < r->nstreams; i++)
		if (strcmp(r->streams[i]->path, path) == 0)
			return 1;
	return 0;
}

/*
 * Opens the data stream files of r->dir not open yet, in name order.
 * Returns the number added, or -1 if the directory cannot be read.
 */
static int scan_dir(struct bp_reader *r)
{
	DIR *d = opendir(r->dir);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int added = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "thread-", 7) != 0)
			continue; /* only stream files: not metadata, not
				   * whatever else the directory holds */
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **v = realloc(names, cap * sizeof *v);
			if (!v)
				break;
			names = v;
		}
		if (!(names[n] = strdup(de->d_name)))
			break;
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp_names);
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", r->dir,
				     names[i]) >= sizeof path ||
		    known_stream(r, path))
			continue;
		if (stat(path, &st) != 0) {
			bp_diag_report(&r->diag, path, -1, "%s",
				       strerror(errno));
			continue;
		}
		if (!S_ISREG(st.st_mode)) {
			bp_diag_report(&r->diag, path, -1,
				       "not a regular file, skipped");
			continue;
		}
		struct bp_stream *s = malloc(sizeof *s);
		int err = s ? bp_stream_open_file(s, path, &r->meta, &r->diag)
			    : ENOMEM;
		if (err) {
			bp_diag_report(&r->diag, path, -1, "%s",
				       strerror(err));
			free(s);
			continue;
		}
		if (add_stream(r, s) != 0) {
			bp_stream_close(s);
			free(s);
			continue;
		}
		prime(r, r->nstreams - 1);
		added++;
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return added;
}

/* Parses one "thread-NNN:BYTES:EVENTS:AUX" of stream_files (len bytes at
 * p) into name (cap bytes) and v[3].  Returns 0, or -1 if malformed. */
static int parse_recorded(const char *p, size_t len, char *name, size_t cap,
			  uint64_t v[3])
{
	const char *end = p + len, *c = memchr(p, ':', len);
	size_t nl = c ? (size_t)(c - p) : 0;

	if (!c || nl < 8 || nl >= cap || memcmp(p, "thread-", 7) != 0)
		return -1;
	for (size_t i = 7; i < nl; i++)
		if (p[i] < '0' || p[i] > '9')
			return -1;
	memcpy(name, p, nl);
	name[nl] = '\0';
	p = c + 1;
	for (int k = 0; k < 3; k++) {
		int digits = 0;
		v[k] = 0;
		while (p < end && *p >= '0' && *p <= '9' && digits < 19) {
			v[k] = v[k] * 10 + (uint64_t)(*p++ - '0');
			digits++;
		}
		if (!digits || (k < 2 ? p >= end || *p != ':' : p != end))
			return -1;
		p += k < 2;
	}
	return 0;
}

/* Parses env session_lost ("cause=N,...", bp_format.h): counts of the
 * causes this reader knows in r->session_lost, the others summed.
 * Malformed: reported, and the trace is read as one without it. */
static void check_session_lost(struct bp_reader *r)
{
	const char *v = bp_meta_env(&r->meta, BP_ENV_SESSION_LOST), *p;
	uint64_t got[BP_DROP_COUNT] = {0}, sl[BP_SL_COUNT] = {0}, other = 0;
	char mpath[4096];

	if (!v)
		return;
	for (p = v; *p;) {
		const char *eq = strchr(p, '='), *q;
		uint64_t n = 0;
		int digits = 0, c;

		if (!eq || eq == p)
			goto bad;
		for (q = eq + 1; *q >= '0' && *q <= '9' && digits < 19; q++) {
			n = n * 10 + (uint64_t)(*q - '0');
			digits++;
		}
		if (!digits || (*q && *q != ','))
			goto bad;
		for (c = 0; c < BP_DROP_COUNT; c++)
			if (strlen(bp_drop_cause_names[c]) == (size_t)(eq - p) &&
			    !memcmp(p, bp_drop_cause_names[c], (size_t)(eq - p)))
				break;
		if (c < BP_DROP_COUNT) {
			got[c] += n;
		} else {
			for (c = 0; c < BP_SL_COUNT; c++)
				if (strlen(bp_session_loss_names[c]) ==
					    (size_t)(eq - p) &&
				    !memcmp(p, bp_session_loss_names[c],
					    (size_t)(eq - p)))
					break;
			if (c < BP_SL_COUNT)
				sl[c] += n;
			else
				other += n;
		}
		p = *q ? q + 1 : q;
		if (*q && !*p)
			goto bad; /* a trailing comma */
	}
	r->has_session_lost = 1;
	memcpy(r->session_lost, got, sizeof got);
	memcpy(r->session_lost_more, sl, sizeof sl);
	r->session_lost_other = other;
	return;
bad:
	snprintf(mpath, sizeof mpath, "%s/metadata", r->dir);
	bp_diag_report(&r->diag, mpath, -1,
		       "env " BP_ENV_SESSION_LOST ": malformed ('%.64s'); the "
		       "session's loss totals are not known", v);
}

/*
 * Compares the stream files with the list the session wrote into the
 * metadata when it stopped (env stream_files, docs/format.md): a listed
 * file that is gone, shorter or longer than it was is reported, and the
 * events of the gone ones counted (bp_reader_missing).
 */
static void check_recorded(struct bp_reader *r)
{
	const char *list = bp_meta_env(&r->meta, "stream_files"), *p;
	char mpath[4096];

	if (!list)
		return;
	r->has_recorded = 1;
	snprintf(mpath, sizeof mpath, "%s/metadata", r->dir);
	for (p = list; *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char name[32], path[4096];
		uint64_t v[3];
		struct bp_stream *s = NULL;

		if (parse_recorded(p, len, name, sizeof name, v) != 0) {
			bp_diag_report(&r->diag, mpath, -1,
				       "env stream_files: malformed entry "
				       "'%.*s'", (int)(len > 64 ? 64 : len), p);
			p += len + (comma != NULL);
			continue;
		}
		p += len + (comma != NULL);
		snprintf(path, sizeof path, "%s/%s", r->dir, name);
		for (uint32_t i = 0; i < r->nstreams && !s; i++)
			if (strcmp(r->streams[i]->path, path) == 0)
				s = r->streams[i];
		if (!s) {
			r->files_missing++;
			r->events_missing += v[1];
			bp_diag_report(&r->diag, path, -1,
				       "missing: the session wrote %" PRIu64
				       " events (%" PRIu64 " bytes) to it; "
				       "they are counted as lost",
				       v[1], v[0]);
			continue;
		}
		s->has_recorded = 1;
		s->rec_bytes = v[0];
		s->rec_events = v[1];
		s->rec_aux = v[2];
		if (s->size < v[0])
			bp_diag_report(&r->diag, path, (int64_t)s->size,
				       "cut: %" PRIu64 " of the %" PRIu64
				       " bytes the session wrote", s->size,
				       v[0]);
		else if (s->size > v[0])
			bp_diag_report(&r->diag, path, (int64_t)v[0],
				       "%" PRIu64 " bytes more than the "
				       "session wrote (changed after it "
				       "stopped?)", s->size - v[0]);
	}
}

uint64_t bp_reader_missing(const struct bp_reader *r)
{
	uint64_t n = r->events_missing;

	for (uint32_t i = 0; i < r->nstreams; i++) {
		const struct bp_stream *s = r->streams[i];
		uint64_t got = s->events - s->aux;
		if (s->has_recorded && !r->only &&
		    (s->state == BP_STREAM_END || s->state == BP_STREAM_DEAD) &&
		    got < s->rec_events)
			n += s->rec_events - got;
	}
	return n;
}

int bp_reader_open(struct bp_reader *r, const char *dir, unsigned flags)
{
	struct stat st;

	reader_init(r, flags);
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		bp_diag_report(&r->diag, dir, -1, "%s",
			       stat(dir, &st) != 0 ? strerror(errno)
						   : "not a directory");
		return -1;
	}
	r->dir = strdup(dir);
	if (!r->dir)
		return -1;
	for (size_t n = strlen(r->dir); n > 1 && r->dir[n - 1] == '/'; n--)
		r->dir[n - 1] = '\0'; /* "t/" names its files "t/thread-000" */
	read_metadata(r);
	if (scan_dir(r) < 0) {
		bp_diag_report(&r->diag, dir, -1, "%s", strerror(errno));
		bp_reader_close(r);
		return -1;
	}
	if (!r->follow) {
		check_recorded(r);
		check_session_lost(r);
	}
	if (r->meta_missing && !r->nstreams && !r->follow) {
		bp_diag_report(&r->diag, dir, -1,
			       "not a beamprobe trace (no metadata file and "
			       "no thread-* stream file)");
		bp_reader_close(r);
		return -1;
	}
	return 0;
}

int bp_reader_open_mem(struct bp_reader *r, const char *metadata,
		       size_t mlen, const uint8_t *const *bufs,
		       const size_t *lens, uint32_t n, unsigned flags)
{
	reader_init(r, flags & ~BP_READER_FOLLOW);
	r->dir = strdup("memory");
	if (!r->dir)
		return -1;
	if (metadata) {
		r->metadata_size = mlen;
		load_metadata(r, metadata, mlen, "memory/metadata");
	}
	for (uint32_t i = 0; i < n; i++) {
		char name[32];
		struct bp_stream *s = malloc(sizeof *s);
		snprintf(name, sizeof name, "memory/stream-%u", i);
		if (!s || bp_stream_open_mem(s, name, bufs[i], lens[i],
					     &r->meta, &r->diag) != 0) {
			free(s);
			bp_reader_close(r);
			return -1;
		}
		if (add_stream(r, s) != 0) {
			bp_stream_close(s);
			free(s);
			bp_reader_close(r);
			return -1;
		}
		prime(r, i);
	}
	return 0;
}

/* Sets r->limit_* to the smaller child of the root (none: a key after
 * every event). */
static void set_limit(struct bp_reader *r)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 1; i <= 2 && i < r->nheap; i++)
		if (best == UINT32_MAX || before(r, r->heap[i], best))
			best = r->heap[i];
	r->limit_ts = best == UINT32_MAX ? UINT64_MAX : r->streams[best]->ev.ts;
	r->limit_idx = best;
}

const struct bp_event *bp_reader_next(struct bp_reader *r)
{
	/* Advance the stream whose event was handed out last time. */
	if (r->current >= 0) {
		uint32_t c = (uint32_t)r->current;
		struct bp_stream *s = r->streams[c];
		if (bp_stream_next(s)) {
			/* Fast path: still before every other stream. */
			if (s->ev.ts < r->limit_ts ||
			    (s->ev.ts == r->limit_ts && c < r->limit_idx)) {
				s->ev.stream = c;
				return &s->ev;
			}
			sift_down(r, 0); /* heap[0] is c */
		} else {
			r->heap[0] = r->heap[--r->nheap];
			if (r->nheap)
				sift_down(r, 0);
		}
		r->current = -1;
	}
	if (!r->nheap)
		return NULL;
	set_limit(r);
	r->current = (int)r->heap[0];
	struct bp_event *e = &r->streams[r->current]->ev;
	e->stream = (uint32_t)r->current;
	return e;
}

int bp_reader_refresh(struct bp_reader *r)
{
	int n = 0;

	if (!r->follow)
		return 0;
	/* Streams not on the heap (and not the current one) are waiting. */
	for (uint32_t i = 0; i < r->nstreams; i++) {
		struct bp_stream *s = r->streams[i];
		if ((int)i == r->current || s->state != BP_STREAM_WAIT)
			continue;
		if (bp_stream_refresh(s)) {
			prime(r, i);
			n++;
		}
	}
	int added = scan_dir(r);
	if (added > 0)
		n += added;
	return n;
}

/* Whether the packet of s at off holds a "process" event (s delivers
 * only those); next: where the following packet starts. */
static int packet_has_process(struct bp_stream *s, uint64_t off,
			      uint64_t next)
{
	bp_stream_seek(s, off);
	return bp_stream_next(s) && s->ev.off < next;
}

/* Offset from which stream s holds the process events of its end. */
static uint64_t tail_start(struct bp_stream *s)
{
	static uint64_t offs[BP_TAIL_PACKETS];
	uint64_t n, i;

	bp_stream_last_packets(s, offs, BP_TAIL_PACKETS, &n);
	if (n == 0)
		return 0;
	for (i = n - 1; i > 0; i--) { /* packet i is in; is i - 1? */
		if (n - i >= BP_TAIL_PACKETS)
			return 0; /* further back than the ring: all */
		if (!packet_has_process(s, offs[(i - 1) % BP_TAIL_PACKETS],
					offs[i % BP_TAIL_PACKETS]))
			return offs[i % BP_TAIL_PACKETS];
	}
	return 0;
}

void bp_reader_tail_processes(struct bp_reader *r,
			      void (*fn)(void *ctx, const struct bp_event *e),
			      void *ctx)
{
	for (uint32_t i = 0; i < r->nstreams; i++) {
		struct bp_stream *s = r->streams[i];
		bp_stream_seek(s, tail_start(s));
		while (bp_stream_next(s))
			fn(ctx, &s->ev);
	}
}

int bp_reader_losses(const struct bp_reader *r, uint64_t *by_cause,
		     uint64_t *discarded)
{
	int any = 0;

	memset(by_cause, 0, BP_DROP_COUNT * sizeof *by_cause);
	*discarded = 0;
	for (uint32_t i = 0; i < r->nstreams; i++) {
		const struct bp_stream *s = r->streams[i];
		*discarded += s->discarded;
		any |= s->has_drops;
		for (int c = 0; c < BP_DROP_COUNT; c++)
			by_cause[c] += s->drops[c];
	}
	return any;
}

void bp_reader_loss_report(const struct bp_reader *r,
			   struct bp_loss_report *l)
{
	uint64_t in_streams = 0, sum = 0;

	memset(l, 0, sizeof *l);
	l->any_drops = bp_reader_losses(r, l->by_cause, &l->discarded);
	l->missing = bp_reader_missing(r);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		in_streams += l->by_cause[c];
	if (l->discarded > in_streams)
		in_streams = l->discarded; /* told, by no drops event */
	if (r->has_session_lost) {
		l->recorded = 1;
		for (int c = 0; c < BP_DROP_COUNT; c++)
			if (r->session_lost[c] > l->by_cause[c])
				l->by_cause[c] = r->session_lost[c];
		l->other = r->session_lost_other;
		memcpy(l->more, r->session_lost_more, sizeof l->more);
		/* The stream sink's: events these files hold. */
		l->stream_only = l->more[BP_SL_STREAM];
		l->more[BP_SL_STREAM] = 0;
	}
	for (int c = 0; c < BP_DROP_COUNT; c++)
		sum += l->by_cause[c];
	for (int c = 0; c < BP_SL_COUNT; c++)
		sum += l->more[c];
	sum += l->other;
	l->unattributed = l->discarded > sum ? l->discarded - sum : 0;
	l->no_stream = sum > in_streams ? sum - in_streams : 0;
	l->total = sum + l->unattributed + l->missing;
}

void bp_reader_close(struct bp_reader *r)
{
	for (uint32_t i = 0; i < r->nstreams; i++) {
		bp_stream_close(r->streams[i]);
		free(r->streams[i]);
	}
	free(r->streams);
	free(r->heap);
	free(r->dir);
	bp_meta_free(&r->meta);
	r->streams = NULL;
	r->heap = NULL;
	r->dir = NULL;
	r->nstreams = r->nheap = 0;
}
