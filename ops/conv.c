/* 2-D convolution, NHWC (or NCHW: data_format), filters [kh, kw, c /
 * groups, out_c] in both: conv2d, its two gradients conv2d_backprop_input
 * and conv2d_backprop_filter, and conv2d_transpose (the input gradient as
 * a layer). Each is linear in each input, so their gradients are these ops
 * again. Three ways to run them:
 * - f32, one group, more than 4 input channels, not pointwise: oneDNN
 *   (conv_dnnl.c), in the node's own layout;
 * - f32 depthwise with depth multiplier 1, undilated: oneDNN's depthwise
 *   kernels (conv_dnnl.c) on NHWC images (3-4x faster than the direct
 *   kernels at 28x28x64);
 * - other f32 depthwise convs, or at most 4 input channels: direct
 *   kernels (vec_conv.c), split over the images;
 * - the rest: im2col (gr_conv_cols) and OpenBLAS gemm, tiled over output
 *   positions so the im2col buffer stays small (a 1x1 stride-1 unpadded
 *   conv skips im2col), the tiles split over the inter-op threads (the
 *   filter gradient: fixed blocks of tiles summed in order).
 * The last two run an NCHW node between transposed copies. */
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

/* ---- shapes ------------------------------------------------------------------------ */

/* An image shape of unknown sizes but batch n and c channels in a's format. */
static gr_shape image_shape(const gr_conv_attrs *a, int64_t n, int64_t c) {
  gr_shape s = gr_shape_make(4, (int64_t[]){n, -1, -1, -1});
  s.dims[gr_layout_axes(a->format).c] = c;
  return s;
}

/* " (NCHW)" after an input shape in messages ("" for NHWC). */
static const char *fmt_note(const gr_conv_attrs *a) {
  return a->format == GR_FORMAT_NCHW ? " (NCHW)" : "";
}

/* Error unless s is of unknown rank or rank 4 (what: "input", "filter ..."). */
static gr_status check_rank4(const gr_conv_attrs *a, const gr_shape *s, const char *what, char *msg,
                             size_t cap) {
  char b[GR_SHAPE_STR_MAX];
  if (s->rank < 0 || s->rank == 4) return GR_OK;
  if (what)
    snprintf(msg, cap, "filter must have rank 4 %s, got shape %s", what, gr_shape_str(s, b));
  else
    snprintf(msg, cap, "input must have rank 4 (%s), got shape %s",
             gr_layout_format_name(a->format), gr_shape_str(s, b));
  return GR_ERR_SHAPE;
}

/* The output of conv2d(x, f) (dims may be unknown), checking ranks,
 * channels and groups; errors into msg. x and the output in a's format,
 * f HWIO in both. */
static gr_status conv_out_shape(const gr_conv_attrs *a0, const gr_shape *x, const gr_shape *f,
                                gr_shape *out, char *msg, size_t cap) {
  char xs[GR_SHAPE_STR_MAX], fs[GR_SHAPE_STR_MAX];
  gr_image_axes ax = gr_layout_axes(a0->format);
  GR_TRY(check_rank4(a0, x, NULL, msg, cap));
  GR_TRY(check_rank4(a0, f, "[kh, kw, in_c / groups, out_c]", msg, cap));
  *out = image_shape(a0, x->rank == 4 ? x->dims[0] : -1, f->rank == 4 ? f->dims[3] : -1);
  if (x->rank != 4 || f->rank != 4) return GR_OK;
  int64_t gs = a0->groups, c = x->dims[ax.c], fc = f->dims[2], oc = f->dims[3];
  if (c >= 0 && fc >= 0 && c != fc * gs) {
    if (gs > 1)
      snprintf(msg, cap,
               "channel mismatch: input %s%s has %lld channels but filter %s takes %lld per "
               "group in %lld groups",
               gr_shape_str(x, xs), fmt_note(a0), (long long)c, gr_shape_str(f, fs), (long long)fc,
               (long long)gs);
    else
      snprintf(msg, cap, "channel mismatch: input %s%s has %lld channels but filter %s takes %lld",
               gr_shape_str(x, xs), fmt_note(a0), (long long)c, gr_shape_str(f, fs), (long long)fc);
    return GR_ERR_SHAPE;
  }
  if (oc >= 0 && oc % gs != 0) {
    snprintf(msg, cap, "filter %s: %lld output channels do not split into %lld groups",
             gr_shape_str(f, fs), (long long)oc, (long long)gs);
    return GR_ERR_SHAPE;
  }
  gr_conv_attrs a = *a0;
  a.kh = f->dims[0], a.kw = f->dims[1];
  if (a.kh == 0 || a.kw == 0) {
    snprintf(msg, cap, "filter %s has an empty window", gr_shape_str(f, fs));
    return GR_ERR_SHAPE;
  }
  if (a.kh < 0 || a.kw < 0) return GR_OK;
  int64_t pb;
  for (int axis = 0; axis < 2; axis++) {
    gr_status s =
        gr_conv_out_dim(&a, axis, x->dims[ax.h + axis], &out->dims[ax.h + axis], &pb, msg, cap);
    if (s != GR_OK) {
      size_t len = strlen(msg);
      snprintf(msg + len, cap - len, " (input %s, filter %s)", gr_shape_str(x, xs),
               gr_shape_str(f, fs));
      return s;
    }
  }
  return GR_OK;
}

