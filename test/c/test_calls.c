/* test_calls.c -- the call patterns of a trace's env (c_src/cli/bp_calls.h):
 * the lists beamprobe_session writes (io_lib ~tp of each {M, F, A}, ", "
 * between them), with quoted atoms holding the separators, wildcards, and
 * a value the writer cut ("..."), matched against function names as call
 * events write them. */
#include <string.h>

#include "cli/bp_calls.h"
#include "tap.h"

static int m(const struct bp_calls *c, const char *s)
{
	return bp_calls_match(c, s, strlen(s));
}

static int u(const struct bp_calls *all, const struct bp_calls *un,
	     const char *s)
{
	return bp_calls_untimed(all, un, s, strlen(s));
}

int main(void)
{
	struct bp_calls c;

	ok(bp_calls_parse(&c, NULL) == 0 && c.n == 0, "no env key: none");
	ok(!m(&c, "m:f/1"), "an empty list matches nothing");
	bp_calls_free(&c);

	int rc = bp_calls_parse(&c, "m:f/1, lists:'_'/'_', '_':g/2, "
				    "'a, b':'c:d'/3, x:'/'/2, "
				    "'Elixir.Foo':'bar?'/'_'");
	ok(rc == 0 && c.n == 6,
	   "six patterns, quoted separators inside atoms (got %zu)", c.n);
	ok(m(&c, "m:f/1"), "exact");
	ok(!m(&c, "m:f/2") && !m(&c, "m:g/1") && !m(&c, "mm:f/1"),
	   "another arity, function or module");
	ok(m(&c, "lists:seq/2") && m(&c, "lists:'x y'/0"), "m:'_'/'_'");
	ok(m(&c, "anything:g/2") && !m(&c, "anything:g/3"), "'_':g/2");
	ok(m(&c, "'a, b':'c:d'/3"), "atoms with ', ' and ':' in quotes");
	ok(!m(&c, "'a, b':c/3"), "the quoted function must match whole");
	ok(m(&c, "x:'/'/2") && !m(&c, "x:'/'/1"), "the function '/'");
	ok(m(&c, "'Elixir.Foo':'bar?'/7"), "quoted module, any arity");
	ok(!m(&c, "'Elixir.Foo':bar/7"), "quoting is part of the name");
	ok(!m(&c, "no_colon") && !m(&c, "m:f") && !m(&c, "'m:f/1"),
	   "not a function name: no match");
	bp_calls_free(&c);

	/* Cut by the writer's 8 KiB limit: the last item is left out. */
	rc = bp_calls_parse(&c, "m:f/1, m:g/1...");
	ok(rc == 0 && c.n == 1, "a cut last item is left out (got %zu)", c.n);
	ok(m(&c, "m:f/1") && !m(&c, "m:g/1"), "the items before it stay");
	bp_calls_free(&c);
	ok(bp_calls_parse(&c, "m:f/1, 'a\\'b':g/1, m:'cut...") == 0 &&
		   c.n == 2 && m(&c, "'a\\'b':g/1"),
	   "an escaped quote inside an atom; an open quote at the end");
	bp_calls_free(&c);
	ok(bp_calls_parse(&c, ", ,m:f/1,,") == 0 && c.n == 1,
	   "empty items are skipped");
	bp_calls_free(&c);

	/* A function follows its most specific pattern of `calls', the
	 * last of equal ones: m:a/1 with its returns next to m:'_'/'_'
	 * without them is timed (it was untimed: any untimed pattern). */
	struct bp_calls all, un;
	ok(bp_calls_parse(&all, "m:a/1, m:'_'/'_', m:f/'_', m:'_'/2, "
				"n:g/1, n:g/1") == 0 &&
		   bp_calls_parse(&un, "m:'_'/'_', m:'_'/2, n:g/1") == 0 &&
		   all.n == 6 && un.n == 3,
	   "calls and untimed_calls");
	ok(!u(&all, &un, "m:a/1"), "the specific timed pattern wins");
	ok(u(&all, &un, "m:b/3"), "only the wildcard names m:b/3");
	ok(!u(&all, &un, "m:f/1"), "m:f/'_' is more specific than m:'_'/'_'");
	ok(u(&all, &un, "m:f/2"), "m:'_'/2 after m:f/'_': the last of equal");
	ok(u(&all, &un, "n:g/1"), "a pattern given twice");
	ok(!u(&all, &un, "o:h/0"), "no pattern names it");
	bp_calls_free(&all);
	ok(bp_calls_parse(&all, "x:y/1...") == 0 && all.n == 0 &&
		   u(&all, &un, "m:a/1"),
	   "calls cut before the function's pattern: any untimed one");
	bp_calls_free(&all);
	bp_calls_free(&un);
	return tap_done();
}
