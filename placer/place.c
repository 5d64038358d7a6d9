/* Placing a gr_graph: topological order, costs (static or profiled), pins,
 * colocation groups (union-find), kernel availability, then the simulated
 * greedy placer on the compact form, and the full device names written back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "place_internal.h"

gr_placer_options gr_placer_options_default(void) {
  return (gr_placer_options){.soft_placement = false,
                             .explain = false,
                             .profiles = NULL,
                             .min_samples = 3,
                             .min_gain = GR_PLACE_MIN_GAIN};
}

/* The value of key in a string -> int map, or inserts val and returns it; -2 on OOM. */
static int map_get_or_put(gr_map *m, const char *key, int val) {
  bool added;
  void **v = gr_map_slot_str(m, key, &added);
  if (!v) return -2;
  if (added) *v = (void *)(intptr_t)val;
  return (int)(intptr_t)*v;
}

/* ---- helpers ------------------------------------------------------------------ */

static void device_list(const gr_cluster *c, char *buf, size_t cap) {
  size_t m = 0;
  buf[0] = '\0';
  for (int d = 0; d < c->num_devices && m + 1 < cap; d++) {
    if (d == 8 && c->num_devices > 9) {
      snprintf(buf + m, cap - m, ", ... (%d devices)", c->num_devices);
      return;
    }
    m += (size_t)snprintf(buf + m, cap - m, "%s%s", d ? ", " : "", c->devices[d].name);
  }
}

static bool kernel_available(const gr_node *n, const gr_cluster_device *d) {
  return n->op->kernel != NULL && strcmp(d->spec.type, "CPU") == 0;
}

/* ---- constraints ------------------------------------------------------------------ */

typedef struct build {
  gr_graph *g;
  const gr_cluster *c;
  const gr_placer_options *o;
  gr_placement *p;
  int n, D, words;
  int *parent;       /* union-find over node ids */
  int *pin_set;      /* per node id: allowed-set bitset index (-1 none) */
  gr_colocation col; /* the graph's colocation groups */
  uint64_t *sets;    /* bitsets, words each */
  uint8_t *soft;     /* per set: made from a pin that soft placement dropped */
  int nsets, capsets;
  gr_error *err;
} build;

static int new_set(build *b) {
  if (b->nsets == b->capsets) {
    int cap = b->capsets ? b->capsets * 2 : 16;
    uint64_t *s = gr_realloc_array(b->sets, (size_t)b->words * (size_t)cap, sizeof(uint64_t));
    if (!s) return -1;
    b->sets = s;
    uint8_t *soft = realloc(b->soft, (size_t)cap);
    if (!soft) return -1;
    b->soft = soft;
    b->capsets = cap;
  }
  b->soft[b->nsets] = 0;
  memset(b->sets + (size_t)b->words * (size_t)b->nsets, 0, sizeof(uint64_t) * (size_t)b->words);
  return b->nsets++;
}

static uint64_t *set_bits(build *b, int s) {
  return b->sets + (size_t)b->words * (size_t)s;
}

static bool set_empty(build *b, int s) {
  for (int w = 0; w < b->words; w++)
    if (set_bits(b, s)[w]) return false;
  return true;
}

/* Pins: each distinct requested spec becomes one allowed set. */
static gr_status resolve_pins(build *b) {
  gr_map specs;
  gr_map_init(&specs, GR_MAP_STR);
  gr_status st = GR_OK;
  bool any_cpu = false; /* kernels exist for CPU only */
  for (int d = 0; d < b->D && !any_cpu; d++)
    any_cpu = strcmp(b->c->devices[d].spec.type, "CPU") == 0;
  for (int i = 0; i < b->n; i++) {
    gr_node *v = gr_graph_node(b->g, i);
    const char *req = v->requested_device ? v->requested_device : "";
    b->pin_set[i] = -1;
    bool any_kernel = v->op->kernel != NULL && any_cpu;
    if (!any_kernel) {
      st = gr_error_set(b->err, GR_ERR_UNIMPLEMENTED,
                        "node '%s': op '%s' has no kernel for any device type of the cluster",
                        v->name, v->op->name);
      break;
    }
    if (b->col.follows[i] || b->col.dropped[i]) { /* follows its group: the pin is not its own */
      b->p->pin_ignored[i] = b->col.dropped[i];
      b->p->follows[i] = b->col.follows[i];
      continue;
    }
    if (!*req) continue;
    int k = map_get_or_put(&specs, req, b->nsets);
    if (k == -2) goto oom;
    if (k < b->nsets) {
      b->pin_set[i] = k;
      b->p->pin_ignored[i] = b->soft[k];
      continue;
    }
    gr_device_spec spec;
    gr_error perr;
    if (gr_device_spec_parse(req, &spec, &perr) != GR_OK) {
      st = gr_error_set(b->err, perr.code, "node '%s': %s", v->name, perr.msg);
      break;
    }
    int s = new_set(b);
    if (s < 0) goto oom;
    bool matched = false;
    for (int d = 0; d < b->D; d++)
      if (gr_device_spec_matches(&spec, &b->c->devices[d].spec) &&
          kernel_available(v, &b->c->devices[d])) {
        set_bits(b, s)[d / 64] |= 1ull << (d % 64);
        matched = true;
      }
    if (!matched) {
      if (!b->o->soft_placement) {
        char list[768];
        device_list(b->c, list, sizeof list);
        st = gr_error_set(b->err, GR_ERR_INVALID_ARGUMENT,
                          "node '%s': device spec '%s' matches no device of the cluster "
                          "(devices: %s; soft placement is off)",
                          v->name, req, list);
        break;
      }
      for (int d = 0; d < b->D; d++)
        if (kernel_available(v, &b->c->devices[d])) set_bits(b, s)[d / 64] |= 1ull << (d % 64);
      b->p->pin_ignored[i] = 1;
      b->soft[s] = 1;
    }
    b->pin_set[i] = s;
  }
  gr_map_free(&specs);
  return st;
oom:
  gr_map_free(&specs);
  return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
}

