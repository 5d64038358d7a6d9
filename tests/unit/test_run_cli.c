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

/* ---- run-time errors name the .gr position; input errors exit 2 ----------------------- */

static void test_errors(void) {
  gt_write_file(dir, "gather.gr",
                "x = placeholder(f32, [?])\n"
                "idx = const([5], i32)\n"
                "y = gather(x, idx)\n"
                "z = x * 2.0\n");
  GR_CHECK_EQ_INT(run("run gather.gr --feed x=1,2 --fetch y"), 1);
  GR_CHECK_STR_CONTAINS(out, "gather.gr:3:5: step 1: node 'y' (op gather): indices[0] = 5 is out "
                             "of range");
  GR_CHECK_EQ_INT(run("run gather.gr --feed x=1,2 --fetch z --eval y"), 1);
  GR_CHECK_STR_CONTAINS(out, "gather.gr:3:5: --eval: node 'y' (op gather)");
  /* in a loop split over two devices: the position, the loop and the iteration */
  gt_write_file(dir, "loop.gr",
                "p = const([1.0, 2.0])\n"
                "r = while (i = const(0, i32); i < 5) {\n"
                "  i = i + 1 + cast(reduce_sum(gather(p, reshape(i, [1]))), i32) * 0\n"
                "}\n");
  double t0 = now_s();
  GR_CHECK_EQ_INT(run("run loop.gr --devices 2 --placement round-robin"), 1);
  GR_CHECK_MSG(now_s() - t0 < 10, "took %.1f s", now_s() - t0);
  GR_CHECK_STR_CONTAINS(out, "loop.gr:3:31: step 1: node 'while/gather' (op gather) in loop ");
  GR_CHECK_STR_CONTAINS(out, " iteration 2: indices[0] = 2 is out of range");
  /* input errors: exit 2, before anything runs */
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z"), 2);
  GR_CHECK_STR_CONTAINS(out, "graphrun run: placeholder 'x' must be fed: it is needed by 'z'");
  GR_CHECK_STR_CONTAINS(out, "--feed NAME=1,2,3");
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z --feed x=1 --eval y"), 2); /* x: [?], 1: [] */
  GR_CHECK_STR_CONTAINS(out, "--feed x: the value has shape [], 'x' wants [?]");
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z --feed x=1,2 --feed x=3,4"), 2);
  GR_CHECK_STR_CONTAINS(out, "graphrun run: 'x' is fed twice");
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z --feed x=missing.csv"), 2);
  GR_CHECK_STR_CONTAINS(out, "--feed x: cannot open 'missing.csv'");
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z --feed x"), 2);
  GR_CHECK_EQ_INT(run("run gather.gr --fetch nope --feed x=1,2"), 2);
  GR_CHECK_EQ_INT(run("run gather.gr --fetch z --feed x=1,2 --eval nope"), 2);
  GR_CHECK_STR_CONTAINS(out, "cannot evaluate 'nope'");
}

/* ---- --soft-placement --------------------------------------------------------------- */

static void test_soft_placement(void) {
  gt_write_file(dir, "pinned.gr",
                "device \"/job:worker/task:1\" { a = const([1.0, 2.0]) * 3.0 }\n"
                "device \"/device:CPU:3\" { b = a + 1.0 }\n");
  GR_CHECK_EQ_INT(run("run pinned.gr"), 1);
  GR_CHECK_STR_CONTAINS(out, "device spec '/job:worker/task:1' matches no device of this session");
  GR_CHECK_STR_CONTAINS(out, "graphrun run --soft-placement");
  GR_CHECK_EQ_INT(run("run pinned.gr --soft-placement --devices 2"), 0);
  GR_CHECK_STR_CONTAINS(out, "b = f32[2]\n[4. 7.]");
  GR_CHECK_STR_CONTAINS(out, "graphrun run: note: soft placement: no device of this session "
                             "matches '/job:worker/task:1'");
  GR_CHECK_STR_CONTAINS(out, "matches '/device:CPU:3'");
  GR_CHECK_EQ_INT(run("run pinned.gr --devices 2 --placement cost"), 2);
  GR_CHECK_STR_CONTAINS(out, "(--soft-placement runs it on a local device instead)");
  GR_CHECK_EQ_INT(run("run pinned.gr --devices 2 --placement cost --soft-placement"), 0);
  GR_CHECK_STR_CONTAINS(out, "b = f32[2]\n[4. 7.]");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_run_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_timeout);
  GR_RUN(test_errors);
  GR_RUN(test_soft_placement);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return gr_test_finish();
}
