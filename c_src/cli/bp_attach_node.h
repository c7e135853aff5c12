/* bp_attach_node.h -- `beamprobe attach' as a hidden C node
 * (bp_attach_node.c): the connection (struct bp_attach), connecting, the
 * session's messages and the signals that end it.  Used by cmd_attach.c
 * and cmd_profile.c, with bp_attach_rpc.h (calls into the node),
 * bp_attach_bring.h (bringing beamprobe there) and bp_attach_files.h. */
#ifndef BP_ATTACH_NODE_H
#define BP_ATTACH_NODE_H

#include <arpa/inet.h>
#include <ei.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>

/* One attach: the connection to the node and what it brought. */
struct bp_attach {
	ei_cnode ec;
	int fd;
	const char *node;
	char home[PATH_MAX]; /* the install: bin/.. */
	erlang_pid agent;
	int have_agent;
	int same_host;
	char local_ip[INET6_ADDRSTRLEN];
	char nif_dir[PATH_MAX]; /* ours, when we made one */
	/* The private directory the node's agent made for the NIF sent over
	 * distribution, when the node is on this host (else ""). */
	char node_nif_dir[PATH_MAX];
	/* --cluster: each node's clock offsets (metadata env lines) the
	 * agent sends at the end, handed to on_env (0, or -1: not
	 * recorded, reported). */
	int (*on_env)(void *ctx, const char *node, const char *lines,
		      size_t len);
	void *env_ctx;
	int write_failed;
	/* The agent said the session did not end as asked: the agent died,
	 * or the session was killed, its summary lost (exit 2). */
	int session_failed;
};

/* The cookie: --cookie, else --cookie-file, else ~/.erlang.cookie.
 * 0, or -1 with the reason printed. */
int bp_attach_read_cookie(const char *opt, const char *file, char *out,
			  size_t n);
/* Connects a->fd to the node full (completed with this host when it has
 * no host part).  0, or -1 with the reason printed. */
int bp_attach_connect(struct bp_attach *a, const char *cookie, char *full,
		      size_t fulln);
/* Same host: the connection's two ends have the same address. */
void bp_attach_peer_info(struct bp_attach *a);

/* Asks the agent to stop the session. */
void bp_attach_send_stop(struct bp_attach *a);
/* A message from the node: {beamprobe_attach_done, Text} ends the run
 * (*done set); {beamprobe_attach_env, NODE, Lines} (--cluster) goes to
 * on_env; ticks and others: 0; the connection lost: -1. */
int bp_attach_node_message(struct bp_attach *a, int *done);

/* ^C, SIGTERM and SIGHUP while attached: each is counted in
 * bp_attach_signals and written as a byte into a non-blocking pipe whose
 * read end bp_attach_catch_signals() returns (poll it, then
 * bp_attach_signal_read()); SIGPIPE is ignored.  -1 on failure, with
 * errno.  Once per process. */
extern volatile sig_atomic_t bp_attach_signals;
int bp_attach_catch_signals(void);
/* Empties the pipe after poll said it has bytes. */
void bp_attach_signal_read(int fd);

#endif /* BP_ATTACH_NODE_H */
