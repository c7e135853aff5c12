/* cmd_profile.c -- `beamprobe profile NODE PATTERN...': profile mode
 * (beamprobe:profile/2, the VM's call_count/call_time counters, no
 * events) on a running node, from the command line, through attach.
 *
 *   1. connects and brings beamprobe as attach does (bp_attach_bring in
 *      bp_attach_bring.c: cookie, short or long names, the version check,
 *      the agent of src/beamprobe_attach.erl spawned before anything else
 *      is loaded, the NIF and the modules);
 *   2. asks the agent for a profile run ({profile, Patterns, Options}:
 *      src/beamprobe_attach_profile.erl), which answers once the counters
 *      count, or with the run's error (bad pattern, no such function, a
 *      profile already running, counters held by another tool);
 *   3. waits: the run ends at --seconds, or early on ^C (the agent ends
 *      it and still sends its table); the agent sends the table (or the
 *      JSON) formatted on the node, then undoes what attach brought and
 *      sends its done message; the table goes to stdout.
 *
 * If this process dies or the connection drops, the agent sees nodedown:
 * it ends the run (the worker removes every counter and call flag it set)
 * before it unloads beamprobe.  A second ^C leaves at once (the node
 * cleans up all the same).
 */
#define _GNU_SOURCE
#include "bp_attach_bring.h"
#include "bp_attach_files.h"
#include "bp_attach_node.h"
#include "bp_attach_rpc.h"
#include "bp_cli.h"

#include <ei.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL 2
#define MAX_SECONDS 3600
/* After the run's time: how long the node may take to send the table and
 * clean up before we give up on it. */
#define GRACE_MS 60000

/* Read end of the signal pipe (bp_attach_catch_signals). */
static int sig_fd = -1;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct profile_arg {
	char **patterns;
	int npatterns;
	long seconds, top;
	int timing, per_process, json;
	const char *sort;
};

static void fill_profile(ei_x_buff *x, const void *arg)
{
	const struct profile_arg *p = arg;

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, "profile");
	ei_x_encode_list_header(x, p->npatterns);
	for (int i = 0; i < p->npatterns; i++)
		ei_x_encode_binary(x, p->patterns[i],
				   (long)strlen(p->patterns[i]));
	ei_x_encode_empty_list(x);
	ei_x_encode_map_header(x, 6);
	ei_x_encode_atom(x, "seconds");
	ei_x_encode_long(x, p->seconds);
	ei_x_encode_atom(x, "timing");
	ei_x_encode_boolean(x, p->timing);
	ei_x_encode_atom(x, "per_process");
	ei_x_encode_boolean(x, p->per_process);
	ei_x_encode_atom(x, "sort");
	ei_x_encode_binary(x, p->sort, (long)strlen(p->sort));
	ei_x_encode_atom(x, "top");
	ei_x_encode_long(x, p->top);
	ei_x_encode_atom(x, "json");
	ei_x_encode_boolean(x, p->json);
}

/* A binary at *idx, malloc'ed and NUL-terminated (NULL if not one). */
static char *get_binary(const char *buf, int *idx, long *len)
{
	int type, size;
	char *b;

	if (ei_get_type(buf, idx, &type, &size) < 0 || type != ERL_BINARY_EXT)
		return NULL;
	if (!(b = malloc((size_t)size + 1)))
		return NULL;
	if (ei_decode_binary(buf, idx, b, len) < 0) {
		free(b);
		return NULL;
	}
	b[*len] = '\0';
	return b;
}

struct run {
	const char *node;
	int got;      /* the outcome came: 1 the table, -1 an error */
	int done;     /* the agent's done message came */
};

/* Writes all of p, or fails. */
static int put_all(const char *p, size_t n)
{
	return fwrite(p, 1, n, stdout) == n ? 0 : -1;
}

/* One message from the node: the outcome
 * {beamprobe_attach_profile, ok | error, Text} or the agent's
 * {beamprobe_attach_done, Text[, How]}; ticks and others ignored.  -1: the
 * connection is lost. */
