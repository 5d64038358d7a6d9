/* Parallel training as graph construction (docs/strategies.md):
 * variables on parameter servers (a device function, as TensorFlow's
 * replica_device_setter), in-graph replicas of a model on slices of a batch
 * (synchronous data parallelism; also micro-batches for model parallelism),
 * mirrored variables whose gradients gr_minimize all-reduces, and the ring
 * all-reduce itself: chunks added around a ring of devices (reduce-scatter)
 * and passed on around it (all-gather), so each device sends 2(n-1)/n of
 * the tensor. Nothing here runs: it adds ordinary nodes pinned to devices,
 * and the partitioner's send/recv pairs move the chunks. On distinct
 * pinned devices the all-reduce is one collective node per device per
 * bucket instead, which runs the same ring at run time
 * (parallel_collective.c, collective.c); GRAPHRUN_ALL_REDUCE=graph keeps
 * the graph ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static bool is_variable(const gr_node *n) {
  return n->op == &gr_op_variable;
}

/* ---- variables on parameter servers ------------------------------------------------------ */

typedef struct ps_state {
  int num_ps;
  gr_ps_strategy strategy;
  int next;
  double *loads; /* bytes per ps task so far (greedy) */
  char buf[GR_DEVICE_NAME_MAX];
} ps_state;

static double variable_bytes(const gr_node *n) {
  const gr_attr_value *sh = gr_node_attr(n, "shape");
  int64_t k = sh && sh->type == GR_ATTR_SHAPE ? gr_shape_num_elements(&sh->shape) : 0;
  return (double)(k > 0 ? k : 0) * (double)gr_dtype_size(gr_node_attr_dtype(n, "dtype", GR_F32));
}

static const char *ps_device(gr_graph *g, const gr_node *n, const char *spec, void *arg) {
  ps_state *st = arg;
  if (!is_variable(n)) return spec; /* computation stays where the scopes put it */
  int k = 0;
  if (st->strategy == GR_PS_GREEDY_BYTES) {
    for (int i = 1; i < st->num_ps; i++)
      if (st->loads[i] < st->loads[k]) k = i;
    st->loads[k] += variable_bytes(n);
  } else {
    k = st->next++ % st->num_ps;
  }
  gr_device_spec outer, ps;
  gr_error e;
  if (gr_device_spec_parse(spec, &outer, &e) != GR_OK) {
    gr_graph_set_error(g, &e);
    return NULL;
  }
  char want[64];
  snprintf(want, sizeof want, "/job:ps/task:%d", k);
  gr_device_spec_parse(want, &ps, &e);
  gr_device_spec merged = gr_device_spec_merge(&outer, &ps);
  return gr_device_spec_str(&merged, st->buf);
}

gr_status gr_graph_push_ps_placement(gr_graph *g, int num_ps, gr_ps_strategy strategy) {
  if (num_ps < 1 || num_ps > GR_PS_MAX_TASKS)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "ps placement: the number of ps tasks must be 1..%d, got %d",
                               GR_PS_MAX_TASKS, num_ps);
  if (strategy != GR_PS_ROUND_ROBIN && strategy != GR_PS_GREEDY_BYTES)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "ps placement: unknown strategy %d",
                               (int)strategy);
  ps_state *st = gr_graph_alloc(g, sizeof *st);
  double *loads = gr_graph_alloc(g, sizeof(double) * (size_t)num_ps);
  if (!st || !loads) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  memset(st, 0, sizeof *st);
  memset(loads, 0, sizeof(double) * (size_t)num_ps);
  st->num_ps = num_ps;
  st->strategy = strategy;
  st->loads = loads;
  return gr_graph_push_device_fn(g, ps_device, st);
}

/* ---- ring all-reduce ---------------------------------------------------------------------- */

/* Nodes added until the pop run exactly on dev ("": unpinned). */
static gr_status on(gr_graph *g, const char *dev) {
  return gr_graph_push_device_scope_reset(g, dev ? dev : "");
}

static gr_output flat_shape_of(gr_graph *g, gr_output x) {
  return gr_reshape(g, x, gr_shape_make(1, (int64_t[]){-1}));
}

/* The ring over flat[0..n) (1-D, size s each, flat[d] on dev[d]): res[d]
 * on dev[d] is the sum (or mean) of all, bit for bit the same on every
 * device. Chunk c (s / n elements, one more for the first s % n) is added
 * around the ring starting at device c, so after n - 1 rounds device
 * (c - 1) mod n holds its total (reduce-scatter); the totals then go
 * around the ring once more (all-gather), copied, not added again. Each
 * chunk travels in pieces of at most the piece option's bytes (0:
 * GR_ALL_REDUCE_PIECE_BYTES), each its own send: a device adds a piece
 * while the next is still on the wire, and passes on a total while the
 * next is still being added. */
typedef struct ring_plan {
  int n, np;          /* devices, pieces */
  int64_t *off, *len; /* per piece, in flat order */
  int *chunk;         /* per piece: the chunk it is part of */
  gr_output *acc;     /* acc[d * np + p]: device d's value of piece p */
} ring_plan;

static void ring_plan_free(ring_plan *rp) {
  free(rp->off), free(rp->len), free(rp->chunk), free(rp->acc);
}

