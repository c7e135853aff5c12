/* bp_attach_streams.c -- the streams of `beamprobe attach --cluster':
 * every node of the cluster streams its session to a port of its own
 * here (the TCP stream sink, c_src/bp_sink_tcp.c), written as it arrives
 * into DIR/<node> by a receiver of its own (bp_recv.c: the same one as
 * `beamprobe receive' and plain attach), so `print --follow --nodes DIR'
 * shows every node's events live and `beamprobe cluster DIR' reads the
 * traces afterwards.  The clock offsets the cluster session measured
 * reach us at the end over distribution, as metadata env lines per node
 * (beamprobe_cluster:env_lines/1); they are added to that node's
 * metadata as beamprobe_cluster:rewrite_env/2 does for file traces
 * (written whole to a hidden temporary file, then renamed).
 */
#define _GNU_SOURCE
#include "bp_attach_streams.h"
#include "bp_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* A node name as a directory name: no '/', not "." or "..". */
static int safe_name(const char *n)
{
	return n[0] && n[0] != '.' && !strchr(n, '/') && strlen(n) < 256;
}

int bp_attach_streams_open(struct bp_attach_streams *ss, const char *dir,
			   const char *nodes_text, const char *ip)
{
	char addr[128], path[PATH_MAX + 300];
	const char *p = nodes_text;

	memset(ss, 0, sizeof *ss);
	snprintf(ss->dir, sizeof ss->dir, "%s", dir);
	ss->s = calloc(BP_ATTACH_MAX_NODES, sizeof *ss->s);
	if (!ss->s) {
		bp_cli_error("out of memory");
		return -1;
	}
	snprintf(addr, sizeof addr, strchr(ip, ':') ? "[%s]:0" : "%s:0", ip);
	while (*p) {
		const char *e = strchr(p, '\n');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		struct bp_attach_stream *st;

		if (l == 0)
			goto next;
		if (ss->n == BP_ATTACH_MAX_NODES) {
			bp_cli_error("--cluster: more than %d nodes",
				     BP_ATTACH_MAX_NODES);
			goto fail;
		}
		st = &ss->s[ss->n];
		snprintf(st->node, sizeof st->node, "%.*s", (int)l, p);
		if (l >= sizeof st->node || !safe_name(st->node)) {
			bp_cli_error("--cluster: a node name unfit for a "
				     "directory: %.*s", (int)l, p);
			goto fail;
		}
		st->lfd = -1;
		bp_recv_conn_init(&st->conn, -1);
		snprintf(path, sizeof path, "%s/%s", dir, st->node);
		if (bp_recv_open(&st->r, path) != 0)
			goto fail;
		st->r.quiet = 1;
		ss->n++;
		if ((st->lfd = bp_recv_listen(addr, &st->port)) < 0)
			goto fail;
	next:
		p += l + (e != NULL);
	}
	if (ss->n == 0) {
		bp_cli_error("--cluster: the node named no nodes");
		goto fail;
	}
	return 0;
fail:
	for (int i = 0; i < ss->n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, ss->s[i].node);
		rmdir(path);
	}
	bp_attach_streams_close(ss);
	return -1;
}

int bp_attach_streams_fds(struct bp_attach_streams *ss, struct pollfd *p,
			  int max)
{
	int k = 0;

	for (int i = 0; i < ss->n; i++) {
		struct bp_attach_stream *st = &ss->s[i];
		st->npoll = 0;
		if (k + BP_RECV_NFDS <= max) {
			st->npoll = bp_recv_pollfds(&st->r, st->lfd,
						    &st->conn, p + k);
			k += st->npoll;
		}
	}
	return k;
}

void bp_attach_streams_serve(struct bp_attach_streams *ss,
			     const struct pollfd *p, int np)
{
	/* One stream per node; newcomers wait in its lobby (bp_recv.h). */
	int k = 0;

	for (int i = 0; i < ss->n && k + ss->s[i].npoll <= np; i++) {
		struct bp_attach_stream *st = &ss->s[i];
		(void)bp_recv_serve(&st->r, st->lfd, &st->conn, p + k,
				    st->npoll);
		k += st->npoll;
	}
}

int bp_attach_streams_done(const struct bp_attach_streams *ss)
{
	for (int i = 0; i < ss->n; i++)
		if (!ss->s[i].r.ended &&
		    !(ss->s[i].r.have_uuid &&
		      bp_recv_idle(&ss->s[i].r, &ss->s[i].conn)))
			return 0;
	return 1;
}

