/* Max pooling over disjoint windows and its gradient, f32 NHWC, channels
 * innermost (vec_internal.h). The gradient writes every element of dx
 * once (no zeroing pass, no scatter): each input element is in at most one
 * window, so it is that window's dy where it is the first maximum, else 0. */
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/vec_internal.h"

/* Threads get chunks of at least this many bytes. */
#define VEC_CHUNK_BYTES (256.0 * 1024)

int gr_vec_chunks(const gr_kernel_ctx *ctx, int64_t units, double bytes) {
  int t = ctx ? gr_kernel_parallel_threads(ctx) : 1;
  if (t <= 1 || units <= 1 || bytes < 2 * VEC_CHUNK_BYTES) return 1;
  int64_t n = (int64_t)(bytes / VEC_CHUNK_BYTES);
  int64_t most = 4 * (int64_t)t;
  if (n > most) n = most;
  if (n > units) n = units;
  return n < 1 ? 1 : (int)n;
}

bool gr_vec_pool_disjoint(const gr_conv_geom *g) {
  return g->sh >= g->kh && g->sw >= g->kw && g->kh * g->kw < 255;
}

/* Channels are done in blocks of at most this many (scratch on the stack). */
#define CB 256

/* best/arg of cn channels (x's rows C apart) over one window's elements,
 * row by row; NaN wins and stays. */
GR_VEC_CLONES
static void window_max(const float *x, int64_t C, int64_t cn, int64_t w, const int64_t r[4],
                       int64_t kw, int64_t wy0, int64_t wx0, float *best, uint8_t *arg) {
  bool first = true;
  for (int64_t iy = r[0]; iy < r[1]; iy++)
    for (int64_t ix = r[2]; ix < r[3]; ix++) {
      const float *e = x + (iy * w + ix) * C;
      uint8_t t = (uint8_t)((iy - wy0) * kw + (ix - wx0));
      if (first) {
        memcpy(best, e, sizeof(float) * (size_t)cn);
        memset(arg, t, (size_t)cn);
        first = false;
        continue;
      }
      for (int64_t c = 0; c < cn; c++) {
        float v = e[c], b = best[c];
        bool take = v > b || (v != v && b == b);
        best[c] = take ? v : b;
        arg[c] = take ? t : arg[c];
      }
    }
}

/* dx over one window's elements: dy where arg is the element (and, with
 * relu, best > 0), else 0. */
GR_VEC_CLONES
static void window_grad(float *dx, int64_t C, int64_t cn, int64_t w, const int64_t r[4], int64_t kw,
                        int64_t wy0, int64_t wx0, const uint8_t *arg, const float *best,
                        const float *dy) {
  for (int64_t iy = r[0]; iy < r[1]; iy++)
    for (int64_t ix = r[2]; ix < r[3]; ix++) {
      float *e = dx + (iy * w + ix) * C;
      uint8_t t = (uint8_t)((iy - wy0) * kw + (ix - wx0));
      if (best)
        for (int64_t c = 0; c < cn; c++) e[c] = arg[c] == t && best[c] > 0 ? dy[c] : 0.0f;
      else
        for (int64_t c = 0; c < cn; c++) e[c] = arg[c] == t ? dy[c] : 0.0f;
    }
}

/* One channel (an NCHW plane): the window's first maximum (NaN wins and
 * stays) as a scalar loop; *best its value. 255 for an empty window. */
static inline uint8_t plane_max(const float *x, int64_t w, const int64_t r[4], int64_t kw,
                                int64_t wy0, int64_t wx0, float *best) {
  uint8_t a = 255;
  float b = 0;
  for (int64_t iy = r[0]; iy < r[1]; iy++)
    for (int64_t ix = r[2]; ix < r[3]; ix++) {
      float v = x[iy * w + ix];
      if (a == 255 || v > b || (v != v && b == b))
        b = v, a = (uint8_t)((iy - wy0) * kw + (ix - wx0));
    }
  *best = b;
  return a;
}

/* The clipped window of output (oy, ox) in r (rows r[0]..r[1], columns
 * r[2]..r[3]) and the unclipped window's first row and column. */
