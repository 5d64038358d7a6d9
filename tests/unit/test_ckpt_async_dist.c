/* Asynchronous saves on a cluster (graphrun launch ... --save-async; issue
 * 34): tests/data/recovery_mlp.gr on a launched cluster of 2 ps and 2
 * workers, real server processes.
 *
 * - The checkpoints equal the synchronous run's: the same steps, tensors
 *   and bytes, and the same final weights.
 * - A task killed during a background shard write (just before its commit,
 *   through the server's test hook GRAPHRUN_TEST_SHARD_DIE=STEP:FILE)
 *   leaves the previous checkpoint the newest, loadable and equal to the
 *   synchronous run's; a new run restores it and ends with the synchronous
 *   run's weights; a run that recovers from the kill forgets the pending
 *   save and ends as the synchronous run, with its checkpoints.
 * - A failed shard write (GRAPHRUN_TEST_SHARD_FAIL=STEP) is reported by the
 *   next save, naming the task and the file; no manifest row names it.
 * - In one process, the ops themselves: a save with attr async returns
 *   before its write, shard_status waits for it; a failed write is reported
 *   by shard_status and, once, by the next save of the file, which then
 *   writes nothing; a status of a step not written is refused. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/gr_checkpoints.h"
#include "cluster_harness.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

#define STEPS      8
#define SAVE_EVERY 2

static char dir[PATH_MAX];

static const char *const cluster[] = {"--ps", "2", "--workers", "2", NULL};

/* launch ... recovery_mlp.gr --steps STEPS --ckpt DIR/ckpt_NAME --save-every
 * 2 --keep 0 --heartbeat 500:20 [--save-async] [--max-failures 0]: its exit
 * code (output in p->buf). */
static int launch(gt_proc *p, const char *name, bool async, bool no_recovery) {
  /* a loaded machine: a task is lost after 10 s of silence, not the default's half second */
  const char *extra[10] = {"--keep", "0", "--heartbeat", "500:20"};
  int n = 4;
  if (async) extra[n++] = "--save-async";
  if (no_recovery) extra[n++] = "--max-failures", extra[n++] = "0";
  gt_launch_run_mlp(p, dir, name, STEPS, SAVE_EVERY, cluster, extra);
  bool ended = gt_proc_wait(p, NULL, 300);
  gt_proc_finish(p);
  GR_CHECK_MSG(ended, "launch %s did not end:\n%s", name, p->buf);
  return ended ? gt_proc_exit_code(p) : -1;
}

static gr_ckpt *open_dir(const char *name) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/ckpt_%s", dir, name);
  gr_ckpt_options ro = {.read_only = true, .sharded = true};
  gr_ckpt *ck = NULL;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_open(path, &ro, &ck, &err), err);
  return ck;
}

/* The checkpoint of step `step` in a and b: the same tensors, bytes. */
static void same_step(gr_ckpt *a, gr_ckpt *b, int64_t step) {
  gr_ckpt_tensor_info *ta = NULL, *tb = NULL;
  int nta = 0, ntb = 0;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_list_tensors(a, step, &ta, &nta, &err), err);
  GR_CHECK_OK(gr_ckpt_list_tensors(b, step, &tb, &ntb, &err), err);
  GR_CHECK_EQ_INT(nta, ntb);
  GR_CHECK(nta >= 6);
  for (int k = 0; k < nta && k < ntb; k++) {
    GR_CHECK(strcmp(ta[k].name, tb[k].name) == 0);
    gr_tensor x, y;
    bool ok = gr_ckpt_read_tensor(a, step, ta[k].name, &x, &err) == GR_OK;
    GR_CHECK_MSG(ok, "%s", err.msg);
    if (ok && gr_ckpt_read_tensor(b, step, tb[k].name, &y, &err) == GR_OK) {
      GR_CHECK_MSG(gt_bit_equal(&y, &x), "step %" PRId64 " tensor %s", step, ta[k].name);
      gr_tensor_release(&y);
    } else if (ok) {
      GR_CHECK_MSG(false, "%s", err.msg);
    }
    if (ok) gr_tensor_release(&x);
  }
  gr_ckpt_tensor_infos_free(ta, nta);
  gr_ckpt_tensor_infos_free(tb, ntb);
}

/* The steps of ck's checkpoints into steps (at most cap): how many. */
static int steps_of(gr_ckpt *ck, int64_t *steps, int cap) {
  gr_ckpt_info *in = NULL;
  int n = 0;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_list(ck, &in, &n, &err), err);
  for (int i = 0; i < n && i < cap; i++) steps[i] = in[i].step;
  gr_ckpt_infos_free(in, n);
  return n < cap ? n : cap;
}

static bool synced; /* the synchronous reference run is there */

static void sync_run(void) {
  gt_proc p;
  synced = launch(&p, "sync", false, false) == 0;
  GR_CHECK_MSG(synced, "the synchronous run failed:\n%s", p.buf);
}

