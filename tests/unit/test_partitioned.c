/* Partitioned variables (ops/partitioned.c): the split of the rows, the
 * value as the concatenation of the parts (bit for bit the initial value),
 * the parts on different ps devices with their slots, training equal bit
 * for bit to the unpartitioned model, the gradient by central differences,
 * bad input, and the DSL form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

static const char *const dev_names[4] = {
    "/job:worker/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:0/device:CPU:0",
    "/job:ps/replica:0/task:1/device:CPU:0", "/job:ps/replica:0/task:2/device:CPU:0"};

static gr_session *named_session(gr_graph *g, int n, gr_error *err) {
  gr_session_options o = {.num_devices = n, .device_names = dev_names, .inter_op_threads = 2};
  return gr_session_new(g, &o, err);
}

static void test_rows(void) {
  int64_t off, size;
  int64_t want[][2] = {{0, 3}, {3, 3}, {6, 2}, {8, 2}}; /* 10 rows in 4 parts */
  for (int k = 0; k < 4; k++) {
    gr_partition_rows(10, 4, k, &off, &size);
    GR_CHECK_MSG(off == want[k][0] && size == want[k][1], "part %d: %lld+%lld", k, (long long)off,
                 (long long)size);
  }
  gr_partition_rows(1000, 1, 0, &off, &size);
  GR_CHECK(off == 0 && size == 1000);
  gr_partition_rows(7, 7, 6, &off, &size);
  GR_CHECK(off == 6 && size == 1);
}

/* The value is the initial value bit for bit; parts carry their attrs. */
static void test_value_is_concat(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_name_scope(g, "layer");
  gr_output init = gr_random_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){7, 3}), -1, 1, 5);
  gr_output parts[3];
  gr_output w = gr_partitioned_variable(g, "w", init, 3, parts);
  gr_output plain = gr_variable(g, "plain", init);
  gr_graph_pop_name_scope(g);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  GR_CHECK(w.node && strcmp(w.node->name, "layer/w") == 0);
  int64_t rows[3] = {3, 2, 2}, offs[3] = {0, 3, 5};
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "layer/w/part_%d", k);
    GR_CHECK(parts[k].node && strcmp(parts[k].node->name, name) == 0);
    GR_CHECK(strcmp(gr_node_attr_string(parts[k].node, "partition_of", ""), "layer/w") == 0);
    GR_CHECK(gr_node_attr_int(parts[k].node, "partition_offset", -1) == offs[k]);
    const gr_attr_value *fs = gr_node_attr(parts[k].node, "full_shape");
    GR_CHECK(fs && fs->shape.rank == 2 && fs->shape.dims[0] == 7 && fs->shape.dims[1] == 3);
    GR_CHECK(parts[k].node->out_shapes[0].dims[0] == rows[k]);
  }
  gr_output found[4];
  GR_CHECK_EQ_INT(gr_partitioned_parts(g, "layer/w", found, 4), 3);
  GR_CHECK(found[2].node == parts[2].node);
  GR_CHECK_EQ_INT(gr_partitioned_parts(g, "layer/plain", found, 4), 0);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out[2];
  GR_CHECK_OK(gr_session_run(s, NULL, 0, (gr_output[]){w, plain}, 2, out, NULL, 0, &err), err);
  GR_CHECK(gt_bit_equal(&out[0], &out[1]));
  GR_CHECK(out[0].shape.dims[0] == 7 && out[0].shape.dims[1] == 3);
  gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
  gr_session_free(s);
  gr_graph_free(g);
}

/* y = x @ w + b, loss = mean((y - t)^2), momentum; w partitioned or not. */
typedef struct model {
  gr_graph *g;
  gr_output x, t, w, train, parts[3];
} model;

