/* Vectorised f32 kernels of the CNN ops (NHWC, channels innermost), and
 * how they split over the inter-op threads. Internal to ops/.
 *
 * Every loop here runs over channels innermost, each channel's arithmetic
 * in one fixed order, so the vector width changes nothing: the builds for
 * AVX-512, AVX2 and plain x86-64 (GR_VEC_CLONES, chosen once per process
 * by the CPU) give the same bits (the build has no FMA contraction:
 * -std=c11, -ffp-contract=off). Reductions over rows (batch norm) sum
 * fixed blocks of rows, then the blocks in order: the split depends on the
 * sizes only, never on the thread count, so 1, 2 or 3 threads give the
 * same bits.
 *
 * Threads: the kernels are pure functions of their arguments over the
 * ranges they are given; callers run disjoint ranges on several threads
 * through gr_kernel_parallel. (Under ASan the clones are left out: one
 * plain build.) */
#ifndef GR_VEC_INTERNAL_H
#define GR_VEC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/conv_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define GR_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GR_VEC_CLONES
#endif

/* How many chunks to split `units` units of `bytes` bytes each into for
 * ctx's threads: 1 with one thread or little work, else a few per thread
 * (each at least one unit). Only for work whose result does not depend on
 * the split. */
int gr_vec_chunks(const gr_kernel_ctx *ctx, int64_t units, double bytes);

/* The range [*lo, *hi) of chunk i of n over `units` units. */
static inline void gr_vec_range(int64_t units, int n, int i, int64_t *lo, int64_t *hi) {
  *lo = units * i / n;
  *hi = units * (i + 1) / n;
}

/* ---- pooling (vec_pool.c) ----------------------------------------------------------- */

/* Do no two windows of g share an input element (strides >= window)? Then
 * the max-pool kernels below apply. */
bool gr_vec_pool_disjoint(const gr_conv_geom *g);

/* Images [b0, b1): y = the maximum of each window of x and, when arg is not
 * NULL, arg = the position i * kw + j of its first maximum in the window
 * (NaN wins and stays; 255 for a window wholly in the padding, whose y is
 * 0). Needs kh * kw < 255. */
void gr_vec_max_pool(const gr_conv_geom *g, const float *x, float *y, uint8_t *arg, int64_t b0,
                     int64_t b1);

/* Images [b0, b1) of the gradient of a disjoint max pool: dx = dy at each
 * window's first maximum, 0 elsewhere (every element written). The maxima
 * come from arg (as gr_vec_max_pool gives) or, when arg is NULL, from x.
 * With relu, a window whose maximum (y, the pooled output, with arg; else
 * from x) is not > 0 passes nothing: the gradient of max_pool(relu(.))
 * through the relu. */
void gr_vec_max_pool_grad(const gr_conv_geom *g, const float *x, const uint8_t *arg, const float *y,
                          const float *dy, bool relu, float *dx, int64_t b0, int64_t b1);

/* ---- batch norm (vec_batch_norm.c) -------------------------------------------------- */

/* The rows of x [rows, c] are summed in blocks of this many rows (a
 * function of the sizes), then the blocks in order. */
int64_t gr_vec_bn_block_rows(int64_t rows, int64_t c);

/* Block k of x [rows, c] (rows [k * br, (k + 1) * br)): s[j] = sum of
 * (x - shift[j]) and s[c + j] = sum of (x - shift[j])^2 per channel, in
 * double. */
void gr_vec_bn_stats_block(const float *x, int64_t rows, int64_t c, int64_t br, int64_t k,
                           const double *shift, double *s);

/* Block k of the gradient sums: s[j] = sum of dy, s[c + j] = sum of dy (x -
 * mean[j]), where dy is masked by mask > 0 when mask is not NULL (a fused
 * relu's output). */
void gr_vec_bn_grad_block(const float *dy, const float *mask, const float *x, int64_t rows,
                          int64_t c, int64_t br, int64_t k, const double *mean, double *s);

/* Rows [r0, r1) of [rows, c]: out = a[j] (u - ctr[j]) + b[j], then max(out,
 * 0) when relu (y of batch norm); with v not NULL, out = a[j] g + b[j] (v
 * - ctr[j]) + d[j] where g is u, or 0 where mask (not NULL) is not > 0 (dx
 * of batch norm: u = dy, v = x). out may be u or v (in place). */
void gr_vec_bn_apply(const float *u, const float *mask, const float *v, const float *ctr, int64_t c,
                     const float *a, const float *b, const float *d, bool relu, float *out,
                     int64_t r0, int64_t r1);

/* NCHW x [n, c, hw], images [b0, b1): per channel, s[j] = sum of g and
 * s[c + j] = sum of g (x - center[j]), where g = dy when dy is not NULL
 * (the gradient's sums; 0 where mask, when not NULL, is not > 0) and g =
 * x - center[j] when it is (the statistics: sums of the shifted x and of
 * its squares); each plane in 8 lanes added in order at the end. */
void gr_vec_bn_plane_sums(const float *dy, const float *mask, const float *x, int64_t c, int64_t hw,
                          int64_t b0, int64_t b1, const double *center, double *s);
/* NCHW images [b0, b1): out = a[j] (u - ctr[j]) + b[j] (then max(out, 0)
 * when relu), or with v, out = a[j] g + b[j] (v - ctr[j]) + d[j] with g
 * as gr_vec_bn_apply's. */
void gr_vec_bn_plane_apply(const float *u, const float *mask, const float *v, const float *ctr,
                           int64_t c, int64_t hw, const float *a, const float *b, const float *d,
                           bool relu, float *out, int64_t b0, int64_t b1);

/* ---- direct convolution (vec_conv.c) ----------------------------------------------- */

/* Is g (f32) a conv the direct kernels below run: a depthwise one (one
 * input channel per group) or one of at most 4 input channels and one
 * group, where an im2col product would be too thin? */
bool gr_vec_conv_direct(const gr_conv_geom *g);

/* Images [b0, b1) of y = conv2d(x, f), f [kh, kw, c / groups, oc]. */
void gr_vec_conv_fwd(const gr_conv_geom *g, const float *x, const float *f, float *y, int64_t b0,
                     int64_t b1);
/* Images [b0, b1) of dx, the input gradient for dy (every element written). */
void gr_vec_conv_bp_input(const gr_conv_geom *g, const float *dy, const float *f, float *dx,
                          int64_t b0, int64_t b1);
/* Of those, convs of one group, at most 4 input channels, 16, 32, 48 or
 * 64 outputs and windows of at most 128 values run these instead: a few
 * positions' outputs in vector registers. xp: scratch of
 * gr_vec_conv_small_scratch floats (an image with its padding). */
bool gr_vec_conv_small(const gr_conv_geom *g);
int64_t gr_vec_conv_small_scratch(const gr_conv_geom *g);
void gr_vec_conv_small_fwd(const gr_conv_geom *g, const float *x, const float *f, float *y,
                           float *xp, int64_t b0, int64_t b1);
void gr_vec_conv_small_bp_filter(const gr_conv_geom *g, const float *x, const float *dy, float *df,
                                 float *xp, int64_t b0, int64_t b1);
/* df = the filter gradient over images [b0, b1) only (a partial sum; every
 * element written), positions in order. */
void gr_vec_conv_bp_filter(const gr_conv_geom *g, const float *x, const float *dy, float *df,
                           int64_t b0, int64_t b1);

#endif
