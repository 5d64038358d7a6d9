/* graphrun export --inference and graphrun predict on a tiny model trained
 * from a folder of PNG files: light pictures against dark ones. The frozen
 * graph keeps only what the inference output needs (no optimizer, no
 * dropout, batch norm with its moving statistics, the variables constants
 * of their checkpoint values); predict classifies PNG and JPEG files of
 * other sizes and channels with the folder's class names and gives the
 * probabilities the training graph gives; unreadable files are named and
 * skipped. Freezing errors (a training-mode output, a missing input or
 * checkpoint variable) name what is wrong. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64];
static char out[16384];

/* A picture of w x h x c with values in [lo, hi] (a fixed pseudo-random
 * texture of seed k). */
static gr_image picture(int64_t w, int64_t h, int c, int lo, int hi, unsigned k) {
  gr_image img = {h, w, c, malloc((size_t)(w * h * c))};
  for (int64_t i = 0; i < w * h * c; i++) {
    k = k * 1103515245u + 12345u;
    img.pixels[i] = (uint8_t)(lo + (int)((k >> 16) % (unsigned)(hi - lo + 1)));
  }
  return img;
}

static void write_png(const char *name, gr_image img) {
  gr_error err;
  GR_CHECK_OK(gr_image_write_png(gt_path_in(dir, name), &img, &err), err);
  free(img.pixels);
}

static void write_jpeg(const char *name, gr_image img) {
  gr_error err;
  GR_CHECK_OK(gr_image_write_jpeg(gt_path_in(dir, name), &img, 95, &err), err);
  free(img.pixels);
}

/* The training folder: 24 light and 24 dark 12 x 12 RGB pictures. */
static void make_folder(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/imgs", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/imgs/dark", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/imgs/light", dir);
  mkdir(p, 0777);
  for (unsigned i = 0; i < 24; i++) {
    char name[64];
    snprintf(name, sizeof name, "imgs/dark/%02u.png", i);
    write_png(name, picture(12, 12, 3, 0, 110, i));
    snprintf(name, sizeof name, "imgs/light/%02u.png", i);
    write_png(name, picture(12, 12, 3, 145, 255, 100 + i));
  }
}

static const char *model_src =
    "train_x, train_y, val_x, val_y = image_folder(\"imgs\", size=[12, 12], batch=8,\n"
    "    validation_split=0.25, subset=\"both\", seed=1)\n"
    "def model(images, training) {\n"
    "  a = random_flip(images, mode=\"horizontal\", seed=1, training=training)\n"
    "  r = rescaling(a, 1 / 255)\n"
    "  c = conv2d(r, 4, 3, padding=\"same\", use_bias=false)\n"
    "  b = batch_norm(c, momentum=0.5, training=training)\n"
    "  s = separable_conv2d(relu(b), 4, 3, padding=\"same\")\n"
    "  d = dropout(global_avg_pool2d(s), 0.2, training=training)\n"
    "  return dense(d, 1, name=\"logit\")\n"
    "}\n"
    "labels = cast(reshape(train_y, [-1, 1]), f32)\n"
    "loss = binary_crossentropy(labels, model(train_x, true), from_logits=true)\n"
    "train = minimize(loss, adam(0.05))\n"
    "probs = sigmoid(model(val_x, false))\n"
    "wrong = sigmoid(model(val_x, true))\n"
    "fetch loss\n"
    "target train\n";

/* The held-out pictures: PNG of the training size, JPEG of other sizes,
 * gray and RGB (converted and resized as image_folder does). */
static void make_held_out(void) {
  write_png("light1.png", picture(12, 12, 3, 150, 255, 7001));
  write_png("dark1.png", picture(12, 12, 3, 0, 100, 7002));
  write_jpeg("light2.jpg", picture(30, 20, 3, 160, 250, 7003));
  write_jpeg("dark2.jpg", picture(7, 9, 1, 5, 100, 7004));
  write_png("dark3.png", picture(40, 40, 4, 0, 90, 7005)); /* RGBA */
  gt_write_file(dir, "notes.txt", "not a picture\n");
  /* a PNG cut short, and a JPEG whose header says 30000 x 30000 pixels */
  gr_image img = picture(12, 12, 3, 0, 255, 7006);
  gr_error err;
  size_t len = 0;
  GR_CHECK_OK(gr_image_write_jpeg(gt_path_in(dir, "huge.jpg"), &img, 90, &err), err);
  FILE *f = fopen(gt_path_in(dir, "huge.jpg"), "r+b");
  unsigned char buf[4096];
  if (f) len = fread(buf, 1, sizeof buf, f);
  for (size_t i = 0; i + 8 < len; i++)
    if (buf[i] == 0xff && buf[i + 1] == 0xc0) { /* SOF0: height and width */
      buf[i + 5] = buf[i + 7] = 30000 >> 8, buf[i + 6] = buf[i + 8] = 30000 & 0xff;
      break;
    }
  if (f) fseek(f, 0, SEEK_SET), fwrite(buf, 1, len, f), fclose(f);
  GR_CHECK_OK(gr_image_write_png(gt_path_in(dir, "cut.png"), &img, &err), err);
  GR_CHECK(truncate(gt_path_in(dir, "cut.png"), 60) == 0);
  free(img.pixels);
}