static model build(int num_parts, int num_ps) {
  model m = {.g = gr_graph_new()};
  gr_graph *g = m.g;
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  if (num_ps) gr_graph_push_ps_placement(g, num_ps, GR_PS_ROUND_ROBIN);
  gr_output init = gr_glorot_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){11, 4}), 3);
  m.w = num_parts ? gr_partitioned_variable(g, "w", init, num_parts, m.parts)
                  : gr_variable(g, "w", init);
  gr_output b = gr_variable(g, "b", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){4})));
  if (num_ps) gr_graph_pop_device_scope(g);
  m.x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){8, 11}));
  m.t = gr_placeholder(g, "t", GR_F32, gr_shape_make(2, (int64_t[]){8, 4}));
  gr_output y = gr_add(g, gr_matmul(g, m.x, m.w, false, false), b);
  gr_output loss = gr_reduce_mean(g, gr_square(g, gr_sub(g, y, m.t)), NULL, 0, false);
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.05, .momentum = 0.9};
  m.train = gr_minimize(g, &opt, loss, NULL, 0);
  gr_graph_pop_device_scope(g);
  return m;
}

static bool train(model *m, int devices, gr_tensor *w_out) {
  gr_error err;
  gr_session *s = named_session(m->g, devices, &err);
  if (!s) {
    printf("  session: %s\n", err.msg);
    return false;
  }
  gt_rng r = {17};
  bool ok = true;
  for (int step = 0; step < 6 && ok; step++) {
    gr_tensor xv = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){8, 11}), -1, 1);
    gr_tensor tv = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){8, 4}), -1, 1);
    gr_feed f[2] = {{m->x, &xv}, {m->t, &tv}};
    ok = gr_session_run(s, f, 2, NULL, 0, NULL, &m->train, 1, &err) == GR_OK;
    if (!ok) printf("  step %d: %s\n", step, err.msg);
    gr_tensor_release(&xv), gr_tensor_release(&tv);
  }
  if (ok) ok = gr_session_run(s, NULL, 0, &m->w, 1, w_out, NULL, 0, &err) == GR_OK;
  gr_session_free(s);
  return ok;
}

/* Three parts over two ps tasks (round-robin: 0, 1, 0), slots with their
 * part; trained in a session of named devices, the weights equal the
 * unpartitioned model's bit for bit (the gradient of w is computed whole
 * and sliced, the updates are elementwise). */
static void test_training_on_ps(void) {
  model plain = build(0, 0), part = build(3, 2);
  GR_CHECK_MSG(!gr_graph_error(part.g), "%s",
               gr_graph_error(part.g) ? gr_graph_error(part.g)->msg : "");
  const char *want[3] = {"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"};
  for (int k = 0; k < 3; k++) {
    GR_CHECK_MSG(strcmp(gr_graph_resolve_device(part.g, part.parts[k].node), want[k]) == 0,
                 "part %d on %s", k, gr_graph_resolve_device(part.g, part.parts[k].node));
    char slot[32];
    snprintf(slot, sizeof slot, "w/part_%d/momentum", k);
    gr_node *sn = gr_graph_find_node(part.g, slot);
    GR_CHECK_MSG(sn && strcmp(gr_graph_resolve_device(part.g, sn), want[k]) == 0, "%s", slot);
  }
  GR_CHECK_STR_CONTAINS(part.w.node->requested_device, "/job:worker/task:0");
  gr_tensor a, b;
  GR_CHECK(train(&plain, 1, &a));
  GR_CHECK(train(&part, 3, &b));
  /* where the session put them */
  for (int k = 0; k < 3; k++) {
    const char *at = part.parts[k].node->assigned_device;
    char full[64];
    snprintf(full, sizeof full, "/job:ps/replica:0/task:%d/device:CPU:0", k == 1);
    GR_CHECK_MSG(at && strcmp(at, full) == 0, "part %d assigned to %s", k, at ? at : "(none)");
  }
  GR_CHECK(gt_bit_equal(&a, &b));
  /* and training moved them */
  model fresh = build(0, 0);
  gr_error err;
  gr_session *s = named_session(fresh.g, 1, &err);
  gr_tensor w0 = gr_tensor_empty();
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &fresh.w, 1, &w0, NULL, 0, &err), err);
  double moved = 0;
  for (int64_t i = 0; w0.buf && i < 44; i++)
    moved = fmax(moved, fabs(gr_tensor_get_f64(&w0, i) - gr_tensor_get_f64(&b, i)));
  GR_CHECK_MSG(moved > 1e-3, "training moved w by %g", moved);
  gr_session_free(s);
  gr_tensor_release(&w0), gr_tensor_release(&a), gr_tensor_release(&b);
  gr_graph_free(fresh.g), gr_graph_free(plain.g), gr_graph_free(part.g);
}