/* Colocation: the graph's groups (core/gr_colocation.h) as the union-find
 * start (a group's root is its first member, as uf_union keeps it). */
static gr_status join_groups(build *b) {
  GR_TRY(gr_colocation_compute(b->g, b->o->soft_placement, &b->col, b->err));
  for (int i = 0; i < b->n; i++) b->parent[i] = b->col.group[i];
  return GR_OK;
}

/* Colocation hints (a gradient with its forward op) join the hinted node's
 * group to its target's when the two groups' pins allow a common device;
 * otherwise the hint is dropped (a pin wins over a hint). */
static gr_status join_hints(build *b, int *gset, int *gpinner) {
  for (int i = 0; i < b->n; i++) {
    gr_node *v = gr_graph_node(b->g, i);
    if (!v->colocate_with || !v->colocate_hint) continue;
    gr_node *t = gr_graph_find_node(b->g, v->colocate_with);
    if (!t) continue;
    int ra = gr_colocation_find(b->parent, i), rb = gr_colocation_find(b->parent, t->id);
    if (ra == rb) continue;
    int sa = gset[ra], sb = gset[rb], s = sa < 0 ? sb : sa;
    if (sa >= 0 && sb >= 0) {
      if ((s = new_set(b)) < 0)
        return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
      for (int w = 0; w < b->words; w++)
        set_bits(b, s)[w] = set_bits(b, sa)[w] & set_bits(b, sb)[w];
      if (set_empty(b, s)) {
        b->nsets--;
        continue;
      }
    }
    int pinner = gpinner[ra] >= 0 ? gpinner[ra] : gpinner[rb];
    gr_colocation_union(b->parent, ra, rb);
    int r = gr_colocation_find(b->parent, ra);
    gset[r] = s;
    gpinner[r] = pinner;
  }
  return GR_OK;
}

/* Loops: the simulation runs one iteration of a loop, so it cannot tell how
 * often a transfer inside one is paid. The unpinned nodes of each top-level
 * loop (without a variable or colocate_with of their own) are placed as one
 * group; pinning spreads a loop over devices on purpose. */
static gr_status join_loops(build *b, const int *order) {
  int n = b->n;
  int *depth = gr_alloc_array((size_t)n + 1, sizeof(int)),
      *top = gr_alloc_array((size_t)n + 1, sizeof(int));
  int *anchor = gr_alloc_array((size_t)n + 1, sizeof(int));
  gr_map frames;
  gr_map_init(&frames, GR_MAP_STR);
  gr_status st = GR_OK;
  if (!depth || !top || !anchor) goto oom;
  int nloops = 0;
  for (int k = 0; k < n; k++) {
    int i = order[k];
    gr_node *v = gr_graph_node(b->g, i);
    const gr_node *src = NULL;
    for (int j = 0; j < v->num_inputs && !src; j++)
      if (v->inputs[j].node->op->cf_kind != GR_CF_NEXT_ITERATION) src = v->inputs[j].node;
    if (!src && v->num_control_inputs) src = v->control_inputs[0];
    int d = 0, t = -1;
    if (src) { /* the frame src's outputs live in */
      d = depth[src->id] - (src->op->cf_kind == GR_CF_EXIT && depth[src->id] > 0);
      t = d > 0 ? top[src->id] : -1;
    }
    if (v->op->cf_kind == GR_CF_ENTER && ++d == 1) {
      t = map_get_or_put(&frames, gr_node_attr_string(v, "frame_name", v->name), nloops);
      if (t == -2) goto oom;
      if (t == nloops) anchor[nloops++] = -1;
    }
    depth[i] = d;
    top[i] = t;
    if (t < 0 || v->requested_device[0] || v->colocate_with || b->col.size[i] > 1) continue;
    if (anchor[t] < 0)
      anchor[t] = i;
    else
      gr_colocation_union(b->parent, anchor[t], i);
  }
  goto done;
oom:
  st = gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
done:
  free(depth), free(top), free(anchor);
  gr_map_free(&frames);
  return st;
}

