/* Kernel times of a step, measured in this process and kept in the profile
 * database (gr_profile_db_record_step, docs/placement.md "Profiles"): the
 * step runs in a session of one device and one inter-op thread, as a task
 * of `graphrun launch` runs its share, each run traced; a node's time is
 * what its trace events add up to in one step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One step's time per node id into per_node (zeroed first): its kernels'
 * time, plus for each of its runs an equal share of what the step took
 * beyond all kernels (the executor's work between them: more in loops);
 * its wall time into *wall; each run's (node, seconds) appended to runs. */
typedef struct run_time {
  int node;
  double seconds;
} run_time;

static gr_status time_step(gr_session *s, gr_graph *g, const gr_feed *feeds, int nfeeds,
                           const gr_output *fetches, int nfetch, const gr_output *targets,
                           int ntargets, gr_step_trace *tr, double *per_node, double *wall,
                           run_time **runs, int *nruns, int *cap, gr_error *err) {
  gr_tensor *out = calloc((size_t)nfetch + 1, sizeof *out);
  if (!out) return gr_error_set_oom(err);
  gr_step_trace_clear(tr);
  int64_t t0 = gr_trace_now_ns();
  gr_status st =
      gr_session_run_traced(s, feeds, nfeeds, fetches, nfetch, out, targets, ntargets, tr, err);
  *wall = (double)(gr_trace_now_ns() - t0) * 1e-9;
  for (int i = 0; i < nfetch; i++) gr_tensor_release(&out[i]);
  free(out);
  if (st != GR_OK) return st;
  memset(per_node, 0, sizeof(double) * (size_t)gr_graph_num_nodes(g));
  int first = nruns ? *nruns : 0, counted = 0;
  double kernels = 0;
  for (int i = 0; i < gr_step_trace_count(tr); i++) {
    const gr_trace_event *e = gr_step_trace_event(tr, i);
    const gr_node *n = gr_graph_find_node(g, e->node->name);
    if (!n) continue; /* a node the session added (a transfer) */
    double x = (double)(e->end_ns - e->start_ns) * 1e-9;
    per_node[n->id] += x > 0 ? x : 0;
    kernels += x > 0 ? x : 0;
    counted++;
    if (runs) {
      if (*nruns == *cap) {
        int nc = *cap ? *cap * 2 : 1024;
        run_time *r = gr_realloc_array(*runs, (size_t)nc, sizeof *r);
        if (!r) return gr_error_set_oom(err);
        *runs = r, *cap = nc;
      }
      (*runs)[(*nruns)++] = (run_time){n->id, x > 0 ? x : 0};
    }
  }
  double between = counted && *wall > kernels ? (*wall - kernels) / counted : 0;
  for (int i = 0; i < gr_step_trace_count(tr); i++) {
    const gr_node *n = gr_graph_find_node(g, gr_step_trace_event(tr, i)->node->name);
    if (n) per_node[n->id] += between;
  }
  for (int i = first; runs && nruns && i < *nruns; i++) (*runs)[i].seconds += between;
  return GR_OK;
}

gr_status gr_profile_db_record_step(gr_profile_db *db, gr_graph *g, const gr_feed *feeds,
                                    int num_feeds, const gr_output *fetches, int num_fetches,
                                    const gr_output *targets, int num_targets, int steps,
                                    int *nodes, gr_error *err) {
  if (nodes) *nodes = 0;
  if (steps < 1) steps = 1;
  int n = gr_graph_num_nodes(g);
  uint64_t fp = gr_cost_graph_fingerprint(g); /* before the session touches g */
  gr_session_options so = {.inter_op_threads = 1, .num_devices = 1, .soft_placement = true};
  gr_session *s = gr_session_new(g, &so, err);
  if (!s) return err ? err->code : GR_ERR_INTERNAL;
  gr_step_trace *tr = gr_step_trace_new();
  double *per_node = gr_alloc_array((size_t)steps * (size_t)n + 1, sizeof(double));
  double *wall = gr_alloc_array((size_t)steps + 1, sizeof(double)),
         *sorted = gr_alloc_array((size_t)steps + 1, sizeof(double));
  run_time **runs = calloc((size_t)steps + 1, sizeof *runs);
  int *nruns = calloc((size_t)steps + 1, sizeof(int)),
      *caps = calloc((size_t)steps + 1, sizeof(int));
  gr_status st =
      tr && per_node && wall && sorted && runs && nruns && caps ? GR_OK : gr_error_set_oom(err);
  for (int k = -2; st == GR_OK && k < steps; k++) {
    bool timed = k >= 0;
    double w;
    st = time_step(s, g, feeds, num_feeds, fetches, num_fetches, targets, num_targets, tr,
                   timed ? per_node + (size_t)k * (size_t)n : per_node, timed ? &wall[k] : &w,
                   timed ? &runs[k] : NULL, timed ? &nruns[k] : NULL, timed ? &caps[k] : NULL, err);
  }
  double limit = INFINITY;
  bool began = false;
  if (st == GR_OK) {
    memcpy(sorted, wall, sizeof(double) * (size_t)steps);
    qsort(sorted, (size_t)steps, sizeof(double), cmp_double);
    limit = 1.5 * sorted[steps / 2];
    st = gr_profile_db_exec(db, "BEGIN", err);
    began = st == GR_OK;
  }
  char key[600];
  int recorded = 0;
  for (int v = 0; st == GR_OK && v < n; v++) {
    bool ran = false;
    for (int k = 0; k < steps && !ran; k++) ran = per_node[(size_t)k * (size_t)n + (size_t)v] > 0;
    if (!ran) continue;
    gr_cost_node_key(fp, gr_graph_node(g, v), false, key, sizeof key);
    for (int k = 0; st == GR_OK && k < steps; k++)
      if (wall[k] <= limit)
        st = gr_profile_db_record(db, key, per_node[(size_t)k * (size_t)n + (size_t)v], err);
    recorded++;
  }
  /* how often a node runs per step, where not once (loops) */
  int *count = calloc((size_t)n + 1, sizeof(int));
  uint8_t *loops = calloc((size_t)n + 1, 1);
  if (st == GR_OK && (!count || !loops)) st = gr_error_set_oom(err);
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; st == GR_OK && k < steps; k++) {
      if (wall[k] > limit) continue;
      memset(count, 0, sizeof(int) * (size_t)n);
      for (int i = 0; i < nruns[k]; i++) count[runs[k][i].node]++;
      for (int v = 0; st == GR_OK && v < n; v++) {
        if (pass == 0) {
          loops[v] |= count[v] > 1;
        } else if (loops[v]) {
          gr_cost_node_key(fp, gr_graph_node(g, v), true, key, sizeof key);
          st = gr_profile_db_record(db, key, count[v], err);
        }
      }
    }
  free(count);
  free(loops);
  for (int k = 0; st == GR_OK && k < steps; k++)
    for (int i = 0; st == GR_OK && wall[k] <= limit && i < nruns[k]; i++) {
      gr_cost_profile_key(gr_graph_node(g, runs[k][i].node), key, sizeof key);
      st = gr_profile_db_record(db, key, runs[k][i].seconds, err);
    }
  if (st == GR_OK)
    st = gr_profile_db_exec(db, "COMMIT", err);
  else if (began)
    gr_profile_db_exec(db, "ROLLBACK", NULL);
  if (st == GR_OK && nodes) *nodes = recorded;
  for (int k = 0; runs && k < steps; k++) free(runs[k]);
  free(runs);
  free(nruns);
  free(caps);
  free(per_node);
  free(wall);
  free(sorted);
  gr_step_trace_free(tr);
  gr_session_free(s);
  return st;
}
