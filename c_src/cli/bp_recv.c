/* bp_recv.c -- writes a TCP stream (bp_sink_tcp.c on the node) into a
 * trace directory: DIR/metadata from the HELLO frame, each PACKET frame
 * appended whole to DIR/thread-NNN (NNN from the packet header), and
 * DIR/.complete once the END frame came (print --follow stops there).
 * Files are created 0600, exclusively, never through a symlink.  A
 * reconnection of the same session (same UUID) continues the same files;
 * another session's stream is refused.  Written frames are confirmed to
 * the sender (ACK), which sends unconfirmed ones again after a
 * reconnection: a packet below its thread's next sequence number is
 * skipped.  Each connection starts with the handshake (stream version 3):
 * the sender's CHALLENGE (its nonce), our PROOF (our nonce and, with a
 * token, HMAC-SHA-256 of both under the token), then its HELLO carrying
 * its own proof, checked in constant time.
 */
#define _GNU_SOURCE /* accept4 */
#include "bp_recv.h"
#include "../bp_ctf.h"
#include "../bp_format.h"
#include "../bp_sink_tcp.h"
#include "../bp_sha256.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void say(const char *fmt, const char *a, const char *b)
{
	fputs("beamprobe: ", stderr);
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The receivers open in this process (bp_recv_open until bp_recv_close):
 * out of descriptors, one that holds no thread file of its own closes
 * theirs (thread_fd).  The command line is single-threaded. */
static struct bp_recv *open_recvs;

static void unlink_open(struct bp_recv *r)
{
	for (struct bp_recv **p = &open_recvs; *p; p = &(*p)->next_open)
		if (*p == r) {
			*p = r->next_open;
			break;
		}
	r->next_open = NULL;
}

/* Closes r's thread files but `keep' (-1: all); their count. */
static int close_thread_files(struct bp_recv *r, int keep)
{
	int closed = 0;

	for (int i = 0; i < BP_RECV_MAX_THREADS; i++)
		if (i != keep && r->fds[i] >= 0) {
			close(r->fds[i]);
			r->fds[i] = -1;
			closed++;
		}
	return closed;
}

int bp_recv_open(struct bp_recv *r, const char *dir)
{
	struct stat sb;
	DIR *d;
	struct dirent *e;

	memset(r, 0, sizeof *r);
	r->dirfd = -1;
	for (int i = 0; i < BP_RECV_MAX_THREADS; i++)
		r->fds[i] = -1;
	for (int i = 0; i < BP_RECV_LOBBY; i++)
		bp_recv_conn_init(&r->lobby[i], -1);
	if (strlen(dir) >= sizeof r->dir) {
		say("%s: name too long%s", dir, "");
		return -1;
	}
	strcpy(r->dir, dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		say("%s: %s", dir, strerror(errno));
		return -1;
	}
	r->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->dirfd < 0) {
		say("%s: %s", dir, strerror(errno));
		return -1;
	}
	if (fstat(r->dirfd, &sb) != 0 || sb.st_uid != geteuid() ||
	    (sb.st_mode & (S_IWGRP | S_IWOTH))) {
		say("%s: %s", dir,
		    "not ours alone (another owner, or group/world-writable)");
		goto fail;
	}
	d = fdopendir(dup(r->dirfd));
	if (!d) {
		say("%s: %s", dir, strerror(errno));
		goto fail;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			closedir(d);
			say("%s: %s", dir, "exists and is not empty");
			goto fail;
		}
	closedir(d);
	r->next_open = open_recvs;
	open_recvs = r;
	return 0;
fail:
	close(r->dirfd);
	r->dirfd = -1;
	return -1;
}

void bp_recv_close(struct bp_recv *r)
{
	unlink_open(r);
	bp_recv_lobby_close(r);
	for (int i = 0; i < BP_RECV_MAX_THREADS; i++)
		if (r->fds[i] >= 0)
			close(r->fds[i]);
	if (r->dirfd >= 0)
		close(r->dirfd);
	r->dirfd = -1;
}

