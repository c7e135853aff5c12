/* bp_recv.h -- the receiving end of the TCP stream sink (output =>
 * {tcp, Address}): writes the frames of one session into a trace
 * directory, whole packets only (see bp_recv.c; wire format:
 * docs/format.md, "Stream").  Used by `beamprobe receive' and `attach'.
 */
#ifndef BP_RECV_H
#define BP_RECV_H

#include <stddef.h>
#include <stdint.h>

#define BP_RECV_MAX_THREADS 1024
#define BP_RECV_COMPLETE ".complete" /* in DIR once the END frame came */

struct bp_recv_conn {
	int fd;
	uint8_t *buf; /* one frame at most */
	size_t len, cap;
	int challenged; /* the CHALLENGE came and our PROOF went */
	int hello;    /* the HELLO frame was read (and proved) */
	uint8_t nonce_s[32], nonce_r[32]; /* the sink's, ours */
	uint64_t frames, acked; /* frames written after HELLO; confirmed */
	uint64_t since_ms;      /* accepted at (CLOCK_MONOTONIC) */
	char peer[64];          /* its address, for messages */
};

struct bp_recv {
	char dir[4096];
	int dirfd;
	uint8_t uuid[16];
	int have_uuid;
	int fds[BP_RECV_MAX_THREADS]; /* thread-NNN files, -1 until opened */
	uint64_t packets, bytes, connections;
	/* Next packet sequence number per thread: a packet sent again after
	 * a reconnection (its confirmation was lost) is skipped. */
	uint64_t next_seq[BP_RECV_MAX_THREADS];
	uint64_t resent;   /* packets skipped so */
	uint64_t fd_shortages; /* times the thread files were closed to
				  open another (out of descriptors) */
	struct bp_recv *next_open; /* the process's open receivers (attach
				      --cluster: one per node) */
	uint64_t turned_away; /* connections refused: another sender held
				 the place */
	uint64_t bad_token;   /* connections refused: wrong or no token */
	uint64_t strangers;   /* connections refused: their first bytes
				 are not a stream frame (a port scan, a
				 health check, another protocol) */
	uint64_t unproved;    /* of them: closed by the sender after our
				 proof (it holds another token) */
	int ended;    /* END frame received */
	/* Both ends prove they know this token (the handshake,
	 * docs/format.md "Stream"; token_len 0: any sender, and no proof
	 * given; see bp_recv_token). */
	uint8_t token[256];
	size_t token_len;
	int quiet;
};

/* Creates dir (0700; an existing one must be empty and ours).  0, or -1
 * with the reason printed. */
int bp_recv_open(struct bp_recv *r, const char *dir);
void bp_recv_close(struct bp_recv *r);

/* Parses "HOST:PORT", "[V6]:PORT" or "PORT" (host 127.0.0.1) and listens
 * there; port 0 picks one.  The listening fd, or -1 with the reason
 * printed.  bound_port: the port bound. */
int bp_recv_listen(const char *addr, int *bound_port);

/* Makes a random token for r (16 bytes from getrandom), written as hex
 * into hex (33 bytes) unless NULL; 0, or -1 with the reason printed.  For the
 * commands that start the sender themselves (attach, record). */
int bp_recv_new_token(struct bp_recv *r, char hex[33]);
/* Reads r's token from file (its bytes, a final newline dropped); 0, or
 * -1 with the reason printed. */
int bp_recv_token_file(struct bp_recv *r, const char *file);

void bp_recv_conn_init(struct bp_recv_conn *c, int fd);

/* A connection waiting on lfd is accepted into c if c is free, or if c
 * has not sent its HELLO within BP_RECV_HELLO_MS (it gives its place);
 * else it is closed (counted in r->turned_away, the first one named).
 * When the process is out of descriptors the call waits 100 ms, so that
 * a caller's poll loop does not spin on the waiting connection.
 * 1 if a connection was taken. */
#define BP_RECV_HELLO_MS 3000
int bp_recv_accept(struct bp_recv *r, int lfd, struct bp_recv_conn *c);
void bp_recv_conn_close(struct bp_recv_conn *c);

/* Reads what is available on c and writes the whole frames.  Returns 1
 * while the connection is open, 0 when it ended (EOF, END frame), -1 when
 * it sent something malformed (reported; the connection must be closed). */
int bp_recv_conn_read(struct bp_recv *r, struct bp_recv_conn *c);

#endif /* BP_RECV_H */
