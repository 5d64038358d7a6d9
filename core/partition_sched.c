/* Recv scheduling (gr_partition_options.schedule_recvs): a _recv starts as
 * soon as its step does, so a value a device needs only late in the step
 * would arrive early and be held there. Instead, each top-level _recv gets a
 * control input from the node of its device that, by a critical-path
 * estimate, finishes last before the Recv must start (as late as possible
 * with the consumer still on time):
 *
 *   cost(n)      ~ 100 ns + 0.5 ns per flop + 0.1 ns per byte (the op's cost fn)
 *   ASAP finish  longest path from the step's roots
 *   ALAP start   deadline(consumers) - cost, against the step's critical path
 *   the receive  must start by its consumers' ALAP start less its own cost
 *
 * For Recv R the chosen node X finishes at or before R's ALAP start, as late
 * as possible, and cannot depend on the value R carries (its ALAP start in
 * the whole step is no later than that of R's source: see below), so no
 * device can wait for itself. A loop's exits depend on every iteration of
 * its body, through the back edge the order leaves out: the nodes of a
 * loop frame start before its exits in these estimates (alap_starts), or a
 * node after the loop could look independent of an invariant the loop
 * receives. Receives inside loops are left alone. */
#include <stdint.h>
#include <stdlib.h>

#include "core/partition_internal.h"
#include "core/transfer_internal.h"

static int64_t cost_ns(const gr_node *n) {
  gr_cost c = {0, 0};
  if (n->op->cost_fn) n->op->cost_fn(n, &c);
  if (n->op == &gr_op__recv) c.bytes = (double)gr_shape_num_elements(&n->out_shapes[0]) * 4;
  if (c.flops < 0) c.flops = 0;
  if (c.bytes < 0) c.bytes = 0;
  double ns = 100 + 0.5 * c.flops + 0.1 * c.bytes;
  return ns < 1e12 ? (int64_t)ns : (int64_t)1e12; /* sums along paths stay far from overflow */
}

/* Candidates of one device, by ASAP finish. */
typedef struct cand {
  int64_t eft;
  int pos; /* in the input set */
} cand;
static int cmp_cand(const void *a, const void *b) {
  const cand *x = a, *y = b;
  return x->eft < y->eft ? -1 : x->eft > y->eft ? 1 : x->pos - y->pos;
}

/* The ALAP start of every node (glst), from its consumers' and the step's
 * span. A loop's exit depends on every iteration of its body, which the
 * order (without back edges) does not show: a node of a loop frame must
 * also start before the frame's exits (and those of the frames around it)
 * can, or a node after the loop could look independent of a value the
 * loop needs. The frames' bounds come from their exits' starts, which the
 * bounds of the frames around them lower: passes until nothing changes
 * (at most one per nesting level, and one more). */
static gr_status alap_starts(pctx *c, const int *cstart, const int *cons, int64_t span,
                             int64_t *glst) {
  int nf = c->fr.num_frames, n = c->n;
  int64_t *bound = gr_alloc_array((size_t)nf + 1, sizeof(int64_t));
  if (!bound) return GR_ERR_RESOURCE_EXHAUSTED;
  for (int f = 0; f < nf; f++) bound[f] = INT64_MAX;
  for (bool changed = true; changed;) {
    changed = false;
    for (int k = n - 1; k >= 0; k--) {
      int i = c->order[k];
      int64_t finish = span;
      for (int e = cstart[i]; e < cstart[i + 1]; e++)
        if (glst[cons[e]] < finish) finish = glst[cons[e]];
      int f = gr_frames_output_frame(&c->fr, i); /* an enter's: its loop; an exit's: outside */
      if (f > 0 && bound[f] < finish) finish = bound[f];
      glst[i] = finish - cost_ns(c->nodes[i]);
    }
    /* each frame: before its exits and before the bound of its parent
     * (parents come before children) */
    int64_t *next = gr_alloc_array((size_t)nf + 1, sizeof(int64_t));
    if (!next) {
      free(bound);
      return GR_ERR_RESOURCE_EXHAUSTED;
    }
    for (int f = 0; f < nf; f++) next[f] = INT64_MAX;
    for (int i = 0; i < n; i++)
      if (c->nodes[i]->op->cf_kind == GR_CF_EXIT && c->fr.of_node[i] > 0 &&
          glst[i] < next[c->fr.of_node[i]])
        next[c->fr.of_node[i]] = glst[i];
    for (int f = 1; f < nf; f++) {
      int p = c->fr.frames[f].parent;
      if (p > 0 && next[p] < next[f]) next[f] = next[p];
      changed |= next[f] != bound[f];
      bound[f] = next[f];
    }
    free(next);
  }
  free(bound);
  return GR_OK;
}

