/* bp_sink_tcp.c -- the TCP stream sink: the session's CTF packets, built
 * exactly as the file sink builds them (one packet stream per producing
 * thread, the same headers, the same first empty packet), sent over one
 * TCP connection instead of written to thread-NNN files.
 *
 * Runs on the collector thread only; the socket is non-blocking and the
 * collector never waits on it except at the very end (at most about a
 * second).  A slow or stalled receiver fills the bounded send queue: later
 * packets are dropped at the source and counted (their events raise the
 * stream's events_discarded in the next packet, and the `stream' counters).
 *
 * A frame leaves the queue only when the receiver confirms it (an ACK
 * frame: how many frames of this connection it has written), not when the
 * kernel takes its bytes: bytes a socket accepted can still be lost with
 * the connection.  A connection that breaks is reopened (every RETRY_NS)
 * and every unconfirmed frame is sent again after the metadata; the
 * receiver skips a packet it already wrote (its stream's packet sequence
 * number).  At the end, what was not confirmed within the wait is counted
 * lost (events_unconfirmed says how many of those were sent and may have
 * arrived: the count errs towards loss, never towards delivery).
 *
 * Wire format (docs/format.md, "Stream"): frames of a 12-byte header
 * (u32 magic "BPS1", u32 type, u32 payload length; little endian) and a
 * payload.  Each connection starts with the handshake
 * (bp_sink_tcp_auth.c): CHALLENGE (version, the sink's nonce) and nothing
 * else until the receiver's PROOF shows it knows the token; then HELLO
 * (u32 version, uuid, u32 proof length, the sender's proof, metadata
 * text), PACKET (one CTF packet), END; from the receiver ACK (u64 frames
 * written) and REFUSED.
 */
#include "bp_budget.h"
#include "bp_sink_tcp.h"
#include "bp_sink_tcp_auth.h"
#include "bp_losses.h"
#include "bp_session.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RETRY_NS 200000000ull  /* reconnect attempts: every 200 ms */
#define FINISH_NS 1000000000ull /* the end waits at most this long */
#define MAX_FRAMES 4096         /* queued frames at most */

/* One producing thread's packet being built. */
struct tcp_stream {
	uint8_t *buf; /* packet_size bytes, NULL until the slot produces */
	size_t len;
	uint32_t nevents, naux;
	uint64_t ts_begin, ts_end, last_ts;
	uint64_t seq;
	uint64_t lost; /* user events dropped by this sink */
	uint32_t flost; /* of the packet's user events, those the files
			   lost (bp_tcp_add's file_lost) */
	/* Losses of both sinks not known event by event (a file packet
	 * that could not be written lost events the stream had already
	 * taken): the stream's losses of events the files took, and the
	 * files' losses found after the event, not yet paired (match). */
	uint64_t own_unpaired, file_unpaired;
};

struct frame {
	uint32_t len;     /* bytes, header included */
	uint32_t events;  /* user events in it */
	uint32_t slot;
	uint32_t flost;   /* of them, events the files lost too */
};

struct bp_tcp_sink {
	struct bp_tcp_sink *next; /* in `live' */
	struct bp_session *owner;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int fd;         /* -1: not connected */
	int connecting; /* a non-blocking connect is under way */
	uint64_t next_try;
	uint8_t *hello; /* the HELLO frame, whole */
	uint8_t token[BP_STREAM_TOKEN_MAX]; /* what the receiver expects */
	uint32_t token_len;
	size_t hello_len, hello_off; /* hello_off < hello_len: being sent */
	uint8_t *q;     /* the send queue: frames back to back */
	size_t qcap, qoff, qlen; /* confirmed up to qoff; used up to qlen */
	struct frame frames[MAX_FRAMES];
	uint32_t fhead, fcount;
	/* This connection: frames (from the head) sent whole and not yet
	 * confirmed, bytes of the next one sent, where the next byte to send
	 * is in q, frames the receiver confirmed. */
	uint32_t nsent;
	size_t fsent, spos;
	uint64_t acked;
	struct bp_tcp_auth auth; /* this connection's handshake */
	uint8_t in[64]; /* the receiver's frames, read so far */
	size_t inlen;
	size_t packet_size;
	uint32_t max_slots;
	struct tcp_stream *streams;
	int ended;
	uint64_t end_by; /* the end's deadline (ns), once the final drain
			    began: 0 before */
	int end_tried;   /* the end's one connection attempt was made */
	uint64_t dump_id, dump_by; /* the dump being written, its deadline */
	_Atomic uint64_t packets_sent, bytes_sent, connects, disconnects;
	_Atomic uint64_t packets_dropped, events_dropped, refused;
	_Atomic uint64_t events_unconfirmed, auth_failures;
	_Atomic uint64_t events_both; /* of events_dropped: the files lost
					 them too (bp_losses.h) */
	_Atomic int connected, auth_failure;
};

