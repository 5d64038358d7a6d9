/* The control-flow executor's plan: each node's frame (frames.h, by its
 * first data input, else a control input), local numbering of nodes and
 * slots per frame, how each edge crosses frames, and the checks that every
 * value enters a loop through an enter and leaves it through an exit. */
#include <stdio.h>
#include <stdlib.h>

#include "core/executor_cf_internal.h"
#include "core/gr_alloc.h"

void gr_cf_plan_free(struct cf_plan *p) {
  if (!p) return;
  free(p->frames);
  free(p->node_local);
  free(p->slot_local);
  free(p->edge_mode);
  free(p->ctrl_mode);
  free(p->merge_fwd);
  free(p->merge_back);
  free(p->local_pending);
  free(p->constant);
  for (int f = 0; p->frame_pending && f < p->fr.num_frames; f++) free(p->frame_pending[f]);
  free(p->frame_pending);
  gr_frames_free(&p->fr); /* after frame_pending, which it counts */
  free(p);
}

static const char *frame_label(const struct cf_plan *p, int f) {
  return f <= 0 ? "the top level" : p->fr.frames[f].name;
}

/* The executor's ordering edges: data edges but those out of a
 * next_iteration (a loop's back edge), then control edges, node by node. */
static void exec_edges(const void *ctx, gr_topo_emit_fn emit, void *acc) {
  const gr_executor *e = ctx;
  for (int v = 0; v < e->num_nodes; v++) {
    const exec_node *en = &e->nodes[v];
    if (en->cf_kind != GR_CF_NEXT_ITERATION)
      for (int k = en->edge_begin; k < en->edge_end; k++)
        if (e->edges[k].dst >= 0) emit(acc, v, e->edges[k].dst);
    for (int k = en->ctrl_begin; k < en->ctrl_end; k++) emit(acc, v, e->ctrl_dsts[k]);
  }
}

static gr_status oom(gr_error *err) {
  return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
}

/* The plan's per-node, per-slot and per-edge arrays. */
static gr_status plan_alloc(struct cf_plan *p, const gr_executor *e, gr_error *err) {
  int n = e->num_nodes;
  p->node_local = malloc(sizeof(int) * ((size_t)n + 1));
  p->slot_local = malloc(sizeof(int) * ((size_t)e->num_slots + 1));
  p->merge_fwd = calloc((size_t)n + 1, sizeof(int));
  p->merge_back = calloc((size_t)n + 1, sizeof(int));
  p->local_pending = calloc((size_t)n + 1, sizeof(int));
  p->constant = calloc((size_t)n + 1, 1);
  int nedges = n ? e->nodes[0].edge_begin : 0, nctrl = 0;
  for (int i = 0; i < n; i++) {
    if (e->nodes[i].edge_end > nedges) nedges = e->nodes[i].edge_end;
    if (e->nodes[i].ctrl_end > nctrl) nctrl = e->nodes[i].ctrl_end;
  }
  p->edge_mode = calloc((size_t)nedges + 1, 1);
  p->ctrl_mode = calloc((size_t)nctrl + 1, 1);
  if (!p->node_local || !p->slot_local || !p->merge_fwd || !p->merge_back || !p->local_pending ||
      !p->constant || !p->edge_mode || !p->ctrl_mode)
    return oom(err);
  return GR_OK;
}

/* What the frame walk reads of the executor's nodes. */
typedef struct exec_frames {
  const gr_executor *e;
  const gr_frames *fr;
  int *src_of_slot; /* per absolute input slot: the node producing it, -1: none */
  int *ctrl_src;    /* per node: a control predecessor (the last listed), -1: none */
} exec_frames;

static const gr_node *exec_graph_node(const void *ctx, int i) {
  return ((const exec_frames *)ctx)->e->nodes[i].node;
}

/* The data inputs of a node whose producer has a frame already (not a loop
 * back edge, out of a next_iteration later in the order), then a control
 * predecessor (placed before it). Feeds have no inputs: the top level. */
