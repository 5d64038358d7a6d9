/* Ops built to run with the node that makes their resource (ops_internal.h). */
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_output gr_ops_build_colocated(gr_graph *g, const gr_node *with, const char *op, const char *name,
                                 const gr_output *inputs, int num_inputs, const gr_attr *attrs,
                                 int num_attrs) {
  if (gr_graph_push_device_scope_reset(g, gr_graph_resolve_device(g, with)) != GR_OK)
    return (gr_output){NULL, 0};
  gr_output o = gr_ops_build(g, op, name, inputs, num_inputs, attrs, num_attrs);
  gr_graph_pop_device_scope(g);
  if (o.node) {
    o.node->requested_device = "";
    gr_graph_set_colocation(g, o.node, with->name);
  }
  return o;
}
