/* Sharded checkpoints (a directory of shard files and a manifest): the
 * merged view, commits that check their shards, a crash between shards
 * and manifest, retention over shards and shard files, verify naming a
 * missing or damaged shard, restore by name onto another shape, and the
 * `save` node writing a shard at a fed step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "ops/gr_ops.h"
#include "test_util.h"

static char root[64];

static const char *tmp(const char *name) {
  static char buf[8][256];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 256, "%s/%s", root, name);
  return p;
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* A tensor whose values are a pure function of (step, salt). */
static gr_tensor value(int64_t step, int salt, int64_t n) {
  gr_tensor t;
  gr_error err;
  gr_tensor_alloc(&t, GR_F32, &(gr_shape){1, {n}}, &err);
  float *p = gr_tensor_data(&t);
  for (int64_t i = 0; i < n; i++) p[i] = (float)(step * 1000 + salt * 100 + i);
  return t;
}

/* Writes the shard `file` of dir at step holding names[0..n) (salts 0..n),
 * as a task's save node does. */
static void write_shard(const char *dir, const char *file, int64_t step, const char *const *names,
                        int n, int salt0) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  gr_error err;
  gr_tensor t[8];
  gr_ckpt_tensor ct[8];
  for (int i = 0; i < n; i++) {
    t[i] = value(step, salt0 + i, 3 + i);
    ct[i] = (gr_ckpt_tensor){names[i], &t[i]};
  }
  GR_CHECK_OK(gr_ckpt_save_shard(p, step, ct, n, &err), err);
  for (int i = 0; i < n; i++) gr_tensor_release(&t[i]);
}

static const char *const ps0_vars[] = {"layer1/b", "layer1/w"};
static const char *const ps1_vars[] = {"layer2/w"};

/* A save of two tasks' shards at step, committed. */
static gr_status save_two(gr_ckpt *ck, const char *dir, int64_t step, gr_error *err) {
  write_shard(dir, "ps-0.ckpt", step, ps0_vars, 2, 0);
  write_shard(dir, "ps-1.ckpt", step, ps1_vars, 1, 2);
  gr_ckpt_shard sh[2] = {{"ps-0.ckpt", "/job:ps/task:0"}, {"ps-1.ckpt", "/job:ps/task:1"}};
  return gr_ckpt_commit_shards(ck, step, sh, 2, "{\"steps_done\": 1}", err);
}

/* Does the checkpoint at step (-1: newest) hold what was saved at saved_at? */
static bool holds(gr_ckpt *ck, int64_t step, int64_t saved_at, const char *name, int salt,
                  int64_t n) {
  gr_tensor got, want = value(saved_at, salt, n);
  gr_error err;
  bool ok = gr_ckpt_read_tensor(ck, step, name, &got, &err) == GR_OK;
  if (!ok) fprintf(stderr, "  %s\n", err.msg);
  ok = ok && gt_bit_equal(&got, &want);
  if (ok) gr_tensor_release(&got);
  gr_tensor_release(&want);
  return ok;
}

