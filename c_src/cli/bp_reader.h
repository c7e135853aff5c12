/* bp_reader.h -- the one decoder of beamprobe traces that every CLI
 * command reads through.
 *
 * Three layers, one file each:
 *   bp_meta.c    parses the TSDL metadata: env block, clock offset, trace
 *                UUID and the event classes with their field types (so
 *                classes added by a later minor version are skipped, not
 *                fatal);
 *   bp_stream.c  decodes one stream (a file, or a memory buffer for the
 *                fuzzer) packet by packet with bounds checks on every read;
 *   bp_reader.c  opens a trace directory and merges its streams in time
 *                order with a binary heap; --follow support.
 *
 * Memory is independent of trace length: each stream holds one read
 * buffer (or one mapped window of its file) of at most one packet plus a
 * read-ahead.  Damage (truncation, bad
 * magic, impossible sizes, unterminated strings, unknown event ids) is
 * reported once with file and byte offset through struct bp_diag and
 * reading goes on where it safely can: at the next packet when the packet
 * boundaries are intact, else the rest of that stream is skipped.
 */
#ifndef BP_READER_H
#define BP_READER_H

#include <stddef.h>
#include <stdint.h>

#include "../bp_format.h"

#define BP_EV_UNKNOWN 0xffff  /* class in the metadata but not in this build */
#define BP_EV_MAX_STR 4       /* string fields delivered per event */
#define BP_EV_MAX_NUM 9       /* integer fields delivered per event */
_Static_assert(BP_EV_MAX_NUM >= BP_DROP_COUNT,
	       "the drops event's counts must all be delivered");
#define BP_META_MAX_CLASSES 256
#define BP_META_MAX_FIELDS 32
#define BP_META_MAX_ENV 64

/*
 * One decoded event.  Fields are delivered in wire order, strings and
 * integers separately: e.g. for "send" (to, to_text, message) num[0] is
 * `to`, str[0] `to_text`, str[1] `message`.  Read them by name, through
 * the schema's constants: e->num[BP_FLD(SEND, to)],
 * e->str[BP_FLD(SEND, message)] (bp_format.h).  String pointers point into
 * the stream's buffer: valid until the next call that advances the reader.
 */
struct bp_event {
	uint16_t id;          /* enum bp_event_id, or BP_EV_UNKNOWN */
	uint16_t cls;         /* class id in the metadata */
	uint32_t stream;      /* index of the stream in the reader */
	uint64_t ts;          /* ns, monotonic clock */
	uint64_t pid;         /* opaque process key */
	uint64_t off;         /* byte offset of the event in its file */
	uint64_t discarded;   /* events_discarded of its packet: the
			       * stream's running total of lost events up to
			       * the end of that packet */
	uint64_t packet;      /* number of that packet in its stream, from 1 */
	const char *str[BP_EV_MAX_STR]; /* NUL-terminated */
	uint32_t len[BP_EV_MAX_STR];    /* strlen of str[i] */
	uint8_t ctl;          /* bit i: str[i] holds a control character
			       * (< 0x20 or 0x7f), so needs escaping */
	uint64_t num[BP_EV_MAX_NUM];
};

