/* The layer built-ins of the DSL (frontend/dsl_keras.c, docs/dsl.md#layers):
 * the names of their variables (bindings, name=, scopes, def instances,
 * numbering), the reuse rule (a def called at the top level is one model:
 * its second call applies the same variables; a path reached twice in one
 * instance, a reused layer of another configuration or input size are
 * errors naming both places), the op forms of conv2d, batch_norm and
 * random_contrast, augmentation off in inference, and layers inside
 * ps_variables and replicas blocks run in one process with
 * --soft-placement (one set of variables on the ps; the same bits as
 * without the blocks where the docs promise it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64], out[1 << 17];

/* Loads src; NULL (message printed) on failure. */
static gr_graph *load(const char *src, gr_dsl_program **p) {
  gr_graph *g = gr_graph_new();
  gr_error err;
  if (gr_dsl_load_string("t.gr", src, g, NULL, p, &err) != GR_OK) {
    fprintf(stderr, "load failed: %s\n", err.msg);
    gr_graph_free(g);
    return NULL;
  }
  return g;
}

/* The names of the variables of g, sorted, comma-joined into buf
 * (optimizer slots, the global step and mirrored copies left out). */
static const char *variables(const gr_graph *g, char *buf, size_t cap) {
  int n = gr_graph_num_nodes(g), k = 0;
  unsigned char *roles = malloc((size_t)n + 1);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  gr_variable_roles(g, 0, n, roles);
  for (int i = 0; i < n; i++)
    if (roles[i] == GR_VAR_TRAINABLE || roles[i] == GR_VAR_NON_TRAINABLE)
      names[k++] = gr_graph_node(g, i)->name;
  for (int i = 1; i < k; i++) /* insertion sort: few names */
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      const char *t = names[j];
      names[j] = names[j - 1], names[j - 1] = t;
    }
  size_t m = 0;
  buf[0] = '\0';
  for (int i = 0; i < k && m < cap; i++)
    m += (size_t)snprintf(buf + m, cap - m, "%s%s", i ? "," : "", names[i]);
  free(roles), free(names);
  return buf;
}

