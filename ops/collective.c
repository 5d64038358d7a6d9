/* collective_all_reduce: one node per device of a group (attrs group_key,
 * group_size, rank; the partitioner fills "devices", core/gr_op.h
 * GR_OP_COLLECTIVE) sums its inputs with those of the other members and
 * gives every member the same bits. Its kernel is asynchronous and runs the
 * ring over the step's rendezvous, the same path as _send/_recv (so on a
 * cluster the TENSOR frames of the push rendezvous): the inputs, flattened
 * and concatenated, are cut into group_size chunks (s / n elements, one
 * more for the first s % n); in round r of the reduce-scatter rank d sends
 * chunk d - r to rank d + 1, which adds its own to it, so chunk c is added
 * in a fixed order starting at rank c and its total ends on rank c - 1;
 * the all-gather passes the totals around once more, copied. Every member
 * thus ends with the bits the owner of each chunk computed, the same on
 * every replica and every rerun (the graph ring's order, parallel.c).
 *
 * Keys: "DEV;0000000000000000;NEXT_DEV;GROUP_KEY#sR or #gR;frame:iter" (one
 * per round and phase: s reduce-scatter, g all-gather).
 *
 * Threads: the kernel starts on an executor thread; every later round runs
 * on the thread that delivers the value it waits for (a peer kernel's, or
 * the server's pool for a pushed tensor). A thread-local trampoline keeps
 * the rounds of kernels that wake each other from nesting: a wake-up
 * arriving while the thread already advances a collective is queued and
 * run after it returns. A kernel has at most one receive outstanding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef struct coll coll;
struct coll {
  gr_kernel_ctx *ctx;
  gr_rendezvous *rv;
  int n, rank, phase, round; /* phase 0: reduce-scatter, 1: all-gather, 2: done */
  bool mean, owned_buf;
  gr_dtype dt;
  size_t es;
  int64_t total;
  char *buf;         /* the flat values: output 0's buffer, or malloc'd */
  char *devs;        /* copy of attr "devices", cut at the commas */
  const char **dev;  /* dev[k]: rank k's device */
  const char *gkey;  /* attr group_key */
  const char *frame; /* ctx->frame_name */
  int64_t iteration;
  gr_tensor got; /* a received chunk, not yet used */
  bool have;
  gr_status st;
  gr_error err;
  coll *next; /* the trampoline's queue */
};

static int64_t chunk_off(const coll *x, int c) {
  int64_t q = x->total / x->n, r = x->total % x->n;
  return (int64_t)c * q + (c < r ? c : r);
}
static int64_t chunk_len(const coll *x, int c) {
  return x->total / x->n + (c < x->total % x->n);
}
static int mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* The chunk rank d sends (and rank d + 1 receives) in this phase and round. */
static int sent_chunk(const coll *x, int d) {
  return mod(x->phase == 0 ? d - x->round : d + 1 - x->round, x->n);
}

static char *make_key(const coll *x, int from, int to, char *buf, size_t cap) {
  int len = snprintf(buf, cap, "%s;0000000000000000;%s;%s#%c%d;%s:%lld", x->dev[from], x->dev[to],
                     x->gkey, x->phase == 0 ? 's' : 'g', x->round, x->frame,
                     (long long)(x->iteration < 0 ? 0 : x->iteration));
  if (len >= 0 && (size_t)len < cap) return buf;
  char *heap = malloc((size_t)len + 1);
  if (heap)
    snprintf(heap, (size_t)len + 1, "%s;0000000000000000;%s;%s#%c%d;%s:%lld", x->dev[from],
             x->dev[to], x->gkey, x->phase == 0 ? 's' : 'g', x->round, x->frame,
             (long long)(x->iteration < 0 ? 0 : x->iteration));
  return heap;
}

static void coll_free(coll *x) {
  if (x->have) gr_tensor_release(&x->got);
  if (x->owned_buf) free(x->buf);
  free(x->devs), free(x->dev);
  free(x);
}

/* Ends the kernel: the outputs filled (or the error set), x freed. */
static void finish(coll *x) {
  gr_kernel_ctx *ctx = x->ctx;
  gr_status st = x->st;
  if (st == GR_OK && x->owned_buf) {
    int64_t at = 0;
    for (int i = 0; i < ctx->num_outputs; i++) {
      size_t b = gr_tensor_num_bytes(&ctx->outputs[i]);
      if (b) memcpy(gr_tensor_data(&ctx->outputs[i]), x->buf + at, b);
      at += (int64_t)b;
    }
  }
  if (st != GR_OK && ctx->err) *ctx->err = x->err;
  coll_free(x);
  gr_kernel_done(ctx, st);
}

