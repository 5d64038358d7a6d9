/* The parallel-training examples on launched local clusters (`graphrun
 * launch`, real processes, each bounded in time and reaped):
 * sync_replicas.gr (ps + 2 workers) trains as fashion_mlp.gr in one process
 * within 1e-5 and the same bits on a rerun; allreduce.gr on 2 and 3 workers
 * keeps every worker's copy equal after every step; model_parallel.gr
 * (2 tasks, 4 micro-batches) trains as fashion_mlp.gr within 1e-5;
 * fashion_cnn_sync.gr (ps + 2 workers, batch norm) trains to the same bits
 * on a rerun, in one process and resumed from a checkpoint;
 * mapreduce_mean.gr gives the mean of the 100 million numbers computed
 * directly; a ring all-reduce over 3 tasks gives exact sums. A task killed
 * in the middle of all-reduces (collective and graph ring):
 * test_collective_dist.c. */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

/* Heartbeats for the runs that test results, not detection: a loaded
 * machine (ASan, parallel ctest) can starve a task past the default half
 * second. The kill test keeps the default. */
#define LENIENT "250:12"

static char exe[PATH_MAX];
static char tmp[] = "/tmp/gr_dist_parallel_XXXXXX";

static void example(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/examples/%s", GR_SOURCE_DIR, name);
}

/* ---- comparing the weights written by --out -------------------------------------------------- */

#define WEIGHTS "layer1/w1,layer1/b1,layer2/w2,layer2/b2,layer3/w3,layer3/b3"
static const char *const weight_files[] = {"layer1/w1", "layer1/b1", "layer2/w2",
                                           "layer2/b2", "layer3/w3", "layer3/b3"};

/* The largest difference between the tensors files[0..n) in dirs a and b
 * (-1: missing). */
static double weights_diff(const char *a, const char *b, const char *const *files, int n,
                           bool *same_bits) {
  double worst = 0;
  *same_bits = true;
  for (int i = 0; i < n; i++) {
    char pa[PATH_MAX], pb[PATH_MAX];
    snprintf(pa, sizeof pa, "%s/%s.npy", a, files[i]);
    snprintf(pb, sizeof pb, "%s/%s.npy", b, files[i]);
    gr_tensor ta, tb;
    gr_error err;
    if (gr_data_load_npy(pa, &ta, &err) != GR_OK) return fprintf(stderr, "%s\n", err.msg), -1;
    if (gr_data_load_npy(pb, &tb, &err) != GR_OK) {
      gr_tensor_release(&ta);
      return fprintf(stderr, "%s\n", err.msg), -1;
    }
    if (!gr_shape_equal(&ta.shape, &tb.shape)) worst = INFINITY;
    for (int64_t k = 0; k < gr_tensor_num_elements(&ta) && isfinite(worst); k++)
      worst = fmax(worst, fabs(gr_tensor_get_f64(&ta, k) - gr_tensor_get_f64(&tb, k)));
    *same_bits = *same_bits && gr_shape_equal(&ta.shape, &tb.shape) &&
                 memcmp(gr_tensor_data(&ta), gr_tensor_data(&tb), gr_tensor_num_bytes(&ta)) == 0;
    gr_tensor_release(&ta), gr_tensor_release(&tb);
  }
  return worst;
}

enum { STEPS = 20 };
static char ref_dir[PATH_MAX + 16];

/* fashion_mlp.gr in one process: the model every data-parallel example
 * must reproduce (the same batches of 128, the same initial weights). */
static void reference(void) {
  char file[PATH_MAX], steps[16];
  example(file, sizeof file, "fashion_mlp.gr");
  snprintf(ref_dir, sizeof ref_dir, "%s/ref", tmp);
  snprintf(steps, sizeof steps, "%d", STEPS);
  gt_proc p;
  GR_CHECK_EQ_INT(gt_run(&p,
                         (char *[]){"graphrun", "run", file, "--steps", steps, "--fetch", WEIGHTS,
                                    "--out", ref_dir, "--quiet", NULL},
                         120),
                  0);
}

