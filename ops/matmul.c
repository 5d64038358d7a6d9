/* matmul: rank-2 products on OpenBLAS cblas_sgemm / cblas_dgemm, operating
 * directly on the tensors' memory. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_status gr_ops_gemm_shape(gr_shape_ctx *ctx, int first, gr_shape *out) {
  GR_TRY(gr_shape_check_dtype(ctx, first, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_same_dtype(ctx, first, first + 1));
  /* an unknown rank is taken as [?, ?]: the kernel checks the runtime rank */
  const gr_shape unknown2 = gr_shape_make(2, (int64_t[]){-1, -1});
  for (int i = first; i < first + 2; i++)
    if (ctx->in_shapes[i].rank >= 0) GR_TRY(gr_shape_check_rank(ctx, i, 2));
  bool ta = gr_node_attr_bool(ctx->node, "transpose_a", false);
  bool tb = gr_node_attr_bool(ctx->node, "transpose_b", false);
  const gr_shape *a = ctx->in_shapes[first].rank < 0 ? &unknown2 : &ctx->in_shapes[first];
  const gr_shape *b = ctx->in_shapes[first + 1].rank < 0 ? &unknown2 : &ctx->in_shapes[first + 1];
  int64_t m = a->dims[ta ? 1 : 0], ka = a->dims[ta ? 0 : 1];
  int64_t kb = b->dims[tb ? 1 : 0], n = b->dims[tb ? 0 : 1];
  if (ka >= 0 && kb >= 0 && ka != kb) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "inner dimensions differ: a%s is %s, b%s is %s (%lld vs %lld)",
                          ta ? "^T" : "", gr_shape_str(a, x), tb ? "^T" : "", gr_shape_str(b, y),
                          (long long)ka, (long long)kb);
  }
  *out = gr_shape_make(2, (int64_t[]){m, n});
  return GR_OK;
}

static gr_status matmul_shape(gr_shape_ctx *ctx) {
  gr_shape out;
  GR_TRY(gr_ops_gemm_shape(ctx, 0, &out));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

gr_status gr_ops_gemm_dims(gr_kernel_ctx *ctx, const gr_tensor *A, const gr_tensor *B, bool ta,
                           bool tb, int64_t mnk[3]) {
  if (A->shape.rank != 2 || B->shape.rank != 2)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "inputs must be matrices");
  int64_t m = A->shape.dims[ta ? 1 : 0], k = A->shape.dims[ta ? 0 : 1];
  int64_t kb = B->shape.dims[tb ? 1 : 0], n = B->shape.dims[tb ? 0 : 1];
  if (k != kb) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "inner dimensions differ: %s and %s",
                           gr_shape_str(&A->shape, x), gr_shape_str(&B->shape, y));
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "matrix too large for BLAS");
  mnk[0] = m, mnk[1] = n, mnk[2] = k;
  return GR_OK;
}

/* One BLAS call: C[m, n] = alpha op(A) op(B) + beta C (C's rows ldc apart);
 * a, b, c point at the first elements this call reads and writes. */
