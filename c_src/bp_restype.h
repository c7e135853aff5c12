/* bp_restype.h -- the resource types of struct bp_session across reloads
 * of the NIF library (see bp_restype.c). */
#ifndef BP_RESTYPE_H
#define BP_RESTYPE_H

#include <erl_nif.h>

struct bp_session;

/* Resource type of struct bp_session; set in load()/upgrade().  Sessions
 * created by an earlier instance of the library whose type erts dropped
 * (the module deleted and purged, then loaded again) have an older type:
 * bp_session_get() (bp_nif.h) finds those too, with bp_restype_get_old(). */
extern ErlNifResourceType *bp_restype_current;

/* Keeps this library mapped for the life of the process. */
void bp_restype_pin_library(void);

/* Opens the "bp_session" type with destructor `dtor' (creating it or
 * taking it over from the previous instance) and makes it current.
 * 0, or -1 on failure. */
int bp_restype_open(ErlNifEnv *env, ErlNifResourceDtor *dtor);

/* A new, zeroed session of the current type, or NULL. */
struct bp_session *bp_restype_alloc(void);

/* The session of a resource term of an older type, or NULL. */
struct bp_session *bp_restype_get_old(ErlNifEnv *env, ERL_NIF_TERM t);

/* From the session destructor: obj (the resource object) is gone. */
void bp_restype_object_gone(void *obj);

#endif /* BP_RESTYPE_H */
