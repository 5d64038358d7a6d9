/* Multi-device steps: one executor per partition, run concurrently (device 0
 * on the calling thread, the others on the plan's runner threads), meeting
 * in a per-step rendezvous. gr_device_plan_run blocks those threads in
 * gr_executor_run; gr_device_plan_run_async starts every device's
 * gr_executor_run_async on the calling thread and counts the partitions
 * done. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device_plan.h"
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
    return gr_error_set_oom(err);
  }
  p->parts = parts;
  gr_status st = GR_OK;
  int n = parts->num_parts;
  p->execs = calloc((size_t)n + 1, sizeof *p->execs);
  p->runners = gr_threadpool_new(n > 1 ? n - 1 : 0);
  gr_threadpool_set_name(p->runners, "gr-devices");
  if (!p->execs || !p->runners) st = gr_error_set_oom(err);
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

/* One step over every partition: each partition's executor runs with its
 * own done (part_done); the last one to finish ends the step (step_finish). */
typedef struct part_run {
  struct step_run *r;
  int k;
  bool blocking;        /* gr_device_plan_run: gr_executor_run on a runner or the caller */
  gr_tensor *fv, *outs; /* this partition's feeds and fetches */
} part_run;

typedef struct step_run {
  gr_device_plan *plan;
  const gr_tensor *feed_values;
  gr_tensor *fetch_out;
  gr_step_info step;
  bool own_rv;
  gr_transfer_stats *stats;
  pthread_mutex_t mu;
  int remaining; /* partitions still running (under mu) */
  gr_status status;
  gr_error err;
  gr_executor_done_fn done;
  void *done_arg;
  part_run *parts;
} step_run;

static void step_finish(step_run *r) {
  if (r->step.watch) gr_watch_set_rendezvous(r->step.watch, NULL);
  if (r->status != GR_OK)
    for (int i = 0; i < r->plan->num_fetches; i++) gr_tensor_release(&r->fetch_out[i]);
  if (r->stats) *r->stats = gr_rendezvous_stats(r->step.rendezvous);
  if (r->own_rv) gr_rendezvous_free(r->step.rendezvous);
  gr_executor_done_fn done = r->done;
  void *arg = r->done_arg;
  gr_status status = r->status;
  gr_error err = r->err;
  pthread_mutex_destroy(&r->mu);
  free(r);
  done(arg, status, &err);
}

static void part_done(void *arg, gr_status st, const gr_error *e) {
  part_run *pr = arg;
  step_run *r = pr->r;
  gr_partition *pt = &r->plan->parts->parts[pr->k];
  if (st == GR_OK) {
    for (int i = 0; i < pt->num_fetches; i++) r->fetch_out[pt->fetch_index[i]] = pr->outs[i];
  } else {
    /* stop every other device's step: their pending receives fail */
    char msg[GR_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "step aborted: device '%s' failed", pt->device);
    gr_rendezvous_abort(r->step.rendezvous, GR_ERR_CANCELLED, msg);
  }
  pthread_mutex_lock(&r->mu);
  /* the cause wins over the cancellations it caused */
  if (st != GR_OK &&
      (r->status == GR_OK || (r->status == GR_ERR_CANCELLED && st != GR_ERR_CANCELLED))) {
    r->status = st;
    r->err = *e;
  }
  bool last = --r->remaining == 0;
  pthread_mutex_unlock(&r->mu);
  if (last) step_finish(r);
}

static void run_part(void *arg) {
  part_run *pr = arg;
  step_run *r = pr->r;
  gr_partition *pt = &r->plan->parts->parts[pr->k];
  for (int i = 0; i < pt->num_feeds; i++) pr->fv[i] = r->feed_values[pt->feed_index[i]];
  gr_executor *ex = r->plan->execs[pr->k];
  if (pr->blocking) {
    gr_error e;
    gr_status st = gr_executor_run(ex, pr->fv, pr->outs, &r->step, &e);
    part_done(pr, st, &e);
  } else {
    gr_executor_run_async(ex, pr->fv, pr->outs, &r->step, part_done, pr); /* r may be gone */
  }
}

/* Starts the step: partitions beyond the first on the plan's runner threads,
 * the first on this one. */
static void step_start(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                       const gr_step_info *step, gr_transfer_stats *stats, bool blocking,
                       gr_executor_done_fn done, void *arg) {
  int n = p->parts->num_parts;
  for (int i = 0; i < p->num_fetches; i++) fetch_out[i] = gr_tensor_empty();
  size_t tensors = 0;
  for (int k = 0; k < n; k++)
    tensors += (size_t)p->parts->parts[k].num_feeds + (size_t)p->parts->parts[k].num_fetches;
  /* one allocation: the step, its partitions, their feed and fetch slots */
  step_run *r =
      calloc(1, sizeof *r + sizeof(part_run) * (size_t)n + sizeof(gr_tensor) * (tensors + 1));
  gr_rendezvous *rv = step->rendezvous;
  if (r && !rv) rv = gr_rendezvous_new();
  if (!r || !rv) {
    free(r);
    gr_error oom;
    done(arg, gr_error_set_oom(&oom), &oom);
    return;
  }
  *r = (step_run){.plan = p,
                  .feed_values = feed_values,
                  .fetch_out = fetch_out,
                  .step = *step,
                  .own_rv = !step->rendezvous,
                  .stats = stats,
                  .remaining = n,
                  .done = done,
                  .done_arg = arg,
                  .parts = (part_run *)(r + 1)};
  r->step.rendezvous = rv;
  gr_tensor *slot = (gr_tensor *)(r->parts + n);
  for (int k = 0; k < n; k++) {
    r->parts[k] = (part_run){r, k, blocking, slot, slot + p->parts->parts[k].num_feeds};
    slot += p->parts->parts[k].num_feeds + p->parts->parts[k].num_fetches;
  }
  pthread_mutex_init(&r->mu, NULL);
  if (step->watch) gr_watch_set_rendezvous(step->watch, rv); /* a stall aborts it */
  if (!blocking) { /* each start returns soon; and the step's end may free the plan (its
                     owner's last reference), which must not happen on the plan's own threads */
    part_run *parts = r->parts; /* r may be gone after the last start */
    for (int k = 0; k < n; k++) run_part(&parts[k]);
    return;
  }
  part_run *first = &r->parts[0];
  for (int k = 1; k < n; k++) gr_threadpool_schedule(p->runners, run_part, &r->parts[k]);
  run_part(first);
}

typedef struct step_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  gr_status status;
  gr_error *err;
} step_wait;

static void step_signal(void *arg, gr_status status, const gr_error *err) {
  step_wait *w = arg;
  pthread_mutex_lock(&w->mu);
  w->status = status;
  if (status != GR_OK && w->err) *w->err = *err;
  w->done = true;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

gr_status gr_device_plan_run(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                             const gr_step_info *step, gr_transfer_stats *stats, gr_error *err) {
  step_wait w = {.err = err};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  step_start(p, feed_values, fetch_out, step, stats, true, step_signal, &w);
  pthread_mutex_lock(&w.mu);
  while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return w.status;
}

void gr_device_plan_run_async(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                              const gr_step_info *step, gr_transfer_stats *stats,
                              gr_executor_done_fn done, void *arg) {
  step_start(p, feed_values, fetch_out, step, stats, false, done, arg);
}
