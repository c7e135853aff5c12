/* bp_sha256.c -- SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104).
 * Checked against the FIPS 180-4 and RFC 4231 vectors (test/c/test_sha256.c)
 * and against Erlang's crypto (beamprobe_stream_SUITE:hmac_matches_crypto).
 */
#include "bp_sha256.h"

#include <string.h>

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

static void block(struct bp_sha256 *c, const uint8_t *p)
{
	uint32_t w[64], a, b, cc, d, e, f, g, h;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
	e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
			      ((e & f) ^ (~e & g)) + K[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
			      ((a & b) ^ (a & cc) ^ (b & cc));
		h = g, g = f, f = e, e = d + t1;
		d = cc, cc = b, b = a, a = t1 + t2;
	}
	c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d;
	c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

void bp_sha256_init(struct bp_sha256 *c)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
				       0xa54ff53a, 0x510e527f, 0x9b05688c,
				       0x1f83d9ab, 0x5be0cd19};
	memcpy(c->h, iv, sizeof iv);
	c->total = 0;
	c->blen = 0;
}

void bp_sha256_update(struct bp_sha256 *c, const void *data, size_t n)
{
	const uint8_t *p = data;

	c->total += n;
	if (c->blen) {
		size_t k = BP_SHA256_BLOCK - c->blen;
		if (k > n)
			k = n;
		memcpy(c->buf + c->blen, p, k);
		c->blen += k;
		p += k;
		n -= k;
		if (c->blen < BP_SHA256_BLOCK)
			return;
		block(c, c->buf);
		c->blen = 0;
	}
	for (; n >= BP_SHA256_BLOCK; p += BP_SHA256_BLOCK, n -= BP_SHA256_BLOCK)
		block(c, p);
	if (n)
		memcpy(c->buf, p, n);
	c->blen = n;
}

void bp_sha256_final(struct bp_sha256 *c, uint8_t out[BP_SHA256_LEN])
{
	uint64_t bits = c->total * 8;
	uint8_t pad[BP_SHA256_BLOCK + 8] = {0x80};
	size_t padlen = (c->blen < 56 ? 56 : 120) - c->blen;

	for (int i = 0; i < 8; i++)
		pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
	bp_sha256_update(c, pad, padlen + 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}

void bp_sha256(const void *p, size_t n, uint8_t out[BP_SHA256_LEN])
{
	struct bp_sha256 c;

	bp_sha256_init(&c);
	bp_sha256_update(&c, p, n);
	bp_sha256_final(&c, out);
}

void bp_hmac_init(struct bp_hmac *m, const void *key, size_t klen)
{
	uint8_t k[BP_SHA256_BLOCK] = {0}, pad[BP_SHA256_BLOCK];

	if (klen > BP_SHA256_BLOCK)
		bp_sha256(key, klen, k);
	else if (klen)
		memcpy(k, key, klen);
	for (int i = 0; i < BP_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	bp_sha256_init(&m->inner);
	bp_sha256_update(&m->inner, pad, sizeof pad);
	for (int i = 0; i < BP_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	bp_sha256_init(&m->outer);
	bp_sha256_update(&m->outer, pad, sizeof pad);
}

void bp_hmac_update(struct bp_hmac *m, const void *p, size_t n)
{
	bp_sha256_update(&m->inner, p, n);
}

void bp_hmac_final(struct bp_hmac *m, uint8_t out[BP_SHA256_LEN])
{
	uint8_t ih[BP_SHA256_LEN];

	bp_sha256_final(&m->inner, ih);
	bp_sha256_update(&m->outer, ih, sizeof ih);
	bp_sha256_final(&m->outer, out);
}

void bp_hmac_sha256(const void *key, size_t klen, const void *p, size_t n,
		    uint8_t out[BP_SHA256_LEN])
{
	struct bp_hmac m;

	bp_hmac_init(&m, key, klen);
	bp_hmac_update(&m, p, n);
	bp_hmac_final(&m, out);
}

int bp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	volatile uint8_t d = 0;

	for (size_t i = 0; i < n; i++)
		d |= (uint8_t)(a[i] ^ b[i]);
	return d == 0;
}
