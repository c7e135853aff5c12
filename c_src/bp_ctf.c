/* bp_ctf.c -- CTF 1.8 trace directory writer (see bp_ctf.h, bp_format.h). */
#include "bp_ctf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write() all of buf, retrying on EINTR and short writes. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int bp_ctf_write_metadata(const char *dir, const uint8_t uuid[16],
			  int64_t offset_ns, const struct bp_env_entry *env,
			  size_t nenv)
{
	char path[4096];
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
	if ((size_t)snprintf(path, sizeof path, "%s/metadata", dir) >=
	    sizeof path) {
		free(text);
		return ENAMETOOLONG;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = errno;
		free(text);
		return err;
	}
	err = write_all(fd, (const uint8_t *)text, (size_t)n);
	if (close(fd) != 0 && !err)
		err = errno;
	free(text);
	return err;
}

int bp_ctf_stream_open(struct bp_ctf_stream *s, const char *dir,
		       uint32_t thread_id, const uint8_t uuid[16],
		       size_t packet_cap)
{
	char path[4096];

	memset(s, 0, sizeof *s);
	s->fd = -1;
	if (packet_cap > BP_PACKET_MAX)
		packet_cap = BP_PACKET_MAX;
	if (packet_cap < BP_PACKET_HEADER_SIZE + 64)
		return EINVAL;
	if ((size_t)snprintf(path, sizeof path, "%s/thread-%03u", dir,
			     thread_id) >= sizeof path)
		return ENAMETOOLONG;
	s->buf = malloc(packet_cap);
	if (!s->buf)
		return ENOMEM;
	s->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (s->fd < 0) {
		int err = errno;
		free(s->buf);
		s->buf = NULL;
		return err;
	}
	memcpy(s->uuid, uuid, 16);
	s->thread_id = thread_id;
	s->cap = packet_cap;
	s->len = BP_PACKET_HEADER_SIZE;
	return 0;
}

int bp_ctf_stream_flush(struct bp_ctf_stream *s, uint64_t discarded,
			int force)
{
	uint8_t *p = s->buf;
	int err;

	if (s->fd < 0)
		return EBADF;
	if (s->nevents == 0 && !force)
		return 0;
	if (s->nevents == 0)
		s->ts_begin = s->ts_end = s->last_ts;
	bp_put_u32(p + BP_PKT_OFF_MAGIC, BP_CTF_MAGIC);
	memcpy(p + BP_PKT_OFF_UUID, s->uuid, 16);
	bp_put_u32(p + BP_PKT_OFF_STREAM_ID, 0);
	bp_put_u64(p + BP_PKT_OFF_TS_BEGIN, s->ts_begin);
	bp_put_u64(p + BP_PKT_OFF_TS_END, s->ts_end);
	bp_put_u64(p + BP_PKT_OFF_CONTENT_SIZE, (uint64_t)s->len * 8);
	bp_put_u64(p + BP_PKT_OFF_PACKET_SIZE, (uint64_t)s->len * 8);
	bp_put_u64(p + BP_PKT_OFF_DISCARDED, discarded);
	bp_put_u64(p + BP_PKT_OFF_SEQ_NUM, s->seq);
	bp_put_u32(p + BP_PKT_OFF_THREAD_ID, s->thread_id);
	err = write_all(s->fd, p, s->len);
	if (err) {
		if (!s->err)
			s->err = err;
		return err;
	}
	s->bytes += s->len;
	s->events += s->nevents;
	s->seq++;
	s->len = BP_PACKET_HEADER_SIZE;
	s->nevents = 0;
	return 0;
}

int bp_ctf_stream_add(struct bp_ctf_stream *s, const uint8_t *ev,
		      uint32_t len, uint64_t discarded)
{
	uint64_t ts;

	if (s->fd < 0 || !s->buf)
		return EBADF;
	if (len < BP_EVENT_HEADER_SIZE ||
	    (size_t)len > s->cap - BP_PACKET_HEADER_SIZE)
		return EMSGSIZE;
	if (s->len + len > s->cap) {
		int err = bp_ctf_stream_flush(s, discarded, 0);
		if (err)
			return err;
	}
	ts = bp_get_u64(ev + BP_EV_OFF_TS);
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
	free(s->buf);
	s->buf = NULL;
	return err;
}