static void exec_inputs(const void *ctx, int i, gr_frames_emit_fn emit, void *acc) {
  const exec_frames *x = ctx;
  const exec_node *en = &x->e->nodes[i];
  for (int j = 0; j < en->num_inputs; j++) {
    int s = x->src_of_slot[en->input_base + j];
    if (s >= 0 && x->fr->of_node[s] >= 0) emit(acc, s, false);
  }
  if (x->ctrl_src[i] >= 0) emit(acc, x->ctrl_src[i], true);
}

/* Each node's frame (GR_FRAMES_FIRST_INPUT), in topological order (the loop
 * back edges, next_iteration -> merge, aside). */
static gr_status assign_frames(struct cf_plan *p, gr_executor *e, gr_error *err) {
  int n = e->num_nodes;
  exec_frames x = {.e = e, .fr = &p->fr};
  x.src_of_slot = gr_alloc_array((size_t)e->num_slots + 1, sizeof(int));
  x.ctrl_src = gr_alloc_array((size_t)n + 1, sizeof(int));
  int *order = gr_alloc_array((size_t)n + 1, sizeof(int));
  int placed =
      x.src_of_slot && x.ctrl_src && order ? gr_topo_sort(n, exec_edges, e, NULL, order) : -1;
  gr_status st = placed < 0 ? oom(err) : GR_OK;
  if (st == GR_OK && placed != n)
    st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "the graph has a cycle that is not a loop");
  if (st == GR_OK) {
    for (int i = 0; i < e->num_slots; i++) x.src_of_slot[i] = -1;
    for (int i = 0; i < n; i++) x.ctrl_src[i] = -1;
    for (int i = 0; i < n; i++) {
      for (int k = e->nodes[i].edge_begin; k < e->nodes[i].edge_end; k++)
        if (e->edges[k].dst >= 0) x.src_of_slot[e->edges[k].dst_slot] = i;
      for (int k = e->nodes[i].ctrl_begin; k < e->nodes[i].ctrl_end; k++)
        x.ctrl_src[e->ctrl_dsts[k]] = i;
    }
    if (gr_frames_init(&p->fr, GR_FRAMES_FIRST_INPUT, n) != GR_OK ||
        gr_frames_assign_nodes(&p->fr, order, exec_graph_node, exec_inputs, &x) != GR_OK)
      st = oom(err);
  }
  free(order), free(x.ctrl_src), free(x.src_of_slot);
  return st;
}

/* Per frame: parallel_iterations (of the enter that opened it) and the
 * enters into it; per enter: is_constant. */
static gr_status frame_defs(struct cf_plan *p, const gr_executor *e, gr_error *err) {
  p->frames = calloc((size_t)p->fr.num_frames, sizeof *p->frames);
  if (!p->frames) return oom(err);
  p->frames[0].par_iters = 1;
  for (int f = 1; f < p->fr.num_frames; f++) {
    const gr_node *nd = e->nodes[p->fr.frames[f].enter].node;
    int par = (int)gr_node_attr_int(nd, "parallel_iterations", 10);
    p->frames[f].par_iters = par > 0 ? par : 10;
  }
  for (int i = 0; i < e->num_nodes; i++) {
    if (!p->fr.entered[i]) continue;
    p->constant[i] = gr_node_attr_bool(e->nodes[i].node, "is_constant", false);
    p->frames[p->fr.of_node[i]].num_enters++;
  }
  return GR_OK;
}

/* Every edge must stay in its frame, or enter / exit / next_iteration it
 * (gr_frames_check_edge): records each edge's mode, counts the merges'
 * forward and back inputs and the edges into each frame's enters. */