typedef enum conv_kind { CONV_FWD, CONV_BP_INPUT, CONV_BP_FILTER, CONV_TRANSPOSE } conv_kind;

static conv_kind kind_of(const gr_node *n);

/* The shapes of (x, filter, y) of the underlying conv2d for a node of kind
 * k with input shapes in (dims may be unknown); *out: the node's output. */
static gr_status conv_shapes(const gr_node *n, const gr_shape *in, gr_shape *out, char *msg,
                             size_t cap) {
  conv_kind k = kind_of(n);
  gr_conv_attrs a;
  GR_TRY(gr_conv_read_attrs(n, false, &a, msg, cap));
  char b1[GR_SHAPE_STR_MAX], b2[GR_SHAPE_STR_MAX];
  gr_shape y;
  switch (k) {
    case CONV_FWD:
      return conv_out_shape(&a, &in[0], &in[1], out, msg, cap);
    case CONV_BP_INPUT: /* dy, filter, like x */
    case CONV_BP_FILTER: /* x, dy, like filter */ {
      const gr_shape *x = k == CONV_BP_INPUT ? &in[2] : &in[0];
      const gr_shape *f = k == CONV_BP_INPUT ? &in[1] : &in[2];
      const gr_shape *dy = k == CONV_BP_INPUT ? &in[0] : &in[1];
      GR_TRY(conv_out_shape(&a, x, f, &y, msg, cap));
      if (!gr_shape_compatible(&y, dy)) {
        snprintf(msg, cap, "dy %s does not match the conv2d output %s", gr_shape_str(dy, b1),
                 gr_shape_str(&y, b2));
        return GR_ERR_SHAPE;
      }
      *out = k == CONV_BP_INPUT ? *x : *f;
      return GR_OK;
    }
    case CONV_TRANSPOSE: { /* x, filter [kh, kw, out_c / groups, in_c] */
      const gr_shape *x = &in[0], *f = &in[1];
      gr_image_axes ax = gr_layout_axes(a.format);
      GR_TRY(check_rank4(&a, x, NULL, msg, cap));
      GR_TRY(check_rank4(&a, f, "[kh, kw, out_c / groups, in_c]", msg, cap));
      *out = image_shape(&a, -1, -1);
      if (x->rank != 4 || f->rank != 4) return GR_OK;
      if (x->dims[ax.c] >= 0 && f->dims[3] >= 0 && x->dims[ax.c] != f->dims[3]) {
        snprintf(msg, cap,
                 "channel mismatch: input %s%s has %lld channels but filter %s gives %lld",
                 gr_shape_str(x, b1), fmt_note(&a), (long long)x->dims[ax.c], gr_shape_str(f, b2),
                 (long long)f->dims[3]);
        return GR_ERR_SHAPE;
      }
      a.kh = f->dims[0], a.kw = f->dims[1];
      *out = image_shape(&a, x->dims[0], f->dims[2] < 0 ? -1 : f->dims[2] * a.groups);
      for (int axis = 0; axis < 2; axis++) {
        int64_t in = x->dims[ax.h + axis];
        if (a.kh < 0 || a.kw < 0 || in < 0) continue;
        out->dims[ax.h + axis] = gr_conv_in_dim(&a, axis, in);
        if (out->dims[ax.h + axis] < 1) {
          snprintf(msg, cap, "the padding leaves no output (input %s, filter %s)",
                   gr_shape_str(x, b1), gr_shape_str(f, b2));
          return GR_ERR_INVALID_ARGUMENT;
        }
      }
      /* the conv2d this is the gradient of must map out back to x */
      GR_TRY(conv_out_shape(&a, out, f, &y, msg, cap));
      if (!gr_shape_compatible(&y, x)) {
        snprintf(msg, cap, "input %s is not a conv2d output of the output %s", gr_shape_str(x, b1),
                 gr_shape_str(&y, b2));
        return GR_ERR_SHAPE;
      }
      return GR_OK;
    }
  }
  return GR_OK;
}