static void test_async_equals_sync(void) {
  gt_proc p;
  sync_run();
  int code = launch(&p, "async", true, false);
  GR_CHECK_MSG(code == 0, "exit %d:\n%s", code, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "saving (in the background) a checkpoint after step 2");
  if (code || !synced) return;
  char a[PATH_MAX], b[PATH_MAX];
  snprintf(a, sizeof a, "%s/sync", dir);
  snprintf(b, sizeof b, "%s/async", dir);
  GR_CHECK(gt_same_weights(a, b));
  gr_ckpt *s = open_dir("sync"), *as = open_dir("async");
  int64_t ss[16], sa[16];
  int ns = s ? steps_of(s, ss, 16) : 0, na = as ? steps_of(as, sa, 16) : -1;
  GR_CHECK_EQ_INT(ns, na);
  GR_CHECK_EQ_INT(ns, 1 + STEPS / SAVE_EVERY); /* 0 (before the first step), 2, 4, 6, 8 */
  for (int i = 0; i < ns && i < na; i++) {
    GR_CHECK_EQ_INT(ss[i], sa[i]);
    same_step(s, as, ss[i]);
  }
  gr_ckpt_close(s);
  gr_ckpt_close(as);
}

static void test_task_killed_mid_write(void) {
  if (!synced) sync_run();
  char env[PATH_MAX + 16];
  snprintf(env, sizeof env, "4:%s/died", dir); /* the write of step 4, once in the cluster */
  setenv("GRAPHRUN_TEST_SHARD_DIE", env, 1);
  gt_proc p;
  int code = launch(&p, "killed", true, true);
  unsetenv("GRAPHRUN_TEST_SHARD_DIE");
  GR_CHECK_MSG(code != 0, "the run went on without a recovery:\n%s", p.buf);
  struct stat sb; /* the hook ran: a ps task killed itself (launch may end before it says so) */
  GR_CHECK_MSG(stat(strchr(env, ':') + 1, &sb) == 0, "no task was killed:\n%s", p.buf);
  /* the previous checkpoint is the newest, whole, the synchronous run's */
  gr_ckpt *k = open_dir("killed"), *s = synced ? open_dir("sync") : NULL;
  int64_t latest = -1;
  gr_error err;
  if (k) GR_CHECK_OK(gr_ckpt_latest_step(k, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 2);
  if (k && s) same_step(s, k, 2);
  gr_ckpt_close(k);
  gr_ckpt_close(s);
  /* a new run restores it and ends as the synchronous run */
  code = launch(&p, "killed", true, false);
  GR_CHECK_MSG(code == 0, "exit %d:\n%s", code, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "(2 steps done)");
  char a[PATH_MAX], b[PATH_MAX];
  snprintf(a, sizeof a, "%s/sync", dir);
  snprintf(b, sizeof b, "%s/killed", dir);
  if (code == 0 && synced) GR_CHECK(gt_same_weights(a, b));
}

/* The same kill during a run that recovers: the recovery restores step 2
 * and forgets the pending step 4; the run ends as the synchronous one,
 * with its checkpoints. */
static void test_recovery_forgets_the_pending_save(void) {
  if (!synced) sync_run();
  char env[PATH_MAX + 16];
  snprintf(env, sizeof env, "4:%s/died_again", dir);
  setenv("GRAPHRUN_TEST_SHARD_DIE", env, 1);
  gt_proc p;
  int code = launch(&p, "recovered", true, false);
  unsetenv("GRAPHRUN_TEST_SHARD_DIE");
  GR_CHECK_MSG(code == 0, "exit %d:\n%s", code, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "resuming after step 2");
  struct stat sb;
  GR_CHECK_MSG(stat(strchr(env, ':') + 1, &sb) == 0, "no task was killed:\n%s", p.buf);
  char a[PATH_MAX], b[PATH_MAX];
  snprintf(a, sizeof a, "%s/sync", dir);
  snprintf(b, sizeof b, "%s/recovered", dir);
  if (code || !synced) return;
  GR_CHECK(gt_same_weights(a, b));
  gr_ckpt *s = open_dir("sync"), *r = open_dir("recovered");
  int64_t ss[16], sr[16];
  int ns = s ? steps_of(s, ss, 16) : 0, nr = r ? steps_of(r, sr, 16) : -1;
  GR_CHECK_EQ_INT(ns, nr);
  for (int i = 0; i < ns && i < nr; i++) {
    GR_CHECK_EQ_INT(ss[i], sr[i]);
    same_step(s, r, ss[i]);
  }
  gr_ckpt_close(s);
  gr_ckpt_close(r);
}

static void test_write_error_named(void) {
  setenv("GRAPHRUN_TEST_SHARD_FAIL", "4", 1);
  gt_proc p;
  int code = launch(&p, "failed", true, false);
  unsetenv("GRAPHRUN_TEST_SHARD_FAIL");
  GR_CHECK_MSG(code == 1, "exit %d:\n%s", code, p.buf);
  /* the task, and its shard file (any task holding variables: a ps, or a worker's step) */
  const char *at = strstr(p.buf, "(op shard_status): /job:");
  char job[16] = "", want[64] = "?";
  int task = -1;
  GR_CHECK_MSG(
      at && sscanf(at, "(op shard_status): /job:%15[a-z]/replica:0/task:%d:", job, &task) == 2,
      "no task named:\n%s", p.buf);
  snprintf(want, sizeof want,
           "/ckpt_failed/%s-%d.ckpt of step 4, written in the background, failed", job, task);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  if (getenv("GR_TEST_VERBOSE")) printf("%s\n", p.buf);
  gr_ckpt *ck = open_dir("failed");
  int64_t latest = -1;
  gr_error err;
  if (ck) GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 2);
  gr_ckpt_close(ck);
}

