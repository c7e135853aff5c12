/* bp_attach_bring.h -- bringing beamprobe to a node that lacks it
 * (bp_attach_bring.c): what attach and profile load there, in order,
 * and what they remove should the node's agent not. */
#ifndef BP_ATTACH_BRING_H
#define BP_ATTACH_BRING_H

#include <stddef.h>

#include "bp_attach_node.h"

/* Steps 1-3 of an attach in one call (used by `profile'): connects to
 * a->node (completed with this host in full), refuses a node where
 * another attach is active, spawns the agent and brings beamprobe when
 * the node lacks it (*brought then set).  0, or -1 with the reason
 * printed (what was brought is undone by the agent once a->fd closes). */
int bp_attach_bring(struct bp_attach *a, const char *cookie, char *full,
		    size_t fulln, int *brought);

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

#endif /* BP_ATTACH_BRING_H */
