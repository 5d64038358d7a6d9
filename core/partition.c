/* The partitioner (see gr_partition.h): devices and loops first, then one
 * copy pass in topological order that inserts _send/_recv pairs. */
#include "core/gr_partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/transfer_internal.h"

/* ---- a small map from 64-bit keys to pointers ------------------------------ */

typedef struct u64map {
  uint64_t *keys; /* 0: empty (stored keys are key + 1) */
  void **vals;
  size_t cap, count;
} u64map;

static size_t u64_slot(const u64map *m, uint64_t k) {
  uint64_t h = k * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != k + 1) i = (i + 1) & (m->cap - 1);
  return i;
}
static void *u64_get(const u64map *m, uint64_t k) {
  if (!m->cap) return NULL;
  size_t i = u64_slot(m, k);
  return m->keys[i] ? m->vals[i] : NULL;
}
static bool u64_put(u64map *m, uint64_t k, void *v) {
  if ((m->count + 1) * 2 > m->cap) {
    u64map n = {calloc(m->cap ? m->cap * 2 : 64, sizeof(uint64_t)),
                calloc(m->cap ? m->cap * 2 : 64, sizeof(void *)), m->cap ? m->cap * 2 : 64, 0};
    if (!n.keys || !n.vals) {
      free(n.keys), free(n.vals);
      return false;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = u64_slot(&n, m->keys[i] - 1);
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
        n.count++;
      }
    free(m->keys), free(m->vals);
    *m = n;
  }
  size_t i = u64_slot(m, k);
  if (!m->keys[i]) m->count++;
  m->keys[i] = k + 1;
  m->vals[i] = v;
  return true;
}
static void u64_free(u64map *m) {
  free(m->keys), free(m->vals);
}

/* ---- the pass ------------------------------------------------------------------ */

typedef struct frame_info {
  int parent; /* -1 for the top level (frame 0) */
  const char *name;
  int top; /* the top-level loop frame that contains it (itself if a child of 0) */
} frame_info;

typedef struct pctx {
  gr_node *const *nodes;
  int n;
  const gr_output *feeds;
  int nf;
  const gr_partition_options *o;
  gr_error *err;
  int *pos_of; /* node id -> position in nodes, -1 when not in the set */
  int max_id;
  int *order; /* topological, loop back edges ignored */
  int *frame; /* per position */
  frame_info *frames;
  int num_frames, cap_frames;
  int *dev;          /* per position: partition index */
  const char **devs; /* partition index -> device name (borrowed from the nodes) */
  int num_devs;
  gr_node **copy;  /* per position: the copy in its partition */
  u64map recvs;    /* (src position, output + 1 or 0 for control, part) -> recv node */
  u64map dups;     /* (src position, part) -> copied constant */
  u64map standins; /* (feed index, part) -> feed stand-in */
  gr_partitions *ps;
} pctx;

static gr_status oom(pctx *c) {
  return gr_error_set(c->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory partitioning the graph");
}

static int pos(const pctx *c, const gr_node *n) {
  return n->id >= 0 && n->id < c->max_id && c->nodes[c->pos_of[n->id]] == n ? c->pos_of[n->id] : -1;
}

static int fed_index(const pctx *c, gr_output o) {
  for (int i = 0; i < c->nf; i++)
    if (c->feeds[i].node == o.node && c->feeds[i].index == o.index) return i;
  return -1;
}

/* Is input j of n the back edge of a loop (merge <- next_iteration)? */
static bool back_edge(const gr_node *n, int j) {
  return n->op->cf_kind == GR_CF_MERGE && n->inputs[j].node->op->cf_kind == GR_CF_NEXT_ITERATION;
}

static gr_status topo_sort(pctx *c) {
  int *indeg = calloc((size_t)c->n + 1, sizeof(int));
  int *head = malloc(sizeof(int) * ((size_t)c->n + 1)); /* successor lists */
  int nedge = 0;
  for (int i = 0; i < c->n; i++) nedge += c->nodes[i]->num_inputs + c->nodes[i]->num_control_inputs;
  int *next = malloc(sizeof(int) * ((size_t)nedge + 1)),
      *dst = malloc(sizeof(int) * ((size_t)nedge + 1));
  if (!indeg || !head || !next || !dst) {
    free(indeg), free(head), free(next), free(dst);
    return oom(c);
  }
  for (int i = 0; i < c->n; i++) head[i] = -1;
  int e = 0;
  for (int i = 0; i < c->n; i++) {
    const gr_node *nd = c->nodes[i];
    int total = nd->num_inputs + nd->num_control_inputs;
    for (int j = 0; j < total; j++) {
      const gr_node *src;
      if (j < nd->num_inputs) {
        if (back_edge(nd, j) || fed_index(c, nd->inputs[j]) >= 0) continue;
        src = nd->inputs[j].node;
      } else {
        src = nd->control_inputs[j - nd->num_inputs];
      }
      int s = pos(c, src);
      if (s < 0) continue; /* checked when copying */
      dst[e] = i;
      next[e] = head[s];
      head[s] = e++;
      indeg[i]++;
    }
  }
  int qh = 0, qt = 0;
  for (int i = 0; i < c->n; i++)
    if (!indeg[i]) c->order[qt++] = i;
  while (qh < qt) {
    int s = c->order[qh++];
    for (int k = head[s]; k >= 0; k = next[k])
      if (--indeg[dst[k]] == 0) c->order[qt++] = dst[k];
  }
  free(indeg), free(head), free(next), free(dst);
  if (qt != c->n)
    return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                        "the graph has a cycle that is not a loop's back edge");
  return GR_OK;
}

