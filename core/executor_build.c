/* Building an executor: the compact form of its nodes (exec_node), edges
 * grouped by source output (the last edge of an output hands its reference
 * over), control successors, feed sources and fetch sinks, pending counts
 * and roots; the control-flow plan when the nodes have control flow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/executor_internal.h"

/* Nodes whose static cost exceeds this many flops go to the shared queue. */
#define GR_EXPENSIVE_FLOPS 32768.0
/* what a light node may read and write (executor_internal.h) */
#define GR_LIGHT_BYTES (256.0 * 1024)

/* The bytes of output o, or -1 when its shape is not fully known. */
static double output_bytes(gr_output o) {
  const gr_shape *s = &o.node->out_shapes[o.index];
  return gr_shape_is_fully_known(s)
             ? (double)gr_shape_num_elements(s) * (double)gr_dtype_size(o.node->out_dtypes[o.index])
             : -1;
}

/* The bytes of n's inputs and outputs, or -1 when a shape is not fully known. */
static double node_bytes(const gr_node *n) {
  double b = 0;
  for (int i = 0; i < n->num_inputs + n->num_outputs; i++) {
    double k = output_bytes(i < n->num_inputs ? n->inputs[i]
                                              : (gr_output){(gr_node *)n, i - n->num_inputs});
    if (k < 0) return -1;
    b += k;
  }
  return b;
}

static double node_flops(const gr_node *n) {
  if (n->op->cost_fn) {
    gr_cost c = {0, 0};
    n->op->cost_fn(n, &c);
    return c.flops;
  }
  double f = 0;
  for (int i = 0; i < n->num_outputs; i++) {
    int64_t k = gr_shape_num_elements(&n->out_shapes[i]);
    if (k > 0) f += (double)k;
  }
  return f;
}

static int endpoint_index(const gr_output *list, int n, gr_output o) {
  for (int i = 0; i < n; i++)
    if (list[i].node == o.node && list[i].index == o.index) return i;
  return -1;
}

typedef struct raw_edge {
  int src, src_output, dst, dst_slot;
} raw_edge;

static int cmp_raw_edge(const void *a, const void *b) {
  const raw_edge *x = a, *y = b;
  if (x->src != y->src) return x->src - y->src;
  if (x->src_output != y->src_output) return x->src_output - y->src_output;
  if (x->dst != y->dst) return (x->dst < 0 ? 1 << 30 : x->dst) - (y->dst < 0 ? 1 << 30 : y->dst);
  return x->dst_slot - y->dst_slot;
}

/* Is some output of d fed? A control input on it is then satisfied. */
static bool node_is_fed(const gr_output *feeds, int num_feeds, const gr_node *d) {
  for (int k = 0; k < num_feeds; k++)
    if (feeds[k].node == d) return true;
  return false;
}

/* What building an executor works on; index_of maps a graph node id to its
 * executor index (-1: not run here). */
typedef struct build {
  gr_executor *e;
  gr_node *const *nodes;
  const gr_output *feeds;
  int num_nodes, num_feeds, max_id;
  int *index_of;
  raw_edge *raw;
  int nraw, capraw;
  bool has_cf;
  gr_error *err;
} build;

static gr_status oom(build *b) {
  return gr_error_set_oom(b->err);
}

/* The executor's arrays and the node id -> index map. */
static gr_status alloc_arrays(build *b, const gr_output *fetches, int num_fetches) {
  gr_executor *e = b->e;
  e->nodes = calloc((size_t)e->num_nodes + 1, sizeof *e->nodes);
  e->feeds = gr_alloc_array((size_t)(b->num_feeds + 1), sizeof(gr_output));
  e->fetches = gr_alloc_array((size_t)(num_fetches + 1), sizeof(gr_output));
  e->states = calloc((size_t)b->num_nodes + 1, sizeof(void *));
  e->roots = gr_alloc_array((size_t)e->num_nodes + 1, sizeof(int));
  for (int i = 0; i < b->num_nodes; i++)
    if (b->nodes[i]->id + 1 > b->max_id) b->max_id = b->nodes[i]->id + 1;
  b->index_of = gr_alloc_array((size_t)b->max_id + 1, sizeof(int));
  if (!e->nodes || !e->feeds || !e->fetches || !e->states || !e->roots || !b->index_of)
    return oom(b);
  if (b->num_feeds) memcpy(e->feeds, b->feeds, sizeof(gr_output) * (size_t)b->num_feeds);
  if (num_fetches) memcpy(e->fetches, fetches, sizeof(gr_output) * (size_t)num_fetches);
  for (int i = 0; i < b->max_id; i++) b->index_of[i] = -1;
  for (int i = 0; i < b->num_nodes; i++) b->index_of[b->nodes[i]->id] = i;
  return GR_OK;
}