gr_status gr_conv_shape_fn(gr_shape_ctx *ctx) {
  return gr_window_shape_fn(ctx, conv_shapes);
}

/* ---- kernels ------------------------------------------------------------------------- */

#define AT(p, dt, off) ((char *)(p) + (size_t)(off)*gr_dtype_size(dt))

/* Partial filter gradients of at most this many bytes in all. */
#define CONV_PART_BYTES ((int64_t)64 << 20)
/* At most this many blocks of tiles sum a filter gradient. */
#define CONV_MAX_BLOCKS 16

/* One conv over output positions in tiles of `rows` (vec_internal.h's
 * rule: the split is a function of the sizes): mode CONV_FWD computes y =
 * conv2d(x, f); CONV_BP_INPUT x = the input gradient for dy in y (col2im:
 * one thread); CONV_BP_FILTER f = the filter gradient for x and dy in y,
 * block k of tiles into part k (k x oc each), added in block order after.
 * Pointwise convs use x itself as the im2col matrix. */
typedef struct conv_job {
  const gr_conv_geom *g;
  gr_dtype dt;
  conv_kind mode;
  void *x, *f, *y, *part;
  int64_t rows, m, k, tiles, blocks;
  bool pw;
  gr_tensor *cols; /* one im2col tile per chunk */
  int chunks;
} conv_job;

/* Tile t: positions [p0, p1), every group; col: its im2col scratch;
 * BP_FILTER into fdst (rows oc apart), adding when acc. */
static void conv_tile(const conv_job *j, int64_t t, void *col, void *fdst, bool acc) {
  const gr_conv_geom *g = j->g;
  gr_dtype dt = j->dt;
  int64_t gs = g->groups, cg = g->c / gs, og = g->oc / gs, k = j->k, oc = g->oc;
  int64_t p0 = t * j->rows, p1 = p0 + j->rows < j->m ? p0 + j->rows : j->m, np = p1 - p0;
  for (int64_t gi = 0; gi < gs; gi++) {
    void *cx = j->pw ? AT(j->x, dt, p0 * g->c + gi * cg) : col;
    int64_t ld = j->pw ? g->c : k;
    void *fg = AT(j->f, dt, gi * og), *yg = AT(j->y, dt, p0 * oc + gi * og);
    if (!j->pw && j->mode != CONV_BP_INPUT)
      gr_conv_cols(g, dt, j->x, cx, p0, p1, gi * cg, cg, false);
    if (j->mode == CONV_FWD)
      gr_conv_gemm(dt, false, false, np, og, k, cx, ld, fg, oc, 0, yg, oc);
    else if (j->mode == CONV_BP_FILTER)
      gr_conv_gemm(dt, true, false, k, og, np, cx, ld, yg, oc, acc ? 1 : 0, AT(fdst, dt, gi * og),
                   oc);
    else
      gr_conv_gemm(dt, false, true, np, k, og, yg, oc, fg, oc, 0, cx, ld);
    if (!j->pw && j->mode == CONV_BP_INPUT)
      gr_conv_cols(g, dt, j->x, cx, p0, p1, gi * cg, cg, true);
  }
}

static void conv_chunk(void *arg, int i) {
  const conv_job *j = arg;
  void *col = j->pw ? NULL : gr_tensor_data(&j->cols[i]);
  int64_t lo, hi;
  if (j->mode == CONV_BP_FILTER) { /* blocks of tiles */
    gr_vec_range(j->blocks, j->chunks, i, &lo, &hi);
    for (int64_t b = lo; b < hi; b++) {
      void *dst = j->blocks == 1 ? j->f : AT(j->part, j->dt, b * j->k * j->g->oc);
      int64_t t0, t1;
      gr_vec_range(j->tiles, (int)j->blocks, (int)b, &t0, &t1);
      for (int64_t t = t0; t < t1; t++) conv_tile(j, t, col, dst, t > t0);
    }
    return;
  }
  gr_vec_range(j->tiles, j->chunks, i, &lo, &hi);
  for (int64_t t = lo; t < hi; t++) conv_tile(j, t, col, NULL, false);
}