static void fail(coll *x, gr_status code, const char *what, const char *why) {
  if (x->st != GR_OK) return;
  x->st = code;
  gr_error_set(&x->err, code, "collective all-reduce '%s' (rank %d of %d, on %s): %s: %s", x->gkey,
               x->rank, x->n, x->dev[x->rank], what, why);
}

static void add_into(gr_dtype dt, char *dst, const char *src, int64_t n) {
  switch (dt) {
    case GR_F32: {
      float *d = (float *)dst;
      const float *s = (const float *)src;
      for (int64_t i = 0; i < n; i++) d[i] = s[i] + d[i];
      break;
    }
    case GR_F64: {
      double *d = (double *)dst;
      const double *s = (const double *)src;
      for (int64_t i = 0; i < n; i++) d[i] = s[i] + d[i];
      break;
    }
    case GR_I32: {
      int32_t *d = (int32_t *)dst;
      const int32_t *s = (const int32_t *)src;
      for (int64_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)s[i] + (uint32_t)d[i]);
      break;
    }
    default: {
      int64_t *d = (int64_t *)dst;
      const int64_t *s = (const int64_t *)src;
      for (int64_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)s[i] + (uint64_t)d[i]);
      break;
    }
  }
}

static void divide(gr_dtype dt, char *p, int64_t n, int by) {
  if (dt == GR_F32)
    for (int64_t i = 0; i < n; i++) ((float *)p)[i] /= (float)by;
  else
    for (int64_t i = 0; i < n; i++) ((double *)p)[i] /= (double)by;
}

static void kick(coll *x);

static void on_recv(void *arg, gr_status status, const gr_error *err, gr_tensor *value, bool dead) {
  coll *x = arg;
  int left = mod(x->rank - 1, x->n);
  char what[GR_DEVICE_NAME_MAX + 64];
  snprintf(what, sizeof what, "waiting for rank %d on %s", left, x->dev[left]);
  if (status != GR_OK) {
    fail(x, status, what, err ? err->msg : "failed");
  } else if (dead) {
    fail(x, GR_ERR_INTERNAL, what, "got a dead value");
  } else {
    int c = sent_chunk(x, left);
    int64_t want = chunk_len(x, c);
    int64_t got = value && value->buf ? gr_tensor_num_elements(value) : 0;
    if (want > 0 && (!value || !value->buf || value->dtype != x->dt || got != want)) {
      char why[160];
      snprintf(why, sizeof why, "got %lld elements of %s, want %lld of %s (chunk %d)",
               (long long)got, value && value->buf ? gr_dtype_name(value->dtype) : "nothing",
               (long long)want, gr_dtype_name(x->dt), c);
      fail(x, GR_ERR_INVALID_ARGUMENT, what, why);
    }
    if (x->st == GR_OK && value && value->buf) {
      x->got = *value; /* the reference moves here */
      x->have = true;
    } else if (value && value->buf) {
      gr_tensor_release(value);
    }
    if (x->st == GR_OK && !x->have) x->have = true, x->got = gr_tensor_empty();
  }
  kick(x);
}

/* Uses the chunk received in this round, then goes to the next round. */
static void take(coll *x) {
  int c = sent_chunk(x, mod(x->rank - 1, x->n));
  int64_t len = chunk_len(x, c);
  char *dst = x->buf + (size_t)chunk_off(x, c) * x->es;
  if (len > 0 && x->got.buf) {
    const char *src = gr_tensor_data(&x->got);
    if (x->phase == 0)
      add_into(x->dt, dst, src, len);
    else
      memcpy(dst, src, (size_t)len * x->es);
  }
  gr_tensor_release(&x->got);
  x->have = false;
  if (++x->round < x->n - 1) return;
  x->round = 0;
  if (x->phase == 0 && x->mean) { /* this rank owns chunk rank + 1: its total is complete */
    int own = mod(x->rank + 1, x->n);
    divide(x->dt, x->buf + (size_t)chunk_off(x, own) * x->es, chunk_len(x, own), x->n);
  }
  x->phase++;
}

/* One step of the state machine: use what arrived, send this round's chunk
 * and wait for the next; or finish. */
