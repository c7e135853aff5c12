/* bp_term.c -- bounded rendering of Erlang terms as Erlang-syntax text.
 * (This file: the containers -- lists, strings, tuples, maps -- the
 * dispatch on a term's kind and the API of bp_term.h; the scalar kinds are
 * in bp_term_scalar.c, the bounded text they all write to in
 * bp_term_text.h.)
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
 *     ('€') as ~tp would, where ~p prints '\x{20AC}'; their control
 *     characters as %T writes them (ESC as \033 and DEL raw, where ~tp
 *     writes \e and \d).
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
 *     same as ~p's.  Maps: enif_map_iterator order, which is ~p's in OTP 25
 *     (a flat map, up to 32 keys, read from its words in that order).
 *   - term types unknown to this file print as "...".
 * Speed: the common kinds (small integers, lists, [], tuples, floats,
 * binaries, flat maps) are told and read from their words on a layout
 * checked at load (bp_erts_layout.h), without the NIF API's calls (none
 * at a list's end either); the leaves of containers (small integers, [],
 * cached atoms, pids, ports) are written where the container walks,
 * without a call; text is written token by token, but runs of them (a
 * string's characters, checked, gathered and copied in one pass, a list's
 * leading integers, a binary's plain bytes found 16 at a time) in one go
 * (`bash bench/run.sh render`, docs/performance.md).
 * Every term type is thus O(limits): tested on a 100 MB unaligned
 * sub-binary, a 100 MB bitstring, a 10^6-digit bignum, a fun closing over
 * a 10^7-element list, a 10^6-key map and a 10^7-element improper list
 * (test/beamprobe_term_tests.erl).
 */
#include "bp_term_text.h"

#include <stdint.h>
#include <string.h>

static void term(struct bp_text *x, ERL_NIF_TERM t, unsigned depth);

/* The head and tail of list cell t (from its words where the layout is
 * known, without asking the NIF API about the [] that ends every list);
 * 0 if t is not a cell ([] or not a list). */
static inline int cell(struct bp_text *x, ERL_NIF_TERM t, ERL_NIF_TERM *hd,
		       ERL_NIF_TERM *tl)
{
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return bp_erts_cell(t, hd, tl);
	return enif_get_list_cell(x->env, t, hd, tl);
}

/* t == [] (one compare where the layout is known). */
static inline int is_nil(struct bp_text *x, ERL_NIF_TERM t)
{
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok())
		return t == ERTS_NIL;
	return enif_is_empty_list(x->env, t);
}

/* *c = t if t is an integer that fits an int: from the word where the
 * layout is known (then any other term is not a character: no call to
 * ask), else through enif_get_int. */
static inline int get_char(struct bp_text *x, ERL_NIF_TERM t, int *c)
{
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		int64_t v = (int64_t)t >> 4;

		if ((t & ERTS_IMMED1_MASK) != ERTS_IMMED1_SMALL ||
		    v < -2147483647 - 1 || v > 2147483647)
			return 0; /* a character is a small integer */
		*c = (int)v;
		return 1;
	}
	return enif_get_int(x->env, t, c);
}

/* The leaves met most in containers -- a small integer, [], an
 * immediate (atom, local pid or port) whose text is cached -- written
 * as term() writes them, without its call; 0 (nothing written) for any
 * other term. */
static inline int leaf(struct bp_text *x, ERL_NIF_TERM t)
{
	struct bp_term_imm *e;

	if ((t & ERTS_PRIMARY_MASK) != ERTS_PRIMARY_IMMED)
		return 0; /* a list or a boxed term: one test */
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		if ((t & ERTS_IMMED1_MASK) == ERTS_IMMED1_SMALL) {
			int64_t v = (int64_t)t >> 4;

			bp_text_u64(x, v < 0 ? 0 - (uint64_t)v : (uint64_t)v,
				    v < 0);
			return 1;
		}
		if (t == ERTS_NIL) {
			BP_TEXT_PUTS(x, "[]");
			return 1;
		}
	}
	if ((e = bp_text_imm_entry(x, t)) && e->word == (uint64_t)t) {
		bp_text_put(x, e->text, e->len);
		return 1;
	}
	return 0;
}