int bp_recv_listen(const char *addr, int *bound_port)
{
	char host[256] = "127.0.0.1", port[16];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints, *ai = NULL;
	int fd, one = 1, rc;

	if (colon) {
		size_t hl = (size_t)(colon - addr);
		if (hl >= sizeof host || strlen(colon + 1) >= sizeof port)
			goto bad;
		memcpy(host, addr, hl);
		host[hl] = '\0';
		if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
			memmove(host, host + 1, hl - 2);
			host[hl - 2] = '\0';
		}
		strcpy(port, colon + 1);
	} else {
		if (strlen(addr) >= sizeof port)
			goto bad;
		strcpy(port, addr);
	}
	/* getaddrinfo() takes any digits and keeps the low 16 bits: 99999
	 * listened on 34463, 65536 on a random port. */
	if (!port[0] || strspn(port, "0123456789") != strlen(port) ||
	    strtoul(port, NULL, 10) > 65535)
		goto bad;
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0) {
		say("cannot listen on %s: %s", addr, gai_strerror(rc));
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
		say("cannot listen on %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	if (bound_port) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		getsockname(fd, (struct sockaddr *)&ss, &sl);
		*bound_port = ss.ss_family == AF_INET6
				      ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
				      : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	}
	return fd;
bad:
	say("bad address '%s'%s (expected HOST:PORT or PORT, the port 0 to 65535)", addr, "");
	return -1;
}

int bp_recv_new_token(struct bp_recv *r, char hex[33])
{
	if (getrandom(r->token, 16, 0) != 16) {
		say("cannot make a stream token: %s%s", strerror(errno), "");
		return -1;
	}
	r->token_len = 16;
	for (int i = 0; hex && i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", r->token[i]);
	return 0;
}

int bp_recv_token_file(struct bp_recv *r, const char *file)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	uint8_t b[BP_STREAM_TOKEN_MAX + 3];
	ssize_t n;

	if (fd < 0) {
		say("%s: %s", file, strerror(errno));
		return -1;
	}
	n = read(fd, b, sizeof b);
	close(fd);
	if (n < 0) {
		say("%s: %s", file, strerror(errno));
		return -1;
	}
	while (n > 0 && (b[n - 1] == '\n' || b[n - 1] == '\r'))
		n--;
	if (n == 0 || n > BP_STREAM_TOKEN_MAX) {
		say("%s: %s", file, n ? "longer than 256 bytes"
				      : "empty: no token in it");
		return -1;
	}
	memcpy(r->token, b, (size_t)n);
	r->token_len = (size_t)n;
	return 0;
}

uint64_t bp_recv_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void bp_recv_conn_init(struct bp_recv_conn *c, int fd)
{
	memset(c, 0, sizeof *c);
	c->fd = fd;
	c->since_ms = bp_recv_mono_ms();
}

/* Tells the sender how many frames of this connection are written (the
 * sink keeps them queued until then).  Not waited for (a later ACK says
 * as much), but for the last one (wait: up to a second). */
