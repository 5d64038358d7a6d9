#include "core/arena_internal.h"

#include <stdlib.h>
#include <string.h>

struct gr_arena_chunk {
  gr_arena_chunk *next;
  size_t cap;
  _Alignas(16) char data[];
};

void gr_arena_init(gr_arena *a) {
  memset(a, 0, sizeof *a);
}

void gr_arena_free(gr_arena *a) {
  gr_arena_chunk *c = a->head;
  while (c) {
    gr_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  memset(a, 0, sizeof *a);
}

void *gr_arena_alloc_aligned(gr_arena *a, size_t bytes, size_t align) {
  size_t at = (a->used + align - 1) & ~(align - 1);
  if (!a->head || at > a->cap || bytes > a->cap - at) {
    size_t cap = a->cap ? a->cap * 2 : 64 * 1024;
    if (cap > 16 * 1024 * 1024) cap = 16 * 1024 * 1024;
    if (cap < bytes) cap = bytes;
    /* calloc: fresh pages come zeroed from the system, so allocations need no memset
     * (the arena never reuses memory) */
    gr_arena_chunk *c = calloc(1, sizeof *c + cap);
    if (!c) return NULL;
    c->next = a->head;
    c->cap = cap;
    a->head = c;
    a->cap = cap;
    a->total += cap;
    at = 0;
  }
  a->used = at + bytes;
  return a->head->data + at;
}

void *gr_arena_alloc(gr_arena *a, size_t bytes) {
  return gr_arena_alloc_aligned(a, bytes, 16);
}

void *gr_arena_memdup(gr_arena *a, const void *p, size_t bytes) {
  void *q = gr_arena_alloc(a, bytes ? bytes : 1);
  if (q && bytes) memcpy(q, p, bytes);
  return q;
}

char *gr_arena_strdup(gr_arena *a, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *q = gr_arena_alloc_aligned(a, n, 1);
  if (q) memcpy(q, s, n);
  return q;
}