/* One exec_node per node and per feed: kernel, flags, input and output slots. */
static gr_status fill_nodes(build *b) {
  gr_executor *e = b->e;
  int slot = 0, oslot = 0;
  for (int i = 0; i < b->num_nodes; i++) {
    exec_node *en = &e->nodes[i];
    gr_node *n = b->nodes[i];
    en->node = n;
    en->kernel = n->op->kernel;
    en->feed_index = -1;
    en->num_inputs = n->num_inputs;
    en->input_base = slot;
    en->num_outputs = n->num_outputs;
    en->output_base = oslot;
    en->async = (n->op->flags & GR_OP_ASYNC) != 0;
    en->cf_kind = (unsigned char)n->op->cf_kind;
    /* a Recv that may deliver a dead value needs the deadness-aware run path */
    if (en->cf_kind != GR_CF_NONE ||
        ((n->op->flags & GR_OP_TRANSFER) && gr_node_attr_bool(n, "may_be_dead", false)))
      b->has_cf = true;
    en->expensive = (n->op->flags & GR_OP_EXPENSIVE) || node_flops(n) > GR_EXPENSIVE_FLOPS;
    double bytes = node_bytes(n);
    en->light = (n->op->flags & GR_OP_TRANSFER) ||
                (!en->expensive && bytes >= 0 && bytes <= GR_LIGHT_BYTES);
    if (!en->kernel)
      return gr_error_set(b->err, GR_ERR_UNIMPLEMENTED, "node '%s' (op %s) has no kernel", n->name,
                          n->op->name);
    slot += n->num_inputs;
    oslot += n->num_outputs;
  }
  for (int k = 0; k < b->num_feeds; k++) {
    exec_node *en = &e->nodes[b->num_nodes + k];
    en->feed_index = k;
    en->num_outputs = 1;
    en->output_base = oslot++;
    const gr_output *f = &b->feeds[k];
    if (!f->node || f->index < 0 || f->index >= f->node->num_outputs)
      return gr_error_set(b->err, GR_ERR_INVALID_ARGUMENT, "feed %d is not a valid output", k);
  }
  e->num_slots = slot;
  e->num_out_slots = oslot;
  return GR_OK;
}

static gr_status add_raw(build *b, int src, int src_output, int dst, int dst_slot) {
  if (b->nraw == b->capraw) {
    int cap = b->capraw ? b->capraw * 2 : 256;
    raw_edge *r = gr_realloc_array(b->raw, (size_t)cap, sizeof *r);
    if (!r) return oom(b);
    b->raw = r;
    b->capraw = cap;
  }
  b->raw[b->nraw++] = (raw_edge){src, src_output, dst, dst_slot};
  return GR_OK;
}

/* Executor index of the producer of src: a feed's source, or its node's. */
static int source_of(const build *b, gr_output src, int *feed) {
  *feed = endpoint_index(b->feeds, b->num_feeds, src);
  if (*feed >= 0) return b->num_nodes + *feed;
  return src.node && src.node->id < b->max_id ? b->index_of[src.node->id] : -1;
}

/* Data edges (into input slots) and fetch sinks (dst -1), as raw edges. */
static gr_status collect_data_edges(build *b, const gr_output *fetches, int num_fetches) {
  for (int i = 0; i < b->num_nodes; i++) {
    gr_node *n = b->nodes[i];
    for (int j = 0; j < n->num_inputs; j++) {
      int f, si = source_of(b, n->inputs[j], &f);
      if (si < 0)
        return gr_error_set(b->err, GR_ERR_INTERNAL, "node '%s': input '%s' is neither run nor fed",
                            n->name, n->inputs[j].node->name);
      gr_status st =
          add_raw(b, si, f >= 0 ? 0 : n->inputs[j].index, i, b->e->nodes[i].input_base + j);
      if (st != GR_OK) return st;
      b->e->nodes[i].initial_pending++;
    }
  }
  for (int k = 0; k < num_fetches; k++) {
    gr_output src = fetches[k];
    int f, si = source_of(b, src, &f);
    if (si < 0 || (f < 0 && (src.index < 0 || src.index >= src.node->num_outputs)))
      return gr_error_set(b->err, GR_ERR_INVALID_ARGUMENT,
                          "fetch %d ('%s') is not produced by this step", k,
                          src.node ? src.node->name : "null");
    gr_status st = add_raw(b, si, f >= 0 ? 0 : src.index, -1, k);
    if (st != GR_OK) return st;
  }
  return GR_OK;
}

/* The edge table: raw edges sorted by source output, each source's range,
 * and which edge of an output is its last (that one moves the reference). */
static gr_status build_edge_table(build *b) {
  gr_executor *e = b->e;
  raw_edge *raw = b->raw;
  int nraw = b->nraw;
  if (nraw) qsort(raw, (size_t)nraw, sizeof *raw, cmp_raw_edge);
  e->edges = gr_alloc_array((size_t)nraw + 1, sizeof(exec_edge));
  if (!e->edges) return oom(b);
  for (int i = 0; i < e->num_nodes; i++) e->nodes[i].edge_begin = e->nodes[i].edge_end = 0;
  for (int k = 0; k < nraw; k++) {
    exec_edge *ed = &e->edges[k];
    ed->src_output = raw[k].src_output;
    ed->dst = raw[k].dst;
    ed->dst_slot = raw[k].dst_slot;
    ed->move =
        k + 1 == nraw || raw[k + 1].src != raw[k].src || raw[k + 1].src_output != raw[k].src_output;
    exec_node *src = &e->nodes[raw[k].src];
    if (k == 0 || raw[k - 1].src != raw[k].src) src->edge_begin = k;
    src->edge_end = k + 1;
  }
  return GR_OK;
}

