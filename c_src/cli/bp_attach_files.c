/* bp_attach_files.c -- the files of this host that `beamprobe attach'
 * (and profile, record) reads and makes (bp_attach_files.h): the
 * install it brings from, whole files read, private files created, its
 * own directories removed, $TMPDIR.
 */
#define _GNU_SOURCE
#include "bp_attach_files.h"
#include "bp_cli.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bp_attach_read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;
	char *b;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || !(b = malloc((size_t)n + 1))) {
		fclose(f);
		return -1;
	}
	if (fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		fclose(f);
		return -1;
	}
	fclose(f);
	b[n] = '\0';
	*out = b;
	*len = (size_t)n;
	return 0;
}

int bp_attach_write_file(const char *path, const void *p, size_t n,
			 int mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      mode);
	ssize_t w;

	if (fd < 0)
		return -1;
	w = write(fd, p, n);
	if (close(fd) != 0 || w != (ssize_t)n)
		return -1;
	return 0;
}

/* Removes dir and the files in it (one level: what we created). */
void bp_attach_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[PATH_MAX + 300];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(dir);
}

const char *bp_attach_tmp_base(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

/* Is dir a beamprobe application directory (ebin/beamprobe.app)? */
static int is_home(const char *dir)
{
	char p[PATH_MAX + 128];

	snprintf(p, sizeof p, "%s/ebin/beamprobe.app", dir);
	return access(p, R_OK) == 0;
}

/* The directory beamprobe is built or installed in: $BEAMPROBE_HOME, else
 * found from this executable: APP/bin/beamprobe (a checkout, a mix or
 * rebar3 build), APP/priv/bin/beamprobe (a release), or
 * PREFIX/bin/beamprobe with APP in PREFIX/lib/erlang/lib (make install). */
int bp_attach_home(char *home, size_t n)
{
	char self[PATH_MAX];
	ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
	const char *env = getenv("BEAMPROBE_HOME");

	if (env) {
		snprintf(home, n, "%s", env);
		return 0;
	}
	if (l <= 0)
		return -1;
	self[l] = '\0';
	for (int i = 0; i < 2; i++) { /* bin/beamprobe -> the install */
		char *sl = strrchr(self, '/');
		if (!sl)
			return -1;
		*sl = '\0';
	}
	snprintf(home, n, "%s", self[0] ? self : "/");
	if (is_home(home))
		return 0; /* a checkout, a mix or rebar3 build */
	/* A release (relx, mix release): the application's ebin/ and priv/
	 * only, the CLI copied into priv/bin/beamprobe. */
	const char *last = strrchr(self, '/');
	if (last && strcmp(last, "/priv") == 0) {
		char app[PATH_MAX];
		snprintf(app, sizeof app, "%.*s", (int)(last - self), self);
		if (is_home(app) && strlen(app) < n) {
			snprintf(home, n, "%s", app);
			return 0;
		}
	}
	/* `make install': PREFIX/bin/beamprobe, the application in
	 * PREFIX/lib/erlang/lib/beamprobe-VSN (this version's). */
	char app[PATH_MAX + 64];
	snprintf(app, sizeof app, "%s/lib/erlang/lib/beamprobe-%s", self,
		 BP_VERSION);
	if (is_home(app) && strlen(app) < n)
		snprintf(home, n, "%s", app);
	return 0;
}
