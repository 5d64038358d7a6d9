/* Data input ops that run inside the graph: read_idx and read_npy (a file's
 * contents, read once per executor and then handed out by reference) and
 * batch (rows of one or more tensors for a batch number, shuffled per epoch
 * by a pure function of (seed, epoch) and optionally sharded), so the batch
 * of any step can be recomputed after a restart and workers can read
 * disjoint shards. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
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

/* What one batch is made of: the step's rows of every input; with slices,
 * only slice `slice` of the b rows (b / slices of them: a replica's part of
 * the global batch, read where the replica runs). */
typedef struct batch_args {
  int64_t b, shards, shard, slices, slice, count, rows;
  uint64_t seed;
  bool shuffle;
  int n;                        /* inputs after the step */
  gr_tensor xs[GR_MAX_OUTPUTS]; /* references while a prefetch runs */
} batch_args;

/* Per executor node. With inter-op threads, the batch of step s + 1 is made
 * on a pool thread while step s runs (the step reads the global step, which
 * the train op increments): the next call takes it when it asks for s + 1
 * with the same inputs, and makes its own otherwise. A batch is a pure
 * function of (seed, step, inputs), so the values are the same either way.
 * The kernel allocates the tensors the task fills, every step at the same
 * point, so the buffer pool sees the same demand each step and a steady
 * loop allocates nothing from the system. */
typedef struct batch_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t epoch; /* of perm; -1 none */
  int64_t count; /* examples in this shard */
  int64_t *perm;
  int64_t *rows_of_batch, rows_cap; /* scratch */
  /* the prefetch (under mu) */
  enum { PRE_NONE, PRE_QUEUED, PRE_RUNNING, PRE_DONE } pre;
  int queued;     /* prefetch tasks in the pool's queue */
  bool in_kernel; /* a kernel call works on perm and rows_of_batch */
  bool orphaned;  /* freed by the executor: the last task destroys it */
  int64_t pre_step;
  gr_status pre_status;
  batch_args pre_args;
  gr_tensor out[GR_MAX_OUTPUTS]; /* nout tensors the prefetch fills */
  int nout;
} batch_state;

static void release_all(gr_tensor *t, int n) {
  for (int i = 0; i < n; i++) gr_tensor_release(&t[i]);
}

static void destroy(batch_state *s) {
  release_all(s->out, s->nout);
  release_all(s->pre_args.xs, s->pre_args.n);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s->perm);
  free(s->rows_of_batch);
  free(s);
}

/* The executor is done with the node. A prefetch task still queued or
 * running frees the state when it ends (the pool runs every queued task,
 * also when it is freed), so this never waits for the pool: it may be
 * called on a pool thread. */
static void batch_state_free(void *p) {
  batch_state *s = p;
  pthread_mutex_lock(&s->mu);
  bool later = s->queued > 0 || s->pre == PRE_RUNNING;
  s->orphaned = later;
  pthread_mutex_unlock(&s->mu);
  if (!later) destroy(s);
}

static gr_status batch_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_INDEX));
  if (ctx->in_shapes[0].rank > 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "step must be a scalar");
  int64_t b = gr_node_attr_int(ctx->node, "batch_size", 0);
  int64_t shards = gr_node_attr_int(ctx->node, "num_shards", 1);
  int64_t shard = gr_node_attr_int(ctx->node, "shard_index", 0);
  int64_t slices = gr_node_attr_int(ctx->node, "num_slices", 1);
  int64_t slice = gr_node_attr_int(ctx->node, "slice_index", 0);
  if (b < 1) return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "batch_size must be >= 1");
  if (shards < 1 || shard < 0 || shard >= shards)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "shard_index %lld is not in [0, num_shards = %lld)", (long long)shard,
                          (long long)shards);
  if (slices < 1 || slice < 0 || slice >= slices || b % slices != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "slice_index %lld of num_slices %lld: needs 0 <= slice_index < "
                          "num_slices and num_slices dividing batch_size %lld",
                          (long long)slice, (long long)slices, (long long)b);
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
    if (s->rank > 0) ctx->out_shapes[i - 1].dims[0] = b / slices;
  }
  if (rows >= 0 && (rows - shard + shards - 1) / shards < b)
    return gr_shape_error(
        ctx, GR_ERR_INVALID_ARGUMENT, "batch_size %lld is larger than the %lld rows of shard %lld",
        (long long)b, (long long)((rows - shard + shards - 1) / shards), (long long)shard);
  return GR_OK;
}