/* Intersects the pins of each group; conflicts name both nodes and specs. */
static gr_status group_sets(build *b, int *gset, int *gpinner) {
  for (int i = 0; i < b->n; i++) gset[i] = -1, gpinner[i] = -1;
  for (int i = 0; i < b->n; i++) {
    if (b->pin_set[i] < 0) continue;
    int r = gr_colocation_find(b->parent, i);
    if (gset[r] < 0) {
      gset[r] = b->pin_set[i];
      gpinner[r] = i;
      continue;
    }
    int s = new_set(b);
    if (s < 0) return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
    for (int w = 0; w < b->words; w++)
      set_bits(b, s)[w] = set_bits(b, gset[r])[w] & set_bits(b, b->pin_set[i])[w];
    if (set_empty(b, s)) {
      gr_node *a = gr_graph_node(b->g, gpinner[r]), *v = gr_graph_node(b->g, i);
      if (!b->o->soft_placement) {
        char why[256];
        gr_colocation_why(v, why, sizeof why);
        if (!why[0]) gr_colocation_why(a, why, sizeof why);
        return gr_error_set(b->err, GR_ERR_INVALID_ARGUMENT,
                            "colocation conflict: node '%s' (device '%s') and node '%s' (device "
                            "'%s') must share a device (%s) but no device of the cluster "
                            "matches both specs",
                            a->name, a->requested_device, v->name, v->requested_device,
                            why[0] ? why : "one colocation group");
      }
      b->p->pin_ignored[i] = 1; /* soft: the first pin in the group wins */
      b->nsets--;
      continue;
    }
    gset[r] = s;
  }
  return GR_OK;
}

/* Input k of v is a loop's back edge (merge <- next_iteration). */
static bool is_back_edge(const gr_node *v, int k) {
  return v->op->cf_kind == GR_CF_MERGE && v->inputs[k].node->op->cf_kind == GR_CF_NEXT_ITERATION;
}

static gr_status fill_graph(build *b, const int *order, const int *gset) {
  gr_place_graph *pg = &b->p->pg;
  int n = b->n, e = 0;
  for (int i = 0; i < n; i++) {
    gr_node *v = gr_graph_node(b->g, i);
    e += v->num_inputs + v->num_control_inputs;
    for (int k = 0; k < v->num_inputs; k++) e -= is_back_edge(v, k);
  }
  GR_TRY(gr_place_graph_init(pg, n, e, b->err));
  int *pos = b->p->pos;
  for (int k = 0; k < n; k++) pos[order[k]] = k;
  for (int s = 0; s < b->nsets; s++) {
    int idx = gr_place_graph_add_allow_set(pg, b->D, NULL, 0);
    if (idx < 0) return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
    memcpy(pg->allow_bits + (size_t)idx * (size_t)b->words, set_bits(b, s),
           sizeof(uint64_t) * (size_t)b->words);
  }
  int *rep = gr_alloc_array((size_t)n + 1, sizeof(int));
  if (!rep) return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
  for (int i = 0; i < n; i++) rep[i] = n;
  for (int i = 0; i < n; i++) {
    int r = gr_colocation_find(b->parent, i);
    if (pos[i] < rep[r]) rep[r] = pos[i];
  }
  e = 0;
  char key[600];
  uint64_t fp = b->o->profiles ? gr_cost_graph_fingerprint(b->g) : 0;
  for (int k = 0; k < n; k++) {
    gr_node *v = gr_graph_node(b->g, order[k]);
    b->p->node_at[k] = v;
    gr_cost c = gr_cost_of_node(v);
    pg->flops[k] = c.flops;
    pg->bytes[k] = c.bytes;
    if (b->o->profiles) {
      /* the node's own time per step (this graph's), else its op's per run */
      double mean;
      int64_t samples, need = b->o->min_samples > 0 ? b->o->min_samples : 1;
      gr_cost_node_key(fp, v, true, key, sizeof key);
      gr_status st = gr_profile_db_lookup(b->o->profiles, key, &mean, &samples, b->err);
      if (st == GR_OK && samples >= need && mean >= 1) pg->runs[k] = mean;
      gr_cost_node_key(fp, v, false, key, sizeof key);
      if (st == GR_OK) st = gr_profile_db_lookup(b->o->profiles, key, &mean, &samples, b->err);
      if (st == GR_OK && samples < need) {
        gr_cost_profile_key(v, key, sizeof key);
        st = gr_profile_db_lookup(b->o->profiles, key, &mean, &samples, b->err);
      }
      if (st != GR_OK) {
        free(rep);
        return st;
      }
      if (samples >= need) {
        pg->seconds[k] = mean;
        b->p->profiled++;
      }
    }
    int r = gr_colocation_find(b->parent, order[k]);
    pg->group[k] = rep[r];
    pg->allow[k] = gset[r];
    pg->in_off[k] = e;
    for (int i = 0; i < v->num_inputs; i++) {
      if (is_back_edge(v, i)) continue; /* the simulation runs one iteration of a loop */
      pg->in_src[e] = pos[v->inputs[i].node->id];
      pg->in_bytes[e++] = gr_cost_output_bytes(v->inputs[i].node, v->inputs[i].index);
    }
    for (int i = 0; i < v->num_control_inputs; i++) {
      pg->in_src[e] = pos[v->control_inputs[i]->id];
      pg->in_bytes[e++] = 0;
    }
  }
  pg->in_off[n] = e;
  free(rep);
  return GR_OK;
}