/* f = the sum of the blocks' partial gradients, in block order. */
static void sum_parts(const conv_job *j) {
  int64_t n = j->k * j->g->oc;
  if (j->dt == GR_F32) {
    float *f = j->f;
    const float *p = j->part;
    for (int64_t e = 0; e < n; e++) f[e] = p[e];
    for (int64_t b = 1; b < j->blocks; b++)
      for (int64_t e = 0; e < n; e++) f[e] += p[b * n + e];
  } else {
    double *f = j->f;
    const double *p = j->part;
    for (int64_t e = 0; e < n; e++) f[e] = p[e];
    for (int64_t b = 1; b < j->blocks; b++)
      for (int64_t e = 0; e < n; e++) f[e] += p[b * n + e];
  }
}

static gr_status conv_compute(gr_kernel_ctx *ctx, const gr_conv_geom *g, gr_dtype dt,
                              conv_kind mode, void *x, void *f, void *y) {
  int64_t gs = g->groups, cg = g->c / gs, k = g->kh * g->kw * cg, oc = g->oc;
  int64_t m = g->n * g->oh * g->ow;
  size_t es = gr_dtype_size(dt);
  conv_job j = {.g = g, .dt = dt, .mode = mode, .x = x, .f = f, .y = y, .m = m, .k = k};
  j.pw = gr_conv_is_pointwise(g);
  j.rows = gr_conv_tile_rows(k, dt);
  j.tiles = m > 0 ? (m + j.rows - 1) / j.rows : 0;
  if (mode == CONV_BP_FILTER) {
    int64_t most = CONV_PART_BYTES / (k * oc * (int64_t)es > 0 ? k * oc * (int64_t)es : 1);
    j.blocks = j.tiles < CONV_MAX_BLOCKS ? j.tiles : CONV_MAX_BLOCKS;
    if (j.blocks > most) j.blocks = most > 1 ? most : 1;
    if (m == 0) memset(f, 0, (size_t)(k * oc) * es);
  }
  if (mode == CONV_BP_INPUT && !j.pw) memset(x, 0, (size_t)(g->n * g->h * g->w * g->c) * es);
  int64_t units = mode == CONV_BP_FILTER ? j.blocks : mode == CONV_BP_INPUT ? 1 : j.tiles;
  double work = (double)m * (double)(k + oc) * (double)es;
  j.chunks = units ? gr_vec_chunks(ctx, units, work) : 0;
  gr_tensor part = gr_tensor_empty(), cols[64];
  if (j.chunks > 64) j.chunks = 64;
  gr_status s = GR_OK;
  int made = 0;
  for (int i = 0; i < j.chunks && !j.pw; i++, made++) {
    gr_shape cs = gr_shape_make(1, (int64_t[]){(j.rows < m ? j.rows : m) * k});
    if ((s = gr_tensor_alloc(&cols[i], dt, &cs, ctx->err)) != GR_OK) break;
  }
  if (s == GR_OK && mode == CONV_BP_FILTER && j.blocks > 1) {
    gr_shape ps = gr_shape_make(1, (int64_t[]){j.blocks * k * oc});
    s = gr_tensor_alloc(&part, dt, &ps, ctx->err);
    j.part = gr_tensor_data(&part);
  }
  j.cols = cols;
  if (s == GR_OK && j.chunks > 0) {
    gr_kernel_parallel(ctx, j.chunks, conv_chunk, &j);
    if (mode == CONV_BP_FILTER && j.blocks > 1) sum_parts(&j);
  }
  for (int i = 0; i < made; i++) gr_tensor_release(&cols[i]);
  gr_tensor_release(&part);
  return s;
}

/* vec_conv.c's direct kernels, split over images (the filter gradient: a
 * partial sum per block of images, a split by the sizes, added in order). */
typedef struct direct_job {
  const gr_conv_geom *g;
  conv_kind mode;
  const float *a, *b; /* FWD: x, f; BP_INPUT: dy, f; BP_FILTER: x, dy */
  float *out, *part;
  int64_t blocks;
  int chunks;
  float *pad;                 /* gr_vec_conv_small: a padded image per chunk */
  int64_t pad_len;            /* floats of each */
  const gr_conv_epilogue *ep; /* FWD: applied to each chunk's images (NHWC), or NULL */
} direct_job;

