/* The layers of a graph, for the round-robin-by-layer candidate and the
 * local search's units (docs/placement.md). A layer is named after the
 * variables it uses: the first component of a variable's name ("layer1"
 * for layer1/w1, "W" for an unscoped W). In topological order:
 *
 *   - a node in a colocation group with a variable (the variable, its
 *     initialiser, reads, updates, optimizer slots) is in that variable's
 *     layer, and is said to be in it directly;
 *   - a gradient (a node with a colocation hint) is in its forward op's
 *     layer;
 *   - any other node is in the layer of its first input (data, then
 *     control) that is in one directly, else of its first input in any
 *     layer: x @ w2 + b2 goes with layer2 although x comes from layer1;
 *   - a node without such inputs (data, constants, the global step) is in
 *     the first layer: the input pipeline goes with the layer it feeds (a
 *     graph without variables has the one layer "(top level)").
 *
 * Layers are numbered by the first appearance of their variables in the
 * order given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "place_internal.h"

/* The layer number of a name (its first len bytes; by its hash: two names
 * of one hash would share a layer, which costs nothing but a worse
 * candidate), added when new; -2 when out of memory. */
static int layer_id(gr_map *names, const char *name, size_t len, int *count) {
  char key[256];
  if (len >= sizeof key) len = sizeof key - 1;
  memcpy(key, name, len);
  key[len] = '\0';
  bool added;
  void **slot = gr_map_slot_u64(names, gr_map_hash_str(key), &added);
  if (!slot) return -2;
  if (added) *slot = (void *)(intptr_t)(*count)++;
  return (int)(intptr_t)*slot;
}

gr_status gr_place_layers(const gr_graph *g, const gr_colocation *col, const int *order, int *layer,
                          gr_error *err) {
  int n = gr_graph_num_nodes(g), count = 0;
  int *group_layer = gr_alloc_array((size_t)n + 1, sizeof(int));
  uint8_t *direct = calloc((size_t)n + 1, 1);
  gr_map names;
  gr_map_init(&names, GR_MAP_U64);
  gr_status st = group_layer && direct ? GR_OK : gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++) group_layer[i] = -1, layer[i] = -1;
  /* the variables' layers, per colocation group, numbered in order */
  for (int k = 0; st == GR_OK && k < n; k++) {
    const gr_node *v = gr_graph_node(g, order[k]);
    int r = col->group[v->id];
    if (!(v->op->flags & GR_OP_VARIABLE) || group_layer[r] >= 0 ||
        strcmp(gr_node_attr_string(v, "var", ""), v->name) != 0)
      continue;
    const char *slash = strchr(v->name, '/');
    group_layer[r] =
        layer_id(&names, v->name, slash ? (size_t)(slash - v->name) : strlen(v->name), &count);
    if (group_layer[r] < 0) st = gr_error_set_oom(err);
  }
  int top = -1;
  for (int k = 0; st == GR_OK && k < n; k++) {
    const gr_node *v = gr_graph_node(g, order[k]);
    int id = v->id, l = group_layer[col->group[id]];
    if (l >= 0) {
      layer[id] = l, direct[id] = 1;
      continue;
    }
    const gr_node *t =
        v->colocate_with && v->colocate_hint ? gr_graph_find_node(g, v->colocate_with) : NULL;
    if (t && layer[t->id] >= 0) {
      layer[id] = layer[t->id], direct[id] = direct[t->id];
      continue;
    }
    int any = -1;
    for (int j = 0; j < v->num_inputs + v->num_control_inputs && l < 0; j++) {
      const gr_node *u =
          j < v->num_inputs ? v->inputs[j].node : v->control_inputs[j - v->num_inputs];
      if (layer[u->id] < 0) continue; /* a loop's back edge: not visited yet */
      if (direct[u->id]) l = layer[u->id];
      if (any < 0) any = layer[u->id];
    }
    if (l < 0) l = any;
    if (l < 0) {
      if (top < 0) top = count ? 0 : count++; /* the first layer, else "(top level)" */
      l = top;
    }
    layer[id] = l;
  }
  free(group_layer);
  free(direct);
  gr_map_free(&names);
  return st;
}
