/* bench_scale: how graphrun's control plane scales with the tasks it
 * drives, and what the scaling model (docs/scaling.md) makes of it.
 *
 * build_s_256: examples/allreduce.gr for a cluster of 256 workers (a
 *   generated ClusterSpec; nothing runs there): the .gr file built and
 *   shape-checked, its devices assigned (pins, as `graphrun run` does),
 *   then its step pruned, rewritten by the graph passes and partitioned
 *   into one graph per worker, as a session does before its first step
 *   (the partitions go to a stand-in runner, not to tasks). Seconds.
 * register_ms_N: a real cluster of N `graphrun server` tasks on loopback
 *   (forked children, one inter-op thread each, ephemeral ports): the
 *   master connecting and asking each task's status (gr_master_new), plus
 *   registering a tiny model's partitions with every task (its first step
 *   less a median step). Milliseconds.
 * step_ms_N: the median step of that tiny model (each task adds two
 *   constants; every task's sum fetched): RUN to every task, its answers.
 * sim_eff_64: the modelled efficiency at 64 workers on 25 Gb/s links of a
 *   ResNet-50-sized gradient (100 MB in 25 MB buckets, 0.25 s of compute
 *   per step: batch 64 of ResNet-50 on a Pascal GPU), with graphrun's own
 *   costs: per message and bandwidth of its transport as calibrated on
 *   two of the tasks (gr_calibrate_runtime), and the master's cost per
 *   task per step from step_ms_64 and step_ms_4.
 *
 * raw_ms_N: the floor of step_ms_N on this machine (fanout_floor.h): N
 *   forked processes answering a 64-byte request over raw loopback TCP,
 *   the median of a request to each and every answer. On 2 cores the
 *   wake-ups of 64 processes share the cores, so raw_ms_64 / raw_ms_4 is
 *   what step_ms_64 / step_ms_4 cannot beat here.
 *
 * Last line: scale: build_s_256=B register_ms_64=R step_ms_64=S step_ms_4=F
 * sim_eff_64=E raw_ms_64=P raw_ms_4=Q. --smoke: 16 workers built, clusters of 2 and 4 tasks, few
 * steps (the suite's smoke run). --steps N: steps per median (default 200);
 * --no-build: the clusters only (build_s 0). */
#include <fcntl.h>
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "core/session_remote.h" /* the stand-in runner */
#include "fanout_floor.h"

enum { MAX_TASKS = 64 };

/* ---- build, place and partition for 256 workers ------------------------------------------ */

typedef struct standin {
  int parts, nodes;
} standin;

static gr_status standin_prepare(void *self, gr_partitions *parts, void **plan, gr_error *err) {
  (void)err;
  standin *s = self;
  s->parts = parts->num_parts;
  for (int k = 0; k < parts->num_parts; k++) s->nodes += parts->parts[k].num_nodes;
  *plan = parts;
  return GR_OK;
}
static gr_status standin_run(void *self, void *plan, const gr_tensor *feeds, gr_tensor *fetches,
                             const gr_step_info *step, int64_t num_steps, gr_transfer_stats *stats,
                             gr_error *err) {
  (void)self, (void)plan, (void)feeds, (void)fetches, (void)step, (void)num_steps, (void)err;
  if (stats) *stats = (gr_transfer_stats){0, 0};
  return GR_OK;
}
static void standin_free(void *self, void *plan) {
  (void)self;
  gr_partitions_free(plan);
}
static gr_status standin_var(void *self, const char *name, const char *device, bool *out,
                             gr_error *err) {
  (void)self, (void)name, (void)device, (void)err;
  *out = true;
  return GR_OK;
}

typedef struct build_figures {
  double load, place, partition; /* seconds */
  int nodes, parts;
} build_figures;