static void window_of(const gr_conv_geom *g, int64_t oy, int64_t ox, int64_t r[4], int64_t *wy0,
                      int64_t *wx0) {
  gr_conv_window(oy, g->sh, g->pt, g->kh, g->h, &r[0], &r[1]);
  gr_conv_window(ox, g->sw, g->pl, g->kw, g->w, &r[2], &r[3]);
  *wy0 = oy * g->sh - g->pt, *wx0 = ox * g->sw - g->pl;
}

static bool window_empty(const int64_t r[4]) {
  return r[0] >= r[1] || r[2] >= r[3];
}

void gr_vec_max_pool(const gr_conv_geom *g, const float *x, float *y, uint8_t *arg, int64_t b0,
                     int64_t b1) {
  int64_t C = g->c;
  uint8_t scratch[CB];
  if (C == 1) {
    for (int64_t b = b0; b < b1; b++)
      for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++) {
          int64_t r[4], wy0, wx0, o = (b * g->oh + oy) * g->ow + ox;
          window_of(g, oy, ox, r, &wy0, &wx0);
          uint8_t a = plane_max(x + b * g->h * g->w, g->w, r, g->kw, wy0, wx0, &y[o]);
          if (arg) arg[o] = a;
        }
    return;
  }
  for (int64_t b = b0; b < b1; b++) {
    const float *xb = x + b * g->h * g->w * C;
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t r[4], wy0, wx0, o = ((b * g->oh + oy) * g->ow + ox) * C;
        window_of(g, oy, ox, r, &wy0, &wx0);
        if (window_empty(r)) {
          memset(y + o, 0, sizeof(float) * (size_t)C);
          if (arg) memset(arg + o, 255, (size_t)C);
          continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += CB) {
          int64_t cn = C - c0 < CB ? C - c0 : CB;
          window_max(xb + c0, C, cn, g->w, r, g->kw, wy0, wx0, y + o + c0,
                     arg ? arg + o + c0 : scratch);
        }
      }
  }
}

/* Does every input element lie in some window? */
static bool covers(const gr_conv_geom *g) {
  return g->sh == g->kh && g->sw == g->kw && g->pt == 0 && g->pl == 0 && g->oh * g->sh >= g->h &&
         g->ow * g->sw >= g->w;
}

void gr_vec_max_pool_grad(const gr_conv_geom *g, const float *x, const uint8_t *arg, const float *y,
                          const float *dy, bool relu, float *dx, int64_t b0, int64_t b1) {
  int64_t C = g->c, per = g->h * g->w * C;
  float best[CB];
  uint8_t scratch[CB];
  bool full = covers(g);
  if (C == 1) {
    if (!full) memset(dx + b0 * per, 0, sizeof(float) * (size_t)((b1 - b0) * per));
    for (int64_t b = b0; b < b1; b++)
      for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++) {
          int64_t r[4], wy0, wx0, o = (b * g->oh + oy) * g->ow + ox;
          window_of(g, oy, ox, r, &wy0, &wx0);
          float bv = 0;
          uint8_t a = arg ? arg[o] : plane_max(x + b * per, g->w, r, g->kw, wy0, wx0, &bv);
          if (arg) bv = relu ? y[o] : 0;
          float d = relu && !(bv > 0) ? 0.0f : dy[o];
          for (int64_t iy = r[0]; iy < r[1]; iy++)
            for (int64_t ix = r[2]; ix < r[3]; ix++)
              dx[b * per + iy * g->w + ix] = (iy - wy0) * g->kw + (ix - wx0) == a ? d : 0.0f;
        }
    return;
  }
  for (int64_t b = b0; b < b1; b++) {
    const float *xb = x + b * per;
    float *db = dx + b * per;
    if (!full) memset(db, 0, sizeof(float) * (size_t)per);
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t r[4], wy0, wx0, o = ((b * g->oh + oy) * g->ow + ox) * C;
        window_of(g, oy, ox, r, &wy0, &wx0);
        if (window_empty(r)) continue;
        for (int64_t c0 = 0; c0 < C; c0 += CB) {
          int64_t cn = C - c0 < CB ? C - c0 : CB;
          const uint8_t *a = arg ? arg + o + c0 : scratch;
          const float *bv = relu ? (arg ? y + o + c0 : best) : NULL;
          if (!arg) window_max(xb + c0, C, cn, g->w, r, g->kw, wy0, wx0, best, scratch);
          window_grad(db + c0, C, cn, g->w, r, g->kw, wy0, wx0, a, bv, dy + o + c0);
        }
      }
  }
}