static void direct_chunk(void *arg, int i) {
  const direct_job *j = arg;
  int64_t lo, hi, n = j->g->n, fsize = j->g->kh * j->g->kw * (j->g->c / j->g->groups) * j->g->oc;
  if (j->mode != CONV_BP_FILTER) {
    gr_vec_range(n, j->chunks, i, &lo, &hi);
    if (j->mode == CONV_FWD && j->pad)
      gr_vec_conv_small_fwd(j->g, j->a, j->b, j->out, j->pad + i * j->pad_len, lo, hi);
    else if (j->mode == CONV_FWD)
      gr_vec_conv_fwd(j->g, j->a, j->b, j->out, lo, hi);
    else
      gr_vec_conv_bp_input(j->g, j->a, j->b, j->out, lo, hi);
    if (j->ep) gr_conv_epilogue_apply(j->ep, false, j->out + lo * j->ep->c * j->ep->hw, hi - lo);
    return;
  }
  gr_vec_range(j->blocks, j->chunks, i, &lo, &hi);
  for (int64_t k = lo; k < hi; k++) {
    int64_t b0, b1;
    gr_vec_range(n, (int)j->blocks, (int)k, &b0, &b1);
    float *df = j->blocks == 1 ? j->out : j->part + k * fsize;
    if (j->pad)
      gr_vec_conv_small_bp_filter(j->g, j->a, j->b, df, j->pad + i * j->pad_len, b0, b1);
    else
      gr_vec_conv_bp_filter(j->g, j->a, j->b, df, b0, b1);
  }
}

static gr_status conv_direct(gr_kernel_ctx *ctx, const gr_conv_geom *g, conv_kind mode,
                             const float *a, const float *b, float *out,
                             const gr_conv_epilogue *ep) {
  direct_job j = {g, mode, a, b, out, NULL, 1, 1, NULL, 0, ep};
  int64_t fsize = g->kh * g->kw * (g->c / g->groups) * g->oc;
  double work = (double)(g->n * g->oh * g->ow) * (double)(g->kh * g->kw) * (double)g->oc * 8;
  gr_tensor part = gr_tensor_empty(), pad = gr_tensor_empty();
  if (mode == CONV_BP_FILTER) {
    j.blocks = g->n < CONV_MAX_BLOCKS ? g->n : CONV_MAX_BLOCKS;
    if (j.blocks < 1) {
      memset(out, 0, sizeof(float) * (size_t)fsize);
      return GR_OK;
    }
    if (j.blocks > 1) {
      gr_shape ps = gr_shape_make(1, (int64_t[]){j.blocks * fsize});
      GR_TRY(gr_tensor_alloc(&part, GR_F32, &ps, ctx->err));
      j.part = gr_tensor_data(&part);
    }
  }
  j.chunks = gr_vec_chunks(ctx, mode == CONV_BP_FILTER ? j.blocks : g->n, work);
  if (mode != CONV_BP_INPUT && gr_vec_conv_small(g)) {
    j.pad_len = gr_vec_conv_small_scratch(g);
    gr_shape ps = gr_shape_make(1, (int64_t[]){j.chunks * j.pad_len});
    if (gr_tensor_alloc(&pad, GR_F32, &ps, ctx->err) != GR_OK) {
      gr_tensor_release(&part);
      return ctx->err->code;
    }
    j.pad = gr_tensor_data(&pad);
  }
  if (g->n > 0) gr_kernel_parallel(ctx, j.chunks, direct_chunk, &j);
  if (j.blocks > 1) {
    for (int64_t e = 0; e < fsize; e++) out[e] = j.part[e];
    for (int64_t k = 1; k < j.blocks; k++)
      for (int64_t e = 0; e < fsize; e++) out[e] += j.part[k * fsize + e];
  }
  gr_tensor_release(&part), gr_tensor_release(&pad);
  return GR_OK;
}

/* The input gradient of a stride-1 conv as a forward conv of dy with the
 * filter flipped in space and its channels swapped (per group), padded so
 * the windows line up: im2col gathers, where col2im scatters and adds.
 * *done false (nothing computed) when the padding does not allow it, or
 * when it would be a product of fewer than 16 columns (col2im is faster). */