/* A permutation of 0..n-1 keyed by (seed, epoch), or the identity. */
static void permute(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  if (shuffle) {
    gr_ops_permute(perm, n, seed, 0x62617463ull /* "batc" */, (uint64_t)epoch);
    return;
  }
  for (int64_t i = 0; i < n; i++) perm[i] = i;
}

/* Allocates the tensors of one batch into out[0..a->n). */
static gr_status alloc_batch(const batch_args *a, gr_tensor *out, gr_error *err) {
  for (int i = 0; i < a->n; i++) {
    gr_shape os = a->xs[i].shape;
    os.dims[0] = a->b / a->slices;
    gr_status st = gr_tensor_alloc(&out[i], a->xs[i].dtype, &os, err);
    if (st != GR_OK) {
      release_all(out, i);
      return st;
    }
  }
  return GR_OK;
}

/* Do the n tensors of out have the dtypes and shapes of a's batch? */
static bool fits_batch(const gr_tensor *out, int n, const batch_args *a) {
  if (n != a->n) return false;
  for (int i = 0; i < n; i++) {
    gr_shape os = a->xs[i].shape;
    os.dims[0] = a->b / a->slices;
    if (!out[i].buf || out[i].dtype != a->xs[i].dtype || !gr_shape_equal(&out[i].shape, &os))
      return false;
  }
  return true;
}

/* Fills out[0..a->n) (allocated by alloc_batch) with the batch of `step`.
 * One thread at a time per state: a prefetch task in PRE_RUNNING, or a
 * kernel call (in_kernel) while no task runs. */
static gr_status fill_batch(batch_state *s, const batch_args *a, int64_t step, gr_tensor *out,
                            gr_error *err) {
  int64_t per_epoch = a->count / a->b, epoch = step / per_epoch, first = (step % per_epoch) * a->b;
  if (s->epoch != epoch || s->count != a->count || !s->perm) {
    int64_t *p = gr_realloc_array(s->perm, (size_t)a->count, sizeof(int64_t));
    if (!p) return gr_error_set_oom(err);
    s->perm = p;
    s->count = a->count;
    s->epoch = epoch;
    permute(s->perm, a->count, a->seed, epoch, a->shuffle);
  }
  int64_t m = a->b / a->slices; /* rows of this slice, from row first + slice * m */
  first += a->slice * m;
  if (s->rows_cap < m) {
    int64_t *r = gr_realloc_array(s->rows_of_batch, (size_t)m, sizeof(int64_t));
    if (!r) return gr_error_set_oom(err);
    s->rows_of_batch = r;
    s->rows_cap = m;
  }
  for (int64_t j = 0; j < m; j++) s->rows_of_batch[j] = a->shard + a->shards * s->perm[first + j];
  for (int i = 0; i < a->n; i++) {
    const gr_tensor *x = &a->xs[i];
    size_t row = a->rows ? gr_tensor_num_bytes(x) / (size_t)a->rows : 0;
    for (int64_t j = 0; j < m; j++)
      memcpy((char *)gr_tensor_data(&out[i]) + (size_t)j * row,
             (const char *)gr_tensor_data(x) + (size_t)s->rows_of_batch[j] * row, row);
  }
  return GR_OK;
}

/* Pool task: the batch of s->pre_step, unless the kernel took the job back
 * before it started (it then made its batch itself). */
