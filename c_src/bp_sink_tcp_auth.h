/* bp_sink_tcp_auth.h -- the sink's side of the stream's handshake
 * (version 3, docs/format.md "Stream"): its CHALLENGE frame, the check
 * of the receiver's PROOF, the sender's proof for the HELLO.  Runs on
 * the collector thread with the sink's non-blocking socket: never waits.
 */
#ifndef BP_SINK_TCP_AUTH_H
#define BP_SINK_TCP_AUTH_H

#include "bp_sink_tcp.h"

enum bp_tcp_auth_state {
	BP_TCP_AUTH_NONE,  /* not connected */
	BP_TCP_AUTH_SEND,  /* sending the CHALLENGE frame */
	BP_TCP_AUTH_WAIT,  /* waiting for the PROOF (until deadline) */
	BP_TCP_AUTH_DONE,  /* the receiver proved it: HELLO and data go */
};

struct bp_tcp_auth {
	int state;
	uint8_t nonce_s[BP_STREAM_NONCE], nonce_r[BP_STREAM_NONCE];
	uint8_t out[BP_STREAM_FRAME_HDR + BP_STREAM_CHALLENGE_LEN];
	size_t off;        /* bytes of out sent */
	uint8_t in[BP_STREAM_FRAME_HDR + BP_STREAM_PROOF_MAX];
	size_t inlen;      /* bytes of the PROOF frame read */
	uint64_t deadline; /* ns (CLOCK_MONOTONIC): the PROOF comes by then */
};

/* A new connection: a fresh nonce, the CHALLENGE frame in a->out.
 * BP_AUTH_OK, or BP_AUTH_RANDOM (getrandom failed; never blocks). */
int bp_tcp_auth_begin(struct bp_tcp_auth *a, uint64_t deadline);

/* Reads the PROOF on fd once the CHALLENGE (a->out) is sent (the sink
 * sends it: a->off, then a->state WAIT), as far as the non-blocking
 * socket allows, never waiting (a partial read is kept; not a byte
 * beyond the PROOF frame is read).  BP_AUTH_OK (a->state DONE when the
 * PROOF passed, else still under way), or a failure (enum
 * bp_stream_auth_failure: the deadline passed, also while the CHALLENGE
 * is still being sent; a wrong or strange answer; the connection
 * closed). */
int bp_tcp_auth_read(struct bp_tcp_auth *a, int fd, const uint8_t *token,
		     size_t tl, uint64_t now);

/* The receiver's first frame (header h, payload p of n bytes, whole):
 * BP_AUTH_OK and a->state DONE when it proves the token (or neither end
 * holds one; a sink without a token takes any receiver), else why not. */
int bp_tcp_auth_check(struct bp_tcp_auth *a, const uint8_t *token,
		      size_t tl, uint32_t type, const uint8_t *p, uint32_t n);

/* The sender's proof for the HELLO of this connection. */
void bp_tcp_auth_sender(const struct bp_tcp_auth *a, const uint8_t *token,
			size_t tl, uint8_t out[BP_SHA256_LEN]);

/* The atom name of a failure (enum bp_stream_auth_failure). */
const char *bp_tcp_auth_reason(int why);

#endif /* BP_SINK_TCP_AUTH_H */