static void advance(coll *x) {
  if (x->st == GR_OK && x->have) take(x);
  if (x->st != GR_OK || x->phase == 2) {
    finish(x);
    return;
  }
  int right = mod(x->rank + 1, x->n), left = mod(x->rank - 1, x->n), c = sent_chunk(x, x->rank);
  char buf[512], *key = make_key(x, x->rank, right, buf, sizeof buf);
  gr_tensor t = gr_tensor_empty();
  int64_t len = chunk_len(x, c);
  gr_status st =
      key ? gr_tensor_alloc(&t, x->dt, &(gr_shape){1, {len}}, &x->err) : gr_error_set_oom(&x->err);
  if (st == GR_OK && len > 0)
    memcpy(gr_tensor_data(&t), x->buf + (size_t)chunk_off(x, c) * x->es, (size_t)len * x->es);
  gr_error e;
  if (st == GR_OK) st = gr_rendezvous_send(x->rv, key, &t, false, &e);
  gr_tensor_release(&t);
  if (key != buf) free(key);
  if (st != GR_OK) {
    char what[GR_DEVICE_NAME_MAX + 64];
    snprintf(what, sizeof what, "sending to rank %d on %s", right, x->dev[right]);
    fail(x, st, what, e.msg);
    finish(x);
    return;
  }
  key = make_key(x, left, x->rank, buf, sizeof buf);
  if (!key) {
    x->st = gr_error_set_oom(&x->err);
    finish(x);
    return;
  }
  gr_rendezvous_recv(x->rv, key, on_recv, x); /* may call on_recv now: kick queues it */
  if (key != buf) free(key);
}

static _Thread_local coll *queue_head, *queue_tail;
static _Thread_local bool advancing;

static void kick(coll *x) {
  x->next = NULL;
  if (queue_tail)
    queue_tail->next = x;
  else
    queue_head = x;
  queue_tail = x;
  if (advancing) return; /* the loop below, further up this thread's stack, runs it */
  advancing = true;
  while ((x = queue_head)) {
    queue_head = x->next;
    if (!queue_head) queue_tail = NULL;
    advance(x);
  }
  advancing = false;
}

static void on_cancel(void *arg) {
  gr_rendezvous_abort(arg, GR_ERR_CANCELLED, "the step was cancelled on another device");
}

/* The member devices of attr "devices" into x; checks this rank's. */
static gr_status read_devices(gr_kernel_ctx *ctx, coll *x) {
  const char *all = gr_node_attr_string(ctx->node, "devices", "");
  if (!all[0])
    return gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                           "collective group '%s' has no devices: it runs only in a partitioned "
                           "step (its members on devices of their own)",
                           x->gkey);
  x->devs = strdup(all);
  x->dev = calloc((size_t)x->n, sizeof *x->dev);
  if (!x->devs || !x->dev) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  int k = 0;
  for (char *p = x->devs, *save = NULL, *tok; (tok = strtok_r(p, ",", &save)); p = NULL)
    if (k < x->n)
      x->dev[k++] = tok;
    else
      k++;
  const char *mine = ctx->node->assigned_device ? ctx->node->assigned_device : "";
  if (k != x->n || strcmp(x->dev[x->rank], mine) != 0)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "collective group '%s': attr devices names %d devices for %d members, "
                           "rank %d's not being this node's device %s",
                           x->gkey, k, x->n, x->rank, mine);
  return GR_OK;
}

static gr_status all_reduce_kernel(gr_kernel_ctx *ctx) {
  const gr_node *nd = ctx->node;
  coll *x = calloc(1, sizeof *x);
  if (!x) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  *x = (coll){.ctx = ctx,
              .rv = ctx->step->rendezvous,
              .n = (int)gr_node_attr_int(nd, "group_size", 1),
              .rank = (int)gr_node_attr_int(nd, "rank", 0),
              .mean = !strcmp(gr_node_attr_string(nd, "reduction", "sum"), "mean"),
              .dt = ctx->inputs[0].dtype,
              .es = gr_dtype_size(ctx->inputs[0].dtype),
              .gkey = gr_node_attr_string(nd, "group_key", ""),
              .frame = ctx->frame_name ? ctx->frame_name : "",
              .iteration = ctx->iteration};
  gr_status st = GR_OK;
  if (x->n > 1 && !x->rv)
    st = gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                         "collective group '%s' runs only in a partitioned multi-device step (no "
                         "rendezvous)",
                         x->gkey);
  if (st == GR_OK && x->n > 1) st = read_devices(ctx, x);
  for (int i = 0; i < ctx->num_inputs && st == GR_OK; i++) {
    gr_tensor *o;
    st = gr_kernel_alloc_output(ctx, i, ctx->inputs[i].dtype, &ctx->inputs[i].shape, &o);
    x->total += gr_tensor_num_elements(&ctx->inputs[i]);
  }
  x->owned_buf = ctx->num_inputs > 1;
  if (st == GR_OK && x->owned_buf && !(x->buf = malloc((size_t)x->total * x->es + 1)))
    st = gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (st == GR_OK && !x->owned_buf) x->buf = gr_tensor_data(&ctx->outputs[0]);
  if (st != GR_OK) {
    coll_free(x);
    return st;
  }
  size_t at = 0;
  for (int i = 0; i < ctx->num_inputs; i++) {
    size_t b = gr_tensor_num_bytes(&ctx->inputs[i]);
    if (b) memcpy(x->buf + at, gr_tensor_data(&ctx->inputs[i]), b);
    at += b;
  }
  if (x->n == 1) x->phase = 2; /* alone: the sum is the value (a mean too) */
  if (x->n > 1) gr_kernel_on_cancel(ctx, on_cancel, x->rv);
  kick(x);
  return GR_OK;
}

