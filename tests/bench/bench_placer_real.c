/* bench_placer_real: the cost placer's choices measured on the runtime.
 *
 * A local cluster of 3 server tasks (/job:ps/task:0, /job:worker/task:0 and
 * 1; forked children, one inter-op thread each, as `graphrun launch` starts
 * them) and this process as the client. First the runtime is calibrated
 * (gr_calibrate_runtime: per-transfer latency, bandwidth and per-task step
 * cost between the tasks; their threads and the host's cores as they say),
 * then for each example (fashion_mlp, fashion_cnn, model_parallel,
 * allreduce, rnn), as `graphrun calibrate --cluster C --profiles DB FILE`
 * and `graphrun place FILE --measure N` do:
 *
 *   - its step (the file's fetches and targets) is profiled in this process
 *     (gr_profile_db_record_step: every node's time per step);
 *   - its pins-only step runs on the cluster and the tasks' time scale is
 *     fitted to it (gr_placement_fit_scale);
 *   - the cost placer places it on the calibrated cluster model and
 *     predicts the step of each candidate: the placement it returns (cost),
 *     every node on one task (one-task), pins only (pins) and round-robin by
 *     layer (layers);
 *   - each distinct candidate runs on the cluster (pins as `--placement
 *     pins` runs: no devices assigned), its steps alternating with the
 *     others' in rounds (gr_placement_try: about --budget seconds each, at
 *     most --steps steps), and its median step is printed beside the
 *     prediction. A candidate with the same devices as an earlier one is
 *     that run, measured once.
 *
 * Last line: placer-real: worst_vs_best=W worst_prediction_error=E
 *   W: over the examples, the worst measured step of the cost placement
 *      over the best measured of one-task, pins and layers (target <= 1.05)
 *   E: over the examples, the worst |predicted - measured| / measured of
 *      the cost placement (target <= 0.25)
 * Also printed: the worst prediction error over every candidate, the load
 * average before and after (the machine is shared: figures move with it).
 * --smoke: fashion_mlp and rnn, a few steps (the suite's smoke run).
 * Options: --steps N (most timed steps per candidate, default 2000),
 * --budget S (seconds per candidate, default 4), --rounds R (default 6),
 * --only NAME (one example), --low (fit and compare with each candidate's
 * 10th-percentile step instead of its median: the step other work on the
 * machine left alone). */
#include <fcntl.h>
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

enum { TASKS = 3, CANDS = GR_PLACE_CAND_COUNT };

static const char *const examples[] = {"fashion_mlp", "fashion_cnn", "model_parallel", "allreduce",
                                       "rnn"};

/* A loaded example: graph, program, and the step (its fetches and targets). */
typedef struct loaded {
  gr_graph *g;
  gr_dsl_program *p;
  gr_output fetch[16], target[16];
  int nf, nt;
} loaded;

static void load(const char *name, const gr_cluster *c, loaded *l) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s.gr", GR_SOURCE_DIR, name);
  memset(l, 0, sizeof *l);
  l->g = gr_graph_new();
  gr_dsl_options o = {.cluster = c};
  gr_error err;
  if (gr_dsl_load_file(path, l->g, &o, &l->p, &err) != GR_OK) bench_die(path, err.msg);
  for (int i = 0; i < gr_dsl_num_targets(l->p) && l->nt < 16; i++)
    if (gr_dsl_lookup(l->p, gr_dsl_target_name(l->p, i), &l->target[l->nt])) l->nt++;
  for (int i = 0; i < gr_dsl_num_fetches(l->p) && l->nf < 16; i++) {
    gr_output o2;
    if (!gr_dsl_lookup(l->p, gr_dsl_fetch_name(l->p, i), &o2)) continue;
    if (o2.index >= 0)
      l->fetch[l->nf++] = o2;
    else if (l->nt < 16)
      l->target[l->nt++] = o2;
  }
}

static void unload(loaded *l) {
  gr_dsl_program_free(l->p);
  gr_graph_free(l->g);
}

static gr_placer_options place_options(const loaded *l, gr_profile_db *db) {
  gr_placer_options o = gr_placer_options_default();
  o.profiles = db;
  o.min_samples = 1;
  o.fetches = l->fetch, o.num_fetches = l->nf;
  o.targets = l->target, o.num_targets = l->nt;
  return o;
}

static gr_master *connect_master(const char *const *addrs) {
  gr_master_options mo = {
      .num_tasks = TASKS, .addresses = addrs, .secret = BENCH_SECRET, .step_timeout_ms = 300000};
  gr_master *m;
  gr_error err;
  if (gr_master_new(&mo, &m, &err) != GR_OK) bench_die("master", err.msg);
  return m;
}

/* The statistic predictions are fitted to and compared with: the median
 * step, or with --low its 10th percentile (a step other work left alone). */
static bool use_low;
static double stat(const gr_place_trial *t) {
  return use_low ? t->measured.low : t->measured.median;
}

typedef struct totals {
  double worst_vs_best, worst_err, worst_err_any;
} totals;

