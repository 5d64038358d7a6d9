/* Loop frames (frames.h): the frame tree and the assignment walk that
 * the partitioner, the executor's plan and autodiff share. */
#include "core/frames.h"

#include <stdlib.h>
#include <string.h>

#include "core/gr_alloc.h"
#include "core/gr_graph.h"

gr_status gr_frames_init(gr_frames *fr, gr_frames_rule rule, int num_nodes) {
  memset(fr, 0, sizeof *fr);
  fr->rule = rule;
  fr->num_nodes = num_nodes;
  fr->cap_frames = 8;
  fr->frames = gr_alloc_array((size_t)fr->cap_frames, sizeof *fr->frames);
  fr->of_node = gr_alloc_array((size_t)num_nodes + 1, sizeof *fr->of_node);
  fr->kind = calloc((size_t)num_nodes + 1, 1);
  fr->entered = calloc((size_t)num_nodes + 1, 1);
  if (!fr->frames || !fr->of_node || !fr->kind || !fr->entered) return GR_ERR_RESOURCE_EXHAUSTED;
  fr->frames[0] = (gr_frame){.parent = -1, .name = "", .enter = -1};
  fr->num_frames = 1;
  for (int i = 0; i < num_nodes; i++) fr->of_node[i] = -1;
  return GR_OK;
}

void gr_frames_free(gr_frames *fr) {
  free(fr->frames);
  free(fr->of_node);
  free(fr->kind);
  free(fr->entered);
  memset(fr, 0, sizeof *fr);
}

int gr_frames_get_depth(const gr_frames *fr, int f) {
  int d = 0;
  for (; f > 0; f = fr->frames[f].parent) d++;
  return d;
}

/* Is frame a the frame k or inside it? */
static bool inside(const gr_frames *fr, int a, int k) {
  for (; a > 0; a = fr->frames[a].parent)
    if (a == k) return true;
  return false;
}

/* The frame of that name (by name alone for the deepest rule, moved into
 * parent when that is deeper), or -1. */
static int find_child(gr_frames *fr, int parent, const char *name) {
  for (int f = 1; f < fr->num_frames; f++) {
    if (strcmp(fr->frames[f].name, name) != 0) continue;
    if (fr->rule == GR_FRAMES_FIRST_INPUT) {
      if (fr->frames[f].parent == parent) return f;
      continue;
    }
    if (!inside(fr, parent, f) &&
        gr_frames_get_depth(fr, parent) > gr_frames_get_depth(fr, fr->frames[f].parent))
      fr->frames[f].parent = parent;
    return f;
  }
  return -1;
}

int gr_frames_get_child(gr_frames *fr, int parent, const char *name, int enter) {
  int f = find_child(fr, parent, name);
  if (f >= 0) return f;
  if (fr->num_frames == fr->cap_frames) {
    int cap = fr->cap_frames * 2;
    gr_frame *more = gr_realloc_array(fr->frames, (size_t)cap, sizeof *more);
    if (!more) return -1;
    fr->frames = more;
    fr->cap_frames = cap;
  }
  fr->frames[fr->num_frames] = (gr_frame){.parent = parent, .name = name, .enter = enter};
  return fr->num_frames++;
}

int gr_frames_output_frame(const gr_frames *fr, int i) {
  int f = fr->of_node[i];
  if (f < 0) return 0;
  return fr->kind[i] == GR_CF_EXIT && f > 0 ? fr->frames[f].parent : f;
}

int gr_frames_input_frame(const gr_frames *fr, int i) {
  int f = fr->of_node[i];
  return fr->kind[i] == GR_CF_ENTER && f > 0 ? fr->frames[f].parent : f;
}

bool gr_frames_check_edge(const gr_frames *fr, int src, int dst) {
  return gr_frames_output_frame(fr, src) == gr_frames_input_frame(fr, dst);
}

/* The input that decides a node's frame, as the inputs are reported. */
typedef struct pick {
  const gr_frames *fr;
  bool enter; /* the node is an enter */
  bool found; /* an input was taken */
  bool data;  /* it is a data input */
  int frame;  /* the frame its output lives in */
  int depth;  /* and that frame's depth (the deepest rule) */
} pick;

static void consider(void *acc, int src, bool control) {
  pick *p = acc;
  int f = src == GR_FRAMES_TOP_LEVEL ? 0 : gr_frames_output_frame(p->fr, src);
  int depth = 0;
  if (p->fr->rule == GR_FRAMES_DEEPEST_INPUT) {
    depth = gr_frames_get_depth(p->fr, f);
    if (p->found && (p->enter || depth <= p->depth)) return; /* the first of the deepest */
  } else if (p->found && (p->data || control)) {
    return; /* the first data input, else the first control input */
  }
  *p = (pick){p->fr, p->enter, true, !control, f, depth};
}

gr_status gr_frames_assign_nodes(gr_frames *fr, const int *order, gr_frames_node_fn node,
                                 gr_frames_inputs_fn inputs, const void *ctx) {
  for (int k = 0; k < fr->num_nodes; k++) {
    int i = order[k];
    const gr_node *n = node(ctx, i);
    int kind = n ? n->op->cf_kind : GR_CF_NONE;
    pick p = {.fr = fr, .enter = kind == GR_CF_ENTER};
    inputs(ctx, i, consider, &p);
    int f = p.found ? p.frame : 0;
    if (p.enter && p.found && p.data) {
      f = gr_frames_get_child(fr, f, gr_node_attr_string(n, "frame_name", n->name), i);
      if (f < 0) return GR_ERR_RESOURCE_EXHAUSTED;
      fr->entered[i] = 1;
    }
    fr->kind[i] = (unsigned char)kind;
    fr->of_node[i] = f;
  }
  return GR_OK;
}

static const gr_node *graph_node(const void *g, int id) {
  return gr_graph_node((const gr_graph *)g, id);
}

static void graph_inputs(const void *g, int id, gr_frames_emit_fn emit, void *acc) {
  const gr_node *n = gr_graph_node((const gr_graph *)g, id);
  for (int j = 0; j < n->num_inputs + n->num_control_inputs; j++)
    emit(acc, gr_node_predecessor(n, j)->id, j >= n->num_inputs);
}

gr_status gr_frames_assign_graph(gr_frames *fr, const gr_graph *g, const int *order) {
  return gr_frames_assign_nodes(fr, order, graph_node, graph_inputs, g);
}
