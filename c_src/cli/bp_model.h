/* bp_model.h -- what the commands know about a trace while replaying it:
 * the processes (merged from "process" events) and each process's call
 * stack, rebuilt from call / return_from / exception_from / return_to.
 *
 * Call-stack rules (the same for print's indentation, stats and every
 * export, so their numbers agree):
 *   call F            pushes a frame for F, unless F's calls have no
 *                     return events (bp_model_read_env);
 *   return_from F,    pop frames down to the topmost frame of F: that one
 *   exception_from F  ends as returned/raised, the ones above it (callees
 *                     whose return was not traced, tail calls) end unwound;
 *                     no frame of F: counted as unmatched, nothing popped;
 *   return_to F       pops the frames above the topmost frame of F; if F is
 *                     not on the stack and the process's previous call
 *                     event was not a return, the top frame ends (it is
 *                     the traced function that just returned to F);
 *   exit              the process is gone: its open frames end unwound;
 *   events lost       on stream S, at a "drops" event with a non-zero
 *                     count, or after a packet whose events_discarded
 *                     grew (the loss lies somewhere before that packet's
 *                     end, so at the first event of the next packet of S
 *                     unless a drops event in it came first): the call
 *                     stacks of the processes whose latest event came
 *                     from S are no longer known; their frames end as
 *                     BP_END_LOST at the process's latest event (counted
 *                     in bp_model.resets), and the stack starts empty;
 *   frames still open when the trace ends (bp_model_finish) end as
 *                     BP_END_OPEN at the trace's last event: every
 *                     command counts their time so far (stats also counts
 *                     them as "open"), every export draws them to the end.
 *
 * Names follow the events in time: "register" sets a process's name,
 * "unregister" and "exit" clear it (kept as old_name), a "process" event
 * with a name sets it; a name taken by another process is cleared from
 * its previous holder.  Names are kept in one form, Erlang atom syntax
 * (bp_name_norm), whichever form the trace wrote them in.
 *
 * Scheduling: a run starts at sched_in and ends at sched_out or at the
 * process's exit event; a run still open at the end of the trace ends at
 * the process's latest event if it has exited (an exit event or an
 * exiting flag), else at the trace's last event (bp_model_run_end).
 * Inclusive time = end - start; exclusive (own) time = inclusive minus the
 * inclusive time of completed callees.  Stacks are capped at
 * BP_MODEL_MAX_DEPTH frames; deeper calls are counted, not stored, and the
 * returns that follow are matched against them first.
 */
#ifndef BP_MODEL_H
#define BP_MODEL_H

#include <stdint.h>

#include "bp_calls.h"
#include "bp_hash.h"
#include "bp_reader.h"

#define BP_MODEL_MAX_DEPTH 4096

struct bp_frame {
	uint32_t func;      /* id in bp_model.funcs */
	uint32_t user;      /* for the command (e.g. a stack-tree node) */
	uint64_t start;     /* ts of the call */
	uint64_t child;     /* inclusive ns of completed callees */
};

struct bp_proc {
	uint64_t key;
	uint32_t index;         /* dense, in order of first appearance */
	char *text;             /* "<0.123.0>" (owned), NULL until known */
	char *name;             /* registered name now (owned) or NULL */
	char *old_name;         /* last name it gave up (owned) or NULL */
	char *initial_call;     /* owned or NULL */
	char keytext[24];       /* fallback label built from the key */
	uint32_t gen;           /* bumped when text, name or initial_call
				 * change (for caches of labels) */
	struct bp_frame *stack; /* owned */
	uint32_t depth, cap;
	uint32_t lost_depth;    /* calls beyond BP_MODEL_MAX_DEPTH */
	uint8_t just_returned;  /* last call-trace event was a return */
	uint8_t in_gc, scheduled;
	uint8_t exited;         /* exit event or exiting flag seen */
	uint32_t stream;        /* stream of its latest event */
	uint64_t last_ts;       /* ts of its latest event (not "process") */
	uint64_t events, sent, received;
	uint64_t gc_count, gc_ns, gc_start;
	uint64_t sched_ns, sched_start;
	uint32_t user;          /* for the command (e.g. a track id) */
};

