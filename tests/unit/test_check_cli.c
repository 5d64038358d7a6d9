/* `graphrun check --layers`: the bindings of examples/fashion_cnn.gr with
 * the shapes of the CNN's layers, and of a small file with a def called
 * twice (def paths, call sites, parameters, unknown dims, NCHW); the
 * listing is off without the flag; Keras' model.summary() counts for an MLP
 * and a CNN of layer built-ins (total, trainable, non-trainable; optimizer
 * slots and the global step not parameters). Runs the graphrun binary of
 * this build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64], out[65536];

static int run(const char *args) {
  return gt_cli_run(dir, args, out, sizeof out);
}

/* The nth (0-based) line of out that lists binding `name`, into line ("" if
 * there is none). */
static const char *binding_line(const char *name, int nth, char *line, size_t cap) {
  char key[128];
  snprintf(key, sizeof key, "\n  %s ", name);
  line[0] = '\0';
  for (const char *p = strstr(out, key); p; p = strstr(p + 1, key)) {
    if (nth-- > 0) continue;
    p++;
    size_t n = strcspn(p, "\n");
    n = n < cap - 1 ? n : cap - 1;
    memcpy(line, p, n);
    line[n] = '\0';
    break;
  }
  return line;
}

/* Binding `name` (its nth line) was made at `at` by op, with this dtype
 * and shape, and has params (NULL: not checked) at the end of its line. */
static void expect_binding(const char *name, int nth, const char *at, const char *op,
                           const char *dtype_shape, const char *params) {
  char line[512], want[160];
  binding_line(name, nth, line, sizeof line);
  GR_CHECK_MSG(line[0], "no line %d for binding '%s'", nth, name);
  if (!line[0]) return;
  if (at) GR_CHECK_STR_CONTAINS(line, at);
  GR_CHECK_STR_CONTAINS(line, op);
  GR_CHECK_STR_CONTAINS(line, dtype_shape);
  if (!params) return;
  snprintf(want, sizeof want, "  %s", params);
  GR_CHECK_MSG(strlen(line) >= strlen(want) && !strcmp(line + strlen(line) - strlen(want), want),
               "'%s' does not end with params %s", line, params);
}

typedef struct want_binding {
  const char *name;
  int nth;
  const char *at, *op, *dtype_shape, *params;
} want_binding;

static void expect_bindings(const want_binding *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    expect_binding(w[i].name, w[i].nth, w[i].at, w[i].op, w[i].dtype_shape, w[i].params);
}

static void test_fashion_cnn(void) {
  char args[512];
  snprintf(args, sizeof args, "check %s/examples/fashion_cnn.gr --layers", GR_SOURCE_DIR);
  GR_CHECK_EQ_INT(run(args), 0);
  GR_CHECK_STR_CONTAINS(out, "layers (the file's bindings in the order built):");
  /* the training pass (logits = cnn(x, true)) comes first, then the test pass */
  const struct {
    const char *name, *op, *train, *test;
    int per_pass; /* calls per pass of the def the binding is in */
  } layers[] = {
      {"cnn/h1", "max_pool", "f32    [128, 14, 14, 32]", "f32    [500, 14, 14, 32]", 1},
      {"cnn/h2", "max_pool", "f32    [128, 7, 7, 64]", "f32    [500, 7, 7, 64]", 1},
      {"cnn/h3", "dropout", "f32    [128, 3136]", "f32    [500, 3136]", 1},
      {"cnn/h4", "relu", "f32    [128, 128]", "f32    [500, 128]", 1},
      {"cnn/conv_bn_relu_pool/c", "conv2d", "f32    [128, 28, 28, 32]", "f32    [500, 28, 28, 32]",
       2},
  };
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    int k = layers[i].per_pass;
    expect_binding(layers[i].name, 0, "fashion_cnn.gr:", layers[i].op, layers[i].train, "0");
    expect_binding(layers[i].name, k, "fashion_cnn.gr:", layers[i].op, layers[i].test, "0");
  }
  /* variables: counted where made (in the def), not again where unpacked;
   * train makes Adam's slots, which are not parameters */
  const want_binding more[] = {
      {"logits", 0, "fashion_cnn.gr:", "add", "f32    [128, 10]", "0"},
      {"conv_bn_vars/w", 0, "fashion_cnn.gr:", "variable", "[3, 3, 1, 32]", "288"},
      {"conv_bn_vars/w", 1, "fashion_cnn.gr:", "variable", "[3, 3, 32, 64]", "18432"},
      {"c1w", 0, "fashion_cnn.gr:", "variable", "[3, 3, 1, 32]", "0"},
      {"dense_vars/w", 0, "fashion_cnn.gr:", "variable", "[3136, 128]", "401408"},
      {"images", 0, "fashion_cnn.gr:", "batch", "u8     [128, 28, 28]", "0"},
      {"train", 0, "fashion_cnn.gr:", "no_op", "-      -", "0"}, /* slots: no parameters */
  };
  expect_bindings(more, sizeof more / sizeof more[0]);
  /* the two passes are told apart by their call sites */
  char a[512], b[512];
  binding_line("cnn/h1", 0, a, sizeof a);
  binding_line("cnn/h1", 1, b, sizeof b);
  GR_CHECK(strcmp(a, b) != 0);
}