/* Runs out (a save or a shard_status node) with step fed to ph: its status. */
static gr_status run_at(gr_session *s, gr_output ph, gr_output out, int64_t step, gr_error *err) {
  gr_tensor at = gr_tensor_scalar_i64(step), got;
  gr_feed f = {ph, &at};
  gr_status st = gr_session_run(s, &f, 1, &out, 1, &got, NULL, 0, err);
  if (st == GR_OK) {
    GR_CHECK_EQ_INT(*(const int64_t *)gr_tensor_data(&got), step);
    gr_tensor_release(&got);
  }
  gr_tensor_release(&at);
  return st;
}

static int64_t latest_in(const char *path) {
  gr_ckpt_options ro = {.read_only = true};
  gr_ckpt *ck = NULL;
  gr_error err;
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_open(path, &ro, &ck, &err), err);
  if (ck) GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  gr_ckpt_close(ck);
  return latest;
}

static void test_ops_in_one_process(void) {
  char sub[PATH_MAX], path[PATH_MAX + 16];
  snprintf(sub, sizeof sub, "%s/inproc", dir);
  GR_CHECK(mkdir(sub, 0700) == 0);
  snprintf(path, sizeof path, "%s/local-0.ckpt", sub);
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const_f32(g, 2));
  gr_output ph = gr_placeholder(g, "step", GR_I64, gr_shape_scalar());
  gr_output save = gr_save_shard(g, path, &w, 1, ph, true);
  gr_output status = gr_shard_status(g, path, ph);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) {
    gr_graph_free(g);
    return;
  }
  GR_CHECK_OK(gr_session_init_variables(s, &err), err);
  GR_CHECK_OK(run_at(s, ph, save, 1, &err), err);
  GR_CHECK_OK(run_at(s, ph, status, 1, &err), err);
  GR_CHECK_EQ_INT(latest_in(path), 1);
  /* a failed write: reported by its status (naming the task and the file) */
  setenv("GRAPHRUN_TEST_SHARD_FAIL", "2", 1);
  GR_CHECK_OK(run_at(s, ph, save, 2, &err), err);
  gr_status st = run_at(s, ph, status, 2, &err);
  GR_CHECK(st == GR_ERR_INTERNAL);
  GR_CHECK_STR_CONTAINS(err.msg, "/task:0: the shard ");
  GR_CHECK_STR_CONTAINS(err.msg, path);
  GR_CHECK_STR_CONTAINS(err.msg, "of step 2, written in the background, failed");
  GR_CHECK_EQ_INT(latest_in(path), 1);
  /* ... and once by the next save, which writes nothing */
  GR_CHECK_OK(run_at(s, ph, save, 3, &err), err); /* the status reported it already */
  GR_CHECK_OK(run_at(s, ph, status, 3, &err), err);
  GR_CHECK_OK(run_at(s, ph, save, 2, &err), err);
  GR_CHECK(run_at(s, ph, save, 4, &err) == GR_ERR_INTERNAL); /* step 2's, not yet reported */
  GR_CHECK_STR_CONTAINS(err.msg, "of step 2, written in the background, failed");
  unsetenv("GRAPHRUN_TEST_SHARD_FAIL");
  GR_CHECK_EQ_INT(latest_in(path), 3);
  GR_CHECK_OK(run_at(s, ph, save, 4, &err), err);
  GR_CHECK_OK(run_at(s, ph, status, 4, &err), err);
  GR_CHECK_EQ_INT(latest_in(path), 4);
  /* a step this process did not write (a restarted task's) */
  GR_CHECK(run_at(s, ph, status, 3, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "no write of the shard");
  gr_session_free(s);
  gr_graph_free(g);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_ckpt_async_dist_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_ops_in_one_process);
  GR_RUN(test_async_equals_sync);
  GR_RUN(test_task_killed_mid_write);
  GR_RUN(test_recovery_forgets_the_pending_save);
  GR_RUN(test_write_error_named);
  gt_remove_tree(dir);
  return gr_test_finish();
}
