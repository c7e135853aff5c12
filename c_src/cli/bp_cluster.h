/* bp_cluster.h -- a directory of node traces read as one: the traces a
 * cluster session (src/beamprobe_cluster.erl) brings into DIR/<node>/,
 * their clock offsets, and the messages that crossed nodes matched into
 * flows.
 *
 * Clock model: each node's trace clock plus an offset D is the control
 * node's clock.  The trace records D's bounds [lo, hi] from round-trip
 * probes (env clock_offset_lo_ns / clock_offset_hi_ns; the control node:
 * 0).  Every matched message a -> b adds a causality constraint, and it
 * is not recv_ts + D_b >= send_ts + D_a: for a send to another node the
 * VM (OTP 25, bif.c remote_send) hands the message to the distribution
 * first and calls the tracer after, so the send's timestamp can come
 * after its arrival (a sender thread descheduled in between: 181 us in
 * one run on 2 cores, the receive stamped 55 us before the send).  What
 * is known to precede the actual send is the record before it in its
 * stream: the same thread wrote it earlier, before the VM sent (the
 * "process" record written in the send's own callback does not count).
 * So the constraint is recv_ts + D_b >= before_ts + D_a, none for a
 * send that is its stream's first record.  bp_cluster_solve() narrows
 * the bounds with them (difference constraints, propagated to a
 * fixpoint) and picks one offset per node inside them such that no
 * matched message arrives before the last record its sender's thread
 * wrote before sending it, whenever the constraints are consistent.
 * Flows whose receive still comes before the send's own timestamp are
 * counted as late send stamps (the VM's order, not a clock error); a
 * flow received before that earlier record is reversed (a clock error).
 *
 * Pairing does not trust the recorded offsets: a send may pair with a
 * receive that comes before it on the recorded clocks by up to the
 * bounds' widths plus BP_CLUSTER_MATCH_SLACK_NS (a send later than that
 * is not the receive's: its own was not traced), so that wrong bounds
 * contradict the messages instead of leaving them unmatched.
 *
 * Message identity: a send and a receive match when the receiver (the
 * destination pid, or its registered name for {Name, Node} sends) and the
 * message text agree (for a send to an alias, a reference: the
 * receiving node and the text; for a send to another node's name -- a
 * spawn there, OTP 25's spawn_request and erpc's call, sent before the
 * receiver has a pid -- the same; for a send to a name that no process
 * has in the receiving node's trace -- a follow session's trace names
 * none -- also the receiving node and the text).  A receiving process's
 * name is the one it has at the receive, else the last one its trace
 * gives it (a follow session writes names at its end).  This is done
 * after the node numbers inside pids, refs and ports
 * (`<N.x.y>', `#Ref<N...>', `#Port<N.x>', printed per node) are replaced
 * by node names (env dist_ids).  Equal messages to one receiver are
 * matched in send order (Erlang keeps order per sender/receiver pair).
 * Only the first BP_CLUSTER_MSG_PREFIX bytes of the normalised text
 * count (texts cut by the capture limits are cut at different places on
 * each node).  Limits: messages that differ only after those bytes, or
 * that quote pid-like text in a string, may be matched with each other
 * or not at all; messages sent before
 * the receiver's node started tracing, or received after it stopped, stay
 * unmatched and are counted.  So are sends to a node the session ran
 * on (env cluster_nodes) whose trace is not in the directory: such a
 * node is named (on stderr, counted as a problem, and in the summary).
 */
#ifndef BP_CLUSTER_H
#define BP_CLUSTER_H

#include <stdint.h>

#include "bp_hash.h"
#include "bp_reader.h"

#define BP_CLUSTER_MAX_NODES 64
/* A send is not paired with a receive that comes before it, on the
 * recorded clocks, by more than the two nodes' recorded bound widths
 * plus this: a bound wrong by less shows up as reversed flows
 * (consistent: false), not as messages left unmatched. */
#define BP_CLUSTER_MATCH_SLACK_NS 1000000000ll
/* Recorded clock bounds are refused (the node counts as without them,
 * a message names it and the value) when they are not integers, when lo
 * > hi, when beyond +-BP_CLUSTER_MAX_OFF_NS, or, with the control node's
 * trace at hand, when farther than BP_CLUSTER_WALL_TOL_NS from the
 * offset the two traces' wall-clock origins give (wall = origin + ts on
 * each node: D ~ origin(node) - origin(control), up to the hosts' wall
 * clock disagreement). */
