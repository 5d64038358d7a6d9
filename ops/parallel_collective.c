/* The all-reduce as collective nodes (gr_all_reduce_n, parallel.c): one
 * collective_all_reduce node per device per bucket (collective.c), instead
 * of the graph ring's nodes per chunk and round. Buckets are filled in the
 * order the backward pass makes the gradients (their node ids: a gradient
 * built earlier is ready earlier), up to the bucket size, one dtype each,
 * so a bucket can start while later gradients are still being computed.
 * A bucket runs the ring, or the tree when small, or the hierarchical
 * all-reduce across hosts (collective.c). The settings come from the
 * graph's options (gr_all_reduce_options), each overridden by the
 * environment of the process that builds the graph: GRAPHRUN_ALL_REDUCE
 * (graph: the graph ring; ring, tree, hier: that algorithm for every
 * bucket), GRAPHRUN_ALL_REDUCE_BUCKET and GRAPHRUN_ALL_REDUCE_PIECE
 * (bytes). The piece size is a node attr, so every member agrees
 * (docs/strategies.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_status gr_ops_env_bytes(gr_graph *g, const char *var, int64_t *bytes) {
  const char *v = getenv(var);
  if (!v || !v[0]) return GR_OK;
  char *end;
  errno = 0;
  long long b = strtoll(v, &end, 10);
  if (*end || b < 1 || errno)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "%s='%s': want a number of bytes >= 1",
                               var, v);
  *bytes = b;
  return GR_OK;
}

/* The mode named m (what says so: for the error); -1 when none. */
static gr_status mode_named(gr_graph *g, const char *m, const char *what,
                            gr_all_reduce_mode *mode) {
  static const char *const names[] = {"graph", "collective", "ring", "tree", "hier"};
  for (int k = 0; k < 5; k++)
    if (!strcmp(m, names[k])) return *mode = (gr_all_reduce_mode)k, GR_OK;
  return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                             "%s'%s': want 'collective' (the default: ring or tree by size, "
                             "hierarchical across hosts), 'ring', 'tree', 'hier' or 'graph'",
                             what, m);
}

gr_status gr_ops_all_reduce_settings(gr_graph *g, const gr_all_reduce_options *o, int n,
                                     gr_ops_all_reduce_setting *out) {
  static const gr_all_reduce_options none = {0};
  if (!o) o = &none;
  *out = (gr_ops_all_reduce_setting){GR_ALL_REDUCE_AUTO, GR_ALL_REDUCE_BUCKET_BYTES, 0, ""};
  if (o->bucket_bytes < 0 || o->piece_bytes < 0)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "all_reduce: bucket %lld and piece %lld bytes: want 0 (the "
                               "default) or more",
                               (long long)o->bucket_bytes, (long long)o->piece_bytes);
  if (o->bucket_bytes) out->bucket_bytes = o->bucket_bytes;
  out->piece_bytes = o->piece_bytes;
  if (o->algorithm && o->algorithm[0])
    GR_TRY(mode_named(g, o->algorithm, "all_reduce: algorithm ", &out->mode));
  const char *m = getenv("GRAPHRUN_ALL_REDUCE"); /* the environment overrides */
  if (m && m[0]) GR_TRY(mode_named(g, m, "GRAPHRUN_ALL_REDUCE=", &out->mode));
  GR_TRY(gr_ops_env_bytes(g, "GRAPHRUN_ALL_REDUCE_BUCKET", &out->bucket_bytes));
  GR_TRY(gr_ops_env_bytes(g, "GRAPHRUN_ALL_REDUCE_PIECE", &out->piece_bytes));
  if (!o->hosts) return GR_OK;
  size_t len = 1;
  for (int d = 0; d < n; d++) {
    const char *h = o->hosts[d];
    if (!h || !h[0] || strchr(h, ','))
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "all_reduce: host %d is '%s': want a name without commas", d,
                                 h ? h : "(null)");
    len += strlen(h) + 1;
  }
  char *all = gr_graph_alloc(g, len), *at = all;
  if (!all) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int d = 0; d < n; d++) at += sprintf(at, "%s%s", d ? "," : "", o->hosts[d]);
  out->hosts = all;
  return GR_OK;
}

bool gr_ops_all_reduce_collective_fits(const char *const *dev, int n) {
  if (n < 2) return false;
  for (int d = 0; d < n; d++) {
    if (!dev[d] || !dev[d][0]) return false;
    for (int e = 0; e < d; e++)
      if (!strcmp(dev[d], dev[e])) return false;
  }
  return true;
}

typedef struct by_id {
  const gr_output *values;
  int n;
} by_id;

static _Thread_local const by_id *sorting; /* qsort's comparison has no argument */