static int child_frame(pctx *c, int parent, const char *name) {
  for (int f = 1; f < c->num_frames; f++)
    if (c->frames[f].parent == parent && strcmp(c->frames[f].name, name) == 0) return f;
  if (c->num_frames == c->cap_frames) {
    int cap = c->cap_frames * 2;
    frame_info *more = realloc(c->frames, sizeof *more * (size_t)cap);
    if (!more) return -1;
    c->frames = more;
    c->cap_frames = cap;
  }
  int f = c->num_frames++;
  c->frames[f] = (frame_info){parent, name, parent == 0 ? f : c->frames[parent].top};
  return f;
}

/* The frame a node's outputs live in: an exit's go to the parent frame. */
static int out_frame(const pctx *c, int p) {
  int f = c->frame[p];
  return c->nodes[p]->op->cf_kind == GR_CF_EXIT && f > 0 ? c->frames[f].parent : f;
}

/* Frames as the control-flow executor sees them: from the first data input
 * (entering a child frame at an enter), else a control input, else the top. */
static gr_status assign_frames(pctx *c) {
  for (int oi = 0; oi < c->n; oi++) {
    int i = c->order[oi];
    const gr_node *nd = c->nodes[i];
    int f = -1;
    for (int j = 0; j < nd->num_inputs && f < 0; j++) {
      int s = back_edge(nd, j) ? -1 : pos(c, nd->inputs[j].node);
      if (s >= 0) f = out_frame(c, s);
    }
    if (f >= 0 && nd->op->cf_kind == GR_CF_ENTER) {
      f = child_frame(c, f, gr_node_attr_string(nd, "frame_name", nd->name));
      if (f < 0) return oom(c);
    }
    for (int j = 0; j < nd->num_control_inputs && f < 0; j++) {
      int s = pos(c, nd->control_inputs[j]);
      if (s >= 0) f = out_frame(c, s);
    }
    c->frame[i] = f < 0 ? 0 : f;
  }
  return GR_OK;
}

static int device_index(pctx *c, const char *name) {
  for (int d = 0; d < c->num_devs; d++)
    if (strcmp(c->devs[d], name) == 0) return d;
  c->devs[c->num_devs] = name;
  return c->num_devs++;
}

