/* Typed node attributes: int, float, bool, string, dtype, shape, tensor and
 * lists of ints and floats.
 *
 *   gr_attr attrs[] = {gr_attr_int("axis", 1), gr_attr_bool("keepdims", true)};
 *
 * The constructors below make values that point at the caller's memory
 * (strings, lists, tensors); the graph copies what it keeps into its arena
 * when a node is added, so the caller may free its copies afterwards. */
#ifndef GR_ATTR_H
#define GR_ATTR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_dtype.h"
#include "core/gr_shape.h"
#include "core/gr_tensor.h"

#define GR_ATTR_TYPE_LIST(X)                                                                       \
  X(GR_ATTR_INT, "int")                                                                            \
  X(GR_ATTR_FLOAT, "float")                                                                        \
  X(GR_ATTR_BOOL, "bool")                                                                          \
  X(GR_ATTR_STRING, "string")                                                                      \
  X(GR_ATTR_DTYPE, "dtype")                                                                        \
  X(GR_ATTR_SHAPE, "shape")                                                                        \
  X(GR_ATTR_TENSOR, "tensor")                                                                      \
  X(GR_ATTR_INTS, "list(int)")                                                                     \
  X(GR_ATTR_FLOATS, "list(float)")

typedef enum gr_attr_type {
#define GR_X_AT(e, s) e,
  GR_ATTR_TYPE_LIST(GR_X_AT)
#undef GR_X_AT
      GR_ATTR_TYPE_COUNT
} gr_attr_type;

typedef struct gr_attr_value {
  gr_attr_type type;
  union {
    int64_t i;
    double f;
    bool b;
    const char *s;
    gr_dtype dtype;
    gr_shape shape;
    gr_tensor tensor; /* a node holds one reference */
    struct {
      int n;
      const int64_t *v;
    } ints;
    struct {
      int n;
      const double *v;
    } floats;
  };
} gr_attr_value;

typedef struct gr_attr {
  const char *name;
  gr_attr_value value;
} gr_attr;

const char *gr_attr_type_name(gr_attr_type t);

static inline gr_attr gr_attr_int(const char *name, int64_t v) {
  return (gr_attr){name, {.type = GR_ATTR_INT, .i = v}};
}
static inline gr_attr gr_attr_float(const char *name, double v) {
  return (gr_attr){name, {.type = GR_ATTR_FLOAT, .f = v}};
}
static inline gr_attr gr_attr_bool(const char *name, bool v) {
  return (gr_attr){name, {.type = GR_ATTR_BOOL, .b = v}};
}
static inline gr_attr gr_attr_string(const char *name, const char *v) {
  return (gr_attr){name, {.type = GR_ATTR_STRING, .s = v}};
}
static inline gr_attr gr_attr_dtype(const char *name, gr_dtype v) {
  return (gr_attr){name, {.type = GR_ATTR_DTYPE, .dtype = v}};
}
static inline gr_attr gr_attr_shape(const char *name, gr_shape v) {
  return (gr_attr){name, {.type = GR_ATTR_SHAPE, .shape = v}};
}
/* The tensor is referenced (not copied) by the node that receives it. */
static inline gr_attr gr_attr_tensor(const char *name, gr_tensor v) {
  return (gr_attr){name, {.type = GR_ATTR_TENSOR, .tensor = v}};
}
static inline gr_attr gr_attr_ints(const char *name, int n, const int64_t *v) {
  return (gr_attr){name, {.type = GR_ATTR_INTS, .ints = {n, v}}};
}
static inline gr_attr gr_attr_floats(const char *name, int n, const double *v) {
  return (gr_attr){name, {.type = GR_ATTR_FLOATS, .floats = {n, v}}};
}

#endif
