/* bp_ctf.c -- CTF 1.8 trace directory writer (see bp_ctf.h, bp_format.h). */
#include "bp_ctf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int bp_ctf_open_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* Creates name in dirfd: exclusive, never through a symlink, mode 0600. */
static int create_file(int dirfd, const char *name)
{
	return openat(dirfd, name,
		      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      0600);
}

int bp_ctf_write_metadata_at(int dirfd, const uint8_t uuid[16],
			     int64_t offset_ns, const struct bp_env_entry *env,
			     size_t nenv)
{
	size_t cap = 64 * 1024;
	char *text = malloc(cap);
	int n, fd, err;

	if (!text)
		return ENOMEM;
	n = bp_format_metadata(text, cap, uuid, offset_ns, env, nenv);
	if (n < 0) {
		free(text);
		return ENOSPC;
	}
	fd = create_file(dirfd, "metadata");
	if (fd < 0) {
		err = errno;
		free(text);
		return err;
	}
	err = bp_dio_pwrite_all(fd, (const uint8_t *)text, (size_t)n, 0);
	if (close(fd) != 0 && !err)
		err = errno;
	free(text);
	return err;
}

/* Reads all of name in dirfd (regular file, not through a symlink) into
 * a malloc'd buffer of *len bytes plus a NUL.  Returns 0 or an errno. */
static int read_file_at(int dirfd, const char *name, size_t max, char **out,
			size_t *len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t got = 0;

	if (fd < 0)
		return errno;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > max) {
		int err = !S_ISREG(st.st_mode) ? EINVAL : EFBIG;
		close(fd);
		return err;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
}

int bp_ctf_add_env_at(int dirfd, const char *key, const char *value)
{
	static const char mark[] = "env {\n";
	char *text = NULL, *at, *out;
	size_t len = 0, vlen = strlen(value), n = 0;
	int fd, err;

	if ((err = read_file_at(dirfd, "metadata", 16u << 20, &text, &len)))
		return err;
	if (!(at = strstr(text, mark))) {
		free(text);
		return EINVAL;
	}
	at += sizeof mark - 1;
	/* The old text, and the entry: every value byte escaped at most
	 * to two bytes. */
	out = malloc(len + strlen(key) + 2 * vlen + 16);
	if (!out) {
		free(text);
		return ENOMEM;
	}
	memcpy(out, text, (size_t)(at - text));
	n = (size_t)(at - text);
	n += (size_t)sprintf(out + n, "\t%s = \"", key);
	for (size_t i = 0; i < vlen; i++) {
		char c = value[i];
		if (c == '"' || c == '\\')
			out[n++] = '\\';
		out[n++] = (unsigned char)c < 32 ? '?' : c;
	}
	memcpy(out + n, "\";\n", 3);
	n += 3;
	memcpy(out + n, at, len - (size_t)(at - text));
	n += len - (size_t)(at - text);
	free(text);
	if (unlinkat(dirfd, ".metadata.tmp", 0) != 0 && errno != ENOENT) {
		free(out);
		return errno;
	}
	fd = create_file(dirfd, ".metadata.tmp");
	if (fd < 0) {
		free(out);
		return errno;
	}
	err = bp_dio_pwrite_all(fd, (const uint8_t *)out, n, 0);
	free(out);
	if (close(fd) != 0 && !err)
		err = errno;
	if (!err && renameat(dirfd, ".metadata.tmp", dirfd, "metadata") != 0)
		err = errno;
	if (err)
		(void)unlinkat(dirfd, ".metadata.tmp", 0);
	return err;
}

int bp_ctf_write_metadata(const char *dir, const uint8_t uuid[16],
			  int64_t offset_ns, const struct bp_env_entry *env,
			  size_t nenv)
{
	int dfd = bp_ctf_open_dir(dir), err;

	if (dfd < 0)
		return -dfd;
	err = bp_ctf_write_metadata_at(dfd, uuid, offset_ns, env, nenv);
	close(dfd);
	return err;
}

