/* bp_snap.c -- the deferred-rendering prototype of bp_snap.h (bench only,
 * stop 37): a snapshot of the arguments written in the traced thread
 * (bp_snap_args) and rendered later (bp_snap_render) into the text of
 * bp_term_render_args_cached, byte for byte.  The encoder reads terms as
 * the renderer does (bp_erts_layout.h, on a known layout only; elsewhere
 * it keeps the renderer's text); the decoder is the renderer's container
 * code (bp_term.c) run over the snapshot, writing through the same
 * bounded text (bp_term_text.h), so the cut falls where it falls today.
 *
 * Snapshot items (native byte order: read back on the same machine):
 *   SMALL v:i64 | FLOAT d:f64 | TEXT n:u8 bytes (one token) |
 *   TEXTL n:u16 bytes | ATOM n:u8 latin-1 name (quoted later as needed) |
 *   LIST k:u16 k raw characters, items..., end |
 *   TUPLE shown:u32 more:u8 items | MAP shown:u32 more:u8 key,value... |
 *   BIN size:u64 bitsize:u8 n:u32 n bytes [tail:u8] |
 *   TOKS n:u8 n TEXT items (one term, several tokens) | STOP
 * end: END_NIL | END_MORE | END_TAIL item.  The whole: ONE item, or
 * ARGS items..., end.
 */
#include "bp_snap.h"
#include "bp_term_text.h"
#include "bp_atom_syntax.h"

#include <stdint.h>
#include <string.h>

enum {
	S_SMALL = 1, S_FLOAT, S_TEXT, S_TEXTL, S_ATOM, S_LIST, S_TUPLE, S_MAP,
	S_BIN, S_END_NIL, S_END_MORE, S_END_TAIL, S_STOP, S_ARGS, S_ONE, S_TOKS
};

#define NOINLINE __attribute__((noinline))
#define TMP_TEXT 1100 /* a rare kind's text, rendered at the source */

struct snap {
	ErlNifEnv *env;
	unsigned char *p, *end; /* one byte past end stays free for STOP */
	size_t est, lim; /* est: at most the text written up to here */
	unsigned list, binary, text;
	int stop;
	unsigned char *cnt; /* NULL, or the count of a TOKS item */
	struct bp_term_cache *cache;
};

static void enc(struct snap *s, ERL_NIF_TERM t, unsigned depth);

static void stop_mark(struct snap *s)
{
	if (!s->stop)
		*s->p++ = S_STOP;
	s->stop = 1;
}

static inline int room(struct snap *s, size_t n)
{
	if ((size_t)(s->end - s->p) >= n)
		return 1;
	stop_mark(s);
	return 0;
}

static inline void mark(struct snap *s, unsigned char tag)
{
	if (room(s, 1))
		*s->p++ = tag;
}

/* One token of text (n >= 1). */
static void put_tok(struct snap *s, const char *str, size_t n)
{
	if (!room(s, n + 3))
		return;
	if (s->cnt)
		++*s->cnt;
	if (n <= 255) {
		s->p[0] = S_TEXT;
		s->p[1] = (unsigned char)n;
		s->p += 2;
	} else {
		uint16_t k = (uint16_t)n;

		s->p[0] = S_TEXTL;
		memcpy(s->p + 1, &k, 2);
		s->p += 3;
	}
	memcpy(s->p, str, n);
	s->p += n;
}

#define PUT_LIT(s, lit) put_tok((s), "" lit, sizeof(lit) - 1)

/* The leaves met most in arguments -- a small integer, an atom (pid,
 * port) whose text is cached, a float -- written without a call; 0 (and
 * nothing written) for any other term, which enc() writes. */
