/* bp_losses.h -- a session's losses as its summary, its files' stop
 * record (env session_lost) and its TCP stream's stop record (the END
 * frame's payload) say them: each event counted once, whatever number
 * of sinks lost it (docs/format.md, "session_lost"; docs/tutorial.md).
 *
 * An event is lost at the source (rings, rate, the events limit, the
 * stop, a follow request's budget: every sink lacks it) or by one sink:
 * the file sink's own (past the bytes limit, too big for a file packet,
 * not writable) or the TCP stream's (`stream': a full send queue, a
 * frame unconfirmed at the end).  The total counts an event the files
 * and the stream both lost once, under the files' cause: `stream' is
 * what the stream lost of the events the files hold (with no file sink,
 * all it lost).  Each sink's own figure (what its trace says) is in
 * `file' and `tcp'.  Control or collector thread, any time.
 */
#ifndef BP_LOSSES_H
#define BP_LOSSES_H

#include <stddef.h>
#include <stdint.h>

#include "bp_format.h"

struct bp_session;

struct bp_losses {
	uint64_t d[BP_DROP_COUNT]; /* by cause (bp_session_drops) */
	uint64_t sl[BP_SL_COUNT];  /* the causes after them, when has[] */
	int has[BP_SL_COUNT];
	uint64_t total;   /* events the session lost, each once */
	uint64_t file;    /* what the files lack (has_file) */
	uint64_t tcp;     /* what the TCP stream lacks (has_tcp) */
	uint64_t tcp_all; /* the stream's own losses, the files' or not */
	int has_file, has_tcp;
};

void bp_losses_get(struct bp_session *s, struct bp_losses *l);

/* Env session_lost of the files (bp_format.h): "ring_full=N,...";
 * 0, or ENOSPC if cap is too small. */
int bp_losses_file_text(const struct bp_losses *l, char *v, size_t cap);

/* The TCP stream's stop record, written by the receiver as the received
 * trace's env session_lost: the losses at the source by cause, the
 * stream's own as io_error (as its drops events say them), a follow
 * session's request budget; no `stream' (the received trace is the
 * stream).  0, or ENOSPC. */
int bp_losses_stream_text(struct bp_session *s, char *v, size_t cap);

/* Room enough for either text. */
#define BP_LOSSES_TEXT_MAX ((BP_DROP_COUNT + BP_SL_COUNT) * 38 + 1)

#endif /* BP_LOSSES_H */
