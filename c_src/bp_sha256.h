/* bp_sha256.h -- SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for
 * the stream's mutual challenge-response handshake (docs/format.md,
 * "Stream").  Shared by the NIF (bp_sink_tcp_auth.c) and the CLI
 * (c_src/cli/bp_recv.c); no library needed.
 */
#ifndef BP_SHA256_H
#define BP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define BP_SHA256_LEN 32
#define BP_SHA256_BLOCK 64

struct bp_sha256 {
	uint32_t h[8];
	uint64_t total; /* bytes hashed */
	uint8_t buf[BP_SHA256_BLOCK];
	size_t blen;
};

void bp_sha256_init(struct bp_sha256 *c);
void bp_sha256_update(struct bp_sha256 *c, const void *p, size_t n);
void bp_sha256_final(struct bp_sha256 *c, uint8_t out[BP_SHA256_LEN]);
void bp_sha256(const void *p, size_t n, uint8_t out[BP_SHA256_LEN]);

struct bp_hmac {
	struct bp_sha256 inner, outer;
};

/* HMAC-SHA-256 with key (any length; longer than a block: hashed). */
void bp_hmac_init(struct bp_hmac *m, const void *key, size_t klen);
void bp_hmac_update(struct bp_hmac *m, const void *p, size_t n);
void bp_hmac_final(struct bp_hmac *m, uint8_t out[BP_SHA256_LEN]);
void bp_hmac_sha256(const void *key, size_t klen, const void *p, size_t n,
		    uint8_t out[BP_SHA256_LEN]);

/* 1 when the n bytes at a and b are equal, in a time that does not
 * depend on where they differ. */
int bp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif /* BP_SHA256_H */