/* The step: pg.active marks the nodes the options' fetches and targets
 * need (the session's pruning walk); without them every node is in it. */
static gr_status mark_step(build *b, const int *order) {
  const gr_placer_options *o = b->o;
  if (!o->num_fetches && !o->num_targets) return GR_OK;
  unsigned char *mark = calloc((size_t)b->n + 1, 1);
  if (!mark) return gr_error_set(b->err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
  gr_prune_request r = {.feeds = o->feeds,
                        .fetches = o->fetches,
                        .targets = o->targets,
                        .num_feeds = o->num_feeds,
                        .num_fetches = o->num_fetches,
                        .num_targets = o->num_targets,
                        .feeds_cut_control = true};
  gr_status st = gr_graph_mark_needed(b->g, &r, mark, NULL, b->err);
  for (int k = 0; st == GR_OK && k < b->n; k++)
    b->p->pg.active[k] = mark[order[k]] != GR_PRUNE_UNUSED;
  free(mark);
  return st;
}

gr_status gr_placer_place(gr_graph *g, const gr_cluster *c, const gr_placer_options *opts,
                          gr_placement **out, gr_error *err) {
  if (out) *out = NULL;
  gr_placer_options o = opts ? *opts : gr_placer_options_default();
  if (gr_graph_error(g))
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION, "placer: the graph has a build error: %s",
                        gr_graph_error(g)->msg);
  if (!c || c->num_devices < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "placer: the cluster has no devices");
  int n = gr_graph_num_nodes(g);
  gr_placement *p = calloc(1, sizeof *p);
  build b = {.g = g,
             .c = c,
             .o = &o,
             .p = p,
             .n = n,
             .D = c->num_devices,
             .words = (c->num_devices + 63) / 64,
             .err = err};
  size_t sn = (size_t)n + 1;
  int *order = gr_alloc_array(sn, sizeof(int)), *gset = gr_alloc_array(sn, sizeof(int)),
      *gpinner = gr_alloc_array(sn, sizeof(int));
  b.parent = gr_alloc_array(sn, sizeof(int));
  b.pin_set = gr_alloc_array(sn, sizeof(int));
  gr_status s = GR_OK;
  if (!p || !order || !gset || !gpinner || !b.parent || !b.pin_set) goto oom;
  p->graph = g;
  p->cluster = c;
  p->n = n;
  p->explain = o.explain;
  p->pos = gr_alloc_array(sn, sizeof(int));
  p->node_at = gr_alloc_array(sn, sizeof(gr_node *));
  p->pin_ignored = calloc(sn, 1);
  p->follows = calloc(sn, 1);
  p->dev_names = calloc((size_t)c->num_devices, sizeof(char *));
  if (!p->pos || !p->node_at || !p->pin_ignored || !p->follows || !p->dev_names) goto oom;
  /* loop back edges (merge <- next_iteration) are not ordering constraints */
  int sorted = gr_graph_topo_order(g, order);
  if (sorted != n) {
    s = sorted < 0 ? gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory")
                   : gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                                  "placer: the graph has a cycle (through control inputs) that "
                                  "is not a loop's back edge");
    goto done;
  }
  if ((s = join_groups(&b)) != GR_OK) goto done;
  if ((s = resolve_pins(&b)) != GR_OK) goto done;
  if ((s = join_loops(&b, order)) != GR_OK) goto done;
  if ((s = group_sets(&b, gset, gpinner)) != GR_OK) goto done;
  if ((s = join_hints(&b, gset, gpinner)) != GR_OK) goto done;
  if ((s = fill_graph(&b, order, gset)) != GR_OK) goto done;
  if ((s = mark_step(&b, order)) != GR_OK) goto done;
  /* layers, per node id, then per index of the compact graph (in gpinner's room) */
  if ((s = gr_place_layers(g, &b.col, order, gset, err)) != GR_OK) goto done;
  for (int k = 0; k < n; k++) gpinner[k] = gset[order[k]];
  gr_place_options po = {
      .record = o.explain,
      .layer = gpinner,
      .search_budget =
          o.search ? (o.search_budget > 0 ? o.search_budget : GR_PLACE_SEARCH_BUDGET) : 0,
      .resolve_candidates = true,
      .dataflow = true,
      .min_gain = o.min_gain};
  if ((s = gr_place_schedule(&p->pg, c, &po, &p->r, err)) != GR_OK) goto done;
  s = gr_placement_apply(p, p->r.chosen, err);
  goto done;
