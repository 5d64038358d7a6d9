/* Resuming exactly: a training-like run (variables updated by assign_add
 * with random deltas keyed by the step, a counter, an f64 accumulator) is
 * stopped after step k, its checkpoint restored into a new session of a
 * rebuilt graph, and run to the end: every variable is bit-identical to an
 * uninterrupted run. Done through the C API and through the save/restore
 * ops, for several k. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "test_util.h"

#define TOTAL 12

static char dir[64], path[128];

typedef struct model {
  gr_graph *g;
  gr_output train, save, restore;
} model;

static const char *var_names[] = {"layer/w", "layer/b", "acc", "count"};

static model build(void) {
  model m;
  m.g = gr_graph_new();
  gr_graph_set_seed(m.g, 1234);
  gr_graph_push_name_scope(m.g, "layer");
  gr_output w = gr_variable(m.g, "w", gr_glorot_uniform(m.g, GR_F32, (gr_shape){2, {16, 8}}, 1));
  gr_output b = gr_variable(m.g, "b", gr_random_normal(m.g, GR_F32, (gr_shape){1, {8}}, 0, 1, 2));
  gr_graph_pop_name_scope(m.g);
  gr_output acc = gr_variable(m.g, "acc", gr_const_f64(m.g, 0.5));
  gr_output count = gr_variable(m.g, "count", gr_const_i64(m.g, 0));
  gr_output dw = gr_random_uniform(m.g, GR_F32, (gr_shape){2, {16, 8}}, -0.1, 0.1, 3);
  gr_output db = gr_random_normal(m.g, GR_F32, (gr_shape){1, {8}}, 0, 0.01, 4);
  /* acc += sum of the new w: depends on the order of the updates being the same */
  gr_output uw = gr_assign_add(m.g, w, dw);
  gr_output deps[4] = {
      uw, gr_assign_add(m.g, b, db),
      gr_assign_add(m.g, acc, gr_cast(m.g, gr_reduce_sum(m.g, uw, NULL, 0, false), GR_F64)),
      gr_assign_add(m.g, count, gr_const_i64(m.g, 1))};
  m.train = gr_group(m.g, "train", deps, 4);
  /* the save runs in the same step as a train update, after it, so saving
   * takes no run of its own and the step ids match an unsaved run */
  gr_graph_push_control_deps(m.g, &m.train, 1);
  m.save = gr_save(m.g, path, NULL, 0, 0, 0);
  gr_graph_pop_control_deps(m.g);
  m.restore = gr_restore(m.g, path, NULL, 0, -1);
  return m;
}

static gr_session *new_session(model *m) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = 2};
  gr_session *s = gr_session_new(m->g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  return s;
}

static void train(gr_session *s, model *m, int steps) {
  gr_error err;
  for (int i = 0; i < steps; i++)
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &m->train, 1, &err), err);
}

static void snapshot(gr_session *s, gr_tensor out[4]) {
  for (int i = 0; i < 4; i++) {
    gr_var *v = gr_resource_mgr_get_var(gr_session_resources(s), var_names[i]);
    out[i] = gr_tensor_empty();
    gr_error err;
    gr_var_lock(v);
    if (gr_var_value(v)->buf) gr_tensor_copy(gr_var_value(v), &out[i], &err);
    gr_var_unlock(v);
  }
}

static bool identical(const gr_tensor a[4], const gr_tensor b[4]) {
  for (int i = 0; i < 4; i++) {
    if (!a[i].buf || !b[i].buf || a[i].dtype != b[i].dtype ||
        !gr_shape_equal(&a[i].shape, &b[i].shape) ||
        memcmp(gr_tensor_data(&a[i]), gr_tensor_data(&b[i]), gr_tensor_num_bytes(&a[i])) != 0) {
      fprintf(stderr, "variable %s differs\n", var_names[i]);
      return false;
    }
  }
  return true;
}

static void release4(gr_tensor t[4]) {
  for (int i = 0; i < 4; i++) gr_tensor_release(&t[i]);
}

static gr_tensor reference[4];

static void test_uninterrupted_reference(void) {
  model m = build();
  gr_session *s = new_session(&m);
  train(s, &m, TOTAL);
  snapshot(s, reference);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&reference[3], 0), TOTAL);
  /* a different number of steps gives different values: the comparison can fail */
  model m2 = build();
  gr_session *s2 = new_session(&m2);
  train(s2, &m2, TOTAL - 1);
  gr_session_set_step(s2, gr_session_step(s2) + 1);
  train(s2, &m2, 1);
  gr_tensor other[4];
  snapshot(s2, other);
  GR_CHECK(memcmp(gr_tensor_data(&other[0]), gr_tensor_data(&reference[0]),
                  gr_tensor_num_bytes(&other[0])) != 0);
  release4(other);
  gr_session_free(s2);
  gr_graph_free(m2.g);
  gr_session_free(s);
  gr_graph_free(m.g);
}

/* Stops after k steps, saves (C API or op), restores in a new session of a
 * rebuilt graph, finishes. */
static void resume_at(int k, bool with_ops) {
  unlink(path);
  gr_error err;
  model a = build();
  gr_session *s = new_session(&a);
  train(s, &a, with_ops ? k - 1 : k);
  if (with_ops) { /* step k: train and save */
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &a.save, 1, &err), err);
  } else {
    gr_ckpt *ck;
    GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
    GR_CHECK_OK(gr_ckpt_save_session(ck, s, a.g, NULL, &err), err);
    gr_ckpt_close(ck);
  }
  train(s, &a, 2); /* work after the checkpoint is lost in the "crash" */
  gr_session_free(s);
  gr_graph_free(a.g);

  model b = build();
  gr_session *s2 = new_session(&b);
  int64_t step = -1;
  if (with_ops) {
    gr_tensor st;
    GR_CHECK_OK(gr_session_run(s2, NULL, 0, &b.restore, 1, &st, NULL, 0, &err), err);
    step = (int64_t)gr_tensor_get_f64(&st, 0);
    gr_tensor_release(&st);
    gr_session_set_step(s2, step);
  } else {
    gr_ckpt *ck;
    GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
    GR_CHECK_OK(gr_ckpt_restore_latest(ck, s2, b.g, &step, &err), err);
    gr_ckpt_close(ck);
  }
  GR_CHECK(step > 0);
  gr_tensor mid[4];
  snapshot(s2, mid);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&mid[3], 0), k);
  release4(mid);
  train(s2, &b, TOTAL - k);
  gr_tensor got[4];
  snapshot(s2, got);
  GR_CHECK_MSG(identical(got, reference), "resumed after %d steps (%s)", k,
               with_ops ? "ops" : "C API");
  release4(got);
  gr_session_free(s2);
  gr_graph_free(b.g);
}

static void test_resume_c_api(void) {
  for (int k = 1; k < TOTAL; k += 4) resume_at(k, false);
}

static void test_resume_ops(void) {
  for (int k = 2; k < TOTAL; k += 5) resume_at(k, true);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_ckpt_resume_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/run.db", dir);
  GR_RUN(test_uninterrupted_reference);
  GR_RUN(test_resume_c_api);
  GR_RUN(test_resume_ops);
  release4(reference);
  gt_remove_tree(dir);
  return gr_test_finish();
}