static void prefetch_task(void *arg) {
  batch_state *s = arg;
  pthread_mutex_lock(&s->mu);
  s->queued--;
  if (s->orphaned || s->pre != PRE_QUEUED || s->in_kernel) {
    bool last = s->orphaned && s->queued == 0 && s->pre != PRE_RUNNING;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (last) destroy(s);
    return;
  }
  s->pre = PRE_RUNNING;
  pthread_mutex_unlock(&s->mu);
  gr_error err;
  gr_status st = fill_batch(s, &s->pre_args, s->pre_step, s->out, &err);
  pthread_mutex_lock(&s->mu);
  s->pre_status = st;
  s->pre = PRE_DONE;
  bool last = s->orphaned && s->queued == 0;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (last) destroy(s);
}

/* Is the prefetched batch the one asked for: the same step and inputs? */
static bool prefetch_matches(const batch_state *s, const batch_args *a, int64_t step) {
  if (s->pre != PRE_DONE || s->pre_step != step || s->pre_status != GR_OK ||
      s->pre_args.n != a->n || s->pre_args.seed != a->seed || s->pre_args.shuffle != a->shuffle ||
      s->pre_args.b != a->b || s->pre_args.shards != a->shards || s->pre_args.shard != a->shard ||
      s->pre_args.slices != a->slices || s->pre_args.slice != a->slice)
    return false;
  for (int i = 0; i < a->n; i++)
    if (s->pre_args.xs[i].buf != a->xs[i].buf || s->pre_args.xs[i].offset != a->xs[i].offset ||
        s->pre_args.xs[i].dtype != a->xs[i].dtype ||
        !gr_shape_equal(&s->pre_args.xs[i].shape, &a->xs[i].shape))
      return false;
  return true;
}

/* Only data whose buffer never changes is worth making ahead: constants
 * and files (read once per executor), not variables or placeholders, whose
 * values may change in place between steps. */
static bool inputs_are_fixed(const gr_node *n) {
  for (int i = 1; i < n->num_inputs; i++) {
    const gr_node *p = n->inputs[i].node;
    if (p->num_inputs > 0 || (p->op->flags & (GR_OP_VARIABLE | GR_OP_PLACEHOLDER)) ||
        !(p->op->flags & (GR_OP_CONSTANT | GR_OP_STATEFUL)))
      return false;
  }
  return true;
}

