/* `graphrun run --epochs`: the epoch lines, the history in the run database
 * (read back with SQLite), early stopping, the best checkpoint kept and
 * restored, steps per epoch from the data, the same on a local cluster,
 * and the usage errors. The model trains w by exactly 1 an epoch (loss -w,
 * SGD 0.25, 4 steps an epoch: 8 rows in batches of 2), so the validated
 * m = (w - 3)^2 is 4, 1, 0, 1, 4, ...: best at epoch 3. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[64], out[32768];

static const char model[] = "xs = const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]])\n"
                            "step = global_step()\n"
                            "bx = batch(step, xs, batch_size=2)\n"
                            "%s{ w = variable(zeros([])) }\n"
                            "loss = reduce_mean(bx) * 0.0 - w\n"
                            "train = minimize(loss, sgd(0.25))\n"
                            "m = square(w - 3.0)\n"
                            "fetch loss\n"
                            "target train\n";

static void expect(const char *args, int code, const char *want) {
  GR_CHECK(gt_cli_expect(dir, args, code, want, out, sizeof out));
}

/* The first column of the first row of sql on dir/DB, as a double (NAN: no row). */
static double query(const char *db, const char *sql) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, db);
  sqlite3 *h = NULL;
  sqlite3_stmt *st = NULL;
  double v = NAN;
  if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_double(st, 0);
  else
    fprintf(stderr, "  query '%s' on %s: %s\n", sql, path, sqlite3_errmsg(h));
  sqlite3_finalize(st);
  sqlite3_close(h);
  return v;
}

static void write_model(const char *name, const char *device) {
  char text[1024];
  snprintf(text, sizeof text, model, device);
  gt_write_file(dir, name, text);
}

static void test_epoch_lines_and_history(void) {
  write_model("t.gr", "scope \"v\" ");
  expect("run t.gr --epochs 5 --validate m --logdir logs", 0, "epoch 1/5  loss -0.375  val_m 4  ");
  GR_CHECK_STR_CONTAINS(out, "graphrun run: run 1 of logs/runs.db (graphrun board logs)");
  GR_CHECK_STR_CONTAINS(out, "epoch 3/5  loss -2.375  val_m 0  ");
  GR_CHECK_STR_CONTAINS(out, "epoch 5/5  loss -4.375  val_m 4  ");
  GR_CHECK_STR_CONTAINS(out, "loss = -4.75"); /* the last step's fetch, as with --steps */
  const char *db = "logs/runs.db";
  GR_CHECK(query(db, "SELECT count(*) FROM scalars WHERE run = 1 AND tag = 'val_m'") == 5);
  GR_CHECK(query(db, "SELECT value FROM scalars WHERE run = 1 AND tag = 'val_m' AND epoch = 3") ==
           0);
  GR_CHECK(query(db, "SELECT value FROM scalars WHERE tag = 'loss' AND epoch = 2") == -1.375);
  GR_CHECK(query(db, "SELECT step FROM scalars WHERE tag = 'loss' AND epoch = 2") == 8);
  GR_CHECK(query(db, "SELECT value FROM scalars WHERE tag = 'lr' AND epoch = 1") == 0.25);
  GR_CHECK(query(db, "SELECT count(*) FROM scalars WHERE tag = 'steps_per_sec'") == 5);
  GR_CHECK(query(db, "SELECT count(*) FROM scalars WHERE tag = 'examples_per_sec'") == 5);
  /* the histogram of w (one element: all in one bucket), a trace, the graph, the placement */
  GR_CHECK(query(db, "SELECT min FROM histograms WHERE tag = 'v/w' AND epoch = 2") == 2);
  GR_CHECK(query(db, "SELECT json_extract(buckets, '$[0]') FROM histograms WHERE epoch = 2") == 1);
  GR_CHECK(query(db, "SELECT count(*) FROM traces WHERE run = 1 AND trace LIKE '%traceEvents%'") ==
           5);
  /* each its own epoch's (the times differ), the last one's too */
  GR_CHECK(query(db, "SELECT count(DISTINCT trace) FROM traces WHERE run = 1") == 5);
  GR_CHECK(query(db, "SELECT count(*) FROM graphs WHERE dot LIKE 'digraph%train%'") == 1);
  GR_CHECK(query(db, "SELECT count(*) FROM nodes WHERE name = 'train' AND op = 'no_op'") == 1);
  GR_CHECK(query(db, "SELECT count(*) FROM runs WHERE status = 'done' AND epochs_done = 5 AND "
                     "steps_per_epoch = 4 AND batch_size = 2 AND command LIKE "
                     "'graphrun run t.gr --epochs 5 %' AND ended >= started") == 1);
  /* a second run in the same directory; --steps-per-epoch given */
  expect("run t.gr --epochs 2 --steps-per-epoch 3 --logdir logs --quiet", 0, "loss = -1.25");
  GR_CHECK(strstr(out, "epoch 1/2") == NULL); /* --quiet */
  GR_CHECK(query(db, "SELECT max(step) FROM scalars WHERE run = 2") == 6);
  GR_CHECK(query(db, "SELECT count(*) FROM runs") == 2);
}

