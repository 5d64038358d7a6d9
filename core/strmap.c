#include "core/strmap_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t gr_strhash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h ? h : 1;
}

void gr_strmap_init(gr_strmap *m) {
  memset(m, 0, sizeof *m);
}

void gr_strmap_free(gr_strmap *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static gr_strmap_entry *find_slot(gr_strmap_entry *slots, size_t cap, const char *key, uint64_t h) {
  size_t i = h & (cap - 1);
  for (;;) {
    gr_strmap_entry *e = &slots[i];
    if (!e->key || (e->hash == h && strcmp(e->key, key) == 0)) return e;
    i = (i + 1) & (cap - 1);
  }
}

void *gr_strmap_get(const gr_strmap *m, const char *key) {
  if (!m->cap) return NULL;
  gr_strmap_entry *e = find_slot(m->slots, m->cap, key, gr_strhash(key));
  return e->key ? e->value : NULL;
}

static bool grow(gr_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  gr_strmap_entry *slots = calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key) *find_slot(slots, cap, m->slots[i].key, m->slots[i].hash) = m->slots[i];
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

bool gr_strmap_put(gr_strmap *m, const char *key, void *value) {
  if ((m->count + 1) * 4 > m->cap * 3 && !grow(m)) return false;
  uint64_t h = gr_strhash(key);
  gr_strmap_entry *e = find_slot(m->slots, m->cap, key, h);
  if (!e->key) {
    e->key = key;
    e->hash = h;
    m->count++;
  }
  e->value = value;
  return true;
}

void gr_strmap_remove(gr_strmap *m, const char *key) {
  if (!m->cap) return;
  uint64_t h = gr_strhash(key);
  gr_strmap_entry *e = find_slot(m->slots, m->cap, key, h);
  if (!e->key) return;
  /* Backward-shift deletion keeps probe chains intact. */
  size_t i = (size_t)(e - m->slots);
  e->key = NULL;
  m->count--;
  size_t j = i;
  for (;;) {
    j = (j + 1) & (m->cap - 1);
    gr_strmap_entry *n = &m->slots[j];
    if (!n->key) break;
    size_t home = n->hash & (m->cap - 1);
    bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      m->slots[i] = *n;
      n->key = NULL;
      i = j;
    }
  }
}
