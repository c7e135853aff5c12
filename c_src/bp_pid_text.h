/* bp_pid_text.h -- the text of a local pid, "<0.Number.Serial>", from its
 * immediate term word, as %T (and ~p) print it on OTP 24/25, 64-bit:
 * the 4-bit immediate tag (0x3), then 28 bits of pid data (the number in
 * the low 15 bits, the serial in the 13 above), then bits the printed
 * form does not show (the process table's own, e.g. 0x48 in
 * 0x0000004800000093 = <0.9.0>).  Words and texts of this VM are the C
 * unit test's oracle (test/c/test_pid_text.c); bp_term.c still checks
 * the decoding against %T on the first pids it renders.  Header-only, no
 * erl_nif: the C unit tests include it.
 */
#ifndef BP_PID_TEXT_H
#define BP_PID_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bp_digits.h"

#define BP_PID_TEXT 24 /* "<0." + 5 + "." + 4 + ">": room to spare */

/* The 28 bits of pid data of a local pid's word. */
static inline uint32_t bp_pid_data(uint64_t word)
{
	return (uint32_t)(word >> 4) & ((1u << 28) - 1);
}

/* Writes the text of the local pid with term word `word' (not
 * NUL-terminated); returns its length. */
static inline size_t bp_pid_text(uint64_t word, char out[BP_PID_TEXT])
{
	uint32_t d = bp_pid_data(word);
	size_t n = 3;

	memcpy(out, "<0.", 3);
	n += bp_digits_u64(out + n, d & ((1u << 15) - 1));
	out[n++] = '.';
	n += bp_digits_u64(out + n, d >> 15);
	out[n++] = '>';
	return n;
}

#endif /* BP_PID_TEXT_H */
