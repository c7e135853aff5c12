/* bp_hash.h -- the CLI's hash tables: a map from 64-bit keys to 32-bit
 * values (open addressing, linear probing, backward-shift deletion) and a
 * string interning table that gives each distinct string a dense id.
 *
 * Neither keeps pointers into caller memory: interned strings are copied
 * into an arena owned by the table.
 */
#ifndef BP_HASH_H
#define BP_HASH_H

#include <stddef.h>
#include <stdint.h>

#define BP_MAP_NONE UINT32_MAX /* "no value"; cannot be stored */

struct bp_map {
	uint64_t *keys;  /* owned */
	uint32_t *vals;  /* owned; BP_MAP_NONE marks an empty slot */
	size_t cap;      /* power of two, 0 before the first insert */
	size_t n;        /* entries */
};

/* A 64-bit mixer (splitmix64 finaliser); also used to combine keys. */
static inline uint64_t bp_hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* Hash of n bytes (FNV-1a 64, mixed).  Never fails. */
uint64_t bp_hash_bytes(const void *p, size_t n);

/* Zero-initialised struct bp_map is an empty map; so is this. */
void bp_map_init(struct bp_map *m);
void bp_map_free(struct bp_map *m);

/* Value for key, or BP_MAP_NONE. */
uint32_t bp_map_get(const struct bp_map *m, uint64_t key);

/*
 * Sets key to val (val != BP_MAP_NONE), replacing any previous value.
 * Returns 0, or -1 if the table could not grow (the map is unchanged).
 */
int bp_map_put(struct bp_map *m, uint64_t key, uint32_t val);

/* Removes key if present. */
void bp_map_del(struct bp_map *m, uint64_t key);

struct bp_str {
	const char *s;   /* NUL-terminated, in the table's arena */
	uint32_t len;
	uint64_t hash;
};

struct bp_strtab {
	struct bp_str *strs;   /* owned; indexed by id */
	uint32_t n, cap;
	uint32_t *slots;       /* owned; ids, BP_MAP_NONE = empty */
	size_t nslots;
	char *arena;           /* current arena chunk, owned (chained) */
	size_t arena_used, arena_cap;
};

void bp_strtab_init(struct bp_strtab *t);
void bp_strtab_free(struct bp_strtab *t);

/*
 * Id of the string s (n bytes, need not be NUL-terminated), adding it if
 * new.  Ids are dense, starting at 0, in order of first appearance.
 * Returns BP_MAP_NONE only when memory runs out.
 */
uint32_t bp_strtab_intern(struct bp_strtab *t, const char *s, size_t n);

/* Id of s if present, else BP_MAP_NONE. */
uint32_t bp_strtab_find(const struct bp_strtab *t, const char *s, size_t n);

static inline const struct bp_str *bp_strtab_get(const struct bp_strtab *t,
						 uint32_t id)
{
	return &t->strs[id];
}

#endif /* BP_HASH_H */
