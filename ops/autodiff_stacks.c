/* Step stacks in the autodiff walk. The gradient of a while loop reads the
 * loop's forward values back through stacks: a stack_pop has no inputs, but
 * its value is what the matching stack_push (same stack attr) took. The walk
 * uses that to see what a pop depends on, and refuses to differentiate
 * through one: a gradient of a loop's gradient (second order through a
 * while loop) would need the pops to pass gradients back to the pushes,
 * which they do not, and would otherwise be silently wrong. */
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/autodiff_internal.h"
#include "ops/ops_internal.h"

extern const gr_op_def gr_op_stack_push, gr_op_stack_pop; /* stack_ops.c */

static const char *stack_of(const gr_node *n) {
  return gr_node_attr_string(n, "stack", "");
}

static int by_stack(const void *a, const void *b) {
  return strcmp(stack_of(*(gr_node *const *)a), stack_of(*(gr_node *const *)b));
}

gr_status ad_pushes_collect(const gr_graph *g, int total, ad_pushes *p) {
  memset(p, 0, sizeof *p);
  for (int id = 0; id < total; id++)
    if (gr_graph_node(g, id)->op == &gr_op_stack_push) p->n++;
  if (p->n == 0) return GR_OK;
  p->v = gr_alloc_array((size_t)p->n, sizeof(gr_node *));
  if (!p->v) return GR_ERR_RESOURCE_EXHAUSTED;
  int k = 0;
  for (int id = 0; id < total; id++) {
    gr_node *n = gr_graph_node(g, id);
    if (n->op == &gr_op_stack_push) p->v[k++] = n;
  }
  qsort(p->v, (size_t)p->n, sizeof(gr_node *), by_stack);
  return GR_OK;
}

void ad_pushes_free(ad_pushes *p) {
  free(p->v);
  memset(p, 0, sizeof *p);
}

const gr_node *ad_pushes_match(const ad_pushes *p, const gr_node *pop) {
  if (p->n == 0 || pop->op != &gr_op_stack_pop) return NULL;
  const char *name = stack_of(pop);
  int lo = 0, hi = p->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(stack_of(p->v[mid]), name);
    if (c == 0) return p->v[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

gr_status ad_refuse_loop_gradients(gr_graph *g, const gr_frames *f, const ad_pushes *p,
                                   const char *from_x, const char *to_y, int base) {
  for (int id = 0; id < f->num_nodes && p->n; id++) {
    const gr_node *n = gr_graph_node(g, id);
    if (!from_x[id] || !to_y[id]) continue;
    const gr_node *push = ad_pushes_match(p, n);
    if (!push) continue;
    int fr = f->of_node[id];
    while (fr >= 0 && fr != base) fr = f->frames[fr].parent;
    if (fr != base) continue; /* outside the frame differentiated: a constant of it */
    const char *loop = push->id < f->num_nodes ? f->frames[f->of_node[push->id]].name : "";
    return gr_graph_set_errorf(
        g, GR_ERR_UNIMPLEMENTED,
        "gradients: the value differentiated depends on the gradient of loop '%s', which "
        "reads the loop's values back from a stack (node '%s'); a "
        "gradient of a loop's gradient (second order through a while "
        "loop) is not supported yet",
        loop, n->name);
  }
  return GR_OK;
}
