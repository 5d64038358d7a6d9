/* What a request needs (gr_graph_mark_needed): the pruning walk of the
 * session (which nodes a step runs) and of the graph passes (which nodes a
 * smaller graph keeps). Each lists its differences as options of the
 * request: whether feeds satisfy control inputs, whether producers of fed
 * endpoints, variables with their initialisers and colocation targets are
 * kept, and the CSE and folding state of the passes. */
#include <stdlib.h>
#include <string.h>

#include "core/gr_graph.h"

typedef struct walk {
  const gr_graph *g;
  const gr_prune_request *r;
  unsigned char *mark;
  int *parent;
  unsigned char *fed; /* per node: some output is fed */
  int *stack;         /* a node is pushed at most twice (NEEDED, then FULL) */
  int sp;
} walk;

static bool is_fed(const walk *w, gr_output o) {
  if (!w->fed[o.node->id]) return false;
  for (int i = 0; i < w->r->num_feeds; i++)
    if (w->r->feeds[i].node == o.node && w->r->feeds[i].index == o.index) return true;
  return false;
}

static const gr_node *rep_of(const walk *w, const gr_node *n) {
  return w->r->rep ? gr_graph_node(w->g, w->r->rep[n->id]) : n;
}

/* Raises n's mark to m, recording who needs it (by: a node id, -1 for a root). */
static void need(walk *w, const gr_node *n, unsigned char m, int by) {
  if (!n || m <= w->mark[n->id]) return;
  if (w->parent && w->mark[n->id] == GR_PRUNE_UNUSED) w->parent[n->id] = by;
  w->mark[n->id] = m;
  if (m >= GR_PRUNE_NEEDED) w->stack[w->sp++] = n->id;
}

/* The producer of a fed endpoint: a single-output node is stood in for by a
 * placeholder; a placeholder or a node with other outputs is kept whole. */
static void need_fed_producer(walk *w, const gr_node *n, int by) {
  if (!w->r->keep_fed_producers) return;
  bool whole = (n->op->flags & GR_OP_PLACEHOLDER) || n->num_outputs != 1;
  need(w, n, whole ? GR_PRUNE_NEEDED : GR_PRUNE_FED, by);
}

/* The variables a variable op reads or updates (gr_attr_names_variable) and
 * their initialisers, which the session runs without feeds. */
static void need_variables(walk *w, const gr_node *n) {
  for (int a = 0; a < n->num_attrs; a++) {
    const gr_attr *at = &n->attrs[a];
    if (!gr_attr_names_variable(at)) continue;
    const gr_node *v = gr_graph_find_node(w->g, at->value.s);
    if (!v) continue;
    need(w, v, GR_PRUNE_NEEDED, n->id);
    const char *init = gr_node_attr_string(v, "initializer", "");
    if (init[0]) need(w, gr_graph_find_node(w->g, init), GR_PRUNE_FULL, v->id);
  }
}

static void visit(walk *w, const gr_node *n) {
  const gr_prune_request *r = w->r;
  unsigned char m = w->mark[n->id];
  bool cut = m == GR_PRUNE_NEEDED; /* a FULL walk does not use the feeds */
  if (r->keep_colocated && n->colocate_with)
    need(w, gr_graph_find_node(w->g, n->colocate_with), GR_PRUNE_NEEDED, n->id);
  if (r->no_inputs && r->no_inputs[n->id]) return;
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_node *p = rep_of(w, n->inputs[i].node);
    if (cut && is_fed(w, n->inputs[i]))
      need_fed_producer(w, p, n->id);
    else
      need(w, p, m, n->id);
  }
  for (int i = 0; i < n->num_control_inputs; i++) {
    const gr_node *d = n->control_inputs[i];
    if (cut && r->feeds_cut_control && w->fed[d->id]) continue; /* the feed satisfies it */
    need(w, rep_of(w, d), m, n->id);
  }
  if (r->keep_variables && (n->op->flags & GR_OP_VARIABLE)) need_variables(w, n);
}

gr_status gr_graph_mark_needed(const gr_graph *g, const gr_prune_request *r, unsigned char *mark,
                               int *parent, gr_error *err) {
  size_t n = (size_t)gr_graph_num_nodes(g);
  walk w = {g, r, mark, parent, calloc(n + 1, 1), gr_alloc_array(2 * n + 1, sizeof(int)), 0};
  if (!w.fed || !w.stack) {
    free(w.fed);
    free(w.stack);
    return gr_error_set_oom(err);
  }
  memset(mark, GR_PRUNE_UNUSED, n);
  for (int i = 0; i < r->num_feeds; i++) w.fed[r->feeds[i].node->id] = 1;
  if (r->all_roots) {
    for (size_t i = 0; i < n; i++)
      need(&w, rep_of(&w, gr_graph_node(g, (int)i)), GR_PRUNE_NEEDED, -1);
  } else {
    for (int i = 0; i < r->num_fetches; i++) {
      if (is_fed(&w, r->fetches[i]))
        need_fed_producer(&w, r->fetches[i].node, -1);
      else
        need(&w, r->fetches[i].node, GR_PRUNE_NEEDED, -1);
    }
    for (int i = 0; i < r->num_targets; i++) need(&w, r->targets[i].node, GR_PRUNE_NEEDED, -1);
  }
  while (w.sp > 0) visit(&w, gr_graph_node(g, w.stack[--w.sp]));
  free(w.fed);
  free(w.stack);
  return GR_OK;
}
