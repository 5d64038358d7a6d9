/* The partitioner (see partition.h): devices and loops first, then one
 * copy pass in topological order that inserts _send/_recv pairs. */
#include "core/partition_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_colocation.h"
#include "core/transfer_internal.h"

/* ---- the pass ------------------------------------------------------------------ */

gr_status gr_part_oom(pctx *c) {
  return gr_error_set(c->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory partitioning the graph");
}

int gr_part_pos(const pctx *c, const gr_node *n) {
  return n->id >= 0 && n->id < c->max_id && c->nodes[c->pos_of[n->id]] == n ? c->pos_of[n->id] : -1;
}

static int fed_index(const pctx *c, gr_output o) {
  for (int i = 0; i < c->nf; i++)
    if (c->feeds[i].node == o.node && c->feeds[i].index == o.index) return i;
  return -1;
}

bool gr_part_back_edge(const gr_node *n, int j) {
  return n->op->cf_kind == GR_CF_MERGE && n->inputs[j].node->op->cf_kind == GR_CF_NEXT_ITERATION;
}

/* The partition's ordering edges: data inputs but loop back edges and fed
 * inputs, and control inputs, from nodes of the set. Listed from the last
 * node and input back, so each node's successors are taken last listed
 * first: the order the partitioner has always copied nodes in. */
static void part_edges(const void *ctx, gr_topo_emit_fn emit, void *acc) {
  const pctx *c = ctx;
  for (int i = c->n - 1; i >= 0; i--) {
    const gr_node *nd = c->nodes[i];
    for (int j = nd->num_inputs + nd->num_control_inputs - 1; j >= 0; j--) {
      if (j < nd->num_inputs && (gr_part_back_edge(nd, j) || fed_index(c, nd->inputs[j]) >= 0))
        continue;
      int s = gr_part_pos(c, gr_node_predecessor(nd, j));
      if (s >= 0) emit(acc, s, i); /* a node outside the set: checked when copying */
    }
  }
}

static gr_status topo_sort(pctx *c) {
  int placed = gr_topo_sort(c->n, part_edges, c, NULL, c->order);
  if (placed < 0) return gr_part_oom(c);
  if (placed != c->n)
    return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                        "the graph has a cycle that is not a loop's back edge");
  return GR_OK;
}

static const gr_node *part_node(const void *ctx, int i) {
  return ((const pctx *)ctx)->nodes[i];
}

/* The inputs that place a node: data inputs but loop back edges (fed
 * values live at the top level), then control inputs, from nodes of the set. */
static void part_inputs(const void *ctx, int i, gr_frames_emit_fn emit, void *acc) {
  const pctx *c = ctx;
  const gr_node *nd = c->nodes[i];
  for (int j = 0; j < nd->num_inputs; j++) {
    if (gr_part_back_edge(nd, j)) continue;
    int s = gr_part_pos(c, nd->inputs[j].node);
    if (s >= 0)
      emit(acc, s, false);
    else if (fed_index(c, nd->inputs[j]) >= 0)
      emit(acc, GR_FRAMES_TOP_LEVEL, false);
  }
  for (int j = 0; j < nd->num_control_inputs; j++) {
    int s = gr_part_pos(c, nd->control_inputs[j]);
    if (s >= 0) emit(acc, s, true);
  }
}

/* Frames as the control-flow executor sees them (GR_FRAMES_FIRST_INPUT),
 * and the partitioner's own state of each. */
static gr_status assign_frames(pctx *c) {
  if (gr_frames_init(&c->fr, GR_FRAMES_FIRST_INPUT, c->n) != GR_OK ||
      gr_frames_assign_nodes(&c->fr, c->order, part_node, part_inputs, c) != GR_OK)
    return gr_part_oom(c);
  c->frames = gr_alloc_array((size_t)c->fr.num_frames, sizeof *c->frames);
  if (!c->frames) return gr_part_oom(c);
  for (int f = 0; f < c->fr.num_frames; f++)
    c->frames[f] = (frame_info){.loop_cond = -1, .parallel = f ? 10 : 1};
  return GR_OK;
}

/* Every value must stay in its frame, or enter a child frame through an
 * enter, leave through an exit or go round through next_iteration (the
 * executor checks the same; partitioning needs it first). */
