/* bp_sink_tcp.h -- the TCP stream sink (output => {tcp, Address}): the
 * session's CTF packets, unchanged, over one TCP connection (see
 * bp_sink_tcp.c; the wire protocol is in docs/format.md, "Stream").
 */
#ifndef BP_SINK_TCP_H
#define BP_SINK_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "bp_format.h"
#include "bp_sha256.h"

struct bp_session;
struct bp_slot;
struct bp_tcp_sink;

/* Frame header on the wire: magic, type, payload length (little endian). */
#define BP_STREAM_MAGIC 0x31535042u /* "BPS1" */
#define BP_STREAM_FRAME_HDR 12
enum bp_stream_frame {
	BP_STREAM_HELLO = 1,  /* u32 version, uuid[16], u32 proof length
				 (0 or 32), the sender's proof, metadata
				 text */
	BP_STREAM_PACKET = 2, /* one CTF packet, as in a thread-NNN file */
	BP_STREAM_END = 3,    /* the session ended; nothing follows */
	BP_STREAM_REFUSED = 4, /* receiver -> sink: this stream is refused,
				  nothing sent on the connection was kept */
	BP_STREAM_ACK = 5,     /* receiver -> sink: u64 frames of this
				  connection (after HELLO) written */
	BP_STREAM_CHALLENGE = 6, /* sink -> receiver, first: u32 version,
				    the sink's nonce[32] */
	BP_STREAM_PROOF = 7,   /* receiver -> sink: u32 version, the
				  receiver's nonce[32], then its proof[32]
				  when it holds a token */
};
#define BP_STREAM_VERSION 3
#define BP_STREAM_NONCE 32
#define BP_STREAM_CHALLENGE_LEN (4 + BP_STREAM_NONCE)
#define BP_STREAM_PROOF_MIN (4 + BP_STREAM_NONCE)
#define BP_STREAM_PROOF_MAX (4 + BP_STREAM_NONCE + BP_SHA256_LEN)

/* The proofs of the handshake (docs/format.md, "Stream"): the receiver's
 * HMAC-SHA-256(token, "beamprobe-receiver" || nonce_s || nonce_r), the
 * sender's HMAC-SHA-256(token, "beamprobe-sender" || nonce_r || nonce_s)
 * (labels without their NUL; nonce_s the sink's, nonce_r the
 * receiver's). */
static inline void bp_stream_proof(const uint8_t *token, size_t tl,
				   int receiver,
				   const uint8_t nonce_s[BP_STREAM_NONCE],
				   const uint8_t nonce_r[BP_STREAM_NONCE],
				   uint8_t out[BP_SHA256_LEN])
{
	struct bp_hmac m;

	bp_hmac_init(&m, token, tl);
	if (receiver) {
		bp_hmac_update(&m, "beamprobe-receiver", 18);
		bp_hmac_update(&m, nonce_s, BP_STREAM_NONCE);
		bp_hmac_update(&m, nonce_r, BP_STREAM_NONCE);
	} else {
		bp_hmac_update(&m, "beamprobe-sender", 16);
		bp_hmac_update(&m, nonce_r, BP_STREAM_NONCE);
		bp_hmac_update(&m, nonce_s, BP_STREAM_NONCE);
	}
	bp_hmac_final(&m, out);
}

/* Why the sink's last handshake failed (info/stop: the `stream' map's
 * `auth_failure'). */
enum bp_stream_auth_failure {
	BP_AUTH_OK = 0,
	BP_AUTH_TIMEOUT,   /* no proof within BP_STREAM_AUTH_MS */
	BP_AUTH_CLOSED,    /* the peer closed before its proof */
	BP_AUTH_GARBAGE,   /* not a PROOF frame */
	BP_AUTH_VERSION,   /* a PROOF of another stream version */
	BP_AUTH_NO_PROOF,  /* the receiver holds no token, the sink does */
	BP_AUTH_BAD_PROOF, /* the proof is wrong: another token */
	BP_AUTH_RANDOM,    /* getrandom failed: no nonce */
};
#define BP_STREAM_AUTH_MS 3000
/* A token the receiver checks (output => {tcp, A, #{token => T}},
 * `receive --token-file', given by attach itself): at most this long. */
