/* The control-flow executor's plan: frames (from enter nodes, nested by
 * the frame their input lives in), local numbering of nodes and slots per
 * frame, how each edge crosses frames, and the checks that every value
 * enters a loop through an enter and leaves it through an exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/executor_cf_internal.h"

void gr_cf_plan_free(struct cf_plan *p) {
  if (!p) return;
  free(p->frames);
  free(p->node_frame);
  free(p->node_local);
  free(p->slot_local);
  free(p->edge_mode);
  free(p->ctrl_mode);
  free(p->merge_fwd);
  free(p->merge_back);
  free(p->local_pending);
  free(p->constant);
  for (int f = 0; p->frame_pending && f < p->num_frames; f++) free(p->frame_pending[f]);
  free(p->frame_pending);
  free(p);
}

static int child_frame(struct cf_plan *p, int parent, const char *name, int par_iters) {
  for (int f = 0; f < p->num_frames; f++)
    if (p->frames[f].parent == parent && strcmp(p->frames[f].name, name) == 0) return f;
  if (p->num_frames == p->cap_frames) {
    int cap = p->cap_frames * 2;
    frame_def *fr = realloc(p->frames, sizeof *fr * (size_t)cap);
    if (!fr) return -1;
    p->frames = fr;
    p->cap_frames = cap;
  }
  p->frames[p->num_frames] = (frame_def){parent, name, par_iters > 0 ? par_iters : 10, 0, 0, 0};
  return p->num_frames++;
}

static int out_frame(const struct cf_plan *p, const exec_node *nodes, int i) {
  int f = p->node_frame[i];
  return nodes[i].cf_kind == GR_CF_EXIT && f >= 0 ? p->frames[f].parent : f;
}

static const char *frame_label(const struct cf_plan *p, int f) {
  return f <= 0 ? "the top level" : p->frames[f].name;
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

/* The plan's per-node, per-slot and per-edge arrays, and the top frame. */
static gr_status plan_alloc(struct cf_plan *p, const gr_executor *e, gr_error *err) {
  int n = e->num_nodes;
  p->cap_frames = 8;
  p->frames = malloc(sizeof(frame_def) * 8);
  p->node_frame = malloc(sizeof(int) * ((size_t)n + 1));
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
  if (!p->frames || !p->node_frame || !p->node_local || !p->slot_local || !p->merge_fwd ||
      !p->merge_back || !p->local_pending || !p->constant || !p->edge_mode || !p->ctrl_mode)
    return oom(err);
  p->frames[0] = (frame_def){-1, "", 1, 0, 0, 0};
  p->num_frames = 1;
  return GR_OK;
}

/* Each node's frame, in topological order (the loop back edges,
 * next_iteration -> merge, aside): that of its first data input with a
 * frame (a child frame at an enter), else of a control input, else the top
 * level; feeds are at the top level. */
static gr_status assign_frames(struct cf_plan *p, gr_executor *e, gr_error *err) {
  int n = e->num_nodes;
  /* producers of each node's inputs, as exec indices (from the edges) */
  int *src_of_slot = malloc(sizeof(int) * ((size_t)e->num_slots + 1));
  if (!src_of_slot) return oom(err);
  for (int i = 0; i < e->num_slots; i++) src_of_slot[i] = -1;
  for (int i = 0; i < n; i++)
    for (int k = e->nodes[i].edge_begin; k < e->nodes[i].edge_end; k++)
      if (e->edges[k].dst >= 0) src_of_slot[e->edges[k].dst_slot] = i;
  gr_status st = GR_OK;
  int *order = malloc(sizeof(int) * ((size_t)n + 1));
  int *ctrl_src = malloc(sizeof(int) * ((size_t)n + 1)); /* a control predecessor, -1: none */
  int placed = order && ctrl_src ? gr_topo_sort(n, exec_edges, e, NULL, order) : -1;
  if (placed < 0) {
    free(order), free(ctrl_src), free(src_of_slot);
    return oom(err);
  }
  for (int i = 0; i < n; i++) ctrl_src[i] = -1;
  for (int i = 0; i < n; i++)
    for (int k = e->nodes[i].ctrl_begin; k < e->nodes[i].ctrl_end; k++)
      ctrl_src[e->ctrl_dsts[k]] = i;
  if (placed != n)
    st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "the graph has a cycle that is not a loop");
  for (int i = 0; i < n && st == GR_OK; i++) /* feeds (the last nodes) are at the top level */
    p->node_frame[i] = e->nodes[i].feed_index >= 0 ? 0 : -1;
  for (int oi = 0; oi < n && st == GR_OK; oi++) {
    int i = order[oi];
    exec_node *en = &e->nodes[i];
    int frame = -1;
    if (en->feed_index >= 0) {
      frame = 0;
    } else {
      int src = -1;
      for (int j = 0; j < en->num_inputs && src < 0; j++) {
        int s = src_of_slot[en->input_base + j];
        if (s >= 0 && p->node_frame[s] >= 0) src = s;
      }
      if (src >= 0) {
        frame = out_frame(p, e->nodes, src);
        if (en->cf_kind == GR_CF_ENTER) {
          const gr_node *nd = en->node;
          frame = child_frame(p, frame, gr_node_attr_string(nd, "frame_name", nd->name),
                              (int)gr_node_attr_int(nd, "parallel_iterations", 10));
          p->constant[i] = gr_node_attr_bool(nd, "is_constant", false);
          if (frame >= 0) p->frames[frame].num_enters++;
        }
      } else {
        /* no data input seen: take the frame of a control input (placed
         * before it in this order), else the top level */
        int q = ctrl_src[i];
        frame = q >= 0 && p->node_frame[q] >= 0 ? out_frame(p, e->nodes, q) : 0;
      }
    }
    if (frame < 0) st = oom(err);
    p->node_frame[i] = frame;
  }
  free(order), free(ctrl_src), free(src_of_slot);
  return st;
}