/* graphrun launch --ps PS --workers W FILE --steps STEPS --fetch WEIGHTS,extra --out DIR */
static int launch(gt_proc *p, const char *ps, const char *workers, const char *name,
                  const char *dir, const char *extra) {
  char file[PATH_MAX], steps[16], fetch[256], out[PATH_MAX + 16];
  example(file, sizeof file, name);
  snprintf(steps, sizeof steps, "%d", STEPS);
  snprintf(fetch, sizeof fetch, "%s%s%s", WEIGHTS, extra ? "," : "", extra ? extra : "");
  snprintf(out, sizeof out, "%s/%s", tmp, dir);
  return gt_run(p,
                (char *[]){"graphrun", "launch", "--ps", (char *)ps, "--workers", (char *)workers,
                           file, "--steps", steps, "--fetch", fetch, "--out", out, "--quiet",
                           "--timeout", "60", "--heartbeat", LENIENT, NULL},
                120);
}

static double diff_to(const char *dir, const char *other, bool *same) {
  char a[PATH_MAX + 16], b[PATH_MAX + 16];
  snprintf(a, sizeof a, "%s/%s", tmp, dir);
  snprintf(b, sizeof b, "%s", other[0] == '/' ? other : "");
  if (other[0] != '/') snprintf(b, sizeof b, "%s/%s", tmp, other);
  return weights_diff(a, b, weight_files, 6, same);
}

static void test_sync_replicas(void) {
  gt_proc p;
  GR_CHECK_EQ_INT(launch(&p, "1", "2", "sync_replicas.gr", "sync1", NULL), 0);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun launch: 3 tasks ready");
  GR_CHECK_EQ_INT(launch(&p, "1", "2", "sync_replicas.gr", "sync2", NULL), 0);
  bool same;
  double d = diff_to("sync1", ref_dir, &same);
  printf("sync_replicas: weights after %d steps differ from one process by %.3g\n", STEPS, d);
  GR_CHECK_MSG(d >= 0 && d <= 1e-5, "%g", d);
  GR_CHECK_MSG(d >= 0 && diff_to("sync1", "sync2", &same) == 0 && same,
               "a rerun gives other weights");
}

/* {"worst": {... "data": X}}: X */
static double json_scalar(const char *out, const char *name) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\": {", name);
  const char *k = strstr(out, key);
  const char *d = k ? strstr(k, "\"data\": ") : NULL;
  return d ? strtod(d + 8, NULL) : NAN;
}

static void test_allreduce(void) {
  gt_proc p;
  GR_CHECK_EQ_INT(launch(&p, "0", "2", "allreduce.gr", "ar2", "worst"), 0);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun launch: 2 tasks ready");
  GR_CHECK_MSG(strstr(p.buf, "\nworst = 0.0\n") != NULL, "the copies drifted:\n%s", p.buf);
  bool same;
  double d = diff_to("ar2", ref_dir, &same); /* 2 x 64 rows: the reference's batches */
  printf("allreduce: 2 workers: copies equal after every step; weights differ from one process "
         "by %.3g\n",
         d);
  GR_CHECK_MSG(d >= 0 && d <= 1e-5, "%g", d);
  GR_CHECK_EQ_INT(launch(&p, "0", "3", "allreduce.gr", "ar3",
                         "worst,layer1/w1/replica_1,layer1/w1/replica_2,layer3/b3/replica_2"),
                  0);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun launch: 3 tasks ready");
  GR_CHECK_MSG(strstr(p.buf, "\nworst = 0.0\n") != NULL, "the copies drifted:\n%s", p.buf);
  /* the copies on workers 1 and 2 hold worker 0's weights, bit for bit */
  const char *copies[][2] = {{"layer1/w1", "layer1/w1/replica_1"},
                             {"layer1/w1", "layer1/w1/replica_2"},
                             {"layer3/b3", "layer3/b3/replica_2"}};
  for (int k = 0; k < 3; k++) {
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    snprintf(a, sizeof a, "%s/ar3/%s.npy", tmp, copies[k][0]);
    snprintf(b, sizeof b, "%s/ar3/%s.npy", tmp, copies[k][1]);
    gr_tensor ta, tb;
    gr_error err;
    bool ok = gr_data_load_npy(a, &ta, &err) == GR_OK;
    if (ok && gr_data_load_npy(b, &tb, &err) != GR_OK) {
      gr_tensor_release(&ta);
      ok = false;
    }
    GR_CHECK_MSG(ok, "%s", err.msg);
    if (!ok) continue;
    GR_CHECK_MSG(gt_bit_equal(&ta, &tb) && gr_tensor_num_elements(&ta) > 0, "%s differs from %s",
                 copies[k][1], copies[k][0]);
    gr_tensor_release(&ta), gr_tensor_release(&tb);
  }
  printf("allreduce: 3 workers: copies equal after every step and at the end\n");
}

