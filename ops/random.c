/* Random ops: random_uniform, random_normal, truncated_normal and
 * glorot_uniform. Every element is a pure function of (graph seed, op seed,
 * node name, step, element index) through the counter-based generator of
 * core/gr_rng.h, so values never depend on thread scheduling. All are
 * stateful: they must not be constant-folded or merged by CSE. */
#include <math.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef enum rand_kind { RAND_UNIFORM, RAND_NORMAL, RAND_TRUNCATED, RAND_GLOROT } rand_kind;

/* A truncated-normal element gives up (and takes the mean) after this many
 * draws beyond two stddevs: probability 0.0455^64, i.e. never in practice. */
#define TRUNC_MAX_TRIES 64

/* Keras fans: [in, out]; rank 1: dim, dim; rank > 2: receptive field product
 * times the last two dims; rank 0: 1, 1. */
static double glorot_limit(const gr_shape *s) {
  double fan_in = 1, fan_out = 1;
  if (s->rank == 1) {
    fan_in = fan_out = (double)s->dims[0];
  } else if (s->rank >= 2) {
    double rf = 1;
    for (int i = 0; i < s->rank - 2; i++) rf *= (double)s->dims[i];
    fan_in = (double)s->dims[s->rank - 2] * rf;
    fan_out = (double)s->dims[s->rank - 1] * rf;
  }
  double fans = fan_in + fan_out;
  return sqrt(6.0 / (fans > 0 ? fans : 1.0));
}

static gr_status random_shape(gr_shape_ctx *ctx, rand_kind kind) {
  const gr_node *n = ctx->node;
  gr_dtype dt = gr_node_attr_dtype(n, "dtype", GR_F32);
  if (dt != GR_F32 && dt != GR_F64)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "attr 'dtype' is %s; expected one of f32, f64",
                          gr_dtype_name(dt));
  const gr_shape *s = &gr_node_attr(n, "shape")->shape;
  char sb[GR_SHAPE_STR_MAX];
  bool known = s->rank >= 0;
  for (int i = 0; i < s->rank; i++) known = known && s->dims[i] >= 0;
  if (!known)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "attr 'shape' must be fully known, got %s",
                          gr_shape_str(s, sb));
  /* checked here: gr_shape_num_elements does not guard against overflow */
  int64_t count = 1;
  for (int i = 0; i < s->rank && count > 0; i++) {
    if (s->dims[i] > 0 && count > (INT64_MAX / 16) / s->dims[i])
      return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "attr 'shape' %s has too many elements",
                            gr_shape_str(s, sb));
    count *= s->dims[i];
  }
  if (kind == RAND_UNIFORM) {
    double lo = gr_node_attr_float(n, "minval", 0), hi = gr_node_attr_float(n, "maxval", 1);
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
      return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                            "need finite minval <= maxval, got minval %g, maxval %g", lo, hi);
  } else if (kind == RAND_NORMAL || kind == RAND_TRUNCATED) {
    double mean = gr_node_attr_float(n, "mean", 0), sd = gr_node_attr_float(n, "stddev", 1);
    if (!isfinite(mean) || !isfinite(sd) || sd < 0)
      return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                            "need a finite mean and a finite stddev >= 0, got mean %g, stddev %g",
                            mean, sd);
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = *s;
  return GR_OK;
}

static gr_status uniform_shape(gr_shape_ctx *ctx) {
  return random_shape(ctx, RAND_UNIFORM);
}
static gr_status normal_shape(gr_shape_ctx *ctx) {
  return random_shape(ctx, RAND_NORMAL);
}
static gr_status truncated_shape(gr_shape_ctx *ctx) {
  return random_shape(ctx, RAND_TRUNCATED);
}
static gr_status glorot_shape(gr_shape_ctx *ctx) {
  return random_shape(ctx, RAND_GLOROT);
}

gr_rng gr_ops_node_rng(const gr_kernel_ctx *ctx) {
  uint64_t op_seed = (uint64_t)gr_node_attr_int(ctx->node, "seed", 0);
  return gr_rng_make(ctx->step->seed ^ (op_seed * 0xD1B54A32D192ED03ull),
                     gr_rng_hash_name(ctx->node->name), (uint64_t)ctx->step->step_id);
}