static void blas_gemm(gr_dtype dt, bool ta, bool tb, int m, int n, int k, double alpha,
                      const void *a, int lda, const void *b, int ldb, double beta, void *c,
                      int ldc) {
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (dt == GR_F32)
    cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, TA, TB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* A product split into chunks of rows (by_rows) or columns of C, each a
 * multiple of 16 wide but the last. */
typedef struct gemm_split {
  const gr_tensor *A, *B;
  bool ta, tb, by_rows;
  int m, n, k, chunks, step;
  double alpha, beta;
  void *c;
} gemm_split;

static void gemm_chunk(void *arg, int i) {
  const gemm_split *g = arg;
  size_t es = gr_dtype_size(g->A->dtype);
  int lda = (int)g->A->shape.dims[1], ldb = (int)g->B->shape.dims[1];
  int lo = i * g->step, total = g->by_rows ? g->m : g->n;
  int len = i == g->chunks - 1 ? total - lo : g->step;
  const char *a = gr_tensor_data(g->A), *b = gr_tensor_data(g->B);
  char *c = g->c;
  if (g->by_rows) /* rows lo.. of op(A) and of C */
    blas_gemm(g->A->dtype, g->ta, g->tb, len, g->n, g->k, g->alpha,
              a + es * (g->ta ? (size_t)lo : (size_t)lo * (size_t)lda), lda, b, ldb, g->beta,
              c + es * (size_t)lo * (size_t)g->n, g->n);
  else /* columns lo.. of op(B) and of C */
    blas_gemm(g->A->dtype, g->ta, g->tb, g->m, len, g->k, g->alpha, a, lda,
              b + es * (g->tb ? (size_t)lo * (size_t)ldb : (size_t)lo), ldb, g->beta,
              c + es * (size_t)lo, g->n);
}

static int blas_threads = 1; /* gr_ops_set_intra_op_threads */

static double split_flops = -1;
static pthread_once_t split_once = PTHREAD_ONCE_INIT;
static void read_split_flops(void) {
  const char *v = getenv("GRAPHRUN_SPLIT_FLOPS");
  char *end;
  double f = v ? strtod(v, &end) : -1;
  split_flops = v && end != v && f >= 0 ? f : GR_OPS_GEMM_SPLIT_FLOPS;
}
double gr_ops_gemm_split_flops(void) {
  pthread_once(&split_once, read_split_flops);
  return split_flops;
}

int gr_ops_gemm_chunks(int64_t m, int64_t n, int64_t k) {
  double flops = 2.0 * (double)m * (double)n * (double)k;
  int64_t wide = m > n ? m : n;
  return __atomic_load_n(&blas_threads, __ATOMIC_RELAXED) > 1 ||
                 flops < gr_ops_gemm_split_flops() || wide < 32
             ? 1
             : 2;
}

void gr_ops_gemm(gr_kernel_ctx *ctx, const gr_tensor *A, const gr_tensor *B, bool ta, bool tb,
                 const int64_t mnk[3], double alpha, double beta, void *c) {
  int m = (int)mnk[0], n = (int)mnk[1], k = (int)mnk[2];
  if (m == 0 || n == 0) return;
  if (k == 0) { /* C = beta C */
    if (beta == 0) {
      memset(c, 0, (size_t)m * (size_t)n * gr_dtype_size(A->dtype));
    } else if (A->dtype == GR_F32) {
      for (int64_t i = 0; i < (int64_t)m * n; i++) ((float *)c)[i] *= (float)beta;
    } else {
      for (int64_t i = 0; i < (int64_t)m * n; i++) ((double *)c)[i] *= beta;
    }
    return;
  }
  gemm_split g = {A, B, ta, tb, m >= n, m, n, k, 1, 0, alpha, beta, c};
  g.chunks = gr_ops_gemm_chunks(m, n, k);
  int wide = g.by_rows ? m : n;
  g.step = g.chunks > 1 ? (wide / g.chunks + 15) / 16 * 16 : wide;
  if (g.chunks > 1) g.chunks = (wide + g.step - 1) / g.step;
  if (g.chunks > 1)
    gr_kernel_parallel(ctx, g.chunks, gemm_chunk, &g);
  else
    blas_gemm(A->dtype, ta, tb, m, n, k, alpha, gr_tensor_data(A), (int)A->shape.dims[1],
              gr_tensor_data(B), (int)B->shape.dims[1], beta, c, n);
}

static gr_status matmul_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *A = &ctx->inputs[0], *B = &ctx->inputs[1];
  bool ta = gr_node_attr_bool(ctx->node, "transpose_a", false);
  bool tb = gr_node_attr_bool(ctx->node, "transpose_b", false);
  int64_t mnk[3];
  GR_TRY(gr_ops_gemm_dims(ctx, A, B, ta, tb, mnk));
  gr_tensor *o;
  gr_shape os = gr_shape_make(2, (int64_t[]){mnk[0], mnk[1]});
  GR_TRY(gr_kernel_alloc_output(ctx, 0, A->dtype, &os, &o));
  gr_ops_gemm(ctx, A, B, ta, tb, mnk, 1.0, 0.0, gr_tensor_data(o));
  return GR_OK;
}

/* Dim i of a matrix shape, 1 when unknown (or the rank is). */
static double known(const gr_shape *s, int i) {
  return s->rank != 2 || s->dims[i] < 0 ? 1.0 : (double)s->dims[i];
}

