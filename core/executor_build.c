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

gr_status gr_executor_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                          int num_feeds, const gr_output *fetches, int num_fetches,
                          gr_threadpool *pool, gr_executor **out, gr_error *err) {
  *out = NULL;
  gr_executor *e = calloc(1, sizeof *e);
  if (!e) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&e->mu, NULL);
  e->pool = pool;
  e->pool_size = gr_threadpool_size(pool);
  e->num_real = num_nodes;
  e->num_nodes = num_nodes + num_feeds;
  e->num_feeds = num_feeds;
  e->num_fetches = num_fetches;
  e->nodes = calloc((size_t)e->num_nodes + 1, sizeof *e->nodes);
  e->feeds = malloc(sizeof(gr_output) * (size_t)(num_feeds + 1));
  e->fetches = malloc(sizeof(gr_output) * (size_t)(num_fetches + 1));
  e->states = calloc((size_t)num_nodes + 1, sizeof(void *));
  e->roots = malloc(sizeof(int) * ((size_t)e->num_nodes + 1));
  gr_status s = GR_OK;
  raw_edge *raw = NULL;
  int nraw = 0, capraw = 0;
  int *ctrl_count = NULL;
  /* graph node id -> exec index */
  int max_id = 0;
  for (int i = 0; i < num_nodes; i++)
    if (nodes[i]->id + 1 > max_id) max_id = nodes[i]->id + 1;
  int *index_of = malloc(sizeof(int) * ((size_t)max_id + 1));
  if (!e->nodes || !e->feeds || !e->fetches || !e->states || !e->roots || !index_of) {
    s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  if (num_feeds) memcpy(e->feeds, feeds, sizeof(gr_output) * (size_t)num_feeds);
  if (num_fetches) memcpy(e->fetches, fetches, sizeof(gr_output) * (size_t)num_fetches);
  for (int i = 0; i < max_id; i++) index_of[i] = -1;
  for (int i = 0; i < num_nodes; i++) index_of[nodes[i]->id] = i;

  int slot = 0, oslot = 0;
  bool has_cf = false;
  for (int i = 0; i < num_nodes; i++) {
    exec_node *en = &e->nodes[i];
    gr_node *n = nodes[i];
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
      has_cf = true;
    en->expensive = (n->op->flags & GR_OP_EXPENSIVE) || node_flops(n) > GR_EXPENSIVE_FLOPS;
    if (!en->kernel) {
      s = gr_error_set(err, GR_ERR_UNIMPLEMENTED, "node '%s' (op %s) has no kernel", n->name,
                       n->op->name);
      goto fail;
    }
    slot += n->num_inputs;
    oslot += n->num_outputs;
  }
  for (int k = 0; k < num_feeds; k++) {
    exec_node *en = &e->nodes[num_nodes + k];
    en->feed_index = k;
    en->num_outputs = 1;
    en->output_base = oslot++;
    if (!feeds[k].node || feeds[k].index < 0 || feeds[k].index >= feeds[k].node->num_outputs) {
      s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feed %d is not a valid output", k);
      goto fail;
    }
  }
  e->num_slots = slot;
  e->num_out_slots = oslot;

#define ADD_RAW(S, SO, D, DS)                                                                      \
  do {                                                                                             \
    if (nraw == capraw) {                                                                          \
      capraw = capraw ? capraw * 2 : 256;                                                          \
      raw_edge *r_ = realloc(raw, sizeof *raw * (size_t)capraw);                                   \
      if (!r_) {                                                                                   \
        s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");                         \
        goto fail;                                                                                 \
      }                                                                                            \
      raw = r_;                                                                                    \
    }                                                                                              \
    raw[nraw++] = (raw_edge){S, SO, D, DS};                                                        \
  } while (0)

  /* data edges */
  for (int i = 0; i < num_nodes; i++) {
    gr_node *n = nodes[i];
    for (int j = 0; j < n->num_inputs; j++) {
      gr_output src = n->inputs[j];
      int f = endpoint_index(feeds, num_feeds, src);
      int si = f >= 0 ? num_nodes + f : (src.node->id < max_id ? index_of[src.node->id] : -1);
      if (si < 0) {
        s = gr_error_set(err, GR_ERR_INTERNAL, "node '%s': input '%s' is neither run nor fed",
                         n->name, src.node->name);
        goto fail;
      }
      ADD_RAW(si, f >= 0 ? 0 : src.index, i, e->nodes[i].input_base + j);
      e->nodes[i].initial_pending++;
    }
  }
  for (int k = 0; k < num_fetches; k++) {
    gr_output src = fetches[k];
    int f = endpoint_index(feeds, num_feeds, src);
    int si =
        f >= 0 ? num_nodes + f : (src.node && src.node->id < max_id ? index_of[src.node->id] : -1);
    if (si < 0 || (f < 0 && (src.index < 0 || src.index >= src.node->num_outputs))) {
      s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "fetch %d ('%s') is not produced by this step",
                       k, src.node ? src.node->name : "null");
      goto fail;
    }
    ADD_RAW(si, f >= 0 ? 0 : src.index, -1, k);
  }
  if (nraw) qsort(raw, (size_t)nraw, sizeof *raw, cmp_raw_edge);
  e->edges = malloc(sizeof(exec_edge) * ((size_t)nraw + 1));
  if (!e->edges) {
    s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
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

  /* control edges */
  ctrl_count = calloc((size_t)e->num_nodes + 1, sizeof(int));
  int nctrl = 0;
  if (!ctrl_count) {
    s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  for (int i = 0; i < num_nodes; i++) {
    gr_node *n = nodes[i];
    for (int j = 0; j < n->num_control_inputs; j++) {
      gr_node *d = n->control_inputs[j];
      int di = d->id < max_id ? index_of[d->id] : -1;
      if (di < 0 && node_is_fed(feeds, num_feeds, d)) continue; /* satisfied by the feed */
      if (di < 0) {
        s = gr_error_set(err, GR_ERR_INTERNAL, "node '%s': control input '%s' is not run", n->name,
                         d->name);
        goto fail;
      }
      ctrl_count[di]++;
      nctrl++;
      e->nodes[i].initial_pending++;
    }
  }
  e->ctrl_dsts = malloc(sizeof(int) * ((size_t)nctrl + 1));
  if (!e->ctrl_dsts) {
    s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  int pos = 0;
  for (int i = 0; i < e->num_nodes; i++) {
    e->nodes[i].ctrl_begin = e->nodes[i].ctrl_end = pos;
    pos += ctrl_count[i];
  }
  for (int i = 0; i < num_nodes; i++) {
    gr_node *n = nodes[i];
    for (int j = 0; j < n->num_control_inputs; j++) {
      const gr_node *d = n->control_inputs[j];
      int di = d->id < max_id ? index_of[d->id] : -1;
      if (di >= 0) e->ctrl_dsts[e->nodes[di].ctrl_end++] = i; /* else fed */
    }
  }
  for (int i = 0; i < e->num_nodes; i++)
    if (e->nodes[i].initial_pending == 0) e->roots[e->num_roots++] = i;

  if (has_cf && (s = gr_cf_plan_new(e, err)) != GR_OK) goto fail;
  free(raw);
  free(ctrl_count);
  free(index_of);
  *out = e;
  return GR_OK;
fail:
  free(raw);
  free(ctrl_count);
  free(index_of);
  gr_executor_free(e);
  return s;
}
