/* `graphrun run`: what it prints and its exit codes for step timeouts,
 * run-time errors, input errors, soft placement, training-only files,
 * --json, --out and inline feeds. Each case writes a small .gr file into a
 * temporary directory and runs the graphrun binary of this build there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[64], out[32768];

/* Runs `graphrun ARGS`; checks its exit code and (want not NULL) that its
 * output holds want (gt_cli_expect). */
static void expect(const char *args, int code, const char *want) {
  GR_CHECK(gt_cli_expect(dir, args, code, want, out, sizeof out));
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
  double t0 = gt_now();
  expect("run deadlock.gr --devices 2 --timeout 0.3", 1, NULL);
  GR_CHECK_MSG(gt_now() - t0 < 10, "took %.1f s", gt_now() - t0);
  GR_CHECK_STR_CONTAINS(out, "graphrun run: step 1: no progress for 0.3 s (the step timeout)");
  GR_CHECK_STR_CONTAINS(out, "still pending: 'x' on /job:localhost/replica:0/task:0/device:CPU:0 "
                             "(waiting for 'x:0' from "
                             "/job:localhost/replica:0/task:0/device:CPU:1)");
  /* a step that keeps computing for longer than the timeout is not cut off */
  gt_write_file(dir, "long.gr", "n = while (i = const(0, i32); i < 400000) { i = i + 1 }\n");
  t0 = gt_now();
  expect("run long.gr --timeout 0.02", 0, "n = 400000");
  fprintf(stderr, "  (a %.2f s step ran with a 0.02 s timeout)\n", gt_now() - t0);
  expect("run long.gr --timeout 0", 0, NULL);
  expect("run long.gr --timeout -1", 2, "--timeout wants seconds in [0, ");
  expect("run long.gr --timeout soon", 2, NULL);
}

/* ---- run-time errors name the .gr position; input errors exit 2 ----------------------- */

static void test_errors(void) {
  gt_write_file(dir, "gather.gr",
                "x = placeholder(f32, [?])\n"
                "idx = const([5], i32)\n"
                "y = gather(x, idx)\n"
                "z = x * 2.0\n");
  expect("run gather.gr --feed x=1,2 --fetch y", 1,
         "gather.gr:3:5: step 1: node 'y' (op gather): indices[0] = 5 is out "
         "of range");
  expect("run gather.gr --feed x=1,2 --fetch z --eval y", 1,
         "gather.gr:3:5: --eval: node 'y' (op gather)");
  /* in a loop split over two devices: the position, the loop and the iteration */
  gt_write_file(dir, "loop.gr",
                "p = const([1.0, 2.0])\n"
                "r = while (i = const(0, i32); i < 5) {\n"
                "  i = i + 1 + cast(reduce_sum(gather(p, reshape(i, [1]))), i32) * 0\n"
                "}\n");
  double t0 = gt_now();
  expect("run loop.gr --devices 2 --placement round-robin", 1, NULL);
  GR_CHECK_MSG(gt_now() - t0 < 10, "took %.1f s", gt_now() - t0);
  GR_CHECK_STR_CONTAINS(out, "loop.gr:3:31: step 1: node 'while/gather' (op gather) in loop ");
  GR_CHECK_STR_CONTAINS(out, " iteration 2: indices[0] = 2 is out of range");
  /* input errors: exit 2, before anything runs */
  expect("run gather.gr --fetch z", 2,
         "graphrun run: placeholder 'x' must be fed: it is needed by 'z'");
  GR_CHECK_STR_CONTAINS(out, "--feed NAME=1,2,3");
  expect("run gather.gr --fetch z --feed x=1 --eval y", 2,
         "--feed x: the value has shape [], 'x' wants [?]"); /* x: [?], 1: [] */
  expect("run gather.gr --fetch z --feed x=1,2 --feed x=3,4", 2, "graphrun run: 'x' is fed twice");
  expect("run gather.gr --fetch z --feed x=missing.csv", 2, "--feed x: cannot open 'missing.csv'");
  expect("run gather.gr --fetch z --feed x", 2, NULL);
  expect("run gather.gr --fetch nope --feed x=1,2", 2, NULL);
  expect("run gather.gr --fetch z --feed x=1,2 --eval nope", 2, "cannot evaluate 'nope'");
}

/* ---- --soft-placement --------------------------------------------------------------- */

