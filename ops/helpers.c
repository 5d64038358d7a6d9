/* Shared helpers of the op families: building, dtype and axis checks,
 * broadcasting. */
#include <stdio.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_output gr_ops_build(gr_graph *g, const char *op, const char *name, const gr_output *inputs,
                       int num_inputs, const gr_attr *attrs, int num_attrs) {
  if (!g) return (gr_output){NULL, 0};
  const gr_op_def *def = gr_ops_find(op);
  if (!def) return gr_ops_fail(g, GR_ERR_NOT_FOUND, "unknown op '%s'", op ? op : "(null)");
  return gr_graph_add_node(g, def, name, inputs, num_inputs, attrs, num_attrs);
}

/* Fills mask from the int-list attr; a bad axis gives its error code and
 * message (msg has AXES_MSG_MAX chars). */
#define AXES_MSG_MAX 96
static gr_status fill_axes_mask(const gr_node *node, const char *attr, int rank,
                                bool empty_means_all, bool mask[GR_MAX_RANK], char *msg) {
  const gr_attr_value *v = gr_node_attr(node, attr);
  int n = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  for (int i = 0; i < GR_MAX_RANK; i++) mask[i] = n == 0 && empty_means_all && i < rank;
  for (int k = 0; k < n; k++) {
    int ax;
    long long a = (long long)v->ints.v[k];
    if (!gr_shape_normalize_axis(rank, v->ints.v[k], &ax)) {
      snprintf(msg, AXES_MSG_MAX, "axis %lld is out of range for rank %d", a, rank);
      return GR_ERR_OUT_OF_RANGE;
    }
    if (mask[ax]) {
      snprintf(msg, AXES_MSG_MAX, "axis %lld is given twice", a);
      return GR_ERR_INVALID_ARGUMENT;
    }
    mask[ax] = true;
  }
  return GR_OK;
}

gr_status gr_ops_axes_mask(gr_shape_ctx *ctx, const char *attr, int rank, bool empty_means_all,
                           bool mask[GR_MAX_RANK]) {
  char msg[AXES_MSG_MAX];
  gr_status st = fill_axes_mask(ctx->node, attr, rank, empty_means_all, mask, msg);
  return st == GR_OK ? GR_OK : gr_shape_error(ctx, st, "%s", msg);
}

gr_status gr_ops_kernel_axes_mask(gr_kernel_ctx *ctx, const char *attr, int rank,
                                  bool mask[GR_MAX_RANK]) {
  char msg[AXES_MSG_MAX];
  gr_status st = fill_axes_mask(ctx->node, attr, rank, true, mask, msg);
  return st == GR_OK ? GR_OK : gr_kernel_error(ctx, st, "%s", msg);
}

bool gr_bcast_init(gr_bcast *bc, const gr_shape *a, const gr_shape *b, gr_shape *out) {
  if (!gr_shape_broadcast(a, b, out)) return false;
  memset(bc, 0, sizeof *bc);
  int r = out->rank;
  bc->rank = r;
  bc->n = gr_shape_num_elements(out);
  int64_t na = gr_shape_num_elements(a), nb = gr_shape_num_elements(b);
  bc->same = gr_shape_equal(a, out) && gr_shape_equal(b, out);
  bc->a_scalar = na == 1;
  bc->b_scalar = nb == 1;
  int64_t stride_a = 1, stride_b = 1;
  for (int i = r - 1; i >= 0; i--) {
    bc->dims[i] = out->dims[i];
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    bc->sa[i] = da == 1 ? 0 : stride_a;
    bc->sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  if (r == 0) bc->same = true;
  return true;
}

void gr_ops_strides(const gr_shape *s, int64_t strides[GR_MAX_RANK]) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    strides[i] = st;
    st *= s->dims[i];
  }
}

gr_output gr_ops_const_scalar(gr_graph *g, gr_dtype dtype, double v) {
  gr_tensor t;
  gr_shape s = gr_shape_scalar();
  gr_error e;
  if (gr_tensor_alloc(&t, dtype, &s, &e) != GR_OK) {
    gr_graph_set_error(g, &e);
    return (gr_output){NULL, 0};
  }
  gr_tensor_set_f64(&t, 0, v);
  gr_output o = gr_const(g, &t);
  gr_tensor_release(&t);
  return o;
}

void gr_ops_permute(int64_t *perm, int64_t n, uint64_t seed, uint64_t stream, uint64_t counter) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  gr_rng r = gr_rng_make(seed, stream, counter);
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