static gr_status ring_plan_make(gr_graph *g, int n, int64_t s, int64_t elem_bytes,
                                int64_t piece_bytes, ring_plan *rp) {
  int64_t piece = (piece_bytes > 0 ? piece_bytes : GR_ALL_REDUCE_PIECE_BYTES) /
                  (elem_bytes > 0 ? elem_bytes : 1);
  if (piece < 1) piece = 1;
  int64_t np = 0;
  for (int c = 0; c < n; c++) {
    int64_t lc = s / n + (c < s % n);
    np += lc ? (lc + piece - 1) / piece : 0;
  }
  memset(rp, 0, sizeof *rp);
  rp->n = n;
  rp->np = (int)np;
  rp->off = gr_alloc_array((size_t)np + 1, sizeof *rp->off);
  rp->len = gr_alloc_array((size_t)np + 1, sizeof *rp->len);
  rp->chunk = gr_alloc_array((size_t)np + 1, sizeof *rp->chunk);
  rp->acc = np <= INT32_MAX / n ? calloc((size_t)n * (size_t)np + 1, sizeof *rp->acc) : NULL;
  if (!rp->off || !rp->len || !rp->chunk || !rp->acc) {
    ring_plan_free(rp);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  int64_t at = 0;
  int p = 0;
  for (int c = 0; c < n; c++)
    for (int64_t left = s / n + (c < s % n); left > 0; p++) {
      rp->off[p] = at;
      rp->len[p] = left < piece ? left : piece;
      rp->chunk[p] = c;
      at += rp->len[p];
      left -= rp->len[p];
    }
  return GR_OK;
}

#define ACC(rp, d, p) (rp)->acc[(size_t)(d) * (size_t)(rp)->np + (size_t)(p)]

/* One phase around the ring: in round r device d passes on its value of
 * each piece of chunk (d + shift - r) mod n to device d + 1, which adds it
 * to its own (add) or takes it (the all-gather). */
static gr_status ring_phase(gr_graph *g, ring_plan *rp, const char *const *dev, int shift,
                            bool add) {
  int n = rp->n;
  gr_status st = GR_OK;
  for (int r = 0; r < n - 1 && st == GR_OK; r++)
    for (int d = 0; d < n && st == GR_OK; d++) {
      int c = ((d + shift - r) % n + n) % n, to = (d + 1) % n;
      if ((st = on(g, dev[to])) != GR_OK) break;
      for (int p = 0; p < rp->np; p++)
        if (rp->chunk[p] == c)
          ACC(rp, to, p) =
              add ? gr_add(g, ACC(rp, d, p), ACC(rp, to, p)) : gr_identity(g, ACC(rp, d, p));
      gr_graph_pop_device_scope(g);
    }
  return st;
}

static gr_status ring(gr_graph *g, const gr_output *flat, int n, int64_t s, const char *const *dev,
                      gr_reduction op, int64_t piece_bytes, gr_output *res) {
  if (n == 1 || s == 0) {
    for (int d = 0; d < n; d++) {
      GR_TRY(on(g, dev[d]));
      res[d] = gr_identity(g, flat[d]);
      gr_graph_pop_device_scope(g);
    }
    return gr_graph_error(g) ? gr_graph_error(g)->code : GR_OK;
  }
  ring_plan rp;
  gr_dtype dt = flat[0].node->out_dtypes[flat[0].index];
  bool pinned = true;
  for (int d = 0; d < n; d++) pinned = pinned && dev[d] && dev[d][0];
  GR_TRY(ring_plan_make(g, n, s, (int64_t)gr_dtype_size(dt), piece_bytes, &rp));
  gr_status st = GR_OK;
  for (int d = 0; d < n && st == GR_OK; d++) {
    if ((st = on(g, dev[d])) != GR_OK) break;
    gr_graph_push_name_scope(g, "chunk");
    for (int p = 0; p < rp.np; p++)
      ACC(&rp, d, p) = gr_slice(g, flat[d], &rp.off[p], &rp.len[p], 1);
    gr_graph_pop_name_scope(g);
    gr_graph_pop_device_scope(g);
  }
  /* reduce-scatter: in round r device d sends chunk d - r to d + 1, which adds its own */
  gr_graph_push_name_scope(g, "reduce_scatter");
  if (st == GR_OK) st = ring_phase(g, &rp, dev, 0, true);
  gr_graph_pop_name_scope(g);
  /* the owner of chunk c, device c - 1, holds its total */
  for (int p = 0; p < rp.np && op == GR_REDUCE_MEAN && st == GR_OK; p++) {
    int owner = (rp.chunk[p] + n - 1) % n;
    if ((st = on(g, dev[owner])) != GR_OK) break;
    gr_output count = gr_ops_const_scalar(g, dt, (double)n);
    ACC(&rp, owner, p) = gr_div(g, ACC(&rp, owner, p), count);
    gr_graph_pop_device_scope(g);
  }
  /* all-gather: in round r device d passes chunk d + 1 - r on to d + 1 */
  gr_graph_push_name_scope(g, "all_gather");
  if (st == GR_OK) st = ring_phase(g, &rp, dev, 1, false);
  gr_graph_pop_name_scope(g);
  for (int d = 0; d < n && st == GR_OK; d++) {
    if ((st = on(g, dev[d])) != GR_OK) break;
    /* pinned devices: the pieces are copied in as they arrive (gr_assemble
     * needs its nodes on one device); else concatenated at the end */
    res[d] = rp.np == 1 ? gr_identity(g, ACC(&rp, d, 0))
             : pinned   ? gr_assemble(g, &ACC(&rp, d, 0), rp.np)
                        : gr_concat(g, &ACC(&rp, d, 0), rp.np, 0);
    gr_graph_pop_device_scope(g);
  }
  ring_plan_free(&rp);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}
#undef ACC

/* The tensors ts[0..k) (indices into values, one tensor per device each)
 * all-reduced as one buffer: flattened and concatenated on each device,
 * reduced around the ring, sliced and reshaped back. */
static gr_status reduce_bucket(gr_graph *g, const gr_output *values, const int *ts, int k, int n,
                               const char *const *dev, gr_reduction op, int64_t piece_bytes,
                               gr_output *out) {
  int64_t total = 0;
  for (int i = 0; i < k; i++) {
    const gr_output *v = &values[(size_t)ts[i] * (size_t)n];
    total += gr_shape_num_elements(&v->node->out_shapes[v->index]);
  }
  gr_output *flat = calloc((size_t)n, sizeof *flat), *res = calloc((size_t)n, sizeof *res);
  gr_output *parts = calloc((size_t)k, sizeof *parts);
  if (!flat || !res || !parts) {
    free(flat), free(res), free(parts);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  gr_status st = GR_OK;
  for (int d = 0; d < n && st == GR_OK; d++) {
    if ((st = on(g, dev[d])) != GR_OK) break;
    for (int i = 0; i < k; i++) parts[i] = flat_shape_of(g, values[(size_t)ts[i] * (size_t)n + d]);
    flat[d] = k == 1 ? parts[0] : gr_concat(g, parts, k, 0);
    gr_graph_pop_device_scope(g);
  }
  if (st == GR_OK && !gr_graph_error(g)) st = ring(g, flat, n, total, dev, op, piece_bytes, res);
  for (int d = 0; d < n && st == GR_OK && !gr_graph_error(g); d++) {
    if ((st = on(g, dev[d])) != GR_OK) break;
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
      const gr_output *v = &values[(size_t)ts[i] * (size_t)n + d];
      gr_shape shape = v->node->out_shapes[v->index];
      int64_t m = gr_shape_num_elements(&shape);
      gr_output piece = k == 1 ? res[d] : gr_slice(g, res[d], &at, &m, 1);
      out[(size_t)ts[i] * (size_t)n + d] = gr_reshape(g, piece, shape);
      at += m;
    }
    gr_graph_pop_device_scope(g);
  }
  free(flat), free(res), free(parts);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}

gr_status gr_all_reduce_with(gr_graph *g, const gr_output *values, int num_tensors, int n,
                             const char *const *devices, gr_reduction op, int64_t fuse_bytes,
                             const gr_all_reduce_options *o, gr_output *out) {
  if (gr_graph_error(g)) return gr_graph_error(g)->code;
  if (n < 1 || num_tensors < 0 || !values || !out)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "all_reduce: needs values on at least one device (got %d)", n);
  if (op != GR_REDUCE_SUM && op != GR_REDUCE_MEAN)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "all_reduce: unknown reduction %d",
                               (int)op);
  size_t total = (size_t)num_tensors * (size_t)n;
  for (size_t i = 0; i < total; i++) out[i] = (gr_output){NULL, 0};
  for (int t = 0; t < num_tensors; t++) {
    const gr_output *v0 = &values[(size_t)t * (size_t)n];
    for (int d = 0; d < n; d++) {
      const gr_output *v = &v0[d];
      if (!v->node) {
        if (!gr_graph_error(g))
          gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "all_reduce: value %d is a null output",
                              t * n + d);
        return gr_graph_error(g)->code;
      }
      gr_dtype dt = v->node->out_dtypes[v->index];
      const gr_shape *sh = &v->node->out_shapes[v->index];
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      if (!(dt == GR_F32 || dt == GR_F64 || dt == GR_I32 || dt == GR_I64) ||
          (op == GR_REDUCE_MEAN && !gr_dtype_is_float(dt)))
        return gr_graph_set_errorf(g, GR_ERR_DTYPE, "all_reduce: '%s' is %s; %s needs %s",
                                   v->node->name, gr_dtype_name(dt),
                                   op == GR_REDUCE_MEAN ? "mean" : "sum",
                                   op == GR_REDUCE_MEAN ? "f32 or f64" : "f32, f64, i32 or i64");
      if (!gr_shape_is_fully_known(sh))
        return gr_graph_set_errorf(g, GR_ERR_SHAPE,
                                   "all_reduce: '%s' has the partly unknown shape %s (the "
                                   "chunks of the ring are cut when the graph is built)",
                                   v->node->name, gr_shape_str(sh, a));
      const gr_shape *s0 = &v0[0].node->out_shapes[v0[0].index];
      if (!gr_shape_equal(sh, s0) || dt != v0[0].node->out_dtypes[v0[0].index])
        return gr_graph_set_errorf(
            g, GR_ERR_SHAPE,
            "all_reduce: '%s' is %s %s but '%s' is %s %s: every device "
            "must give the same dtype and shape",
            v->node->name, gr_dtype_name(dt), gr_shape_str(sh, a), v0[0].node->name,
            gr_dtype_name(v0[0].node->out_dtypes[v0[0].index]), gr_shape_str(s0, b));
    }
  }
  if (num_tensors == 0) return GR_OK;
  const char **dev = calloc((size_t)n, sizeof *dev);
  int *bucket = calloc((size_t)num_tensors + 1, sizeof *bucket);
  if (!dev || !bucket) {
    free(dev), free(bucket);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int d = 0; d < n; d++)
    dev[d] = devices && devices[d] ? devices[d] : gr_graph_resolve_device(g, values[d].node);
  gr_ops_all_reduce_setting set;
  gr_status st = gr_ops_all_reduce_settings(g, o, n, &set);
  if (st == GR_OK) st = gr_graph_push_name_scope(g, "all_reduce");
  bool pushed = st == GR_OK;
  if (st == GR_OK && set.mode != GR_ALL_REDUCE_GRAPH && gr_ops_all_reduce_collective_fits(dev, n)) {
    st = gr_ops_all_reduce_collective(g, values, num_tensors, n, dev, op, &set,
                                      fuse_bytes > 0 ? set.bucket_bytes : 0, out);
    num_tensors = -1; /* done: no graph ring */
  }
  int nb = 0;
  int64_t bucket_bytes = 0;
  gr_dtype bucket_dt = GR_DTYPE_INVALID;
  for (int t = 0; t <= num_tensors && st == GR_OK; t++) {
    int64_t bytes = 0;
    gr_dtype dt = GR_DTYPE_INVALID;
    if (t < num_tensors) {
      const gr_output *v = &values[(size_t)t * (size_t)n];
      dt = v->node->out_dtypes[v->index];
      bytes = gr_shape_num_elements(&v->node->out_shapes[v->index]) * (int64_t)gr_dtype_size(dt);
    }
    bool small = t < num_tensors && bytes < fuse_bytes;
    /* flush the open bucket at the end, or when this small tensor does not
     * fit in it (a large one is reduced alone and leaves the bucket open) */
    if (nb &&
        (t == num_tensors || (small && (dt != bucket_dt || bucket_bytes + bytes > fuse_bytes)))) {
      st = reduce_bucket(g, values, bucket, nb, n, dev, op, set.piece_bytes, out);
      nb = 0;
      bucket_bytes = 0;
    }
    if (t == num_tensors || st != GR_OK) break;
    if (small) {
      bucket[nb++] = t;
      bucket_bytes += bytes;
      bucket_dt = dt;
    } else {
      st = reduce_bucket(g, values, &t, 1, n, dev, op, set.piece_bytes, out);
    }
  }
  if (pushed) gr_graph_pop_name_scope(g);
  free(dev);
  free(bucket);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}

