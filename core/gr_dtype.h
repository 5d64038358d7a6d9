/* Element types of tensors.
 *
 *   gr_dtype t;
 *   if (gr_dtype_from_name("f32", &t)) printf("%zu\n", gr_dtype_size(t)); // 4
 */
#ifndef GR_DTYPE_H
#define GR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(enum, name, C type) */
#define GR_DTYPE_LIST(X)                                                                           \
  X(GR_F32, "f32", float)                                                                          \
  X(GR_F64, "f64", double)                                                                         \
  X(GR_I32, "i32", int32_t)                                                                        \
  X(GR_I64, "i64", int64_t)                                                                        \
  X(GR_U8, "u8", uint8_t)                                                                          \
  X(GR_BOOL, "bool", bool)

typedef enum gr_dtype {
#define GR_X_DT(e, s, t) e,
  GR_DTYPE_LIST(GR_X_DT)
#undef GR_X_DT
      GR_DTYPE_COUNT,
  GR_DTYPE_INVALID = -1
} gr_dtype;

size_t gr_dtype_size(gr_dtype t);
const char *gr_dtype_name(gr_dtype t);
/* Accepts "f32", "float32", "float", "f64", "float64", "double", "i32", "int32",
 * "i64", "int64", "u8", "uint8", "bool". Returns false when unknown. */
bool gr_dtype_from_name(const char *name, gr_dtype *out);
bool gr_dtype_is_float(gr_dtype t);
bool gr_dtype_is_integer(gr_dtype t);
bool gr_dtype_is_valid(gr_dtype t);

#endif
