/* bp_prefault.h -- the collector maps a session's ring memory ahead of its
 * producers, so that a traced process does not take page faults on
 * beamprobe's memory.
 *
 * A session's rings live in one MAP_NORESERVE mapping (bp_nif_config.c):
 * a page costs nothing until it is touched, and the first touch is a page
 * fault, taken by whichever thread touches it first -- without this, the
 * traced process writing its event, once per page (about 64 call
 * records).  A fault costs about a microsecond on bare metal and 8-18 us
 * in a guest with shadow paging (docs/performance/stops-22-23.md, "Ring
 * memory mapped ahead"): about 200 ns per event over the first pass
 * through a ring.
 *
 * The collector thread takes that cost instead, in steps of at most
 * BP_PREFAULT_STEP bytes between two drains: it populates the pages
 * (madvise MADV_POPULATE_WRITE, Linux >= 5.14: writable, zero-filled,
 * contents untouched) and reads one byte of each (which also makes a
 * hypervisor's shadow mapping of the page, which populating alone does
 * not).  Neither changes a byte a producer wrote, so it runs concurrently
 * with the producers.  Once a thread's slot exists (its first event in
 * the session creates it and wakes the collector), the collector keeps its
 * header and the next BP_PREFAULT_AHEAD bytes past what the producer has
 * reached mapped: a flight recorder's whole ring after its first pass, a
 * drained session's hot part and a window into its cold part (the whole
 * cold part if the collector ever lags that far), an idle session's header
 * and one window.  The window is what a producer writes in ~2.5 ms at its
 * fastest (~200 MB/s of call records), longer than the collector's poll
 * (2 ms); the producer races it over its first pages only.  So a
 * session's resident memory stays bounded by its rings as configured
 * (`buffer' bytes per thread that writes: info/1's `memory') and is what
 * its producers used plus a window; info/1's `prefaulted' says how many
 * bytes are mapped so far.  Where madvise refuses (a kernel before 5.14),
 * nothing is mapped ahead: the producers fault as before.
 *
 * Collector context only (one thread per session).
 */
#ifndef BP_PREFAULT_H
#define BP_PREFAULT_H

#include <stdint.h>

struct bp_session;

/* Bytes mapped past the producer's furthest byte (see above). */
#define BP_PREFAULT_AHEAD ((uint64_t)1 << 20)

/* Bytes mapped per step at most: ~64 pages, ~0.5 ms in a slow guest. */
#define BP_PREFAULT_STEP ((uint64_t)256 << 10)

/* Maps up to BP_PREFAULT_STEP more bytes of s's rings.  Returns 1 if a
 * slot's mapping is more than half a window behind its producer (map on
 * without sleeping), else 0.  Collector context. */
int bp_prefault_step(struct bp_session *s);

#endif /* BP_PREFAULT_H */