static void send_ack(struct bp_recv_conn *c, int wait)
{
	uint8_t f[BP_STREAM_FRAME_HDR + 8];
	ssize_t w;

	if (c->frames == c->acked || c->fd < 0)
		return;
	bp_put_u32(f, BP_STREAM_MAGIC);
	bp_put_u32(f + 4, BP_STREAM_ACK);
	bp_put_u32(f + 8, 8);
	bp_put_u64(f + BP_STREAM_FRAME_HDR, c->frames);
	if (wait) {
		struct pollfd p = {c->fd, POLLOUT, 0};
		if (poll(&p, 1, 1000) <= 0)
			return;
	}
	do
		w = send(c->fd, f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	/* 20 bytes into an empty buffer go whole or not at all. */
	if (w == (ssize_t)sizeof f)
		c->acked = c->frames;
}

void bp_recv_conn_close(struct bp_recv_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->len = c->cap = 0;
}

/* What peer c sent is not a stream of this release (what: why).  With a
 * token, a peer is a stranger until its HELLO proves it (any local user
 * can connect to the port): refused and counted as a wrong token is,
 * named thrice, 0.  Else the stream is damaged: -1. */
static int bad_input(struct bp_recv *r, const struct bp_recv_conn *c,
		     const char *what)
{
	if (r->token_len && !c->hello) {
		if (r->bad_token++ - r->unproved < 3)
			say("stream from %s refused: %s", c->peer, what);
		return 0;
	}
	say("stream: %s%s", what, "");
	return -1;
}

/* Without a token: peer c's first bytes are not a frame of the stream at
 * all (no magic): a port scan, a health check, a client of another
 * protocol.  It is no sender, so nothing of the trace is damaged: refused
 * and counted, the first three named, 0.  (It made `receive' exit 2,
 * "malformed", after a whole trace.)  With a token, bad_input() counts
 * it with the strangers that fail the handshake. */
static int stranger(struct bp_recv *r, const struct bp_recv_conn *c)
{
	if (r->strangers++ < 3)
		say("connection from %s refused: %s", c->peer,
		    "not a beamprobe stream");
	return 0;
}

/* The sender speaks another stream version (v, in its first frame). */
static int other_version(struct bp_recv *r, const struct bp_recv_conn *c,
			 uint32_t v)
{
	char why[160];

	snprintf(why, sizeof why,
		 "stream version %u, this beamprobe speaks version %u (sender "
		 "and receiver must be the same release)",
		 v, BP_STREAM_VERSION);
	return bad_input(r, c, why);
}

/* The sender's CHALLENGE (u32 version, its nonce): answered with our
 * PROOF (u32 version, our nonce, and with a token HMAC-SHA-256(token,
 * "beamprobe-receiver" || nonce_s || nonce_r)).  Sent at once without
 * waiting: 80 bytes into a new connection's empty buffer go whole; if
 * not, the connection is closed (the sender tries again). */
static int challenge(struct bp_recv *r, struct bp_recv_conn *c,
		     const uint8_t *p, uint32_t n)
{
	uint8_t f[BP_STREAM_FRAME_HDR + BP_STREAM_PROOF_MAX];
	uint32_t pl = r->token_len ? BP_STREAM_PROOF_MAX : BP_STREAM_PROOF_MIN;
	ssize_t w;

	if (n >= 4 && bp_get_u32(p) != BP_STREAM_VERSION)
		return other_version(r, c, bp_get_u32(p));
	if (n != BP_STREAM_CHALLENGE_LEN || c->challenged)
		return bad_input(r, c, "malformed challenge");
	memcpy(c->nonce_s, p + 4, BP_STREAM_NONCE);
	if (getrandom(c->nonce_r, BP_STREAM_NONCE, 0) != BP_STREAM_NONCE) {
		say("cannot make a nonce: %s%s", strerror(errno), "");
		return 0;
	}
	bp_put_u32(f, BP_STREAM_MAGIC);
	bp_put_u32(f + 4, BP_STREAM_PROOF);
	bp_put_u32(f + 8, pl);
	bp_put_u32(f + BP_STREAM_FRAME_HDR, BP_STREAM_VERSION);
	memcpy(f + BP_STREAM_FRAME_HDR + 4, c->nonce_r, BP_STREAM_NONCE);
	if (r->token_len)
		bp_stream_proof(r->token, r->token_len, 1, c->nonce_s,
				c->nonce_r,
				f + BP_STREAM_FRAME_HDR + 4 + BP_STREAM_NONCE);
	do
		w = send(c->fd, f, BP_STREAM_FRAME_HDR + pl,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)(BP_STREAM_FRAME_HDR + pl)) {
		say("%s: cannot answer its challenge: %s", c->peer,
		    w < 0 ? strerror(errno) : "the socket took part of it");
		return 0;
	}
	c->challenged = 1;
	return 1;
}

static int hello(struct bp_recv *r, struct bp_recv_conn *c, const uint8_t *p,
		 uint32_t n)
{
	char why[160];
	int fd;

	uint32_t tl;

	if (n < 24 || bp_get_u32(p) != BP_STREAM_VERSION)
		return other_version(r, c, n < 4 ? 0 : bp_get_u32(p));
	if (!c->challenged)
		return bad_input(r, c, "a greeting without the challenge first");
	tl = bp_get_u32(p + 20); /* the sender's proof: 0 or 32 bytes */
	if (tl > n - 24 || (tl != 0 && tl != BP_SHA256_LEN)) {
		snprintf(why, sizeof why, "malformed greeting from %s", c->peer);
		return bad_input(r, c, why);
	}
	if (r->token_len) {
		uint8_t want[BP_SHA256_LEN];
		bp_stream_proof(r->token, r->token_len, 0, c->nonce_s,
				c->nonce_r, want);
		if (tl != BP_SHA256_LEN || !bp_ct_equal(want, p + 24, tl))
			return bad_input(r, c,
					 tl ? "wrong token (its proof does not "
					      "match)"
					    : "no token (this receiver expects "
					      "one)");
	}
	if (r->have_uuid) {
		if (memcmp(r->uuid, p + 4, 16) != 0) {
			/* Tell the sender: it counts what it sent as lost. */
			uint8_t f[BP_STREAM_FRAME_HDR];
			bp_put_u32(f, BP_STREAM_MAGIC);
			bp_put_u32(f + 4, BP_STREAM_REFUSED);
			bp_put_u32(f + 8, 0);
			if (send(c->fd, f, sizeof f, MSG_NOSIGNAL) < 0) {
			}
			say("stream: another session's stream refused "
			    "(%s holds one trace)%s", r->dir, "");
			return -1;
		}
		c->hello = 1;
		return 1; /* a reconnection: the same files go on */
	}
	/* Written aside, then linked in whole (failing if a metadata file is
	 * there): a reader following DIR (print --follow) never sees a
	 * metadata file cut short. */
	(void)unlinkat(r->dirfd, ".metadata.tmp", 0);
	fd = openat(r->dirfd, ".metadata.tmp",
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, p + 24 + tl, n - 24 - tl) != 0 ||
	    linkat(r->dirfd, ".metadata.tmp", r->dirfd, "metadata", 0) != 0) {
		say("%s/metadata: %s", r->dir, strerror(errno));
		if (fd >= 0) {
			close(fd);
			(void)unlinkat(r->dirfd, ".metadata.tmp", 0);
		}
		return -1;
	}
	close(fd);
	(void)unlinkat(r->dirfd, ".metadata.tmp", 0);
	memcpy(r->uuid, p + 4, 16);
	r->have_uuid = 1;
	c->hello = 1;
	return 1;
}

