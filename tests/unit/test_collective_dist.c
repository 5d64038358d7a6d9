/* The collective all-reduce on real `graphrun server` processes (`graphrun
 * launch`, loopback, ephemeral ports; every run bounded in time and
 * reaped): on 2-5 workers, tensors of 1000003 f32, 7 f64 and 1 f32
 * elements give the same bits on every worker, equal to the sum in the
 * fixed order of the algorithm each takes (the ring: chunk c added starting
 * at rank c; the tree, for the small ones on more than 2 workers: rank d
 * adds its children d + 1, d + 2, d + 4, ...), and the same bits on a
 * rerun, also with chunks cut into many pieces; examples/allreduce.gr trained 20 steps on 3 workers
 * keeps every copy equal (worst 0) and its loss is the same bits on a rerun; a worker killed while
 * collectives run fails the run with an error naming the task and the collective, without a hang
 * (and one killed during the graph ring's all-reduce, GRAPHRUN_ALL_REDUCE=graph, names the task).
 * The hierarchical all-reduce (hosts given in the graph, or the master's: its tasks' hosts) gives
 * every worker the bits of its order, the same on a rerun, and a member killed inside its host's
 * reduce fails the run the same way.
 * In one process: test_collective.c. */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graphrun.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

/* Heartbeats for the runs that test results, not detection: a loaded
 * machine can starve a task past the default half second. */
#define LENIENT "250:12"

static char tmp[] = "/tmp/gr_collective_XXXXXX";

static bool load(const char *dir, const char *name, gr_tensor *t) {
  char path[PATH_MAX];
  gr_error e;
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  if (gr_data_load_npy(path, t, &e) == GR_OK) return true;
  fprintf(stderr, "%s\n", e.msg);
  return false;
}

static bool same_bits(const gr_tensor *a, const gr_tensor *b) {
  return a->dtype == b->dtype && gr_shape_equal(&a->shape, &b->shape) &&
         !memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a));
}

static double elem(const gr_tensor *t, int64_t i) {
  return t->dtype == GR_F32 ? ((const float *)gr_tensor_data(t))[i]
                            : ((const double *)gr_tensor_data(t))[i];
}

/* The tree's order: rank d adds its children's sums (d + 1, d + 2, d + 4,
 * ...) to its own value, in f32 or f64. */
static double tree_sum(const gr_tensor *x, int d, int n, int64_t i) {
  double acc = elem(&x[d], i);
  for (int m = 1; m < n && !(d & m); m <<= 1)
    if (d + m < n) {
      acc = acc + tree_sum(x, d + m, n, i);
      if (x[0].dtype == GR_F32) acc = (float)acc; /* f32 addition: exact as a rounded f64 sum */
    }
  return acc;
}

/* The order of the algorithm the bucket takes (the tree when under 64 KiB
 * on more than 2 workers, else the ring) over the inputs x[0..n). */
static void ordered_sum(const gr_tensor *x, int n, gr_tensor *want) {
  gr_error e;
  int64_t size = gr_tensor_num_elements(&x[0]), q = size / n, r = size % n;
  bool tree = n > 2 && gr_tensor_num_bytes(&x[0]) < 64 * 1024;
  gr_tensor_alloc(want, x[0].dtype, &x[0].shape, &e);
  for (int c = 0; c < n; c++)
    for (int64_t i = c * q + (c < r ? c : r); i < (c + 1) * q + (c + 1 < r ? c + 1 : r); i++) {
      double acc = elem(&x[c], i);
      for (int k = 1; k < n; k++) {
        acc = elem(&x[(c + k) % n], i) + acc;
        if (x[0].dtype == GR_F32) acc = (float)acc;
      }
      if (tree) acc = tree_sum(x, 0, n, i);
      if (x[0].dtype == GR_F32)
        ((float *)gr_tensor_data(want))[i] = (float)acc;
      else
        ((double *)gr_tensor_data(want))[i] = acc;
    }
}

/* The hierarchical order (collective.c) over hosts host[0..n) (numbered by
 * first member): inside host h a tree over its members in rank order,
 * then over the hosts' sums the ring (chunk c starting at host c), or the
 * tree when under 64 KiB on more than 2 workers. */
static double host_sum(const gr_tensor *x, const int *mem, int k, int i, int64_t e) {
  double acc = elem(&x[mem[i]], e);
  for (int m = 1; m < k && !(i & m); m <<= 1)
    if (i + m < k) {
      acc = acc + host_sum(x, mem, k, i + m, e);
      if (x[0].dtype == GR_F32) acc = (float)acc;
    }
  return acc;
}