static void test_merged_view(void) {
  const char *dir = tmp("merged");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK(gr_ckpt_is_sharded(ck));
  GR_CHECK(gr_ckpt_latest_step(ck, &(int64_t){0}, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_OK(save_two(ck, dir, 10, &err), err);
  gr_ckpt_close(ck);

  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
  GR_CHECK(gr_ckpt_is_sharded(ck));
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 10);
  gr_ckpt_tensor_info *t;
  int n;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &t, &n, &err), err);
  GR_CHECK_EQ_INT(n, 3); /* merged and sorted by name */
  if (n == 3) {
    GR_CHECK(strcmp(t[0].name, "layer1/b") == 0 && strcmp(t[1].name, "layer1/w") == 0 &&
             strcmp(t[2].name, "layer2/w") == 0);
    GR_CHECK_EQ_INT(t[2].shape.dims[0], 3);
  }
  gr_ckpt_tensor_infos_free(t, n);
  GR_CHECK(holds(ck, 10, 10, "layer1/b", 0, 3));
  GR_CHECK(holds(ck, -1, 10, "layer1/w", 1, 4));
  GR_CHECK(holds(ck, 10, 10, "layer2/w", 2, 3));
  gr_tensor none;
  GR_CHECK(gr_ckpt_read_tensor(ck, 10, "nope", &none, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "no tensor named 'nope'");
  gr_ckpt_info *infos;
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  GR_CHECK_EQ_INT(n, 1);
  if (n == 1) {
    GR_CHECK_EQ_INT(infos[0].num_tensors, 3);
    GR_CHECK_EQ_INT(infos[0].total_bytes, (3 + 4 + 3) * 4);
    GR_CHECK_STR_CONTAINS(infos[0].metadata, "steps_done");
  }
  gr_ckpt_infos_free(infos, n);
  gr_ckpt_shard_info *sh;
  GR_CHECK_OK(gr_ckpt_list_shards(ck, -1, &sh, &n, &err), err);
  GR_CHECK_EQ_INT(n, 2);
  if (n == 2) {
    GR_CHECK(strcmp(sh[0].file, "ps-0.ckpt") == 0 && strcmp(sh[0].task, "/job:ps/task:0") == 0);
    GR_CHECK_EQ_INT(sh[0].num_tensors, 2);
    GR_CHECK_EQ_INT(sh[1].total_bytes, 12);
  }
  gr_ckpt_shard_infos_free(sh, n);
  int checked = 0;
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, &checked, &err), err);
  GR_CHECK_EQ_INT(checked, 3);
  gr_ckpt_close(ck);
  /* the manifest itself is not a checkpoint file to open on its own */
  GR_CHECK(gr_ckpt_open(tmp("merged/manifest.ckpt"), &ro, &ck, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "open its directory");
}

