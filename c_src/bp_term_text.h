/* bp_term_text.h -- the term renderer's text: a bounded buffer that is
 * written token by token and cut, when full, after the last whole token
 * that leaves room for "..." (struct bp_text and its writers), the
 * latin-1 character classes io_lib uses, the cache of immediates' texts,
 * and the writers of the scalar kinds (bp_term_scalar.c).  Private to the
 * renderer: bp_term.c (containers, dispatch, the API of bp_term.h) and
 * bp_term_scalar.c (atoms, pids, ports, refs, funs, integers, floats,
 * binaries).  Producer context: no allocation, no lock.
 */
#ifndef BP_TERM_TEXT_H
#define BP_TERM_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bp_digits.h"
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <erl_nif.h>

#include "bp_erts_layout.h"
#include "bp_term.h"

struct bp_text {
	ErlNifEnv *env;
	char *buf;
	size_t pos;  /* text bytes written */
	size_t lim;  /* text bytes allowed */
	size_t safe; /* end of the last whole token with room for "..." */
	int full;    /* text was cut: write nothing more */
	unsigned list, binary, text;
	struct bp_term_cache *cache; /* NULL: none */
};

/* Character classes of latin-1 code points, as io_lib sees them. */
enum {
	BP_TEXT_PRINT = 1, /* printable (io_lib:printable_latin1_list/1) */
	BP_TEXT_PLAIN = 2, /* written as itself inside quotes */
	BP_TEXT_NAME = 4,  /* may appear in an unquoted atom */
	BP_TEXT_LOWER = 8, /* may start an unquoted atom */
	BP_TEXT_STR = 16,  /* ASCII written as itself in "...": bp_text_plain_byte */
};

#define PP (BP_TEXT_PRINT | BP_TEXT_PLAIN)
#define PN (BP_TEXT_PRINT | BP_TEXT_PLAIN | BP_TEXT_NAME)
#define PL (BP_TEXT_PRINT | BP_TEXT_PLAIN | BP_TEXT_NAME | BP_TEXT_LOWER)
#define AP (PP | BP_TEXT_STR)
#define AN (PN | BP_TEXT_STR)
#define AL (PL | BP_TEXT_STR)

static const unsigned char bp_text_cls[256] = {
	[8 ... 13] = BP_TEXT_PRINT, [27] = BP_TEXT_PRINT,
	[' ' ... '!'] = AP,	['"'] = PP,	['#' ... '/'] = AP,
	['0' ... '9'] = AN,	[':' ... '?'] = AP, ['@' ... 'Z'] = AN,
	['['] = AP,		['\\'] = PP,	[']' ... '^'] = AP,
	['_'] = AN,		['`'] = AP,	['a' ... 'z'] = AL,
	['{' ... '~'] = AP,	[160 ... 191] = PP,
	[192 ... 214] = PN,	[215] = PP,	   [216 ... 222] = PN,
	[223 ... 246] = PL,	[247] = PP,	   [248 ... 255] = PL,
};

/* A byte written as itself inside "...": printable ASCII but the quote
 * and the backslash. */
static inline int bp_text_plain_byte(unsigned char c)
{
	return c < 128 && (bp_text_cls[c] & BP_TEXT_PLAIN) && c != '"' && c != '\\';
}

/* How many of p[0..n) from the start are bp_text_plain_byte()s: 16 at a time
 * (SSE2, every x86-64) where the bytes are there, then one by one. */
static inline size_t bp_text_plain_run(const unsigned char *p, size_t n)
{
	size_t i = 0;

#if defined(__x86_64__)
	const __m128i sp = _mm_set1_epi8(0x20), tilde = _mm_set1_epi8(0x7e);
	const __m128i qu = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');

	for (; i + 16 <= n; i += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
		/* signed compares: bytes >= 0x80 are negative, below ' ' */
		__m128i bad = _mm_or_si128(
			_mm_or_si128(_mm_cmplt_epi8(v, sp),
				     _mm_cmpgt_epi8(v, tilde)),
			_mm_or_si128(_mm_cmpeq_epi8(v, qu),
				     _mm_cmpeq_epi8(v, bs)));
		unsigned m = (unsigned)_mm_movemask_epi8(bad);

		if (m)
			return i + (size_t)__builtin_ctz(m);
	}
#endif
	while (i < n && bp_text_plain_byte(p[i]))
		i++;
	return i;
}

static inline void bp_text_init(struct bp_text *x, ErlNifEnv *env,
		     const struct bp_capture *c, char *buf, size_t cap)
{
	size_t bytes = c && c->bytes ? c->bytes : BP_CAPTURE_DEFAULT_BYTES;

	x->env = env;
	x->cache = NULL;
	x->buf = buf;
	x->pos = 0;
	x->safe = 0;
	x->full = 0;
	x->lim = cap - 1 < bytes ? cap - 1 : bytes;
	x->list = c && c->list ? c->list : BP_CAPTURE_DEFAULT_LIST;
	/* binary => 0 is a limit (no byte shown), not the default: the
	 * session's capture always has every field set (bp_nif_get_capture);
	 * only no capture at all (c == NULL) means the defaults. */
	x->binary = c ? c->binary : BP_CAPTURE_DEFAULT_BINARY;
	x->text = x->list > x->binary ? x->list : x->binary;
}