gr_status gr_all_reduce_n(gr_graph *g, const gr_output *values, int num_tensors, int n,
                          const char *const *devices, gr_reduction op, int64_t fuse_bytes,
                          gr_output *out) {
  return gr_all_reduce_with(g, values, num_tensors, n, devices, op, fuse_bytes, NULL, out);
}

gr_status gr_all_reduce(gr_graph *g, const gr_output *values, int n, const char *const *devices,
                        gr_reduction op, gr_output *out) {
  return gr_all_reduce_n(g, values, 1, n, devices, op, 0, out);
}

/* ---- mirrored variables --------------------------------------------------------------------- */

/* Same devices, as specs (partial names match what they leave open)? */
static bool same_device(const char *a, const char *b) {
  gr_device_spec x, y;
  gr_error e;
  return gr_device_spec_parse(a, &x, &e) == GR_OK && gr_device_spec_parse(b, &y, &e) == GR_OK &&
         gr_device_spec_matches(&x, &y) && gr_device_spec_matches(&y, &x);
}

/* The copy of variable v for replica k on dev: VAR/replica_K, initialised
 * from v's initial value (the same tensor: computed once, sent to each
 * replica's device), attr mirror_of naming v. A copy made by an earlier
 * gr_replicate (say, of an evaluation) is used again. */
