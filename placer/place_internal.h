/* Inside placer/: the placement of a gr_graph (place.c builds it, explain.c prints it). */
#ifndef GR_PLACE_INTERNAL_H
#define GR_PLACE_INTERNAL_H

#include "placer_internal.h"

struct gr_placement {
  gr_graph *graph;
  const gr_cluster *cluster;
  int n;
  bool explain;
  gr_place_graph pg; /* nodes in topological order */
  gr_place_result r;
  int *pos;             /* node id -> index in pg */
  gr_node **node_at;    /* index in pg -> node */
  uint8_t *pin_ignored; /* per node id: its pin was dropped by soft placement */
  uint8_t *follows;     /* per node id: it follows the resource it uses (its pin is not its own) */
  const char **dev_names; /* per device: the graph-owned name string (or NULL) */
  int profiled;           /* nodes whose time came from the profile database */
};

/* The layer of every node (layers.c; docs/placement.md): layer[id] per
 * node id, numbered from 0 by first appearance in `order` (a topological
 * order of node ids); col: the graph's colocation groups. */
gr_status gr_place_layers(const gr_graph *g, const gr_colocation *col, const int *order, int *layer,
                          gr_error *err);

/* Prints the candidates' predicted steps (and the search's work) in one
 * line (explain.c). */
void gr_placement_print_candidates(const gr_placement *p, FILE *f);

#endif
