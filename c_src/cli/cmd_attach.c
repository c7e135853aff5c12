/* cmd_attach.c -- `beamprobe attach NODE PATTERN...': traces a running
 * node from the command line, as a hidden C node (erl_interface's ei).
 *
 *   1. connects (cookie from --cookie, --cookie-file or ~/.erlang.cookie;
 *      short or long names as NODE is written);
 *   2. if beamprobe is not on the node's code path: checks that the
 *      node's OTP release and architecture are the NIF's (else refuses,
 *      having loaded nothing), loads src/beamprobe_attach.erl's module,
 *      whose agent process (spawned now, before anything else) records
 *      what the node had and owns what attach brings;
 *   3. places the NIF where the node can load it: this user's private
 *      0700 directory when the node reads it (same host, same user), else
 *      sent over distribution into a private directory of the node's;
 *      loads the application and every module (code:load_binary/3);
 *   4. listens for the session's TCP stream (loopback when the node is on
 *      this host), starts the session (agent: beamprobe:start/1 with
 *      output => {tcp, ...}), writes the stream into -o DIR (bp_recv.c)
 *      and prints it live (a `print --follow DIR' child);
 *   5. ^C asks the agent to stop; when the session ends the agent stops
 *      it and undoes everything; if this process dies or the connection
 *      drops, the agent sees nodedown and does the same.
 *
 * --cluster: the agent names NODE's cluster; a stream per node is listened
 * for and written live into DIR/<node> (bp_attach_streams.c); the agent
 * runs one cluster session over the cluster (src/beamprobe_attach.erl),
 * every node's session streaming to its port; the events are printed as
 * they arrive, each line with its node's name (a `print --follow --nodes
 * DIR' child); at the end the agent sends each node's clock offsets,
 * added to that node's metadata, and `beamprobe cluster DIR' reads the
 * merged timeline.  If NODE dies, the other nodes end their sessions and
 * clean up by themselves (their coordinator and agent's node is gone); we
 * stop within a second, keeping what the streams brought (partial node
 * traces, without clock offsets).
 *
 * This file is the command: options, the flow above, the stream and the
 * printer.  Talking to the node: bp_attach_node.c (connecting, the
 * session's messages, signals), bp_attach_rpc.c (calls, the agent's
 * requests), bp_attach_bring.c (steps 1-3), bp_attach_files.c.
 */
#define _GNU_SOURCE
#include "bp_attach_bring.h"
#include "bp_attach_files.h"
#include "bp_attach_guard.h"
#include "bp_attach_node.h"
#include "bp_attach_rpc.h"
#include "bp_attach_streams.h"
#include "bp_cli.h"
#include "bp_recv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ei.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL 2

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the session ----------------------------------------------------- */

struct start_arg {
	char **patterns;
	int npatterns;
	const char *ip;
	int port, remote;
	long seconds, max_events;
	const char *procs, *events, *args;
	int ret, force;
	/* --cluster: the agent's own module, for the other nodes; a stream
	 * per node. */
	int cluster;
	char *self_beam;
	long self_beam_len;
	/* The token both ends of each stream prove they know (bp_recv.h). */
	const uint8_t *token;
	size_t token_len;
	const struct bp_attach_streams *ss;
};

