/* bp_meta.c -- parses the TSDL metadata of a beamprobe trace: the trace
 * UUID, the env block, the clock offset and the event classes with their
 * field types.  Not a general TSDL parser: it understands what
 * bp_format_metadata() writes (and any later minor version that only adds
 * classes or trailing fields) and rejects the rest with a byte offset.
 * Bounded: no recursion deeper than the fixed block nesting it accepts.
 */
#include "bp_reader.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tok_kind { T_EOF, T_IDENT, T_NUM, T_STR, T_PUNCT, T_BAD };

struct lex {
	const char *s;
	size_t len, pos;
	/* current token */
	enum tok_kind kind;
	size_t start;        /* offset of the token */
	const char *text;    /* T_IDENT/T_STR body, T_PUNCT char */
	size_t tlen;
	int64_t num;
	char *err;
	size_t errlen;
	size_t *erroff;
	int failed;
};

__attribute__((format(printf, 3, 4))) static int fail(struct lex *l,
						      size_t off,
						      const char *fmt, ...)
{
	va_list ap;

	if (l->failed)
		return -1;
	va_start(ap, fmt);
	vsnprintf(l->err, l->errlen, fmt, ap);
	va_end(ap);
	*l->erroff = off;
	l->failed = 1;
	return -1;
}

static void skip_space(struct lex *l)
{
	while (l->pos < l->len) {
		char c = l->s[l->pos];
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
		    c == '\f' || c == '\v') {
			l->pos++;
		} else if (c == '/' && l->pos + 1 < l->len &&
			   l->s[l->pos + 1] == '*') {
			size_t p = l->pos + 2;
			while (p + 1 < l->len &&
			       !(l->s[p] == '*' && l->s[p + 1] == '/'))
				p++;
			l->pos = p + 1 < l->len ? p + 2 : l->len;
		} else if (c == '/' && l->pos + 1 < l->len &&
			   l->s[l->pos + 1] == '/') {
			while (l->pos < l->len && l->s[l->pos] != '\n')
				l->pos++;
		} else {
			break;
		}
	}
}

static int is_ident(char c, int first)
{
	return c == '_' || isalpha((unsigned char)c) ||
	       (!first && isdigit((unsigned char)c));
}

/* Advances to the next token. */
static void next(struct lex *l)
{
	skip_space(l);
	l->start = l->pos;
	if (l->pos >= l->len) {
		l->kind = T_EOF;
		return;
	}
	char c = l->s[l->pos];
	if (is_ident(c, 1)) {
		size_t p = l->pos;
		while (p < l->len && is_ident(l->s[p], 0))
			p++;
		l->kind = T_IDENT;
		l->text = l->s + l->pos;
		l->tlen = p - l->pos;
		l->pos = p;
	} else if (isdigit((unsigned char)c) || c == '-' || c == '+') {
		char tmp[32];
		size_t p = l->pos + 1, n;
		while (p < l->len && (isalnum((unsigned char)l->s[p])))
			p++;
		n = p - l->pos;
		if (n >= sizeof tmp) {
			l->kind = T_BAD;
			return;
		}
		memcpy(tmp, l->s + l->pos, n);
		tmp[n] = '\0';
		char *end;
		errno = 0;
		long long v = strtoll(tmp, &end, 0);
		l->kind = (*end || errno) ? T_BAD : T_NUM;
		l->num = v;
		l->pos = p;
	} else if (c == '"') {
		size_t p = l->pos + 1;
		while (p < l->len && l->s[p] != '"') {
			if (l->s[p] == '\\' && p + 1 < l->len)
				p++;
			p++;
		}
		if (p >= l->len) {
			l->kind = T_BAD;
			return;
		}
		l->kind = T_STR;
		l->text = l->s + l->pos + 1;
		l->tlen = p - l->pos - 1;
		l->pos = p + 1;
	} else {
		l->kind = T_PUNCT;
		l->text = l->s + l->pos;
		l->tlen = 1;
		l->pos++;
	}
}

static int is_punct(const struct lex *l, char c)
{
	return l->kind == T_PUNCT && l->text[0] == c;
}

static int is_word(const struct lex *l, const char *w)
{
	return l->kind == T_IDENT && l->tlen == strlen(w) &&
	       memcmp(l->text, w, l->tlen) == 0;
}

static int expect(struct lex *l, char c)
{
	if (!is_punct(l, c))
		return fail(l, l->start, "expected '%c'", c);
	next(l);
	return 0;
}

/* Skips to just after the ';' that ends the current statement, across
 * nested braces (iteratively). */