static gr_status check_frames(pctx *c) {
  for (int i = 0; i < c->n; i++) {
    const gr_node *nd = c->nodes[i];
    for (int j = 0; j < nd->num_inputs + nd->num_control_inputs; j++) {
      bool data = j < nd->num_inputs;
      const gr_node *src = gr_node_predecessor(nd, j);
      int s = gr_part_pos(c, src);
      if (s < 0 || (data && gr_part_back_edge(nd, j)) || gr_frames_check_edge(&c->fr, s, i))
        continue;
      int want = gr_frames_input_frame(&c->fr, i), got = gr_frames_output_frame(&c->fr, s);
      return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "node '%s' (%s%s) uses '%s' (%s%s): a value must enter a loop "
                          "through an enter node and leave it through an exit",
                          nd->name, want ? "in loop " : "at the top level",
                          want ? c->fr.frames[want].name : "", src->name,
                          got ? "in loop " : "at the top level", got ? c->fr.frames[got].name : "");
    }
  }
  return GR_OK;
}

static int device_index(pctx *c, const char *name) {
  for (int d = 0; d < c->num_devs; d++)
    if (strcmp(c->devs[d], name) == 0) return d;
  c->devs[c->num_devs] = name;
  return c->num_devs++;
}

static gr_partition *part(pctx *c, int d) {
  return &c->ps->parts[d];
}

/* A stand-in node for feed fi in partition d (fed, never run). */
static gr_output standin(pctx *c, int fi, int d) {
  uint64_t key = (uint64_t)fi << 12 | (uint64_t)d;
  gr_node *s = gr_map_get_u64(&c->standins, key);
  gr_partition *p = part(c, d);
  if (!s) {
    gr_output f = c->feeds[fi];
    char name[64];
    snprintf(name, sizeof name, "_feed/%d", fi);
    gr_attr a[] = {gr_attr_string("tensor_name", f.node->name),
                   gr_attr_string("send_device", "client"),
                   gr_attr_string("recv_device", p->device),
                   gr_attr_dtype("dtype", f.node->out_dtypes[f.index]),
                   gr_attr_shape("shape", f.node->out_shapes[f.index])};
    s = gr_graph_add_node(p->graph, &gr_op__recv, name, NULL, 0, a, 5).node;
    if (s) s->assigned_device = p->device;
    if (!s || !gr_map_put_u64(&c->standins, key, s)) return (gr_output){NULL, 0};
    p->feeds[p->num_feeds] = (gr_output){s, 0};
    p->feed_index[p->num_feeds++] = fi;
  }
  return (gr_output){s, 0};
}

_Static_assert(GR_MAX_OUTPUTS + 1 < 2048, "a receive's map key packs output + 1 in 11 bits");

/* A _send on partition e of output in (in.index < 0: a control transfer,
 * made when all of ctrl[0..nctrl) have run) and its _recv on partition d,
 * named from base ("_send/BASE/SUFFIX/D", "_recv/BASE/SUFFIX/E"; tensor
 * "BASE:SUFFIX"); *snd_out: the send. NULL when out of memory. */
static gr_node *transfer(pctx *c, int e, int d, const char *base, const char *suffix, gr_output in,
                         gr_node *const *ctrl, int nctrl, gr_node **snd_out) {
  gr_partition *src = part(c, e), *dst = part(c, d);
  /* names of any length (a cut name could give two tensors one rendezvous key) */
  size_t cap = strlen(base) + strlen(suffix) + 64;
  char *tensor = malloc(cap), *name = malloc(cap);
  *snd_out = NULL;
  if (!tensor || !name) {
    free(tensor), free(name);
    return NULL;
  }
  bool data = in.index >= 0;
  snprintf(tensor, cap, "%s:%s", base, suffix);
  gr_attr a[] = {gr_attr_string("tensor_name", tensor),
                 gr_attr_string("send_device", src->device),
                 gr_attr_string("recv_device", dst->device),
                 gr_attr_int("incarnation", (int64_t)c->o->incarnation),
                 gr_attr_bool("may_be_dead", c->has_cf),
                 gr_attr_bool("control", !data),
                 gr_attr_dtype("dtype", data ? in.node->out_dtypes[in.index] : GR_BOOL),
                 gr_attr_shape("shape", data ? in.node->out_shapes[in.index] : (gr_shape){1, {0}})};
  snprintf(name, cap, "_send/%s/%s/%d", base, suffix, d);
  gr_output snd =
      gr_graph_add_node(src->graph, &gr_op__send, name, data ? &in : NULL, data ? 1 : 0, a, 6);
  bool ok = snd.node != NULL;
  for (int k = 0; k < nctrl && ok; k++)
    ok = gr_graph_add_control_input_unchecked(src->graph, snd.node, ctrl[k]) == GR_OK;
  snprintf(name, cap, "_recv/%s/%s/%d", base, suffix, e);
  gr_node *r = ok ? gr_graph_add_node(dst->graph, &gr_op__recv, name, NULL, 0, a, 8).node : NULL;
  free(tensor), free(name);
  if (r) r->assigned_device = dst->device;
  if (snd.node) snd.node->assigned_device = src->device;
  *snd_out = snd.node;
  return r;
}

