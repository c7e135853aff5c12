/* bp_sink_tcp_auth.c -- the sink's side of the stream's mutual
 * challenge-response handshake (stream version 3; docs/format.md,
 * "Stream").  The sink sends nothing but its version and a fresh nonce
 * until the receiver has proved it knows the token:
 *
 *   sink -> receiver   CHALLENGE  u32 version, nonce_s[32]
 *   receiver -> sink   PROOF      u32 version, nonce_r[32],
 *                                 HMAC(token, "beamprobe-receiver" ||
 *                                      nonce_s || nonce_r)   (with a token)
 *   sink -> receiver   HELLO      u32 version, uuid, u32 32,
 *                                 HMAC(token, "beamprobe-sender" ||
 *                                      nonce_r || nonce_s), metadata
 *
 * The proofs are compared in constant time.  A failure closes the
 * connection; it is counted and retried on the normal reconnect schedule.
 */
#include "bp_sink_tcp_auth.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

int bp_tcp_auth_begin(struct bp_tcp_auth *a, uint64_t deadline)
{
	uint8_t *p = a->out;

	memset(a, 0, sizeof *a);
	if (getrandom(a->nonce_s, BP_STREAM_NONCE, GRND_NONBLOCK) !=
	    BP_STREAM_NONCE)
		return BP_AUTH_RANDOM;
	bp_put_u32(p, BP_STREAM_MAGIC);
	bp_put_u32(p + 4, BP_STREAM_CHALLENGE);
	bp_put_u32(p + 8, BP_STREAM_CHALLENGE_LEN);
	bp_put_u32(p + BP_STREAM_FRAME_HDR, BP_STREAM_VERSION);
	memcpy(p + BP_STREAM_FRAME_HDR + 4, a->nonce_s, BP_STREAM_NONCE);
	a->state = BP_TCP_AUTH_SEND;
	a->deadline = deadline;
	return BP_AUTH_OK;
}

int bp_tcp_auth_check(struct bp_tcp_auth *a, const uint8_t *token,
		      size_t tl, uint32_t type, const uint8_t *p, uint32_t n)
{
	uint8_t want[BP_SHA256_LEN];

	if (type != BP_STREAM_PROOF ||
	    (n != BP_STREAM_PROOF_MIN && n != BP_STREAM_PROOF_MAX))
		return BP_AUTH_GARBAGE;
	if (bp_get_u32(p) != BP_STREAM_VERSION)
		return BP_AUTH_VERSION;
	memcpy(a->nonce_r, p + 4, BP_STREAM_NONCE);
	if (tl) {
		if (n != BP_STREAM_PROOF_MAX)
			return BP_AUTH_NO_PROOF;
		bp_stream_proof(token, tl, 1, a->nonce_s, a->nonce_r, want);
		if (!bp_ct_equal(want, p + 4 + BP_STREAM_NONCE, BP_SHA256_LEN))
			return BP_AUTH_BAD_PROOF;
	}
	a->state = BP_TCP_AUTH_DONE;
	return BP_AUTH_OK;
}

int bp_tcp_auth_read(struct bp_tcp_auth *a, int fd, const uint8_t *token,
		     size_t tl, uint64_t now)
{
	while (a->state == BP_TCP_AUTH_WAIT) {
		/* The header, then exactly its payload: what follows the
		 * PROOF is the receiver's later frames (check_peer's). */
		size_t want = BP_STREAM_FRAME_HDR;
		ssize_t r;
		uint32_t n = 0;

		if (a->inlen >= BP_STREAM_FRAME_HDR) {
			n = bp_get_u32(a->in + 8);
			want += n;
		}
		if (a->inlen == want)
			return bp_tcp_auth_check(a, token, tl,
						 bp_get_u32(a->in + 4),
						 a->in + BP_STREAM_FRAME_HDR, n);
		r = recv(fd, a->in + a->inlen, want - a->inlen, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r <= 0)
			return BP_AUTH_CLOSED;
		a->inlen += (size_t)r;
		if (a->inlen >= 4 && bp_get_u32(a->in) != BP_STREAM_MAGIC)
			return BP_AUTH_GARBAGE;
		if (a->inlen == BP_STREAM_FRAME_HDR &&
		    (bp_get_u32(a->in + 4) != BP_STREAM_PROOF ||
		     bp_get_u32(a->in + 8) > BP_STREAM_PROOF_MAX))
			return BP_AUTH_GARBAGE; /* nor an oversize length */
	}
	if (a->state != BP_TCP_AUTH_DONE && now >= a->deadline)
		return BP_AUTH_TIMEOUT;
	return BP_AUTH_OK;
}

void bp_tcp_auth_sender(const struct bp_tcp_auth *a, const uint8_t *token,
			size_t tl, uint8_t out[BP_SHA256_LEN])
{
	bp_stream_proof(token, tl, 0, a->nonce_s, a->nonce_r, out);
}

const char *bp_tcp_auth_reason(int why)
{
	static const char *const names[] = {
		"none", "timeout", "closed", "garbage", "version",
		"no_proof", "bad_proof", "random"};

	return why >= 0 && why < (int)(sizeof names / sizeof *names)
		       ? names[why]
		       : "unknown";
}
