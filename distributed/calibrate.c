/* Calibrating the runtime for the placer (docs/placement.md, "How the model
 * is calibrated"): what a transfer and a task cost a step, measured with
 * real steps of the master's sessions between real server tasks, and
 * between two devices of this process.
 *
 * Per link kind (two tasks on the client's host: same_host; a task on
 * another host, when the cluster has one: cross_host; two devices of one
 * process: same_task):
 *   - latency: a chain of 2M + 1 negations of an 8-byte tensor alternating
 *     between the two ends (2M transfers) minus the same chain on one end,
 *     per transfer;
 *   - bandwidth: a variable of B bytes on one end read (a slice) on the
 *     other, minus the same step with the slice at home: B over that less
 *     a latency;
 *   - step: a step of one trivial node on each of two tasks minus a step of
 *     one on one task: what a task adds to a step (a RUN and its response).
 *     The one-task step less that is the client's own cost, kept as
 *     same_task's step.
 * The steps of the measurements alternate, round after round, so a load
 * that comes and goes touches them alike; each figure is a median over
 * every round's steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/master_internal.h"
#include "ops/gr_ops.h"

enum { CHAIN_M = 20 }; /* round trips of the chain: 2 * CHAIN_M transfers */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One measured step: a graph, its session and its samples. */
typedef struct probe {
  gr_graph *g;
  gr_output fetch[2];
  int nfetch;
  gr_session *s;
  double *t;
  int n;
} probe;

static void pin(gr_graph *g, const char *dev) {
  gr_graph_push_device_scope(g, dev);
}

/* 1 + 2 on dev. */
static gr_output trivial_on(gr_graph *g, const char *dev) {
  pin(g, dev);
  gr_output t = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, 2));
  gr_graph_pop_device_scope(g);
  return t;
}

/* A trivial node on a, and on b when not NULL. */
static void steps_graph(probe *p, const char *a, const char *b) {
  p->g = gr_graph_new();
  p->fetch[p->nfetch++] = trivial_on(p->g, a);
  if (b) p->fetch[p->nfetch++] = trivial_on(p->g, b);
}

/* 2M + 1 negations of f32[2], alternating a and b (b NULL: all on a), and
 * a trivial node on `other` so both chains' steps use the same tasks. */
static void chain_graph(probe *p, const char *a, const char *b, const char *other) {
  gr_graph *g = p->g = gr_graph_new();
  pin(g, a);
  gr_output h = gr_const_data(g, GR_F32, (gr_shape){1, {2}}, (float[]){1.5f, -2.5f});
  gr_graph_pop_device_scope(g);
  for (int i = 0; i < 2 * CHAIN_M + 1; i++) {
    pin(g, b && i % 2 == 0 ? b : a);
    h = gr_neg(g, h);
    gr_graph_pop_device_scope(g);
  }
  p->fetch[p->nfetch++] = h;
  p->fetch[p->nfetch++] = trivial_on(g, other);
}

/* A variable of `elems` f32 on a, two of its values read on `reader`, and
 * a trivial node on `other`. */
static void bulk_graph(probe *p, const char *a, const char *reader, const char *other,
                       int64_t elems, const char *name) {
  gr_graph *g = p->g = gr_graph_new();
  pin(g, a);
  gr_output v = gr_variable(g, name, gr_zeros(g, GR_F32, (gr_shape){1, {elems}}));
  gr_graph_pop_device_scope(g);
  pin(g, reader);
  p->fetch[p->nfetch++] = gr_slice(g, v, (int64_t[]){elems / 2}, (int64_t[]){2}, 1);
  gr_graph_pop_device_scope(g);
  p->fetch[p->nfetch++] = trivial_on(g, other);
}

/* A small training step on dev (about a millisecond of one thread's work:
 * a 256 x 256 product, its reduction, a variable updated). */
