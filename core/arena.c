#include "core/arena_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Chunks from this size on come from gr_pages_alloc and are populated a
 * window at a time ahead of the bump pointer, so a large graph pays one
 * system call per window instead of a page fault per page, and a small one
 * maps at most one window more than it uses. */
#define BIG_CHUNK       (1u << 20)
#define HUGE_PAGE       (2u << 20) /* x86-64's; elsewhere just a rounding */
#define POPULATE_WINDOW HUGE_PAGE

struct gr_arena_chunk {
  gr_arena_chunk *next;
  size_t cap;
  size_t populated; /* big chunks: bytes of data[] already mapped */
  bool big;
  _Alignas(16) char data[];
};

void *gr_pages_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes, MADV_HUGEPAGE); /* fewer TLB misses, faster population; best effort */
#endif
  return p;
}

void gr_pages_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes);
}

void gr_pages_populate(void *p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  size_t page = (size_t)sysconf(_SC_PAGESIZE); /* from the aux vector: no system call */
  uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
  (void)madvise((void *)start, (uintptr_t)p + bytes - start, MADV_POPULATE_WRITE);
#else
  (void)p, (void)bytes;
#endif
}

void gr_arena_init(gr_arena *a) {
  memset(a, 0, sizeof *a);
}

void gr_arena_free(gr_arena *a) {
  gr_arena_chunk *c = a->head;
  while (c) {
    gr_arena_chunk *n = c->next;
    if (c->big)
      gr_pages_free(c, sizeof *c + c->cap);
    else
      free(c);
    c = n;
  }
  memset(a, 0, sizeof *a);
}

void *gr_arena_alloc_aligned(gr_arena *a, size_t bytes, size_t align) {
  size_t at = (a->used + align - 1) & ~(align - 1);
  if (!a->head || at > a->cap || bytes > a->cap - at) {
    /* chunk sizes (header included) double from 64 KiB to 16 MiB: big ones
     * are whole huge pages */
    size_t total = a->head ? 2 * (sizeof(gr_arena_chunk) + a->cap) : 64 * 1024;
    if (total > 16 * 1024 * 1024) total = 16 * 1024 * 1024;
    if (total < sizeof(gr_arena_chunk) + bytes) total = sizeof(gr_arena_chunk) + bytes;
    /* fresh pages come zeroed from the system, so allocations need no memset
     * (the arena never reuses memory) */
    bool big = total >= BIG_CHUNK;
    if (big) total = (total + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    gr_arena_chunk *c = big ? gr_pages_alloc(total) : calloc(1, total);
    if (!c) return NULL;
    size_t cap = total - sizeof *c;
    c->next = a->head;
    c->cap = cap;
    c->big = big;
    a->head = c;
    a->cap = cap;
    a->total += cap;
    at = 0;
  }
  gr_arena_chunk *c = a->head;
  if (c->big && at + bytes > c->populated) {
    size_t end = at + bytes + POPULATE_WINDOW;
    if (end > c->cap) end = c->cap;
    gr_pages_populate(c->data + c->populated, end - c->populated);
    c->populated = end;
  }
  a->used = at + bytes;
  return c->data + at;
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
