/* bp_output.c -- a session's output directory and its metadata file: the
 * trace UUID, the checks that the directory is ours alone (make_dir/1 and
 * start/1), and the CTF metadata with the session's env block.
 *
 * Called off the schedulers: make_dir/1 and create_file/1 in a job's
 * thread (bp_job.h), start/1's I/O in the session's collector thread
 * before it collects (bp_nif_config.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bp_atoms.h"
#include "bp_ctf.h"
#include "bp_losses.h"
#include "bp_nif.h"
#include "bp_output.h"
#include "bp_session.h"
#include "bp_sink_tcp.h"

/* Limits of the metadata's env block (docs/format.md, "Metadata"): keys
 * from the session, bytes of one value and of all values as written
 * (escapes counted), so that the metadata text always fits the writer's
 * buffer (bp_ctf.c) and every CLI reader (at most 64 env keys). */
#define ENV_MAX_KEYS 48
#define ENV_VALUE_MAX 8192
#define ENV_TOTAL_MAX 24576

/* Bytes of v[0..n) that fit in `room' written bytes (a '"' or '\\' takes
 * two), cut at a UTF-8 character boundary. */
static size_t env_fit(const uint8_t *v, size_t n, size_t room,
		      size_t *used_out)
{
	size_t i = 0, used = 0;

	while (i < n) {
		size_t w = v[i] == '"' || v[i] == '\\' ? 2 : 1;
		if (used + w > room)
			break;
		used += w;
		i++;
	}
	while (i < n && i > 0 && (v[i] & 0xc0) == 0x80) {
		i--; /* do not split a character */
		used--;
	}
	*used_out = used;
	return i;
}

/*
 * Reads the env list [{Key :: binary(), Value :: binary()}] and writes the
 * metadata.  Nothing is cut silently: a value longer than ENV_VALUE_MAX (or
 * than what is left of ENV_TOTAL_MAX) ends with "...", keys beyond
 * ENV_MAX_KEYS are left out, and the env key `truncated' lists the cut
 * keys (and `keys' if keys were left out).
 */
int bp_output_write_metadata(ErlNifEnv *env, struct bp_session *s,
			     ERL_NIF_TERM list, int64_t offset_ns)
{
	struct bp_env_entry entries[ENV_MAX_KEYS + 1];
	char keys[ENV_MAX_KEYS][64], trunc[ENV_MAX_KEYS * 65 + 8];
	size_t n = 0, total = 0, tl = 0;
	ERL_NIF_TERM head;
	char *vals, *vp;
	int err, dropped_keys = 0;

	/* Values, each NUL-ended, and room for the "..." markers. */
	vals = enif_alloc(ENV_TOTAL_MAX + ENV_MAX_KEYS * 4);
	if (!vals)
		return ENOMEM;
	vp = vals;
	trunc[0] = '\0';
	while (enif_get_list_cell(env, list, &head, &list)) {
		const ERL_NIF_TERM *kv;
		ErlNifBinary k, v;
		int arity;
		if (!enif_get_tuple(env, head, &arity, &kv) || arity != 2 ||
		    !enif_inspect_binary(env, kv[0], &k) ||
		    !enif_inspect_binary(env, kv[1], &v) || k.size == 0 ||
		    k.size >= sizeof keys[0]) {
			enif_free(vals);
			return EINVAL;
		}
		for (size_t i = 0; i < k.size; i++)
			if (!(k.data[i] == '_' ||
			      (k.data[i] >= 'a' && k.data[i] <= 'z') ||
			      (k.data[i] >= '0' && k.data[i] <= '9'))) {
				enif_free(vals);
				return EINVAL;
			}
		if (n == ENV_MAX_KEYS) {
			dropped_keys = 1;
			continue;
		}
		memcpy(keys[n], k.data, k.size);
		keys[n][k.size] = '\0';
		size_t room = ENV_TOTAL_MAX - total;
		if (room > ENV_VALUE_MAX)
			room = ENV_VALUE_MAX;
		size_t used;
		size_t vl = env_fit(v.data, v.size, room, &used);
		memcpy(vp, v.data, vl);
		total += used;
		if (vl < v.size) {
			memcpy(vp + vl, "...", 3);
			vl += 3;
			tl += (size_t)snprintf(trunc + tl, sizeof trunc - tl,
					       "%s%s", tl ? ", " : "", keys[n]);
			/* <= ENV_MAX_KEYS keys of < 64 bytes: always fits */
		}
		vp[vl] = '\0';
		entries[n].key = keys[n];
		entries[n].value = vp;
		vp += vl + 1;
		n++;
	}
	if (dropped_keys)
		tl += (size_t)snprintf(trunc + tl, sizeof trunc - tl, "%skeys",
				       tl ? ", " : "");
	if (tl) {
		entries[n].key = "truncated";
		entries[n].value = trunc;
		n++;
	}
	err = s->has_file ? bp_ctf_write_metadata_at(s->dirfd, s->uuid,
						      offset_ns, entries, n)
			  : 0;
	if (!err && s->tcp) { /* the same text starts every connection */
		size_t cap = 64 * 1024;
		char *text = malloc(cap);
		int tl2 = text ? bp_format_metadata(text, cap, s->uuid,
						    offset_ns, entries, n)
			       : -1;
		err = tl2 < 0 ? ENOMEM
			      : bp_tcp_set_metadata(s->tcp, s->uuid, text,
						    (size_t)tl2);
		free(text);
	}
	enif_free(vals);
	return err;
}