/* Every edge must stay in its frame, or enter / exit / next_iteration it:
 * records each edge's mode, counts the merges' forward and back inputs and
 * the edges into each frame's enters. */
static gr_status check_edges(struct cf_plan *p, gr_executor *e, gr_error *err) {
  gr_status st = GR_OK;
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++) {
    exec_node *en = &e->nodes[i];
    int want = out_frame(p, e->nodes, i);
    for (int k = en->edge_begin; k < en->edge_end && st == GR_OK; k++) {
      int d = e->edges[k].dst;
      if (d < 0) {
        p->edge_mode[k] = gr_cf_edge_mode(en->cf_kind, GR_CF_NONE);
        if (want != 0)
          st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "node '%s' is inside loop '%s': fetch a value that leaves the loop "
                            "through an exit instead",
                            en->node->name, frame_label(p, p->node_frame[i]));
        continue;
      }
      unsigned char mode = gr_cf_edge_mode(en->cf_kind, e->nodes[d].cf_kind);
      int got = p->node_frame[d];
      if (mode & MODE_ENTER) got = p->frames[got].parent;
      p->edge_mode[k] = mode;
      if (got != want)
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "node '%s' (in %s) uses '%s' from %s: a value must enter a loop "
                          "through an enter node",
                          e->nodes[d].node->name, frame_label(p, p->node_frame[d]),
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
      int got = p->node_frame[d];
      if (mode & MODE_ENTER) got = p->frames[got].parent;
      if (got != want || (mode & MODE_NEXT))
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "control dependency of '%s' (in %s) on '%s' (in %s) crosses a loop "
                          "boundary",
                          e->nodes[d].node->name, frame_label(p, p->node_frame[d]), en->node->name,
                          frame_label(p, want));
      p->ctrl_mode[k] = mode;
      /* a frame instance waits for every edge into its enters, control ones too */
      if (mode & MODE_ENTER) p->frames[p->node_frame[d]].num_enters++;
    }
  }
  return st;
}

/* Local numbering of nodes and slots per frame, and each frame's initial
 * pending counts by local index. */
static gr_status number_locally(struct cf_plan *p, gr_executor *e, gr_error *err) {
  gr_status st = GR_OK;
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++) {
    frame_def *f = &p->frames[p->node_frame[i]];
    exec_node *en = &e->nodes[i];
    p->node_local[i] = f->num_nodes++;
    for (int j = 0; j < en->num_inputs; j++) p->slot_local[en->input_base + j] = f->num_slots++;
    p->local_pending[i] = en->initial_pending;
    if (p->node_frame[i] != 0 && en->initial_pending == 0)
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "node '%s' is in loop '%s' but has no inputs (give it a control input "
                        "from the loop)",
                        en->node->name, frame_label(p, p->node_frame[i]));
  }
  if (st != GR_OK) return st;
  p->frame_pending = calloc((size_t)p->num_frames, sizeof(int *));
  for (int f = 0; p->frame_pending && f < p->num_frames; f++)
    p->frame_pending[f] = malloc(sizeof(int) * ((size_t)p->frames[f].num_nodes + 1));
  for (int f = 0; p->frame_pending && f < p->num_frames; f++)
    if (!p->frame_pending[f]) st = oom(err);
  if (!p->frame_pending) st = oom(err);
  for (int i = 0; i < e->num_nodes && st == GR_OK; i++)
    p->frame_pending[p->node_frame[i]][p->node_local[i]] = p->local_pending[i];
  return st;
}

gr_status gr_cf_plan_new(gr_executor *e, gr_error *err) {
  struct cf_plan *p = calloc(1, sizeof *p);
  if (!p) return oom(err);
  e->cf = p;
  GR_TRY(plan_alloc(p, e, err));
  GR_TRY(assign_frames(p, e, err));
  GR_TRY(check_edges(p, e, err));
  return number_locally(p, e, err);
}
