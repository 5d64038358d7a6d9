/* _fused_elementwise: a chain of float elementwise ops as one kernel, which
 * the fusion pass makes (passes/pass_fuse_elementwise.c; docs/passes.md).
 * Attr `program` lists the steps, ';'-separated, each an op and its
 * operands: "mul 0 1;add 3 2" with inputs 0..n-1 and step k's result as
 * operand n + k; the last step is the output. Each input has the output's
 * shape or is a scalar (rank 0). The kernel runs the steps on one block of
 * elements at a time (each step one vectorisable loop, the block in the
 * cache), with the element arithmetic of the ops it replaces (binary.c,
 * unary.c, nn.c, nn_grad.c), so the bits are the unfused graph's. It
 * writes over a dying input of the output's shape (forwarding). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

typedef enum fe_op {
  FE_ADD,
  FE_SUB,
  FE_MUL,
  FE_DIV,
  FE_MAXIMUM,
  FE_MINIMUM,
  FE_RELU_GRAD, /* binary */
  FE_NEG,
  FE_SQUARE,
  FE_RELU, /* unary */
  FE_NUM_OPS
} fe_op;

static const char *const fe_names[FE_NUM_OPS] = {"add",     "sub",       "mul", "div",    "maximum",
                                                 "minimum", "relu_grad", "neg", "square", "relu"};

int gr_fused_elementwise_op_index(const char *op_name) {
  for (int i = 0; i < FE_NUM_OPS; i++)
    if (strcmp(fe_names[i], op_name) == 0) return i;
  return -1;
}

/* Parses program for n inputs into e's steps; else writes why into why[]. */
static bool fe_parse(const char *program, int n, gr_ew *e, char *why, size_t why_len) {
  e->num_steps = 0;
  e->n = n;
  const char *s = program;
  while (*s) {
    int k = e->num_steps;
    if (k == GR_FUSED_ELEMENTWISE_MAX_STEPS) {
      snprintf(why, why_len, "more than %d steps", GR_FUSED_ELEMENTWISE_MAX_STEPS);
      return false;
    }
    char name[16];
    int a = -1, b = -1, used = 0;
    int got = sscanf(s, "%15s %d %d%n", name, &a, &b, &used);
    if (got < 2) {
      snprintf(why, why_len, "step %d: want 'op operand [operand]'", k);
      return false;
    }
    if (got == 2 && sscanf(s, "%15s %d%n", name, &a, &used) != 2) used = 0;
    int op = gr_fused_elementwise_op_index(name);
    bool binary = op >= 0 && op < FE_NEG;
    if (op < 0 || (binary != (got == 3))) {
      snprintf(why, why_len, "step %d: '%s' is no %s op of the fused set", k, name,
               got == 3 ? "binary" : "unary");
      return false;
    }
    if (a < 0 || a >= n + k || (binary && (b < 0 || b >= n + k))) {
      snprintf(why, why_len, "step %d: an operand is not an input or an earlier step", k);
      return false;
    }
    e->step[k] = (gr_ew_step){op, a, binary ? b : -1};
    e->num_steps++;
    s += used;
    while (*s == ' ') s++;
    if (*s == ';') {
      s++;
    } else if (*s) {
      snprintf(why, why_len, "step %d: trailing '%s'", k, s);
      return false;
    }
  }
  if (!e->num_steps) snprintf(why, why_len, "no steps");
  return e->num_steps > 0;
}

gr_status gr_ew_shape(gr_shape_ctx *ctx, const char *program, int first, gr_dtype *dtype,
                      gr_shape *shape) {
  gr_ew e;
  char why[128];
  int n = ctx->num_inputs - first;
  if (n < 1 || n > GR_FUSED_ELEMENTWISE_MAX_INPUTS)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "program '%s' over %d inputs (1 to %d)",
                          program, n, GR_FUSED_ELEMENTWISE_MAX_INPUTS);
  if (!fe_parse(program, n, &e, why, sizeof why))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "program '%s': %s", program, why);
  *shape = (gr_shape){0};
  for (int i = first; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_dtype(ctx, i, GR_DT_FLOAT));
    GR_TRY(gr_shape_check_same_dtype(ctx, first, i));
    if (ctx->in_shapes[i].rank && !gr_shape_broadcast(shape, &ctx->in_shapes[i], shape)) {
      char a[GR_SHAPE_STR_MAX];
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d %s is neither a scalar nor the others'", i,
                            gr_shape_str(&ctx->in_shapes[i], a));
    }
  }
  *dtype = ctx->in_dtypes[first];
  return GR_OK;
}

