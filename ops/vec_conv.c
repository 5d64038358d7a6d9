/* Direct convolution, f32 NHWC (vec_internal.h): depthwise convs and
 * convs of a few input channels, whose im2col products would be a few
 * columns wide or a few deep. One output position at a time, output
 * channels innermost; each sum runs over the window in order (row, column,
 * input channel), skipping the padding. */
#include <string.h>

#include "ops/vec_internal.h"

bool gr_vec_conv_direct(const gr_conv_geom *g) {
  int64_t cg = g->groups > 0 ? g->c / g->groups : 0;
  return (g->groups > 1 && cg == 1) || (g->groups == 1 && g->c <= 4);
}

/* The window of output (oy, ox): input row of kernel row i, column of
 * kernel column j; -1 when in the padding. */
static inline int64_t in_row(const gr_conv_geom *g, int64_t oy, int64_t i) {
  int64_t iy = oy * g->sh - g->pt + i * g->dh;
  return iy >= 0 && iy < g->h ? iy : -1;
}
static inline int64_t in_col(const gr_conv_geom *g, int64_t ox, int64_t j) {
  int64_t ix = ox * g->sw - g->pl + j * g->dw;
  return ix >= 0 && ix < g->w ? ix : -1;
}

/* ---- dense convs of a few input channels, 16 to 64 outputs: one position's
 * window (k = kh kw c values, 0 in the padding) times f [k, oc] in vector
 * registers (GCC vectors: 16 floats, split by the compiler on narrower
 * units; the same operations in the same order on each) */

typedef float v16 __attribute__((vector_size(64)));
#define VMAX 4          /* at most 64 output channels */
#define KMAX 128        /* window values */
#define KPAD (KMAX + 4) /* a window's row in the filter gradient's blocks */

/* (macros: a function passing a 64-byte vector would depend on the unit's ABI) */
#define LOAD16(v, p)  memcpy(&(v), (p), sizeof(v16))
#define STORE16(p, v) memcpy((p), &(v), sizeof(v16))

bool gr_vec_conv_small(const gr_conv_geom *g) {
  return g->groups == 1 && g->c <= 4 && g->oc % 16 == 0 && g->oc <= 16 * VMAX &&
         g->kh * g->kw * g->c <= KMAX;
}

