/* bp_ctf.h -- writing CTF 1.8 trace directories: the metadata file and
 * one packetised stream file per producing thread (layout: bp_format.h).
 *
 * Used by the collector thread (one writer per stream, no locking) and by
 * tests that need synthetic traces.  Files are created mode 0600,
 * exclusively, relative to a directory fd, never through a symlink.
 */
#ifndef BP_CTF_H
#define BP_CTF_H

#include <stddef.h>
#include <stdint.h>

#include "bp_dio.h"
#include "bp_format.h"

struct bp_ctf_stream {
	int fd;                /* -1 when closed */
	uint8_t uuid[16];
	uint32_t thread_id;
	uint64_t seq;          /* next packet_seq_num */
	uint8_t *buf;          /* packet being built: in the writer's
				  staging buffer (bp_dio_room) */
	size_t cap;            /* largest packet */
	size_t len;            /* bytes used in buf (header included) */
	uint64_t ts_begin, ts_end;
	uint32_t nevents;      /* events in the open packet */
	uint32_t naux;         /* of which process/drops events */
	uint64_t bytes;        /* bytes in the file: whole packets only */
	uint64_t events;       /* user events in whole packets in the file */
	uint64_t aux_events;   /* process/drops events in the file */
	uint64_t lost;         /* user events whose packet could not be written */
	uint64_t last_ts;      /* timestamp of the last event added */
	int err;               /* first errno met, 0 if none: the stream then
				  refuses every event */
	struct bp_dio dio;     /* the file's writer: packets reach the file
				  in blocks, around the page cache */
	/* Collector bookkeeping: what it has already accounted for. */
	uint64_t seen_bytes, seen_events, seen_aux, seen_lost;
};

/*
 * Opens dir as a directory without following a symlink in its last
 * component (O_DIRECTORY | O_NOFOLLOW).  Returns an fd or -errno.
 */
int bp_ctf_open_dir(const char *dir);

/*
 * Writes metadata in the directory dirfd: created exclusively
 * (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600), so an existing file or a
 * planted symlink is an error (EEXIST), never overwritten or followed.
 * offset_ns = CLOCK_REALTIME - CLOCK_MONOTONIC (ns).  Returns 0 or an errno
 * value.  Any thread.  bp_ctf_write_metadata does the same by path.
 */
int bp_ctf_write_metadata_at(int dirfd, const uint8_t uuid[16],
			     int64_t offset_ns, const struct bp_env_entry *env,
			     size_t nenv);
int bp_ctf_write_metadata(const char *dir, const uint8_t uuid[16],
			  int64_t offset_ns, const struct bp_env_entry *env,
			  size_t nenv);

/*
 * Creates thread-<thread_id> in dirfd (exclusive, no symlink followed,
 * 0600) with packets of at most packet_cap bytes (<= BP_PACKET_MAX).
 * Returns 0 or an errno value; on error the stream is left closed
 * (fd == -1) and nothing is allocated.  bp_ctf_stream_open: by path.
 *
 * Every stream starts with an empty packet whose events_discarded is 0
 * (written with the first packet), so that losses before the first event
 * show up in readers as a rise of events_discarded.
 */
int bp_ctf_stream_open_at(struct bp_ctf_stream *s, int dirfd,
			  uint32_t thread_id, const uint8_t uuid[16],
			  size_t packet_cap);
int bp_ctf_stream_open(struct bp_ctf_stream *s, const char *dir,
		       uint32_t thread_id, const uint8_t uuid[16],
		       size_t packet_cap);

/*
 * Appends one encoded event (id, timestamp, pid, fields: see bp_format.h)
 * of len bytes.  Writes the open packet first when the event does not fit;
 * `discarded` is the stream's running loss count to put in that packet.
 * Returns 0, EMSGSIZE if the event can never fit a packet (not added), or
 * the stream's error (not added; see bp_ctf_stream_flush).
 */
int bp_ctf_stream_add(struct bp_ctf_stream *s, const uint8_t *ev,
		      uint32_t len, uint64_t discarded);

/* Closes the open packet, if it holds events or `force` is set (an empty
 * packet records a new `discarded` value), and writes every closed packet
 * to the file (packets closed because they were full wait in the writer's
 * staging buffer until then: bp_dio.h).  Returns 0 or an errno value.
 * When packets cannot be written whole, the file is cut back to its last
 * whole packet, the user events of the packets not in it are added to
 * `lost`, and the stream fails: err is set and later calls return it. */
int bp_ctf_stream_flush(struct bp_ctf_stream *s, uint64_t discarded,
			int force);

/* Fails the stream with err (if it has not failed yet): the user events
 * of the open packet and of the packets not yet in the file are added to
 * `lost`, and those packets are discarded. */
void bp_ctf_stream_fail(struct bp_ctf_stream *s, int err);

/* Flushes and closes; frees the packet buffer.  Returns 0 or an errno. */
int bp_ctf_stream_close(struct bp_ctf_stream *s, uint64_t discarded);

/*
 * Adds `key = "value";' as the first entry of the env block of the
 * metadata in dirfd: the new text goes to `.metadata.tmp' (created
 * exclusively, mode 0600, never through a symlink; one left behind is
 * removed first), which is then renamed over `metadata'.  value is
 * escaped.  Returns 0 or an errno value (EINVAL: no env block, EFBIG:
 * metadata over 16 MiB); `metadata' is left as it was on any error.
 */
int bp_ctf_add_env_at(int dirfd, const char *key, const char *value);

/* Event encoding helpers, for writers that build events in a buffer. */
static inline size_t bp_ev_header(uint8_t *p, uint16_t id, uint64_t ts,
				  uint64_t pid)
{
	bp_put_u16(p + BP_EV_OFF_ID, id);
	bp_put_u64(p + BP_EV_OFF_TS, ts);
	bp_put_u64(p + BP_EV_OFF_PID, pid);
	return BP_EVENT_HEADER_SIZE;
}

#endif /* BP_CTF_H */
