/* `graphrun run`: what it prints and its exit codes for step timeouts,
 * run-time errors, input errors, soft placement, training-only files,
 * --json, --out and inline feeds. Each case writes a small .gr file into a
 * temporary directory and runs the graphrun binary of this build there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64], out[32768];

static int run(const char *args) {
  return gt_cli_run(dir, args, out, sizeof out);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- --timeout ----------------------------------------------------------------------- */

static void test_timeout(void) {
  /* a receive whose send is never built: the step can only wait */
  gt_write_file(dir, "deadlock.gr",
                "x = _recv(dtype=f32, shape=[], tensor_name=\"x:0\",\n"
                "          send_device=\"/job:localhost/replica:0/task:0/device:CPU:1\",\n"
                "          recv_device=\"/job:localhost/replica:0/task:0/device:CPU:0\")\n"
                "device \"/device:CPU:1\" { z = const(1.0) + 1.0 }\n"
                "y = x + z\n");
  double t0 = now_s();
  GR_CHECK_EQ_INT(run("run deadlock.gr --devices 2 --timeout 0.3"), 1);
  GR_CHECK_MSG(now_s() - t0 < 10, "took %.1f s", now_s() - t0);
  GR_CHECK_STR_CONTAINS(out, "graphrun run: step 1: no progress for 0.3 s (the step timeout)");
  GR_CHECK_STR_CONTAINS(out, "still pending: 'x' on /job:localhost/replica:0/task:0/device:CPU:0 "
                             "(waiting for 'x:0' from "
                             "/job:localhost/replica:0/task:0/device:CPU:1)");
  /* a step that keeps computing for longer than the timeout is not cut off */
  gt_write_file(dir, "long.gr", "n = while (i = const(0, i32); i < 400000) { i = i + 1 }\n");
  t0 = now_s();
  GR_CHECK_EQ_INT(run("run long.gr --timeout 0.02"), 0);
  GR_CHECK_STR_CONTAINS(out, "n = 400000");
  fprintf(stderr, "  (a %.2f s step ran with a 0.02 s timeout)\n", now_s() - t0);
  GR_CHECK_EQ_INT(run("run long.gr --timeout 0"), 0);
  GR_CHECK_EQ_INT(run("run long.gr --timeout -1"), 2);
  GR_CHECK_STR_CONTAINS(out, "--timeout wants seconds in [0, ");
  GR_CHECK_EQ_INT(run("run long.gr --timeout soon"), 2);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_run_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_timeout);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return gr_test_finish();
}