static int cmp_ready(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  int ix = sorting->values[(size_t)x * (size_t)sorting->n].node->id,
      iy = sorting->values[(size_t)y * (size_t)sorting->n].node->id;
  return ix != iy ? (ix > iy) - (ix < iy) : (x > y) - (x < y);
}

/* One bucket: the tensors ts[0..k), a collective node on each device; a
 * small one (under GR_ALL_REDUCE_TREE_BYTES, more than 2 devices) by the
 * tree unless the mode says. */
static gr_status bucket(gr_graph *g, const gr_output *values, const int *ts, int k, int n,
                        const char *const *dev, gr_reduction op,
                        const gr_ops_all_reduce_setting *set, int64_t bytes, gr_output *in,
                        gr_output *res, gr_output *out) {
  char key[600];
  const char *scope = gr_graph_name_scope(g);
  snprintf(key, sizeof key, "%s%sbucket_%d", scope, scope[0] ? "/" : "", gr_graph_num_nodes(g));
  gr_all_reduce_mode mode = set->mode;
  bool tree = mode == GR_ALL_REDUCE_TREE ||
              (mode != GR_ALL_REDUCE_RING && n > 2 && bytes < GR_ALL_REDUCE_TREE_BYTES);
  gr_ops_collective_cfg cfg = {tree ? "tree" : "ring",
                               mode == GR_ALL_REDUCE_HIER   ? "hosts"
                               : mode == GR_ALL_REDUCE_AUTO ? "auto"
                                                            : "flat",
                               set->piece_bytes, set->hosts};
  for (int d = 0; d < n; d++) {
    for (int i = 0; i < k; i++) in[i] = values[(size_t)ts[i] * (size_t)n + d];
    GR_TRY(gr_graph_push_device_scope_reset(g, dev[d]));
    gr_status st = gr_ops_collective_all_reduce(g, in, k, key, n, d, op, &cfg, res);
    gr_graph_pop_device_scope(g);
    GR_TRY(st);
    for (int i = 0; i < k; i++) out[(size_t)ts[i] * (size_t)n + d] = res[i];
  }
  return GR_OK;
}

gr_status gr_ops_all_reduce_collective(gr_graph *g, const gr_output *values, int num_tensors, int n,
                                       const char *const *dev, gr_reduction op,
                                       const gr_ops_all_reduce_setting *set, int64_t bucket_bytes,
                                       gr_output *out) {
  int *order = gr_alloc_array((size_t)num_tensors + 1, sizeof *order);
  gr_output *in = gr_alloc_array((size_t)num_tensors + 1, sizeof *in),
            *res = gr_alloc_array((size_t)num_tensors + 1, sizeof *res);
  if (!order || !in || !res) {
    free(order), free(in), free(res);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int t = 0; t < num_tensors; t++) order[t] = t;
  by_id ctx = {values, n};
  sorting = &ctx;
  qsort(order, (size_t)num_tensors, sizeof *order, cmp_ready);
  sorting = NULL;
  gr_status st = GR_OK;
  int lo = 0;
  int64_t bytes = 0;
  for (int t = 0; t <= num_tensors && st == GR_OK; t++) {
    int64_t b = 0;
    gr_dtype dt = GR_DTYPE_INVALID, bdt = GR_DTYPE_INVALID;
    if (t < num_tensors) {
      const gr_output *v = &values[(size_t)order[t] * (size_t)n];
      dt = v->node->out_dtypes[v->index];
      b = gr_shape_num_elements(&v->node->out_shapes[v->index]) * (int64_t)gr_dtype_size(dt);
    }
    if (t > lo) {
      const gr_output *v0 = &values[(size_t)order[lo] * (size_t)n];
      bdt = v0->node->out_dtypes[v0->index];
    }
    /* the open bucket goes when full, at a dtype change and at the end */
    if (t > lo && (t == num_tensors || dt != bdt || bytes + b > bucket_bytes)) {
      st = bucket(g, values, order + lo, t - lo, n, dev, op, set, bytes, in, res, out);
      lo = t;
      bytes = 0;
    }
    bytes += b;
  }
  free(order), free(in), free(res);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}

/* The key of output j of node c in the map from gradients to variables. */
static uint64_t out_key(const gr_node *c, int j) {
  return (uint64_t)(uint32_t)c->id << 32 | (uint32_t)j;
}

/* The variable vars[i] whose gradient is output j of collective node c
 * (-1: none), found in `by_output` (key out_key(c, j), value i + 1): the
 * variable on c's device, f32 or f64, named without a comma (attr
 * apply_vars lists the names). */
