/* bp_filter.c -- print's event filters (see bp_filter.h). */
#include "bp_filter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIT(id) (1ull << (id))

void bp_filter_init(struct bp_filter *f)
{
	memset(f, 0, sizeof *f);
	bp_strtab_init(&f->mfa_seen);
	f->until = UINT64_MAX;
}

static void list_free(struct bp_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

void bp_filter_free(struct bp_filter *f)
{
	list_free(&f->pids);
	list_free(&f->procs);
	list_free(&f->mfas);
	bp_strtab_free(&f->mfa_seen);
	free(f->mfa_verdict);
}

int bp_strlist_add(struct bp_strlist *l, const char *arg)
{
	const char *p = arg;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		const char *next = comma ? comma + 1 : NULL;
		/* "a, b": the blanks around an item are not part of it (' b'
		 * matched nothing, without a word) */
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n == 0)
			return -1;
		char **v = realloc(l->v, (l->n + 1) * sizeof *v);
		if (!v)
			return -1;
		l->v = v;
		if (!(l->v[l->n] = strndup(p, n)))
			return -1;
		l->n++;
		if (!next)
			return 0;
		p = next;
	}
}

/* "<A.B.C>" or "#Port<A.B>", digits only; 1 if s is one. */
static int pid_text(const char *s)
{
	int dots = 0, want = 2;

	if (!strncmp(s, "#Port<", 6)) {
		s += 6;
		want = 1;
	} else if (*s++ != '<') {
		return 0;
	}
	for (;;) {
		if (*s < '0' || *s > '9')
			return 0;
		while (*s >= '0' && *s <= '9')
			s++;
		if (*s == '>')
			return dots == want && s[1] == '\0';
		if (*s++ != '.')
			return 0;
		dots++;
	}
}

int bp_filter_check_pids(struct bp_strlist *l, char *bad, size_t badlen)
{
	for (size_t i = 0; i < l->n; i++) {
		char *v = l->v[i];
		if (!strncmp(v, "#PID<", 5)) /* as --syntax elixir prints it */
			memmove(v, v + 4, strlen(v + 4) + 1);
		if (!pid_text(v)) {
			snprintf(bad, badlen, "%s", l->v[i]);
			return -1;
		}
	}
	return 0;
}

static const struct {
	const char *name;
	uint64_t bits;
} groups[] = {
	{"calls", BIT(BP_EV_CALL) | BIT(BP_EV_RETURN_FROM) |
			  BIT(BP_EV_EXCEPTION_FROM) | BIT(BP_EV_RETURN_TO)},
	{"messages", BIT(BP_EV_SEND) | BIT(BP_EV_SEND_DEAD) |
			     BIT(BP_EV_RECEIVE)},
	{"procs", BIT(BP_EV_SPAWN) | BIT(BP_EV_SPAWNED) | BIT(BP_EV_EXIT) |
			  BIT(BP_EV_LINK) | BIT(BP_EV_UNLINK) |
			  BIT(BP_EV_GETTING_LINKED) |
			  BIT(BP_EV_GETTING_UNLINKED) | BIT(BP_EV_REGISTER) |
			  BIT(BP_EV_UNREGISTER)},
	{"sched", BIT(BP_EV_SCHED_IN) | BIT(BP_EV_SCHED_OUT)},
	{"gc", BIT(BP_EV_GC_MINOR_START) | BIT(BP_EV_GC_MINOR_END) |
		       BIT(BP_EV_GC_MAJOR_START) | BIT(BP_EV_GC_MAJOR_END)},
	{"ports", BIT(BP_EV_PORT_OPEN) | BIT(BP_EV_PORT_CLOSED)},
	{"return", BIT(BP_EV_RETURN_FROM)},
	{"exception", BIT(BP_EV_EXCEPTION_FROM)},
};

