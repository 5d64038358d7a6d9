/* The engine's one hash map, and a compact index of ids for very large tables.
 *
 * gr_map: open addressing with linear probing (at most half full: a miss
 * probes ~2.5 slots) and backward-shift deletion;
 * keys are C strings or 64-bit integers (the kind is chosen at init), values
 * are pointers. String keys are borrowed, not copied: the caller keeps each
 * key alive and unchanged while it is in the map (graphs keep names in their
 * arena; an owned entry can hold its own key). Not thread-safe: callers lock.
 *
 *   gr_map m;
 *   gr_map_init(&m, GR_MAP_STR);
 *   if (!gr_map_put_str(&m, node->name, node)) return oom();
 *   gr_node *n = gr_map_get_str(&m, "dense/w");      // NULL when absent
 *   void **slot = gr_map_slot_str(&m, "x", &added); // get or insert (value NULL)
 *   for (size_t i = 0; gr_map_next(&m, &i, &key, &value);) ...
 *   gr_map_free(&m);
 *
 * Values may be any pointer, including integers cast through intptr_t; a
 * stored NULL reads back as absent from get (use the slot call to tell). */
#ifndef GR_MAP_H
#define GR_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gr_map_kind { GR_MAP_STR, GR_MAP_U64 } gr_map_kind;

typedef union gr_map_key {
  const char *str;
  uint64_t u64;
} gr_map_key;

typedef struct gr_map_entry {
  uint64_t hash; /* 0: empty slot */
  gr_map_key key;
  void *value;
} gr_map_entry;

typedef struct gr_map {
  gr_map_entry *slots;
  size_t cap, count;
  gr_map_kind kind;
} gr_map;

/* A fast 64-bit hash of a string (never 0), for in-memory use only: digests
 * that are stored or sent use XXH64 (checkpoints). */
uint64_t gr_map_hash_str(const char *s);

void gr_map_init(gr_map *m, gr_map_kind kind); /* allocates nothing */
void gr_map_free(gr_map *m);                   /* the keys and values stay the caller's */
size_t gr_map_count(const gr_map *m);
/* Room for count keys without growing (a table sized once when the caller
 * knows); false when out of memory (the map is unchanged). */
bool gr_map_reserve(gr_map *m, size_t count);

/* String keys (a GR_MAP_STR map). put inserts or replaces, false when out of
 * memory (the map is unchanged). slot returns the value's slot, inserting the
 * key with value NULL (and *added true) when absent; NULL when out of memory. */
void *gr_map_get_str(const gr_map *m, const char *key);
bool gr_map_put_str(gr_map *m, const char *key, void *value);
void **gr_map_slot_str(gr_map *m, const char *key, bool *added);
void gr_map_remove_str(gr_map *m, const char *key);

/* The same for 64-bit integer keys (a GR_MAP_U64 map). */
void *gr_map_get_u64(const gr_map *m, uint64_t key);
bool gr_map_put_u64(gr_map *m, uint64_t key, void *value);
void **gr_map_slot_u64(gr_map *m, uint64_t key, bool *added);
void gr_map_remove_u64(gr_map *m, uint64_t key);

/* Iterates: start with *pos = 0; each call gives the next entry and returns
 * true, false after the last. The map must not change during the walk. key
 * and value may be NULL. */
bool gr_map_next(const gr_map *m, size_t *pos, gr_map_key *key, void **value);

/* gr_idmap: an open-addressing index of ids by keys that live elsewhere (a
 * graph's node names, its shapes, CSE's node signatures): a slot is 8 bytes,
 * a 32-bit hash and id + 1, so a million names take 16 MiB and growing never
 * touches the keys. eq(ctx, id, key) tells whether a stored id has the key. */
typedef bool (*gr_idmap_eq_fn)(const void *ctx, uint32_t id, const void *key);
typedef struct gr_idmap {
  uint64_t *slots;
  size_t cap, count;
} gr_idmap;

void gr_idmap_init(gr_idmap *m);
void gr_idmap_free(gr_idmap *m);
/* The id stored under key, whose hash is hash; -1 if none. */
int64_t gr_idmap_find(const gr_idmap *m, uint64_t hash, const void *key, gr_idmap_eq_fn eq,
                      const void *ctx);
/* Room for count ids without growing; false when out of memory. */
bool gr_idmap_reserve(gr_idmap *m, size_t count);
/* Adds id under a key (with hash hash) that is not in the map yet; false
 * when out of memory. */
bool gr_idmap_insert(gr_idmap *m, uint64_t hash, uint32_t id);
/* Removes id, stored under a key with hash hash, if present. */
void gr_idmap_remove(gr_idmap *m, uint64_t hash, uint32_t id);

#endif
