/* Per-replica input shards (replicas(..., shard_input=true),
 * gr_replicate_options.shard_inputs; ops/replica_input.c) in one process
 * whose devices carry the workers' names: each replica's batch and the file
 * reads it needs sit on the replica's device, the step's transfers shrink
 * (no device sends another's rows), and training gives the same loss, step
 * after step over several shuffled epochs, bit for bit, as slicing the
 * global batch; the batch op's slices are the split of its batch, and
 * image_folder's (flips included) its batch; errors name what cannot be
 * sharded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

static const char *const names[3] = {"/job:worker/replica:0/task:0/device:CPU:0",
                                     "/job:worker/replica:0/task:1/device:CPU:0",
                                     "/job:worker/replica:0/task:2/device:CPU:0"};

static char tmp[] = "/tmp/gr_replica_input_XXXXXX";
static char x_path[64], y_path[64];

/* 60 rows of 4 features and 60 labels in 0..2, as .npy files. */
static void write_data(void) {
  gr_tensor x, y;
  gr_error err;
  gr_shape xs = gr_shape_make(2, (int64_t[]){60, 4}), ys = gr_shape_make(1, (int64_t[]){60});
  GR_CHECK_OK(gr_tensor_alloc(&x, GR_F32, &xs, &err), err);
  GR_CHECK_OK(gr_tensor_alloc(&y, GR_I32, &ys, &err), err);
  float *xv = gr_tensor_data(&x);
  int32_t *yv = gr_tensor_data(&y);
  for (int i = 0; i < 60; i++) {
    for (int j = 0; j < 4; j++) xv[i * 4 + j] = (float)((i * 7 + j * 13) % 11) / 11.0f - 0.4f;
    yv[i] = xv[i * 4] > xv[i * 4 + 1] ? 0 : xv[i * 4 + 1] > xv[i * 4 + 2] ? 1 : 2;
  }
  snprintf(x_path, sizeof x_path, "%s/x.npy", tmp);
  snprintf(y_path, sizeof y_path, "%s/y.npy", tmp);
  GR_CHECK_OK(gr_data_write_npy(&x, x_path, &err), err);
  GR_CHECK_OK(gr_data_write_npy(&y, y_path, &err), err);
  gr_tensor_release(&x), gr_tensor_release(&y);
}

/* A linear classifier trained by 3 replicas with mirrored variables on
 * batches of 12 of the 60 rows (5 steps an epoch). */
static void program(char *buf, size_t cap, bool shard) {
  snprintf(buf, cap,
           "x_all = read_npy(\"%s\")\n"
           "y_all = cast(read_npy(\"%s\"), i64)\n"
           "device \"/job:worker/task:0\" {\n"
           "  w = variable(glorot_uniform([4, 3], seed=0)); b = variable(zeros([3]))\n"
           "}\n"
           "step = global_step()\n"
           "xs, ys = batch(step, x_all, y_all, batch_size=12)\n"
           "loss = replicas(3, xs, ys, all_reduce=true, shard_input=%s) {\n"
           "  reduce_mean(sparse_softmax_cross_entropy(xs @ w + b, ys))\n"
           "}\n"
           "train = minimize(loss, sgd(0.5))\n",
           x_path, y_path, shard ? "true" : "false");
}

typedef struct run {
  float loss[12];
  gr_tensor w;
  int64_t bytes; /* sent between devices by the last step */
} run;