/* The probability predict printed for file's class cls, -1 if none. */
static double printed(const char *file, const char *cls) {
  char key[128];
  snprintf(key, sizeof key, "%s: ", file);
  const char *line = strstr(out, key), *end = line ? strchr(line, '\n') : NULL;
  snprintf(key, sizeof key, " %s ", cls);
  const char *at = line ? strstr(line, key) : NULL;
  if (!at || (end && at > end)) return -1;
  return strtod(at + strlen(key), NULL);
}

/* The first class predict printed for file. */
static bool top_is(const char *file, const char *cls) {
  char want[128];
  snprintf(want, sizeof want, "%s: %s ", file, cls);
  bool ok = strstr(out, want) != NULL;
  if (!ok) fprintf(stderr, "wanted '%s' in:\n%s\n", want, out);
  return ok;
}

static void test_export_and_predict(void) {
  GR_CHECK(gt_cli_expect(dir, "run m.gr --steps 60 --ckpt c.db --quiet", 0, NULL, out, sizeof out));
  GR_CHECK(gt_cli_expect(
      dir, "export m.gr --inference --ckpt c.db --output probs --input val_x -o m.grb", 0,
      "input 'val_x': image_input f32 [?, 12, 12, 3] (rgb; classes: dark, "
      "light)",
      out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "variables frozen from c.db (step 60)");
  /* what the frozen graph holds: no optimizer, no image_folder, no dropout,
   * the variables constants, batch norm in inference mode */
  GR_CHECK(gt_cli_expect(dir, "check m.grb", 0, "image_input                  1", out, sizeof out));
  const char *gone[] = {"variable ",    "read_value", "apply_adam",
                        "image_folder", "dropout",    "moving_average_update",
                        "random"};
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
    GR_CHECK_MSG(!strstr(out, gone[i]), "'%s' in the frozen graph:\n%s", gone[i], out);
  GR_CHECK_STR_CONTAINS(out, "batch_norm ");
  GR_CHECK_STR_CONTAINS(out, "const ");

  /* predict: the right class for each held-out picture, PNG and JPEG */
  GR_CHECK(gt_cli_expect(dir,
                         "predict m.grb light1.png dark1.png light2.jpg dark2.jpg dark3.png "
                         "--batch 2",
                         0, NULL, out, sizeof out));
  GR_CHECK(top_is("light1.png", "light") && top_is("light2.jpg", "light"));
  GR_CHECK(top_is("dark1.png", "dark") && top_is("dark2.jpg", "dark") &&
           top_is("dark3.png", "dark"));
  double pl = printed("light1.png", "light"), pd = printed("light1.png", "dark");
  GR_CHECK_NEAR(pl + pd, 1, 2e-4);

  /* the probabilities are the training graph's (restored from c.db, its
   * val_x fed the same 12 x 12 picture) */
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  char *cwd = getcwd(NULL, 0);
  GR_CHECK(chdir(dir) == 0);
  GR_CHECK_OK(gr_dsl_load_file("m.gr", g, NULL, &p, &err), err);
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_ckpt *ck = NULL;
  gr_ckpt_options co = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open("c.db", &co, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, s, g, NULL, &err), err);
  gr_image img;
  GR_CHECK_OK(gr_image_read("light1.png", 3, 0, &img, &err), err);
  GR_CHECK(chdir(cwd) == 0);
  free(cwd);
  /* a batch of the folder's size, the picture first */
  gr_tensor x = gt_zeros(GR_F32, (gr_shape){4, {8, 12, 12, 3}}), prob = gr_tensor_empty();
  for (int i = 0; i < 12 * 12 * 3; i++) ((float *)gr_tensor_data(&x))[i] = img.pixels[i];
  gr_output vx, probs;
  GR_CHECK(gr_dsl_lookup(p, "val_x", &vx) && gr_dsl_lookup(p, "probs", &probs));
  gr_feed f = {vx, &x};
  GR_CHECK_OK(gr_session_run(s, &f, 1, &probs, 1, &prob, NULL, 0, &err), err);
  if (prob.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&prob, 0), pl, 6e-5);
  gr_image_free(&img);
  gr_tensor_release(&x);
  gr_tensor_release(&prob);
  gr_ckpt_close(ck);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* Unreadable files: each named with the reason, the others classified,
 * exit code 2. */
