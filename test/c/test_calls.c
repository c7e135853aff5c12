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
	return tap_done();
}