/* One element of a container: a leaf inline, anything else by term(). */
static inline void elem(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
{
	if (!leaf(x, t))
		term(x, t, depth);
}

/* The leading small integers of list t ("1,2,3" after a '['), written
 * as bp_text_small_elem would write each, with the position, the limit and
 * `safe' kept in registers: a run stops before an element that is not a
 * small integer, does not fit whole, or is past x->list.  Returns how
 * many were written; *t is the rest of the list.  Out of line and on a
 * 64-byte boundary: inlined, its loop's speed moved by +-7 ns per 16
 * elements with where unrelated changes placed it (render bench). */
static __attribute__((noinline, aligned(64))) unsigned small_run(
	struct bp_text *x, ERL_NIF_TERM *t)
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

		if ((h & ERTS_IMMED1_MASK) != ERTS_IMMED1_SMALL ||
		    !bp_text_small_at(buf, &pos, lim, &safe, (int64_t)h >> 4,
				      i > 0))
			break;
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

/* Decides whether list t is a string -- latin-1 printable characters,
 * proper up to x->text of them -- and gathers its first STR_GATHER
 * characters in g.  Returns how many characters it has up to x->text
 * (*more: the list goes on past them; *plain: all of them up to
 * STR_GATHER are written as themselves, bp_text_plain_byte), or -1 if it
 * is not a string. */
static int gather_string(struct bp_text *x, ERL_NIF_TERM t, char g[STR_GATHER],
			 int *more, int *plain)
{
	ERL_NIF_TERM hd;
	unsigned i, text = x->text, all = BP_TEXT_STR;
	int c;

	*more = 0;
	if (sizeof(ERL_NIF_TERM) == 8 && bp_erts_layout_ok()) {
		/* from the words, the limit in a register (g's stores may
		 * alias *x); a character is a small integer 0-255 */
		for (i = 0; (t & ERTS_PRIMARY_MASK) == ERTS_PRIMARY_LIST; i++) {
			const ERL_NIF_TERM *p = (const ERL_NIF_TERM *)(uintptr_t)(
				t - ERTS_PRIMARY_LIST);
			ERL_NIF_TERM h = p[0];
			unsigned k;

			if (i == text) {
				*more = 1;
				*plain = !!all;
				return (int)i;
			}
			if ((h & ~(ERL_NIF_TERM)0xff0) != ERTS_IMMED1_SMALL)
				return -1;
			k = bp_text_cls[h >> 4];
			if (!(k & BP_TEXT_PRINT))
				return -1;
			all &= k;
			if (i < STR_GATHER)
				g[i] = (char)(h >> 4);
			t = p[1];
		}
		*plain = !!all;
		return t == ERTS_NIL ? (int)i : -1;
	}
	for (i = 0; cell(x, t, &hd, &t); i++) {
		if (i == x->text) {
			*more = 1;
			*plain = 0;
			return (int)i;
		}
		if (!get_char(x, hd, &c) || c < 0 || c > 255 ||
		    !(bp_text_cls[c] & BP_TEXT_PRINT))
			return -1;
		if (i < STR_GATHER)
			g[i] = (char)c;
	}
	*plain = 0;
	return is_nil(x, t) ? (int)i : -1;
}

/* String t (gather_string said so) longer than STR_GATHER characters: its
 * first x->text characters, gathered and written STR_GATHER at a time,
 * then the closing quote, or "\"..." if it goes on. */
static void put_long_string(struct bp_text *x, ERL_NIF_TERM t)
{
	char g[STR_GATHER];
	ERL_NIF_TERM hd, rest = t;
	unsigned i = 0;
	int c, more = 0;

	bp_text_ch(x, '"');
	while (!x->full) {
		size_t k = 0;

		while (k < STR_GATHER && cell(x, rest, &hd, &t)) {
			if (i == x->text) {
				more = 1;
				break;
			}
			get_char(x, hd, &c);
			g[k++] = (char)c;
			rest = t;
			i++;
		}
		bp_text_chars(x, g, k);
		if (k < STR_GATHER)
			break;
	}
	if (more)
		BP_TEXT_PUTS(x, "\"...");
	else
		bp_text_ch(x, '"');
}

static void put_list(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
{
	ERL_NIF_TERM hd;
	unsigned i;
	int k, more, plain;
	char g[STR_GATHER];

	if (is_nil(x, t)) {
		BP_TEXT_PUTS(x, "[]");
		return;
	}
	if (!depth) {
		BP_TEXT_PUTS(x, "[...]");
		return;
	}
	if ((k = gather_string(x, t, g, &more, &plain)) > STR_GATHER) {
		put_long_string(x, t);
		return;
	}
	if (k >= 0) {
		/* one pass found a string and its characters */
		if (plain && bp_text_far(x, (size_t)k + 1)) {
			/* the quote and each character, tokens of one byte
			 * that all fit with room for "..." after them */
			x->buf[x->pos] = '"';
			bp_text_copy(x->buf + x->pos + 1, g, (size_t)k);
			x->pos += (size_t)k + 1;
			x->safe = x->pos;
		} else {
			bp_text_ch(x, '"');
			bp_text_chars(x, g, (size_t)k);
		}
		if (more)
			BP_TEXT_PUTS(x, "\"...");
		else
			bp_text_ch(x, '"');
		return;
	}
	bp_text_ch(x, '[');
	i = small_run(x, &t);
	for (; cell(x, t, &hd, &t); i++) {
		int64_t v;
		if (i == x->list || x->full) {
			BP_TEXT_PUTS(x, "|...]");
			return;
		}
		/* the common element, without a call */
		if (bp_erts_small(hd, &v) && bp_text_small_elem(x, v, i > 0))
			continue;
		if (i)
			bp_text_ch(x, ',');
		elem(x, hd, depth - 1);
	}
	if (!is_nil(x, t)) {
		bp_text_ch(x, '|');
		term(x, t, depth - 1);
	}
	bp_text_ch(x, ']');
}

static void put_tuple(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
{
	const ERL_NIF_TERM *e;
	int n;

	if ((!bp_erts_tuple(t, &n, &e) && !enif_get_tuple(x->env, t, &n, &e)) ||
	    n == 0) {
		BP_TEXT_PUTS(x, "{}");
		return;
	}
	if (!depth) {
		BP_TEXT_PUTS(x, "{...}");
		return;
	}
	bp_text_ch(x, '{');
	for (unsigned i = 0; i < (unsigned)n; i++) {
		if (i == x->list || x->full) {
			BP_TEXT_PUTS(x, ",...}");
			return;
		}
		if (i)
			bp_text_ch(x, ',');
		elem(x, e[i], depth - 1);
	}
	bp_text_ch(x, '}');
}

/* A map: a flat map (up to 32 keys) from its words, any other through
 * enif_map_iterator; the same order, ~p's in OTP 25. */
static void put_map(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
{
	ErlNifMapIterator it;
	ERL_NIF_TERM k, v;
	const ERL_NIF_TERM *ks = NULL, *vs = NULL;
	size_t size = 0;
	int flat = bp_erts_flatmap(t, &size, &ks, &vs);

	if ((!flat && !enif_get_map_size(x->env, t, &size)) || size == 0) {
		BP_TEXT_PUTS(x, "#{}");
		return;
	}
	if (!depth || (!flat && !enif_map_iterator_create(
					  x->env, t, &it,
					  ERL_NIF_MAP_ITERATOR_FIRST))) {
		BP_TEXT_PUTS(x, "#{...}");
		return;
	}
	BP_TEXT_PUTS(x, "#{");
	for (size_t i = 0; i < size; i++) {
		if (flat) {
			k = ks[i];
			v = vs[i];
		} else if (!enif_map_iterator_get_pair(x->env, &it, &k, &v)) {
			break;
		}
		if (i == x->list || x->full) {
			BP_TEXT_PUTS(x, ",...");
			break;
		}
		if (i)
			bp_text_ch(x, ',');
		elem(x, k, depth - 1);
		BP_TEXT_PUTS(x, " => ");
		elem(x, v, depth - 1);
		if (!flat)
			enif_map_iterator_next(x->env, &it);
	}
	if (!flat)
		enif_map_iterator_destroy(x->env, &it);
	bp_text_ch(x, '}');
}

static void term(struct bp_text *x, ERL_NIF_TERM t, unsigned depth)
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
		bp_text_u64(x, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
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
			BP_TEXT_PUTS(x, "[]");
			return;
		}
		if ((p = bp_erts_boxed(t))) {
			switch (p[0] & ERTS_HEADER_TAG_MASK) {
			case 0: /* ARITYVAL: a tuple */
				put_tuple(x, t, depth);
				return;
			case ERTS_HEADER_FLOAT:
				if (bp_erts_float(t, &f)) {
					bp_term_put_float(x, f);
					return;
				}
				break;
			case ERTS_HEADER_REFC_BIN:
			case ERTS_HEADER_HEAP_BIN:
			case ERTS_HEADER_SUB_BIN:
				bp_term_put_binary(x, t, depth);
				return;
			case ERTS_HEADER_MAP:
				put_map(x, t, depth);
				return;
			}
		}
	}
	if ((e = bp_text_imm_entry(x, t)) && e->word == (uint64_t)t) {
		bp_text_put(x, e->text, e->len);
		return;
	}
	switch (enif_term_type(x->env, t)) {
	case ERL_NIF_TERM_TYPE_ATOM:
		bp_term_put_atom(x, t, e);
		break;
	case ERL_NIF_TERM_TYPE_INTEGER:
		bp_term_put_int(x, t);
		break;
	case ERL_NIF_TERM_TYPE_FLOAT:
		if (enif_get_double(x->env, t, &f))
			bp_term_put_float(x, f);
		else
			BP_TEXT_PUTS(x, "...");
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
		bp_term_put_binary(x, t, depth);
		break;
	case ERL_NIF_TERM_TYPE_PID:
	case ERL_NIF_TERM_TYPE_PORT:
		bp_term_put_T(x, t, e); /* e is NULL for a remote (boxed) one */
		break;
	case ERL_NIF_TERM_TYPE_REFERENCE:
		bp_term_put_T(x, t, NULL);
		break;
	case ERL_NIF_TERM_TYPE_FUN:
		bp_term_put_fun(x, t);
		break;
	default:
		BP_TEXT_PUTS(x, "...");
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
	struct bp_text x;

	if (!cap)
		return 0;
	bp_text_init(&x, env, c, buf, cap);
	x.cache = cache;
	term(&x, t, depth_of(c));
	return bp_text_end(&x);
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
	struct bp_text x;
	ERL_NIF_TERM hd;
	unsigned i, depth = depth_of(c);
	int more = 0;

	if (!cap)
		return 0;
	bp_text_init(&x, env, c, buf, cap);
	x.cache = cache;
	if (!bp_erts_is_list(env, args)) {
		term(&x, args, depth);
		return bp_text_end(&x);
	}
	bp_text_ch(&x, '(');
	for (i = 0; cell(&x, args, &hd, &args); i++) {
		if (i == x.list) {
			more = 1;
			break;
		}
		if (i)
			BP_TEXT_PUTS(&x, ", ");
		elem(&x, hd, depth);
		if (x.full)
			return bp_text_end(&x);
	}
	if (more) {
		BP_TEXT_PUTS(&x, ", ...");
	} else if (!is_nil(&x, args)) {
		BP_TEXT_PUTS(&x, " | ");
		term(&x, args, depth);
	}
	bp_text_ch(&x, ')');
	return bp_text_end(&x);
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
	struct bp_text x;

	if (!cap)
		return 0;
	bp_text_init(&x, env, NULL, buf, cap);
	x.lim = cap - 1;
	x.cache = cache;
	if (enif_is_atom(env, t))
		term(&x, t, 0); /* an atom: bp_term_put_atom, through the cache */
	if (x.full || !x.pos) {
		buf[0] = '\0';
		return 0;
	}
	return bp_text_end(&x);
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
	struct bp_text x;

	if (!cap)
		return 0;
	bp_text_init(&x, env, NULL, buf, cap);
	x.lim = cap - 1;
	term(&x, m, BP_CAPTURE_DEFAULT_DEPTH);
	bp_text_ch(&x, ':');
	term(&x, f, BP_CAPTURE_DEFAULT_DEPTH);
	bp_text_ch(&x, '/');
	bp_text_u64(&x, arity, 0);
	if (x.full) {
		buf[0] = '\0';
		return 0;
	}
	return bp_text_end(&x);
}
