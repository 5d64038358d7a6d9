/* Graph pass: pruning. Marks what a request (fetches and targets) needs,
 * walking data and control inputs, stopping at fed endpoints, and adding
 * what a run needs besides its inputs: the variables named by kept variable
 * ops with their initialisers (which the session runs without feeds) and
 * colocation targets. */
#include <stdlib.h>
#include <string.h>

#include "passes_internal.h"

typedef struct walk {
  gr_passes_ctx *c;
  int *stack; /* a node is pushed at most twice (CUT, then FULL) */
  int sp;
} walk;

static void need(walk *w, const gr_node *n, uint8_t m) {
  if (!n || m <= w->c->mark[n->id]) return;
  w->c->mark[n->id] = m;
  if (m >= GR_PASSES_CUT) w->stack[w->sp++] = n->id;
}

/* What the producer of a fed endpoint needs: a single-output node is stood in
 * for by a placeholder; a placeholder or a node with other outputs is kept. */
static uint8_t fed_producer_mark(const gr_node *n) {
  return (n->op->flags & GR_OP_PLACEHOLDER) || n->num_outputs != 1 ? GR_PASSES_CUT : GR_PASSES_FED;
}

static const gr_node *rep_of(const gr_passes_ctx *c, const gr_node *n) {
  return gr_graph_node(c->g, c->rep[n->id]);
}

/* The variables an op reads or updates (gr_attr_names_variable), which the
 * session initialises before the step. */
static void need_variables(walk *w, const gr_node *n) {
  for (int a = 0; a < n->num_attrs; a++) {
    const gr_attr *at = &n->attrs[a];
    if (!gr_attr_names_variable(at)) continue;
    const gr_node *v = gr_graph_find_node(w->c->g, at->value.s);
    if (!v) continue;
    need(w, v, GR_PASSES_CUT);
    const char *init = gr_node_attr_string(v, "initializer", "");
    if (init[0]) need(w, gr_graph_find_node(w->c->g, init), GR_PASSES_FULL);
  }
}

static void visit(walk *w, const gr_node *n) {
  gr_passes_ctx *c = w->c;
  uint8_t m = c->mark[n->id];
  if (n->colocate_with) need(w, gr_graph_find_node(c->g, n->colocate_with), GR_PASSES_CUT);
  if (c->folded[n->id]) return; /* a constant now: no inputs */
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_node *p = rep_of(c, n->inputs[i].node);
    if (m == GR_PASSES_CUT && gr_passes_is_fed(c, n->inputs[i]))
      need(w, p, fed_producer_mark(p));
    else
      need(w, p, m);
  }
  for (int i = 0; i < n->num_control_inputs; i++) need(w, rep_of(c, n->control_inputs[i]), m);
  if (n->op->flags & GR_OP_VARIABLE) need_variables(w, n);
}

gr_status gr_passes_mark(gr_passes_ctx *c) {
  walk w = {c, malloc(sizeof(int) * (2 * (size_t)c->n + 1)), 0};
  if (!w.stack) return gr_error_set(c->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  memset(c->mark, GR_PASSES_UNUSED, (size_t)c->n);
  if (c->keep_all || (c->num_fetches == 0 && c->num_targets == 0)) {
    for (int i = 0; i < c->n; i++) need(&w, rep_of(c, gr_graph_node(c->g, i)), GR_PASSES_CUT);
  } else {
    for (int i = 0; i < c->num_fetches; i++) {
      const gr_node *f = c->fetches[i].node;
      need(&w, f, gr_passes_is_fed(c, c->fetches[i]) ? fed_producer_mark(f) : GR_PASSES_CUT);
    }
    for (int i = 0; i < c->num_targets; i++) need(&w, c->targets[i].node, GR_PASSES_CUT);
  }
  while (w.sp > 0) visit(&w, gr_graph_node(c->g, w.stack[--w.sp]));
  free(w.stack);
  return GR_OK;
}
