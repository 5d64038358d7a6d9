/* The locality placement: a second candidate next to the greedy one.
 *
 * The greedy placer decides node by node where each finishes earliest; on
 * wide graphs whose transfers cost about as much as a node (ratio 1) it
 * spreads consumers away from their producers and keeps the links busy. A
 * search over placements with the placer's own simulator found that
 * contiguous placements (a layered graph cut into column strips, say) beat
 * it on most such graphs. This builds one for any graph in linear time:
 *
 *   - nodes are taken level by level (level: the longest chain of inputs
 *     before the node), in index order within a level;
 *   - each device may take its share of a level's nodes (the share of the
 *     cluster's flop rate, rounded up);
 *   - a node goes to the allowed device with room that already holds most
 *     of its inputs: by count (weighting by bytes let one large input pull
 *     nodes off their column, and the drift compounded level after level);
 *     ties go to the device of the first input, which is usually the data
 *     path (matmul's x, add's h; in an RNN grid the same layer's previous
 *     step: the grid is then cut by layers), then to the larger bytes; with
 *     no such device, to the first allowed device with room, so the first
 *     level is cut into contiguous blocks;
 *   - a colocation group follows its first member; skipped nodes (free
 *     sources) are left at -1: the simulator puts them with their first
 *     consumer, as in the greedy run.
 *
 * The caller simulates it and keeps it only when it is faster. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

bool gr_place_locality(const gr_place_graph *pg, const gr_cluster *c, const uint8_t *skip,
                       int *device) {
  int n = pg->num_nodes, D = c->num_devices;
  int *level = gr_alloc_array((size_t)n + 1, sizeof(int)),
      *by_level = gr_alloc_array((size_t)n, sizeof(int));
  int *count = calloc((size_t)n + 2, sizeof(int)),
      *gdev = gr_alloc_array((size_t)n + 1, sizeof(int));
  int *load = calloc((size_t)D, sizeof(int)), *vstamp = calloc((size_t)D, sizeof(int));
  double *share = gr_alloc_array((size_t)D, sizeof(double)),
         *vote = gr_alloc_array((size_t)D, sizeof(double));
  bool ok = level && by_level && count && gdev && load && vstamp && share && vote;
  if (ok) {
    double total = 0;
    for (int d = 0; d < D; d++) total += c->devices[d].flops;
    for (int d = 0; d < D; d++) share[d] = c->devices[d].flops / total;
    double max_bytes = 1;
    for (int e = 0; e < pg->num_edges; e++)
      if (pg->in_bytes[e] > max_bytes) max_bytes = pg->in_bytes[e];
    /* levels (inputs have smaller indices), then a stable counting sort */
    int top = 0;
    for (int v = 0; v < n; v++) {
      int l = 0;
      if (!skip[v])
        for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
          int u = pg->in_src[e];
          if (!skip[u] && level[u] + 1 > l) l = level[u] + 1;
        }
      level[v] = l;
      if (l > top) top = l;
      count[l + 1]++;
    }
    for (int l = 0; l <= top; l++) count[l + 1] += count[l];
    for (int v = 0; v < n; v++) by_level[count[level[v]]++] = v;
    for (int v = 0; v < n; v++) gdev[v] = -1;
    int stamp = 0;
    for (int i = 0; i < n;) {
      int l = level[by_level[i]], end = i, width = 0;
      while (end < n && level[by_level[end]] == l) width += !skip[by_level[end++]];
      memset(load, 0, sizeof(int) * (size_t)D);
      for (; i < end; i++) {
        int v = by_level[i];
        if (skip[v]) continue;
        int g = pg->group[v], set = pg->allow[g], d = gdev[g];
        if (d < 0) {
          stamp++;
          for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
            int u = pg->in_src[e];
            if (skip[u]) continue;
            int du = device[u];
            if (vstamp[du] != stamp) vstamp[du] = stamp, vote[du] = 0;
            vote[du] += 1 + (e == pg->in_off[v] ? 1e-3 : 0) + 1e-6 * pg->in_bytes[e] / max_bytes;
          }
          double best = 0;
          for (int k = 0; k < D; k++)
            if (vstamp[k] == stamp && vote[k] > best && gr_place_allowed(pg, set, k) &&
                load[k] < ceil(width * share[k]))
              best = vote[k], d = k;
          for (int k = 0; k < D && d < 0; k++)
            if (gr_place_allowed(pg, set, k) && load[k] < ceil(width * share[k])) d = k;
          for (int k = 0; k < D && d < 0; k++) /* every allowed device full: the first */
            if (gr_place_allowed(pg, set, k)) d = k;
          gdev[g] = d;
        }
        device[v] = d;
        load[d]++;
      }
    }
    for (int v = 0; v < n; v++)
      if (skip[v]) device[v] = -1; /* the simulator puts it with its first consumer */
  }
  free(level);
  free(by_level);
  free(count);
  free(gdev);
  free(load);
  free(vstamp);
  free(share);
  free(vote);
  return ok;
}
