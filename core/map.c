#include "core/map.h"

#include "core/arena_internal.h"
#include "core/gr_status.h"

#include <stdlib.h>
#include <string.h>

/* Eight bytes at a time (names and rendezvous keys are long: a byte-wise
 * hash showed in profiles), mixed multiply-xorshift; in-memory use only. */
uint64_t gr_map_hash_str(const char *s) {
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

/* Tables from 1 MiB on come from gr_pages_alloc, populated at once: filling
 * a grown table touches every page anyway, and a page fault per 4 KiB costs
 * microseconds on a virtual machine (measured on the 1M-node DSL benchmark). */
#define BIG_TABLE (1u << 20)

static void *table_new(size_t bytes) {
  if (bytes < BIG_TABLE) return calloc(1, bytes);
  void *p = gr_pages_alloc(bytes);
  if (p) gr_pages_populate(p, bytes);
  return p;
}

static void table_free(void *p, size_t bytes) {
  if (bytes < BIG_TABLE)
    free(p);
  else if (p)
    gr_pages_free(p, bytes);
}

static uint64_t hash_u64(uint64_t k) {
  uint64_t h = (k ^ (k >> 33)) * 0xff51afd7ed558ccdull;
  h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h ? h : 1;
}

void gr_map_init(gr_map *m, gr_map_kind kind) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
}

void gr_map_free(gr_map *m) {
  table_free(m->slots, m->cap * sizeof *m->slots);
  gr_map_init(m, m->kind);
}

size_t gr_map_count(const gr_map *m) {
  return m->count;
}

static bool same_key(const gr_map *m, const gr_map_entry *e, gr_map_key key, uint64_t h) {
  return e->hash == h &&
         (m->kind == GR_MAP_U64 ? e->key.u64 == key.u64 : strcmp(e->key.str, key.str) == 0);
}

/* The slot holding key, or the empty slot where it would go. */
static gr_map_entry *find_slot(const gr_map *m, gr_map_key key, uint64_t h) {
  size_t mask = m->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    gr_map_entry *e = &m->slots[i];
    if (!e->hash || same_key(m, e, key, h)) return e;
  }
}

static bool resize(gr_map *m, size_t cap) {
  gr_map_entry *slots = table_new(cap * sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < m->cap; i++) {
    gr_map_entry *e = &m->slots[i];
    if (!e->hash) continue;
    size_t j = e->hash & (cap - 1);
    while (slots[j].hash) j = (j + 1) & (cap - 1);
    slots[j] = *e;
  }
  table_free(m->slots, m->cap * sizeof *m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

static bool grow(gr_map *m) {
  return resize(m, m->cap ? m->cap * 2 : 16);
}

bool gr_map_reserve(gr_map *m, size_t count) {
  size_t cap = m->cap ? m->cap : 16;
  while (count * 2 > cap) cap *= 2;
  return cap == m->cap || resize(m, cap);
}

static void *get(const gr_map *m, gr_map_key key, uint64_t h) {
  if (!m->count) return NULL;
  gr_map_entry *e = find_slot(m, key, h);
  return e->hash ? e->value : NULL;
}

static void **slot(gr_map *m, gr_map_key key, uint64_t h, bool *added) {
  if (added) *added = false;
  /* When growing fails, a nearly full table still takes new keys while one
   * empty slot is left to end every probe. */
  if ((m->count + 1) * 2 > m->cap && !grow(m) && m->count + 2 > m->cap) {
    gr_map_entry *e = m->cap ? find_slot(m, key, h) : NULL;
    return e && e->hash ? &e->value : NULL;
  }
  gr_map_entry *e = find_slot(m, key, h);
  if (!e->hash) {
    *e = (gr_map_entry){h, key, NULL};
    m->count++;
    if (added) *added = true;
  }
  return &e->value;
}

static void remove_key(gr_map *m, gr_map_key key, uint64_t h) {
  if (!m->count) return;
  gr_map_entry *e = find_slot(m, key, h);
  if (!e->hash) return;
  /* Backward-shift deletion keeps probe chains intact. */
  size_t mask = m->cap - 1, i = (size_t)(e - m->slots);
  e->hash = 0;
  m->count--;
  for (size_t j = (i + 1) & mask; m->slots[j].hash; j = (j + 1) & mask) {
    size_t home = m->slots[j].hash & mask;
    bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      m->slots[i] = m->slots[j];
      m->slots[j].hash = 0;
      i = j;
    }
  }
}

void *gr_map_get_str(const gr_map *m, const char *key) {
  GR_ASSERT(m->kind == GR_MAP_STR);
  return get(m, (gr_map_key){.str = key}, gr_map_hash_str(key));
}

bool gr_map_put_str(gr_map *m, const char *key, void *value) {
  void **v = gr_map_slot_str(m, key, NULL);
  if (v) *v = value;
  return v != NULL;
}

void **gr_map_slot_str(gr_map *m, const char *key, bool *added) {
  GR_ASSERT(m->kind == GR_MAP_STR);
  return slot(m, (gr_map_key){.str = key}, gr_map_hash_str(key), added);
}

void gr_map_remove_str(gr_map *m, const char *key) {
  GR_ASSERT(m->kind == GR_MAP_STR);
  remove_key(m, (gr_map_key){.str = key}, gr_map_hash_str(key));
}

void *gr_map_get_u64(const gr_map *m, uint64_t key) {
  GR_ASSERT(m->kind == GR_MAP_U64);
  return get(m, (gr_map_key){.u64 = key}, hash_u64(key));
}

bool gr_map_put_u64(gr_map *m, uint64_t key, void *value) {
  void **v = gr_map_slot_u64(m, key, NULL);
  if (v) *v = value;
  return v != NULL;
}

void **gr_map_slot_u64(gr_map *m, uint64_t key, bool *added) {
  GR_ASSERT(m->kind == GR_MAP_U64);
  return slot(m, (gr_map_key){.u64 = key}, hash_u64(key), added);
}

void gr_map_remove_u64(gr_map *m, uint64_t key) {
  GR_ASSERT(m->kind == GR_MAP_U64);
  remove_key(m, (gr_map_key){.u64 = key}, hash_u64(key));
}

bool gr_map_next(const gr_map *m, size_t *pos, gr_map_key *key, void **value) {
  for (; *pos < m->cap; (*pos)++) {
    const gr_map_entry *e = &m->slots[*pos];
    if (!e->hash) continue;
    if (key) *key = e->key;
    if (value) *value = e->value;
    (*pos)++;
    return true;
  }
  return false;
}

/* ---- id map -------------------------------------------------------------------------- */

static uint32_t fold(uint64_t h) {
  return (uint32_t)(h ^ (h >> 32));
}

void gr_idmap_init(gr_idmap *m) {
  memset(m, 0, sizeof *m);
}

void gr_idmap_free(gr_idmap *m) {
  table_free(m->slots, m->cap * sizeof *m->slots);
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

bool gr_idmap_reserve(gr_idmap *m, size_t count) {
  size_t cap = m->cap ? m->cap : 256;
  while (count * 4 > cap * 3) cap *= 2;
  if (cap == m->cap) return true;
  uint64_t *slots = table_new(cap * sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i]) idmap_place(slots, cap - 1, m->slots[i]);
  table_free(m->slots, m->cap * sizeof *m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

bool gr_idmap_insert(gr_idmap *m, uint64_t hash, uint32_t id) {
  if ((m->count + 1) * 4 > m->cap * 3 && !gr_idmap_reserve(m, m->cap ? m->cap : 1)) return false;
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