static gr_output make_mirror(gr_graph *g, const gr_node *v, int k, const char *dev,
                             const gr_all_reduce_options *ar) {
  const char *vname = gr_node_attr_string(v, "var", v->name);
  char full[600];
  snprintf(full, sizeof full, "%s/replica_%d", vname, k);
  gr_node *old = gr_graph_find_node(g, full);
  if (old && is_variable(old) && strcmp(gr_node_attr_string(old, "mirror_of", ""), vname) == 0) {
    if (same_device(old->requested_device, dev ? dev : "")) return (gr_output){old, 0};
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "replicate: the copy '%s' of replica %d is on '%s', not on '%s'", full, k,
                       old->requested_device, dev ? dev : "");
  }
  const gr_node *init = gr_graph_find_node(g, gr_node_attr_string(v, "initializer", ""));
  if (!init || init->num_inputs < 1)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "replicate: variable '%s' has no initial value to copy for replica %d",
                       vname, k);
  char scope[600], name[32];
  snprintf(scope, sizeof scope, "/%s", vname);
  snprintf(name, sizeof name, "replica_%d", k);
  if (gr_graph_push_name_scope(g, scope) != GR_OK) return (gr_output){NULL, 0};
  if (on(g, dev) != GR_OK) {
    gr_graph_pop_name_scope(g);
    return (gr_output){NULL, 0};
  }
  gr_attr a[] = {gr_attr_string("mirror_of", vname),
                 gr_attr_string("all_reduce_algorithm", ar->algorithm ? ar->algorithm : ""),
                 gr_attr_int("all_reduce_bucket", ar->bucket_bytes),
                 gr_attr_int("all_reduce_piece", ar->piece_bytes)};
  gr_output m = gr_ops_variable_with(g, name, init->inputs[0], a, 4);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_name_scope(g);
  return m;
}

bool gr_ops_is_global_step(const gr_node *n) {
  return n && is_variable(n) && n->out_dtypes[0] == GR_I64 &&
         !strcmp(gr_node_attr_string(n, "var", n->name), "global_step") &&
         !gr_node_attr_string(n, "mirror_of", "")[0];
}

bool gr_ops_is_step_copy(const gr_node *n) {
  return n && is_variable(n) && !strcmp(gr_node_attr_string(n, "mirror_of", ""), "global_step");
}

/* Does a node of g write the variable global_step (an assignment, an
 * earlier minimize's increment; not its reads, not its initialiser)? */
static bool step_written(const gr_graph *g) {
  const gr_node *v = gr_graph_find_node(g, "global_step");
  const char *init = v ? gr_node_attr_string(v, "initializer", "") : "";
  for (int id = 0; v && id < gr_graph_num_nodes(g); id++) {
    const gr_node *n = gr_graph_node(g, id);
    if (!gr_ops_is_variable_read(n) && strcmp(n->name, init) != 0 &&
        !strcmp(gr_node_attr_string(n, "var", ""), "global_step"))
      return true;
  }
  return false;
}

int gr_ops_step_copies(const gr_graph *g) {
  int n = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    const gr_node *c = gr_graph_node(g, id);
    n += gr_ops_is_step_copy(c);
  }
  return n;
}

