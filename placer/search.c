/* The local search over placements of small graphs (docs/placement.md):
 * hill climbing with the placer's own simulator as the score.
 *
 * A unit is what moves as one: a layer (gr_place_options.layer) together
 * with every colocation group one of its nodes belongs to (a variable and
 * its updates never part), or, without layers, a colocation group. Free
 * sources are in no unit (they follow their first consumer). A move puts
 * every node of a unit on another device that all their groups allow; it is
 * kept when the simulated step is shorter. Passes go over the units in
 * order of first appearance and the devices in session order, until a pass
 * keeps no move or the budget of simulations is spent. Deterministic. */
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

static int find(int *p, int x) {
  while (p[x] != x) x = p[x] = p[p[x]];
  return x;
}

bool gr_place_search(const gr_place_graph *pg, const gr_cluster *c, gr_place_sim *s,
                     const int *layer, int budget, int *device, double *t, int *moves, int *sims) {
  int n = pg->num_nodes, D = c->num_devices;
  const uint8_t *deferred = gr_place_sim_deferred(s);
  const int *sorder = gr_place_sim_session_order(s);
  size_t sn = (size_t)n + 1;
  int *parent = gr_alloc_array(sn, sizeof(int)), *first = gr_alloc_array(sn, sizeof(int));
  int *off = calloc(sn + 1, sizeof(int)), *member = gr_alloc_array(sn, sizeof(int));
  int *uid = gr_alloc_array(sn, sizeof(int));
  uint8_t *allowed = NULL, *busy = NULL;
  bool ok = parent && first && off && member && uid;
  *moves = *sims = 0;
  int nu = 0;
  if (ok) {
    for (int v = 0; v < n; v++) parent[v] = v, first[v] = -1;
    for (int v = 0; v < n; v++) {
      if (deferred[v]) continue;
      int a = find(parent, v), b = find(parent, pg->group[v]);
      if (a != b) parent[a > b ? a : b] = a < b ? a : b;
      if (layer && layer[v] >= 0 && layer[v] < n) {
        if (first[layer[v]] < 0) first[layer[v]] = v;
        a = find(parent, v), b = find(parent, first[layer[v]]);
        if (a != b) parent[a > b ? a : b] = a < b ? a : b;
      }
    }
    /* units numbered by their first node; members in CSR */
    for (int v = 0; v < n; v++) uid[v] = -1;
    for (int v = 0; v < n; v++) {
      if (deferred[v]) continue;
      int root = find(parent, v);
      if (uid[root] < 0) uid[root] = nu++;
      off[uid[root] + 1]++;
    }
    for (int u = 0; u < nu; u++) off[u + 1] += off[u];
    memcpy(first, off, sizeof(int) * (size_t)nu);
    for (int v = 0; v < n; v++)
      if (!deferred[v]) member[first[uid[find(parent, v)]]++] = v;
    allowed = calloc((size_t)nu * (size_t)D + 1, 1);
    busy = calloc((size_t)nu + 1, 1);
    ok = allowed && busy;
  }
  for (int u = 0; ok && u < nu; u++) {
    uint8_t *a = allowed + (size_t)u * (size_t)D;
    memset(a, 1, (size_t)D);
    for (int i = off[u]; i < off[u + 1]; i++) {
      int v = member[i], set = pg->allow[pg->group[v]];
      busy[u] |= pg->active[v];
      for (int k = 0; k < D; k++) a[k] &= gr_place_allowed(pg, set, k);
    }
  }
  if (ok) { /* free sources follow their consumers wherever the units go */
    for (int v = 0; v < n; v++)
      if (deferred[v]) device[v] = -1;
    *t = gr_place_sim_run(s, device, NULL);
  }
  for (bool improved = ok; improved && *sims < budget;) {
    improved = false;
    for (int u = 0; u < nu && *sims < budget; u++) {
      if (!busy[u]) continue; /* outside the step: moving it changes nothing */
      const uint8_t *a = allowed + (size_t)u * (size_t)D;
      int cur = device[member[off[u]]];
      for (int j = 0; j < D && *sims < budget; j++) {
        int k = sorder[j];
        if (k == cur || !a[k]) continue;
        for (int i = off[u]; i < off[u + 1]; i++) device[member[i]] = k;
        double x = gr_place_sim_run(s, device, NULL);
        ++*sims;
        if (x >= 0 && x < *t * (1 - 1e-9)) {
          *t = x, cur = k, improved = true;
          ++*moves;
        }
      }
      for (int i = off[u]; i < off[u + 1]; i++) device[member[i]] = cur;
    }
  }
  free(parent);
  free(first);
  free(off);
  free(member);
  free(uid);
  free(allowed);
  free(busy);
  return ok;
}