/* Sinks of running sessions, for the VM's exit (see at_exit). */
static pthread_mutex_t live_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct bp_tcp_sink *live;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static uint64_t mono_ns(void);

/*
 * halt/0,1 (an escript's end, `erl -eval "..., halt()"') ends the VM
 * without stopping sessions: the events still in the rings would never
 * reach the receiver.  exit() runs this: each streaming session's
 * collector is told to stop (its final drain sends the last packets and
 * END, waiting at most about a second for the receiver) and waited for,
 * 2 s at most in all.  Registered with atexit() from the library: glibc
 * runs it at dlclose() instead if the library is unloaded first (then no
 * session is left, and it does nothing).
 */
static void at_exit(void)
{
	uint64_t deadline = mono_ns() + 2000000000ull;

	pthread_mutex_lock(&live_mtx);
	for (struct bp_tcp_sink *t = live; t; t = t->next) {
		struct bp_session *s = t->owner;
		if (!s->thread_started)
			continue;
		enif_mutex_lock(s->mtx);
		s->cmd_stop = 1;
		enif_mutex_unlock(s->mtx);
		bp__session_wake(s);
	}
	for (struct bp_tcp_sink *t = live; t; t = t->next) {
		struct bp_session *s = t->owner;
		int fin = !s->thread_started;
		while (!fin && mono_ns() < deadline) {
			struct timespec ts = {0, 5000000};
			enif_mutex_lock(s->mtx);
			fin = s->finished;
			enif_mutex_unlock(s->mtx);
			if (!fin)
				nanosleep(&ts, NULL);
		}
	}
	pthread_mutex_unlock(&live_mtx);
}

