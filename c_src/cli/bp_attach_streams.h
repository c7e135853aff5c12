/* bp_attach_streams.h -- `beamprobe attach --cluster': one TCP stream
 * per node of the cluster, each written live into DIR/<node> by its own
 * receiver (bp_recv.c, as `beamprobe receive'), and each node's clock
 * offsets added to its metadata at the end (bp_attach_streams.c). */
#ifndef BP_ATTACH_STREAMS_H
#define BP_ATTACH_STREAMS_H

#include "bp_recv.h"

#include <limits.h>
#include <poll.h>
#include <stddef.h>

#define BP_ATTACH_MAX_NODES 64

struct bp_attach_stream {
	char node[256];
	struct bp_recv r;
	struct bp_recv_conn conn;
	int lfd, port;
	int npoll;      /* its pollfds in the last _fds (bp_recv_pollfds) */
	char *env;      /* the clock offsets' env lines, from the agent */
	size_t env_len;
};

struct bp_attach_streams {
	char dir[PATH_MAX];
	struct bp_attach_stream *s; /* n of them */
	int n;
};

/* One receiver (DIR/<node>, created) and one listener (ip, port 0) per
 * node of nodes_text (names one a line).  0, or -1 with the reason
 * printed (what was created is removed again). */
int bp_attach_streams_open(struct bp_attach_streams *ss, const char *dir,
			   const char *nodes_text, const char *ip);
/* The pollfds of every node's receiver (bp_recv_pollfds: up to
 * BP_RECV_NFDS each; at most max in all); their number. */
int bp_attach_streams_fds(struct bp_attach_streams *ss, struct pollfd *p,
			  int max);
/* Accepts and reads what poll() reported in p (as filled above). */
void bp_attach_streams_serve(struct bp_attach_streams *ss,
			     const struct pollfd *p, int np);
/* Every node's stream ended (END frame) or its connection is gone. */
int bp_attach_streams_done(const struct bp_attach_streams *ss);
/* Some node's metadata came (its stream began). */
int bp_attach_streams_begun(const struct bp_attach_streams *ss);
/* bp_attach's on_env: keeps node's env lines for _record. */
int bp_attach_streams_env(void *ctx, const char *node, const char *lines,
			  size_t len);
/* Adds the kept env lines to each node's metadata; the number of nodes
 * whose offsets could not be recorded (each reported). */
int bp_attach_streams_record(struct bp_attach_streams *ss);
/* Prints, per node, what its stream brought and whether it ended. */
void bp_attach_streams_report(const struct bp_attach_streams *ss);
/* Closes everything (the files stay). */
void bp_attach_streams_close(struct bp_attach_streams *ss);

#endif /* BP_ATTACH_STREAMS_H */
