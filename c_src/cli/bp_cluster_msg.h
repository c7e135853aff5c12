/* bp_cluster_msg.h -- the message events of a cluster directory
 * (bp_cluster.h's "Message identity"), between the files that make
 * struct bp_cluster: bp_cluster_msg.c reads each node's sends and
 * receives with the keys that identify them, bp_cluster_match.c pairs
 * them into c->pairs and c->flows, bp_cluster.c opens the directory and
 * calls both.
 */
#ifndef BP_CLUSTER_MSG_H
#define BP_CLUSTER_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "bp_cluster.h"

/* A growable scratch buffer (the normalised text of one message),
 * reused from node to node; its owner frees p. */
struct bp_cluster_buf {
	char *p;
	size_t n, cap;
};

/* Reads the message events of node idx into c->sends and c->recvs
 * (counting its events in c->nodes[idx].events and its damage in
 * c->problems).  0, or -1 (the trace unreadable, out of memory). */
int bp_cluster_read_node(struct bp_cluster *c, unsigned idx,
			 struct bp_cluster_buf *b);

/* The key of a message: kind 0 to a pid (ident "N.S"), 1 to a name, 2
 * to a node only (an alias, or a name no process has there); dnode the
 * receiving node; mh the hash of the normalised text.  Never 0. */
uint64_t bp_cluster_msg_key(int kind, int dnode, const char *ident,
			    size_t n, uint64_t mh);

/* Matches the sends read with the receives (c->pairs, c->flows, the
 * unmatched counts, c->pair_of and c->flow_of).  0, or -1 out of
 * memory. */
int bp_cluster_match(struct bp_cluster *c);

/* (bp_cluster.c) The index of the node named so as a destination: its
 * trace's, else n + k for c->missing[k]; -1 if neither. */
int bp_cluster_dest_index(const struct bp_cluster *c, const char *name,
			  size_t n);

#endif /* BP_CLUSTER_MSG_H */
