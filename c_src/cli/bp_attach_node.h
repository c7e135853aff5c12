/* bp_attach_node.h -- `beamprobe attach' as a hidden C node
 * (bp_attach_node.c): connecting, loading beamprobe into the node, the
 * agent's requests and the session's messages.  Used by cmd_attach.c. */
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
};

/* Removes dir and the files in it (one level: what we created). */
void bp_attach_remove_dir(const char *dir);
/* $TMPDIR, or /tmp. */
const char *bp_attach_tmp_base(void);

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
/* Steps 1-3 of an attach in one call (used by `profile'): connects to
 * a->node (completed with this host in full), refuses a node where
 * another attach is active, spawns the agent and brings beamprobe when
 * the node lacks it (*brought then set).  0, or -1 with the reason
 * printed (what was brought is undone by the agent once a->fd closes). */
int bp_attach_bring(struct bp_attach *a, const char *cookie, char *full,
		    size_t fulln, int *brought);

/* Text of code:which(Mod) (a path, or non_existing, preloaded, ...). */
int bp_attach_which(struct bp_attach *a, const char *mod, char *out,
		    size_t n);
/* erlang:module_loaded(Mod) on the node (0 when the call fails). */
int bp_attach_module_loaded(struct bp_attach *a, const char *mod);
/* The directory beamprobe is built or installed in ($BEAMPROBE_HOME, else
 * two levels above the running bin/beamprobe); 0, or -1. */
int bp_attach_home(char *home, size_t n);
/* The node must run the OTP release and architecture the NIF was built
 * for; checked before anything is loaded. */
int bp_attach_check_versions(struct bp_attach *a);
/* Loads beamprobe_attach's module into the node. */
int bp_attach_load_self(struct bp_attach *a);
/* Spawns the agent that undoes whatever attach brings. */
int bp_attach_spawn_agent(struct bp_attach *a, int loaded_self);
/* Places the NIF: our private directory if the node reads it (same host,
 * same user), else sent over distribution.  Path without ".so" in out. */
int bp_attach_place_nif(struct bp_attach *a, char *out, size_t n);
/* The node died (its agent could not clean up): removes the NIF
 * directory its agent made on this host, if it is still one of this
 * user's private (0700) beamprobe-attach-* directories under $TMPDIR
 * holding nothing but the NIF. */
void bp_attach_remove_node_nif_dir(struct bp_attach *a);
/* Loads the application and every module of ebin/ but beamprobe_attach. */
int bp_attach_load_all(struct bp_attach *a, const char *nif);

/* beamprobe_attach:request(Agent, Req) where Req is built by fill().
 * 0 ok (text in out), -1 error (printed, prefixed by what if not NULL). */
int bp_attach_request(struct bp_attach *a,
		      void (*fill)(ei_x_buff *, const void *),
		      const void *arg, const char *what, char *out, size_t n);
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