static int node_message(int fd, struct run *r)
{
	erlang_msg msg;
	ei_x_buff x;
	int rc, idx = 0, ver, arity;
	char tag[MAXATOMLEN_UTF8], how[MAXATOMLEN_UTF8];
	long len;
	char *text;

	ei_x_new(&x);
	rc = ei_xreceive_msg(fd, &msg, &x);
	if (rc == ERL_TICK) {
		ei_x_free(&x);
		return 0;
	}
	if (rc == ERL_ERROR) {
		ei_x_free(&x);
		return -1;
	}
	if ((msg.msgtype != ERL_SEND && msg.msgtype != ERL_REG_SEND) ||
	    ei_decode_version(x.buff, &idx, &ver) < 0 ||
	    ei_decode_tuple_header(x.buff, &idx, &arity) < 0 ||
	    ei_decode_atom(x.buff, &idx, tag) < 0) {
		ei_x_free(&x);
		return 0;
	}
	if (arity == 3 && !strcmp(tag, "beamprobe_attach_profile") &&
	    ei_decode_atom(x.buff, &idx, how) == 0 &&
	    (text = get_binary(x.buff, &idx, &len))) {
		if (!strcmp(how, "ok")) {
			if (put_all(text, (size_t)len) != 0 ||
			    (len > 0 && text[len - 1] != '\n' &&
			     put_all("\n", 1) != 0) ||
			    fflush(stdout) != 0) {
				bp_cli_error("writing the table: %s",
					     strerror(errno));
				r->got = -1;
			} else {
				r->got = 1;
			}
		} else {
			bp_cli_error("%s: the profile failed: %s", r->node,
				     text);
			r->got = -1;
		}
		free(text);
	} else if ((arity == 2 || arity == 3) &&
		   !strcmp(tag, "beamprobe_attach_done") &&
		   (text = get_binary(x.buff, &idx, &len))) {
		/* The agent's cleanup summary; no trace session ran.  (Its
		 * third element, ok | failed, is the session's: the profile's
		 * outcome came in its own message.) */
		const char *t = text, *skip = "no session ran; ";
		if (!strncmp(t, skip, strlen(skip)))
			t += strlen(skip);
		fprintf(stderr, "beamprobe: %s: %s\n", r->node, t);
		free(text);
		r->done = 1;
	}
	ei_x_free(&x);
	return 0;
}

/* Until the agent's done message (or a second ^C, or the deadline); the
 * first ^C asks the agent to stop.  1: the connection was lost. */
static int wait_done(struct bp_attach *a, struct run *r, long long deadline,
		     int *stopping)
{
	while (!r->done) {
		struct pollfd p[2] = {{sig_fd, POLLIN, 0},
				      {a->fd, POLLIN, 0}};
		int n = poll(p, 2, 200);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && (p[0].revents & POLLIN)) {
			bp_attach_signal_read(p[0].fd);
			if (bp_attach_signals >= 2)
				break; /* twice: go now (the node cleans up) */
			if (!*stopping) {
				fprintf(stderr, "beamprobe: ending the profile "
						"on %s early...\n", r->node);
				bp_attach_send_stop(a);
				*stopping = 1;
			}
		}
		if (n > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    node_message(a->fd, r) < 0) {
			return 1;
		}
		if (now_ms() > deadline) {
			bp_cli_error("no answer from %s in time; giving up "
				     "(the node removes the counters and what "
				     "attach brought when we go)", r->node);
			break;
		}
	}
	return 0;
}

