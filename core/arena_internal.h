/* Bump allocator for graph-lifetime data (names, attrs, edge arrays).
 * Everything allocated from an arena is freed by gr_arena_free in one call. */
#ifndef GR_ARENA_INTERNAL_H
#define GR_ARENA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gr_arena_chunk gr_arena_chunk;
typedef struct gr_arena {
  gr_arena_chunk *head;
  size_t used, cap; /* in the head chunk */
  size_t total;     /* bytes allocated from libc */
} gr_arena;

void gr_arena_init(gr_arena *a);
void gr_arena_free(gr_arena *a);
/* 16-byte aligned, zeroed memory; NULL when out of memory. */
void *gr_arena_alloc(gr_arena *a, size_t bytes);
/* Zeroed memory aligned to align (a power of two, at most 16): small records
 * and strings need not pay for 16-byte alignment. */
void *gr_arena_alloc_aligned(gr_arena *a, size_t bytes, size_t align);
/* A copy of s with no padding (byte-aligned); NULL for NULL or out of memory. */
char *gr_arena_strdup(gr_arena *a, const char *s);
/* A copy of bytes bytes at p, 16-byte aligned. */
void *gr_arena_memdup(gr_arena *a, const void *p, size_t bytes);

/* Large zeroed blocks (arena chunks, hash tables) straight from the system,
 * their pages mapped in one call rather than by a fault per page on first
 * touch (a fault costs microseconds on a virtual machine). NULL when out of
 * memory. Free with gr_pages_free and the same size. */
void *gr_pages_alloc(size_t bytes);
void gr_pages_free(void *p, size_t bytes);
/* Maps the pages of [p, p + bytes) now; best effort (they fault in on first
 * touch otherwise). p is inside a gr_pages_alloc block. */
void gr_pages_populate(void *p, size_t bytes);

#endif