static void test_early_stop(void) {
  write_model("t.gr", "scope \"v\" ");
  /* m: 4, 1, 0, 1, 4: no better than epoch 3's for 2 epochs (patience 1) after epoch 5 */
  expect("run t.gr --epochs 10 --validate m --early-stop val_m,patience=1 --logdir stop", 0,
         "graphrun run: early stop after epoch 5: val_m has not improved on 0 (epoch 3) for 2 "
         "epochs");
  GR_CHECK(strstr(out, "epoch 6/10") == NULL);
  GR_CHECK_STR_CONTAINS(out, "loss = -4.75"); /* the results of step 20, the last one run */
  GR_CHECK(query("stop/runs.db", "SELECT count(*) FROM runs WHERE status = 'stopped' AND "
                                 "epochs_done = 5") == 1);
  /* mode=max: m rising from epoch 4 on is an improvement */
  expect("run t.gr --epochs 6 --validate m --early-stop val_m,mode=max", 0,
         "early stop after epoch 2: val_m has not improved on 4 (epoch 1) for 1 epoch\n");
  /* min_delta: a change of at most 5 is no improvement */
  expect("run t.gr --epochs 6 --validate m --early-stop val_m,patience=1,min_delta=5", 0,
         "early stop after epoch 3: val_m has not improved on 4 (epoch 1) for 2 epochs");
}

static void test_keep_best(void) {
  write_model("t.gr", "scope \"v\" ");
  expect("run t.gr --epochs 5 --validate m --ckpt c.ckpt --keep 1 --keep-best val_m --quiet", 0,
         NULL);
  /* the newest checkpoint and the best (epoch 3, kept though --keep 1) */
  expect("ckpt ls c.ckpt", 0,
         "\"steps_done\":12,\"epoch\":3,\"best\":\"val_m\",\"value\":0.0,"
         "\"keep\":true}");
  GR_CHECK_STR_CONTAINS(out, "\"steps_done\": 20}");
  GR_CHECK(query("runs.db", "SELECT best_epoch FROM runs WHERE best_metric = 'val_m'") == 3);
  expect("run t.gr --ckpt c.ckpt --restore-best --eval w", 0,
         "graphrun run: restored c.ckpt's checkpoint marked best (12 steps done)");
  GR_CHECK_STR_CONTAINS(out, "w = 3.0");
  /* without --restore-best: the newest */
  expect("run t.gr --ckpt c.ckpt --eval w", 0, "w = 5.0");
  /* a checkpoint without a best */
  expect("run t.gr --steps 2 --ckpt plain.ckpt --quiet", 0, NULL);
  expect("run t.gr --ckpt plain.ckpt --restore-best", 2,
         "has no checkpoint marked best (train with --epochs and --keep-best METRIC)");
}

/* The client computes the epochs' values on a cluster too (w on the ps). */
static void test_cluster(void) {
  write_model("c.gr", "device \"/job:ps/task:0\" ");
  expect("launch --ps 1 --workers 1 c.gr --epochs 4 --validate m --logdir clogs --ckpt cdir "
         "--keep-best val_m",
         0, "epoch 3/4  loss -2.375  val_m 0  ");
  GR_CHECK(query("clogs/runs.db", "SELECT count(*) FROM scalars WHERE tag = 'val_m'") == 4);
  GR_CHECK(query("clogs/runs.db", "SELECT best_step FROM runs") == 12);
  GR_CHECK(query("clogs/runs.db", "SELECT count(DISTINCT device) FROM nodes") >= 2);
  expect("launch --ps 1 --workers 1 c.gr --ckpt cdir --restore-best --eval w", 0, "w = 3.0");
}

static void test_usage_errors(void) {
  write_model("t.gr", "scope \"v\" ");
  expect("run t.gr --validate m", 2, "--validate needs --epochs N");
  expect("run t.gr --logdir x", 2, "--logdir needs --epochs N");
  expect("run t.gr --epochs 2 --steps 3", 2, "--steps and --epochs do not go together");
  expect("run t.gr --epochs 0", 2, "--epochs wants an integer in [1, ");
  expect("run t.gr --epochs 2 --keep-best val_m --validate m", 2, "--keep-best needs --ckpt PATH");
  expect("run t.gr --epochs 2 --early-stop val_nope", 2,
         "--early-stop: no metric 'val_nope'; an epoch reports loss lr");
  expect("run t.gr --epochs 2 --early-stop loss,patience=-1", 2,
         "--early-stop: bad setting 'patience=-1'");
  expect("run t.gr --epochs 2 --validate nope", 2, "cannot validate 'nope': no such name or node");
  expect("run t.gr --epochs 2 --ckpt k.ckpt --save-every 3 --keep-best loss", 2,
         "--save-every 3 does not divide the 4 steps of an epoch");
  gt_write_file(dir, "nodata.gr", "w = variable(zeros([]))\ntrain = minimize(w * w, sgd(0.1))\n");
  expect("run nodata.gr --epochs 2", 2,
         "no `batch` or `image_folder` op in the step tells the steps of an epoch; give "
         "--steps-per-epoch S");
  expect("run nodata.gr --epochs 2 --steps-per-epoch 5 --quiet", 0, NULL);
}

int main(void) {
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_test_epochs_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_epoch_lines_and_history);
  GR_RUN(test_early_stop);
  GR_RUN(test_keep_best);
  GR_RUN(test_cluster);
  GR_RUN(test_usage_errors);
  gt_remove_tree(dir);
  return gr_test_finish();
}
