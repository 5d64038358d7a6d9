/* Trying a placement's candidates on the runtime (gr_placement_try): the
 * sessions of each distinct candidate, measured side by side, and fitting
 * the servers' time scale to a measured step (gr_placement_fit_scale).
 * What `graphrun place --measure`, `graphrun calibrate` and
 * bench-placer-real do with a running cluster. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "place_internal.h"

/* The devices a trial of candidate k assigns (k: chosen for COST). */
static gr_place_candidate as_of(const gr_placement *p, int k) {
  return k == GR_PLACE_CAND_COST ? p->r.chosen : (gr_place_candidate)k;
}

/* Candidates a and b put every node of the step on the same device (the
 * nodes outside it do not run in the step). */
static bool same_step(const gr_placement *p, gr_place_candidate a, gr_place_candidate b) {
  for (int i = 0; i < p->n; i++)
    if (p->pg.active[i] && p->r.cand_device[a][i] != p->r.cand_device[b][i]) return false;
  return true;
}

static void clear_devices(gr_graph *g) {
  for (int i = 0; i < gr_graph_num_nodes(g); i++) gr_graph_node(g, i)->assigned_device = NULL;
}

/* Assigns candidate k's devices (pins only: none, as a run with pins does). */
static gr_status assign(gr_placement *p, gr_place_candidate k, gr_error *err) {
  if (k == GR_PLACE_CAND_PINS) {
    clear_devices(p->graph);
    return GR_OK;
  }
  return gr_placement_apply(p, k, err);
}

gr_status gr_placement_try(gr_placement *p, const gr_output *fetches, int num_fetches,
                           const gr_output *targets, int num_targets, const gr_place_opener *o,
                           unsigned mask, int max_steps, double budget, int rounds,
                           gr_place_trial *out, int *steps, gr_error *err) {
  gr_place_run runs[GR_PLACE_CAND_COUNT];
  int run_of[GR_PLACE_CAND_COUNT], nruns = 0;
  double slowest = 0;
  gr_status st = GR_OK;
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) {
    out[k] = (gr_place_trial){.same_as = -1};
    run_of[k] = -1;
    gr_place_candidate a = as_of(p, k);
    if (!(mask >> k & 1) || !p->r.cand_device[a] || st != GR_OK) continue;
    out[k].tried = true;
    out[k].predicted = p->r.cand_time[a];
    if (out[k].predicted > slowest) slowest = out[k].predicted;
    for (int j = 0; j < k && out[k].same_as < 0; j++)
      if (out[j].tried && same_step(p, a, as_of(p, j))) out[k].same_as = j, run_of[k] = run_of[j];
    if (run_of[k] >= 0) continue;
    if ((st = assign(p, a, err)) != GR_OK) break;
    gr_session *s = o->open(o->arg, p->graph, err);
    if (!s) {
      st = err ? err->code : GR_ERR_INTERNAL;
      break;
    }
    runs[nruns] = (gr_place_run){s, fetches, targets, num_fetches, num_targets};
    run_of[k] = nruns++;
    /* prepared with these devices now: the next assignment does not touch it */
    gr_step_stats t;
    st = gr_place_measure(&runs[run_of[k]], 1, 1, 1, &t, err);
    if (st != GR_OK) gr_error_prefix(err, "candidate '%s'", gr_place_candidate_name(a));
  }
  int n = max_steps;
  if (slowest > 0 && budget > 0) {
    double x = budget / slowest;
    n = x < 20 ? 20 : x > max_steps ? max_steps : (int)x;
    if (n > max_steps) n = max_steps;
  }
  if (steps) *steps = n;
  gr_step_stats stats[GR_PLACE_CAND_COUNT];
  if (st == GR_OK && nruns) st = gr_place_measure(runs, nruns, n, rounds, stats, err);
  for (int k = 0; st == GR_OK && k < GR_PLACE_CAND_COUNT; k++)
    if (out[k].tried) out[k].measured = stats[run_of[k]];
  for (int i = 0; i < nruns; i++) o->close(o->arg, runs[i].session);
  gr_status restored = assign(p, p->r.chosen, err);
  return st != GR_OK ? st : restored;
}

gr_status gr_placement_fit_scale(const gr_placement *p, gr_cluster *c, double measured,
                                 double *factor, gr_error *err) {
  double pred = gr_placement_candidate_time(p, GR_PLACE_CAND_PINS),
         costs = gr_placement_step_costs(p, GR_PLACE_CAND_PINS);
  double f =
      isfinite(pred) && pred > costs && measured > costs ? (measured - costs) / (pred - costs) : 1;
  f = f < 0.3 ? 0.3 : f > 5 ? 5 : f;
  if (factor) *factor = f;
  return gr_cluster_scale_servers(c, f, err);
}
