/* bp_float.c -- a float as float_to_list(F, [short]) writes it: the
 * shortest decimal that reads back as F (what Ryu finds), in fixed or
 * scientific notation as OTP 25 chooses.  No allocation, no lock; used by
 * the term renderer (bp_term.c) on the tracer's hot path.
 *
 * The fast path (no printf, no strtod for most floats people write):
 *   - a normal double has at most one decimal of <= 15 significant digits
 *     that reads back as it (two such decimals are further apart than the
 *     double's rounding interval is wide: 10^-14 against 2^-52 relative),
 *     and if there is one it is the 15-digit rounding of the double with
 *     its trailing zeros stripped; likewise the nearest 16- or 17-digit
 *     decimal is the nearest fit of that length;
 *   - the n-digit rounding is round(a * 10^k), computed in x87 long double
 *     (64-bit mantissa) from a table of correctly rounded powers of ten:
 *     two roundings, a relative error below 2^-63, so an absolute error
 *     below 0.011 for n <= 17; when the fraction is within a margin of
 *     1/2 the rounding is not trusted and the exact path decides;
 *   - "reads back" is decided exactly without strtod when m < 2^53 and
 *     10^|e| <= 10^22 (then m * 10^e or m / 10^-e is one correctly rounded
 *     IEEE operation on exact operands: Clinger's fast path), else by
 *     strtod.
 * The exact path (subnormals, ambiguous roundings, or no long double):
 * a bisection over snprintf("%.*e") + strtod, ~700 ns.
 * Checked against the VM's float_to_list(F, [short]) on millions of
 * doubles (test/beamprobe_term_tests.erl, float_text_*).
 */
#include "bp_float.h"
#include "bp_digits.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && LDBL_MANT_DIG == 64 && FLT_EVAL_METHOD == 0
#define FAST_FLOAT 1
#else
#define FAST_FLOAT 0
#endif

/* The double nearest to m * 10^e. */
static double dval(uint64_t m, int e)
{
	char tmp[40];

	snprintf(tmp, sizeof tmp, "%" PRIu64 "e%d", m, e);
	return strtod(tmp, NULL);
}

/* a > 0 rounded to n <= 17 significant digits ("%.*e"): the digits and
 * the exponent of the first one.  17 digits always read back as a. */
struct dec {
	char d[17];
	int x10;
};

static void round_to(double a, int n, struct dec *r)
{
	char tmp[40];
	const char *s;
	int i = 0;

	snprintf(tmp, sizeof tmp, "%.*e", n - 1, a);
	for (s = tmp; *s && *s != 'e'; s++)
		if (*s >= '0' && *s <= '9' && i < 17)
			r->d[i++] = *s;
	r->x10 = *s == 'e' ? atoi(s + 1) : 0;
}

/* 1 if some n-digit decimal reads back as a; it is then *m * 10^*e, the
 * one nearest to a.  Only the two n-digit neighbours of a can be: the
 * rounded one, taken from p (a to 17 digits) unless p's tail is a tie,
 * and the one on the other side of a. */
static int fits(double a, const struct dec *p, int n, uint64_t *m, int *e)
{
	struct dec q;
	uint64_t r = 0;
	int i, half = 0;
	double v;

	if (n < 17) {
		half = p->d[n] - '5';
		for (i = n + 1; !half && i < 17; i++)
			half = p->d[i] != '0';
		if (!half) { /* a tie in p, maybe not in a */
			round_to(a, n, &q);
			p = &q;
		}
	}
	for (i = 0; i < n; i++)
		r = r * 10 + (uint64_t)(p->d[i] - '0');
	*e = p->x10 - (n - 1);
	*m = r + (half > 0);
	if (n == 17)
		return 1;
	v = dval(*m, *e);
	if (v == a)
		return 1;
	*m = v < a ? *m + 1 : *m - 1;
	return *m && dval(*m, *e) == a;
}

static void strip(uint64_t *m, int *e)
{
	if (!*m)
		return;
	while (*m % 100000000 == 0) {
		*m /= 100000000;
		*e += 8;
	}
	if (*m % 10000 == 0) {
		*m /= 10000;
		*e += 4;
	}
	while (*m % 10 == 0) {
		*m /= 10;
		(*e)++;
	}
}

