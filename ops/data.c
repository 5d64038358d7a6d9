/* Data input ops that run inside the graph: read_idx and read_npy (a file's
 * contents, read once per executor and then handed out by reference) and
 * batch (rows of one or more tensors for a batch number, shuffled per epoch
 * by a pure function of (seed, epoch) and optionally sharded), so the batch
 * of any step can be recomputed after a restart and workers can read
 * disjoint shards. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- read_idx, read_npy -------------------------------------------------------------- */

typedef gr_status (*info_fn)(const char *, gr_dtype *, gr_shape *, gr_error *);
typedef gr_status (*load_fn)(const char *, gr_tensor *, gr_error *);

static gr_status file_shape(gr_shape_ctx *ctx, info_fn info) {
  const char *path = gr_node_attr_string(ctx->node, "path", "");
  ctx->num_outputs = 1;
  gr_error e;
  if (info(path, &ctx->out_dtypes[0], &ctx->out_shapes[0], &e) != GR_OK)
    return gr_shape_error(ctx, e.code, "%s", e.msg);
  return GR_OK;
}
static gr_status read_idx_shape(gr_shape_ctx *ctx) {
  return file_shape(ctx, gr_data_idx_info);
}
static gr_status read_npy_shape(gr_shape_ctx *ctx) {
  return file_shape(ctx, gr_data_npy_info);
}

static void free_tensor_state(void *state) {
  gr_tensor_release(state);
  free(state);
}

static gr_status file_kernel(gr_kernel_ctx *ctx, load_fn load) {
  if (!*ctx->state) {
    gr_tensor *t = malloc(sizeof *t);
    if (!t) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    gr_status s = load(gr_node_attr_string(ctx->node, "path", ""), t, ctx->err);
    if (s != GR_OK) {
      free(t);
      return s;
    }
    if (t->dtype != ctx->node->out_dtypes[0] ||
        !gr_shape_equal(&t->shape, &ctx->node->out_shapes[0])) {
      free_tensor_state(t);
      return gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                             "%s changed since the graph was built",
                             gr_node_attr_string(ctx->node, "path", ""));
    }
    /* two steps of one executor may race here: keep the first, drop ours */
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(ctx->state, &expected, t, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      free_tensor_state(t);
  }
  gr_kernel_set_output(ctx, 0, *ctx->state);
  return GR_OK;
}
static gr_status read_idx_kernel(gr_kernel_ctx *ctx) {
  return file_kernel(ctx, gr_data_load_idx);
}
static gr_status read_npy_kernel(gr_kernel_ctx *ctx) {
  return file_kernel(ctx, gr_data_load_npy);
}

static const gr_attr_spec path_attrs[] = {{"path", GR_ATTR_STRING, true, {0}}};

const gr_op_def gr_op_read_idx = {.name = "read_idx",
                                  .doc = "the tensor in an IDX file (attr path; raw or .gz)",
                                  .num_outputs = 1,
                                  .attrs = path_attrs,
                                  .num_attrs = 1,
                                  .shape_fn = read_idx_shape,
                                  .kernel = read_idx_kernel,
                                  .flags = GR_OP_STATEFUL,
                                  .state_free = free_tensor_state};

const gr_op_def gr_op_read_npy = {.name = "read_npy",
                                  .doc = "the tensor in a .npy file (attr path)",
                                  .num_outputs = 1,
                                  .attrs = path_attrs,
                                  .num_attrs = 1,
                                  .shape_fn = read_npy_shape,
                                  .kernel = read_npy_kernel,
                                  .flags = GR_OP_STATEFUL,
                                  .state_free = free_tensor_state};

gr_output gr_read_idx(gr_graph *g, const char *path) {
  gr_attr a = gr_attr_string("path", path);
  return gr_ops_build(g, "read_idx", NULL, NULL, 0, &a, 1);
}
gr_output gr_read_npy(gr_graph *g, const char *path) {
  gr_attr a = gr_attr_string("path", path);
  return gr_ops_build(g, "read_npy", NULL, NULL, 0, &a, 1);
}

