/* fuzz_reader.c -- libFuzzer entry point for the trace decoder of
 * bin/beamprobe (c_src/cli/bp_reader.h), through its in-memory API.
 *
 * Input: if it starts with "/ * CTF" (no space), the bytes up to the first
 * NUL are metadata text and the rest one data stream; otherwise the whole
 * input is one data stream, and its second half a second stream (to
 * exercise the merge), decoded with the built-in classes.  Every event is
 * also applied to bp_model (call stacks, process merging, counters).
 *
 *   make -C c_src/cli fuzz                       (needs clang)
 *   _build/cli/fuzz_reader -max_len=65536 CORPUS_DIR
 * A good seed corpus: the files of test/traces/good/basic/ and of
 * test/traces/damaged/.
 */
#include <stdint.h>
#include <string.h>

#include "../../c_src/cli/bp_model.h"
#include "../../c_src/cli/bp_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *bufs[2] = {data, data + size / 2};
	size_t lens[2] = {size, size - size / 2};
	const char *meta = NULL;
	size_t mlen = 0;
	uint32_t n = 2;
	struct bp_reader r;
	struct bp_model m;
	const struct bp_event *e;

	if (size >= 6 && memcmp(data, "/* CTF", 6) == 0) {
		const uint8_t *nul = memchr(data, 0, size);
		meta = (const char *)data;
		mlen = nul ? (size_t)(nul - data) : size;
		bufs[0] = nul ? nul + 1 : data + size;
		lens[0] = nul ? size - mlen - 1 : 0;
		n = 1;
	}
	if (bp_reader_open_mem(&r, meta, mlen, bufs, lens, n,
			       BP_READER_QUIET) != 0)
		return 0;
	bp_model_init(&m, NULL, NULL);
	while ((e = bp_reader_next(&r))) {
		struct bp_proc *p = bp_model_apply(&m, e);
		if (p)
			bp_model_count(p, e);
	}
	bp_model_finish(&m);
	bp_model_free(&m);
	bp_reader_close(&r);
	return 0;
}