/* Does another device or task wait for what n passes on? A data send (a
 * control send carries no value: nothing waits for its inputs' work) or a
 * member of a collective. */
static bool urgency_sink(const gr_node *n) {
  unsigned flags = n->op->flags;
  if (flags & GR_OP_COLLECTIVE) return true;
  return (flags & GR_OP_TRANSFER) && !(flags & GR_OP_ASYNC) && n->num_inputs > 0 &&
         !gr_node_attr_bool(n, "control", false);
}

/* Urgent nodes: those with a path (data or control edges) to an urgency
 * sink inside this executor, the sinks included; one walk of the nodes
 * from consumers to producers (they come inputs first). */
static void mark_urgent(build *b) {
  gr_executor *e = b->e;
  for (int i = b->num_nodes - 1; i >= 0; i--) {
    exec_node *en = &e->nodes[i];
    bool u = urgency_sink(b->nodes[i]);
    for (int k = en->edge_begin; !u && k < en->edge_end; k++)
      u = e->edges[k].dst >= 0 && e->nodes[e->edges[k].dst].urgent;
    for (int k = en->ctrl_begin; !u && k < en->ctrl_end; k++) u = e->nodes[e->ctrl_dsts[k]].urgent;
    en->urgent = u;
  }
}

/* Control successors of each node, as ranges of ctrl_dsts; a control input
 * on a fed node is satisfied by the feed. */
static gr_status build_control_edges(build *b) {
  gr_executor *e = b->e;
  int *count = calloc((size_t)e->num_nodes + 1, sizeof(int));
  if (!count) return oom(b);
  int nctrl = 0;
  for (int i = 0; i < b->num_nodes; i++) {
    gr_node *n = b->nodes[i];
    for (int j = 0; j < n->num_control_inputs; j++) {
      gr_node *d = n->control_inputs[j];
      int di = d->id < b->max_id ? b->index_of[d->id] : -1;
      if (di < 0 && node_is_fed(b->feeds, b->num_feeds, d)) continue;
      if (di < 0) {
        free(count);
        return gr_error_set(b->err, GR_ERR_INTERNAL, "node '%s': control input '%s' is not run",
                            n->name, d->name);
      }
      count[di]++;
      nctrl++;
      e->nodes[i].initial_pending++;
    }
  }
  e->ctrl_dsts = gr_alloc_array((size_t)nctrl + 1, sizeof(int));
  if (!e->ctrl_dsts) {
    free(count);
    return oom(b);
  }
  int pos = 0;
  for (int i = 0; i < e->num_nodes; i++) {
    e->nodes[i].ctrl_begin = e->nodes[i].ctrl_end = pos;
    pos += count[i];
  }
  free(count);
  for (int i = 0; i < b->num_nodes; i++) {
    gr_node *n = b->nodes[i];
    for (int j = 0; j < n->num_control_inputs; j++) {
      const gr_node *d = n->control_inputs[j];
      int di = d->id < b->max_id ? b->index_of[d->id] : -1;
      if (di >= 0) e->ctrl_dsts[e->nodes[di].ctrl_end++] = i; /* else fed */
    }
  }
  return GR_OK;
}

gr_status gr_executor_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                          int num_feeds, const gr_output *fetches, int num_fetches,
                          gr_threadpool *pool, gr_executor **out, gr_error *err) {
  *out = NULL;
  gr_executor *e = calloc(1, sizeof *e);
  if (!e) return gr_error_set_oom(err);
  pthread_mutex_init(&e->mu, NULL);
  e->pool = pool;
  e->pool_size = gr_threadpool_size(pool);
  e->num_real = num_nodes;
  e->num_nodes = num_nodes + num_feeds;
  e->num_feeds = num_feeds;
  e->num_fetches = num_fetches;
  build b = {.e = e,
             .nodes = nodes,
             .feeds = feeds,
             .num_nodes = num_nodes,
             .num_feeds = num_feeds,
             .err = err};
  gr_status s = alloc_arrays(&b, fetches, num_fetches);
  if (s == GR_OK) s = fill_nodes(&b);
  if (s == GR_OK) s = collect_data_edges(&b, fetches, num_fetches);
  if (s == GR_OK) s = build_edge_table(&b);
  if (s == GR_OK) s = build_control_edges(&b);
  if (s == GR_OK) mark_urgent(&b);
  for (int i = 0; s == GR_OK && i < e->num_nodes; i++)
    if (e->nodes[i].initial_pending == 0) e->roots[e->num_roots++] = i;
  if (s == GR_OK && b.has_cf) s = gr_cf_plan_new(e, err);
  free(b.raw);
  free(b.index_of);
  if (s != GR_OK) {
    gr_executor_free(e);
    return s;
  }
  *out = e;
  return GR_OK;
}
