/* test_pid_text.c -- the text of a local pid from its term word
 * (c_src/bp_pid_text.h), against the text OTP 25.2.3's %T / ~p printed for
 * the same words on this machine (read with a one-line NIF returning the
 * term word of a pid, after spawning 70,000 processes so that serials
 * above 0 occur).  The old decoding (28-bit number, every upper bit as
 * the serial) printed <0.9.72> for <0.9.0>.
 */
#include "bp_pid_text.h"
#include "tap.h"

static const struct {
	uint64_t word;
	const char *text;
} cases[] = {
	{0x4800000093ull, "<0.9.0>"},
	{0x278000004F3ull, "<0.79.0>"},
	{0xE4710009C8E3ull, "<0.7310.1>"},
	{0x8DF200111BE3ull, "<0.4542.2>"},
};

int main(void)
{
	char out[BP_PID_TEXT];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = bp_pid_text(cases[i].word, out);

		ok(n == strlen(cases[i].text) && !memcmp(out, cases[i].text, n),
		   "word %#" PRIx64 " prints %s (got %.*s)", cases[i].word,
		   cases[i].text, (int)n, out);
	}
	/* The largest number and serial the 28 bits hold. */
	ok(bp_pid_text(((uint64_t)((1u << 28) - 1) << 4) | 0x3, out) ==
			   strlen("<0.32767.8191>") &&
		   !memcmp(out, "<0.32767.8191>", 14),
	   "all 28 data bits set: <0.32767.8191>");
	return tap_done();
}
