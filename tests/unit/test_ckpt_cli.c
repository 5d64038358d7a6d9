/* `graphrun ckpt ls|show|diff|verify|export`: output and exit codes on a
 * good file, a damaged one, a missing one and a file that is not SQLite,
 * and export refusing tensor names that would leave the output directory. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "test_util.h"

static char dir[64], ck_path[128], out_buf[16384];

/* Runs `graphrun ARGS` (stdout and stderr captured); returns the exit code. */
static int run(const char *args) {
  return gt_cli_run(dir, args, out_buf, sizeof out_buf);
}

/* Runs `graphrun ARGS`; checks its exit code and (want not NULL) that its
 * output holds want (gt_cli_expect). */
static void expect(const char *args, int code, const char *want) {
  GR_CHECK(gt_cli_expect(dir, args, code, want, out_buf, sizeof out_buf));
}

static void make_file(void) {
  gr_ckpt *ck;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_open(ck_path, NULL, &ck, &err), err);
  for (int step = 1; step <= 2; step++) {
    gr_tensor w, b = gr_tensor_scalar_i64(step * 100);
    gr_tensor_alloc(&w, GR_F32, &(gr_shape){2, {40, 30}}, &err);
    float *p = gr_tensor_data(&w);
    for (int i = 0; i < 1200; i++) p[i] = (float)i * 0.5f + (step == 2 && i == 5 ? 1.0f : 0.0f);
    gr_ckpt_tensor t[2] = {{"layer1/w", &w}, {"bias", &b}};
    GR_CHECK_OK(gr_ckpt_save_tensors(ck, step * 10, t, 2, "{\"run\": \"cli\"}", &err), err);
    gr_tensor_release(&w);
    gr_tensor_release(&b);
  }
  gr_ckpt_close(ck);
}

static void test_ls_show(void) {
  expect("ckpt --help", 0, "usage: graphrun ckpt");
  expect("ckpt ls ck.db", 0, "        10  ");
  GR_CHECK_STR_CONTAINS(out_buf, "        20  ");
  GR_CHECK_STR_CONTAINS(out_buf, "{\"run\": \"cli\"}");
  expect("ckpt ls ck.db --step 10", 0, "layer1/w");
  GR_CHECK_STR_CONTAINS(out_buf, "[40, 30]");
  expect("ckpt show ck.db layer1/w --step 10", 0, "layer1/w: f32 [40, 30]");
  GR_CHECK_STR_CONTAINS(out_buf, "[[   0.   0.5    1. ...  13.5   14.  14.5]"); /* shortened */
  GR_CHECK_STR_CONTAINS(out_buf, " ...,\n");
  expect("ckpt show ck.db bias", 0, "step 20");
  GR_CHECK_STR_CONTAINS(out_buf, "\n200\n");
  expect("ckpt show ck.db nope", 2, "no tensor named 'nope'");
  expect("ckpt show ck.db bias --step 99", 2, "no checkpoint at step 99");
  expect("ckpt show ck.db", 2, NULL);
  expect("ckpt ls ck.db --bogus", 2, "unknown option '--bogus'");
  expect("ckpt frob ck.db", 2, NULL);
  expect("ckpt ls", 2, NULL);
}

static void test_diff(void) {
  expect("ckpt diff ck.db", 1, "~ bias: 1 of 1 elements differ"); /* the two newest differ */
  GR_CHECK_STR_CONTAINS(out_buf, "~ layer1/w: 1 of 1200 elements differ, max |a-b| = 1");
  expect("ckpt diff ck.db 10 10", 0, "2 tensors identical, 0 differ");
  expect("ckpt diff ck.db 10 --other ck.db", 1, NULL);
  expect("ckpt diff ck.db 10 77", 2, NULL);
  expect("ckpt diff ck.db x y", 2, NULL);
}

static void test_verify(void) {
  expect("ckpt verify ck.db", 0, "ok (integrity_check ok, 4 tensors checked)");
  expect("ckpt verify missing.db", 2, "does not exist");
  char path[160];
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("not a database\n", f);
    fclose(f);
  }
  expect("ckpt verify notes.txt", 2, "is not a SQLite database");
  /* damage one float of layer1/w at step 20 (0.5 * 1000 = 500.0f) */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cp %s %s/bad.db", ck_path, dir);
  GR_CHECK(system(cmd) == 0);
  snprintf(path, sizeof path, "%s/bad.db", dir);
  f = fopen(path, "r+b");
  GR_CHECK(f != NULL);
  if (!f) return;
  static unsigned char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  float want[4] = {500.0f, 500.5f, 501.0f, 501.5f};
  unsigned char *hit = memmem(buf, n, want, sizeof want);
  GR_CHECK(hit != NULL);
  if (hit) {
    fseek(f, (long)(hit - buf), SEEK_SET);
    float bad = 12345.0f;
    fwrite(&bad, 4, 1, f);
  }
  fclose(f);
  expect("ckpt verify bad.db", 1, "tensor 'layer1/w' fails its checksum");
  /* the damaged copy is in one of the two checkpoints: exactly one show fails */
  int a = run("ckpt show bad.db layer1/w --step 10"),
      b = run("ckpt show bad.db layer1/w --step 20");
  GR_CHECK((a == 1) + (b == 1) == 1 && a + b == 1);
}

static void test_export(void) {
  expect("ckpt export ck.db --step 10 --out .", 0, NULL);
  struct stat sb;
  char path[160];
  snprintf(path, sizeof path, "%s/layer1/w.npy", dir);
  GR_CHECK(stat(path, &sb) == 0 && sb.st_size == 128 + 1200 * 4);
  snprintf(path, sizeof path, "%s/bias.npy", dir);
  GR_CHECK(stat(path, &sb) == 0 && sb.st_size == 128 + 8);
  expect("ckpt export ck.db --out nowhere", 2, NULL);
  /* a tensor named to escape the output directory is refused */
  gr_ckpt *ck;
  gr_error err;
  snprintf(path, sizeof path, "%s/evil.db", dir);
  GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
  gr_tensor v = gr_tensor_scalar_f32(1);
  gr_ckpt_tensor t[2] = {{"../escaped", &v}, {"fine", &v}};
  GR_CHECK_OK(gr_ckpt_save_tensors(ck, 1, t, 2, NULL, &err), err);
  gr_tensor_release(&v);
  gr_ckpt_close(ck);
  snprintf(path, sizeof path, "%s/sub", dir);
  mkdir(path, 0755);
  expect("ckpt export evil.db --out sub", 1, "'../escaped' is not a safe file path");
  snprintf(path, sizeof path, "%s/escaped.npy", dir);
  GR_CHECK(stat(path, &sb) != 0);
  snprintf(path, sizeof path, "%s/sub/fine.npy", dir);
  GR_CHECK(stat(path, &sb) == 0);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_ckpt_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(ck_path, sizeof ck_path, "%s/ck.db", dir);
  make_file();
  GR_RUN(test_ls_show);
  GR_RUN(test_diff);
  GR_RUN(test_verify);
  GR_RUN(test_export);
  gt_remove_tree(dir);
  return gr_test_finish();
}