/* The exact path: the shortest decimal m * 10^e that reads back as a > 0,
 * nearest to a among those: what Ryu (float_to_list) finds.  An
 * n-digit fit implies an n+1-digit one, so the search may bisect; it
 * starts at 15 digits, which most floats either need all of or, written
 * by people, need few of. */
static void shortest_exact(double a, uint64_t *m, int *e)
{
	struct dec p;
	uint64_t m1;
	int e1, lo = 1, hi = 0;

	if (round_to(a, 17, &p), !fits(a, &p, 15, m, e)) {
		if (!fits(a, &p, 16, m, e))
			fits(a, &p, 17, m, e);
	} else {
		strip(m, e);
		for (m1 = *m; m1; m1 /= 10)
			hi++;
		if (hi > 1 && fits(a, &p, hi - 1, &m1, &e1)) {
			for (hi--; lo < hi;) {
				int mid = (lo + hi) / 2;

				if (fits(a, &p, mid, &m1, &e1))
					hi = mid;
				else
					lo = mid + 1;
			}
			fits(a, &p, lo, m, e);
		} else if (hi < 15) {
			fits(a, &p, hi, m, e); /* the nearest hi-digit fit */
		}
	}
	strip(m, e);
}

#if FAST_FLOAT
#define P10L_MIN (-300)
#define P10L_MAX 330
/* 10^k, k = P10L_MIN..P10L_MAX, each correctly rounded by the compiler. */
static const long double p10l[P10L_MAX - P10L_MIN + 1] = {
	1e-300L, 1e-299L, 1e-298L, 1e-297L, 1e-296L, 1e-295L, 1e-294L,
	1e-293L, 1e-292L, 1e-291L, 1e-290L, 1e-289L, 1e-288L, 1e-287L,
	1e-286L, 1e-285L, 1e-284L, 1e-283L, 1e-282L, 1e-281L, 1e-280L,
	1e-279L, 1e-278L, 1e-277L, 1e-276L, 1e-275L, 1e-274L, 1e-273L,
	1e-272L, 1e-271L, 1e-270L, 1e-269L, 1e-268L, 1e-267L, 1e-266L,
	1e-265L, 1e-264L, 1e-263L, 1e-262L, 1e-261L, 1e-260L, 1e-259L,
	1e-258L, 1e-257L, 1e-256L, 1e-255L, 1e-254L, 1e-253L, 1e-252L,
	1e-251L, 1e-250L, 1e-249L, 1e-248L, 1e-247L, 1e-246L, 1e-245L,
	1e-244L, 1e-243L, 1e-242L, 1e-241L, 1e-240L, 1e-239L, 1e-238L,
	1e-237L, 1e-236L, 1e-235L, 1e-234L, 1e-233L, 1e-232L, 1e-231L,
	1e-230L, 1e-229L, 1e-228L, 1e-227L, 1e-226L, 1e-225L, 1e-224L,
	1e-223L, 1e-222L, 1e-221L, 1e-220L, 1e-219L, 1e-218L, 1e-217L,
	1e-216L, 1e-215L, 1e-214L, 1e-213L, 1e-212L, 1e-211L, 1e-210L,
	1e-209L, 1e-208L, 1e-207L, 1e-206L, 1e-205L, 1e-204L, 1e-203L,
	1e-202L, 1e-201L, 1e-200L, 1e-199L, 1e-198L, 1e-197L, 1e-196L,
	1e-195L, 1e-194L, 1e-193L, 1e-192L, 1e-191L, 1e-190L, 1e-189L,
	1e-188L, 1e-187L, 1e-186L, 1e-185L, 1e-184L, 1e-183L, 1e-182L,
	1e-181L, 1e-180L, 1e-179L, 1e-178L, 1e-177L, 1e-176L, 1e-175L,
	1e-174L, 1e-173L, 1e-172L, 1e-171L, 1e-170L, 1e-169L, 1e-168L,
	1e-167L, 1e-166L, 1e-165L, 1e-164L, 1e-163L, 1e-162L, 1e-161L,
	1e-160L, 1e-159L, 1e-158L, 1e-157L, 1e-156L, 1e-155L, 1e-154L,
	1e-153L, 1e-152L, 1e-151L, 1e-150L, 1e-149L, 1e-148L, 1e-147L,
	1e-146L, 1e-145L, 1e-144L, 1e-143L, 1e-142L, 1e-141L, 1e-140L,
	1e-139L, 1e-138L, 1e-137L, 1e-136L, 1e-135L, 1e-134L, 1e-133L,
	1e-132L, 1e-131L, 1e-130L, 1e-129L, 1e-128L, 1e-127L, 1e-126L,
	1e-125L, 1e-124L, 1e-123L, 1e-122L, 1e-121L, 1e-120L, 1e-119L,
	1e-118L, 1e-117L, 1e-116L, 1e-115L, 1e-114L, 1e-113L, 1e-112L,
	1e-111L, 1e-110L, 1e-109L, 1e-108L, 1e-107L, 1e-106L, 1e-105L,
	1e-104L, 1e-103L, 1e-102L, 1e-101L, 1e-100L, 1e-99L, 1e-98L,
	1e-97L, 1e-96L, 1e-95L, 1e-94L, 1e-93L, 1e-92L, 1e-91L,
	1e-90L, 1e-89L, 1e-88L, 1e-87L, 1e-86L, 1e-85L, 1e-84L,
	1e-83L, 1e-82L, 1e-81L, 1e-80L, 1e-79L, 1e-78L, 1e-77L,
	1e-76L, 1e-75L, 1e-74L, 1e-73L, 1e-72L, 1e-71L, 1e-70L,
	1e-69L, 1e-68L, 1e-67L, 1e-66L, 1e-65L, 1e-64L, 1e-63L,
	1e-62L, 1e-61L, 1e-60L, 1e-59L, 1e-58L, 1e-57L, 1e-56L,
	1e-55L, 1e-54L, 1e-53L, 1e-52L, 1e-51L, 1e-50L, 1e-49L,
	1e-48L, 1e-47L, 1e-46L, 1e-45L, 1e-44L, 1e-43L, 1e-42L,
	1e-41L, 1e-40L, 1e-39L, 1e-38L, 1e-37L, 1e-36L, 1e-35L,
	1e-34L, 1e-33L, 1e-32L, 1e-31L, 1e-30L, 1e-29L, 1e-28L,
	1e-27L, 1e-26L, 1e-25L, 1e-24L, 1e-23L, 1e-22L, 1e-21L,
	1e-20L, 1e-19L, 1e-18L, 1e-17L, 1e-16L, 1e-15L, 1e-14L,
	1e-13L, 1e-12L, 1e-11L, 1e-10L, 1e-9L, 1e-8L, 1e-7L,
	1e-6L, 1e-5L, 1e-4L, 1e-3L, 1e-2L, 1e-1L, 1e0L,
	1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L,
	1e8L, 1e9L, 1e10L, 1e11L, 1e12L, 1e13L, 1e14L,
	1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L,
	1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L, 1e28L,
	1e29L, 1e30L, 1e31L, 1e32L, 1e33L, 1e34L, 1e35L,
	1e36L, 1e37L, 1e38L, 1e39L, 1e40L, 1e41L, 1e42L,
	1e43L, 1e44L, 1e45L, 1e46L, 1e47L, 1e48L, 1e49L,
	1e50L, 1e51L, 1e52L, 1e53L, 1e54L, 1e55L, 1e56L,
	1e57L, 1e58L, 1e59L, 1e60L, 1e61L, 1e62L, 1e63L,
	1e64L, 1e65L, 1e66L, 1e67L, 1e68L, 1e69L, 1e70L,
	1e71L, 1e72L, 1e73L, 1e74L, 1e75L, 1e76L, 1e77L,
	1e78L, 1e79L, 1e80L, 1e81L, 1e82L, 1e83L, 1e84L,
	1e85L, 1e86L, 1e87L, 1e88L, 1e89L, 1e90L, 1e91L,
	1e92L, 1e93L, 1e94L, 1e95L, 1e96L, 1e97L, 1e98L,
	1e99L, 1e100L, 1e101L, 1e102L, 1e103L, 1e104L, 1e105L,
	1e106L, 1e107L, 1e108L, 1e109L, 1e110L, 1e111L, 1e112L,
	1e113L, 1e114L, 1e115L, 1e116L, 1e117L, 1e118L, 1e119L,
	1e120L, 1e121L, 1e122L, 1e123L, 1e124L, 1e125L, 1e126L,
	1e127L, 1e128L, 1e129L, 1e130L, 1e131L, 1e132L, 1e133L,
	1e134L, 1e135L, 1e136L, 1e137L, 1e138L, 1e139L, 1e140L,
	1e141L, 1e142L, 1e143L, 1e144L, 1e145L, 1e146L, 1e147L,
	1e148L, 1e149L, 1e150L, 1e151L, 1e152L, 1e153L, 1e154L,
	1e155L, 1e156L, 1e157L, 1e158L, 1e159L, 1e160L, 1e161L,
	1e162L, 1e163L, 1e164L, 1e165L, 1e166L, 1e167L, 1e168L,
	1e169L, 1e170L, 1e171L, 1e172L, 1e173L, 1e174L, 1e175L,
	1e176L, 1e177L, 1e178L, 1e179L, 1e180L, 1e181L, 1e182L,
	1e183L, 1e184L, 1e185L, 1e186L, 1e187L, 1e188L, 1e189L,
	1e190L, 1e191L, 1e192L, 1e193L, 1e194L, 1e195L, 1e196L,
	1e197L, 1e198L, 1e199L, 1e200L, 1e201L, 1e202L, 1e203L,
	1e204L, 1e205L, 1e206L, 1e207L, 1e208L, 1e209L, 1e210L,
	1e211L, 1e212L, 1e213L, 1e214L, 1e215L, 1e216L, 1e217L,
	1e218L, 1e219L, 1e220L, 1e221L, 1e222L, 1e223L, 1e224L,
	1e225L, 1e226L, 1e227L, 1e228L, 1e229L, 1e230L, 1e231L,
	1e232L, 1e233L, 1e234L, 1e235L, 1e236L, 1e237L, 1e238L,
	1e239L, 1e240L, 1e241L, 1e242L, 1e243L, 1e244L, 1e245L,
	1e246L, 1e247L, 1e248L, 1e249L, 1e250L, 1e251L, 1e252L,
	1e253L, 1e254L, 1e255L, 1e256L, 1e257L, 1e258L, 1e259L,
	1e260L, 1e261L, 1e262L, 1e263L, 1e264L, 1e265L, 1e266L,
	1e267L, 1e268L, 1e269L, 1e270L, 1e271L, 1e272L, 1e273L,
	1e274L, 1e275L, 1e276L, 1e277L, 1e278L, 1e279L, 1e280L,
	1e281L, 1e282L, 1e283L, 1e284L, 1e285L, 1e286L, 1e287L,
	1e288L, 1e289L, 1e290L, 1e291L, 1e292L, 1e293L, 1e294L,
	1e295L, 1e296L, 1e297L, 1e298L, 1e299L, 1e300L, 1e301L,
	1e302L, 1e303L, 1e304L, 1e305L, 1e306L, 1e307L, 1e308L,
	1e309L, 1e310L, 1e311L, 1e312L, 1e313L, 1e314L, 1e315L,
	1e316L, 1e317L, 1e318L, 1e319L, 1e320L, 1e321L, 1e322L,
	1e323L, 1e324L, 1e325L, 1e326L, 1e327L, 1e328L, 1e329L,
	1e330L,
};