enum bp_end_how {
	BP_END_RETURN,
	BP_END_EXCEPTION,
	BP_END_UNWOUND,
	BP_END_LOST,    /* events were lost: the stack was reset */
	BP_END_OPEN     /* still open when the trace ended */
};

/* Passed to the frame-end callback for each popped frame. */
struct bp_frame_end {
	struct bp_proc *proc;
	const struct bp_frame *frame;
	const struct bp_frame *parent;  /* the frame below, or NULL */
	uint32_t level;                 /* index of frame in the stack */
	uint64_t end, incl, own;
	enum bp_end_how how;
};

typedef void (*bp_frame_end_fn)(void *ctx, const struct bp_frame_end *fe);

#define BP_MODEL_CACHE_BITS 8 /* direct-mapped process cache: 2^8 entries */
#define BP_MODEL_CACHE (1u << BP_MODEL_CACHE_BITS)
#define BP_MODEL_FUNC_CACHE_BITS 8 /* the same for function names */
#define BP_MODEL_FUNC_CACHE (1u << BP_MODEL_FUNC_CACHE_BITS)

struct bp_model_stream {
	uint64_t discarded;         /* events_discarded seen */
	uint64_t pending;           /* packet whose loss is not applied, 0 */
};

struct bp_model {
	struct bp_map by_key;       /* pid key -> index in procs */
	struct bp_proc **procs;     /* owned */
	struct bp_proc *cache[BP_MODEL_CACHE]; /* recently used, by key bits */
	uint32_t nprocs, capprocs;
	struct bp_strtab funcs;     /* function names ("m:f/2") */
	uint32_t func_cache[BP_MODEL_FUNC_CACHE]; /* ids of recent names,
				     * by a quick hash of their bytes (ends
				     * and length); BP_MAP_NONE: empty */
	bp_frame_end_fn on_end;     /* may be NULL */
	void *ctx;
	uint32_t last_func;         /* function of the last call-trace
				     * event applied, BP_MAP_NONE if none */
	uint64_t unmatched;         /* returns without a matching call */
	uint64_t overflow;          /* calls not stored (stack full) */
	uint64_t resets;            /* stacks reset after lost events */
	struct bp_model_stream *streams; /* by stream index: losses seen */
	uint32_t nstreams;
	uint64_t first_ts, last_ts; /* first/last event that is not a
				     * "process" or "drops" annotation */
	uint64_t nevents;           /* such events applied */
	struct bp_strtab names;     /* registered names (Erlang syntax) */
	uint64_t *holder;           /* by names id: pid key or 0 */
	struct bp_strtab aliases;   /* alias refs ("#Ref<0.1.2.3>") */
	uint64_t *alias_owner;      /* by aliases id: pid key */
	struct bp_calls untimed;    /* functions whose calls never have a
				     * return event (bp_model_read_env) */
	struct bp_calls timed;      /* the other patterns (timed_calls) */
	uint8_t *timing;            /* by funcs id: 0 not known yet, 1
				     * timed, 2 untimed */
	uint32_t ntiming;
	int oom;                    /* memory ran out: results incomplete */
};

/* Initialises m; on_end (may be NULL) is called for every frame popped. */
void bp_model_init(struct bp_model *m, bp_frame_end_fn on_end, void *ctx);
void bp_model_free(struct bp_model *m);

/*
 * Reads what the model takes from the trace's env: the functions its
 * session traced without a return event for every call, in a trace that
 * has some (`untimed_calls', docs/format.md).  A call of one of them is counted by
 * the commands but pushes no frame: it never ends, so it has no time, and
 * it does not hold its callers' frames open.  Returns 0, -1 without
 * memory (m->oom set).
 */
int bp_model_read_env(struct bp_model *m, const struct bp_meta *meta);

/* Whether calls of function id func are untimed (see above). */
int bp_model_untimed(struct bp_model *m, uint32_t func);

/* The process for key, created on first use.  NULL only without memory
 * (m->oom set). */
struct bp_proc *bp_model_proc(struct bp_model *m, uint64_t key);

/* Existing process for key or NULL. */
struct bp_proc *bp_model_find(const struct bp_model *m, uint64_t key);

