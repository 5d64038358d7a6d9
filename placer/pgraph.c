/* The compact graph the placer works on: flat arrays, nodes in topological
 * order (see gr_place_graph in gr_placer.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer/gr_placer.h"

gr_status gr_place_graph_init(gr_place_graph *pg, int n, int e, gr_error *err) {
  memset(pg, 0, sizeof *pg);
  if (n < 0 || e < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "place graph: negative size (%d nodes, %d edges)", n, e);
  size_t sn = (size_t)n, se = (size_t)e;
  pg->num_nodes = n;
  pg->num_edges = e;
  pg->flops = calloc(sn + 1, sizeof(double));
  pg->bytes = calloc(sn + 1, sizeof(double));
  pg->seconds = gr_alloc_array(sn + 1, sizeof(double));
  pg->in_off = calloc(sn + 1, sizeof(int));
  pg->in_src = calloc(se + 1, sizeof(int));
  pg->in_bytes = calloc(se + 1, sizeof(double));
  pg->group = gr_alloc_array(sn + 1, sizeof(int));
  pg->allow = gr_alloc_array(sn + 1, sizeof(int));
  pg->active = malloc(sn + 1);
  pg->runs = gr_alloc_array(sn + 1, sizeof(double));
  if (!pg->flops || !pg->bytes || !pg->seconds || !pg->in_off || !pg->in_src || !pg->in_bytes ||
      !pg->group || !pg->allow || !pg->active || !pg->runs) {
    gr_place_graph_free(pg);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "place graph: out of memory (%d nodes)", n);
  }
  for (int v = 0; v < n; v++) {
    pg->seconds[v] = -1;
    pg->group[v] = v;
    pg->allow[v] = -1;
    pg->runs[v] = 1;
  }
  memset(pg->active, 1, sn + 1);
  return GR_OK;
}

void gr_place_graph_free(gr_place_graph *pg) {
  free(pg->flops);
  free(pg->bytes);
  free(pg->seconds);
  free(pg->in_off);
  free(pg->in_src);
  free(pg->in_bytes);
  free(pg->group);
  free(pg->allow);
  free(pg->active);
  free(pg->runs);
  free(pg->allow_bits);
  memset(pg, 0, sizeof *pg);
}

int gr_place_graph_add_allow_set(gr_place_graph *pg, int num_devices, const int *devs, int n) {
  int words = (num_devices + 63) / 64;
  if (words < 1) words = 1;
  if (pg->allow_words && pg->allow_words != words) return -1;
  pg->allow_words = words;
  uint64_t *bits = gr_realloc_array(
      pg->allow_bits, (size_t)words * (size_t)(pg->num_allow_sets + 1), sizeof(uint64_t));
  if (!bits) return -1;
  pg->allow_bits = bits;
  uint64_t *set = bits + (size_t)words * (size_t)pg->num_allow_sets;
  memset(set, 0, sizeof(uint64_t) * (size_t)words);
  for (int i = 0; i < n; i++)
    if (devs[i] >= 0 && devs[i] < num_devices) set[devs[i] / 64] |= 1ull << (devs[i] % 64);
  return pg->num_allow_sets++;
}

gr_status gr_place_graph_check(const gr_place_graph *pg, int num_devices, gr_error *err) {
  int n = pg->num_nodes;
  if (pg->in_off[0] != 0 || pg->in_off[n] != pg->num_edges)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "place graph: in_off must start at 0 and end at %d edges", pg->num_edges);
  if (pg->num_allow_sets && pg->allow_words != (num_devices + 63) / 64)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "place graph: allowed sets were made for another number of devices");
  for (int v = 0; v < n; v++) {
    if (pg->in_off[v + 1] < pg->in_off[v])
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "place graph: node %d: in_off decreases",
                          v);
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      if (pg->in_src[e] < 0 || pg->in_src[e] >= v)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "place graph: node %d: input %d is not an earlier node (nodes must be "
                            "in topological order)",
                            v, pg->in_src[e]);
      if (!(pg->in_bytes[e] >= 0) || !isfinite(pg->in_bytes[e]))
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "place graph: node %d: bad edge bytes",
                            v);
    }
    if (!(pg->flops[v] >= 0) || !isfinite(pg->flops[v]) || !(pg->bytes[v] >= 0) ||
        !isfinite(pg->bytes[v]) || !isfinite(pg->seconds[v]) || !(pg->runs[v] >= 1) ||
        !isfinite(pg->runs[v]))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "place graph: node %d: bad cost", v);
    int g = pg->group[v];
    if (g < 0 || g >= n || pg->group[g] != g)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "place graph: node %d: group %d is not a representative", v, g);
    if (pg->allow[v] < -1 || pg->allow[v] >= pg->num_allow_sets)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "place graph: node %d: bad allowed set", v);
  }
  return GR_OK;
}