/* ---- batch --------------------------------------------------------------------------------- */

typedef struct batch_state {
  pthread_mutex_t mu;
  int64_t epoch; /* of perm; -1 none */
  int64_t count; /* examples in this shard */
  int64_t *perm;
} batch_state;

static void batch_state_free(void *p) {
  batch_state *s = p;
  pthread_mutex_destroy(&s->mu);
  free(s->perm);
  free(s);
}

static gr_status batch_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_INDEX));
  if (ctx->in_shapes[0].rank > 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "step must be a scalar");
  int64_t b = gr_node_attr_int(ctx->node, "batch_size", 0);
  int64_t shards = gr_node_attr_int(ctx->node, "num_shards", 1);
  int64_t shard = gr_node_attr_int(ctx->node, "shard_index", 0);
  if (b < 1) return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "batch_size must be >= 1");
  if (shards < 1 || shard < 0 || shard >= shards)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "shard_index %lld is not in [0, num_shards = %lld)", (long long)shard,
                          (long long)shards);
  int64_t rows = -1;
  ctx->num_outputs = ctx->num_inputs - 1;
  for (int i = 1; i < ctx->num_inputs; i++) {
    const gr_shape *s = &ctx->in_shapes[i];
    if (s->rank == 0)
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d is a scalar: it has no rows to batch", i);
    if (s->rank > 0 && s->dims[0] >= 0) {
      if (rows >= 0 && s->dims[0] != rows)
        return gr_shape_error(ctx, GR_ERR_SHAPE, "inputs have %lld and %lld rows", (long long)rows,
                              (long long)s->dims[0]);
      rows = s->dims[0];
    }
    ctx->out_dtypes[i - 1] = ctx->in_dtypes[i];
    ctx->out_shapes[i - 1] = *s;
    if (s->rank > 0) ctx->out_shapes[i - 1].dims[0] = b;
  }
  if (rows >= 0 && (rows - shard + shards - 1) / shards < b)
    return gr_shape_error(
        ctx, GR_ERR_INVALID_ARGUMENT, "batch_size %lld is larger than the %lld rows of shard %lld",
        (long long)b, (long long)((rows - shard + shards - 1) / shards), (long long)shard);
  return GR_OK;
}

