/* Gradients of the indexing ops (array_index.c): concat, split, slice,
 * gather, tile and pad. Those that cut or pad need the sizes involved known
 * when the gradient is built; they say so when they are not. */
#include <stdio.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static gr_status need_known(gr_grad_ctx *c, const char *what) {
  char b[GR_SHAPE_STR_MAX];
  gr_output x = gr_grad_x(c, 0);
  return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                             "gradients: the gradient of node '%s' (op %s) needs %s known when it "
                             "is built (input shape %s)",
                             c->node->name, c->node->op->name, what,
                             gr_shape_str(&x.node->out_shapes[x.index], b));
}

static const gr_shape *in_shape(gr_grad_ctx *c, int i) {
  gr_output x = gr_grad_x(c, i);
  return &x.node->out_shapes[x.index];
}

/* Each input gets the slice of dy at its offset along the axis. */
gr_status gr_ops_concat_grad(gr_grad_ctx *c) {
  const gr_shape *s0 = in_shape(c, 0);
  int ax;
  if (s0->rank < 0) return need_known(c, "the rank");
  if (!gr_shape_normalize_axis(s0->rank, gr_node_attr_int(c->node, "axis", 0), &ax))
    return need_known(c, "a valid axis");
  int64_t offset = 0;
  for (int i = 0; i < c->node->num_inputs; i++) {
    const gr_shape *s = in_shape(c, i);
    if (s->rank != s0->rank || s->dims[ax] < 0) return need_known(c, "the sizes along the axis");
    int64_t begin[GR_MAX_RANK] = {0}, size[GR_MAX_RANK];
    for (int d = 0; d < s->rank; d++) size[d] = -1;
    begin[ax] = offset;
    size[ax] = s->dims[ax];
    c->dinputs[i] = gr_slice(c->graph, c->grads[0], begin, size, s->rank);
    offset += s->dims[ax];
  }
  return GR_OK;
}

/* The parts' gradients joined again (zeros for parts without one). */
gr_status gr_ops_split_grad(gr_grad_ctx *c) {
  int n = c->node->num_outputs;
  gr_output parts[GR_MAX_OUTPUTS];
  for (int i = 0; i < n; i++)
    parts[i] = c->grads[i].node ? c->grads[i] : gr_zeros_like(c->graph, gr_grad_y(c, i));
  c->dinputs[0] = gr_concat(c->graph, parts, n, gr_node_attr_int(c->node, "axis", 0));
  return GR_OK;
}

/* dy padded back to x's shape. */
gr_status gr_ops_slice_grad(gr_grad_ctx *c) {
  const gr_shape *s = in_shape(c, 0);
  if (!gr_shape_is_fully_known(s)) return need_known(c, "the input shape");
  const gr_attr_value *b = gr_node_attr(c->node, "begin"), *z = gr_node_attr(c->node, "size");
  int64_t pads[2 * GR_MAX_RANK];
  for (int d = 0; d < s->rank; d++) {
    int64_t size = z->ints.v[d] < 0 ? s->dims[d] - b->ints.v[d] : z->ints.v[d];
    pads[2 * d] = b->ints.v[d];
    pads[2 * d + 1] = s->dims[d] - b->ints.v[d] - size;
  }
  c->dinputs[0] = gr_pad(c->graph, c->grads[0], pads, s->rank, 0);
  return GR_OK;
}

/* dy rows added back at their indices. */
gr_status gr_ops_gather_grad(gr_grad_ctx *c) {
  gr_output in[3] = {c->grads[0], gr_grad_x(c, 1), gr_grad_x(c, 0)};
  gr_attr a = gr_attr_int("axis", gr_node_attr_int(c->node, "axis", 0));
  c->dinputs[0] = gr_ops_build(c->graph, "gather_grad", NULL, in, 3, &a, 1);
  return GR_OK;
}

/* dy viewed as [m0, d0, m1, d1, ...] and summed over the m axes. */
gr_status gr_ops_tile_grad(gr_grad_ctx *c) {
  const gr_shape *s = in_shape(c, 0);
  if (!gr_shape_is_fully_known(s) || s->rank > GR_MAX_RANK / 2)
    return need_known(c, "the input shape (rank at most 4)");
  const gr_attr_value *m = gr_node_attr(c->node, "multiples");
  gr_shape split = gr_shape_make(2 * s->rank, NULL);
  int64_t axes[GR_MAX_RANK];
  for (int d = 0; d < s->rank; d++) {
    split.dims[2 * d] = m->ints.v[d];
    split.dims[2 * d + 1] = s->dims[d];
    axes[d] = 2 * d;
  }
  gr_output r = gr_reshape(c->graph, c->grads[0], split);
  c->dinputs[0] = gr_reduce_sum(c->graph, r, axes, s->rank, false);
  return GR_OK;
}

/* The unpadded block of dy. */
gr_status gr_ops_pad_grad(gr_grad_ctx *c) {
  const gr_shape *s = in_shape(c, 0);
  if (!gr_shape_is_fully_known(s)) return need_known(c, "the input shape");
  const gr_attr_value *p = gr_node_attr(c->node, "paddings");
  int64_t begin[GR_MAX_RANK], size[GR_MAX_RANK];
  for (int d = 0; d < s->rank; d++) {
    begin[d] = p->ints.v[2 * d];
    size[d] = s->dims[d];
  }
  c->dinputs[0] = gr_slice(c->graph, c->grads[0], begin, size, s->rank);
  return GR_OK;
}
