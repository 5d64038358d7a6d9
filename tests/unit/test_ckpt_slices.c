/* Partitioned variables in sharded checkpoints: each task's shard holds its
 * parts as slices of the whole (save nodes of gr_save_at, as `graphrun run
 * --cluster --ckpt DIR` builds them, two "tasks" in one process), and the
 * readers of the directory see the whole: listed with its full shape, read
 * as the concatenation of the parts, restored into 3 parts, 1 part, a
 * plain variable or the same 2 parts bit for bit, exported and diffed by
 * `graphrun ckpt`. A missing, overlapping, damaged or disagreeing slice is
 * an error naming the variable and the shards, from verify and from a
 * restore that changes nothing; checkpoints written before slices existed
 * read and restore as they did. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "ops/gr_ops.h"
#include "test_util.h"

static char root[64], out_buf[16384];
static gr_tensor full; /* w's value: [11, 4] */

static const char *tmp(const char *name) {
  return gt_path_in(root, name);
}

/* w [11, 4] in `parts` parts (0: a plain variable), initialised to init,
 * and b [4] of ones; a session of one device. */
typedef struct model {
  gr_graph *g;
  gr_session *s;
  gr_output w, b, parts[4];
} model;

static model build(int parts, const gr_tensor *init) {
  model m = {.g = gr_graph_new()};
  m.w = parts ? gr_partitioned_variable(m.g, "w", gr_const(m.g, init), parts, m.parts)
              : gr_variable(m.g, "w", gr_const(m.g, init));
  m.b = gr_variable(m.g, "b", gr_ones(m.g, GR_F32, gr_shape_make(1, (int64_t[]){4})));
  gr_error err;
  GR_CHECK_MSG(!gr_graph_error(m.g), "%s", gr_graph_error(m.g) ? gr_graph_error(m.g)->msg : "");
  m.s = gr_session_new(m.g, NULL, &err);
  GR_CHECK_MSG(m.s != NULL, "%s", err.msg);
  return m;
}

static void drop(model *m) {
  gr_session_free(m->s);
  gr_graph_free(m->g);
}

/* w's value in m's session. */
static gr_tensor w_value(model *m) {
  gr_tensor v = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(gr_session_run(m->s, NULL, 0, &m->w, 1, &v, NULL, 0, &err), err);
  return v;
}

static const gr_ckpt_shard two_tasks[2] = {{"ps-0.ckpt", "/job:ps/task:0"},
                                           {"ps-1.ckpt", "/job:ps/task:1"}};

/* Saves m (initialised) at step as a sharded checkpoint in dir, as a
 * cluster does: task 0's shard holds b and the even parts, task 1's the odd
 * ones, each written by a save node at the fed step; then the commit. */
static gr_status save_sharded(model *m, int parts, const char *dir, int64_t step, gr_error *err) {
  gr_ckpt *ck;
  gr_ckpt_options o = {.sharded = true, .max_to_keep = 2};
  GR_TRY(gr_ckpt_open(dir, &o, &ck, err));
  gr_output on[2][4];
  int n[2] = {1, 0};
  on[0][0] = m->b;
  for (int k = 0; k < parts; k++) on[k % 2][n[k % 2]++] = m->parts[k];
  static int count;
  char at_name[32];
  snprintf(at_name, sizeof at_name, "save_step_%d", count++);
  gr_output at = gr_placeholder(m->g, at_name, GR_I64, gr_shape_scalar()), save[2];
  for (int t = 0; t < 2; t++) {
    char path[512];
    GR_CHECK(gr_ckpt_shard_path(ck, two_tasks[t].file, path, sizeof path));
    save[t] = gr_save_at(m->g, path, on[t], n[t], at);
  }
  gr_tensor st = gr_tensor_scalar_i64(step);
  gr_feed feed = {at, &st};
  gr_status s = gr_session_run(m->s, &feed, 1, NULL, 0, NULL, save, 2, err);
  gr_tensor_release(&st);
  if (s == GR_OK) s = gr_ckpt_commit_shards(ck, step, two_tasks, 2, NULL, err);
  gr_ckpt_close(ck);
  return s;
}