static int var_of(gr_graph *g, const gr_map *by_output, const gr_node *c, int j,
                  const gr_output *vars) {
  intptr_t i = (intptr_t)gr_map_get_u64(by_output, out_key(c, j)) - 1;
  if (i < 0) return -1;
  const gr_node *v = vars[i].node;
  const char *name = gr_node_attr_string(v, "var", v->name);
  bool ok = gr_dtype_is_float(v->out_dtypes[0]) && !strchr(name, ',') &&
            !strcmp(gr_graph_resolve_device(g, v), gr_graph_resolve_device(g, c));
  return ok ? (int)i : -1;
}

static gr_status fuse_each(gr_graph *g, const gr_map *by_output, const gr_output *vars, int n,
                           const gr_output *grads, double lr, gr_node **by) {
  for (int i = 0; i < n; i++) {
    const gr_node *c = grads[i].node;
    if (!c || c->op != &gr_op_collective_all_reduce || grads[i].index != 0 ||
        var_of(g, by_output, c, 0, vars) != i)
      continue;
    /* every output of c a variable's gradient, or c stays */
    size_t len = 1;
    int *which = calloc((size_t)c->num_outputs + 1, sizeof *which);
    if (!which) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    bool all = true;
    for (int j = 0; j < c->num_outputs && all; j++) {
      which[j] = var_of(g, by_output, c, j, vars);
      all = which[j] >= 0;
      if (all)
        len += strlen(gr_node_attr_string(vars[which[j]].node, "var", "")) +
               strlen(vars[which[j]].node->name) + 1;
    }
    char *names = all ? gr_graph_alloc(g, len) : NULL, *at = names;
    for (int j = 0; names && j < c->num_outputs; j++) {
      const gr_node *v = vars[which[j]].node;
      at += sprintf(at, "%s%s", j ? "," : "", gr_node_attr_string(v, "var", v->name));
    }
    if (!names) {
      free(which);
      if (all) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      continue;
    }
    /* c's attrs, its key marked (the members of the new group agree), and
     * the update's; c stays without consumers (a run prunes it) */
    gr_attr *a = calloc((size_t)c->num_attrs + 2, sizeof *a);
    const char *key = gr_node_attr_string(c, "group_key", "");
    char *sgd_key = gr_graph_alloc(g, strlen(key) + 5);
    if (!a || !sgd_key) {
      free(which), free(a);
      return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    }
    sprintf(sgd_key, "%s/sgd", key);
    int na = 0;
    for (int k = 0; k < c->num_attrs; k++)
      if (strcmp(c->attrs[k].name, "apply_vars") && strcmp(c->attrs[k].name, "learning_rate"))
        a[na++] = !strcmp(c->attrs[k].name, "group_key") ? gr_attr_string("group_key", sgd_key)
                                                         : c->attrs[k];
    a[na++] = gr_attr_string("apply_vars", names);
    a[na++] = gr_attr_float("learning_rate", lr);
    gr_status st = gr_graph_push_device_scope_reset(g, c->requested_device);
    gr_output u = st == GR_OK ? gr_ops_build(g, "collective_all_reduce_sgd", NULL, c->inputs,
                                             c->num_inputs, a, na)
                              : (gr_output){NULL, 0};
    if (st == GR_OK) gr_graph_pop_device_scope(g);
    if (u.node) /* with its variables, as an update is (all on c's device) */
      gr_graph_set_colocation(g, u.node, vars[which[0]].node->name);
    for (int j = 0; u.node && j < c->num_outputs; j++) by[which[j]] = u.node;
    free(which), free(a);
    if (!u.node) return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
  }
  return GR_OK;
}

/* Each collective visited once (from the variable of its output 0); the
 * map makes the whole rewrite linear in the variables. */
gr_status gr_ops_fuse_sgd(gr_graph *g, const gr_output *vars, int n, const gr_output *grads,
                          double lr, gr_node **by) {
  gr_map by_output;
  gr_map_init(&by_output, GR_MAP_U64);
  bool ok = gr_map_reserve(&by_output, (size_t)n);
  for (int i = 0; ok && i < n; i++) {
    by[i] = NULL;
    const gr_node *c = grads[i].node;
    if (!c || c->op != &gr_op_collective_all_reduce) continue;
    bool added;
    void **slot = gr_map_slot_u64(&by_output, out_key(c, grads[i].index), &added);
    ok = slot != NULL;
    if (ok && added) *slot = (void *)(intptr_t)(i + 1); /* the first of duplicates */
  }
  if (!ok) {
    gr_map_free(&by_output);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  gr_status st = fuse_each(g, &by_output, vars, n, grads, lr, by);
  gr_map_free(&by_output);
  return st;
}