/* The exact doubles 10^0 .. 10^22. */
static const double p10d[23] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

#define TWO53 9007199254740992ull

/* 1 if the decimal m * 10^e reads back as a (round to nearest even). */
static int reads_back(uint64_t m, int e, double a)
{
	while (m && m % 10 == 0 && e < -22) {
		m /= 10;
		e++;
	}
	if (m < TWO53) {
		if (e >= 0 && e <= 22)
			return (double)m * p10d[e] == a;
		if (e < 0 && e >= -22)
			return (double)m / p10d[-e] == a;
		if (e > 22 && e <= 22 + 16) {
			uint64_t w = m;
			int k;

			for (k = e - 22; k > 0 && w < TWO53; k--)
				w *= 10;
			if (!k && w < TWO53)
				return (double)w * 1e22 == a;
		}
	}
	return dval(m, e) == a;
}

/* a * 10^k (k in the table); *x10 adjusted so that the result lies in
 * [10^(n-1), 10^n).  0 if k leaves the table. */
static int scaled(double a, int n, int *x10, long double *s)
{
	for (int i = 0; i < 3; i++) {
		int k = n - 1 - *x10;

		if (k < P10L_MIN || k > P10L_MAX)
			return 0;
		*s = (long double)a * p10l[k - P10L_MIN];
		if (*s >= p10l[n - P10L_MIN])
			(*x10)++;
		else if (*s < p10l[n - 1 - P10L_MIN])
			(*x10)--;
		else
			return 1;
	}
	return 0;
}