/* The checkpoints the cases read (made once): root/two, w saved at step
 * 10 in 2 parts as a sharded checkpoint, and root/whole.ckpt, w saved
 * whole from 3 parts in a file at step 10. */
static void fixtures(void) {
  static bool made;
  if (made) return;
  made = true;
  model m = build(2, &full);
  gr_error err;
  GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
  GR_CHECK_OK(save_sharded(&m, 2, tmp("two"), 10, &err), err);
  drop(&m);
  m = build(3, &full);
  gr_ckpt *ck;
  GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
  GR_CHECK_OK(gr_ckpt_open(tmp("whole.ckpt"), NULL, &ck, &err), err);
  gr_session_set_step(m.s, 10);
  GR_CHECK_OK(gr_ckpt_save_session(ck, m.s, m.g, NULL, &err), err);
  gr_ckpt_close(ck);
  drop(&m);
}

static int64_t sql_int(const char *path, const char *sql) {
  sqlite3 *db;
  sqlite3_stmt *st;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

static void sql_exec(const char *path, const char *sql) {
  sqlite3 *db;
  GR_CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  char *msg = NULL;
  GR_CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_free(msg);
  sqlite3_close(db);
}

/* (a) The readers of the directory list w with its full shape, and its
 * bytes are the parts' concatenation; each shard holds its part as a
 * slice (under the part's name, which a shard file read alone shows). */
static void test_readers_see_the_whole(void) {
  fixtures();
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(tmp("two"), &ro, &ck, &err), err);
  if (!ck) return;
  gr_ckpt_tensor_info *t;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &t, &n, &err), err);
  GR_CHECK_EQ_INT(n, 2);
  if (n == 2) {
    GR_CHECK(strcmp(t[0].name, "b") == 0 && strcmp(t[1].name, "w") == 0);
    GR_CHECK(t[1].dtype == GR_F32 && gr_shape_equal(&t[1].shape, &full.shape));
    GR_CHECK_EQ_INT(t[1].nbytes, 11 * 4 * 4);
  }
  gr_ckpt_tensor_infos_free(t, n);
  gr_tensor got;
  GR_CHECK_OK(gr_ckpt_read_tensor(ck, -1, "w", &got, &err), err);
  GR_CHECK(gt_bit_equal(&got, &full));
  gr_tensor_release(&got);
  GR_CHECK(gr_ckpt_read_tensor(ck, -1, "w/part_1", &got, &err) == GR_ERR_NOT_FOUND);
  gr_ckpt_info *infos;
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  char fp[17] = "";
  if (n == 1) {
    GR_CHECK_EQ_INT(infos[0].num_tensors, 2);
    GR_CHECK_EQ_INT(infos[0].total_bytes, (44 + 4) * 4);
    snprintf(fp, sizeof fp, "%s", infos[0].fingerprint);
  }
  gr_ckpt_infos_free(infos, n);
  int checked = 0;
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, &checked, &err), err);
  GR_CHECK_EQ_INT(checked, 2);
  gr_ckpt_close(ck);
  /* the fingerprint is the one of the same variables saved whole in a file */
  GR_CHECK_OK(gr_ckpt_open(tmp("whole.ckpt"), &ro, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  GR_CHECK(n == 1 && strcmp(infos[0].fingerprint, fp) == 0);
  gr_ckpt_infos_free(infos, n);
  gr_ckpt_close(ck);
  /* a shard: its part under its own name, as a slice; schema version 2 */
  GR_CHECK_OK(gr_ckpt_open(tmp("two/ps-1.ckpt"), &ro, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &t, &n, &err), err);
  GR_CHECK(n == 1 && strcmp(t[0].name, "w/part_1") == 0 && t[0].shape.dims[0] == 5);
  gr_ckpt_tensor_infos_free(t, n);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
  GR_CHECK_EQ_INT(sql_int(tmp("two/ps-1.ckpt"), "PRAGMA user_version"), 2);
  GR_CHECK_EQ_INT(
      sql_int(tmp("two/ps-1.ckpt"), "SELECT value FROM meta WHERE key = 'schema_version'"), 2);
  GR_CHECK_EQ_INT(
      sql_int(tmp("two/ps-1.ckpt"),
              "SELECT first_row FROM slices WHERE whole = 'w' AND full_shape = '[11,4]'"),
      6);
  /* the manifest and the single file hold no slices: version 1 as before */
  GR_CHECK_EQ_INT(sql_int(tmp("two/manifest.ckpt"), "PRAGMA user_version"), 1);
  GR_CHECK_EQ_INT(sql_int(tmp("whole.ckpt"), "PRAGMA user_version"), 1);
  GR_CHECK_EQ_INT(sql_int(tmp("whole.ckpt"), "SELECT count(*) FROM sqlite_schema WHERE name = "
                                             "'slices'"),
                  0);
}

/* (b) Restored into 3 parts, 1 part, a plain w and the same 2 parts, bit
 * for bit; and 3 parts on 2 tasks (a shard with two slices) back into 2. */
static void test_restore_any_partitioning(void) {
  fixtures();
  gr_tensor zero = gt_zeros(GR_F32, full.shape);
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(tmp("two"), &ro, &ck, &err), err);
  if (!ck) return;
  int into[] = {3, 1, 0, 2};
  for (int i = 0; i < 4; i++) {
    model m = build(into[i], &zero);
    int64_t step = -1;
    GR_CHECK_OK(gr_ckpt_restore_latest(ck, m.s, m.g, &step, &err), err);
    GR_CHECK_EQ_INT(step, 10);
    gr_tensor v = w_value(&m);
    GR_CHECK_MSG(gt_bit_equal(&v, &full), "restored into %d parts", into[i]);
    gr_tensor_release(&v);
    if (into[i] == 3) { /* by name, as a cluster's restore reads them */
      const char *names[2] = {"w/part_2", "b"};
      gr_tensor vals[2];
      GR_CHECK_OK(gr_ckpt_read_vars(ck, -1, m.g, names, 2, vals, &step, &err), err);
      GR_CHECK(vals[0].shape.dims[0] == 3 &&
               !memcmp(gr_tensor_data(&vals[0]), (float *)gr_tensor_data(&full) + 8 * 4, 48));
      GR_CHECK(vals[1].shape.dims[0] == 4 && ((float *)gr_tensor_data(&vals[1]))[3] == 1.0f);
      gr_tensor_release(&vals[0]), gr_tensor_release(&vals[1]);
    }
    drop(&m);
  }
  gr_ckpt_close(ck);
  /* 3 parts on 2 tasks: task 0 holds parts 0 and 2 */
  model m = build(3, &full);
  GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
  GR_CHECK_OK(save_sharded(&m, 3, tmp("three"), 4, &err), err);
  drop(&m);
  GR_CHECK_EQ_INT(sql_int(tmp("three/ps-0.ckpt"), "SELECT count(*) FROM slices"), 2);
  /* retention: the manifest keeps 2, a shard those and the one it writes; slices go with them */
  for (int64_t step = 5; step <= 7; step++) {
    m = build(3, &full);
    GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
    GR_CHECK_OK(save_sharded(&m, 3, tmp("three"), step, &err), err);
    drop(&m);
  }
  GR_CHECK_EQ_INT(sql_int(tmp("three/ps-0.ckpt"), "SELECT count(*) FROM checkpoints"), 3);
  GR_CHECK_EQ_INT(sql_int(tmp("three/ps-0.ckpt"), "SELECT count(*) FROM slices"), 3 * 2);
  GR_CHECK_OK(gr_ckpt_open(tmp("three/ps-0.ckpt"), &ro, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err); /* no slice left behind */
  gr_ckpt_close(ck);
  GR_CHECK_OK(gr_ckpt_open(tmp("three"), &ro, &ck, &err), err);
  m = build(2, &zero);
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, m.s, m.g, NULL, &err), err);
  gr_tensor v = w_value(&m);
  GR_CHECK(gt_bit_equal(&v, &full));
  gr_tensor_release(&v);
  drop(&m);
  gr_ckpt_close(ck);
  gr_tensor_release(&zero);
}