static void test_soft_placement(void) {
  gt_write_file(dir, "pinned.gr",
                "device \"/job:worker/task:1\" { a = const([1.0, 2.0]) * 3.0 }\n"
                "device \"/device:CPU:3\" { b = a + 1.0 }\n");
  expect("run pinned.gr", 1, "device spec '/job:worker/task:1' matches no device of this session");
  GR_CHECK_STR_CONTAINS(out, "graphrun run --soft-placement");
  expect("run pinned.gr --soft-placement --devices 2", 0, "b = f32[2]\n[4. 7.]");
  GR_CHECK_STR_CONTAINS(out, "graphrun run: note: soft placement: no device of this session "
                             "matches '/job:worker/task:1'");
  GR_CHECK_STR_CONTAINS(out, "matches '/device:CPU:3'");
  expect("run pinned.gr --devices 2 --placement cost", 2,
         "(--soft-placement runs it on a local device instead)");
  expect("run pinned.gr --devices 2 --placement cost --soft-placement", 0, "b = f32[2]\n[4. 7.]");
}

/* ---- training-only files, --json, --out, inline feeds -------------------------------- */

static void test_training_only(void) {
  /* `target train` and no `fetch`: the default fetch would be `train`, which has no value */
  gt_write_file(dir, "train.gr",
                "w = variable(zeros([2]))\n"
                "loss = reduce_sum(square(w - const([1.0, 2.0])))\n"
                "train = minimize(loss, sgd(0.1))\n"
                "target train\n");
  expect("run train.gr", 0, "graphrun run: 1 step run, nothing fetched");
  expect("run train.gr --eval w --json", 0,
         "{\"w\": {\"dtype\": \"f32\", \"shape\": [2], \"data\": [0.2, 0.4]}}"); /* one step: w =
                                                                                    0.2 * [1, 2] */
  expect("run train.gr --steps 100 --quiet --eval loss", 0, "loss = ");
  GR_CHECK(strstr(out, "loss = 0.0") != NULL || strstr(out, "e-") != NULL);
  /* no `target` either: the train op bound last runs as the target */
  gt_write_file(dir, "train2.gr",
                "w = variable(zeros([2]))\n"
                "train = minimize(reduce_sum(square(w - const([1.0, 2.0]))), sgd(0.1))\n");
  expect("run train2.gr --eval w --json", 0, "\"data\": [0.2, 0.4]}}");
  expect("check train.gr --stats", 0, "graph passes, fetches: none; targets: train");
  /* an explicit --fetch of a value-less op stays an error */
  expect("run train.gr --fetch train", 2, "cannot fetch 'train': it has no outputs (use --target)");
}

static void test_json(void) {
  gt_write_file(dir, "values.gr",
                "a = const([0.0, 1.0, -1.0, 0.1], f64)\n"
                "b = a / const(0.0, f64)\n"
                "third = const(1.0, f64) / const(3.0, f64)\n"
                "f = const([0.1, 3.4028235e38], f32)\n"
                "big = const(9007199254740992, i64) + const(1, i64)\n"
                "flag = const([1.0, 2.0]) > 1.5\n"
                "fetch a, b, third, f, big, flag\n");
  expect("run values.gr --json", 0, NULL);
  GR_CHECK_STR_CONTAINS(out,
                        "\"a\": {\"dtype\": \"f64\", \"shape\": [4], \"data\": [0, 1, -1, 0.1]}");
  GR_CHECK_STR_CONTAINS(out, "\"data\": [\"NaN\", \"Infinity\", \"-Infinity\", \"Infinity\"]");
  GR_CHECK_STR_CONTAINS(out, "\"third\": {\"dtype\": \"f64\", \"shape\": [], "
                             "\"data\": 0.3333333333333333}");
  GR_CHECK_STR_CONTAINS(out, "\"data\": [0.1, 3.4028235e+38]");
  GR_CHECK_STR_CONTAINS(out, "\"data\": 9007199254740993}");
  GR_CHECK_STR_CONTAINS(out, "\"data\": [false, true]}");
  /* the f64 text reads back to the same bits */
  const char *t = strstr(out, "0.3333333333333333");
  GR_CHECK(t && strtod(t, NULL) == 1.0 / 3.0);
  expect("run values.gr", 0, "big = 9007199254740993\n");
}