static gr_status bp_input_flipped(gr_kernel_ctx *ctx, const gr_conv_geom *g, gr_dtype dt, void *dx,
                                  const void *f, void *dy, bool *done) {
  *done = false;
  int64_t ekh = (g->kh - 1) * g->dh + 1, ekw = (g->kw - 1) * g->dw + 1;
  gr_conv_geom t = *g;
  t.h = g->oh, t.w = g->ow, t.c = g->oc, t.oh = g->h, t.ow = g->w, t.oc = g->c;
  t.pt = ekh - 1 - g->pt, t.pl = ekw - 1 - g->pl;
  if (g->sh != 1 || g->sw != 1 || g->c / g->groups < 16 || t.pt < 0 || t.pl < 0 ||
      g->h - g->oh - t.pt + ekh - 1 < 0 || g->w - g->ow - t.pl + ekw - 1 < 0)
    return GR_OK;
  int64_t gs = g->groups, cg = g->c / gs, og = g->oc / gs, kk = g->kh * g->kw;
  gr_tensor ft;
  gr_shape fs = gr_shape_make(1, (int64_t[]){kk * og * g->c > 0 ? kk * og * g->c : 1});
  GR_TRY(gr_tensor_alloc(&ft, dt, &fs, ctx->err));
  size_t es = gr_dtype_size(dt);
  char *w = gr_tensor_data(&ft);
  const char *src = f;
  /* w[(i, j, co)][gi * cg + ci] = f[(kh-1-i, kw-1-j, ci)][gi * og + co] */
  for (int64_t i = 0; i < g->kh; i++)
    for (int64_t jx = 0; jx < g->kw; jx++) {
      int64_t r = (g->kh - 1 - i) * g->kw + (g->kw - 1 - jx);
      for (int64_t gi = 0; gi < gs; gi++)
        for (int64_t co = 0; co < og; co++)
          for (int64_t ci = 0; ci < cg; ci++)
            memcpy(w + (size_t)(((i * g->kw + jx) * og + co) * g->c + gi * cg + ci) * es,
                   src + (size_t)((r * cg + ci) * g->oc + gi * og + co) * es, es);
    }
  gr_status s = conv_compute(ctx, &t, dt, CONV_FWD, dy, w, dx);
  gr_tensor_release(&ft);
  *done = s == GR_OK;
  return s;
}

/* The inputs of each kind that are images (the rest are filters). */
static unsigned image_inputs(conv_kind k) {
  return k == CONV_BP_INPUT ? 5u : k == CONV_BP_FILTER ? 3u : 1u;
}

/* An NCHW node runs the NHWC code on transposed copies (gr_layout_begin).
 * ep (forward only, or NULL): gets the output's channels and positions,
 * and is applied to each block of images once it is computed. */
static gr_status conv_run(gr_kernel_ctx *ctx, conv_kind k, gr_conv_epilogue *ep) {
  gr_shape shapes[GR_LAYOUT_MAX_IO], out;
  char msg[512];
  gr_status s;
  GR_TRY(gr_window_kernel_shapes(ctx, conv_shapes, shapes, &out));
  gr_dtype dt = ctx->inputs[0].dtype;
  gr_conv_attrs a;
  if (gr_conv_read_attrs(ctx->node, false, &a, msg, sizeof msg) != GR_OK)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  /* the conv2d whose x and filter these are, channels last */
  gr_shape xs = gr_layout_shape_to_nhwc(k == CONV_FWD || k == CONV_BP_FILTER ? &shapes[0]
                                        : k == CONV_BP_INPUT                 ? &shapes[2]
                                                                             : &out,
                                        a.format);
  const gr_shape *fs = k == CONV_BP_FILTER ? &shapes[2] : &shapes[1];
  a.kh = fs->dims[0], a.kw = fs->dims[1];
  gr_conv_geom g;
  if ((s = gr_conv_geom_make(&a, xs.dims, &g, msg, sizeof msg)) != GR_OK)
    return gr_kernel_error(ctx, s, "%s", msg);
  g.oc = fs->dims[3];
  if (g.n * g.oh * g.ow > INT32_MAX || g.kh * g.kw * g.c > INT32_MAX || g.oc > INT32_MAX)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "convolution too large for BLAS");
  if (ep) ep->c = g.oc, ep->hw = g.oh * g.ow;
  bool dnnl = dt == GR_F32 && gr_conv_dnnl_applies(&g);
  int dmode = k == CONV_FWD ? 0 : k == CONV_BP_FILTER ? 2 : 1;
  if (dnnl && (g.groups == 1 || a.format == GR_FORMAT_NHWC)) { /* the node's own layout */
    gr_tensor *o;
    GR_TRY(gr_kernel_alloc_output(ctx, 0, dt, &out, &o));
    return gr_conv_dnnl(ctx, &g, a.format, dmode, gr_tensor_data(&ctx->inputs[0]),
                        gr_tensor_data(&ctx->inputs[1]), gr_tensor_data(o), ep);
  }
  gr_layout_kernel lk;
  GR_TRY(gr_layout_begin(ctx, a.format, image_inputs(k), &lk));
  gr_tensor *o;
  s = gr_layout_alloc_output(ctx, &lk, 0, dt, &out, k != CONV_BP_FILTER, &o);
  if (s != GR_OK) return gr_layout_end(&lk, s);
  void *od = gr_tensor_data(o), *a0 = gr_tensor_data(&lk.in[0]), *a1 = gr_tensor_data(&lk.in[1]);
  if (dnnl) /* depthwise NCHW: NHWC's kernels and bits */
    return gr_layout_end(&lk, gr_conv_dnnl(ctx, &g, GR_FORMAT_NHWC, dmode, a0, a1, od, ep));
  if (dt == GR_F32 && gr_vec_conv_direct(&g)) {
    conv_kind mode = k == CONV_TRANSPOSE ? CONV_BP_INPUT : k;
    return gr_layout_end(&lk, conv_direct(ctx, &g, mode, a0, a1, od, ep));
  }
  switch (k) {
    case CONV_FWD:
      s = conv_compute(ctx, &g, dt, CONV_FWD, a0, a1, od);
      if (s == GR_OK && ep) gr_conv_epilogue_run(ctx, ep, false, od, g.n);
      break;
    case CONV_BP_INPUT:
    case CONV_TRANSPOSE: {
      bool done = false;
      if (!gr_conv_is_pointwise(&g)) s = bp_input_flipped(ctx, &g, dt, od, a1, a0, &done);
      if (s == GR_OK && !done) s = conv_compute(ctx, &g, dt, CONV_BP_INPUT, od, a1, a0);
      break;
    }
    case CONV_BP_FILTER:
      s = conv_compute(ctx, &g, dt, CONV_BP_FILTER, a0, od, a1);
      break;
  }
  return gr_layout_end(&lk, s);
}

