/* bp_attach_node.c -- `beamprobe attach' as a hidden C node: the
 * distribution side of cmd_attach.c.
 *
 * Connecting (cookie, short or long names), the messages of the session
 * (stop, done, --cluster's clock offsets) and the signals that end it.
 * Calls into the node: bp_attach_rpc.c; bringing beamprobe there:
 * bp_attach_bring.c; the local files: bp_attach_files.c.  The command
 * itself (options, flow, stream, printer): cmd_attach.c.
 */
#define _GNU_SOURCE
#include "bp_attach_node.h"
#include "bp_attach_files.h"
#include "bp_attach_rpc.h"
#include "bp_cli.h"

#include <arpa/inet.h>
#include <ei.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- connecting ------------------------------------------------------ */

int bp_attach_read_cookie(const char *opt, const char *file, char *out,
			  size_t n)
{
	char path[PATH_MAX], *b;
	size_t len;

	if (opt) {
		len = strlen(opt);
		if (len >= n || !len) {
			bp_cli_error("--cookie: %s", len ? "longer than 511 bytes"
							: "empty");
			return -1;
		}
		memcpy(out, opt, len + 1);
		/* Out of the command line others can read (ps, /proc): a
		 * cookie is the node's password.  Only from now on: the man
		 * page says to prefer --cookie-file. */
		memset((char *)opt, 'x', len);
		return 0;
	}
	if (!file) {
		const char *h = getenv("HOME");
		snprintf(path, sizeof path, "%s/.erlang.cookie", h ? h : "");
		file = path;
	}
	if (bp_attach_read_file(file, &b, &len) != 0) {
		bp_cli_error("cannot read the cookie from %s: %s (give "
			     "--cookie or --cookie-file)", file,
			     strerror(errno));
		return -1;
	}
	while (len && (b[len - 1] == '\n' || b[len - 1] == '\r' ||
		       b[len - 1] == ' '))
		b[--len] = '\0';
	if (len >= n) {
		bp_cli_error("the cookie in %s is longer than 511 bytes", file);
		free(b);
		return -1;
	}
	snprintf(out, n, "%s", b);
	free(b);
	if (!len)
		bp_cli_error("the cookie in %s is empty", file);
	return len ? 0 : -1;
}

int bp_attach_connect(struct bp_attach *a, const char *cookie, char *full,
		      size_t fulln)
{
	char alive[64], host[256];
	const char *at = strchr(full, '@');
	int longnames;

	if (!at) {
		/* "name": a short name on this host */
		char h[200];
		if (gethostname(h, sizeof h) != 0)
			return -1;
		h[sizeof h - 1] = '\0';
		char *dot = strchr(h, '.');
		if (dot)
			*dot = '\0';
		size_t l = strlen(full);
		snprintf(full + l, fulln - l, "@%s", h);
		at = strchr(full, '@');
		if (!at) {
			bp_cli_error("node name too long (%zu characters at most)",
				     fulln - 2 - strlen(h));
			return -1;
		}
	}
	longnames = strchr(at + 1, '.') != NULL;
	snprintf(alive, sizeof alive, "beamprobe_attach_%ld", (long)getpid());
	if (longnames) {
		char thisnode[400];
		struct in_addr ip;
		char fq[256];
		if (gethostname(fq, sizeof fq) != 0)
			return -1;
		fq[sizeof fq - 1] = '\0';
		snprintf(host, sizeof host, "%s", fq);
		if (!strchr(host, '.'))
			snprintf(host, sizeof host, "%s", "127.0.0.1");
		snprintf(thisnode, sizeof thisnode, "%s@%s", alive, host);
		inet_aton("127.0.0.1", &ip);
		if (ei_connect_xinit(&a->ec, host, alive, thisnode,
				     (Erl_IpAddr)&ip, cookie, 0) < 0) {
			bp_cli_error("ei_connect_xinit failed");
			return -1;
		}
	} else if (ei_connect_init(&a->ec, alive, cookie, 0) < 0) {
		bp_cli_error("ei_connect_init failed");
		return -1;
	}
	a->fd = ei_connect_tmo(&a->ec, full, 5000);
	if (a->fd < 0) {
		bp_cli_error("cannot connect to %s: is it running (epmd knows "
			     "it), with this cookie and %s names?",
			     full, longnames ? "long" : "short");
		return -1;
	}
	return 0;
}

