/* bp_elixir.c -- captured Erlang-syntax text re-rendered in Elixir syntax
 * (bp_elixir.h has the rules and the known differences from inspect/2).
 *
 * Two passes over the input: a parser (bp_elixir_parse.c) builds a small
 * tree of nodes (one node per term, at most one per input byte, decoded
 * characters in a side array), then this writer prints the tree in
 * Elixir syntax.  The tree is needed because a list is a keyword list, a
 * map a struct, a binary a string only once all of its visible elements
 * are known.  Every loop advances the input or the output; the tree's
 * depth is bounded by the parser.
 */
#include "bp_elixir.h"
#include "bp_elixir_parse.h"
#include "bp_elixir_ident.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct wr {
	char *b;
	size_t cap, len;
	int full;
};

/* ---- output ------------------------------------------------------- */

static void put(struct wr *w, const char *s, size_t n)
{
	if (w->full)
		return;
	if (w->len + n + 4 > w->cap) { /* room kept for "..." and the NUL */
		w->full = 1;
		return;
	}
	memcpy(w->b + w->len, s, n);
	w->len += n;
}

static void puts_(struct wr *w, const char *s) { put(w, s, strlen(s)); }

static void putc_(struct wr *w, char c) { put(w, &c, 1); }

static void put_utf8(struct wr *w, uint32_t c)
{
	char b[4];
	size_t n;

	if (c < 0x80) {
		b[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		b[0] = (char)(0xC0 | c >> 6);
		b[1] = (char)(0x80 | (c & 0x3F));
		n = 2;
	} else if (c < 0x10000) {
		b[0] = (char)(0xE0 | c >> 12);
		b[1] = (char)(0x80 | (c >> 6 & 0x3F));
		b[2] = (char)(0x80 | (c & 0x3F));
		n = 3;
	} else {
		b[0] = (char)(0xF0 | c >> 18);
		b[1] = (char)(0x80 | (c >> 12 & 0x3F));
		b[2] = (char)(0x80 | (c >> 6 & 0x3F));
		b[3] = (char)(0x80 | (c & 0x3F));
		n = 4;
	}
	put(w, b, n);
}

static void put_uint(struct wr *w, uint32_t v)
{
	char b[12];
	int i = (int)sizeof b;

	do
		b[--i] = (char)('0' + v % 10);
	while (v /= 10);
	put(w, b + i, sizeof b - (size_t)i);
}

/* ---- writing ------------------------------------------------------ */

struct ctx {
	const struct px *p;
	struct wr *w;
};

static const uint32_t *cps(const struct ctx *c, const struct node *x)
{
	return c->p->cp + x->off;
}

static int is_upper(uint32_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
	       bp_sc_upper(c);
}

static int is_latin1_letter(uint32_t c)
{
	return c >= 0xC0 && c <= 0xFF && c != 0xD7 && c != 0xF7;
}

/* The script set a character adds to a name (bp_elixir_ident.h): ASCII
 * and Latin-1 letters are Latin; digits, '_', '@' and the middle dot
 * (U+00B7, Other_ID_Continue) any; 0 where it cannot be in a name. */
static uint32_t name_set(uint32_t c, int *start)
{
	*start = 0;
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    is_latin1_letter(c)) {
		*start = 1;
		return BP_SC_LATN;
	}
	if (c == '_') {
		*start = 1;
		return BP_SC_ALL;
	}
	if ((c >= '0' && c <= '9') || c == '@' || c == 0xB7)
		return BP_SC_ALL;
	if (c <= 0xFF)
		return 0;
	return bp_sc_of(c, start);
}

/* [a-zA-Z_][a-zA-Z0-9_@]*[?!]?, letters beyond ASCII allowed as Elixir's
 * tokenizer allows them: of one script, or Latin with Han and kana,
 * Bopomofo or Hangul (UTS #39 "highly restrictive"). */
