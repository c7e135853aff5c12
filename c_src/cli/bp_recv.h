/* bp_recv.h -- the receiving end of the TCP stream sink (output =>
 * {tcp, Address}): writes the frames of one session into a trace
 * directory, whole packets only (see bp_recv.c; wire format:
 * docs/format.md, "Stream").  Used by `beamprobe receive' and `attach'.
 */
#ifndef BP_RECV_H
#define BP_RECV_H

#include <poll.h>
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

/* Connections still in the handshake, at most this many at once (the
 * lobby, bp_recv_lobby.c); the pollfds a caller gives bp_recv_serve. */
#define BP_RECV_LOBBY 16
#define BP_RECV_NFDS (2 + BP_RECV_LOBBY)

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
	uint64_t unfinished;  /* connections closed in the lobby: no
				 greeting within BP_RECV_HELLO_MS, pushed
				 out of a full lobby, or another sender's
				 greeting came first */
	uint64_t malformed;   /* connections closed for a damaged stream */
	/* The connections in the handshake (fd -1: a free place); the
	 * first whose HELLO proves it becomes the stream. */
	struct bp_recv_conn lobby[BP_RECV_LOBBY];
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

/* The receiver's connections (bp_recv_lobby.c).  Any local user can
 * connect to the port, again and again: so a newcomer does not take the
 * stream's place, it waits in the lobby, up to BP_RECV_LOBBY of them at
 * once, each for at most BP_RECV_HELLO_MS; the first whose HELLO passes
 * (with a token: proves it) becomes the stream c and the others are
 * closed.  A full lobby closes for a newcomer its oldest connection that
 * sent nothing yet, or else its oldest.  While c holds a stream,
 * newcomers are turned away (one sender at a time; counted in
 * r->turned_away, the first one named).
 *
 * bp_recv_pollfds fills p (at most BP_RECV_NFDS entries: lfd, c's fd or
 * -1, which poll() skips, then the lobby's open connections: no more
 * than there are, as poll() refuses more entries than RLIMIT_NOFILE),
 * closes the lobby's connections past their time, and returns the
 * count; bp_recv_serve then accepts and reads what poll() reported in
 * those np entries.  It returns 1 when a stream began (r->connections
 * counts them), else 0; a connection whose stream is damaged is closed
 * and counted in r->malformed.  Out of descriptors, the accept waits
 * 100 ms, so that a caller's poll loop does not spin. */
#define BP_RECV_HELLO_MS 3000
int bp_recv_pollfds(struct bp_recv *r, int lfd, const struct bp_recv_conn *c,
		    struct pollfd p[BP_RECV_NFDS]);
int bp_recv_serve(struct bp_recv *r, int lfd, struct bp_recv_conn *c,
		  const struct pollfd *p, int np);
/* No connection open: neither the stream c nor one in the lobby (a
 * sender in its handshake, or whose whole stream waits unread). */
int bp_recv_idle(const struct bp_recv *r, const struct bp_recv_conn *c);
/* Closes the lobby's connections (bp_recv_close does it too). */
void bp_recv_lobby_close(struct bp_recv *r);

/* CLOCK_MONOTONIC, in milliseconds. */
uint64_t bp_recv_mono_ms(void);
void bp_recv_conn_close(struct bp_recv_conn *c);

/* Reads what is available on c and writes the whole frames.  Returns 1
 * while the connection is open, 0 when it ended (EOF, END frame), -1 when
 * it sent something malformed (reported; the connection must be closed). */
int bp_recv_conn_read(struct bp_recv *r, struct bp_recv_conn *c);

#endif /* BP_RECV_H */
