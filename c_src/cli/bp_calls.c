/* bp_calls.c -- call patterns of a trace's env (bp_calls.h). */
#include <stdlib.h>
#include <string.h>

#include "bp_calls.h"

/* Splits s[0..n) as M:F/A at the first ':' and the last '/' outside
 * quotes ('...', with \-escapes inside).  Returns 0 or -1. */
static int split(const char *s, size_t n, size_t *colon, size_t *slash)
{
	int q = 0;

	*colon = *slash = n;
	for (size_t i = 0; i < n; i++) {
		if (q) {
			if (s[i] == '\\')
				i++;
			else if (s[i] == '\'')
				q = 0;
		} else if (s[i] == '\'') {
			q = 1;
		} else if (s[i] == ':' && *colon == n) {
			*colon = i;
		} else if (s[i] == '/' && *colon != n) {
			*slash = i;
		}
	}
	return q || *colon == n || *slash == n || *colon == 0 ||
			       *slash == *colon + 1 || *slash + 1 == n
		       ? -1
		       : 0;
}

static int is_any(const char *s, size_t n)
{
	return n == 3 && memcmp(s, "'_'", 3) == 0;
}

static int arity_ok(const char *s, size_t n)
{
	if (is_any(s, n))
		return 1;
	if (n > 3)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

/* The part s[0..n) as a pattern part: NULL for '_', else a copy; *bad on
 * no memory. */
static char *part(const char *s, size_t n, int *bad)
{
	char *p;

	if (is_any(s, n))
		return NULL;
	if (!(p = malloc(n + 1))) {
		*bad = 1;
		return NULL;
	}
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static int add(struct bp_calls *c, const char *s, size_t n)
{
	size_t colon, slash;
	struct bp_calls_pat *v, pat;
	int bad = 0;

	if (split(s, n, &colon, &slash) < 0 ||
	    !arity_ok(s + slash + 1, n - slash - 1))
		return 0; /* not a pattern: left out */
	pat.m = part(s, colon, &bad);
	pat.f = part(s + colon + 1, slash - colon - 1, &bad);
	pat.a = part(s + slash + 1, n - slash - 1, &bad);
	if (bad || !(v = realloc(c->v, (c->n + 1) * sizeof *v))) {
		free(pat.m);
		free(pat.f);
		free(pat.a);
		return -1;
	}
	c->v = v;
	c->v[c->n++] = pat;
	return 0;
}

int bp_calls_parse(struct bp_calls *c, const char *text)
{
	const char *s = text, *item;
	int q = 0;

	c->v = NULL;
	c->n = 0;
	if (!text)
		return 0;
	for (item = s;; s++) {
		if (*s && q) {
			if (*s == '\\' && s[1])
				s++;
			else if (*s == '\'')
				q = 0;
			continue;
		}
		if (*s == '\'') {
			q = 1;
			continue;
		}
		if (*s && *s != ',')
			continue;
		while (item < s && *item == ' ')
			item++;
		if (s > item && add(c, item, (size_t)(s - item)) < 0)
			return -1;
		if (!*s)
			return 0;
		item = s + 1;
	}
}

static int part_eq(const char *p, const char *s, size_t n)
{
	return !p || (strlen(p) == n && memcmp(p, s, n) == 0);
}

static int pat_match(const struct bp_calls_pat *p, const char *s,
		     size_t colon, size_t slash, size_t n)
{
	return part_eq(p->m, s, colon) &&
	       part_eq(p->f, s + colon + 1, slash - colon - 1) &&
	       part_eq(p->a, s + slash + 1, n - slash - 1);
}

static int wild(const struct bp_calls_pat *p)
{
	return !p->m + !p->f + !p->a;
}

static int str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static int pat_eq(const struct bp_calls_pat *p, const struct bp_calls_pat *q)
{
	return str_eq(p->m, q->m) && str_eq(p->f, q->f) && str_eq(p->a, q->a);
}

int bp_calls_match(const struct bp_calls *c, const char *s, size_t n)
{
	size_t colon, slash;

	if (!c->n || split(s, n, &colon, &slash) < 0)
		return 0;
	for (size_t i = 0; i < c->n; i++) {
		if (pat_match(&c->v[i], s, colon, slash, n))
			return 1;
	}
	return 0;
}

int bp_calls_untimed(const struct bp_calls *calls,
		     const struct bp_calls *untimed, const char *s, size_t n)
{
	const struct bp_calls_pat *best = NULL;
	size_t colon, slash;

	if (!untimed->n || split(s, n, &colon, &slash) < 0)
		return 0;
	for (size_t i = 0; i < calls->n; i++) {
		const struct bp_calls_pat *p = &calls->v[i];
		if (pat_match(p, s, colon, slash, n) &&
		    (!best || wild(p) <= wild(best)))
			best = p;
	}
	if (!best) /* not among the (cut) calls: any untimed pattern */
		return bp_calls_match(untimed, s, n);
	for (size_t i = 0; i < untimed->n; i++)
		if (pat_eq(&untimed->v[i], best))
			return 1;
	return 0;
}

void bp_calls_free(struct bp_calls *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].m);
		free(c->v[i].f);
		free(c->v[i].a);
	}
	free(c->v);
	c->v = NULL;
	c->n = 0;
}
