/* conv2d and its two gradients on oneDNN (conv_internal.h): f32, one
 * group, more than 4 input channels, not pointwise (a 1x1 stride-1
 * unpadded conv is one sgemm on x itself, which beats oneDNN's reorders
 * and kernel by 1.3-2x). oneDNN picks its blocked layouts for
 * the product; the tensors are reordered in and out of them from the
 * node's own layout (NHWC or NCHW: no transposing copy of ours), filters
 * HWIO. Depthwise convs (multiplier 1, undilated; grouped filters goihw,
 * HWIO as hwigo) run oneDNN's depthwise kernels on NHWC images as they
 * are (no reorders; an NCHW node is transposed by conv.c; forward, input
 * and filter gradient about 4x faster than vec_conv.c's direct kernels at
 * 28x28x64, batch 64); blocked layouts with their reorders cost more. The
 * batch is cut into blocks by a rule of the sizes only (at most
 * CONV_DNNL_BLOCKS, whole images; depthwise: also at most
 * CONV_DNNL_DW_IMAGES images each), run on the inter-op threads, each
 * block on one oneDNN thread; a filter gradient sums the blocks' partial
 * gradients in block order. So a result depends on the sizes, the CPU's
 * instruction set (oneDNN's kernels) and nothing else: the same bits for
 * any thread count and in any process on one machine.
 *
 * Threads: oneDNN's engine is made once (thread-safe); each block makes
 * its own stream, memory objects and scratchpad; a convolution primitive
 * is shared by the blocks, made on the calling thread and executed on the
 * pool's: oneDNN allows that only with a scratchpad of the caller's
 * (its own is shared by all primitives of a thread and ties a primitive
 * to the thread that made it), so every primitive here has one. */
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

/* At most this many blocks of images per op; a depthwise conv's blocks
 * at most CONV_DNNL_DW_IMAGES images each (a block's images stay in the
 * cache: 1.5-3x faster than 64 at once at 28x28x64). */
#define CONV_DNNL_BLOCKS    8
#define CONV_DNNL_DW_IMAGES 8

static dnnl_engine_t engine;
static void (*omp_threads)(int); /* omp_set_num_threads of the OpenMP oneDNN runs on */
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

/* Every thread that calls into oneDNN first sets its OpenMP team to one
 * thread: graphrun splits the work itself, and a process that never starts
 * an OpenMP worker thread can fork safely (a server task forked after
 * convolutions ran would otherwise wait forever for workers it does not
 * have). */
static void one_omp_thread(void) {
  if (omp_threads) omp_threads(1);
}

static void engine_init(void) {
  *(void **)&omp_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  one_omp_thread();
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

/* Depthwise with depth multiplier 1, undilated: oneDNN's own depthwise
 * kernels (other depthwise convs would get its slow gemm path). */
static bool depthwise(const gr_conv_geom *g) {
  return g->groups > 1 && g->c == g->groups && g->oc == g->groups && g->dh == 1 && g->dw == 1;
}

bool gr_conv_dnnl_applies(const gr_conv_geom *g) {
  int64_t pb = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->h - g->pt;
  int64_t pr = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->w - g->pl;
  pthread_once(&engine_once, engine_init);
  bool dense = g->groups == 1 && g->c > 4 && !gr_conv_is_pointwise(g);
  return engine && (dense || depthwise(g)) && pb >= 0 && pr >= 0 && g->n > 0 && g->oh > 0 &&
         g->ow > 0;
}

/* The filter's dims (one group: oihw; depthwise: goihw) and its user
 * layout, HWIO in both (hwigo: the output channels of one group next to
 * each other). */
static void filter_md(const gr_conv_geom *g, dnnl_format_tag_t tag, dnnl_memory_desc_t *md) {
  if (g->groups > 1) {
    dnnl_dims_t d = {g->groups, g->oc / g->groups, g->c / g->groups, g->kh, g->kw};
    dnnl_memory_desc_init_by_tag(md, 5, d, dnnl_f32, tag == dnnl_hwio ? dnnl_hwigo : tag);
  } else {
    dnnl_dims_t d = {g->oc, g->c, g->kh, g->kw};
    dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag);
  }
}

