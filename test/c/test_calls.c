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

static int u(const struct bp_calls *tm, const struct bp_calls *un,
	     const char *s)
{
	return bp_calls_untimed(tm, un, s, strlen(s));
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

	/* A function follows its most specific pattern (timed_calls,
	 * untimed_calls): m:a/1 with its returns next to m:'_'/'_' without
	 * them is timed (it was untimed: any untimed pattern). */
	struct bp_calls tm, un;
	ok(bp_calls_parse(&tm, "m:a/1, m:f/'_', n:'_'/'_'") == 0 &&
		   bp_calls_parse(&un, "m:'_'/'_', m:f/2, n:g/1") == 0 &&
		   tm.n == 3 && un.n == 3 && !tm.cut && !un.cut,
	   "timed_calls and untimed_calls");
	ok(!u(&tm, &un, "m:a/1"), "the specific timed pattern wins");
	ok(u(&tm, &un, "m:b/3"), "only the untimed wildcard names m:b/3");
	ok(!u(&tm, &un, "m:f/1"), "m:f/'_' is more specific than m:'_'/'_'");
	ok(u(&tm, &un, "m:f/2"), "m:f/2 more specific than m:f/'_'");
	ok(u(&tm, &un, "n:g/1") && !u(&tm, &un, "n:h/1"),
	   "untimed inside a timed module");
	ok(!u(&tm, &un, "o:h/0"), "no pattern names it: timed");
	bp_calls_free(&un);
	/* untimed_calls cut at 8 KiB: a function no pattern left names had
	 * its pattern in the cut part, an untimed one (every traced
	 * function has a pattern). */
	ok(bp_calls_parse(&un, "m:'_'/'_', x:y/1, x:z/...") == 0 &&
		   un.n == 2 && un.cut,
	   "untimed_calls cut: the cut item left out, cut set");
	ok(u(&tm, &un, "x:z/1") && u(&tm, &un, "p:q/0") &&
		   !u(&tm, &un, "m:a/1") && !u(&tm, &un, "n:k/1"),
	   "untimed_calls cut: what neither list names is untimed");
	bp_calls_free(&tm);
	ok(bp_calls_parse(&tm, "m:a/1, n:h/...") == 0 && tm.cut,
	   "timed_calls cut too");
	ok(!u(&tm, &un, "p:q/0"), "both cut: what neither names is timed");
	bp_calls_free(&tm);
	ok(bp_calls_parse(&tm, NULL) == 0 && !tm.cut && tm.n == 0 &&
		   u(&tm, &un, "m:a/1"),
	   "no timed_calls (an older trace): every untimed pattern counts");
	bp_calls_free(&tm);
	bp_calls_free(&un);
	ok(bp_calls_parse(&un, "x:y/1...") == 0 && un.cut && un.n == 0 &&
		   u(&tm, &un, "a:b/1"),
	   "a value cut in its first item");
	bp_calls_free(&un);
	return tap_done();
}
