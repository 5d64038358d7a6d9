/* Open-addressing hash map from C strings to pointers. Keys are not copied:
 * the caller keeps them alive as long as the map (graphs keep them in their arena). */
#ifndef GR_STRMAP_INTERNAL_H
#define GR_STRMAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gr_strmap_entry {
  const char *key;
  void *value;
  uint64_t hash;
} gr_strmap_entry;

typedef struct gr_strmap {
  gr_strmap_entry *slots;
  size_t cap, count;
} gr_strmap;

uint64_t gr_strhash(const char *s);
void gr_strmap_init(gr_strmap *m);
void gr_strmap_free(gr_strmap *m);
void *gr_strmap_get(const gr_strmap *m, const char *key);
/* Inserts or replaces; returns false when out of memory. */
bool gr_strmap_put(gr_strmap *m, const char *key, void *value);
/* Removes key if present. */
void gr_strmap_remove(gr_strmap *m, const char *key);

/* Open-addressing index of ids by keys that live elsewhere (a graph's node
 * names, its shapes): a slot is 8 bytes, a 32-bit hash and id + 1, so a
 * million names take 16 MiB and growing never touches the keys. eq(ctx, id,
 * key) tells whether a stored id has the key. */
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
/* Adds id under a key (with hash hash) that is not in the map yet; false
 * when out of memory. */
bool gr_idmap_insert(gr_idmap *m, uint64_t hash, uint32_t id);
/* Removes id, stored under a key with hash hash, if present. */
void gr_idmap_remove(gr_idmap *m, uint64_t hash, uint32_t id);

#endif
