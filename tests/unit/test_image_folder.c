/* The image_folder op (ops/gr_images.h) and its .gr call, on folders made
 * here: every image is one solid colour that encodes its file's id (PNG
 * and JPEG, of varied sizes), so each decoded image of a batch says which
 * file it came from, and its label can be checked against the class
 * folder that file is in.
 *
 * Checked: Keras' listing order and class names; every epoch a
 * permutation of the subset, labels right; Keras' validation split (the
 * last fraction of the seed-shuffled list, complementary subsets); shards;
 * label modes; the same batches whatever the threads, prefetch and order
 * of asking, and after a checkpoint restore; unreadable, truncated and
 * huge files skipped with a warning naming each, counted, never a crash
 * or a wrong label; decoding ahead; a folder changed since the build; the
 * listing kept by a serialized graph. */
#include <graphrun.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "gr_test.h"
#include "ops/image_internal.h"
#include "test_util.h"

static char root[256];

static int sh(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *at(const char *dir, const char *rel) {
  static char buf[8][1024];
  static int k;
  char d[1024];
  snprintf(d, sizeof d, "%s", dir); /* dir may be an earlier result */
  char *b = buf[k++ % 8];
  snprintf(b, 1024, "%s/%s", d, rel);
  return b;
}

static void mkdirs(const char *path) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
  sh(cmd);
}

/* A solid image encoding id (< 256) in coarse levels that JPEG keeps. */
static void make_image(const char *path, int id, bool jpeg) {
  gr_image img = {.height = 3 + id % 5, .width = 4 + id % 7, .channels = 3};
  img.pixels = malloc((size_t)(img.height * img.width * 3));
  for (int64_t p = 0; p < img.height * img.width; p++) {
    img.pixels[3 * p] = (uint8_t)(16 * (id % 16) + 8);
    img.pixels[3 * p + 1] = (uint8_t)(16 * (id / 16) + 8);
    img.pixels[3 * p + 2] = 128;
  }
  gr_error err;
  GR_CHECK_OK(
      jpeg ? gr_image_write_jpeg(path, &img, 95, &err) : gr_image_write_png(path, &img, &err), err);
  free(img.pixels);
}

/* The id an image of a batch encodes (-1: not one of ours). */
static int id_of(const float *img, int64_t pixels) {
  int r = (int)img[0] / 16, g = (int)img[1] / 16;
  for (int64_t p = 0; p < pixels; p++)
    if ((int)img[3 * p] / 16 != r || (int)img[3 * p + 1] / 16 != g) return -1;
  return g * 16 + r;
}

/* The folder of most tests: 4 classes (one empty), 23 images, ids 0..22,
 * label of id in label_of[]. */
static const char *folder;
static int label_of[256], num_images;

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

/* dir/cls/ with n files first.png .. (ids first..), or garbage files. */
static void make_class(const char *dir, const char *cls, int first, int n, bool garbage) {
  mkdirs(at(dir, cls));
  for (int i = first; i < first + n; i++) {
    char name[300];
    snprintf(name, sizeof name, "%s/%d.png", cls, i);
    if (garbage)
      write_file(at(dir, name), "garbage");
    else
      make_image(at(dir, name), i, false);
  }
}

static void make_folder(void) {
  folder = strdup(at(root, "animals"));
  static const char *const files[] = {"birds/a.png",
                                      "birds/c.JPG",
                                      "birds/sub/b.PNG",
                                      "birds/sub-x/z.png",
                                      "birds/sub/deeper/y.jpeg",
                                      "cats/01.png",
                                      "cats/02.png",
                                      "cats/03.jpg",
                                      "cats/04.png",
                                      "cats/05.png",
                                      "cats/06.png",
                                      "cats/07.png",
                                      "cats/08.png",
                                      "dogs/x1.png",
                                      "dogs/x2.png",
                                      "dogs/x3.png",
                                      "dogs/x4.png",
                                      "dogs/x5.jpg",
                                      "dogs/x6.png",
                                      "dogs/x7.png",
                                      "dogs/x8.png",
                                      "dogs/x9.png",
                                      "dogs/y0.png"};
  num_images = (int)(sizeof files / sizeof files[0]);
  for (int i = 0; i < num_images; i++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", at(folder, files[i]));
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    const char *ext = strrchr(files[i], '.');
    make_image(at(folder, files[i]), i, strcasecmp(ext, ".png") != 0);
    label_of[i] = files[i][0] == 'b' ? 0 : files[i][0] == 'c' ? 1 : 2;
  }
  mkdirs(at(folder, "empty"));
  mkdirs(at(folder, ".hidden"));
  make_image(at(folder, ".hidden/h.png"), 200, false);
  write_file(at(folder, "birds/notes.txt"), "not an image\n");
  write_file(at(folder, "cats/x.bmp"), "BM not supported\n");
  write_file(at(folder, "readme.txt"), "a file at the top: no class\n");
}