/* Every field of every built-in class fits str[]/num[]. */
#define BP__FITS(ev, k, f)                                                 \
	_Static_assert(BP__KS_##k ? BP__S_##ev##_##f < BP_EV_MAX_STR         \
				  : BP__N_##ev##_##f < BP_EV_MAX_NUM,        \
		       "field " #f " of " #ev " is not decoded");
#define BP__FITS_EV(name, id, str, fields, cat) fields(BP__FITS, name)
BP_EVENTS(BP__FITS_EV)
#undef BP__FITS_EV
#undef BP__FITS

/* The function of call, return_from, exception_from and return_to, at
 * one index in all four. */
#define BP_FLD_MFA BP_FLD(CALL, mfa)
_Static_assert(BP_FLD(RETURN_FROM, mfa) == BP_FLD_MFA &&
		       BP_FLD(EXCEPTION_FROM, mfa) == BP_FLD_MFA &&
		       BP_FLD(RETURN_TO, mfa) == BP_FLD_MFA,
	       "mfa at one index");

/* Where damage reports go.  Each report is one line on stderr:
 * "beamprobe: FILE: offset N: WHAT" (quiet: counted only). */
struct bp_diag {
	unsigned problems;    /* reports so far */
	int quiet;
};

/* Reports damage in file at byte offset off (off < 0: no offset). */
__attribute__((format(printf, 4, 5))) void
bp_diag_report(struct bp_diag *d, const char *file, int64_t off,
	       const char *fmt, ...);

/* Wire types of fields, as declared in the metadata. */
enum bp_wire_type { BP_W_U8, BP_W_U16, BP_W_U32, BP_W_U64, BP_W_STR };

/* An event class as declared in the metadata. */
struct bp_class {
	char name[48];
	uint16_t id;          /* enum bp_event_id it maps to, or BP_EV_UNKNOWN */
	uint8_t defined;      /* declared (or built in) */
	uint8_t bad;          /* has a field type this reader cannot size */
	uint8_t nfields;
	uint8_t missing;      /* trailing built-in fields an older minor
			       * lacks: delivered as 0 / "undefined" */
	uint8_t types[BP_META_MAX_FIELDS]; /* enum bp_wire_type */
};

struct bp_meta {
	int parsed;           /* 1: from the metadata file; 0: built-in
			       * defaults (missing or unreadable metadata) */
	int has_uuid;
	uint8_t uuid[16];
	int64_t offset_ns;    /* wall = offset_ns + timestamp */
	int major, minor;     /* beamprobe_format_major/minor, -1 if absent */
	unsigned nenv;
	char *env_key[BP_META_MAX_ENV];   /* owned */
	char *env_val[BP_META_MAX_ENV];   /* owned, unquoted */
	struct bp_class classes[BP_META_MAX_CLASSES];
};

/* Fills m with the built-in event classes and no env (offset 0). */
void bp_meta_builtin(struct bp_meta *m);

/*
 * Parses TSDL text (len bytes, need not be NUL-terminated) into m.
 * Returns 0, or -1 with a description in err (errlen bytes) and the byte
 * offset of the problem in *erroff; m is then left with the built-in
 * classes.  Never reads outside text[0..len).
 */
int bp_meta_parse(struct bp_meta *m, const char *text, size_t len,
		  char *err, size_t errlen, size_t *erroff);

/* Frees the env strings. */
void bp_meta_free(struct bp_meta *m);

/* Value of env key, or NULL. */
const char *bp_meta_env(const struct bp_meta *m, const char *key);

/* Whether the metadata says no call can have a return event (env
 * returns = false): no call is known to end, so its time is unknown
 * (print indents nothing, stats shows no time, the time profiles
 * refuse the trace).  Older traces do not say: 0. */
int bp_meta_no_returns(const struct bp_meta *m);

enum bp_stream_state {
	BP_STREAM_OK,     /* an event is in ev, or may follow */
	BP_STREAM_WAIT,   /* follow mode: at the end of the data so far */
	BP_STREAM_END,    /* read to the end */
	BP_STREAM_DEAD    /* stopped by damage; the rest is skipped */
};

/* Readable bytes after the data in a stream's buffer or window (string
 * scans read 16 bytes at a time). */
#define BP_STREAM_PAD 16

struct bp_stream {
	char *path;             /* owned; names the stream in reports */
	int fd;                 /* -1 for memory streams */
	const uint8_t *mem;     /* memory stream data; weak */
	uint64_t size;          /* bytes available in the source */
	const uint8_t *data;    /* the bytes decoded: buf, or map's window */
	uint8_t *buf;           /* owned read buffer (memory streams, follow
				 * mode, or when mmap fails) */
	size_t cap, len;        /* buffer size, bytes in data */
	uint8_t *map;           /* owned mapping: a window of the file plus a
				 * zero guard page, or NULL */
	size_t map_len;         /* bytes of the whole mapping */
	int no_map;             /* mmap failed once: read() from now on */
	uint64_t buf_off;       /* file offset of data[0] */
	size_t pos;             /* next event in data */
	size_t content_end;     /* end of the current packet's events */
	size_t packet_end;      /* end of the current packet (incl. padding) */
	int in_packet;
	int follow;             /* wait at a partial packet instead of failing */
	uint64_t only;          /* 0: deliver every event; else a bit per
				 * enum bp_event_id: deliver only those, check
				 * and skip the others (the totals below then
				 * count delivered events only) */
	enum bp_stream_state state;
	uint64_t next_seq;      /* expected packet_seq_num */
	uint64_t last_ts;
	const struct bp_meta *meta;   /* weak */
	struct bp_diag *diag;         /* weak */
	struct bp_event ev;     /* the current event */
	/* Totals, for info/stats. */
	uint64_t packets, events;
	uint64_t discarded;     /* last events_discarded seen */
	uint64_t drops[BP_DROP_COUNT]; /* from "drops" events */
	int has_drops;
	uint64_t first_ts, end_ts;     /* first/last event timestamps */
	int has_ts;
	uint64_t damaged_bytes; /* bytes skipped because of damage */
	uint64_t aux;           /* of events: "process" and "drops" */
	/* What the session recorded of this file when it stopped (env
	 * stream_files; has_recorded 0 if it did not). */
	int has_recorded;
	uint64_t rec_bytes, rec_events, rec_aux;
};

/*
 * Opens path as a stream decoded with meta; reports go to diag.  Returns
 * 0 or an errno value (nothing to close then).
 */
int bp_stream_open_file(struct bp_stream *s, const char *path,
			const struct bp_meta *meta, struct bp_diag *diag);

/* A stream over len bytes at data (not copied: keep it alive).  Returns 0
 * or ENOMEM. */
int bp_stream_open_mem(struct bp_stream *s, const char *name,
		       const uint8_t *data, size_t len,
		       const struct bp_meta *meta, struct bp_diag *diag);

/*
 * Decodes the next event into s->ev.  Returns 1 if there is one, 0 when
 * the stream is at its end, dead, or (follow mode) waiting for data:
 * see s->state.  Damage is reported through s->diag.
 */
int bp_stream_next(struct bp_stream *s);

/* Follow mode: re-reads the file size; a waiting stream with new data
 * becomes OK again.  Returns 1 if it has new data. */
int bp_stream_refresh(struct bp_stream *s);

void bp_stream_close(struct bp_stream *s);

/* Positions s at the packet starting at file offset off (any sequence
 * number is accepted for it). */
void bp_stream_seek(struct bp_stream *s, uint64_t off);

/*
 * Walks the packet headers of s from the start, reading nothing else,
 * up to the end or the first damaged header.  Stores the offset of
 * packet i at offs[i % max], so the last max packets are kept, and their
 * number in *count.  Returns the offset where the walk stopped.
 */
uint64_t bp_stream_last_packets(struct bp_stream *s, uint64_t *offs,
				uint32_t max, uint64_t *count);

struct bp_reader {
	char *dir;                  /* owned */
	struct bp_meta meta;
	uint64_t metadata_size;     /* bytes, 0 if missing */
	int meta_missing;           /* no metadata file */
	struct bp_stream **streams; /* owned; sorted by file name */
	uint32_t nstreams, capstreams;
	uint32_t *heap;             /* stream indices keyed by (ev.ts, index) */
	uint32_t nheap;
	uint64_t limit_ts;          /* key of the top's runner-up (the smaller */
	uint32_t limit_idx;         /* child of the root): the top stream stays
				     * on top while it sorts before it */
	uint64_t only;              /* bp_stream.only of every stream */
	int unprimed;               /* BP_READER_UNPRIMED */
	int follow;
	int current;                /* stream whose event was returned, -1 */
	struct bp_diag diag;
	uint64_t start_ts;          /* earliest first event, UINT64_MAX if none */
	int has_recorded;           /* the metadata lists the stream files
				     * (env stream_files, written at stop) */
	uint32_t files_missing;     /* listed there, not in the directory */
	uint64_t events_missing;    /* the events those files held */
	int has_session_lost;       /* the metadata has env session_lost
				     * (written at stop, bp_format.h) */
	uint64_t session_lost[BP_DROP_COUNT]; /* its counts per cause */
	uint64_t session_lost_more[BP_SL_COUNT]; /* of the causes no drops
						  * event has (request budget,
						  * TCP stream sink) */
	uint64_t session_lost_other; /* of causes this reader does not know */
};

#define BP_READER_FOLLOW 1u  /* wait at the end of data instead of ending */
#define BP_READER_QUIET 2u   /* count damage, print nothing */
#define BP_READER_PROCESS_ONLY 4u /* deliver only "process" events (the
				   * others are checked and skipped, which is
				   * much cheaper than decoding them) */
