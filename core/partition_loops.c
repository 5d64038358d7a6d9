/* Loops that span devices (see core/partition.h).
 *
 * A device runs the iterations of a loop frame only if something in that
 * frame on that device starts them. So each device a loop spans gets a small
 * control loop of its own, as in the TensorFlow whitepaper:
 *
 *   trigger -> enter -> merge -> switch(merge, pred) -> next_iteration -+
 *                         ^-----------------------------------------------+
 *
 * where pred is the loop's loop_cond, received each iteration from the
 * device it runs on. Every _recv inside the frame on that device takes a
 * control input from the control loop's merge, so it runs once per
 * iteration, in step with its _send (which runs in every iteration of the
 * sending device, dead or alive). The trigger is a constant for a top-level
 * loop and the parent frame's control-loop merge for a nested one, so the
 * inner frame starts once per iteration of the outer on every device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/partition_internal.h"

/* Moves next_iterations to their merge's device, exits to their input's and
 * enters to a device that uses them, so that no value crosses devices from
 * one iteration to the next or into a frame (copies of an enter serve other
 * devices: partition.c). */
static gr_status settle_structure(pctx *c) {
  unsigned char *moved = calloc((size_t)c->n + 1, 1);
  int *use_dev = gr_alloc_array((size_t)c->n + 1, sizeof(int)); /* per enter: a consumer's device */
  unsigned char *local_use = calloc((size_t)c->n + 1, 1);
  if (!moved || !use_dev || !local_use) {
    free(moved), free(use_dev), free(local_use);
    return gr_part_oom(c);
  }
  gr_status st = GR_OK;
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    const gr_node *nd = c->nodes[i];
    use_dev[i] = -1;
    for (int j = 0; j < nd->num_inputs; j++) {
      int s = gr_part_back_edge(nd, j) ? gr_part_pos(c, nd->inputs[j].node) : -1;
      if (s < 0) continue;
      if (moved[s] && c->dev[s] != c->dev[i])
        st = gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "next_iteration '%s' feeds merges on two devices ('%s' and '%s')",
                          c->nodes[s]->name, c->devs[c->dev[s]], c->devs[c->dev[i]]);
      c->dev[s] = c->dev[i];
      moved[s] = 1;
    }
  }
  for (int oi = 0; oi < c->n && st == GR_OK; oi++) {
    int i = c->order[oi];
    const gr_node *nd = c->nodes[i];
    int s =
        nd->op->cf_kind == GR_CF_EXIT && nd->num_inputs ? gr_part_pos(c, nd->inputs[0].node) : -1;
    if (s >= 0) c->dev[i] = c->dev[s];
  }
  /* enters, consumers first */
  for (int oi = c->n - 1; oi >= 0 && st == GR_OK; oi--) {
    int i = c->order[oi];
    const gr_node *nd = c->nodes[i];
    if (nd->op->cf_kind == GR_CF_ENTER && !local_use[i] && use_dev[i] >= 0) c->dev[i] = use_dev[i];
    for (int j = 0; j < nd->num_inputs + nd->num_control_inputs; j++) {
      const gr_node *src = gr_node_predecessor(nd, j);
      int s = gr_part_pos(c, src);
      if (s < 0 || src->op->cf_kind != GR_CF_ENTER) continue;
      if (c->dev[s] == c->dev[i]) local_use[s] = 1;
      use_dev[s] = c->dev[i];
    }
  }
  free(moved), free(use_dev), free(local_use);
  return st;
}

gr_status gr_part_settle_loops(pctx *c) {
  GR_TRY(settle_structure(c));
  if (c->fr.num_frames <= 1) return GR_OK;
  int nd = c->num_devs;
  c->span = calloc((size_t)c->fr.num_frames * (size_t)nd, 1);
  if (!c->span) return gr_part_oom(c);
  for (int i = 0; i < c->n; i++) {
    int f = c->fr.of_node[i];
    if (!f) continue;
    c->span[(size_t)f * (size_t)nd + (size_t)c->dev[i]] = 1;
    const gr_node *n = c->nodes[i];
    if (n->op->cf_kind == GR_CF_LOOP_COND && c->frames[f].loop_cond < 0) c->frames[f].loop_cond = i;
    if (n->op->cf_kind == GR_CF_ENTER)
      c->frames[f].parallel = (int)gr_node_attr_int(n, "parallel_iterations", 10);
  }
  /* a nested frame's devices are its parent's too (children follow parents) */
  for (int f = c->fr.num_frames - 1; f > 0; f--) {
    int p = c->fr.frames[f].parent;
    for (int d = 0; d < nd; d++) {
      unsigned char in = c->span[(size_t)f * (size_t)nd + (size_t)d];
      c->frames[f].num_devs += in;
      if (p > 0) c->span[(size_t)p * (size_t)nd + (size_t)d] |= in;
    }
  }
  for (int f = 1; f < c->fr.num_frames; f++)
    if (c->frames[f].num_devs > 1 && c->frames[f].loop_cond < 0)
      return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "loop '%s' spans %d devices but has no loop_cond node to drive "
                          "them; build it with while_loop or pin it to one device",
                          c->fr.frames[f].name, c->frames[f].num_devs);
  return GR_OK;
}

/* Adds node "_loop/FRAME/what" of the control loop of frame f to partition d. */
static gr_node *loop_node(pctx *c, int d, int f, const char *what, const gr_op_def *op,
                          const gr_output *in, int nin, const gr_attr *a, int na) {
  gr_partition *p = &c->ps->parts[d];
  char name[160];
  snprintf(name, sizeof name, "_loop/%.100s/%s", c->fr.frames[f].name, what);
  gr_node *n = gr_graph_add_node(p->graph, op, name, in, nin, a, na).node;
  if (n) n->assigned_device = p->device;
  return n;
}

