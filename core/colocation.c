/* Colocation groups (gr_colocation.h): union-find over the nodes that share
 * a resource or a colocate_with, then each group's request merged from the
 * pins of its deciding members. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_alloc.h"
#include "core/gr_colocation.h"
#include "core/map.h"
#include "core/gr_op.h"

/* ---- resources a node uses ------------------------------------------------------------ */

enum { RES_VAR, RES_STACK, RES_QUEUE, RES_ACCUM, RES_KINDS };

static const char *const res_noun[RES_KINDS] = {"variable", "stack", "queue", "accumulator"};

/* The kind of resource attr a names, -1 when it names none. */
static int res_kind(const gr_attr *a) {
  if (a->value.type != GR_ATTR_STRING || !a->value.s || !a->value.s[0]) return -1;
  if (gr_attr_names_variable(a)) return RES_VAR;
  if (strcmp(a->name, "stack") == 0) return RES_STACK;
  if (strcmp(a->name, "queue") == 0) return RES_QUEUE;
  if (strcmp(a->name, "accumulator") == 0) return RES_ACCUM;
  return -1;
}

/* Whether n carries resource (kind, name). */
static bool uses(const gr_node *n, int kind, const char *name) {
  for (int i = 0; i < n->num_attrs; i++)
    if (res_kind(&n->attrs[i]) == kind && strcmp(n->attrs[i].value.s, name) == 0) return true;
  return false;
}

/* n uses a resource that another node of its graph makes (the node named
 * like the resource, which uses it too). */
static bool follows_resource(const gr_graph *g, const gr_node *n) {
  for (int i = 0; i < n->num_attrs; i++) {
    int k = res_kind(&n->attrs[i]);
    if (k < 0) continue;
    const gr_node *maker = gr_graph_find_node(g, n->attrs[i].value.s);
    if (maker && maker != n && uses(maker, k, n->attrs[i].value.s)) return true;
  }
  return false;
}

const char *gr_colocation_why(const gr_node *n, char *buf, size_t cap) {
  buf[0] = '\0';
  if (n->colocate_with && !n->colocate_hint) {
    snprintf(buf, cap, "colocate_with '%s'", n->colocate_with);
    return buf;
  }
  for (int i = 0; i < n->num_attrs; i++) {
    int k = res_kind(&n->attrs[i]);
    if (k >= 0) {
      snprintf(buf, cap, "uses %s '%s'", res_noun[k], n->attrs[i].value.s);
      break;
    }
  }
  return buf;
}

/* ---- union-find over indices 0..n-1; a root is its group's smallest index ---------------- */