/* The primitives of one op for blocks of nb images. */
typedef struct dnnl_job {
  const gr_conv_geom *g;
  int mode; /* 0 forward, 1 input gradient, 2 filter gradient */
  gr_data_format fmt;
  const float *a, *b; /* FWD: x, f; BP_INPUT: dy, f; BP_FILTER: x, dy */
  float *out, *part;
  int64_t blocks;
  dnnl_primitive_t conv;
  dnnl_primitive_desc_t pd;
  /* user layouts: image in (x or dy), the filter, image out (y or dx) */
  dnnl_memory_desc_t user_in, user_f, user_out, user_in2;
  dnnl_status_t status;       /* the first failure of a block */
  const gr_conv_epilogue *ep; /* forward: applied to each block's output, or NULL */
} dnnl_job;

static void image_md(const gr_conv_geom *g, gr_data_format f, int64_t n, bool out,
                     dnnl_memory_desc_t *md) {
  dnnl_dims_t d = {n, out ? g->oc : g->c, out ? g->oh : g->h, out ? g->ow : g->w};
  dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, f == GR_FORMAT_NCHW ? dnnl_nchw : dnnl_nhwc);
}

/* Attributes asking for a scratchpad of the caller's (*attr NULL on failure). */
static dnnl_status_t user_scratchpad(dnnl_primitive_attr_t *attr) {
  dnnl_status_t st = dnnl_primitive_attr_create(attr);
  if (st == dnnl_success)
    st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (st != dnnl_success) dnnl_primitive_attr_destroy(*attr), *attr = NULL;
  return st;
}

/* Executes p (of pd, made with user_scratchpad) with args[0..n) and a
 * scratchpad of its own on stream s, and waits for it; args has room for
 * one more. */
static dnnl_status_t execute(dnnl_primitive_t p, const_dnnl_primitive_desc_t pd, dnnl_stream_t s,
                             int n, dnnl_exec_arg_t *args) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sz = md ? dnnl_memory_desc_get_size(md) : 0;
  void *buf = NULL;
  dnnl_memory_t m = NULL;
  dnnl_status_t st = dnnl_success;
  if (sz > 0) {
    buf = aligned_alloc(64, (sz + 63) / 64 * 64);
    st = buf ? dnnl_memory_create(&m, md, engine, buf) : dnnl_out_of_memory;
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m};
  }
  if (st == dnnl_success) st = dnnl_primitive_execute(p, s, n, args);
  if (st == dnnl_success) st = dnnl_stream_wait(s);
  dnnl_memory_destroy(m);
  free(buf);
  return st;
}

/* Executes a reorder from (md_a, pa) to (md_b, pb) on stream s. */
static dnnl_status_t reorder(dnnl_stream_t s, const dnnl_memory_desc_t *ma, void *pa,
                             const dnnl_memory_desc_t *mb, void *pb) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t p = NULL;
  dnnl_memory_t a = NULL, b = NULL;
  dnnl_status_t st = user_scratchpad(&attr);
  if (st == dnnl_success)
    st = dnnl_reorder_primitive_desc_create(&pd, ma, engine, mb, engine, attr);
  if (st == dnnl_success) st = dnnl_primitive_create(&p, pd);
  if (st == dnnl_success) st = dnnl_memory_create(&a, ma, engine, pa);
  if (st == dnnl_success) st = dnnl_memory_create(&b, mb, engine, pb);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
  if (st == dnnl_success) st = execute(p, pd, s, 2, args);
  dnnl_memory_destroy(a), dnnl_memory_destroy(b);
  dnnl_primitive_destroy(p), dnnl_primitive_desc_destroy(pd), dnnl_primitive_attr_destroy(attr);
  return st;
}

/* A memory of md at user pointer p, or of the primitive's layout q when
 * it differs (a new buffer: *own, reordered from p when `in`). */
static dnnl_status_t bind(dnnl_stream_t s, const dnnl_memory_desc_t *user, void *p,
                          const dnnl_memory_desc_t *q, bool in, dnnl_memory_t *m, void **own) {
  *own = NULL;
  if (dnnl_memory_desc_equal(user, q)) return dnnl_memory_create(m, user, engine, p);
  size_t sz = dnnl_memory_desc_get_size(q);
  *own = aligned_alloc(64, (sz + 63) / 64 * 64);
  if (!*own) return dnnl_out_of_memory;
  dnnl_status_t st = in ? reorder(s, user, p, q, *own) : dnnl_success;
  return st == dnnl_success ? dnnl_memory_create(m, q, engine, *own) : st;
}

