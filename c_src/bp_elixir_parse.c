/* bp_elixir_parse.c -- the parser of bp_elixir.c: captured Erlang-syntax
 * text (bp_term.c's output, or anything else: it must never read past
 * the text nor loop) to the tree of bp_elixir_parse.h.  Every loop
 * advances the input, recursion is bounded by MAX_NEST (deeper text
 * becomes one raw node), and the node and character arrays are sized by
 * the caller from the input length.
 */
#include "bp_elixir_parse.h"

#include <string.h>

#define MAX_NEST 200

static uint32_t new_node(struct px *p, enum ntype t)
{
	struct node *x;

	if (p->nn == p->ncap)
		return NONE;
	x = &p->nd[p->nn];
	memset(x, 0, sizeof *x);
	x->type = (uint8_t)t;
	x->kid = x->next = x->tail = NONE;
	x->off = (uint32_t)p->i;
	return (uint32_t)p->nn++;
}

static int at(const struct px *p, const char *lit)
{
	size_t k = strlen(lit);

	return p->i <= p->n && p->n - p->i >= k &&
	       !memcmp(p->s + p->i, lit, k);
}

static void skip_sp(struct px *p)
{
	while (p->i < p->n && p->s[p->i] == ' ')
		p->i++;
}

/* One UTF-8 character of the input (a byte as itself if not UTF-8). */
static uint32_t next_char(struct px *p)
{
	const unsigned char *u = (const unsigned char *)p->s + p->i;
	size_t left = p->n - p->i;
	uint32_t c = u[0];
	int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;

	if (k && (size_t)k < left) {
		uint32_t v = c & (0x3F >> k);
		int ok = 1;
		for (int j = 1; j <= k; j++) {
			if ((u[j] & 0xC0) != 0x80)
				ok = 0;
			v = v << 6 | (u[j] & 0x3F);
		}
		if (ok) {
			p->i += (size_t)k + 1;
			return v;
		}
	}
	p->i++;
	return c;
}

static void add_cp(struct px *p, uint32_t c)
{
	if (p->ncp < p->cpcap)
		p->cp[p->ncp++] = c;
}

/* A quoted text ('atom' or "string") decoded into cps, the opening quote
 * at p->i.  Returns 0 if it does not end. */
static int quoted(struct px *p, char q)
{
	uint32_t start = (uint32_t)p->ncp;

	p->i++;
	while (p->i < p->n && p->s[p->i] != q) {
		uint32_t c;
		if (p->s[p->i] != '\\') {
			add_cp(p, next_char(p));
			continue;
		}
		if (++p->i >= p->n)
			return 0;
		c = (unsigned char)p->s[p->i++];
		switch (c) {
		case 'n': c = '\n'; break;
		case 't': c = '\t'; break;
		case 'r': c = '\r'; break;
		case 'v': c = '\v'; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'e': c = 27; break;
		case 'd': c = 127; break;
		case 's': c = ' '; break;
		case 'x':
			if (p->i < p->n && p->s[p->i] == '{') {
				c = 0;
				p->i++;
				while (p->i < p->n && p->s[p->i] != '}') {
					char h = p->s[p->i++];
					c = c * 16 + (uint32_t)(h <= '9' ? h - '0'
							       : (h | 32) - 'a' + 10);
				}
				if (p->i < p->n)
					p->i++;
			}
			break;
		default:
			if (c >= '0' && c <= '7') { /* octal, up to 3 digits */
				c -= '0';
				for (int k = 0; k < 2 && p->i < p->n &&
						p->s[p->i] >= '0' && p->s[p->i] <= '7';
				     k++)
					c = c * 8 + (uint32_t)(p->s[p->i++] - '0');
			}
			break; /* \\ \' \" and others: the character */
		}
		add_cp(p, c);
	}
	if (p->i >= p->n) {
		/* Cut inside the text: the "..." the renderer appended is
		 * the cut's mark, not the text's. */
		if (p->ncp >= start + 3 && p->cp[p->ncp - 1] == '.' &&
		    p->cp[p->ncp - 2] == '.' && p->cp[p->ncp - 3] == '.')
			p->ncp -= 3;
		return 0;
	}
	p->i++;
	return 1;
}

static int atom_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '@' || c >= 0x80;
}

static uint32_t term(struct px *p);