static inline int leaf(struct snap *s, ERL_NIF_TERM t)
{
	if (s->est > s->lim || (size_t)(s->end - s->p) < 34)
		return 0; /* enc() stops */
	if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL) {
		int64_t v = (int64_t)t >> 4;

		s->p[0] = S_SMALL;
		memcpy(s->p + 1, &v, 8);
		s->p += 9;
		s->est++;
		return 1;
	}
	if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_IMMED && s->cache) {
		uint64_t h = (uint64_t)t * 0x9E3779B97F4A7C15ull;
		const struct bp_term_imm *e =
			&s->cache->e[h >> 58 & (BP_TERM_IMM_CACHE - 1)];

		if (e->word != (uint64_t)t)
			return 0;
		s->p[0] = S_TEXT;
		memcpy(s->p + 1, &e->len, 1 + BP_TERM_IMM_TEXT);
		s->p += 2 + e->len;
		s->est += e->len;
		return 1;
	}
	if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_BOXED) {
		const ERL_NIF_UINT *p =
			(const ERL_NIF_UINT *)(uintptr_t)(t - ERTS_PRIMARY_BOXED);

		if (p[0] != ERTS_FLOAT_HEADER)
			return 0;
		s->p[0] = S_FLOAT;
		memcpy(s->p + 1, p + 1, 8);
		s->p += 9;
		s->est += 3;
		return 1;
	}
	return 0;
}

/* The list cell t (a cons): its raw leading characters, then terms. */
static void enc_list(struct snap *s, ERL_NIF_TERM t, unsigned depth)
{
	unsigned i = 0, print = BP_TEXT_PRINT, list = s->list, text = s->text;
	unsigned char *q, *kp, *end = s->end;
	uint16_t k;

	if (!depth) {
		PUT_LIT(s, "[...]");
		s->est += 4;
		return;
	}
	s->p[0] = S_LIST; /* room(16) was checked by enc() */
	kp = s->p + 1;
	q = s->p + 3;
	while ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST) {
		const ERL_NIF_TERM *c =
			(const ERL_NIF_TERM *)(uintptr_t)(t - ERTS_PRIMARY_LIST);
		ERL_NIF_TERM h = c[0];

		if (i == text || (i >= list && !print) ||
		    (h & ERTS_IMMED1_MASK) != ERTS_IMMED1_SMALL ||
		    (ERL_NIF_UINT)h >> 4 > 255 || q == end)
			break;
		*q++ = (unsigned char)(h >> 4);
		print &= bp_text_cls[h >> 4];
		i++;
		t = c[1];
	}
	k = (uint16_t)i;
	memcpy(kp, &k, 2);
	s->p = q;
	s->est += i < list ? i : list; /* shown as a string or not */
	if (q == end && (t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST &&
	    i < text) {
		stop_mark(s);
		return;
	}
	while ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST) {
		const ERL_NIF_TERM *c =
			(const ERL_NIF_TERM *)(uintptr_t)(t - ERTS_PRIMARY_LIST);

		if (i == text || i >= list) { /* i >= list: not a string */
			mark(s, S_END_MORE);
			return;
		}
		if (i)
			s->est++;
		if (!leaf(s, c[0]))
			enc(s, c[0], depth - 1);
		if (s->stop)
			return;
		i++;
		t = c[1];
	}
	if (t == ERTS_NIL) {
		mark(s, S_END_NIL);
	} else {
		mark(s, S_END_TAIL);
		s->est++;
		enc(s, t, depth - 1);
	}
	s->est++; /* the closing bracket, after what it closes */
}

static void enc_tuple(struct snap *s, ERL_NIF_TERM t, unsigned depth)
{
	const ERL_NIF_TERM *e;
	int n;
	uint32_t shown;

	if (!bp_erts_tuple(t, &n, &e) || n == 0) {
		PUT_LIT(s, "{}");
		s->est++;
		return;
	}
	if (!depth) {
		PUT_LIT(s, "{...}");
		s->est += 4;
		return;
	}
	shown = (unsigned)n < s->list ? (uint32_t)n : s->list;
	s->p[0] = S_TUPLE;
	memcpy(s->p + 1, &shown, 4);
	s->p[5] = (unsigned)n > s->list;
	s->p += 6;
	for (uint32_t i = 0; i < shown && !s->stop; i++) {
		if (i)
			s->est++;
		if (!leaf(s, e[i]))
			enc(s, e[i], depth - 1);
	}
	s->est++;
}