/* Puts every node of each top-level loop on one device. */
static gr_status collapse_loops(pctx *c) {
  if (c->num_frames <= 1) return GR_OK;
  int *target = malloc(sizeof(int) * (size_t)c->num_frames);
  int *by = malloc(sizeof(int) * (size_t)c->num_frames); /* position that chose it */
  if (!target || !by) {
    free(target), free(by);
    return oom(c);
  }
  for (int f = 0; f < c->num_frames; f++) target[f] = by[f] = -1;
  /* first pinned node of each loop, else its first node */
  for (int pass = 0; pass < 2; pass++)
    for (int oi = 0; oi < c->n; oi++) {
      int i = c->order[oi];
      if (!c->frame[i]) continue;
      int top = c->frames[c->frame[i]].top;
      if (target[top] >= 0) continue;
      if (pass == 0 && !c->nodes[i]->requested_device[0]) continue;
      target[top] = c->dev[i];
      by[top] = i;
    }
  gr_status st = GR_OK;
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    if (!c->frame[i]) continue;
    int top = c->frames[c->frame[i]].top;
    const gr_node *nd = c->nodes[i];
    if (c->dev[i] != target[top] && nd->requested_device[0]) {
      gr_device_spec want, have;
      if (gr_device_spec_parse(nd->requested_device, &want, NULL) != GR_OK ||
          gr_device_spec_parse(c->devs[target[top]], &have, NULL) != GR_OK ||
          !gr_device_spec_matches(&want, &have))
        st = gr_error_set(c->err, GR_ERR_UNIMPLEMENTED,
                          "loop '%s' would span devices: node '%s' is pinned to '%s' and node "
                          "'%s' to '%s'; a loop runs on one device (cross-device loops are "
                          "not supported yet): pin the loop's nodes to one device",
                          c->frames[top].name, c->nodes[by[top]]->name,
                          c->nodes[by[top]]->requested_device[0]
                              ? c->nodes[by[top]]->requested_device
                              : c->devs[target[top]],
                          nd->name, nd->requested_device);
    }
    c->dev[i] = target[top];
  }
  free(target), free(by);
  return st;
}

static gr_partition *part(pctx *c, int d) {
  return &c->ps->parts[d];
}

/* A stand-in node for feed fi in partition d (fed, never run). */
static gr_output standin(pctx *c, int fi, int d) {
  uint64_t key = (uint64_t)fi << 12 | (uint64_t)d;
  gr_node *s = u64_get(&c->standins, key);
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
    if (!s || !u64_put(&c->standins, key, s)) return (gr_output){NULL, 0};
    p->feeds[p->num_feeds] = (gr_output){s, 0};
    p->feed_index[p->num_feeds++] = fi;
  }
  return (gr_output){s, 0};
}

/* The receiving end on partition d of output `index` of the node at position
 * s (index -1: its control edge), with the send on the producer's partition. */
static gr_node *recv_of(pctx *c, int s, int index, int d, bool may_be_dead) {
  uint64_t key = (uint64_t)s << 22 | (uint64_t)(index + 1) << 11 | (uint64_t)d;
  gr_node *r = u64_get(&c->recvs, key);
  if (r) return r;
  gr_partition *src = part(c, c->dev[s]), *dst = part(c, d);
  const gr_node *from = c->nodes[s];
  char tensor[GR_DEVICE_NAME_MAX + 64], name[GR_DEVICE_NAME_MAX + 96];
  if (index >= 0)
    snprintf(tensor, sizeof tensor, "%s:%d", from->name, index);
  else
    snprintf(tensor, sizeof tensor, "%s:control", from->name);
  gr_attr a[] = {gr_attr_string("tensor_name", tensor),
                 gr_attr_string("send_device", src->device),
                 gr_attr_string("recv_device", dst->device),
                 gr_attr_int("incarnation", (int64_t)c->o->incarnation),
                 gr_attr_bool("may_be_dead", may_be_dead),
                 gr_attr_bool("control", index < 0),
                 gr_attr_dtype("dtype", index >= 0 ? from->out_dtypes[index] : GR_BOOL),
                 gr_attr_shape("shape", index >= 0 ? from->out_shapes[index] : (gr_shape){1, {0}})};
  gr_node *src_copy = c->copy[s];
  if (index >= 0)
    snprintf(name, sizeof name, "_send/%s/%d/%d", from->name, index, d);
  else
    snprintf(name, sizeof name, "_send/%s/control/%d", from->name, d);
  gr_output in = {src_copy, index};
  gr_output snd = gr_graph_add_node(src->graph, &gr_op__send, name, index >= 0 ? &in : NULL,
                                    index >= 0 ? 1 : 0, a, 6);
  if (snd.node && index < 0) gr_graph_add_control_input(src->graph, snd.node, src_copy);
  if (index >= 0)
    snprintf(name, sizeof name, "_recv/%s/%d/%d", from->name, index, c->dev[s]);
  else
    snprintf(name, sizeof name, "_recv/%s/control/%d", from->name, c->dev[s]);
  r = gr_graph_add_node(dst->graph, &gr_op__recv, name, NULL, 0, a, 8).node;
  if (!snd.node || !r || !u64_put(&c->recvs, key, r)) return NULL;
  c->ps->num_sends++;
  if (index < 0) c->ps->num_control_sends++;
  return r;
}

static bool is_dup_constant(const gr_node *n) {
  return (n->op->flags & GR_OP_CONSTANT) && !n->num_inputs && !n->num_control_inputs;
}

