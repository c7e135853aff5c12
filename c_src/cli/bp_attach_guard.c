/* bp_attach_guard.c -- removes attach's temporary trace directory
 * ($TMPDIR/beamprobe-trace-XXXXXX, when no -o DIR is given) once attach
 * has ended, whatever ended it.  attach removes it itself on every exit
 * it lives to see; killed (SIGKILL, the OOM killer, a crash), it left the
 * directory and the whole trace in /tmp for good, one per run.
 *
 * The guard is a child forked right after the directory is made, before
 * anything else is opened: it holds no socket, no file of attach's but
 * the read end of a pipe whose write end only attach holds (close-on-
 * exec, so the printer child does not).  The read returns at attach's
 * end: end of file (attach gone, however) -> the directory is removed,
 * two levels (--cluster's DIR/<node>/files) and nothing else: only if it
 * is still the directory made (same device and inode), never following a
 * symbolic link; a byte (bp_attach_guard_keep) -> it is kept.  The guard
 * is in a process group of its own (a ^C at the terminal is attach's to
 * handle) and has /dev/null as its standard streams (whoever reads
 * attach's output sees its end when attach ends).
 */
#define _GNU_SOURCE
#include "bp_attach_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The entries of directory fd d (files, and with depth > 0 directories
 * emptied the same way), then nothing more: the caller removes d. */
static void empty_dir(int d, int depth)
{
	DIR *dp = fdopendir(d);
	struct dirent *e;

	if (!dp) {
		close(d);
		return;
	}
	while ((e = readdir(dp))) {
		struct stat sb;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISDIR(sb.st_mode)) {
			int sub;
			if (depth <= 0)
				continue;
			sub = openat(dirfd(dp), e->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					     O_CLOEXEC);
			if (sub >= 0)
				empty_dir(sub, depth - 1);
			(void)unlinkat(dirfd(dp), e->d_name, AT_REMOVEDIR);
		} else {
			(void)unlinkat(dirfd(dp), e->d_name, 0);
		}
	}
	closedir(dp);
}

static void guard(int rfd, const char *dir, const struct stat *made)
{
	char b;
	ssize_t r;
	struct stat sb;
	int d;

	do
		r = read(rfd, &b, 1);
	while (r < 0 && errno == EINTR);
	if (r == 1)
		_exit(0); /* kept */
	d = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d < 0)
		_exit(0); /* removed by attach */
	if (fstat(d, &sb) != 0 || sb.st_dev != made->st_dev ||
	    sb.st_ino != made->st_ino) {
		close(d);
		_exit(0); /* another directory by that name: not ours */
	}
	empty_dir(d, 1);
	(void)rmdir(dir);
	_exit(0);
}

int bp_attach_guard_start(const char *dir)
{
	int p[2], nul;
	struct stat made;
	pid_t pid;

	if (lstat(dir, &made) != 0 || pipe2(p, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[1]);
		setpgid(0, 0);
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
		guard(p[0], dir, &made);
	}
	close(p[0]);
	return p[1];
}

void bp_attach_guard_keep(int fd)
{
	if (fd < 0)
		return;
	if (write(fd, "k", 1) != 1) {
	}
	close(fd);
}