/* `graphrun ckpt` on the directory: ls, show, export and verify see w,
 * and diff finds it identical to w saved whole in a file. */
static void test_cli(void) {
  fixtures();
  GR_CHECK(gt_cli_expect(root, "ckpt ls two --step -1", 0, "[11, 4]", out_buf, sizeof out_buf));
  GR_CHECK(!strstr(out_buf, "part_"));
  GR_CHECK(gt_cli_expect(root, "ckpt show two w", 0, "w: f32 [11, 4] (176 B), step 10, checksum ok",
                         out_buf, sizeof out_buf));
  GR_CHECK(gt_cli_expect(root, "ckpt verify two", 0, "ok (integrity_check ok, 2 tensors checked)",
                         out_buf, sizeof out_buf));
  GR_CHECK(gt_cli_expect(root, "ckpt diff two --other whole.ckpt", 0,
                         "2 tensors identical, 0 differ", out_buf, sizeof out_buf));
  GR_CHECK(gt_cli_expect(root, "ckpt export two w", 0, "w.npy", out_buf, sizeof out_buf));
  FILE *f = fopen(tmp("w.npy"), "rb");
  char npy[512];
  size_t got = f ? fread(npy, 1, sizeof npy, f) : 0;
  if (f) fclose(f);
  GR_CHECK(got == 128 + 176 && !memcmp(npy + 128, gr_tensor_data(&full), 176));
}

