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
  int *pos;               /* node id -> index in pg */
  gr_node **node_at;      /* index in pg -> node */
  uint8_t *pin_ignored;   /* per node id: its pin was dropped by soft placement */
  uint8_t *follows;       /* per node id: it follows the resource it uses (its pin is not its own) */
  const char **dev_names; /* per device: the graph-owned name string (or NULL) */
  int profiled;           /* nodes whose time came from the profile database */
};

#endif