static void expect_variables(const char *src, const char *want) {
  gr_dsl_program *p = NULL;
  gr_graph *g = load(src, &p);
  char buf[2048];
  GR_CHECK(g != NULL);
  if (!g) return;
  GR_CHECK_MSG(strcmp(variables(g, buf, sizeof buf), want) == 0, "variables %s, want %s", buf,
               want);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* src fails to load with a message holding each of want[0..n). */
static void expect_error(const char *src, const char *const *want, int n) {
  gr_error err;
  GR_CHECK_MSG(gt_dsl_error(src, &err), "loaded: %s", src);
  for (int i = 0; i < n; i++) GR_CHECK_STR_CONTAINS(err.msg, want[i]);
}

static void test_names(void) {
  /* bindings name the layers; unbound ones are numbered per kind; name= */
  expect_variables("x = placeholder(f32, [?, 4])\n"
                   "h1 = dense(x, 8, activation=\"relu\")\n"
                   "h2 = relu(dense(h1, 8))\n"
                   "h3 = dense(h2, 8) + dense(h2, 8, use_bias=false)\n"
                   "out = dense(h3, 2, name=\"head\")\n",
                   "dense/bias,dense/kernel,dense_1/bias,dense_1/kernel,dense_2/kernel,h1/bias,"
                   "h1/kernel,head/bias,head/kernel");
  /* scopes join the path; a def called at the top level is named after the
   * def; inside it, calls by their binding, unbound ones numbered */
  expect_variables("x = placeholder(f32, [?, 8, 8, 3])\n"
                   "def block(x, f) {\n"
                   "  c = conv2d(x, f, 3, padding=\"same\", use_bias=false)\n"
                   "  return max_pool2d(relu(batch_norm(c)))\n"
                   "}\n"
                   "def model(x) {\n"
                   "  b1 = block(x, 4)\n"
                   "  return block(block(b1, 4), 8)\n"
                   "}\n"
                   "scope \"net\" { y = model(x) }\n",
                   "net/model/b1/batch_norm/beta,net/model/b1/batch_norm/gamma,"
                   "net/model/b1/batch_norm/moving_mean,net/model/b1/batch_norm/moving_variance,"
                   "net/model/b1/c/kernel,"
                   "net/model/block/batch_norm/beta,net/model/block/batch_norm/gamma,"
                   "net/model/block/batch_norm/moving_mean,"
                   "net/model/block/batch_norm/moving_variance,net/model/block/c/kernel,"
                   "net/model/block_1/batch_norm/beta,net/model/block_1/batch_norm/gamma,"
                   "net/model/block_1/batch_norm/moving_mean,"
                   "net/model/block_1/batch_norm/moving_variance,net/model/block_1/c/kernel");
}

/* A def called twice at the top level: one set of variables, the same
 * values for the same input (training=false and true differ only where a
 * layer does: dropout, batch norm, augmentation). */
static void test_model_called_twice(void) {
  const char *src = "x = placeholder(f32, [2, 6, 6, 1])\n"
                    "def model(x, training) {\n"
                    "  a = random_flip(x, training=training)\n"
                    "  c = conv2d(a, 3, [3, 2], strides=[1, 2], activation=\"tanh\")\n"
                    "  f = dense(flatten(c), 5)\n"
                    "  return dense(dropout(f, 0.5, training=training), 2)\n"
                    "}\n"
                    "logits = model(x, false)\n"
                    "again = model(x, false)\n"
                    "train_logits = model(x, true)\n";
  expect_variables(src, "model/c/bias,model/c/kernel,model/dense/bias,model/dense/kernel,"
                        "model/f/bias,model/f/kernel");
  gr_tensor xv = gt_random(&(gt_rng){5}, GR_F32, gr_shape_make(4, (int64_t[]){2, 6, 6, 1}), 0, 1);
  gr_tensor o[3];
  GR_CHECK(gt_dsl_run_fed(src, "logits,again,train_logits", 1, "x", &xv, NULL, NULL, o, NULL));
  GR_CHECK(gt_bit_equal(&o[0], &o[1]));
  for (int i = 0; i < 3; i++) gr_tensor_release(&o[i]);
  /* first called in a cond branch: the variables are made outside it, and
   * a call outside the cond applies them */
  const char *in_cond = "x = ones([3, 4])\n"
                        "p = placeholder(bool, [])\n"
                        "def model(x) { return dense(x, 2, activation=\"tanh\") }\n"
                        "y = cond(p) { model(x) } else { model(x * 2) }\n"
                        "direct = model(x)\n";
  gr_tensor pv = gt_make(GR_BOOL, gr_shape_make(0, NULL), (double[]){1});
  GR_CHECK(gt_dsl_run_fed(in_cond, "y,direct", 1, "p", &pv, NULL, NULL, o, NULL));
  GR_CHECK(gt_bit_equal(&o[0], &o[1]));
  gr_tensor_release(&o[0]), gr_tensor_release(&o[1]), gr_tensor_release(&pv);
  /* augmentation off in inference: the input itself */
  const char *aug = "x = placeholder(f32, [2, 6, 6, 1])\n"
                    "r = random_rotation(x, 0.2, training=false)\n"
                    "z = random_zoom(x, [0.1, 0.3], training=false)\n"
                    "k = random_contrast(x, 0.5, training=false)\n"
                    "t = random_rotation(x, [0.25, 0.25], fill_mode=\"constant\")\n";
  GR_CHECK(gt_dsl_run_fed(aug, "r,z,k", 1, "x", &xv, NULL, NULL, o, NULL));
  for (int i = 0; i < 3; i++) {
    GR_CHECK(gt_bit_equal(&o[i], &xv));
    gr_tensor_release(&o[i]);
  }
  GR_CHECK(gt_dsl_run_fed(aug, "t", 1, "x", &xv, NULL, NULL, o, NULL));
  GR_CHECK(memcmp(gr_tensor_data(&o[0]), gr_tensor_data(&xv), 2 * 6 * 6 * 4) != 0); /* turned */
  gr_tensor_release(&o[0]);
  gr_tensor_release(&xv);
}

static void test_reuse_errors(void) {
  /* a top-level wrapper def called on another width: the shapes, both places */
  const char *e1[] = {"t.gr:1:28: error: dense 'dr/dense': variable 'dr/dense/kernel' is f32 "
                      "[4, 8], made at t.gr:1:28, but this call needs f32 [8, 8]",
                      "t.gr:4:6: note: in this call of 'dr'"};
  expect_error("def dr(x, n) { return relu(dense(x, n)) }\n"
               "x = placeholder(f32, [?, 4])\n"
               "h1 = dr(x, 8)\n"
               "h2 = dr(h1, 8)\n",
               e1, 2);
  /* the same layer with another configuration */
  const char *e2[] = {"error: layer 'm/dense' is dense(units=5, activation=\"linear\", "
                      "use_bias=true) here but dense(units=3, activation=\"linear\", "
                      "use_bias=true) where it was made",
                      "note: made here"};
  expect_error("def m(x, n) { return dense(x, n) }\n"
               "x = placeholder(f32, [?, 4])\n"
               "a = m(x, 3)\n"
               "b = m(x, 5)\n",
               e2, 2);
  /* a path reached twice in one instance */
  const char *e3[] = {"t.gr:3:5: error: layer 'd' is made twice in this file",
                      "t.gr:2:5: note: the first"};
  expect_error("x = placeholder(f32, [?, 4])\n"
               "a = dense(x, 3, name=\"d\")\n"
               "b = dense(x, 3, name=\"d\")\n",
               e3, 2);
  const char *e4[] = {"t.gr:2:54: error: layer 'f/h' is made twice in this call",
                      "t.gr:2:23: note: the first"};
  expect_error(
      "def f(x) {\n"
      "  return cond(true) { dense(x, 2, name=\"h\") } else { dense(x, 2, name=\"h\") } }\n"
      "y = f(placeholder(f32, [?, 3]))\n",
      e4, 2);
  /* a model called at the top level and inside another def: two sets */
  const char *e5[] = {"t.gr:2:33: error: def 'model' makes layers both as a model called at the "
                      "top level ('model/dense') and as a part of another def's call "
                      "('loss_of/model/dense')",
                      "t.gr:2:33: note: the other", "t.gr:5:21: note: in this call of 'model'"};
  expect_error("x = placeholder(f32, [?, 4])\n"
               "def model(x, training) { return dense(x, 2) }\n"
               "logits = model(x, true)\n"
               "def loss_of(x) {\n"
               "  return reduce_sum(model(x, true))\n"
               "}\n"
               "loss = loss_of(x)\n",
               e5, 3);
  /* first made in a while loop's body: refused (a loop cannot make variables) */
  const char *e6[] = {"t.gr:2:23: error: layer 'model/dense' would be made inside a while loop's "
                      "body",
                      "t.gr:4:22: note: in this call of 'model'"};
  expect_error("x = ones([4, 3])\n"
               "def model(x) { return dense(x, 2) }\n"
               "i, s = while (i = const(0, i64), s = const(0.0, f32); i < 3) {\n"
               "  s = s + reduce_sum(model(x))\n"
               "  i = i + 1\n"
               "}\n",
               e6, 2);
  /* arguments */
  struct {
    const char *src, *want;
  } bad[] = {
      {"y = dense(x)", "dense: missing argument 'units'"},
      {"y = dense(x, 0)", "dense: units must be an integer >= 1"},
      {"y = dense(x, 4, activation=\"gelu\")", "activation must be \"linear\", \"relu\""},
      {"y = dense(x, 4, bias=true)",
       "unknown keyword argument 'bias' for dense (it takes x, units"},
      {"y = dense(x, 4, 5, 6, 7, 8, 9)", "too many arguments for dense: it takes 6"},
      {"y = dense(x, 4, units=5)", "dense: 'units' given twice"},
      {"y = dense(x, 4, name=\"/abs\")", "name must be a name without a leading '/'"},
      {"y = conv2d(i, 8, [3])", "kernel_size must be an integer >= 1 or a list of two"},
      {"y = conv2d(i, 8, 3, padding=\"full\")", "padding must be \"valid\" or \"same\""},
      {"y = conv2d(i, 8, 3, depth_multiplier=2)", "conv2d has no depth_multiplier"},
      {"y = conv2d(x, 8, 3)", "conv2d 'y': the input 'x' is [?, 4]; it takes rank 4"},
      {"y = batch_norm(i, momentum=\"a\")", "batch_norm: momentum must be a number"},
      {"y = batch_norm(i, training=x)", "training must be true or false, got a tensor"},
      {"y = random_rotation(i)", "random_rotation: missing argument 'factor'"},
      {"y = random_rotation(i, -0.1)", "factor must be a number >= 0 or [lower, upper]"},
      {"y = random_zoom(i, 0.2, fill_mode=\"mirror\")", "fill_mode must be \"reflect\""},
      {"y = random_contrast(i, 1.5)", "factor must be a number in [0, 1]"},
      {"y = max_pool2d(i, pool_size=0)", "pool_size must be an integer >= 1"},
      {"y = rescaling(i)", "rescaling: missing argument 'scale'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char src[512];
    snprintf(src, sizeof src,
             "x = placeholder(f32, [?, 4])\ni = placeholder(f32, [?, 8, 8, 3])\n%s\n", bad[i].src);
    const char *want[] = {bad[i].want, "t.gr:3:"};
    expect_error(src, want, 2);
  }
}

/* conv2d(x, w), batch_norm(x, gamma, ...) and random_contrast(x, lower=,
 * upper=) are still the ops: no variables made, the same values. */
static void test_op_forms(void) {
  const char *src = "x = placeholder(f32, [1, 4, 4, 2])\n"
                    "w = const(0.5, f32) * ones([3, 3, 2, 1])\n"
                    "a = conv2d(x, w, padding=\"SAME\")\n"
                    "b = batch_norm(x, ones([2]), zeros([2]), zeros([2]), ones([2]), "
                    "training=false)\n"
                    "c = random_contrast(x, lower=1, upper=1)\n"
                    "d = random_contrast(x, [1, 1])\n";
  expect_variables(src, "");
  gr_tensor xv = gt_random(&(gt_rng){9}, GR_F32, gr_shape_make(4, (int64_t[]){1, 4, 4, 2}), 0, 1);
  gr_tensor o[4];
  GR_CHECK(gt_dsl_run_fed(src, "a,b,c,d", 1, "x", &xv, NULL, NULL, o, NULL));
  double s = 0; /* the centre of a SAME 3x3 conv of halves: half the 3x3x2 window's sum */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int c = 0; c < 2; c++) s += gr_tensor_get_f64(&xv, (i * 4 + j) * 2 + c);
  GR_CHECK_NEAR(gr_tensor_get_f64(&o[0], 1 * 4 + 1), 0.5 * s, 1e-5);
  GR_CHECK_NEAR(gr_tensor_get_f64(&o[1], 3), gr_tensor_get_f64(&xv, 3) / sqrt(1 + 1e-3), 1e-6);
  for (int i = 2; i < 4; i++) GR_CHECK(gt_near(&o[i], &xv, 1e-6, 1e-6));
  for (int i = 0; i < 4; i++) gr_tensor_release(&o[i]);
  gr_tensor_release(&xv);
}

/* ---- blocks: ps_variables, replicas, device, micro_batches ------------------------------ */

/* A small CNN with batch norm (no random layers), trained with Adam; body
 * is what the training statement's right side becomes. */
static void write_model(const char *name, const char *before, const char *loss, const char *after) {
  char src[4096];
  snprintf(src, sizeof src,
           "step = global_step()\n"
           "images = random_uniform([8, 6, 6, 1], seed=3)\n"
           "labels = const([0, 1, 2, 0, 1, 2, 0, 1], i64)\n"
           "def model(x, training) {\n"
           "  c = conv2d(x, 4, 3, padding=\"same\", use_bias=false)\n"
           "  b = batch_norm(c, momentum=0.9, training=training)\n"
           "  return dense(flatten(max_pool2d(relu(b))), 3)\n"
           "}\n"
           "%s\n"
           "%s\n"
           "train = minimize(loss, adam(0.01))\n"
           "test = model(images, false)\n"
           "%s\n"
           "fetch loss\n"
           "target train\n",
           before, loss, after);
  gt_write_file(dir, name, src);
}

static const char *const weights =
    "--fetch loss,model/c/kernel,model/b/gamma,model/b/beta,model/b/moving_mean,"
    "model/b/moving_variance,model/dense/kernel,model/dense/bias";

/* The JSON of the weights after 3 steps of `file` in one process. */
static bool train_json(const char *file, const char *flags, char *json, size_t cap) {
  char args[512];
  snprintf(args, sizeof args, "run %s --steps 3 %s %s --json", file, flags, weights);
  int rc = gt_cli_run(dir, args, out, sizeof out);
  GR_CHECK_MSG(rc == 0, "graphrun %s: exit %d: %s", args, rc, out);
  const char *j = strchr(out, '{');
  snprintf(json, cap, "%s", j ? j : "");
  return rc == 0 && j;
}

static void test_blocks(void) {
  static char plain[1 << 16], ps[1 << 16], rep1[1 << 16], rep2[1 << 16], rep2b[1 << 16],
      mir[1 << 16];
  write_model("plain.gr", "",
              "loss = reduce_mean(sparse_softmax_cross_entropy(model(images, true), labels))", "");
  write_model("ps.gr", "",
              "ps_variables(1) { loss = reduce_mean(sparse_softmax_cross_entropy(model(images, "
              "true), labels)) }",
              "");
  write_model("rep1.gr", "",
              "ps_variables(1) { loss = replicas(1, images, labels) { "
              "reduce_mean(sparse_softmax_cross_entropy(model(images, true), labels)) } }",
              "");
  write_model("rep2.gr", "",
              "ps_variables(1) { loss = replicas(2, images, labels) { "
              "reduce_mean(sparse_softmax_cross_entropy(model(images, true), labels)) } }",
              "");
  write_model("mirrored.gr", "",
              "loss = replicas(2, images, labels, all_reduce=true) { "
              "reduce_mean(sparse_softmax_cross_entropy(model(images, true), labels)) }",
              "control_dependencies(train) { spread = mirror_spread() }");
  GR_CHECK(train_json("plain.gr", "", plain, sizeof plain));
  /* the ps placement moves the variables, not the math: the same bits */
  GR_CHECK(train_json("ps.gr", "--soft-placement", ps, sizeof ps));
  GR_CHECK_MSG(strcmp(plain, ps) == 0, "ps_variables(1) changed the weights:\n%s\n%s", plain, ps);
  /* one replica computes what the model alone does */
  GR_CHECK(train_json("rep1.gr", "--soft-placement", rep1, sizeof rep1));
  GR_CHECK_MSG(strcmp(plain, rep1) == 0, "replicas(1) changed the weights:\n%s\n%s", plain, rep1);
  /* two replicas: other statistics per replica; the same bits run after run */
  GR_CHECK(train_json("rep2.gr", "--soft-placement", rep2, sizeof rep2));
  GR_CHECK(train_json("rep2.gr", "--soft-placement --threads 1", rep2b, sizeof rep2b));
  GR_CHECK(strcmp(rep2, rep2b) == 0);
  GR_CHECK(strcmp(rep2, plain) != 0);
  /* mirrored copies stay equal */
  char args[256];
  snprintf(args, sizeof args, "run mirrored.gr --steps 3 --soft-placement --fetch spread --json");
  GR_CHECK_EQ_INT(gt_cli_run(dir, args, out, sizeof out), 0);
  GR_CHECK_STR_CONTAINS(out, "\"spread\": {\"dtype\": \"f64\", \"shape\": [], \"data\": 0");
  GR_CHECK(train_json("mirrored.gr", "--soft-placement", mir, sizeof mir));
  /* the graphs: one set of variables, outside the replicas, on the ps */
  const char *files[] = {"rep2.gr", "mirrored.gr"};
  for (int f = 0; f < 2; f++) {
    char path[256], buf[2048];
    snprintf(path, sizeof path, "%s/%s", dir, files[f]);
    gr_graph *g = gr_graph_new();
    gr_dsl_program *p = NULL;
    gr_error err;
    GR_CHECK_OK(gr_dsl_load_file(path, g, NULL, &p, &err), err);
    GR_CHECK_STR_CONTAINS(variables(g, buf, sizeof buf),
                          "model/b/beta,model/b/gamma,model/b/moving_mean,model/b/moving_variance,"
                          "model/c/kernel,model/dense/bias,model/dense/kernel");
    GR_CHECK(!strstr(buf, "replica"));
    gr_node *k = gr_graph_find_node(g, "model/c/kernel");
    GR_CHECK(k && strcmp(k->requested_device, f ? "/job:worker/task:0" : "/job:ps/task:0") == 0);
    if (f == 1) GR_CHECK(gr_graph_find_node(g, "model/c/kernel/replica_1") != NULL);
    /* the replicas' batch norms: one update per moving statistic, of both */
    int updates = 0;
    for (int i = 0; i < gr_graph_num_nodes(g); i++) {
      const gr_node *n = gr_graph_node(g, i);
      if (strcmp(n->op->name, "moving_average_update") || strstr(n->name, "test")) continue;
      updates++;
      GR_CHECK_EQ_INT(n->num_inputs, 2); /* the two replicas' statistics */
    }
    GR_CHECK_EQ_INT(updates, f ? 4 : 2);
    gr_dsl_program_free(p);
    gr_graph_free(g);
  }
  /* a variable() inside a replica is still refused */
  gt_write_file(dir, "bad.gr",
                "x = zeros([4, 2])\n"
                "l = replicas(2, x) { w = variable(ones([2])); reduce_sum(x * w) }\n");
  GR_CHECK(gt_cli_expect(dir, "check bad.gr", 2, "replica 0 makes variable 'replica_0/w'", out,
                         sizeof out));
}

/* Layers in device blocks and micro-batches: pinned where written. */
static void test_device_and_micro_batches(void) {
  const char *src = "x = placeholder(f32, [4, 3])\n"
                    "def mlp(x) {\n"
                    "  device \"/job:worker/task:0\" { h = dense(x, 5, activation=\"relu\") }\n"
                    "  device \"/job:worker/task:1\" { y = dense(h, 2) }\n"
                    "  return y\n"
                    "}\n"
                    "loss = micro_batches(2, x) { reduce_sum(mlp(x)) }\n";
  gr_dsl_program *p = NULL;
  gr_graph *g = load(src, &p);
  GR_CHECK(g != NULL);
  if (!g) return;
  char buf[512];
  GR_CHECK(strcmp(variables(g, buf, sizeof buf),
                  "mlp/h/bias,mlp/h/kernel,mlp/y/bias,mlp/y/kernel") == 0);
  GR_CHECK(strcmp(gr_graph_find_node(g, "mlp/h/kernel")->requested_device, "/job:worker/task:0") ==
           0);
  GR_CHECK(strcmp(gr_graph_find_node(g, "mlp/y/bias")->requested_device, "/job:worker/task:1") ==
           0);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* GPU pins in a file: with --soft-placement one note and the run; without,
 * the error names the flag. */
static void test_gpu_pins(void) {
  gt_write_file(dir, "gpu.gr",
                "x = ones([2, 4])\n"
                "device \"/gpu:0\" { h = dense(x, 3, activation=\"relu\") }\n"
                "device \"/device:GPU:1\" { y = reduce_sum(h) }\n");
  GR_CHECK(gt_cli_expect(dir, "run gpu.gr", 1, "but this build has no GPU", out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "--soft-placement");
  GR_CHECK(gt_cli_expect(dir, "run gpu.gr --soft-placement", 0, "y = ", out, sizeof out));
  const char *note = strstr(out, "note: soft placement: this build has no GPU");
  GR_CHECK(note && !strstr(note + 1, "note:")); /* one note for both GPUs */
  GR_CHECK(gt_cli_expect(dir, "check gpu.gr", 0, "gpu.gr: ok", out, sizeof out));
  gt_write_file(dir, "tpu.gr", "device \"/device:TPU:0\" { y = ones([2]) }\n");
  GR_CHECK(gt_cli_expect(dir, "check tpu.gr", 2, "unknown device type 'TPU'", out, sizeof out));
}

int main(void) {
  gr_init();
  snprintf(dir, sizeof dir, "/tmp/gr_test_dsl_layers_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_names);
  GR_RUN(test_model_called_twice);
  GR_RUN(test_reuse_errors);
  GR_RUN(test_op_forms);
  GR_RUN(test_blocks);
  GR_RUN(test_device_and_micro_batches);
  GR_RUN(test_gpu_pins);
  gt_remove_tree(dir);
  return gr_test_finish();
}
