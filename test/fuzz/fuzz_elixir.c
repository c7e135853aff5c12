/* fuzz_elixir.c -- libFuzzer target of the Elixir re-renderer
 * (c_src/bp_elixir.c): any bytes, as each kind of captured text, with
 * output buffers from tiny to roomy.  ASan/UBSan catch memory errors; the
 * checks below the promises of bp_elixir.h: the text is NUL-terminated,
 * fits the buffer, and an uncut rendering fits BP_ELIXIR_CAP. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../c_src/bp_elixir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t caps[] = {4, 8, 17, 64};
	size_t big = BP_ELIXIR_CAP(size);
	char *out = malloc(big);

	if (!out)
		return 0;
	for (int k = 0; k < 4; k++) {
		size_t n = bp_elixir_text((const char *)data, size,
					  (enum bp_elixir_kind)k, out, big);
		if (n >= big || out[n] != 0 || strlen(out) > n)
			abort();
		if (n >= 3 && !memcmp(out + n - 3, "...", 3) &&
		    (size < 3 || memcmp(data + size - 3, "...", 3)) &&
		    n + 4 >= big)
			abort(); /* cut although BP_ELIXIR_CAP promised room */
		for (int c = 0; c < 4; c++) {
			char small[64];
			size_t m = bp_elixir_text((const char *)data, size,
						  (enum bp_elixir_kind)k, small,
						  caps[c]);
			if (m >= caps[c] || small[m] != 0)
				abort();
		}
	}
	free(out);
	return 0;
}