static int skip_statement(struct lex *l)
{
	int depth = 0;

	for (;;) {
		if (l->kind == T_EOF || l->kind == T_BAD)
			return fail(l, l->start, "unterminated statement");
		if (is_punct(l, '{'))
			depth++;
		else if (is_punct(l, '}')) {
			if (depth == 0)
				return fail(l, l->start, "unbalanced '}'");
			depth--;
		} else if (is_punct(l, ';') && depth == 0) {
			next(l);
			return 0;
		}
		next(l);
	}
}

/* Copies a string token body, undoing backslash escapes. */
static char *unquote(const char *s, size_t n)
{
	char *out = malloc(n + 1), *d = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\' && i + 1 < n)
			i++;
		*d++ = s[i];
	}
	*d = '\0';
	return out;
}

static int parse_uuid(const char *s, size_t n, uint8_t out[16])
{
	unsigned k = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '-')
			continue;
		if (!isxdigit((unsigned char)s[i]) || k >= 32)
			return -1;
		int v = isdigit((unsigned char)s[i])
				? s[i] - '0'
				: (tolower((unsigned char)s[i]) - 'a' + 10);
		if (k % 2 == 0)
			out[k / 2] = (uint8_t)(v << 4);
		else
			out[k / 2] |= (uint8_t)v;
		k++;
	}
	return k == 32 ? 0 : -1;
}

/* Maps a field type name to a wire type; -1 if not sizeable here. */
static int wire_type(const struct lex *l)
{
	static const struct {
		const char *name;
		int t;
	} names[] = {{"uint8_t", BP_W_U8},   {"uint16_t", BP_W_U16},
		     {"uint32_t", BP_W_U32}, {"uint64_t", BP_W_U64},
		     {"clk64_t", BP_W_U64},  {"string", BP_W_STR}};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (is_word(l, names[i].name))
			return names[i].t;
	return -1;
}

/* fields := struct { TYPE NAME; ... };  (the lexer is on "struct") */
static int parse_fields(struct lex *l, struct bp_class *c)
{
	next(l);
	if (expect(l, '{'))
		return -1;
	while (!is_punct(l, '}')) {
		int t = wire_type(l);
		if (l->kind != T_IDENT)
			return fail(l, l->start, "bad field declaration");
		if (t < 0 || c->nfields >= BP_META_MAX_FIELDS) {
			c->bad = 1; /* cannot size: events of it are damage */
			if (skip_statement(l))
				return -1;
			continue;
		}
		next(l);
		if (is_punct(l, '{')) { /* e.g. string { encoding = UTF8; } */
			/* T_BAD does not advance: stop there too (a damaged
			 * string here used to loop forever). */
			while (!is_punct(l, '}') && l->kind != T_EOF &&
			       l->kind != T_BAD)
				next(l);
			if (!is_punct(l, '}'))
				return fail(l, l->start, "unterminated type "
					    "attributes");
			next(l);
		}
		if (l->kind != T_IDENT)
			return fail(l, l->start, "expected a field name");
		next(l);
		if (!is_punct(l, ';')) { /* arrays, sequences: not sizeable */
			c->bad = 1;
			if (skip_statement(l))
				return -1;
			continue;
		}
		next(l);
		c->types[c->nfields++] = (uint8_t)t;
	}
	next(l);
	return expect(l, ';');
}

static int set_env(struct bp_meta *m, const char *k, size_t kn, char *v)
{
	if (!v)
		return -1;
	if (m->nenv >= BP_META_MAX_ENV) {
		free(v);
		return 0;
	}
	char *key = unquote(k, kn);
	if (!key) {
		free(v);
		return -1;
	}
	m->env_key[m->nenv] = key;
	m->env_val[m->nenv++] = v;
	return 0;
}

/* Body of a block: statements "a.b = value;" or "a := type;" up to '}'.
 * kind: 't'race, 'e'nv, 'c'lock, 'v' event, 0 other. */
static int parse_block(struct lex *l, struct bp_meta *m, int kind,
		       struct bp_class *ev, int64_t *ev_id)
{
	int64_t off_s = 0, off = 0;