static gr_output heavy_on(gr_graph *g, const char *dev, const char *name) {
  pin(g, dev);
  gr_shape sh = {2, {256, 256}};
  gr_output w = gr_variable(g, name, gr_zeros(g, GR_F32, sh));
  gr_output y =
      gr_reduce_sum(g, gr_matmul(g, gr_zeros(g, GR_F32, sh), w, false, false), NULL, 0, false);
  gr_output u = gr_assign_add(g, w, gr_mul(g, gr_zeros(g, GR_F32, sh), y));
  gr_graph_pop_device_scope(g);
  return u;
}

/* That step on dev, and on `other` the same (pair) or a trivial node: a
 * step that waits as a real one does; two that may run at once. */
static void heavy_graph(probe *p, const char *dev, const char *other, bool pair, const char *name) {
  char name2[80];
  snprintf(name2, sizeof name2, "%s_pair", name);
  gr_graph *g = p->g = gr_graph_new();
  p->fetch[p->nfetch++] = heavy_on(g, dev, name);
  p->fetch[p->nfetch++] = pair ? heavy_on(g, other, name2) : trivial_on(g, other);
}

/* Runs n more steps of p (its session made on first use: a master's, or
 * with m NULL a local one of two devices), their seconds appended. */
static gr_status run_probe(gr_master *m, probe *p, int n, gr_error *err) {
  if (gr_graph_error(p->g))
    return gr_error_set(err, GR_ERR_INTERNAL, "calibrate: %s", gr_graph_error(p->g)->msg);
  if (!p->s) {
    gr_session_options o = {.inter_op_threads = 1, .num_devices = 2};
    p->s = m ? gr_master_session_new(m, p->g, NULL, err) : gr_session_new(p->g, &o, err);
    if (!p->s) return err ? err->code : GR_ERR_INTERNAL;
    gr_tensor out[2];
    for (int w = 0; w < 3; w++) { /* registration, initialisation, a warm step */
      GR_TRY(gr_session_run(p->s, NULL, 0, p->fetch, p->nfetch, out, NULL, 0, err));
      for (int i = 0; i < p->nfetch; i++) gr_tensor_release(&out[i]);
    }
  }
  double *t = gr_realloc_array(p->t, (size_t)(p->n + n), sizeof(double));
  if (!t) return gr_error_set_oom(err);
  p->t = t;
  for (int k = 0; k < n; k++) {
    gr_tensor out[2];
    int64_t t0 = gr_trace_now_ns();
    GR_TRY(gr_session_run(p->s, NULL, 0, p->fetch, p->nfetch, out, NULL, 0, err));
    p->t[p->n++] = (double)(gr_trace_now_ns() - t0) * 1e-9;
    for (int i = 0; i < p->nfetch; i++) gr_tensor_release(&out[i]);
  }
  return GR_OK;
}

static void free_probe(probe *p) {
  gr_session_free(p->s);
  gr_graph_free(p->g);
  free(p->t);
  memset(p, 0, sizeof *p);
}

/* The probes of one link (a -> b): steps on a, on a and b; chains; bulk. */
enum {
  P_ONE,
  P_TWO,
  P_CHAIN_SPLIT,
  P_CHAIN_ONE,
  P_BULK_SPLIT,
  P_BULK_ONE,
  P_HEAVY,
  P_PAIR,
  P_COUNT
};

static void link_probes(probe *p, const char *a, const char *b, int64_t elems, int tag) {
  char n1[64], n2[64], n3[64];
  snprintf(n1, sizeof n1, "calibrate/bulk_%d_split", tag);
  snprintf(n2, sizeof n2, "calibrate/bulk_%d_home", tag);
  snprintf(n3, sizeof n3, "calibrate/heavy_%d", tag);
  steps_graph(&p[P_ONE], a, NULL);
  steps_graph(&p[P_TWO], a, b);
  chain_graph(&p[P_CHAIN_SPLIT], a, b, b);
  chain_graph(&p[P_CHAIN_ONE], a, NULL, b);
  bulk_graph(&p[P_BULK_SPLIT], a, b, b, elems, n1);
  bulk_graph(&p[P_BULK_ONE], a, a, b, elems, n2);
  heavy_graph(&p[P_HEAVY], a, a, false, n3);
  heavy_graph(&p[P_PAIR], a, b, true, n3);
}

