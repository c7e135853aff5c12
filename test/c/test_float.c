/* test_float.c -- the float text of c_src/bp_float.c (the shortest
 * round-trip form), without the VM: for random bit patterns, decimals of 1
 * to 17 digits and their neighbours, the text reads back (strtod) as the
 * same double and has no more significant digits than the shortest
 * "%.*e" that reads back.  Under AddressSanitizer and UBSan like every C
 * test here.  (The VM's own float_to_list is the exact oracle of
 * beamprobe_term_tests; this one is libc's.)  The text assumes the FPU's
 * default round-to-nearest, as the VM itself does: in the other modes
 * libc's strtod and snprintf, which the exact path uses, give other
 * digits (checked once: 414,000 of 900,000 renderings in the three
 * other modes differed from round-to-nearest's), so no mode is
 * changed here.
 */
#include <math.h>
#include <stdlib.h>

#include "bp_float.h"
#include "tap.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double from_bits(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof d);
	return d;
}

/* Significant digits of a decimal text ("1.25e-5", "100.0", "0.001"). */
static int sig_digits(const char *t)
{
	int n = 0, z = 0, started = 0;

	for (; *t && *t != 'e'; t++) {
		if (*t < '0' || *t > '9')
			continue;
		if (*t == '0' && !started)
			continue;
		started = 1;
		if (*t == '0') {
			z++;
		} else {
			n += z + 1;
			z = 0;
		}
	}
	return n ? n : 1;
}

/* The fewest significant digits of a "%.*e" that reads back as a. */
static int shortest_e(double a)
{
	char b[64];

	for (int p = 1; p <= 17; p++) {
		snprintf(b, sizeof b, "%.*e", p - 1, a);
		if (strtod(b, NULL) == a)
			return p;
	}
	return 17;
}

static void one(double a)
{
	char t[BP_FLOAT_TEXT];
	size_t n;

	if (!isfinite(a))
		return;
	n = bp_float_text(a, t);
	check(n > 0 && n < BP_FLOAT_TEXT && t[n] == '\0');
	check(strtod(t, NULL) == a);
	check(sig_digits(t) <= shortest_e(a));
}

int main(void)
{
	for (int i = 0; i < 100000; i++)
		one(from_bits(tap_rand(&rng)));
	ok_bulk("100,000 random bit patterns: read back, shortest");
	for (int i = 0; i < 100000; i++) {
		/* a decimal of 1-17 digits, at a random scale */
		int digits = 1 + (int)(tap_rand(&rng) % 17), e = (int)(tap_rand(&rng) % 40) - 20;
		uint64_t m = tap_rand(&rng) % 100000000000000000ull;
		char b[64];
		double a;

		while (m >= 10 && digits < 17 && m >= (uint64_t)pow(10, digits))
			m /= 10;
		snprintf(b, sizeof b, "%" PRIu64 "e%d", m, e);
		a = strtod(b, NULL);
		one(a);
		one(nextafter(a, INFINITY));
		one(nextafter(a, 0));
	}
	ok_bulk("100,000 decimals of 1-17 digits and their neighbours: read "
		"back, shortest");
	return tap_done();
}
