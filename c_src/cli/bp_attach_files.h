/* bp_attach_files.h -- the files of this host that `beamprobe attach'
 * (and profile, record) reads and makes (bp_attach_files.c). */
#ifndef BP_ATTACH_FILES_H
#define BP_ATTACH_FILES_H

#include <stddef.h>

/* The directory beamprobe is built or installed in ($BEAMPROBE_HOME, else
 * two levels above the running bin/beamprobe); 0, or -1. */
int bp_attach_home(char *home, size_t n);
/* The whole of a file, NUL-terminated, in *out (malloc'd; its length
 * without the NUL in *len).  0, or -1. */
int bp_attach_read_file(const char *path, char **out, size_t *len);
/* Creates path (not there before, not through a symbolic link) with mode
 * and writes p into it.  0, or -1. */
int bp_attach_write_file(const char *path, const void *p, size_t n,
			 int mode);
/* Removes dir and the files in it (one level: what we created). */
void bp_attach_remove_dir(const char *dir);
/* $TMPDIR, or /tmp. */
const char *bp_attach_tmp_base(void);

#endif /* BP_ATTACH_FILES_H */
