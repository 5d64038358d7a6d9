/* Builders of the queue ops (gr_ops_sync.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/queue_internal.h"

extern const gr_op_def gr_op_fifo_queue;

gr_output gr_fifo_queue(gr_graph *g, const char *name, int num_components, const gr_dtype *dtypes,
                        const gr_shape *shapes, int64_t capacity) {
  if (!name || !*name) return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "fifo_queue needs a name");
  if (num_components < 1 || num_components > GR_QUEUE_MAX_COMPONENTS || !dtypes)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "fifo_queue '%s': a queue holds 1 to %d components, not %d", name,
                       GR_QUEUE_MAX_COMPONENTS, num_components);
  const char *scope = gr_graph_name_scope(g);
  char full[1024];
  if (snprintf(full, sizeof full, "%s%s%s", scope, *scope ? "/" : "", name) >= (int)sizeof full)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "fifo_queue '%s': name too long", name);
  int64_t dt[GR_QUEUE_MAX_COMPONENTS], sh[GR_QUEUE_MAX_COMPONENTS * (GR_MAX_RANK + 1)];
  int ns = 0;
  for (int c = 0; c < num_components; c++) {
    dt[c] = dtypes[c];
    int r = shapes ? shapes[c].rank : -1;
    sh[ns++] = r;
    for (int i = 0; i < r; i++) sh[ns++] = shapes[c].dims[i];
  }
  gr_attr a[] = {gr_attr_string("queue", full),
                 {"dtypes", {.type = GR_ATTR_INTS, .ints = {num_components, dt}}},
                 {"shapes", {.type = GR_ATTR_INTS, .ints = {ns, sh}}},
                 gr_attr_int("capacity", capacity < 0 ? -1 : capacity)};
  gr_output q = gr_ops_build(g, "fifo_queue", name, NULL, 0, a, 4);
  if (q.node && strcmp(q.node->name, full) != 0)
    return gr_ops_fail(g, GR_ERR_ALREADY_EXISTS, "duplicate node name '%s' (fifo_queue %s)", full,
                       name);
  return q;
}

/* An op on queue q, with q's attrs (and `extra`), on q's device. */
static gr_output queue_op(gr_graph *g, gr_output q, const char *op, const gr_output *comps, int n,
                          const gr_attr *extra, int nextra) {
  if (!q.node) return (gr_output){NULL, 0};
  for (int i = 0; i < n; i++)
    if (!comps[i].node) return (gr_output){NULL, 0};
  if (q.node->op != &gr_op_fifo_queue)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "%s: '%s' is not a queue (make one with fifo_queue)", op, q.node->name);
  gr_output in[1 + GR_QUEUE_MAX_COMPONENTS];
  if (n > GR_QUEUE_MAX_COMPONENTS)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "%s: at most %d components", op,
                       GR_QUEUE_MAX_COMPONENTS);
  in[0] = q;
  if (n) memcpy(in + 1, comps, sizeof *in * (size_t)n);
  gr_attr a[8];
  int na = 0;
  a[na++] = (gr_attr){"queue", *gr_node_attr(q.node, "queue")};
  if (strcmp(op, "queue_close") != 0 && strcmp(op, "queue_size") != 0) {
    a[na++] = (gr_attr){"dtypes", *gr_node_attr(q.node, "dtypes")};
    a[na++] = (gr_attr){"shapes", *gr_node_attr(q.node, "shapes")};
    a[na++] = (gr_attr){"capacity", *gr_node_attr(q.node, "capacity")};
  }
  for (int i = 0; i < nextra; i++) a[na++] = extra[i];
  return gr_ops_build_colocated(g, q.node, op, NULL, in, 1 + n, a, na);
}

gr_output gr_queue_enqueue(gr_graph *g, gr_output queue, const gr_output *components, int n) {
  return queue_op(g, queue, "queue_enqueue", components, n, NULL, 0);
}

gr_output gr_queue_enqueue_many(gr_graph *g, gr_output queue, const gr_output *components, int n) {
  return queue_op(g, queue, "queue_enqueue_many", components, n, NULL, 0);
}

static gr_status outputs_of(gr_graph *g, gr_output o, gr_output *out) {
  if (!o.node) {
    const gr_error *e = gr_graph_error(g);
    return e ? e->code : GR_ERR_INTERNAL;
  }
  for (int c = 0; c < o.node->num_outputs; c++) out[c] = (gr_output){o.node, c};
  return GR_OK;
}

gr_status gr_queue_dequeue(gr_graph *g, gr_output queue, gr_output *out) {
  return outputs_of(g, queue_op(g, queue, "queue_dequeue", NULL, 0, NULL, 0), out);
}

gr_status gr_queue_dequeue_many(gr_graph *g, gr_output queue, int64_t n, gr_output *out) {
  gr_attr a[] = {gr_attr_int("n", n)};
  return outputs_of(g, queue_op(g, queue, "queue_dequeue_many", NULL, 0, a, 1), out);
}

gr_output gr_queue_close(gr_graph *g, gr_output queue, bool cancel_pending_enqueues) {
  gr_attr a[] = {gr_attr_bool("cancel_pending_enqueues", cancel_pending_enqueues)};
  return queue_op(g, queue, "queue_close", NULL, 0, a, 1);
}

gr_output gr_queue_size(gr_graph *g, gr_output queue) {
  return queue_op(g, queue, "queue_size", NULL, 0, NULL, 0);
}