gr_status gr_part_add_loop_heads(pctx *c) {
  for (int f = 1; f < c->fr.num_frames; f++) {
    frame_info *fi = &c->frames[f];
    if (fi->num_devs < 2) continue;
    fi->ctl_merge = calloc((size_t)c->num_devs, sizeof(gr_node *));
    if (!fi->ctl_merge) return gr_part_oom(c);
    for (int d = 0; d < c->num_devs; d++) {
      if (!c->span[(size_t)f * (size_t)c->num_devs + (size_t)d]) continue;
      gr_graph *g = c->ps->parts[d].graph;
      gr_output trigger = {NULL, 0};
      int parent = c->fr.frames[f].parent;
      if (parent > 0) {
        trigger.node = c->frames[parent].ctl_merge[d];
        GR_ASSERT(trigger.node);
      } else {
        gr_tensor zero;
        gr_shape scalar = gr_shape_scalar();
        if (gr_tensor_from_data(&zero, GR_I32, &scalar, &(int32_t){0}, NULL) != GR_OK)
          return gr_part_oom(c);
        gr_attr v = gr_attr_tensor("value", zero);
        trigger.node = loop_node(c, d, f, "trigger", &gr_op_const, NULL, 0, &v, 1);
        gr_tensor_release(&v.value.tensor);
      }
      gr_attr a[] = {gr_attr_string("frame_name", c->fr.frames[f].name),
                     gr_attr_bool("is_constant", false),
                     gr_attr_int("parallel_iterations", fi->parallel)};
      gr_output e = {
          trigger.node ? loop_node(c, d, f, "enter", &gr_op_enter, &trigger, 1, a, 3) : NULL, 0};
      fi->ctl_merge[d] =
          e.node ? loop_node(c, d, f, "merge", &gr_op_merge, (gr_output[]){e, e}, 2, NULL, 0)
                 : NULL;
      if (!fi->ctl_merge[d]) return gr_part_graph_error(c, g);
      c->ps->num_control_loops++;
    }
  }
  return GR_OK;
}

static bool is_body_pivot(const pctx *c, int s) {
  int f = c->fr.of_node[s];
  const gr_node *n = c->nodes[s];
  if (f <= 0 || !c->frames[f].ctl_merge || n->op != &gr_op_identity || n->num_inputs != 1 ||
      n->inputs[0].index != 1)
    return false;
  const gr_node *sw = n->inputs[0].node;
  if (sw->op->cf_kind != GR_CF_SWITCH || sw->num_inputs != 2) return false;
  int m = gr_part_pos(c, sw->inputs[0].node), lc = gr_part_pos(c, sw->inputs[1].node);
  return lc >= 0 && lc == c->frames[f].loop_cond && m >= 0 &&
         c->nodes[m]->op->cf_kind == GR_CF_MERGE && c->fr.of_node[m] == f;
}

gr_node *gr_part_loop_pivot(pctx *c, int s, int d, gr_status *st) {
  *st = GR_OK;
  if (!is_body_pivot(c, s)) return NULL;
  int f = c->fr.of_node[s];
  frame_info *fi = &c->frames[f];
  if (!fi->ctl_merge[d]) return NULL;
  if (!fi->ctl_pivot && !(fi->ctl_pivot = calloc((size_t)c->num_devs, sizeof(gr_node *)))) {
    *st = gr_part_oom(c);
    return NULL;
  }
  if (!fi->ctl_pivot[d]) {
    /* its input becomes the control loop's switch (true side) with the tail */
    fi->ctl_pivot[d] =
        loop_node(c, d, f, "pivot", &gr_op_identity, &(gr_output){fi->ctl_merge[d], 0}, 1, NULL, 0);
    if (!fi->ctl_pivot[d]) *st = gr_part_graph_error(c, c->ps->parts[d].graph);
  }
  return fi->ctl_pivot[d];
}

gr_status gr_part_add_loop_tails(pctx *c) {
  for (int f = 1; f < c->fr.num_frames; f++) {
    frame_info *fi = &c->frames[f];
    if (!fi->ctl_merge) continue;
    int lc = fi->loop_cond;
    for (int d = 0; d < c->num_devs; d++) {
      gr_node *m = fi->ctl_merge[d];
      if (!m) continue;
      gr_graph *g = c->ps->parts[d].graph;
      gr_output pred = {c->dev[lc] == d ? c->copy[lc] : gr_part_recv_of(c, lc, 0, d), 0};
      if (!pred.node)
        return gr_part_graph_error(c, gr_graph_error(g) ? g : c->ps->parts[c->dev[lc]].graph);
      gr_output s = {
          loop_node(c, d, f, "switch", &gr_op_switch, (gr_output[]){{m, 0}, pred}, 2, NULL, 0), 1};
      if (!s.node) return gr_part_graph_error(c, g);
      gr_output nx = {loop_node(c, d, f, "next_iteration", &gr_op_next_iteration, &s, 1, NULL, 0),
                      0};
      if (!nx.node || gr_graph_set_input(g, m, 1, nx) != GR_OK) return gr_part_graph_error(c, g);
      if (fi->ctl_pivot && fi->ctl_pivot[d] &&
          gr_graph_set_input(g, fi->ctl_pivot[d], 0, s) != GR_OK)
        return gr_part_graph_error(c, g);
    }
  }
  return GR_OK;
}
