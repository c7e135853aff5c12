/* test_sha256.c -- c_src/bp_sha256.c against the FIPS 180-4 example
 * vectors (SHA-256) and RFC 4231's test cases 1-7 (HMAC-SHA-256), hashed
 * whole and fed in pieces of every size (the block boundary crossed at
 * every offset); and bp_ct_equal.
 */
#include "bp_sha256.h"
#include "tap.h"

static void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static size_t unhex(const char *h, uint8_t *out)
{
	size_t n = strlen(h) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(h + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
	return n;
}

static void sha_is(const char *msg, size_t n, const char *want,
		   const char *name)
{
	uint8_t d[32];
	char got[65];

	bp_sha256(msg, n, d);
	hex(d, 32, got);
	is_str(got, want, "SHA-256 %s", name);
	/* The same fed in pieces of k bytes. */
	for (size_t k = 1; k <= 130; k++) {
		struct bp_sha256 c;
		bp_sha256_init(&c);
		for (size_t o = 0; o < n; o += k)
			bp_sha256_update(&c, msg + o, n - o < k ? n - o : k);
		bp_sha256_final(&c, d);
		hex(d, 32, got);
		check(strcmp(got, want) == 0);
	}
	ok_bulk("SHA-256 %s fed in pieces of 1..130 bytes", name);
}

struct hvec {
	const char *key, *data, *mac; /* hex; mac may be truncated (case 5) */
};

/* RFC 4231, section 4: test cases 1-7, HMAC-SHA-256. */
static const struct hvec rfc4231[] = {
	{"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
	 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
	{"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
	 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	 "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
	 "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
	{"0102030405060708090a0b0c0d0e0f10111213141516171819",
	 "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
	 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
	{"0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c",
	 "546573742057697468205472756e636174696f6e",
	 "a3b6167473100ee06e0c796c2955552b"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	 "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669727374",
	 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	 "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a6520646174612e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e6720757365642062792074686520484d414320616c676f726974686d2e",
	 "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
};

int main(void)
{
	static char million[1000000];

	sha_is("abc", 3,
	       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	       "\"abc\"");
	sha_is("", 0,
	       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	       "\"\"");
	sha_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	       "448-bit message");
	sha_is("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
	       112,
	       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
	       "896-bit message");
	memset(million, 'a', sizeof million);
	sha_is(million, sizeof million,
	       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
	       "one million 'a'");
	for (size_t i = 0; i < sizeof rfc4231 / sizeof *rfc4231; i++) {
		uint8_t key[200], data[200], mac[32];
		size_t kl = unhex(rfc4231[i].key, key);
		size_t dl = unhex(rfc4231[i].data, data);
		char got[65];
		struct bp_hmac m;

		bp_hmac_sha256(key, kl, data, dl, mac);
		hex(mac, 32, got);
		got[strlen(rfc4231[i].mac)] = '\0'; /* case 5: truncated */
		is_str(got, rfc4231[i].mac, "HMAC-SHA-256 RFC 4231 case %zu",
		       i + 1);
		bp_hmac_init(&m, key, kl);
		for (size_t o = 0; o < dl; o++)
			bp_hmac_update(&m, data + o, 1);
		bp_hmac_final(&m, mac);
		hex(mac, 32, got);
		got[strlen(rfc4231[i].mac)] = '\0';
		is_str(got, rfc4231[i].mac,
		       "HMAC-SHA-256 RFC 4231 case %zu, a byte at a time",
		       i + 1);
	}
	{
		uint8_t a[32] = {0}, b[32] = {0};
		ok(bp_ct_equal(a, b, 32), "bp_ct_equal: equal");
		for (int i = 0; i < 32; i++) {
			b[i] = 1;
			check(!bp_ct_equal(a, b, 32));
			b[i] = 0;
		}
		ok_bulk("bp_ct_equal: a difference at every place");
	}
	return tap_done();
}