static int identifier(const uint32_t *s, size_t n)
{
	static const uint32_t mixes[] = {BP_SC_LATN | BP_SC_JPAN,
					 BP_SC_LATN | BP_SC_HANB,
					 BP_SC_LATN | BP_SC_KORE};
	uint32_t all = BP_SC_ALL;
	size_t i, end = n;
	int start;

	if (n && (s[n - 1] == '?' || s[n - 1] == '!'))
		end--;
	if (!end)
		return 0;
	for (i = 0; i < end; i++) {
		uint32_t set = name_set(s[i], &start);
		if (!set || (i == 0 && !start))
			return 0;
		all &= set;
	}
	if (all)
		return 1;
	for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
		for (i = 0; i < end; i++)
			if (!(name_set(s[i], &start) & mixes[m]))
				break;
		if (i == end)
			return 1;
	}
	return 0;
}

static int eq(const uint32_t *s, size_t n, const char *lit)
{
	size_t k = strlen(lit);

	if (k != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] != (unsigned char)lit[i])
			return 0;
	return 1;
}

/* Whether the atom's text starts with "Elixir.": Elixir 1.14's
 * Inspect.List.keyword?/1 refuses such keys (a list or map holding one
 * is not written as a keyword list), whether or not they are aliases. */
static int elixir_prefixed(const uint32_t *s, size_t n)
{
	return n >= 7 && eq(s, 7, "Elixir.");
}

