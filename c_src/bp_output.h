/* bp_output.h -- a session's output directory and its metadata file (see
 * bp_output.c). */
#ifndef BP_OUTPUT_H
#define BP_OUTPUT_H

#include <stdint.h>
#include <erl_nif.h>

struct bp_session;

/* A random (version 4) UUID: the trace's, in its metadata. */
void bp_output_make_uuid(uint8_t u[16]);

/* NULL if the directory open as fd is ours alone, else the text of the
 * error atom saying why not. */
const char *bp_output_dir_unsafe(int fd);

/* Whether t is a path make_dir/1 and create_file/1 take (iodata, not
 * empty, shorter than 4096 bytes, no NUL). */
int bp_output_path_ok(ErlNifEnv *env, ERL_NIF_TERM t);

/* make_dir/1 of beamprobe_nif: created | existing | {error, Why}, or
 * badarg for a malformed path. */
ERL_NIF_TERM bp_output_make_dir(ErlNifEnv *env, ERL_NIF_TERM dir);

/* create_file/1 of beamprobe_nif: ok | {error, Why} (an empty file,
 * 0600 from its creation, O_EXCL | O_NOFOLLOW), or badarg. */
ERL_NIF_TERM bp_output_create_file(ErlNifEnv *env, ERL_NIF_TERM file);

/* Writes s's metadata (in s->dirfd) with the env list `list'.  0, EINVAL
 * for a malformed list, or the errno of the write. */
int bp_output_write_metadata(ErlNifEnv *env, struct bp_session *s,
			     ERL_NIF_TERM list, int64_t offset_ns);

/* Records in s's metadata the stream files as they are now that the
 * collector has closed them: env `stream_files' (docs/format.md,
 * "Metadata"), so that a reader can tell one deleted or cut afterwards,
 * and the session's losses per cause, env `session_lost' (bp_format.h),
 * so that it can tell losses no stream file holds (a bytes limit no
 * file fit in, a thread that only lost events, files not creatable).
 * The collector thread, at the end of bp_collector_finish.  0 or an
 * errno value. */
int bp_output_record_streams(struct bp_session *s);

#endif /* BP_OUTPUT_H */
