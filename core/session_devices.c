/* Multi-device steps: one executor per partition, run concurrently (device 0
 * on the calling thread, the others on the plan's runner threads), meeting
 * in a per-step rendezvous. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_device_plan.h"
#include "core/gr_rendezvous.h"
#include "core/step_watch_internal.h"

struct gr_device_plan {
  gr_partitions *parts;
  gr_executor **execs;
  gr_threadpool *runners; /* one thread per device beyond the first */
  int num_fetches;        /* caller fetches: the largest fetch_index + 1 */
};

gr_status gr_device_plan_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             gr_threadpool *pool, const gr_partition_options *opts,
                             gr_device_plan **out, gr_error *err) {
  *out = NULL;
  gr_partitions *parts;
  GR_TRY(gr_partition_graph(nodes, num_nodes, feeds, num_feeds, fetches, num_fetches, opts, &parts,
                            err));
  return gr_device_plan_new_from(parts, pool, out, err);
}

gr_status gr_device_plan_new_from(gr_partitions *parts, gr_threadpool *pool, gr_device_plan **out,
                                  gr_error *err) {
  *out = NULL;
  gr_device_plan *p = calloc(1, sizeof *p);
  if (!p) {
    gr_partitions_free(parts);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  p->parts = parts;
  gr_status st = GR_OK;
  int n = parts->num_parts;
  p->execs = calloc((size_t)n + 1, sizeof *p->execs);
  p->runners = gr_threadpool_new(n > 1 ? n - 1 : 0);
  if (!p->execs || !p->runners) st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0; k < n && st == GR_OK; k++) {
    gr_partition *pt = &parts->parts[k];
    for (int i = 0; i < pt->num_fetches; i++)
      if (pt->fetch_index[i] >= p->num_fetches) p->num_fetches = pt->fetch_index[i] + 1;
    st = gr_executor_new(pt->nodes, pt->num_nodes, pt->feeds, pt->num_feeds, pt->fetches,
                         pt->num_fetches, pool, &p->execs[k], err);
    if (st != GR_OK) gr_error_prefix(err, "device '%s'", pt->device);
  }
  if (st != GR_OK) {
    gr_device_plan_free(p);
    return st;
  }
  *out = p;
  return GR_OK;
}

int gr_device_plan_num_fetches(const gr_device_plan *p) {
  return p->num_fetches;
}

void gr_device_plan_free(gr_device_plan *p) {
  if (!p) return;
  gr_threadpool_free(p->runners);
  for (int k = 0; p->execs && k < p->parts->num_parts; k++) gr_executor_free(p->execs[k]);
  free(p->execs);
  gr_partitions_free(p->parts);
  free(p);
}

const gr_partitions *gr_device_plan_partitions(const gr_device_plan *p) {
  return p->parts;
}

typedef struct step_run {
  gr_device_plan *plan;
  const gr_tensor *feed_values;
  gr_tensor *fetch_out;
  gr_step_info step;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int remaining;
  gr_status status;
  gr_error err;
} step_run;

typedef struct part_arg {
  step_run *r;
  int k;
} part_arg;

static void run_part(step_run *r, int k) {
  gr_partition *pt = &r->plan->parts->parts[k];
  enum { SMALL = 16 };
  gr_tensor fv_small[SMALL], out_small[SMALL];
  gr_tensor *fv =
      pt->num_feeds <= SMALL ? fv_small : malloc(sizeof(gr_tensor) * (size_t)pt->num_feeds);
  gr_tensor *outs =
      pt->num_fetches <= SMALL ? out_small : malloc(sizeof(gr_tensor) * (size_t)pt->num_fetches);
  gr_error e;
  gr_status st;
  if (!fv || !outs) {
    st = gr_error_set(&e, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    for (int i = 0; i < pt->num_feeds; i++) fv[i] = r->feed_values[pt->feed_index[i]];
    st = gr_executor_run(r->plan->execs[k], fv, outs, &r->step, &e);
  }
  if (st == GR_OK) {
    for (int i = 0; i < pt->num_fetches; i++) r->fetch_out[pt->fetch_index[i]] = outs[i];
  } else {
    /* stop every other device's step: their pending receives fail */
    char msg[GR_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "step aborted: device '%s' failed", pt->device);
    gr_rendezvous_abort(r->step.rendezvous, GR_ERR_CANCELLED, msg);
  }
  if (fv != fv_small) free(fv);
  if (outs != out_small) free(outs);
  pthread_mutex_lock(&r->mu);
  /* the cause wins over the cancellations it caused */
  if (st != GR_OK &&
      (r->status == GR_OK || (r->status == GR_ERR_CANCELLED && st != GR_ERR_CANCELLED))) {
    r->status = st;
    r->err = e;
  }
  if (--r->remaining == 0) pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void run_part_closure(void *arg) {
  part_arg *a = arg;
  run_part(a->r, a->k);
}

gr_status gr_device_plan_run(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                             const gr_step_info *step, gr_transfer_stats *stats, gr_error *err) {
  int n = p->parts->num_parts;
  int nx = p->num_fetches;
  for (int i = 0; i < nx; i++) fetch_out[i] = gr_tensor_empty();
  step_run r = {
      .plan = p, .feed_values = feed_values, .fetch_out = fetch_out, .step = *step, .remaining = n};
  bool own_rv = !step->rendezvous;
  if (own_rv) r.step.rendezvous = gr_rendezvous_new();
  part_arg small[8];
  part_arg *args = n <= 8 ? small : malloc(sizeof(part_arg) * (size_t)n);
  if (!r.step.rendezvous || !args) {
    if (own_rv) gr_rendezvous_free(r.step.rendezvous);
    if (args != small) free(args);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  if (step->watch) gr_watch_set_rendezvous(step->watch, r.step.rendezvous); /* a stall aborts it */
  for (int k = 1; k < n; k++) {
    args[k] = (part_arg){&r, k};
    gr_threadpool_schedule(p->runners, run_part_closure, &args[k]);
  }
  run_part(&r, 0);
  pthread_mutex_lock(&r.mu);
  while (r.remaining > 0) pthread_cond_wait(&r.cv, &r.mu);
  pthread_mutex_unlock(&r.mu);
  if (step->watch) gr_watch_set_rendezvous(step->watch, NULL);
  if (r.status != GR_OK) {
    for (int i = 0; i < nx; i++) gr_tensor_release(&fetch_out[i]);
    if (err) *err = r.err;
  }
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  if (stats) *stats = gr_rendezvous_stats(r.step.rendezvous);
  if (own_rv) gr_rendezvous_free(r.step.rendezvous);
  if (args != small) free(args);
  return r.status;
}