void gr_ops_gemm_cost(const gr_node *n, int first, gr_cost *c) {
  const gr_shape *a = &n->inputs[first].node->out_shapes[n->inputs[first].index];
  const gr_shape *b = &n->inputs[first + 1].node->out_shapes[n->inputs[first + 1].index];
  bool ta = gr_node_attr_bool(n, "transpose_a", false);
  double m = known(a, ta ? 1 : 0), k = known(a, ta ? 0 : 1);
  double nn = known(b, gr_node_attr_bool(n, "transpose_b", false) ? 0 : 1);
  double es = (double)gr_dtype_size(n->inputs[first].node->out_dtypes[n->inputs[first].index]);
  c->flops = 2.0 * m * nn * k;
  c->bytes = es * (m * k + k * nn + m * nn);
}

static void matmul_cost(const gr_node *n, gr_cost *c) {
  gr_ops_gemm_cost(n, 0, c);
}

/* C = op(A) op(B) (A, B: inputs first and first + 1), G = dC:
 *   A B:     dA = G B^T,     dB = A^T G
 *   A^T B:   dA = B G^T,     dB = A G
 *   A B^T:   dA = G B,       dB = G^T A
 *   A^T B^T: dA = B^T G^T,   dB = G^T A^T */
static void product_grads(gr_grad_ctx *c, int first) {
  gr_graph *g = c->graph;
  gr_output a = gr_grad_x(c, first), b = gr_grad_x(c, first + 1), dy = c->grads[0];
  gr_output *da = &c->dinputs[first], *db = &c->dinputs[first + 1];
  bool ta = gr_node_attr_bool(c->node, "transpose_a", false);
  bool tb = gr_node_attr_bool(c->node, "transpose_b", false);
  if (!ta && !tb) {
    *da = gr_matmul(g, dy, b, false, true);
    *db = gr_matmul(g, a, dy, true, false);
  } else if (ta && !tb) {
    *da = gr_matmul(g, b, dy, false, true);
    *db = gr_matmul(g, a, dy, false, false);
  } else if (!ta && tb) {
    *da = gr_matmul(g, dy, b, false, false);
    *db = gr_matmul(g, dy, a, true, false);
  } else {
    *da = gr_matmul(g, b, dy, true, true);
    *db = gr_matmul(g, dy, a, true, true);
  }
}

static gr_status matmul_grad(gr_grad_ctx *c) {
  product_grads(c, 0);
  return GR_OK;
}

static const gr_attr_spec matmul_attrs[] = {
    {"transpose_a", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    {"transpose_b", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};

const gr_op_def gr_op_matmul = {.name = "matmul",
                                .doc = "matrix product a @ b (attrs transpose_a, transpose_b)",
                                .min_inputs = 2,
                                .max_inputs = 2,
                                .input_names = (const char *const[]){"a", "b"},
                                .num_outputs = 1,
                                .attrs = matmul_attrs,
                                .num_attrs = 2,
                                .shape_fn = matmul_shape,
                                .cost_fn = matmul_cost,
                                .kernel = matmul_kernel,
                                .grad_fn = matmul_grad};

gr_output gr_matmul(gr_graph *g, gr_output a, gr_output b, bool transpose_a, bool transpose_b) {
  gr_output in[2] = {a, b};
  gr_attr at[2] = {gr_attr_bool("transpose_a", transpose_a),
                   gr_attr_bool("transpose_b", transpose_b)};
  return gr_ops_build(g, "matmul", NULL, in, 2, at, 2);
}

/* ---- matmul_add: c + op(a) op(b) ------------------------------------------------------
 * One gemm with beta = 1 into c's buffer (taken over when this node holds
 * the only reference, else copied): autodiff chains a weight's gradient
 * products through it (ops/autodiff.c), so each product adds into one
 * buffer instead of writing a buffer of its own for an add_n. */

static gr_status matmul_add_shape(gr_shape_ctx *ctx) {
  gr_shape prod;
  GR_TRY(gr_ops_gemm_shape(ctx, 1, &prod));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  const gr_shape *c = &ctx->in_shapes[0];
  if (c->rank >= 0) {
    GR_TRY(gr_shape_check_rank(ctx, 0, 2));
    for (int i = 0; i < 2; i++)
      if (c->dims[i] >= 0 && prod.dims[i] >= 0 && c->dims[i] != prod.dims[i]) {
        char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
        return gr_shape_error(ctx, GR_ERR_SHAPE, "the addend is %s, the product %s",
                              gr_shape_str(c, x), gr_shape_str(&prod, y));
      }
    for (int i = 0; i < 2; i++)
      if (prod.dims[i] < 0) prod.dims[i] = c->dims[i];
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = prod;
  return GR_OK;
}

static gr_status matmul_add_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *C = &ctx->inputs[0], *A = &ctx->inputs[1], *B = &ctx->inputs[2];
  bool ta = gr_node_attr_bool(ctx->node, "transpose_a", false);
  bool tb = gr_node_attr_bool(ctx->node, "transpose_b", false);
  int64_t mnk[3];
  GR_TRY(gr_ops_gemm_dims(ctx, A, B, ta, tb, mnk));
  gr_shape os = gr_shape_make(2, (int64_t[]){mnk[0], mnk[1]});
  if (!gr_shape_equal(&C->shape, &os)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "the addend is %s, the product %s",
                           gr_shape_str(&C->shape, x), gr_shape_str(&os, y));
  }
  const void *c_data = gr_tensor_data(C); /* before the kernel may take C over */
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, A->dtype, &os, &o));
  if (gr_tensor_data(o) != c_data)
    memcpy(gr_tensor_data(o), c_data, (size_t)gr_shape_num_elements(&os) * gr_dtype_size(A->dtype));
  gr_ops_gemm(ctx, A, B, ta, tb, mnk, 1.0, 1.0, gr_tensor_data(o));
  return GR_OK;
}

