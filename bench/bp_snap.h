/* bp_snap.h -- a bench-only prototype of deferred rendering (stop 37,
 * docs/performance/stop-37.md): bp_snap_args writes a compact binary
 * snapshot of a call's argument list in the traced thread, under the
 * capture limits of bp_term.h; bp_snap_render turns the snapshot into the
 * text bp_term_render_args_cached would have written, byte for byte, on
 * whichever thread (a collector, a reader).  Not part of the library:
 * built into bench/render_bench.c by `bash bench/run.sh render'.
 *
 * The snapshot holds what the text needs and no more: small integers and
 * floats as raw words, binaries' shown bytes raw, the characters of a
 * list that may be a string as raw bytes, atoms as their cached text (or
 * latin-1 name), containers as counts and end marks.  Printability,
 * quoting, escaping, digits and float formatting are left to the
 * renderer.  Kinds rare in arguments (pids, ports, refs, funs, integers
 * beyond the small ones, atoms that are not latin-1) are rendered at the
 * source as today and kept as text.  Work and output are bounded: the
 * walk stops (a stop mark) once a lower bound of the text's length passes
 * the `bytes' limit, i.e. where the text is cut anyway, or when the
 * output buffer is full; with cap >= BP_SNAP_CAP(bytes) the latter never
 * comes first, and the rendered text is the renderer's.
 */
#ifndef BP_SNAP_H
#define BP_SNAP_H

#include <stddef.h>
#include <erl_nif.h>

#include "bp_term.h"

/* Output room that makes the snapshot exact for a `bytes' limit with the
 * default list and binary limits: every item is at most 10 bytes per
 * byte of text it stands for at least (a list's characters past `list'
 * are kept only while it may be a string: up to max(list, binary)). */
#define BP_SNAP_CAP(bytes) (10 * ((size_t)(bytes) + 2) + 1200)

/* Writes the snapshot of argument list args (or of a non-list term) at
 * out, at most cap bytes (cap >= 64); returns its length.  Traced-thread
 * context: no allocation (but ERTS's own for maps of more than 32 keys,
 * as the renderer), no lock.  cache: the renderer's (may be NULL). */
size_t bp_snap_args(ErlNifEnv *env, ERL_NIF_TERM args,
		    const struct bp_capture *c, unsigned char *out, size_t cap,
		    struct bp_term_cache *cache);

/* Renders snapshot s[0..n) as bp_term_render_args_cached would have
 * rendered the term with the same limits, into buf (cap >= 8, at most
 * min(cap, bytes + 1) bytes with the NUL).  Returns the text length.
 * Any thread; no allocation.  A snapshot that is malformed or was cut
 * by its output room renders what it holds. */
size_t bp_snap_render(const unsigned char *s, size_t n,
		      const struct bp_capture *c, char *buf, size_t cap);

#endif /* BP_SNAP_H */