static int problems_seen;
static char first_problem[GR_ERROR_MSG_MAX + 300];
static void note_problem(void *arg, const char *p) {
  (void)arg;
  if (problems_seen++ == 0) snprintf(first_problem, sizeof first_problem, "%s", p);
}

/* Copies root/two to root/name, applies sql to its shard `shard`, and
 * checks that verify and a restore into 2 parts fail naming want (the
 * restore changing nothing). */
static void expect_damage(const char *name, const char *shard, const char *sql,
                          const char *const *want) {
  char cmd[600], path[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", tmp(name), tmp("two"), tmp(name));
  GR_CHECK(system(cmd) == 0);
  snprintf(path, sizeof path, "%s/%s", tmp(name), shard);
  sql_exec(path, sql);
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(tmp(name), &ro, &ck, &err), err);
  if (!ck) return;
  problems_seen = 0;
  first_problem[0] = '\0';
  GR_CHECK(gr_ckpt_verify(ck, note_problem, NULL, NULL, &err) == GR_ERR_DATA_LOSS);
  for (int i = 0; want[i]; i++) GR_CHECK_STR_CONTAINS(first_problem, want[i]);
  gr_tensor zero = gt_zeros(GR_F32, full.shape);
  model m = build(2, &zero);
  GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
  int64_t step = gr_session_step(m.s);
  GR_CHECK(gr_ckpt_restore_latest(ck, m.s, m.g, NULL, &err) == GR_ERR_DATA_LOSS);
  for (int i = 0; want[i]; i++) GR_CHECK_STR_CONTAINS(err.msg, want[i]);
  if (getenv("GR_TEST_VERBOSE")) printf("  %s\n", err.msg);
  GR_CHECK_EQ_INT(gr_session_step(m.s), step);
  gr_tensor v = w_value(&m);
  GR_CHECK_MSG(gt_bit_equal(&v, &zero), "a failed restore changed w");
  gr_tensor_release(&v);
  gr_tensor_release(&zero);
  drop(&m);
  gr_ckpt_close(ck);
}