static bool train(bool shard, run *r) {
  char src[2048];
  program(src, sizeof src, shard);
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  bool ok = gr_dsl_load_string("t.gr", src, g, NULL, &p, &err) == GR_OK;
  GR_CHECK_MSG(ok, "%s", err.msg);
  gr_output loss, trn, w;
  ok = ok && gr_dsl_lookup(p, "loss", &loss) && gr_dsl_lookup(p, "train", &trn) &&
       gr_dsl_lookup(p, "w", &w);
  gr_session_options o = {.num_devices = 3, .device_names = names, .inter_op_threads = 2};
  gr_session *s = ok ? gr_session_new(g, &o, &err) : NULL;
  ok = s && gr_session_init_variables(s, &err) == GR_OK;
  for (int i = 0; i < 12 && ok; i++) {
    gr_tensor t;
    ok = gr_session_run(s, NULL, 0, &loss, 1, &t, &trn, 1, &err) == GR_OK;
    if (ok) r->loss[i] = *(const float *)gr_tensor_data(&t), gr_tensor_release(&t);
    r->bytes = gr_session_last_transfers(s).bytes;
  }
  ok = ok && gr_session_run(s, NULL, 0, &w, 1, &r->w, NULL, 0, &err) == GR_OK;
  GR_CHECK_MSG(ok, "%s", err.msg);
  if (ok && shard) { /* each replica's batch and file reads on its own device */
    for (int k = 0; k < 3; k++) {
      char name[64], want[32];
      snprintf(want, sizeof want, "/job:worker/task:%d", k);
      const char *nodes[] = {"batch", "x_all", "read_npy"};
      for (int j = 0; j < 3; j++) {
        snprintf(name, sizeof name, "replica_%d/input/%s", k, nodes[j]);
        const gr_node *n = gr_graph_find_node(g, name);
        GR_CHECK_MSG(n != NULL, "no node %s", name);
        if (n) GR_CHECK_STR_CONTAINS(n->requested_device, want);
      }
      snprintf(name, sizeof name, "replica_%d/input/batch", k);
      const gr_node *bn = gr_graph_find_node(g, name);
      if (bn) {
        GR_CHECK_EQ_INT(gr_node_attr_int(bn, "num_slices", 0), 3);
        GR_CHECK_EQ_INT(gr_node_attr_int(bn, "slice_index", -1), k);
        GR_CHECK_EQ_INT(bn->out_shapes[0].dims[0], 4);
        /* its step: global_step on replica 0, else the replica's own copy,
         * which counted every step as global_step did */
        snprintf(name, sizeof name, k ? "global_step/replica_%d" : "global_step", k);
        GR_CHECK_MSG(!strcmp(bn->inputs[0].node->name, name), "%s reads %s", bn->name,
                     bn->inputs[0].node->name);
        GR_CHECK(!strcmp(gr_node_attr_string(bn->inputs[0].node, "mirror_of", ""),
                         k ? "global_step" : ""));
        if (k) GR_CHECK_STR_CONTAINS(bn->inputs[0].node->requested_device, want);
        gr_tensor st;
        gr_output sv = {bn->inputs[0].node, 0};
        if (gr_session_run(s, NULL, 0, &sv, 1, &st, NULL, 0, &err) == GR_OK) {
          GR_CHECK_EQ_INT(*(const int64_t *)gr_tensor_data(&st), 12);
          gr_tensor_release(&st);
        } else {
          GR_CHECK_MSG(false, "%s", err.msg);
        }
      }
    }
  }
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return ok;
}

static void test_same_bits_fewer_bytes(void) {
  run whole = {0}, sharded = {0};
  if (!train(false, &whole) || !train(true, &sharded)) return;
  for (int i = 0; i < 12; i++)
    GR_CHECK_MSG(memcmp(&whole.loss[i], &sharded.loss[i], sizeof(float)) == 0,
                 "step %d: loss %.9g sliced, %.9g sharded", i, whole.loss[i], sharded.loss[i]);
  GR_CHECK(whole.loss[11] < whole.loss[0]); /* it trains */
  GR_CHECK(gt_bit_equal(&sharded.w, &whole.w));
  /* sliced, 2 of the 3 slices (4 rows of 4 f32 and an i64 each) cross
   * devices; sharded, nothing of the input: each replica has its step */
  printf("bytes sent by a step: %lld sliced, %lld sharded\n", (long long)whole.bytes,
         (long long)sharded.bytes);
  GR_CHECK_MSG(whole.bytes - sharded.bytes >= 2 * 4 * (16 + 8), "%lld vs %lld",
               (long long)whole.bytes, (long long)sharded.bytes);
  gr_tensor_release(&whole.w), gr_tensor_release(&sharded.w);
}

/* The batch op's slices, side by side, are its batch: every step, across
 * epochs, with shards too. */
static void test_slices_are_the_batch(void) {
  char src[2048];
  snprintf(src, sizeof src,
           "x = read_npy(\"%s\")\n"
           "s = placeholder(i64, [])\n"
           "whole = batch(s, x, batch_size=6, seed=3, num_shards=2, shard_index=1)\n"
           "a = batch(s, x, batch_size=6, seed=3, num_shards=2, shard_index=1, num_slices=3)\n"
           "b = batch(s, x, batch_size=6, seed=3, num_shards=2, shard_index=1, num_slices=3, "
           "slice_index=1)\n"
           "c = batch(s, x, batch_size=6, seed=3, num_shards=2, shard_index=1, num_slices=3, "
           "slice_index=2)\n"
           "parts = concat([a, b, c], axis=0)\n",
           x_path);
  for (int64_t step = 0; step < 12; step++) {
    gr_tensor sv, t[2];
    gr_error err;
    gr_shape scalar = gr_shape_make(0, NULL);
    GR_CHECK_OK(gr_tensor_alloc(&sv, GR_I64, &scalar, &err), err);
    *(int64_t *)gr_tensor_data(&sv) = step;
    bool ok = gt_dsl_run_fed(src, "whole,parts", 1, "s", &sv, NULL, NULL, t, NULL);
    GR_CHECK_MSG(ok, "step %lld", (long long)step);
    if (ok) {
      GR_CHECK_MSG(gt_bit_equal(&t[1], &t[0]), "step %lld", (long long)step);
      gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
    }
    gr_tensor_release(&sv);
  }
}