/* The figures of one link from its probes' medians. */
static void link_figures(probe *p, double bytes, gr_calibration_link *out) {
  double md[P_COUNT];
  for (int k = 0; k < P_COUNT; k++) md[k] = median(p[k].t, p[k].n);
  out->step_one = md[P_ONE];
  out->step_two = md[P_TWO];
  out->latency = fmax(1e-7, (md[P_CHAIN_SPLIT] - md[P_CHAIN_ONE]) / (2 * CHAIN_M));
  double x = md[P_BULK_SPLIT] - md[P_BULK_ONE] - out->latency;
  out->bandwidth = x > 1e-6 ? bytes / x : 0; /* 0: too fast to tell */
  out->step = fmax(0, md[P_TWO] - md[P_ONE]);
  out->base = fmax(0, md[P_ONE] - out->step);
  out->heavy = md[P_HEAVY];
  /* the two heavy steps at once against one: 2 when they overlap fully */
  double work = md[P_HEAVY] - md[P_ONE], both = md[P_PAIR] - md[P_TWO];
  out->parallelism = work > 0 && both > 0 ? fmin(2, fmax(1, 2 * work / both)) : 1;
  out->measured = true;
}

/* Runs the probe sets round after round, each probe `steps` steps a round. */
static gr_status measure(gr_master *const *masters, probe *const *sets, int nsets, int rounds,
                         int steps, gr_error *err) {
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < P_COUNT; k++)
      for (int i = 0; i < nsets; i++) {
        int n = k == P_BULK_SPLIT || k == P_BULK_ONE || k >= P_HEAVY ? (steps + 4) / 5 : steps;
        gr_status st = run_probe(masters[i], &sets[i][k], n, err);
        if (st != GR_OK) {
          gr_error_prefix(err, "calibrate: a step of %s",
                          masters[i] ? "the cluster" : "this process");
          return st;
        }
      }
  return GR_OK;
}