#define BP_CLUSTER_MAX_OFF_NS (INT64_MAX / 8)      /* ~36 years */
#define BP_CLUSTER_WALL_TOL_NS 3600000000000ll     /* 1 hour */
/* Bytes of a normalised message text that identify it. */
#define BP_CLUSTER_MSG_PREFIX 128

struct bp_cnode {
	char *name;        /* env "node", else the directory name; owned */
	char *dir;         /* owned */
	char *lost;        /* env cluster_lost ("Seconds,Reason": the node
			      was lost mid-session, its trace ends there),
			      NULL if none; owned */
	int has_clock;     /* recorded bounds present and plausible */
	int clock_refused; /* recorded bounds present but refused (said) */
	int64_t rec_off, rec_lo, rec_hi; /* recorded (probes) */
	int64_t lo, hi;    /* refined */
	int64_t off;       /* chosen, lo <= off <= hi when consistent */
	int64_t wall_ns;   /* metadata offset: wall = wall_ns + ts */
	unsigned nids;
	long id_num[BP_CLUSTER_MAX_NODES];  /* how this node numbers ... */
	int id_node[BP_CLUSTER_MAX_NODES];  /* ... node index (-1 unknown) */
	uint64_t events;   /* events as info counts them: process and drops
			      records aside */
	uint64_t constraints;
	struct bp_loss_report loss; /* its losses, as stats tells them
				       (bp_cluster_read_node) */
};

/* A message event: a send (to a pid or a name) or a receive. */
struct bp_cmsg {
	uint64_t key;      /* receiver + normalised message */
	uint64_t key2;     /* receives: by registered name, 0 if none */
	uint64_t key3;     /* receives: by node only (sends to an alias, and
			      to a name no process has in the receiver's
			      trace) */
	uint64_t mh;       /* hash of the normalised message text */
	uint64_t name;     /* sends to a name: hash of (node, name), else 0 */
	uint64_t ts;       /* the node's clock */
	uint64_t before;   /* sends: the ts of the record before it in its
			      stream (not counting process records), 0 if
			      none: the send came after it */
	uint64_t pid;
	uint64_t off;      /* event's byte offset in its stream file */
	uint32_t stream;
	uint16_t node;
	uint16_t dnode;    /* sends: destination node index */
	uint32_t flow;     /* 1 + index in flows, 0 if unmatched */
};

struct bp_cflow {
	uint32_t send, recv; /* indices in sends[], recvs[] */
	uint16_t late;       /* flows: received before the send's own stamp,
				not reversed (counted in late_stamps) */
	uint16_t rev;        /* flows: reversed (received before the record
				before the send: a clock error) */
};

struct bp_cluster {
	char *dir;
	struct bp_cflow *pairs;  /* every matched pair, same node or not */
	uint32_t npairs, cappairs;
	struct bp_map pair_of;   /* (node, stream, off) -> pair + 1 */
	unsigned n;
	struct bp_cnode nodes[BP_CLUSTER_MAX_NODES];
	int control;         /* index of the control node's trace, -1 */
	char *control_name;  /* env cluster_control, NULL if none; owned */
	int consistent;      /* the constraints had a solution */
	struct bp_cmsg *sends, *recvs;
	uint32_t nsends, nrecvs, capsends, caprecvs;
	struct bp_cflow *flows;  /* cross-node matched pairs */
	uint32_t nflows, capflows;
	uint64_t local_matched;  /* same-node pairs (not flows) */
	uint64_t unmatched_sends; /* cross-node sends without a receive */
	uint32_t reversed;       /* flows received before their send's
				    `before', after solving */
	uint32_t late_stamps;    /* flows received before their send's own
				    timestamp, not reversed */
	struct bp_map flow_of;   /* (node, stream, off) -> flow + 1 */
	struct bp_map named;     /* hash of (node, name) of every name a
				    process has in a node's trace -> 1 */
	unsigned problems;       /* damage reported while reading */
	/* Nodes the session ran on (env cluster_nodes of any trace) whose
	 * trace is not in the directory: destination index n + k. */
	char *missing[BP_CLUSTER_MAX_NODES]; /* owned */
	unsigned nmissing;
	uint64_t missing_sends[BP_CLUSTER_MAX_NODES]; /* counted unmatched */
	uint64_t outside_sends;  /* sends to nodes in no cluster_nodes: not
				    counted in unmatched_sends */
};