static NOINLINE void enc_map(struct snap *s, ERL_NIF_TERM t, unsigned depth)
{
	ErlNifMapIterator it;
	ERL_NIF_TERM k, v;
	const ERL_NIF_TERM *ks = NULL, *vs = NULL;
	size_t size = 0;
	int flat = bp_erts_flatmap(t, &size, &ks, &vs);
	unsigned char *hdr;
	uint32_t i, shown;

	if ((!flat && !enif_get_map_size(s->env, t, &size)) || size == 0) {
		PUT_LIT(s, "#{}");
		s->est += 2;
		return;
	}
	if (!depth || (!flat && !enif_map_iterator_create(
					  s->env, t, &it,
					  ERL_NIF_MAP_ITERATOR_FIRST))) {
		PUT_LIT(s, "#{...}");
		s->est += 5;
		return;
	}
	hdr = s->p;
	s->p += 6;
	s->est++;
	for (i = 0; i < size && i < s->list && !s->stop; i++) {
		if (flat) {
			k = ks[i];
			v = vs[i];
		} else if (!enif_map_iterator_get_pair(s->env, &it, &k, &v)) {
			break;
		}
		if (i)
			s->est++;
		if (!leaf(s, k))
			enc(s, k, depth - 1);
		s->est += 4;
		if (!leaf(s, v))
			enc(s, v, depth - 1);
		if (!flat)
			enif_map_iterator_next(s->env, &it);
	}
	if (!flat)
		enif_map_iterator_destroy(s->env, &it);
	shown = i;
	hdr[0] = S_MAP;
	memcpy(hdr + 1, &shown, 4);
	hdr[5] = i < size;
	s->est++;
}

static void enc_bin(struct snap *s, ERL_NIF_TERM t, unsigned depth)
{
	struct bview b;
	uint64_t size;
	uint32_t n;

	if (!bp_erts_bin_view(t, &b)) {
		PUT_LIT(s, "<<...>>");
		s->est += 6;
		return;
	}
	if (b.size == 0 && b.bitsize == 0) {
		PUT_LIT(s, "<<>>");
		s->est += 3;
		return;
	}
	if (!depth) {
		PUT_LIT(s, "<<...>>");
		s->est += 6;
		return;
	}
	n = (uint32_t)(b.size < s->binary ? b.size : s->binary);
	if (!room(s, 16 + (size_t)n))
		return;
	size = b.size;
	s->p[0] = S_BIN;
	memcpy(s->p + 1, &size, 8);
	s->p[9] = (unsigned char)b.bitsize;
	memcpy(s->p + 10, &n, 4);
	s->p += 14;
	if (!b.bitoffs) {
		memcpy(s->p, b.p, n);
	} else {
		for (uint32_t i = 0; i < n; i++)
			s->p[i] = (unsigned char)bv_byte(&b, i);
	}
	s->p += n;
	if (b.bitsize && b.size == n)
		*s->p++ = (unsigned char)bv_tail(&b);
	s->est += n + 3;
}

/* A rare kind: the renderer's text, as the tokens it writes. */
static NOINLINE void enc_text(struct snap *s, ERL_NIF_TERM t)
{
	static const struct bp_capture one = {1, 1, 1, TMP_TEXT};
	const ERL_NIF_UINT *p = bp_erts_boxed(t);
	char tmp[TMP_TEXT + 1];
	size_t n = bp_term_render_cached(s->env, t, &one, tmp, sizeof tmp,
					 s->cache), i = 0;
	ErlNifSInt64 i64;
	ErlNifUInt64 u64;

	if (!n)
		return;
	s->est += n - 1;
	if (!p || ((p[0] & ERTS_HEADER_TAG_MASK) != ERTS_HEADER_POS_BIG &&
		   (p[0] & ERTS_HEADER_TAG_MASK) != ERTS_HEADER_NEG_BIG) ||
	    enif_get_int64(s->env, t, &i64) || enif_get_uint64(s->env, t, &u64)) {
		put_tok(s, tmp, n); /* one token */
		return;
	}
	/* beyond 64 bits: '-', then the digits, or "16#" and a word each */
	if (!room(s, 2))
		return;
	s->p[0] = S_TOKS;
	s->cnt = s->p + 1;
	s->p += 2;
	*s->cnt = 0;
	if (tmp[0] == '-')
		put_tok(s, tmp, i = 1);
	if (n - i > 3 && !memcmp(tmp + i, "16#", 3)) {
		size_t first;

		put_tok(s, tmp + i, 3);
		i += 3;
		/* the top word without its leading zeros, then 16 digits a
		 * word (the text is cut at TMP_TEXT: exact up to there) */
		first = (size_t)(67 - __builtin_clzll(
					      p[p[0] >> ERTS_HEADER_ARITY_SHIFT] | 1)) / 4;
		for (size_t k = first; i < n && !s->stop; i += k, k = 16)
			put_tok(s, tmp + i, n - i < k ? n - i : k);
	} else if (i < n) {
		put_tok(s, tmp + i, n - i);
	}
	s->cnt = NULL;
}