/* s (0 <= s < 2^63) rounded to the nearest integer, ties to even (the
 * x87's default rounding; the VM does not change it): *r as a long
 * double and *c as an integer, both from registers.  Not (uint64_t)(s +
 * 0.5L): that conversion switches the x87 to truncation and back (two
 * fldcw) and then reloads the integer into the x87 through one stack
 * slot; the render bench measured a 17-digit float at 98 ns in one build
 * of that and 175-250 ns in builds that differed only in unrelated code.
 * A tie (s = k + 1/2) comes out k or k + 1, not always k + 1; rounded()
 * calls a tie uncertain either way (|d| = 1/2), and its callers then try
 * both k and k + 1 or leave it to the exact path. */
static inline void nearest(long double s, long double *r, uint64_t *c)
{
	int64_t v;

	__asm__("frndint" : "=t"(*r) : "0"(s));
	__asm__("fistpll %0" : "=m"(v) : "t"(*r) : "st");
	*c = (uint64_t)v;
}

/* The n-digit rounding of a, *c (*up = 1 when a lies above it): 1 if it
 * is certain (the fraction is not within `margin` of 1/2), 0 if it may be
 * off by one toward a, -1 if a is out of the table's range. */
static int rounded(double a, int n, int *x10, long double margin,
		   uint64_t *c, int *up)
{
	long double s, d, r;

	if (!scaled(a, n, x10, &s))
		return -1;
	nearest(s, &r, c);
	d = s - r;
	*up = d > 0;
	return fabsl(d) < 0.5L - margin;
}

