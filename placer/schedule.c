/* Placing a compact graph (gr_place_schedule): the greedy variants (sched.c),
 * then the locality placement, the obvious candidates (candidates.c) and,
 * when asked, the local search (search.c), each rated by the simulator (the
 * dataflow one, dataflow.c, when the options ask), the fastest returned
 * (pins only kept within the options' margin); and the accessors the
 * candidates and the search simulate through (gr_place_sim_*). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

typedef struct variant_job {
  sched *s;
  uint8_t *reason;
  double t;
} variant_job;

static void *run_variant(void *arg) {
  variant_job *j = arg;
  j->t = gr_sched_run(j->s, NULL, j->reason, NULL);
  return NULL;
}

void gr_place_result_free(gr_place_result *r) {
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) free(r->cand_device[k]);
  free(r->device);
  free(r->start);
  free(r->finish);
  free(r->reason);
  free(r->cause);
  free(r->cand_finish);
  memset(r, 0, sizeof *r);
}

static void copy_out(const sched *s, gr_place_result *r) {
  for (int v = 0; v < s->n; v++) {
    r->device[v] = s->ns[v].dev;
    r->finish[v] = s->ns[v].fin;
  }
  memcpy(r->start, s->st, sizeof(double) * (size_t)s->n);
}

/* The result's arrays for n nodes on D devices (cand_finish when recording);
 * false when out of memory. */
static bool alloc_result(gr_place_result *r, int n, int D, bool record) {
  size_t sn = (size_t)n + 1;
  r->device = gr_alloc_array(sn, sizeof(int));
  r->start = gr_alloc_array(sn, sizeof(double));
  r->finish = gr_alloc_array(sn, sizeof(double));
  r->reason = calloc(2 * sn, 1);
  r->cause = gr_alloc_array(sn, sizeof(int));
  if (record) {
    r->cand_finish = gr_alloc_array(sn * (size_t)D, sizeof(double));
    if (r->cand_finish)
      for (size_t i = 0; i < sn * (size_t)D; i++) r->cand_finish[i] = INFINITY;
  }
  return r->device && r->start && r->finish && r->reason && r->cause && (!record || r->cand_finish);
}

/* Every group needs an allowed device. */
static gr_status check_allowed(const gr_place_graph *pg, int D, gr_error *err) {
  for (int v = 0; v < pg->num_nodes; v++) {
    int set = pg->allow[pg->group[v]], k = 0;
    while (k < D && !gr_place_allowed(pg, set, k)) k++;
    if (k == D)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "placer: node %d: no device satisfies its group's constraints", v);
  }
  return GR_OK;
}

/* Greedy variants, the faster by the simulation kept (ties: the first):
 * with consumer affinity, and plain earliest finish. (Judging devices
 * without link contention, as HEFT does, was tried as a third and almost
 * never won.) With a second state (s2: large graphs) the two run at once
 * on two threads. */
static void place_greedy(sched *s, sched *s2, const gr_place_options *opts, gr_place_result *r) {
  static const double weights[] = {1, 0};
  int n = s->n;
  size_t sn = (size_t)n + 1;
  double times[2] = {0, 0};
  bool two = s2 != NULL;
  if (two) {
    pthread_t th;
    s2->aff_weight = weights[1];
    variant_job job = {s2, r->reason + sn, 0};
    if (pthread_create(&th, NULL, run_variant, &job) != 0) {
      two = false;
    } else {
      s->aff_weight = weights[0];
      times[0] = gr_sched_run(s, NULL, r->reason, NULL);
      pthread_join(th, NULL);
      times[1] = job.t;
    }
  }
  if (!two) {
    s->aff_weight = weights[0];
    times[0] = gr_sched_run(s, NULL, r->reason, r->cand_finish);
    r->greedy_time = times[0];
    r->cross_bytes = s->cross;
    copy_out(s, r);
    memcpy(r->cause, s->cause, sizeof(int) * (size_t)n);
    if (!opts->record) { /* one variant keeps the recorded comparisons consistent */
      s->aff_weight = weights[1];
      times[1] = gr_sched_run(s, NULL, r->reason + sn, NULL);
      if (times[1] < times[0]) {
        r->greedy_time = times[1];
        r->cross_bytes = s->cross;
        copy_out(s, r);
        memcpy(r->cause, s->cause, sizeof(int) * (size_t)n);
        memcpy(r->reason, r->reason + sn, (size_t)n);
      }
    }
  } else {
    const sched *w = times[1] < times[0] ? s2 : s;
    r->greedy_time = times[1] < times[0] ? times[1] : times[0];
    r->cross_bytes = w->cross;
    copy_out(w, r);
    memcpy(r->cause, w->cause, sizeof(int) * (size_t)n);
    if (w == s2) memcpy(r->reason, r->reason + sn, (size_t)n);
  }
  r->step_time = r->greedy_time;
}

typedef struct candidates_job {
  const gr_place_graph *pg;
  const gr_cluster *c;
  sched *s;
  const int *layer;
  gr_place_result *r;
  bool ok;
} candidates_job;