/* Opens thread tid's file (appending: it may have been opened before).
 * Out of descriptors (EMFILE, ENFILE: `attach --cluster' receives every
 * node's threads in one process, 64 nodes of 20 threads passed a limit
 * of 1,024), the trace's other thread files are closed, or, if it has
 * none open, another receiver's of this process, and the open tried once
 * more; each is opened again at its next packet.  (The limit
 * is not raised instead: libei's connect waits in select(), which a
 * descriptor past 1,023 would overrun.)  0, or -1 with the reason
 * printed. */
static int thread_fd(struct bp_recv *r, uint32_t tid)
{
	char name[32], path[sizeof r->dir + 32];
	int closed = 0;

	snprintf(name, sizeof name, "thread-%03u", tid);
	for (;;) {
		r->fds[tid] = openat(r->dirfd, name,
				     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
					     O_CLOEXEC,
				     0600);
		if (r->fds[tid] >= 0)
			return 0;
		if (closed || (errno != EMFILE && errno != ENFILE))
			break;
		closed = close_thread_files(r, -1);
		/* None of its own (a node's first packet, the others holding
		 * every descriptor): the other receivers' files. */
		for (struct bp_recv *o = open_recvs; !closed && o;
		     o = o->next_open)
			if (o != r)
				closed = close_thread_files(o, -1);
		if (!closed)
			break;
		r->fd_shortages++;
	}
	snprintf(path, sizeof path, "%s/%s", r->dir, name);
	say("%s: %s", path, strerror(errno));
	return -1;
}

static int packet(struct bp_recv *r, const uint8_t *p, uint32_t n)
{
	uint32_t tid;
	uint64_t seq;

	if (n < BP_PACKET_HEADER_SIZE || n > BP_PACKET_MAX ||
	    bp_get_u32(p + BP_PKT_OFF_MAGIC) != BP_CTF_MAGIC ||
	    memcmp(p + BP_PKT_OFF_UUID, r->uuid, 16) != 0 ||
	    bp_get_u64(p + BP_PKT_OFF_PACKET_SIZE) != (uint64_t)n * 8 ||
	    bp_get_u64(p + BP_PKT_OFF_CONTENT_SIZE) > (uint64_t)n * 8) {
		say("stream: malformed packet%s%s", "", "");
		return -1;
	}
	tid = bp_get_u32(p + BP_PKT_OFF_THREAD_ID);
	if (tid >= BP_RECV_MAX_THREADS) {
		say("stream: thread id out of range%s%s", "", "");
		return -1;
	}
	seq = bp_get_u64(p + BP_PKT_OFF_SEQ_NUM);
	/* (By sequence alone: a thread's file may be closed for want of
	 * descriptors, thread_fd, and its packets must still come once.) */
	if (seq < r->next_seq[tid]) {
		r->resent++; /* written before its confirmation was lost */
		return 1;
	}
	if (r->fds[tid] < 0 && thread_fd(r, tid) != 0)
		return -1;
	if (write_all(r->fds[tid], p, n) != 0) {
		say("%s: %s", r->dir, strerror(errno));
		return -1;
	}
	r->next_seq[tid] = seq + 1;
	r->packets++;
	r->bytes += n;
	return 1;
}

/* The END frame's payload: the session's stop record (bp_losses.h on
 * the node), "cause=N,...", written as the trace's env session_lost as
 * the file sink writes its own (docs/format.md): readers then tell the
 * losses no packet could (the stream's frames unconfirmed at the end,
 * losses counted after a thread's last drops event).  An empty payload
 * (an older sender) writes none; one that is not such a record is said
 * and left out. */