/* The fast path: 1 and the shortest decimal if it is certain; 0 if the
 * exact path must decide.  a is a positive normal double. */
static int shortest_fast(double a, uint64_t *m, int *e)
{
	int x10, b2, up, n, r;
	uint64_t c;

	frexp(a, &b2);
	x10 = (int)floor((b2 - 1) * 0.30102999566398120);
	/* 15 digits: at most one fit; if the rounding is near a tie both
	 * neighbours are tried. */
	r = rounded(a, 15, &x10, 0.01L, &c, &up);
	if (r < 0)
		return 0;
	if (reads_back(c, x10 - 14, a))
		goto found15;
	if (!r && reads_back(up ? c + 1 : c - 1, x10 - 14, a)) {
		c = up ? c + 1 : c - 1;
		goto found15;
	}
	/* 16, then 17 digits: the nearest fit of that length; the rounding
	 * if it fits, else its neighbour on a's other side, if that fits (a
	 * 17-digit rounding always fits). */
	for (n = 16; n <= 17; n++) {
		if (rounded(a, n, &x10, n == 16 ? 0.01L : 0.05L, &c, &up) < 1)
			return 0;
		if (n == 17 || reads_back(c, x10 - (n - 1), a))
			break;
		c = up ? c + 1 : c - 1;
		if (reads_back(c, x10 - (n - 1), a))
			break;
	}
	*m = c;
	*e = x10 - (n - 1);
	return 1;
found15:
	*m = c;
	*e = x10 - 14;
	return 1;
}
#endif

/* The floats people write (1.5, 0.25, 99.95): a decimal c / 10^4 of at
 * most 15 significant digits that reads back as a (checked exactly: c <
 * 2^53 and 10^4 are exact, so c / 10^4 is one correctly rounded
 * division, what strtod returns).  Such a decimal is the only one of <=
 * 15 digits that reads back (see the top of this file), hence the
 * shortest once its trailing zeros are stripped.  If a has one with at
 * most 4 decimals, c = round(a * 10^4) is it: for 1e-4 <= a < 1e10 the
 * product's error is below 10^4 ulp(a) < 0.03.  One multiplication and
 * one division: a float that is not such a decimal loses a few ns.  1
 * and it in *m, *e if found, else 0 (the paths below).  a > 0. */
