/* bp_term_scalar.c -- the term renderer's scalar kinds: atoms (quoted
 * as io_lib:quote_atom/2 decides), pids, ports, refs and funs (%T, through
 * the caches of their texts), integers (bignums from their words), floats
 * (bp_float.c) and binaries and bitstrings (from their words, at most
 * `binary` bytes).  The containers and the dispatch are in bp_term.c;
 * the text they write to, bp_term_text.h.  See bp_term.c for what the
 * text is and how its cost stays bounded.
 */
#include "bp_term_text.h"
#include "bp_atom_syntax.h"
#include "bp_float.h"

#include <stdint.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#define BIG_DEC_WORDS 16 /* bignums up to this many words print in decimal */
#define TMP_TEXT 1100	 /* %T text of an atom (255 chars) or fun */

/* An atom given as latin-1 text (bp_term_text.h). */
int bp_term_put_latin1_atom(struct bp_text *x, const unsigned char *s,
			    size_t n)
{
	int quote = n == 0 || !(bp_text_cls[s[0]] & BP_TEXT_LOWER);
	int ascii = 1;

	for (size_t i = 0; i < n; i++) {
		if (!(bp_text_cls[s[i]] & BP_TEXT_NAME))
			quote = 1;
		if (s[i] >= 128)
			ascii = 0;
	}
	if (!quote && bp_atom_reserved((const char *)s, n))
		quote = 1;
	if (!quote && ascii) {
		bp_text_put(x, (const char *)s, n);
		return 1;
	}
	if (quote)
		bp_text_ch(x, '\'');
	for (size_t i = 0; i < n; i++)
		bp_text_esc(x, s[i], '\'');
	if (quote)
		bp_text_ch(x, '\'');
	return 0;
}

/* Appends enif_snprintf("%T") of t: only for terms whose %T is small and
 * cheap (atoms, pids, ports, refs, funs: not their environment). */
NOINLINE void bp_term_put_T(struct bp_text *x, ERL_NIF_TERM t,
			    struct bp_term_imm *e)
{
	char tmp[TMP_TEXT];
	size_t len;
	int n;

	if (bp_erts_pid_text(t, tmp, &len)) {
		bp_text_put(x, tmp, len);
		bp_text_imm_store(e, t, tmp, len);
		return;
	}
	n = enif_snprintf(tmp, sizeof tmp, "%T", t);
	if (n < 0)
		n = 0;
	if ((size_t)n < sizeof tmp) {
		bp_text_put(x, tmp, (size_t)n);
		if (n > 0)
			bp_text_imm_store(e, t, tmp, (size_t)n);
		return;
	}
	n = sizeof tmp - 1; /* truncated: drop a split UTF-8 character */
	while (n > 0 && ((unsigned char)tmp[n] & 0xc0) == 0x80)
		n--;
	bp_text_put(x, tmp, (size_t)n);
	BP_TEXT_PUTS(x, "...");
}

/* A fun: a local one through the cache of verified texts, else %T. */
NOINLINE void bp_term_put_fun(struct bp_text *x, ERL_NIF_TERM t)
{
	struct bp_term_fun f, *e;
	char tmp[TMP_TEXT];
	size_t n;
	int k;

	if (!x->cache || !bp_erts_fun_fields(t, &f)) {
		bp_term_put_T(x, t, NULL);
		return;
	}
	e = &x->cache->fun[((f.fe >> 4) ^ (f.fe >> 12)) &
			   (BP_TERM_FUN_CACHE - 1)];
	if (e->fe == f.fe && e->module == f.module && e->index == f.index &&
	    e->uniq == f.uniq && e->len) {
		bp_text_put(x, e->text, e->len);
		return;
	}
	k = enif_snprintf(tmp, sizeof tmp, "%T", t);
	if (k <= 0 || (size_t)k >= sizeof tmp) {
		bp_term_put_T(x, t, NULL);
		return;
	}
	n = (size_t)k;
	if (n <= BP_TERM_FUN_TEXT && bp_erts_fun_text_matches(tmp, n, &f)) {
		*e = f;
		memcpy(e->text, tmp, n);
		e->len = (uint8_t)n;
	}
	bp_text_put(x, tmp, n);
}

NOINLINE void bp_term_put_atom(struct bp_text *x, ERL_NIF_TERM t,
			       struct bp_term_imm *e)
{
	char s[256];
	int n = enif_get_atom(x->env, t, s, sizeof s, ERL_NIF_LATIN1);

