/* graphrun calibrate and graphrun place as processes: calibrating with two
 * local tasks of its own, and against a running cluster (graphrun launch)
 * with a graph's kernels profiled; place predicting the file's step and
 * its candidates, and --measure running each on the cluster; the errors
 * of their flags. Every process is reaped (test_proc.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "placer/gr_placer.h"
#include "test_proc.h"

static char dir[64], prog[PATH_MAX], cluster_file[PATH_MAX], db[PATH_MAX];

/* A small training step and an evaluation outside it. */
static const char *program = "scope \"l1\" { w1 = variable(zeros([8, 4])) }\n"
                             "scope \"l2\" { w2 = variable(zeros([4, 2])) }\n"
                             "x = random_uniform([16, 8], seed=1)\n"
                             "loss = reduce_mean(square((x @ w1) @ w2))\n"
                             "train = minimize(loss, sgd(0.1))\n"
                             "check = reduce_sum(w1)\n"
                             "fetch loss\n"
                             "target train\n";

static int run(char *const argv[], double seconds, gt_proc *p) {
  gt_proc_start(p, argv);
  bool ended = gt_proc_wait(p, NULL, seconds);
  gt_proc_finish(p);
  GR_CHECK_MSG(ended, "%s did not finish: %s", argv[1], p->buf);
  return gt_proc_exit_code(p);
}

/* Two tasks of its own: a file of this machine that reads back, with the
 * links measured between them. */
static void test_calibrate_local(void) {
  gt_proc p;
  char out[PATH_MAX];
  snprintf(out, sizeof out, "%s/here.json", dir);
  int rc = run((char *[]){"graphrun", "calibrate", "--quick", "--devices", "2", "--out", out, NULL},
               120, &p);
  GR_CHECK_MSG(rc == 0, "calibrate exits %d: %s", rc, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "calibrate: same host  latency");
  GR_CHECK_STR_CONTAINS(p.buf, "cross host latency 100 us"); /* the default, and said so */
  GR_CHECK_STR_CONTAINS(p.buf, "not measured");
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_load_json(out, &c, &err), err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 1);
  GR_CHECK_EQ_INT(gr_cluster_num_devices(c), 2);
  GR_CHECK(gr_cluster_host_cores(c, 0) >= 1);
  gr_link l = gr_cluster_get_link(c, GR_LINK_SAME_HOST);
  GR_CHECK(l.latency > 0 && l.latency < 1 && l.bandwidth > 0 && l.step >= 0);
  gr_cluster_free(c);
  /* place predicts the file's step and prints the candidates */
  rc = run((char *[]){"graphrun", "place", prog, "--cluster", out, NULL}, 60, &p);
  GR_CHECK_MSG(rc == 0, "place exits %d: %s", rc, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "(the file's fetches and targets)");
  GR_CHECK_STR_CONTAINS(p.buf, "candidates: cost ");
  GR_CHECK_STR_CONTAINS(p.buf, " pins ");
  GR_CHECK_STR_CONTAINS(p.buf, "; chosen: ");
  rc = run((char *[]){"graphrun", "place", prog, "--cluster", out, "--all", "--search", NULL}, 60,
           &p);
  GR_CHECK_MSG(rc == 0, "place --all exits %d: %s", rc, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "(every node)");
}

/* A running cluster: its links, threads and cores, the file's kernels and
 * the tasks' time scale; then place --measure runs each candidate there. */
static void test_calibrate_cluster_and_measure(void) {
  char script[4 * PATH_MAX];
  snprintf(script, sizeof script,
           "\"%s\" calibrate --quick --cluster \"$GRAPHRUN_CLUSTER\" --profiles \"%s\" \"%s\" "
           "--out \"%s\" && \"%s\" place \"%s\" --cluster \"%s\" --profiles \"%s\" "
           "--min-samples 1 --measure 3",
           gt_graphrun_exe(), db, prog, cluster_file, gt_graphrun_exe(), prog, cluster_file, db);
  gt_proc p;
  int rc = run((char *[]){"graphrun", "launch", "--quiet", "--ps", "1", "--workers", "1", "--",
                          "/bin/sh", "-c", script, NULL},
               300, &p);
  GR_CHECK_MSG(rc == 0, "exits %d: %s", rc, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "nodes timed");
  GR_CHECK_STR_CONTAINS(p.buf, "pins only predicted");
  GR_CHECK_STR_CONTAINS(p.buf, "time scale x");
  GR_CHECK_STR_CONTAINS(p.buf, "candidate   predicted ms    measured ms");
  GR_CHECK_STR_CONTAINS(p.buf, "\ncost ");
  GR_CHECK_STR_CONTAINS(p.buf, "\npins ");
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_load_json(cluster_file, &c, &err), err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 2);
  for (int t = 0; t < 2; t++) {
    const gr_cluster_task *k = gr_cluster_task_at(c, t);
    GR_CHECK(k->address != NULL);
    GR_CHECK_EQ_INT(k->threads, 1); /* graphrun launch's tasks */
    GR_CHECK(gr_cluster_host_cores(c, k->host_id) >= 1);
    GR_CHECK(gr_cluster_device_at(c, k->first_device)->time_scale > 0);
  }
  GR_CHECK(gr_cluster_get_link(c, GR_LINK_SAME_HOST).step >= 0);
  gr_cluster_free(c);
}

static void test_flag_errors(void) {
  gt_proc p;
  char local[PATH_MAX];
  snprintf(local, sizeof local, "%s/local.json", dir);
  FILE *f = fopen(local, "w");
  if (f) {
    fputs("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1e9}]}]}}", f);
    fclose(f);
  }
  GR_CHECK_EQ_INT(run((char *[]){"graphrun", "calibrate", prog, NULL}, 30, &p), 2);
  GR_CHECK_STR_CONTAINS(p.buf, "give --profiles DB");
  GR_CHECK_EQ_INT(run((char *[]){"graphrun", "calibrate", "--secret-file", "s", NULL}, 30, &p), 2);
  GR_CHECK_STR_CONTAINS(p.buf, "are for --cluster");
  GR_CHECK_EQ_INT(
      run((char *[]){"graphrun", "place", prog, "--cluster", local, "--min-gain", "2", NULL}, 30,
          &p),
      2);
  GR_CHECK_STR_CONTAINS(p.buf, "--min-gain wants a fraction in [0, 0.9]");
  GR_CHECK_EQ_INT(run((char *[]){"graphrun", "place", prog, "--cluster", local, "--measure", "2",
                                 "--insecure", NULL},
                      30, &p),
                  2);
  GR_CHECK_STR_CONTAINS(p.buf, "has no address (host:port) to connect to");
}

int main(void) {
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_test_place_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(prog, sizeof prog, "%s/t.gr", dir);
  snprintf(cluster_file, sizeof cluster_file, "%s/c.json", dir);
  snprintf(db, sizeof db, "%s/p.db", dir);
  FILE *f = fopen(prog, "w");
  if (!f) return 1;
  fputs(program, f);
  fclose(f);
  GR_RUN(test_calibrate_local);
  GR_RUN(test_calibrate_cluster_and_measure);
  GR_RUN(test_flag_errors);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return gr_test_finish();
}