gr_output gr_ops_step_copy(gr_graph *g, const gr_node *step, int k, const char *dev) {
  gr_output itself = {(gr_node *)step, 0};
  if (!dev || same_device(gr_graph_resolve_device(g, step), dev)) return itself;
  char full[64];
  snprintf(full, sizeof full, "global_step/replica_%d", k);
  const gr_node *old = gr_graph_find_node(g, full);
  if (old && (!gr_ops_is_step_copy(old) || !same_device(old->requested_device, dev)))
    return itself; /* the name is another's (another replicas() call on other devices) */
  const gr_all_reduce_options none = {0}; /* an integer: never all-reduced */
  return make_mirror(g, step, k, dev, &none);
}

typedef struct mirror_map {
  const gr_node **from;
  gr_output *to;
  int n, cap;
} mirror_map;

/* Replica k's body, nodes [lo, hi): inputs read from variables made
 * before its body (before the replicas, or a layer's made by an earlier
 * replica: ids < lo) are routed to replica k's copies. */
static gr_status mirror_reads(gr_graph *g, int lo, int hi, int k, const char *dev,
                              const gr_all_reduce_options *ar, mirror_map *mm) {
  mm->n = 0;
  for (int id = lo; id < hi; id++) {
    gr_node *nd = gr_graph_node(g, id);
    const char *var = gr_node_attr_string(nd, "var", "");
    const gr_node *named = var[0] ? gr_graph_find_node(g, var) : NULL;
    if (named && named->id < lo && !is_variable(nd))
      return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                                 "replicate: node '%s' (op %s) of replica %d uses variable '%s' "
                                 "by name; with mirrored variables a replica's body may only "
                                 "read variables (their value), not read_value, assign or update "
                                 "them",
                                 nd->name, nd->op->name, k, var);
    for (int j = 0; j < nd->num_inputs; j++) {
      const gr_node *src = nd->inputs[j].node;
      if (src->id >= lo || !is_variable(src) || !gr_dtype_is_float(src->out_dtypes[0])) continue;
      int m = 0;
      while (m < mm->n && mm->from[m] != src) m++;
      if (m == mm->n) {
        if (mm->n == mm->cap) {
          int cap = mm->cap ? mm->cap * 2 : 16;
          const gr_node **f = gr_realloc_array(mm->from, (size_t)cap, sizeof *f);
          if (f) mm->from = f;
          gr_output *t = f ? gr_realloc_array(mm->to, (size_t)cap, sizeof *t) : NULL;
          if (!t) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
          mm->to = t;
          mm->cap = cap;
        }
        mm->from[m] = src;
        mm->to[m] = make_mirror(g, src, k, dev, ar);
        mm->n++;
        if (!mm->to[m].node) return gr_graph_error(g)->code;
      }
      GR_TRY(gr_graph_set_input(g, nd, j, mm->to[m]));
    }
  }
  return GR_OK;
}

/* ---- replicas ------------------------------------------------------------------------------ */

/* The options and every input's axis 0 (split equally over n replicas). */
static gr_status check_replicate(gr_graph *g, const gr_replicate_options *o, int n,
                                 const gr_output *inputs, int num_inputs, gr_replica_fn fn,
                                 int num_outputs) {
  if (n < 1 || n > GR_REPLICATE_MAX)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "replicate: the number of replicas must be "
                               "1..%d, got %d",
                               GR_REPLICATE_MAX, n);
  if (!fn || num_inputs < 0 || num_outputs < 1 || num_outputs > GR_REPLICATE_MAX_OUTPUTS)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "replicate: needs a body and 1..%d outputs",
                               GR_REPLICATE_MAX_OUTPUTS);
  if (o->mirror_variables && !o->devices)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "replicate: mirrored variables need a device per replica");
  if (o->shard_inputs && !o->devices)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "replicate: sharded inputs need a device per replica");
  for (int i = 0; i < num_inputs; i++) {
    if (!inputs[i].node)
      return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
    const gr_shape *sh = &inputs[i].node->out_shapes[inputs[i].index];
    char b[GR_SHAPE_STR_MAX];
    if (sh->rank < 1)
      return gr_graph_set_errorf(g, GR_ERR_SHAPE,
                                 "replicate: input '%s' is %s; the replicas split axis 0 of a "
                                 "batch",
                                 inputs[i].node->name,
                                 sh->rank == 0 ? "a scalar" : "of unknown rank");
    if (sh->dims[0] >= 0 && sh->dims[0] % n != 0)
      return gr_graph_set_errorf(g, GR_ERR_SHAPE,
                                 "replicate: input '%s' %s has %lld rows, which %d replicas "
                                 "cannot share equally",
                                 inputs[i].node->name, gr_shape_str(sh, b), (long long)sh->dims[0],
                                 n);
  }
  return GR_OK;
}

/* What building the replicas works on: slices[k * num_inputs + i] is
 * replica k's part of input i, outs[k * num_outputs + j] its output j. */
typedef struct replicas {
  gr_graph *g;
  const gr_replicate_options *o;
  int n, num_inputs, num_outputs;
  const char *scope;
  const gr_output *inputs; /* with shard_inputs: each replica reads its slice itself */
  gr_output *slices, *outs;
  int first; /* the first node id of the replicas */
  mirror_map mm;
  bool step_copies; /* gr_ops_step_copy for the replicas' input shards */
} replicas;

/* The device of a node of replica k: the replica's device merged over what
 * the scopes outside give, as a device scope would; but a variable the
 * body makes outside its name scope (a layer's, gr_ops_layers.h) stays
 * where the scopes outside the replicas put it (a ps task), unless the
 * variables are mirrored: then on replica 0's device, as TensorFlow's
 * MirroredStrategy keeps its primary copy. */
typedef struct replica_device {
  gr_device_spec dev;
  bool keep_variables;
  char buf[GR_DEVICE_NAME_MAX];
} replica_device;