static gr_status conv_kernel(gr_kernel_ctx *ctx) {
  return conv_run(ctx, kind_of(ctx->node), NULL);
}

gr_status gr_conv_forward_kernel(gr_kernel_ctx *ctx, gr_conv_epilogue *ep) {
  return conv_run(ctx, CONV_FWD, ep);
}

/* 2 flops per multiply-add: elements of the positions-side tensor (input
 * di) times the window's kh * kw * (input channels per group) of the
 * filter (input fi; transposed: its dims [0, 1, 2]). */
void gr_conv_cost(const gr_node *n, gr_cost *c) {
  conv_kind k = kind_of(n);
  int di = k == CONV_FWD ? -1 : k == CONV_BP_FILTER ? 1 : 0, fi = k == CONV_BP_FILTER ? 2 : 1;
  const gr_shape *pos =
      di < 0 ? &n->out_shapes[0] : &n->inputs[di].node->out_shapes[n->inputs[di].index];
  const gr_shape *f = &n->inputs[fi].node->out_shapes[n->inputs[fi].index];
  double e = 1, w = 1, bytes = 0;
  for (int i = 0; i < pos->rank; i++) e *= pos->dims[i] < 0 ? 1 : (double)pos->dims[i];
  for (int i = 0; i < 3 && f->rank == 4; i++) w *= f->dims[i] < 0 ? 1 : (double)f->dims[i];
  if (k == CONV_TRANSPOSE)
    w = w / (f->dims[2] > 0 ? (double)f->dims[2] : 1) * (f->dims[3] > 0 ? (double)f->dims[3] : 1);
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_shape *s = &n->inputs[i].node->out_shapes[n->inputs[i].index];
    double v = 1;
    for (int d = 0; d < s->rank; d++) v *= s->dims[d] < 0 ? 1 : (double)s->dims[d];
    bytes += v;
  }
  c->flops = 2 * e * w;
  c->bytes = (bytes + e) * (double)gr_dtype_size(n->out_dtypes[0]);
  gr_layout_add_cost(n, image_inputs(k) | (k != CONV_BP_FILTER ? GR_LAYOUT_OUTPUT : 0), c);
}

/* ---- gradients ----------------------------------------------------------------------- */

/* A conv op with the attrs of node `like`. */
static gr_output conv_like(gr_graph *g, const char *op, const gr_node *like, const gr_output *in,
                           int n) {
  return gr_ops_build(g, op, NULL, in, n, like->attrs, like->num_attrs);
}

/* <conv(x, f), dy> = <x, bp_input(dy, f)> = <f, bp_filter(x, dy)>: every
 * op here is bilinear, so each gradient is one of the three again. */
