/* bp_retstack.c -- the per-process stacks of return routes (see
 * bp_retstack.h).  Producer context: no lock, no allocation. */
#include <string.h>

#include "bp_retstack.h"

static struct bp_ret_stack table[BP_RET_SLOTS];
_Atomic uint64_t bp_retstack_lost;

static inline uint64_t slot_of(uint64_t pid)
{
	return (pid * 0x9E3779B97F4A7C15ull) >> 32;
}

static struct bp_ret_stack *find(uint64_t pid)
{
	uint64_t h = slot_of(pid);

	for (int i = 0; i < BP_RET_PROBE; i++) {
		struct bp_ret_stack *st = &table[(h + i) % BP_RET_SLOTS];
		if (atomic_load_explicit(&st->pid, memory_order_acquire) == pid)
			return st;
	}
	return NULL;
}

/* A free slot of the window claimed for pid, or one whose process is dead
 * taken back; NULL if none. */
static struct bp_ret_stack *claim(ErlNifEnv *env, uint64_t pid)
{
	uint64_t h = slot_of(pid);

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < BP_RET_PROBE; i++) {
			struct bp_ret_stack *st =
				&table[(h + i) % BP_RET_SLOTS];
			uint64_t v = atomic_load_explicit(
				&st->pid, memory_order_acquire);
			if (pass == 1 && v) {
				ErlNifPid p;
				/* ErlNifPid holds the pid's term word (the
				 * top bit marks a meta stack). */
				p.pid = (ERL_NIF_TERM)(v & ~BP_RET_META);
				if (enif_is_process_alive(env, &p))
					continue;
			} else if (v) {
				continue;
			}
			if (atomic_compare_exchange_strong(&st->pid, &v, pid)) {
				st->depth = 0;
				return st;
			}
		}
	return NULL;
}

struct bp_ret_frame *bp_retstack_push(ErlNifEnv *env, uint64_t pid)
{
	struct bp_ret_stack *st = find(pid);

	if (!st && !(st = claim(env, pid))) {
		atomic_fetch_add_explicit(&bp_retstack_lost, 1,
					  memory_order_relaxed);
		return NULL;
	}
	if (st->depth >= BP_RET_DEPTH) {
		/* Too deep: forget them all (their returns come after this
		 * call's, and find no frame: routed by function). */
		atomic_fetch_add_explicit(&bp_retstack_lost, st->depth + 1,
					  memory_order_relaxed);
		st->depth = 0;
		atomic_store_explicit(&st->pid, 0, memory_order_release);
		return NULL;
	}
	return &st->fr[st->depth++];
}

int bp_retstack_pop(uint64_t pid, uint64_t m, uint64_t f, uint32_t arity,
		    struct bp_ret_frame *out)
{
	struct bp_ret_stack *st = find(pid);
	struct bp_ret_frame *fr;

	if (!st || !st->depth)
		return 0;
	fr = &st->fr[st->depth - 1];
	if (fr->m != m || fr->f != f || fr->arity != arity)
		return 0; /* not a routed call's return (or a lost frame) */
	*out = *fr;
	if (--st->depth == 0)
		atomic_store_explicit(&st->pid, 0, memory_order_release);
	return 1;
}