static const char *replica_device_fn(gr_graph *g, const gr_node *n, const char *spec, void *arg) {
  replica_device *d = arg;
  if (d->keep_variables && is_variable(n)) return spec;
  gr_device_spec outer;
  gr_error e;
  if (gr_device_spec_parse(spec, &outer, &e) != GR_OK) {
    gr_graph_set_error(g, &e);
    return NULL;
  }
  gr_device_spec merged = gr_device_spec_merge(&outer, &d->dev);
  return gr_device_spec_str(&merged, d->buf);
}

/* Is variable v, made by a replica's body, named outside every replica's
 * name scope (OUTER/SCOPE_i/...)? Then the replicas share it. */
static bool made_outside(const replicas *r, const char *outer, const gr_node *v) {
  size_t lo = strlen(outer), ls = strlen(r->scope);
  const char *rest = v->name;
  if (lo) {
    if (strncmp(rest, outer, lo) != 0 || rest[lo] != '/') return true;
    rest += lo + 1;
  }
  if (strncmp(rest, r->scope, ls) != 0 || rest[ls] != '_') return true;
  rest += ls + 1;
  while (*rest >= '0' && *rest <= '9') rest++;
  return *rest != '/';
}

/* Replica k: the body in name scope SCOPE_k (and the replica's device
 * scope), then checks of what it made. */
static gr_status build_replica(replicas *r, int k, gr_replica_fn fn, void *arg) {
  gr_graph *g = r->g;
  const gr_replicate_options *o = r->o;
  char name[128];
  const char *outer = gr_graph_name_scope(g);
  snprintf(name, sizeof name, "%s_%d", r->scope, k);
  replica_device dev = {.keep_variables = !o->mirror_variables};
  gr_error e;
  if (o->devices && gr_device_spec_parse(o->devices[k], &dev.dev, &e) != GR_OK)
    return gr_graph_set_error(g, &e);
  gr_status st = gr_graph_push_name_scope(g, name);
  if (st != GR_OK) return st;
  if (o->devices && (st = gr_graph_push_device_fn(g, replica_device_fn, &dev)) != GR_OK) {
    gr_graph_pop_name_scope(g);
    return st;
  }
  gr_output *in = r->slices + (size_t)k * (size_t)r->num_inputs;
  /* a mirrored replica's shard reads its own copy of the step, unless
   * something already writes global_step, which would not advance it */
  const char *step_dev = r->step_copies && k > 0 ? o->devices[k] : NULL;
  if (o->shard_inputs)
    st = gr_ops_replica_inputs(g, r->inputs, r->num_inputs, r->n, k, step_dev, in);
  if (st != GR_OK) {
    gr_graph_pop_device_scope(g);
    gr_graph_pop_name_scope(g);
    return st;
  }
  int lo = gr_graph_num_nodes(g);
  gr_output *mine = r->outs + (size_t)k * (size_t)r->num_outputs;
  st = fn(g, arg, k, in, mine);
  if (o->devices) gr_graph_pop_device_scope(g);
  gr_graph_pop_name_scope(g);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  if (st != GR_OK) return st;
  int hi = gr_graph_num_nodes(g);
  for (int id = lo; id < hi; id++)
    if (is_variable(gr_graph_node(g, id)) && !made_outside(r, outer, gr_graph_node(g, id)))
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "replicate: replica %d makes variable '%s': make the model's "
                                 "variables before the replicas, which all read them (or with "
                                 "layers, which make theirs outside the replicas)",
                                 k, gr_graph_node(g, id)->name);
  for (int j = 0; j < r->num_outputs; j++) {
    gr_output y = mine[j];
    if (!y.node || y.index < 0 || !gr_dtype_is_float(y.node->out_dtypes[y.index]))
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "replicate: output %d of replica %d must be an f32 or f64 "
                                 "tensor (the outputs are averaged over the replicas)",
                                 j, k);
  }
  if (o->mirror_variables && k > 0)
    return mirror_reads(g, lo, hi, k, o->devices[k], &o->all_reduce, &r->mm);
  return GR_OK;
}

/* The replica count n as a constant of dtype dt, outside any control
 * dependencies (a constant without inputs is made on each device that
 * reads it, core/partition.c, not sent). */
static gr_output count_of(gr_graph *g, gr_dtype dt, int n) {
  if (gr_graph_push_no_control_deps(g) != GR_OK) return (gr_output){NULL, 0};
  gr_output c = gr_ops_const_scalar(g, dt, n);
  gr_graph_pop_control_deps(g);
  return c;
}

/* outputs[j]: the mean over the replicas of their output j (with one
 * replica, itself; behind an identity when it must wait for updates). */
static gr_status mean_outputs(replicas *r, bool wait, gr_output *outputs) {
  gr_graph *g = r->g;
  int n = r->n;
  gr_output *each = calloc((size_t)n, sizeof *each);
  if (!each) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  char name[128];
  for (int j = 0; j < r->num_outputs && !gr_graph_error(g); j++) {
    for (int k = 0; k < n; k++) each[k] = r->outs[(size_t)k * (size_t)r->num_outputs + j];
    if (n == 1) {
      outputs[j] = wait ? gr_identity(g, each[0]) : each[0];
      continue;
    }
    /* where every replica's output is (micro-batches of one stage): the
     * mean is made there, so its gradient starts there too, without a
     * round trip to the default device between forward and backward */
    const char *dev = each[0].node->requested_device;
    for (int k = 1; k < n && dev[0]; k++)
      if (strcmp(each[k].node->requested_device, dev) != 0) dev = "";
    gr_dtype dt = each[0].node->out_dtypes[each[0].index];
    if (!dev[0]) {
      /* on several devices: each replica divides its own output, so the
       * gradient of its part of the mean starts on its device from the
       * seed (a fill, made there: core/partition.c) with nothing sent
       * between its forward and backward passes; then the quotients are
       * added (the same bits as the sum divided for a power-of-two n) */
      for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s_%d_part", r->scope, k);
        if (gr_graph_push_device_scope(g, each[k].node->requested_device) != GR_OK) break;
        gr_output count = count_of(g, dt, n);
        each[k] = gr_op(g, "div", name, (gr_output[]){each[k], count}, 2, NULL, 0);
        gr_graph_pop_device_scope(g);
      }
      snprintf(name, sizeof name, "%s_mean", r->scope);
      outputs[j] = gr_op(g, "add_n", name, each, n, NULL, 0);
      continue;
    }
    if (gr_graph_push_device_scope(g, dev) != GR_OK) break;
    snprintf(name, sizeof name, "%s_sum", r->scope);
    gr_output sum = gr_op(g, "add_n", name, each, n, NULL, 0);
    snprintf(name, sizeof name, "%s_mean", r->scope);
    outputs[j] = gr_op(g, "div", name, (gr_output[]){sum, count_of(g, dt, n)}, 2, NULL, 0);
    gr_graph_pop_device_scope(g);
  }
  free(each);
  return gr_graph_error(g) ? gr_graph_error(g)->code : GR_OK;
}