static void append(struct px *p, uint32_t parent, uint32_t *last, uint32_t k)
{
	if (k == NONE)
		return;
	if (*last == NONE)
		p->nd[parent].kid = k;
	else
		p->nd[*last].next = k;
	*last = k;
}

/* Elements up to `close', separated by ','.  For a list, '|' starts the
 * tail; for a map, each element is a key, " => ", a value.  A text that
 * stops early (the byte limit) leaves the container open: a CUT child. */
static int closing(struct px *p, uint32_t me, char close)
{
	skip_sp(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		return 1;
	}
	p->nd[me].open = 1; /* the text stops here: left open, as it was */
	return 0;
}

static uint32_t container(struct px *p, enum ntype t, const char *open,
			  char close)
{
	uint32_t me = new_node(p, t), last = NONE;

	p->i += strlen(open);
	if (me == NONE)
		return NONE;
	skip_sp(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		return me;
	}
	for (;;) {
		uint32_t k = term(p);
		append(p, me, &last, k);
		if (k == NONE || p->nd[k].type == N_CUT) {
			closing(p, me, close);
			return me;
		}
		skip_sp(p);
		if (t == N_MAP) {
			if (at(p, "...")) { /* cut after a key */
				append(p, me, &last, term(p));
				p->nd[me].open = 1;
				return me;
			}
			if (!at(p, "=>")) {
				p->nd[me].open = 1;
				return me;
			}
			p->i += 2;
			append(p, me, &last, term(p));
			skip_sp(p);
		}
		if (at(p, "...")) {
			/* Cut right after a whole element ("[a,b..."): the
			 * rest is one cut element, and the text ends here. */
			append(p, me, &last, term(p));
			p->nd[me].open = 1;
			return me;
		}
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (t == N_LIST && p->i < p->n && p->s[p->i] == '|') {
			p->i++;
			p->nd[me].tail = term(p);
		}
		closing(p, me, close);
		return me;
	}
}

static uint32_t number(struct px *p, uint32_t me)
{
	if (p->i < p->n && p->s[p->i] == '-')
		p->i++;
	while (p->i < p->n) {
		char c = p->s[p->i];
		if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') ||
		    c == 'e' || c == '#' ||
		    ((c == '-' || c == '+') && p->s[p->i - 1] == 'e'))
			p->i++;
		else if (c == '.' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' &&
			 p->s[p->i + 1] <= '9')
			p->i++;
		else
			break;
	}
	if (at(p, "...")) /* a bignum cut by the byte limit */
		p->i += 3;
	p->nd[me].len = (uint32_t)(p->i - p->nd[me].off);
	return me;
}

/* Binary: <<>>, <<...>>, <<"text"...>>, <<1,2,...>>, <<1,5:3>>. */
static uint32_t binary(struct px *p, uint32_t me)
{
	struct node *x = &p->nd[me];

	p->i += 2;
	x->off = (uint32_t)p->ncp;
	if (at(p, "...>>")) {
		p->i += 5;
		x->cut = 2;
		return me;
	}
	if (p->i < p->n && p->s[p->i] == '"') {
		if (!quoted(p, '"'))
			x->cut = 1;
		if (at(p, "..."))
			p->i += 3, x->cut = 1;
	} else {
		while (p->i < p->n && p->s[p->i] != '>') {
			uint32_t v = 0;
			if (at(p, "...")) {
				p->i += 3;
				x->cut = 1;
				break;
			}
			if (p->s[p->i] < '0' || p->s[p->i] > '9')
				break;
			while (p->i < p->n && p->s[p->i] >= '0' &&
			       p->s[p->i] <= '9')
				v = v * 10 + (uint32_t)(p->s[p->i++] - '0');
			if (p->i < p->n && p->s[p->i] == ':') {
				uint32_t b = 0;
				p->i++;
				while (p->i < p->n && p->s[p->i] >= '0' &&
				       p->s[p->i] <= '9')
					b = b * 10 + (uint32_t)(p->s[p->i++] - '0');
				x->bits = (uint8_t)b;
				x->tailv = v;
			} else {
				add_cp(p, v);
			}
			if (p->i < p->n && p->s[p->i] == ',')
				p->i++;
		}
	}
	if (at(p, ">>"))
		p->i += 2;
	else
		x->cut = 1;
	x->len = (uint32_t)p->ncp - x->off;
	return me;
}

