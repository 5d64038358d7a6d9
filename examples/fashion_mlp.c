/* Fashion-MNIST with the classic multilayer perceptron: 784-256-256-10,
 * ReLU, softmax cross-entropy, SGD with learning rate 0.1, batch 128.
 * Data comes from the Debian package dataset-fashion-mnist and is read,
 * shuffled and batched inside the graph.
 *
 *   fashion_mlp [--epochs N] [--steps N] [--expect-accuracy A] [--data DIR] [--seed S]
 *               [--threads T]
 *
 * --steps stops early (the test suite uses it); --expect-accuracy makes the
 * program fail when the test accuracy is below A; --threads sets the
 * inter-op threads (default 0: one per core). The line "train loop: S s"
 * times the loop after its first step (which reads the data files). */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 128

typedef struct mlp {
  gr_output w1, b1, w2, b2, w3, b3;
} mlp;

static gr_output dense(gr_graph *g, gr_output x, gr_output w, gr_output b, bool relu) {
  gr_output y = gr_bias_add(g, gr_matmul(g, x, w, false, false), b);
  return relu ? gr_relu(g, y) : y;
}

static mlp make_mlp(gr_graph *g) {
  mlp m;
  int64_t sizes[4] = {784, 256, 256, 10};
  gr_output *ws[3] = {&m.w1, &m.w2, &m.w3}, *bs[3] = {&m.b1, &m.b2, &m.b3};
  for (int l = 0; l < 3; l++) {
    char scope[16];
    snprintf(scope, sizeof scope, "layer%d", l + 1);
    gr_graph_push_name_scope(g, scope);
    *ws[l] = gr_variable(g, "w",
                         gr_glorot_uniform(g, GR_F32, (gr_shape){2, {sizes[l], sizes[l + 1]}}, l));
    *bs[l] = gr_variable(g, "b", gr_zeros(g, GR_F32, (gr_shape){1, {sizes[l + 1]}}));
    gr_graph_pop_name_scope(g);
  }
  return m;
}

static gr_output logits_of(gr_graph *g, const mlp *m, gr_output x) {
  gr_output h1 = dense(g, x, m->w1, m->b1, true);
  gr_output h2 = dense(g, h1, m->w2, m->b2, true);
  return dense(g, h2, m->w3, m->b3, false);
}

/* u8 images [n, 28, 28] -> f32 [n, 784] in [0, 1] */
static gr_output pixels(gr_graph *g, gr_output images) {
  gr_output f = gr_mul(g, gr_cast(g, images, GR_F32), gr_const_f32(g, 1.0f / 255.0f));
  return gr_reshape(g, f, (gr_shape){2, {-1, 784}});
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int usage(void) {
  fprintf(stderr, "usage: fashion_mlp [--epochs N] [--steps N] [--expect-accuracy A] [--data DIR] "
                  "[--seed S] [--threads T]\n");
  return 2;
}

int main(int argc, char **argv) {
  int epochs = 5;
  long max_steps = -1, seed = 1, threads = 0;
  double expect = -1;
  const char *dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    if (strcmp(argv[i], "--epochs") == 0)
      epochs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--steps") == 0)
      max_steps = atol(argv[++i]);
    else if (strcmp(argv[i], "--expect-accuracy") == 0)
      expect = atof(argv[++i]);
    else if (strcmp(argv[i], "--data") == 0)
      dir = argv[++i];
    else if (strcmp(argv[i], "--seed") == 0)
      seed = atol(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0)
      threads = atol(argv[++i]);
    else
      return usage();
  }
  if (epochs < 1 || threads < 0 || threads > 1024) return usage();
  char path[4][512];
  const char *files[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  for (int i = 0; i < 4; i++) snprintf(path[i], sizeof path[i], "%s/%s", dir, files[i]);

  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, (uint64_t)seed);
  gr_output step = gr_global_step(g);
  gr_output train_xy[2] = {gr_read_idx(g, path[0]), gr_read_idx(g, path[1])};
  gr_output bx = gr_batch(g, step, train_xy, 2, BATCH, 0, true, 1, 0);
  gr_output x = pixels(g, bx), y = gr_cast(g, gr_output_at(bx, 1), GR_I64);
  mlp m = make_mlp(g);
  gr_output loss = gr_name(
      g,
      gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits_of(g, &m, x), y), NULL, 0, false),
      "loss");
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &sgd, loss, NULL, 0);
  /* test accuracy on all 10,000 test images */
  gr_output tx = pixels(g, gr_read_idx(g, path[2]));
  gr_output ty = gr_cast(g, gr_read_idx(g, path[3]), GR_I64);
  gr_output hit = gr_equal(g, gr_argmax(g, logits_of(g, &m, tx), 1), ty);
  gr_output accuracy =
      gr_name(g, gr_reduce_mean(g, gr_cast(g, hit, GR_F32), NULL, 0, false), "accuracy");
  if (gr_graph_error(g)) {
    fprintf(stderr, "fashion_mlp: %s\n", gr_graph_error(g)->msg);
    if (strstr(gr_graph_error(g)->msg, "cannot open"))
      fprintf(stderr,
              "fashion_mlp: install the data with: apt-get install dataset-fashion-mnist\n");
    return 1;
  }
  gr_error err;
  gr_session_options opts = {.inter_op_threads = (int)threads};
  gr_session *s = gr_session_new(g, &opts, &err);
  if (!s) {
    fprintf(stderr, "fashion_mlp: %s\n", err.msg);
    return 1;
  }
  long steps_per_epoch = 60000 / BATCH, done = 0;
  printf("Fashion-MNIST MLP 784-256-256-10, SGD 0.1, batch %d, %d epochs of %ld steps\n", BATCH,
         epochs, steps_per_epoch);
  double t0 = now(), t1 = t0;
  for (int e = 0; e < epochs && (max_steps < 0 || done < max_steps); e++) {
    double sum = 0, te = now();
    long n = 0;
    for (long k = 0; k < steps_per_epoch && (max_steps < 0 || done < max_steps); k++, n++, done++) {
      gr_tensor lv;
      if (gr_session_run(s, NULL, 0, &loss, 1, &lv, &train, 1, &err) != GR_OK) {
        fprintf(stderr, "fashion_mlp: step %ld: %s\n", done, err.msg);
        return 1;
      }
      sum += gr_tensor_get_f64(&lv, 0);
      gr_tensor_release(&lv);
      if (done == 0) t1 = now();
    }
    printf("epoch %d: loss %.4f (%ld steps, %.1f s)\n", e + 1, sum / (double)n, n, now() - te);
    fflush(stdout);
  }
  printf("train loop: %.4f s (%ld steps after the first)\n", now() - t1, done - 1);
  gr_tensor acc;
  if (gr_session_run(s, NULL, 0, &accuracy, 1, &acc, NULL, 0, &err) != GR_OK) {
    fprintf(stderr, "fashion_mlp: evaluating: %s\n", err.msg);
    return 1;
  }
  double a = gr_tensor_get_f64(&acc, 0);
  printf("test accuracy: %.4f after %ld steps (%.1f s)\n", a, done, now() - t0);
  gr_tensor_release(&acc);
  gr_session_free(s);
  gr_graph_free(g);
  if (expect >= 0 && a < expect) {
    fprintf(stderr, "fashion_mlp: accuracy %.4f is below the expected %.4f\n", a, expect);
    return 1;
  }
  return 0;
}