static void test_commit_checks_shards(void) {
  const char *dir = tmp("checks");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK_OK(save_two(ck, dir, 5, &err), err);
  /* ps-1 never wrote step 6: nothing is committed */
  write_shard(dir, "ps-0.ckpt", 6, ps0_vars, 2, 0);
  gr_ckpt_shard sh[2] = {{"ps-0.ckpt", "/job:ps/task:0"}, {"ps-1.ckpt", "/job:ps/task:1"}};
  GR_CHECK(gr_ckpt_commit_shards(ck, 6, sh, 2, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:ps/task:1");
  GR_CHECK_STR_CONTAINS(err.msg, "no checkpoint at step 6");
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 5);
  /* a missing shard file */
  gr_ckpt_shard gone[1] = {{"ps-7.ckpt", "/job:ps/task:7"}};
  GR_CHECK(gr_ckpt_commit_shards(ck, 6, gone, 1, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "ps-7.ckpt' is missing");
  /* the same tensor in two shards */
  write_shard(dir, "w-0.ckpt", 6, ps0_vars, 1, 0);
  gr_ckpt_shard dup[2] = {{"ps-0.ckpt", "a"}, {"w-0.ckpt", "b"}};
  GR_CHECK(gr_ckpt_commit_shards(ck, 6, dup, 2, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "'layer1/b' is in two shards");
  /* names that are not shard files, bad metadata, a negative step */
  gr_ckpt_shard bad[1] = {{"../escape.ckpt", "x"}};
  GR_CHECK(gr_ckpt_commit_shards(ck, 6, bad, 1, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "not a shard file name");
  GR_CHECK(gr_ckpt_commit_shards(ck, 6, sh, 1, "[1]", &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_ckpt_commit_shards(ck, -1, sh, 1, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 5);
  gr_ckpt_close(ck);
  /* a file checkpoint has no shards to commit */
  GR_CHECK_OK(gr_ckpt_open(tmp("plain.ckpt"), NULL, &ck, &err), err);
  GR_CHECK(gr_ckpt_commit_shards(ck, 1, sh, 1, NULL, &err) == GR_ERR_FAILED_PRECONDITION);
  gr_ckpt_close(ck);
}

/* The chief dies after the shards of step 12 and before the manifest row:
 * step 10 stays the newest complete checkpoint, whole; the next commit
 * (a later step) removes the orphan shard rows. */
static void test_crash_between_shards_and_manifest(void) {
  const char *dir = tmp("orphans");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK_OK(save_two(ck, dir, 10, &err), err);
  write_shard(dir, "ps-0.ckpt", 12, ps0_vars, 2, 0);
  write_shard(dir, "ps-1.ckpt", 12, ps1_vars, 1, 2);
  gr_ckpt_close(ck); /* no commit: the chief is gone */
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 10);
  GR_CHECK(holds(ck, -1, 10, "layer1/w", 1, 4));
  GR_CHECK(holds(ck, -1, 10, "layer2/w", 2, 3));
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
  /* the run resumes at 10 and commits 15: the rows of 12 go */
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK_OK(save_two(ck, dir, 15, &err), err);
  gr_ckpt_close(ck);
  gr_ckpt *sh;
  GR_CHECK_OK(gr_ckpt_open(tmp("orphans/ps-0.ckpt"), &ro, &sh, &err), err);
  gr_ckpt_info *infos;
  int n;
  GR_CHECK_OK(gr_ckpt_list(sh, &infos, &n, &err), err);
  GR_CHECK_EQ_INT(n, 2); /* 10 and 15 */
  for (int i = 0; i < n; i++) GR_CHECK(infos[i].step != 12);
  gr_ckpt_infos_free(infos, n);
  gr_ckpt_close(sh);
}

static int num_rows(const char *path) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  if (gr_ckpt_open(path, &ro, &ck, &err) != GR_OK) return -1;
  gr_ckpt_info *infos;
  int n = -1;
  if (gr_ckpt_list(ck, &infos, &n, &err) == GR_OK) gr_ckpt_infos_free(infos, n);
  gr_ckpt_close(ck);
  return n;
}

/* Retention keeps the newest K manifest rows; a shard file holds their rows
 * and the one being written (K + 1 at most: a task deletes its unneeded
 * rows when it writes); a shard file no kept checkpoint needs (the cluster
 * shrank) is removed, and files the manifest never named stay. */
static void test_retention(void) {
  const char *dir = tmp("keep");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true, .max_to_keep = 2};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  /* files of the user's in the directory: never the manifest's to remove */
  write_shard(dir, "mine.ckpt", 1, ps1_vars, 1, 0);
  FILE *f = fopen(tmp("keep/notes.ckpt"), "w");
  if (f) fputs("not a checkpoint\n", f), fclose(f);
  for (int64_t step = 1; step <= 3; step++) GR_CHECK_OK(save_two(ck, dir, step, &err), err);
  GR_CHECK_EQ_INT(num_rows(tmp("keep/ps-1.ckpt")), 3);
  /* from step 4 one ps holds everything */
  static const char *const all[] = {"layer1/b", "layer1/w", "layer2/w"};
  for (int64_t step = 4; step <= 6; step++) {
    write_shard(dir, "ps-0.ckpt", step, all, 3, 0);
    gr_ckpt_shard one = {"ps-0.ckpt", "/job:ps/task:0"};
    GR_CHECK_OK(gr_ckpt_commit_shards(ck, step, &one, 1, NULL, &err), err);
    GR_CHECK_EQ_INT(num_rows(tmp("keep/ps-0.ckpt")), 3);
  }
  GR_CHECK_MSG(!exists(tmp("keep/ps-1.ckpt")), "ps-1.ckpt outlived the checkpoints that need it");
  GR_CHECK_MSG(exists(tmp("keep/mine.ckpt")) && exists(tmp("keep/notes.ckpt")),
               "retention removed a file the manifest never named");
  gr_ckpt_info *infos;
  int n;
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  GR_CHECK(n == 2 && infos[0].step == 5 && infos[1].step == 6);
  gr_ckpt_infos_free(infos, n);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
}

static int problems_seen;
static char first_problem[GR_ERROR_MSG_MAX + 300];
static void note_problem(void *arg, const char *p) {
  (void)arg;
  if (problems_seen++ == 0) snprintf(first_problem, sizeof first_problem, "%s", p);
}

static void test_verify_names_bad_shards(void) {
  const char *dir = tmp("verify");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK_OK(save_two(ck, dir, 7, &err), err);
  gr_ckpt_close(ck);
  gr_ckpt_options ro = {.read_only = true};
  /* another run's shard in place of ps-1: the fingerprint tells */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "cp %s %s.bak", tmp("verify/ps-1.ckpt"), tmp("verify/ps-1.ckpt"));
  GR_CHECK(system(cmd) == 0);
  static const char *const other[] = {"layer2/other"};
  unlink(tmp("verify/ps-1.ckpt"));
  write_shard(dir, "ps-1.ckpt", 7, other, 1, 2);
  GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
  problems_seen = 0;
  GR_CHECK(gr_ckpt_verify(ck, note_problem, NULL, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(first_problem, "ps-1.ckpt");
  GR_CHECK_STR_CONTAINS(first_problem, "fingerprint");
  gr_ckpt_close(ck);
  /* a missing shard: verify and reads name it */
  unlink(tmp("verify/ps-1.ckpt"));
  GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
  problems_seen = 0;
  GR_CHECK(gr_ckpt_verify(ck, note_problem, NULL, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(first_problem, "/job:ps/task:1");
  GR_CHECK_STR_CONTAINS(first_problem, "ps-1.ckpt' is missing");
  gr_tensor t;
  GR_CHECK(gr_ckpt_read_tensor(ck, -1, "layer1/w", &t, &err) == GR_ERR_DATA_LOSS);
  gr_ckpt_close(ck);
  /* damaged bytes in a shard: the tensor and its shard named */
  snprintf(cmd, sizeof cmd, "mv %s.bak %s", tmp("verify/ps-1.ckpt"), tmp("verify/ps-1.ckpt"));
  GR_CHECK(system(cmd) == 0);
  snprintf(cmd, sizeof cmd,
           "sqlite3 %s \"UPDATE chunks SET data = zeroblob(length(data))\" 2>/dev/null",
           tmp("verify/ps-1.ckpt"));
  if (system(cmd) == 0) {
    GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
    problems_seen = 0;
    GR_CHECK(gr_ckpt_verify(ck, note_problem, NULL, NULL, &err) == GR_ERR_DATA_LOSS);
    GR_CHECK_STR_CONTAINS(first_problem, "ps-1.ckpt");
    GR_CHECK_STR_CONTAINS(first_problem, "layer2/w");
    GR_CHECK_STR_CONTAINS(first_problem, "checksum");
    gr_ckpt_close(ck);
  } else {
    GR_CHECK_MSG(0, "the sqlite3 shell is needed to damage a shard (make deps installs it)");
  }
}

/* Variables saved as two shards restore by name into a session of one
 * process (another shape of cluster), and a local save into a directory
 * round-trips through the local shard. */
static void test_restore_by_name(void) {
  const char *dir = tmp("shape");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  GR_CHECK_OK(save_two(ck, dir, 12, &err), err);
  gr_graph *g = gr_graph_new();
  gr_output b = gr_variable(g, "layer1/b", gr_zeros(g, GR_F32, (gr_shape){1, {3}}));
  gr_output w = gr_variable(g, "layer1/w", gr_zeros(g, GR_F32, (gr_shape){1, {4}}));
  gr_output w2 = gr_variable(g, "layer2/w", gr_zeros(g, GR_F32, (gr_shape){1, {3}}));
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK(s != NULL);
  if (!s) return;
  int64_t step = -1;
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, s, g, &step, &err), err);
  GR_CHECK_EQ_INT(step, 12);
  GR_CHECK_EQ_INT(gr_session_step(s), 12);
  gr_output f[3] = {b, w, w2};
  gr_tensor got[3];
  GR_CHECK_OK(gr_session_run(s, NULL, 0, f, 3, got, NULL, 0, &err), err);
  for (int i = 0; i < 3; i++) {
    gr_tensor want = value(12, i, i == 1 ? 4 : 3);
    GR_CHECK_MSG(gt_bit_equal(&got[i], &want), "variable %d restored wrong", i);
    gr_tensor_release(&want);
    gr_tensor_release(&got[i]);
  }
  /* a local save into the directory: the one shard local.ckpt */
  gr_session_set_step(s, 13);
  GR_CHECK_OK(gr_ckpt_save_session(ck, s, g, NULL, &err), err);
  gr_ckpt_shard_info *sh;
  int n;
  GR_CHECK_OK(gr_ckpt_list_shards(ck, -1, &sh, &n, &err), err);
  GR_CHECK(n == 1 && strcmp(sh[0].file, "local.ckpt") == 0 && sh[0].num_tensors == 3);
  gr_ckpt_shard_infos_free(sh, n);
  GR_CHECK(holds(ck, 13, 12, "layer1/w", 1, 4));
  gr_session_free(s);
  gr_graph_free(g);
  gr_ckpt_close(ck);
}

/* The save node writes a shard at the step fed to it, without retention. */
static void test_save_node_at_step(void) {
  const char *dir = tmp("node");
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.sharded = true, .max_to_keep = 1};
  GR_CHECK_OK(gr_ckpt_open(dir, &o, &ck, &err), err);
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const_f32(g, 2.5f));
  gr_output at = gr_placeholder(g, "at", GR_I64, gr_shape_scalar());
  char path[300];
  gr_ckpt_shard_name("ps", 0, path, sizeof path);
  GR_CHECK(strcmp(path, "ps-0.ckpt") == 0);
  GR_CHECK(gr_ckpt_shard_path(ck, "ps-0.ckpt", path, sizeof path));
  GR_CHECK(path[0] == '/'); /* absolute: a task with another cwd finds it */
  gr_output save = gr_save_at(g, path, &w, 1, at);
  GR_CHECK(save.node != NULL);
  { /* the step must be an i64 scalar */
    gr_graph *g2 = gr_graph_new();
    gr_output w2 = gr_variable(g2, "w", gr_const_f32(g2, 2.5f));
    GR_CHECK(gr_save_at(g2, path, &w2, 1, gr_const_f32(g2, 1)).node == NULL);
    GR_CHECK_STR_CONTAINS(gr_graph_error(g2)->msg, "input step must be an i64 scalar");
    gr_graph_free(g2);
  }
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  GR_CHECK_OK(gr_session_init_variables(s, &err), err);
  for (int64_t step = 100; step <= 300; step += 100) {
    gr_tensor st = gr_tensor_scalar_i64(step), out;
    gr_feed feed = {at, &st};
    GR_CHECK_OK(gr_session_run(s, &feed, 1, &save, 1, &out, NULL, 0, &err), err);
    GR_CHECK_EQ_INT(*(int64_t *)gr_tensor_data(&out), step);
    gr_tensor_release(&out);
    gr_tensor_release(&st);
    gr_ckpt_shard one = {"ps-0.ckpt", "/job:ps/task:0"};
    GR_CHECK_OK(gr_ckpt_commit_shards(ck, step, &one, 1, NULL, &err), err);
  }
  int64_t latest;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 300);
  GR_CHECK_EQ_INT(num_rows(path), 2); /* the manifest keeps 1; the shard that and the newest */
  gr_session_free(s);
  gr_graph_free(g);
  gr_ckpt_close(ck);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/gr_test_ckpt_sharded_XXXXXX");
  if (!mkdtemp(root)) return 1;
  GR_RUN(test_merged_view);
  GR_RUN(test_commit_checks_shards);
  GR_RUN(test_crash_between_shards_and_manifest);
  GR_RUN(test_retention);
  GR_RUN(test_verify_names_bad_shards);
  GR_RUN(test_restore_by_name);
  GR_RUN(test_save_node_at_step);
  gt_remove_tree(root);
  return gr_test_finish();
}