gr_status gr_ew_prepare(gr_kernel_ctx *ctx, const char *program, int first, gr_ew *e) {
  char why[128];
  int n = ctx->num_inputs - first;
  if (n < 1 || n > GR_FUSED_ELEMENTWISE_MAX_INPUTS || !fe_parse(program, n, e, why, sizeof why))
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "program '%s': %s", program,
                           n < 1 || n > GR_FUSED_ELEMENTWISE_MAX_INPUTS ? "bad input count" : why);
  e->dtype = ctx->inputs[first].dtype;
  e->unique = -1;
  const gr_shape *os = NULL;
  for (int i = 0; i < n; i++) {
    const gr_tensor *x = &ctx->inputs[first + i];
    if (x->dtype != e->dtype || !gr_dtype_is_float(x->dtype))
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "input %d is %s, input %d %s", first + i,
                             gr_dtype_name(x->dtype), first, gr_dtype_name(e->dtype));
    e->in[i] = gr_tensor_data(x);
    e->scalar[i] = x->shape.rank == 0;
    if (e->scalar[i]) continue;
    if (os && !gr_shape_equal(os, &x->shape)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "input %d %s is neither a scalar nor %s", first + i,
                             gr_shape_str(&x->shape, a), gr_shape_str(os, b));
    }
    os = &x->shape;
    if (e->unique < 0 && gr_tensor_is_unique(x)) e->unique = first + i;
  }
  e->shape = os ? *os : (gr_shape){0};
  return GR_OK;
}

void gr_ew_scratch_init(const gr_ew *e, gr_ew_scratch *s) {
  for (int i = 0; i < e->n; i++) {
    if (!e->scalar[i]) continue;
    for (int j = 0; j < GR_EW_BLOCK; j++) {
      if (e->dtype == GR_F64)
        s->d[i][j] = *(const double *)e->in[i];
      else
        s->f[i][j] = *(const float *)e->in[i];
    }
  }
}

/* The element functions: those of the ops replaced, letter for letter
 * (binary.c, unary.c, nn.c, nn_grad.c). */
#define FE_MAXNAN(x, y) (((x) > (y) || (x) != (x)) ? (x) : (y))
#define FE_MINNAN(x, y) (((x) < (y) || (x) != (x)) ? (x) : (y))
#define FE_LOOP(T, EXPR)                                                                           \
  for (int j = 0; j < len; j++) {                                                                  \
    T x = a[j], y = b[j];                                                                          \
    r[j] = (EXPR);                                                                                 \
  }
#define FE_LOOP1(T, EXPR)                                                                          \
  for (int j = 0; j < len; j++) {                                                                  \
    T x = a[j];                                                                                    \
    r[j] = (EXPR);                                                                                 \
  }

/* One block of each dtype: the steps over operands ops[] (inputs, then
 * the results in t), the last written to out. */
#define FE_BLOCK_FN(NAME, T, ZERO)                                                                 \
  GR_VEC_CLONES                                                                                    \
  static void NAME(const gr_ew *e, const T **ops, T(*t)[GR_EW_BLOCK], T *out, int len) {           \
    for (int k = 0; k < e->num_steps; k++) {                                                       \
      const gr_ew_step *s = &e->step[k];                                                           \
      const T *a = ops[s->a], *b = s->b >= 0 ? ops[s->b] : NULL;                                   \
      T *r = k == e->num_steps - 1 ? out : t[k];                                                   \
      switch ((fe_op)s->op) {                                                                      \
        case FE_ADD:                                                                               \
          FE_LOOP(T, x + y) break;                                                                 \
        case FE_SUB:                                                                               \
          FE_LOOP(T, x - y) break;                                                                 \
        case FE_MUL:                                                                               \
          FE_LOOP(T, x *y) break;                                                                  \
        case FE_DIV:                                                                               \
          FE_LOOP(T, x / y) break;                                                                 \
        case FE_MAXIMUM:                                                                           \
          FE_LOOP(T, FE_MAXNAN(x, y)) break;                                                       \
        case FE_MINIMUM:                                                                           \
          FE_LOOP(T, FE_MINNAN(x, y)) break;                                                       \
        case FE_RELU_GRAD:                                                                         \
          FE_LOOP(T, y > 0 ? x : ZERO) break;                                                      \
        case FE_NEG:                                                                               \
          FE_LOOP1(T, -x) break;                                                                   \
        case FE_SQUARE:                                                                            \
          FE_LOOP1(T, (x * x)) break;                                                              \
        case FE_RELU:                                                                              \
          FE_LOOP1(T, x < 0 ? ZERO : x) break;                                                     \
        default:                                                                                   \
          GR_ASSERT(false);                                                                        \
      }                                                                                            \
      ops[e->n + k] = r;                                                                           \
    }                                                                                              \
  }
FE_BLOCK_FN(fe_block_f32, float, 0.0f)
FE_BLOCK_FN(fe_block_f64, double, 0.0)

/* The operands of the block at off (a scalar's spread row, else the
 * input's elements), then the steps. */