/* ---- image_folder ---------------------------------------------------------------------------- */

/* tmp/images/{a,b}/N.png: 12 gray 4 x 4 pictures each, every pixel its own
 * value (left and right differ: a flip shows). */
static void make_folder(char *dir, size_t cap) {
  snprintf(dir, cap, "%s/images", tmp);
  mkdir(dir, 0755);
  for (int c = 0; c < 2; c++) {
    char sub[256];
    snprintf(sub, sizeof sub, "%s/%c", dir, "ab"[c]);
    mkdir(sub, 0755);
    for (int i = 0; i < 12; i++) {
      gr_image img = {.height = 4, .width = 4, .channels = 1};
      uint8_t px[16];
      for (int p = 0; p < 16; p++) px[p] = (uint8_t)(c * 120 + i * 9 + p);
      img.pixels = px;
      char path[300];
      snprintf(path, sizeof path, "%s/%d.png", sub, i);
      gr_error err;
      GR_CHECK_OK(gr_image_write_png(path, &img, &err), err);
    }
  }
}

static gr_status pass_on(gr_graph *g, void *arg, int replica, const gr_output *in, gr_output *out) {
  (void)arg, (void)replica;
  out[0] = gr_identity(g, in[0]);
  out[1] = gr_cast(g, in[1], GR_F32);
  return GR_OK;
}

/* Three replicas' image_folder slices (shard_input), side by side, are the
 * whole batch of the folder, flips included, every step over several
 * epochs; each slice is read on its replica's device. */