	if (expect(l, '{'))
		return -1;
	while (!is_punct(l, '}')) {
		const char *key;
		size_t kn;
		if (l->kind != T_IDENT)
			return fail(l, l->start, "expected an attribute name");
		key = l->text;
		kn = l->tlen;
		next(l);
		while (is_punct(l, '.')) { /* packet.header: keep last part */
			next(l);
			if (l->kind != T_IDENT)
				return fail(l, l->start, "bad attribute name");
			key = l->text;
			kn = l->tlen;
			next(l);
		}
		if (is_punct(l, ':')) { /* ":=" type assignment */
			next(l);
			if (expect(l, '='))
				return -1;
			if (kind == 'v' && kn == 6 && !memcmp(key, "fields", 6) &&
			    is_word(l, "struct")) {
				if (parse_fields(l, ev))
					return -1;
			} else if (skip_statement(l)) {
				return -1;
			}
			continue;
		}
		if (expect(l, '='))
			return -1;
		struct lex val = *l;
		if (l->kind != T_IDENT && l->kind != T_NUM && l->kind != T_STR)
			return fail(l, l->start, "bad value");
		next(l);
		if (expect(l, ';'))
			return -1;
#define KEY(w) (kn == sizeof(w) - 1 && memcmp(key, w, kn) == 0)
		if (kind == 'e') {
			char *v;
			if (val.kind == T_NUM) {
				char tmp[32];
				snprintf(tmp, sizeof tmp, "%" PRId64, val.num);
				v = strdup(tmp);
			} else {
				v = unquote(val.text, val.tlen);
			}
			if (KEY("beamprobe_format_major") && val.kind == T_NUM)
				m->major = (int)val.num;
			if (KEY("beamprobe_format_minor") && val.kind == T_NUM)
				m->minor = (int)val.num;
			if (set_env(m, key, kn, v))
				return fail(l, val.start, "out of memory");
		} else if (kind == 't' && KEY("uuid") && val.kind == T_STR) {
			if (parse_uuid(val.text, val.tlen, m->uuid))
				return fail(l, val.start, "bad trace uuid");
			m->has_uuid = 1;
		} else if (kind == 't' && KEY("byte_order") &&
			   !(val.kind == T_IDENT && val.tlen == 2 &&
			     !memcmp(val.text, "le", 2))) {
			/* the decoder reads little-endian only: a trace said
			 * to be big-endian was decoded as little-endian */
			size_t vn = val.pos - val.start;
			return fail(l, val.start, "byte_order %.*s unsupported "
				    "(le expected)", (int)(vn < 32 ? vn : 32),
				    val.s + val.start);
		} else if (kind == 'c' && KEY("offset_s") && val.kind == T_NUM) {
			off_s = val.num;
		} else if (kind == 'c' && KEY("offset") && val.kind == T_NUM) {
			off = val.num;
		} else if (kind == 'c' && KEY("freq") && val.kind == T_NUM &&
			   val.num != 1000000000) {
			return fail(l, val.start, "clock freq %" PRId64
				    " unsupported (1000000000 expected)",
				    val.num);
		} else if (kind == 'v' && KEY("name") && val.kind == T_STR) {
			size_t n = val.tlen < sizeof ev->name - 1
					   ? val.tlen
					   : sizeof ev->name - 1;
			memcpy(ev->name, val.text, n);
			ev->name[n] = '\0';
		} else if (kind == 'v' && KEY("id") && val.kind == T_NUM) {
			*ev_id = val.num;
		}
#undef KEY
	}
	next(l);
	if (kind == 'c') {
		if (off_s < -(INT64_MAX / 1000000000) + 1 ||
		    off_s > INT64_MAX / 1000000000 - 1 || off < 0 ||
		    off >= 1000000000)
			return fail(l, l->start, "clock offset out of range");
		m->offset_ns = off_s * 1000000000 + off;
	}
	return expect(l, ';');
}

static uint8_t builtin_wire(enum bp_field_type t)
{
	switch (t) {
	case BP_T_U8:
		return BP_W_U8;
	case BP_T_U32:
		return BP_W_U32;
	case BP_T_U64:
		return BP_W_U64;
	case BP_T_STR:
		return BP_W_STR;
	}
	return BP_W_U8;
}

static void builtin_classes(struct bp_meta *m)
{
	memset(m->classes, 0, sizeof m->classes);
	for (unsigned id = 0; id < BP_EV_COUNT; id++) {
		const struct bp_event_desc *d = &bp_event_descs[id];
		struct bp_class *c = &m->classes[id];
		if (!d->name)
			continue;
		snprintf(c->name, sizeof c->name, "%s", d->name);
		c->id = (uint16_t)id;
		c->defined = 1;
		c->nfields = (uint8_t)d->nfields;
		for (unsigned f = 0; f < d->nfields; f++)
			c->types[f] = builtin_wire(d->fields[f].type);
	}
}

void bp_meta_builtin(struct bp_meta *m)
{
	memset(m, 0, sizeof *m);
	m->major = m->minor = -1;
	builtin_classes(m);
}

void bp_meta_free(struct bp_meta *m)
{
	for (unsigned i = 0; i < m->nenv; i++) {
		free(m->env_key[i]);
		free(m->env_val[i]);
	}
	m->nenv = 0;
}