static void test_inline(void) {
  gt_write_file(dir, "t.gr",
                "# a def called twice, NCHW\n"
                "def block(x, cin, cout) {\n"
                "  w = variable(zeros([3, 3, cin, cout]))\n"
                "  h = relu(conv2d(x, w, padding=\"SAME\", data_format=\"NCHW\"))\n"
                "  return max_pool(h, ksize=[2, 2], data_format=\"NCHW\")\n"
                "}\n"
                "x = placeholder(f32, [?, 3, 8, 8])\n"
                "h1 = block(x, 3, 4)\n"
                "h2 = block(h1, 4, 8)\n"
                "g, m = global_avg_pool(h2, data_format=\"NCHW\"), reduce_max(h2)\n"
                "k = 3\n"
                "s = \"not a tensor\"\n");
  GR_CHECK_EQ_INT(run("check t.gr --layers"), 0);
  GR_CHECK_STR_CONTAINS(out, "t.gr: ok, ");
  GR_CHECK_STR_CONTAINS(out, "  name     at       op               dtype  shape ");
  const want_binding want[] = {
      {"x", 0, "t.gr:7 ", "placeholder", "f32    [?, 3, 8, 8]", "0"},
      {"block/w", 0, "t.gr:8 ", "variable", "f32    [3, 3, 3, 4]", "108"},
      {"block/h", 0, "t.gr:8 ", "relu", "f32    [?, 4, 8, 8]", "0"},
      {"h1", 0, "t.gr:8 ", "max_pool", "f32    [?, 4, 4, 4]", "0"},
      {"block/w", 1, "t.gr:9 ", "variable", "f32    [3, 3, 4, 8]", "288"},
      {"h2", 0, "t.gr:9 ", "max_pool", "f32    [?, 8, 2, 2]", "0"},
      {"g", 0, "t.gr:10 ", "global_avg_pool", "f32    [?, 8]", "0"},
      {"m", 0, "t.gr:10 ", "reduce_max", "f32    []", "0"},
      {"k", 0, "t.gr:11 ", "const", "f32    []", "0"},
  };
  expect_bindings(want, sizeof want / sizeof want[0]);
  GR_CHECK(!strstr(out, "\n  s ")); /* a string binds no tensor */
  GR_CHECK_STR_CONTAINS(out, "\n10 bindings\nTotal params: 396\nTrainable params: 396\n"
                             "Non-trainable params: 0\n");
  GR_CHECK(!strstr(out, "Not parameters"));
  /* the order is the order built: x, block/w, block/h, h1, ... */
  const char *px = strstr(out, "\n  x "), *pw = strstr(out, "\n  block/w "),
             *ph1 = strstr(out, "\n  h1 ");
  GR_CHECK(px && pw && ph1 && px < pw && pw < ph1);
  /* without --layers: counts only */
  GR_CHECK_EQ_INT(run("check t.gr"), 0);
  GR_CHECK(!strstr(out, "layers ("));
  /* a file with an error: the error, no listing */
  gt_write_file(dir, "bad.gr",
                "x = placeholder(f32, [2, 3, 8, 8])\n"
                "y = conv2d(x, zeros([3, 3, 8, 4]), data_format=\"NCHW\")\n");
  GR_CHECK_EQ_INT(run("check bad.gr --layers"), 2);
  GR_CHECK_STR_CONTAINS(out, "bad.gr:2:5: error: node 'y' (op conv2d): channel mismatch: input "
                             "[2, 3, 8, 8] (NCHW) has 3 channels but filter [3, 3, 8, 4] takes 8");
  GR_CHECK(!strstr(out, "layers ("));
}

/* Keras' model.summary() numbers for models written with the layer
 * built-ins: Dense(784 -> 256) is 200,960 parameters, the MLP 269,322;
 * batch norm's moving statistics are non-trainable; Adam's slots and the
 * global step are not parameters. */
