/* cmd_record.c -- `beamprobe record [OPTIONS] [PATTERN...] -- CMD...':
 * runs an Erlang program with beamprobe injected and a session started
 * before the program's code runs (src/beamprobe_record.erl, put first on
 * its command line through ERL_AFLAGS), and writes the session's TCP
 * stream (loopback) into -o DIR while it runs (bp_recv.c).  Exits with
 * the program's exit status.
 */
#define _GNU_SOURCE
#include "bp_attach_files.h"
#include "bp_cli.h"
#include "bp_recv.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid, got_signal;

static void forward(int sig)
{
	got_signal = sig;
	if (child_pid > 0)
		kill((pid_t)child_pid, sig);
}

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Appends "key=value;" to opts. */
static void opt_add(char *opts, size_t n, const char *k, const char *v)
{
	size_t l = strlen(opts);
	snprintf(opts + l, n - l, "%s=%s;", k, v);
}

int bp_cmd_record(int argc, char **argv)
{
	enum { O_SECONDS = 256, O_MAX, O_PROCS, O_EVENTS, O_ARGS, O_RETURN };
	static const struct option lopts[] = {
		{"output", required_argument, 0, 'o'},
		{"seconds", required_argument, 0, O_SECONDS},
		{"max-events", required_argument, 0, O_MAX},
		{"procs", required_argument, 0, O_PROCS},
		{"events", required_argument, 0, O_EVENTS},
		{"args", required_argument, 0, O_ARGS},
		{"return", no_argument, 0, O_RETURN},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static struct bp_recv r;
	struct bp_recv_conn conn;
	struct sigaction sa;
	char dir[PATH_MAX], home[PATH_MAX], opts[2048] = "", pats[8192] = "";
	char addr[64], aflags[PATH_MAX * 2 + 256];
	const char *out = NULL, *last_arg = NULL;
	int c, lfd, port = 0, status = 0, events = 0, exited = 0, rc;
	uint64_t exit_at = 0;
	long long v;
	pid_t pid;

	optind = 1;
	/* "+": stop at the first non-option (the patterns, then --). */
	while ((c = getopt_long(argc, argv, "+o:h", lopts, NULL)) != -1) {
		last_arg = optarg;
		switch (c) {
		case 'o': out = optarg; break;
		case O_SECONDS:
		case O_MAX:
			if ((v = bp_cli_count(optarg)) < 1 || v > 100000000)
				return bp_cli_usage("record", "bad number '%s'",
						    optarg);
			opt_add(opts, sizeof opts,
				c == O_SECONDS ? "seconds" : "max_events",
				optarg);
			break;
		case O_PROCS: opt_add(opts, sizeof opts, "procs", optarg); break;
		case O_EVENTS:
			opt_add(opts, sizeof opts, "events", optarg);
			events = 1;
			break;
		case O_ARGS:
			if (strcmp(optarg, "none") && strcmp(optarg, "arity") &&
			    strcmp(optarg, "full"))
				return bp_cli_usage("record", "--args: none, "
						    "arity or full");
			opt_add(opts, sizeof opts, "args", optarg);
			break;
		case O_RETURN: opt_add(opts, sizeof opts, "return", "1"); break;
		case 'h': return bp_cli_help("record");
		default: return bp_cli_usage("record", "bad option");
		}
	}
	/* PATTERN... -- CMD... getopt takes a "--" right after the options
	 * (no pattern: 'record --events send -- erl') as its end: it is
	 * put back (it was read as the first word of the patterns, and
	 * the command refused: "expected -- COMMAND"). */
	int i = optind, npat = 0;
	if (i > 1 && !strcmp(argv[i - 1], "--") && argv[i - 1] != last_arg)
		i--;
	for (; i < argc && strcmp(argv[i], "--"); i++) {
		if (strchr(argv[i], '\n') || strchr(argv[i], ';'))
			return bp_cli_usage("record", "bad pattern '%s'",
					    argv[i]);
		size_t l = strlen(pats);
		snprintf(pats + l, sizeof pats - l, "%s\n", argv[i]);
		npat++;
	}
	if (i >= argc || i + 1 >= argc)
		return bp_cli_usage("record", "expected -- COMMAND [ARG...]");
	if (!npat && !events)
		return bp_cli_usage("record", "expected a pattern or --events");
	char **cmd = argv + i + 1;
	if (bp_attach_home(home, sizeof home) != 0) {
		bp_cli_error("cannot find beamprobe's files (set BEAMPROBE_HOME)");
		return 2;
	}
	if (out)
		snprintf(dir, sizeof dir, "%s", out);
	else
		snprintf(dir, sizeof dir, "beamprobe-record-%ld", (long)getpid());
	if (bp_recv_open(&r, dir) != 0)
		return BP_EXIT_USAGE;
	if ((lfd = bp_recv_listen("127.0.0.1:0", &port)) < 0)
		return 2;
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
	const char *old = getenv("ERL_AFLAGS");
	snprintf(aflags, sizeof aflags, "-pz %s/ebin -s beamprobe_record start%s%s",
		 home, old ? " " : "", old ? old : "");
	setenv("ERL_AFLAGS", aflags, 1);
	setenv("BEAMPROBE_RECORD_ADDR", addr, 1);
	/* The program's session sends it: no other local user can stream
	 * into this trace meanwhile. */
	char tokhex[33];
	if (bp_recv_new_token(&r, tokhex) != 0)
		return 2;
	setenv("BEAMPROBE_RECORD_TOKEN", tokhex, 1);
	setenv("BEAMPROBE_RECORD_PATTERNS", pats, 1);
	setenv("BEAMPROBE_RECORD_OPTS", opts, 1);

	pid = fork();
	if (pid < 0) {
		bp_cli_error("fork: %s", strerror(errno));
		return 2;
	}
	if (pid == 0) {
		close(lfd);
		execvp(cmd[0], cmd);
		fprintf(stderr, "beamprobe: cannot run %s: %s\n", cmd[0],
			strerror(errno));
		_exit(127);
	}
	child_pid = pid;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = forward;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	bp_recv_conn_init(&conn, -1);
	for (;;) {
		struct pollfd p[BP_RECV_NFDS];
		int np = bp_recv_pollfds(&r, lfd, &conn, p);
		int n = poll(p, (nfds_t)np, 100);
		/* Any local user can connect to the port: newcomers wait in
		 * the lobby, and only the program's session proves the
		 * token (bp_recv.h). */
		if (n > 0)
			(void)bp_recv_serve(&r, lfd, &conn, p, np);
		if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
			exited = 1;
			child_pid = 0;
			exit_at = ms_now();
		}
		/* After the program: what is still in flight, briefly. */
		if (exited && (r.ended || bp_recv_idle(&r, &conn) ||
			       ms_now() - exit_at > 2000))
			break;
	}
	bp_recv_conn_close(&conn);
	close(lfd);
	if (!r.have_uuid)
		bp_cli_error("no trace arrived: the program did not start an "
			     "Erlang VM, or the session could not start (see "
			     "above)");
	else if (!r.ended)
		bp_cli_error("the program ended without stopping the VM "
			     "cleanly (halt/1?): the last ~100 ms of the trace "
			     "may be missing");
	bp_recv_close(&r);
	/* No trace: say nothing was written (it said "trace written to DIR
	 * (0 packets)", then removed DIR). */
	if (!r.have_uuid && !r.packets && rmdir(dir) == 0)
		fprintf(stderr, "beamprobe: nothing written (%s removed)\n",
			dir);
	else
		fprintf(stderr, "beamprobe: trace written to %s (%llu "
			"packets)\n", dir, (unsigned long long)r.packets);
	/* No trace: 2, as for any session that could not start (the
	 * program's own status said 0 for `record -- true'). */
	if (!r.have_uuid)
		return BP_EXIT_DAMAGED;
	rc = WIFEXITED(status) ? WEXITSTATUS(status)
	     : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 2;
	return rc;
}