/* (c) A missing, overlapping, disagreeing, malformed or damaged slice. */
static void test_bad_slices(void) {
  fixtures();
  expect_damage("gone", "ps-1.ckpt",
                "DELETE FROM chunks WHERE tensor_id = (SELECT id FROM tensors WHERE name = "
                "'w/part_1'); DELETE FROM slices; DELETE FROM tensors WHERE name = 'w/part_1'",
                (const char *const[]){"partitioned variable 'w'", "rows [6, 11) are in none",
                                      "'w/part_0' rows [0, 6) in ps-0.ckpt", NULL});
  expect_damage("overlap", "ps-1.ckpt", "UPDATE slices SET first_row = 5",
                (const char *const[]){"partitioned variable 'w': rows [5, 6) are in two slices",
                                      "'w/part_0' in ps-0.ckpt and 'w/part_1' in ps-1.ckpt", NULL});
  expect_damage("past", "ps-1.ckpt", "UPDATE slices SET first_row = 7",
                (const char *const[]){"its slice 'w/part_1' in ps-1.ckpt ([5, 4] from row 7) "
                                      "does not fit it",
                                      NULL});
  expect_damage("disagree", "ps-1.ckpt", "UPDATE slices SET full_shape = '[12,4]'",
                (const char *const[]){"the slices of partitioned variable 'w' disagree",
                                      "ps-0.ckpt", "ps-1.ckpt", NULL});
  expect_damage("malformed", "ps-0.ckpt", "UPDATE slices SET full_shape = 'eleven'",
                (const char *const[]){"ps-0.ckpt", "'w/part_0' has a malformed slice row", NULL});
  expect_damage("bytes", "ps-1.ckpt", "UPDATE chunks SET data = zeroblob(length(data))",
                (const char *const[]){"ps-1.ckpt", "'w/part_1' fails its checksum", NULL});
  /* a slice whose whole is also a tensor of another shard */
  expect_damage("clash", "ps-0.ckpt", "UPDATE tensors SET name = 'w' WHERE name = 'b'",
                (const char *const[]){"'w' is both a tensor in shard", "ps-0.ckpt", NULL});
}

/* Saving and committing check the slices: one that does not fit its whole
 * writes nothing; a commit whose shards miss a part commits nothing. */
static void test_save_checks(void) {
  fixtures();
  gr_error err;
  gr_tensor part = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){5, 4}));
  gr_ckpt_tensor t = {"w/part_1", &part};
  gr_ckpt_slice bad[] = {{"w", gr_shape_make(2, (int64_t[]){11, 4}), 7},
                         {"w", gr_shape_make(2, (int64_t[]){11, 3}), 6},
                         {"w", gr_shape_make(1, (int64_t[]){11}), 6},
                         {"", gr_shape_make(2, (int64_t[]){11, 4}), 6}};
  for (int i = 0; i < 4; i++) {
    GR_CHECK(gr_ckpt_save_shard_slices(tmp("bad.ckpt"), 1, &t, &bad[i], 1, &err) ==
             GR_ERR_INVALID_ARGUMENT);
    GR_CHECK_STR_CONTAINS(err.msg, "w/part_1");
  }
  struct stat sb;
  GR_CHECK(stat(tmp("bad.ckpt"), &sb) != 0 || sql_int(tmp("bad.ckpt"), "SELECT count(*) FROM "
                                                                       "checkpoints") == 0);
  /* task 1 saved nothing of w: the commit fails naming w, and step 10 stays the newest */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", tmp("half"), tmp("two"), tmp("half"));
  GR_CHECK(system(cmd) == 0);
  GR_CHECK_OK(gr_ckpt_save_shard(tmp("half/ps-1.ckpt"), 20, NULL, 0, &err), err);
  gr_tensor w0 = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){6, 4}));
  gr_ckpt_tensor t0 = {"w/part_0", &w0};
  gr_ckpt_slice s0 = {"w", full.shape, 0};
  GR_CHECK_OK(gr_ckpt_save_shard_slices(tmp("half/ps-0.ckpt"), 20, &t0, &s0, 1, &err), err);
  gr_ckpt *ck;
  GR_CHECK_OK(gr_ckpt_open(tmp("half"), NULL, &ck, &err), err);
  GR_CHECK(gr_ckpt_commit_shards(ck, 20, two_tasks, 2, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "'w' (f32 [11, 4]): rows [6, 11) are in none of its slices");
  gr_ckpt_info *infos;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  GR_CHECK_MSG(n == 1 && infos[0].step == 10, "a failed commit left %d checkpoints", n);
  gr_ckpt_infos_free(infos, n);
  gr_ckpt_close(ck);
  gr_tensor_release(&w0);
  gr_tensor_release(&part);
}

/* (d) Checkpoints written before slices: a sharded one holding the parts
 * by their own names (schema version 1, no slices table) restores into
 * the same partitioning and lists the parts, as it did; a shard written
 * again with slices holds both kinds of rows, each read its own way. */