/* Same host: the connection's two ends have the same address. */
void bp_attach_peer_info(struct bp_attach *a)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof l, pl = sizeof p;

	a->same_host = 0;
	snprintf(a->local_ip, sizeof a->local_ip, "127.0.0.1");
	if (getsockname(a->fd, (struct sockaddr *)&l, &ll) != 0 ||
	    getpeername(a->fd, (struct sockaddr *)&p, &pl) != 0)
		return;
	if (l.ss_family == AF_INET && p.ss_family == AF_INET) {
		struct in_addr li = ((struct sockaddr_in *)&l)->sin_addr;
		struct in_addr pi = ((struct sockaddr_in *)&p)->sin_addr;
		a->same_host = li.s_addr == pi.s_addr ||
			       (ntohl(pi.s_addr) >> 24) == 127;
		inet_ntop(AF_INET, &li, a->local_ip, sizeof a->local_ip);
	} else if (l.ss_family == AF_INET6 && p.ss_family == AF_INET6) {
		struct in6_addr li = ((struct sockaddr_in6 *)&l)->sin6_addr;
		struct in6_addr pi = ((struct sockaddr_in6 *)&p)->sin6_addr;
		a->same_host = !memcmp(&li, &pi, sizeof li) ||
			       IN6_IS_ADDR_LOOPBACK(&pi);
		inet_ntop(AF_INET6, &li, a->local_ip, sizeof a->local_ip);
	}
	/* BEAMPROBE_ATTACH_REMOTE: behave as for a node on another host
	 * (the stream to this end's address of the connection, remote =>
	 * true; the NIF over distribution): how the suite tests that path. */
	if (getenv("BEAMPROBE_ATTACH_REMOTE"))
		a->same_host = 0;
	if (a->same_host)
		snprintf(a->local_ip, sizeof a->local_ip, "127.0.0.1");
}

/* ---- the session's messages ------------------------------------------ */

void bp_attach_send_stop(struct bp_attach *a)
{
	ei_x_buff x;

	if (!a->have_agent)
		return;
	ei_x_new_with_version(&x);
	ei_x_encode_tuple_header(&x, 1);
	ei_x_encode_atom(&x, "beamprobe_attach_stop");
	ei_send(a->fd, &a->agent, x.buff, x.index);
	ei_x_free(&x);
}

/* {beamprobe_attach_env, Node, Lines} (--cluster): handed to on_env. */
static void node_env(struct bp_attach *a, const char *buf, int *idx)
{
	char node[512];
	int type, size;
	long len;
	char *data;

	if (ei_get_type(buf, idx, &type, &size) || type != ERL_BINARY_EXT ||
	    size >= (int)sizeof node || ei_decode_binary(buf, idx, node, &len))
		goto bad;
	node[len] = '\0';
	if (ei_get_type(buf, idx, &type, &size) || type != ERL_BINARY_EXT)
		goto bad;
	data = malloc((size_t)size + 1);
	if (!data || ei_decode_binary(buf, idx, data, &len)) {
		free(data);
		goto bad;
	}
	data[len] = '\0';
	if (!a->on_env || a->on_env(a->env_ctx, node, data, (size_t)len) != 0)
		a->write_failed = 1;
	free(data);
	return;
bad:
	bp_cli_error("%s: a malformed clock offsets message (ignored)", a->node);
	a->write_failed = 1;
}

int bp_attach_node_message(struct bp_attach *a, int *done)
{
	erlang_msg msg;
	ei_x_buff x;
	int r, idx = 0, ver, arity;
	char tag[MAXATOMLEN_UTF8], text[2048];

	ei_x_new(&x);
	/* Called when poll() saw data: a whole message or tick follows. */
	r = ei_xreceive_msg(a->fd, &msg, &x);
	if (r == ERL_TICK) {
		ei_x_free(&x);
		return 0;
	}
	if (r == ERL_ERROR) {
		ei_x_free(&x);
		return -1;
	}
	if (msg.msgtype == ERL_SEND || msg.msgtype == ERL_REG_SEND) {
		if (ei_decode_version(x.buff, &idx, &ver) == 0 &&
		    ei_decode_tuple_header(x.buff, &idx, &arity) == 0 &&
		    (arity == 2 || arity == 3) &&
		    ei_decode_atom(x.buff, &idx, tag) == 0 &&
		    !strcmp(tag, "beamprobe_attach_done") &&
		    bp_attach_get_text(x.buff, &idx, text, sizeof text) == 0) {
			/* {beamprobe_attach_done, Text, failed}: the session
			 * did not end as asked (an older agent sends only
			 * {beamprobe_attach_done, Text}). */
			char how[MAXATOMLEN_UTF8];
			if (arity == 3 &&
			    (ei_decode_atom(x.buff, &idx, how) != 0 ||
			     strcmp(how, "ok") != 0))
				a->session_failed = 1;
			fprintf(stderr, "beamprobe: %s: %s\n", a->node, text);
			*done = 1;
		} else if (idx = 0,
			   ei_decode_version(x.buff, &idx, &ver) == 0 &&
			   ei_decode_tuple_header(x.buff, &idx, &arity) == 0 &&
			   arity == 3 &&
			   ei_decode_atom(x.buff, &idx, tag) == 0 &&
			   !strcmp(tag, "beamprobe_attach_env")) {
			node_env(a, x.buff, &idx);
		}
	}
	ei_x_free(&x);
	return 0;
}

/* ---- signals ------------------------------------------------------------ */

volatile sig_atomic_t bp_attach_signals;
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int e = errno;

	(void)sig;
	bp_attach_signals++;
	if (write(sig_pipe[1], "x", 1) < 0) {
	}
	errno = e;
}

int bp_attach_catch_signals(void)
{
	struct sigaction sa;

	if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return sig_pipe[0];
}

void bp_attach_signal_read(int fd)
{
	char b[16];

	while (read(fd, b, sizeof b) > 0) {
	}
}