static void test_model_parallel(void) {
  gt_proc p;
  GR_CHECK_EQ_INT(launch(&p, "0", "2", "model_parallel.gr", "mp", NULL), 0);
  bool same;
  double d = diff_to("mp", ref_dir, &same);
  printf("model_parallel: 4 micro-batches on 2 tasks: weights differ from one process by %.3g\n",
         d);
  GR_CHECK_MSG(d >= 0 && d <= 1e-5, "%g", d);
}

/* ---- the CNN with batch norm, ps + 2 workers --------------------------------------------------
 */

enum { CNN_STEPS = 6 };
#define CNN_FETCH                                                                                  \
  "conv_bn_vars/w,conv_bn_vars/moving_mean,conv_bn_vars/moving_variance,conv_bn_vars_1/w,"         \
  "conv_bn_vars_1/moving_mean,conv_bn_vars_1/moving_variance,dense_vars/w,dense_vars_1/b,loss"
static const char *const cnn_files[] = {"conv_bn_vars/w",
                                        "conv_bn_vars/moving_mean",
                                        "conv_bn_vars/moving_variance",
                                        "conv_bn_vars_1/w",
                                        "conv_bn_vars_1/moving_mean",
                                        "conv_bn_vars_1/moving_variance",
                                        "dense_vars/w",
                                        "dense_vars_1/b"};
enum { CNN_FILES = sizeof cnn_files / sizeof *cnn_files };

/* examples/fashion_cnn_sync.gr for `steps` steps into tmp/dir: on a
 * launched cluster of 1 ps and 2 workers, or (cluster false) in one process
 * with --soft-placement; extra: one more argument pair or NULL. Its loss. */
static double cnn_run(bool cluster, int steps, const char *dir, const char *flag,
                      const char *value) {
  char file[PATH_MAX], st[16], out[PATH_MAX + 16];
  example(file, sizeof file, "fashion_cnn_sync.gr");
  snprintf(st, sizeof st, "%d", steps);
  snprintf(out, sizeof out, "%s/%s", tmp, dir);
  char *argv[32];
  int n = 0;
  argv[n++] = "graphrun";
  if (cluster) {
    char *const head[] = {"launch", "--ps", "1", "--workers", "2"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) argv[n++] = head[i];
  } else {
    argv[n++] = "run";
  }
  argv[n++] = file;
  if (!cluster) argv[n++] = "--soft-placement";
  char *const tail[] = {"--steps", st,        "--fetch",   CNN_FETCH, "--out",       out,
                        "--json",  "--quiet", "--timeout", "60",      "--heartbeat", LENIENT};
  for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) argv[n++] = tail[i];
  if (flag) argv[n++] = (char *)flag, argv[n++] = (char *)value;
  argv[n] = NULL;
  gt_proc p;
  int code = gt_run(&p, argv, 300);
  GR_CHECK_MSG(code == 0, "%s", p.buf);
  return code == 0 ? json_scalar(p.buf, "loss") : NAN;
}

static bool cnn_same(const char *a, const char *b) {
  char pa[PATH_MAX + 16], pb[PATH_MAX + 16];
  snprintf(pa, sizeof pa, "%s/%s", tmp, a);
  snprintf(pb, sizeof pb, "%s/%s", tmp, b);
  bool same;
  return weights_diff(pa, pb, cnn_files, CNN_FILES, &same) == 0 && same;
}