void bp_output_make_uuid(uint8_t u[16])
{
	FILE *f = fopen("/dev/urandom", "rb");
	size_t got = f ? fread(u, 1, 16, f) : 0;
	struct timespec ts;

	if (f)
		fclose(f);
	if (got != 16) { /* weak fallback; uniqueness only matters per dir */
		clock_gettime(CLOCK_REALTIME, &ts);
		for (int i = 0; i < 16; i++)
			u[i] = (uint8_t)((ts.tv_nsec >> (i % 4 * 8)) ^
					 (ts.tv_sec >> (i % 8)) ^ (i * 37));
	}
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* version 4 */
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
}

/* The trace directory must be ours alone: a real directory (the fd was
 * opened O_NOFOLLOW), owned by this user, not writable by group or others
 * (who could plant files or links in it).  0 or an error atom's text. */
const char *bp_output_dir_unsafe(int fd)
{
	struct stat sb;

	if (fstat(fd, &sb) != 0)
		return "fstat_failed";
	if (!S_ISDIR(sb.st_mode))
		return "not_a_directory";
	if (sb.st_uid != geteuid())
		return "not_owner";
	if (sb.st_mode & (S_IWGRP | S_IWOTH))
		return "group_or_world_writable";
	return NULL;
}

static int dir_empty(int fd)
{
	int dup_fd = dup(fd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	struct dirent *e;
	int empty = 1;

	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return 0;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	return empty;
}

static int get_path(ErlNifEnv *env, ERL_NIF_TERM t, char out[4096])
{
	ErlNifBinary b;

	if (!enif_inspect_iolist_as_binary(env, t, &b) || b.size == 0 ||
	    b.size >= 4096 || memchr(b.data, 0, b.size))
		return 0;
	memcpy(out, b.data, b.size);
	out[b.size] = '\0';
	return 1;
}

int bp_output_path_ok(ErlNifEnv *env, ERL_NIF_TERM t)
{
	char path[4096];

	return get_path(env, t, path);
}

/* make_dir(Dir :: iodata()) -> created | existing | {error, Why}.
 * Creates the trace directory with its final mode (mkdir 0700: no window
 * whatever the umask), or accepts an existing one only if it is empty,
 * not a symlink, ours and not group/world-writable.  A job (bp_job.h). */
ERL_NIF_TERM bp_output_make_dir(ErlNifEnv *env, ERL_NIF_TERM dir)
{
	char path[4096];
	const char *why;
	int fd;

	if (!get_path(env, dir, path))
		return enif_make_badarg(env);
	if (mkdir(path, 0700) == 0)
		return enif_make_atom(env, "created");
	if (errno != EEXIST)
		return enif_make_tuple2(env, bp_atom.error,
					bp_nif_errno_atom(env, errno));
	fd = bp_ctf_open_dir(path);
	if (fd < 0) {
		struct stat lsb;
		/* O_DIRECTORY | O_NOFOLLOW on a symlink: ELOOP or ENOTDIR. */
		int link = lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode);
		return enif_make_tuple2(env, bp_atom.error,
					link ? enif_make_atom(env, "symlink")
					     : bp_nif_errno_atom(env, -fd));
	}
	why = bp_output_dir_unsafe(fd);
	if (!why && !dir_empty(fd))
		why = "not_empty";
	close(fd);
	if (why)
		return enif_make_tuple2(env, bp_atom.error,
					enif_make_atom(env, why));
	return enif_make_atom(env, "existing");
}

