/* Overflow-checked array allocation (gr_alloc_array, gr_realloc_array). */
#include <stdlib.h>

#include "core/gr_alloc.h"

void *gr_alloc_array(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
  return malloc(bytes);
}

void *gr_realloc_array(void *p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
  return realloc(p, bytes);
}