oom:
  s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory (%d nodes)", n);
done:
  free(order);
  free(gset);
  free(gpinner);
  free(b.parent);
  free(b.pin_set);
  free(b.sets);
  free(b.soft);
  gr_colocation_free(&b.col);
  if (s != GR_OK || !out) {
    gr_placement_free(p);
    return s;
  }
  *out = p;
  return GR_OK;
}

gr_status gr_placement_apply(gr_placement *p, gr_place_candidate k, gr_error *err) {
  if ((unsigned)k >= GR_PLACE_CAND_COUNT || !p->r.cand_device[k])
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "placement: candidate '%s' was not tried",
                        gr_place_candidate_name(k));
  const gr_cluster *c = p->cluster;
  for (int i = 0; i < p->n; i++) {
    int d = p->r.cand_device[k][i];
    if (d < 0 || d >= c->num_devices) d = p->r.device[i];
    if (!p->dev_names[d] && !(p->dev_names[d] = gr_graph_strdup(p->graph, c->devices[d].name)))
      return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory");
    p->node_at[i]->assigned_device = p->dev_names[d];
  }
  return GR_OK;
}

double gr_placement_candidate_time(const gr_placement *p, gr_place_candidate k) {
  return (unsigned)k < GR_PLACE_CAND_COUNT ? p->r.cand_time[k] : INFINITY;
}

double gr_placement_step_costs(const gr_placement *p, gr_place_candidate k) {
  const gr_cluster *c = p->cluster;
  if ((unsigned)k >= GR_PLACE_CAND_COUNT || !p->r.cand_device[k]) return 0;
  bool *used = calloc((size_t)c->num_tasks + 1, sizeof *used);
  if (!used) return 0;
  for (int i = 0; i < p->n; i++) {
    int d = p->r.cand_device[k][i];
    if (p->pg.active[i] && d >= 0 && d < c->num_devices) used[c->devices[d].task] = true;
  }
  double t = gr_cluster_step_overhead(c, used);
  free(used);
  return t;
}

int gr_placement_candidate_device(const gr_placement *p, gr_place_candidate k, int node_id) {
  if ((unsigned)k >= GR_PLACE_CAND_COUNT || !p->r.cand_device[k] || node_id < 0 || node_id >= p->n)
    return -1;
  return p->r.cand_device[k][p->pos[node_id]];
}

gr_place_candidate gr_placement_chosen(const gr_placement *p) {
  return p->r.chosen;
}

void gr_placement_free(gr_placement *p) {
  if (!p) return;
  gr_place_graph_free(&p->pg);
  gr_place_result_free(&p->r);
  free(p->pos);
  free(p->node_at);
  free(p->pin_ignored);
  free(p->follows);
  free(p->dev_names);
  free(p);
}

double gr_placement_step_time(const gr_placement *p) {
  return p->r.step_time;
}

double gr_placement_cross_bytes(const gr_placement *p) {
  return p->r.cross_bytes;
}

int gr_placement_device_of(const gr_placement *p, int node_id) {
  if (node_id < 0 || node_id >= p->n || !p->r.device) return -1;
  return p->r.device[p->pos[node_id]];
}