static gr_status graph_error(pctx *c, gr_graph *g) {
  const gr_error *e = gr_graph_error(g);
  if (!e) return oom(c);
  return gr_error_set(c->err, e->code, "partitioning: %s", e->msg);
}

/* Copies the node at position i into its partition. */
static gr_status copy_node(pctx *c, int i, bool may_be_dead) {
  const gr_node *nd = c->nodes[i];
  int d = c->dev[i];
  gr_partition *p = part(c, d);
  enum { SMALL = 16 };
  gr_output in_small[SMALL];
  gr_node *ctrl_small[SMALL];
  gr_output *in =
      nd->num_inputs <= SMALL ? in_small : malloc(sizeof(gr_output) * (size_t)nd->num_inputs);
  gr_node **ctrl = nd->num_control_inputs <= SMALL
                       ? ctrl_small
                       : malloc(sizeof(gr_node *) * (size_t)nd->num_control_inputs);
  gr_status st = GR_OK;
  if (!in || !ctrl) st = oom(c);
  for (int j = 0; j < nd->num_inputs && st == GR_OK; j++) {
    gr_output src = nd->inputs[j];
    int fi = fed_index(c, src);
    int s = fi >= 0 ? -1 : pos(c, src.node);
    if (fi >= 0) {
      in[j] = standin(c, fi, d);
    } else if (s < 0) {
      st = gr_error_set(c->err, GR_ERR_INTERNAL,
                        "partitioning: input '%s' of '%s' is not in the step", src.node->name,
                        nd->name);
    } else if (!c->copy[s]) { /* a loop's back edge: patched once its source exists */
      GR_ASSERT(back_edge(nd, j) && j > 0 && c->dev[s] == d);
      in[j] = in[0];
    } else if (c->dev[s] == d) {
      in[j] = (gr_output){c->copy[s], src.index};
    } else if (is_dup_constant(src.node)) {
      uint64_t key = (uint64_t)s << 12 | (uint64_t)d;
      gr_node *dup = u64_get(&c->dups, key);
      if (!dup) {
        dup = gr_graph_copy_node(p->graph, src.node, NULL, NULL, 0).node;
        if (dup) dup->assigned_device = p->device;
        if (!dup || !u64_put(&c->dups, key, dup)) st = graph_error(c, p->graph);
        c->ps->num_dup_consts++;
      }
      in[j] = (gr_output){dup, src.index};
    } else {
      gr_node *r = recv_of(c, s, src.index, d, may_be_dead);
      if (!r) st = graph_error(c, gr_graph_error(p->graph) ? p->graph : part(c, c->dev[s])->graph);
      in[j] = (gr_output){r, 0};
    }
    if (st == GR_OK && !in[j].node) st = graph_error(c, p->graph);
  }
  int nctrl = 0;
  for (int j = 0; j < nd->num_control_inputs && st == GR_OK; j++) {
    int s = pos(c, nd->control_inputs[j]);
    if (s < 0) continue; /* a fed node: nothing to wait for */
    gr_node *cn = c->dev[s] == d ? c->copy[s] : recv_of(c, s, -1, d, may_be_dead);
    if (!cn) st = graph_error(c, p->graph);
    ctrl[nctrl++] = cn;
  }
  if (st == GR_OK) {
    gr_node *cp = gr_graph_copy_node(p->graph, nd, in, ctrl, nctrl).node;
    if (!cp) {
      st = graph_error(c, p->graph);
    } else {
      cp->assigned_device = p->device;
      c->copy[i] = cp;
    }
  }
  if (in != in_small) free(in);
  if (ctrl != ctrl_small) free(ctrl);
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

static gr_status build(pctx *c, const gr_output *fetches, int nx) {
  gr_status st = topo_sort(c);
  if (st == GR_OK) st = assign_frames(c);
  bool has_cf = false;
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    if (!c->nodes[i]->assigned_device)
      return gr_error_set(c->err, GR_ERR_INTERNAL, "partitioning: node '%s' has no device",
                          c->nodes[i]->name);
    c->dev[i] = device_index(c, c->nodes[i]->assigned_device);
    if (c->nodes[i]->op->cf_kind != GR_CF_NONE) has_cf = true;
  }
  if (st == GR_OK) st = collapse_loops(c);
  if (st != GR_OK) return st;
  gr_partitions *ps = c->ps;
  ps->parts = calloc((size_t)c->num_devs, sizeof *ps->parts);
  if (!ps->parts) return oom(c);
  ps->num_parts = c->num_devs;
  for (int d = 0; d < c->num_devs; d++) {
    gr_partition *p = &ps->parts[d];
    p->graph = gr_graph_new();
    p->feeds = malloc(sizeof(gr_output) * ((size_t)c->nf + 1));
    p->feed_index = malloc(sizeof(int) * ((size_t)c->nf + 1));
    p->fetches = malloc(sizeof(gr_output) * ((size_t)nx + 1));
    p->fetch_index = malloc(sizeof(int) * ((size_t)nx + 1));
    if (!p->graph || !p->feeds || !p->feed_index || !p->fetches || !p->fetch_index) return oom(c);
    p->device = gr_graph_strdup(p->graph, c->devs[d]);
    if (!p->device) return oom(c);
  }
  for (int oi = 0; oi < c->n && st == GR_OK; oi++) st = copy_node(c, c->order[oi], has_cf);
  /* loop back edges: merge <- next_iteration, now that both exist */
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    const gr_node *nd = c->nodes[i];
    if (nd->op->cf_kind != GR_CF_MERGE) continue;
    for (int j = 0; j < nd->num_inputs && st == GR_OK; j++) {
      if (!back_edge(nd, j)) continue;
      int s = pos(c, nd->inputs[j].node);
      gr_graph *g = part(c, c->dev[i])->graph;
      if (gr_graph_set_input(g, c->copy[i], j, (gr_output){c->copy[s], nd->inputs[j].index}) !=
          GR_OK)
        st = graph_error(c, g);
    }
  }
  for (int k = 0; k < nx && st == GR_OK; k++) {
    int fi = fed_index(c, fetches[k]);
    int s = fi >= 0 ? -1 : pos(c, fetches[k].node);
    if (fi < 0 && s < 0)
      return gr_error_set(c->err, GR_ERR_INTERNAL, "partitioning: fetch '%s' is not in the step",
                          fetches[k].node->name);
    int d = fi >= 0 ? 0 : c->dev[s];
    gr_partition *p = part(c, d);
    gr_output o = fi >= 0 ? standin(c, fi, d) : (gr_output){c->copy[s], fetches[k].index};
    if (!o.node) return graph_error(c, p->graph);
    p->fetches[p->num_fetches] = o;
    p->fetch_index[p->num_fetches++] = k;
  }
  /* what each executor runs: every node but the feed stand-ins, by id */
  for (int d = 0; d < ps->num_parts && st == GR_OK; d++) {
    gr_partition *p = &ps->parts[d];
    int total = gr_graph_num_nodes(p->graph);
    p->nodes = malloc(sizeof(gr_node *) * ((size_t)total + 1));
    if (!p->nodes) return oom(c);
    for (int id = 0; id < total; id++) {
      gr_node *nd = gr_graph_node(p->graph, id);
      bool is_standin = false;
      for (int f = 0; f < p->num_feeds; f++)
        if (p->feeds[f].node == nd) is_standin = true;
      if (!is_standin) p->nodes[p->num_nodes++] = nd;
    }
  }
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
  c.frame = calloc((size_t)num_nodes + 1, sizeof(int));
  c.dev = calloc((size_t)num_nodes + 1, sizeof(int));
  c.devs = malloc(sizeof(char *) * ((size_t)num_nodes + 1));
  c.copy = calloc((size_t)num_nodes + 1, sizeof(gr_node *));
  c.cap_frames = 8;
  c.frames = malloc(sizeof(frame_info) * (size_t)c.cap_frames);
  c.ps = calloc(1, sizeof *c.ps);
  gr_status st = GR_OK;
  if (!c.pos_of || !c.order || !c.frame || !c.dev || !c.devs || !c.copy || !c.frames || !c.ps) {
    st = oom(&c);
  } else {
    for (int i = 0; i < c.max_id; i++) c.pos_of[i] = 0;
    for (int i = 0; i < num_nodes; i++) c.pos_of[nodes[i]->id] = i;
    c.frames[0] = (frame_info){-1, "", 0};
    c.num_frames = 1;
    st = build(&c, fetches, num_fetches);
  }
  if (st == GR_OK) {
    *out = c.ps;
  } else {
    gr_partitions_free(c.ps);
  }
  free(c.pos_of), free(c.order), free(c.frame), free(c.dev), free(c.devs), free(c.copy);
  free(c.frames);
  u64_free(&c.recvs), u64_free(&c.dups), u64_free(&c.standins);
  return st;
}
