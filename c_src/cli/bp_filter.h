/* bp_filter.h -- the event filters of `beamprobe print`: process texts
 * and names, function patterns with '*' wildcards, event kinds and
 * groups, a time window and a substring of the formatted line.
 */
#ifndef BP_FILTER_H
#define BP_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "bp_hash.h"
#include "bp_model.h"
#include "bp_reader.h"

struct bp_strlist {
	char **v;   /* owned strings */
	size_t n;
};

/* A --since/--until value before it is resolved against the trace. */
struct bp_time_spec {
	enum { BP_TIME_NONE, BP_TIME_REL, BP_TIME_WALL } kind;
	int64_t ns;  /* REL: ns after the first event; WALL: ns after local
		      * midnight */
};

struct bp_filter {
	struct bp_strlist pids, procs, mfas;
	uint64_t kinds;                 /* bit per event id; 0: default */
	int unknown_kind;               /* show classes unknown to us */
	struct bp_time_spec since_spec, until_spec;
	uint64_t since, until;          /* resolved ts bounds (inclusive) */
	int anchor_pending;             /* a +SECS bound waits for the
					 * first event (bp_filter_anchor) */
	const char *grep;               /* weak; NULL: none */
	struct bp_strtab mfa_seen;      /* mfa text -> verdict index */
	uint8_t *mfa_verdict;           /* owned, by mfa_seen id */
	size_t mfa_cap;
};

void bp_filter_init(struct bp_filter *f);
void bp_filter_free(struct bp_filter *f);

/* Appends the comma-separated items of arg to l, without the blanks
 * around each.  Returns 0 or -1 (out of memory, or an empty item). */
int bp_strlist_add(struct bp_strlist *l, const char *arg);

/* Checks that every item of l is a pid or port as the trace writes them
 * ('<0.123.0>', '#Port<0.5>'; '#PID<0.123.0>', Elixir's form, is taken
 * as '<0.123.0>'): one that is not could match no event.  Returns 0, or
 * -1 with the first bad item in bad (at most badlen bytes). */
int bp_filter_check_pids(struct bp_strlist *l, char *bad, size_t badlen);

/* Adds the event kinds or groups in the comma-separated list arg (e.g.
 * "call,send" or "calls,gc").  Returns 0, or -1 naming nothing known
 * (bad receives the unknown item, at most badlen bytes). */
int bp_filter_add_kinds(struct bp_filter *f, const char *arg, char *bad,
			size_t badlen);

/* Parses "HH:MM:SS[.frac]" (local wall time) or "+SECS[.frac]".  Returns
 * 0 or -1. */
int bp_time_spec_parse(const char *s, struct bp_time_spec *t);

/* Resolves the time window against the trace (first event ts and wall
 * offset).  Call after bp_reader_open. */
void bp_filter_resolve(struct bp_filter *f, const struct bp_reader *r);

/* Resolves the +SECS bounds against ts, the time of the trace's first
 * event (not a process record nor a drops event, which are written at
 * the session's start and stop: stats' first event); until then
 * (anchor_pending) they let everything through. */
void bp_filter_anchor(struct bp_filter *f, const struct bp_reader *r,
		      uint64_t ts);

/* '*' matches any run of characters; everything else is literal.  No
 * recursion: linear backtracking on the last '*'. */
int bp_glob(const char *pat, const char *s, size_t n);

/*
 * Whether e (of process p, may be NULL) passes the process, function and
 * kind filters (not the time window nor --grep).  Never fails.
 */
int bp_filter_match(struct bp_filter *f, const struct bp_event *e,
		    const struct bp_proc *p);

#endif /* BP_FILTER_H */
