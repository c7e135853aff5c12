/* tap.h -- a tiny TAP (Test Anything Protocol) harness for the C unit tests.
 *
 * Reported checks print one line each:
 *
 *     ok 3 - ring cap=64: too-big reserve fails
 *     not ok 4 - packet 2 seq num (test_ctf.c:210)
 *     #   got:  3 (expr: seq)
 *     #   want: 2 (expr: k)
 *
 * Bulk checks (check(), check_u(), for loops over millions of bytes) print
 * nothing when they pass; a failing one prints a diagnostic with file:line
 * and both operands (the first TAP_BULK_DIAG of them), and the next
 * ok_bulk() reports the whole group as one TAP line.
 *
 * tap_done() prints the plan (trailing "1..N" is valid TAP), then a line
 * "N passed, M failed" that CI reads, and returns the exit status: 0 only
 * if nothing failed.  Single-threaded: threads must collect their own
 * results and let the main thread report them.
 */
#ifndef BP_TAP_H
#define BP_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TAP_BULK_DIAG 20

/* Not every test uses every helper. */
#define TAP_FN static __attribute__((unused))

static int tap_count, tap_passed, tap_failed, tap_skipped;
static unsigned long tap_bulk_checks, tap_bulk_failed, tap_bulk_shown;

__attribute__((format(printf, 4, 0))) TAP_FN int
tap_vline(int pass, const char *file, int line, const char *fmt, va_list ap)
{
	tap_count++;
	if (pass)
		tap_passed++;
	else
		tap_failed++;
	printf("%sok %d - ", pass ? "" : "not ", tap_count);
	vprintf(fmt, ap);
	if (!pass)
		printf(" (%s:%d)", file, line);
	printf("\n");
	fflush(stdout);
	return pass;
}

__attribute__((format(printf, 4, 5))) TAP_FN int
tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tap_vline(pass, file, line, fmt, ap);
	va_end(ap);
	return pass;
}

