/* bp_export.h -- the exporters behind `beamprobe export`, one file per
 * family of formats:
 *   export_trace_event.c  perfetto   (Chrome trace-event JSON)
 *   export_speedscope.c   speedscope (evented profiles)
 *   export_profile.c      folded     (flame-graph stacks)
 *                         callgrind  (kcachegrind / callgrind_annotate)
 * All of them replay the trace through bp_model, so call boundaries,
 * inclusive and exclusive times agree with `beamprobe stats`.
 */
#ifndef BP_EXPORT_H
#define BP_EXPORT_H

#include "bp_out.h"
#include "bp_reader.h"

/*
 * Each reads every event of r (opened, nothing consumed yet) and writes
 * the whole document to o.  Damage is reported through r->diag as it is
 * met; the document is still complete and well-formed.  Returns 0, or -1
 * when memory ran out (the document is then still well-formed but
 * incomplete; reported on stderr).
 */
int bp_export_perfetto(struct bp_reader *r, struct bp_out *o);
int bp_export_speedscope(struct bp_reader *r, struct bp_out *o);
int bp_export_folded(struct bp_reader *r, struct bp_out *o);
int bp_export_callgrind(struct bp_reader *r, struct bp_out *o);

struct bp_proc;
/* Writes a process's label -- "<0.80.0>" or "<0.80.0> name" -- as a JSON
 * string (export_trace_event.c; used by the JSON exporters). */
void bp_export_json_proc_label(struct bp_out *o, const struct bp_proc *p);

#endif /* BP_EXPORT_H */