gr_status gr_calibrate_runtime(gr_master *m, gr_cluster *c, const gr_calibrate_options *opts,
                               gr_calibration *out, gr_error *err) {
  memset(out, 0, sizeof *out);
  gr_calibrate_options o = opts ? *opts : (gr_calibrate_options){0};
  int steps = o.steps > 0 ? o.steps : 60, rounds = o.rounds > 0 ? o.rounds : 3;
  int64_t elems = (int64_t)((o.bulk_bytes ? o.bulk_bytes : (size_t)4 << 20) / 4);
  if (elems < 2) elems = 2;
  if (gr_master_num_tasks(m) != gr_cluster_num_tasks(c))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "calibrate: the master has %d tasks, the cluster %d",
                        gr_master_num_tasks(m), gr_cluster_num_tasks(c));
  /* the ends: a the session's first device's task (the client's host), b
   * another task on that host, x one on another host */
  int nd = gr_cluster_num_devices(c);
  int *order = gr_alloc_array((size_t)nd + 1, sizeof(int));
  if (!order) return gr_error_set_oom(err);
  gr_cluster_session_order(c, order);
  int ta = gr_cluster_device_at(c, order[0])->task, tb = -1, tx = -1;
  free(order);
  const gr_cluster_task *A = gr_cluster_task_at(c, ta);
  for (int t = 0; t < gr_cluster_num_tasks(c); t++) {
    const gr_cluster_task *T = gr_cluster_task_at(c, t);
    if (t == ta || T->num_devices < 1) continue;
    if (T->host_id == A->host_id && tb < 0) tb = t;
    if (T->host_id != A->host_id && tx < 0) tx = t;
  }
  char da[GR_DEVICE_NAME_MAX], db[GR_DEVICE_NAME_MAX], dx[GR_DEVICE_NAME_MAX];
  snprintf(da, sizeof da, "%s", gr_cluster_device_at(c, A->first_device)->name);
  if (tb >= 0)
    snprintf(db, sizeof db, "%s",
             gr_cluster_device_at(c, gr_cluster_task_at(c, tb)->first_device)->name);
  if (tx >= 0)
    snprintf(dx, sizeof dx, "%s",
             gr_cluster_device_at(c, gr_cluster_task_at(c, tx)->first_device)->name);
  probe local[P_COUNT] = {0}, host[P_COUNT] = {0}, cross[P_COUNT] = {0};
  link_probes(local, "/job:localhost/replica:0/task:0/device:CPU:0",
              "/job:localhost/replica:0/task:0/device:CPU:1", elems, 0);
  gr_master *masters[3] = {NULL};
  probe *sets[3] = {local};
  int nsets = 1;
  if (tb >= 0) link_probes(host, da, db, elems, 1), masters[nsets] = m, sets[nsets++] = host;
  if (tx >= 0) link_probes(cross, da, dx, elems, 2), masters[nsets] = m, sets[nsets++] = cross;
  gr_status st = measure(masters, sets, nsets, rounds, steps, err);
  if (st == GR_OK) {
    double bytes = (double)elems * 4;
    link_figures(local, bytes, &out->link[GR_LINK_SAME_TASK]);
    if (tb >= 0) link_figures(host, bytes, &out->link[GR_LINK_SAME_HOST]);
    if (tx >= 0) link_figures(cross, bytes, &out->link[GR_LINK_CROSS_HOST]);
    /* the client's own cost per step: the one-task step less the task's;
     * the tasks' time scale: a step of about a millisecond's work on a task
     * (less the one-task step) against the same step in this process (a
     * task and a client that wait that long are woken later than for a
     * trivial step, more so on a loaded machine) */
    const gr_calibration_link *h = tb >= 0   ? &out->link[GR_LINK_SAME_HOST]
                                   : tx >= 0 ? &out->link[GR_LINK_CROSS_HOST]
                                             : NULL;
    out->link[GR_LINK_SAME_TASK].step = 0;
    out->client_step = h ? h->base : 0;
    double local = out->link[GR_LINK_SAME_TASK].heavy;
    out->time_scale = h && local > 0 ? (h->heavy - h->step_one) / local : 1;
    if (!(out->time_scale >= 0.5)) out->time_scale = 0.5;
    if (out->time_scale > 4) out->time_scale = 4;
    for (int d = 0; h && d < gr_cluster_num_devices(c); d++)
      if (gr_cluster_task_at(c, gr_cluster_device_at(c, d)->task)->address)
        gr_cluster_set_time_scale(c, d, out->time_scale, NULL);
    /* two tasks of the client's host that do not run at once (a loaded
     * machine): one core, whatever the host has */
    if (tb >= 0 && out->link[GR_LINK_SAME_HOST].parallelism < 1.5)
      gr_cluster_set_host_cores(c, A->host, 1, NULL);
    for (int k = 0; k < GR_LINK_COUNT; k++) {
      gr_calibration_link *l = &out->link[k];
      if (!l->measured) continue;
      gr_link was = gr_cluster_get_link(c, (gr_link_kind)k);
      gr_cluster_set_link(c, (gr_link_kind)k,
                          (gr_link){.latency = l->latency,
                                    .bandwidth = l->bandwidth > 0 ? l->bandwidth : was.bandwidth,
                                    .step = k == GR_LINK_SAME_TASK ? out->client_step : l->step});
    }
  }
  for (int k = 0; k < P_COUNT; k++)
    free_probe(&local[k]), free_probe(&host[k]), free_probe(&cross[k]);
  return st;
}
