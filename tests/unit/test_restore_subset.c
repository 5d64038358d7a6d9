/* Restoring by name into a graph that holds a subset of a checkpoint's
 * variables (gr_ckpt_restore, graphrun run --ckpt): an inference graph
 * restores a training checkpoint without its global step and Adam's
 * slots; a variable it needs that the checkpoint lacks is an error naming
 * the variable and the file, and nothing changes; with roots, only the
 * variables the runs need must be there. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64];

/* The model: two dense layers; trained on fixed rows with Adam. */
#define MODEL                                                                                      \
  "def model(x, training) {\n"                                                                     \
  "  h = dense(x, 4, activation=\"relu\")\n"                                                       \
  "  d = dropout(h, 0.5, training=training)\n"                                                     \
  "  return dense(d, 2, name=\"logits\")\n"                                                        \
  "}\n"

static const char *train_src =
    MODEL "x = const([[1, 2, 3], [0, -1, 2], [3, 0, 1], [-2, 1, 0]])\n"
          "y = const([0, 1, 1, 0], i64)\n"
          "step = global_step()\n"
          "loss = reduce_mean(sparse_softmax_cross_entropy(model(x, true), y))\n"
          "train = minimize(loss, adam(0.05))\n"
          "probs = softmax(model(x, false))\n"
          "fetch loss\n"
          "target train\n";

/* The inference graph: the model alone, no step, no optimizer. */
static const char *infer_src = MODEL "x = placeholder(f32, [?, 3])\n"
                                     "probs = softmax(model(x, false))\n";

/* The same with one more layer: model/extra/kernel and bias are not in
 * the checkpoint. */
static const char *extra_src = MODEL "x = placeholder(f32, [?, 3])\n"
                                     "probs = softmax(model(x, false))\n"
                                     "other = dense(x, 5, name=\"extra\")\n";

typedef struct prog {
  gr_graph *g;
  gr_dsl_program *p;
  gr_session *s;
} prog;

static prog load(const char *src) {
  prog r = {gr_graph_new(), NULL, NULL};
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", src, r.g, NULL, &r.p, &err), err);
  r.s = gr_session_new(r.g, NULL, &err);
  GR_CHECK(r.s != NULL);
  return r;
}

static void unload(prog *r) {
  gr_session_free(r->s);
  gr_dsl_program_free(r->p);
  gr_graph_free(r->g);
}

static gr_output name(const prog *r, const char *n) {
  gr_output o = {NULL, 0};
  GR_CHECK_MSG(gr_dsl_lookup(r->p, n, &o), "no '%s'", n);
  return o;
}

static gr_tensor rows(void) {
  return gt_make(GR_F32, (gr_shape){2, {4, 3}}, (double[]){1, 2, 3, 0, -1, 2, 3, 0, 1, -2, 1, 0});
}

