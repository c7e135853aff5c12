/* bp_term.c -- bounded rendering of Erlang terms as Erlang-syntax text.
 *
 * The tracer calls this on its hot path, inside the traced process, to turn
 * call arguments, return values and messages into text.  It never
 * allocates, never takes a lock, never builds or copies a term, and its
 * work is bounded by the capture limits (struct bp_capture), not by the
 * size of the term: a list is walked at most max(list, binary) cells, a
 * binary read at most `binary` bytes, recursion is at most `depth` levels
 * and every term visited writes at least one byte, so at most about
 * `bytes` terms are visited: O(bytes * max(list, binary)) in all, O(bytes)
 * in practice.  (The only allocation is ERTS's own, in
 * enif_map_iterator_create for maps of more than 32 keys.)
 *
 * The text is what io_lib:format("~0p", [T]) prints in OTP 25, encoded in
 * UTF-8 (checked on random terms, floats, integers, atoms, strings, maps
 * of up to 1000 keys), except:
 *   - cut forms: a container deeper than `depth` prints as [...], {...},
 *     #{...} or <<...>>; surplus elements as [1,2|...], {1,2,...},
 *     #{a => 1,...}; surplus bytes as <<"abc"...>> or <<1,2,...>>; a
 *     string (printable list) longer than max(list, binary) characters as
 *     "abc"...; text beyond `bytes` is replaced by a final "...".
 *   - printability of a list or binary longer than the limits is decided
 *     from the part looked at (like ~P does for binaries).
 *   - atoms that are not latin-1 print via %T, i.e. quoted raw UTF-8
 *     ('€') as ~tp would, where ~p prints '\x{20AC}'.
 *   - integers of more than BIG_DEC_WORDS words (1024 bits) print in
 *     hexadecimal Erlang syntax, 16#1F... (or -16#...), cut by `bytes`.
 * As with ~p (not ~tp) the printable range is latin-1: [8364] stays a list
 * and a UTF-8 binary such as <<"é"/utf8>> prints as <<"Ã©">>.
 *
 * How the unbounded cases are avoided:
 *   - bignums: %T converts the whole number with a temporary allocation,
 *     and the NIF API has no other way in, so the digits are read from the
 *     ERTS bignum layout (erl_term.h, stable since R13) and converted here.
 *   - binaries and bitstrings: read from the ERTS layout (ProcBin,
 *     ErlHeapBin, ErlSubBin of erl_binary.h, OTP 25), at most `binary`
 *     bytes, shifted here when the data starts at a non-byte bit offset.
 *     enif_inspect_binary copies such a binary whole (O(size): 100 ms for
 *     100 MB), fails on a bitstring whose size is not whole bytes, and
 *     shrinks a binary being appended to (its owner's next append then
 *     copies it).  A binary whose layout is not recognised prints <<...>>;
 *     on a VM other than OTP 24 or 25 every binary does, and integers
 *     beyond 64 bits print as "..." (bp_erts_layout_ok, bp_erts_layout.h).
 *   - floats: the shortest round-trip digits (what Ryu finds for
 *     float_to_list(F, [short])), computed in bp_float.c.
 *   - pids, ports, refs and funs: %T, whose text for them is small and the
 *     same as ~p's.  Maps: enif_map_iterator order, which is ~p's in OTP 25.
 *   - term types unknown to this file print as "...".
 * Every term type is thus O(limits): tested on a 100 MB unaligned
 * sub-binary, a 100 MB bitstring, a 10^6-digit bignum, a fun closing over
 * a 10^7-element list, a 10^6-key map and a 10^7-element improper list
 * (test/beamprobe_term_tests.erl).
 */
#include "bp_term.h"
#include "bp_erts_layout.h"
#include "bp_atom_syntax.h"
#include "bp_float.h"

#include <stdatomic.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <stdint.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#define BIG_DEC_WORDS 16 /* bignums up to this many words print in decimal */
#define TMP_TEXT 1100	 /* %T text of an atom (255 chars) or fun */

struct ctx {
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
	C_PRINT = 1, /* printable (io_lib:printable_latin1_list/1) */
	C_PLAIN = 2, /* written as itself inside quotes */
	C_NAME = 4,  /* may appear in an unquoted atom */
	C_LOWER = 8, /* may start an unquoted atom */
};

#define PP (C_PRINT | C_PLAIN)
#define PN (C_PRINT | C_PLAIN | C_NAME)
#define PL (C_PRINT | C_PLAIN | C_NAME | C_LOWER)