static int short_decimal(double a, uint64_t *m, int *e)
{
	int64_t c;

	if (!(a >= 1e-4 && a < 1e10))
		return 0;
	c = (int64_t)(a * 1e4 + 0.5);
	if ((double)c / 1e4 != a)
		return 0;
	*m = (uint64_t)c;
	*e = -4;
	return 1;
}

/* Shortest decimal m * 10^e (m without trailing zeros) that reads back as
 * a > 0, nearest to a among those. */
static void shortest(double a, uint64_t *m, int *e)
{
	if (a < 9007199254740992.0 && a == (double)(uint64_t)a) {
		*m = (uint64_t)a; /* integers below 2^53 are exact */
		*e = 0;
	} else if (short_decimal(a, m, e)) {
		; /* at most 4 decimals: strip() below shortens it */
#if FAST_FLOAT
	} else if (a >= DBL_MIN && shortest_fast(a, m, e)) {
		; /* a normal double, decided without the exact path */
#endif
	} else {
		shortest_exact(a, m, e);
	}
	strip(m, e);
}

/* d[0..n) = s[0..n), n <= 24 (digits), without the library call that a
 * memcpy of a length not known at compile time costs (nor a loop, which
 * the compiler turns back into that call): two or three moves of 8 or 4
 * bytes, the last one overlapping, or single bytes; no byte outside
 * either range is touched. */
static inline void copy_short(char *d, const char *s, size_t n)
{
	uint64_t w, v, u;
	uint32_t h, l;

	if (n >= 8) {
		memcpy(&w, s, 8);
		memcpy(&v, s + n - 8, 8);
		if (n > 16)
			memcpy(&u, s + 8, 8);
		memcpy(d, &w, 8);
		if (n > 16)
			memcpy(d + 8, &u, 8);
		memcpy(d + n - 8, &v, 8);
	} else if (n >= 4) {
		memcpy(&h, s, 4);
		memcpy(&l, s + n - 4, 4);
		memcpy(d, &h, 4);
		memcpy(d + n - 4, &l, 4);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/* A float as float_to_list(F, [short]) writes it (OTP 25, to_chars.h):
 * fixed notation within a window of exponents, else scientific. */
size_t bp_float_text(double v, char b[BP_FLOAT_TEXT])
{
	char d[24];
	int e, n, sci, lower, upper, fixed, neg = signbit(v) != 0;
	uint64_t m;
	char *p = b;

	if (neg)
		*p++ = '-';
	if (v == 0) {
		memcpy(p, "0.0", 4);
		return (size_t)(p + 3 - b);
	}
	shortest(neg ? -v : v, &m, &e);
	n = (int)bp_digits_u64(d, m);
	sci = e + n - 1;
	lower = n == 1 ? -4 : -(n + 2);
	upper = n == 1 || sci >= 10 ? 2 : 1;
	fixed = lower <= e && e <= upper &&
		!((m >= 1ull << 53 && e == 0) ||
		  (m > (1ull << 52) / 5 && e == 1) ||
		  (m > (1ull << 51) / 25 && e == 2));
	if (fixed && e >= 0) { /* 1729.0, 17290.0 */
		copy_short(p, d, (size_t)n);
		p += n;
		memcpy(p, "00", 2); /* e <= 2 zeros (upper), within b */
		p += e;
		memcpy(p, ".0", 2);
		p += 2;
	} else if (fixed && n + e > 0) { /* 17.29 */
		copy_short(p, d, (size_t)(n + e));
		p += n + e;
		*p++ = '.';
		copy_short(p, d + n + e, (size_t)-e);
		p += -e;
	} else if (fixed) { /* 0.001729 */
		memcpy(p, "0.", 2);
		p += 2;
		memcpy(p, "000", 3); /* -(n + e) <= 3 zeros (lower), within b */
		p += -(n + e);
		copy_short(p, d, (size_t)n);
		p += n;
	} else { /* 1.729e-10, 1.0e100 */
		*p++ = d[0];
		*p++ = '.';
		if (n == 1) {
			*p++ = '0';
		} else {
			copy_short(p, d + 1, (size_t)(n - 1));
			p += n - 1;
		}
		*p++ = 'e';
		if (sci < 0) {
			*p++ = '-';
			sci = -sci;
		}
		p += bp_digits_u64(p, (uint64_t)sci);
	}
	*p = '\0';
	return (size_t)(p - b);
}