/* Seconds to build, check, place and partition allreduce.gr on n workers. */
static double build_allreduce(int n, build_figures *f) {
  gr_error err;
  gr_cluster *c = gr_cluster_new();
  if (!c) bench_die("cluster", "out of memory");
  for (int k = 0; k < n; k++) {
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", 20000 + k); /* never dialled */
    if (gr_cluster_add_task_at(c, "worker", addr, 1, NULL, &err) != GR_OK)
      bench_die("cluster", err.msg);
  }
  const char **devs = calloc((size_t)n, sizeof *devs);
  for (int k = 0; k < n; k++) devs[k] = gr_cluster_device_at(c, k)->name;
  double t0 = bench_now();
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p;
  gr_dsl_options o = {.cluster = c};
  if (gr_dsl_load_file(GR_SOURCE_DIR "/examples/allreduce.gr", g, &o, &p, &err) != GR_OK)
    bench_die("allreduce.gr", err.msg);
  double t1 = bench_now();
  if (gr_placer_assign(g, c, 0, GR_PLACE_PINS, false, &err) != GR_OK) bench_die("place", err.msg);
  gr_output targets[16];
  int nt = 0;
  for (int i = 0; i < gr_dsl_num_targets(p) && nt < 16; i++)
    if (gr_dsl_lookup(p, gr_dsl_target_name(p, i), &targets[nt])) nt++;
  for (int i = 0; i < gr_dsl_num_fetches(p) && nt < 16; i++)
    if (gr_dsl_lookup(p, gr_dsl_fetch_name(p, i), &targets[nt])) nt++;
  standin st = {0, 0};
  gr_remote_runner r = {&st, standin_prepare, standin_run, standin_free, standin_var};
  double t2 = bench_now();
  gr_session_options so = {.num_devices = n, .device_names = devs, .remote = &r};
  gr_session *s = gr_session_new(g, &so, &err);
  if (!s || gr_session_run(s, NULL, 0, NULL, 0, NULL, targets, nt, &err) != GR_OK)
    bench_die("partition", err.msg);
  double t3 = bench_now();
  *f = (build_figures){t1 - t0, t2 - t1, t3 - t2, gr_graph_num_nodes(g), st.parts};
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  free(devs);
  gr_cluster_free(c);
  return t3 - t0;
}

/* ---- a real cluster on loopback -------------------------------------------------------- */

static char addr[MAX_TASKS][32];
static const char *addrs[MAX_TASKS];

static gr_master *connect_master(int n) {
  /* no recovery here: a task starved by a loaded machine is slow, not lost */
  gr_master_options mo = {.num_tasks = n,
                          .addresses = addrs,
                          .secret = BENCH_SECRET,
                          .connect_timeout_ms = 120000,
                          .step_timeout_ms = 120000,
                          .heartbeat_ms = 250,
                          .heartbeat_missed = 40};
  gr_master *m;
  gr_error err;
  if (gr_master_new(&mo, &m, &err) != GR_OK) bench_die("master", err.msg);
  return m;
}

typedef struct cluster_figures {
  double connect_ms, register_ms, step_ms;
} cluster_figures;

/* The tiny model on the first n tasks: each adds two constants, every sum
 * fetched (checked: task k's is k + 1). */
static cluster_figures run_cluster(int n, int steps) {
  cluster_figures f;
  gr_error err;
  double t0 = bench_now();
  gr_master *m = connect_master(n);
  f.connect_ms = 1e3 * (bench_now() - t0);
  gr_graph *g = gr_graph_new();
  gr_output sums[MAX_TASKS];
  for (int k = 0; k < n; k++) {
    char dev[64];
    snprintf(dev, sizeof dev, "/job:worker/task:%d", k);
    gr_graph_push_device_scope(g, dev);
    sums[k] = gr_add(g, gr_const_f32(g, (float)k), gr_const_f32(g, 1));
    gr_graph_pop_device_scope(g);
  }
  gr_session_options so = {.intra_op_threads = 1};
  gr_session *s = gr_master_session_new(m, g, &so, &err);
  if (!s) bench_die("session", err.msg);
  gr_tensor out[MAX_TASKS];
  double *t = calloc((size_t)steps + 1, sizeof *t);
  double first = 0;
  for (int i = -1; i < steps; i++) {
    double a = bench_now();
    if (gr_session_run(s, NULL, 0, sums, n, out, NULL, 0, &err) != GR_OK)
      bench_die("step", err.msg);
    double b = bench_now();
    if (i < 0)
      first = b - a;
    else
      t[i] = b - a;
    for (int k = 0; k < n; k++) {
      if (gr_tensor_get_f64(&out[k], 0) != k + 1) bench_die("step", "a wrong sum");
      gr_tensor_release(&out[k]);
    }
  }
  f.step_ms = 1e3 * bench_median(t, steps);
  f.register_ms = f.connect_ms + 1e3 * first - f.step_ms;
  free(t);
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  return f;
}

/* The transport's per-message cost and bandwidth between tasks 0 and 1 into
 * c (gr_calibrate_runtime, a short run). */
static gr_cluster *calibrate_pair(bool smoke) {
  gr_error err;
  gr_cluster *c = gr_cluster_new();
  for (int k = 0; c && k < 2; k++)
    if (gr_cluster_add_task_at(c, "worker", addrs[k], 1, NULL, &err) != GR_OK)
      bench_die("cluster", err.msg);
  if (!c) bench_die("cluster", "out of memory");
  gr_master *m = connect_master(2);
  gr_calibrate_options o = {.steps = smoke ? 5 : 30, .rounds = 2, .bulk_bytes = 4 << 20};
  gr_calibration cal;
  if (gr_calibrate_runtime(m, c, &o, &cal, &err) != GR_OK) bench_die("calibrate", err.msg);
  gr_master_free(m);
  return c;
}