gr_node *gr_part_recv_of(pctx *c, int s, int index, int d) {
  uint64_t key = (uint64_t)s << 22 | (uint64_t)(index + 1) << 11 | (uint64_t)d;
  gr_node *r = gr_map_get_u64(&c->recvs, key), *snd;
  if (r) return r;
  char suffix[24] = "control";
  if (index >= 0) snprintf(suffix, sizeof suffix, "%d", index);
  gr_node *src_copy = c->copy[s];
  r = transfer(c, c->dev[s], d, c->nodes[s]->name, suffix, (gr_output){src_copy, index}, &src_copy,
               index >= 0 ? 0 : 1, &snd);
  /* Inside a loop the Recv runs in every iteration of its frame on this
   * device: the frame's control loop here drives it. */
  int f = gr_frames_output_frame(&c->fr, s);
  if (r && f == 0 && c->o->schedule_recvs &&
      !gr_map_put_u64(&c->recv_src, (uint64_t)(uintptr_t)r, (void *)(intptr_t)(s + 1)))
    return NULL;
  if (r && f > 0) {
    GR_ASSERT(c->frames[f].ctl_merge && c->frames[f].ctl_merge[d]); /* check_frames, spans */
    if (gr_graph_add_control_input_unchecked(part(c, d)->graph, r, c->frames[f].ctl_merge[d]) !=
        GR_OK)
      return NULL;
    c->ps->num_loop_sends++;
  }
  if (!snd || !r || !gr_map_put_u64(&c->recvs, key, r)) return NULL;
  c->ps->num_sends++;
  if (index < 0) c->ps->num_control_sends++;
  return r;
}

/* Control inputs that cross as one transfer: their positions (ascending),
 * from partition e to partition d, and the receive. */
typedef struct ctl_group {
  struct ctl_group *next; /* another group whose key hashes the same */
  gr_node *recv;
  int d, e, n;
  int pos[];
} ctl_group;

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The control inputs at positions pos[0..n) (n >= 2, all on partition e) of
 * the node at position i (on partition d), with i at the top level: one
 * transfer for them all, whose _send waits for every one of them, instead
 * of one per input (minimize's global step waits for every update: one
 * message from each other device, not one per variable). Nodes that wait
 * for the same inputs share it. NULL when out of memory. */
static gr_node *control_group_recv(pctx *c, int i, int d, int e, int *pos, int n) {
  qsort(pos, (size_t)n, sizeof *pos, cmp_int);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)d << 32 ^ (uint64_t)e;
  for (int k = 0; k < n; k++) h = (h ^ (uint64_t)pos[k]) * 1099511628211ull;
  bool added;
  void **slot = gr_map_slot_u64(&c->groups, h, &added);
  if (!slot) return NULL;
  for (ctl_group *g = *slot; g; g = g->next)
    if (g->d == d && g->e == e && g->n == n && !memcmp(g->pos, pos, sizeof *pos * (size_t)n))
      return g->recv;
  ctl_group *g = malloc(sizeof *g + sizeof *pos * (size_t)n);
  gr_node **srcs = malloc(sizeof *srcs * (size_t)n);
  if (!g || !srcs) {
    free(g), free(srcs);
    return NULL;
  }
  for (int k = 0; k < n; k++) srcs[k] = c->copy[pos[k]];
  char suffix[32];
  snprintf(suffix, sizeof suffix, "controls_of_%d", e);
  gr_node *snd,
      *r = transfer(c, e, d, c->nodes[i]->name, suffix, (gr_output){NULL, -1}, srcs, n, &snd);
  free(srcs);
  if (!snd || !r) {
    free(g);
    return NULL;
  }
  *g = (ctl_group){*slot, r, d, e, n};
  memcpy(g->pos, pos, sizeof *pos * (size_t)n);
  *slot = g;
  c->ps->num_sends++;
  c->ps->num_control_sends++;
  c->ps->num_grouped_controls += n - 1;
  return r;
}