static const unsigned char cls[256] = {
	[8 ... 13] = C_PRINT,	[27] = C_PRINT,	   [' ' ... '/'] = PP,
	['0' ... '9'] = PN,	[':' ... '?'] = PP, ['@' ... 'Z'] = PN,
	['[' ... '^'] = PP,	['_'] = PN,	   ['`'] = PP,
	['a' ... 'z'] = PL,	['{' ... '~'] = PP, [160 ... 191] = PP,
	[192 ... 214] = PN,	[215] = PP,	   [216 ... 222] = PN,
	[223 ... 246] = PL,	[247] = PP,	   [248 ... 255] = PL,
};

/* A byte written as itself inside "...": printable ASCII but the quote
 * and the backslash. */
static inline int plain_byte(unsigned char c)
{
	return c < 128 && (cls[c] & C_PLAIN) && c != '"' && c != '\\';
}

/* How many of p[0..n) from the start are plain_byte()s: 16 at a time
 * (SSE2, every x86-64) where the bytes are there, then one by one. */
static inline size_t plain_run(const unsigned char *p, size_t n)
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
	while (i < n && plain_byte(p[i]))
		i++;
	return i;
}

static void ctx_init(struct ctx *x, ErlNifEnv *env,
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
	x->binary = c && c->binary ? c->binary : BP_CAPTURE_DEFAULT_BINARY;
	x->text = x->list > x->binary ? x->list : x->binary;
}

static size_t ctx_end(struct ctx *x)
{
	x->buf[x->pos] = '\0';
	return x->pos;
}

/* Ends the text with "..." after the last whole token that leaves room. */
static void cut(struct ctx *x)
{
	size_t n = x->lim < 3 ? x->lim : 3;

	x->full = 1;
	x->pos = x->lim < 3 ? 0 : x->safe;
	memcpy(x->buf + x->pos, "...", n);
	x->pos += n;
}

/* Appends a token (whole UTF-8 characters), or cuts if it does not fit. */
static inline void put(struct ctx *x, const char *s, size_t n)
{
	if (x->full)
		return;
	if (n > x->lim - x->pos) {
		cut(x);
		return;
	}
	memcpy(x->buf + x->pos, s, n);
	x->pos += n;
	if (x->lim - x->pos >= 3)
		x->safe = x->pos;
}

#define PUTS(x, lit) put((x), "" lit, sizeof(lit) - 1) /* literals only */

/* Appends n one-byte characters, each its own token: the same text as n
 * put() calls of one byte (cut after the last whole one that fits), with
 * one copy. */
static inline void put_run(struct ctx *x, const char *s, size_t n)
{
	size_t room, k;

	if (x->full || !n)
		return;
	room = x->lim - x->pos;
	k = n < room ? n : room;
	memcpy(x->buf + x->pos, s, k);
	x->pos += k;
	if (x->lim - x->pos >= 3)
		x->safe = x->pos;
	else if (x->lim >= 3 && x->lim - 3 > x->safe &&
		 x->lim - 3 >= x->pos - k + 1)
		x->safe = x->lim - 3;
	if (k < n)
		cut(x);
}

/* One byte: put(x, &c, 1) without the copy. */
static inline void put_ch(struct ctx *x, char c)
{
	if (__builtin_expect(!x->full && x->pos < x->lim, 1)) {
		x->buf[x->pos++] = c;
		if (x->lim - x->pos >= 3)
			x->safe = x->pos;
		return;
	}
	put(x, &c, 1);
}

/* An integer as one token: written in place when it fits (the common
 * case), else through put() and its cut. */