#define BP_READER_NAMES_ONLY 16u /* deliver only register/unregister */
#define BP_READER_UNPRIMED 8u /* decode nothing at open (callers that
			       * position the streams themselves) */

/*
 * Opens the trace directory dir: metadata and every data stream file
 * (regular files named thread-*; a FIFO or other special file in their
 * place is reported, and no open blocks on it).  A directory with
 * neither metadata nor stream files is not a trace: -1.  Damage in
 * the metadata is reported and the built-in classes are used instead.
 * Returns 0 (possibly with damage reported: see r->diag.problems), or -1
 * when dir cannot be read at all (reported; r is then closed).
 */
int bp_reader_open(struct bp_reader *r, const char *dir, unsigned flags);

/*
 * Opens an in-memory trace: metadata text (NULL: built-in classes) and n
 * stream buffers (not copied).  For the fuzz target and unit tests.
 * Returns 0 or -1 (out of memory).
 */
int bp_reader_open_mem(struct bp_reader *r, const char *metadata,
		       size_t mlen, const uint8_t *const *bufs,
		       const size_t *lens, uint32_t n, unsigned flags);

/* The next event in time order (ties: lower stream index first), or NULL
 * at the end (follow mode: nothing available now; see bp_reader_refresh).
 * The event stays valid until the next call. */