int gr_colocation_find(int *parent, int x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

void gr_colocation_union(int *parent, int a, int b) {
  a = gr_colocation_find(parent, a);
  b = gr_colocation_find(parent, b);
  if (a < b)
    parent[b] = a;
  else if (b < a)
    parent[a] = b;
}

/* Joins the members of nodes[0..n) that share a resource or a colocate_with
 * (index_of: a node's index among them, -1 when not one of them). */
static gr_status join(gr_node *const *nodes, int n, const int *index_of, int *parent,
                      gr_error *err) {
  gr_map first[RES_KINDS];
  for (int k = 0; k < RES_KINDS; k++) gr_map_init(&first[k], GR_MAP_STR);
  gr_status st = GR_OK;
  for (int i = 0; i < n; i++) parent[i] = i;
  for (int i = 0; i < n && st == GR_OK; i++) {
    const gr_node *v = nodes[i];
    for (int a = 0; a < v->num_attrs; a++) {
      int k = res_kind(&v->attrs[a]);
      if (k < 0) continue;
      bool added;
      void **slot = gr_map_slot_str(&first[k], v->attrs[a].value.s, &added);
      if (!slot) {
        st = gr_error_set_oom(err);
        break;
      }
      if (added) *slot = (void *)(intptr_t)i;
      gr_colocation_union(parent, (int)(intptr_t)*slot, i);
    }
    if (v->colocate_with && !v->colocate_hint) {
      const gr_node *t = gr_graph_find_node(v->graph, v->colocate_with);
      int j = t ? index_of[t->id] : -1;
      if (j >= 0) gr_colocation_union(parent, j, i);
    }
  }
  for (int k = 0; k < RES_KINDS; k++) gr_map_free(&first[k]);
  return st;
}

/* ---- the groups' requests ------------------------------------------------------------- */

/* Whether two specs can both hold; *out gets their merge. */
static bool spec_merge(const gr_device_spec *a, const gr_device_spec *b, gr_device_spec *out) {
  if (a->job[0] && b->job[0] && strcmp(a->job, b->job) != 0) return false;
  if (a->type[0] && b->type[0] && strcmp(a->type, b->type) != 0) return false;
  if (a->replica != GR_DEVICE_ANY && b->replica != GR_DEVICE_ANY && a->replica != b->replica)
    return false;
  if (a->task != GR_DEVICE_ANY && b->task != GR_DEVICE_ANY && a->task != b->task) return false;
  if (a->id != GR_DEVICE_ANY && b->id != GR_DEVICE_ANY && a->id != b->id) return false;
  *out = gr_device_spec_merge(a, b);
  return true;
}

static gr_status conflict(const gr_graph *g, int first, const gr_node *v, gr_error *err) {
  const gr_node *a = gr_graph_node(g, first);
  char why[300];
  gr_colocation_why(v, why, sizeof why);
  if (!why[0]) gr_colocation_why(a, why, sizeof why);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "colocation conflict: node '%s' (device '%s') and node '%s' (device '%s') "
                      "must share a device (%s) but no device matches both specs; "
                      "soft placement would keep the first",
                      a->name, a->requested_device, v->name, v->requested_device,
                      why[0] ? why : "one colocation group");
}

/* Merges the pins of the deciding members into one spec per group. */
static gr_status decide(const gr_graph *g, bool soft, gr_colocation *c, gr_error *err) {
  int cap = 0;
  for (int id = 0; id < c->num_nodes; id++) {
    const gr_node *v = gr_graph_node(g, id);
    if (!v->requested_device || !v->requested_device[0]) continue;
    gr_device_spec s;
    gr_error perr;
    if (gr_device_spec_parse(v->requested_device, &s, &perr) != GR_OK)
      return gr_error_set(err, perr.code, "node '%s': %s", v->name, perr.msg);
    if (c->follows[id]) continue;
    int r = c->group[id];
    if (c->spec_index[r] < 0) {
      if (c->num_specs == cap) {
        cap = cap ? cap * 2 : 16;
        gr_device_spec *more = gr_realloc_array(c->specs, (size_t)cap, sizeof *more);
        if (!more) return gr_error_set_oom(err);
        c->specs = more;
      }
      c->specs[c->num_specs] = s;
      c->spec_index[r] = c->num_specs++;
      c->decider[r] = id;
      continue;
    }
    gr_device_spec *have = &c->specs[c->spec_index[r]], merged;
    if (spec_merge(have, &s, &merged)) {
      *have = merged;
    } else if (soft) {
      c->dropped[id] = 1;
    } else {
      return conflict(g, c->decider[r], v, err);
    }
  }
  return GR_OK;
}

