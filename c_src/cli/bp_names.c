/* bp_names.c -- registered names: their one written form (Erlang atom
 * syntax, whichever form the trace used) and print's first pass that
 * gives every process the name it had when the trace began.
 *
 * Traces name processes in two forms: "process" events written at the
 * end of a session may carry the raw atom text (my name), "register"
 * events Erlang syntax ('my name').  bp_name_norm maps both to the
 * Erlang form, so labels do not change form mid-trace, --proc matches
 * either, and a control character in a name is escaped (\n), never
 * written raw.
 */
#include "bp_names.h"

#include <stdlib.h>
#include <string.h>

#include "../bp_atom_syntax.h"

/* A valid unquoted atom: a lowercase letter, then letters, digits, _
 * and @ (bytes >= 0x80, UTF-8 letters, are accepted after the first). */
static int unquoted(const char *s, size_t n)
{
	if (!n || s[0] < 'a' || s[0] > 'z')
		return 0;
	for (size_t i = 1; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(c >= 0x80 || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '@'))
			return 0;
	}
	return !bp_atom_reserved(s, n);
}

/* Whether s is a complete quoted atom: '...' with every ' inside
 * escaped. */
static int quoted(const char *s, size_t n)
{
	if (n < 2 || s[0] != '\'' || s[n - 1] != '\'')
		return 0;
	for (size_t i = 1; i < n - 1; i++) {
		if (s[i] == '\\') {
			if (++i == n - 1)
				return 0; /* the last quote is escaped */
		} else if (s[i] == '\'') {
			return 0;
		}
	}
	return 1;
}

struct sink {
	char *d;
	size_t cap, n;
};

static void put(struct sink *k, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++, k->n++)
		if (k->n + 1 < k->cap)
			k->d[k->n] = s[i];
}

/* Byte c escaped as in Erlang source. */
static void put_escaped(struct sink *k, unsigned char c)
{
	static const char esc[] = "\n\\n\t\\t\r\\r\v\\v\b\\b\f\\f\033\\e"
				  "\177\\d";
	char buf[5];

	for (size_t i = 0; i + 2 < sizeof esc; i += 3)
		if ((unsigned char)esc[i] == c) {
			put(k, esc + i + 1, 2);
			return;
		}
	buf[0] = '\\';
	buf[1] = (char)('0' + (c >> 6));
	buf[2] = (char)('0' + ((c >> 3) & 7));
	buf[3] = (char)('0' + (c & 7));
	put(k, buf, 4);
}

size_t bp_name_norm(char *dst, size_t cap, const char *s, size_t n)
{
	struct sink k = {dst, cap, 0};
	int q = quoted(s, n);

	if (q || unquoted(s, n)) {
		/* Already Erlang syntax; escape raw control bytes if any. */
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)s[i];
			if (c < 0x20 || c == 0x7f)
				put_escaped(&k, c);
			else
				put(&k, s + i, 1);
		}
	} else {
		put(&k, "'", 1);
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)s[i];
			if (c == '\'' || c == '\\') {
				put(&k, "\\", 1);
				put(&k, s + i, 1);
			} else if (c < 0x20 || c == 0x7f) {
				put_escaped(&k, c);
			} else {
				put(&k, s + i, 1);
			}
		}
		put(&k, "'", 1);
	}
	if (cap) {
		if (k.n >= cap)
			k.n = cap - 1;
		dst[k.n] = '\0';
	}
	return k.n;
}

static void learn_one(void *ctx, const struct bp_event *e)
{
	bp_model_apply(ctx, e);
}

void bp_names_prepare(struct bp_model *m, const char *dir)
{
	struct bp_reader r;
	const struct bp_event *e;
	struct bp_map seen;

	/* 1. The texts and names known at the end of each stream. */
	if (bp_reader_open(&r, dir,
			   BP_READER_QUIET | BP_READER_PROCESS_ONLY |
				   BP_READER_UNPRIMED) != 0)
		return;
	bp_reader_tail_processes(&r, learn_one, m);
	bp_reader_close(&r);
	/* 2. A process whose first name event is a register had no name
	 * before it; one whose first is an unregister had that name. */
	if (bp_reader_open(&r, dir, BP_READER_QUIET | BP_READER_NAMES_ONLY))
		return;
	bp_map_init(&seen);
	while ((e = bp_reader_next(&r))) {
		if (!e->pid || bp_map_get(&seen, e->pid) != BP_MAP_NONE)
			continue;
		if (bp_map_put(&seen, e->pid, 1) != 0)
			break;
		struct bp_proc *p = bp_model_proc(m, e->pid);
		if (!p)
			break;
		bp_model_set_name(m, p,
				  e->id == BP_EV_UNREGISTER
					  ? e->str[BP_FLD(UNREGISTER, name)]
					  : NULL,
				  e->len[BP_FLD(UNREGISTER, name)]);
		free(p->old_name);
		p->old_name = NULL;
	}
	bp_map_free(&seen);
	bp_reader_close(&r);
}
