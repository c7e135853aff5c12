/* bp_attach_rpc.h -- calls into the node from the hidden C node of
 * `beamprobe attach' (bp_attach_rpc.c): rpc, the texts of their replies,
 * and the requests to the attach agent. */
#ifndef BP_ATTACH_RPC_H
#define BP_ATTACH_RPC_H

#include <ei.h>
#include <stddef.h>

#include "bp_attach_node.h"

/* Calls mod:fun(args) on the node; the reply is in res (index 0).  -1
 * if the connection failed (said). */
int bp_attach_rpc(struct bp_attach *a, const char *mod, const char *fun,
		  ei_x_buff *args, ei_x_buff *res);
/* Decodes a string, binary, atom or [] at *idx into out (a longer string
 * or binary is cut, ending in "...").  0, or -1. */
int bp_attach_get_text(const char *buf, int *idx, char *out, size_t n);
/* The text of M:F(Atom) on the node ("?" when it has none); 0 when the
 * call was made. */
int bp_attach_rpc_atom_text(struct bp_attach *a, const char *m,
			    const char *f, const char *atom, char *out,
			    size_t n);
/* Text of code:which(Mod) (a path, or non_existing, preloaded, ...). */
int bp_attach_which(struct bp_attach *a, const char *mod, char *out,
		    size_t n);
/* erlang:module_loaded(Mod) on the node (0 when the call fails). */
int bp_attach_module_loaded(struct bp_attach *a, const char *mod);

/* beamprobe_attach:request(Agent, Req) where Req is built by fill().
 * 0 ok (text in out), -1 error (printed, prefixed by what if not NULL). */
int bp_attach_request(struct bp_attach *a,
		      void (*fill)(ei_x_buff *, const void *),
		      const void *arg, const char *what, char *out, size_t n);

#endif /* BP_ATTACH_RPC_H */