static double leader_sum(const double *hs, int nh, int h, bool f32) {
  double acc = hs[h];
  for (int m = 1; m < nh && !(h & m); m <<= 1)
    if (h + m < nh) {
      acc = acc + leader_sum(hs, nh, h + m, f32);
      if (f32) acc = (float)acc;
    }
  return acc;
}

static void hier_sum(const gr_tensor *x, int n, const int *host, gr_tensor *want) {
  gr_error e;
  bool f32 = x[0].dtype == GR_F32, tree = n > 2 && gr_tensor_num_bytes(&x[0]) < 64 * 1024;
  int nh = 0, mem[5][5], k[5] = {0};
  for (int d = 0; d < n; d++) {
    if (host[d] + 1 > nh) nh = host[d] + 1;
    mem[host[d]][k[host[d]]++] = d;
  }
  int64_t size = gr_tensor_num_elements(&x[0]), q = size / nh, r = size % nh;
  gr_tensor_alloc(want, x[0].dtype, &x[0].shape, &e);
  for (int c = 0; c < nh; c++)
    for (int64_t i = c * q + (c < r ? c : r); i < (c + 1) * q + (c + 1 < r ? c + 1 : r); i++) {
      double hs[5];
      for (int h = 0; h < nh; h++) hs[h] = host_sum(x, mem[h], k[h], 0, i);
      double acc = hs[c];
      for (int j = 1; j < nh; j++) {
        acc = hs[(c + j) % nh] + acc;
        if (f32) acc = (float)acc;
      }
      if (tree) acc = leader_sum(hs, nh, 0, f32);
      if (f32)
        ((float *)gr_tensor_data(want))[i] = (float)acc;
      else
        ((double *)gr_tensor_data(want))[i] = acc;
    }
}

/* Three all-reduces on n workers, run with --out into dir; opts: more
 * arguments of each all_reduce (", hosts=[...]"), or "". */
static bool run_sums_with(int n, const char *dir, const char *opts) {
  char src[4096], fetch[1024], file[PATH_MAX], out[PATH_MAX], workers[8], name[32];
  int at = 0, ft = 0;
  for (int k = 0; k < n; k++)
    at += snprintf(src + at, sizeof src - (size_t)at,
                   "device \"/job:worker/task:%d\" {\n"
                   "  a%d = random_uniform([1000003], seed=%d) * 2000 - 999.9\n"
                   "  b%d = cast(random_uniform([7], seed=%d), f64) * 3.3 + 1 / 3\n"
                   "  c%d = random_uniform([1], seed=%d) - 0.3\n"
                   "}\n",
                   k, k, k, k, 10 + k, k, 20 + k);
  for (int v = 0; v < 3; v++) {
    const char *x = v == 0 ? "a" : v == 1 ? "b" : "c";
    for (int k = 0; k < n; k++)
      at += snprintf(src + at, sizeof src - (size_t)at, "s%s%d%s", x, k,
                     k + 1 < n ? ", " : " = all_reduce(");
    for (int k = 0; k < n; k++)
      at += snprintf(src + at, sizeof src - (size_t)at, "%s%d%s", x, k, k + 1 < n ? ", " : "");
    at += snprintf(src + at, sizeof src - (size_t)at, "%s)\n", opts);
    for (int k = 0; k < n; k++)
      ft += snprintf(fetch + ft, sizeof fetch - (size_t)ft, "%s%s%d,s%s%d", ft ? "," : "", x, k, x,
                     k);
  }
  snprintf(name, sizeof name, "sums%d.gr", n);
  gt_write_file(tmp, name, src);
  snprintf(file, sizeof file, "%s/%s", tmp, name);
  snprintf(out, sizeof out, "%s/%s", tmp, dir);
  snprintf(workers, sizeof workers, "%d", n);
  gt_proc p;
  int code = gt_run(&p,
                    (char *[]){"graphrun", "launch", "--ps", "0", "--workers", workers, file,
                               "--fetch", fetch, "--out", out, "--quiet", "--timeout", "60",
                               "--heartbeat", LENIENT, NULL},
                    180);
  GR_CHECK_MSG(code == 0, "%d workers: exit %d:\n%s", n, code, p.buf);
  return code == 0;
}

static bool run_sums(int n, const char *dir) {
  return run_sums_with(n, dir, "");
}

/* The outputs in dir: every worker's sums the same bits, those of the
 * flat algorithm's order (host NULL) or the hierarchical one over host[];
 * the same as rerun_dir's (when not NULL). */