/* Reads dir/name and checks it holds want (same dtype, shape and bits; any NaN for a NaN). */
static void check_npy(const char *name, const gr_tensor *want) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  gr_tensor got;
  gr_error err;
  GR_CHECK_OK(gr_data_load_npy(path, &got, &err), err);
  if (got.buf == NULL) return;
  GR_CHECK_EQ_INT(got.dtype, want->dtype);
  GR_CHECK(gr_shape_equal(&got.shape, &want->shape));
  for (int64_t i = 0; i < gr_tensor_num_elements(want) && got.dtype == want->dtype; i++) {
    double g = gr_tensor_get_f64(&got, i), w = gr_tensor_get_f64(want, i);
    GR_CHECK_MSG(g == w || (isnan(g) && isnan(w)), "%s[%lld]: %.17g, want %.17g", name,
                 (long long)i, g, w);
  }
  if (got.dtype == GR_I64 && want->dtype == GR_I64) /* beyond what a double holds */
    GR_CHECK(memcmp(gr_tensor_data(&got), gr_tensor_data(want), gr_tensor_num_bytes(want)) == 0);
  gr_tensor_release(&got);
}

static void test_out_npy(void) {
  expect("run values.gr --out npys --fetch a,b,third,big --eval flag", 0,
         "graphrun run: wrote 5 .npy files to npys");
  double a[4] = {0, 1, -1, 0.1}, b[4] = {NAN, INFINITY, -INFINITY, INFINITY}, third = 1.0 / 3.0;
  int64_t big = 9007199254740993LL;
  unsigned char flag[2] = {0, 1};
  gr_tensor ta, tb, tt, tbig, tf;
  gr_error err;
  gr_tensor_from_data(&ta, GR_F64, &(gr_shape){1, {4}}, a, &err);
  gr_tensor_from_data(&tb, GR_F64, &(gr_shape){1, {4}}, b, &err);
  gr_tensor_from_data(&tt, GR_F64, &(gr_shape){0, {0}}, &third, &err);
  gr_tensor_from_data(&tbig, GR_I64, &(gr_shape){0, {0}}, &big, &err);
  gr_tensor_from_data(&tf, GR_BOOL, &(gr_shape){1, {2}}, flag, &err);
  check_npy("npys/a.npy", &ta);
  check_npy("npys/b.npy", &tb);
  check_npy("npys/third.npy", &tt);
  check_npy("npys/big.npy", &tbig);
  check_npy("npys/flag.npy", &tf);
  gr_tensor_release(&ta), gr_tensor_release(&tb), gr_tensor_release(&tt);
  gr_tensor_release(&tbig), gr_tensor_release(&tf);
  /* a name with a scope makes a subdirectory; an .npy written can be fed back */
  gt_write_file(dir, "scoped.gr",
                "x = placeholder(f32, [?])\n"
                "scope \"layer1\" { y = x * 2.0 }\n");
  expect("run scoped.gr --feed x=1,2,3 --fetch layer1/y --out npys --quiet", 0, NULL);
  expect("run scoped.gr --feed x=npys/layer1/y.npy --fetch layer1/y", 0,
         "layer1/y = f32[3]\n[ 4.  8. 12.]");
  expect("run scoped.gr --feed x=5 --fetch layer1/y", 2, NULL); /* a scalar for a vector */
  gt_write_file(dir, "scalar.gr", "s = placeholder(i32, [])\nt = s * 3\n");
  expect("run scalar.gr --feed s=5", 0, "t = 15\n");
  expect("run values.gr --out values.gr/sub", 2, NULL); /* not a directory */
}

static void test_threads_limit(void) {
  gt_write_file(dir, "tiny.gr", "y = const(2.0) * 3.0\n");
  expect("run tiny.gr --threads 100000", 2,
         "--threads wants an integer in [0, 1024] (a session runs at most 1024 "
         "inter-op threads; 0: one per core, ");
  GR_CHECK_STR_CONTAINS(out, "got '100000'");
  expect("run tiny.gr --threads 1024", 0, "y = 6.0");
  expect("run tiny.gr --threads -1", 2, NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_run_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_timeout);
  GR_RUN(test_errors);
  GR_RUN(test_soft_placement);
  GR_RUN(test_training_only);
  GR_RUN(test_json);
  GR_RUN(test_out_npy);
  GR_RUN(test_threads_limit);
  gt_remove_tree(dir);
  return gr_test_finish();
}