gr_status gr_replicate(gr_graph *g, const gr_replicate_options *o, const gr_output *inputs,
                       int num_inputs, gr_replica_fn fn, void *arg, int num_outputs,
                       gr_output *outputs) {
  if (gr_graph_error(g)) return gr_graph_error(g)->code;
  int n = o ? o->num_replicas : 0;
  for (int j = 0; j < num_outputs; j++) outputs[j] = (gr_output){NULL, 0};
  gr_status st = check_replicate(g, o, n, inputs, num_inputs, fn, num_outputs);
  if (st != GR_OK) return st;
  replicas r = {.g = g,
                .o = o,
                .n = n,
                .num_inputs = num_inputs,
                .num_outputs = num_outputs,
                .inputs = inputs,
                .scope = o->scope && o->scope[0] ? o->scope : "replica"};
  size_t nio = (size_t)n * (size_t)(num_inputs + 1) + (size_t)n * (size_t)num_outputs;
  gr_output *mem = calloc(nio, sizeof *mem);
  if (!mem) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  r.slices = mem;
  r.outs = mem + (size_t)n * (size_t)(num_inputs + 1);
  for (int i = 0; i < num_inputs && st == GR_OK && !o->shard_inputs; i++) {
    gr_output parts = n == 1 ? inputs[i] : gr_split(g, inputs[i], n, 0);
    for (int k = 0; k < n; k++)
      r.slices[(size_t)k * (size_t)num_inputs + i] =
          gr_output_at(parts, n == 1 ? inputs[i].index : k);
    if (gr_graph_error(g)) st = gr_graph_error(g)->code;
  }
  r.step_copies = o->mirror_variables && o->shard_inputs && o->devices && !step_written(g);
  r.first = gr_graph_num_nodes(g);
  const gr_graph *outer = gr_ops_replicas_enter(g); /* their batch norms: no updates of their own */
  for (int k = 0; k < n && st == GR_OK; k++) st = build_replica(&r, k, fn, arg);
  gr_ops_replicas_leave(outer);
  /* the replicas' batch norms: one update of each moving statistic, which
   * the outputs wait for (moving_average.c) */
  gr_output *updates = NULL;
  int nupd = 0;
  if (st == GR_OK)
    st = gr_ops_replicas_moving_stats(g, r.first, gr_graph_num_nodes(g), &updates, &nupd);
  bool deps = st == GR_OK && nupd > 0 && gr_graph_push_control_deps(g, updates, nupd) == GR_OK;
  if (st == GR_OK && nupd > 0 && !deps) st = gr_graph_error(g)->code;
  if (st == GR_OK) st = mean_outputs(&r, nupd > 0, outputs);
  if (deps) gr_graph_pop_control_deps(g);
  free(updates);
  if (st == GR_OK && o->per_replica)
    memcpy(o->per_replica, r.outs, sizeof *r.outs * (size_t)n * (size_t)num_outputs);
  if (st != GR_OK)
    for (int j = 0; j < num_outputs; j++) outputs[j] = (gr_output){NULL, 0};
  free(r.mm.from);
  free(r.mm.to);
  free(mem);
  return st;
}

/* ---- gradients of mirrored variables (gr_minimize) ---------------------------------------- */

static int find_var(const gr_output *vars, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(gr_node_attr_string(vars[i].node, "var", vars[i].node->name), name) == 0) return i;
  return -1;
}

int gr_ops_add_mirrors(const gr_graph *g, gr_output *vars, int n, int cap) {
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    gr_node *v = gr_graph_node(g, id);
    const char *of = is_variable(v) ? gr_node_attr_string(v, "mirror_of", "") : "";
    if (!of[0] || find_var(vars, n, of) < 0) continue;
    bool have = false;
    for (int i = 0; i < n && !have; i++) have = vars[i].node == v;
    if (!have && n < cap) vars[n++] = (gr_output){v, 0};
  }
  return n;
}