/* An immediate that is not a small integer: through the renderer's cache
 * of one-token texts, an atom by its latin-1 name, else its text. */
static NOINLINE void enc_imm(struct snap *s, ERL_NIF_TERM t)
{
	struct bp_term_imm *e = NULL;
	char a[256];
	int n;

	if (s->cache && (t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_IMMED) {
		uint64_t h = (uint64_t)t * 0x9E3779B97F4A7C15ull;

		e = &s->cache->e[h >> 58 & (BP_TERM_IMM_CACHE - 1)];
		if (e->word == (uint64_t)t) {
			put_tok(s, e->text, e->len);
			s->est += e->len - 1u;
			return;
		}
	}
	if (enif_term_type(s->env, t) != ERL_NIF_TERM_TYPE_ATOM ||
	    (n = enif_get_atom(s->env, t, a, sizeof a, ERL_NIF_LATIN1)) <= 0) {
		enc_text(s, t);
		return;
	}
	n--;
	{
		int plain = n > 0 && (bp_text_cls[(unsigned char)a[0]] & BP_TEXT_LOWER);

		for (int i = 0; i < n && plain; i++)
			plain = (unsigned char)a[i] < 128 &&
				(bp_text_cls[(unsigned char)a[i]] & BP_TEXT_NAME);
		if (plain && !bp_atom_reserved(a, (size_t)n)) {
			put_tok(s, a, (size_t)n);
			bp_text_imm_store(e, t, a, (size_t)n);
			s->est += (size_t)n - 1;
			return;
		}
	}
	if (!room(s, (size_t)n + 2))
		return;
	s->p[0] = S_ATOM;
	s->p[1] = (unsigned char)n;
	memcpy(s->p + 2, a, (size_t)n);
	s->p += (size_t)n + 2;
	s->est += (size_t)n; /* quoted: n + 2 bytes; else a 2-byte character */
}

static void enc(struct snap *s, ERL_NIF_TERM t, unsigned depth)
{
	const ERL_NIF_UINT *p;

	if (s->stop)
		return;
	if (s->est > s->lim || !room(s, 16)) {
		stop_mark(s);
		return;
	}
	s->est++;
	if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL) {
		int64_t v = (int64_t)t >> 4;

		s->p[0] = S_SMALL;
		memcpy(s->p + 1, &v, 8);
		s->p += 9;
		return;
	}
	if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST) {
		enc_list(s, t, depth);
		return;
	}
	if (t == ERTS_NIL) {
		PUT_LIT(s, "[]");
		s->est++;
		return;
	}
	if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_IMMED && s->cache &&
	    room(s, 34)) {
		/* an atom (pid, port) whose text is cached: its length and
		 * text in one fixed-size copy */
		uint64_t h = (uint64_t)t * 0x9E3779B97F4A7C15ull;
		const struct bp_term_imm *e =
			&s->cache->e[h >> 58 & (BP_TERM_IMM_CACHE - 1)];

		if (e->word == (uint64_t)t) {
			s->p[0] = S_TEXT;
			memcpy(s->p + 1, &e->len, 1 + BP_TERM_IMM_TEXT);
			s->p += 2 + e->len;
			s->est += e->len - 1u;
			return;
		}
	}
	if ((p = bp_erts_boxed(t))) {
		switch (p[0] & ERTS_HEADER_TAG_MASK) {
		case 0:
			enc_tuple(s, t, depth);
			return;
		case ERTS_HEADER_FLOAT:
			if (p[0] != ERTS_FLOAT_HEADER)
				break;
			s->p[0] = S_FLOAT;
			memcpy(s->p + 1, p + 1, 8);
			s->p += 9;
			s->est += 2;
			return;
		case ERTS_HEADER_REFC_BIN:
		case ERTS_HEADER_HEAP_BIN:
		case ERTS_HEADER_SUB_BIN:
			enc_bin(s, t, depth);
			return;
		case ERTS_HEADER_MAP:
			enc_map(s, t, depth);
			return;
		}
		enc_text(s, t);
		return;
	}
	enc_imm(s, t);
}