static void free_groups(gr_map *groups) {
  void *v;
  for (size_t it = 0; gr_map_next(groups, &it, NULL, &v);)
    for (ctl_group *g = v, *next; g; g = next) next = g->next, free(g);
  gr_map_free(groups);
}

static bool is_dup_constant(const gr_node *n) {
  return (n->op->flags & (GR_OP_CONSTANT | GR_OP_REMADE)) && !n->num_inputs &&
         !n->num_control_inputs;
}

gr_status gr_part_graph_error(pctx *c, gr_graph *g) {
  const gr_error *e = gr_graph_error(g);
  if (!e) return gr_part_oom(c);
  return gr_error_set(c->err, e->code, "partitioning: %s", e->msg);
}

static gr_status copy_to(pctx *c, int i, int d, gr_node **out);

/* A copy on partition d of the node at position s, which lives elsewhere: a
 * constant (cheaper to copy than to send) or an enter (the value crosses
 * devices once, outside the loop, instead of in every iteration). */
static gr_status copy_on(pctx *c, int s, int d, gr_node **out) {
  uint64_t key = (uint64_t)s << 12 | (uint64_t)d;
  *out = gr_map_get_u64(&c->dups, key);
  if (*out) return GR_OK;
  GR_TRY(copy_to(c, s, d, out));
  if (!gr_map_put_u64(&c->dups, key, *out)) return gr_part_oom(c);
  if (c->nodes[s]->op->cf_kind == GR_CF_ENTER)
    c->ps->num_dup_enters++;
  else
    c->ps->num_dup_consts++;
  return GR_OK;
}

/* The value of src, an input of node `user`, as seen on partition d. */
static gr_status input_on(pctx *c, const gr_node *user, gr_output src, int d, gr_output *out) {
  gr_graph *g = part(c, d)->graph;
  int fi = fed_index(c, src);
  if (fi >= 0) {
    *out = standin(c, fi, d);
    return out->node ? GR_OK : gr_part_graph_error(c, g);
  }
  int s = gr_part_pos(c, src.node);
  if (s < 0)
    return gr_error_set(c->err, GR_ERR_INTERNAL,
                        "partitioning: input '%s' of '%s' is not in the step", src.node->name,
                        user->name);
  gr_node *n;
  if (c->dev[s] == d) {
    n = c->copy[s];
  } else if (is_dup_constant(src.node) || src.node->op->cf_kind == GR_CF_ENTER) {
    GR_TRY(copy_on(c, s, d, &n));
  } else {
    n = gr_part_recv_of(c, s, src.index, d);
    if (!n) return gr_part_graph_error(c, gr_graph_error(g) ? g : part(c, c->dev[s])->graph);
    src.index = 0;
  }
  *out = (gr_output){n, src.index};
  return GR_OK;
}

/* Whether control input s of the node at position i (on another device,
 * not a loop's pivot) may share a transfer with the node's other control
 * inputs from s's device: both at the top level, where a transfer runs
 * once per step. */
static bool groups_controls(const pctx *c, int i, int s) {
  return gr_frames_input_frame(&c->fr, i) == 0 && gr_frames_output_frame(&c->fr, s) == 0;
}

