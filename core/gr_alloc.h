/* Arrays on the heap with the size checked: n elements of size bytes each,
 * or NULL when n * size does not fit in a size_t (nothing is then allocated
 * or freed) or the allocator fails. Use them for every malloc or realloc
 * whose size is a count times an element size; calloc checks by itself.
 *
 *   int *order = gr_alloc_array((size_t)n + 1, sizeof *order);
 *   if (!order) return gr_error_set_oom(err);
 *   int *more = gr_realloc_array(order, (size_t)cap, sizeof *more);
 *   if (!more) { free(order); return gr_error_set_oom(err); }
 *   free(more);
 *
 * They call malloc and realloc themselves (so an allocator wrapped with
 * -Wl,--wrap, as test_alloc_failures does, sees every call) and behave as
 * those otherwise, including for a size of 0. */
#ifndef GR_ALLOC_H
#define GR_ALLOC_H

#include <stddef.h>

/* malloc(n * size), or NULL. The caller owns the result and frees it with free(). */
void *gr_alloc_array(size_t n, size_t size);
/* realloc(p, n * size), or NULL: p is then unchanged and still the caller's.
 * On success p is consumed; the caller frees the result with free(). */
void *gr_realloc_array(void *p, size_t n, size_t size);

#endif