static gr_status conv2d_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), f = gr_grad_x(c, 1), dy = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d_backprop_input", c->node, (gr_output[]){dy, f, x}, 3);
  c->dinputs[1] =
      conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){x, dy, f}, 3);
  return GR_OK;
}
/* dx = bp_input(dy, f, like x): for G = d dx, d dy = conv(G, f), d f = bp_filter(G, dy). */
static gr_status bp_input_grad(gr_grad_ctx *c) {
  gr_output dy = gr_grad_x(c, 0), f = gr_grad_x(c, 1), G = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){G, f}, 2);
  c->dinputs[1] =
      conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){G, dy, f}, 3);
  return GR_OK;
}
/* df = bp_filter(x, dy, like f): for H = d df, d x = bp_input(dy, H), d dy = conv(x, H). */
static gr_status bp_filter_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), dy = gr_grad_x(c, 1), H = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d_backprop_input", c->node, (gr_output[]){dy, H, x}, 3);
  c->dinputs[1] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){x, H}, 2);
  return GR_OK;
}
/* y = conv2d_transpose(x, f) = bp_input(x, f): d x = conv(G, f), d f = bp_filter(G, x). */
static gr_status transpose_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), f = gr_grad_x(c, 1), G = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){G, f}, 2);
  c->dinputs[1] = conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){G, x, f}, 3);
  return GR_OK;
}

#define DEFINE_CONV(NAME, DOC, GRAD, ...)                                                          \
  GR_WINDOW_OP(NAME, DOC, gr_conv_attr_specs, gr_conv_shape_fn, gr_conv_cost, conv_kernel, GRAD,   \
               __VA_ARGS__)

DEFINE_CONV(conv2d,
            "2-D convolution of x [n, h, w, c] with filter [kh, kw, c / groups, out_c] (attrs "
            "strides, padding SAME/VALID/EXPLICIT, explicit_paddings [t, b, l, r], dilations, "
            "groups; groups = c: depthwise; data_format NHWC or NCHW: x [n, c, h, w], the "
            "filter unchanged)",
            conv2d_grad, "x", "filter")
DEFINE_CONV(conv2d_backprop_input,
            "the gradient of conv2d with respect to x (shaped like `like`) for dy", bp_input_grad,
            "dy", "filter", "like")
DEFINE_CONV(conv2d_backprop_filter,
            "the gradient of conv2d with respect to the filter (shaped like `like`) for dy",
            bp_filter_grad, "x", "dy", "like")
DEFINE_CONV(conv2d_transpose,
            "transposed convolution of x [n, h, w, in_c] with filter [kh, kw, out_c / groups, "
            "in_c]: the gradient of conv2d as a layer (output h: SAME h * stride, VALID (h - 1) * "
            "stride + dilated kernel)",
            transpose_grad, "x", "filter")

static conv_kind kind_of(const gr_node *n) {
  return n->op == &gr_op_conv2d || n->op == &gr_op__fused_conv2d ? CONV_FWD
         : n->op == &gr_op_conv2d_backprop_input                 ? CONV_BP_INPUT
         : n->op == &gr_op_conv2d_backprop_filter                ? CONV_BP_FILTER
                                                                 : CONV_TRANSPOSE;
}

/* ---- builders -------------------------------------------------------------------------- */

static gr_output build_conv(gr_graph *g, const char *op, gr_output x, gr_output f,
                            const gr_conv_options *o) {
  gr_conv_options d = {0};
  if (!o) o = &d;
  int64_t strides[2] = {o->strides[0] ? o->strides[0] : 1, o->strides[1] ? o->strides[1] : 1};
  int64_t dil[2] = {o->dilations[0] ? o->dilations[0] : 1, o->dilations[1] ? o->dilations[1] : 1};
  bool expl =
      o->padding && (strcmp(o->padding, "EXPLICIT") == 0 || strcmp(o->padding, "explicit") == 0);
  gr_attr at[6] = {gr_attr_ints("strides", 2, strides),
                   gr_attr_string("padding", o->padding ? o->padding : "VALID"),
                   gr_attr_ints("explicit_paddings", expl ? 4 : 0, o->explicit_paddings),
                   gr_attr_ints("dilations", 2, dil),
                   gr_attr_int("groups", o->groups ? o->groups : 1),
                   gr_attr_string("data_format", o->data_format ? o->data_format : "NHWC")};
  return gr_ops_build(g, op, NULL, (gr_output[]){x, f}, 2, at, 6);
}

gr_output gr_conv2d(gr_graph *g, gr_output x, gr_output filter, const gr_conv_options *opt) {
  return build_conv(g, "conv2d", x, filter, opt);
}
gr_output gr_conv2d_transpose(gr_graph *g, gr_output x, gr_output filter,
                              const gr_conv_options *opt) {
  return build_conv(g, "conv2d_transpose", x, filter, opt);
}