gr_status gr_colocation_compute(const gr_graph *g, bool soft, gr_colocation *c, gr_error *err) {
  memset(c, 0, sizeof *c);
  int n = gr_graph_num_nodes(g);
  size_t sn = (size_t)n + 1;
  c->num_nodes = n;
  c->group = gr_alloc_array(sn, sizeof(int));
  c->size = calloc(sn, sizeof(int));
  c->decider = gr_alloc_array(sn, sizeof(int));
  c->spec_index = gr_alloc_array(sn, sizeof(int));
  c->follows = calloc(sn, 1);
  c->dropped = calloc(sn, 1);
  gr_node **nodes = gr_alloc_array(sn, sizeof(gr_node *));
  int *index_of = gr_alloc_array(sn, sizeof(int));
  gr_status st = GR_OK;
  if (!c->group || !c->size || !c->decider || !c->spec_index || !c->follows || !c->dropped ||
      !nodes || !index_of) {
    st = gr_error_set_oom(err);
    goto done;
  }
  for (int id = 0; id < n; id++) {
    nodes[id] = gr_graph_node(g, id);
    index_of[id] = id;
    c->decider[id] = c->spec_index[id] = -1;
  }
  if ((st = join(nodes, n, index_of, c->group, err)) != GR_OK) goto done;
  for (int id = 0; id < n; id++) {
    c->group[id] = gr_colocation_find(c->group, id);
    c->size[c->group[id]]++;
  }
  for (int id = 0; id < n; id++) {
    c->size[id] = c->size[c->group[id]];
    c->follows[id] = c->size[id] > 1 && follows_resource(g, nodes[id]);
  }
  st = decide(g, soft, c, err);
done:
  free(nodes);
  free(index_of);
  if (st != GR_OK) gr_colocation_free(c);
  return st;
}

void gr_colocation_free(gr_colocation *c) {
  free(c->group);
  free(c->size);
  free(c->decider);
  free(c->follows);
  free(c->dropped);
  free(c->spec_index);
  free(c->specs);
  memset(c, 0, sizeof *c);
}

gr_device_spec gr_colocation_spec(const gr_colocation *c, const gr_graph *g, int id) {
  for (int hop = 0; hop < 16 && id >= 0 && id < c->num_nodes; hop++) {
    int r = c->group[id];
    if (c->size[id] > 1)
      return c->spec_index[r] >= 0 ? c->specs[c->spec_index[r]] : gr_device_spec_any();
    const gr_node *v = gr_graph_node(g, id);
    gr_device_spec s;
    if (v->requested_device && v->requested_device[0])
      return gr_device_spec_parse(v->requested_device, &s, NULL) == GR_OK ? s
                                                                          : gr_device_spec_any();
    const gr_node *t = v->colocate_with ? gr_graph_find_node(g, v->colocate_with) : NULL;
    id = t ? t->id : -1;
  }
  return gr_device_spec_any();
}

/* ---- the partitioner's check ---------------------------------------------------------- */

gr_status gr_colocation_check(gr_node *const *nodes, int n, gr_error *err) {
  if (n < 1) return GR_OK;
  const gr_graph *g = nodes[0]->graph;
  int total = gr_graph_num_nodes(g);
  int *index_of = gr_alloc_array((size_t)total + 1, sizeof(int));
  int *parent = gr_alloc_array((size_t)n + 1, sizeof(int));
  gr_status st = GR_OK;
  if (!index_of || !parent) {
    st = gr_error_set_oom(err);
    goto done;
  }
  for (int id = 0; id < total; id++) index_of[id] = -1;
  for (int i = 0; i < n; i++)
    if (nodes[i]->graph == g && nodes[i]->id < total) index_of[nodes[i]->id] = i;
  if ((st = join(nodes, n, index_of, parent, err)) != GR_OK) goto done;
  for (int i = 0; i < n && st == GR_OK; i++) {
    int r = gr_colocation_find(parent, i);
    const gr_node *a = nodes[r], *v = nodes[i];
    const char *da = a->assigned_device ? a->assigned_device : "(none)",
               *dv = v->assigned_device ? v->assigned_device : "(none)";
    if (r == i || strcmp(da, dv) == 0) continue;
    char why[300];
    gr_colocation_why(v, why, sizeof why);
    if (!why[0]) gr_colocation_why(a, why, sizeof why);
    st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "colocation: node '%s' runs on %s but node '%s' on %s, and they must share "
                      "a device (%s): a resource is used away from where it lives",
                      a->name, da, v->name, dv, why[0] ? why : "one colocation group");
  }
done:
  free(index_of);
  free(parent);
  return st;
}