static void *run_candidates(void *arg) {
  candidates_job *j = arg;
  j->ok = gr_place_candidates(j->pg, j->c, j->s, j->layer, j->r);
  return NULL;
}

/* The predicted step of a fixed placement: the dataflow simulation when the
 * options asked for it, else the rank-order one (run). */
static double rate(sched *s, const int *device, double *cross) {
  if (s->flow) return gr_dataflow_run(s->flow, device, cross, NULL, NULL);
  double t = gr_sched_run(s, device, NULL, NULL);
  if (cross) *cross = s->cross;
  return t;
}

/* Takes the placement rate() just rated as the result: its devices (what
 * gr_sched_run() resolves; with the rank-order simulation rate() ran it already),
 * start and finish times and bytes moved. */
static void adopt(sched *s, const int *device, gr_place_result *r) {
  if (s->flow) gr_sched_run(s, device, NULL, NULL);
  r->cross_bytes = s->cross;
  copy_out(s, r);
}

/* The locality placement (locality.c), kept when the simulation rates it
 * faster: on wide graphs with costly transfers contiguous blocks beat
 * node-by-node earliest finish. skip: free sources and nodes outside the
 * step; cand_dev: room for a device per node. */
static void try_locality(const gr_place_graph *pg, const gr_cluster *c, sched *s,
                         const uint8_t *skip, int *cand_dev, gr_place_result *r) {
  r->locality_time = INFINITY;
  if (!gr_place_locality(pg, c, skip, cand_dev)) return;
  r->locality_time = rate(s, cand_dev, NULL);
  if (r->locality_time < r->step_time) {
    r->step_time = r->locality_time;
    r->by_locality = true;
    adopt(s, cand_dev, r);
    for (int v = 0; v < s->n; v++)
      if (r->reason[v] == GR_PLACE_CHOSEN)
        r->reason[v] = GR_PLACE_LOCALITY;
      else if (r->reason[v] == GR_PLACE_CONSUMER || r->reason[v] == GR_PLACE_OUTSIDE)
        r->cause[v] = s->cause[v];
  }
}

double gr_place_sim_run(gr_place_sim *s, const int *device, double *cross) {
  return rate(s, device, cross);
}

const uint8_t *gr_place_sim_deferred(const gr_place_sim *s) {
  return s->deferred;
}

const int *gr_place_sim_session_order(const gr_place_sim *s) {
  return s->sorder;
}

/* The local search from the best placement so far (the cost placement or
 * a candidate's); kept as the cost placement when it is faster. */
static void try_search(const gr_place_graph *pg, const gr_cluster *c, sched *s,
                       const gr_place_options *o, int *dev, gr_place_result *r) {
  gr_place_candidate from = GR_PLACE_CAND_COST;
  for (int k = 1; k < GR_PLACE_CAND_COUNT; k++)
    if (r->cand_device[k] && r->cand_time[k] < r->cand_time[from]) from = (gr_place_candidate)k;
  memcpy(dev, from == GR_PLACE_CAND_COST ? r->device : r->cand_device[from],
         sizeof(int) * (size_t)s->n);
  double t = r->cand_time[from];
  if (!gr_place_search(pg, c, s, o->layer, o->search_budget, dev, &t, &r->search_moves,
                       &r->search_sims))
    return;
  r->search_time = t;
  if (!(t < r->step_time)) return;
  r->step_time = r->cand_time[GR_PLACE_CAND_COST] = rate(s, dev, NULL);
  if (s->flow) gr_sched_run(s, dev, NULL, NULL);
  r->cross_bytes = s->cross;
  for (int v = 0; v < s->n; v++)
    if (s->ns[v].dev != r->device[v] && r->reason[v] != GR_PLACE_COLOCATED &&
        r->reason[v] != GR_PLACE_PINNED)
      r->reason[v] = GR_PLACE_SEARCH, r->cause[v] = s->cause[v];
  memcpy(r->cand_device[GR_PLACE_CAND_COST], dev, sizeof(int) * (size_t)s->n);
  copy_out(s, r);
}

/* The best candidate replaces the cost placement when the simulator rates
 * it faster (ties: the cost placement); and pins only, the placement a run
 * gets without asking, stays unless another is rated faster by min_gain. */
static void choose(sched *s, double min_gain, gr_place_result *r) {
  r->chosen = GR_PLACE_CAND_COST;
  for (int k = 1; k < GR_PLACE_CAND_COUNT; k++)
    if (r->cand_device[k] && r->cand_time[k] < r->cand_time[r->chosen])
      r->chosen = (gr_place_candidate)k;
  const int pins = GR_PLACE_CAND_PINS;
  if (min_gain > 0 && r->cand_device[pins] &&
      !(r->cand_time[r->chosen] < r->cand_time[pins] * (1 - min_gain)))
    r->chosen = GR_PLACE_CAND_PINS;
  if (r->chosen == GR_PLACE_CAND_COST) return;
  r->step_time = rate(s, r->cand_device[r->chosen], NULL);
  r->fell_back = true;
  r->by_locality = false;
  adopt(s, r->cand_device[r->chosen], r);
  for (int v = 0; v < s->n; v++)
    if (r->reason[v] == GR_PLACE_CHOSEN || r->reason[v] == GR_PLACE_CONSUMER ||
        r->reason[v] == GR_PLACE_LOCALITY || r->reason[v] == GR_PLACE_SEARCH)
      r->reason[v] = r->chosen == GR_PLACE_CAND_ONE_TASK ? GR_PLACE_FALLBACK : GR_PLACE_CANDIDATE;
}