static void test_bad_images(void) {
  int rc = gt_cli_run(dir,
                      "predict m.grb notes.txt light1.png cut.png nothere.png huge.jpg imgs "
                      "dark1.png",
                      out, sizeof out);
  GR_CHECK_EQ_INT(rc, 2);
  GR_CHECK_STR_CONTAINS(out, "graphrun predict: notes.txt: not a PNG or JPEG");
  GR_CHECK_STR_CONTAINS(out, "graphrun predict: cut.png: ");
  GR_CHECK_STR_CONTAINS(out, "graphrun predict: nothere.png: ");
  GR_CHECK_STR_CONTAINS(out, "graphrun predict: huge.jpg: ");
  GR_CHECK_STR_CONTAINS(out, "30000 x 30000");
  GR_CHECK_STR_CONTAINS(out, "graphrun predict: imgs: read error: Is a directory");
  GR_CHECK_STR_CONTAINS(out, "5 of 7 files could not be classified");
  GR_CHECK(top_is("light1.png", "light") && top_is("dark1.png", "dark"));
  /* a model without an image input; no files */
  GR_CHECK(gt_cli_expect(dir, "predict m.gr light1.png", 2, "has no image input", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "predict m.grb", 2, "no image files", out, sizeof out));
}

/* A placeholder input of image shape, a softmax of 3 logits (the channel
 * means / 100: e^2.5 / (e^2.5 + 2) for pure red), no class names. */
static void test_placeholder_model(void) {
  gt_write_file(dir, "p.gr",
                "x = placeholder(f32, [?, 4, 4, 3])\n"
                "logits = reduce_mean(x, axes=[1, 2]) * 0.01\n");
  GR_CHECK(gt_cli_expect(dir, "export p.gr --inference --output logits -o p.grb", 0,
                         "input 'x': placeholder f32 [?, 4, 4, 3]", out, sizeof out));
  gr_image red = picture(8, 8, 3, 0, 0, 1);
  for (int i = 0; i < 64; i++) red.pixels[3 * i] = 250;
  write_png("red.png", red);
  GR_CHECK(gt_cli_expect(dir, "predict p.grb red.png --top 2", 0,
                         "red.png: class 0 0.8590, class 1 0.0705", out, sizeof out));
  GR_CHECK(!strstr(out, "class 2")); /* the top two only */
}

/* Freezing errors name the node and what to do, the missing variable and
 * the checkpoint file. */
static void test_freeze_errors(void) {
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --ckpt c.db --output wrong -o w.grb", 2,
                         "m.gr:4:7: the output 'wrong' needs node 'model_2/a' (op random_flip)",
                         out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "with training=false");
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --ckpt c.db --output loss -o w.grb", 2,
                         "must depend on the input alone", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --ckpt c.db -o w.grb", 2,
                         "--inference needs --output NAME", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "export m.gr --ckpt c.db -o w.grb", 2, "--ckpt goes with --inference",
                         out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --output probs -o w.grb", 2,
                         "give --ckpt PATH", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --step 3 --output probs -o w.grb", 2,
                         "--step goes with --ckpt", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir,
                         "export m.gr --inference --ckpt c.db --step 7 --output probs -o w.grb", 2,
                         "c.db' has no checkpoint at step 7", out, sizeof out));
  /* a checkpoint without the model's variables: another file's */
  gt_write_file(dir, "other.gr", "w = variable(zeros([2]))\ny = w + 1\n");
  GR_CHECK(gt_cli_expect(dir, "run other.gr --ckpt o.db --quiet", 0, NULL, out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "export m.gr --inference --ckpt o.db --output probs -o w.grb", 2,
                         "o.db", out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "model/");
  GR_CHECK(access(gt_path_in(dir, "w.grb"), F_OK) != 0); /* nothing written */
}

/* --epochs reads an epoch's steps off the image folder: 36 training
 * pictures in batches of 8 are 4 steps. */
static void test_epochs_of_folder(void) {
  GR_CHECK(gt_cli_expect(dir, "run m.gr --epochs 3 --ckpt e.db", 0, "epoch 3/3  loss ", out,
                         sizeof out));
  GR_CHECK(gt_cli_expect(dir, "ckpt ls e.db", 0, "\"steps_done\": 12}", out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "\"steps_done\": 4}");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_export_predict_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  make_folder();
  make_held_out();
  gt_write_file(dir, "m.gr", model_src);
  GR_RUN(test_export_and_predict);
  GR_RUN(test_bad_images);
  GR_RUN(test_placeholder_model);
  GR_RUN(test_freeze_errors);
  GR_RUN(test_epochs_of_folder);
  if (!getenv("GR_TEST_KEEP")) gt_remove_tree(dir);
  return gr_test_finish();
}