static void fill_start(ei_x_buff *x, const void *arg)
{
	const struct start_arg *s = arg;
	int n = 4 + (s->max_events > 0) + (s->procs != NULL) +
		(s->args != NULL) + 2 * (s->cluster != 0) + (s->force != 0);

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, s->cluster ? "start_cluster" : "start");
	/* A list header of 0 elements is already the empty list: only a
	 * non-empty list takes its tail. */
	if (s->npatterns) {
		ei_x_encode_list_header(x, s->npatterns);
		for (int i = 0; i < s->npatterns; i++)
			ei_x_encode_binary(x, s->patterns[i],
					   (long)strlen(s->patterns[i]));
	}
	ei_x_encode_empty_list(x);
	ei_x_encode_map_header(x, n);
	ei_x_encode_atom(x, "tcp");
	ei_x_encode_tuple_header(x, 4);
	ei_x_encode_string(x, s->ip);
	ei_x_encode_long(x, s->port);
	ei_x_encode_boolean(x, s->remote);
	ei_x_encode_binary(x, s->token, (long)s->token_len);
	ei_x_encode_atom(x, "seconds");
	ei_x_encode_long(x, s->seconds);
	if (s->cluster) {
		ei_x_encode_atom(x, "self_beam");
		ei_x_encode_binary(x, s->self_beam, s->self_beam_len);
		ei_x_encode_atom(x, "streams");
		if (s->ss->n)
			ei_x_encode_list_header(x, s->ss->n);
		for (int i = 0; i < s->ss->n; i++) {
			ei_x_encode_tuple_header(x, 2);
			ei_x_encode_binary(x, s->ss->s[i].node,
					   (long)strlen(s->ss->s[i].node));
			ei_x_encode_long(x, s->ss->s[i].port);
		}
		ei_x_encode_empty_list(x);
	}
	ei_x_encode_atom(x, "return");
	ei_x_encode_boolean(x, s->ret);
	if (s->force) {
		ei_x_encode_atom(x, "force");
		ei_x_encode_boolean(x, 1);
	}
	if (s->max_events > 0) {
		ei_x_encode_atom(x, "max_events");
		ei_x_encode_long(x, s->max_events);
	}
	if (s->procs) {
		ei_x_encode_atom(x, "procs");
		ei_x_encode_binary(x, s->procs, (long)strlen(s->procs));
	}
	if (s->args) {
		ei_x_encode_atom(x, "args");
		ei_x_encode_binary(x, s->args, (long)strlen(s->args));
	}
	ei_x_encode_atom(x, "events");
	if (s->events) {
		const char *tok = s->events, *end;
		for (; *tok; tok = *end ? end + 1 : end) {
			end = strchr(tok, ',');
			if (!end)
				end = tok + strlen(tok);
			if (end == tok)
				continue;
			ei_x_encode_list_header(x, 1);
			ei_x_encode_binary(x, tok, (long)(end - tok));
		}
	}
	ei_x_encode_empty_list(x);
}

/* The session was refused (or failed) once the agent runs: it undoes
 * what attach brought now, and we wait for its word (as profile does), so
 * that the node is as it was when we exit and an attach right after this
 * one is not refused as "another attach ... still cleaning up". */
static void undo_refused(struct bp_attach *a)
{
	int done = 0;
	uint64_t deadline = now_ms() + 15000;

	if (!a->have_agent || a->fd < 0)
		return;
	bp_attach_send_stop(a);
	while (!done && now_ms() < deadline) {
		struct pollfd p = {a->fd, POLLIN, 0};
		int n = poll(&p, 1, 200);
		if (n < 0 && errno != EINTR)
			return;
		if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) &&
		    bp_attach_node_message(a, &done) < 0)
			return;
	}
}

