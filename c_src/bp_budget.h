/* bp_budget.h -- what the node lends beamprobe, node-wide: the ring memory
 * all sessions may make resident, and the file descriptors kept free for
 * the node itself.  Control path only (start, the collector opening a
 * stream file): never the tracer's per-event path.
 *
 * Memory: a session's rings can become resident up to its whole mapping
 * (max_slots x (slot header + buffer): every thread that may produce
 * fills its ring as it wraps), with each thread's stream file buffer
 * (about 590 KiB) and TCP packet buffer, and a TCP sink's send queue
 * (tcp_queue, up to 2 GiB) up to its size.  start/1 takes that much of a node-wide
 * budget (application env max_memory; by default half of the memory the
 * node may use: RAM, or its cgroup's limit when lower) and gives it back
 * at stop; a start that would pass it is refused.
 *
 * Descriptors: a session holds its directory, one stream file per
 * producing thread and a socket for a TCP sink.  The node keeps a reserve
 * of descriptors beamprobe never takes (an eighth of RLIMIT_NOFILE, at
 * least 16): a start that would eat into it is refused, and a stream file
 * that would is not opened (its events are io_error losses, emfile).
 */
#ifndef BP_BUDGET_H
#define BP_BUDGET_H

#include <stdint.h>

struct bp_session;

/* The default budget of ring memory: half of RAM or of the cgroup's
 * memory limit, whichever is lower (computed once). */
uint64_t bp_budget_memory_default(void);

/* Takes need bytes of a node-wide budget of max for s; 1 if taken, else 0
 * with *in_use set to what live sessions hold.  Atomic: concurrent starts
 * never exceed max. */
int bp_budget_memory_take(struct bp_session *s, uint64_t need, uint64_t max,
			  uint64_t *in_use);

/* Gives back what s took (once). */
void bp_budget_memory_give(struct bp_session *s);

/* Descriptors the node keeps for itself, for a limit of limit. */
uint64_t bp_budget_fd_reserve(uint64_t limit);

/* Takes need descriptors about to be opened: 1 if the node keeps its
 * reserve after them and those other takers are opening (taken, not yet
 * given back), else 0; *free_fds and *limit say how many are free (less
 * those being opened) and the limit.  Counts /proc/self/fd (no
 * descriptor free to count: short).  Serialised: two takers never both
 * count the same free descriptors (a start and a collector's stream file
 * left the node 15 of its 16).  Each take is given back once the
 * descriptors are open, or will not be. */
int bp_budget_fds_take(uint64_t need, uint64_t *free_fds, uint64_t *limit);

/* Gives back n descriptors taken with bp_budget_fds_take. */
void bp_budget_fds_give(uint64_t n);

#endif