#define BP_STREAM_TOKEN_MAX 256

/* Both ends of a stream connection: a peer that is gone without a word
 * (its host down, a NAT or firewall that forgot the connection) is
 * noticed after BP_STREAM_DEAD_S s of silence (keepalive probes every 5
 * s after 10 idle, 3 unanswered); data not acknowledged for that long
 * ends the connection too (TCP_USER_TIMEOUT).  The sink then reconnects
 * and sends again what was not confirmed; the receiver frees its place
 * for it.  The probes also keep an idle stream's NAT mapping alive. */
#define BP_STREAM_DEAD_S 25
static inline void bp_stream_keepalive(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;
	unsigned ms = BP_STREAM_DEAD_S * 1000;

	/* Best effort: a socket without them still works. */
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

/* Counters of the sink (info/stop: the `stream' map). */
struct bp_tcp_counts {
	uint64_t packets_sent, bytes_sent, connects, disconnects;
	uint64_t packets_dropped, events_dropped; /* not confirmed written by
						     the receiver: dropped at
						     the source, refused, or
						     unconfirmed at the end */
	uint64_t refused; /* connections the receiver refused */
	uint64_t events_unconfirmed; /* of events_dropped: sent, but not
					confirmed before the end's wait ran
					out (they may have arrived) */
	uint64_t events_both; /* of events_dropped: events the file sink
				 lost too (bp_losses.h) */
	uint64_t auth_failures; /* connections closed by the handshake */
	int auth_failure;       /* the last one's enum bp_stream_auth_failure */
	int connected;
};

/* Makes the sink of session owner for address addr (IPv4 or IPv6) with a send queue of
 * queue_bytes.  NULL on allocation failure.  Control context. */
struct bp_tcp_sink *bp_tcp_new(struct bp_session *owner,
			       const struct sockaddr_storage *addr,
			       socklen_t addrlen, uint64_t queue_bytes,
			       uint32_t max_slots, size_t packet_size);
void bp_tcp_free(struct bp_tcp_sink *t);

/* The token both ends prove they know (before bp_tcp_set_metadata); EINVAL
 * when longer than BP_STREAM_TOKEN_MAX. */
int bp_tcp_set_token(struct bp_tcp_sink *t, const uint8_t *token,
		     size_t len);

/* Keeps the metadata text sent at the start of every connection. */
int bp_tcp_set_metadata(struct bp_tcp_sink *t, const uint8_t uuid[16],
			const char *text, size_t len);

/* Adds one event of slot sl (collector thread); file_lost: the file
 * sink lost it (refused or not written), so that a loss of both sinks
 * is counted once (bp_losses.h). */
void bp_tcp_add(struct bp_session *s, struct bp_slot *sl, const uint8_t *ev,
		uint32_t len, int file_lost);

/* The files lost n more user events of slot i that went into a file
 * packet (one that could not be written, files removed): paired with
 * the stream's losses of that slot, counted once (bp_losses.h).  A NULL
 * t does nothing.  Collector thread. */
void bp_tcp_file_lost(struct bp_tcp_sink *t, uint32_t i, uint64_t n);

/* Queues partial packets (force: even empty ones) and sends what the
 * socket takes now; connects or reconnects when due.  Never blocks.
 * Collector thread. */
void bp_tcp_flush(struct bp_session *s, int force);
void bp_tcp_pump(struct bp_session *s);

/* Final: drops events, the last packets and the END frame, sent within
 * about a second at most; then the connection is closed.  Collector. */
void bp_tcp_finish(struct bp_session *s);

void bp_tcp_counts(struct bp_tcp_sink *t, struct bp_tcp_counts *c);

#endif /* BP_SINK_TCP_H */
