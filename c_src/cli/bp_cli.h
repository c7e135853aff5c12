/* bp_cli.h -- what the subcommands of bin/beamprobe share: entry points,
 * exit codes, help and error helpers.  One file per subcommand
 * (cmd_<name>.c), each exporting bp_cmd_<name>(); main.c dispatches.
 */
#ifndef BP_CLI_H
#define BP_CLI_H

#include "bp_reader.h"

#define BP_VERSION "0.1.0"

enum bp_exit {
	BP_EXIT_OK = 0,      /* done */
	BP_EXIT_USAGE = 1,   /* bad command line */
	BP_EXIT_DAMAGED = 2  /* trace unreadable or damaged (the readable
			      * part was still processed) */
};

/*
 * Subcommands.  argv[0] is the subcommand name; options follow GNU
 * getopt_long conventions.  Each returns an enum bp_exit value and writes
 * its reports to stderr; none exits the process.
 */
int bp_cmd_print(int argc, char **argv);
int bp_cmd_stats(int argc, char **argv);
int bp_cmd_export(int argc, char **argv);
int bp_cmd_info(int argc, char **argv);
int bp_cmd_cluster(int argc, char **argv);
int bp_cmd_request(int argc, char **argv);
int bp_cmd_receive(int argc, char **argv);
int bp_cmd_attach(int argc, char **argv);
int bp_cmd_record(int argc, char **argv);
int bp_cmd_profile(int argc, char **argv);

/* Prints the help of cmd (NULL: the overview) to stdout.  Returns
 * BP_EXIT_OK, or BP_EXIT_USAGE for an unknown command. */
int bp_cli_help(const char *cmd);

/* "beamprobe: <message>" on stderr. */
__attribute__((format(printf, 1, 2))) void bp_cli_error(const char *fmt,
							 ...);

/* Reports a usage error of cmd and returns BP_EXIT_USAGE. */
__attribute__((format(printf, 2, 3))) int bp_cli_usage(const char *cmd,
						       const char *fmt, ...);

/*
 * Common end of a command that read r: reports an output error, or a
 * summary line if damage was found.  Returns rc, or BP_EXIT_DAMAGED when
 * the trace was damaged or out_err (an errno from the output) is set.
 */
int bp_cli_finish(const struct bp_reader *r, int out_err,
		  const char *out_path, int rc);

/* bp_reader_open() for the commands that read one trace; a directory
 * of node traces (cluster) is refused naming the commands that read it
 * (it was "not a beamprobe trace"). */
int bp_cli_open(struct bp_reader *r, const char *dir, unsigned flags);

/* Parses a non-negative integer option value; -1 if invalid. */
long long bp_cli_count(const char *s);

#endif /* BP_CLI_H */
