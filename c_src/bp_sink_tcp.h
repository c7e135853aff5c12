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

struct bp_session;
struct bp_slot;
struct bp_tcp_sink;

/* Frame header on the wire: magic, type, payload length (little endian). */
#define BP_STREAM_MAGIC 0x31535042u /* "BPS1" */
#define BP_STREAM_FRAME_HDR 12
enum bp_stream_frame {
	BP_STREAM_HELLO = 1,  /* u32 version, uuid[16], u32 token length,
				 token, metadata text */
	BP_STREAM_PACKET = 2, /* one CTF packet, as in a thread-NNN file */
	BP_STREAM_END = 3,    /* the session ended; nothing follows */
	BP_STREAM_REFUSED = 4, /* receiver -> sink: this stream is refused,
				  nothing sent on the connection was kept */
	BP_STREAM_ACK = 5,     /* receiver -> sink: u64 frames of this
				  connection (after HELLO) written */
};
#define BP_STREAM_VERSION 2
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
	int connected;
};

/* Makes the sink of session owner for address addr (IPv4 or IPv6) with a send queue of
 * queue_bytes.  NULL on allocation failure.  Control context. */
struct bp_tcp_sink *bp_tcp_new(struct bp_session *owner,
			       const struct sockaddr_storage *addr,
			       socklen_t addrlen, uint64_t queue_bytes,
			       uint32_t max_slots, size_t packet_size);
void bp_tcp_free(struct bp_tcp_sink *t);

/* The token sent in every HELLO (before bp_tcp_set_metadata); EINVAL
 * when longer than BP_STREAM_TOKEN_MAX. */
int bp_tcp_set_token(struct bp_tcp_sink *t, const uint8_t *token,
		     size_t len);

/* Keeps the metadata text sent at the start of every connection. */
int bp_tcp_set_metadata(struct bp_tcp_sink *t, const uint8_t uuid[16],
			const char *text, size_t len);

/* Adds one event of slot sl (collector thread). */
void bp_tcp_add(struct bp_session *s, struct bp_slot *sl, const uint8_t *ev,
		uint32_t len);

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