static pid_t start_printer(const char *dir, int nodes)
{
	pid_t pid = fork();

	if (pid == 0) {
		char self[PATH_MAX];
		ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
		/* Our own ^C goes to us alone (we stop the session, the
		 * printer prints to the end); if we die, it goes too. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(0);
		if (l <= 0)
			_exit(127);
		self[l] = '\0';
		if (nodes)
			execl(self, "beamprobe", "print", "--follow", "--nodes",
			      dir, (char *)NULL);
		else
			execl(self, "beamprobe", "print", "--follow", dir,
			      (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int wait_child(pid_t pid, int ms)
{
	int st;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return 0;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	return -1;
}

/* Is host (a node name's part after '@') another host than this one?  Its
 * addresses are resolved; one that is neither loopback nor this host's
 * own address on the route to it is another host's, and then *route gets
 * this host's address on that route (a UDP "connect" picks it; nothing is
 * sent).  BEAMPROBE_ATTACH_OTHER_HOSTS (comma-separated host names)
 * treats the hosts it names as other hosts: how the suite tests the path
 * on one machine. */
static int other_host(const char *host, char *route, size_t cap)
{
	const char *fake = getenv("BEAMPROBE_ATTACH_OTHER_HOSTS");
	struct addrinfo hints, *res = NULL, *ai;
	int other = 0;

	if (fake) {
		size_t n = strlen(host);
		for (const char *p = fake; p && *p;) {
			const char *e = strchr(p, ',');
			size_t l = e ? (size_t)(e - p) : strlen(p);
			if (l == n && !strncmp(p, host, n))
				other = 1;
			p = e ? e + 1 : NULL;
		}
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_DGRAM;
	if (getaddrinfo(host, "9", &hints, &res) != 0)
		return 0; /* cannot tell: the NODE's address stays */
	for (ai = res; ai; ai = ai->ai_next) {
		struct sockaddr_storage l;
		socklen_t ll = sizeof l;
		int fd, same = 0, loop = 0;

		if (ai->ai_family == AF_INET)
			loop = (ntohl(((struct sockaddr_in *)ai->ai_addr)
					      ->sin_addr.s_addr) >> 24) == 127;
		else if (ai->ai_family == AF_INET6)
			loop = IN6_IS_ADDR_LOOPBACK(
				&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
		else
			continue;
		fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
		    getsockname(fd, (struct sockaddr *)&l, &ll) != 0) {
			close(fd);
			continue;
		}
		close(fd);
		if (l.ss_family == AF_INET) {
			struct in_addr a = ((struct sockaddr_in *)&l)->sin_addr;
			same = a.s_addr == ((struct sockaddr_in *)ai->ai_addr)
						   ->sin_addr.s_addr;
			inet_ntop(AF_INET, &a, route, (socklen_t)cap);
		} else {
			struct in6_addr a = ((struct sockaddr_in6 *)&l)->sin6_addr;
			same = !memcmp(&a, &((struct sockaddr_in6 *)ai->ai_addr)
						    ->sin6_addr,
				       sizeof a);
			inet_ntop(AF_INET6, &a, route, (socklen_t)cap);
		}
		if (other || (!loop && !same)) {
			freeaddrinfo(res);
			return 1;
		}
	}
	freeaddrinfo(res);
	return 0;
}

/* --cluster: where the node streams connect.  Every node on this host:
 * the address NODE's connection gave (127.0.0.1 for a node here: the
 * listeners stay on loopback).  A node on another host: this host's
 * address on the route to it, remote => true, so that it can reach the
 * listeners (nodes here reach that address as well).  Says so. */
static void cluster_route(const char *nodes_text, struct bp_attach *a,
			  int *remote)
{
	char route[INET6_ADDRSTRLEN] = "";

	for (const char *p = nodes_text; *p;) {
		const char *e = strchr(p, '\n'), *at;
		size_t l = e ? (size_t)(e - p) : strlen(p);
		char host[256];

		at = memchr(p, '@', l);
		if (at && (size_t)(p + l - at - 1) < sizeof host) {
			snprintf(host, sizeof host, "%.*s",
				 (int)(p + l - at - 1), at + 1);
			if (other_host(host, route, sizeof route)) {
				snprintf(a->local_ip, sizeof a->local_ip, "%s",
					 route);
				*remote = 1;
				fprintf(stderr,
					"beamprobe: a node on another host "
					"(%.*s): the node streams connect to "
					"%s\n", (int)l, p, route);
				return;
			}
		}
		p += l + (e != NULL);
	}
}

/* --cluster: ebin/beamprobe_attach.beam, which the agent loads into the
 * cluster's other nodes. */
static int read_self_beam(const char *home, struct start_arg *sa)
{
	char path[PATH_MAX + 32];
	FILE *f;
	long n;

	snprintf(path, sizeof path, "%s/ebin/beamprobe_attach.beam", home);
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || !(sa->self_beam = malloc((size_t)n)) ||
	    fread(sa->self_beam, 1, (size_t)n, f) != (size_t)n) {
		bp_cli_error("%s: cannot read it", path);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	sa->self_beam_len = n;
	return 0;
}

static void fill_cluster_nodes(ei_x_buff *x, const void *arg)
{
	(void)arg;
	ei_x_encode_atom(x, "cluster_nodes");
}

/* --cluster: DIR/.complete tells `print --follow --nodes DIR' that every
 * stream is in; it goes again once the printer is done. */
static void mark_dir(const char *dir, int on)
{
	char p[PATH_MAX + 32];

	snprintf(p, sizeof p, "%s/%s", dir, BP_RECV_COMPLETE);
	if (on) {
		int fd = open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
			      0600);
		if (fd >= 0)
			close(fd);
	} else {
		unlink(p);
	}
}

/* A temporary cluster directory: its node directories, then itself. */
static void remove_cluster_dir(const char *dir,
			       const struct bp_attach_streams *ss)
{
	char p[PATH_MAX + 300];

	for (int i = 0; ss->s && i < ss->n; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, ss->s[i].node);
		bp_attach_remove_dir(p);
	}
	bp_attach_remove_dir(dir);
}

/* ---- the command ----------------------------------------------------- */

int bp_cmd_attach(int argc, char **argv)
{
	enum { O_COOKIE = 256, O_COOKIE_FILE, O_SECONDS, O_MAX, O_PROCS,
	       O_EVENTS, O_ARGS, O_RETURN, O_NOPRINT, O_CLUSTER, O_FORCE };
	static const struct option opts[] = {
		{"cookie", required_argument, 0, O_COOKIE},
		{"cookie-file", required_argument, 0, O_COOKIE_FILE},
		{"output", required_argument, 0, 'o'},
		{"seconds", required_argument, 0, O_SECONDS},
		{"max-events", required_argument, 0, O_MAX},
		{"procs", required_argument, 0, O_PROCS},
		{"events", required_argument, 0, O_EVENTS},
		{"args", required_argument, 0, O_ARGS},
		{"return", no_argument, 0, O_RETURN},
		{"cluster", no_argument, 0, O_CLUSTER},
		{"force", no_argument, 0, O_FORCE},
		{"print", no_argument, 0, 'p'},
		{"quiet", no_argument, 0, 'q'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static struct bp_attach a;
	static struct bp_recv r;
	static struct bp_attach_streams ss;
	struct start_arg sa;
	struct bp_recv_conn conn;
	const char *cookie_opt = NULL, *cookie_file = NULL, *out_dir = NULL;
	char cookie[512], node[512], dir[PATH_MAX], text[2048],
		nodes_text[16384];
	int c, print = -1, rc = EXIT_FAIL, lfd = -1, done = 0, lost = 0;
	int tmp_dir = 0, bring = 0, sig_fd = -1, printer_cut = 0, guard = -1;
	int made_out = 0;
	long long v;
	pid_t printer = -1;
	uint64_t done_at = 0, lost_at = 0;

	memset(&a, 0, sizeof a);
	memset(&sa, 0, sizeof sa);
	memset(&ss, 0, sizeof ss);
	a.fd = -1;
	sa.seconds = 60;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:pqh", opts, NULL)) != -1) {
		switch (c) {
		case O_COOKIE: cookie_opt = optarg; break;
		case O_COOKIE_FILE: cookie_file = optarg; break;
		case 'o': out_dir = optarg; break;
		case 'p': print = 1; break;
		case 'q': print = 0; break;
		case O_SECONDS:
		case O_MAX:
			if ((v = bp_cli_count(optarg)) < 1 || v > 100000000)
				return bp_cli_usage("attach", "bad number '%s'",
						    optarg);
			if (c == O_SECONDS)
				sa.seconds = (long)v;
			else
				sa.max_events = (long)v;
			break;
		case O_PROCS: sa.procs = optarg; break;
		case O_EVENTS: sa.events = optarg; break;
		case O_ARGS:
			if (strcmp(optarg, "none") && strcmp(optarg, "arity") &&
			    strcmp(optarg, "full"))
				return bp_cli_usage("attach", "--args: none, "
						    "arity or full");
			sa.args = optarg;
			break;
		case O_RETURN: sa.ret = 1; break;
		case O_CLUSTER: sa.cluster = 1; break;
		case O_FORCE: sa.force = 1; break;
		case 'h': return bp_cli_help("attach");
		default: return bp_cli_usage("attach", "bad option");
		}
	}
	if (argc - optind < 1)
		return bp_cli_usage("attach", "expected NODE and patterns");
	if (argc - optind < 2 && !sa.events)
		return bp_cli_usage("attach", "expected a pattern ('m:f/2', "
				    "'m:f -> return', 'send') or --events");
	if (print < 0)
		print = out_dir == NULL;
	if (!print && !out_dir)
		return bp_cli_usage("attach", "--quiet needs -o DIR");
	snprintf(node, sizeof node, "%s", argv[optind]);
	a.node = node;
	sa.patterns = argv + optind + 1;
	sa.npatterns = argc - optind - 1;
	if (bp_attach_home(a.home, sizeof a.home) != 0) {
		bp_cli_error("cannot find beamprobe's files (set BEAMPROBE_HOME)");
		return EXIT_FAIL;
	}
	if (bp_attach_read_cookie(cookie_opt, cookie_file, cookie,
				  sizeof cookie) != 0)
		return BP_EXIT_USAGE;
	if (out_dir) {
		struct stat sb;
		snprintf(dir, sizeof dir, "%s", out_dir);
		/* Made by us (bp_recv_open): removed again if it stays empty
		 * (no session ran, no stream came). */
		made_out = lstat(dir, &sb) != 0 && errno == ENOENT;
	} else {
		snprintf(dir, sizeof dir, "%s/beamprobe-trace-XXXXXX",
			 bp_attach_tmp_base());
		if (!mkdtemp(dir)) {
			bp_cli_error("mkdtemp: %s", strerror(errno));
			return EXIT_FAIL;
		}
		tmp_dir = 1;
		/* Removed even if we are killed (bp_attach_guard.c). */
		guard = bp_attach_guard_start(dir);
	}
	if (sa.cluster && read_self_beam(a.home, &sa) != 0)
		return EXIT_FAIL;
	if (bp_recv_open(&r, dir) != 0) {
		if (tmp_dir)
			rmdir(dir);
		return BP_EXIT_USAGE;
	}
	r.quiet = 1;
	/* Only the node's session can send us its stream, and it streams
	 * only to us: both prove they know a token of ours (the handshake;
	 * another local user cannot know it). */
	if (bp_recv_new_token(&r, NULL) != 0)
		goto out;
	sa.token = r.token;
	sa.token_len = r.token_len;
	if ((sig_fd = bp_attach_catch_signals()) < 0)
		goto out;

	ei_init();
	/* Connect, and bring beamprobe if the node lacks it (the agent
	 * undoes whatever is brought, even if we die). */
	if (bp_attach_bring(&a, cookie, node, sizeof node, &bring) != 0)
		goto out;
	char laddr[INET6_ADDRSTRLEN + 8];
	snprintf(laddr, sizeof laddr, strchr(a.local_ip, ':') ? "[%s]:0" : "%s:0",
		 a.local_ip);
	/* --cluster: a stream per node of NODE's cluster, into DIR/<node>. */
	sa.remote = !a.same_host;
	if (sa.cluster) {
		if (bp_attach_request(&a, fill_cluster_nodes, NULL,
				      "cannot list the cluster's nodes",
				      nodes_text, sizeof nodes_text) != 0)
			goto out;
		cluster_route(nodes_text, &a, &sa.remote);
		if (bp_attach_streams_open(&ss, dir, nodes_text,
					   a.local_ip) != 0)
			goto out;
		for (int i = 0; i < ss.n; i++) {
			memcpy(ss.s[i].r.token, r.token, r.token_len);
			ss.s[i].r.token_len = r.token_len;
		}
		sa.ss = &ss;
		a.on_env = bp_attach_streams_env;
		a.env_ctx = &ss;
	} else if ((lfd = bp_recv_listen(laddr, &sa.port)) < 0) {
		goto out;
	}
	sa.ip = a.local_ip;
	if (bp_attach_request(&a, fill_start, &sa, "cannot start the session",
			      text, sizeof text) != 0) {
		undo_refused(&a);
		goto out;
	}
	fprintf(stderr, "beamprobe: attached to %s%s: %s; tracing for at most "
			"%ld s, ^C to stop\n",
		node, bring ? " (beamprobe brought in)" : "", text,
		sa.seconds);
	fflush(stderr);

	bp_recv_conn_init(&conn, -1);
	for (;;) {
		static struct pollfd p[2 + BP_RECV_NFDS * BP_ATTACH_MAX_NODES];
		int np;
		p[0] = (struct pollfd){sig_fd, POLLIN, 0};
		p[1] = (struct pollfd){a.fd, POLLIN, 0};
		if (sa.cluster)
			np = 2 + bp_attach_streams_fds(&ss, p + 2,
						       BP_RECV_NFDS *
							       BP_ATTACH_MAX_NODES);
		else
			np = 2 + bp_recv_pollfds(&r, lfd, &conn, p + 2);
		int n = poll(p, (nfds_t)np, 100);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && (p[0].revents & POLLIN)) {
			bp_attach_signal_read(p[0].fd);
			if (bp_attach_signals >= 2 || lost)
				break; /* twice: go now (the node cleans up) */
			fprintf(stderr, "beamprobe: stopping the session on "
					"%s...\n", node);
			bp_attach_send_stop(&a);
		}
		if (n > 0 && !lost && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (bp_attach_node_message(&a, &done) < 0) {
				if (sa.cluster)
					bp_cli_error("lost the connection to %s "
						     "(the node died or is "
						     "unreachable): the other "
						     "nodes end their sessions "
						     "and undo what attach "
						     "brought by themselves",
						     node);
				else
					bp_cli_error("lost the connection to %s "
						     "(the node ends the "
						     "session)", node);
				lost = 1;
				close(a.fd);
				a.fd = -1;
			}
			if (done && !done_at)
				done_at = now_ms();
		}
		if (sa.cluster) {
			if (n > 0)
				bp_attach_streams_serve(&ss, p + 2, np - 2);
			if (print && printer < 0 && bp_attach_streams_begun(&ss))
				printer = start_printer(dir, 1);
			if (lost && !lost_at)
				lost_at = now_ms();
			/* Lost NODE: the others' streams end as their sessions
			 * stop (their coordinator is gone); we go within a
			 * second whatever they do (0.4 s for them, at most
			 * 0.3 s for the printer). */
			if (lost && (bp_attach_streams_done(&ss) ||
				     now_ms() - lost_at > 400))
				break;
			if (done && (bp_attach_streams_done(&ss) ||
				     now_ms() - done_at > 3000))
				break;
			continue;
		}
		if (n > 0)
			(void)bp_recv_serve(&r, lfd, &conn, p + 2, np - 2);
		if (print && printer < 0 && r.have_uuid)
			printer = start_printer(dir, 0);
		/* Lost the node: the stream's end (or its loss) ends us. */
		if (lost && (r.ended || bp_recv_idle(&r, &conn))) {
			if (!lost_at)
				lost_at = now_ms();
			if (r.ended || now_ms() - lost_at > 1500)
				break;
		}
		if ((done && r.ended) || (done && now_ms() - done_at > 3000))
			break;
	}
	bp_recv_conn_close(&conn);
	rc = done && !a.write_failed && !a.session_failed ? BP_EXIT_OK
							   : EXIT_FAIL;
	if (sa.cluster) {
		int ended = bp_attach_streams_done(&ss);
		if (done && bp_attach_streams_record(&ss) != 0)
			rc = EXIT_FAIL;
		if (printer > 0) {
			mark_dir(dir, 1);
			printer_cut = wait_child(printer, done && ended ? 5000
						 : done ? 500 : 300) != 0;
			printer = -1;
			mark_dir(dir, 0);
		}
		bp_attach_streams_report(&ss);
		if (done && !tmp_dir)
			fprintf(stderr, "beamprobe: node traces written to %s; "
					"the merged timeline: 'beamprobe "
					"cluster --print %s'\n", dir, dir);
		else if (!done && !tmp_dir)
			fprintf(stderr, "beamprobe: %s keeps what the streams "
					"brought: partial node traces, without "
					"clock offsets ('beamprobe print "
					"%s/NODE' reads each)\n", dir, dir);
	} else if (!r.ended && r.have_uuid) {
		bp_cli_error("the stream did not end cleanly: the trace in %s "
			     "may miss its last events", dir);
	}
out:
	if (printer > 0)
		printer_cut = wait_child(printer, r.ended ? 5000 : 500) != 0;
	if (printer_cut && tmp_dir && (r.have_uuid || sa.cluster)) {
		/* Its output was read too slowly to print everything in
		 * time: what it did not print stays readable. */
		fprintf(stderr, "beamprobe: the printer was stopped before "
				"the end of the trace (its output is read "
				"slowly): the whole trace is kept in %s "
				"('beamprobe %s %s')\n", dir,
			sa.cluster ? "cluster --print" : "print", dir);
		tmp_dir = 0;
		bp_attach_guard_keep(guard);
		guard = -1;
	}
	if (a.fd >= 0)
		close(a.fd); /* the agent, if still there, cleans up now */
	if (lfd >= 0)
		close(lfd);
	if (a.nif_dir[0]) {
		/* The agent removed it; if it could not, we do. */
		bp_attach_remove_dir(a.nif_dir);
	}
	/* The node lost (dead, most likely): the NIF directory its agent
	 * made on this host goes too (if the node still runs, its agent
	 * removes it as well). */
	if (lost)
		bp_attach_remove_node_nif_dir(&a);
	if (sa.cluster && !bp_attach_streams_begun(&ss) && !tmp_dir)
		for (int i = 0; ss.s && i < ss.n; i++) {
			char p[PATH_MAX + 300]; /* empty: nothing came */
			snprintf(p, sizeof p, "%s/%s", dir, ss.s[i].node);
			rmdir(p);
		}
	if (made_out && rc != BP_EXIT_OK)
		rmdir(dir); /* only if empty: nothing was received */
	bp_recv_close(&r);
	free(sa.self_beam);
	if (tmp_dir && sa.cluster)
		remove_cluster_dir(dir, &ss);
	else if (tmp_dir)
		bp_attach_remove_dir(dir);
	else if (rc == BP_EXIT_OK && print == 0 && !sa.cluster)
		fprintf(stderr, "beamprobe: trace written to %s\n", dir);
	bp_attach_streams_close(&ss);
	if (guard >= 0)
		close(guard); /* the directory is gone: the guard goes too */
	return rc;
}
