#include "core/gr_tensor.h"

#include <stdlib.h>
#include <string.h>

gr_status gr_tensor_alloc(gr_tensor *out, gr_dtype dtype, const gr_shape *shape, gr_error *err) {
  *out = gr_tensor_empty();
  if (!gr_dtype_is_valid(dtype))
    return gr_error_set(err, GR_ERR_DTYPE, "invalid dtype %d", (int)dtype);
  if (shape->rank < 0 || shape->rank > GR_MAX_RANK)
    return gr_error_set(err, GR_ERR_SHAPE, "rank %d is out of range [0, %d]", shape->rank,
                        GR_MAX_RANK);
  int64_t n = 1;
  for (int i = 0; i < shape->rank; i++) {
    int64_t d = shape->dims[i];
    if (d < 0) {
      char b[GR_SHAPE_STR_MAX];
      return gr_error_set(err, GR_ERR_SHAPE, "cannot allocate a tensor of partly unknown shape %s",
                          gr_shape_str(shape, b));
    }
    if (d && n > ((int64_t)1 << 50) / d)
      return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "tensor too large");
    n *= d;
  }
  size_t bytes = (size_t)n * gr_dtype_size(dtype);
  gr_buffer *b = gr_buffer_alloc(bytes);
  if (!b) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory (%zu bytes)", bytes);
  out->dtype = dtype;
  out->shape = *shape;
  out->buf = b;
  out->offset = 0;
  return GR_OK;
}

gr_status gr_tensor_alloc_zeros(gr_tensor *out, gr_dtype dtype, const gr_shape *shape,
                                gr_error *err) {
  GR_TRY(gr_tensor_alloc(out, dtype, shape, err));
  memset(gr_tensor_data(out), 0, gr_tensor_num_bytes(out));
  return GR_OK;
}

gr_status gr_tensor_from_data(gr_tensor *out, gr_dtype dtype, const gr_shape *shape,
                              const void *data, gr_error *err) {
  GR_TRY(gr_tensor_alloc(out, dtype, shape, err));
  size_t n = gr_tensor_num_bytes(out);
  if (n) memcpy(gr_tensor_data(out), data, n);
  return GR_OK;
}

#define GR_SCALAR_CTOR(name, ctype, dt)                                                            \
  gr_tensor name(ctype v) {                                                                        \
    gr_tensor t;                                                                                   \
    gr_shape s = gr_shape_scalar();                                                                \
    if (gr_tensor_from_data(&t, dt, &s, &v, NULL) != GR_OK) return gr_tensor_empty();              \
    return t;                                                                                      \
  }
GR_SCALAR_CTOR(gr_tensor_scalar_f32, float, GR_F32)
GR_SCALAR_CTOR(gr_tensor_scalar_f64, double, GR_F64)
GR_SCALAR_CTOR(gr_tensor_scalar_i32, int32_t, GR_I32)
GR_SCALAR_CTOR(gr_tensor_scalar_i64, int64_t, GR_I64)

void gr_tensor_ref(gr_tensor *dst, const gr_tensor *src) {
  *dst = *src;
  if (src->buf) gr_buffer_retain(src->buf);
}

void gr_tensor_release(gr_tensor *t) {
  if (t->buf) gr_buffer_release(t->buf);
  t->buf = NULL;
  t->offset = 0;
}

gr_status gr_tensor_reshape(const gr_tensor *t, const gr_shape *shape, gr_tensor *out,
                            gr_error *err) {
  if (gr_shape_num_elements(shape) != gr_tensor_num_elements(t)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_error_set(err, GR_ERR_SHAPE, "cannot reshape %s into %s", gr_shape_str(&t->shape, a),
                        gr_shape_str(shape, b));
  }
  gr_tensor_ref(out, t);
  out->shape = *shape;
  return GR_OK;
}

gr_status gr_tensor_copy(const gr_tensor *t, gr_tensor *out, gr_error *err) {
  return gr_tensor_from_data(out, t->dtype, &t->shape, gr_tensor_data(t), err);
}

bool gr_tensor_is_unique(const gr_tensor *t) {
  return t->buf && t->offset == 0 && gr_buffer_is_unique(t->buf);
}

double gr_tensor_get_f64(const gr_tensor *t, int64_t i) {
  const void *p = gr_tensor_data(t);
  switch (t->dtype) {
    case GR_F32:
      return ((const float *)p)[i];
    case GR_F64:
      return ((const double *)p)[i];
    case GR_I32:
      return ((const int32_t *)p)[i];
    case GR_I64:
      return (double)((const int64_t *)p)[i];
    case GR_U8:
      return ((const uint8_t *)p)[i];
    case GR_BOOL:
      return ((const bool *)p)[i];
    default:
      return 0;
  }
}

/* double -> integer without undefined behaviour: NaN -> 0, clamped to the range. */
static double clamp_to(double v, double lo, double hi) {
  if (v != v) return 0;
  return v < lo ? lo : v > hi ? hi : v;
}

void gr_tensor_set_f64(gr_tensor *t, int64_t i, double v) {
  void *p = gr_tensor_data(t);
  switch (t->dtype) {
    case GR_F32:
      ((float *)p)[i] = (float)v;
      break;
    case GR_F64:
      ((double *)p)[i] = v;
      break;
    case GR_I32:
      ((int32_t *)p)[i] = (int32_t)clamp_to(v, INT32_MIN, INT32_MAX);
      break;
    case GR_I64:
      /* 2^63 is not representable: anything at or above it saturates */
      ((int64_t *)p)[i] = v >= 9223372036854775808.0
                              ? INT64_MAX
                              : (int64_t)clamp_to(v, -9223372036854775808.0, 0x1p63);
      break;
    case GR_U8:
      ((uint8_t *)p)[i] = (uint8_t)clamp_to(v, 0, 255);
      break;
    case GR_BOOL:
      ((bool *)p)[i] = v != 0;
      break;
    default:
      break;
  }
}

gr_tensor *gr_tensor_new(gr_dtype dtype, const gr_shape *shape, const void *data, gr_error *err) {
  gr_tensor *t = malloc(sizeof *t);
  if (!t) {
    gr_error_set_oom(err);
    return NULL;
  }
  gr_status s = data ? gr_tensor_from_data(t, dtype, shape, data, err)
                     : gr_tensor_alloc_zeros(t, dtype, shape, err);
  if (s != GR_OK) {
    free(t);
    return NULL;
  }
  return t;
}

void gr_tensor_free(gr_tensor *t) {
  if (!t) return;
  gr_tensor_release(t);
  free(t);
}
