/* Batch normalization's passes over x [rows, c], f32, channels innermost
 * (vec_internal.h): per-channel sums of fixed blocks of rows in double,
 * and one affine pass (y = a x + b, with a fused relu; dx = a dy + b x +
 * d). */
#include "ops/vec_internal.h"

/* At most this many blocks; at least this many rows in one. */
#define MAX_BLOCKS     1024
#define MIN_BLOCK_ROWS 64

int64_t gr_vec_bn_block_rows(int64_t rows, int64_t c) {
  (void)c;
  int64_t br = (rows + MAX_BLOCKS - 1) / MAX_BLOCKS;
  return br < MIN_BLOCK_ROWS ? MIN_BLOCK_ROWS : br;
}

/* Channels are summed in slices of this many (accumulators on the stack). */
#define CS 64

GR_VEC_CLONES
void gr_vec_bn_stats_block(const float *x, int64_t rows, int64_t c, int64_t br, int64_t k,
                           const double *shift, double *s) {
  int64_t r0 = k * br, r1 = r0 + br < rows ? r0 + br : rows;
  for (int64_t j0 = 0; j0 < c; j0 += CS) {
    int64_t cn = c - j0 < CS ? c - j0 : CS;
    double s1[CS] = {0}, s2[CS] = {0};
    const double *sh = shift + j0;
    for (int64_t r = r0; r < r1; r++) {
      const float *e = x + r * c + j0;
      for (int64_t j = 0; j < cn; j++) {
        double d = (double)e[j] - sh[j];
        s1[j] += d;
        s2[j] += d * d;
      }
    }
    for (int64_t j = 0; j < cn; j++) s[j0 + j] = s1[j], s[c + j0 + j] = s2[j];
  }
}

GR_VEC_CLONES
void gr_vec_bn_grad_block(const float *dy, const float *mask, const float *x, int64_t rows,
                          int64_t c, int64_t br, int64_t k, const double *mean, double *s) {
  int64_t r0 = k * br, r1 = r0 + br < rows ? r0 + br : rows;
  for (int64_t j0 = 0; j0 < c; j0 += CS) {
    int64_t cn = c - j0 < CS ? c - j0 : CS;
    double s1[CS] = {0}, s2[CS] = {0};
    const double *mu = mean + j0;
    for (int64_t r = r0; r < r1; r++) {
      const float *d = dy + r * c + j0, *e = x + r * c + j0;
      const float *m = mask ? mask + r * c + j0 : NULL;
      for (int64_t j = 0; j < cn; j++) {
        double g = m && !(m[j] > 0) ? 0.0 : (double)d[j];
        s1[j] += g;
        s2[j] += g * ((double)e[j] - mu[j]);
      }
    }
    for (int64_t j = 0; j < cn; j++) s[j0 + j] = s1[j], s[c + j0 + j] = s2[j];
  }
}

GR_VEC_CLONES
void gr_vec_bn_apply(const float *u, const float *mask, const float *v, const float *ctr, int64_t c,
                     const float *a, const float *b, const float *d, bool relu, float *out,
                     int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++) {
    const float *ur = u + r * c;
    float *o = out + r * c;
    if (v) {
      const float *vr = v + r * c, *m = mask ? mask + r * c : NULL;
      if (m)
        for (int64_t j = 0; j < c; j++) {
          float g = m[j] > 0 ? ur[j] : 0.0f;
          o[j] = a[j] * g + b[j] * (vr[j] - ctr[j]) + d[j];
        }
      else
        for (int64_t j = 0; j < c; j++) o[j] = a[j] * ur[j] + b[j] * (vr[j] - ctr[j]) + d[j];
    } else if (relu) {
      for (int64_t j = 0; j < c; j++) {
        float t = a[j] * (ur[j] - ctr[j]) + b[j];
        o[j] = t < 0 ? 0.0f : t;
      }
    } else {
      for (int64_t j = 0; j < c; j++) o[j] = a[j] * (ur[j] - ctr[j]) + b[j];
    }
  }
}

/* ---- NCHW: planes of hw values per (image, channel) ------------------------------------- */

/* Lanes of a plane's running sums (fixed: the order of the additions). */
#define PL 8

/* The sums of one plane into the lanes s1, s2: G(q) is g at position q. */
#define PLANE_SUMS(G)                                                                              \
  do {                                                                                             \
    int64_t p = 0;                                                                                 \
    for (; p + PL <= hw; p += PL)                                                                  \
      for (int l = 0; l < PL; l++) {                                                               \
        double v = (double)e[p + l] - center[j], g = G(p + l);                                     \
        s1[l] += g;                                                                                \
        s2[l] += g * v;                                                                            \
      }                                                                                            \
    for (int l = 0; p < hw; p++, l++) {                                                            \
      double v = (double)e[p] - center[j], g = G(p);                                               \
      s1[l] += g;                                                                                  \
      s2[l] += g * v;                                                                              \
    }                                                                                              \
  } while (0)
#define G_X(q)      v
#define G_DY(q)     (double)d[q]
#define G_MASKED(q) (m[q] > 0 ? (double)d[q] : 0.0)

GR_VEC_CLONES
void gr_vec_bn_plane_sums(const float *dy, const float *mask, const float *x, int64_t c, int64_t hw,
                          int64_t b0, int64_t b1, const double *center, double *s) {
  for (int64_t j = 0; j < c; j++) {
    double s1[PL] = {0}, s2[PL] = {0};
    for (int64_t b = b0; b < b1; b++) {
      int64_t o = (b * c + j) * hw;
      const float *e = x + o, *d = dy ? dy + o : NULL, *m = mask ? mask + o : NULL;
      if (!d)
        PLANE_SUMS(G_X);
      else if (m)
        PLANE_SUMS(G_MASKED);
      else
        PLANE_SUMS(G_DY);
    }
    double t1 = 0, t2 = 0;
    for (int l = 0; l < PL; l++) t1 += s1[l], t2 += s2[l];
    s[j] = t1, s[c + j] = t2;
  }
}

GR_VEC_CLONES
void gr_vec_bn_plane_apply(const float *u, const float *mask, const float *v, const float *ctr,
                           int64_t c, int64_t hw, const float *a, const float *b, const float *d,
                           bool relu, float *out, int64_t b0, int64_t b1) {
  for (int64_t i = b0; i < b1; i++)
    for (int64_t j = 0; j < c; j++) {
      int64_t off = (i * c + j) * hw;
      const float *ur = u + off;
      float *o = out + off, aj = a[j], bj = b[j], cj = ctr[j];
      if (v && mask) {
        const float *vr = v + off, *m = mask + off;
        float dj = d[j];
        for (int64_t p = 0; p < hw; p++) {
          float g = m[p] > 0 ? ur[p] : 0.0f;
          o[p] = aj * g + bj * (vr[p] - cj) + dj;
        }
      } else if (v) {
        const float *vr = v + off;
        float dj = d[j];
        for (int64_t p = 0; p < hw; p++) o[p] = aj * ur[p] + bj * (vr[p] - cj) + dj;
      } else if (relu) {
        for (int64_t p = 0; p < hw; p++) {
          float t = aj * (ur[p] - cj) + bj;
          o[p] = t < 0 ? 0.0f : t;
        }
      } else {
        for (int64_t p = 0; p < hw; p++) o[p] = aj * (ur[p] - cj) + bj;
      }
    }
}