gr_status gr_part_schedule_recvs(pctx *c) {
  int n = c->n;
  int64_t *geft = calloc((size_t)n + 1, sizeof(int64_t)),
          *glst = gr_alloc_array((size_t)n + 1, sizeof(int64_t));
  int *cstart = calloc((size_t)n + 2, sizeof(int)), *fill = calloc((size_t)n + 1, sizeof(int));
  unsigned char *maybe_dead = calloc((size_t)n + 1, 1);
  int *cons = NULL, edges = 0;
  gr_status st = GR_OK;
  if (!geft || !glst || !cstart || !fill || !maybe_dead) goto oom;
  /* consumers in the input set, by position */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < n; i++) {
      const gr_node *v = c->nodes[i];
      for (int j = 0; j < v->num_inputs + v->num_control_inputs; j++) {
        if (j < v->num_inputs && gr_part_back_edge(v, j)) continue;
        int p = gr_part_pos(c, gr_node_predecessor(v, j));
        if (p < 0) continue;
        if (pass == 0)
          cstart[p + 1]++, edges++;
        else
          cons[cstart[p] + fill[p]++] = i;
      }
    }
    if (pass == 0) {
      for (int i = 0; i < n; i++) cstart[i + 1] += cstart[i];
      if (!(cons = gr_alloc_array((size_t)edges + 1, sizeof(int)))) goto oom;
    }
  }
  /* The whole step's ALAP start times. Every node starts strictly after its
   * inputs (each costs > 0), so a node X with glst(X) <= glst(src) cannot
   * depend on src; and a control edge X -> a receive of src keeps that true
   * for the receive's consumers. So choosing only such X never makes a cycle,
   * however many receives are scheduled, and needs no search. Nodes that may
   * be dead (downstream of a switch, before a merge joins every side) are not
   * chosen either: a dead control input would make the value dead. */
  int64_t span = 0;
  for (int k = 0; k < n; k++) {
    int i = c->order[k];
    const gr_node *v = c->nodes[i];
    int64_t start = 0;
    int total = v->num_inputs + v->num_control_inputs, dead_in = 0, seen = 0;
    for (int j = 0; j < total; j++) {
      if (j < v->num_inputs && gr_part_back_edge(v, j)) continue;
      int p = gr_part_pos(c, gr_node_predecessor(v, j));
      if (p < 0) continue;
      if (geft[p] > start) start = geft[p];
      seen++;
      dead_in += maybe_dead[p] || (j < v->num_inputs && c->nodes[p]->op->cf_kind == GR_CF_SWITCH);
    }
    maybe_dead[i] = v->op->cf_kind == GR_CF_MERGE ? seen && dead_in == seen : dead_in > 0;
    geft[i] = start + cost_ns(v);
    if (geft[i] > span) span = geft[i];
  }
  if (alap_starts(c, cstart, cons, span, glst) != GR_OK) goto oom;
  cand *cs = gr_alloc_array((size_t)n + 1, sizeof(cand));
  if (!cs) goto oom;
  for (int d = 0; d < c->ps->num_parts && st == GR_OK; d++) {
    gr_graph *g = c->ps->parts[d].graph;
    int nc = 0;
    for (int i = 0; i < n; i++)
      if (c->dev[i] == d && c->copy[i] && gr_frames_output_frame(&c->fr, i) == 0 && !maybe_dead[i])
        cs[nc++] = (cand){geft[i], i};
    qsort(cs, (size_t)nc, sizeof *cs, cmp_cand);
    for (int r = 0; r < gr_graph_num_nodes(g) && st == GR_OK; r++) {
      gr_node *recv = gr_graph_node(g, r);
      intptr_t src = (intptr_t)gr_map_get_u64(&c->recv_src, (uint64_t)(uintptr_t)recv) - 1;
      if (src < 0) continue;   /* not a top-level receive */
      int64_t due = INT64_MAX; /* when the receive must start */
      for (int e = cstart[src]; e < cstart[src + 1]; e++)
        if (c->dev[cons[e]] == d && glst[cons[e]] < due) due = glst[cons[e]];
      if (due == INT64_MAX) continue; /* it feeds a copy of an enter: leave it */
      due -= cost_ns(recv);
      /* the latest finisher on this device before then, among those that
       * cannot depend on the received value */
      int lo = 0, hi = nc; /* first candidate finishing after due */
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cs[mid].eft <= due)
          lo = mid + 1;
        else
          hi = mid;
      }
      int best = -1;
      for (int k = lo - 1; k >= 0 && best < 0; k--)
        if (glst[cs[k].pos] <= glst[src]) best = cs[k].pos;
      if (best < 0) continue;
      if (gr_graph_add_control_input_unchecked(g, recv, c->copy[best]) != GR_OK) {
        st = gr_part_graph_error(c, g);
        break;
      }
      c->ps->num_scheduled_recvs++;
    }
  }
  free(cs);
  free(geft), free(glst), free(cstart), free(fill), free(maybe_dead), free(cons);
  return st;
oom:
  free(geft), free(glst), free(cstart), free(fill), free(maybe_dead), free(cons);
  return gr_part_oom(c);
}
