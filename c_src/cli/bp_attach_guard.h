/* bp_attach_guard.h -- the temporary trace directory of `beamprobe attach'
 * (no -o) is removed even when attach is killed (SIGKILL, a crash): a
 * guard process waits for attach's end and removes it unless told to keep
 * it (see bp_attach_guard.c).
 */
#ifndef BP_ATTACH_GUARD_H
#define BP_ATTACH_GUARD_H

/* Starts the guard of dir (made by us, just now).  The descriptor that
 * keeps it waiting (close-on-exec: no child holds it), or -1 when it could
 * not start (then nothing guards dir; attach works as before). */
int bp_attach_guard_start(const char *dir);

/* dir is kept (the message naming it was printed): the guard goes
 * without removing it.  Closes fd. */
void bp_attach_guard_keep(int fd);

#endif /* BP_ATTACH_GUARD_H */