/* The .npy file tmp/dir/name: all of it differs from `initial`. */
static bool all_moved(const char *dir, const char *name, double initial) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s/%s.npy", tmp, dir, name);
  gr_tensor t;
  gr_error err;
  if (gr_data_load_npy(path, &t, &err) != GR_OK) return fprintf(stderr, "%s\n", err.msg), false;
  bool moved = gr_tensor_num_elements(&t) > 0;
  for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++)
    moved = moved && isfinite(gr_tensor_get_f64(&t, i)) && gr_tensor_get_f64(&t, i) != initial;
  gr_tensor_release(&t);
  return moved;
}

/* The CNN with batch norm, dropout and flips in two replicas on two workers,
 * its variables on the ps: the loss falls, a rerun gives the same bits, and
 * so do the same replicas in one process (the moving statistics included,
 * each updated once per step on the ps from the mean of the replicas'
 * statistics: test_replica_stats.c checks the arithmetic), and a run
 * resumed from a checkpoint. */
static void test_cnn_sync(void) {
  double t0 = gt_now();
  double first = cnn_run(false, 1, "cnn_step1", NULL, NULL);
  double loss = cnn_run(true, CNN_STEPS, "cnn1", NULL, NULL);
  double t1 = gt_now();
  cnn_run(true, CNN_STEPS, "cnn2", NULL, NULL);
  cnn_run(false, CNN_STEPS, "cnn_one", NULL, NULL);
  char ckpt[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/cnn_ckpt", tmp);
  cnn_run(true, CNN_STEPS / 2, "cnn_half", "--ckpt", ckpt);
  cnn_run(true, CNN_STEPS, "cnn_resumed", "--ckpt", ckpt);
  printf("cnn_sync: loss %.4f after 1 step, %.4f after %d (a cluster run: %.1f s)\n", first, loss,
         CNN_STEPS, t1 - t0);
  GR_CHECK_MSG(loss < first, "%g after %d steps, %g after 1", loss, CNN_STEPS, first);
  GR_CHECK_MSG(cnn_same("cnn1", "cnn2"), "a rerun gives other weights");
  GR_CHECK_MSG(cnn_same("cnn1", "cnn_one"), "one process gives other weights");
  GR_CHECK_MSG(cnn_same("cnn1", "cnn_resumed"), "a resumed run gives other weights");
  for (int layer = 0; layer < 2; layer++) {
    char m[64], v[64];
    snprintf(m, sizeof m, "conv_bn_vars%s/moving_mean", layer ? "_1" : "");
    snprintf(v, sizeof v, "conv_bn_vars%s/moving_variance", layer ? "_1" : "");
    GR_CHECK_MSG(all_moved("cnn1", m, 0) && all_moved("cnn1", v, 1), "%s, %s did not move", m, v);
  }
}

/* The mean of every random_uniform of the example, drawn here from the
 * counter-based generator as the op draws them (ops/random.c: key (graph
 * seed ^ op seed * constant, node name, step), element i), summed in long
 * double: no graph involved. */
static double direct_mean(const char *file, int64_t *count) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  long double sum = 0;
  *count = 0;
  if (gr_dsl_load_file(file, g, NULL, &p, &err) != GR_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return NAN;
  }
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    const gr_node *n = gr_graph_node(g, id);
    if (strcmp(n->op->name, "random_uniform") != 0) continue;
    uint64_t op_seed = (uint64_t)gr_node_attr_int(n, "seed", 0);
    gr_rng r = gr_rng_make(0 ^ (op_seed * 0xD1B54A32D192ED03ull), gr_rng_hash_name(n->name), 0);
    int64_t k = gr_shape_num_elements(&n->out_shapes[0]);
    for (int64_t i = 0; i < k; i++) sum += gr_rng_uniform_f64(&r, (uint64_t)i);
    *count += k;
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return (double)(sum / (long double)*count);
}

