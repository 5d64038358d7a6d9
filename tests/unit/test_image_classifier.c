/* examples/image_classifier/, short: the thesis's classifier (thesis.gr)
 * trained from a folder of Fashion-MNIST PNG files that
 * build/examples/fashion_to_png makes, a few steps of an epoch with
 * validation; exported as an inference graph and run by graphrun predict
 * on 20 pictures of the test set; and thesis_sync.gr on a TF_CONFIG
 * cluster (a chief and two workers, synchronous), whose bits equal one
 * process's. The full run (one epoch, val_accuracy, 19 of 20 right) is
 * measured in docs/keras.md. Every process is bounded in time and reaped. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <graphrun.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[64], out[65536];

/* Runs argv to its end (at most 300 s) in dir; its output in out, its exit
 * code returned (printed when not 0). */
static int run(char *const *argv) {
  gt_proc p;
  char *cwd = getcwd(NULL, 0);
  GR_CHECK(chdir(dir) == 0);
  gt_proc_start(&p, argv);
  GR_CHECK(chdir(cwd) == 0);
  free(cwd);
  bool ended = gt_proc_wait(&p, NULL, 300);
  gt_proc_finish(&p);
  if (!ended) fprintf(stderr, "  %s %s did not end in 300 s\n", argv[0], argv[1]);
  snprintf(out, sizeof out, "%s", p.buf);
  int code = gt_proc_exit_code(&p);
  if (code != 0) fprintf(stderr, "  %s %s: exit %d:\n%s\n", argv[0], argv[1], code, out);
  return code;
}

/* The example's files and folders: 600 training pictures, 20 held out. */
static void setup(void) {
  const char *files[] = {"model.gr", "evaluate.gr", "thesis.gr", "thesis_sync.gr"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char src[PATH_MAX], dst[PATH_MAX], cmd[3 * PATH_MAX];
    snprintf(src, sizeof src, "%s/examples/image_classifier/%s", GR_SOURCE_DIR, files[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    GR_CHECK(system(cmd) == 0);
  }
  char tool[PATH_MAX];
  snprintf(tool, sizeof tool, "%s", gt_graphrun_exe());
  *strrchr(tool, '/') = '\0';
  strcat(tool, "/examples/fashion_to_png");
  char *train[] = {tool, "fashion", "600", NULL},
       *held[] = {tool, "held_out", "20", "--test", NULL};
  GR_CHECK_EQ_INT(run(train), 0);
  GR_CHECK_EQ_INT(run(held), 0);
}

/* One process: an epoch of 10 steps with validation over the whole
 * validation subset; the inference graph of probs; predict on the 20
 * held-out pictures, one line each, with the folder's class names. */
static void test_one_process(void) {
  char *fit[] = {"graphrun", "run",        "thesis.gr",
                 "--epochs", "1",          "--steps-per-epoch",
                 "10",       "--validate", "val_accuracy,val_loss",
                 "--ckpt",   "c.db",       NULL};
  GR_CHECK_EQ_INT(run(fit), 0);
  GR_CHECK_STR_CONTAINS(out, "epoch 1/1  loss ");
  GR_CHECK_STR_CONTAINS(out, "  val_accuracy 0.");
  GR_CHECK_STR_CONTAINS(out, "  val_loss ");
  char *exp[] = {"graphrun", "export",     "thesis.gr", "--inference", "--ckpt",
                 "c.db",     "--output",   "probs",     "--input",     "val_x",
                 "-o",       "thesis.grb", NULL};
  GR_CHECK_EQ_INT(run(exp), 0);
  GR_CHECK_STR_CONTAINS(out, "input 'val_x': image_input f32 [?, 28, 28, 1] (grayscale; classes: "
                             "footwear, other)");
  GR_CHECK_STR_CONTAINS(out, "frozen from c.db (step 10)");
  /* the held-out files, as fashion_to_png names them (CLASS/INDEX.png) */
  char *argv[40] = {"graphrun", "predict", "thesis.grb", "--top", "1"};
  static char names[20][64];
  int n = 5, k = 0;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "cd %s && ls held_out/*/*.png", dir);
  FILE *f = popen(cmd, "r");
  while (f && k < 20 && fgets(names[k], sizeof names[k], f)) {
    names[k][strcspn(names[k], "\n")] = '\0';
    argv[n++] = names[k++];
  }
  if (f) pclose(f);
  GR_CHECK_EQ_INT(k, 20);
  argv[n] = NULL;
  GR_CHECK_EQ_INT(run(argv), 0);
  int lines = 0;
  for (int i = 0; i < k; i++) {
    char want[96];
    snprintf(want, sizeof want, "%s: ", names[i]);
    const char *l = strstr(out, want);
    lines += l != NULL;
    const char *cls = l ? l + strlen(want) : "";
    GR_CHECK_MSG(strncmp(cls, "footwear ", 9) == 0 || strncmp(cls, "other ", 6) == 0,
                 "no class for %s in:\n%s", names[i], out);
  }
  GR_CHECK_EQ_INT(lines, 20);
}

/* TF_CONFIG with a chief and 2 workers on free loopback ports. */
static void set_tf_config(void) {
  int p[3];
  GR_CHECK(gt_free_ports(p, 3));
  char tf[512];
  snprintf(tf, sizeof tf,
           "{\"cluster\": {\"chief\": [\"localhost:%d\"], \"worker\": [\"localhost:%d\", "
           "\"localhost:%d\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
           p[0], p[1], p[2]);
  setenv("TF_CONFIG", tf, 1);
}

/* The JSON line of out. */
static void json_of(char *json, size_t cap) {
  const char *j = strstr(out, "{\"loss\"");
  snprintf(json, cap, "%.*s", j ? (int)strcspn(j, "\n") : 0, j ? j : "");
}

/* Synchronous all-reduce over the chief and the workers: two steps on the
 * cluster give one process's bits. */
static void test_cluster(void) {
  char one[4096], cluster[4096];
  char *local[] = {"graphrun",         "run",     "thesis_sync.gr",
                   "--soft-placement", "--steps", "2",
                   "--json",           "--quiet", NULL};
  GR_CHECK_EQ_INT(run(local), 0);
  json_of(one, sizeof one);
  GR_CHECK(strstr(one, "\"accuracy\"") != NULL);
  char *launch[] = {"graphrun",       "launch",  "--quiet", "--cluster", "env",
                    "thesis_sync.gr", "--steps", "2",       "--json",    NULL};
  int code = -1;
  for (int attempt = 0; attempt < 2; attempt++) { /* a port taken meanwhile: once more */
    set_tf_config();
    code = run(launch);
    if (!strstr(out, "exited while starting")) break;
  }
  GR_CHECK_EQ_INT(code, 0);
  json_of(cluster, sizeof cluster);
  GR_CHECK_MSG(one[0] && strcmp(cluster, one) == 0, "cluster '%s', one process '%s'", cluster, one);
}

int main(void) {
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_test_image_classifier_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  setup();
  GR_RUN(test_one_process);
  GR_RUN(test_cluster);
  gt_remove_tree(dir);
  return gr_test_finish();
}
