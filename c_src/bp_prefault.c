/* bp_prefault.c -- ring memory mapped ahead by the collector (the
 * contract is in bp_prefault.h). */
#include "bp_prefault.h"
#include "bp_session.h"

#include <errno.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define PAGE ((uintptr_t)4096)

/* Reads one byte of the page at p, for its mapping only: the value is not
 * used (a producer may be writing there; on x86-64 the load is in asm, so
 * it is not a C access racing with the producer's stores). */
static inline void touch(const uint8_t *p)
{
#if defined(__x86_64__)
	__asm__ volatile("movb (%0), %%al" : : "r"(p) : "al", "memory");
#else
	(void)*(const volatile uint8_t *)p;
#endif
}

/* Bytes of sl's ring data its producer has reached: the hot part up to
 * its head (all of it once wrapped), and if the producer ever spilled,
 * the cold part likewise; a one-part ring (flight recorder) likewise. */
static uint64_t reached(const struct bp_slot *sl)
{
	const struct bp_ring_part *hot = &sl->ring.part[0],
				  *cold = &sl->ring.part[1];
	uint64_t h0 = atomic_load_explicit(&hot->head, memory_order_relaxed),
		 h1 = atomic_load_explicit(&cold->head, memory_order_relaxed);

	if (h1)
		return hot->cap + (h1 < cold->cap ? h1 : cold->cap);
	return h0 < hot->cap ? h0 : hot->cap;
}

/* Bytes of slot i to map, from its start: once it exists, its header and
 * BP_PREFAULT_AHEAD bytes past what its producer has reached. */
static uint64_t wanted(struct bp_session *s, uint32_t i)
{
	struct bp_slot *sl =
		atomic_load_explicit(&s->slots[i], memory_order_acquire);
	uint64_t hdr = (sizeof *sl + 63) & ~(uint64_t)63, w;

	if (!sl)
		return 0;
	w = hdr + reached(sl) + BP_PREFAULT_AHEAD;
	return w < s->slot_stride ? w : s->slot_stride;
}

/* Maps [from, to) of slot i (offsets from the slot's start).  0, or -1
 * when madvise refuses (then nothing more is mapped for s). */
static int map_range(struct bp_session *s, uint32_t i, uint64_t from,
		     uint64_t to)
{
	uint8_t *base = s->region + (size_t)i * s->slot_stride;
	uintptr_t a = (uintptr_t)(base + from) & ~(PAGE - 1);
	uintptr_t b = ((uintptr_t)(base + to) + PAGE - 1) & ~(PAGE - 1);
	uintptr_t end = (uintptr_t)(s->map + s->region_size);

	if (b > end)
		b = end;
	if (a >= b)
		return 0;
	if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0 &&
	    (errno == EINVAL || errno == EPERM))
		return -1; /* not this kernel: as before, producers fault */
	/* ENOMEM, EFAULT, EINTR...: the touches below still map what can be
	 * mapped; a page left out faults in its producer, as before. */
	for (uintptr_t p = a; p < b; p += PAGE)
		touch((const uint8_t *)p);
	return 0;
}

int bp_prefault_step(struct bp_session *s)
{
	uint64_t budget = BP_PREFAULT_STEP;
	int more = 0;

	if (s->prefault_off || !s->prefault_done || !s->map)
		return 0;
	for (uint32_t i = 0; i < s->max_slots; i++) {
		uint64_t want = wanted(s, i), done = s->prefault_done[i];
		if (done >= want)
			continue;
		if (!budget) {
			more = 1;
			break;
		}
		uint64_t n = want - done < budget ? want - done : budget;
		if (map_range(s, i, done, done + n) != 0) {
			s->prefault_off = 1;
			return 0;
		}
		s->prefault_done[i] = done + n;
		budget -= n;
		atomic_fetch_add_explicit(&s->prefaulted, n,
					  memory_order_relaxed);
		/* Behind: map on at once.  Else the next look at the usual
		 * poll (the producer needs longer to cross the window). */
		if (want - (done + n) > BP_PREFAULT_AHEAD / 2)
			more = 1;
	}
	return more;
}
