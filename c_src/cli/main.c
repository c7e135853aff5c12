/* main.c -- bin/beamprobe: dispatches to one subcommand per file and
 * holds the help texts and the shared error helpers (bp_cli.h).
 */
#include "bp_cli.h"
#include "bp_cluster.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	const char *help;
};

static const struct command commands[] = {
	{"print", bp_cmd_print, "replay the events in time order, one per line",
	 "Usage: beamprobe print [OPTIONS] DIR\n"
	 "\n"
	 "Replays the events of the trace in DIR in time order across all\n"
	 "stream files, one line each, in Erlang syntax; calls are indented\n"
	 "by the process's call depth.  Times are local wall-clock time.\n"
	 "\n"
	 "Filters (all must match; --pid, --proc, --mfa and --event take\n"
	 "comma-separated lists and may be repeated):\n"
	 "  --pid PID          process or port text, e.g. '<0.123.0>'\n"
	 "  --proc NAME        registered name\n"
	 "  --mfa PATTERN      function, '*' matches any text: 'lists:*',\n"
	 "                     '*:seq/2', 'lists:seq' (any arity); only events\n"
	 "                     that name a function match\n"
	 "  --event KINDS      event kinds (call, return_from, send, ...) or\n"
	 "                     groups: calls, messages, procs, sched, gc, ports\n"
	 "  --since TIME       from TIME: HH:MM:SS[.frac] local time, or +SECS\n"
	 "                     after the first event (e.g. +1.5)\n"
	 "  --until TIME       up to TIME (same forms)\n"
	 "  --grep TEXT        lines containing TEXT\n"
	 "Other options:\n"
	 "  -f, --follow       keep reading a trace still being written\n"
	 "                     (new packets and stream files) until it is\n"
	 "                     complete (DIR/.complete, written by receive\n"
	 "                     and attach), its removal (exit 2) or ^C\n"
	 "  --nodes            with --follow: DIR holds node traces (DIR/<node>,\n"
	 "                     as 'attach --cluster' streams them): follow\n"
	 "                     each, the node's name after the time on every\n"
	 "                     line, in the order they arrive (no filters;\n"
	 "                     the merged timeline: 'cluster --print DIR')\n"
	 "  --syntax SYNTAX    erlang (default) or elixir: terms, functions and\n"
	 "                     pids as Elixir prints them (Shop.buy(:apple, 2),\n"
	 "                     %Shop.Order{id: 1}, \"héllo\", #PID<0.1.0>);\n"
	 "                     --mfa still takes Erlang names ('Elixir.Shop':*)\n"
	 "  -h, --help         this help\n"},
	{"stats", bp_cmd_stats, "per-function, per-process and message statistics",
	 "Usage: beamprobe stats [OPTIONS] DIR\n"
	 "\n"
	 "Per function: calls, inclusive time (total, mean, max), exclusive\n"
	 "(own) time, latency percentiles p50/p99 and calls still open at the\n"
	 "end (\"-\": no time for a function traced without return\n"
	 "events).  Per process: events, messages sent and received,\n"
	 "garbage collections and their time, time scheduled in.  The top\n"
	 "message flows (sender -> receiver) and the events lost, by cause.\n"
	 "\n"
	 "  --sort KEY         calls, total (default), own, mean, max or p99\n"
	 "  --top N            show the first N functions, processes and\n"
	 "                     flows (default 20; 0 = all)\n"
	 "  --json             machine-readable JSON\n"
	 "  -h, --help         this help\n"},
	{"export", bp_cmd_export, "convert for Perfetto, speedscope, flame graphs, kcachegrind",
	 "Usage: beamprobe export --format FORMAT [-o FILE] DIR\n"
	 "\n"
	 "  -F, --format FORMAT  one of:\n"
	 "      perfetto    Chrome trace-event JSON for ui.perfetto.dev: one\n"
	 "                  track per process, calls as nested slices, GC as\n"
	 "                  slices, messages as flow arrows, scheduling on a\n"
	 "                  separate 'scheduling' track group\n"
	 "      speedscope  speedscope evented profiles, one per process\n"
	 "      folded      flame-graph stacks 'proc;m:f/1;m:g/2 NS' weighted\n"
	 "                  by exclusive time in nanoseconds\n"
	 "      callgrind   callgrind profile for kcachegrind and\n"
	 "                  callgrind_annotate (event: ns)\n"
	 "  -o, --output FILE    output file (default: standard output)\n"
	 "  -h, --help           this help\n"},
	{"cluster", bp_cmd_cluster, "node traces of a cluster session as one: offsets, flows",
	 "Usage: beamprobe cluster [OPTIONS] DIR\n"
	 "\n"
	 "Reads DIR/<node>/, the node traces a cluster session wrote\n"
	 "(beamprobe:start(#{nodes => [...]})), as one trace.  Each node's\n"
	 "clock offset to the control node comes from the bounds recorded\n"
	 "in its trace (round-trip probes at start and stop), narrowed by\n"
	 "the messages that crossed nodes (a message is received after\n"
	 "what its sender's thread recorded before sending it: the VM\n"
	 "stamps a send to another node after sending it); sends are\n"
	 "matched to their receives by receiver and message.  Without\n"
	 "options: the offsets (recorded and refined bounds), flows and\n"
	 "latency per node pair.\n"
	 "\n"
	 "  -p, --print          the merged timeline, one event per line,\n"
	 "                       flows marked [flow N ...]\n"
	 "  -j, --json           the summary as JSON\n"
	 "  -P, --perfetto FILE  Chrome trace-event JSON for ui.perfetto.dev:\n"
	 "                       a track group per node, flow arrows from\n"
	 "                       each send to its receive\n"
	 "  -h, --help           this help\n"},
	{"request", bp_cmd_request, "the requests a follow session traced, each as one tree",
	 "Usage: beamprobe request [OPTIONS] DIR\n"
	 "\n"
	 "Shows the requests in DIR (a trace, or a directory of node\n"
	 "traces) that a follow session traced\n"
	 "(beamprobe:start(#{follow => #{from => \"m:f/2\"}})): each starts\n"
	 "at a call of the root function and spreads over the processes its\n"
	 "messages reach; a process acts for it from a receive of one of its\n"
	 "messages on (receives of other messages are left out).  One block\n"
	 "per request, its events in time order, indented by the number of\n"
	 "messages between the root and the process.\n"
	 "\n"
	 "  -r, --root M:F/A     the root function (default: the trace's\n"
	 "                       follow_root)\n"
	 "  -n, --request N      only request N\n"
	 "  -h, --help           this help\n"},
	{"attach", bp_cmd_attach, "trace a running node from here (no install needed)",
	 "Usage: beamprobe attach [OPTIONS] [--cluster] NODE PATTERN...\n"
	 "\n"
	 "Connects to the running Erlang node NODE (name@host, or name for\n"
	 "this host; long names when the host has a dot) as a hidden node,\n"
	 "starts a session there and streams its events back live: printed\n"
	 "as they arrive (the lines of 'print') and/or written to -o DIR.\n"
	 "If beamprobe is not on the node's code path, attach brings it:\n"
	 "its modules are loaded over distribution and its NIF placed in a\n"
	 "private directory (refused when the node's OTP release or\n"
	 "architecture is not the NIF's).  The session ends at its limits,\n"
	 "on ^C, or when this command dies or loses the node; the node is\n"
	 "then left as it was: no trace flags, patterns, session, process,\n"
	 "module or file of beamprobe's that attach brought.\n"
	 "\n"
	 "PATTERN: the language of beamprobe:calls/2 and messages/2, e.g.\n"
	 "  'lists:seq/2'  'm:f -> return'  'm:f(X, _) when X > 1'  'send'\n"
	 "\n"
	 "  -o, --output DIR     write the trace to DIR (created 0700)\n"
	 "  -p, --print          print the events too (the default without -o)\n"
	 "  -q, --quiet          do not print (needs -o)\n"
	 "  --seconds N          end after N seconds (default 60)\n"
	 "  --max-events N       end after N events\n"
	 "  --procs WHAT         all (default), new, existing, or a comma list\n"
	 "                       of registered names and pids ('<0.90.0>')\n"
	 "  --events KINDS       also: call,send,receive,procs,running,gc,ports\n"
	 "  --return             return values and exceptions of every pattern\n"
	 "  --args MODE          none, arity or full (default)\n"
	 "  --force              take functions and processes another tool\n"
	 "                       traces, allow patterns over every module\n"
	 "                       (beamprobe:start/1's force => true)\n"
	 "  --cluster            trace NODE's whole cluster: NODE and every\n"
	 "                       node it is connected to (nodes()) get\n"
	 "                       beamprobe (brought over distribution where\n"
	 "                       missing) and one session each, started and\n"
	 "                       stopped together, each streaming here live:\n"
	 "                       printed as they arrive with the node's name\n"
	 "                       after the time, written to DIR/<node>/; at\n"
	 "                       the end each node's clock offsets are added\n"
	 "                       to its trace ('beamprobe cluster DIR': the\n"
	 "                       merged timeline).  Every node is left as it\n"
	 "                       was, also if this command dies; if NODE dies,\n"
	 "                       the others clean up by themselves, this\n"
	 "                       command exits 2 within a second and DIR keeps\n"
	 "                       the partial node traces (no offsets).\n"
	 "  --cookie COOKIE      the cookie (default: ~/.erlang.cookie)\n"
	 "  --cookie-file FILE   read the cookie from FILE\n"
	 "  -h, --help           this help\n"
	 "Exit status: 0 the session ran and ended, 1 usage error, 2 the node\n"
	 "could not be attached or was lost.\n"},
	{"profile", bp_cmd_profile, "hot functions of a running node, by the VM's counters",
	 "Usage: beamprobe profile [OPTIONS] NODE PATTERN...\n"
	 "\n"
	 "Profile mode (beamprobe:profile/2) on the running node NODE, through\n"
	 "attach (connection, cookie and names as for attach; beamprobe is\n"
	 "brought when the node lacks it, and removed at the end).  No event\n"
	 "is produced: for --seconds the VM's own per-function counters\n"
	 "count (call_count: every call, in every process; call_time: calls\n"
	 "and own time in the processes nobody else traces).  Then they are\n"
	 "read and removed, and the table is printed in the layout of\n"
	 "'stats': calls, own time and mean own time per call (stats' mean\n"
	 "is total time per call) per function.  Total (inclusive)\n"
	 "time, max, p50, p99 and open calls need events: those columns\n"
	 "print '-' (null in JSON), and a line says so.  ^C ends the run early\n"
	 "with its table; a second ^C leaves at once.  If this command dies\n"
	 "or loses the node, the node removes every counter and flag the run\n"
	 "set and what attach brought.\n"
	 "\n"
	 "PATTERN: M:F/A, M:F, M:_/_ (a '_' module needs the Erlang API's\n"
	 "force); no guards, literal arguments or actions: counters count\n"
	 "every call.  Functions whose counters another tool holds (cprof,\n"
	 "eprof, fprof, tprof) are refused; one profile runs at a time.\n"
	 "\n"
	 "  --seconds N          count for N seconds (default 5, at most 3600)\n"
	 "  --timing             calls and own time (the default)\n"
	 "  --no-timing          calls only: no process gets a trace flag (the\n"
	 "                       cheapest)\n"
	 "  --per-process        own time per process under each function\n"
	 "  --sort KEY           own (default), calls or mean\n"
	 "  --top N              the first N functions (default 0 = all)\n"
	 "  --json               the JSON of beamprobe_profile:to_json/1\n"
	 "                       (stats --json's function entries)\n"
	 "  --cookie COOKIE      the cookie (default: ~/.erlang.cookie)\n"
	 "  --cookie-file FILE   read the cookie from FILE\n"
	 "  -h, --help           this help\n"
	 "Exit status: 0 the table was printed, 1 usage error, 2 the node\n"
	 "could not be reached or profiled (bad pattern, a profile already\n"
	 "running, ...) or was lost.\n"},
	{"record", bp_cmd_record, "run an Erlang program traced from its start",
	 "Usage: beamprobe record [OPTIONS] [PATTERN...] -- COMMAND [ARG...]\n"
	 "\n"
	 "Runs COMMAND (erl -s ..., an escript, mix run, a release's start\n"
	 "script: anything that starts an Erlang VM) with beamprobe injected:\n"
	 "a session tracing PATTERN... (the language of attach) starts before\n"
	 "the program's own code runs, and its trace is written to -o DIR\n"
	 "when the program ends.  Exits with COMMAND's exit status.\n"
	 "\n"
	 "  -o, --output DIR     the trace directory (default\n"
	 "                       ./beamprobe-record-PID)\n"
	 "  --seconds N          end the session after N seconds (default:\n"
	 "                       when the program ends)\n"
	 "  --max-events N, --procs, --events, --return, --args: as attach\n"
	 "  -h, --help           this help\n"},
	{"receive", bp_cmd_receive, "write a session's TCP stream as a trace directory",
	 "Usage: beamprobe receive --listen ADDR -o DIR [--keep] [--token-file F]\n"
	 "\n"
	 "Listens on ADDR (HOST:PORT, [V6]:PORT, or PORT alone for\n"
	 "127.0.0.1:PORT; port 0 picks a free one, printed on stderr) for the\n"
	 "stream of a session started with output => {tcp, \"HOST:PORT\"}\n"
	 "and writes it into DIR (created 0700; an existing DIR must be\n"
	 "empty) as it arrives: the same trace the file sink writes.  It\n"
	 "confirms each packet written; a dropped connection reconnects and\n"
	 "the sender sends what was not confirmed again (a packet already\n"
	 "written is skipped).  One sender at a time: newcomers wait in a\n"
	 "lobby (16 in the handshake at once, 3 s each), the first whose\n"
	 "greeting passes is taken, and a flood of connections does not\n"
	 "keep it out.  With --token-file, only a sender that proves that\n"
	 "token (output => {tcp, A, #{token => T}}) is taken; without, any\n"
	 "sender whose greeting comes first is.\n"
	 "Ends when the session ends (DIR/.complete is then written, where\n"
	 "'print --follow DIR' stops) or on ^C.\n"
	 "\n"
	 "  -l, --listen ADDR  where to listen (only loopback unless a host\n"
	 "                     address is given)\n"
	 "  -o, --output DIR   the trace directory\n"
	 "  -k, --keep         keep listening after the session ended\n"
	 "  -t, --token-file F the token senders must send (F's bytes, a\n"
	 "                     final newline dropped; at most 256)\n"
	 "  -h, --help         this help\n"},
	{"info", bp_cmd_info, "node, time span, event counts, losses, files",
	 "Usage: beamprobe info DIR\n"
	 "\n"
	 "Shows the node, OTP release and host of the trace, its wall-clock\n"
	 "time span, the events by kind, the events lost by cause and the\n"
	 "files with their sizes.\n"
	 "\n"
	 "  -h, --help         this help\n"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

void bp_cli_error(const char *fmt, ...)
{
	va_list ap;

	fputs("beamprobe: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int bp_cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "beamprobe%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'beamprobe %s%s--help'.\n", cmd ? cmd : "",
		cmd ? " " : "");
	return BP_EXIT_USAGE;
}

int bp_cli_finish(const struct bp_reader *r, int out_err,
		  const char *out_path, int rc)
{
	if (out_err) {
		bp_cli_error("%s: %s", out_path, strerror(out_err));
		rc = BP_EXIT_DAMAGED;
	}
	if (r->diag.problems) {
		bp_cli_error("%s: %u problem%s in the trace; the output covers "
			     "the part that could be read",
			     r->dir ? r->dir : "trace", r->diag.problems,
			     r->diag.problems == 1 ? "" : "s");
		rc = BP_EXIT_DAMAGED;
	}
	return rc;
}

int bp_cli_open(struct bp_reader *r, const char *dir, unsigned flags)
{
	if (bp_cluster_is_cluster_dir(dir)) {
		if (flags & BP_READER_FOLLOW)
			bp_cli_error("%s: a directory of node traces (a "
				     "cluster session's), not one trace: "
				     "'beamprobe print --follow --nodes %s' "
				     "follows them all", dir, dir);
		else
			bp_cli_error("%s: a directory of node traces (a "
				     "cluster session's), not one trace: "
				     "'beamprobe cluster %s' reads them as "
				     "one, 'beamprobe print %s/NODE' one "
				     "node's", dir, dir, dir);
		return -1;
	}
	return bp_reader_open(r, dir, flags);
}

long long bp_cli_count(const char *s)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 0)
		return -1;
	return v;
}