/* create_file(Path :: iodata()) -> ok | {error, Why}.
 * Creates an empty file with its final mode (0600 at open: no window
 * whatever the umask, in which another user could open it and keep
 * reading what is written later), never through a symlink and never
 * over an existing file.  The caller then writes it (file:open/2 of an
 * existing file keeps its mode).  A job (bp_job.h). */
ERL_NIF_TERM bp_output_create_file(ErlNifEnv *env, ERL_NIF_TERM file)
{
	char path[4096];
	int fd;

	if (!get_path(env, file, path))
		return enif_make_badarg(env);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0)
		return enif_make_tuple2(env, bp_atom.error,
					bp_nif_errno_atom(env, errno));
	close(fd);
	return bp_atom.ok;
}

/* Env session_lost (bp_format.h): the session's losses per cause, as
 * the summary's `dropped' says them (bp_losses.h): those of
 * BP_DROP_CAUSES, then a follow session's request budget and the TCP
 * stream sink's (BP_SESSION_LOSSES), when the session has them. */
static int record_losses(struct bp_session *s)
{
	char v[BP_LOSSES_TEXT_MAX];
	struct bp_losses l;
	int err;

	bp_losses_get(s, &l);
	if ((err = bp_losses_file_text(&l, v, sizeof v)) != 0)
		return err;
	return bp_ctf_add_env_at(s->dirfd, BP_ENV_SESSION_LOST, v);
}

int bp_output_record_streams(struct bp_session *s)
{
	/* ",thread-N:B:E:A" is at most 1 + 7 + 10 + 3 * 21 = 81 bytes. */
	enum { ENTRY_MAX = 81 };
	size_t cap = (size_t)s->max_slots * ENTRY_MAX + 1, n = 0;
	char *v;
	int err;

	if (!s->has_file || s->dirfd < 0 || !s->streams)
		return 0;
	/* First the losses: stream_files stays first in the env block. */
	if ((err = record_losses(s)) != 0)
		return err;
	if (!(v = malloc(cap)))
		return ENOMEM;
	v[0] = '\0';
	for (uint32_t i = 0; i < s->max_slots; i++) {
		const struct bp_ctf_stream *st = &s->streams[i];
		int w;
		if (st->bytes == 0)
			continue; /* never written: no file, or an empty one */
		w = snprintf(v + n, cap - n,
			     "%sthread-%03u:%" PRIu64 ":%" PRIu64 ":%" PRIu64,
			     n ? "," : "", i, st->bytes, st->events,
			     st->aux_events);
		if (w < 0 || (size_t)w >= cap - n) {
			free(v); /* cannot happen (ENTRY_MAX): no half list */
			return EOVERFLOW;
		}
		n += (size_t)w;
	}
	err = bp_ctf_add_env_at(s->dirfd, "stream_files", v);
	free(v);
	return err;
}
