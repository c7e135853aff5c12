/* bp_retstack.h -- where the returns of routed calls go: a bounded
 * per-process stack of the hub members each call's return_from and
 * exception_from events belong to.
 *
 * A call on a function with a combined match spec (beamprobe_combine.erl)
 * whose matching clause put the VM's exception_trace on (route tag
 * bp_route_ret) pushes a frame: the function and, per member, whether its
 * own matching clause asked for return_trace or exception_trace.  The
 * call's return_from or exception_from event (exactly one: the combined
 * match spec always uses exception_trace) pops it when the top frame is of
 * the same function, and goes to the members of the frame.  Without a
 * frame (none pushed, the table full, the stack deeper than
 * BP_RET_DEPTH: each counted in bp_retstack_lost) the return is routed by
 * function, as for functions without a combined match spec.  A stack
 * that would grow deeper is emptied (the returns of its calls, which come
 * after those of any deeper call, then find no frame): frames are never
 * paired with the wrong return.
 *
 * Threads: a process's frames are touched only by the callbacks running
 * in its context (one scheduler at a time; the VM's migration of a process
 * orders those accesses); a table slot is claimed for a pid with a CAS on
 * its pid word and released when its stack is empty.  A slot whose
 * process died inside a routed call is taken back when its probe window
 * is full (enif_is_process_alive).
 */
#ifndef BP_RETSTACK_H
#define BP_RETSTACK_H

#include <stdatomic.h>
#include <stdint.h>
#include <erl_nif.h>

#include "bp_hub.h"

#define BP_RET_SLOTS 1024 /* processes inside routed calls at once */
#define BP_RET_DEPTH 64   /* nested routed calls per process */
#define BP_RET_PROBE 8

struct bp_ret_frame {
	uint64_t m, f;
	uint32_t arity;
	uint64_t ret[BP_HUB_WORDS]; /* members that get its return_from */
	uint64_t exc[BP_HUB_WORDS]; /* members that get its exception_from */
};

struct bp_ret_stack {
	_Atomic uint64_t pid; /* 0: free */
	uint32_t depth;       /* frames pushed */
	struct bp_ret_frame fr[BP_RET_DEPTH];
};

extern _Atomic uint64_t bp_retstack_lost;

/* A process's meta-traced calls have a stack of their own: its key is the
 * pid word with this bit set (never a term word of a local pid). */
#define BP_RET_META (1ull << 63)

/* The frame slot for a new call of process `pid', or NULL (lost,
 * counted).  Producer. */
struct bp_ret_frame *bp_retstack_push(ErlNifEnv *env, uint64_t pid);

/* Pops the top frame of `pid' if it is a frame of {m, f, arity}: copies
 * it to *out and returns 1; else 0.  Producer. */
int bp_retstack_pop(uint64_t pid, uint64_t m, uint64_t f, uint32_t arity,
		    struct bp_ret_frame *out);

#endif /* BP_RETSTACK_H */