int bp_cli_help(const char *cmd)
{
	if (cmd) {
		for (size_t i = 0; i < NCOMMANDS; i++) {
			if (strcmp(commands[i].name, cmd) == 0) {
				fputs(commands[i].help, stdout);
				return BP_EXIT_OK;
			}
		}
		return bp_cli_usage(NULL, "unknown command '%s'", cmd);
	}
	printf("Usage: beamprobe COMMAND [OPTIONS] DIR\n"
	       "\n"
	       "Reads traces written by the beamprobe Erlang tracer (CTF 1.8\n"
	       "directories).\n\nCommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		printf("  %-8s %s\n", commands[i].name, commands[i].summary);
	printf("  help CMD  the help of CMD\n"
	       "\n"
	       "Options: -h, --help; -V, --version.\n"
	       "Exit status: 0 ok, 1 usage error, 2 unreadable or damaged "
	       "trace.\n"
	       "See beamprobe(1).\n");
	return BP_EXIT_OK;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (!cmd) {
		bp_cli_help(NULL);
		return BP_EXIT_USAGE;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help"))
		return bp_cli_help(NULL);
	if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
		printf("beamprobe %s (trace format %d.%d)\n", BP_VERSION,
		       BP_FORMAT_MAJOR, BP_FORMAT_MINOR);
		return BP_EXIT_OK;
	}
	if (!strcmp(cmd, "help"))
		return bp_cli_help(argc > 2 ? argv[2] : NULL);
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, cmd) == 0)
			return commands[i].run(argc - 1, argv + 1);
	return bp_cli_usage(NULL, "unknown command '%s'", cmd);
}