/* Copies the node at position i into partition d. */
static gr_status copy_to(pctx *c, int i, int d, gr_node **out) {
  const gr_node *nd = c->nodes[i];
  gr_partition *p = part(c, d);
  enum { SMALL = 16 };
  gr_output in_small[SMALL];
  gr_node *ctrl_small[SMALL];
  gr_output *in =
      nd->num_inputs <= SMALL ? in_small : malloc(sizeof(gr_output) * (size_t)nd->num_inputs);
  gr_node **ctrl = nd->num_control_inputs <= SMALL
                       ? ctrl_small
                       : malloc(sizeof(gr_node *) * (size_t)nd->num_control_inputs);
  /* control inputs to group (positions), and those of one device */
  int group_small[2 * SMALL];
  int *group = nd->num_control_inputs <= SMALL
                   ? group_small
                   : malloc(2 * sizeof(int) * (size_t)nd->num_control_inputs);
  int *same = !group ? NULL : group == group_small ? group + SMALL : group + nd->num_control_inputs;
  gr_status st = GR_OK;
  if (!in || !ctrl || !group) st = gr_part_oom(c);
  for (int j = 0; j < nd->num_inputs && st == GR_OK; j++) {
    int s = gr_part_pos(c, nd->inputs[j].node);
    if (s >= 0 && !c->copy[s]) { /* a loop's back edge: patched once its source exists */
      if (!gr_part_back_edge(nd, j) || j == 0) {
        st = gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "merge '%s': its first input comes from next_iteration '%s'; a loop's "
                          "merge takes its first value from an enter",
                          nd->name, nd->inputs[j].node->name);
        break;
      }
      GR_ASSERT(c->dev[s] == d); /* settle_loops put the next_iteration with its merge */
      in[j] = in[0];
    } else {
      st = input_on(c, nd, nd->inputs[j], d, &in[j]);
    }
  }
  int nctrl = 0, ngroup = 0;
  for (int j = 0; j < nd->num_control_inputs && st == GR_OK; j++) {
    int s = gr_part_pos(c, nd->control_inputs[j]);
    if (s < 0) continue;                        /* a fed node: nothing to wait for */
    if (c->sink[i] && c->dev[s] != d) continue; /* the step's end waits for it */
    gr_node *cn = c->dev[s] == d ? c->copy[s] : gr_part_loop_pivot(c, s, d, &st);
    if (!cn && st == GR_OK && groups_controls(c, i, s)) {
      group[ngroup++] = s; /* sent with the others from its device, below */
      continue;
    }
    if (!cn && st == GR_OK) cn = gr_part_recv_of(c, s, -1, d);
    if (!cn && st == GR_OK) st = gr_part_graph_error(c, p->graph);
    ctrl[nctrl++] = cn;
  }
  /* the grouped ones: one transfer per device they come from (one input
   * alone: its own pair, which other readers share) */
  for (int k = 0; k < ngroup && st == GR_OK; k++) {
    if (group[k] < 0) continue; /* sent with an earlier one of its device */
    int e = c->dev[group[k]], n = 0;
    for (int m = k; m < ngroup; m++)
      if (group[m] >= 0 && c->dev[group[m]] == e) same[n++] = group[m], group[m] = -1;
    gr_node *cn =
        n == 1 ? gr_part_recv_of(c, same[0], -1, d) : control_group_recv(c, i, d, e, same, n);
    if (!cn) st = gr_part_graph_error(c, p->graph);
    ctrl[nctrl++] = cn;
  }
  if (st == GR_OK) {
    gr_node *cp = gr_graph_copy_node(p->graph, nd, in, ctrl, nctrl).node;
    if (!cp) {
      st = gr_part_graph_error(c, p->graph);
    } else {
      cp->assigned_device = p->device;
      *out = cp;
    }
  }
  if (in != in_small) free(in);
  if (ctrl != ctrl_small) free(ctrl);
  if (group != group_small) free(group);
  return st;
}

void gr_partitions_free(gr_partitions *ps) {
  if (!ps) return;
  for (int d = 0; d < ps->num_parts; d++) {
    gr_partition *p = &ps->parts[d];
    gr_graph_free(p->graph);
    free(p->nodes), free(p->feeds), free(p->feed_index), free(p->fetches), free(p->fetch_index);
  }
  free(ps->parts);
  free(ps);
}