static void test_old_format(void) {
  fixtures();
  model m = build(2, &full);
  gr_error err;
  GR_CHECK_OK(gr_session_init_variables(m.s, &err), err);
  gr_tensor p[2], b;
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, m.parts, 2, p, NULL, 0, &err), err);
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, &m.b, 1, &b, NULL, 0, &err), err);
  drop(&m);
  gr_ckpt *ck;
  gr_ckpt_options o = {.sharded = true};
  GR_CHECK_OK(gr_ckpt_open(tmp("old"), &o, &ck, &err), err);
  gr_ckpt_tensor t0[2] = {{"b", &b}, {"w/part_0", &p[0]}}, t1 = {"w/part_1", &p[1]};
  GR_CHECK_OK(gr_ckpt_save_shard(tmp("old/ps-0.ckpt"), 5, t0, 2, &err), err);
  GR_CHECK_OK(gr_ckpt_save_shard(tmp("old/ps-1.ckpt"), 5, &t1, 1, &err), err);
  GR_CHECK_OK(gr_ckpt_commit_shards(ck, 5, two_tasks, 2, NULL, &err), err);
  GR_CHECK_EQ_INT(sql_int(tmp("old/ps-1.ckpt"), "PRAGMA user_version"), 1);
  GR_CHECK_EQ_INT(sql_int(tmp("old/ps-1.ckpt"), "SELECT count(*) FROM sqlite_schema WHERE name = "
                                                "'slices'"),
                  0);
  gr_ckpt_tensor_info *t;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &t, &n, &err), err);
  GR_CHECK(n == 3 && strcmp(t[1].name, "w/part_0") == 0 && strcmp(t[2].name, "w/part_1") == 0);
  gr_ckpt_tensor_infos_free(t, n);
  gr_tensor zero = gt_zeros(GR_F32, full.shape);
  m = build(2, &zero);
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, m.s, m.g, NULL, &err), err);
  gr_tensor v = w_value(&m);
  GR_CHECK(gt_bit_equal(&v, &full));
  gr_tensor_release(&v);
  /* the next save writes slices into the same shard files: step 5 still reads by part */
  GR_CHECK_OK(save_sharded(&m, 2, tmp("old"), 6, &err), err);
  drop(&m);
  GR_CHECK_EQ_INT(sql_int(tmp("old/ps-1.ckpt"), "PRAGMA user_version"), 2);
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, 5, &t, &n, &err), err);
  GR_CHECK_EQ_INT(n, 3);
  gr_ckpt_tensor_infos_free(t, n);
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, 6, &t, &n, &err), err);
  GR_CHECK(n == 2 && strcmp(t[1].name, "w") == 0);
  gr_ckpt_tensor_infos_free(t, n);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
  /* a single file is as it was: w whole, version 1 */
  GR_CHECK_OK(gr_ckpt_open(tmp("whole.ckpt"), NULL, &ck, &err), err);
  m = build(2, &zero);
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, m.s, m.g, NULL, &err), err);
  v = w_value(&m);
  GR_CHECK(gt_bit_equal(&v, &full));
  gr_tensor_release(&v);
  drop(&m);
  gr_ckpt_close(ck);
  /* a newer schema than this graphrun reads is refused */
  sql_exec(tmp("old/ps-1.ckpt"), "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  GR_CHECK(gr_ckpt_open(tmp("old/ps-1.ckpt"), NULL, &ck, &err) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(err.msg, "schema version 3, newer than this graphrun reads (2)");
  gr_tensor_release(&zero);
  gr_tensor_release(&p[0]), gr_tensor_release(&p[1]), gr_tensor_release(&b);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/gr_test_ckpt_slices_XXXXXX");
  if (!mkdtemp(root)) return 1;
  gt_rng r = {11};
  full = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){11, 4}), -1, 1);
  GR_RUN(test_readers_see_the_whole);
  GR_RUN(test_restore_any_partitioning);
  GR_RUN(test_cli);
  GR_RUN(test_bad_slices);
  GR_RUN(test_save_checks);
  GR_RUN(test_old_format);
  gr_tensor_release(&full);
  gt_remove_tree(root);
  return gr_test_finish();
}
