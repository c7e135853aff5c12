/* fuzz_meta.c -- libFuzzer entry point for the TSDL metadata parser of
 * bin/beamprobe (c_src/cli/bp_meta.c): the whole input is metadata text.
 * The parser must end (no endless loop: libFuzzer's -timeout catches
 * one), never read outside the input, and leave a usable class table.
 *
 *   make -C c_src/cli fuzz
 *   _build/cli/fuzz_meta -max_len=16384 -timeout=5 CORPUS_DIR
 * Seed: test/traces/good/basic/metadata and test/fuzz/meta-cases/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../c_src/cli/bp_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct bp_meta m;
	char err[256];
	size_t erroff = 0;
	/* An exact-size copy: ASan sees any read past the text. */
	char *text = malloc(size ? size : 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	memset(&m, 0, sizeof m);
	bp_meta_builtin(&m);
	if (bp_meta_parse(&m, text, size, err, sizeof err, &erroff) != 0 &&
	    erroff > size)
		abort(); /* the offset of the problem lies in the text */
	(void)bp_meta_env(&m, "node");
	bp_meta_free(&m);
	free(text);
	return 0;
}