/* d loss / d part by gr_gradients against central differences, each part
 * set through an assign from a placeholder (f64). */
static void test_gradient_fd(void) {
  gr_graph *g = gr_graph_new();
  gt_rng r = {3};
  gr_shape full = gr_shape_make(2, (int64_t[]){5, 3});
  gr_tensor w0 = gt_random(&r, GR_F64, full, -1, 1);
  gr_tensor xv = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){4, 5}), -1, 1);
  gr_output parts[2];
  gr_output w = gr_partitioned_variable(g, "w", gr_const(g, &w0), 2, parts);
  gr_output x = gr_const(g, &xv);
  gr_output loss =
      gr_reduce_sum(g, gr_tanh(g, gr_matmul(g, x, gr_square(g, w), false, false)), NULL, 0, false);
  gr_output dp[2], ph[2], set[2];
  GR_CHECK(gr_gradients(g, &loss, 1, parts, 2, NULL, false, dp) == GR_OK);
  for (int k = 0; k < 2; k++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", k);
    ph[k] = gr_placeholder(g, name, GR_F64, parts[k].node->out_shapes[0]);
    set[k] = gr_assign(g, parts[k], ph[k]);
  }
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor grad[2], pv[2];
  GR_CHECK_OK(gr_session_run(s, NULL, 0, dp, 2, grad, NULL, 0, &err), err);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, parts, 2, pv, NULL, 0, &err), err);
  const double eps = 1e-6;
  int checked = 0;
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < gr_shape_num_elements(&pv[k].shape); i++) {
      double loss_at[2];
      for (int side = 0; side < 2; side++) {
        gr_tensor t[2];
        for (int j = 0; j < 2; j++) {
          t[j] = gt_zeros(GR_F64, pv[j].shape);
          memcpy(gr_tensor_data(&t[j]), gr_tensor_data(&pv[j]), gr_tensor_num_bytes(&pv[j]));
        }
        ((double *)gr_tensor_data(&t[k]))[i] += side ? eps : -eps;
        gr_feed f[2] = {{ph[0], &t[0]}, {ph[1], &t[1]}};
        gr_tensor l;
        GR_CHECK_OK(gr_session_run(s, f, 2, NULL, 0, NULL, set, 2, &err), err);
        GR_CHECK_OK(gr_session_run(s, NULL, 0, &loss, 1, &l, NULL, 0, &err), err);
        loss_at[side] = gr_tensor_get_f64(&l, 0);
        gr_tensor_release(&l), gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
      }
      double fd = (loss_at[1] - loss_at[0]) / (2 * eps);
      double an = ((const double *)gr_tensor_data(&grad[k]))[i];
      GR_CHECK_MSG(fabs(fd - an) <= 1e-6 * (1 + fabs(fd)), "part %d [%lld]: fd %g, analytic %g", k,
                   (long long)i, fd, an);
      checked++;
    }
  GR_CHECK_EQ_INT(checked, 15);
  for (int k = 0; k < 2; k++) gr_tensor_release(&grad[k]), gr_tensor_release(&pv[k]);
  gr_tensor_release(&w0), gr_tensor_release(&xv);
  gr_session_free(s);
  (void)w;
  gr_graph_free(g);
}

static void expect_error(int parts, gr_dtype dt, gr_shape sh, const char *want) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_name_scope(g, "emb");
  gr_output init = gr_zeros(g, dt, sh);
  gr_output w = gr_partitioned_variable(g, "table", init, parts, NULL);
  GR_CHECK(!w.node && gr_graph_error(g));
  if (gr_graph_error(g)) {
    GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "partitioned variable 'emb/table'");
    GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, want);
  }
  gr_graph_free(g);
}