int bp_ctf_stream_open_at(struct bp_ctf_stream *s, int dirfd,
			  uint32_t thread_id, const uint8_t uuid[16],
			  size_t packet_cap)
{
	char name[32];
	int err;

	memset(s, 0, sizeof *s);
	s->fd = -1;
	if (packet_cap > BP_PACKET_MAX)
		packet_cap = BP_PACKET_MAX;
	if (packet_cap < BP_PACKET_HEADER_SIZE + 64)
		return EINVAL;
	snprintf(name, sizeof name, "thread-%03u", thread_id);
	s->fd = create_file(dirfd, name);
	if (s->fd < 0)
		return errno;
	/* Room for the stream's first, empty packet before the first one
	 * built (see bp_ctf_stream_flush). */
	if ((err = bp_dio_init(&s->dio, s->fd,
			       packet_cap + BP_PACKET_HEADER_SIZE))) {
		close(s->fd);
		s->fd = -1;
		return err;
	}
	memcpy(s->uuid, uuid, 16);
	s->thread_id = thread_id;
	s->cap = packet_cap;
	s->buf = bp_dio_room(&s->dio) + BP_PACKET_HEADER_SIZE;
	s->len = BP_PACKET_HEADER_SIZE;
	return 0;
}

int bp_ctf_stream_open(struct bp_ctf_stream *s, const char *dir,
		       uint32_t thread_id, const uint8_t uuid[16],
		       size_t packet_cap)
{
	int dfd = bp_ctf_open_dir(dir), err;

	if (dfd < 0) {
		memset(s, 0, sizeof *s);
		s->fd = -1;
		return -dfd;
	}
	err = bp_ctf_stream_open_at(s, dfd, thread_id, uuid, packet_cap);
	close(dfd);
	return err;
}

/* The header of a packet of len bytes of content followed by pad bytes
 * of padding. */
static void put_header(const struct bp_ctf_stream *s, uint8_t *p,
		       uint64_t ts_begin, uint64_t ts_end, size_t len,
		       size_t pad, uint64_t discarded, uint64_t seq)
{
	bp_put_u32(p + BP_PKT_OFF_MAGIC, BP_CTF_MAGIC);
	memcpy(p + BP_PKT_OFF_UUID, s->uuid, 16);
	bp_put_u32(p + BP_PKT_OFF_STREAM_ID, 0);
	bp_put_u64(p + BP_PKT_OFF_TS_BEGIN, ts_begin);
	bp_put_u64(p + BP_PKT_OFF_TS_END, ts_end);
	bp_put_u64(p + BP_PKT_OFF_CONTENT_SIZE, (uint64_t)len * 8);
	bp_put_u64(p + BP_PKT_OFF_PACKET_SIZE, (uint64_t)(len + pad) * 8);
	bp_put_u64(p + BP_PKT_OFF_DISCARDED, discarded);
	bp_put_u64(p + BP_PKT_OFF_SEQ_NUM, seq);
	bp_put_u32(p + BP_PKT_OFF_THREAD_ID, s->thread_id);
	memset(p + len, 0, pad);
}

void bp_ctf_stream_fail(struct bp_ctf_stream *s, int err)
{
	if (s->err)
		return;
	s->err = err ? err : EIO;
	s->lost += s->nevents - s->naux;
	if (s->dio.buf)
		s->lost += bp_dio_pending(&s->dio).events;
	s->nevents = 0;
	s->naux = 0;
	s->len = BP_PACKET_HEADER_SIZE;
}

/* After a write: what the file holds now, and where the next packet is
 * built; or, if it failed, the stream fails. */
static int written(struct bp_ctf_stream *s, int err)
{
	s->bytes = s->dio.in_file.bytes;
	s->events = s->dio.in_file.events;
	s->aux_events = s->dio.in_file.aux;
	if (err) {
		bp_ctf_stream_fail(s, err);
		return err;
	}
	s->buf = bp_dio_room(&s->dio);
	return 0;
}