/* lo + (hi - lo) * u for every element, kept below hi when hi > lo even where
 * rounding to f32 would reach it. */
static void fill_uniform(const gr_rng *r, gr_tensor *o, int64_t n, double lo, double hi) {
  double w = hi - lo;
  if (o->dtype == GR_F32) {
    float *p = gr_tensor_data(o), below = nextafterf((float)hi, -INFINITY);
    if ((double)below >= hi) below = nextafterf(below, -INFINITY);
    if ((double)below < lo) below = (float)lo;
    for (int64_t i = 0; i < n; i++) {
      float v = (float)(lo + w * (double)gr_rng_uniform_f32(r, (uint64_t)i));
      p[i] = (double)v >= hi && hi > lo ? below : v;
    }
  } else {
    double *p = gr_tensor_data(o), below = nextafter(hi, -INFINITY);
    if (below < lo) below = lo;
    for (int64_t i = 0; i < n; i++) {
      double v = lo + w * gr_rng_uniform_f64(r, (uint64_t)i);
      p[i] = v >= hi && hi > lo ? below : v;
    }
  }
}

/* Standard normal for element i; truncated: re-drawn at counter positions
 * i + N, i + 2N, ... while beyond two stddevs. */
static double draw_normal(const gr_rng *r, uint64_t i, uint64_t n, bool truncated) {
  double z = gr_rng_normal(r, i);
  for (int k = 1; truncated && fabs(z) > 2.0; k++) {
    if (k == TRUNC_MAX_TRIES) return 0.0;
    z = gr_rng_normal(r, i + (uint64_t)k * n);
  }
  return z;
}

static gr_status random_kernel(gr_kernel_ctx *ctx, rand_kind kind) {
  const gr_node *node = ctx->node;
  gr_dtype dt = gr_node_attr_dtype(node, "dtype", GR_F32);
  const gr_shape *s = &gr_node_attr(node, "shape")->shape;
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, dt, s, &o));
  int64_t n = gr_tensor_num_elements(o);
  gr_rng r = gr_ops_node_rng(ctx);
  if (kind == RAND_UNIFORM || kind == RAND_GLOROT) {
    double lo, hi;
    if (kind == RAND_GLOROT) {
      hi = glorot_limit(s);
      lo = -hi;
    } else {
      lo = gr_node_attr_float(node, "minval", 0);
      hi = gr_node_attr_float(node, "maxval", 1);
    }
    fill_uniform(&r, o, n, lo, hi);
    return GR_OK;
  }
  double mean = gr_node_attr_float(node, "mean", 0), sd = gr_node_attr_float(node, "stddev", 1);
  bool trunc = kind == RAND_TRUNCATED;
  if (dt == GR_F32) {
    float *p = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++)
      p[i] = (float)(mean + sd * draw_normal(&r, (uint64_t)i, (uint64_t)n, trunc));
  } else {
    double *p = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++)
      p[i] = mean + sd * draw_normal(&r, (uint64_t)i, (uint64_t)n, trunc);
  }
  return GR_OK;
}

static gr_status uniform_kernel(gr_kernel_ctx *ctx) {
  return random_kernel(ctx, RAND_UNIFORM);
}
static gr_status normal_kernel(gr_kernel_ctx *ctx) {
  return random_kernel(ctx, RAND_NORMAL);
}
static gr_status truncated_kernel(gr_kernel_ctx *ctx) {
  return random_kernel(ctx, RAND_TRUNCATED);
}
static gr_status glorot_kernel(gr_kernel_ctx *ctx) {
  return random_kernel(ctx, RAND_GLOROT);
}

/* A Philox block (10 rounds) per element, plus log/sqrt/cos for normals. */
static void random_cost(const gr_node *n, gr_cost *c) {
  int64_t k = gr_shape_num_elements(&n->out_shapes[0]);
  double e = k > 0 ? (double)k : 0;
  c->flops = e * (n->op->kernel == uniform_kernel || n->op->kernel == glorot_kernel ? 20 : 60);
  c->bytes = e * (double)gr_dtype_size(n->out_dtypes[0]);
}