/* Trains 20 steps and saves; *probs: the model's output on the rows. */
static gr_ckpt *train_and_save(const char *file, gr_tensor *probs) {
  prog t = load(train_src);
  gr_error err;
  gr_output train = name(&t, "train"), p = name(&t, "probs");
  for (int i = 0; i < 20; i++)
    GR_CHECK_OK(gr_session_run(t.s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
  GR_CHECK_OK(gr_session_run(t.s, NULL, 0, &p, 1, probs, NULL, 0, &err), err);
  gr_ckpt *ck = NULL;
  gr_ckpt_options o = {.max_to_keep = 0};
  GR_CHECK_OK(gr_ckpt_open(gt_path_in(dir, file), &o, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_save_session(ck, t.s, t.g, NULL, &err), err);
  unload(&t);
  return ck;
}

/* The inference graph restores the training checkpoint: its variables
 * set, the step, slots and global step left in the file (reported), and
 * the output equal to the training graph's on the same rows. */
static void test_inference_graph_restores(void) {
  gr_tensor want = gr_tensor_empty();
  gr_ckpt *ck = train_and_save("a.ckpt", &want);
  prog inf = load(infer_src);
  gr_error err;
  gr_ckpt_restore_report rep;
  GR_CHECK_OK(gr_ckpt_restore(ck, inf.s, inf.g, NULL, &rep, &err), err);
  GR_CHECK_EQ_INT(rep.step, 21); /* 20 steps and the run of probs */
  GR_CHECK_EQ_INT(gr_session_step(inf.s), 21);
  GR_CHECK_EQ_INT(rep.restored, 4); /* two kernels, two biases */
  GR_CHECK_EQ_INT(rep.not_needed, 0);
  /* global_step and Adam's m and v of each variable, its beta powers */
  GR_CHECK_MSG(rep.unused >= 9, "unused %d", rep.unused);
  GR_CHECK_STR_CONTAINS(rep.unused_names, "global_step");
  gr_tensor x = rows(), got = gr_tensor_empty();
  gr_feed f = {name(&inf, "x"), &x};
  gr_output p = name(&inf, "probs");
  GR_CHECK_OK(gr_session_run(inf.s, &f, 1, &p, 1, &got, NULL, 0, &err), err);
  GR_CHECK(gt_bit_equal(&got, &want));
  /* the old entry point too (every variable of the graph needed) */
  prog again = load(infer_src);
  int64_t step = -1;
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, again.s, again.g, &step, &err), err);
  GR_CHECK_EQ_INT(step, 21);
  unload(&again);
  gr_tensor_release(&got);
  gr_tensor_release(&x);
  gr_tensor_release(&want);
  unload(&inf);
  gr_ckpt_close(ck);
}

/* A variable the graph needs and the checkpoint lacks: FAILED_PRECONDITION
 * naming the variables and the file, and no variable set. With roots that
 * do not need them, the rest restores and they are counted as not needed. */
static void test_missing_variable(void) {
  gr_tensor want = gr_tensor_empty();
  gr_ckpt *ck = train_and_save("b.ckpt", &want);
  prog ex = load(extra_src);
  gr_error err;
  GR_CHECK(gr_ckpt_restore(ck, ex.s, ex.g, NULL, NULL, &err) == GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, gt_path_in(dir, "b.ckpt"));
  GR_CHECK_STR_CONTAINS(err.msg, "missing from the checkpoint: extra/bias, extra/kernel");
  GR_CHECK_STR_CONTAINS(err.msg, "needed by this graph");
  GR_CHECK_EQ_INT(gr_session_step(ex.s), 0);
  gr_var *v = gr_resource_mgr_get_var(gr_session_resources(ex.s), "model/logits/kernel");
  GR_CHECK(!v || !gr_var_value(v)->buf); /* nothing set */
  /* the same through the step entry point */
  GR_CHECK(gr_ckpt_restore_step(ck, ex.s, ex.g, 21, &err) == GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "extra/kernel");

  /* runs of probs alone need the model's variables only */
  gr_output p = name(&ex, "probs"), x = name(&ex, "x");
  gr_ckpt_restore_options o = {.roots = &p, .num_roots = 1, .feeds = &x, .num_feeds = 1};
  gr_ckpt_restore_report rep;
  GR_CHECK_OK(gr_ckpt_restore(ck, ex.s, ex.g, &o, &rep, &err), err);
  GR_CHECK_EQ_INT(rep.restored, 4);
  GR_CHECK_EQ_INT(rep.not_needed, 2);
  gr_tensor xs = rows(), got = gr_tensor_empty();
  gr_feed f = {x, &xs};
  GR_CHECK_OK(gr_session_run(ex.s, &f, 1, &p, 1, &got, NULL, 0, &err), err);
  GR_CHECK(gt_bit_equal(&got, &want));
  /* ... but runs of `other` need extra/kernel */
  gr_output other = name(&ex, "other");
  gr_ckpt_restore_options o2 = {.roots = &other, .num_roots = 1, .feeds = &x, .num_feeds = 1};
  GR_CHECK(gr_ckpt_restore(ck, ex.s, ex.g, &o2, NULL, &err) == GR_ERR_FAILED_PRECONDITION);
  /* exactly these two: the model's variables are there */
  GR_CHECK_STR_CONTAINS(err.msg,
                        "missing from the checkpoint: extra/bias, extra/kernel (needed by this");
  gr_tensor_release(&got);
  gr_tensor_release(&xs);
  gr_tensor_release(&want);
  unload(&ex);
  gr_ckpt_close(ck);
}

/* graphrun run: an inference file restores a training file's checkpoint
 * with a note of what it left; one that needs a variable the checkpoint
 * lacks fails naming it and the file. */
static void test_cli(void) {
  char out[8192];
  gt_write_file(dir, "train.gr", train_src);
  gt_write_file(dir, "infer.gr", infer_src);
  gt_write_file(dir, "extra.gr", extra_src);
  gt_write_file(dir, "x.csv", "1,2,3\n0,-1,2\n");
  GR_CHECK(
      gt_cli_expect(dir, "run train.gr --steps 20 --ckpt c.db --quiet", 0, NULL, out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "run infer.gr --ckpt c.db --feed x=x.csv --fetch probs", 0,
                         "restored c.db (20 steps done)", out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "tensors of the checkpoint not in this graph: ");
  GR_CHECK_STR_CONTAINS(out, "global_step");
  GR_CHECK_STR_CONTAINS(out, "probs = f32[2, 2]");
  GR_CHECK(gt_cli_expect(dir, "run extra.gr --ckpt c.db --feed x=x.csv --fetch probs", 1,
                         "checkpoint file 'c.db', step 20 does not fit this graph: missing from "
                         "the checkpoint: extra/bias, extra/kernel (needed by this graph)",
                         out, sizeof out));
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_restore_subset_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_inference_graph_restores);
  GR_RUN(test_missing_variable);
  GR_RUN(test_cli);
  gt_remove_tree(dir);
  return gr_test_finish();
}