/* Places l on c (explain into $BENCH_EXPLAIN/NAME_TAG.txt when set). */
static gr_placement *place(loaded *l, const gr_cluster *c, gr_profile_db *db, const char *name,
                           const char *tag) {
  gr_error err;
  gr_placer_options o = place_options(l, db);
  o.explain = getenv("BENCH_EXPLAIN") != NULL;
  gr_placement *p;
  if (gr_placer_place(l->g, c, &o, &p, &err) != GR_OK) bench_die("place", err.msg);
  if (o.explain) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s_%s.txt", getenv("BENCH_EXPLAIN"), name, tag);
    FILE *f = fopen(path, "w");
    if (f) gr_placement_explain(p, f), fclose(f);
  }
  return p;
}

/* The candidates of l's placement in mask, tried on the cluster. */
static void try_candidates(loaded *l, gr_placement *p, const char *const *addrs, unsigned mask,
                           int steps, double budget, int rounds, gr_place_trial *t, int *n) {
  gr_master_options mo = {
      .num_tasks = TASKS, .addresses = addrs, .secret = BENCH_SECRET, .step_timeout_ms = 300000};
  gr_master_opener op;
  gr_master_opener_init(&op, &mo);
  gr_error err;
  if (gr_placement_try(p, l->fetch, l->nf, l->target, l->nt, &op.o, mask, steps, budget, rounds, t,
                       n, &err) != GR_OK)
    bench_die("try", err.msg);
}

/* The time scale of the cluster's tasks for this example: its pins-only
 * step predicted with the tasks at scale 1, measured, and fitted
 * (gr_placement_fit_scale). */
static double fit_scale(const char *name, gr_cluster *c, const char *const *addrs,
                        gr_profile_db *db, int steps, double budget) {
  gr_error err;
  for (int d = 0; d < gr_cluster_num_devices(c); d++) {
    const gr_cluster_device *dv = gr_cluster_device_at(c, d);
    if (gr_cluster_task_at(c, dv->task)->address) {
      if (gr_cluster_scale_servers(c, 1 / dv->time_scale, &err) != GR_OK)
        bench_die("scale", err.msg);
      break;
    }
  }
  loaded l;
  load(name, c, &l);
  gr_placement *p = place(&l, c, db, name, "fit");
  gr_place_trial t[CANDS];
  try_candidates(&l, p, addrs, 1u << GR_PLACE_CAND_PINS, steps, budget, 1, t, NULL);
  double f;
  if (gr_placement_fit_scale(p, c, stat(&t[GR_PLACE_CAND_PINS]), &f, &err) != GR_OK)
    bench_die("scale", err.msg);
  gr_placement_free(p);
  unload(&l);
  return f;
}

static void run_example(const char *name, gr_cluster *c, const char *const *addrs,
                        gr_profile_db *db, int steps, int rounds, int profile_steps, double budget,
                        totals *tot) {
  gr_error err;
  double t0 = bench_now();
  /* the kernels, timed in this process */
  loaded l;
  load(name, c, &l);
  int timed = 0;
  double p0 = bench_now();
  if (gr_profile_db_record_step(db, l.g, NULL, 0, l.fetch, l.nf, l.target, l.nt, profile_steps,
                                &timed, &err) != GR_OK)
    bench_die("profile", err.msg);
  /* a short step: more of them, about a second's worth (one hiccup weighs less) */
  double per = (bench_now() - p0) / (profile_steps + 2);
  int more = per > 0 ? (int)(budget / 4 / per) - profile_steps : 0;
  if (more > 0 && gr_profile_db_record_step(db, l.g, NULL, 0, l.fetch, l.nf, l.target, l.nt,
                                            more < 2000 ? more : 2000, &timed, &err) != GR_OK)
    bench_die("profile", err.msg);
  unload(&l);
  /* the fit: as long as a candidate's measurement, so that load that comes
   * and goes weighs on both alike */
  double scale = fit_scale(name, c, addrs, db, 4 * steps, budget);
  /* the placement, its candidates' predictions, and each distinct one run */
  load(name, c, &l);
  gr_placement *p = place(&l, c, db, name, "cost");
  gr_place_trial t[CANDS];
  int nsteps;
  try_candidates(&l, p, addrs, ~0u, steps, budget, rounds, t, &nsteps);
  printf("%s: %d nodes timed; tasks' time scale %.3f; chosen: %s; %d steps each (%.1f s)\n", name,
         timed, scale, gr_place_candidate_name(gr_placement_chosen(p)), nsteps, bench_now() - t0);
  double best = INFINITY;
  for (int k = 0; k < CANDS; k++) {
    if (!t[k].tried) continue;
    double e = (t[k].predicted - stat(&t[k])) / stat(&t[k]);
    printf("  %-9s predicted %8.3f ms  measured %8.3f ms (median %.3f, 10th pct %.3f, IQR %.3f) "
           " error %+6.1f%%",
           gr_place_candidate_name((gr_place_candidate)k), t[k].predicted * 1e3, stat(&t[k]) * 1e3,
           t[k].measured.median * 1e3, t[k].measured.low * 1e3, t[k].measured.spread * 1e3,
           100 * e);
    if (t[k].same_as >= 0)
      printf("  (the same placement as %s)", gr_place_candidate_name(t[k].same_as));
    printf("\n");
    if (k != GR_PLACE_CAND_COST && stat(&t[k]) < best) best = stat(&t[k]);
    if (fabs(e) > tot->worst_err_any) tot->worst_err_any = fabs(e);
  }
  const gr_place_trial *tc = &t[GR_PLACE_CAND_COST];
  double vs = stat(tc) / best, e = fabs(tc->predicted - stat(tc)) / stat(tc);
  printf("  cost vs best of the others: %.3f\n", vs);
  fflush(stdout);
  if (vs > tot->worst_vs_best) tot->worst_vs_best = vs;
  if (e > tot->worst_err) tot->worst_err = e;
  gr_placement_free(p);
  unload(&l);
}

