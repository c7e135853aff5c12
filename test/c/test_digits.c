/* test_digits.c -- the decimal digits of c_src/bp_digits.h (two digits per
 * table lookup) against snprintf("%" PRIu64): every number below 10^6,
 * every power of ten and its neighbours, 2^k and its neighbours, and a
 * million random 64-bit numbers of every length.  Also checks that
 * bp_digits_back writes exactly its digits (the bytes around are kept).
 */
#include "bp_digits.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* One number: count, digits and the guard bytes around them. */
static int same(uint64_t u)
{
	char want[32], got[40];
	int n = snprintf(want, sizeof want, "%" PRIu64, u);
	char *first;

	memset(got, '#', sizeof got);
	if (bp_digits_count(u) != (size_t)n)
		return 0;
	first = bp_digits_back(got + 4 + n, u);
	if (first != got + 4 || memcmp(first, want, (size_t)n))
		return 0;
	for (size_t i = 0; i < sizeof got; i++)
		if ((i < 4 || i >= 4 + (size_t)n) && got[i] != '#')
			return 0;
	memset(got, '#', sizeof got);
	return bp_digits_u64(got, u) == (size_t)n &&
	       !memcmp(got, want, (size_t)n) && got[n] == '#';
}

int main(void)
{
	for (uint64_t u = 0; u < 1000000; u++)
		check(same(u));
	ok_bulk("every number below 10^6");
	for (uint64_t p = 1, k = 0; k < 20; k++, p *= 10) {
		check(same(p));
		check(same(p - 1));
		check(same(p + 1));
	}
	check(same(UINT64_MAX));
	check(same(UINT64_MAX - 1));
	for (int k = 0; k < 64; k++) {
		check(same(1ull << k));
		check(same((1ull << k) - 1));
		check(same((1ull << k) + 1));
	}
	ok_bulk("powers of ten and of two, their neighbours, 2^64 - 1");
	for (int i = 0; i < 1000000; i++)
		check(same(tap_rand(&rng) >> (tap_rand(&rng) & 63)));
	ok_bulk("a million random numbers of every length");
	return tap_done();
}