size_t bp_snap_args(ErlNifEnv *env, ERL_NIF_TERM args,
		    const struct bp_capture *c, unsigned char *out, size_t cap,
		    struct bp_term_cache *cache)
{
	struct snap s;
	unsigned depth = c && c->depth ? c->depth : BP_CAPTURE_DEFAULT_DEPTH;
	unsigned i;

	s.env = env;
	s.p = out;
	s.end = out + cap - 1;
	s.est = 0;
	s.lim = c && c->bytes ? c->bytes : BP_CAPTURE_DEFAULT_BYTES;
	s.list = c && c->list ? c->list : BP_CAPTURE_DEFAULT_LIST;
	s.binary = c && c->binary ? c->binary : BP_CAPTURE_DEFAULT_BINARY;
	s.text = s.list > s.binary ? s.list : s.binary;
	s.stop = 0;
	s.cnt = NULL;
	s.cache = cache;
	if (sizeof(ERL_NIF_TERM) != 8 || !bp_erts_layout_ok() ||
	    s.text > 65535 || s.lim > 65535) {
		/* not a layout read here: the renderer's text, as one token */
		uint16_t n;

		out[0] = S_ONE;
		out[1] = S_TEXTL;
		n = (uint16_t)bp_term_render_args_cached(
			env, args, c, (char *)out + 4,
			cap - 4 < 65536 ? cap - 4 : 65536, cache);
		memcpy(out + 2, &n, 2);
		return n ? 4 + (size_t)n : 0;
	}
	if ((args & ERTS_PRIMARY_MASK) != ERTS_PRIMARY_LIST && args != ERTS_NIL) {
		*s.p++ = S_ONE;
		enc(&s, args, depth);
		return (size_t)(s.p - out);
	}
	*s.p++ = S_ARGS;
	s.est = 1;
	for (i = 0; (args & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST; i++) {
		const ERL_NIF_TERM *cell =
			(const ERL_NIF_TERM *)(uintptr_t)(args - ERTS_PRIMARY_LIST);

		if (i == s.list) {
			mark(&s, S_END_MORE);
			return (size_t)(s.p - out);
		}
		if (i)
			s.est += 2;
		enc(&s, cell[0], depth);
		if (s.stop)
			return (size_t)(s.p - out);
		args = cell[1];
	}
	if (args == ERTS_NIL) {
		mark(&s, S_END_NIL);
	} else {
		mark(&s, S_END_TAIL);
		enc(&s, args, depth);
	}
	return (size_t)(s.p - out);
}

/* ---- the later half: rendering a snapshot ---- */

struct dec {
	const unsigned char *s, *e;
	struct bp_text x;
	int stop;
};

static void dterm(struct dec *d);

static inline int need(struct dec *d, size_t n)
{
	if ((size_t)(d->e - d->s) >= n)
		return 1;
	d->stop = 1;
	return 0;
}

static inline int is_end(unsigned char t)
{
	return t == S_END_NIL || t == S_END_MORE || t == S_END_TAIL;
}

/* A list element: a small integer as put_list writes it, else a term. */
static void delem(struct dec *d, unsigned i)
{
	struct bp_text *x = &d->x;
	int64_t v;

	if (d->s[0] == S_SMALL && need(d, 9)) {
		memcpy(&v, d->s + 1, 8);
		d->s += 9;
		if (bp_text_small_elem(x, v, i > 0))
			return;
		if (i)
			bp_text_ch(x, ',');
		bp_text_u64(x, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
		return;
	}
	if (i)
		bp_text_ch(x, ',');
	dterm(d);
}

static void dlist(struct dec *d)
{
	struct bp_text *x = &d->x;
	const unsigned char *g;
	unsigned i, print = BP_TEXT_PRINT;
	uint16_t k;

	if (!need(d, 2))
		return;
	memcpy(&k, d->s, 2);
	d->s += 2;
	if (!need(d, (size_t)k + 1))
		return;
	g = d->s;
	d->s += k;
	for (i = 0; i < k; i++)
		print &= bp_text_cls[g[i]];
	if (k && print &&
	    (d->s[0] == S_END_NIL || (d->s[0] == S_END_MORE && k == x->text))) {
		bp_text_ch(x, '"');
		bp_text_chars(x, (const char *)g, k);
		if (*d->s++ == S_END_MORE)
			BP_TEXT_PUTS(x, "\"...");
		else
			bp_text_ch(x, '"');
		return;
	}
	bp_text_ch(x, '[');
	for (i = 0; i < k; i++) {
		if (i == x->list || x->full) {
			BP_TEXT_PUTS(x, "|...]");
			d->s++; /* END_MORE: no term past the list limit */
			return;
		}
		if (bp_text_small_elem(x, g[i], i > 0))
			continue;
		if (i)
			bp_text_ch(x, ',');
		bp_text_u64(x, g[i], 0);
	}
	while (!d->stop && need(d, 1) && !is_end(d->s[0])) {
		if (x->full) {
			d->stop = 1;
			return;
		}
		delem(d, i++);
	}
	if (d->stop || !need(d, 1))
		return;
	switch (*d->s++) {
	case S_END_MORE:
		BP_TEXT_PUTS(x, "|...]");
		return;
	case S_END_TAIL:
		bp_text_ch(x, '|');
		dterm(d);
		break;
	}
	bp_text_ch(x, ']');
}

/* A tuple ({...}) or a map (#{K => V,...}, pairs): a count and a "more"
 * flag, then the elements. */
static void dseq(struct dec *d, int map)
{
	struct bp_text *x = &d->x;
	uint32_t n;
	int more;

	if (!need(d, 5))
		return;
	memcpy(&n, d->s, 4);
	more = d->s[4];
	d->s += 5;
	if (map)
		BP_TEXT_PUTS(x, "#{");
	else
		bp_text_ch(x, '{');
	for (uint32_t i = 0; i < n && !d->stop; i++) {
		if (x->full) {
			d->stop = 1;
			return;
		}
		if (i)
			bp_text_ch(x, ',');
		dterm(d);
		if (map) {
			BP_TEXT_PUTS(x, " => ");
			dterm(d);
		}
	}
	/* (as bp_term.c cuts them: a tuple's ",...}" is one token) */
	if (more && !map) {
		BP_TEXT_PUTS(x, ",...}");
		return;
	}
	if (more)
		BP_TEXT_PUTS(x, ",...");
	bp_text_ch(x, '}');
}

/* bp_term_scalar.c's bp_term_put_binary, over the bytes kept. */
static void dbin(struct dec *d)
{
	struct bp_text *x = &d->x;
	uint64_t size;
	uint32_t n;
	unsigned bitsize, tail = 0;
	const unsigned char *b;
	size_t i;
	int text;

	if (!need(d, 13))
		return;
	memcpy(&size, d->s, 8);
	bitsize = d->s[8];
	memcpy(&n, d->s + 9, 4);
	d->s += 13;
	if (!need(d, n + (size_t)(bitsize && size == n)))
		return;
	b = d->s;
	d->s += n;
	if (bitsize && size == n)
		tail = *d->s++;
	text = bitsize == 0;
	i = 0;
	if (text)
		i = bp_text_plain_run(b, n);
	if (text && i == n) {
		BP_TEXT_PUTS(x, "<<\"");
		bp_text_run(x, (const char *)b, n);
		bp_text_ch(x, '"');
		if (size > n)
			BP_TEXT_PUTS(x, "...");
		BP_TEXT_PUTS(x, ">>");
		return;
	}
	for (; i < n && text; i++)
		text = bp_text_cls[b[i]] & BP_TEXT_PRINT;
	if (text) {
		BP_TEXT_PUTS(x, "<<\"");
		for (i = 0; i < n && !x->full;) {
			size_t j = i + bp_text_plain_run(b + i, n - i);

			if (j > i) {
				bp_text_run(x, (const char *)b + i, j - i);
				i = j;
			} else {
				bp_text_esc(x, b[i++], '"');
			}
		}
		bp_text_ch(x, '"');
		if (size > n)
			BP_TEXT_PUTS(x, "...");
		BP_TEXT_PUTS(x, ">>");
		return;
	}
	BP_TEXT_PUTS(x, "<<");
	for (i = 0; i < n && !x->full; i++) {
		if (i)
			bp_text_ch(x, ',');
		bp_text_u64(x, b[i], 0);
	}
	if (size > n) {
		BP_TEXT_PUTS(x, ",...");
	} else if (bitsize) {
		if (n)
			bp_text_ch(x, ',');
		bp_text_u64(x, tail, 0);
		bp_text_ch(x, ':');
		bp_text_u64(x, bitsize, 0);
	}
	BP_TEXT_PUTS(x, ">>");
}

static void dterm(struct dec *d)
{
	struct bp_text *x = &d->x;
	unsigned char tag;
	int64_t v;
	double f;
	size_t n;

	if (d->stop || !need(d, 1))
		return;
	if (x->full) { /* nothing more is written */
		d->stop = 1;
		return;
	}
	tag = *d->s++;
	switch (tag) {
	case S_SMALL:
		if (!need(d, 8))
			return;
		memcpy(&v, d->s, 8);
		d->s += 8;
		bp_text_u64(x, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
		return;
	case S_FLOAT:
		if (!need(d, 8))
			return;
		memcpy(&f, d->s, 8);
		d->s += 8;
		bp_term_put_float(x, f);
		return;
	case S_TEXT:
	case S_ATOM:
		if (!need(d, 1) || !need(d, 1 + (size_t)d->s[0]))
			return;
		n = d->s[0];
		if (tag == S_TEXT)
			bp_text_put(x, (const char *)d->s + 1, n);
		else
			(void)bp_term_put_latin1_atom(x, d->s + 1, n);
		d->s += 1 + n;
		return;
	case S_TEXTL: {
		uint16_t k;

		if (!need(d, 2))
			return;
		memcpy(&k, d->s, 2);
		if (!need(d, 2 + (size_t)k))
			return;
		bp_text_put(x, (const char *)d->s + 2, k);
		d->s += 2 + (size_t)k;
		return;
	}
	case S_LIST:
		dlist(d);
		return;
	case S_TUPLE:
		dseq(d, 0);
		return;
	case S_MAP:
		dseq(d, 1);
		return;
	case S_BIN:
		dbin(d);
		return;
	case S_TOKS:
		if (!need(d, 1))
			return;
		n = *d->s++;
		while (n-- > 0 && !d->stop)
			dterm(d);
		return;
	default: /* STOP, or not a snapshot */
		d->stop = 1;
		return;
	}
}

size_t bp_snap_render(const unsigned char *s, size_t n,
		      const struct bp_capture *c, char *buf, size_t cap)
{
	struct dec d;
	struct bp_text *x = &d.x;
	unsigned i;

	if (!cap)
		return 0;
	d.s = s;
	d.e = s + n;
	d.stop = 0;
	bp_text_init(x, NULL, c, buf, cap);
	if (!n)
		return bp_text_end(x);
	if (*d.s++ != S_ARGS) {
		dterm(&d);
		return bp_text_end(x);
	}
	bp_text_ch(x, '(');
	for (i = 0; need(&d, 1) && !is_end(d.s[0]); i++) {
		if (i)
			BP_TEXT_PUTS(x, ", ");
		dterm(&d);
		if (x->full || d.stop)
			return bp_text_end(x);
	}
	if (!need(&d, 1))
		return bp_text_end(x);
	switch (*d.s++) {
	case S_END_MORE:
		BP_TEXT_PUTS(x, ", ...");
		break;
	case S_END_TAIL:
		BP_TEXT_PUTS(x, " | ");
		dterm(&d);
		break;
	}
	bp_text_ch(x, ')');
	return bp_text_end(x);
}