static void block_run(void *arg, int i) {
  dnnl_job *j = arg;
  const gr_conv_geom *g = j->g;
  int64_t b0, b1;
  gr_vec_range(g->n, (int)j->blocks, i, &b0, &b1);
  one_omp_thread();
  size_t in_img = (size_t)(g->c * g->h * g->w), out_img = (size_t)(g->oc * g->oh * g->ow);
  /* the block's user pointers: image in, image in 2 (filter gradient: dy), out */
  float *pin = (float *)(j->mode == 1 ? j->a + b0 * out_img : j->a + b0 * in_img);
  float *pin2 = j->mode == 2 ? (float *)(j->b + b0 * out_img) : NULL;
  float *pout = j->mode == 0 ? j->out + b0 * out_img
                : j->mode == 1
                    ? j->out + b0 * in_img
                    : j->part + i * (int64_t)(g->kh * g->kw * (g->c / g->groups) * g->oc);
  dnnl_query_t qin = j->mode == 1 ? dnnl_query_diff_dst_md : dnnl_query_src_md;
  dnnl_query_t qout = j->mode == 0   ? dnnl_query_dst_md
                      : j->mode == 1 ? dnnl_query_diff_src_md
                                     : dnnl_query_diff_weights_md;
  const dnnl_memory_desc_t *min = dnnl_primitive_desc_query_md(j->pd, qin, 0);
  const dnnl_memory_desc_t *mout = dnnl_primitive_desc_query_md(j->pd, qout, 0);
  const dnnl_memory_desc_t *mf = dnnl_primitive_desc_query_md(j->pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *min2 = dnnl_primitive_desc_query_md(j->pd, dnnl_query_diff_dst_md, 0);
  dnnl_stream_t s = NULL;
  dnnl_memory_t m[3] = {NULL, NULL, NULL};
  void *own[3] = {NULL, NULL, NULL};
  dnnl_status_t st = dnnl_stream_create(&s, engine, dnnl_stream_default_flags);
  if (st == dnnl_success) st = bind(s, &j->user_in, pin, min, true, &m[0], &own[0]);
  if (st == dnnl_success && j->mode == 2)
    st = bind(s, &j->user_in2, pin2, min2, true, &m[1], &own[1]);
  else if (st == dnnl_success)
    st = bind(s, &j->user_f, (void *)j->b, mf, true, &m[1], &own[1]);
  if (st == dnnl_success) st = bind(s, &j->user_out, pout, mout, false, &m[2], &own[2]);
  int ain = j->mode == 1 ? DNNL_ARG_DIFF_DST : DNNL_ARG_SRC;
  int a2 = j->mode == 2 ? DNNL_ARG_DIFF_DST : DNNL_ARG_WEIGHTS;
  int aout = j->mode == 0 ? DNNL_ARG_DST : j->mode == 1 ? DNNL_ARG_DIFF_SRC : DNNL_ARG_DIFF_WEIGHTS;
  dnnl_exec_arg_t args[4] = {{ain, m[0]}, {a2, m[1]}, {aout, m[2]}};
  if (st == dnnl_success) st = execute(j->conv, j->pd, s, 3, args);
  if (st == dnnl_success && own[2]) st = reorder(s, mout, own[2], &j->user_out, pout);
  if (st == dnnl_success && j->ep) /* while the block's output is in the cache */
    gr_conv_epilogue_apply(j->ep, j->fmt == GR_FORMAT_NCHW, pout, b1 - b0);
  for (int k = 0; k < 3; k++) dnnl_memory_destroy(m[k]), free(own[k]);
  dnnl_stream_destroy(s);
  if (st != dnnl_success) __atomic_store_n(&j->status, st, __ATOMIC_RELAXED);
}

/* The descriptors of conv g for nb images, the op's primitive desc. */
static dnnl_status_t make_pd(dnnl_job *j, int64_t nb) {
  const gr_conv_geom *g = j->g;
  dnnl_memory_desc_t src, wei, dst;
  dnnl_dims_t sd = {nb, g->c, g->h, g->w}, dd = {nb, g->oc, g->oh, g->ow};
  dnnl_dims_t strides = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->pt, g->pl};
  dnnl_dims_t pr = {(g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->h - g->pt,
                    (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->w - g->pl};
  /* depthwise NHWC: oneDNN's depthwise kernels take the images as they are */
  dnnl_format_tag_t it =
      g->groups > 1 && j->fmt == GR_FORMAT_NHWC ? dnnl_nhwc : dnnl_format_tag_any;
  dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, it);
  filter_md(g, dnnl_format_tag_any, &wei);
  dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, it);
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_status_t st = user_scratchpad(&attr);
  if (st == dnnl_success)
    st = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                    dnnl_convolution_direct, &src, &wei, NULL, &dst,
                                                    strides, dil, pl, pr);
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL);
  if (st != dnnl_success || j->mode == 0) {
    j->pd = fpd;
    dnnl_primitive_attr_destroy(attr);
    return st;
  }
  if (j->mode == 1)
    st = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src, &wei,
                                                          &dst, strides, dil, pl, pr);
  else
    st = dnnl_dilated_convolution_backward_weights_desc_init(
        &bd, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides, dil, pl, pr);
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&j->pd, &bd, attr, engine, fpd);
  dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_attr_destroy(attr);
  return st;
}