int bp_cmd_profile(int argc, char **argv)
{
	enum { O_COOKIE = 256, O_COOKIE_FILE, O_SECONDS, O_TIMING,
	       O_NO_TIMING, O_PER_PROCESS, O_SORT, O_TOP, O_JSON };
	static const struct option opts[] = {
		{"cookie", required_argument, 0, O_COOKIE},
		{"cookie-file", required_argument, 0, O_COOKIE_FILE},
		{"seconds", required_argument, 0, O_SECONDS},
		{"timing", no_argument, 0, O_TIMING},
		{"no-timing", no_argument, 0, O_NO_TIMING},
		{"per-process", no_argument, 0, O_PER_PROCESS},
		{"sort", required_argument, 0, O_SORT},
		{"top", required_argument, 0, O_TOP},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static struct bp_attach a;
	struct profile_arg pa;
	struct run run;
	const char *cookie_opt = NULL, *cookie_file = NULL;
	char cookie[512], node[512], text[2048];
	int c, rc = EXIT_FAIL, brought = 0, lost = 0, stopping = 0;
	long long v, deadline;

	memset(&a, 0, sizeof a);
	memset(&pa, 0, sizeof pa);
	memset(&run, 0, sizeof run);
	a.fd = -1;
	pa.seconds = 5; /* profile/2's default time */
	pa.timing = 1;
	pa.sort = "own";
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_COOKIE: cookie_opt = optarg; break;
		case O_COOKIE_FILE: cookie_file = optarg; break;
		case O_SECONDS:
			if ((v = bp_cli_count(optarg)) < 1 || v > MAX_SECONDS)
				return bp_cli_usage("profile", "--seconds: 1 to "
						    "%d, not '%s'", MAX_SECONDS,
						    optarg);
			pa.seconds = (long)v;
			break;
		case O_TIMING: pa.timing = 1; break;
		case O_NO_TIMING: pa.timing = 0; break;
		case O_PER_PROCESS: pa.per_process = 1; break;
		case O_SORT:
			if (strcmp(optarg, "calls") && strcmp(optarg, "own") &&
			    strcmp(optarg, "mean"))
				return bp_cli_usage("profile", "--sort: calls, "
						    "own or mean, not '%s'",
						    optarg);
			pa.sort = optarg;
			break;
		case O_TOP:
			if ((v = bp_cli_count(optarg)) < 0 || v > 100000000)
				return bp_cli_usage("profile", "bad --top '%s'",
						    optarg);
			pa.top = (long)v;
			break;
		case O_JSON: pa.json = 1; break;
		case 'h': return bp_cli_help("profile");
		default: return bp_cli_usage("profile", "bad option");
		}
	}
	/* A node name has no ':' or '/'; a pattern first means no NODE. */
	if (argc - optind < 1 || strpbrk(argv[optind], ":/("))
		return bp_cli_usage("profile", "expected NODE and patterns: "
				    "profile mode runs on a node (name@host, "
				    "or name for this host); in an Erlang "
				    "shell, beamprobe:profile/2");
	if (argc - optind < 2)
		return bp_cli_usage("profile", "expected a pattern after NODE "
				    "('m:f/2', 'm:_/_')");
	if (pa.per_process && !pa.timing)
		return bp_cli_usage("profile", "--per-process needs timing "
				    "(it times each process)");
	snprintf(node, sizeof node, "%s", argv[optind]);
	a.node = node;
	pa.patterns = argv + optind + 1;
	pa.npatterns = argc - optind - 1;
	if (bp_attach_home(a.home, sizeof a.home) != 0) {
		bp_cli_error("cannot find beamprobe's files (set BEAMPROBE_HOME)");
		return EXIT_FAIL;
	}
	if (bp_attach_read_cookie(cookie_opt, cookie_file, cookie,
				  sizeof cookie) != 0)
		return BP_EXIT_USAGE;
	if ((sig_fd = bp_attach_catch_signals()) < 0) {
		bp_cli_error("pipe: %s", strerror(errno));
		return EXIT_FAIL;
	}

	ei_init();
	run.node = node;
	if (bp_attach_bring(&a, cookie, node, sizeof node, &brought) != 0 ||
	    bp_attach_request(&a, fill_profile, &pa, "cannot profile", text,
			      sizeof text) != 0) {
		/* Refused or failed once the agent runs: it undoes what it
		 * brought now, and we wait for that (the node is as it was
		 * when we exit; the next attach is not refused). */
		if (a.have_agent && a.fd >= 0) {
			bp_attach_send_stop(&a);
			stopping = 1;
			lost = wait_done(&a, &run, now_ms() + 15000, &stopping);
		}
		goto out;
	}
	fprintf(stderr, "beamprobe: profiling on %s%s: %s; %s, ^C to stop "
			"early\n", node,
		brought ? " (beamprobe brought in)" : "", text,
		pa.timing ? "calls and own time" : "calls only");
	fflush(stderr);

	deadline = now_ms() + pa.seconds * 1000 + GRACE_MS;
	lost = wait_done(&a, &run, deadline, &stopping);
	if (lost)
		bp_cli_error("lost the connection to %s%s", node,
			     run.got ? "" : " before the profile ended: no "
			     "table (if the node is still up, it removed the "
			     "counters and what attach brought)");
	else if (bp_attach_signals >= 2 && !run.got)
		bp_cli_error("interrupted: no table (%s removes the counters "
			     "and what attach brought)", node);
	rc = run.got == 1 ? BP_EXIT_OK : EXIT_FAIL;
out:
	if (a.fd >= 0)
		close(a.fd); /* the agent, if still there, cleans up now */
	if (a.nif_dir[0])
		bp_attach_remove_dir(a.nif_dir); /* if the agent could not */
	/* The node lost (dead, most likely): the NIF directory its agent
	 * made on this host goes too, as attach does. */
	if (lost)
		bp_attach_remove_node_nif_dir(&a);
	return rc;
}