/* Places every node: the greedy variants, then the locality placement, the
 * obvious candidates (one task, pins only, by layer) and, when asked, the
 * local search; the fastest by the simulation is returned. */
static gr_status schedule(const gr_place_graph *pg, const gr_cluster *c, const gr_place_options *o,
                          gr_place_result *r, gr_error *err) {
  memset(r, 0, sizeof *r);
  int n = pg->num_nodes, D = c->num_devices;
  if (D < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "placer: the cluster has no devices");
  GR_TRY(gr_place_graph_check(pg, D, err));
  gr_place_options opts = o ? *o : (gr_place_options){0};
  sched s;
  void *block = NULL;
  bool ok =
      gr_sched_init(&s, pg, c, &block) && gr_sched_order(&s) && gr_sched_pinned_successors(&s);
  ok = alloc_result(r, n, D, opts.record) && ok;
  int *cand_dev = gr_alloc_array((size_t)n + 1, sizeof(int));
  uint8_t *skip = malloc((size_t)n + 1);
  r->cand_device[GR_PLACE_CAND_COST] = gr_alloc_array((size_t)n + 1, sizeof(int));
  gr_status st =
      !ok || !cand_dev || !skip || !r->cand_device[GR_PLACE_CAND_COST]
          ? gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory (%d nodes)", n)
          : check_allowed(pg, D, err);
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) r->cand_time[k] = INFINITY;
  r->search_time = INFINITY;
  r->baseline_time = INFINITY;
  r->baseline_device = -1;
  r->num_devices = D;
  if (st == GR_OK && opts.dataflow) {
    s.pos = gr_alloc_array((size_t)n + 1, sizeof(int));
    for (int i = 0; s.pos && i < n; i++) s.pos[s.order[i]] = i;
    if (!s.pos || !(s.flow = gr_dataflow_new(pg, c, s.pos, s.deferred, s.sorder)))
      st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory (%d nodes)", n);
  }
  /* A second state for large graphs: the second greedy variant on its own
   * thread, then (when the rank-order simulation rates) the candidates
   * beside the locality placement; they write disjoint fields of r. */
  sched s2;
  void *block2 = NULL;
  bool two = st == GR_OK && !opts.record && n >= 50000 && gr_sched_clone(&s2, &s, &block2);
  if (st == GR_OK) {
    for (int v = 0; v < n; v++) skip[v] = s.deferred[v] || !gr_sched_active(&s, v);
    place_greedy(&s, two ? &s2 : NULL, &opts, r);
    if (s.flow) r->step_time = r->greedy_time = rate(&s, r->device, NULL);
    candidates_job cj = {pg, c, two && !s.flow ? &s2 : &s, opts.layer, r, false};
    pthread_t th;
    bool beside = two && !s.flow && pthread_create(&th, NULL, run_candidates, &cj) == 0;
    if (opts.no_fallback)
      r->locality_time = INFINITY;
    else
      try_locality(pg, c, &s, skip, cand_dev, r);
    r->cand_time[GR_PLACE_CAND_COST] = r->step_time;
    memcpy(r->cand_device[GR_PLACE_CAND_COST], r->device, sizeof(int) * (size_t)n);
    if (beside)
      pthread_join(th, NULL);
    else
      run_candidates(&cj);
    if (!cj.ok)
      st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "placer: out of memory (%d nodes)", n);
  }
  if (two) {
    free(block2);
    free(s2.gin);
    free(s2.res);
  }
  if (st == GR_OK && !opts.no_fallback && opts.search_budget > 0 && n < GR_PLACE_SEARCH_MAX_NODES)
    try_search(pg, c, &s, &opts, cand_dev, r);
  if (st == GR_OK && !opts.no_fallback) choose(&s, opts.min_gain, r);
  if (st == GR_OK && s.flow) /* the dataflow simulation's times and bytes */
    r->step_time = gr_dataflow_run(s.flow, r->device, &r->cross_bytes, r->start, r->finish);
  for (int k = 0; st == GR_OK && opts.resolve_candidates && k < GR_PLACE_CAND_COUNT; k++)
    if (r->cand_device[k]) {
      gr_sched_run(&s, r->cand_device[k], NULL, NULL);
      for (int v = 0; v < n; v++) r->cand_device[k][v] = s.ns[v].dev;
    }
  gr_dataflow_free(s.flow);
  free(s.pos);
  gr_sched_free(&s, block);
  free(cand_dev);
  free(skip);
  if (st != GR_OK) gr_place_result_free(r);
  return st;
}

gr_status gr_place_schedule(const gr_place_graph *pg, const gr_cluster *c,
                            const gr_place_options *o, gr_place_result *r, gr_error *err) {
  return schedule(pg, c, o, r, err);
}
