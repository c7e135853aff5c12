/* bp_hash.c -- u64 map and string interning (see bp_hash.h). */
#include "bp_hash.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK (256u * 1024)

uint64_t bp_hash_bytes(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0xcbf29ce484222325ull;

	/* 8 bytes at a time, then the tail: FNV-1a over words, mixed. */
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
		s += 8;
		n -= 8;
	}
	while (n--)
		h = (h ^ *s++) * 0x100000001b3ull;
	return bp_hash_u64(h);
}

void bp_map_init(struct bp_map *m)
{
	memset(m, 0, sizeof *m);
}

void bp_map_free(struct bp_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof *m);
}

uint32_t bp_map_get(const struct bp_map *m, uint64_t key)
{
	if (!m->cap)
		return BP_MAP_NONE;
	size_t mask = m->cap - 1, i = bp_hash_u64(key) & mask;
	for (;;) {
		uint32_t v = m->vals[i];
		if (v == BP_MAP_NONE || m->keys[i] == key)
			return v;
		i = (i + 1) & mask;
	}
}

static int map_grow(struct bp_map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	uint64_t *keys = malloc(cap * sizeof *keys);
	uint32_t *vals = malloc(cap * sizeof *vals);

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -1;
	}
	memset(vals, 0xff, cap * sizeof *vals);
	for (size_t j = 0; j < m->cap; j++) {
		if (m->vals[j] == BP_MAP_NONE)
			continue;
		size_t i = bp_hash_u64(m->keys[j]) & (cap - 1);
		while (vals[i] != BP_MAP_NONE)
			i = (i + 1) & (cap - 1);
		keys[i] = m->keys[j];
		vals[i] = m->vals[j];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

int bp_map_put(struct bp_map *m, uint64_t key, uint32_t val)
{
	if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m) != 0)
		return -1;
	size_t mask = m->cap - 1, i = bp_hash_u64(key) & mask;
	while (m->vals[i] != BP_MAP_NONE && m->keys[i] != key)
		i = (i + 1) & mask;
	if (m->vals[i] == BP_MAP_NONE)
		m->n++;
	m->keys[i] = key;
	m->vals[i] = val;
	return 0;
}

void bp_map_del(struct bp_map *m, uint64_t key)
{
	if (!m->cap)
		return;
	size_t mask = m->cap - 1, i = bp_hash_u64(key) & mask;
	while (m->vals[i] != BP_MAP_NONE && m->keys[i] != key)
		i = (i + 1) & mask;
	if (m->vals[i] == BP_MAP_NONE)
		return;
	m->vals[i] = BP_MAP_NONE;
	m->n--;
	/* Backward-shift: move later entries of the cluster into the hole
	 * when their home slot does not lie cyclically in (hole, j]. */
	size_t hole = i, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (m->vals[j] == BP_MAP_NONE)
			return;
		size_t home = bp_hash_u64(m->keys[j]) & mask;
		int between = hole <= j ? (home > hole && home <= j)
					: (home > hole || home <= j);
		if (between)
			continue;
		m->keys[hole] = m->keys[j];
		m->vals[hole] = m->vals[j];
		m->vals[j] = BP_MAP_NONE;
		hole = j;
	}
}

void bp_strtab_init(struct bp_strtab *t)
{
	memset(t, 0, sizeof *t);
}

void bp_strtab_free(struct bp_strtab *t)
{
	/* Arena chunks are chained through their first pointer-sized bytes. */
	char *c = t->arena;
	while (c) {
		char *next;
		memcpy(&next, c, sizeof next);
		free(c);
		c = next;
	}
	free(t->strs);
	free(t->slots);
	memset(t, 0, sizeof *t);
}

static uint32_t find_slot(const struct bp_strtab *t, const char *s, size_t n,
			  uint64_t h, size_t *slot)
{
	size_t mask = t->nslots - 1, i = h & mask;
	for (;;) {
		uint32_t id = t->slots[i];
		if (id == BP_MAP_NONE) {
			*slot = i;
			return BP_MAP_NONE;
		}
		const struct bp_str *e = &t->strs[id];
		if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0) {
			*slot = i;
			return id;
		}
		i = (i + 1) & mask;
	}
}

uint32_t bp_strtab_find(const struct bp_strtab *t, const char *s, size_t n)
{
	size_t slot;

	if (!t->nslots)
		return BP_MAP_NONE;
	return find_slot(t, s, n, bp_hash_bytes(s, n), &slot);
}

static int strtab_grow_slots(struct bp_strtab *t)
{
	size_t ns = t->nslots ? t->nslots * 2 : 256;
	uint32_t *slots = malloc(ns * sizeof *slots);

	if (!slots)
		return -1;
	memset(slots, 0xff, ns * sizeof *slots);
	for (uint32_t id = 0; id < t->n; id++) {
		size_t i = t->strs[id].hash & (ns - 1);
		while (slots[i] != BP_MAP_NONE)
			i = (i + 1) & (ns - 1);
		slots[i] = id;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = ns;
	return 0;
}

static char *arena_alloc(struct bp_strtab *t, size_t n)
{
	if (!t->arena || t->arena_cap - t->arena_used < n) {
		size_t cap = ARENA_CHUNK;
		if (cap < n + sizeof(char *))
			cap = n + sizeof(char *);
		char *c = malloc(cap);
		if (!c)
			return NULL;
		memcpy(c, &t->arena, sizeof t->arena);
		t->arena = c;
		t->arena_cap = cap;
		t->arena_used = sizeof(char *);
	}
	char *p = t->arena + t->arena_used;
	t->arena_used += n;
	return p;
}

uint32_t bp_strtab_intern(struct bp_strtab *t, const char *s, size_t n)
{
	uint64_t h = bp_hash_bytes(s, n);
	size_t slot;
	uint32_t id;

	if (n > UINT32_MAX - 1)
		return BP_MAP_NONE;
	if ((size_t)(t->n + 1) * 4 > t->nslots * 3 &&
	    strtab_grow_slots(t) != 0)
		return BP_MAP_NONE;
	id = find_slot(t, s, n, h, &slot);
	if (id != BP_MAP_NONE)
		return id;
	if (t->n == UINT32_MAX - 1)
		return BP_MAP_NONE;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 256;
		struct bp_str *strs = realloc(t->strs, cap * sizeof *strs);
		if (!strs)
			return BP_MAP_NONE;
		t->strs = strs;
		t->cap = cap;
	}
	char *copy = arena_alloc(t, n + 1);
	if (!copy)
		return BP_MAP_NONE;
	memcpy(copy, s, n);
	copy[n] = '\0';
	id = t->n++;
	t->strs[id] = (struct bp_str){copy, (uint32_t)n, h};
	t->slots[slot] = id;
	return id;
}