int bp_filter_add_kinds(struct bp_filter *f, const char *arg, char *bad,
			size_t badlen)
{
	const char *p = arg;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		while (n && (*p == ' ' || *p == '\t')) { /* as strlist */
			p++;
			n--;
		}
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		uint16_t id = bp_event_id_of(p, n);
		uint64_t bits = 0;
		if (id != BP_EV_UNKNOWN)
			bits = BIT(id);
		for (size_t g = 0; !bits && g < sizeof groups / sizeof *groups;
		     g++)
			if (strlen(groups[g].name) == n &&
			    !memcmp(groups[g].name, p, n))
				bits = groups[g].bits;
		if (!bits && n == 7 && !memcmp(p, "unknown", 7)) {
			f->unknown_kind = 1;
			bits = 0;
		} else if (!bits) {
			snprintf(bad, badlen, "%.*s", (int)n, p);
			return -1;
		}
		f->kinds |= bits;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* Parses digits[.frac] into ns; returns the end or NULL. */
static const char *parse_secs(const char *s, int64_t max_int, int64_t *ns)
{
	int64_t v = 0, frac = 0, scale = 100000000;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return NULL;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		if (v > max_int)
			return NULL;
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return NULL;
		for (; *p >= '0' && *p <= '9'; p++) {
			frac += (*p - '0') * scale;
			scale /= 10;
		}
	}
	*ns = v * 1000000000 + frac;
	return p;
}

int bp_time_spec_parse(const char *s, struct bp_time_spec *t)
{
	int64_t h, m, sec;
	const char *p;

	if (s[0] == '+') {
		p = parse_secs(s + 1, 1000000000, &t->ns);
		t->kind = BP_TIME_REL;
		return p && !*p ? 0 : -1;
	}
	/* HH:MM:SS[.frac] */
	if (!(p = parse_secs(s, 23, &h)) || *p != ':' || h % 1000000000)
		return -1;
	if (!(p = parse_secs(p + 1, 59, &m)) || *p != ':' || m % 1000000000)
		return -1;
	if (!(p = parse_secs(p + 1, 60, &sec)) || *p)
		return -1;
	t->kind = BP_TIME_WALL;
	t->ns = h * 3600 + m * 60 + sec;
	return 0;
}

static uint64_t resolve(const struct bp_time_spec *t,
			const struct bp_reader *r, uint64_t dflt)
{
	uint64_t start = r->start_ts == UINT64_MAX ? 0 : r->start_ts;

	if (t->kind == BP_TIME_NONE || t->kind == BP_TIME_REL)
		return dflt; /* REL: bp_filter_anchor() */
	/* Wall time of day: on the local day of the first event; a time
	 * more than 12 h before the start means the next day. */
	int64_t wall0 = bp_reader_wall(r, start);
	time_t sec = (time_t)(wall0 / 1000000000);
	struct tm tm;
	if (!localtime_r(&sec, &tm))
		return dflt;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_isdst = -1;
	int64_t midnight = (int64_t)mktime(&tm) * 1000000000;
	int64_t target = midnight + t->ns;
	if (target < wall0 - 12 * 3600 * 1000000000ll)
		target += 24 * 3600 * 1000000000ll;
	int64_t ts = target - r->meta.offset_ns;
	return ts < 0 ? 0 : (uint64_t)ts;
}

/* Inclusive at the printed precision: a line printed with time T
 * (microseconds) is in "--until T" although its event may lie up to
 * 999 ns after T. */
static uint64_t until_inclusive(const struct bp_reader *r, uint64_t until)
{
	if (until == UINT64_MAX)
		return until;
	int64_t wall = bp_reader_wall(r, until);
	int64_t end = wall - (wall % 1000 + 1000) % 1000 + 999;
	return until + (uint64_t)(end - wall);
}

void bp_filter_anchor(struct bp_filter *f, const struct bp_reader *r,
		      uint64_t ts)
{
	f->anchor_pending = 0;
	if (f->since_spec.kind == BP_TIME_REL)
		f->since = ts + (uint64_t)f->since_spec.ns;
	if (f->until_spec.kind == BP_TIME_REL)
		f->until = until_inclusive(r, ts + (uint64_t)f->until_spec.ns);
}

