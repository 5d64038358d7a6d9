#include "core/gr_shape.h"

#include <stdio.h>
#include <string.h>

gr_shape gr_shape_make(int rank, const int64_t *dims) {
  gr_shape s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  for (int i = 0; dims && i < rank && i < GR_MAX_RANK; i++) s.dims[i] = dims[i];
  return s;
}

gr_shape gr_shape_scalar(void) {
  return gr_shape_make(0, NULL);
}

gr_shape gr_shape_unknown(void) {
  gr_shape s = gr_shape_make(0, NULL);
  s.rank = -1;
  return s;
}

int64_t gr_shape_num_elements(const gr_shape *s) {
  if (s->rank < 0) return -1;
  int64_t n = 1;
  bool overflow = false;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0) return -1;
    if (__builtin_mul_overflow(n, s->dims[i], &n)) overflow = true;
  }
  return overflow ? INT64_MAX : n;
}

bool gr_shape_is_fully_known(const gr_shape *s) {
  return gr_shape_num_elements(s) >= 0;
}

bool gr_shape_equal(const gr_shape *a, const gr_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool gr_shape_compatible(const gr_shape *a, const gr_shape *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return false;
  return true;
}

char *gr_shape_str(const gr_shape *s, char *buf) {
  if (s->rank < 0) {
    strcpy(buf, "<unknown>");
    return buf;
  }
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0)
      n += (size_t)snprintf(buf + n, GR_SHAPE_STR_MAX - n, "%s?", i ? ", " : "");
    else
      n += (size_t)snprintf(buf + n, GR_SHAPE_STR_MAX - n, "%s%lld", i ? ", " : "",
                            (long long)s->dims[i]);
  }
  buf[n++] = ']';
  buf[n] = '\0';
  return buf;
}

bool gr_shape_broadcast(const gr_shape *a, const gr_shape *b, gr_shape *out) {
  if (a->rank < 0 || b->rank < 0) {
    *out = gr_shape_unknown();
    return true;
  }
  int r = a->rank > b->rank ? a->rank : b->rank;
  gr_shape o = gr_shape_make(r, NULL);
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da == 1)
      o.dims[i] = db;
    else if (db == 1)
      o.dims[i] = da;
    else if (da < 0 || db < 0)
      o.dims[i] = da < 0 ? db : da; /* unknown vs n: assume n (checked at run time) */
    else if (da == db)
      o.dims[i] = da;
    else
      return false;
  }
  *out = o;
  return true;
}

bool gr_shape_normalize_axis(int rank, int64_t axis, int *out) {
  if (axis < -rank || axis >= rank) return false;
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}