static void test_keras_summary(void) {
  gt_write_file(dir, "mlp.gr",
                "x = placeholder(f32, [?, 784])\n"
                "y = placeholder(i64, [?])\n"
                "h1 = dense(x, 256, activation=\"relu\")\n"
                "h2 = dense(h1, 256, activation=\"relu\")\n"
                "logits = dense(h2, 10)\n"
                "step = global_step()\n"
                "train = minimize(reduce_mean(sparse_softmax_cross_entropy(logits, y)), adam())\n");
  GR_CHECK_EQ_INT(run("check mlp.gr --layers"), 0);
  const want_binding mlp[] = {
      {"h1", 0, "mlp.gr:3 ", "dense", "f32    [?, 256]", "200960"},
      {"h2", 0, "mlp.gr:4 ", "dense", "f32    [?, 256]", "65792"},
      {"logits", 0, "mlp.gr:5 ", "dense", "f32    [?, 10]", "2570"},
      {"step", 0, "mlp.gr:6 ", "variable", "i64    []", "0"},
      {"train", 0, "mlp.gr:7 ", "no_op", "-      -", "0"},
  };
  expect_bindings(mlp, sizeof mlp / sizeof mlp[0]);
  GR_CHECK_STR_CONTAINS(out, "\nTotal params: 269,322\nTrainable params: 269,322\n"
                             "Non-trainable params: 0\n"
                             "Not parameters: 538,650 in optimizer slots, 1 in the global step\n");
  gt_write_file(dir, "cnn.gr",
                "x = placeholder(f32, [?, 28, 28, 1])\n"
                "def model(x, training) {\n"
                "  a = random_flip(x, mode=\"horizontal\", training=training)\n"
                "  c1 = conv2d(a, 32, 3, padding=\"same\")\n"
                "  b1 = batch_norm(c1, training=training)\n"
                "  p1 = max_pool2d(relu(b1))\n"
                "  c2 = conv2d(p1, 64, 3)\n"
                "  b2 = batch_norm(c2, training=training)\n"
                "  p2 = max_pool2d(relu(b2))\n"
                "  s = separable_conv2d(p2, 128, 3, padding=\"same\", activation=\"relu\")\n"
                "  g = global_avg_pool2d(s)\n"
                "  return dense(dropout(g, 0.5, training=training), 10)\n"
                "}\n"
                "logits = model(x, true)\n"
                "test_logits = model(x, false)\n");
  GR_CHECK_EQ_INT(run("check cnn.gr --layers"), 0);
  const want_binding cnn[] = {
      {"model/a", 0, "cnn.gr:14 ", "random_flip", "f32    [?, 28, 28, 1]", "0"},
      {"model/c1", 0, "cnn.gr:14 ", "conv2d", "f32    [?, 28, 28, 32]", "320"},
      {"model/b1", 0, "cnn.gr:14 ", "batch_norm", "f32    [?, 28, 28, 32]", "128"},
      {"model/p1", 0, "cnn.gr:14 ", "max_pool2d", "f32    [?, 14, 14, 32]", "0"},
      {"model/c2", 0, "cnn.gr:14 ", "conv2d", "f32    [?, 12, 12, 64]", "18496"},
      {"model/b2", 0, "cnn.gr:14 ", "batch_norm", "f32    [?, 12, 12, 64]", "256"},
      {"model/p2", 0, "cnn.gr:14 ", "max_pool2d", "f32    [?, 6, 6, 64]", "0"},
      {"model/s", 0, "cnn.gr:14 ", "separable_conv2d", "f32    [?, 6, 6, 128]", "8896"},
      {"model/g", 0, "cnn.gr:14 ", "global_avg_pool2d", "f32    [?, 128]", "0"},
      {"logits", 0, "cnn.gr:14 ", "dense", "f32    [?, 10]", "1290"},
      /* the test pass applies the same layers: no new parameters */
      {"model/a", 1, "cnn.gr:15 ", "identity", "f32    [?, 28, 28, 1]", "0"},
      {"model/c1", 1, "cnn.gr:15 ", "conv2d", "f32    [?, 28, 28, 32]", "0"},
      {"test_logits", 0, "cnn.gr:15 ", "dense", "f32    [?, 10]", "0"},
  };
  expect_bindings(cnn, sizeof cnn / sizeof cnn[0]);
  GR_CHECK_STR_CONTAINS(out, "\nTotal params: 29,386\nTrainable params: 29,194\n"
                             "Non-trainable params: 192\n");
  /* the CNN example: Adam's slots and the step are not parameters */
  char args[512];
  snprintf(args, sizeof args, "check %s/examples/fashion_cnn.gr --layers", GR_SOURCE_DIR);
  GR_CHECK_EQ_INT(run(args), 0);
  GR_CHECK_STR_CONTAINS(out, "\nTotal params: 421,930\nTrainable params: 421,738\n"
                             "Non-trainable params: 192\n"
                             "Not parameters: 843,486 in optimizer slots, 1 in the global step\n");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_check_cli_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_fashion_cnn);
  GR_RUN(test_inline);
  GR_RUN(test_keras_summary);
  gt_remove_tree(dir);
  return gr_test_finish();
}
