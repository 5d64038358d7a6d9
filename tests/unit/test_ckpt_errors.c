/* Damaged and foreign files give clear errors, never a crash or wrong data:
 * a missing file, a directory, a text file, an empty file, another SQLite
 * database, a newer schema, truncated copies of a checkpoint, a flipped
 * byte in tensor data (a checksum error naming the tensor), garbage over
 * the b-tree pages, and random corruption (restores either fail or give
 * exactly the saved values). */
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "test_util.h"

static char dir[64];

static const char *tmp_path(const char *name) {
  return gt_path_in(dir, name);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  GR_CHECK(f != NULL);
  if (!f) return;
  GR_CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  if (b) *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static gr_status try_open(const char *path, bool read_only, gr_error *err) {
  gr_ckpt *ck = NULL;
  gr_ckpt_options o = {.read_only = read_only};
  gr_status s = gr_ckpt_open(path, &o, &ck, err);
  GR_CHECK((s == GR_OK) == (ck != NULL));
  gr_ckpt_close(ck);
  return s;
}

static void test_missing_and_foreign_files(void) {
  gr_error err;
  GR_CHECK(try_open(tmp_path("nope.db"), true, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "nope.db' does not exist");
  GR_CHECK(try_open("/nonexistent-dir/x.db", false, &err) == GR_ERR_IO);
  GR_CHECK_STR_CONTAINS(err.msg, "/nonexistent-dir/x.db");
  /* a directory is a sharded checkpoint: without a manifest there is none to read */
  const char *plain = tmp_path("plain_dir");
  GR_CHECK(mkdir(plain, 0700) == 0);
  GR_CHECK(try_open(plain, true, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "holds no manifest.ckpt");
  {
    write_file(tmp_path("afile.db"), "", 0);
    gr_ckpt *ck = NULL;
    gr_ckpt_options so = {.sharded = true};
    GR_CHECK(gr_ckpt_open(tmp_path("afile.db"), &so, &ck, &err) == GR_ERR_INVALID_ARGUMENT);
    GR_CHECK_STR_CONTAINS(err.msg, "a sharded checkpoint is a directory");
    GR_CHECK(ck == NULL);
  }
  GR_CHECK(try_open("", false, &err) == GR_ERR_INVALID_ARGUMENT);

  const char text[] = "step,loss\n1,0.5\n2,0.25\n";
  write_file(tmp_path("text.db"), text, sizeof text - 1);
  for (int ro = 0; ro < 2; ro++) {
    GR_CHECK(try_open(tmp_path("text.db"), ro, &err) == GR_ERR_FAILED_PRECONDITION);
    GR_CHECK_STR_CONTAINS(err.msg, "text.db' is not a SQLite database");
  }
  size_t n;
  unsigned char *back = read_file(tmp_path("text.db"), &n);
  GR_CHECK(n == sizeof text - 1 && back && memcmp(back, text, n) == 0); /* untouched */
  free(back);

  write_file(tmp_path("empty.db"), "", 0);
  /* (a process killed while creating the file leaves this) */
  GR_CHECK(try_open(tmp_path("empty.db"), true, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "is empty: it holds no checkpoint");
  GR_CHECK_OK(try_open(tmp_path("empty.db"), false, &err), err); /* writing starts a new file */

  sqlite3 *db;
  GR_CHECK(sqlite3_open(tmp_path("other.db"), &db) == SQLITE_OK);
  GR_CHECK(sqlite3_exec(db, "CREATE TABLE users(name TEXT)", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  for (int ro = 0; ro < 2; ro++) {
    GR_CHECK(try_open(tmp_path("other.db"), ro, &err) == GR_ERR_FAILED_PRECONDITION);
    GR_CHECK_STR_CONTAINS(err.msg, "is a SQLite database but not a graphrun checkpoint file");
  }

  GR_CHECK_OK(try_open(tmp_path("newer.db"), false, &err), err);
  GR_CHECK(sqlite3_open(tmp_path("newer.db"), &db) == SQLITE_OK);
  GR_CHECK(sqlite3_exec(db, "UPDATE meta SET value='7' WHERE key='schema_version'", NULL, NULL,
                        NULL) == SQLITE_OK);
  sqlite3_close(db);
  GR_CHECK(try_open(tmp_path("newer.db"), true, &err) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(err.msg, "schema version 7");
}

/* A checkpoint with three tensors whose values are known; returns its bytes. */
static gr_tensor vals[3];
static const char *names[3] = {"layer1/w", "layer1/b", "step_count"};

static void make_good(const char *path) {
  gt_rng r = {3};
  vals[0] = gt_random(&r, GR_F32, (gr_shape){2, {256, 300}}, -1, 1);
  vals[1] = gt_random(&r, GR_F64, (gr_shape){1, {300}}, -1, 1);
  vals[2] = gr_tensor_scalar_i64(12345);
  gr_ckpt_tensor ct[3];
  for (int i = 0; i < 3; i++) ct[i] = (gr_ckpt_tensor){names[i], &vals[i]};
  gr_ckpt *ck;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_save_tensors(ck, 10, ct, 3, NULL, &err), err);
  gr_ckpt_close(ck);
}

/* Opens path and reads every tensor and verifies. Returns how many of the
 * calls failed; any tensor that reads fine must equal what was saved. */
static int read_everything(const char *path, gr_error *first) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  first->msg[0] = '\0';
  if (gr_ckpt_open(path, &ro, &ck, &err) != GR_OK) {
    *first = err;
    return 1;
  }
  int failures = 0;
  for (int i = 0; i < 3; i++) {
    gr_tensor t;
    if (gr_ckpt_read_tensor(ck, -1, names[i], &t, &err) != GR_OK) {
      if (!failures++) *first = err;
      GR_CHECK(err.msg[0] != '\0');
      continue;
    }
    GR_CHECK_MSG(
        t.dtype == vals[i].dtype && gr_shape_equal(&t.shape, &vals[i].shape) &&
            memcmp(gr_tensor_data(&t), gr_tensor_data(&vals[i]), gr_tensor_num_bytes(&t)) == 0,
        "tensor %s read back wrong from %s", names[i], path);
    gr_tensor_release(&t);
  }
  int checked;
  if (gr_ckpt_verify(ck, NULL, NULL, &checked, &err) != GR_OK) {
    if (!failures++) *first = err;
    GR_CHECK(err.code == GR_ERR_DATA_LOSS);
  }
  gr_ckpt_close(ck);
  return failures;
}

static void test_truncated(void) {
  const char *good = tmp_path("good.db");
  size_t n;
  unsigned char *bytes = read_file(good, &n);
  GR_CHECK(bytes && n > 65536 * 4);
  gr_error err;
  GR_CHECK_EQ_INT(read_everything(good, &err), 0);
  size_t cuts[] = {n - 1, n - 65536, n / 2, 65536 * 2 + 100, 65536, 4096, 100, 10};
  for (size_t i = 0; bytes && i < sizeof cuts / sizeof cuts[0]; i++) {
    write_file(tmp_path("cut.db"), bytes, cuts[i]);
    int f = read_everything(tmp_path("cut.db"), &err);
    GR_CHECK_MSG(f > 0, "truncated to %zu bytes of %zu but everything read fine", cuts[i], n);
    GR_CHECK_MSG(err.code == GR_ERR_DATA_LOSS || err.code == GR_ERR_FAILED_PRECONDITION ||
                     err.code == GR_ERR_NOT_FOUND,
                 "cut %zu: %s: %s", cuts[i], gr_status_name(err.code), err.msg);
    GR_CHECK_STR_CONTAINS(err.msg, "cut.db");
    if (getenv("GR_TEST_VERBOSE")) printf("cut %zu: %s\n", cuts[i], err.msg);
  }
  free(bytes);
}

static void test_flipped_data_byte_names_tensor(void) {
  const char *good = tmp_path("good.db");
  size_t n;
  unsigned char *bytes = read_file(good, &n);
  /* find the first 16 bytes of layer1/b's data in the file and damage them */
  const unsigned char *needle = gr_tensor_data(&vals[1]);
  unsigned char *hit = bytes ? memmem(bytes, n, needle, 16) : NULL;
  GR_CHECK(hit != NULL);
  if (!hit) return;
  hit[3] ^= 0x40;
  write_file(tmp_path("flip.db"), bytes, n);
  gr_ckpt *ck;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_open(tmp_path("flip.db"), NULL, &ck, &err), err);
  gr_tensor t;
  GR_CHECK(gr_ckpt_read_tensor(ck, 10, "layer1/b", &t, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "tensor 'layer1/b' fails its checksum");
  GR_CHECK_OK(gr_ckpt_read_tensor(ck, 10, "layer1/w", &t, &err), err);
  gr_tensor_release(&t);
  int checked;
  GR_CHECK(gr_ckpt_verify(ck, NULL, NULL, &checked, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "layer1/b");
  /* a session restore fails without touching the variables */
  gr_graph *g = gr_graph_new();
  gr_variable(g, "layer1/w", gr_const(g, &vals[0]));
  gr_variable(g, "layer1/b", gr_const(g, &vals[1]));
  gr_variable(g, "step_count", gr_const_i64(g, 0));
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK(gr_ckpt_restore_latest(ck, s, g, NULL, &err) == GR_ERR_DATA_LOSS);
  GR_CHECK_STR_CONTAINS(err.msg, "layer1/b");
  gr_var *v = gr_resource_mgr_get_var(gr_session_resources(s), "layer1/w");
  GR_CHECK(!gr_var_is_initialized(v));
  gr_session_free(s);
  gr_graph_free(g);
  gr_ckpt_close(ck);
  free(bytes);
}

static void test_garbage_over_btree_pages(void) {
  size_t n;
  unsigned char *bytes = read_file(tmp_path("good.db"), &n);
  if (!bytes) return;
  /* pages 2.. hold the schema's tables and indexes (64 KiB pages) */
  for (size_t i = 65536; i < 65536 + 4096 && i < n; i++) bytes[i] = (unsigned char)(i * 131 + 7);
  write_file(tmp_path("garbage.db"), bytes, n);
  gr_error err;
  int f = read_everything(tmp_path("garbage.db"), &err);
  GR_CHECK(f > 0);
  GR_CHECK_MSG(err.code == GR_ERR_DATA_LOSS || err.code == GR_ERR_FAILED_PRECONDITION, "%s: %s",
               gr_status_name(err.code), err.msg);
  free(bytes);
}

/* Rows edited by hand (or by a bit flip) must not be trusted: a huge shape
 * with no data behind it is not allocated, inconsistent sizes and bad
 * dtypes are reported with the tensor's name. */
static void test_tampered_rows(void) {
  static const char *const edits[][2] = {
      {"UPDATE tensors SET shape='[1000000000000]', nbytes=8000000000000 WHERE name='step_count'",
       "tensor 'step_count' has 8 bytes of data, expected 8000000000000"},
      {"UPDATE tensors SET nbytes=9 WHERE name='step_count'",
       "tensor 'step_count' records 9 bytes, which does not match i64 []"},
      {"UPDATE tensors SET dtype='f16' WHERE name='step_count'",
       "tensor 'step_count' has unknown dtype 'f16'"},
      {"UPDATE tensors SET shape='[2,x]' WHERE name='step_count'",
       "tensor 'step_count' has a malformed shape '[2,x]'"},
      {"UPDATE tensors SET checksum='-00000000000001' WHERE name='step_count'",
       "tensor 'step_count' has a malformed checksum"},
      {"DELETE FROM chunks WHERE seq = 0 AND tensor_id = (SELECT id FROM tensors WHERE "
       "name='step_count')",
       "tensor 'step_count' has 0 bytes of data, expected 8"},
  };
  size_t n;
  unsigned char *bytes = read_file(tmp_path("good.db"), &n);
  for (size_t i = 0; bytes && i < sizeof edits / sizeof edits[0]; i++) {
    write_file(tmp_path("edit.db"), bytes, n);
    sqlite3 *db;
    GR_CHECK(sqlite3_open(tmp_path("edit.db"), &db) == SQLITE_OK);
    GR_CHECK_MSG(sqlite3_exec(db, edits[i][0], NULL, NULL, NULL) == SQLITE_OK, "%s",
                 sqlite3_errmsg(db));
    sqlite3_close(db);
    gr_ckpt *ck;
    gr_error err;
    GR_CHECK_OK(gr_ckpt_open(tmp_path("edit.db"), NULL, &ck, &err), err);
    gr_tensor t;
    GR_CHECK(gr_ckpt_read_tensor(ck, -1, "step_count", &t, &err) == GR_ERR_DATA_LOSS);
    GR_CHECK_STR_CONTAINS(err.msg, edits[i][1]);
    int checked;
    GR_CHECK(gr_ckpt_verify(ck, NULL, NULL, &checked, &err) == GR_ERR_DATA_LOSS);
    gr_ckpt_close(ck);
  }
  free(bytes);
}

static void test_random_corruption_never_crashes(void) {
  size_t n;
  unsigned char *orig = read_file(tmp_path("good.db"), &n);
  if (!orig) return;
  unsigned char *b = malloc(n);
  gt_rng r = {99};
  int detected = 0, rounds = 60;
  for (int round = 0; round < rounds; round++) {
    memcpy(b, orig, n);
    int hits = (int)gt_int(&r, 1, 8);
    for (int h = 0; h < hits; h++) {
      size_t at = (size_t)gt_int(&r, 0, (int64_t)n - 1);
      b[at] = (unsigned char)gt_int(&r, 0, 255);
    }
    write_file(tmp_path("rand.db"), b, n);
    gr_error err;
    detected += read_everything(tmp_path("rand.db"), &err) > 0; /* checks values when it reads */
  }
  printf("random corruption: %d of %d damaged copies reported\n", detected, rounds);
  GR_CHECK(detected > 0);
  free(b);
  free(orig);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_ckpt_err_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_missing_and_foreign_files);
  make_good(tmp_path("good.db"));
  GR_RUN(test_truncated);
  GR_RUN(test_flipped_data_byte_names_tensor);
  GR_RUN(test_garbage_over_btree_pages);
  GR_RUN(test_tampered_rows);
  GR_RUN(test_random_corruption_never_crashes);
  for (int i = 0; i < 3; i++) gr_tensor_release(&vals[i]);
  gt_remove_tree(dir);
  return gr_test_finish();
}
