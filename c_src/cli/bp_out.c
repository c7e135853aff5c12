/* bp_out.c -- buffered writer and formatters (see bp_out.h). */
#include "bp_out.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define OUT_CAP (1u << 20)

int bp_out_open(struct bp_out *o, const char *path)
{
	memset(o, 0, sizeof *o);
	o->fd = 1;
	o->path = "standard output";
	if (path && strcmp(path, "-") != 0) {
		o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			     0644);
		if (o->fd < 0)
			return errno;
		o->own_fd = 1;
		o->path = path;
	}
	o->buf = malloc(OUT_CAP);
	if (!o->buf) {
		if (o->own_fd)
			close(o->fd);
		return ENOMEM;
	}
	o->cap = OUT_CAP;
	return 0;
}

void bp_out_init_mem(struct bp_out *o)
{
	memset(o, 0, sizeof *o);
	o->fd = -1;
	o->path = "memory";
}

int bp_out_flush(struct bp_out *o)
{
	size_t done = 0;

	if (o->fd < 0)
		return o->err;
	while (done < o->len) {
		ssize_t n = write(o->fd, o->buf + done, o->len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (!o->err)
				o->err = errno;
			break;
		}
		done += (size_t)n;
	}
	o->len = 0; /* on error the bytes are dropped: err reports it */
	return o->err;
}

int bp_out_close(struct bp_out *o)
{
	int err = bp_out_flush(o);

	if (o->own_fd && close(o->fd) != 0 && !err)
		err = errno;
	free(o->buf);
	o->buf = NULL;
	o->cap = o->len = 0;
	return err;
}

char *bp__out_make_room(struct bp_out *o, size_t n)
{
	if (o->fd >= 0) {
		bp_out_flush(o);
		if (o->cap - o->len >= n)
			return o->buf + o->len;
	}
	/* memory buffer, or one item larger than a file buffer: grow */
	size_t cap = o->cap ? o->cap : 4096;
	while (cap - o->len < n)
		cap *= 2;
	char *nb = realloc(o->buf, cap);
	if (!nb) {
		if (!o->err)
			o->err = ENOMEM;
		return NULL;
	}
	o->buf = nb;
	o->cap = cap;
	return o->buf + o->len;
}

void bp_out_spaces(struct bp_out *o, size_t n)
{
	char *d = bp_out_reserve(o, n);
	if (d) {
		memset(d, ' ', n);
		o->len += n;
	}
}

/* "00" to "99". */
static const char pairs[] = "00010203040506070809"
			    "10111213141516171819"
			    "20212223242526272829"
			    "30313233343536373839"
			    "40414243444546474849"
			    "50515253545556575859"
			    "60616263646566676869"
			    "70717273747576777879"
			    "80818283848586878889"
			    "90919293949596979899";

/* Writes v's digits ending at end; returns the first digit's position. */
static char *digits(char *end, uint64_t v)
{
	char *p = end;
	while (v >= 100) {
		unsigned i = (unsigned)(v % 100) * 2;
		v /= 100;
		*--p = pairs[i + 1];
		*--p = pairs[i];
	}
	if (v >= 10) {
		*--p = pairs[v * 2 + 1];
		*--p = pairs[v * 2];
	} else {
		*--p = (char)('0' + v);
	}
	return p;
}

void bp_out_u64(struct bp_out *o, uint64_t v)
{
	char tmp[24], *p = digits(tmp + sizeof tmp, v);
	bp_out_mem(o, p, (size_t)(tmp + sizeof tmp - p));
}

void bp_out_i64(struct bp_out *o, int64_t v)
{
	if (v < 0) {
		bp_out_char(o, '-');
		bp_out_u64(o, (uint64_t)0 - (uint64_t)v);
	} else {
		bp_out_u64(o, (uint64_t)v);
	}
}

void bp_out_u64_w(struct bp_out *o, uint64_t v, int width)
{
	char tmp[24], *p = digits(tmp + sizeof tmp, v);
	int n = (int)(tmp + sizeof tmp - p);
	if (width > n)
		bp_out_spaces(o, (size_t)(width - n));
	bp_out_mem(o, p, (size_t)n);
}

void bp_out_pad(struct bp_out *o, const char *s, int width, int right)
{
	int n = (int)strlen(s);
	if (right && width > n)
		bp_out_spaces(o, (size_t)(width - n));
	bp_out_mem(o, s, (size_t)n);
	if (!right && width > n)
		bp_out_spaces(o, (size_t)(width - n));
}

static const char hexd[] = "0123456789abcdef";

/* Whether any of the 8 bytes of w is < 0x20 or == 0x7f (SWAR). */
static inline int has_ctl(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, high = ones * 0x80;
	uint64_t lt20 = (w - ones * 0x20) & ~w & high;
	uint64_t x = w ^ (ones * 0x7f);
	uint64_t eq7f = (x - ones) & ~x & high;
	return (lt20 | eq7f) != 0;
}

void bp_out_text(struct bp_out *o, const char *s, size_t n)
{
	size_t i = 0, start = 0;

	for (; i + 8 <= n; i += 8) { /* fast path: plain text */
		uint64_t w;
		memcpy(&w, s + i, 8);
		if (has_ctl(w))
			break;
	}
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != 0x7f)
			continue;
		bp_out_mem(o, s + start, i - start);
		char esc[4] = {'\\', 'x', hexd[c >> 4], hexd[c & 15]};
		bp_out_mem(o, esc, 4);
		start = i + 1;
	}
	bp_out_mem(o, s + start, n - start);
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlong forms, surrogates or code points past U+10FFFF), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if (s[k] < 0x80 || s[k] > 0xbf)
			return 0;
	return len;
}