static gr_status new_partitions(pctx *c, int nx) {
  gr_partitions *ps = c->ps;
  ps->parts = calloc((size_t)c->num_devs, sizeof *ps->parts);
  if (!ps->parts) return gr_part_oom(c);
  ps->num_parts = c->num_devs;
  for (int d = 0; d < c->num_devs; d++) {
    gr_partition *p = &ps->parts[d];
    p->graph = gr_graph_new();
    p->feeds = malloc(sizeof(gr_output) * ((size_t)c->nf + 1));
    p->feed_index = malloc(sizeof(int) * ((size_t)c->nf + 1));
    p->fetches = malloc(sizeof(gr_output) * ((size_t)nx + 1));
    p->fetch_index = malloc(sizeof(int) * ((size_t)nx + 1));
    if (!p->graph || !p->feeds || !p->feed_index || !p->fetches || !p->fetch_index)
      return gr_part_oom(c);
    p->device = gr_graph_strdup(p->graph, c->devs[d]);
    if (!p->device) return gr_part_oom(c);
  }
  return GR_OK;
}

/* The fetches, each from the partition of its producer, and what each
 * executor runs: every node but the feed stand-ins, by id. */
static gr_status finish(pctx *c, const gr_output *fetches, int nx) {
  gr_partitions *ps = c->ps;
  for (int k = 0; k < nx; k++) {
    int fi = fed_index(c, fetches[k]);
    int s = fi >= 0 ? -1 : gr_part_pos(c, fetches[k].node);
    if (fi < 0 && s < 0)
      return gr_error_set(c->err, GR_ERR_INTERNAL, "partitioning: fetch '%s' is not in the step",
                          fetches[k].node->name);
    int d = fi >= 0 ? 0 : c->dev[s];
    gr_partition *p = part(c, d);
    gr_output o = fi >= 0 ? standin(c, fi, d) : (gr_output){c->copy[s], fetches[k].index};
    if (!o.node) return gr_part_graph_error(c, p->graph);
    p->fetches[p->num_fetches] = o;
    p->fetch_index[p->num_fetches++] = k;
  }
  for (int d = 0; d < ps->num_parts; d++) {
    gr_partition *p = &ps->parts[d];
    int total = gr_graph_num_nodes(p->graph);
    p->nodes = malloc(sizeof(gr_node *) * ((size_t)total + 1));
    if (!p->nodes) return gr_part_oom(c);
    for (int id = 0; id < total; id++) {
      gr_node *nd = gr_graph_node(p->graph, id);
      bool is_standin = false;
      for (int f = 0; f < p->num_feeds; f++)
        if (p->feeds[f].node == nd) is_standin = true;
      if (!is_standin) p->nodes[p->num_nodes++] = nd;
    }
  }
  return GR_OK;
}

enum { MAX_DEVICES = 2047 }; /* device indices fit the 11 bits the maps give them */

/* c->sink: the top-level no_ops that nothing in the set reads and that are
 * not fetched (pctx). */
static void find_sinks(pctx *c, const gr_output *fetches, int nx) {
  for (int i = 0; i < c->n; i++)
    c->sink[i] = !strcmp(c->nodes[i]->op->name, "no_op") && c->fr.of_node[i] == 0;
  for (int i = 0; i < c->n; i++) {
    const gr_node *nd = c->nodes[i];
    for (int j = 0; j < nd->num_inputs; j++) {
      int s = gr_part_pos(c, nd->inputs[j].node);
      if (s >= 0) c->sink[s] = 0;
    }
    for (int j = 0; j < nd->num_control_inputs; j++) {
      int s = gr_part_pos(c, nd->control_inputs[j]);
      if (s >= 0) c->sink[s] = 0;
    }
  }
  for (int k = 0; k < nx; k++) {
    int s = gr_part_pos(c, fetches[k].node);
    if (s >= 0) c->sink[s] = 0;
  }
}