	if (n > 0) {
		if (bp_term_put_latin1_atom(x, (const unsigned char *)s,
					    (size_t)n - 1))
			bp_text_imm_store(e, t, s, (size_t)n - 1);
	} else {
		bp_term_put_T(x, t, NULL); /* not latin-1: %T quotes, prints UTF-8 */
	}
}

/* An integer beyond 64 bits, read from its bignum words. */
static NOINLINE void put_big(struct bp_text *x, ERL_NIF_TERM t)
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
		bp_text_ch(x, '-');

	if (n > BIG_DEC_WORDS) { /* hexadecimal, most significant first */
		BP_TEXT_PUTS(x, "16#");
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
			bp_text_put(x, h + s, sizeof h - s);
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
	bp_text_put(x, d + dp, sizeof d - dp);
	return;
bad:
	BP_TEXT_PUTS(x, "...");
}

void bp_term_put_int(struct bp_text *x, ERL_NIF_TERM t)
{
	ErlNifSInt64 i;
	ErlNifUInt64 u;

	if (enif_get_int64(x->env, t, &i))
		bp_text_u64(x, i < 0 ? 0 - (uint64_t)i : (uint64_t)i, i < 0);
	else if (enif_get_uint64(x->env, t, &u))
		bp_text_u64(x, u, 0);
	else
		put_big(x, t);
}

/* A float in shortest round-trip form (bp_float.c). */
NOINLINE void bp_term_put_float(struct bp_text *x, double v)
{
	char b[BP_FLOAT_TEXT];

	bp_text_put(x, b, bp_float_text(v, b));
}

/* A binary or bitstring: <<"text">>, <<1,2,3>> or <<1,2,5:3>>, at most
 * `binary` bytes read, whatever its size or alignment. */
void bp_term_put_binary(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
{
	struct bview b;
	size_t n, i;
	int text;

	if (!bp_erts_bin_view(t, &b)) {
		BP_TEXT_PUTS(x, "<<...>>");
		return;
	}
	if (b.size == 0 && b.bitsize == 0) {
		BP_TEXT_PUTS(x, "<<>>");
		return;
	}
	n = b.size < x->binary ? b.size : x->binary;
	if (!depth || (n == 0 && b.size > 0)) { /* too deep, or binary => 0 */
		BP_TEXT_PUTS(x, "<<...>>");
		return;
	}
	text = b.bitsize == 0;
	i = 0;
	if (text && !b.bitoffs) /* the plain ASCII prefix: printable */
		i = bp_text_plain_run(b.p, n);
	if (text && i == n) { /* all of it written as itself */
		BP_TEXT_PUTS(x, "<<\"");
		bp_text_run(x, (const char *)b.p, n);
		bp_text_ch(x, '"');
		if (b.size > n)
			BP_TEXT_PUTS(x, "...");
		BP_TEXT_PUTS(x, ">>");
		return;
	}
	for (; i < n && text; i++)
		text = bp_text_cls[bv_byte(&b, i)] & BP_TEXT_PRINT;
	if (text) {
		BP_TEXT_PUTS(x, "<<\"");
		for (i = 0; i < n && !x->full;) {
			size_t j = i;

			if (!b.bitoffs) /* a run of bytes written as themselves */
				j += bp_text_plain_run(b.p + j, n - j);
			if (j > i) {
				bp_text_run(x, (const char *)b.p + i, j - i);
				i = j;
			} else {
				bp_text_esc(x, bv_byte(&b, i++), '"');
			}
		}
		bp_text_ch(x, '"');
		if (b.size > n)
			BP_TEXT_PUTS(x, "...");
		BP_TEXT_PUTS(x, ">>");
		return;
	}
	BP_TEXT_PUTS(x, "<<");
	for (i = 0; i < n && !x->full; i++) {
		if (i)
			bp_text_ch(x, ',');
		bp_text_u64(x, bv_byte(&b, i), 0);
	}
	if (b.size > n) {
		BP_TEXT_PUTS(x, ",...");
	} else if (b.bitsize) {
		if (n)
			bp_text_ch(x, ',');
		bp_text_u64(x, bv_tail(&b), 0);
		bp_text_ch(x, ':');
		bp_text_u64(x, b.bitsize, 0);
	}
	BP_TEXT_PUTS(x, ">>");
}
