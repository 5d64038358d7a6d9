/* Reference-counted, 64-byte-aligned memory buffers from a size-class pool.
 *
 *   gr_buffer *b = gr_buffer_alloc(4096);      // refcount 1, NULL if out of memory
 *   gr_buffer_retain(b);                        // refcount 2
 *   gr_buffer_release(b); gr_buffer_release(b); // back to the pool
 *
 * Buffers of up to GR_BUFFER_POOL_MAX_CLASS bytes are recycled through
 * per-size-class free lists, so a steady training loop allocates nothing from
 * the system after its first step. The pool keeps at most a bounded number of
 * idle bytes (gr_buffer_pool_set_limit); anything above goes back to libc. */
#ifndef GR_BUFFER_H
#define GR_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GR_BUFFER_ALIGN 64

typedef struct gr_buffer {
  int refcount;   /* atomic; use retain/release */
  int size_class; /* pool class, or -1 when not pooled */
  size_t capacity;
  void *data; /* GR_BUFFER_ALIGN-aligned */
  /* For buffers wrapping external memory: called on last release. */
  void (*deleter)(void *data, void *arg);
  void *deleter_arg;
} gr_buffer;

/* A new buffer with at least `bytes` of capacity (bytes may be 0), refcount 1.
 * Returns NULL when the system is out of memory. Contents are uninitialised. */
gr_buffer *gr_buffer_alloc(size_t bytes);
/* Wraps external memory; `deleter(data, arg)` runs on the last release. The
 * caller keeps data alive until then. Returns NULL when out of memory. */
gr_buffer *gr_buffer_wrap(void *data, size_t bytes, void (*deleter)(void *, void *), void *arg);
void gr_buffer_retain(gr_buffer *b);
/* Drops one reference; the last one returns the buffer to the pool. NULL is a no-op. */
void gr_buffer_release(gr_buffer *b);
/* True when the caller holds the only reference (safe to write in place). */
bool gr_buffer_is_unique(const gr_buffer *b);

typedef struct gr_buffer_pool_stats {
  uint64_t system_allocs; /* allocations that went to libc */
  uint64_t pool_hits;     /* allocations served from a free list */
  size_t idle_bytes;      /* bytes currently parked in free lists */
  size_t live_bytes;      /* bytes in buffers currently referenced */
} gr_buffer_pool_stats;

void gr_buffer_pool_get_stats(gr_buffer_pool_stats *out);
/* Upper bound on idle bytes kept in the pool (default 1 GiB; 0 under
 * AddressSanitizer so that ASan sees every free). 0 turns pooling off. */
void gr_buffer_pool_set_limit(size_t bytes);
/* Returns every idle buffer to libc (e.g. before exit or in leak checks). */
void gr_buffer_pool_trim(void);

#endif