static void test_image_folder_slices(void) {
  char dir[200];
  make_folder(dir, sizeof dir);
  gr_graph *g = gr_graph_new();
  gr_output step = gr_placeholder(g, "step", GR_I64, gr_shape_scalar());
  gr_image_folder_options o;
  gr_image_folder_options_init(&o);
  o.height = o.width = 4, o.batch_size = 6, o.color_mode = "grayscale", o.seed = 5;
  o.random_flip = "horizontal";
  gr_output b = gr_image_folder(g, step, dir, &o);
  gr_output per[6], mean[2];
  gr_replicate_options ro = {
      .num_replicas = 3, .devices = names, .shard_inputs = true, .per_replica = per};
  GR_CHECK_OK(gr_replicate(g, &ro, (gr_output[]){gr_output_at(b, 0), gr_output_at(b, 1)}, 2,
                           pass_on, NULL, 2, mean),
              *gr_graph_error(g));
  gr_output whole[2] = {gr_output_at(b, 0), gr_cast(g, gr_output_at(b, 1), GR_F32)};
  gr_output parts[2] = {gr_concat(g, (gr_output[]){per[0], per[2], per[4]}, 3, 0),
                        gr_concat(g, (gr_output[]){per[1], per[3], per[5]}, 3, 0)};
  const gr_node *r2 = gr_graph_find_node(g, "replica_2/input/image_folder");
  GR_CHECK(r2 != NULL);
  if (r2) GR_CHECK_STR_CONTAINS(r2->requested_device, "/job:worker/replica:0/task:2/");
  gr_error err;
  gr_session_options so = {.num_devices = 3, .device_names = names, .inter_op_threads = 2};
  gr_session *s = gr_graph_error(g) ? NULL : gr_session_new(g, &so, &err);
  GR_CHECK(s != NULL);
  for (int64_t k = 0; s && k < 9; k++) { /* 4 batches an epoch */
    gr_tensor sv = gr_tensor_scalar_i64(k), got[4];
    gr_feed f = {step, &sv};
    bool ok = gr_session_run(s, &f, 1, (gr_output[]){whole[0], whole[1], parts[0], parts[1]}, 4,
                             got, NULL, 0, &err) == GR_OK;
    GR_CHECK_MSG(ok, "%s", err.msg);
    if (ok) {
      GR_CHECK_MSG(gt_bit_equal(&got[2], &got[0]), "step %lld: images", (long long)k);
      GR_CHECK_MSG(gt_bit_equal(&got[3], &got[1]), "step %lld: labels", (long long)k);
      for (int i = 0; i < 4; i++) gr_tensor_release(&got[i]);
    }
    gr_tensor_release(&sv);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_errors(void) {
  char src[2048];
  struct {
    const char *body, *want;
  } cases[] = {
      {"x = zeros([6, 2])\nl = replicas(2, x, shard_input=true) { reduce_sum(x) }\n",
       "t.gr:2:5: error: replicate: shard_input: input 'x' is not made by batch(...)"},
      {"v = variable(zeros([6, 2]))\nx = batch(const(0, i64), v, batch_size=2)\n"
       "l = replicas(2, x, shard_input=true) { reduce_sum(x) }\n",
       "t.gr:3:5: error: replicate: shard_input: batch 'x' reads 'v' (variable)"},
      {"x = batch(const(0, i64), zeros([6, 2]), batch_size=2)\n"
       "l = micro_batches(2, x, shard_input=true) { reduce_sum(x) }\n",
       "unknown keyword argument 'shard_input' for micro_batches"},
      {"x = batch(const(0, i64), zeros([6, 2]), batch_size=2)\n"
       "l = replicas(2, x, shard_input=1) { reduce_sum(x) }\n",
       "shard_input"},
      {"x = batch(const(0, i64), zeros([9, 2]), batch_size=3, num_slices=2)\n",
       "slice_index 0 of num_slices 2: needs 0 <= slice_index < num_slices and num_slices "
       "dividing batch_size 3"},
      {"x = batch(const(0, i64), zeros([9, 2]), batch_size=4, num_slices=2, slice_index=2)\n",
       "slice_index 2 of num_slices 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(src, sizeof src, "%s", cases[i].body);
    gr_error err;
    GR_CHECK_MSG(gt_dsl_error(src, &err), "case %zu loaded", i);
    GR_CHECK_MSG(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg,
                 cases[i].want);
  }
}

/* The graph of src (NULL when it fails to load: *err says why). */
static gr_graph *load(const char *src, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  if (gr_dsl_load_string("t.gr", src, g, NULL, &p, err) != GR_OK) {
    gr_graph_free(g);
    return NULL;
  }
  gr_dsl_program_free(p);
  return g;
}

/* Copies of global_step are made only where every writer of it advances
 * them: not when something wrote global_step before the replicas, not
 * under a name another replicas() call took on other devices; and an
 * increment of global_step alone, with copies, is refused. */
static void test_step_copies_guarded(void) {
  static const char *const head = "w = variable(zeros([2, 1]))\n"
                                  "step = global_step()\n"
                                  "x = batch(step, zeros([6, 2]), batch_size=2)\n";
  static const char *const reps =
      "l = replicas(2, x, all_reduce=true, shard_input=true) { reduce_sum(x @ w) }\n"
      "t = minimize(l, sgd(0.1))\n";
  char src[2048];
  gr_error err;
  snprintf(src, sizeof src, "%s%s", head, reps);
  gr_graph *g = load(src, &err);
  GR_CHECK_MSG(g != NULL, "%s", err.msg);
  const gr_node *c = g ? gr_graph_find_node(g, "global_step/replica_1") : NULL;
  GR_CHECK_MSG(c != NULL, "no copy of global_step");
  if (c) GR_CHECK_STR_CONTAINS(c->requested_device, "/job:worker/task:1");
  gr_graph_free(g);
  /* a minimize before the replicas advances global_step: no copies */
  snprintf(src, sizeof src, "%spre = minimize(reduce_sum(w), sgd(0.1))\n%s", head, reps);
  g = load(src, &err);
  GR_CHECK_MSG(g != NULL, "%s", err.msg);
  GR_CHECK(!g || !gr_graph_find_node(g, "global_step/replica_1"));
  gr_graph_free(g);
  /* a second replicas() on other devices: replica 1's copy is elsewhere */
  snprintf(
      src, sizeof src,
      "%s%sv = variable(zeros([2, 1]))\n"
      "l2 = replicas(2, x, all_reduce=true, shard_input=true, devices=[\"/job:worker/task:2\", "
      "\"/job:worker/task:3\"]) { reduce_sum(x @ v) }\n",
      head, reps);
  g = load(src, &err);
  GR_CHECK_MSG(g != NULL, "%s", err.msg);
  gr_graph_free(g);
  /* an increment of global_step alone */
  snprintf(src, sizeof src, "%s%sinc = assign_add(step, const(1, i64))\n", head, reps);
  GR_CHECK(gt_dsl_error(src, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "global_step has copies on the replicas' devices");
}

int main(void) {
  unsetenv("GRAPHRUN_CLUSTER");
  if (!mkdtemp(tmp)) return 1;
  write_data();
  GR_RUN(test_same_bits_fewer_bytes);
  GR_RUN(test_slices_are_the_batch);
  GR_RUN(test_image_folder_slices);
  GR_RUN(test_errors);
  GR_RUN(test_step_copies_guarded);
  gt_remove_tree(tmp);
  return gr_test_finish();
}