static gr_status check_edges(struct cf_plan *p, gr_executor *e, gr_error *err) {
  gr_status st = GR_OK;
  const gr_frames *fr = &p->fr;
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++) {
    exec_node *en = &e->nodes[i];
    int want = gr_frames_output_frame(fr, i);
    if (en->cf_kind == GR_CF_EXIT && fr->of_node[i] == 0 &&
        (en->edge_begin < en->edge_end || en->ctrl_begin < en->ctrl_end))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "node '%s' is an exit outside any loop: its value leads nowhere",
                          en->node->name);
    for (int k = en->edge_begin; k < en->edge_end && st == GR_OK; k++) {
      int d = e->edges[k].dst;
      if (d < 0) {
        p->edge_mode[k] = gr_cf_edge_mode(en->cf_kind, GR_CF_NONE);
        if (want != 0)
          st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "node '%s' is inside loop '%s': fetch a value that leaves the loop "
                            "through an exit instead",
                            en->node->name, frame_label(p, fr->of_node[i]));
        continue;
      }
      unsigned char mode = gr_cf_edge_mode(en->cf_kind, e->nodes[d].cf_kind);
      p->edge_mode[k] = mode;
      if (!gr_frames_check_edge(fr, i, d))
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "node '%s' (in %s) uses '%s' from %s: a value must enter a loop "
                          "through an enter node",
                          e->nodes[d].node->name, frame_label(p, fr->of_node[d]),
                          en->node ? en->node->name : "a feed", frame_label(p, want));
      if (e->nodes[d].cf_kind == GR_CF_MERGE) {
        if (mode == MODE_NEXT)
          p->merge_back[d]++;
        else
          p->merge_fwd[d]++;
      }
    }
    for (int k = en->ctrl_begin; k < en->ctrl_end && st == GR_OK; k++) {
      int d = e->ctrl_dsts[k];
      unsigned char mode = gr_cf_edge_mode(en->cf_kind, e->nodes[d].cf_kind);
      if (!gr_frames_check_edge(fr, i, d) || (mode & MODE_NEXT))
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "control dependency of '%s' (in %s) on '%s' (in %s) crosses a loop "
                          "boundary",
                          e->nodes[d].node->name, frame_label(p, fr->of_node[d]), en->node->name,
                          frame_label(p, want));
      p->ctrl_mode[k] = mode;
      /* a frame instance waits for every edge into its enters, control ones too */
      if (mode & MODE_ENTER) p->frames[fr->of_node[d]].num_enters++;
    }
  }
  return st;
}

/* Local numbering of nodes and slots per frame, and each frame's initial
 * pending counts by local index. */
static gr_status number_locally(struct cf_plan *p, gr_executor *e, gr_error *err) {
  gr_status st = GR_OK;
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++) {
    frame_def *f = &p->frames[p->fr.of_node[i]];
    exec_node *en = &e->nodes[i];
    p->node_local[i] = f->num_nodes++;
    for (int j = 0; j < en->num_inputs; j++) p->slot_local[en->input_base + j] = f->num_slots++;
    p->local_pending[i] = en->initial_pending;
    if (p->fr.of_node[i] != 0 && en->initial_pending == 0)
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "node '%s' is in loop '%s' but has no inputs (give it a control input "
                        "from the loop)",
                        en->node->name, frame_label(p, p->fr.of_node[i]));
  }
  if (st != GR_OK) return st;
  p->frame_pending = calloc((size_t)p->fr.num_frames, sizeof(int *));
  for (int f = 0; p->frame_pending && f < p->fr.num_frames; f++)
    p->frame_pending[f] = malloc(sizeof(int) * ((size_t)p->frames[f].num_nodes + 1));
  for (int f = 0; p->frame_pending && f < p->fr.num_frames; f++)
    if (!p->frame_pending[f]) st = oom(err);
  if (!p->frame_pending) st = oom(err);
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++)
    p->frame_pending[p->fr.of_node[i]][p->node_local[i]] = p->local_pending[i];
  return st;
}

gr_status gr_cf_plan_new(gr_executor *e, gr_error *err) {
  struct cf_plan *p = calloc(1, sizeof *p);
  if (!p) return oom(err);
  e->cf = p;
  GR_TRY(plan_alloc(p, e, err));
  GR_TRY(assign_frames(p, e, err));
  GR_TRY(frame_defs(p, e, err));
  GR_TRY(check_edges(p, e, err));
  return number_locally(p, e, err);
}
