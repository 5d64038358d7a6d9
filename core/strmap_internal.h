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

#endif
