/* Bilinear resizing with half-pixel centres, as tf.image.resize(method=
 * "bilinear", antialias=False) computes it: output pixel y samples the
 * input at (y + 0.5) * in / out - 0.5, between the rows floor and ceil of
 * that (clamped to the image), weighted by its fraction; the same across.
 * Floats throughout, in TensorFlow's order of operations. */
#include <math.h>

#include "ops/gr_images.h"

typedef struct lerp {
  int64_t lo, hi;
  float f;
} lerp;

/* Where output index i of out samples an axis of in. */
static lerp lerp_at(int64_t in, int64_t out, int64_t i) {
  float scale = (float)in / (float)out;
  float x = ((float)i + 0.5f) * scale - 0.5f, fl = floorf(x);
  int64_t lo = (int64_t)fl, hi = (int64_t)ceilf(x);
  return (lerp){lo < 0 ? 0 : lo, hi > in - 1 ? in - 1 : hi, x - fl};
}

#define MAX_TABLE 1024 /* wider outputs compute each column's weights as they go */

void gr_image_resize_bilinear(const gr_image *img, int64_t out_h, int64_t out_w, float *out) {
  int64_t h = img->height, w = img->width, c = img->channels;
  const uint8_t *p = img->pixels;
  if (h == out_h && w == out_w) {
    for (int64_t i = 0; i < h * w * c; i++) out[i] = p[i];
    return;
  }
  lerp xs[MAX_TABLE];
  bool table = out_w <= MAX_TABLE;
  for (int64_t x = 0; table && x < out_w; x++) xs[x] = lerp_at(w, out_w, x);
  for (int64_t y = 0; y < out_h; y++) {
    lerp ly = lerp_at(h, out_h, y);
    const uint8_t *top = p + ly.lo * w * c, *bot = p + ly.hi * w * c;
    float *o = out + y * out_w * c;
    for (int64_t x = 0; x < out_w; x++) {
      lerp lx = table ? xs[x] : lerp_at(w, out_w, x);
      int64_t l = lx.lo * c, r = lx.hi * c;
      for (int64_t k = 0; k < c; k++) {
        float tl = top[l + k], tr = top[r + k], bl = bot[l + k], br = bot[r + k];
        float t = tl + (tr - tl) * lx.f, b = bl + (br - bl) * lx.f;
        o[x * c + k] = t + (b - t) * ly.f;
      }
    }
  }
}
