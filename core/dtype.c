#include "core/gr_dtype.h"

#include <string.h>

size_t gr_dtype_size(gr_dtype t) {
  switch (t) {
#define GR_X_SZ(e, s, ty)                                                                          \
  case e:                                                                                          \
    return sizeof(ty);
    GR_DTYPE_LIST(GR_X_SZ)
#undef GR_X_SZ
    default:
      return 0;
  }
}

const char *gr_dtype_name(gr_dtype t) {
  switch (t) {
#define GR_X_NM(e, s, ty)                                                                          \
  case e:                                                                                          \
    return s;
    GR_DTYPE_LIST(GR_X_NM)
#undef GR_X_NM
    default:
      return "invalid";
  }
}

bool gr_dtype_from_name(const char *name, gr_dtype *out) {
  static const struct {
    const char *alias;
    gr_dtype t;
  } aliases[] = {{"float32", GR_F32}, {"float", GR_F32}, {"float64", GR_F64}, {"double", GR_F64},
                 {"int32", GR_I32},   {"int64", GR_I64}, {"uint8", GR_U8},    {"boolean", GR_BOOL}};
  if (!name) return false;
  for (int t = 0; t < GR_DTYPE_COUNT; t++)
    if (strcmp(name, gr_dtype_name((gr_dtype)t)) == 0) {
      *out = (gr_dtype)t;
      return true;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(name, aliases[i].alias) == 0) {
      *out = aliases[i].t;
      return true;
    }
  return false;
}

bool gr_dtype_is_valid(gr_dtype t) {
  return t >= 0 && t < GR_DTYPE_COUNT;
}
bool gr_dtype_is_float(gr_dtype t) {
  return t == GR_F32 || t == GR_F64;
}
bool gr_dtype_is_integer(gr_dtype t) {
  return t == GR_I32 || t == GR_I64 || t == GR_U8;
}