static void matmul_add_cost(const gr_node *n, gr_cost *c) {
  gr_ops_gemm_cost(n, 1, c);
  const gr_shape *s = &n->inputs[0].node->out_shapes[n->inputs[0].index];
  int64_t k = gr_shape_num_elements(s);
  if (k > 0) c->bytes += (double)k * (double)gr_dtype_size(n->out_dtypes[0]);
}

/* d c = G; a and b as in matmul */
static gr_status matmul_add_grad(gr_grad_ctx *c) {
  c->dinputs[0] = c->grads[0];
  product_grads(c, 1);
  return GR_OK;
}

const gr_op_def gr_op_matmul_add = {
    .name = "matmul_add",
    .doc = "c + op(a) op(b), adding into c's buffer when it can (attrs transpose_a, transpose_b)",
    .min_inputs = 3,
    .max_inputs = 3,
    .input_names = (const char *const[]){"c", "a", "b"},
    .num_outputs = 1,
    .attrs = matmul_attrs,
    .num_attrs = 2,
    .shape_fn = matmul_add_shape,
    .cost_fn = matmul_add_cost,
    .kernel = matmul_add_kernel,
    .grad_fn = matmul_add_grad};

gr_output gr_matmul_add(gr_graph *g, gr_output c, gr_output a, gr_output b, bool transpose_a,
                        bool transpose_b) {
  gr_output in[3] = {c, a, b};
  gr_attr at[2] = {gr_attr_bool("transpose_a", transpose_a),
                   gr_attr_bool("transpose_b", transpose_b)};
  return gr_ops_build(g, "matmul_add", NULL, in, 3, at, 2);
}

void gr_ops_set_intra_op_threads(int threads) {
  if (threads <= 0) return;
  openblas_set_num_threads(threads);
  /* BLAS threads of its own: no split over the inter-op threads */
  __atomic_store_n(&blas_threads, threads, __ATOMIC_RELAXED);
}

/* Kernel sets by the widest vectors they use: 2 AVX2, 3 AVX-512; anything
 * else (Prescott, Nehalem, Sandybridge, ...) counts as 1. */
static int core_width(const char *core) {
  static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  static const char *const avx2[] = {"haswell", "zen", "skylake", "excavator"};
  for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
    if (strcasecmp(core, avx512[i]) == 0) return 3;
  for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
    if (strcasecmp(core, avx2[i]) == 0) return 2;
  return 1;
}

static int cpu_width(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
#endif
  return 1;
}

const char *gr_ops_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

const char *gr_ops_blas_suggested_core(void) {
  const char *set = getenv("OPENBLAS_CORETYPE");
  if (set && *set) return NULL; /* the user's choice */
  int have = core_width(gr_ops_blas_core()), can = cpu_width();
  if (have >= can) return NULL;
  return can == 3 ? "SkylakeX" : "Haswell";
}