static void check_sums_hosts(int n, const char *dir, const char *rerun_dir, const int *host) {
  char d[PATH_MAX], r[PATH_MAX];
  snprintf(d, sizeof d, "%s/%s", tmp, dir);
  snprintf(r, sizeof r, "%s/%s", tmp, rerun_dir ? rerun_dir : "");
  for (int v = 0; v < 3; v++) {
    const char *x = v == 0 ? "a" : v == 1 ? "b" : "c";
    gr_tensor in[5], sum[5], want, again;
    bool ok = true;
    char name[16];
    for (int k = 0; k < n && ok; k++) {
      snprintf(name, sizeof name, "%s%d", x, k);
      ok = load(d, name, &in[k]);
      snprintf(name, sizeof name, "s%s%d", x, k);
      ok = ok && load(d, name, &sum[k]);
    }
    GR_CHECK_MSG(ok, "%d workers: missing outputs in %s", n, d);
    if (!ok) return;
    if (host)
      hier_sum(in, n, host, &want);
    else
      ordered_sum(in, n, &want);
    for (int k = 0; k < n; k++)
      GR_CHECK_MSG(same_bits(&sum[k], &want),
                   "%d workers (%s): s%s%d is not the sum in its algorithm's order", n, dir, x, k);
    if (rerun_dir) {
      snprintf(name, sizeof name, "s%s0", x);
      GR_CHECK_MSG(load(r, name, &again) && same_bits(&again, &sum[0]),
                   "%d workers: %s differs on a rerun", n, name);
      gr_tensor_release(&again);
    }
    for (int k = 0; k < n; k++) gr_tensor_release(&in[k]), gr_tensor_release(&sum[k]);
    gr_tensor_release(&want);
  }
}

static void check_sums(int n, const char *dir, const char *rerun_dir) {
  check_sums_hosts(n, dir, rerun_dir, NULL);
}

static void test_same_bits_2_to_5_workers(void) {
  for (int n = 2; n <= 5; n++) {
    char dir[16], again[16];
    snprintf(dir, sizeof dir, "sums%d", n);
    snprintf(again, sizeof again, "sums%d_again", n);
    if (run_sums(n, dir) && run_sums(n, again)) check_sums(n, dir, again);
  }
}

/* The servers' chunks cut into pieces (GRAPHRUN_ALL_REDUCE_PIECE, which
 * they inherit: 40000 bytes, so 1000003 f32 on 2 workers is chunks of 51
 * pieces, the last of 2 elements, and on 3 of 34): the same bits. */
static void test_pieces(void) {
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "40000", 1);
  for (int n = 2; n <= 3; n++) {
    char dir[16];
    snprintf(dir, sizeof dir, "pieces%d", n);
    if (run_sums(n, dir)) check_sums(n, dir, NULL);
  }
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
}

/* The hierarchical all-reduce on 2-5 server tasks, grouped into hosts by
 * all_reduce(..., hosts=[...]): chosen by default (more than one host,
 * one with several members), forced with algorithm="hier" on two workers
 * of one host; every worker the same bits, those of the hierarchical
 * order, and the same on a rerun. */
static void test_hier_2_to_5_workers(void) {
  static const int groupings[4][5] = {{0, 0}, {0, 0, 1}, {0, 1, 1, 0}, {0, 0, 1, 2, 1}};
  static const char *const opts[4] = {
      ", algorithm=\"hier\", hosts=[\"a\", \"a\"]", ", hosts=[\"a\", \"a\", \"b\"]",
      ", hosts=[\"a\", \"b\", \"b\", \"a\"]", ", hosts=[\"a\", \"a\", \"b\", \"c\", \"b\"]"};
  for (int c = 0; c < 4; c++) {
    int n = c + 2;
    char dir[16], again[16];
    snprintf(dir, sizeof dir, "hier%d", n);
    snprintf(again, sizeof again, "hier%d_again", n);
    if (run_sums_with(n, dir, opts[c]) && run_sums_with(n, again, opts[c]))
      check_sums_hosts(n, dir, again, groupings[c]);
  }
}

/* Without hosts in the graph the master fills in its tasks' hosts: a
 * launch's tasks all listen on 127.0.0.1, one host, so algorithm="hier"
 * reduces inside it (the tree over all 3 workers) instead of grouping by
 * task (each its own host: the ring's order, which differs). */
static void test_hier_hosts_from_cluster(void) {
  static const int one_host[3] = {0, 0, 0};
  if (run_sums_with(3, "hier_cluster", ", algorithm=\"hier\""))
    check_sums_hosts(3, "hier_cluster", NULL, one_host);
}

static double json_scalar(const char *out, const char *name, char *text, size_t cap) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\": {", name);
  const char *k = strstr(out, key);
  const char *d = k ? strstr(k, "\"data\": ") : NULL;
  if (!d) return NAN;
  size_t len = strcspn(d + 8, "}");
  snprintf(text, cap, "%.*s", (int)len, d + 8);
  return strtod(d + 8, NULL);
}