static void test_listing_order(void) {
  gr_image_list l;
  gr_error err;
  GR_CHECK_OK(gr_image_list_dir(folder, &l, &err), err);
  if (err.code != GR_OK && l.num_files == 0) return;
  GR_CHECK_EQ_INT(l.num_classes, 4);
  const char *classes[] = {"birds", "cats", "dogs", "empty"};
  for (int k = 0; k < 4 && k < l.num_classes; k++) GR_CHECK(!strcmp(l.class_names[k], classes[k]));
  GR_CHECK(!strcmp(l.names, "birds\ncats\ndogs\nempty"));
  GR_CHECK_EQ_INT(l.num_files, num_images);
  /* Keras: sorted(os.walk) by folder path, then sorted names: birds,
   * birds/sub, birds/sub-x, birds/sub/deeper ('-' sorts before '/') */
  const char *first[] = {"birds/a.png",
                         "birds/c.JPG",
                         "birds/sub/b.PNG",
                         "birds/sub-x/z.png",
                         "birds/sub/deeper/y.jpeg",
                         "cats/01.png"};
  for (int i = 0; i < 6; i++)
    GR_CHECK_MSG(!strcmp(gr_image_list_path(&l, i), first[i]), "%d: %s", i,
                 gr_image_list_path(&l, i));
  for (int64_t i = 0; i < l.num_files; i++) GR_CHECK_EQ_INT(l.labels[i], label_of[i]);
  GR_CHECK_EQ_INT(l.ignored, 2); /* notes.txt, x.bmp */
  gr_image_list_free(&l);
  /* errors name the folder */
  GR_CHECK(gr_image_list_dir(at(root, "nope"), &l, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "nope: no such folder");
  mkdirs(at(root, "noclasses"));
  write_file(at(root, "noclasses/a.png"), "x");
  GR_CHECK(gr_image_list_dir(at(root, "noclasses"), &l, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "no class sub-folders");
  mkdirs(at(root, "noimages/a"));
  GR_CHECK(gr_image_list_dir(at(root, "noimages"), &l, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "no images in its 1 class sub-folders");
}

/* ---- running a node ---------------------------------------------------------------------- */

typedef struct run {
  gr_graph *g;
  gr_session *s;
  gr_output step, out;
} run;

static bool start(run *r, const char *dir, const gr_image_folder_options *o, uint64_t graph_seed) {
  memset(r, 0, sizeof *r);
  r->g = gr_graph_new();
  gr_graph_set_seed(r->g, graph_seed);
  r->step = gr_placeholder(r->g, "step", GR_I64, (gr_shape){0, {0}});
  r->out = gr_image_folder(r->g, r->step, dir, o);
  gr_error err;
  if (gr_graph_error(r->g)) {
    GR_CHECK_MSG(0, "build: %s", gr_graph_error(r->g)->msg);
    gr_graph_free(r->g);
    r->g = NULL;
    return false;
  }
  r->s = gr_session_new(r->g, NULL, &err);
  GR_CHECK_MSG(r->s, "%s", err.msg);
  return r->s != NULL;
}

static void stop(run *r) {
  if (r->s) gr_session_free(r->s);
  if (r->g) gr_graph_free(r->g);
}

/* Batch k: images, labels and skipped count into out[0..3). */
static gr_status batch(run *r, int64_t k, gr_tensor out[3], gr_error *err) {
  for (int i = 0; i < 3; i++) out[i] = gr_tensor_empty();
  gr_tensor step = gr_tensor_scalar_i64(k);
  gr_feed f = {r->step, &step};
  gr_output fetch[3] = {gr_output_at(r->out, 0), gr_output_at(r->out, 1), gr_output_at(r->out, 2)};
  gr_status st = gr_session_run(r->s, &f, 1, fetch, 3, out, NULL, 0, err);
  gr_tensor_release(&step);
  return st;
}

static void release3(gr_tensor t[3]) {
  for (int i = 0; i < 3; i++) gr_tensor_release(&t[i]);
}

/* The ids of batch k (b entries), checking every label; false on error. */
static bool batch_ids(run *r, int64_t k, int *ids, int b) {
  gr_tensor t[3];
  gr_error err;
  gr_status st = batch(r, k, t, &err);
  GR_CHECK_MSG(st == GR_OK, "batch %lld: %s", (long long)k, err.msg);
  if (st != GR_OK) return false;
  int64_t px = t[0].shape.dims[1] * t[0].shape.dims[2];
  for (int j = 0; j < b; j++) {
    ids[j] = id_of((const float *)gr_tensor_data(&t[0]) + j * px * 3, px);
    GR_CHECK_MSG(ids[j] >= 0 && ids[j] < num_images, "batch %lld image %d: no id", (long long)k, j);
    int32_t label = ((const int32_t *)gr_tensor_data(&t[1]))[j];
    if (ids[j] >= 0 && ids[j] < num_images)
      GR_CHECK_MSG(label == label_of[ids[j]], "batch %lld image %d (file %d): label %d, want %d",
                   (long long)k, j, ids[j], label, label_of[ids[j]]);
  }
  release3(t);
  return true;
}

static gr_image_folder_options opts(int64_t batch_size) {
  gr_image_folder_options o;
  gr_image_folder_options_init(&o);
  o.height = 5, o.width = 6, o.batch_size = batch_size;
  return o;
}

static void test_epochs_and_labels(void) {
  gr_image_folder_options o = opts(4);
  o.seed = 5;
  run r;
  if (!start(&r, folder, &o, 0)) return;
  GR_CHECK(gt_inferred(gr_output_at(r.out, 0), GR_F32, (gr_shape){4, {4, 5, 6, 3}}));
  GR_CHECK(gt_inferred(gr_output_at(r.out, 1), GR_I32, (gr_shape){1, {4}}));
  GR_CHECK_EQ_INT(gr_image_folder_num_images(r.out), num_images);
  int per_epoch = num_images / 4, ids[2][32];
  for (int e = 0; e < 2; e++) {
    int seen[256] = {0};
    for (int k = 0; k < per_epoch; k++) batch_ids(&r, e * per_epoch + k, ids[e] + 4 * k, 4);
    for (int i = 0; i < 4 * per_epoch; i++)
      if (ids[e][i] >= 0 && ids[e][i] < 256) seen[ids[e][i]]++;
    int distinct = 0;
    for (int i = 0; i < 256; i++) {
      distinct += seen[i] == 1;
      GR_CHECK(seen[i] <= 1);
    }
    GR_CHECK_EQ_INT(distinct, 4 * per_epoch); /* the rest of the epoch is dropped */
  }
  GR_CHECK(memcmp(ids[0], ids[1], sizeof(int) * 4 * per_epoch) != 0); /* reshuffled */
  stop(&r);
}

/* Bytes of the images and labels of batches ks[0..n). */
static void collect(const char *dir, const gr_image_folder_options *o, uint64_t graph_seed,
                    const int64_t *ks, int n, char **out, size_t *len) {
  run r;
  *out = NULL, *len = 0;
  if (!start(&r, dir, o, graph_seed)) return;
  FILE *f = open_memstream(out, len);
  for (int i = 0; i < n; i++) {
    gr_tensor t[3];
    gr_error err;
    if (batch(&r, ks[i], t, &err) != GR_OK) {
      fprintf(f, "error %s\n", err.msg);
      continue;
    }
    fwrite(gr_tensor_data(&t[0]), 1, gr_tensor_num_bytes(&t[0]), f);
    fwrite(gr_tensor_data(&t[1]), 1, gr_tensor_num_bytes(&t[1]), f);
    release3(t);
  }
  fclose(f);
  stop(&r);
}

static void test_deterministic(void) {
  int64_t in_order[12], mixed[12];
  for (int i = 0; i < 12; i++) in_order[i] = i, mixed[i] = (i * 7) % 12; /* 0 7 2 9 4 11 ... */
  gr_image_folder_options o = opts(3);
  o.seed = 9;
  o.random_flip = "horizontal_and_vertical";
  char *a, *b, *c, *d;
  size_t la, lb, lc, ld;
  o.threads = 1, o.prefetch = 0;
  collect(folder, &o, 0, in_order, 12, &a, &la);
  o.threads = 4, o.prefetch = 3;
  collect(folder, &o, 0, in_order, 12, &b, &lb);
  GR_CHECK(a && b && la == lb && !memcmp(a, b, la));
  /* asked out of order: batch k is the same (compare per batch) */
  collect(folder, &o, 0, mixed, 12, &c, &lc);
  size_t per = lc / 12;
  GR_CHECK(lc == la);
  for (int i = 0; c && a && lc == la && i < 12; i++)
    GR_CHECK_MSG(!memcmp(c + i * per, a + mixed[i] * per, per), "batch %lld", (long long)mixed[i]);
  /* another graph seed: other epochs' order and flips */
  collect(folder, &o, 1, in_order, 12, &d, &ld);
  GR_CHECK(d && (ld != la || memcmp(a, d, la) != 0));
  free(a), free(b), free(c), free(d);
}

/* Steps of one session run at once, asking for batches that share slots
 * (batch k lives in slot k % 2 with prefetch 1): each gets its batch. */
typedef struct conc {
  run *r;
  int first;
  char *bytes[12];
} conc;

static void *conc_thread(void *p) {
  conc *c = p;
  for (int i = 0; i < 12; i++) {
    int64_t k = (c->first + 5 * i) % 12;
    gr_tensor t[3];
    gr_error err;
    c->bytes[k] = NULL;
    if (batch(c->r, k, t, &err) != GR_OK) continue;
    size_t n = gr_tensor_num_bytes(&t[0]);
    c->bytes[k] = malloc(n);
    memcpy(c->bytes[k], gr_tensor_data(&t[0]), n);
    release3(t);
  }
  return NULL;
}

static void test_concurrent_steps(void) {
  gr_image_folder_options o = opts(3);
  o.seed = 4, o.prefetch = 1, o.threads = 2;
  char *want;
  size_t len;
  int64_t ks[12];
  for (int i = 0; i < 12; i++) ks[i] = i;
  collect(folder, &o, 0, ks, 12, &want, &len);
  run r;
  if (!want || !start(&r, folder, &o, 0)) return free(want);
  conc c[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    c[i] = (conc){.r = &r, .first = i};
    pthread_create(&th[i], NULL, conc_thread, &c[i]);
  }
  size_t per = len / 12 - 3 * sizeof(int32_t); /* the images of a batch, without labels */
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    for (int k = 0; k < 12; k++) {
      GR_CHECK_MSG(c[i].bytes[k] && !memcmp(c[i].bytes[k], want + k * (len / 12), per),
                   "thread %d, batch %d", i, k);
      free(c[i].bytes[k]);
    }
  }
  stop(&r);
  free(want);
}

/* The ids of the whole subset (batch 1, one epoch). */
static int subset_ids(const gr_image_folder_options *o, uint64_t graph_seed, int *ids) {
  run r;
  if (!start(&r, folder, o, graph_seed)) return 0;
  int n = (int)gr_image_folder_num_images(r.out);
  for (int k = 0; k < n; k++) batch_ids(&r, k, &ids[k], 1);
  stop(&r);
  return n;
}

static int cmp_int(const void *a, const void *b) {
  return *(const int *)a - *(const int *)b;
}

static void test_validation_split(void) {
  gr_image_folder_options o = opts(1);
  o.validation_split = 0.25;
  int val = (int)(0.25 * num_images), train[256], vids[256];
  /* no shuffling: Keras' validation subset is the last 25% of the sorted list */
  o.shuffle = false;
  o.subset = "validation";
  GR_CHECK_EQ_INT(subset_ids(&o, 0, vids), val);
  for (int i = 0; i < val; i++) GR_CHECK_EQ_INT(vids[i], num_images - val + i);
  o.subset = "training";
  GR_CHECK_EQ_INT(subset_ids(&o, 0, train), num_images - val);
  for (int i = 0; i < num_images - val; i++) GR_CHECK_EQ_INT(train[i], i);
  /* shuffled by a seed: complementary subsets of the right sizes */
  o.shuffle = true;
  o.seed = 3;
  int nt = subset_ids(&o, 0, train);
  o.subset = "validation";
  int nv = subset_ids(&o, 0, vids);
  GR_CHECK_EQ_INT(nt, num_images - val);
  GR_CHECK_EQ_INT(nv, val);
  int all[256];
  memcpy(all, train, sizeof(int) * (size_t)nt);
  memcpy(all + nt, vids, sizeof(int) * (size_t)nv);
  qsort(all, (size_t)(nt + nv), sizeof(int), cmp_int);
  for (int i = 0; i < nt + nv; i++) GR_CHECK_EQ_INT(all[i], i);
  qsort(vids, (size_t)nv, sizeof(int), cmp_int);
  bool last = true; /* the seed shuffled the list before the split */
  for (int i = 0; i < nv; i++) last = last && vids[i] == num_images - val + i;
  GR_CHECK(!last);
  /* the split follows the seed only: another graph seed keeps it */
  int again[256];
  GR_CHECK_EQ_INT(subset_ids(&o, 77, again), nv);
  qsort(again, (size_t)nv, sizeof(int), cmp_int);
  GR_CHECK(!memcmp(again, vids, sizeof(int) * (size_t)nv));
  o.seed = 4;
  subset_ids(&o, 0, again);
  qsort(again, (size_t)nv, sizeof(int), cmp_int);
  GR_CHECK(memcmp(again, vids, sizeof(int) * (size_t)nv) != 0);
  /* shards of the training subset: disjoint, together the subset */
  o.subset = "training";
  o.seed = 3;
  o.num_shards = 2;
  int s0[256], s1[256];
  int n0 = subset_ids(&o, 0, s0);
  o.shard_index = 1;
  int n1 = subset_ids(&o, 0, s1);
  GR_CHECK_EQ_INT(n0 + n1, nt);
  memcpy(all, s0, sizeof(int) * (size_t)n0);
  memcpy(all + n0, s1, sizeof(int) * (size_t)n1);
  qsort(all, (size_t)nt, sizeof(int), cmp_int);
  qsort(train, (size_t)nt, sizeof(int), cmp_int);
  GR_CHECK(!memcmp(all, train, sizeof(int) * (size_t)nt));
}

static void test_label_modes_and_errors(void) {
  gr_image_folder_options o = opts(4);
  o.label_mode = "categorical";
  run r;
  if (start(&r, folder, &o, 0)) {
    GR_CHECK(gt_inferred(gr_output_at(r.out, 1), GR_F32, (gr_shape){2, {4, 4}}));
    gr_tensor t[3];
    gr_error err;
    GR_CHECK_OK(batch(&r, 0, t, &err), err);
    const float *img = gr_tensor_data(&t[0]), *lab = gr_tensor_data(&t[1]);
    for (int j = 0; t[1].buf && j < 4; j++) {
      int id = id_of(img + j * 30 * 3, 30);
      for (int k = 0; k < 4; k++)
        GR_CHECK(id >= 0 && lab[j * 4 + k] == (k == label_of[id] ? 1.0f : 0.0f));
    }
    if (t[1].buf) release3(t);
    int n;
    char **names = gr_image_folder_class_names(gr_output_at(r.out, 1), &n);
    GR_CHECK(n == 4 && names && !strcmp(names[0], "birds") && !strcmp(names[3], "empty") &&
             !names[4]);
    free(names);
    stop(&r);
  }
  /* binary: two classes, f32 [b, 1] */
  char two[1024];
  snprintf(two, sizeof two, "%s/two", root);
  make_class(two, "no", 0, 3, false);
  make_class(two, "yes", 3, 3, false);
  o.label_mode = "binary";
  o.batch_size = 6;
  o.shuffle = false;
  if (start(&r, two, &o, 0)) {
    GR_CHECK(gt_inferred(gr_output_at(r.out, 1), GR_F32, (gr_shape){2, {6, 1}}));
    gr_tensor t[3];
    gr_error err;
    GR_CHECK_OK(batch(&r, 0, t, &err), err);
    for (int j = 0; t[1].buf && j < 6; j++)
      GR_CHECK(((const float *)gr_tensor_data(&t[1]))[j] == (j < 3 ? 0.0f : 1.0f));
    if (t[1].buf) release3(t);
    stop(&r);
  }
  /* build errors */
  struct {
    const char *dir, *label_mode, *subset;
    double split;
    int64_t batch;
    const char *want;
  } bad[] = {
      {NULL, "binary", NULL, 0, 4, "label_mode \"binary\" needs exactly 2 classes"},
      {NULL, "int", NULL, 0, 24, "the folder of"},
      {NULL, "int", "validation", 0.2, 5, "the validation subset of"},
      {NULL, "int", NULL, 0.2, 4, "a validation_split needs subset"},
      {NULL, "sparse", NULL, 0, 4, "label_mode \"sparse\""},
      {"/nonexistent/folder", "int", NULL, 0, 4, "/nonexistent/folder: no such folder"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gr_graph *g = gr_graph_new();
    gr_image_folder_options b = opts(bad[i].batch);
    b.label_mode = bad[i].label_mode, b.subset = bad[i].subset, b.validation_split = bad[i].split;
    gr_output out = gr_image_folder(g, gr_const_i64(g, 0), bad[i].dir ? bad[i].dir : folder, &b);
    GR_CHECK_MSG(!out.node && gr_graph_error(g) && strstr(gr_graph_error(g)->msg, bad[i].want),
                 "case %zu: %s", i, gr_graph_error(g) ? gr_graph_error(g)->msg : "built");
    gr_graph_free(g);
  }
}

/* Captures what the process writes to stderr while it runs `fn`. */
static char *captured_stderr(void (*fn)(void *), void *arg) {
  fflush(stderr);
  char path[300];
  snprintf(path, sizeof path, "%s/stderr.txt", root);
  int saved = dup(2);
  FILE *f = fopen(path, "w+");
  dup2(fileno(f), 2);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  char *text = calloc((size_t)n + 1, 1);
  fseek(f, 0, SEEK_SET);
  if (fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = '\0';
  fclose(f);
  return text;
}

static const char *damaged;

static void make_damaged(void) {
  damaged = strdup(at(root, "damaged"));
  mkdirs(at(damaged, "a")), mkdirs(at(damaged, "b"));
  num_images = 0;
  for (int i = 0; i < 12; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s/g%02d.%s", i % 2 ? "b" : "a", i, i % 3 ? "png" : "jpg");
    make_image(at(damaged, name), i, i % 3 == 0);
    label_of[i] = i % 2;
  }
  num_images = 12;
  /* a PNG cut in half, text named .png, an empty .jpg, a JPEG cut short, a
   * PNG header of 30000 x 30000 pixels */
  make_image(at(damaged, "a/cut.png"), 100, false);
  char cmd[1400];
  snprintf(
      cmd, sizeof cmd,
      "f='%s'; s=$(stat -c %%s \"$f\"); head -c $((s / 2)) \"$f\" > \"$f.t\" && mv \"$f.t\" \"$f\"",
      at(damaged, "a/cut.png"));
  sh(cmd);
  write_file(at(damaged, "b/text.png"), "this is not a PNG\n");
  write_file(at(damaged, "a/empty.jpg"), "");
  make_image(at(damaged, "b/cut.jpg"), 101, true);
  snprintf(cmd, sizeof cmd,
           "f='%s'; s=$(stat -c %%s \"$f\"); head -c $((s - 40)) \"$f\" > \"$f.t\" && mv \"$f.t\" "
           "\"$f\"",
           at(damaged, "b/cut.jpg"));
  sh(cmd);
  /* 30000 x 30000 RGB: signature, IHDR (CRC of "IHDR" + fields), an IDAT of 4 bytes */
  snprintf(
      cmd, sizeof cmd,
      "printf '\\211PNG\\r\\n\\032\\n\\000\\000\\000\\rIHDR\\000\\000\\165\\060\\000\\000\\165\\060"
      "\\010\\002\\000\\000\\000' > '%s'",
      at(damaged, "b/huge.png"));
  sh(cmd);
  /* the IHDR's CRC, computed with zlib, then a small IDAT */
  FILE *f = fopen(at(damaged, "b/huge.png"), "ab");
  unsigned char ihdr[17] = {'I', 'H', 'D', 'R', 0, 0, 0x75, 0x30, 0, 0, 0x75, 0x30, 8, 2, 0, 0, 0};
  unsigned long c = crc32(0, ihdr, 17);
  unsigned char tail[] = {(unsigned char)(c >> 24),
                          (unsigned char)(c >> 16),
                          (unsigned char)(c >> 8),
                          (unsigned char)c,
                          0,
                          0,
                          0,
                          4,
                          'I',
                          'D',
                          'A',
                          'T',
                          1,
                          2,
                          3,
                          4,
                          0,
                          0,
                          0,
                          0};
  fwrite(tail, 1, sizeof tail, f);
  fclose(f);
}

typedef struct epoch_arg {
  bool shuffle;
  int ids[64];
  int64_t skipped;
} epoch_arg;

/* Two epochs of batch 4 of the damaged folder (17 files, 5 bad: 4 batches
 * of 4 an epoch, 1 file dropped). */
static void damaged_epochs(void *p) {
  epoch_arg *e = p;
  gr_image_folder_options o = opts(4);
  o.seed = 2;
  o.shuffle = e->shuffle;
  run r;
  if (!start(&r, damaged, &o, 0)) return;
  GR_CHECK_EQ_INT(gr_image_folder_num_images(r.out), 17);
  for (int k = 0; k < 8; k++) batch_ids(&r, k, e->ids + 4 * k, 4);
  gr_tensor t[3];
  gr_error err;
  if (batch(&r, 8, t, &err) == GR_OK) {
    e->skipped = *(const int64_t *)gr_tensor_data(&t[2]);
    release3(t);
  }
  stop(&r);
}

static void test_damaged_files_skipped(void) {
  make_damaged();
  epoch_arg a, b;
  memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
  a.shuffle = b.shuffle = true;
  char *log = captured_stderr(damaged_epochs, &a);
  GR_CHECK_EQ_INT(a.skipped, 5);
  const char *names[] = {"a/cut.png", "b/text.png", "a/empty.jpg", "b/cut.jpg", "b/huge.png"};
  for (int i = 0; i < 5; i++) {
    char want[600];
    snprintf(want, sizeof want, "skipped %s/%s: ", damaged, names[i]);
    GR_CHECK_STR_CONTAINS(log, want);
    /* each named once, however often its place comes up */
    const char *first = strstr(log, want);
    GR_CHECK(first && !strstr(first + 1, want));
  }
  GR_CHECK_STR_CONTAINS(log, "30000 x 30000 pixels is more than the limit");
  GR_CHECK_STR_CONTAINS(log, "5 files skipped so far");
  /* every place holds a good file with its label (batch_ids checked the
   * labels), never one file twice in a batch */
  for (int k = 0; k < 8; k++)
    for (int j = 0; j < 4; j++) {
      GR_CHECK(a.ids[4 * k + j] >= 0 && a.ids[4 * k + j] < 12);
      for (int i = 0; i < j; i++) GR_CHECK(a.ids[4 * k + i] != a.ids[4 * k + j]);
    }
  /* the same batches in a fresh run: the replacement is deterministic */
  free(captured_stderr(damaged_epochs, &b));
  GR_CHECK(!memcmp(a.ids, b.ids, sizeof a.ids));
  free(log);
  /* in the listing's order the rule can be followed by hand: a bad file's
   * place goes to the next readable file after its batch (wrapping around):
   * a/ cut.png empty.jpg g00 g02 g04 g06 g08 g10, b/ cut.jpg g01 g03 g05 g07
   * g09 g11 huge.png text.png (dropped: 17 = 4 x 4 + 1) */
  epoch_arg c;
  memset(&c, 0, sizeof c);
  free(captured_stderr(damaged_epochs, &c));
  static const int want[16] = {4, 6, 0, 2, 4, 6, 8, 10, 7, 1, 3, 5, 7, 9, 11, 0};
  for (int i = 0; i < 16; i++)
    GR_CHECK_MSG(c.ids[i] == want[i], "place %d: file %d, want %d", i, c.ids[i], want[i]);
  GR_CHECK(!memcmp(c.ids, c.ids + 16, sizeof want)); /* the next epoch: the same order */
  /* a folder of nothing readable: an error, not a hang or a crash */
  char worse[1024];
  snprintf(worse, sizeof worse, "%s/worse", root);
  make_class(worse, "x", 0, 5, true);
  fflush(stderr);
  gr_image_folder_options o = opts(2);
  run r;
  if (start(&r, worse, &o, 0)) {
    gr_tensor t[3];
    gr_error err;
    int saved = dup(2), null = open("/dev/null", 1);
    dup2(null, 2);
    gr_status st = batch(&r, 0, t, &err);
    dup2(saved, 2), close(saved), close(null);
    GR_CHECK(st == GR_ERR_DATA_LOSS);
    GR_CHECK_STR_CONTAINS(err.msg, "too few readable images for a batch of 2");
    if (st == GR_OK) release3(t);
    stop(&r);
  }
}

/* With prefetch, the batches after the one asked for are decoded without
 * being asked: a damaged file in batch 1 is reported after asking for
 * batch 0 only. */
static void prefetch_one(void *p) {
  gr_image_folder_options o = opts(2);
  o.shuffle = false, o.threads = 1, o.prefetch = 2;
  run r;
  if (!start(&r, p, &o, 0)) return;
  gr_tensor t[3];
  gr_error err;
  GR_CHECK_OK(batch(&r, 0, t, &err), err);
  if (t[0].buf) release3(t);
  /* wait (bounded, generous) for the pool to reach batch 1 */
  char path[300];
  snprintf(path, sizeof path, "%s/stderr.txt", root);
  for (int i = 0; i < 2000; i++) {
    fflush(stderr);
    FILE *f = fopen(path, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    if (strstr(buf, "c_bad.png")) break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  stop(&r);
}

static void test_decodes_ahead(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/ahead", root);
  mkdirs(at(dir, "k"));
  make_image(at(dir, "k/a.png"), 0, false);
  make_image(at(dir, "k/b.png"), 1, false);
  write_file(at(dir, "k/c_bad.png"), "not a png"); /* position 2: batch 1 */
  make_image(at(dir, "k/d.png"), 3, false);
  make_image(at(dir, "k/e.png"), 4, false);
  make_image(at(dir, "k/f.png"), 5, false);
  char *log = captured_stderr(prefetch_one, dir);
  GR_CHECK_STR_CONTAINS(log, "k/c_bad.png");
  free(log);
}

static void test_folder_changed(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/changing", root);
  make_class(dir, "k", 0, 4, false);
  gr_image_folder_options o = opts(2);
  run r;
  if (!start(&r, dir, &o, 0)) return;
  make_image(at(dir, "k/new.png"), 9, false);
  gr_tensor t[3];
  gr_error err;
  GR_CHECK(batch(&r, 0, t, &err) == GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "changed since the graph was built: 4 files in 1 classes then, 5");
  stop(&r);
}

/* A serialized graph keeps the listing: it builds, shapes and class names
 * included, where the folder does not exist. */
static void test_serialized_keeps_classes(void) {
  gr_graph *g = gr_graph_new();
  gr_image_folder_options o = opts(4);
  o.label_mode = "categorical";
  gr_output out = gr_image_folder(g, gr_const_i64(g, 0), folder, &o);
  void *data;
  size_t size;
  gr_error err;
  GR_CHECK_OK(gr_wire_encode_graph(g, NULL, &data, &size, &err), err);
  gr_graph *copy = gr_graph_new();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "mv '%s' '%s.away'", folder, folder);
  sh(cmd);
  GR_CHECK_OK(gr_wire_decode_graph(data, size, copy, NULL, &err), err);
  const gr_node *n = gr_graph_find_node(copy, out.node->name);
  GR_CHECK(n != NULL);
  if (n) {
    GR_CHECK(!strcmp(gr_node_attr_string(n, "class_names", ""), "birds\ncats\ndogs\nempty"));
    GR_CHECK(gr_shape_equal(&n->out_shapes[1], &(gr_shape){2, {4, 4}}));
  }
  snprintf(cmd, sizeof cmd, "mv '%s.away' '%s'", folder, folder);
  sh(cmd);
  free(data);
  gr_graph_free(copy);
  gr_graph_free(g);
}

/* ---- the .gr call, training and checkpoints ---------------------------------------------- */

static const char *program = "images, labels = image_folder(\"animals\", size=[5, 6], batch=4, "
                             "seed=1, validation_split=0.25, subset=\"training\")\n"
                             "w = variable(zeros([3]))\n"
                             "loss = reduce_mean(square(reduce_mean(images, axes=[1, 2]) / 255 "
                             "- w)) + reduce_mean(cast(labels, f32)) * 0\n"
                             "train = minimize(loss, sgd(0.5))\n"
                             "k = num_classes(images)\n"
                             "n = num_images(images)\n"
                             "m = num_batches(images)\n"
                             "names = class_names(images)\n";

static bool load(gr_graph **g, gr_dsl_program **p) {
  *g = gr_graph_new();
  gr_error err;
  char name[300];
  snprintf(name, sizeof name, "%s/model.gr", root); /* "animals" is next to it */
  gr_status st = gr_dsl_load_string(name, program, *g, NULL, p, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  if (st != GR_OK) gr_graph_free(*g);
  return st == GR_OK;
}

/* Runs steps of train from a fresh session (or the checkpoint in ckpt when
 * restore), saves into ckpt when save; w after. */
static void train_steps(int steps, const char *ckpt, bool restore, bool save, float w[3]) {
  gr_graph *g;
  gr_dsl_program *p;
  if (!load(&g, &p)) return;
  gr_output train, wv;
  GR_CHECK(gr_dsl_lookup(p, "train", &train) && gr_dsl_lookup(p, "w", &wv));
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_ckpt *ck = NULL;
  if (ckpt) GR_CHECK_OK(gr_ckpt_open(ckpt, NULL, &ck, &err), err);
  int64_t step;
  if (restore && ck) GR_CHECK_OK(gr_ckpt_restore_latest(ck, s, g, &step, &err), err);
  for (int i = 0; i < steps; i++)
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
  if (save && ck) GR_CHECK_OK(gr_ckpt_save_session(ck, s, g, NULL, &err), err);
  gr_tensor t;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &wv, 1, &t, NULL, 0, &err), err);
  memcpy(w, gr_tensor_data(&t), sizeof(float) * 3);
  gr_tensor_release(&t);
  if (ck) gr_ckpt_close(ck);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

static void test_dsl_and_restore(void) {
  gr_graph *g;
  gr_dsl_program *p;
  if (!load(&g, &p)) return;
  gr_output k, n, m;
  GR_CHECK(gr_dsl_lookup(p, "k", &k) && gr_dsl_lookup(p, "n", &n) && gr_dsl_lookup(p, "m", &m));
  gr_tensor out[3];
  gr_error rerr;
  GR_CHECK_OK(gt_run_graph(g, (gr_output[]){k, n, m}, 3, out, &rerr), rerr);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[0], 0), 4);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[1], 0), num_images - (int)(0.25 * num_images));
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[2], 0), (num_images - (int)(0.25 * num_images)) / 4);
  for (int i = 0; i < 3; i++) gr_tensor_release(&out[i]);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  /* 9 steps straight = 4 steps, a checkpoint, a new process's 5 steps
   * (crossing an epoch boundary: 4 batches an epoch) */
  float straight[3], first[3], resumed[3];
  char ckpt[300];
  snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", root);
  train_steps(9, NULL, false, false, straight);
  train_steps(4, ckpt, false, true, first);
  train_steps(5, ckpt, true, false, resumed);
  GR_CHECK_MSG(!memcmp(straight, resumed, sizeof straight), "%g %g %g vs %g %g %g", straight[0],
               straight[1], straight[2], resumed[0], resumed[1], resumed[2]);
  GR_CHECK(memcmp(first, resumed, sizeof first) != 0);
  /* errors of the call point at the argument */
  struct {
    const char *text, *want;
  } bad[] = {
      {"a, b = image_folder(\"animals\", validation_split=0.2, subset=\"training\")",
       "needs a seed=..."},
      {"a, b = image_folder(\"animals\", subset=\"training\")", "subset needs a validation_split"},
      {"a, b = image_folder(\"animals\", sizes=[2, 2])", "unknown keyword argument 'sizes'"},
      {"a, b = image_folder(\"animals\", size=[2])", "size must be [height, width]"},
      {"a, b = image_folder(\"animals\", color_mode=\"cmyk\")", "color_mode \"cmyk\""},
      {"a, b = image_folder(\"animals\", labels=\"manual\")", "the only labels supported"},
      {"a, b = image_folder(\"nothing_here\")", "nothing_here: no such folder"},
      {"x = num_classes(const(1))", "num_classes takes the images or labels of an image_folder"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gr_graph *bg = gr_graph_new();
    gr_dsl_program *bp = NULL;
    gr_error err;
    char name[300];
    snprintf(name, sizeof name, "%s/bad.gr", root);
    GR_CHECK(gr_dsl_load_string(name, bad[i].text, bg, NULL, &bp, &err) != GR_OK);
    GR_CHECK_MSG(strstr(err.msg, bad[i].want) && strstr(err.msg, "bad.gr:1:"), "case %zu: %s", i,
                 err.msg);
    gr_dsl_program_free(bp);
    gr_graph_free(bg);
  }
  /* subset="both": four tensors, two nodes */
  gr_graph *bg = gr_graph_new();
  gr_dsl_program *bp = NULL;
  gr_error err;
  char name[300];
  snprintf(name, sizeof name, "%s/both.gr", root);
  GR_CHECK_OK(
      gr_dsl_load_string(name,
                         "a, b, c, d = image_folder(\"animals\", size=[4, 4], batch=2, "
                         "validation_split=0.3, subset=\"both\", seed=8, validation_step=5)",
                         bg, NULL, &bp, &err),
      err);
  gr_output a, c;
  if (bp && gr_dsl_lookup(bp, "a", &a) && gr_dsl_lookup(bp, "c", &c)) {
    GR_CHECK(a.node != c.node);
    GR_CHECK(!strcmp(gr_node_attr_string(a.node, "subset", ""), "training"));
    GR_CHECK(!strcmp(gr_node_attr_string(c.node, "subset", ""), "validation"));
    GR_CHECK_EQ_INT(gr_image_folder_num_images(c), (int)(0.3 * num_images));
  }
  gr_dsl_program_free(bp);
  gr_graph_free(bg);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/gr_test_image_folder_XXXXXX");
  if (!mkdtemp(root)) return perror("mkdtemp"), 1;
  make_folder();
  GR_RUN(test_listing_order);
  GR_RUN(test_epochs_and_labels);
  GR_RUN(test_deterministic);
  GR_RUN(test_concurrent_steps);
  GR_RUN(test_validation_split);
  GR_RUN(test_label_modes_and_errors);
  GR_RUN(test_folder_changed);
  GR_RUN(test_serialized_keeps_classes);
  GR_RUN(test_dsl_and_restore);
  GR_RUN(test_decodes_ahead);
  GR_RUN(test_damaged_files_skipped); /* last: it changes label_of */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  sh(cmd);
  return gr_test_finish();
}
