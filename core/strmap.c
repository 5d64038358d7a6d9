#include "core/strmap_internal.h"

#include "core/arena_internal.h"

#include <stdlib.h>
#include <string.h>

/* Eight bytes at a time (names and rendezvous keys are long: a byte-wise
 * hash showed in profiles), mixed multiply-xorshift; in-memory use only. */
uint64_t gr_strhash(const char *s) {
  size_t n = strlen(s);
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n, w;
  for (; n >= 8; s += 8, n -= 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  w = 0;
  memcpy(&w, s, n);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
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
  if (!m->count) return NULL;
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

/* ---- id map -------------------------------------------------------------------------- */

static uint32_t fold(uint64_t h) {
  return (uint32_t)(h ^ (h >> 32));
}

void gr_idmap_init(gr_idmap *m) {
  memset(m, 0, sizeof *m);
}

/* Tables from 1 MiB on come from gr_pages_alloc, populated at once: filling
 * a grown table touches every page anyway. */
#define IDMAP_BIG_SLOTS ((1u << 20) / sizeof(uint64_t))

static uint64_t *idmap_slots_new(size_t cap) {
  if (cap < IDMAP_BIG_SLOTS) return calloc(cap, sizeof(uint64_t));
  uint64_t *s = gr_pages_alloc(cap * sizeof *s);
  if (s) gr_pages_populate(s, cap * sizeof *s);
  return s;
}

static void idmap_slots_free(uint64_t *s, size_t cap) {
  if (cap < IDMAP_BIG_SLOTS)
    free(s);
  else
    gr_pages_free(s, cap * sizeof *s);
}

void gr_idmap_free(gr_idmap *m) {
  idmap_slots_free(m->slots, m->cap);
  memset(m, 0, sizeof *m);
}

int64_t gr_idmap_find(const gr_idmap *m, uint64_t hash, const void *key, gr_idmap_eq_fn eq,
                      const void *ctx) {
  if (!m->count) return -1;
  uint32_t h = fold(hash);
  size_t mask = m->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    uint64_t s = m->slots[i];
    if (!s) return -1;
    if ((uint32_t)(s >> 32) == h) {
      uint32_t id = (uint32_t)s - 1;
      if (eq(ctx, id, key)) return id;
    }
  }
}

static void idmap_place(uint64_t *slots, size_t mask, uint64_t s) {
  size_t i = (s >> 32) & mask;
  while (slots[i]) i = (i + 1) & mask;
  slots[i] = s;
}

bool gr_idmap_insert(gr_idmap *m, uint64_t hash, uint32_t id) {
  if ((m->count + 1) * 4 > m->cap * 3) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    uint64_t *slots = idmap_slots_new(cap);
    if (!slots) return false;
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i]) idmap_place(slots, cap - 1, m->slots[i]);
    idmap_slots_free(m->slots, m->cap);
    m->slots = slots;
    m->cap = cap;
  }
  idmap_place(m->slots, m->cap - 1, (uint64_t)fold(hash) << 32 | ((uint64_t)id + 1));
  m->count++;
  return true;
}

void gr_idmap_remove(gr_idmap *m, uint64_t hash, uint32_t id) {
  if (!m->count) return;
  uint64_t want = (uint64_t)fold(hash) << 32 | ((uint64_t)id + 1);
  size_t mask = m->cap - 1, i = (want >> 32) & mask;
  for (; m->slots[i] != want; i = (i + 1) & mask)
    if (!m->slots[i]) return;
  /* Backward-shift deletion keeps probe chains intact. */
  m->slots[i] = 0;
  m->count--;
  for (size_t j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
    size_t home = (m->slots[j] >> 32) & mask;
    bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      m->slots[i] = m->slots[j];
      m->slots[j] = 0;
      i = j;
    }
  }
}
