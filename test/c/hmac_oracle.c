/* hmac_oracle.c -- reads lines "KEYHEX DATAHEX" (either may be "-" for
 * empty) on stdin, writes HMAC-SHA-256(KEY, DATA) of c_src/bp_sha256.c in
 * hex, one line each: for beamprobe_stream_SUITE:hmac_matches_crypto,
 * which compares it with Erlang's crypto:mac(hmac, sha256, K, D).
 */
#include "bp_sha256.h"

#include <stdio.h>
#include <string.h>

static size_t unhex(const char *h, uint8_t *out, size_t cap)
{
	size_t n = 0;

	if (!strcmp(h, "-"))
		return 0;
	for (; h[0] && h[1] && n < cap; h += 2) {
		unsigned v;
		if (sscanf(h, "%2x", &v) != 1)
			break;
		out[n++] = (uint8_t)v;
	}
	return n;
}

int main(void)
{
	static char k[4096], d[4096];
	uint8_t kb[2048], db[2048], mac[BP_SHA256_LEN];

	while (scanf("%4095s %4095s", k, d) == 2) {
		size_t kl = unhex(k, kb, sizeof kb), dl = unhex(d, db, sizeof db);
		bp_hmac_sha256(kb, kl, db, dl, mac);
		for (int i = 0; i < BP_SHA256_LEN; i++)
			printf("%02x", mac[i]);
		putchar('\n');
		fflush(stdout);
	}
	return 0;
}