gr_status gr_conv_dnnl(gr_kernel_ctx *ctx, const gr_conv_geom *g, gr_data_format fmt, int mode,
                       const float *a, const float *b, float *out, const gr_conv_epilogue *ep) {
  one_omp_thread();
  dnnl_job j = {.g = g, .mode = mode, .fmt = fmt, .a = a, .b = b, .out = out};
  j.ep = mode == 0 ? ep : NULL;
  j.blocks = g->n < CONV_DNNL_BLOCKS ? g->n : CONV_DNNL_BLOCKS;
  int64_t nb = (g->n + j.blocks - 1) / j.blocks, fsize = g->kh * g->kw * (g->c / g->groups) * g->oc;
  if (g->groups > 1 && nb > CONV_DNNL_DW_IMAGES) nb = CONV_DNNL_DW_IMAGES;
  /* blocks of equal size (the last may be smaller: its own primitive) */
  j.blocks = (g->n + nb - 1) / nb;
  filter_md(g, dnnl_hwio, &j.user_f);
  gr_tensor part = gr_tensor_empty();
  if (mode == 2) {
    gr_shape ps = gr_shape_make(1, (int64_t[]){j.blocks * fsize});
    GR_TRY(gr_tensor_alloc(&part, GR_F32, &ps, ctx->err));
    j.part = gr_tensor_data(&part);
  }
  dnnl_status_t st = dnnl_success;
  int64_t done = 0; /* blocks run */
  for (int pass = 0; pass < 2 && st == dnnl_success && done < j.blocks; pass++) {
    /* pass 0: the full blocks; pass 1: the last, smaller one */
    int64_t count = pass == 0 ? g->n / nb : 1, size = pass == 0 ? nb : g->n - (g->n / nb) * nb;
    if (count == 0 || size == 0) continue;
    st = make_pd(&j, size);
    if (st == dnnl_success) st = dnnl_primitive_create(&j.conv, j.pd);
    if (st != dnnl_success) break;
    bool in_is_dy = mode == 1;
    image_md(g, fmt, size, in_is_dy, &j.user_in);
    image_md(g, fmt, size, mode == 0, &j.user_out);
    if (mode == 2) {
      image_md(g, fmt, size, true, &j.user_in2);
      j.user_out = j.user_f;
    }
    /* blocks [done, done + count) through block_run's index: shift a, b, out */
    dnnl_job sub = j;
    size_t in_img = (size_t)(g->c * g->h * g->w), out_img = (size_t)(g->oc * g->oh * g->ow);
    gr_conv_geom gs = *g;
    gs.n = count * size;
    sub.g = &gs;
    sub.blocks = count;
    sub.a = a + done * nb * (int64_t)(mode == 1 ? out_img : in_img);
    if (mode == 2) sub.b = b + done * nb * (int64_t)out_img;
    if (mode == 0) sub.out = out + done * nb * (int64_t)out_img;
    if (mode == 1) sub.out = out + done * nb * (int64_t)in_img;
    if (mode == 2) sub.part = j.part + done * fsize;
    gr_kernel_parallel(ctx, (int)count, block_run, &sub);
    st = sub.status;
    dnnl_primitive_destroy(j.conv), dnnl_primitive_desc_destroy(j.pd);
    j.conv = NULL, j.pd = NULL;
    done += count;
  }
  if (st == dnnl_success && mode == 2) {
    for (int64_t e = 0; e < fsize; e++) out[e] = j.part[e];
    for (int64_t k = 1; k < j.blocks; k++)
      for (int64_t e = 0; e < fsize; e++) out[e] += j.part[k * fsize + e];
  }
  gr_tensor_release(&part);
  if (st != dnnl_success)
    return gr_kernel_error(ctx,
                           st == dnnl_out_of_memory ? GR_ERR_RESOURCE_EXHAUSTED : GR_ERR_INTERNAL,
                           "oneDNN convolution failed (status %d)", (int)st);
  return GR_OK;
}
