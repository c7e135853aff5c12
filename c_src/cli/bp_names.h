/* bp_names.h -- registered names: one written form, and the names
 * processes had when the trace began (see bp_names.c). */
#ifndef BP_NAMES_H
#define BP_NAMES_H

#include "bp_model.h"

/*
 * Gives the processes of m the names they had at the start of the trace
 * in dir: the name a process holds at the end of the trace (the
 * "process" events at the end of its stream), unless the trace shows it
 * registering (then it had none before) or unregistering one (then it
 * had that one).  Two quiet passes: the end of each stream, then the
 * register/unregister events only.  Names then follow the events in
 * time as the main pass applies them (bp_model.h).
 */
void bp_names_prepare(struct bp_model *m, const char *dir);

#endif /* BP_NAMES_H */