__attribute__((format(printf, 1, 2))) TAP_FN void tap_diag(const char *fmt,
							   ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* ok(cond, "description %d", ...) */
#define ok(cond, ...)                                                     \
	(tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__) ||              \
	 (tap_diag("  failed: %s", #cond), 0))

/* is_u(got, want, "description") -- unsigned 64-bit comparison. */
#define is_u(got, want, ...)                                              \
	tap_is_u((uint64_t)(got), (uint64_t)(want), #got, #want, __FILE__, \
		 __LINE__, __VA_ARGS__)

__attribute__((format(printf, 7, 8))) TAP_FN int
tap_is_u(uint64_t got, uint64_t want, const char *ge, const char *we,
	 const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	int pass = got == want;

	va_start(ap, fmt);
	tap_vline(pass, file, line, fmt, ap);
	va_end(ap);
	if (!pass) {
		tap_diag("  got:  %" PRIu64 " (0x%" PRIx64 ") (expr: %s)", got,
			 got, ge);
		tap_diag("  want: %" PRIu64 " (0x%" PRIx64 ") (expr: %s)", want,
			 want, we);
	}
	return pass;
}

/* is_i(got, want, "description") -- signed 64-bit comparison. */
#define is_i(got, want, ...)                                              \
	tap_is_i((int64_t)(got), (int64_t)(want), #got, #want, __FILE__,   \
		 __LINE__, __VA_ARGS__)

__attribute__((format(printf, 7, 8))) TAP_FN int
tap_is_i(int64_t got, int64_t want, const char *ge, const char *we,
	 const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	int pass = got == want;

	va_start(ap, fmt);
	tap_vline(pass, file, line, fmt, ap);
	va_end(ap);
	if (!pass) {
		tap_diag("  got:  %" PRId64 " (expr: %s)", got, ge);
		tap_diag("  want: %" PRId64 " (expr: %s)", want, we);
	}
	return pass;
}

/* is_str(got, want, ...) -- string equality; has_str(hay, needle, ...) --
 * substring.  NULL never matches. */
#define is_str(got, want, ...)                                            \
	tap_str(0, (got), (want), #got, #want, __FILE__, __LINE__, __VA_ARGS__)
#define has_str(hay, needle, ...)                                         \
	tap_str(1, (hay), (needle), #hay, #needle, __FILE__, __LINE__,     \
		__VA_ARGS__)

__attribute__((format(printf, 8, 9))) TAP_FN int
tap_str(int sub, const char *got, const char *want, const char *ge,
	const char *we, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	int pass = got && want &&
		   (sub ? strstr(got, want) != NULL : strcmp(got, want) == 0);

	va_start(ap, fmt);
	tap_vline(pass, file, line, fmt, ap);
	va_end(ap);
	if (!pass) {
		/* Long texts (babeltrace2 output) are cut to stay readable. */
		tap_diag("  %s: \"%.400s\"%s (expr: %s)", sub ? "text" : "got ",
			 got ? got : "(null)",
			 got && strlen(got) > 400 ? "..." : "", ge);
		tap_diag("  %s: \"%s\" (expr: %s)", sub ? "lacks" : "want",
			 want ? want : "(null)", we);
	}
	return pass;
}

/* Reports a skipped check: "ok N # SKIP reason".  Not counted as passed. */
__attribute__((format(printf, 1, 2))) TAP_FN void tap_skip(const char *fmt,
							   ...)
{
	va_list ap;

	tap_count++;
	tap_skipped++;
	printf("ok %d # SKIP ", tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* xorshift64*: small, fast, deterministic random numbers for the tests;
 * *s is the state (any non-zero seed). */
TAP_FN uint64_t tap_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Bulk checks: silent on success. */
TAP_FN void tap_bulk_fail(const char *file, int line, const char *what)
{
	tap_bulk_failed++;
	if (tap_bulk_shown++ < TAP_BULK_DIAG)
		tap_diag("FAIL %s:%d: %s", file, line, what);
}

#define check(cond)                                                       \
	do {                                                              \
		tap_bulk_checks++;                                        \
		if (!(cond))                                              \
			tap_bulk_fail(__FILE__, __LINE__, #cond);         \
	} while (0)

#define check_u(got, want)                                                \
	do {                                                              \
		uint64_t tap_g_ = (uint64_t)(got), tap_w_ = (uint64_t)(want); \
		tap_bulk_checks++;                                        \
		if (tap_g_ != tap_w_) {                                   \
			char tap_b_[512];                                 \
			snprintf(tap_b_, sizeof tap_b_,                   \
				 "%s == %s: got %" PRIu64 ", want %" PRIu64, \
				 #got, #want, tap_g_, tap_w_);            \
			tap_bulk_fail(__FILE__, __LINE__, tap_b_);        \
		}                                                         \
	} while (0)

/* Reports every bulk check since the previous ok_bulk() as one TAP line. */
#define ok_bulk(...) tap_ok_bulk(__FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) TAP_FN int
tap_ok_bulk(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	unsigned long n = tap_bulk_checks, bad = tap_bulk_failed;
	int pass = bad == 0;

	tap_bulk_checks = tap_bulk_failed = tap_bulk_shown = 0;
	va_start(ap, fmt);
	tap_vline(pass, file, line, fmt, ap);
	va_end(ap);
	if (!pass)
		tap_diag("  %lu of %lu bulk checks failed", bad, n);
	else
		tap_diag("  (%lu checks)", n);
	return pass;
}

/* Prints the plan and the summary; returns the process exit status. */
TAP_FN int tap_done(void)
{
	if (tap_bulk_checks || tap_bulk_failed)
		ok_bulk("trailing bulk checks");
	printf("1..%d\n", tap_count);
	if (tap_skipped)
		printf("# %d skipped\n", tap_skipped);
	printf("%d passed, %d failed\n", tap_passed, tap_failed);
	fflush(stdout);
	return tap_failed ? 1 : 0;
}

#endif /* BP_TAP_H */
