/* bp_recv_lobby.c -- the receiver's connections: the stream (one sender
 * at a time) and the lobby, where newcomers wait through the handshake
 * (bp_recv.c) until one proves itself.  Any local user can connect to the
 * port: with one place for all, a user who connected again and again
 * (each connection silent, or a valid CHALLENGE then nothing) held it for
 * as long as it kept on, and the session's sender was turned away all
 * along (its events lost as `stream').  In the lobby each newcomer has a
 * place of its own for BP_RECV_HELLO_MS, and a full lobby gives up its
 * oldest silent connection first: the sender's handshake, a round trip,
 * completes among them.  With a token only the sender can complete it;
 * without one any peer that sends a HELLO can (docs/format.md).
 */
#define _GNU_SOURCE /* accept4 */
#include "bp_recv.h"
#include "../bp_sink_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void peer_name(const struct sockaddr_storage *ss, char *out,
		      size_t cap)
{
	char h[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
		snprintf(out, cap, "%s:%u", h, (unsigned)ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
		snprintf(out, cap, "[%s]:%u", h, (unsigned)ntohs(a->sin6_port));
	} else {
		snprintf(out, cap, "?");
	}
}

/* Closes lobby connection l, unfinished (why: for the first message). */
static void drop(struct bp_recv *r, struct bp_recv_conn *l, const char *why)
{
	if (!r->unfinished++ && !r->quiet)
		fprintf(stderr, "beamprobe: %s closed: %s\n", l->peer, why);
	bp_recv_conn_close(l);
}

int bp_recv_idle(const struct bp_recv *r, const struct bp_recv_conn *c)
{
	for (int i = 0; i < BP_RECV_LOBBY; i++)
		if (r->lobby[i].fd >= 0)
			return 0;
	return c->fd < 0;
}

void bp_recv_lobby_close(struct bp_recv *r)
{
	for (int i = 0; i < BP_RECV_LOBBY; i++)
		bp_recv_conn_close(&r->lobby[i]);
}

int bp_recv_pollfds(struct bp_recv *r, int lfd, const struct bp_recv_conn *c,
		    struct pollfd p[BP_RECV_NFDS])
{
	uint64_t now = bp_recv_mono_ms();
	int n = 2;

	p[0] = (struct pollfd){lfd, POLLIN, 0};
	p[1] = (struct pollfd){c->fd, POLLIN, 0};
	for (int i = 0; i < BP_RECV_LOBBY; i++) {
		struct bp_recv_conn *l = &r->lobby[i];
		if (l->fd >= 0 && now - l->since_ms >= BP_RECV_HELLO_MS)
			drop(r, l, "no stream greeting in 3 s");
		if (l->fd >= 0)
			p[n++] = (struct pollfd){l->fd, POLLIN, 0};
	}
	return n;
}

/* The lobby connection on fd, or NULL. */
static struct bp_recv_conn *lobby_conn(struct bp_recv *r, int fd)
{
	for (int i = 0; fd >= 0 && i < BP_RECV_LOBBY; i++)
		if (r->lobby[i].fd == fd)
			return &r->lobby[i];
	return NULL;
}

/* The lobby's place for a newcomer: a free one, else the oldest
 * connection that sent nothing yet, else the oldest (closed). */
static struct bp_recv_conn *place(struct bp_recv *r)
{
	struct bp_recv_conn *silent = NULL, *oldest = NULL;

	for (int i = 0; i < BP_RECV_LOBBY; i++) {
		struct bp_recv_conn *l = &r->lobby[i];
		if (l->fd < 0)
			return l;
		if (!l->challenged && l->len == 0 &&
		    (!silent || l->since_ms < silent->since_ms))
			silent = l;
		if (!oldest || l->since_ms < oldest->since_ms)
			oldest = l;
	}
	if (!silent)
		silent = oldest;
	drop(r, silent, "the lobby was full (too many connections in the "
			"handshake at once): its place went to a newcomer");
	return silent;
}

static void take(struct bp_recv *r, int lfd, struct bp_recv_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	struct bp_recv_conn *l;
	char peer[64];
	int fd;

	memset(&ss, 0, sizeof ss);
	do
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM) {
			static int told;
			struct timespec ts = {0, 100000000};
			if (!told++)
				fprintf(stderr, "beamprobe: cannot take a "
						"connection: %s\n",
					strerror(errno));
			nanosleep(&ts, NULL);
		}
		return;
	}
	peer_name(&ss, peer, sizeof peer);
	if (c->fd >= 0) {
		/* The sender closed the stream and comes back at once: the
		 * end of the old one, not read yet, frees the place. */
		char b;
		if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
			bp_recv_conn_close(c);
	}
	if (c->fd >= 0) {
		if (!r->turned_away++)
			fprintf(stderr, "beamprobe: %s turned away: %s holds "
					"the stream (one sender at a time)\n",
				peer, c->peer);
		close(fd);
		return;
	}
	l = place(r);
	bp_stream_keepalive(fd);
	bp_recv_conn_init(l, fd);
	snprintf(l->peer, sizeof l->peer, "%s", peer);
}

/* Reads lobby connection l; its greeting passed: it becomes the stream
 * c, and the others are closed.  1 if so. */
static int lobby_read(struct bp_recv *r, struct bp_recv_conn *l,
		      struct bp_recv_conn *c)
{
	int k = bp_recv_conn_read(r, l);

	if (k < 0)
		r->malformed++;
	if (k > 0 && !l->hello)
		return 0;
	if (k <= 0) {
		int began = l->hello; /* a whole stream in one read */
		bp_recv_conn_close(l);
		r->connections += (uint64_t)began;
		return began;
	}
	*c = *l; /* the buffer goes with it */
	bp_recv_conn_init(l, -1);
	for (int i = 0; i < BP_RECV_LOBBY; i++)
		if (r->lobby[i].fd >= 0)
			drop(r, &r->lobby[i], "another sender's greeting came "
					      "first");
	r->connections++;
	return 1;
}

int bp_recv_serve(struct bp_recv *r, int lfd, struct bp_recv_conn *c,
		  const struct pollfd *p, int np)
{
	const short ready = POLLIN | POLLHUP | POLLERR;
	int began = 0;

	if (np < 2)
		return 0;
	if (c->fd >= 0 && p[1].fd == c->fd && (p[1].revents & ready)) {
		int k = bp_recv_conn_read(r, c);
		if (k < 0)
			r->malformed++;
		if (k <= 0)
			bp_recv_conn_close(c);
	}
	/* (By fd: a connection closed meanwhile is found no more; only the
	 * accept, last, makes a connection.) */
	for (int k = 2; k < np; k++) {
		struct bp_recv_conn *l = lobby_conn(r, p[k].fd);
		if (!l || !(p[k].revents & ready))
			continue;
		if (c->fd >= 0) /* (the stream came before it was read) */
			drop(r, l, "another sender holds the stream");
		else
			began |= lobby_read(r, l, c);
	}
	/* Last: a newcomer does not push out one that was just read. */
	if (p[0].fd == lfd && (p[0].revents & POLLIN))
		take(r, lfd, c);
	return began;
}
