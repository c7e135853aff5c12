/* ctf_util.h -- helpers of the CTF writer's tests (test_ctf.c,
 * test_ctf_direct.c): a whole file read into memory, babeltrace2 run on a
 * trace directory, the temporary directory's end.  Header-only, as
 * tap.h. */
#ifndef CTF_UTIL_H
#define CTF_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bp_format.h"
#include "tap.h"

/* The trace's uuid, clock offset and env block (a value that needs
 * escaping) in every test trace. */
static const uint8_t uuid[16] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45,
				 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32,
				 0x54, 0x76};
static const int64_t offset_ns = 1700000000123456789LL;
static const struct bp_env_entry env[] = {
	{"node", "bp@host"}, {"otp_release", "25"}, {"quoted", "a\"b\\c\nd"}};

/* The file at path, NUL-terminated, malloc'd; its length in *len (NULL
 * and 0 when it cannot be read). */
static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	*len = 0;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
			buf[n] = 0;
			*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

static int have_babeltrace(void)
{
	return system("command -v babeltrace2 >/dev/null 2>&1") == 0;
}

/* Runs babeltrace2 on dir; returns its exit status (-1: did not exit).
 * *out gets stdout, *err stderr (saved to errpath); both malloc'd. */
static int run_babeltrace(const char *dir, const char *errpath, char **out,
			  char **err)
{
	char cmd[1200];
	size_t len = 0, cap = 1 << 16, n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "babeltrace2 '%s' 2>'%s'", dir, errpath);
	*out = malloc(cap);
	*err = NULL;
	p = popen(cmd, "r");
	if (!p) {
		(*out)[0] = 0;
		return -1;
	}
	while ((n = fread(*out + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (cap - len < 4096)
			*out = realloc(*out, cap *= 2);
	}
	(*out)[len] = 0;
	st = pclose(p);
	*err = (char *)slurp(errpath, &n);
	if (!*err)
		*err = strdup("");
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The end of a test program: its temporary directory removed, or kept
 * and named when a check failed; returns tap_done()'s status. */
static int ctf_finish(const char *tmp)
{
	char cmd[400];

	if (tap_failed) {
		tap_diag("files kept for inspection in %s", tmp);
	} else {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			tap_diag("could not remove %s", tmp);
	}
	return tap_done();
}

#endif /* CTF_UTIL_H */