static void put_u64(struct ctx *x, uint64_t u, int neg)
{
	char b[21];
	size_t i = sizeof b, n = (size_t)neg + 1;

	for (uint64_t v = u; v >= 10; v /= 10)
		n++;
	if (__builtin_expect(!x->full && n <= x->lim - x->pos, 1)) {
		char *q = x->buf + x->pos + n;

		do {
			*--q = (char)('0' + u % 10);
			u /= 10;
		} while (u);
		if (neg)
			*--q = '-';
		x->pos += n;
		if (x->lim - x->pos >= 3)
			x->safe = x->pos;
		return;
	}
	do {
		b[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (neg)
		b[--i] = '-';
	put(x, b + i, sizeof b - i);
}

/* ",V" (or "V" if !comma) for a small integer V, two tokens, when both
 * fit whole: the text and `safe' of put_ch(',') then put_u64(V), with
 * the position read once and stored once.  0 (nothing written) when
 * they do not fit: the caller writes them with the cut. */
static inline int put_small_elem(struct ctx *x, int64_t v, int comma)
{
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	size_t pos = x->pos, lim = x->lim, n = (size_t)(v < 0) + 1;
	size_t need, mid;
	char *q;

	for (uint64_t w = u; w >= 10; w /= 10)
		n++;
	need = n + (size_t)comma;
	if (x->full || need > lim - pos)
		return 0;
	mid = pos + (size_t)comma; /* after the comma */
	q = x->buf + pos + need;
	do {
		*--q = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--q = '-';
	if (comma)
		x->buf[pos] = ',';
	x->pos = pos + need;
	if (lim - (pos + need) >= 3)
		x->safe = pos + need;
	else if (comma && lim - mid >= 3)
		x->safe = mid;
	return 1;
}

/* Latin-1 code point c, escaped as in an Erlang string quoted with q. */
static void put_esc(struct ctx *x, unsigned c, char q)
{
	char b[4];

	if (c == (unsigned char)q || c == '\\') {
		b[0] = '\\';
		b[1] = (char)c;
		put(x, b, 2);
	} else if (c < 128 && (cls[c] & C_PLAIN)) {
		put_ch(x, (char)c);
	} else if (c >= 160) {
		b[0] = (char)(0xc0 | c >> 6);
		b[1] = (char)(0x80 | (c & 0x3f));
		put(x, b, 2);
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
			put(x, e, 2);
			return;
		}
		b[0] = '\\';
		b[1] = (char)('0' + (c >> 6));
		b[2] = (char)('0' + ((c >> 3) & 7));
		b[3] = (char)('0' + (c & 7));
		put(x, b, 4);
	}
}

/* An atom given as latin-1 text, quoted as io_lib:quote_atom/2 decides.
 * Returns 1 if it was written as one token (unquoted ASCII). */
static int put_latin1_atom(struct ctx *x, const unsigned char *s, size_t n)
{
	int quote = n == 0 || !(cls[s[0]] & C_LOWER);
	int ascii = 1;

	for (size_t i = 0; i < n; i++) {
		if (!(cls[s[i]] & C_NAME))
			quote = 1;
		if (s[i] >= 128)
			ascii = 0;
	}
	if (!quote && bp_atom_reserved((const char *)s, n))
		quote = 1;
	if (!quote && ascii) {
		put(x, (const char *)s, n);
		return 1;
	}
	if (quote)
		put_ch(x, '\'');
	for (size_t i = 0; i < n; i++)
		put_esc(x, s[i], '\'');
	if (quote)
		put_ch(x, '\'');
	return 0;
}

/* The cache entry for immediate term word t; NULL if t is boxed (its word
 * is an address: never a key) or there is no cache. */
static inline struct bp_term_imm *imm_entry(struct ctx *x, ERL_NIF_TERM t)
{
	uint64_t h;

	if (!x->cache || (t & ERTS_PRIMARY_MASK) != ERTS_PRIMARY_IMMED)
		return NULL;
	h = (uint64_t)t * 0x9E3779B97F4A7C15ull;
	return &x->cache->e[h >> 58 & (BP_TERM_IMM_CACHE - 1)];
}

/* Keeps text s (written by the caller as one token) for immediate t. */
static inline void imm_store(struct bp_term_imm *e, ERL_NIF_TERM t,
			     const char *s, size_t n)
{
	if (!e || n > BP_TERM_IMM_TEXT)
		return;
	memcpy(e->text, s, n);
	e->len = (uint8_t)n;
	e->word = (uint64_t)t;
}

/* Appends enif_snprintf("%T") of t: only for terms whose %T is small and
 * cheap (atoms, pids, ports, refs, funs: not their environment). */
static NOINLINE void put_T(struct ctx *x, ERL_NIF_TERM t,
			    struct bp_term_imm *e)
{
	char tmp[TMP_TEXT];
	size_t len;
	int n;

	if (bp_erts_pid_text(t, tmp, &len)) {
		put(x, tmp, len);
		imm_store(e, t, tmp, len);
		return;
	}
	n = enif_snprintf(tmp, sizeof tmp, "%T", t);
	if (n < 0)
		n = 0;
	if ((size_t)n < sizeof tmp) {
		put(x, tmp, (size_t)n);
		if (n > 0)
			imm_store(e, t, tmp, (size_t)n);
		return;
	}
	n = sizeof tmp - 1; /* truncated: drop a split UTF-8 character */
	while (n > 0 && ((unsigned char)tmp[n] & 0xc0) == 0x80)
		n--;
	put(x, tmp, (size_t)n);
	PUTS(x, "...");
}

/* A fun: a local one through the cache of verified texts, else %T. */
static NOINLINE void put_fun(struct ctx *x, ERL_NIF_TERM t)
{
	struct bp_term_fun f, *e;
	char tmp[TMP_TEXT];
	size_t n;
	int k;

	if (!x->cache || !bp_erts_fun_fields(t, &f)) {
		put_T(x, t, NULL);
		return;
	}
	e = &x->cache->fun[((f.fe >> 4) ^ (f.fe >> 12)) &
			   (BP_TERM_FUN_CACHE - 1)];
	if (e->fe == f.fe && e->module == f.module && e->index == f.index &&
	    e->uniq == f.uniq && e->len) {
		put(x, e->text, e->len);
		return;
	}
	k = enif_snprintf(tmp, sizeof tmp, "%T", t);
	if (k <= 0 || (size_t)k >= sizeof tmp) {
		put_T(x, t, NULL);
		return;
	}
	n = (size_t)k;
	if (n <= BP_TERM_FUN_TEXT && bp_erts_fun_text_matches(tmp, n, &f)) {
		*e = f;
		memcpy(e->text, tmp, n);
		e->len = (uint8_t)n;
	}
	put(x, tmp, n);
}

static NOINLINE void put_atom(struct ctx *x, ERL_NIF_TERM t,
			       struct bp_term_imm *e)
{
	char s[256];
	int n = enif_get_atom(x->env, t, s, sizeof s, ERL_NIF_LATIN1);

	if (n > 0) {
		if (put_latin1_atom(x, (const unsigned char *)s, (size_t)n - 1))
			imm_store(e, t, s, (size_t)n - 1);
	} else {
		put_T(x, t, NULL); /* not latin-1: %T quotes, prints UTF-8 */
	}
}

/* An integer beyond 64 bits, read from its bignum words. */
static NOINLINE void put_big(struct ctx *x, ERL_NIF_TERM t)
{
	const ERL_NIF_UINT *p = bp_erts_boxed(t);
	ERL_NIF_UINT hdr, n;
	enum { LIMBS = BIG_DEC_WORDS * sizeof(ERL_NIF_UINT) / 4 };
	uint32_t l[LIMBS];
	char d[LIMBS * 10 + 9];
	size_t nl = 0, dp = sizeof d;

	if (!p)
		goto bad;
	hdr = p[0];
	n = hdr >> ERTS_HEADER_ARITY_SHIFT;
	if (((hdr & ERTS_HEADER_TAG_MASK) != ERTS_HEADER_POS_BIG &&
	     (hdr & ERTS_HEADER_TAG_MASK) != ERTS_HEADER_NEG_BIG) ||
	    n == 0 || p[n] == 0)
		goto bad;
	if ((hdr & ERTS_HEADER_TAG_MASK) == ERTS_HEADER_NEG_BIG)
		put_ch(x, '-');

	if (n > BIG_DEC_WORDS) { /* hexadecimal, most significant first */
		PUTS(x, "16#");
		for (ERL_NIF_UINT i = n; i >= 1 && !x->full; i--) {
			char h[sizeof(ERL_NIF_UINT) * 2];
			uint64_t w = p[i];
			size_t k = sizeof h, s = 0;

			while (k-- > 0) {
				h[k] = "0123456789ABCDEF"[w & 15];
				w >>= 4;
			}
			while (i == n && h[s] == '0')
				s++;
			put(x, h + s, sizeof h - s);
		}
		return;
	}
	for (ERL_NIF_UINT i = 1; i <= n; i++) {
		uint64_t w = p[i];

		for (size_t k = 0; k < sizeof(ERL_NIF_UINT) / 4; k++) {
			l[nl++] = (uint32_t)w;
			w >>= 32;
		}
	}
	while (nl && !l[nl - 1])
		nl--;
	while (nl) { /* divide by 10^9, collecting 9 digits at a time */
		uint64_t r = 0;

		for (size_t i = nl; i-- > 0;) {
			uint64_t cur = r << 32 | l[i];

			l[i] = (uint32_t)(cur / 1000000000u);
			r = cur % 1000000000u;
		}
		while (nl && !l[nl - 1])
			nl--;
		for (int k = 0; k < 9; k++, r /= 10)
			d[--dp] = (char)('0' + r % 10);
	}
	while (dp < sizeof d - 1 && d[dp] == '0')
		dp++;
	put(x, d + dp, sizeof d - dp);
	return;
bad:
	PUTS(x, "...");
}

static void put_int(struct ctx *x, ERL_NIF_TERM t)
{
	ErlNifSInt64 i;
	ErlNifUInt64 u;

	if (enif_get_int64(x->env, t, &i))
		put_u64(x, i < 0 ? 0 - (uint64_t)i : (uint64_t)i, i < 0);
	else if (enif_get_uint64(x->env, t, &u))
		put_u64(x, u, 0);
	else
		put_big(x, t);
}

/* A float in shortest round-trip form (bp_float.c). */
static NOINLINE void put_float(struct ctx *x, double v)
{
	char b[BP_FLOAT_TEXT];

	put(x, b, bp_float_text(v, b));
}

/* A binary or bitstring: <<"text">>, <<1,2,3>> or <<1,2,5:3>>, at most
 * `binary` bytes read, whatever its size or alignment. */
static void put_binary(struct ctx *x, ERL_NIF_TERM t, unsigned depth)
{
	struct bview b;
	size_t n, i;
	int text;

	if (!bp_erts_bin_view(t, &b)) {
		PUTS(x, "<<...>>");
		return;
	}
	if (b.size == 0 && b.bitsize == 0) {
		PUTS(x, "<<>>");
		return;
	}
	if (!depth) {
		PUTS(x, "<<...>>");
		return;
	}
	n = b.size < x->binary ? b.size : x->binary;
	text = b.bitsize == 0;
	i = 0;
	if (text && !b.bitoffs) /* the plain ASCII prefix: printable */
		i = plain_run(b.p, n);
	if (text && i == n) { /* all of it written as itself */
		PUTS(x, "<<\"");
		put_run(x, (const char *)b.p, n);
		put_ch(x, '"');
		if (b.size > n)
			PUTS(x, "...");
		PUTS(x, ">>");
		return;
	}
	for (; i < n && text; i++)
		text = cls[bv_byte(&b, i)] & C_PRINT;
	if (text) {
		PUTS(x, "<<\"");
		for (i = 0; i < n && !x->full;) {
			size_t j = i;

			if (!b.bitoffs) /* a run of bytes written as themselves */
				j += plain_run(b.p + j, n - j);
			if (j > i) {
				put_run(x, (const char *)b.p + i, j - i);
				i = j;
			} else {
				put_esc(x, bv_byte(&b, i++), '"');
			}
		}
		put_ch(x, '"');
		if (b.size > n)
			PUTS(x, "...");
		PUTS(x, ">>");
		return;
	}
	PUTS(x, "<<");
	for (i = 0; i < n && !x->full; i++) {
		if (i)
			put_ch(x, ',');
		put_u64(x, bv_byte(&b, i), 0);
	}
	if (b.size > n) {
		PUTS(x, ",...");
	} else if (b.bitsize) {
		if (n)
			put_ch(x, ',');
		put_u64(x, bv_tail(&b), 0);
		put_ch(x, ':');
		put_u64(x, b.bitsize, 0);
	}
	PUTS(x, ">>");
}

static void term(struct ctx *x, ERL_NIF_TERM t, unsigned depth);

/* The head and tail of list cell t (from its words where the layout is
 * known); 0 if t is not a cell ([] or not a list). */
static inline int cell(struct ctx *x, ERL_NIF_TERM t, ERL_NIF_TERM *hd,
		       ERL_NIF_TERM *tl)
{
	return bp_erts_cell(t, hd, tl) || enif_get_list_cell(x->env, t, hd, tl);
}

/* t == [] (one compare where the layout is known). */
static inline int is_nil(struct ctx *x, ERL_NIF_TERM t)
{
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return t == ERTS_NIL;
	return enif_is_empty_list(x->env, t);
}

/* *c = t if t is an integer that fits an int: from the word for a small
 * integer (see term()), else through enif_get_int. */
static inline int get_char(struct ctx *x, ERL_NIF_TERM t, int *c)
{
	if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL &&
	    sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		int64_t v = (int64_t)t >> 4;

		if (v < -2147483647 - 1 || v > 2147483647)
			return 0;
		*c = (int)v;
		return 1;
	}
	return enif_get_int(x->env, t, c);
}

/* 1: t is a string: latin-1 printable characters, proper up to `text`. */
static int is_string(struct ctx *x, ERL_NIF_TERM t)
{
	ERL_NIF_TERM hd;
	unsigned i;
	int c;

	for (i = 0; cell(x, t, &hd, &t); i++) {
		if (i == x->text)
			return 1;
		if (!get_char(x, hd, &c) || c < 0 || c > 255 ||
		    !(cls[c] & C_PRINT))
			return 0;
	}
	return is_nil(x, t);
}

/* The leading small integers of list t ("1,2,3" after a '['), written
 * as put_small_elem would write each, with the position, the limit and
 * `safe' kept in registers: a run stops before an element that is not a
 * small integer, does not fit whole, or is past x->list.  Returns how
 * many were written; *t is the rest of the list. */
static unsigned small_run(struct ctx *x, ERL_NIF_TERM *t)
{
	size_t pos = x->pos, lim = x->lim, safe = x->safe;
	unsigned i = 0, list = x->list;
	ERL_NIF_TERM l = *t;
	char *buf = x->buf;

	if (sizeof(ERL_NIF_TERM) != 8 || !bp_erts_layout_ok() || x->full)
		return 0;
	while ((l & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST && i < list) {
		const ERL_NIF_TERM *p =
			(const ERL_NIF_TERM *)(uintptr_t)(l - ERTS_PRIMARY_LIST);
		ERL_NIF_TERM h = p[0];
		int64_t v = (int64_t)h >> 4;
		uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
		size_t n = (size_t)(v < 0) + 1, need, mid;
		char *q;

		if ((h & ERTS_IMMED1_MASK) != ERTS_IMMED1_SMALL)
			break;
		for (uint64_t w = u; w >= 10; w /= 10)
			n++;
		need = n + (i > 0);
		if (need > lim - pos)
			break;
		mid = pos + (i > 0);
		q = buf + pos + need;
		do {
			*--q = (char)('0' + u % 10);
			u /= 10;
		} while (u);
		if (v < 0)
			*--q = '-';
		if (i > 0)
			buf[pos] = ',';
		pos += need;
		if (lim - pos >= 3)
			safe = pos;
		else if (i > 0 && lim - mid >= 3)
			safe = mid;
		l = p[1];
		i++;
	}
	x->pos = pos;
	x->safe = safe;
	*t = l;
	return i;
}

/* Strings of up to this many characters are checked and gathered in one
 * pass (gather_string); longer ones are checked, then walked again. */
#define STR_GATHER 256

/* Walks list t once as is_string() would: returns the number of its
 * characters gathered in g (*more: the list goes on past x->text of
 * them) if it is a string, -1 if it is not, -2 if it is longer than
 * STR_GATHER characters so far (not decided). */
static int gather_string(struct ctx *x, ERL_NIF_TERM t, char g[STR_GATHER],
			 int *more)
{
	ERL_NIF_TERM hd;
	unsigned i;
	int c;

	*more = 0;
	for (i = 0; cell(x, t, &hd, &t); i++) {
		if (i == x->text) {
			*more = 1;
			return (int)i;
		}
		if (i == STR_GATHER)
			return -2;
		if (!get_char(x, hd, &c) || c < 0 || c > 255 ||
		    !(cls[c] & C_PRINT))
			return -1;
		g[i] = (char)c;
	}
	return is_nil(x, t) ? (int)i : -1;
}

static void put_list(struct ctx *x, ERL_NIF_TERM t, unsigned depth)
{
	ERL_NIF_TERM hd;
	unsigned i;
	int c, k, more;
	char g[STR_GATHER];

	if (is_nil(x, t)) {
		PUTS(x, "[]");
		return;
	}
	if (!depth) {
		PUTS(x, "[...]");
		return;
	}
	if ((k = gather_string(x, t, g, &more)) >= 0) {
		/* One pass found a string and its characters: written in
		 * runs of plain ones (put_run: each its own token, as
		 * put_ch would) and escapes. */
		size_t j;

		put_ch(x, '"');
		for (size_t i0 = 0; i0 < (size_t)k && !x->full; i0 = j) {
			j = i0 + plain_run((const unsigned char *)g + i0,
					   (size_t)k - i0);
			put_run(x, g + i0, j - i0);
			if (j < (size_t)k)
				put_esc(x, (unsigned char)g[j++], '"');
		}
		if (more)
			PUTS(x, "\"...");
		else
			put_ch(x, '"');
		return;
	}
	if (k == -2 && is_string(x, t)) {
		/* Plain characters gathered in runs and written by put_run
		 * (each its own token, as put_ch would): no store and reload
		 * of the position per character. */
		char run[64];
		size_t n = 0;

		put_ch(x, '"');
		for (i = 0; cell(x, t, &hd, &t); i++) {
			if (i == x->text || x->full) {
				put_run(x, run, n);
				PUTS(x, "\"...");
				return;
			}
			get_char(x, hd, &c);
			if (plain_byte((unsigned char)c)) {
				run[n++] = (char)c;
				if (n == sizeof run) {
					put_run(x, run, n);
					n = 0;
				}
			} else {
				put_run(x, run, n);
				n = 0;
				put_esc(x, (unsigned)c, '"');
			}
		}
		put_run(x, run, n);
		put_ch(x, '"');
		return;
	}
	put_ch(x, '[');
	i = small_run(x, &t);
	for (; cell(x, t, &hd, &t); i++) {
		int64_t v;
		if (i == x->list || x->full) {
			PUTS(x, "|...]");
			return;
		}
		/* the common element, without a call */
		if (bp_erts_small(hd, &v) && put_small_elem(x, v, i > 0))
			continue;
		if (i)
			put_ch(x, ',');
		term(x, hd, depth - 1);
	}
	if (!is_nil(x, t)) {
		put_ch(x, '|');
		term(x, t, depth - 1);
	}
	put_ch(x, ']');
}

static void put_tuple(struct ctx *x, ERL_NIF_TERM t, unsigned depth)
{
	const ERL_NIF_TERM *e;
	int n;

	if ((!bp_erts_tuple(t, &n, &e) && !enif_get_tuple(x->env, t, &n, &e)) ||
	    n == 0) {
		PUTS(x, "{}");
		return;
	}
	if (!depth) {
		PUTS(x, "{...}");
		return;
	}
	put_ch(x, '{');
	for (unsigned i = 0; i < (unsigned)n; i++) {
		if (i == x->list || x->full) {
			PUTS(x, ",...}");
			return;
		}
		if (i)
			put_ch(x, ',');
		term(x, e[i], depth - 1);
	}
	put_ch(x, '}');
}

static void put_map(struct ctx *x, ERL_NIF_TERM t, unsigned depth)
{
	ErlNifMapIterator it;
	ERL_NIF_TERM k, v;
	size_t size = 0;
	unsigned i;

	const ERL_NIF_TERM *ks, *vs;

	if (bp_erts_flatmap(t, &size, &ks, &vs)) {
		/* up to 32 keys, in the iterator's order, from the words */
		if (!size) {
			PUTS(x, "#{}");
			return;
		}
		if (!depth) {
			PUTS(x, "#{...}");
			return;
		}
		PUTS(x, "#{");
		for (i = 0; i < size; i++) {
			if (i == x->list || x->full) {
				PUTS(x, ",...");
				break;
			}
			if (i)
				put_ch(x, ',');
			term(x, ks[i], depth - 1);
			PUTS(x, " => ");
			term(x, vs[i], depth - 1);
		}
		put_ch(x, '}');
		return;
	}
	if (!enif_get_map_size(x->env, t, &size) || size == 0) {
		PUTS(x, "#{}");
		return;
	}
	if (!depth) {
		PUTS(x, "#{...}");
		return;
	}
	if (!enif_map_iterator_create(x->env, t, &it,
				      ERL_NIF_MAP_ITERATOR_FIRST)) {
		PUTS(x, "#{...}");
		return;
	}
	PUTS(x, "#{");
	for (i = 0; enif_map_iterator_get_pair(x->env, &it, &k, &v); i++) {
		if (i == x->list || x->full) {
			PUTS(x, ",...");
			break;
		}
		if (i)
			put_ch(x, ',');
		term(x, k, depth - 1);
		PUTS(x, " => ");
		term(x, v, depth - 1);
		enif_map_iterator_next(x->env, &it);
	}
	enif_map_iterator_destroy(x->env, &it);
	put_ch(x, '}');
}

static void term(struct ctx *x, ERL_NIF_TERM t, unsigned depth)
{
	struct bp_term_imm *e;
	double f;

	if (x->full)
		return;
	/* A small integer (immediate, tag 0xF, a signed value above it:
	 * erl_term.h) without the enif_term_type and enif_get_int64 calls. */
	if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL &&
	    sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		int64_t v = (int64_t)t >> 4;
		put_u64(x, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
		return;
	}
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		/* the common kinds from their words, without enif_term_type */
		const ERL_NIF_UINT *p;

		if ((t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST) {
			put_list(x, t, depth);
			return;
		}
		if (t == ERTS_NIL) {
			PUTS(x, "[]");
			return;
		}
		if ((p = bp_erts_boxed(t))) {
			switch (p[0] & ERTS_HEADER_TAG_MASK) {
			case 0: /* ARITYVAL: a tuple */
				put_tuple(x, t, depth);
				return;
			case ERTS_HEADER_FLOAT:
				if (bp_erts_float(t, &f)) {
					put_float(x, f);
					return;
				}
				break;
			case ERTS_HEADER_REFC_BIN:
			case ERTS_HEADER_HEAP_BIN:
			case ERTS_HEADER_SUB_BIN:
				put_binary(x, t, depth);
				return;
			case ERTS_HEADER_MAP:
				put_map(x, t, depth);
				return;
			}
		}
	}
	if ((e = imm_entry(x, t)) && e->word == (uint64_t)t) {
		put(x, e->text, e->len);
		return;
	}
	switch (enif_term_type(x->env, t)) {
	case ERL_NIF_TERM_TYPE_ATOM:
		put_atom(x, t, e);
		break;
	case ERL_NIF_TERM_TYPE_INTEGER:
		put_int(x, t);
		break;
	case ERL_NIF_TERM_TYPE_FLOAT:
		if (enif_get_double(x->env, t, &f))
			put_float(x, f);
		else
			PUTS(x, "...");
		break;
	case ERL_NIF_TERM_TYPE_LIST:
		put_list(x, t, depth);
		break;
	case ERL_NIF_TERM_TYPE_TUPLE:
		put_tuple(x, t, depth);
		break;
	case ERL_NIF_TERM_TYPE_MAP:
		put_map(x, t, depth);
		break;
	case ERL_NIF_TERM_TYPE_BITSTRING:
		put_binary(x, t, depth);
		break;
	case ERL_NIF_TERM_TYPE_PID:
	case ERL_NIF_TERM_TYPE_PORT:
		put_T(x, t, e); /* e is NULL for a remote (boxed) one */
		break;
	case ERL_NIF_TERM_TYPE_REFERENCE:
		put_T(x, t, NULL);
		break;
	case ERL_NIF_TERM_TYPE_FUN:
		put_fun(x, t);
		break;
	default:
		PUTS(x, "...");
		break;
	}
}

static unsigned depth_of(const struct bp_capture *c)
{
	return c && c->depth ? c->depth : BP_CAPTURE_DEFAULT_DEPTH;
}

/*
 * Renders t as Erlang text cut by the limits in c (see bp_term.h and the
 * deviations from ~0p above).  Writes at most min(cap, bytes + 1) bytes,
 * NUL included; returns the text length.  Returns 0 if cap is 0.
 */
size_t bp_term_render_cached(ErlNifEnv *env, ERL_NIF_TERM t,
			     const struct bp_capture *c, char *buf, size_t cap,
			     struct bp_term_cache *cache)
{
	struct ctx x;

	if (!cap)
		return 0;
	ctx_init(&x, env, c, buf, cap);
	x.cache = cache;
	term(&x, t, depth_of(c));
	return ctx_end(&x);
}

size_t bp_term_render(ErlNifEnv *env, ERL_NIF_TERM t,
		      const struct bp_capture *c, char *buf, size_t cap)
{
	return bp_term_render_cached(env, t, c, buf, cap, NULL);
}

/*
 * Renders the argument list args as "(A1, A2, ...)": at most `list`
 * arguments, each with the full `depth`; the whole text is cut at
 * `bytes`.  An improper tail prints as " | T"; a non-list is rendered as
 * by bp_term_render, without parentheses.  Same buffer contract as
 * bp_term_render.
 */
size_t bp_term_render_args_cached(ErlNifEnv *env, ERL_NIF_TERM args,
				  const struct bp_capture *c, char *buf,
				  size_t cap, struct bp_term_cache *cache)
{
	struct ctx x;
	ERL_NIF_TERM hd;
	unsigned i, depth = depth_of(c);
	int more = 0;

	if (!cap)
		return 0;
	ctx_init(&x, env, c, buf, cap);
	x.cache = cache;
	if (!enif_is_list(env, args)) {
		term(&x, args, depth);
		return ctx_end(&x);
	}
	put_ch(&x, '(');
	for (i = 0; cell(&x, args, &hd, &args); i++) {
		if (i == x.list) {
			more = 1;
			break;
		}
		if (i)
			PUTS(&x, ", ");
		term(&x, hd, depth);
		if (x.full)
			return ctx_end(&x);
	}
	if (more) {
		PUTS(&x, ", ...");
	} else if (!enif_is_empty_list(env, args)) {
		PUTS(&x, " | ");
		term(&x, args, depth);
	}
	put_ch(&x, ')');
	return ctx_end(&x);
}

size_t bp_term_render_args(ErlNifEnv *env, ERL_NIF_TERM args,
			   const struct bp_capture *c, char *buf, size_t cap)
{
	return bp_term_render_args_cached(env, args, c, buf, cap, NULL);
}

/*
 * Renders atom t, quoted where Erlang needs it.  Returns the length, or 0
 * (buf[0] = NUL when cap > 0) if t is not an atom or does not fit in cap.
 */
size_t bp_term_render_atom_cached(ErlNifEnv *env, ERL_NIF_TERM t, char *buf,
				  size_t cap, struct bp_term_cache *cache)
{
	struct ctx x;

	if (!cap)
		return 0;
	ctx_init(&x, env, NULL, buf, cap);
	x.lim = cap - 1;
	x.cache = cache;
	if (enif_is_atom(env, t))
		term(&x, t, 0); /* an atom: put_atom, through the cache */
	if (x.full || !x.pos) {
		buf[0] = '\0';
		return 0;
	}
	return ctx_end(&x);
}

size_t bp_term_render_atom(ErlNifEnv *env, ERL_NIF_TERM t, char *buf,
			   size_t cap)
{
	return bp_term_render_atom_cached(env, t, buf, cap, NULL);
}

/*
 * Renders "M:F/Arity", atoms quoted as needed (a non-atom M or F is
 * rendered with the default limits).  Returns the length, or 0 (buf[0] =
 * NUL when cap > 0) if it does not fit in cap.
 */
size_t bp_term_render_mfa(ErlNifEnv *env, ERL_NIF_TERM m, ERL_NIF_TERM f,
			  unsigned arity, char *buf, size_t cap)
{
	struct ctx x;

	if (!cap)
		return 0;
	ctx_init(&x, env, NULL, buf, cap);
	x.lim = cap - 1;
	term(&x, m, BP_CAPTURE_DEFAULT_DEPTH);
	put_ch(&x, ':');
	term(&x, f, BP_CAPTURE_DEFAULT_DEPTH);
	put_ch(&x, '/');
	put_u64(&x, arity, 0);
	if (x.full) {
		buf[0] = '\0';
		return 0;
	}
	return ctx_end(&x);
}
