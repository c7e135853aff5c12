/* bp_float.c -- a float as float_to_list(F, [short]) writes it: the
 * shortest decimal that reads back as F (what Ryu finds), found by a
 * bisection over "%.*e" + strtod, in fixed or scientific notation as OTP
 * 25 chooses.  No allocation; used by the term renderer (bp_term.c).
 */
#include "bp_float.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	while (*m % 10 == 0) {
		*m /= 10;
		(*e)++;
	}
}

/* Shortest decimal m * 10^e (m without trailing zeros) that reads back as
 * a > 0, nearest to a among those: what Ryu (float_to_list) finds.  An
 * n-digit fit implies an n+1-digit one, so the search may bisect; it
 * starts at 15 digits, which most floats either need all of or, written
 * by people, need few of. */
static void shortest(double a, uint64_t *m, int *e)
{
	struct dec p;
	uint64_t m1;
	int e1, lo = 1, hi = 0;

	if (a < 9007199254740992.0 && a == (double)(uint64_t)a) {
		*m = (uint64_t)a; /* integers below 2^53 are exact */
		*e = 0;
	} else if (round_to(a, 17, &p), !fits(a, &p, 15, m, e)) {
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

/* A float as float_to_list(F, [short]) writes it (OTP 25, to_chars.h):
 * fixed notation within a window of exponents, else scientific. */
size_t bp_float_text(double v, char b[BP_FLOAT_TEXT])
{
	char d[24];
	int e, n, sci, lower, upper, fixed, neg = signbit(v) != 0;
	uint64_t m;
	const char *sign = neg ? "-" : "";

	if (v == 0)
		return (size_t)snprintf(b, BP_FLOAT_TEXT, "%s0.0", sign);
	shortest(neg ? -v : v, &m, &e);
	n = snprintf(d, sizeof d, "%" PRIu64, m);
	sci = e + n - 1;
	lower = n == 1 ? -4 : -(n + 2);
	upper = n == 1 || sci >= 10 ? 2 : 1;
	fixed = lower <= e && e <= upper &&
		!((m >= 1ull << 53 && e == 0) ||
		  (m > (1ull << 52) / 5 && e == 1) ||
		  (m > (1ull << 51) / 25 && e == 2));
	if (fixed && e >= 0) /* 1729.0, 17290.0 */
		n = snprintf(b, BP_FLOAT_TEXT, "%s%s%.*s.0", sign, d, e, "00");
	else if (fixed && n + e > 0) /* 17.29 */
		n = snprintf(b, BP_FLOAT_TEXT, "%s%.*s.%s", sign, n + e, d, d + n + e);
	else if (fixed) /* 0.001729 */
		n = snprintf(b, BP_FLOAT_TEXT, "%s0.%.*s%s", sign, -(n + e), "000",
			     d);
	else /* 1.729e-10, 1.0e100 */
		n = snprintf(b, BP_FLOAT_TEXT, "%s%c.%se%d", sign, d[0],
			     n == 1 ? "0" : d + 1, sci);
	return (size_t)n;
}