const struct bp_event *bp_reader_next(struct bp_reader *r);

/* Follow mode: picks up new stream files and data appended to known
 * ones.  Returns the number of streams that have new data. */
int bp_reader_refresh(struct bp_reader *r);

/* Wall-clock time (ns since the epoch) of a timestamp. */
static inline int64_t bp_reader_wall(const struct bp_reader *r, uint64_t ts)
{
	/* Unsigned: a damaged timestamp wraps instead of overflowing. */
	return (int64_t)((uint64_t)r->meta.offset_ns + ts);
}

/*
 * Events lost so far, summed over the streams: by cause from the "drops"
 * events (by_cause[BP_DROP_COUNT]), and the running events_discarded
 * totals of the last packets read (*discarded).  Returns 1 if at least
 * one stream had a drops event.
 */
int bp_reader_losses(const struct bp_reader *r, uint64_t *by_cause,
		     uint64_t *discarded);

/* A trace's losses as the readers report them (bp_reader_loss_report). */
struct bp_loss_report {
	uint64_t by_cause[BP_DROP_COUNT]; /* per cause: the larger of the
					   * streams' drops events and the
					   * session's record (session_lost) */
	uint64_t more[BP_SL_COUNT]; /* recorded, of the causes no drops
				     * event has (a follow session's request
				     * budget); [BP_SL_STREAM] is 0 */
	uint64_t stream_only; /* recorded: lost by the session's TCP stream
			       * sink alone (events these files hold: not
			       * in total) */
	uint64_t other;       /* recorded, of causes this reader lacks */
	uint64_t discarded;   /* events_discarded of the streams' last
			       * packets */
	uint64_t unattributed; /* discarded beyond the causes' sum */
	uint64_t missing;     /* bp_reader_missing */
	uint64_t no_stream;   /* recorded losses no stream tells of (no
			       * drops event, no events_discarded) */
	uint64_t total;       /* causes + more + other + unattributed +
			       * missing */
	int any_drops;        /* some stream had a drops event */
	int recorded;         /* the trace has session_lost */
};

/*
 * The losses of the trace read so far: those the streams tell of
 * (bp_reader_losses), those missing from the files (bp_reader_missing),
 * and, when the session recorded its totals at stop (env session_lost),
 * those it lost with no stream file to tell them in (a bytes limit no
 * file fit in, a thread that only lost events, stream files that could
 * not be created), counted per cause and in no_stream.  Without the
 * record (streamed traces, older releases) as the streams tell.
 */
void bp_reader_loss_report(const struct bp_reader *r,
			   struct bp_loss_report *l);

/*
 * Events the session wrote to its files that are not in them now: those
 * of stream files the metadata lists (env stream_files) that are gone,
 * and of the listed files read to their end that hold fewer events than
 * it says (cut).  0 for traces without the list (streamed, older).
 * Damage reports name each such file when the reader opens it.
 */
uint64_t bp_reader_missing(const struct bp_reader *r);

/*
 * For a first pass over the process names: calls fn for the "process"
 * events at the end of each stream of r (streams in name order, events
 * in file order), i.e. in the packets after the last packet without any
 * "process" event (the last packet always counts).  That is where the
 * tracer's end-of-session annotations are; those of the start, and
 * "register" events, are met in time by the main pass.  A stream whose
 * process events run back further than BP_TAIL_PACKETS packets is read
 * whole.  r must be opened with BP_READER_PROCESS_ONLY |
 * BP_READER_UNPRIMED; its streams are left at their end.
 */
#define BP_TAIL_PACKETS 1024
void bp_reader_tail_processes(struct bp_reader *r,
			      void (*fn)(void *ctx, const struct bp_event *e),
			      void *ctx);

/* Name of event id (an enum bp_event_id or BP_EV_UNKNOWN). */
const char *bp_event_name(uint16_t id);

/* Id of an event class name, or BP_EV_UNKNOWN. */
uint16_t bp_event_id_of(const char *name, size_t len);

void bp_reader_close(struct bp_reader *r);

#endif /* BP_READER_H */
