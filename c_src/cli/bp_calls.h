/* bp_calls.h -- call patterns as a trace's env writes them, and which
 * functions they name.
 *
 * The env keys `calls' and `untimed_calls' (docs/format.md) list patterns
 * in Erlang syntax, separated by ", ": "m:f/1, 'Elixir.Foo':'_'/'_'",
 * '_' for any module, function or arity.  A function is named as call
 * events write it: "m:f/1", atoms quoted where Erlang needs quotes, the
 * same rules as the patterns', so a part matches when its text is the
 * pattern's or the pattern's is '_'.
 */
#ifndef BP_CALLS_H
#define BP_CALLS_H

#include <stddef.h>

struct bp_calls_pat {
	char *m, *f, *a; /* owned; NULL: '_' (any) */
};

struct bp_calls {
	struct bp_calls_pat *v; /* owned */
	size_t n;
	int cut; /* the value ended in "...": patterns after v[n - 1] left out */
};

/* Parses the patterns of text (may be NULL: none) into c.  An item that
 * is not "M:F/A" (e.g. the last one of a value the writer cut, ending in
 * "...") is left out, and c->cut set.  Returns 0, or -1 without memory (c then holds the
 * items parsed so far). */
int bp_calls_parse(struct bp_calls *c, const char *text);

/* Whether the function name s (n bytes, "m:f/1") matches a pattern of c. */
int bp_calls_match(const struct bp_calls *c, const char *s, size_t n);

/* Whether the calls of function s (n bytes) have no return event, from
 * the trace's `timed_calls' and `untimed_calls' (each pattern in one of
 * them): s follows the most specific pattern naming it (fewest '_'; two
 * with as many are the same pattern), as its session's match spec did, so
 * m:a/1 with its returns next to m:'_'/'_' without them is timed.  A
 * function neither list names is untimed when the writer cut
 * `untimed_calls' and not `timed_calls' (every traced function has a
 * pattern); a trace without `timed_calls' (written before it) has every
 * function named by an untimed pattern untimed. */
int bp_calls_untimed(const struct bp_calls *timed,
		     const struct bp_calls *untimed, const char *s, size_t n);

void bp_calls_free(struct bp_calls *c);

#endif /* BP_CALLS_H */