static void test_bad_input(void) {
  gr_shape m = gr_shape_make(2, (int64_t[]){3, 2});
  expect_error(0, GR_F32, m, "the number of parts must be 1..4096, got 0");
  expect_error(-2, GR_F32, m, "got -2");
  expect_error(4, GR_F32, m, "4 parts of a value with 3 rows [3, 2]: a part needs a row");
  expect_error(2, GR_I32, m, "is i32; a partitioned variable is f32 or f64");
  expect_error(1, GR_F64, gr_shape_scalar(), "fully known shape of rank >= 1");
  /* a name taken */
  gr_graph *g = gr_graph_new();
  gr_placeholder(g, "w", GR_F32, m);
  GR_CHECK(!gr_partitioned_variable(g, "w", gr_zeros(g, GR_F32, m), 2, NULL).node);
  GR_CHECK(gr_graph_error(g));
  if (gr_graph_error(g)) GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "a node of that name");
  gr_graph_free(g);
}

/* The DSL form, next to ps_variables: trains as the unpartitioned model. */
static const char *dsl_model(const char *w_line) {
  static char src[1024];
  snprintf(src, sizeof src,
           "ps_variables(2) {\n"
           "  %s\n"
           "  b = variable(zeros([3]))\n"
           "}\n"
           "x = const([[1, 2, 3, 4, 5], [2, 3, 4, 5, 6], [1, 1, 1, 1, 0], [0, 1, 0, 1, 2]])\n"
           "y = const([[1, 0, 1], [2, 1, 0], [3, 1, 1], [4, 0, 2]])\n"
           "loss = reduce_mean((x @ w + b - y) ** 2)\n"
           "train = minimize(loss, adam(0.01))\n",
           w_line);
  return src;
}

static bool dsl_train(const char *src, gr_tensor *w_out, bool check_parts) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  bool ok = gr_dsl_load_string("t.gr", src, g, NULL, &p, &err) == GR_OK;
  if (!ok) printf("  load: %s\n", err.msg);
  gr_output w = {0}, train = {0};
  ok = ok && gr_dsl_lookup(p, "w", &w) && gr_dsl_lookup(p, "train", &train);
  if (ok && check_parts) {
    gr_output parts[2];
    GR_CHECK_EQ_INT(gr_partitioned_parts(g, "w", parts, 2), 2);
    GR_CHECK(strcmp(parts[0].node->requested_device, "/job:ps/task:0") == 0);
    GR_CHECK(strcmp(parts[1].node->requested_device, "/job:ps/task:1") == 0);
    GR_CHECK(gr_graph_find_node(g, "w/part_1/adam_m") != NULL);
  }
  gr_session_options o = {.soft_placement = true, .inter_op_threads = 2};
  gr_session *s = ok ? gr_session_new(g, &o, &err) : NULL;
  for (int i = 0; s && ok && i < 5; i++)
    ok = gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err) == GR_OK;
  ok = ok && s && gr_session_run(s, NULL, 0, &w, 1, w_out, NULL, 0, &err) == GR_OK;
  if (!ok) printf("  %s\n", err.msg);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return ok;
}

static void test_dsl(void) {
  gr_tensor a, b;
  GR_CHECK(dsl_train(dsl_model("w = variable(glorot_uniform([5, 3]))"), &a, false));
  GR_CHECK(
      dsl_train(dsl_model("w = partitioned_variable(glorot_uniform([5, 3]), parts=2)"), &b, true));
  GR_CHECK(gt_bit_equal(&a, &b));
  gr_tensor_release(&a), gr_tensor_release(&b);
  struct {
    const char *src, *want;
  } cases[] = {
      {"w = partitioned_variable(zeros([4, 2]))\n",
       "t.gr:1:5: error: partitioned_variable takes an initial value and the number of parts"},
      {"partitioned_variable(zeros([4, 2]), parts=2)\n", "partitioned_variable needs a name"},
      {"w = partitioned_variable(zeros([4, 2]), parts=0)\n",
       "partitioned variable 'w': the number of parts must be 1..4096, got 0"},
      {"w = partitioned_variable(zeros([4, 2]), parts=5)\n",
       "partitioned variable 'w': 5 parts of a value with 4 rows"},
      {"w = partitioned_variable(zeros([4, 2]), parts=2, axis=1)\n", "axis"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gr_error err;
    GR_CHECK(gt_dsl_error(cases[i].src, &err));
    GR_CHECK_STR_CONTAINS(err.msg, cases[i].want);
  }
}

/* A model of w [11, 4] in num_parts parts (0: a plain variable) on a
 * session of one device, each variable set to a known value. */
static gr_graph *ckpt_graph(int num_parts, gr_session **s, gr_output *w, gr_tensor *full) {
  gr_graph *g = gr_graph_new();
  *w = num_parts ? gr_partitioned_variable(g, "w", gr_const(g, full), num_parts, NULL)
                 : gr_variable(g, "w", gr_const(g, full));
  gr_variable(g, "b", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){4})));
  gr_error err;
  *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(*s != NULL, "%s", err.msg);
  return g;
}

