/* The all-reduce as collective nodes (gr_all_reduce_n, parallel.c): one
 * collective_all_reduce node per device per bucket (collective.c), instead
 * of the graph ring's nodes per chunk and round. Buckets are filled in the
 * order the backward pass makes the gradients (their node ids: a gradient
 * built earlier is ready earlier), up to the bucket size, one dtype each,
 * so a bucket can start while later gradients are still being computed.
 * A bucket runs the ring, or the tree when small. GRAPHRUN_ALL_REDUCE=graph
 * keeps the graph ring (ring or tree: that algorithm for every bucket);
 * GRAPHRUN_ALL_REDUCE_BUCKET sets the bucket size in bytes
 * (docs/strategies.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_status gr_ops_all_reduce_mode(gr_graph *g, gr_all_reduce_mode *mode, int64_t *bucket_bytes) {
  static const char *const names[] = {"graph", "collective", "ring", "tree"};
  const char *m = getenv("GRAPHRUN_ALL_REDUCE"), *b = getenv("GRAPHRUN_ALL_REDUCE_BUCKET");
  *mode = GR_ALL_REDUCE_AUTO;
  *bucket_bytes = GR_ALL_REDUCE_BUCKET_BYTES;
  if (m && m[0]) {
    int k = 0;
    while (k < 4 && strcmp(m, names[k]) != 0) k++;
    if (k == 4)
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "GRAPHRUN_ALL_REDUCE='%s': want 'collective' (the default: "
                                 "ring or tree by size), 'ring', 'tree' or 'graph'",
                                 m);
    *mode = (gr_all_reduce_mode)k;
  }
  if (b && b[0]) {
    char *end;
    long long v = strtoll(b, &end, 10);
    if (*end || v < 1)
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "GRAPHRUN_ALL_REDUCE_BUCKET='%s': want a number of bytes >= 1", b);
    *bucket_bytes = v;
  }
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
                        const char *const *dev, gr_reduction op, gr_all_reduce_mode mode,
                        int64_t bytes, gr_output *in, gr_output *res, gr_output *out) {
  char key[600];
  const char *scope = gr_graph_name_scope(g);
  snprintf(key, sizeof key, "%s%sbucket_%d", scope, scope[0] ? "/" : "", gr_graph_num_nodes(g));
  bool tree = mode == GR_ALL_REDUCE_TREE ||
              (mode == GR_ALL_REDUCE_AUTO && n > 2 && bytes < GR_ALL_REDUCE_TREE_BYTES);
  for (int d = 0; d < n; d++) {
    for (int i = 0; i < k; i++) in[i] = values[(size_t)ts[i] * (size_t)n + d];
    GR_TRY(gr_graph_push_device_scope_reset(g, dev[d]));
    gr_status st =
        gr_ops_collective_all_reduce(g, in, k, key, n, d, op, tree ? "tree" : "ring", res);
    gr_graph_pop_device_scope(g);
    GR_TRY(st);
    for (int i = 0; i < k; i++) out[(size_t)ts[i] * (size_t)n + d] = res[i];
  }
  return GR_OK;
}

gr_status gr_ops_all_reduce_collective(gr_graph *g, const gr_output *values, int num_tensors, int n,
                                       const char *const *dev, gr_reduction op,
                                       gr_all_reduce_mode mode, int64_t bucket_bytes,
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
      st = bucket(g, values, order + lo, t - lo, n, dev, op, mode, bytes, in, res, out);
      lo = t;
      bytes = 0;
    }
    bytes += b;
  }
  free(order), free(in), free(res);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}