gr_status gr_ops_all_reduce_mirrors(gr_graph *g, const gr_output *vars, int n, gr_output *grads) {
  /* groups: a variable and its mirrors, in replica order (node ids) */
  int *group = gr_alloc_array((size_t)n + 1, sizeof(int)),
      *members = gr_alloc_array((size_t)n + 1, sizeof(int));
  char *done = calloc((size_t)n + 1, 1);
  gr_output *vals = calloc((size_t)n + 1, sizeof *vals),
            *outs = calloc((size_t)n + 1, sizeof *outs);
  const char **dev = calloc((size_t)n + 1, sizeof *dev);
  int *order = gr_alloc_array((size_t)n + 1, sizeof(int));
  gr_status st = GR_OK;
  if (!group || !members || !done || !vals || !outs || !dev || !order) {
    st = gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++) {
    const char *of = gr_node_attr_string(vars[i].node, "mirror_of", "");
    group[i] = of[0] ? find_var(vars, n, of) : i;
    if (group[i] < 0) {
      st = gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "minimize: '%s' mirrors '%s', which is not being trained",
                               vars[i].node->name, of);
      goto out;
    }
  }
  /* groups with the same devices go through one fused all-reduce */
  for (int p = 0; p < n && st == GR_OK; p++) {
    if (group[p] != p || done[p]) continue;
    int size = 0;
    for (int i = 0; i < n; i++)
      if (group[i] == p) members[size++] = i; /* p first: ids ascend, mirrors come later */
    if (size == 1) continue;
    for (int k = 0; k < size; k++) dev[k] = gr_graph_resolve_device(g, vars[members[k]].node);
    int nt = 0;
    for (int q = p; q < n; q++) {
      if (group[q] != q || done[q]) continue;
      int m = 0;
      bool same = true;
      for (int i = 0; i < n && same; i++) {
        if (group[i] != q) continue;
        same = m < size && strcmp(gr_graph_resolve_device(g, vars[i].node), dev[m]) == 0;
        m++;
      }
      if (!same || m != size) continue;
      int nnull = 0, k = 0;
      for (int i = 0; i < n; i++)
        if (group[i] == q) nnull += !grads[i].node;
      done[q] = 1;
      if (nnull == size) continue;
      if (nnull) {
        st = gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "minimize: the loss depends on some copies of mirrored variable "
                                 "'%s' but not on all of them",
                                 vars[q].node->name);
        break;
      }
      for (int i = 0; i < n; i++)
        if (group[i] == q) {
          vals[(size_t)nt * (size_t)size + (size_t)k] = grads[i];
          order[(size_t)nt * (size_t)size + (size_t)k++] = i;
        }
      nt++;
    }
    if (st != GR_OK || nt == 0) continue;
    const gr_node *copy = vars[members[1]].node; /* the options the replicas gave */
    gr_all_reduce_options ar = {gr_node_attr_string(copy, "all_reduce_algorithm", ""),
                                gr_node_attr_int(copy, "all_reduce_bucket", 0),
                                gr_node_attr_int(copy, "all_reduce_piece", 0), NULL};
    if ((st = gr_all_reduce_with(g, vals, nt, size, dev, GR_REDUCE_SUM, GR_ALL_REDUCE_FUSE_BYTES,
                                 &ar, outs)) != GR_OK)
      break;
    for (int i = 0; i < nt * size; i++) grads[order[i]] = outs[i];
  }
out:
  free(group), free(members), free(done), free(vals), free(outs), free(dev), free(order);
  return st;
}

/* The mirrored variables as (copy, variable) pairs, in node order. */
typedef struct mirror_pairs {
  int n;
  gr_node **copy, **var;
} mirror_pairs;

static void spread_exact(gr_graph *g, void *arg, gr_output *outs) {
  const mirror_pairs *mp = arg;
  gr_output worst = {NULL, 0};
  for (int i = 0; i < mp->n; i++) {
    gr_output d = gr_sub(g, gr_read_value(g, (gr_output){mp->copy[i], 0}),
                         gr_read_value(g, (gr_output){mp->var[i], 0}));
    gr_output w = gr_cast(g, gr_reduce_max(g, gr_abs(g, d), NULL, 0, false), GR_F64);
    worst = worst.node ? gr_maximum(g, worst, w) : w;
  }
  outs[0] = worst;
}

static void spread_zero(gr_graph *g, void *arg, gr_output *outs) {
  (void)arg;
  outs[0] = gr_const_f64(g, 0.0);
}

/* The fingerprint of a read of variable v, computed where v lives. */
static gr_output fingerprint_at(gr_graph *g, gr_node *v) {
  gr_output r = gr_read_value(g, (gr_output){v, 0});
  gr_output f = gr_op(g, "fingerprint", NULL, &r, 1, NULL, 0);
  if (f.node) gr_graph_set_colocation(g, f.node, r.node->name);
  return f;
}

/* Each copy and each variable is fingerprinted where it lives (the reads
 * run at the variable), only the 8-byte fingerprints meet, and the
 * differences are computed (the copies moved) only in a step where some
 * fingerprint differs: a cond on "every copy's bits equal its variable's". */
gr_output gr_mirror_spread(gr_graph *g) {
  int total = gr_graph_num_nodes(g);
  mirror_pairs mp = {0, calloc((size_t)total + 1, sizeof(gr_node *)),
                     calloc((size_t)total + 1, sizeof(gr_node *))};
  gr_output *var_fp = calloc((size_t)total + 1, sizeof *var_fp);
  gr_output worst = {NULL, 0}, same = {NULL, 0};
  if (!mp.copy || !mp.var || !var_fp) {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "mirror_spread: out of memory");
    goto out;
  }
  for (int id = 0; id < total && !gr_graph_error(g); id++) {
    gr_node *m = gr_graph_node(g, id);
    const char *of = is_variable(m) ? gr_node_attr_string(m, "mirror_of", "") : "";
    gr_node *p = of[0] ? gr_graph_find_node(g, of) : NULL;
    if (!p) continue;
    mp.copy[mp.n] = m, mp.var[mp.n++] = p;
    if (!var_fp[p->id].node) var_fp[p->id] = fingerprint_at(g, p);
    gr_output eq = gr_equal(g, fingerprint_at(g, m), var_fp[p->id]);
    same = same.node ? gr_logical_and(g, same, eq) : eq;
  }
  if (gr_graph_error(g)) goto out;
  if (!mp.n) {
    worst = gr_const_f64(g, 0.0);
    goto out;
  }
  gr_cond(g, same, spread_zero, spread_exact, &mp, 1, &worst);
out:
  free(mp.copy), free(mp.var), free(var_fp);
  return gr_graph_error(g) ? (gr_output){NULL, 0} : worst;
}
