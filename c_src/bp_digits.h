/* bp_digits.h -- decimal digits of an unsigned integer, two at a time.
 *
 * Writing a number one digit at a time costs a division by 10 (a multiply
 * and a shift) per digit, each waiting for the one before; with a table of
 * the hundred digit pairs it is one division by 100 per two digits, and a
 * number below 100 needs none.  Rendering the 16 shown elements of a
 * list of small integers in the tracer took ~80 ns less this way (see
 * docs/performance/stops-24-28.md, "Two digits at a time").
 * Header-only, no erl_nif: the C unit tests and the render bench include
 * it.
 */
#ifndef BP_DIGITS_H
#define BP_DIGITS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* "00" to "99". */
static const char bp_digit_pairs[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233"
	"34353637383940414243444546474849505152535455565758596061626364656667"
	"6869707172737475767778798081828384858687888990919293949596979899";

/* How many decimal digits u has (1 for 0). */
static inline size_t bp_digits_count(uint64_t u)
{
	size_t n = 1;

	while (u >= 100) {
		u /= 100;
		n += 2;
	}
	return n + (u >= 10);
}

/* Writes the bp_digits_count(u) digits of u so that the last one is just
 * before `end'; returns where the first one is. */
static inline char *bp_digits_back(char *end, uint64_t u)
{
	while (u >= 100) {
		uint64_t h = u / 100;

		end -= 2;
		memcpy(end, bp_digit_pairs + 2 * (u - 100 * h), 2);
		u = h;
	}
	if (u >= 10) {
		end -= 2;
		memcpy(end, bp_digit_pairs + 2 * u, 2);
	} else {
		*--end = (char)('0' + u);
	}
	return end;
}

/* The digits of u at out (not NUL-terminated); their count. */
static inline size_t bp_digits_u64(char *out, uint64_t u)
{
	size_t n = bp_digits_count(u);

	bp_digits_back(out + n, u);
	return n;
}

#endif /* BP_DIGITS_H */