int main(int argc, char **argv) {
  bool smoke = bench_is_smoke(argc, argv);
  int steps = smoke ? 5 : 200, build_n = smoke ? 16 : 256, big = smoke ? 4 : 64,
      small = smoke ? 2 : 4;
  bool no_build = false;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-build"))
      no_build = true;
    else if (strcmp(argv[i], "--smoke") != 0)
      bench_die(argv[i], "unknown option (--smoke, --steps N, --no-build)");
  if (steps < 1) bench_die("--steps", "want a positive integer");
  bench_start("bench_scale", NULL);
  /* the servers first, while this process has no threads of its own */
  int life[2];
  if (pipe2(life, O_CLOEXEC) != 0) bench_die("pipe", NULL);
  for (int k = 0; k < big; k++) {
    int port;
    bench_spawn_server(k, life[0], life[1], &port);
    snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", port);
    addrs[k] = addr[k];
  }
  fanout *raw = fanout_spawn(big, life[0], life[1]);
  close(life[0]);

  build_figures bf = {0};
  double build_s = no_build ? 0 : build_allreduce(build_n, &bf);
  printf("allreduce.gr on %d workers: %d nodes, %d partitions: built and checked %.2f s, placed "
         "%.2f s, pruned, rewritten and partitioned %.2f s; in all %.2f s\n",
         build_n, bf.nodes, bf.parts, bf.load, bf.place, bf.partition, build_s);
  fflush(stdout);

  cluster_figures fs = run_cluster(small, steps), fb = run_cluster(big, steps);
  printf("\n%-8s %12s %12s %10s\n", "tasks", "connect ms", "register ms", "step ms");
  printf("%-8d %12.1f %12.1f %10.3f\n", small, fs.connect_ms, fs.register_ms, fs.step_ms);
  printf("%-8d %12.1f %12.1f %10.3f\n", big, fb.connect_ms, fb.register_ms, fb.step_ms);
  double raw_small = fanout_step_ms(raw, small, steps), raw_big = fanout_step_ms(raw, big, steps);
  fanout_free(raw);
  printf("raw sockets, a 64-byte request and answer per task: %d tasks %.3f ms, %d tasks %.3f ms "
         "(x%.1f; graphrun x%.1f)\n",
         small, raw_small, big, raw_big, raw_big / raw_small, fb.step_ms / fs.step_ms);

  gr_cluster *c = calibrate_pair(smoke);
  gr_scale_params p = {.compute = 0.25,
                       .backward = 2.0 / 3,
                       .grad_bytes = 100e6,
                       .bucket_bytes = 25e6,
                       .link_bw = 25e9 / 8};
  gr_scale_params_from_cluster(&p, c, GR_SCALE_NET_LATENCY);
  double per_task = (fb.step_ms - fs.step_ms) / 1e3 / (big - small);
  if (per_task > 0) p.step_task = per_task; /* measured here, on real steps */
  gr_cluster_free(c);
  printf("\nmodel constants: per message %.1f us (loopback) + %.0f us network, transport %.2f "
         "GB/s, master %.1f us per step + %.1f us per task\n",
         1e6 * (p.hop_latency - GR_SCALE_NET_LATENCY), 1e6 * GR_SCALE_NET_LATENCY, p.host_bw / 1e9,
         1e6 * p.step_fixed, 1e6 * p.step_task);
  printf("ResNet-50-sized step (100 MB gradient, 25 MB buckets, 0.25 s compute), 25 Gb/s:\n");
  printf("%-8s %10s %10s %10s %12s %12s\n", "workers", "step s", "allreduce", "exposed",
         "efficiency", "link only");
  double eff64 = 0;
  const int ws[] = {8, 64, 256};
  for (int i = 0; i < 3; i++) {
    gr_scale_result r;
    gr_error err;
    if (gr_scale_predict(&p, ws[i], &r, &err) != GR_OK) bench_die("model", err.msg);
    gr_scale_params ideal = p; /* a transport as fast as the link */
    ideal.host_bw = 0;
    gr_scale_result q;
    if (gr_scale_predict(&ideal, ws[i], &q, &err) != GR_OK) bench_die("model", err.msg);
    printf("%-8d %10.3f %10.3f %10.3f %11.1f%% %11.1f%%\n", ws[i], r.step, r.allreduce, r.exposed,
           100 * r.efficiency, 100 * q.efficiency);
    if (ws[i] == 64) eff64 = r.efficiency;
  }
  printf("scale: build_s_%d=%.2f register_ms_%d=%.1f step_ms_%d=%.3f step_ms_%d=%.3f "
         "sim_eff_64=%.3f raw_ms_%d=%.3f raw_ms_%d=%.3f\n",
         build_n, build_s, big, fb.register_ms, big, fb.step_ms, small, fs.step_ms, eff64, big,
         raw_big, small, raw_small);
  bench_stop_children();
  return 0;
}