/* The rows and columns of an image that windows reach, padding included. */
static int64_t padded_rows(const gr_conv_geom *g) {
  return (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
}
static int64_t padded_cols(const gr_conv_geom *g) {
  return (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
}

int64_t gr_vec_conv_small_scratch(const gr_conv_geom *g) {
  return padded_rows(g) * padded_cols(g) * g->c;
}

/* Image b of x with its padding (zeros) into xp [padded_rows, padded_cols, c]. */
static void pad_image(const gr_conv_geom *g, const float *x, int64_t b, float *xp) {
  int64_t hp = padded_rows(g), wp = padded_cols(g), C = g->c;
  int64_t q0 = g->pl, q1 = g->pl + g->w < wp ? g->pl + g->w : wp; /* columns inside */
  memset(xp, 0, sizeof(float) * (size_t)(hp * wp * C));
  for (int64_t r = 0; r < hp; r++) {
    int64_t iy = r - g->pt;
    if (iy < 0 || iy >= g->h || q1 <= q0) continue;
    memcpy(xp + (r * wp + q0) * C, x + ((b * g->h + iy) * g->w) * C,
           sizeof(float) * (size_t)((q1 - q0) * C));
  }
}

/* The window of output (oy, ox) in a padded image, in order (row, column,
 * channel), into col; C a constant where it is inlined (no library copy
 * of a few bytes). */
static inline __attribute__((always_inline)) void window_c(const gr_conv_geom *g, const float *xp,
                                                           int64_t wp, int64_t oy, int64_t ox,
                                                           int64_t C, float *col) {
  int64_t t = 0, step = g->dw * C;
  for (int64_t i = 0; i < g->kh; i++) {
    const float *row = xp + ((oy * g->sh + i * g->dh) * wp + ox * g->sw) * C;
    for (int64_t j = 0; j < g->kw; j++, t += C)
      for (int64_t ci = 0; ci < C; ci++) col[t + ci] = row[j * step + ci];
  }
}

static inline __attribute__((always_inline)) void window_values(const gr_conv_geom *g,
                                                                const float *xp, int64_t wp,
                                                                int64_t oy, int64_t ox,
                                                                float *col) {
  switch (g->c) {
    case 1:
      window_c(g, xp, wp, oy, ox, 1, col);
      break;
    case 2:
      window_c(g, xp, wp, oy, ox, 2, col);
      break;
    case 3:
      window_c(g, xp, wp, oy, ox, 3, col);
      break;
    default:
      window_c(g, xp, wp, oy, ox, 4, col);
      break;
  }
}

/* Positions per block of the filter gradient (their windows and dy rows
 * stay in the first-level cache). */
#define PB 32

/* fwd: np (<= 4) positions' windows col[p][k] times f into y (rows OC
 * apart), their 4 x nv sums in registers (nv a constant where inlined):
 * independent additions keep the units busy. */
static inline __attribute__((always_inline)) void small_fwd_4(const float *col, int64_t k,
                                                              const float *f, int64_t OC, int nv,
                                                              int64_t np, float *yo) {
  v16 acc[4][VMAX], zero = {0};
  for (int p = 0; p < 4; p++)
    for (int v = 0; v < nv; v++) acc[p][v] = zero;
  for (int64_t t = 0; t < k; t++)
    for (int v = 0; v < nv; v++) {
      v16 w;
      LOAD16(w, f + t * OC + 16 * v);
      for (int p = 0; p < 4; p++) acc[p][v] += col[p * k + t] * w;
    }
  for (int64_t p = 0; p < np; p++)
    for (int v = 0; v < nv; v++) STORE16(yo + p * OC + 16 * v, acc[p][v]);
}

/* bp_filter: rows t0.. t0 + 3 of df += the sum over np positions (in
 * order) of col[p][t] dy[p], 4 x nv sums in registers; rows past k are
 * computed on col's padding and not stored. */
static inline __attribute__((always_inline)) void small_filter_4(const float *col, int64_t k,
                                                                 int64_t t0, const float *dy,
                                                                 int64_t np, int64_t OC, int nv,
                                                                 float *df) {
  int64_t nt = k - t0 < 4 ? k - t0 : 4;
  v16 acc[4][VMAX], zero = {0};
  for (int q = 0; q < 4; q++)
    for (int v = 0; v < nv; v++) acc[q][v] = zero;
  for (int64_t q = 0; q < nt; q++)
    for (int v = 0; v < nv; v++) LOAD16(acc[q][v], df + (t0 + q) * OC + 16 * v);
  for (int64_t p = 0; p < np; p++)
    for (int v = 0; v < nv; v++) {
      v16 d;
      LOAD16(d, dy + p * OC + 16 * v);
      for (int q = 0; q < 4; q++) acc[q][v] += col[p * KPAD + t0 + q] * d;
    }
  for (int64_t q = 0; q < nt; q++)
    for (int v = 0; v < nv; v++) STORE16(df + (t0 + q) * OC + 16 * v, acc[q][v]);
}

#define BY_NV(CALL, nv)                                                                            \
  switch (nv) {                                                                                    \
    case 1:                                                                                        \
      CALL(1);                                                                                     \
      break;                                                                                       \
    case 2:                                                                                        \
      CALL(2);                                                                                     \
      break;                                                                                       \
    case 3:                                                                                        \
      CALL(3);                                                                                     \
      break;                                                                                       \
    default:                                                                                       \
      CALL(4);                                                                                     \
      break;                                                                                       \
  }

GR_VEC_CLONES
void gr_vec_conv_small_fwd(const gr_conv_geom *g, const float *x, const float *f, float *y,
                           float *xp, int64_t b0, int64_t b1) {
  int64_t OC = g->oc, nv = OC / 16, k = g->kh * g->kw * g->c, wp = padded_cols(g);
  int64_t per = g->oh * g->ow;
  float col[4 * KMAX] = {0};
  for (int64_t b = b0; b < b1; b++) {
    pad_image(g, x, b, xp);
    int64_t oy = 0, ox = 0; /* of position p0 */
    for (int64_t p0 = 0; p0 < per; p0 += 4) {
      int64_t np = per - p0 < 4 ? per - p0 : 4;
      for (int64_t p = 0; p < np; p++, ox = ox + 1 < g->ow ? ox + 1 : 0, oy += ox == 0)
        window_values(g, xp, wp, oy, ox, col + p * k);
      float *yo = y + (b * per + p0) * OC;
#define FWD4(NV) small_fwd_4(col, k, f, OC, NV, np, yo)
      BY_NV(FWD4, nv)
#undef FWD4
    }
  }
}

GR_VEC_CLONES
void gr_vec_conv_small_bp_filter(const gr_conv_geom *g, const float *x, const float *dy, float *df,
                                 float *xp, int64_t b0, int64_t b1) {
  int64_t OC = g->oc, nv = OC / 16, k = g->kh * g->kw * g->c, per = g->oh * g->ow;
  int64_t wp = padded_cols(g);
  float col[PB * KPAD] = {0};
  memset(df, 0, sizeof(float) * (size_t)(k * OC));
  for (int64_t b = b0; b < b1; b++) {
    pad_image(g, x, b, xp);
    int64_t oy = 0, ox = 0; /* of position p0 */
    for (int64_t p0 = 0; p0 < per; p0 += PB) {
      int64_t np = per - p0 < PB ? per - p0 : PB;
      for (int64_t p = 0; p < np; p++, ox = ox + 1 < g->ow ? ox + 1 : 0, oy += ox == 0)
        window_values(g, xp, wp, oy, ox, col + p * KPAD);
      const float *d = dy + (b * per + p0) * OC;
      for (int64_t t0 = 0; t0 < k; t0 += 4) {
#define FILT4(NV) small_filter_4(col, k, t0, d, np, OC, NV, df)
        BY_NV(FILT4, nv)
#undef FILT4
      }
    }
  }
}

/* One pass over the windows of images [b0, b1) for the three ops: FWD y
 * (out) from x (a) and f (b); BP_INPUT dx (out) from dy (a) and f (b);
 * BP_FILTER df (out) from x (a) and dy (b). A window element meets the
 * output channels in one of three ways: dense (every input channel with
 * every output: one group), depthwise with one output per input channel,
 * depthwise with og (depth multiplier) per input. */
enum { D_FWD, D_BP_INPUT, D_BP_FILTER };

GR_VEC_CLONES
static void direct_run(const gr_conv_geom *g, int mode, const float *a, const float *b_, float *out,
                       int64_t b0, int64_t b1) {
  int64_t C = g->c, OC = g->oc, cg = C / g->groups, og = OC / g->groups;
  bool dense = g->groups == 1;
  if (mode == D_BP_INPUT)
    memset(out + b0 * g->h * g->w * C, 0, sizeof(float) * (size_t)((b1 - b0) * g->h * g->w * C));
  if (mode == D_BP_FILTER) memset(out, 0, sizeof(float) * (size_t)(g->kh * g->kw * cg * OC));
  for (int64_t b = b0; b < b1; b++)
    for (int64_t oy = 0; oy < g->oh; oy++)
      for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t pos = ((b * g->oh + oy) * g->ow + ox) * OC;
        float *restrict yo = mode == D_FWD ? out + pos : NULL;
        const float *d = mode == D_BP_INPUT ? a + pos : mode == D_BP_FILTER ? b_ + pos : NULL;
        if (yo) memset(yo, 0, sizeof(float) * (size_t)OC);
        for (int64_t i = 0; i < g->kh; i++) {
          int64_t iy = in_row(g, oy, i);
          if (iy < 0) continue;
          for (int64_t j = 0; j < g->kw; j++) {
            int64_t ix = in_col(g, ox, j), e = ((b * g->h + iy) * g->w + ix) * C;
            if (ix < 0) continue;
            int64_t t = (i * g->kw + j) * cg * OC; /* the window element's filter rows */
            if (mode == D_FWD) {
              const float *xe = a + e, *ft = b_ + t;
              if (dense) {
                for (int64_t ci = 0; ci < C; ci++) {
                  float xv = xe[ci];
                  const float *fr = ft + ci * OC;
                  for (int64_t o = 0; o < OC; o++) yo[o] += xv * fr[o];
                }
              } else if (og == 1) {
                for (int64_t o = 0; o < OC; o++) yo[o] += xe[o] * ft[o];
              } else {
                for (int64_t o = 0; o < OC; o++) yo[o] += xe[o / og] * ft[o];
              }
            } else if (mode == D_BP_INPUT) {
              float *restrict xe = out + e;
              const float *ft = b_ + t;
              if (dense) {
                for (int64_t ci = 0; ci < C; ci++) {
                  const float *fr = ft + ci * OC;
                  float s = 0;
                  for (int64_t o = 0; o < OC; o++) s += d[o] * fr[o];
                  xe[ci] += s;
                }
              } else if (og == 1) {
                for (int64_t o = 0; o < OC; o++) xe[o] += d[o] * ft[o];
              } else {
                for (int64_t o = 0; o < OC; o++) xe[o / og] += d[o] * ft[o];
              }
            } else {
              const float *xe = a + e;
              float *restrict ft = out + t;
              if (dense) {
                for (int64_t ci = 0; ci < C; ci++) {
                  float xv = xe[ci];
                  float *restrict fr = ft + ci * OC;
                  for (int64_t o = 0; o < OC; o++) fr[o] += xv * d[o];
                }
              } else if (og == 1) {
                for (int64_t o = 0; o < OC; o++) ft[o] += xe[o] * d[o];
              } else {
                for (int64_t o = 0; o < OC; o++) ft[o] += xe[o / og] * d[o];
              }
            }
          }
        }
      }
}

void gr_vec_conv_fwd(const gr_conv_geom *g, const float *x, const float *f, float *y, int64_t b0,
                     int64_t b1) {
  direct_run(g, D_FWD, x, f, y, b0, b1);
}
void gr_vec_conv_bp_input(const gr_conv_geom *g, const float *dy, const float *f, float *dx,
                          int64_t b0, int64_t b1) {
  direct_run(g, D_BP_INPUT, dy, f, dx, b0, b1);
}
void gr_vec_conv_bp_filter(const gr_conv_geom *g, const float *x, const float *dy, float *df,
                           int64_t b0, int64_t b1) {
  direct_run(g, D_BP_FILTER, x, dy, df, b0, b1);
}