/* Id of function name s (len bytes); BP_MAP_NONE without memory. */
uint32_t bp_model_func(struct bp_model *m, const char *s, size_t len);

static inline const char *bp_model_func_name(const struct bp_model *m,
					     uint32_t id)
{
	return m->funcs.strs[id].s;
}

/*
 * Applies e to the model: merges "process" events, and runs the
 * call-stack rules above for call-trace events (frame-end callbacks fire
 * from inside).  Returns the event's process (NULL for pid 0 or without
 * memory).  Does not touch the per-process counters (commands do).
 */
struct bp_proc *bp_model_apply(struct bp_model *m, const struct bp_event *e);

/* The same for a caller that has looked up e's process already: p is
 * bp_model_proc(m, e->pid), or NULL to look it up here when needed. */
struct bp_proc *bp_model_apply_to(struct bp_model *m, struct bp_proc *p,
				  const struct bp_event *e);

/*
 * Updates p's counters for e: events, messages sent/received, GC count and
 * time (start -> end pairing) and time scheduled in (sched_in ->
 * sched_out pairing).  Call after reading p->gc_start / p->sched_start if
 * the interval itself is needed.
 */
void bp_model_count(struct bp_proc *p, const struct bp_event *e);

/* Pops every frame of p as `how` at ts. */
void bp_model_unwind(struct bp_model *m, struct bp_proc *p, uint64_t ts,
		     enum bp_end_how how);

/* End of the trace: every frame still open ends as BP_END_OPEN at
 * m->last_ts (the one rule for open calls, see above). */
void bp_model_finish(struct bp_model *m);

/* Gives p the name s (n bytes, either form), taking it from its previous
 * holder; s NULL: p gives up its name (kept as old_name). */
void bp_model_set_name(struct bp_model *m, struct bp_proc *p,
		       const char *s, size_t n);

/* Whether e ends p's current run (call before bp_model_count). */
static inline int bp_model_ends_run(const struct bp_proc *p,
				    const struct bp_event *e)
{
	return p->scheduled &&
	       (e->id == BP_EV_SCHED_OUT || e->id == BP_EV_EXIT);
}

/* Where p's run still open at the end of the trace ends. */
static inline uint64_t bp_model_run_end(const struct bp_model *m,
					const struct bp_proc *p)
{
	uint64_t end = p->exited ? p->last_ts : m->last_ts;
	return end > p->sched_start ? end : p->sched_start;
}

/*
 * The receiver of a send event e as a pid key: `to` when it is a local
 * pid; else the process holding the registered name to_text now; else
 * the owner of the alias to_text if the trace showed it (the alias in a
 * '$gen_call' sent by its owner, or a reply received by it); else 0.
 */
uint64_t bp_model_receiver(struct bp_model *m, const struct bp_event *e);

/* Owner of alias text s (n bytes) learned so far, or 0. */
uint64_t bp_model_alias_owner(const struct bp_model *m, const char *s,
			      size_t n);

/*
 * Writes the Erlang-syntax form of atom text s (n bytes) to dst (cap
 * bytes, NUL-terminated, cut if too small) and returns its length: s
 * unchanged if it already is a quoted atom ('...') or a valid unquoted
 * one, else s quoted with ' and \ escaped and control characters
 * written as \n, \t, ... or \NNN.  So the raw form ("my name") and the
 * Erlang form ("'my name'") of a name give the same text, and the result
 * has no control character.
 */
size_t bp_name_norm(char *dst, size_t cap, const char *s, size_t n);

/* Text of p: "<0.123.0>", or a label built from the key if unknown. */
static inline const char *bp_proc_text(const struct bp_proc *p)
{
	return p->text ? p->text : p->keytext;
}

/* Registered name if any, else the text. */
static inline const char *bp_proc_label(const struct bp_proc *p)
{
	return p->name ? p->name : bp_proc_text(p);
}

/* Name for summaries: the name held now, else the last one held (a
 * process that unregistered or exited), else NULL. */
static inline const char *bp_proc_last_name(const struct bp_proc *p)
{
	return p->name ? p->name : p->old_name;
}

#endif /* BP_MODEL_H */