#define DT_ATTR                                                                                    \
  {                                                                                                \
    "dtype", GR_ATTR_DTYPE, false, {                                                               \
      .type = GR_ATTR_DTYPE, .dtype = GR_F32                                                       \
    }                                                                                              \
  }
#define SHAPE_ATTR                                                                                 \
  {                                                                                                \
    "shape", GR_ATTR_SHAPE, true, {                                                                \
      0                                                                                            \
    }                                                                                              \
  }
#define SEED_ATTR                                                                                  \
  {                                                                                                \
    "seed", GR_ATTR_INT, false, {                                                                  \
      .type = GR_ATTR_INT, .i = 0                                                                  \
    }                                                                                              \
  }
#define FLOAT_ATTR(NAME, V)                                                                        \
  {                                                                                                \
    NAME, GR_ATTR_FLOAT, false, {                                                                  \
      .type = GR_ATTR_FLOAT, .f = V                                                                \
    }                                                                                              \
  }

static const gr_attr_spec uniform_attrs[] = {DT_ATTR, SHAPE_ATTR, FLOAT_ATTR("minval", 0),
                                             FLOAT_ATTR("maxval", 1), SEED_ATTR};
static const gr_attr_spec normal_attrs[] = {DT_ATTR, SHAPE_ATTR, FLOAT_ATTR("mean", 0),
                                            FLOAT_ATTR("stddev", 1), SEED_ATTR};
static const gr_attr_spec glorot_attrs[] = {DT_ATTR, SHAPE_ATTR, SEED_ATTR};

#define DEFINE_RANDOM(NAME, DOC, ATTRS, SHAPE, KERNEL)                                             \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .num_outputs = 1,                                                \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = sizeof ATTRS / sizeof ATTRS[0],                     \
                                  .shape_fn = SHAPE,                                               \
                                  .cost_fn = random_cost,                                          \
                                  .kernel = KERNEL,                                                \
                                  .flags = GR_OP_STATEFUL};

DEFINE_RANDOM(random_uniform,
              "uniform in [minval, maxval) (attrs dtype, shape, minval, maxval, seed)",
              uniform_attrs, uniform_shape, uniform_kernel)
DEFINE_RANDOM(random_normal, "normal (attrs dtype, shape, mean, stddev, seed)", normal_attrs,
              normal_shape, normal_kernel)
DEFINE_RANDOM(truncated_normal,
              "normal re-drawn beyond two stddevs (attrs dtype, shape, mean, stddev, seed)",
              normal_attrs, truncated_shape, truncated_kernel)
DEFINE_RANDOM(glorot_uniform,
              "uniform in +-sqrt(6 / (fan_in + fan_out)) (attrs dtype, shape, seed)", glorot_attrs,
              glorot_shape, glorot_kernel)

/* ---- builders ------------------------------------------------------------------ */

gr_output gr_random_uniform(gr_graph *g, gr_dtype dtype, gr_shape shape, double minval,
                            double maxval, int64_t seed) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_float("minval", minval), gr_attr_float("maxval", maxval),
                 gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_uniform", NULL, NULL, 0, a, 5);
}

gr_output gr_random_normal(gr_graph *g, gr_dtype dtype, gr_shape shape, double mean, double stddev,
                           int64_t seed) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_float("mean", mean), gr_attr_float("stddev", stddev),
                 gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_normal", NULL, NULL, 0, a, 5);
}

gr_output gr_truncated_normal(gr_graph *g, gr_dtype dtype, gr_shape shape, double mean,
                              double stddev, int64_t seed) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_float("mean", mean), gr_attr_float("stddev", stddev),
                 gr_attr_int("seed", seed)};
  return gr_ops_build(g, "truncated_normal", NULL, NULL, 0, a, 5);
}

gr_output gr_glorot_uniform(gr_graph *g, gr_dtype dtype, gr_shape shape, int64_t seed) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_int("seed", seed)};
  return gr_ops_build(g, "glorot_uniform", NULL, NULL, 0, a, 3);
}