static gr_status all_reduce_shape(gr_shape_ctx *ctx) {
  int64_t n = gr_node_attr_int(ctx->node, "group_size", 0),
          r = gr_node_attr_int(ctx->node, "rank", -1);
  const char *red = gr_node_attr_string(ctx->node, "reduction", "sum"),
             *alg = gr_node_attr_string(ctx->node, "algorithm", "ring");
  if (n < 1 || r < 0 || r >= n)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "rank %lld of a group of %lld members",
                          (long long)r, (long long)n);
  if (!gr_node_attr_string(ctx->node, "group_key", "")[0])
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr group_key is empty");
  if (strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "reduction '%s': sum or mean", red);
  if (strcmp(alg, "ring") != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "algorithm '%s': only ring", alg);
  for (int i = 0; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_dtype(ctx, i,
                                strcmp(red, "mean") ? GR_DT_FLOAT | GR_DT_INDEX : GR_DT_FLOAT));
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    if (!gr_shape_is_fully_known(&ctx->in_shapes[i]))
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d: the shape must be fully known", i);
  }
  ctx->num_outputs = ctx->num_inputs;
  for (int i = 0; i < ctx->num_inputs; i++) {
    ctx->out_dtypes[i] = ctx->in_dtypes[i];
    ctx->out_shapes[i] = ctx->in_shapes[i];
  }
  return GR_OK;
}

/* Per member: each element sent and received about twice, added once. */
static void all_reduce_cost(const gr_node *nd, gr_cost *out) {
  double k = 0, b = 0;
  for (int i = 0; i < nd->num_inputs; i++) {
    const gr_output *in = &nd->inputs[i];
    double e = (double)gr_shape_num_elements(&in->node->out_shapes[in->index]);
    k += e;
    b += e * (double)gr_dtype_size(in->node->out_dtypes[in->index]);
  }
  out->flops = k;
  out->bytes = 4 * b;
}

static const gr_attr_spec all_reduce_attrs[] = {
    {"group_key", GR_ATTR_STRING, true, {0}},
    {"group_size", GR_ATTR_INT, true, {0}},
    {"rank", GR_ATTR_INT, true, {0}},
    {"devices", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"algorithm", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "ring"}},
    {"reduction", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "sum"}}};

const gr_op_def gr_op_collective_all_reduce = {
    .name = "collective_all_reduce",
    .doc = "one member of a group (attrs group_key, group_size, rank): its inputs summed (or "
           "averaged) with the other members' by a ring over the step's rendezvous; the same "
           "bits on every member",
    .min_inputs = 1,
    .max_inputs = -1,
    .input_names = (const char *[]){"values"},
    .num_outputs = -1,
    .attrs = all_reduce_attrs,
    .num_attrs = sizeof all_reduce_attrs / sizeof all_reduce_attrs[0],
    .shape_fn = all_reduce_shape,
    .cost_fn = all_reduce_cost,
    .kernel = all_reduce_kernel,
    .flags = GR_OP_ASYNC | GR_OP_STATEFUL | GR_OP_COLLECTIVE};

gr_status gr_ops_collective_all_reduce(gr_graph *g, const gr_output *values, int num_values,
                                       const char *group_key, int group_size, int rank,
                                       gr_reduction op, gr_output *out) {
  gr_attr a[] = {gr_attr_string("group_key", group_key), gr_attr_int("group_size", group_size),
                 gr_attr_int("rank", rank),
                 gr_attr_string("reduction", op == GR_REDUCE_MEAN ? "mean" : "sum")};
  gr_output r = gr_ops_build(g, "collective_all_reduce", NULL, values, num_values, a, 4);
  for (int i = 0; i < num_values; i++) out[i] = r.node ? gr_output_at(r, i) : r;
  return r.node ? GR_OK : gr_graph_error(g)->code;
}