static void register_exit(void)
{
	atexit(at_exit);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void bump(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Pairs stream i's losses of events the files took with the files'
 * losses found later (bp_tcp_file_lost): an event of a file packet that
 * could not be written may be one the stream lost too.  Counted as
 * both sinks' while both have unpaired ones, so that the total never
 * counts an event twice (it may then count one the stream lost, of the
 * files' unwritten packets, as the files' alone). */
static void pair(struct bp_tcp_sink *t, struct tcp_stream *st)
{
	uint64_t n = st->own_unpaired < st->file_unpaired ? st->own_unpaired
							  : st->file_unpaired;

	st->own_unpaired -= n;
	st->file_unpaired -= n;
	bump(&t->events_both, n);
}

/* The stream lost `events' user events of stream i, `flost' of them lost
 * to the files too. */
static void lose(struct bp_tcp_sink *t, uint32_t i, uint64_t events,
		 uint64_t flost)
{
	struct tcp_stream *st = &t->streams[i];

	bump(&t->events_dropped, events);
	bump(&t->events_both, flost);
	st->own_unpaired += events - flost;
	pair(t, st);
}

void bp_tcp_file_lost(struct bp_tcp_sink *t, uint32_t i, uint64_t n)
{
	if (!t || i >= t->max_slots || !n)
		return;
	t->streams[i].file_unpaired += n;
	pair(t, &t->streams[i]);
}

struct bp_tcp_sink *bp_tcp_new(struct bp_session *owner,
			       const struct sockaddr_storage *addr,
			       socklen_t addrlen, uint64_t queue_bytes,
			       uint32_t max_slots, size_t packet_size)
{
	struct bp_tcp_sink *t = calloc(1, sizeof *t);

	if (!t)
		return NULL;
	t->owner = owner;
	if (queue_bytes < 2 * (packet_size + BP_STREAM_FRAME_HDR))
		queue_bytes = 2 * (packet_size + BP_STREAM_FRAME_HDR);
	t->addr = *addr;
	t->addrlen = addrlen;
	t->fd = -1;
	t->qcap = (size_t)queue_bytes;
	t->q = malloc(t->qcap);
	t->streams = calloc(max_slots, sizeof *t->streams);
	t->max_slots = max_slots;
	t->packet_size = packet_size;
	if (!t->q || !t->streams) {
		bp_tcp_free(t);
		return NULL;
	}
	pthread_once(&exit_once, register_exit);
	pthread_mutex_lock(&live_mtx);
	t->next = live;
	live = t;
	pthread_mutex_unlock(&live_mtx);
	return t;
}

void bp_tcp_free(struct bp_tcp_sink *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&live_mtx);
	for (struct bp_tcp_sink **p = &live; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	pthread_mutex_unlock(&live_mtx);
	if (t->fd >= 0)
		close(t->fd);
	if (t->streams)
		for (uint32_t i = 0; i < t->max_slots; i++)
			free(t->streams[i].buf);
	free(t->streams);
	free(t->q);
	free(t->hello);
	free(t);
}

static void put_frame_hdr(uint8_t *p, uint32_t type, uint32_t len)
{
	bp_put_u32(p, BP_STREAM_MAGIC);
	bp_put_u32(p + 4, type);
	bp_put_u32(p + 8, len);
}

int bp_tcp_set_token(struct bp_tcp_sink *t, const uint8_t *token,
		     size_t len)
{
	if (len > BP_STREAM_TOKEN_MAX)
		return EINVAL;
	memcpy(t->token, token, len);
	t->token_len = (uint32_t)len;
	return 0;
}

int bp_tcp_set_metadata(struct bp_tcp_sink *t, const uint8_t uuid[16],
			const char *text, size_t len)
{
	uint32_t pl = t->token_len ? BP_SHA256_LEN : 0; /* the proof */
	size_t n = BP_STREAM_FRAME_HDR + 4 + 16 + 4 + pl + len;
	uint8_t *h = malloc(n), *p;

	if (!h)
		return ENOMEM;
	put_frame_hdr(h, BP_STREAM_HELLO, (uint32_t)(n - BP_STREAM_FRAME_HDR));
	p = h + BP_STREAM_FRAME_HDR;
	bp_put_u32(p, BP_STREAM_VERSION);
	memcpy(p + 4, uuid, 16);
	bp_put_u32(p + 20, pl);
	memset(p + 24, 0, pl); /* each connection's, once the receiver proved
				  the token (auth_step) */
	memcpy(p + 24 + pl, text, len);
	free(t->hello);
	t->hello = h;
	t->hello_len = n;
	t->hello_off = n; /* nothing to send before a connection */
	return 0;
}

/* ---- the connection -------------------------------------------------- */

/* A connection (re)starts from the first unconfirmed frame: nothing of
 * the previous one is lost yet, what it did not confirm is sent again. */
static void conn_begin(struct bp_tcp_sink *t)
{
	t->nsent = 0;
	t->fsent = 0;
	t->spos = t->qoff;
	t->acked = 0;
	t->inlen = 0;
	t->auth.state = BP_TCP_AUTH_NONE;
	t->hello_off = t->hello_len; /* sent only once the receiver proved */
}

static void disconnect(struct bp_tcp_sink *t)
{
	if (t->fd < 0)
		return;
	close(t->fd);
	t->fd = -1;
	if (!t->connecting && !(t->ended && !t->fcount))
		bump(&t->disconnects, 1);
	t->connecting = 0;
	atomic_store(&t->connected, 0);
	t->next_try = mono_ns() + RETRY_NS;
	conn_begin(t);
}

static void try_connect(struct bp_tcp_sink *t, uint64_t now)
{
	int fd, one = 1;
	uint64_t nfree, lim;

	if (t->fd >= 0 || now < t->next_try || !t->hello)
		return;
	t->next_try = now + RETRY_NS;
	/* Not into the node's reserve of descriptors (bp_budget.h): tried
	 * again later. */
	if (!bp_budget_fds_take(1, &nfree, &lim))
		return;
	fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	bp_budget_fds_give(1);
	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	bp_stream_keepalive(fd);
	if (connect(fd, (const struct sockaddr *)&t->addr, t->addrlen) != 0 &&
	    errno != EINPROGRESS) {
		close(fd);
		return;
	}
	t->fd = fd;
	t->connecting = 1;
}

/* Is the connection up (finishing a pending connect)? */
static int connected(struct bp_tcp_sink *t)
{
	struct pollfd p;
	int err = 0;
	socklen_t el = sizeof err;

	if (t->fd < 0)
		return 0;
	if (!t->connecting)
		return 1;
	p.fd = t->fd;
	p.events = POLLOUT;
	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
		disconnect(t);
		return 0;
	}
	t->connecting = 0;
	conn_begin(t);
	bump(&t->connects, 1);
	atomic_store(&t->connected, 1);
	return 1;
}

/* Sends n bytes at p: bytes sent, 0 when the socket is full, -1 when the
 * connection broke (then closed). */
static ssize_t send_some(struct bp_tcp_sink *t, const uint8_t *p, size_t n)
{
	ssize_t w;

	do
		w = send(t->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (w <= 0) {
		disconnect(t);
		return -1;
	}
	bump(&t->bytes_sent, (uint64_t)w);
	return w;
}

/* The handshake failed (why: enum bp_stream_auth_failure): nothing more
 * is sent, the connection is closed, counted, and tried again on the
 * normal schedule (RETRY_NS: an impostor cannot make the sink spin). */
static void auth_fail(struct bp_tcp_sink *t, int why)
{
	bump(&t->auth_failures, 1);
	atomic_store(&t->auth_failure, why);
	disconnect(t);
}

/* Moves the handshake on as far as the socket allows, never waiting
 * (send_some, bp_tcp_auth_read).  1 once the receiver proved the token:
 * the HELLO, with the sender's proof, is then due. */
static int auth_step(struct bp_tcp_sink *t, uint64_t now)
{
	struct bp_tcp_auth *a = &t->auth;
	int why = BP_AUTH_OK;

	if (a->state == BP_TCP_AUTH_NONE)
		why = bp_tcp_auth_begin(a, now + BP_STREAM_AUTH_MS * 1000000ull);
	while (why == BP_AUTH_OK && a->state == BP_TCP_AUTH_SEND) {
		ssize_t w = send_some(t, a->out + a->off,
				      sizeof a->out - a->off);
		if (w < 0)
			return 0; /* broken, as any send can be */
		if (w == 0)
			break; /* full: the deadline still counts */
		a->off += (size_t)w;
		if (a->off == sizeof a->out)
			a->state = BP_TCP_AUTH_WAIT;
	}
	if (why == BP_AUTH_OK)
		why = bp_tcp_auth_read(a, t->fd, t->token, t->token_len, now);
	if (why != BP_AUTH_OK) {
		auth_fail(t, why);
		return 0;
	}
	if (a->state != BP_TCP_AUTH_DONE)
		return 0;
	if (t->token_len)
		bp_tcp_auth_sender(a, t->token, t->token_len,
				   t->hello + BP_STREAM_FRAME_HDR + 24);
	t->hello_off = 0;
	return 1;
}

/* The receiver confirmed n frames of this connection: they leave the
 * queue (a count beyond what was sent is taken as all of it). */
static void confirmed(struct bp_tcp_sink *t, uint64_t n)
{
	while (t->acked < n && t->nsent) {
		struct frame *f = &t->frames[t->fhead];
		if (f->slot != UINT32_MAX)
			bump(&t->packets_sent, 1);
		t->qoff += f->len;
		t->fhead = (t->fhead + 1) % MAX_FRAMES;
		t->fcount--;
		t->nsent--;
		t->acked++;
	}
	if (!t->fcount)
		t->qoff = t->qlen = t->spos = 0;
}

/* Reads the receiver's frames (ACK, REFUSED), waiting up to ms for the
 * first bytes.  1 if the connection ended: closed by the peer, refused
 * (the receiver holds another session's trace: counted, and the frames
 * are tried again on the next connection, as after any break), or
 * something else than these two frames came. */
static int check_peer(struct bp_tcp_sink *t, int ms)
{
	struct pollfd p = {t->fd, POLLIN, 0};

	if (t->fd < 0)
		return 1;
	if (poll(&p, 1, ms) <= 0 ||
	    !(p.revents & (POLLIN | POLLHUP | POLLERR)))
		return 0;
	for (int reads = 0; reads < 64; reads++) {
		ssize_t r = recv(t->fd, t->in + t->inlen,
				 sizeof t->in - t->inlen, MSG_DONTWAIT);
		size_t off = 0;

		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			disconnect(t);
			return 1;
		}
		t->inlen += (size_t)r;
		while (t->inlen - off >= BP_STREAM_FRAME_HDR) {
			const uint8_t *h = t->in + off;
			uint32_t type = bp_get_u32(h + 4), n = bp_get_u32(h + 8);
			if (bp_get_u32(h) != BP_STREAM_MAGIC ||
			    (type == BP_STREAM_ACK && n != 8) ||
			    (type != BP_STREAM_ACK &&
			     type != BP_STREAM_REFUSED)) {
				disconnect(t); /* not a receiver of ours */
				return 1;
			}
			if (type == BP_STREAM_REFUSED) {
				bump(&t->refused, 1);
				disconnect(t);
				return 1;
			}
			if (t->inlen - off < BP_STREAM_FRAME_HDR + 8)
				break;
			confirmed(t, bp_get_u64(h + BP_STREAM_FRAME_HDR));
			off += BP_STREAM_FRAME_HDR + 8;
		}
		memmove(t->in, t->in + off, t->inlen - off);
		t->inlen -= off;
	}
	return 0;
}

void bp_tcp_pump(struct bp_session *s)
{
	struct bp_tcp_sink *t = s->tcp;
	uint64_t now = mono_ns();

	if (t->fd < 0)
		try_connect(t, now);
	if (!connected(t))
		return;
	if (t->auth.state != BP_TCP_AUTH_DONE && !auth_step(t, now))
		return;
	if (check_peer(t, 0))
		return;
	while (t->hello_off < t->hello_len) {
		ssize_t w = send_some(t, t->hello + t->hello_off,
				      t->hello_len - t->hello_off);
		if (w <= 0)
			return;
		t->hello_off += (size_t)w;
	}
	while (t->nsent < t->fcount) {
		struct frame *f = &t->frames[(t->fhead + t->nsent) % MAX_FRAMES];
		ssize_t w = send_some(t, t->q + t->spos, f->len - t->fsent);
		if (w <= 0)
			return;
		t->fsent += (size_t)w;
		t->spos += (size_t)w;
		if (t->fsent < f->len)
			return; /* the socket is full */
		t->fsent = 0;
		t->nsent++;
	}
}

/* ---- the end, a dump ------------------------------------------------- */

/* The session's end, from its final drain on (the state is STOPPED: no
 * event comes after these), has until end_by to hand the receiver what
 * is left; set once. */
static uint64_t end_deadline(struct bp_session *s)
{
	struct bp_tcp_sink *t = s->tcp;

	if (!t->end_by)
		t->end_by = mono_ns() + FINISH_NS;
	return t->end_by;
}

/* A flight-recorder dump (state PAUSED, the producers held off) has as
 * long, from its first wait, for the window it moves out. */
static uint64_t dump_deadline(struct bp_session *s)
{
	struct bp_tcp_sink *t = s->tcp;
	uint64_t id = s->dumps_done + 1; /* the collector's own counter */

	if (t->dump_id != id) {
		t->dump_id = id;
		t->dump_by = mono_ns() + FINISH_NS;
	}
	return t->dump_by;
}

/* One step of waiting until by: sends what the socket takes, reads the
 * receiver's confirmations, waits up to 10 ms for the socket.  0 when
 * there is nothing to wait for: the deadline passed, or no connection
 * (a receiver that is gone is not waited for; at the end one last
 * attempt is made when none is under way). */
static int wait_step(struct bp_session *s, uint64_t by)
{
	struct bp_tcp_sink *t = s->tcp;
	struct pollfd p;

	if (mono_ns() >= by)
		return 0;
	if (t->fd < 0 && t->ended && !t->end_tried) {
		t->end_tried = 1; /* the last attempt: no RETRY_NS wait */
		t->next_try = 0;
	}
	bp_tcp_pump(s);
	if (t->fd < 0)
		return 0;
	p.fd = t->fd;
	p.events = POLLIN;
	if (t->connecting || t->auth.state == BP_TCP_AUTH_SEND ||
	    (t->auth.state == BP_TCP_AUTH_DONE &&
	     (t->hello_off < t->hello_len || t->nsent < t->fcount)))
		p.events |= POLLOUT;
	poll(&p, 1, 10);
	return 1;
}

/* ---- the queue ------------------------------------------------------- */

/* Room for n more bytes at the end of the queue (moving what is left to
 * the front if that makes room)?  It moves only when at least a quarter
 * of the queue is free at its front: each byte is moved at most a few
 * times, not once per packet queued behind a slow receiver (with a queue
 * of up to 2 GiB, a move per packet would keep the collector busy). */
static int room_now(struct bp_tcp_sink *t, size_t n)
{
	if (t->fcount >= MAX_FRAMES)
		return 0;
	if (t->qlen + n <= t->qcap)
		return 1;
	if (t->qoff >= t->qcap / 4 && t->qlen - t->qoff + n <= t->qcap) {
		memmove(t->q, t->q + t->qoff, t->qlen - t->qoff);
		t->qlen -= t->qoff;
		t->spos -= t->qoff;
		t->qoff = 0;
		return 1;
	}
	return 0;
}

static void put_header(struct bp_session *s, uint8_t *p, uint32_t thread,
		       uint64_t ts_begin, uint64_t ts_end, size_t len,
		       uint64_t discarded, uint64_t seq)
{
	bp_put_u32(p + BP_PKT_OFF_MAGIC, BP_CTF_MAGIC);
	memcpy(p + BP_PKT_OFF_UUID, s->uuid, 16);
	bp_put_u32(p + BP_PKT_OFF_STREAM_ID, 0);
	bp_put_u64(p + BP_PKT_OFF_TS_BEGIN, ts_begin);
	bp_put_u64(p + BP_PKT_OFF_TS_END, ts_end);
	bp_put_u64(p + BP_PKT_OFF_CONTENT_SIZE, (uint64_t)len * 8);
	bp_put_u64(p + BP_PKT_OFF_PACKET_SIZE, (uint64_t)len * 8);
	bp_put_u64(p + BP_PKT_OFF_DISCARDED, discarded);
	bp_put_u64(p + BP_PKT_OFF_SEQ_NUM, seq);
	bp_put_u32(p + BP_PKT_OFF_THREAD_ID, thread);
}

/* room_now, but from the session's final drain on (the last packets,
 * the drops events, END), and in a flight-recorder dump, a full queue is
 * waited on until the end's (the dump's) deadline while the receiver
 * confirms what it holds: dropping at once lost all but the queue's worth
 * of a drained ring (17,138 of 20,001 events of a flight recorder,
 * receiver keeping up) and the drops events behind a receiver that was
 * only behind. */
static int room(struct bp_session *s, size_t n)
{
	struct bp_tcp_sink *t = s->tcp;

	while (!room_now(t, n)) {
		int st = atomic_load(&s->state);
		uint64_t by = st == BP_S_STOPPED  ? end_deadline(s)
			      : st == BP_S_PAUSED ? dump_deadline(s)
						  : 0;
		if (!by || !wait_step(s, by))
			return 0;
	}
	return 1;
}

/* Losses a packet of slot i reports: the slot's own at the source
 * (bp_slot_source_drops: not a file sink's own, events this sink was
 * given; with a file sink under a 1000-byte limit the stream said every
 * event it had lost as `limit') and this sink's. */
static uint64_t discarded(struct bp_session *s, uint32_t i)
{
	struct bp_slot *sl = atomic_load_explicit(&s->slots[i],
						  memory_order_acquire);
	uint64_t n = s->tcp->streams[i].lost, d[BP_DROP_COUNT];

	if (!sl)
		return n;
	bp_slot_source_drops(sl, d);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		n += d[c];
	return n;
}

/* Queues stream i's packet (a whole frame) or drops it, counted. */
static void queue_packet(struct bp_session *s, uint32_t i)
{
	struct bp_tcp_sink *t = s->tcp;
	struct tcp_stream *st = &t->streams[i];
	uint32_t user = st->nevents - st->naux;
	size_t need = BP_STREAM_FRAME_HDR + st->len;

	if (st->seq == 0) {
		/* The stream's first packet: empty, nothing discarded yet
		 * (as the file sink writes it). */
		size_t n0 = BP_STREAM_FRAME_HDR + BP_PACKET_HEADER_SIZE;
		if (!room(s, n0 + need))
			goto drop;
		put_frame_hdr(t->q + t->qlen, BP_STREAM_PACKET,
			      BP_PACKET_HEADER_SIZE);
		put_header(s, t->q + t->qlen + BP_STREAM_FRAME_HDR, i,
			   st->ts_begin, st->ts_begin, BP_PACKET_HEADER_SIZE,
			   0, 0);
		t->frames[(t->fhead + t->fcount) % MAX_FRAMES] =
			(struct frame){(uint32_t)n0, 0, i, 0};
		t->fcount++;
		t->qlen += n0;
		st->seq = 1;
	}
	if (!room(s, need))
		goto drop;
	put_header(s, st->buf, i, st->ts_begin, st->ts_end, st->len,
		   discarded(s, i), st->seq);
	put_frame_hdr(t->q + t->qlen, BP_STREAM_PACKET, (uint32_t)st->len);
	memcpy(t->q + t->qlen + BP_STREAM_FRAME_HDR, st->buf, st->len);
	t->frames[(t->fhead + t->fcount) % MAX_FRAMES] =
		(struct frame){(uint32_t)need, user, i, st->flost};
	t->fcount++;
	t->qlen += need;
	st->seq++;
	goto done;
drop:
	bump(&t->packets_dropped, 1);
	lose(t, i, user, st->flost);
	st->lost += user;
done:
	st->len = BP_PACKET_HEADER_SIZE;
	st->nevents = st->naux = st->flost = 0;
}

static struct tcp_stream *stream(struct bp_tcp_sink *t, uint32_t i)
{
	struct tcp_stream *st = &t->streams[i];

	if (!st->buf) {
		st->buf = malloc(t->packet_size);
		if (!st->buf)
			return NULL;
		st->len = BP_PACKET_HEADER_SIZE;
	}
	return st;
}

static void add_to(struct bp_session *s, uint32_t i, const uint8_t *ev,
		   uint32_t len, int aux, int file_lost)
{
	struct bp_tcp_sink *t = s->tcp;
	struct tcp_stream *st = stream(t, i);
	uint64_t ts;

	if (!st || len < BP_EVENT_HEADER_SIZE ||
	    len > t->packet_size - BP_PACKET_HEADER_SIZE) {
		if (!aux) {
			lose(t, i, 1, file_lost != 0);
			if (st)
				st->lost++;
		}
		return;
	}
	if (st->len + len > t->packet_size)
		queue_packet(s, i);
	ts = bp_get_u64(ev + BP_EV_OFF_TS);
	memcpy(st->buf + st->len, ev, len);
	if (ts < st->last_ts) /* monotonic per stream, as in the files */
		bp_put_u64(st->buf + st->len + BP_EV_OFF_TS, st->last_ts);
	else
		st->last_ts = ts;
	if (st->nevents == 0)
		st->ts_begin = st->last_ts;
	st->ts_end = st->last_ts;
	st->len += len;
	st->nevents++;
	st->naux += aux != 0;
	st->flost += !aux && file_lost;
}

void bp_tcp_add(struct bp_session *s, struct bp_slot *sl, const uint8_t *ev,
		uint32_t len, int file_lost)
{
	uint16_t id = bp_get_u16(ev + BP_EV_OFF_ID);

	add_to(s, sl->index, ev, len, id == BP_EV_PROCESS || id == BP_EV_DROPS,
	       file_lost);
}

void bp_tcp_flush(struct bp_session *s, int force)
{
	struct bp_tcp_sink *t = s->tcp;

	for (uint32_t i = 0; i < t->max_slots; i++) {
		struct tcp_stream *st = &t->streams[i];
		if (st->buf && (st->nevents || (force && st->seq == 0)))
			queue_packet(s, i);
	}
	bp_tcp_pump(s);
}

/* One drops event per stream: the slot's losses at the source
 * (bp_slot_source_drops), this sink's as io_error (the events it could not
 * deliver). */
static void add_drops(struct bp_session *s)
{
	struct bp_tcp_sink *t = s->tcp;
	uint64_t noslot =
		atomic_load_explicit(&s->noslot_drops, memory_order_relaxed);
	uint8_t ev[BP_EVENT_HEADER_SIZE + 8 * BP_DROP_COUNT];

	for (uint32_t i = 0; i < t->max_slots; i++) {
		struct bp_slot *sl = atomic_load_explicit(&s->slots[i],
							  memory_order_acquire);
		uint64_t d[BP_DROP_COUNT], any = noslot;
		size_t off;

		if (!sl)
			continue;
		bp_slot_source_drops(sl, d);
		for (int c = 0; c < BP_DROP_COUNT; c++)
			any |= d[c];
		d[BP_DROP_NO_BUFFER] += noslot;
		d[BP_DROP_IO_ERROR] += t->streams[i].lost;
		any |= t->streams[i].lost;
		if (!any && !t->streams[i].buf)
			continue;
		noslot = 0;
		off = bp_ev_header(ev, BP_EV_DROPS, bp_now(), 0);
		for (int c = 0; c < BP_DROP_COUNT; c++, off += 8)
			bp_put_u64(ev + off, d[c]);
		add_to(s, i, ev, (uint32_t)off, 1, 0);
	}
}

void bp_tcp_finish(struct bp_session *s)
{
	struct bp_tcp_sink *t = s->tcp;
	char rec[BP_LOSSES_TEXT_MAX];
	size_t rl;

	if (t->ended)
		return;
	t->ended = 1;
	(void)end_deadline(s);
	add_drops(s);
	bp_tcp_flush(s, 0);
	/* END carries the stop record: the losses as the stream's receiver
	 * lacks them, every frame before END having reached it (bp_losses.h;
	 * the receiver writes it as its trace's env session_lost). */
	if (bp_losses_stream_text(s, rec, sizeof rec) != 0)
		rec[0] = '\0';
	rl = strlen(rec);
	if (room(s, BP_STREAM_FRAME_HDR + rl)) {
		put_frame_hdr(t->q + t->qlen, BP_STREAM_END, (uint32_t)rl);
		memcpy(t->q + t->qlen + BP_STREAM_FRAME_HDR, rec, rl);
		t->frames[(t->fhead + t->fcount) % MAX_FRAMES] =
			(struct frame){(uint32_t)(BP_STREAM_FRAME_HDR + rl), 0,
				       UINT32_MAX, 0};
		t->fcount++;
		t->qlen += BP_STREAM_FRAME_HDR + rl;
	}
	/* Not connected: one last attempt, now (wait_step); a receiver that
	 * is gone (connection refused) is not waited for. */
	while (t->fcount && wait_step(s, end_deadline(s))) {
	}
	/* What the receiver did not confirm in time is lost, and counted;
	 * of it, what was sent whole on the connection still open may have
	 * arrived (unconfirmed; a break resets nsent, and a half-sent frame
	 * is never written). */
	for (uint32_t i = 0; i < t->fcount; i++) {
		struct frame *f = &t->frames[(t->fhead + i) % MAX_FRAMES];
		if (f->slot == UINT32_MAX)
			continue;
		bump(&t->packets_dropped, 1);
		lose(t, f->slot, f->events, f->flost);
		if (i < t->nsent)
			bump(&t->events_unconfirmed, f->events);
	}
	t->fhead = t->fcount = t->nsent = 0;
	t->qoff = t->qlen = t->fsent = t->spos = 0;
	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
		atomic_store(&t->connected, 0);
	}
}

void bp_tcp_counts(struct bp_tcp_sink *t, struct bp_tcp_counts *c)
{
	c->packets_sent = atomic_load(&t->packets_sent);
	c->bytes_sent = atomic_load(&t->bytes_sent);
	c->connects = atomic_load(&t->connects);
	c->disconnects = atomic_load(&t->disconnects);
	c->packets_dropped = atomic_load(&t->packets_dropped);
	c->events_dropped = atomic_load(&t->events_dropped);
	c->refused = atomic_load(&t->refused);
	c->events_unconfirmed = atomic_load(&t->events_unconfirmed);
	c->events_both = atomic_load(&t->events_both);
	c->auth_failures = atomic_load(&t->auth_failures);
	c->auth_failure = atomic_load(&t->auth_failure);
	c->connected = atomic_load(&t->connected);
}