/* Saved with 2 parts, the checkpoint holds w whole ([11, 4]: what `graphrun
 * ckpt ls/show/export` list and read); it restores into 3 parts (another
 * number of ps tasks), into a plain variable, and back. */
static void test_checkpoint_parts(void) {
  char dir[] = "/tmp/gr_part_ckptXXXXXX", path[64];
  GR_CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/run.ckpt", dir);
  gt_rng r = {9};
  gr_tensor full = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){11, 4}), -1, 1);
  gr_tensor zero = gt_zeros(GR_F32, full.shape);
  gr_error err;
  gr_session *s;
  gr_output w;
  gr_graph *g = ckpt_graph(2, &s, &w, &full);
  gr_ckpt *ck;
  GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
  GR_CHECK_OK(gr_session_init_variables(s, &err), err);
  GR_CHECK_OK(gr_ckpt_save_session(ck, s, g, NULL, &err), err);
  gr_session_free(s), gr_graph_free(g);
  gr_ckpt_tensor_info *infos;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &infos, &n, &err), err);
  GR_CHECK_EQ_INT(n, 2);
  if (n == 2) {
    GR_CHECK(strcmp(infos[0].name, "b") == 0 && strcmp(infos[1].name, "w") == 0);
    GR_CHECK(infos[1].shape.rank == 2 && infos[1].shape.dims[0] == 11);
  }
  gr_ckpt_tensor_infos_free(infos, n);
  gr_tensor got;
  GR_CHECK_OK(gr_ckpt_read_tensor(ck, -1, "w", &got, &err), err);
  GR_CHECK(gt_bit_equal(&got, &full));
  gr_tensor_release(&got);
  /* into 3 parts, and into a plain w: each starts from zeros */
  for (int parts = 3; parts >= 0; parts -= 3) {
    g = ckpt_graph(parts, &s, &w, &zero);
    int64_t step = -1;
    GR_CHECK_OK(gr_ckpt_restore_latest(ck, s, g, &step, &err), err);
    gr_tensor v = gr_tensor_empty();
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &v, NULL, 0, &err), err);
    GR_CHECK_MSG(gt_bit_equal(&v, &full), "restored into %d parts", parts);
    gr_tensor_release(&v);
    if (parts == 3) { /* and saved again from 3 parts: still whole */
      GR_CHECK_OK(gr_ckpt_save_session(ck, s, g, NULL, &err), err);
      GR_CHECK_OK(gr_ckpt_read_tensor(ck, -1, "w", &got, &err), err);
      GR_CHECK(gt_bit_equal(&got, &full));
      gr_tensor_release(&got);
    }
    gr_session_free(s), gr_graph_free(g);
  }
  /* a whole of another shape is an error naming it, and changes nothing */
  g = gr_graph_new();
  gr_tensor other = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){12, 4}));
  w = gr_partitioned_variable(g, "w", gr_const(g, &other), 2, NULL);
  gr_variable(g, "b", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){4})));
  s = gr_session_new(g, NULL, &err);
  GR_CHECK(gr_ckpt_restore_latest(ck, s, g, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "w (checkpoint f32 [11, 4], graph f32 [12, 4])");
  gr_session_free(s), gr_graph_free(g);
  gr_tensor_release(&other);
  gr_ckpt_close(ck);
  gr_tensor_release(&full), gr_tensor_release(&zero);
  gt_remove_tree(dir);
}

int main(void) {
  GR_RUN(test_rows);
  GR_RUN(test_value_is_concat);
  GR_RUN(test_training_on_ps);
  GR_RUN(test_gradient_fd);
  GR_RUN(test_bad_input);
  GR_RUN(test_dsl);
  GR_RUN(test_checkpoint_parts);
  return gr_test_finish();
}
