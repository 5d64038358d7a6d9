/* Tensors: a dtype, a fully known shape, and a view into a reference-counted
 * buffer (buffer + byte offset). A gr_tensor is a small value; copying the
 * struct does not add a reference — use gr_tensor_ref for that.
 *
 *   gr_tensor t;
 *   gr_error err;
 *   if (gr_tensor_alloc(&t, GR_F32, &(gr_shape){2, {2, 3}}, &err) == GR_OK) {
 *     float *p = gr_tensor_data(&t);
 *     for (int i = 0; i < 6; i++) p[i] = (float)i;
 *     gr_tensor r;
 *     gr_tensor_reshape(&t, &(gr_shape){1, {6}}, &r, &err);  // a free view
 *     gr_tensor_release(&r);
 *     gr_tensor_release(&t);
 *   }
 *
 * Ownership: a tensor returned by alloc/ref/reshape/from_* holds one reference
 * that the caller drops with gr_tensor_release. An "empty" tensor has buf NULL. */
#ifndef GR_TENSOR_H
#define GR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gr_buffer.h"
#include "core/gr_dtype.h"
#include "core/gr_shape.h"
#include "core/gr_status.h"

typedef struct gr_tensor {
  gr_dtype dtype;
  gr_shape shape;
  gr_buffer *buf; /* NULL: empty */
  size_t offset;  /* bytes into buf->data */
} gr_tensor;

/* The empty tensor (no buffer). */
static inline gr_tensor gr_tensor_empty(void) {
  gr_tensor t = {0};
  t.dtype = GR_F32;
  return t;
}
static inline void *gr_tensor_data(const gr_tensor *t) {
  return t->buf ? (char *)t->buf->data + t->offset : NULL;
}
static inline int64_t gr_tensor_num_elements(const gr_tensor *t) {
  return gr_shape_num_elements(&t->shape);
}
static inline size_t gr_tensor_num_bytes(const gr_tensor *t) {
  return (size_t)gr_tensor_num_elements(t) * gr_dtype_size(t->dtype);
}
static inline bool gr_tensor_is_empty(const gr_tensor *t) {
  return t->buf == NULL;
}

/* Allocates an uninitialised tensor of a fully known shape. */
gr_status gr_tensor_alloc(gr_tensor *out, gr_dtype dtype, const gr_shape *shape, gr_error *err);
/* Allocates and zero-fills. */
gr_status gr_tensor_alloc_zeros(gr_tensor *out, gr_dtype dtype, const gr_shape *shape,
                                gr_error *err);
/* Allocates and copies `data` (num_elements * dtype size bytes) in. */
gr_status gr_tensor_from_data(gr_tensor *out, gr_dtype dtype, const gr_shape *shape,
                              const void *data, gr_error *err);
/* Scalar helpers (abort-free: return an empty tensor only if out of memory). */
gr_tensor gr_tensor_scalar_f32(float v);
gr_tensor gr_tensor_scalar_f64(double v);
gr_tensor gr_tensor_scalar_i32(int32_t v);
gr_tensor gr_tensor_scalar_i64(int64_t v);
/* dst = src with one more reference on the buffer. */
void gr_tensor_ref(gr_tensor *dst, const gr_tensor *src);
/* Drops the reference and makes t empty. No-op on an empty tensor. */
void gr_tensor_release(gr_tensor *t);
/* A view of t with another shape of the same number of elements. */
gr_status gr_tensor_reshape(const gr_tensor *t, const gr_shape *shape, gr_tensor *out,
                            gr_error *err);
/* A deep copy into a new buffer. */
gr_status gr_tensor_copy(const gr_tensor *t, gr_tensor *out, gr_error *err);
/* True when t holds the only reference to its buffer and covers it from offset 0. */
bool gr_tensor_is_unique(const gr_tensor *t);
/* Element i converted to double (any dtype); for tests, printing and reductions. */
double gr_tensor_get_f64(const gr_tensor *t, int64_t i);
/* Stores v (converted to t's dtype; integers clamp to their range, NaN -> 0) at element i. */
void gr_tensor_set_f64(gr_tensor *t, int64_t i, double v);

/* Heap tensors for users who prefer pointers: gr_tensor_new_* returns a tensor
 * that gr_tensor_free releases and frees. NULL on failure (err set). */
gr_tensor *gr_tensor_new(gr_dtype dtype, const gr_shape *shape, const void *data, gr_error *err);
void gr_tensor_free(gr_tensor *t);

#endif
