/* The obvious placements the cost placer is compared with, each rated by
 * the same simulator (gr_place_sim_run), so the placement returned is never
 * rated slower than any of them:
 *
 *   - one task: every node on device b, a pinned group on b when its pins
 *     allow b, else on the first device they allow; b runs over the device
 *     kinds (or over the first 16 devices when pins make the place matter)
 *     in session order and the best b is kept (ties: the earlier);
 *   - pins only: what `--placement pins` runs: a pinned group on the first
 *     device of the session order its pins allow, everything else on the
 *     session's first device;
 *   - round robin by layer: layer L (numbered by first appearance) on the
 *     device L mod D of the session order, a colocation group with its first
 *     member's layer, a pinned group on the first allowed device of the
 *     session order when that one is not allowed.
 *
 * Every candidate keeps the colocation groups whole: a device is chosen per
 * group (its members share pg->group) and every member gets it. Free
 * sources are left at -1 (the simulator puts them with their first
 * consumer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

const char *gr_place_candidate_name(gr_place_candidate k) {
  static const char *const names[GR_PLACE_CAND_COUNT] = {"cost", "one-task", "pins", "layers"};
  return (unsigned)k < GR_PLACE_CAND_COUNT ? names[k] : "?";
}

/* The first device of the session order that set allows (the first device
 * when none: checked before). */
static int first_allowed(const gr_place_graph *pg, const int *sorder, int D, int set) {
  for (int k = 0; k < D; k++)
    if (gr_place_allowed(pg, set, sorder[k])) return sorder[k];
  return sorder[0];
}

static bool same_kind(const gr_cluster *c, int a, int b) {
  const gr_cluster_device *x = &c->devices[a], *y = &c->devices[b];
  return x->flops == y->flops && x->mem_bandwidth == y->mem_bandwidth &&
         x->overhead == y->overhead && x->time_scale == y->time_scale &&
         c->tasks[x->task].threads == c->tasks[y->task].threads &&
         gr_cluster_task_step(c, x->task) == gr_cluster_task_step(c, y->task) &&
         gr_cluster_host_cores(c, x->host) == gr_cluster_host_cores(c, y->host);
}

/* Keeps cand (device per node, rated t) as candidate k when it is faster
 * than what k holds. false when out of memory. */
static bool offer(int n, gr_place_result *r, gr_place_candidate k, const int *cand, double t) {
  if (!(t < r->cand_time[k])) return true;
  if (!r->cand_device[k] && !(r->cand_device[k] = gr_alloc_array((size_t)n + 1, sizeof(int))))
    return false;
  memcpy(r->cand_device[k], cand, sizeof(int) * (size_t)n);
  r->cand_time[k] = t;
  return true;
}

bool gr_place_candidates(const gr_place_graph *pg, const gr_cluster *c, gr_place_sim *s,
                         const int *layer, gr_place_result *r) {
  int n = pg->num_nodes, D = c->num_devices;
  const uint8_t *deferred = gr_place_sim_deferred(s);
  const int *sorder = gr_place_sim_session_order(s);
  int *cand = gr_alloc_array((size_t)n + 1, sizeof(int));
  int *gdev = gr_alloc_array((size_t)n + 1, sizeof(int));
  bool ok = cand && gdev;
  /* one task: each device kind, in session order (ties: the session's first) */
  for (int j = 0; ok && j < D; j++) {
    int b = sorder[j];
    bool distinct = true;
    if (!pg->num_allow_sets || j >= 16)
      for (int i = 0; i < j && distinct; i++) distinct = !same_kind(c, sorder[i], b);
    if (!distinct) continue;
    for (int v = 0; v < n; v++) {
      int set = pg->allow[pg->group[v]], k = b;
      if (!gr_place_allowed(pg, set, k))
        for (k = 0; k < D && !gr_place_allowed(pg, set, k); k++) {}
      cand[v] = deferred[v] ? -1 : k;
    }
    double t = gr_place_sim_run(s, cand, NULL);
    if (t < r->baseline_time) r->baseline_time = t, r->baseline_device = b;
    ok = offer(n, r, GR_PLACE_CAND_ONE_TASK, cand, t);
  }
  /* pins only: the same as one task on the session's first device when no
   * pin decides otherwise (not simulated twice) */
  if (ok) {
    for (int v = 0; v < n; v++) {
      int set = pg->allow[pg->group[v]];
      cand[v] = deferred[v] ? -1 : set < 0 ? sorder[0] : first_allowed(pg, sorder, D, set);
    }
    const int *one = r->cand_device[GR_PLACE_CAND_ONE_TASK];
    bool same = one && memcmp(one, cand, sizeof(int) * (size_t)n) == 0;
    double t = same ? r->cand_time[GR_PLACE_CAND_ONE_TASK] : gr_place_sim_run(s, cand, NULL);
    ok = offer(n, r, GR_PLACE_CAND_PINS, cand, t);
  }
  /* round robin by layer; a group takes its first member's (the
   * representative's: the group's first node) layer */
  if (ok && layer) {
    for (int v = 0; v < n; v++) gdev[v] = -1;
    for (int v = 0; v < n; v++) {
      int g = pg->group[v], set = pg->allow[g];
      if (gdev[g] < 0) {
        int l = layer[g] >= 0 ? layer[g] : 0, d = sorder[l % D];
        gdev[g] = gr_place_allowed(pg, set, d) ? d : first_allowed(pg, sorder, D, set);
      }
      cand[v] = deferred[v] ? -1 : gdev[g];
    }
    ok = offer(n, r, GR_PLACE_CAND_LAYERS, cand, gr_place_sim_run(s, cand, NULL));
  }
  free(cand);
  free(gdev);
  return ok;
}
