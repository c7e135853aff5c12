/* cmd_receive.c -- `beamprobe receive --listen ADDR -o DIR': the receiving
 * end of a session's TCP stream (output => {tcp, Address}), written as a
 * trace directory while it arrives (bp_recv.c).  Ends when the session
 * ends (its END frame), or on ^C / SIGTERM.
 */
#define _GNU_SOURCE
#include "bp_cli.h"
#include "bp_recv.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop_now;

static void on_signal(int sig)
{
	(void)sig;
	stop_now = 1;
}

int bp_cmd_receive(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, 0, 'l'},
		{"output", required_argument, 0, 'o'},
		{"keep", no_argument, 0, 'k'},
		{"token-file", required_argument, 0, 't'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	const char *listen_addr = NULL, *dir = NULL, *token_file = NULL;
	static struct bp_recv r, tok;
	struct bp_recv_conn conn;
	struct sigaction sa;
	int c, lfd, port = 0, keep = 0, rc = BP_EXIT_OK;

	optind = 1;
	while ((c = getopt_long(argc, argv, "l:o:kt:h", opts, NULL)) != -1) {
		switch (c) {
		case 't': token_file = optarg; break;
		case 'l': listen_addr = optarg; break;
		case 'o': dir = optarg; break;
		case 'k': keep = 1; break;
		case 'h': return bp_cli_help("receive");
		default: return bp_cli_usage("receive", "bad option");
		}
	}
	if (optind != argc)
		return bp_cli_usage("receive", "unexpected argument '%s'",
				    argv[optind]);
	if (!listen_addr || !dir)
		return bp_cli_usage("receive", "--listen ADDR and -o DIR are "
						"required");
	if ((lfd = bp_recv_listen(listen_addr, &port)) < 0)
		return BP_EXIT_USAGE;
	/* The token first: a bad one leaves no directory made. */
	if (token_file && bp_recv_token_file(&tok, token_file) != 0) {
		close(lfd);
		return BP_EXIT_USAGE;
	}
	if (bp_recv_open(&r, dir) != 0) {
		close(lfd);
		return BP_EXIT_USAGE;
	}
	memcpy(r.token, tok.token, tok.token_len);
	r.token_len = tok.token_len;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "beamprobe: listening on port %d, writing %s\n", port,
		dir);
	fflush(stderr);
	bp_recv_conn_init(&conn, -1);
	while (!stop_now && !(r.ended && !keep)) {
		struct pollfd p[BP_RECV_NFDS];
		int np = bp_recv_pollfds(&r, lfd, &conn, p);
		int n = poll(p, (nfds_t)np, 200);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		if (bp_recv_serve(&r, lfd, &conn, p, np) && r.ended &&
		    conn.fd >= 0)
			r.ended = 0; /* --keep: a new run */
	}
	if (r.malformed)
		rc = BP_EXIT_DAMAGED;
	bp_recv_conn_close(&conn);
	close(lfd);
	fprintf(stderr, "beamprobe: received %llu packets (%llu bytes) over "
			"%llu connection%s%s\n",
		(unsigned long long)r.packets, (unsigned long long)r.bytes,
		(unsigned long long)r.connections,
		r.connections == 1 ? "" : "s",
		r.ended ? "; the session ended" : "; the session did not end");
	if (r.bad_token)
		fprintf(stderr, "beamprobe: %llu connections refused for a "
				"wrong or missing token\n",
			(unsigned long long)r.bad_token);
	if (r.strangers) {
		fprintf(stderr, "beamprobe: %llu connections refused: not a "
				"beamprobe stream\n",
			(unsigned long long)r.strangers);
		/* Nothing but them came: what reached the port was no
		 * stream (a sender pointed at it speaks something else). */
		if (!r.have_uuid)
			rc = BP_EXIT_DAMAGED;
	}
	if (r.unfinished)
		fprintf(stderr, "beamprobe: %llu connections closed in the "
				"handshake (no greeting in 3 s, the lobby "
				"full, or another sender's came first)\n",
			(unsigned long long)r.unfinished);
	if (r.resent || r.turned_away)
		fprintf(stderr, "beamprobe: %llu packets sent again after a "
				"reconnection (already written: skipped), "
				"%llu connections turned away\n",
			(unsigned long long)r.resent,
			(unsigned long long)r.turned_away);
	if (r.fd_shortages)
		fprintf(stderr, "beamprobe: out of file descriptors %llu "
				"times: the thread files were closed and "
				"opened again as packets came (nothing lost; "
				"ulimit -n raises the limit)\n",
			(unsigned long long)r.fd_shortages);
	bp_recv_close(&r);
	return rc;
}