static void test_mapreduce_mean(void) {
  char file[PATH_MAX];
  example(file, sizeof file, "mapreduce_mean.gr");
  gt_proc p;
  double t0 = gt_now();
  GR_CHECK_EQ_INT(gt_run(&p,
                         (char *[]){"graphrun", "launch", "--ps", "0", "--workers", "2", file,
                                    "--json", "--timeout", "60", "--heartbeat", LENIENT, NULL},
                         120),
                  0);
  double took = gt_now() - t0;
  GR_CHECK_STR_CONTAINS(p.buf, "the last step sent 1 values between devices (8 bytes)");
  double got = json_scalar(p.buf, "mean");
  int64_t count;
  double want = direct_mean(file, &count);
  printf("mapreduce_mean: %lld numbers on 2 workers: mean %.17g (%.2f s), directly %.17g\n",
         (long long)count, got, took, want);
  GR_CHECK_EQ_INT(count, 100000000);
  GR_CHECK_MSG(fabs(got - want) <= 1e-12, "%.17g vs %.17g", got, want);
  GR_CHECK(fabs(got - 0.5) < 5 * sqrt(1.0 / 12) / 1e4); /* five standard deviations */
}

/* all_reduce over three tasks of integer-valued tensors (exact sums), f32
 * sum and f64 mean, each result compared with the sum made directly on
 * worker 0 and with the other workers' results. */
static void test_all_reduce_on_cluster(void) {
  const char *src =
      "def ints(seed, dt) { return cast(cast(random_uniform([1000003], seed=seed) * 100 - 50, "
      "i32), dt) }\n"
      "device \"/job:worker/task:0\" { x0 = ints(0, f32); y0 = ints(3, f64) }\n"
      "device \"/job:worker/task:1\" { x1 = ints(1, f32); y1 = ints(4, f64) }\n"
      "device \"/job:worker/task:2\" { x2 = ints(2, f32); y2 = ints(5, f64) }\n"
      "s0, s1, s2 = all_reduce(x0, x1, x2)\n"
      "m0, m1, m2 = all_reduce(y0, y1, y2, op=\"mean\")\n"
      "device \"/job:worker/task:0\" {\n"
      "  sum_err = reduce_max(abs(s0 - (x0 + x1 + x2)))\n"
      "  mean_err = reduce_max(abs(m0 - (y0 + y1 + y2) / 3))\n"
      "  spread = reduce_max(abs(s1 - s0)) + reduce_max(abs(s2 - s0))\n"
      "  mspread = reduce_max(abs(m1 - m0)) + reduce_max(abs(m2 - m0))\n"
      "  size = reduce_sum(abs(s0) * 0 + 1)\n"
      "}\n"
      "fetch sum_err, mean_err, spread, mspread, size\n";
  gt_write_file(tmp, "ring.gr", src);
  char file[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/ring.gr", tmp);
  gt_proc p;
  GR_CHECK_EQ_INT(
      gt_run(&p,
             (char *[]){"graphrun", "launch", "--ps", "0", "--workers", "3", file, "--json",
                        "--quiet", "--timeout", "60", "--heartbeat", LENIENT, NULL},
             120),
      0);
  GR_CHECK_MSG(json_scalar(p.buf, "sum_err") == 0 && json_scalar(p.buf, "spread") == 0, "%s",
               p.buf);
  GR_CHECK_MSG(json_scalar(p.buf, "mean_err") == 0 && json_scalar(p.buf, "mspread") == 0, "%s",
               p.buf);
  GR_CHECK_MSG(json_scalar(p.buf, "size") == 1000003, "%s", p.buf);
}

int main(void) {
  snprintf(exe, sizeof exe, "%s", gt_graphrun_exe());
  if (!mkdtemp(tmp)) return 1;
  gt_proc_isolate();
  double t0 = gt_now();
  reference();
  GR_RUN(test_sync_replicas);
  GR_RUN(test_allreduce);
  GR_RUN(test_model_parallel);
  GR_RUN(test_cnn_sync);
  GR_RUN(test_mapreduce_mean);
  GR_RUN(test_all_reduce_on_cluster);
  printf("%.1f s\n", gt_now() - t0);
  gt_remove_tree(tmp);
  return gr_test_finish();
}