int main(int argc, char **argv) {
  bool smoke = bench_is_smoke(argc, argv);
  int steps = smoke ? 4 : 2000, rounds = smoke ? 2 : 6;
  double budget = 4;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
    if (!strcmp(argv[i], "--low")) use_low = true;
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  bench_start("bench_placer_real", NULL);
  /* the tasks first, while this process has no threads of its own */
  int life[2];
  if (pipe2(life, O_CLOEXEC) != 0) bench_die("pipe", NULL);
  static const char *const jobs[TASKS] = {"ps", "worker", "worker"};
  static const int index[TASKS] = {0, 0, 1};
  char addr[TASKS][64];
  const char *addrs[TASKS];
  for (int k = 0; k < TASKS; k++) {
    int port = -1;
    bench_spawn_server_job(jobs[k], index[k], life[0], life[1], &port);
    snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", port);
    addrs[k] = addr[k];
  }
  close(life[0]);

  gr_error err;
  gr_cluster *c = gr_cluster_new();
  for (int k = 0; k < TASKS; k++)
    if (!c || gr_cluster_add_task_at(c, jobs[k], addrs[k], 1, NULL, &err) != GR_OK)
      bench_die("cluster", c ? err.msg : "out of memory");
  gr_master *m = connect_master(addrs);
  for (int k = 0; k < TASKS; k++) {
    if (gr_master_task_threads(m, k) > 0 &&
        gr_cluster_set_task_threads(c, k, gr_master_task_threads(m, k), &err) != GR_OK)
      bench_die("cluster", err.msg);
    if (gr_master_task_cores(m, k) > 0 &&
        gr_cluster_set_host_cores(c, gr_cluster_task_at(c, k)->host, gr_master_task_cores(m, k),
                                  &err) != GR_OK)
      bench_die("cluster", err.msg);
  }
  gr_calibration cal;
  gr_calibrate_options co = {.steps = smoke ? 5 : 60, .rounds = smoke ? 1 : 3};
  double t0 = bench_now();
  if (gr_calibrate_runtime(m, c, &co, &cal, &err) != GR_OK) bench_die("calibrate", err.msg);
  gr_master_free(m);
  static const char *const kinds[GR_LINK_COUNT] = {"same task", "same host", "cross host"};
  printf("# tasks' time scale %.3f, host cores %d\n", gr_cluster_device_at(c, 0)->time_scale,
         gr_cluster_host_cores(c, 0));
  printf("# calibrated in %.1f s (load average: ", bench_now() - t0);
  double load[3];
  if (getloadavg(load, 3) == 3) printf("%.2f %.2f %.2f)\n", load[0], load[1], load[2]);
  for (int k = 0; k < GR_LINK_COUNT; k++) {
    gr_link lk = gr_cluster_get_link(c, (gr_link_kind)k);
    printf("# %-10s latency %6.1f us  bandwidth %6.2f GB/s  step %6.1f us", kinds[k],
           lk.latency * 1e6, lk.bandwidth / 1e9, lk.step * 1e6);
    if (cal.link[k].measured)
      printf("  (trivial step on one end %.1f us, on both %.1f us; work on both at once x%.2f)\n",
             cal.link[k].step_one * 1e6, cal.link[k].step_two * 1e6, cal.link[k].parallelism);
    else
      printf("  (default: not measured)\n");
  }
  gr_profile_db *db;
  if (gr_profile_db_open(":memory:", &db, &err) != GR_OK) bench_die("profiles", err.msg);
  totals tot = {0};
  int n = 0;
  for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
    if (smoke && i != 0 && i != 4) continue;
    if (only && strcmp(only, examples[i]) != 0) continue;
    run_example(examples[i], c, addrs, db, steps, rounds, smoke ? 3 : 30, smoke ? 0.5 : budget,
                &tot);
    n++;
  }
  if (getloadavg(load, 3) == 3)
    printf("# load average at the end: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  printf("# %d examples; worst prediction error over every candidate: %.3f\n", n,
         tot.worst_err_any);
  printf("placer-real: worst_vs_best=%.3f worst_prediction_error=%.3f\n", tot.worst_vs_best,
         tot.worst_err);
  gr_profile_db_close(db);
  gr_cluster_free(c);
  bench_stop_children();
  return 0;
}