int bp_attach_streams_begun(const struct bp_attach_streams *ss)
{
	for (int i = 0; i < ss->n; i++)
		if (ss->s[i].r.have_uuid)
			return 1;
	return 0;
}

int bp_attach_streams_env(void *ctx, const char *node, const char *lines,
			  size_t len)
{
	struct bp_attach_streams *ss = ctx;

	/* Only env lines: each "\tKEY = \"...\";", no brace. */
	for (const char *p = lines; p < lines + len;) {
		const char *e = memchr(p, '\n', (size_t)(lines + len - p));
		if (*p != '\t' || !e || e - p < 3 || memcmp(e - 2, "\";", 2) ||
		    memchr(p, '{', (size_t)(e - p)) ||
		    memchr(p, '}', (size_t)(e - p))) {
			bp_cli_error("%s: malformed clock offsets (ignored)",
				     node);
			return -1;
		}
		p = e + 1;
	}
	for (int i = 0; i < ss->n; i++)
		if (!strcmp(ss->s[i].node, node)) {
			free(ss->s[i].env);
			if (!(ss->s[i].env = malloc(len + 1)))
				return -1;
			memcpy(ss->s[i].env, lines, len);
			ss->s[i].env_len = len;
			return 0;
		}
	bp_cli_error("%s: clock offsets of a node without a stream (ignored)",
		     node);
	return -1;
}

static int read_all(int fd, char **out, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *b = malloc(cap);
	ssize_t r;

	while (b && (r = read(fd, b + n, cap - n)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		n += (size_t)r;
		if (n == cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb)
				break;
			b = nb;
		}
	}
	if (!b || r != 0) {
		free(b);
		return -1;
	}
	*out = b;
	*len = n;
	return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The env lines added after "env {\n" of dirfd's metadata. */
static const char *add_env(int dirfd, const char *lines, size_t len)
{
	static const char mark[] = "env {\n";
	char *text = NULL, *at;
	size_t n;
	int fd = openat(dirfd, "metadata", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	const char *why = NULL;

	if (fd < 0)
		return "no metadata (its stream never began)";
	if (read_all(fd, &text, &n) != 0) {
		close(fd);
		return strerror(errno);
	}
	close(fd);
	at = memmem(text, n, mark, sizeof mark - 1);
	if (!at) {
		free(text);
		return "its metadata has no env block";
	}
	at += sizeof mark - 1;
	unlinkat(dirfd, ".metadata.tmp", 0);
	fd = openat(dirfd, ".metadata.tmp",
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, text, (size_t)(at - text)) ||
	    write_all(fd, lines, len) ||
	    write_all(fd, at, n - (size_t)(at - text)) || fsync(fd) != 0)
		why = strerror(errno);
	if (fd >= 0 && close(fd) != 0 && !why)
		why = strerror(errno);
	if (!why && renameat(dirfd, ".metadata.tmp", dirfd, "metadata") != 0)
		why = strerror(errno);
	if (why)
		unlinkat(dirfd, ".metadata.tmp", 0);
	free(text);
	return why;
}

int bp_attach_streams_record(struct bp_attach_streams *ss)
{
	int bad = 0;

	for (int i = 0; i < ss->n; i++) {
		struct bp_attach_stream *st = &ss->s[i];
		const char *why = st->env ? add_env(st->r.dirfd, st->env,
						    st->env_len)
					  : "the node sent none";
		if (why) {
			bp_cli_error("%s/%s: clock offsets not recorded: %s",
				     ss->dir, st->node, why);
			bad++;
		}
	}
	return bad;
}

void bp_attach_streams_report(const struct bp_attach_streams *ss)
{
	for (int i = 0; i < ss->n; i++) {
		const struct bp_attach_stream *st = &ss->s[i];
		fprintf(stderr, "beamprobe: %s: %llu packets (%llu bytes) "
				"streamed%s\n",
			st->node, (unsigned long long)st->r.packets,
			(unsigned long long)st->r.bytes,
			st->r.ended ? ""
			: st->r.have_uuid ? "; the stream did not end cleanly"
					: "; no stream came");
	}
	fflush(stderr);
}

void bp_attach_streams_close(struct bp_attach_streams *ss)
{
	if (!ss->s)
		return;
	for (int i = 0; i < ss->n; i++) {
		bp_recv_conn_close(&ss->s[i].conn);
		if (ss->s[i].lfd >= 0)
			close(ss->s[i].lfd);
		bp_recv_close(&ss->s[i].r);
		free(ss->s[i].env);
	}
	free(ss->s);
	ss->s = NULL;
	ss->n = 0;
}