const char *bp_meta_env(const struct bp_meta *m, const char *key)
{
	for (unsigned i = 0; i < m->nenv; i++)
		if (strcmp(m->env_key[i], key) == 0)
			return m->env_val[i];
	return NULL;
}

int bp_meta_no_returns(const struct bp_meta *m)
{
	const char *s = bp_meta_env(m, "returns");

	return s && strcmp(s, "false") == 0;
}

/* Maps each declared class to the built-in one of the same name when its
 * fields start with the built-in fields. */
static int map_classes(struct lex *l, struct bp_meta *m)
{
	for (unsigned i = 0; i < BP_META_MAX_CLASSES; i++) {
		struct bp_class *c = &m->classes[i];
		uint16_t id;
		if (!c->defined)
			continue;
		id = bp_event_id_of(c->name, strlen(c->name));
		c->id = BP_EV_UNKNOWN;
		if (id == BP_EV_UNKNOWN)
			continue;
		const struct bp_event_desc *d = &bp_event_descs[id];
		/* An older minor of the format lacks the trailing fields a
		 * later one added (e.g. the io_error count of "drops"). */
		unsigned common = c->nfields < d->nfields ? c->nfields
							  : d->nfields;
		if (c->bad)
			return fail(l, 0, "event class \"%s\" lacks fields of "
				    "format %d.x", c->name, BP_FORMAT_MAJOR);
		c->missing = (uint8_t)(d->nfields - common);
		for (unsigned f = 0; f < common; f++)
			if (c->types[f] != builtin_wire(d->fields[f].type))
				return fail(l, 0, "event class \"%s\" field %u "
					    "has another type than in format "
					    "%d.x", c->name, f,
					    BP_FORMAT_MAJOR);
		c->id = id;
	}
	return 0;
}

int bp_meta_parse(struct bp_meta *m, const char *text, size_t len,
		  char *err, size_t errlen, size_t *erroff)
{
	struct lex l = {.s = text, .len = len, .err = err, .errlen = errlen,
			.erroff = erroff};
	static const char sig[] = "/* CTF 1.8";
	int seen_trace = 0;

	bp_meta_free(m);
	memset(m, 0, sizeof *m);
	m->major = m->minor = -1;
	if (len < sizeof sig - 1 || memcmp(text, sig, sizeof sig - 1) != 0) {
		fail(&l, 0, "not CTF 1.8 text metadata (no \"/* CTF 1.8\" "
			    "signature)");
		goto bad;
	}
	if (memchr(text, '\0', len)) {
		fail(&l, (size_t)((const char *)memchr(text, '\0', len) - text),
		     "NUL byte in metadata text");
		goto bad;
	}
	next(&l);
	while (l.kind != T_EOF) {
		if (l.kind == T_BAD) {
			fail(&l, l.start, "bad token");
			goto bad;
		}
		if (l.kind != T_IDENT) {
			fail(&l, l.start, "expected a declaration");
			goto bad;
		}
		int kind = is_word(&l, "trace") ? 't'
			   : is_word(&l, "env")  ? 'e'
			   : is_word(&l, "clock") ? 'c'
			   : is_word(&l, "event") ? 'v'
						  : 0;
		size_t at = l.start;
		if (kind == 0) { /* typealias, stream, ...: not needed */
			if (skip_statement(&l))
				goto bad;
			continue;
		}
		next(&l);
		struct bp_class ev = {0};
		int64_t id = -1;
		if (parse_block(&l, m, kind, &ev, &id))
			goto bad;
		if (kind == 't')
			seen_trace = 1;
		if (kind == 'v') {
			if (id < 0 || id >= BP_META_MAX_CLASSES || !ev.name[0]) {
				fail(&l, at, "event without name or with id "
					     "%" PRId64 " out of range", id);
				goto bad;
			}
			if (m->classes[id].defined) {
				fail(&l, at, "event id %" PRId64 " declared twice",
				     id);
				goto bad;
			}
			ev.defined = 1;
			m->classes[id] = ev;
		}
	}
	if (!seen_trace) {
		fail(&l, len, "no trace block");
		goto bad;
	}
	if (m->major >= 0 && m->major != BP_FORMAT_MAJOR) {
		fail(&l, 0, "trace format %d.%d, this reader reads %d.x",
		     m->major, m->minor, BP_FORMAT_MAJOR);
		goto bad;
	}
	if (map_classes(&l, m))
		goto bad;
	m->parsed = 1;
	return 0;
bad:
	/* Keep env and clock if they were read; decode with built-ins. */
	builtin_classes(m);
	m->parsed = 0;
	return -1;
}
