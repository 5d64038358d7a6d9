/* Timing placements on the runtime (gr_place_measure): the steps of several
 * sessions, in rounds that alternate between them, medians per session.
 * What `graphrun place --measure` and bench-placer-real print beside the
 * predictions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer/gr_placer.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One step of run r; seconds into *t (may be NULL). */
static gr_status one_step(const gr_place_run *r, double *t, gr_error *err) {
  gr_tensor *out = calloc((size_t)r->num_fetches + 1, sizeof *out);
  if (!out) return gr_error_set_oom(err);
  int64_t t0 = gr_trace_now_ns();
  gr_status st = gr_session_run(r->session, NULL, 0, r->fetches, r->num_fetches, out, r->targets,
                                r->num_targets, err);
  if (t) *t = (double)(gr_trace_now_ns() - t0) * 1e-9;
  for (int i = 0; i < r->num_fetches; i++) gr_tensor_release(&out[i]);
  free(out);
  return st;
}

gr_status gr_place_measure(const gr_place_run *runs, int n, int steps, int rounds,
                           gr_step_stats *stats, gr_error *err) {
  if (rounds < 1) rounds = 1;
  int per = steps / rounds > 0 ? steps / rounds : 1, total = per * rounds;
  double *t = gr_alloc_array((size_t)n * (size_t)total + 1, sizeof(double));
  if (!t) return gr_error_set_oom(err);
  gr_status st = GR_OK;
  int i = 0;
  for (i = 0; st == GR_OK && i < n; i++)
    for (int w = 0; st == GR_OK && w < 3; w++) st = one_step(&runs[i], NULL, err);
  for (int r = 0; st == GR_OK && r < rounds; r++)
    for (i = 0; st == GR_OK && i < n; i++)
      for (int k = 0; st == GR_OK && k < per; k++)
        st = one_step(&runs[i], &t[(size_t)i * (size_t)total + (size_t)(r * per + k)], err);
  if (st != GR_OK) {
    gr_error_prefix(err, "placement %d", i - 1);
  } else {
    for (i = 0; i < n; i++) {
      double *x = t + (size_t)i * (size_t)total;
      qsort(x, (size_t)total, sizeof *x, cmp_double);
      stats[i] = (gr_step_stats){.median = total % 2 ? x[total / 2]
                                                     : 0.5 * (x[total / 2 - 1] + x[total / 2]),
                                 .low = x[total / 10],
                                 .spread = x[(3 * total) / 4] - x[total / 4]};
    }
  }
  free(t);
  return st;
}
