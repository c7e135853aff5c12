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
	c->cut = 0;
	if (!text)
		return 0;
	/* No pattern ends in "...": the writer cut the value there. */
	c->cut = strlen(text) >= 3 &&
		 strcmp(text + strlen(text) - 3, "...") == 0;
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

/* The fewest '_' of the patterns of c naming the function (4: none). */
static int min_wild(const struct bp_calls *c, const char *s, size_t colon,
		    size_t slash, size_t n)
{
	int w = 4;

	for (size_t i = 0; i < c->n; i++)
		if (wild(&c->v[i]) < w &&
		    pat_match(&c->v[i], s, colon, slash, n))
			w = wild(&c->v[i]);
	return w;
}

int bp_calls_untimed(const struct bp_calls *timed,
		     const struct bp_calls *untimed, const char *s, size_t n)
{
	size_t colon, slash;
	int u, t;

	if ((!untimed->n && !untimed->cut) || split(s, n, &colon, &slash) < 0)
		return 0;
	u = min_wild(untimed, s, colon, slash, n);
	t = min_wild(timed, s, colon, slash, n);
	if (u == 4 && t == 4) /* named by a pattern the writer cut */
		return untimed->cut && !timed->cut;
	return u < t;
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
	c->cut = 0;
}