/* Elixir.Foo.Bar: every segment [A-Z][a-zA-Z0-9_]*. */
static int alias(const uint32_t *s, size_t n)
{
	size_t i = 7;

	if (eq(s, n, "Elixir"))
		return 1;
	if (n < 8 || !eq(s, 7, "Elixir."))
		return 0;
	for (;;) {
		if (i >= n || !(s[i] >= 'A' && s[i] <= 'Z'))
			return 0;
		for (i++; i < n && s[i] != '.'; i++)
			if (!((s[i] >= 'a' && s[i] <= 'z') ||
			      (s[i] >= 'A' && s[i] <= 'Z') ||
			      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
				return 0;
		if (i == n)
			return 1;
		i++;
	}
}

static const char *const ops[] = { /* as Elixir 1.14 leaves them unquoted */
	"+", "-", "*", "/", "++", "--", "**", "<>", "=", "==", "!=", "===",
	"!==", "<", ">", "<=", ">=", "&&", "||", "!", "->", "|", "|>", "<<<",
	">>>", "&&&", "|||", "<~", "~>", "<~>", "<<~", "~>>", "\\\\", "=~",
	"@", "&", "^", ".", "..", "...", "%", "%{}", "{}", "<<>>", "+++",
	"---", "..//", "<-", NULL};

/* The operators Elixir 1.14 writes unquoted after a module's dot
 * (&Foo.+/2), Macro.inspect_atom(:remote_call, _): not the ones that are
 * not callable (&Foo."%{}"/1), and three that are quoted elsewhere. */
static const char *const remote_ops[] = {
	"+", "-", "*", "/", "++", "--", "**", "<>", "=", "==", "!=", "===",
	"!==", "<", ">", "<=", ">=", "&&", "||", "!", "|", "|>", "<<<",
	">>>", "&&&", "|||", "<~", "~>", "<~>", "<<~", "~>>", "\\\\", "=~",
	"@", "&", "^", "+++", "---", "<-", "^^^", "~~~", "::", "<|>", NULL};

static int in_table(const char *const *t, const uint32_t *s, size_t n)
{
	for (int i = 0; t[i]; i++)
		if (eq(s, n, t[i]))
			return 1;
	return 0;
}

static int op(const uint32_t *s, size_t n) { return in_table(ops, s, n); }

/* A function name Elixir writes unquoted after Module.: a lower-case
 * identifier without @ (&Foo."Abc"/1, &Foo."a@b"/1), or a callable
 * operator. */
static int remote_name(const uint32_t *s, size_t n)
{
	if (in_table(remote_ops, s, n))
		return 1;
	if (!identifier(s, n) || is_upper(s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '@')
			return 0;
	return 1;
}

/* Escapes as Elixir's inspect does inside `q'-quoted text. */
static void esc_text(struct wr *w, const uint32_t *s, size_t n, char q)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t c = s[i];
		const char *e = NULL;
		switch (c) {
		case '\n': e = "\\n"; break;
		case '\t': e = "\\t"; break;
		case '\r': e = "\\r"; break;
		case '\v': e = "\\v"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		case 27: e = "\\e"; break;
		case 127: e = "\\d"; break;
		case 7: e = "\\a"; break;
		case 0: e = "\\0"; break;
		case '\\': e = "\\\\"; break;
		case 0xFEFF: e = "\\uFEFF"; break; /* the BOM */
		case 0xFFFE: e = "\\x{FFFE}"; break;
		case 0xFFFF: e = "\\x{FFFF}"; break;
		case '#':
			if (i + 1 < n && s[i + 1] == '{')
				e = "\\#";
			break;
		default:
			if (c == (uint32_t)q) {
				putc_(w, '\\');
				putc_(w, q);
				continue;
			}
		}
		if (e)
			puts_(w, e);
		else if (c < 0x20 || (c >= 0x80 && c <= 0x9F)) { /* C0, C1 */
			static const char hex[] = "0123456789ABCDEF";
			char b[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			put(w, b, 4);
		} else
			put_utf8(w, c);
	}
}

enum actx { A_VALUE, A_KEY, A_MODULE, A_FUN };

/* An atom's characters unquoted: an operator as it is (:\\ is the atom
 * of two backslashes), an identifier escaped (its characters need none). */
static void bare(struct wr *w, const uint32_t *s, size_t n)
{
	if (op(s, n) || in_table(remote_ops, s, n))
		for (size_t i = 0; i < n; i++)
			put_utf8(w, s[i]);
	else
		esc_text(w, s, n, 0);
}

static void quoted(struct wr *w, const uint32_t *s, size_t n)
{
	putc_(w, '"');
	esc_text(w, s, n, '"');
	putc_(w, '"');
}

static void atom(struct ctx *c, const struct node *x, enum actx how)
{
	const uint32_t *s = cps(c, x);
	size_t n = x->len;

	if (x->type != N_ATOM) { /* an unreadable atom: as it was */
		put(c->w, c->p->s + x->off, x->len);
		return;
	}
	if (how == A_KEY) { /* Elixir, an alias, is a quoted key */
		if ((identifier(s, n) && !eq(s, n, "Elixir")) || op(s, n))
			bare(c->w, s, n);
		else
			quoted(c->w, s, n);
		puts_(c->w, ": ");
		return;
	}
	if (how == A_FUN) {
		if (remote_name(s, n))
			bare(c->w, s, n);
		else
			quoted(c->w, s, n);
		return;
	}
	if (alias(s, n)) {
		/* Elixir.Elixir.Foo in full: Elixir.Foo would be another */
		if (n == 6 || (n >= 13 && eq(s + 7, 6, "Elixir") &&
			       (n == 13 || s[13] == '.')))
			esc_text(c->w, s, n, 0);
		else
			esc_text(c->w, s + 7, n - 7, 0);
		return;
	}
	if (how == A_VALUE && (eq(s, n, "nil") || eq(s, n, "true") ||
			       eq(s, n, "false"))) {
		esc_text(c->w, s, n, 0);
		return;
	}
	putc_(c->w, ':');
	if (identifier(s, n) || op(s, n))
		bare(c->w, s, n);
	else
		quoted(c->w, s, n);
}

static int is_atom_alias(const struct ctx *c, const struct node *x)
{
	return x->type == N_ATOM && alias(cps(c, x), x->len);
}

/* The integer value of a NUM node (decimal, non-negative, < 2^31) or -1. */
static long small_int(const struct ctx *c, const struct node *x)
{
	long v = 0;

	if (x->type != N_NUM || !x->len || x->len > 9)
		return -1;
	for (uint32_t i = 0; i < x->len; i++) {
		char d = c->p->s[x->off + i];
		if (d < '0' || d > '9')
			return -1;
		v = v * 10 + (d - '0');
	}
	return v;
}

/* List.ascii_printable? of Elixir 1.14. */
static int ascii_printable(uint32_t v)
{
	return (v >= 32 && v <= 126) || (v >= 7 && v <= 13) || v == 27;
}

/* String.printable? of Elixir 1.14, per code point. */
static int uni_printable(uint32_t v)
{
	return (v >= 0x20 && v <= 0x7E) || (v >= 7 && v <= 13) || v == 27 ||
	       v == 127 || (v >= 0xA0 && v <= 0xD7FF) ||
	       (v >= 0xE000 && v <= 0xFFFD) || (v >= 0x10000 && v <= 0x10FFFF);
}

/* Decodes bytes b[0..n) as UTF-8 into out; returns the code point count,
 * or -1 if not valid UTF-8 (a sequence cut at the end when `cut' is
 * dropped: *used says how many bytes were decoded). */
static long utf8(const uint32_t *b, size_t n, int cut, uint32_t *out,
		 size_t *used)
{
	size_t i = 0;
	long k = 0;

	while (i < n) {
		uint32_t c = b[i], v;
		int more = c < 0x80 ? 0 : c >= 0xC2 && c < 0xE0 ? 1
				       : c >= 0xE0 && c < 0xF0 ? 2
				       : c >= 0xF0 && c < 0xF5 ? 3 : -1;
		if (more < 0)
			return -1;
		if (i + (size_t)more >= n && more) {
			int ok = 1;
			for (size_t j = i + 1; j < n; j++)
				ok &= (b[j] & 0xC0) == 0x80;
			if (cut && ok)
				break; /* cut inside the last character */
			return -1;
		}
		v = more ? c & (0x3F >> more) : c;
		for (int j = 1; j <= more; j++) {
			if ((b[i + (size_t)j] & 0xC0) != 0x80)
				return -1;
			v = v << 6 | (b[i + (size_t)j] & 0x3F);
		}
		if ((more == 2 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
		    (more == 3 && (v < 0x10000 || v > 0x10FFFF)))
			return -1;
		out[k++] = v;
		i += (size_t)more + 1;
	}
	*used = i;
	return k;
}

static void value(struct ctx *c, uint32_t k);

static void bin(struct ctx *c, const struct node *x)
{
	const uint32_t *b = cps(c, x);
	uint32_t *u;
	size_t used = 0;
	long k = -1;
	int ok;

	if (x->cut == 2) {
		puts_(c->w, "<<...>>");
		return;
	}
	if (!x->bits && (u = malloc((x->len + 1) * sizeof *u))) {
		k = utf8(b, x->len, x->cut, u, &used);
		ok = k >= 0 && (k > 0 || !x->len || !x->cut);
		for (long i = 0; ok && i < k; i++)
			ok = uni_printable(u[i]);
		if (ok) {
			putc_(c->w, '"');
			esc_text(c->w, u, (size_t)k, '"');
			putc_(c->w, '"');
			if (x->cut)
				puts_(c->w, " <> ...");
			free(u);
			return;
		}
		free(u);
	}
	puts_(c->w, "<<");
	for (uint32_t i = 0; i < x->len; i++) {
		if (i)
			puts_(c->w, ", ");
		put_uint(c->w, b[i]);
	}
	if (x->cut)
		puts_(c->w, x->len ? ", ..." : "...");
	else if (x->bits) {
		if (x->len)
			puts_(c->w, ", ");
		put_uint(c->w, x->tailv);
		puts_(c->w, "::size(");
		put_uint(c->w, x->bits);
		putc_(c->w, ')');
	}
	puts_(c->w, ">>");
}

static void charlist(struct ctx *c, const struct node *x)
{
	const uint32_t *s = cps(c, x);
	int ok = 1;

	for (uint32_t i = 0; ok && i < x->len; i++)
		ok = ascii_printable(s[i]);
	if (ok) {
		putc_(c->w, '\'');
		esc_text(c->w, s, x->len, '\'');
		putc_(c->w, '\'');
		if (x->cut)
			puts_(c->w, " ++ ...");
		return;
	}
	putc_(c->w, '[');
	for (uint32_t i = 0; i < x->len; i++) {
		if (i)
			puts_(c->w, ", ");
		put_uint(c->w, s[i]);
	}
	if (x->cut)
		puts_(c->w, x->len ? ", ..." : "...");
	putc_(c->w, ']');
}

/* A {Key, Value} whose key can be written as a keyword key. */
static int kw_pair(const struct ctx *c, const struct node *x)
{
	const struct node *k, *v;

	if (x->type != N_TUPLE || x->kid == NONE)
		return 0;
	k = &c->p->nd[x->kid];
	if (k->next == NONE)
		return 0;
	v = &c->p->nd[k->next];
	return k->type == N_ATOM && !elixir_prefixed(cps(c, k), k->len) &&
	       v->type != N_CUT && v->next == NONE;
}

static void list(struct ctx *c, const struct node *x)
{
	const struct px *p = c->p;
	int kw = 1, chars = 1, first = 1, some = 0;
	uint32_t k;

	if (x->tail != NONE && p->nd[x->tail].type != N_CUT)
		kw = chars = 0;
	for (k = x->kid; k != NONE; k = p->nd[k].next) {
		const struct node *e = &p->nd[k];
		if (e->type == N_CUT)
			continue;
		some = 1;
		if (!kw_pair(c, e))
			kw = 0;
		if (!ascii_printable((uint32_t)small_int(c, e)) ||
		    small_int(c, e) < 0)
			chars = 0;
	}
	if (!some)
		kw = chars = 0;
	if (chars) { /* [7,8]: Elixir's '\a\b' */
		putc_(c->w, '\'');
		for (k = x->kid; k != NONE; k = p->nd[k].next) {
			uint32_t v = (uint32_t)small_int(c, &p->nd[k]);
			uint32_t nx = p->nd[k].next;
			if (p->nd[k].type == N_CUT)
				continue;
			/* one at a time: #{ is escaped here, not by esc_text */
			if (v == '#' && nx != NONE &&
			    small_int(c, &p->nd[nx]) == '{')
				puts_(c->w, "\\#");
			else
				esc_text(c->w, &v, 1, '\'');
		}
		putc_(c->w, '\'');
		if (x->tail != NONE || p->nd[x->kid].type == N_CUT)
			puts_(c->w, " ++ ...");
		return;
	}
	putc_(c->w, '[');
	for (k = x->kid; k != NONE; k = p->nd[k].next) {
		const struct node *e = &p->nd[k];
		if (!first)
			puts_(c->w, ", ");
		first = 0;
		if (kw && e->type == N_TUPLE) {
			atom(c, &p->nd[e->kid], A_KEY);
			value(c, p->nd[e->kid].next);
		} else {
			value(c, k);
		}
	}
	if (x->tail != NONE) {
		puts_(c->w, p->nd[x->tail].type == N_CUT ? ", " : " | ");
		value(c, x->tail);
	}
	if (!x->open)
		putc_(c->w, ']');
}

static void map(struct ctx *c, const struct node *x)
{
	const struct px *p = c->p;
	uint32_t k, strukt = NONE;
	int kw = 1, first = 1;

	for (k = x->kid; k != NONE; k = p->nd[k].next) {
		const struct node *e = &p->nd[k];
		uint32_t v = e->next;
		if (e->type == N_CUT)
			break;
		if (e->type != N_ATOM || elixir_prefixed(cps(c, e), e->len))
			kw = 0;
		if (e->type == N_ATOM && eq(cps(c, e), e->len, "__struct__") &&
		    v != NONE && is_atom_alias(c, &p->nd[v]))
			strukt = v;
		if (v == NONE)
			break;
		k = v;
	}
	putc_(c->w, '%');
	if (strukt != NONE && kw)
		atom(c, &p->nd[strukt], A_MODULE);
	putc_(c->w, '{');
	for (k = x->kid; k != NONE; k = p->nd[k].next) {
		const struct node *e = &p->nd[k];
		uint32_t v = e->next;
		if (strukt != NONE && kw &&
		    (v == strukt || (e->type == N_ATOM && v != NONE &&
				     eq(cps(c, e), e->len, "__exception__"))))
			goto skip; /* inspect/2 shows neither */
		if (!first)
			puts_(c->w, ", ");
		first = 0;
		if (e->type == N_CUT || v == NONE) {
			value(c, k);
			break;
		}
		if (kw)
			atom(c, e, A_KEY);
		else {
			value(c, k);
			puts_(c->w, " => ");
		}
		value(c, v);
	skip:
		if (v == NONE)
			break;
		k = v;
	}
	if (!x->open)
		putc_(c->w, '}');
}

/* Elixir 1.14 prints an integral float in [1, 1e16) as its digits and
 * ".0" (10000000000.0 where Erlang writes 1.0e10). */
static void num(struct ctx *c, const struct node *x)
{
	const char *s = c->p->s + x->off, *e, *dot;
	size_t n = x->len;

	if (n >= 3 && (!memcmp(s, "16#", 3) || (n >= 4 && !memcmp(s, "-16#", 4)))) {
		if (*s == '-')
			putc_(c->w, '-'), s++, n--;
		puts_(c->w, "0x");
		put(c->w, s + 3, n - 3);
		return;
	}
	e = memchr(s, 'e', n);
	dot = memchr(s, '.', n);
	if (e && dot && dot < e && e + 1 < s + n && e[1] >= '0' && e[1] <= '9') {
		const char *d = *s == '-' ? s + 1 : s;
		long exp = 0;
		for (const char *q = e + 1; q < s + n && *q >= '0' && *q <= '9' &&
					    exp < 1000; q++)
			exp = exp * 10 + (*q - '0');
		size_t ilen = (size_t)(dot - d), flen = (size_t)(e - dot - 1);
		while (flen && dot[flen] == '0')
			flen--;
		if (exp >= 0 && (long)flen <= exp && (long)ilen + exp <= 16 &&
		    ilen >= 1 && *d != '0') {
			if (*s == '-')
				putc_(c->w, '-');
			put(c->w, d, ilen);
			put(c->w, dot + 1, flen);
			for (long z = 0; z < exp - (long)flen; z++)
				putc_(c->w, '0');
			puts_(c->w, ".0");
			return;
		}
	}
	put(c->w, s, n);
}

static void value(struct ctx *c, uint32_t k)
{
	const struct px *p = c->p;
	const struct node *x;
	int first = 1;

	if (k == NONE) {
		puts_(c->w, "...");
		return;
	}
	x = &p->nd[k];
	switch (x->type) {
	case N_ATOM:
		atom(c, x, A_VALUE);
		break;
	case N_NUM:
		num(c, x);
		break;
	case N_STR:
		charlist(c, x);
		break;
	case N_BIN:
		bin(c, x);
		break;
	case N_LIST:
		list(c, x);
		break;
	case N_TUPLE:
		putc_(c->w, '{');
		for (uint32_t e = x->kid; e != NONE; e = p->nd[e].next) {
			if (!first)
				puts_(c->w, ", ");
			first = 0;
			value(c, e);
		}
		if (!x->open)
			putc_(c->w, '}');
		break;
	case N_MAP:
		map(c, x);
		break;
	case N_PID:
		puts_(c->w, "#PID");
		put(c->w, p->s + x->off, x->len);
		break;
	case N_PORT:
		put(c->w, p->s + x->off, x->len);
		break;
	case N_REF: /* #Ref<...> -> #Reference<...> */
		puts_(c->w, "#Reference");
		put(c->w, p->s + x->off + 4, x->len - 4);
		break;
	case N_FUN: { /* #Fun<m.I.U> -> #Function<I.U in :m> */
		const char *s = p->s + x->off + 5, *end = p->s + x->off + x->len;
		const char *d2 = NULL, *d1 = NULL;
		for (const char *q = end - 1; q > s; q--)
			if (*q == '.') {
				if (!d2)
					d2 = q;
				else {
					d1 = q;
					break;
				}
			}
		if (!d1 || end[-1] != '>') {
			put(c->w, p->s + x->off, x->len);
			break;
		}
		puts_(c->w, "#Function<");
		put(c->w, d1 + 1, (size_t)(end - 1 - d1 - 1));
		puts_(c->w, " in ");
		{
			struct px q = *p;
			struct node nd;
			uint32_t buf[256];
			size_t m = (size_t)(d1 - s);
			q.s = s;
			q.n = m;
			q.i = 0;
			q.nd = &nd;
			q.nn = 0;
			q.ncap = 1;
			q.cp = buf;
			q.ncp = 0;
			q.cpcap = 256;
			if (m && m < 256 && bp_exp_atom(&q) == 0 && q.i == m) {
				struct ctx c2 = {&q, c->w};
				atom(&c2, &nd, A_MODULE);
			} else {
				put(c->w, s, m);
			}
		}
		putc_(c->w, '>');
		break;
	}
	case N_EXTFUN: { /* fun m:f/2 -> &M.f/2 */
		uint32_t m = x->kid, f = m != NONE ? p->nd[m].next : NONE;
		uint32_t a = f != NONE ? p->nd[f].next : NONE;
		if (a == NONE) {
			put(c->w, p->s + x->off, 4);
			break;
		}
		putc_(c->w, '&');
		atom(c, &p->nd[m], A_MODULE);
		putc_(c->w, '.');
		atom(c, &p->nd[f], A_FUN);
		putc_(c->w, '/');
		value(c, a);
		break;
	}
	case N_CUT:
		puts_(c->w, "...");
		break;
	default:
		put(c->w, p->s + x->off, x->len);
		break;
	}
}

static int args(struct ctx *c, struct px *p);

/* "m:f/2" or "m:f" -> "M.f/2" / "M.f"; "m:f(1)" -> "M.f(1)". */
static int mfa(struct ctx *c, struct px *p)
{
	uint32_t m, f;

	if (!p->n)
		return 0;
	m = bp_exp_atom(p);
	if (m == NONE || p->nd[m].type != N_ATOM || p->i >= p->n ||
	    p->s[p->i] != ':')
		return 0;
	p->i++;
	f = bp_exp_atom(p);
	if (f == NONE || p->nd[f].type != N_ATOM)
		return 0;
	if (p->i < p->n && p->s[p->i] != '/' && p->s[p->i] != '(')
		return 0;
	atom(c, &p->nd[m], A_MODULE);
	putc_(c->w, '.');
	atom(c, &p->nd[f], A_FUN);
	if (p->i < p->n && p->s[p->i] == '(') { /* spawn's m:f(Args) */
		struct px q = *p;
		q.s += p->i;
		q.n -= p->i;
		q.i = 0;
		struct ctx c2 = {&q, c->w};
		return args(&c2, &q);
	}
	put(c->w, p->s + p->i, p->n - p->i);
	return 1;
}

static int args(struct ctx *c, struct px *p)
{
	int first = 1;

	if (!p->n || p->s[0] != '(')
		return 0;
	p->i = 1;
	putc_(c->w, '(');
	for (;;) {
		uint32_t k;
		bp_exp_skip_sp(p);
		if (p->i < p->n && p->s[p->i] == ')') {
			putc_(c->w, ')');
			return 1;
		}
		k = bp_exp_term(p);
		if (!first)
			puts_(c->w, ", ");
		first = 0;
		value(c, k);
		bp_exp_skip_sp(p);
		if (k == NONE || p->nd[k].type == N_CUT || p->i >= p->n) {
			/* ", ...)" past the list limit; cut by the byte
			 * limit: open, as it was */
			if (p->i < p->n && p->s[p->i] == ')')
				putc_(c->w, ')');
			return 1;
		}
		if (p->s[p->i] == ',')
			p->i++;
		else if (p->s[p->i] != ')')
			return 0;
	}
}

size_t bp_elixir_text(const char *in, size_t n, enum bp_elixir_kind kind,
		      char *out, size_t cap)
{
	struct wr w = {out, cap, 0, 0};
	struct px p;
	struct ctx c = {&p, &w};
	int ok = 0;

	memset(&p, 0, sizeof p);
	p.s = in;
	p.n = n;
	p.ncap = n + 16;
	p.cpcap = n + 16;
	p.nd = malloc(p.ncap * sizeof *p.nd);
	p.cp = malloc(p.cpcap * sizeof *p.cp);
	if (p.nd && p.cp && cap >= 8) {
		switch (kind) {
		case BP_ELIXIR_MFA:
			ok = mfa(&c, &p);
			break;
		case BP_ELIXIR_ARGS:
			ok = args(&c, &p);
			break;
		case BP_ELIXIR_NAME: {
			uint32_t k = bp_exp_atom(&p);
			ok = k != NONE && p.i == n && is_atom_alias(&c, &p.nd[k]);
			if (ok)
				atom(&c, &p.nd[k], A_MODULE);
			break;
		}
		default: {
			uint32_t k = bp_exp_term(&p);
			bp_exp_skip_sp(&p);
			ok = p.i == n; /* one whole term, nothing after it */
			if (ok)
				value(&c, k);
			break;
		}
		}
	}
	free(p.nd);
	free(p.cp);
	if (!ok) { /* not captured Erlang syntax: the text as it is */
		w.len = 0;
		w.full = 0;
		put(&w, in, n);
	}
	if (w.full) {
		if (w.len + 4 > cap)
			w.len = cap - 4;
		memcpy(out + w.len, "...", 3);
		w.len += 3;
	}
	if (cap)
		out[w.len < cap ? w.len : cap - 1] = 0;
	return w.len;
}
