/* bp_atoms.h -- every atom the NIF uses, declared once (X-macro).
 * A(c_name, "erlang text"); created in load() (bp_nif.c). */
#ifndef BP_ATOMS_H
#define BP_ATOMS_H

#include <erl_nif.h>

#define BP_ATOMS(A)                                                       \
	A(ok, "ok") A(error, "error") A(true_, "true") A(false_, "false")  \
	A(undefined, "undefined") A(trace, "trace") A(discard, "discard")  \
	A(remove, "remove") A(trace_status, "trace_status")                \
	A(extra, "extra") A(match_spec_result, "match_spec_result")        \
	A(call, "call") A(return_from, "return_from")                      \
	A(exception_from, "exception_from") A(return_to, "return_to")      \
	A(send, "send")                                                    \
	A(send_to_non_existing_process, "send_to_non_existing_process")    \
	A(receive, "receive") A(spawn, "spawn") A(spawned, "spawned")      \
	A(seq_trace, "seq_trace")                                          \
	A(exit, "exit") A(link, "link") A(unlink, "unlink")                \
	A(getting_linked, "getting_linked")                                \
	A(getting_unlinked, "getting_unlinked") A(register_, "register")   \
	A(unregister, "unregister") A(in, "in") A(out, "out")              \
	A(in_exiting, "in_exiting") A(out_exiting, "out_exiting")          \
	A(out_exited, "out_exited") A(gc_minor_start, "gc_minor_start")    \
	A(gc_minor_end, "gc_minor_end") A(gc_major_start, "gc_major_start") \
	A(gc_major_end, "gc_major_end") A(open, "open") A(closed, "closed") \
	A(heap_size, "heap_size") A(heap_block_size, "heap_block_size")    \
	A(old_heap_size, "old_heap_size")                                  \
	A(old_heap_block_size, "old_heap_block_size")                      \
	A(mbuf_size, "mbuf_size") A(stack_size, "stack_size")              \
	A(depth, "depth") A(list, "list") A(binary, "binary")              \
	A(bytes, "bytes") A(dir, "dir") A(buffer, "buffer")                \
	A(max_slots, "max_slots") A(overflow, "overflow") A(args, "args")  \
	A(capture, "capture") A(return_, "return")                         \
	A(exceptions, "exceptions") A(event_limit, "event_limit")          \
	A(byte_limit, "byte_limit") A(notify, "notify") A(env, "env")      \
	A(packet_size, "packet_size") A(drop_newest, "drop_newest")        \
	A(drop_oldest, "drop_oldest") A(stop, "stop") A(none, "none")      \
	A(arity, "arity") A(full, "full") A(events, "events")              \
	A(dropped, "dropped") A(total, "total") A(state, "state")          \
	A(running, "running") A(paused, "paused") A(stopping, "stopping")  \
	A(stopped, "stopped") A(stop_reason, "stop_reason")                \
	A(io_error, "io_error") A(aux_events, "aux_events")                \
	A(threads, "threads") A(memory, "memory") A(badarg, "badarg")      \
	A(prefaulted, "prefaulted")                                        \
	A(not_flight_recorder, "not_flight_recorder")                      \
	A(enomem, "enomem") A(uuid, "uuid") A(ms_result, "ms_result")   \
	A(handlers, "handlers") A(pid, "pid") A(kinds, "kinds")            \
	A(pids, "pids") A(batch, "batch") A(credits, "credits")            \
	A(file, "file") A(file_kinds, "file_kinds") A(rate, "rate")        \
	A(rate_stop, "rate_stop") A(delivered, "delivered")            \
	A(in_flight, "in_flight") A(beamprobe_hub, "beamprobe_hub")       \
	A(slow_output, "slow_output") A(handler_down, "handler_down")      \
	A(beamprobe_hub_meta, "beamprobe_hub_meta")                        \
	A(beamprobe_own, "beamprobe_own")                                  \
	A(beamprobe_discard, "beamprobe_discard")       \
	A(bp_route, "bp_route") A(bp_route_ret, "bp_route_ret")          \
	A(beamprobe_follow_labelled, "beamprobe_follow_labelled")        \

struct bp_atoms {
#define BP__ATOM_FIELD(name, text) ERL_NIF_TERM name;
	BP_ATOMS(BP__ATOM_FIELD)
#undef BP__ATOM_FIELD
};

/* Filled in by load(); read-only afterwards (any thread). */
extern struct bp_atoms bp_atom;

#endif /* BP_ATOMS_H */
