/* `graphrun simulate` (frontend/cli/cmd_simulate.c, docs/scaling.md): on an
 * example it times the step, counts the gradient and prints a row per
 * (workers, link); with a given step its figures are the model's
 * (gr_scale_predict with the same constants); bad flags and files are
 * usage errors that name the flag or file. Runs the graphrun binary of
 * this build. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64], out[65536];

static void test_example(void) {
  char args[512];
  snprintf(args, sizeof args,
           "simulate %s/examples/allreduce.gr --workers 1,8 --link 25,100 --steps 3",
           GR_SOURCE_DIR);
  if (!gt_cli_expect(dir, args, 0, "trainable parameters", out, sizeof out)) return;
  /* the MLP 784-256-256-10: 269,322 weights and biases (+1: the f64
   * variable that tracks the copies' spread is a float variable too) */
  GR_CHECK_STR_CONTAINS(out, "gradient 1.077 MB per step (269323 trainable parameters)");
  GR_CHECK_STR_CONTAINS(out, "measured here");
  int rows = 0;
  for (const char *p = out; (p = strstr(p, "\n")); p++) {
    long w;
    double link, step, ar, exposed, master, eff;
    if (sscanf(p + 1, "%ld %lf %lf %lf %lf %lf %lf%%", &w, &link, &step, &ar, &exposed, &master,
               &eff) != 7)
      continue;
    rows++;
    GR_CHECK(step > 0 && eff > 0 && eff <= 100);
    if (w == 1) GR_CHECK_NEAR(eff, 100, 0.05);
    if (w == 1) GR_CHECK_NEAR(ar, 0, 0);
  }
  GR_CHECK_EQ_INT(rows, 4);
}

/* A ResNet-50-sized step given: the printed figures are the model's. */
static void test_given_step(void) {
  if (!gt_cli_expect(dir,
                     "simulate --grad-bytes 100e6 --compute-ms 250 --workers 64 --link 25 "
                     "--latency-us 10",
                     0, "(given)", out, sizeof out))
    return;
  gr_cluster *c = gr_cluster_new();
  gr_scale_params p = {.compute = 0.25,
                       .backward = 2.0 / 3,
                       .grad_bytes = 100e6,
                       .bucket_bytes = 25e6,
                       .link_bw = 25e9 / 8};
  gr_scale_params_from_cluster(&p, c, 10e-6);
  gr_cluster_free(c);
  gr_scale_result r;
  gr_error err;
  GR_CHECK_OK(gr_scale_predict(&p, 64, &r, &err), err);
  char want[256];
  snprintf(want, sizeof want, "%8d %10g %12.3f %14.3f %12.3f %12.3f %10.1f%%", 64, 25.0,
           1e3 * r.step, 1e3 * r.allreduce, 1e3 * r.exposed, 1e3 * r.control, 100 * r.efficiency);
  GR_CHECK_STR_CONTAINS(out, want);
  GR_CHECK_STR_CONTAINS(out, "10.0 us network");
  /* 8 workers per host: the hierarchical all-reduce's figures */
  if (!gt_cli_expect(dir,
                     "simulate --grad-bytes 100e6 --compute-ms 250 --workers 64 --link 25 "
                     "--latency-us 10 --per-host 8",
                     0, "8 workers per host: a tree inside each host", out, sizeof out))
    return;
  p.per_host = 8;
  GR_CHECK_OK(gr_scale_predict(&p, 64, &r, &err), err);
  snprintf(want, sizeof want, "%8d %10g %12.3f %14.3f %12.3f %12.3f %10.1f%%", 64, 25.0,
           1e3 * r.step, 1e3 * r.allreduce, 1e3 * r.exposed, 1e3 * r.control, 100 * r.efficiency);
  GR_CHECK_STR_CONTAINS(out, want);
}

static void test_bad_flags(void) {
  static const struct {
    const char *args, *want;
  } cases[] = {
      {"simulate --grad-bytes 1e6 --compute-ms 1 --workers 0",
       "--workers wants a list of up to 16 worker counts in [1, 4096]"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --workers 8,x", "--workers wants"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --workers 2.5", "--workers wants"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --link fast", "--link wants a list"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --link 0", "--link wants a list"},
      {"simulate --grad-bytes 1e6 --compute-ms 0", "--compute-ms wants milliseconds > 0"},
      {"simulate --grad-bytes -5 --compute-ms 1", "--grad-bytes wants bytes"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --backward 2", "--backward wants a fraction"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --latency-us x", "--latency-us wants"},
      {"simulate --grad-bytes 1e6", "missing FILE.gr, or --grad-bytes B with --compute-ms T"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --wokers 8", "unknown option '--wokers'"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --cluster nowhere.json", "nowhere.json"},
      {"simulate nowhere.gr", "nowhere.gr"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --per-host 0", "--per-host"},
      {"simulate --grad-bytes 1e6 --compute-ms 1 --loopback 2 --per-host 2", "no --per-host"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    GR_CHECK_MSG(gt_cli_expect(dir, cases[i].args, 2, cases[i].want, out, sizeof out), "%s",
                 cases[i].args);
  /* a step that needs a feed cannot be timed: said, with the way out */
  char args[512];
  snprintf(args, sizeof args, "simulate %s/examples/placement.gr", GR_SOURCE_DIR);
  GR_CHECK(gt_cli_expect(dir, args, 2, "placeholder 'x' must be fed", out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "--compute-ms T models it without running it");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_simulate_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_example);
  GR_RUN(test_given_step);
  GR_RUN(test_bad_flags);
  gt_remove_tree(dir);
  return gr_test_finish();
}