/* Fisher-Yates over 0..n-1 with the counter-based generator keyed by (seed, epoch). */
static void permute(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  if (!shuffle) return;
  gr_rng r = gr_rng_make(seed, 0x62617463ull /* "batc" */, (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    uint32_t w[4];
    gr_rng_block(&r, (uint64_t)i, w);
    uint64_t x = (uint64_t)w[0] << 32 | w[1];
    int64_t j = (int64_t)(x % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

static gr_status batch_kernel(gr_kernel_ctx *ctx) {
  const gr_node *nd = ctx->node;
  int64_t b = gr_node_attr_int(nd, "batch_size", 1), shards = gr_node_attr_int(nd, "num_shards", 1);
  int64_t shard = gr_node_attr_int(nd, "shard_index", 0);
  uint64_t seed = (uint64_t)gr_node_attr_int(nd, "seed", 0) ^ ctx->step->seed;
  bool shuffle = gr_node_attr_bool(nd, "shuffle", true);
  int64_t step = (int64_t)gr_tensor_get_f64(&ctx->inputs[0], 0);
  if (ctx->inputs[0].dtype == GR_I64) step = *(const int64_t *)gr_tensor_data(&ctx->inputs[0]);
  if (step < 0)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "step %lld is negative", (long long)step);
  int64_t rows = ctx->inputs[1].shape.dims[0];
  for (int i = 2; i < ctx->num_inputs; i++)
    if (ctx->inputs[i].shape.dims[0] != rows)
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "inputs have %lld and %lld rows", (long long)rows,
                             (long long)ctx->inputs[i].shape.dims[0]);
  int64_t count = rows > shard ? (rows - shard + shards - 1) / shards : 0;
  if (count < b)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "batch_size %lld > %lld rows in shard",
                           (long long)b, (long long)count);
  int64_t per_epoch = count / b, epoch = step / per_epoch, first = (step % per_epoch) * b;
  if (!*ctx->state) {
    batch_state *s = calloc(1, sizeof *s);
    if (!s) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->epoch = -1;
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(ctx->state, &expected, s, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      batch_state_free(s);
  }
  batch_state *s = *ctx->state;
  int64_t *rows_of_batch = malloc(sizeof(int64_t) * (size_t)b);
  if (!rows_of_batch) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&s->mu);
  if (s->epoch != epoch || s->count != count) {
    int64_t *p = realloc(s->perm, sizeof(int64_t) * (size_t)count);
    if (!p) {
      pthread_mutex_unlock(&s->mu);
      free(rows_of_batch);
      return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->perm = p;
    s->count = count;
    s->epoch = epoch;
    permute(s->perm, count, seed, epoch, shuffle);
  }
  for (int64_t j = 0; j < b; j++) rows_of_batch[j] = shard + shards * s->perm[first + j];
  pthread_mutex_unlock(&s->mu);
  gr_status st = GR_OK;
  for (int i = 1; i < ctx->num_inputs && st == GR_OK; i++) {
    const gr_tensor *x = &ctx->inputs[i];
    gr_shape os = x->shape;
    os.dims[0] = b;
    gr_tensor *o;
    st = gr_kernel_alloc_output(ctx, i - 1, x->dtype, &os, &o);
    if (st != GR_OK) break;
    size_t row = rows ? gr_tensor_num_bytes(x) / (size_t)rows : 0;
    for (int64_t j = 0; j < b; j++)
      memcpy((char *)gr_tensor_data(o) + (size_t)j * row,
             (const char *)gr_tensor_data(x) + (size_t)rows_of_batch[j] * row, row);
  }
  free(rows_of_batch);
  return st;
}

static const gr_attr_spec batch_attrs[] = {
    {"batch_size", GR_ATTR_INT, true, {0}},
    {"seed", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"shuffle", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}},
    {"num_shards", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 1}},
    {"shard_index", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};

const gr_op_def gr_op_batch = {.name = "batch",
                               .doc =
                                   "rows of batch number `step` of each x, shuffled per epoch by "
                                   "(seed, epoch), optionally sharded",
                               .min_inputs = 2,
                               .max_inputs = -1,
                               .input_names = (const char *const[]){"step", "xs"},
                               .num_outputs = -1,
                               .attrs = batch_attrs,
                               .num_attrs = 5,
                               .shape_fn = batch_shape,
                               .kernel = batch_kernel,
                               .flags = GR_OP_NO_GRADIENT,
                               .state_free = batch_state_free};

gr_output gr_batch(gr_graph *g, gr_output step, const gr_output *xs, int n, int64_t batch_size,
                   int64_t seed, bool shuffle, int64_t num_shards, int64_t shard_index) {
  gr_output in[GR_MAX_OUTPUTS + 1];
  if (n < 1 || n > GR_MAX_OUTPUTS)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "batch: needs 1 to %d tensors, got %d",
                       GR_MAX_OUTPUTS, n);
  in[0] = step;
  for (int i = 0; i < n; i++) in[i + 1] = xs[i];
  gr_attr a[] = {gr_attr_int("batch_size", batch_size), gr_attr_int("seed", seed),
                 gr_attr_bool("shuffle", shuffle), gr_attr_int("num_shards", num_shards),
                 gr_attr_int("shard_index", shard_index)};
  return gr_ops_build(g, "batch", NULL, in, n + 1, a, 5);
}