#define FE_RUN_BLOCK(T, ROWS, BLOCK_FN)                                                            \
  do {                                                                                             \
    const T *ops[GR_FUSED_ELEMENTWISE_MAX_INPUTS + GR_FUSED_ELEMENTWISE_MAX_STEPS];                \
    for (int i = 0; i < e->n; i++) ops[i] = e->scalar[i] ? ROWS[i] : (const T *)e->in[i] + off;    \
    BLOCK_FN(e, ops, ROWS + GR_FUSED_ELEMENTWISE_MAX_INPUTS, out, len);                            \
  } while (0)

void gr_ew_block(const gr_ew *e, gr_ew_scratch *s, int64_t off, int len, void *out) {
  GR_ASSERT(len > 0 && len <= GR_EW_BLOCK);
  if (e->dtype == GR_F64)
    FE_RUN_BLOCK(double, s->d, fe_block_f64);
  else
    FE_RUN_BLOCK(float, s->f, fe_block_f32);
}

/* ---- the op ----------------------------------------------------------------------------- */

static gr_status fe_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  return gr_ew_shape(ctx, gr_node_attr_string(ctx->node, "program", ""), 0, &ctx->out_dtypes[0],
                     &ctx->out_shapes[0]);
}

typedef struct fe_job {
  const gr_ew *e;
  char *out;
  int64_t size;
  int chunks;
} fe_job;

static void fe_chunk(void *arg, int c) {
  const fe_job *j = arg;
  int64_t blocks = (j->size + GR_EW_BLOCK - 1) / GR_EW_BLOCK, lo, hi;
  gr_vec_range(blocks, j->chunks, c, &lo, &hi);
  gr_ew_scratch s;
  gr_ew_scratch_init(j->e, &s);
  size_t es = gr_dtype_size(j->e->dtype);
  for (int64_t b = lo; b < hi; b++) {
    int64_t off = b * GR_EW_BLOCK;
    int len = (int)(j->size - off < GR_EW_BLOCK ? j->size - off : GR_EW_BLOCK);
    gr_ew_block(j->e, &s, off, len, j->out + (size_t)off * es);
  }
}

static gr_status fe_kernel(gr_kernel_ctx *ctx) {
  gr_ew e;
  GR_TRY(gr_ew_prepare(ctx, gr_node_attr_string(ctx->node, "program", ""), 0, &e));
  gr_tensor *o;
  GR_TRY(e.unique >= 0 ? gr_kernel_forward_or_alloc(ctx, e.unique, 0, e.dtype, &e.shape, &o)
                       : gr_kernel_alloc_output(ctx, 0, e.dtype, &e.shape, &o));
  fe_job j = {&e, gr_tensor_data(o), gr_shape_num_elements(&e.shape), 0};
  int64_t blocks = (j.size + GR_EW_BLOCK - 1) / GR_EW_BLOCK;
  j.chunks =
      gr_vec_chunks(ctx, blocks, (double)j.size * (double)gr_dtype_size(e.dtype) * (e.n + 1));
  if (blocks > 0) gr_kernel_parallel(ctx, j.chunks, fe_chunk, &j);
  return GR_OK;
}

static void fe_cost(const gr_node *n, gr_cost *out) {
  int64_t size = gr_shape_num_elements(&n->out_shapes[0]);
  if (size < 0) size = 0;
  int steps = 1;
  for (const char *s = gr_node_attr_string(n, "program", ""); *s; s++) steps += *s == ';';
  out->flops = (double)size * steps;
  out->bytes = (double)size * (double)gr_dtype_size(n->out_dtypes[0]) * (n->num_inputs + 1);
}

static gr_status fe_grad(gr_grad_ctx *c) {
  return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                             "gradients: node '%s' is a _fused_elementwise, which the fusion pass "
                             "makes in a graph that runs; differentiate the graph before fusion",
                             c->node->name);
}

static const gr_attr_spec fe_attrs[] = {{"program", GR_ATTR_STRING, true, {0}}};

const gr_op_def gr_op__fused_elementwise = {
    .name = "_fused_elementwise",
    .doc = "a chain of f32 or f64 elementwise ops in one pass over memory, block by block: attr "
           "program 'op operand [operand];...' (ops add, sub, mul, div, maximum, minimum, "
           "relu_grad, neg, square, relu; operands: the inputs 0..n-1, then step k's result as "
           "n + k; the last step is the output). Inputs of one shape, or scalars; writes over a "
           "dying input. The same bits as those ops unfused. Made by the fusion pass, after "
           "autodiff: its gradient is an error",
    .min_inputs = 1,
    .max_inputs = -1,
    .input_names = (const char *const[]){"x"},
    .num_outputs = 1,
    .attrs = fe_attrs,
    .num_attrs = 1,
    .shape_fn = fe_shape,
    .cost_fn = fe_cost,
    .kernel = fe_kernel,
    .grad_fn = fe_grad};