/*
 * Opens every DIR/<sub>/ holding a trace (a metadata file), reads their
 * message events, matches them and solves the offsets.  Returns 0, or -1
 * with a message printed (not a cluster directory, out of memory).
 */
int bp_cluster_open(struct bp_cluster *c, const char *dir);

/* bp_cluster_open() that also takes a single trace directory (one node). */
int bp_cluster_open_any(struct bp_cluster *c, const char *dir);

/* The matched pair (1-based, index + 1 into c->pairs) an event is an end
 * of, 0 if none. */
uint32_t bp_cluster_pair_of(const struct bp_cluster *c, unsigned node,
			    const struct bp_event *e);

/* Key of an event for c->flow_of. */
static inline uint64_t bp_cluster_ev_key(unsigned node, uint32_t stream,
					 uint64_t off)
{
	return ((uint64_t)node << 56) ^ ((uint64_t)stream << 44) ^ off;
}

/* bp_cluster_flow_of() of a cross-node send that matched no receive. */
#define BP_CLUSTER_NO_FLOW (UINT32_MAX - 1)

/* The flow (1-based) an event belongs to, 0 if none, BP_CLUSTER_NO_FLOW
 * for a cross-node send without a receive. */
uint32_t bp_cluster_flow_of(const struct bp_cluster *c, unsigned node,
			    const struct bp_event *e);

/* 1 if dir has no trace of its own but subdirectories with one. */
int bp_cluster_is_cluster_dir(const char *dir);

void bp_cluster_close(struct bp_cluster *c);

/* The lost events of each node's trace and of all, cause by cause, as
 * `stats' tells them (bp_cluster_lost.c): text lines, or the JSON
 * member ",\n \"lost\": {...}". */
struct bp_out;
void bp_cluster_lost_text(const struct bp_cluster *c, struct bp_out *o);
void bp_cluster_lost_json(const struct bp_cluster *c, struct bp_out *o);

/* An unbounded offset bound (+-). */
#define BP_CLUSTER_INF (INT64_MAX / 4)

/* Narrows the nodes' bounds with the flows, picks the offsets, counts
 * reversed flows and late send stamps (cmd_cluster.c).  0, or -1 out of
 * memory. */
int bp_cluster_solve(struct bp_cluster *c);
/* A value inside [lo, hi] (the middle; the finite end of a half-open
 * one; 0 for an unbounded one). */
int64_t bp_cluster_pick(int64_t lo, int64_t hi);

/* Time arithmetic on values a trace gives (timestamps, offsets):
 * saturating, never undefined. */
static inline int64_t bp_cluster_add(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static inline int64_t bp_cluster_sub(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_sub_overflow(a, b, &r))
		return b < 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* A timestamp as a signed value (a damaged one beyond INT64_MAX is cut
 * there). */
static inline int64_t bp_cluster_ts(uint64_t ts)
{
	return ts > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)ts;
}

/* The merged timeline (cmd_cluster.c): one reader per node, events in
 * the control node's time. */
struct bp_cluster_cursor {
	struct bp_reader r;
	const struct bp_event *e;
	int open;
};

struct bp_out;
int bp_cluster_open_all(const struct bp_cluster *c,
			struct bp_cluster_cursor *cur);
/* The next event of the merged timeline (its node in *node), or NULL;
 * bp_cluster_advance(cur, *node) moves past it. */
const struct bp_event *bp_cluster_next(const struct bp_cluster *c,
				       struct bp_cluster_cursor *cur,
				       unsigned *node);
void bp_cluster_advance(struct bp_cluster_cursor *cur, unsigned node);
void bp_cluster_close_all(const struct bp_cluster *c,
			  struct bp_cluster_cursor *cur);
/* The control node's clock of a timestamp of node n, and the wall-clock
 * offset of that clock. */
int64_t bp_cluster_when(const struct bp_cluster *c, unsigned n, uint64_t ts);
int64_t bp_cluster_wall_base(const struct bp_cluster *c);
/* "sent M to T", "received M", "call m:f(...)", ... */
void bp_cluster_event_text(struct bp_out *o, const struct bp_event *e);
void bp_cluster_out_pid(struct bp_out *o, uint64_t pid);

#endif /* BP_CLUSTER_H */