static gr_status build(pctx *c, const gr_output *fetches, int nx) {
  gr_status st = topo_sort(c);
  if (st == GR_OK) st = assign_frames(c);
  if (st == GR_OK) st = check_frames(c);
  if (st == GR_OK) find_sinks(c, fetches, nx);
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    if (!c->nodes[i]->assigned_device)
      return gr_error_set(c->err, GR_ERR_INTERNAL, "partitioning: node '%s' has no device",
                          c->nodes[i]->name);
    c->dev[i] = device_index(c, c->nodes[i]->assigned_device);
    if (c->nodes[i]->op->cf_kind != GR_CF_NONE) c->has_cf = true;
  }
  if (st == GR_OK && c->num_devs > MAX_DEVICES)
    return gr_error_set(c->err, GR_ERR_UNIMPLEMENTED,
                        "partitioning: %d devices in one step; at most %d are supported",
                        c->num_devs, MAX_DEVICES);
  if (st == GR_OK) st = gr_part_settle_loops(c);
  if (st == GR_OK) st = new_partitions(c, nx);
  if (st == GR_OK) st = gr_part_add_loop_heads(c);
  for (int oi = 0; oi < c->n && st == GR_OK; oi++) {
    int i = c->order[oi];
    st = copy_to(c, i, c->dev[i], &c->copy[i]);
  }
  /* loop back edges: merge <- next_iteration, now that both exist */
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    const gr_node *nd = c->nodes[i];
    if (nd->op->cf_kind != GR_CF_MERGE) continue;
    for (int j = 0; j < nd->num_inputs && st == GR_OK; j++) {
      if (!gr_part_back_edge(nd, j)) continue;
      int s = gr_part_pos(c, nd->inputs[j].node);
      gr_graph *g = part(c, c->dev[i])->graph;
      GR_ASSERT(c->dev[s] == c->dev[i]);
      if (gr_graph_set_input(g, c->copy[i], j, (gr_output){c->copy[s], nd->inputs[j].index}) !=
          GR_OK)
        st = gr_part_graph_error(c, g);
    }
  }
  if (st == GR_OK) st = gr_part_add_loop_tails(c);
  if (st == GR_OK) st = gr_part_collectives(c);
  if (st == GR_OK && c->o->schedule_recvs) st = gr_part_schedule_recvs(c);
  if (st == GR_OK) st = finish(c, fetches, nx);
  return st;
}

gr_status gr_partition_graph(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             const gr_partition_options *opts, gr_partitions **out, gr_error *err) {
  *out = NULL;
  gr_partition_options dflt = {0};
  pctx c = {.nodes = nodes,
            .n = num_nodes,
            .feeds = feeds,
            .nf = num_feeds,
            .o = opts ? opts : &dflt,
            .err = err};
  for (int i = 0; i < num_nodes; i++)
    if (nodes[i]->id + 1 > c.max_id) c.max_id = nodes[i]->id + 1;
  c.pos_of = malloc(sizeof(int) * ((size_t)c.max_id + 1));
  c.order = malloc(sizeof(int) * ((size_t)num_nodes + 1));
  c.dev = calloc((size_t)num_nodes + 1, sizeof(int));
  c.devs = malloc(sizeof(char *) * ((size_t)num_nodes + 1));
  c.copy = calloc((size_t)num_nodes + 1, sizeof(gr_node *));
  c.sink = calloc((size_t)num_nodes + 1, 1);
  gr_map_init(&c.recvs, GR_MAP_U64), gr_map_init(&c.dups, GR_MAP_U64);
  gr_map_init(&c.standins, GR_MAP_U64), gr_map_init(&c.recv_src, GR_MAP_U64);
  gr_map_init(&c.groups, GR_MAP_U64);
  c.ps = calloc(1, sizeof *c.ps);
  gr_status st = GR_OK;
  if (!c.pos_of || !c.order || !c.dev || !c.devs || !c.copy || !c.sink || !c.ps) {
    st = gr_part_oom(&c);
  } else {
    for (int i = 0; i < c.max_id; i++) c.pos_of[i] = 0;
    for (int i = 0; i < num_nodes; i++) c.pos_of[nodes[i]->id] = i;
    st = gr_colocation_check(nodes, num_nodes, err);
    if (st == GR_OK) st = build(&c, fetches, num_fetches);
  }
  if (st == GR_OK) {
    *out = c.ps;
  } else {
    gr_partitions_free(c.ps);
  }
  free(c.pos_of), free(c.order), free(c.dev), free(c.devs), free(c.copy), free(c.sink);
  for (int f = 0; c.frames && f < c.fr.num_frames; f++)
    free(c.frames[f].ctl_merge), free(c.frames[f].ctl_pivot);
  free(c.frames), free(c.span);
  gr_frames_free(&c.fr);
  gr_map_free(&c.recvs), gr_map_free(&c.dups), gr_map_free(&c.standins);
  gr_map_free(&c.recv_src);
  free_groups(&c.groups);
  return st;
}