/* A JSON string: UTF-8 as it is, a byte that starts no well-formed
 * sequence (a directory name in another encoding, a damaged trace) as
 * U+FFFD, which JSON parsers require (RFC 8259: UTF-8 only). */
void bp_out_json_str(struct bp_out *o, const char *s, size_t n)
{
	size_t i = 0, start = 0;

	bp_out_char(o, '"');
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x80) {
			size_t k = utf8_len((const unsigned char *)s + i,
					    n - i);
			if (k) {
				i += k - 1;
				continue;
			}
			bp_out_mem(o, s + start, i - start);
			start = i + 1;
			bp_out_mem(o, "\\ufffd", 6);
			continue;
		}
		if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f)
			continue;
		bp_out_mem(o, s + start, i - start);
		start = i + 1;
		if (c == '"' || c == '\\') {
			char esc[2] = {'\\', (char)c};
			bp_out_mem(o, esc, 2);
		} else {
			char esc[6] = {'\\', 'u', '0', '0', hexd[c >> 4],
				       hexd[c & 15]};
			bp_out_mem(o, esc, 6);
		}
	}
	bp_out_mem(o, s + start, n - start);
	bp_out_char(o, '"');
}

/* v / div with `decimals` digits of the remainder: "12.345". */
static void fixed(struct bp_out *o, uint64_t v, uint64_t div, int decimals)
{
	char tmp[24];
	uint64_t frac = v % div;

	bp_out_u64(o, v / div);
	bp_out_char(o, '.');
	for (int i = decimals - 1; i >= 0; i--) {
		tmp[i] = (char)('0' + frac % 10);
		frac /= 10;
	}
	bp_out_mem(o, tmp, (size_t)decimals);
}

void bp_out_us3(struct bp_out *o, uint64_t ns)
{
	fixed(o, ns, 1000, 3);
}

void bp_out_dur(struct bp_out *o, uint64_t ns)
{
	if (ns < 1000) {
		bp_out_u64(o, ns);
		bp_out_mem(o, "ns", 2);
	} else if (ns < 1000000) {
		fixed(o, ns, 1000, 3);
		bp_out_mem(o, "us", 2);
	} else if (ns < 1000000000) {
		fixed(o, ns / 1000, 1000, 3);
		bp_out_mem(o, "ms", 2);
	} else {
		fixed(o, ns / 1000, 1000000, 6);
		bp_out_char(o, 's');
	}
}

void bp_clock_fmt_init(struct bp_clock_fmt *c)
{
	c->sec = INT64_MIN;
	c->us = -1;
	c->us_ns = INT64_MIN;
	memcpy(c->text, "00:00:00.000000", 16);
}

/* Floor division of ns into seconds and a non-negative remainder. */
static void split_ns(int64_t ns, int64_t *sec, int64_t *rem)
{
	*sec = ns / 1000000000;
	*rem = ns % 1000000000;
	if (*rem < 0) {
		*rem += 1000000000;
		*sec -= 1;
	}
}

void bp_out_clock(struct bp_out *o, struct bp_clock_fmt *c, int64_t wall_ns)
{
	int64_t sec, rem;

	/* Same microsecond as last time (events are close): no arithmetic. */
	if (c->us >= 0 && (uint64_t)wall_ns - (uint64_t)c->us_ns < 1000) {
		bp_out_mem(o, c->text, 15);
		return;
	}
	split_ns(wall_ns, &sec, &rem);
	if (sec != c->sec) {
		time_t t = (time_t)sec;
		struct tm tm;
		char tmp[16];
		if (localtime_r(&t, &tm)) {
			snprintf(tmp, sizeof tmp, "%02d:%02d:%02d",
				 tm.tm_hour % 100, tm.tm_min % 100,
				 tm.tm_sec % 100);
			memcpy(c->text, tmp, 8);
		}
		c->sec = sec;
		c->us = -1;
	}
	if (rem / 1000 != c->us) { /* "uuuuuu", two digits at a time */
		uint32_t us = (uint32_t)(rem / 1000);
		c->us = us;
		c->us_ns = (int64_t)((uint64_t)wall_ns - (uint64_t)(rem % 1000));
		memcpy(c->text + 9, pairs + 2 * (us / 10000), 2);
		memcpy(c->text + 11, pairs + 2 * (us / 100 % 100), 2);
		memcpy(c->text + 13, pairs + 2 * (us % 100), 2);
	}
	bp_out_mem(o, c->text, 15);
}

void bp_out_datetime(struct bp_out *o, int64_t wall_ns)
{
	int64_t sec, rem;
	struct tm tm;
	time_t t;
	char tmp[64];

	split_ns(wall_ns, &sec, &rem);
	t = (time_t)sec;
	if (!localtime_r(&t, &tm)) {
		bp_out_i64(o, wall_ns);
		return;
	}
	strftime(tmp, sizeof tmp, "%Y-%m-%d %H:%M:%S", &tm);
	bp_out_str(o, tmp);
	snprintf(tmp, sizeof tmp, ".%09lld", (long long)rem);
	bp_out_str(o, tmp);
	strftime(tmp, sizeof tmp, " %z", &tm);
	bp_out_str(o, tmp);
}