static batch_state *batch_state_of(gr_kernel_ctx *ctx) {
  if (!*ctx->state) {
    batch_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->epoch = -1;
    s->pre_step = -1;
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(ctx->state, &expected, s, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      batch_state_free(s);
  }
  return *ctx->state;
}

static gr_status batch_kernel(gr_kernel_ctx *ctx) {
  const gr_node *nd = ctx->node;
  batch_args a = {.b = gr_node_attr_int(nd, "batch_size", 1),
                  .shards = gr_node_attr_int(nd, "num_shards", 1),
                  .shard = gr_node_attr_int(nd, "shard_index", 0),
                  .slices = gr_node_attr_int(nd, "num_slices", 1),
                  .slice = gr_node_attr_int(nd, "slice_index", 0),
                  .seed = (uint64_t)gr_node_attr_int(nd, "seed", 0) ^ ctx->step->seed,
                  .shuffle = gr_node_attr_bool(nd, "shuffle", true),
                  .n = ctx->num_inputs - 1};
  int64_t step = (int64_t)gr_tensor_get_f64(&ctx->inputs[0], 0);
  if (ctx->inputs[0].dtype == GR_I64) step = *(const int64_t *)gr_tensor_data(&ctx->inputs[0]);
  if (step < 0)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "step %lld is negative", (long long)step);
  if (a.b < 1 || a.slices < 1 || a.slice < 0 || a.slice >= a.slices || a.b % a.slices != 0)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "slice %lld of %lld of batch_size %lld",
                           (long long)a.slice, (long long)a.slices, (long long)a.b);
  a.rows = ctx->inputs[1].shape.dims[0];
  for (int i = 2; i < ctx->num_inputs; i++)
    if (ctx->inputs[i].shape.dims[0] != a.rows)
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "inputs have %lld and %lld rows", (long long)a.rows,
                             (long long)ctx->inputs[i].shape.dims[0]);
  a.count = a.rows > a.shard ? (a.rows - a.shard + a.shards - 1) / a.shards : 0;
  if (a.count < a.b)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "batch_size %lld > %lld rows in shard",
                           (long long)a.b, (long long)a.count);
  for (int i = 0; i < a.n; i++) a.xs[i] = ctx->inputs[i + 1]; /* borrowed */
  batch_state *s = batch_state_of(ctx);
  if (!s) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  /* take the prefetch: a task not started yet is called off (never waited
   * for: it may sit behind this very thread's work), a running one is */
  pthread_mutex_lock(&s->mu);
  while (s->in_kernel || s->pre == PRE_RUNNING) pthread_cond_wait(&s->cv, &s->mu);
  bool hit = prefetch_matches(s, &a, step);
  gr_tensor made[GR_MAX_OUTPUTS];
  int nmade = s->nout;
  for (int i = 0; i < nmade; i++) {
    made[i] = s->out[i];
    s->out[i] = gr_tensor_empty();
  }
  s->nout = 0;
  release_all(s->pre_args.xs, s->pre_args.n);
  s->pre = PRE_NONE;
  s->pre_args.n = 0;
  s->in_kernel = true;
  pthread_mutex_unlock(&s->mu);
  gr_status st = GR_OK;
  if (!hit) { /* the tensors meant for the prefetch serve, when they fit */
    if (!fits_batch(made, nmade, &a)) {
      release_all(made, nmade);
      st = alloc_batch(&a, made, ctx->err);
    }
    if (st == GR_OK && (st = fill_batch(s, &a, step, made, ctx->err)) != GR_OK)
      release_all(made, a.n);
  }
  for (int i = 0; st == GR_OK && i < a.n; i++) { /* hand the references over */
    gr_tensor_release(&ctx->outputs[i]);
    ctx->outputs[i] = made[i];
  }
  /* the next step's batch, on a pool thread, while this step runs */
  gr_tensor next[GR_MAX_OUTPUTS];
  gr_error aerr;
  bool prefetch = st == GR_OK && ctx->pool && gr_threadpool_size(ctx->pool) > 0 &&
                  inputs_are_fixed(ctx->node) && alloc_batch(&a, next, &aerr) == GR_OK;
  pthread_mutex_lock(&s->mu);
  if (prefetch) {
    for (int i = 0; i < a.n; i++) s->out[i] = next[i];
    s->nout = a.n;
    s->pre_args = a;
    for (int i = 0; i < a.n; i++) gr_tensor_ref(&s->pre_args.xs[i], &a.xs[i]);
    s->pre_step = step + 1;
    s->pre = PRE_QUEUED;
    s->queued++;
  }
  s->in_kernel = false;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (prefetch) gr_threadpool_schedule_idle(ctx->pool, prefetch_task, s);
  return st;
}

static const gr_attr_spec batch_attrs[] = {
    {"batch_size", GR_ATTR_INT, true, {0}},
    {"seed", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"shuffle", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}},
    {"num_shards", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 1}},
    {"shard_index", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"num_slices", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 1}},
    {"slice_index", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};

const gr_op_def gr_op_batch = {.name = "batch",
                               .doc =
                                   "rows of batch number `step` of each x, shuffled per epoch by "
                                   "(seed, epoch), optionally sharded (num_shards, shard_index) "
                                   "and sliced (rows slice_index * batch_size / num_slices ... of "
                                   "the batch: one replica's part)",
                               .min_inputs = 2,
                               .max_inputs = -1,
                               .input_names = (const char *const[]){"step", "xs"},
                               .num_outputs = -1,
                               .attrs = batch_attrs,
                               .num_attrs = 7,
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
