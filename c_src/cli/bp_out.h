/* bp_out.h -- the CLI's buffered output writer and hand-written
 * formatters (integers, wall-clock times, durations, JSON strings).
 *
 * Every command writes through one struct bp_out: a large buffer flushed
 * with write(2), or a growable in-memory buffer (fd == -1) used to build a
 * line before deciding whether to keep it (print --grep).  The fast paths
 * are inline; nothing here calls printf per event.
 */
#ifndef BP_OUT_H
#define BP_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct bp_out {
	int fd;          /* -1: memory buffer that grows instead of flushing */
	int own_fd;      /* close fd in bp_out_close */
	char *buf;       /* owned */
	size_t len;      /* bytes pending in buf */
	size_t cap;
	int err;         /* first errno from write(2) or allocation, 0 if none */
	const char *path;/* for error messages; weak */
};

/*
 * Opens an output: path NULL or "-" means standard output, otherwise the
 * file is created/truncated (0644).  Returns 0 or an errno value (nothing
 * to free then).
 */
int bp_out_open(struct bp_out *o, const char *path);

/* Initialises a growable memory buffer (never flushed to a file). */
void bp_out_init_mem(struct bp_out *o);

/* Writes pending bytes (file outputs; a no-op for memory buffers).
 * Returns 0 or the first errno met so far. */
int bp_out_flush(struct bp_out *o);

/* Flushes, closes the file if owned, frees the buffer.  Returns 0 or the
 * first errno met during the output's life. */
int bp_out_close(struct bp_out *o);

/* Slow path of bp_out_reserve: flushes or grows so that n bytes fit.
 * Returns the write position, or NULL (o->err set) on allocation failure
 * of a memory buffer. */
char *bp__out_make_room(struct bp_out *o, size_t n);

/* Returns a pointer where n bytes can be written; commit with o->len += k.
 * NULL only if a memory buffer cannot grow. */
static inline char *bp_out_reserve(struct bp_out *o, size_t n)
{
	if (o->cap - o->len >= n)
		return o->buf + o->len;
	return bp__out_make_room(o, n);
}

/* Copies n bytes, inline for the short texts of a line (n <= 16): two
 * overlapping loads and stores instead of a call to memcpy. */
static inline void bp__out_copy(char *d, const char *s, size_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t a, b;
		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4 && n < 8) {
		uint32_t a, b;
		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else if (n > 0 && n < 4) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	} else if (n) {
		memcpy(d, s, n);
	}
}

static inline void bp_out_mem(struct bp_out *o, const void *p, size_t n)
{
	char *d = bp_out_reserve(o, n);
	if (d) {
		bp__out_copy(d, p, n);
		o->len += n;
	}
}

static inline void bp_out_str(struct bp_out *o, const char *s)
{
	bp_out_mem(o, s, strlen(s));
}

static inline void bp_out_char(struct bp_out *o, char c)
{
	char *d = bp_out_reserve(o, 1);
	if (d) {
		*d = c;
		o->len++;
	}
}

/* Appends n spaces. */
void bp_out_spaces(struct bp_out *o, size_t n);

/* Decimal integers. */
void bp_out_u64(struct bp_out *o, uint64_t v);
void bp_out_i64(struct bp_out *o, int64_t v);

/* v right-aligned in width columns (no truncation). */
void bp_out_u64_w(struct bp_out *o, uint64_t v, int width);

/* s left-aligned (pad after) or right-aligned in width columns. */
void bp_out_pad(struct bp_out *o, const char *s, int width, int right);

/* Text with control characters (< 0x20, 0x7f) written as \xNN, so that a
 * damaged or hostile trace cannot send terminal escapes. */
void bp_out_text(struct bp_out *o, const char *s, size_t n);

/* A JSON string literal, quotes included. */
void bp_out_json_str(struct bp_out *o, const char *s, size_t n);

/* ns as a decimal number of microseconds with 3 decimals ("12.345"),
 * the unit of Chrome trace-event timestamps. */
void bp_out_us3(struct bp_out *o, uint64_t ns);

/* A duration for humans: "850ns", "12.345us", "1.234ms", "2.500000s". */
void bp_out_dur(struct bp_out *o, uint64_t ns);

/* Caches the last time formatted: the local-time split of its second
 * and its microsecond's text. */
struct bp_clock_fmt {
	int64_t sec;     /* last second formatted, INT64_MIN if none */
	int64_t us;      /* last microsecond formatted (in sec), -1 if none */
	int64_t us_ns;   /* wall ns where that microsecond starts */
	char text[16];   /* "HH:MM:SS.uuuuuu" for sec and us */
};

void bp_clock_fmt_init(struct bp_clock_fmt *c);

/* Wall time wall_ns (ns since the Unix epoch) as local "HH:MM:SS.uuuuuu". */
void bp_out_clock(struct bp_out *o, struct bp_clock_fmt *c, int64_t wall_ns);

/* Wall time as local "YYYY-MM-DD HH:MM:SS.nnnnnnnnn +ZZZZ" (not cached). */
void bp_out_datetime(struct bp_out *o, int64_t wall_ns);

#endif /* BP_OUT_H */