static inline size_t bp_text_end(struct bp_text *x)
{
	x->buf[x->pos] = '\0';
	return x->pos;
}

/* Ends the text with "..." after the last whole token that leaves room. */
static inline void bp_text_cut(struct bp_text *x)
{
	size_t n = x->lim < 3 ? x->lim : 3;

	x->full = 1;
	x->pos = x->lim < 3 ? 0 : x->safe;
	memcpy(x->buf + x->pos, "...", n);
	x->pos += n;
}

/* memcpy(d, s, n) for n > 32, out of line: inlined at a caller whose
 * source is a small array, gcc (-Warray-bounds, at -O1 as the ASan build
 * compiles) would see a copy of more than the array on a path that
 * cannot be taken. */
static __attribute__((noinline, unused)) void bp_text_copy_long(
	char *d, const char *s, size_t n)
{
	memcpy(d, s, n);
}

/* memcpy(d, s, n) of the short texts tokens mostly are, without the
 * library call that a length not known at compile time costs: two
 * overlapping loads and stores of 16, 8, 4 or 1 bytes (no byte outside
 * d[0..n) or s[0..n) is touched); longer ones through memcpy. */
static inline void bp_text_copy(char *d, const char *s, size_t n)
{
	if (__builtin_constant_p(n)) {
		memcpy(d, s, n);
	} else if (n > 32) {
		bp_text_copy_long(d, s, n);
	} else if (n >= 16) {
		char a[16], b[16];

		memcpy(a, s, 16);
		memcpy(b, s + n - 16, 16);
		memcpy(d, a, 16);
		memcpy(d + n - 16, b, 16);
	} else if (n >= 8) {
		uint64_t a, b;

		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a, b;

		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/* 1 if n more bytes fit with room for "..." after them: then any tokens
 * of n bytes in all are written whole, and the cut point is their end. */
static inline int bp_text_far(const struct bp_text *x, size_t n)
{
	return !x->full && x->lim - x->pos >= n + 3;
}

/* Appends a token (whole UTF-8 characters), or cuts if it does not fit. */
static inline void bp_text_put(struct bp_text *x, const char *s, size_t n)
{
	if (x->full)
		return;
	if (n > x->lim - x->pos) {
		bp_text_cut(x);
		return;
	}
	bp_text_copy(x->buf + x->pos, s, n);
	x->pos += n;
	if (x->lim - x->pos >= 3)
		x->safe = x->pos;
}

#define BP_TEXT_PUTS(x, lit) bp_text_put((x), "" lit, sizeof(lit) - 1) /* literals only */

/* Appends n one-byte characters, each its own token: the same text as n
 * bp_text_put() calls of one byte (cut after the last whole one that fits), with
 * one copy. */
static inline void bp_text_run(struct bp_text *x, const char *s, size_t n)
{
	size_t room, k;

	if (x->full || !n)
		return;
	room = x->lim - x->pos;
	k = n < room ? n : room;
	bp_text_copy(x->buf + x->pos, s, k);
	x->pos += k;
	if (x->lim - x->pos >= 3)
		x->safe = x->pos;
	else if (x->lim >= 3 && x->lim - 3 > x->safe &&
		 x->lim - 3 >= x->pos - k + 1)
		x->safe = x->lim - 3;
	if (k < n)
		bp_text_cut(x);
}

/* One byte: bp_text_put(x, &c, 1) without the copy. */
static inline void bp_text_ch(struct bp_text *x, char c)
{
	if (__builtin_expect(!x->full && x->pos < x->lim, 1)) {
		x->buf[x->pos++] = c;
		if (x->lim - x->pos >= 3)
			x->safe = x->pos;
		return;
	}
	bp_text_put(x, &c, 1);
}

/* An integer as one token: written in place when it fits (the common
 * case), else through bp_text_put() and its cut. */
static inline void bp_text_u64(struct bp_text *x, uint64_t u, int neg)
{
	char b[21], *q;
	size_t n = (size_t)neg + bp_digits_count(u);

	if (__builtin_expect(!x->full && n <= x->lim - x->pos, 1)) {
		q = bp_digits_back(x->buf + x->pos + n, u);
		if (neg)
			*--q = '-';
		x->pos += n;
		if (x->lim - x->pos >= 3)
			x->safe = x->pos;
		return;
	}
	q = bp_digits_back(b + sizeof b, u);
	if (neg)
		*--q = '-';
	bp_text_put(x, q, (size_t)(b + sizeof b - q));
}

/* ",V" (or "V" if !comma) for a small integer V written at buf[*pos],
 * two tokens, when both fit whole below lim: the text and the cut point
 * (*safe) of bp_text_ch(',') then bp_text_u64(V).  0 (nothing written)
 * when they do not fit: the caller writes them with the cut.  On plain
 * variables, so that a loop keeps them in registers (bp_term.c). */
static inline int bp_text_small_at(char *buf, size_t *pos, size_t lim,
				   size_t *safe, int64_t v, int comma)
{
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	size_t p = *pos, n = (size_t)(v < 0) + bp_digits_count(u), need, mid;
	char *q;

	need = n + (size_t)comma;
	if (need > lim - p)
		return 0;
	mid = p + (size_t)comma; /* after the comma */
	q = bp_digits_back(buf + p + need, u);
	if (v < 0)
		*--q = '-';
	if (comma)
		buf[p] = ',';
	*pos = p + need;
	if (lim - *pos >= 3)
		*safe = *pos;
	else if (comma && lim - mid >= 3)
		*safe = mid;
	return 1;
}

/* bp_text_small_at on x's text. */
static inline int bp_text_small_elem(struct bp_text *x, int64_t v, int comma)
{
	size_t pos = x->pos, safe = x->safe;

	if (x->full || !bp_text_small_at(x->buf, &pos, x->lim, &safe, v, comma))
		return 0;
	x->pos = pos;
	x->safe = safe;
	return 1;
}

/* Latin-1 code point c, escaped as in an Erlang string quoted with q. */
static inline void bp_text_esc(struct bp_text *x, unsigned c, char q)
{
	char b[4];

	if (c == (unsigned char)q || c == '\\') {
		b[0] = '\\';
		b[1] = (char)c;
		bp_text_put(x, b, 2);
	} else if (c < 128 && (bp_text_cls[c] & BP_TEXT_PLAIN)) {
		bp_text_ch(x, (char)c);
	} else if (c >= 160) {
		b[0] = (char)(0xc0 | c >> 6);
		b[1] = (char)(0x80 | (c & 0x3f));
		bp_text_put(x, b, 2);
	} else {
		const char *e = NULL;

		switch (c) {
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\v': e = "\\v"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		case 27: e = "\\e"; break;
		case 127: e = "\\d"; break;
		}
		if (e) {
			bp_text_put(x, e, 2);
			return;
		}
		b[0] = '\\';
		b[1] = (char)('0' + (c >> 6));
		b[2] = (char)('0' + ((c >> 3) & 7));
		b[3] = (char)('0' + (c & 7));
		bp_text_put(x, b, 4);
	}
}

/* Characters g[0..n) of a string: runs of plain ones (bp_text_run: each
 * its own token, as bp_text_ch would) and escapes. */
static inline void bp_text_chars(struct bp_text *x, const char *g, size_t n)
{
	size_t j;

	for (size_t i = 0; i < n && !x->full; i = j) {
		j = i + bp_text_plain_run((const unsigned char *)g + i, n - i);
		bp_text_run(x, g + i, j - i);
		if (j < n)
			bp_text_esc(x, (unsigned char)g[j++], '"');
	}
}

/* The cache entry for immediate term word t; NULL if t is boxed (its word
 * is an address: never a key) or there is no cache. */
static inline struct bp_term_imm *bp_text_imm_entry(struct bp_text *x, ERL_NIF_TERM t)
{
	uint64_t h;

	if (!x->cache || (t & ERTS_PRIMARY_MASK) != ERTS_PRIMARY_IMMED)
		return NULL;
	h = (uint64_t)t * 0x9E3779B97F4A7C15ull;
	return &x->cache->e[h >> 58 & (BP_TERM_IMM_CACHE - 1)];
}

/* Keeps text s (written by the caller as one token) for immediate t. */
static inline void bp_text_imm_store(struct bp_term_imm *e, ERL_NIF_TERM t,
			     const char *s, size_t n)
{
	if (!e || n > BP_TERM_IMM_TEXT)
		return;
	memcpy(e->text, s, n);
	e->len = (uint8_t)n;
	e->word = (uint64_t)t;
}

/* An atom given as latin-1 text, quoted as io_lib:quote_atom/2 decides
 * (bp_term_scalar.c).  Returns 1 if it was written as one token (unquoted
 * ASCII). */
int bp_term_put_latin1_atom(struct bp_text *x, const unsigned char *s,
			    size_t n);

/* The scalar kinds (bp_term_scalar.c).  `e': t's entry in the cache of
 * immediates, or NULL. */
void bp_term_put_T(struct bp_text *x, ERL_NIF_TERM t, struct bp_term_imm *e);
void bp_term_put_fun(struct bp_text *x, ERL_NIF_TERM t);
void bp_term_put_atom(struct bp_text *x, ERL_NIF_TERM t, struct bp_term_imm *e);
void bp_term_put_int(struct bp_text *x, ERL_NIF_TERM t);
void bp_term_put_float(struct bp_text *x, double v);
void bp_term_put_binary(struct bp_text *x, ERL_NIF_TERM t, unsigned depth);

#endif /* BP_TERM_TEXT_H */