/* examples/allreduce.gr on 3 workers, 20 steps, twice: the copies never
 * drift and the loss is the same bits. */
static void test_allreduce_example(void) {
  char file[PATH_MAX], loss[2][64], worst[64];
  snprintf(file, sizeof file, "%s/examples/allreduce.gr", GR_SOURCE_DIR);
  for (int i = 0; i < 2; i++) {
    gt_proc p;
    int code = gt_run(&p,
                      (char *[]){"graphrun", "launch", "--ps", "0", "--workers", "3", file,
                                 "--steps", "20", "--json", "--quiet", "--timeout", "60",
                                 "--heartbeat", LENIENT, NULL},
                      240);
    GR_CHECK_MSG(code == 0, "exit %d:\n%s", code, p.buf);
    double l = json_scalar(p.buf, "loss", loss[i], sizeof loss[i]);
    double w = json_scalar(p.buf, "worst", worst, sizeof worst);
    GR_CHECK_MSG(isfinite(l) && w == 0, "run %d: loss %g worst %g:\n%s", i, l, w, p.buf);
    printf("allreduce.gr, 3 workers, 20 steps: loss %s, worst %s\n", loss[i], worst);
  }
  GR_CHECK_MSG(!strcmp(loss[0], loss[1]), "the loss differs on a rerun: %s vs %s", loss[0],
               loss[1]);
}

/* A worker killed while steps of all-reduces run (launch restarts it): the
 * run fails well within its timeout (no hang), naming the lost task, and
 * with the collective (the default) the collective and the member; with
 * the graph ring (GRAPHRUN_ALL_REDUCE=graph) the lost task. */
static void kill_mid_all_reduce(bool graph_ring, bool hier) {
  char src[1024];
  snprintf(src, sizeof src,
           "device \"/job:worker/task:0\" { a = random_uniform([4000000]) }\n"
           "device \"/job:worker/task:1\" { b = random_uniform([4000000]) }\n"
           "device \"/job:worker/task:2\" { c = random_uniform([4000000]) }\n"
           "r0, r1, r2 = all_reduce(a, b, c%s)\n"
           "device \"/job:worker/task:0\" { t = reduce_sum(r0) + reduce_sum(r1) + "
           "reduce_sum(r2) }\n",
           hier ? ", hosts=[\"x\", \"y\", \"y\"]" : "");
  gt_write_file(tmp, "kill.gr", src);
  char file[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/kill.gr", tmp);
  if (graph_ring) setenv("GRAPHRUN_ALL_REDUCE", "graph", 1);
  gt_proc p;
  double took = gt_launch_kill(&p,
                               (char *[]){"graphrun", "launch", "--ps", "0", "--workers", "3", file,
                                          "--steps", "100000", "--quiet", "--timeout", "60",
                                          /* a starved survivor is not the lost one */
                                          "--heartbeat", LENIENT, NULL},
                               "worker:2", 1.5, 30);
  unsetenv("GRAPHRUN_ALL_REDUCE");
  GR_CHECK(took >= 0);
  printf("%s with a task killed: the run failed %.2f s after the kill\n",
         graph_ring ? "graph ring"
         : hier     ? "hierarchical collective"
                    : "collective",
         took);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 1);
  /* (launch may log the kill or not: the run can end first) */
  GR_CHECK_STR_CONTAINS(p.buf, ": lost /job:worker/replica:0/task:2");
  if (!graph_ring) {
    GR_CHECK_STR_CONTAINS(p.buf, "the step's collective 'all_reduce/bucket_");
    GR_CHECK_STR_CONTAINS(p.buf, "lost that member (rank 2 of 3");
  }
}

static void test_kill_mid_collective(void) {
  kill_mid_all_reduce(false, false);
}

/* Worker 2 shares host y with worker 1, its leader: it dies inside its
 * host's reduce. */
static void test_kill_mid_hier(void) {
  kill_mid_all_reduce(false, true);
}

static void test_kill_mid_graph_ring(void) {
  kill_mid_all_reduce(true, false);
}

int main(void) {
  if (!mkdtemp(tmp)) return 1;
  gt_proc_isolate();
  unsetenv("GRAPHRUN_ALL_REDUCE");
  unsetenv("GRAPHRUN_ALL_REDUCE_BUCKET");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  GR_RUN(test_same_bits_2_to_5_workers);
  GR_RUN(test_pieces);
  GR_RUN(test_allreduce_example);
  GR_RUN(test_hier_2_to_5_workers);
  GR_RUN(test_hier_hosts_from_cluster);
  GR_RUN(test_kill_mid_collective);
  GR_RUN(test_kill_mid_hier);
  GR_RUN(test_kill_mid_graph_ring);
  gt_remove_tree(tmp);
  return gr_test_finish();
}