/* Closes the open packet into the writer (which may write it, or keep it
 * for a later block).  `syncing': a sync of the writer follows. */
static int close_packet(struct bp_ctf_stream *s, uint64_t discarded,
			int force, int syncing)
{
	size_t pad;
	int err;

	if (s->nevents == 0 && !force)
		return 0;
	if (s->nevents == 0)
		s->ts_begin = s->ts_end = s->last_ts;
	if (s->seq == 0) {
		/* The stream's first packet: empty, nothing discarded yet,
		 * in the room left before the first packet built. */
		uint8_t *open = s->buf;
		put_header(s, bp_dio_room(&s->dio), s->ts_begin, s->ts_begin,
			   BP_PACKET_HEADER_SIZE, 0, 0, 0);
		if ((err = written(s, bp_dio_commit(&s->dio,
						    BP_PACKET_HEADER_SIZE, 0,
						    0))))
			return err;
		s->seq = 1;
		/* The open packet follows it when the writer kept it (the
		 * room starts there); else it moves to the room's start. */
		if (s->buf != open)
			memmove(s->buf, open, s->len);
	}
	/* A packet that ends a block written with O_DIRECT is padded to
	 * the block's aligned end (bp_dio.h). */
	pad = bp_dio_pad_for(&s->dio, s->len, syncing);
	put_header(s, s->buf, s->ts_begin, s->ts_end, s->len, pad, discarded,
		   s->seq);
	err = bp_dio_commit(&s->dio, s->len + pad, s->nevents - s->naux,
			    s->naux);
	/* The packet is the writer's now: in the file, staged, or (err)
	 * given up and counted by bp_ctf_stream_fail as the writer's. */
	s->seq++;
	s->len = BP_PACKET_HEADER_SIZE;
	s->nevents = 0;
	s->naux = 0;
	return written(s, err);
}

int bp_ctf_stream_flush(struct bp_ctf_stream *s, uint64_t discarded,
			int force)
{
	int err;

	if (s->fd < 0)
		return EBADF;
	if (s->err)
		return s->err;
	if ((err = close_packet(s, discarded, force, 1)))
		return err;
	return written(s, bp_dio_sync(&s->dio));
}

int bp_ctf_stream_add(struct bp_ctf_stream *s, const uint8_t *ev,
		      uint32_t len, uint64_t discarded)
{
	uint64_t ts;
	uint16_t id;

	if (s->fd < 0 || !s->buf)
		return EBADF;
	if (s->err)
		return s->err;
	if (len < BP_EVENT_HEADER_SIZE ||
	    (size_t)len > s->cap - BP_PACKET_HEADER_SIZE)
		return EMSGSIZE;
	if (s->len + len > s->cap) {
		int err = close_packet(s, discarded, 0, 0);
		if (err)
			return err;
	}
	ts = bp_get_u64(ev + BP_EV_OFF_TS);
	id = bp_get_u16(ev + BP_EV_OFF_ID);
	memcpy(s->buf + s->len, ev, len);
	if (ts < s->last_ts) /* keep the stream monotonic for readers */
		bp_put_u64(s->buf + s->len + BP_EV_OFF_TS, s->last_ts);
	else
		s->last_ts = ts;
	if (s->nevents == 0)
		s->ts_begin = s->last_ts;
	s->ts_end = s->last_ts;
	s->len += len;
	s->nevents++;
	if (id == BP_EV_PROCESS || id == BP_EV_DROPS)
		s->naux++;
	return 0;
}

int bp_ctf_stream_close(struct bp_ctf_stream *s, uint64_t discarded)
{
	int err = 0;

	if (s->fd >= 0) {
		err = bp_ctf_stream_flush(s, discarded, 0);
		if (close(s->fd) != 0 && !err)
			err = errno;
		s->fd = -1;
	}
	bp_dio_free(&s->dio);
	s->buf = NULL;
	return err;
}