void bp_filter_resolve(struct bp_filter *f, const struct bp_reader *r)
{
	f->since = resolve(&f->since_spec, r, 0);
	f->until = until_inclusive(r, resolve(&f->until_spec, r, UINT64_MAX));
	/* "+SECS after the first event": the first event stats counts, not
	 * the process records written at the session's start (they made
	 * +0.000002 end before the first call printed, 0.36 ms later) */
	f->anchor_pending = f->since_spec.kind == BP_TIME_REL ||
			    f->until_spec.kind == BP_TIME_REL;
	/* --proc names in the form the model keeps them (either form
	 * given: my_name, 'my name', my name). */
	for (size_t i = 0; i < f->procs.n; i++) {
		size_t n = strlen(f->procs.v[i]), cap = 4 * n + 3;
		char *c = malloc(cap);
		if (!c)
			continue;
		bp_name_norm(c, cap, f->procs.v[i], n);
		free(f->procs.v[i]);
		f->procs.v[i] = c;
	}
}

int bp_glob(const char *pat, const char *s, size_t n)
{
	const char *star = NULL;
	size_t i = 0, mark = 0;

	while (i < n) {
		if (*pat == '*') {
			star = ++pat;
			mark = i;
		} else if (*pat && *pat == s[i]) {
			pat++;
			i++;
		} else if (star) {
			pat = star;
			i = ++mark;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

/* Whether function text s matches a --mfa pattern; a pattern without
 * '/' matches any arity. */
static int mfa_match(const struct bp_strlist *l, const char *s, size_t n)
{
	for (size_t i = 0; i < l->n; i++) {
		const char *pat = l->v[i];
		size_t k = n;
		if (!strchr(pat, '/')) {
			const char *slash = memchr(s, '/', n);
			if (slash)
				k = (size_t)(slash - s);
		}
		if (bp_glob(pat, s, k))
			return 1;
	}
	return 0;
}

static int cached_mfa_match(struct bp_filter *f, const char *s, size_t n)
{
	uint32_t id = bp_strtab_intern(&f->mfa_seen, s, n);

	if (id == BP_MAP_NONE)
		return mfa_match(&f->mfas, s, n);
	if (id >= f->mfa_cap) {
		size_t cap = f->mfa_cap ? f->mfa_cap * 2 : 256;
		while (cap <= id)
			cap *= 2;
		uint8_t *v = realloc(f->mfa_verdict, cap);
		if (!v)
			return mfa_match(&f->mfas, s, n);
		memset(v + f->mfa_cap, 0, cap - f->mfa_cap);
		f->mfa_verdict = v;
		f->mfa_cap = cap;
	}
	if (!f->mfa_verdict[id])
		f->mfa_verdict[id] = mfa_match(&f->mfas, s, n) ? 2 : 1;
	return f->mfa_verdict[id] == 2;
}

static int in_list(const struct bp_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (s && strcmp(l->v[i], s) == 0)
			return 1;
	return 0;
}

int bp_filter_match(struct bp_filter *f, const struct bp_event *e,
		    const struct bp_proc *p)
{
	/* --event unknown alone is a kind filter too (it let every event
	 * through: kinds stayed 0) */
	int by_kind = f->kinds || f->unknown_kind;

	if (e->id == BP_EV_UNKNOWN) {
		if (by_kind && !f->unknown_kind)
			return 0;
	} else if (by_kind ? !(f->kinds & BIT(e->id))
			   : e->id == BP_EV_PROCESS) {
		return 0;
	}
	if (f->pids.n && (!p || !in_list(&f->pids, bp_proc_text(p))))
		return 0;
	if (f->procs.n && (!p || !in_list(&f->procs, p->name)))
		return 0;
	if (f->mfas.n) {
		switch (e->id) {
		case BP_EV_CALL:
		case BP_EV_RETURN_FROM:
		case BP_EV_EXCEPTION_FROM:
		case BP_EV_RETURN_TO:
			return cached_mfa_match(f, e->str[BP_FLD_MFA],
						e->len[BP_FLD_MFA]);
		default:
			return 0;
		}
	}
	return 1;
}