/* A token up to and including the '>' that closes it. */
static uint32_t angle(struct px *p, uint32_t me)
{
	const char *e = memchr(p->s + p->i, '>', p->n - p->i);

	p->i = e ? (size_t)(e - p->s) + 1 : p->n;
	p->nd[me].len = (uint32_t)(p->i - p->nd[me].off);
	return me;
}

static uint32_t atom_node(struct px *p)
{
	uint32_t me = new_node(p, N_ATOM);

	if (me == NONE)
		return NONE;
	p->nd[me].off = (uint32_t)p->ncp;
	if (p->i >= p->n) { /* no atom here */
		p->nd[me].type = N_RAW;
		p->nd[me].off = 0;
		p->nd[me].len = 0;
		return me;
	}
	if (p->s[p->i] == '\'') {
		if (!quoted(p, '\'')) {
			p->nd[me].type = N_RAW;
			p->nd[me].off = 0;
			p->nd[me].len = 0;
			return me;
		}
	} else {
		while (p->i < p->n && atom_char((unsigned char)p->s[p->i]))
			add_cp(p, next_char(p));
	}
	p->nd[me].len = (uint32_t)p->ncp - p->nd[me].off;
	return me;
}

static uint32_t term(struct px *p)
{
	uint32_t me;
	unsigned char c;

	skip_sp(p);
	if (p->i >= p->n || at(p, "...")) { /* cut here, or by the byte limit */
		me = new_node(p, N_CUT);
		if (p->i < p->n)
			p->i += 3;
		return me;
	}
	if (p->nest >= MAX_NEST || p->nn + 8 >= p->ncap) {
		me = new_node(p, N_RAW);
		if (me != NONE)
			p->nd[me].len = (uint32_t)(p->n - p->i);
		p->i = p->n;
		return me;
	}
	c = (unsigned char)p->s[p->i];
	p->nest++;
	if (c == '[')
		me = container(p, N_LIST, "[", ']');
	else if (c == '{')
		me = container(p, N_TUPLE, "{", '}');
	else if (at(p, "#{"))
		me = container(p, N_MAP, "#{", '}');
	else if (at(p, "<<") && (me = new_node(p, N_BIN)) != NONE)
		me = binary(p, me);
	else if (at(p, "#Port<") && (me = new_node(p, N_PORT)) != NONE)
		me = angle(p, me);
	else if (at(p, "#Ref<") && (me = new_node(p, N_REF)) != NONE)
		me = angle(p, me);
	else if (at(p, "#Fun<") && (me = new_node(p, N_FUN)) != NONE)
		me = angle(p, me);
	else if (c == '<' && (me = new_node(p, N_PID)) != NONE)
		me = angle(p, me);
	else if (c == '"' && (me = new_node(p, N_STR)) != NONE) {
		p->nd[me].off = (uint32_t)p->ncp;
		if (!quoted(p, '"'))
			p->nd[me].cut = 1;
		if (at(p, "..."))
			p->i += 3, p->nd[me].cut = 1;
		p->nd[me].len = (uint32_t)p->ncp - p->nd[me].off;
	} else if (at(p, "fun ") && (me = new_node(p, N_EXTFUN)) != NONE) {
		uint32_t last = NONE, k;
		p->i += 4;
		append(p, me, &last, atom_node(p));
		if (p->i < p->n && p->s[p->i] == ':')
			p->i++;
		append(p, me, &last, atom_node(p));
		if (p->i < p->n && p->s[p->i] == '/')
			p->i++;
		if ((k = new_node(p, N_NUM)) != NONE)
			append(p, me, &last, number(p, k));
	} else if ((c == '-' || (c >= '0' && c <= '9')) &&
		   (me = new_node(p, N_NUM)) != NONE)
		me = number(p, me);
	else if (c == '\'' || atom_char(c))
		me = atom_node(p);
	else if ((me = new_node(p, N_RAW)) != NONE) {
		p->i++;
		p->nd[me].len = 1;
	}
	p->nest--;
	return me;
}

uint32_t bp_exp_term(struct px *p)
{
	return term(p);
}

uint32_t bp_exp_atom(struct px *p)
{
	return atom_node(p);
}

void bp_exp_skip_sp(struct px *p)
{
	skip_sp(p);
}