static void stop_record(struct bp_recv *r, const uint8_t *p, uint32_t n)
{
	char v[1024];
	int err;

	if (n == 0)
		return;
	if (n >= sizeof v) {
		say("stream: a stop record of %s bytes left out%s", "over 1023",
		    "");
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') ||
		      (p[i] >= '0' && p[i] <= '9') || p[i] == '_' ||
		      p[i] == '=' || p[i] == ',')) {
			say("stream: a malformed stop record left out%s%s", "",
			    "");
			return;
		}
	memcpy(v, p, n);
	v[n] = '\0';
	if ((err = bp_ctf_add_env_at(r->dirfd, BP_ENV_SESSION_LOST, v)) != 0)
		say("%s/metadata: the stop record: %s", r->dir, strerror(err));
}

static void mark_complete(struct bp_recv *r)
{
	int fd = openat(r->dirfd, BP_RECV_COMPLETE,
			O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	r->ended = 1;
}

/* Room for the largest frame: a packet, or a greeting's metadata. */
#define RECV_BUF_MAX ((size_t)BP_STREAM_FRAME_HDR + BP_PACKET_MAX + 64 * 1024)

/* c's buffer holds at least want bytes; 0, or -1 out of memory. */
static int conn_grow(struct bp_recv_conn *c, size_t want)
{
	uint8_t *b;

	if (c->cap >= want)
		return 0;
	if (!(b = realloc(c->buf, want)))
		return -1;
	c->buf = b;
	c->cap = want;
	return 0;
}

int bp_recv_conn_read(struct bp_recv *r, struct bp_recv_conn *c)
{
	ssize_t got;
	size_t off = 0, need = 0;
	int rc = 1;

	/* The lobby's connections get a small buffer, grown only to the
	 * frame that comes: a flood of them costs no megabyte each. */
	if (conn_grow(c, c->hello ? RECV_BUF_MAX : 4096) != 0)
		return -1;
	do
		got = read(c->fd, c->buf + c->len, c->cap - c->len);
	while (got < 0 && errno == EINTR);
	if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 1;
	if (got <= 0) {
		if (c->challenged && !c->hello && (r->bad_token++,
						   r->unproved++ < 3))
			say("%s closed the connection after our proof: "
			    "it did not accept it (another token?)%s",
			    c->peer, "");
		if (c->len) {
			char n[32];
			snprintf(n, sizeof n, "%zu", c->len);
			say("stream: the connection ended in the middle of a "
			    "frame (%s bytes of it dropped; the sender sends "
			    "it again)%s", n, "");
		}
		return 0;
	}
	c->len += (size_t)got;
	while (rc == 1 && c->len - off >= BP_STREAM_FRAME_HDR) {
		const uint8_t *h = c->buf + off;
		uint32_t type = bp_get_u32(h + 4), n = bp_get_u32(h + 8);
		if (bp_get_u32(h) != BP_STREAM_MAGIC) {
			rc = c->challenged || r->token_len
				     ? bad_input(r, c, "not a beamprobe stream")
				     : stranger(r, c);
			break;
		}
		if (n > RECV_BUF_MAX - BP_STREAM_FRAME_HDR) {
			char why[96];
			snprintf(why, sizeof why,
				 "a frame of %u bytes, larger than any packet "
				 "(%zu)", n, RECV_BUF_MAX - BP_STREAM_FRAME_HDR);
			rc = bad_input(r, c, why);
			break;
		}
		if (c->len - off < BP_STREAM_FRAME_HDR + n) {
			need = BP_STREAM_FRAME_HDR + n;
			break;
		}
		h += BP_STREAM_FRAME_HDR;
		if (type == BP_STREAM_CHALLENGE)
			rc = challenge(r, c, h, n);
		else if (type == BP_STREAM_HELLO)
			rc = hello(r, c, h, n);
		else if (!c->hello)
			rc = bad_input(r, c, "data before the metadata");
		else if (type == BP_STREAM_PACKET) {
			rc = packet(r, h, n);
			c->frames += rc == 1;
		} else if (type == BP_STREAM_END) {
			if (!r->ended)
				stop_record(r, h, n);
			mark_complete(r);
			c->frames++;
			rc = 0;
		} else {
			say("stream: unknown frame%s%s", "", "");
			rc = -1;
		}
		off += BP_STREAM_FRAME_HDR + n;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
	if (rc == 0)
		c->len = 0; /* after END: nothing is a half frame */
	if (rc == 1 && conn_grow(c, need) != 0)
		rc = -1;
	send_ack(c, rc == 0);
	return rc;
}
