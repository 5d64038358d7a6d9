/* Sessions: feeds, fetches, targets, pruning, control dependencies,
 * variables across runs, the prepared-executor cache, devices, and a failing
 * kernel cancelling its step. */
#include <graphrun.h>

#include "gr_test.h"

static gr_tensor scalar(float v) {
  return gr_tensor_scalar_f32(v);
}

static void test_feeds_fetches(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y = gr_placeholder(g, "y", GR_F32, gr_shape_scalar());
  gr_output s = gr_add(g, x, y);
  gr_output p = gr_mul(g, s, x);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor xv = scalar(3), yv = scalar(4);
  gr_feed feeds[] = {{x, &xv}, {y, &yv}};
  gr_tensor out[3];
  GR_CHECK_OK(gr_session_run(sess, feeds, 2, (gr_output[]){s, p, s}, 3, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 7, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[1], 0), 21, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[2], 0), 7, 0);
  for (int i = 0; i < 3; i++) gr_tensor_release(&out[i]);
  /* feeding an intermediate value overrides it; fetching a fed value returns it */
  gr_tensor sv = scalar(100);
  gr_feed f2[] = {{s, &sv}, {x, &xv}};
  GR_CHECK_OK(gr_session_run(sess, f2, 2, (gr_output[]){p, x}, 2, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 300, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[1], 0), 3, 0);
  gr_tensor_release(&out[0]);
  gr_tensor_release(&out[1]);
  gr_tensor_release(&xv);
  gr_tensor_release(&yv);
  gr_tensor_release(&sv);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_pruning(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output unused = gr_placeholder(g, "unused", GR_F32, gr_shape_scalar());
  gr_output a = gr_add(g, x, gr_const_f32(g, 1));
  gr_output b = gr_mul(g, unused, gr_const_f32(g, 2));
  gr_output c = gr_name(g, gr_add(g, a, b), "c");
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor xv = scalar(5), out;
  gr_feed f = {x, &xv};
  /* 'unused' is not needed for a: no error */
  GR_CHECK_OK(gr_session_run(sess, &f, 1, &a, 1, &out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 6, 0);
  gr_tensor_release(&out);
  /* but c needs it: the error names the placeholder and who needs it */
  GR_CHECK(gr_session_run(sess, &f, 1, &c, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "'unused'");
  GR_CHECK_STR_CONTAINS(err.msg, "must be fed");
  GR_CHECK_STR_CONTAINS(err.msg, b.node->name);
  GR_CHECK(out.buf == NULL);
  gr_tensor_release(&xv);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_targets_and_control_deps(void) {
  gr_graph *g = gr_graph_new();
  gr_output v = gr_variable(g, "counter", gr_const_f32(g, 0));
  gr_output inc = gr_assign_add(g, v, gr_const_f32(g, 1));
  gr_output w = gr_variable(g, "other", gr_const_f32(g, 10));
  gr_output dec = gr_assign_sub(g, w, gr_const_f32(g, 2));
  gr_output step = gr_group(g, "step", (gr_output[]){inc, dec}, 2);
  /* a node that must run after the step, via a control dependency */
  gr_graph_push_control_deps(g, &step, 1);
  gr_output after = gr_identity(g, gr_const_f32(g, 42));
  gr_graph_pop_control_deps(g);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  for (int i = 0; i < 5; i++)
    GR_CHECK_OK(gr_session_run(sess, NULL, 0, NULL, 0, NULL, &step, 1, &err), err);
  gr_tensor out[2];
  GR_CHECK_OK(gr_session_run(sess, NULL, 0, (gr_output[]){v, w}, 2, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 5, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[1], 0), 0, 0);
  gr_tensor_release(&out[0]);
  gr_tensor_release(&out[1]);
  /* fetching `after` runs the step it depends on */
  GR_CHECK_OK(gr_session_run(sess, NULL, 0, &after, 1, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 42, 0);
  gr_tensor_release(&out[0]);
  GR_CHECK_OK(gr_session_run(sess, NULL, 0, &v, 1, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 6, 0);
  gr_tensor_release(&out[0]);
  gr_session_free(sess);
  /* a new session starts from the initialisers again */
  sess = gr_session_new(g, NULL, &err);
  GR_CHECK_OK(gr_session_run(sess, NULL, 0, &v, 1, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), 0, 0);
  gr_tensor_release(&out[0]);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_cache(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y = gr_square(g, x);
  gr_output z = gr_neg(g, y);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor xv = scalar(3), out;
  gr_feed f = {x, &xv};
  for (int i = 0; i < 10; i++) {
    GR_CHECK_OK(gr_session_run(sess, &f, 1, &y, 1, &out, NULL, 0, &err), err);
    gr_tensor_release(&out);
  }
  GR_CHECK_EQ_INT(gr_session_num_cached(sess), 1);
  GR_CHECK_OK(gr_session_run(sess, &f, 1, &z, 1, &out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), -9, 0);
  gr_tensor_release(&out);
  GR_CHECK_EQ_INT(gr_session_num_cached(sess), 2);
  /* nodes added after the session was created are usable */
  gr_output w = gr_add(g, z, x);
  GR_CHECK_OK(gr_session_run(sess, &f, 1, &w, 1, &out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), -6, 0);
  gr_tensor_release(&out);
  GR_CHECK_EQ_INT(gr_session_step(sess), 12);
  gr_tensor_release(&xv);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_failing_kernel_cancels(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_I32, (gr_shape){1, {4}});
  gr_output b = gr_placeholder(g, "b", GR_I32, (gr_shape){1, {4}});
  gr_output q = gr_name(g, gr_div(g, a, b), "quotient");
  gr_output r = gr_add(g, gr_mul(g, q, a), b);
  gr_output other = gr_add(g, a, a);
  gr_error err;
  gr_session_options opts = {.inter_op_threads = 2};
  gr_session *sess = gr_session_new(g, &opts, &err);
  int32_t av[4] = {1, 2, 3, 4}, bz[4] = {1, 0, 1, 1}, bg[4] = {1, 1, 1, 1};
  gr_tensor at, bt;
  gr_tensor_from_data(&at, GR_I32, &(gr_shape){1, {4}}, av, &err);
  gr_tensor_from_data(&bt, GR_I32, &(gr_shape){1, {4}}, bz, &err);
  gr_feed f[] = {{a, &at}, {b, &bt}};
  gr_tensor out[2] = {gr_tensor_empty(), gr_tensor_empty()};
  gr_buffer_pool_stats before, after;
  gr_buffer_pool_get_stats(&before);
  GR_CHECK(gr_session_run(sess, f, 2, (gr_output[]){r, other}, 2, out, NULL, 0, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'quotient'");
  GR_CHECK_STR_CONTAINS(err.msg, "division by zero");
  GR_CHECK(out[0].buf == NULL && out[1].buf == NULL); /* no half results */
  gr_buffer_pool_get_stats(&after);
  GR_CHECK_EQ_INT(after.live_bytes, before.live_bytes); /* nothing leaked by the cancelled step */
  /* the session is still usable */
  gr_tensor_release(&bt);
  gr_tensor_from_data(&bt, GR_I32, &(gr_shape){1, {4}}, bg, &err);
  GR_CHECK_OK(gr_session_run(sess, f, 2, (gr_output[]){r, other}, 2, out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 3), 17, 0);
  gr_tensor_release(&out[0]);
  gr_tensor_release(&out[1]);
  gr_tensor_release(&at);
  gr_tensor_release(&bt);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_devices(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1);
  gr_graph_push_device_scope(g, "/device:CPU:2");
  gr_output b = gr_add(g, a, a);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output c = gr_add(g, b, a);
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session_options opts = {.num_devices = 3};
  gr_session *sess = gr_session_new(g, &opts, &err);
  GR_CHECK_EQ_INT(gr_session_num_devices(sess), 3);
  gr_tensor out;
  GR_CHECK_OK(gr_session_run(sess, NULL, 0, &b, 1, &out, NULL, 0, &err), err);
  gr_tensor_release(&out);
  GR_CHECK(strcmp(b.node->assigned_device, "/job:localhost/replica:0/task:0/device:CPU:2") == 0);
  GR_CHECK(strcmp(a.node->assigned_device, "/job:localhost/replica:0/task:0/device:CPU:0") == 0);
  GR_CHECK(gr_session_run(sess, NULL, 0, &c, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, c.node->name);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:worker/task:1");
  GR_CHECK_STR_CONTAINS(err.msg, "device:CPU:2"); /* lists the devices that exist */
  gr_session_free(sess);
  /* with one device, CPU:2 does not exist */
  sess = gr_session_new(g, NULL, &err);
  GR_CHECK(gr_session_run(sess, NULL, 0, &b, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "matches no device");
  gr_session_free(sess);
  gr_graph_free(g);
}

static void test_threads_agree(void) {
  /* a wide-and-deep graph gives identical results on 1 and 4 inter-op threads */
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {64, 64}});
  gr_output acc[8];
  for (int k = 0; k < 8; k++) {
    gr_output h = x;
    for (int d = 0; d < 6; d++) h = gr_tanh(g, gr_matmul(g, h, x, false, d % 2 == 1));
    acc[k] = h;
  }
  gr_output total = gr_add_n(g, acc, 8);
  gr_tensor xv;
  gr_error err;
  gr_tensor_alloc(&xv, GR_F32, &(gr_shape){2, {64, 64}}, &err);
  for (int i = 0; i < 64 * 64; i++)
    ((float *)gr_tensor_data(&xv))[i] = (float)((i * 37 % 101) - 50) / 400.0f;
  gr_tensor out[2];
  int threads[2] = {1, 4};
  for (int t = 0; t < 2; t++) {
    gr_session_options opts = {.inter_op_threads = threads[t]};
    gr_session *sess = gr_session_new(g, &opts, &err);
    gr_feed f = {x, &xv};
    GR_CHECK_OK(gr_session_run(sess, &f, 1, &total, 1, &out[t], NULL, 0, &err), err);
    gr_session_free(sess);
  }
  GR_CHECK(memcmp(gr_tensor_data(&out[0]), gr_tensor_data(&out[1]), 64 * 64 * 4) == 0);
  gr_tensor_release(&out[0]);
  gr_tensor_release(&out[1]);
  gr_tensor_release(&xv);
  gr_graph_free(g);
}

/* gr_session_check_feeds finds what gr_session_run would refuse before
 * running, and runs nothing. */
static void test_check_feeds(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y = gr_name(g, gr_mul(g, x, gr_const_f32(g, 2)), "y");
  gr_output k = gr_name(g, gr_const_f32(g, 7), "k");
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor xv = scalar(3);
  gr_feed f[2] = {{x, &xv}, {x, &xv}};
  GR_CHECK_OK(gr_session_check_feeds(s, f, 1, &y, 1, NULL, 0, &err), err);
  GR_CHECK_OK(gr_session_check_feeds(s, NULL, 0, &k, 1, NULL, 0, &err), err);
  GR_CHECK(gr_session_check_feeds(s, NULL, 0, &y, 1, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "placeholder 'x' must be fed: it is needed by 'y'");
  GR_CHECK(gr_session_check_feeds(s, NULL, 0, NULL, 0, &y, 1, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_session_check_feeds(s, f, 2, &y, 1, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "'x' is fed twice");
  GR_CHECK_EQ_INT(gr_session_step(s), 0); /* nothing ran */
  GR_CHECK_EQ_INT(gr_session_num_cached(s), 0);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

typedef struct notes {
  int n;
  char last[GR_ERROR_MSG_MAX];
} notes;
static void take_note(void *arg, const char *msg) {
  notes *ns = arg;
  ns->n++;
  snprintf(ns->last, sizeof ns->last, "%s", msg);
}

/* Soft placement: pins to devices the session does not have run on its own
 * devices (same index where there is one), each spec noted once; without
 * it the error names the option. */
static void test_soft_placement(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:1/device:CPU:1");
  gr_output a = gr_name(g, gr_const_f32(g, 2), "a");
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:ps/task:0");
  gr_output b = gr_name(g, gr_mul(g, a, gr_const_f32(g, 3)), "b");
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_tensor out;
  gr_session_options o = {.num_devices = 2};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK(gr_session_run(s, NULL, 0, &b, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "matches no device of this session");
  GR_CHECK_STR_CONTAINS(err.msg,
                        "graphrun run --soft-placement; gr_session_options.soft_placement");
  gr_session_free(s);
  notes ns = {0, ""};
  o = (gr_session_options){
      .num_devices = 2, .soft_placement = true, .log_fn = take_note, .log_arg = &ns};
  s = gr_session_new(g, &o, &err);
  for (int step = 0; step < 2; step++) {
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &b, 1, &out, NULL, 0, &err), err);
    GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 6, 0);
    gr_tensor_release(&out);
  }
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &a, 1, &out, NULL, 0, &err), err);
  gr_tensor_release(&out);
  GR_CHECK_EQ_INT(ns.n, 2); /* one note per spec, however many runs */
  GR_CHECK_STR_CONTAINS(ns.last, "soft placement: no device of this session matches");
  GR_CHECK(strcmp(a.node->assigned_device, "/job:localhost/replica:0/task:0/device:CPU:1") == 0);
  GR_CHECK(strcmp(b.node->assigned_device, "/job:localhost/replica:0/task:0/device:CPU:0") == 0);
  gr_session_free(s);
  gr_graph_free(g);
}

/* GPU pins (/gpu:N, /device:GPU:N, as TensorFlow programs write them):
 * without soft placement an error that names the option; with it they run
 * on the CPUs with one note for all of them, whatever the GPU index. */
static void test_gpu_pins(void) {
  gr_graph *g = gr_graph_new();
  GR_CHECK_OK(gr_graph_push_device_scope(g, "/gpu:0"), *gr_graph_error(g));
  gr_output a = gr_name(g, gr_const_f32(g, 2), "a");
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:localhost/device:GPU:1");
  gr_output b = gr_name(g, gr_mul(g, a, gr_const_f32(g, 3)), "b");
  gr_graph_pop_device_scope(g);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_error err;
  gr_tensor out;
  gr_session_options o = {.num_devices = 2};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK(gr_session_run(s, NULL, 0, &b, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "is pinned to '/device:GPU:");
  GR_CHECK_STR_CONTAINS(err.msg, "this build has no GPU; soft placement runs GPU pins on a CPU");
  GR_CHECK_STR_CONTAINS(err.msg, "graphrun run --soft-placement");
  gr_session_free(s);
  notes ns = {0, ""};
  o = (gr_session_options){
      .num_devices = 2, .soft_placement = true, .log_fn = take_note, .log_arg = &ns};
  s = gr_session_new(g, &o, &err);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &b, 1, &out, NULL, 0, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 6, 0);
  gr_tensor_release(&out);
  GR_CHECK_EQ_INT(ns.n, 1); /* one note for both GPUs */
  GR_CHECK_STR_CONTAINS(ns.last, "this build has no GPU: the nodes pinned to GPUs run on this "
                                 "session's CPUs");
  GR_CHECK(strstr(a.node->assigned_device, "/device:CPU:") != NULL);
  GR_CHECK(strstr(b.node->assigned_device, "/device:CPU:") != NULL);
  gr_session_free(s);
  gr_graph_free(g);
}

/* A run with nothing to feed, fetch or run does nothing, twice (the second
 * from the cache of prepared runs), without reading past its signature. */
static void test_empty_run(void) {
  gr_graph *g = gr_graph_new();
  gr_const_f32(g, 1);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  for (int i = 0; i < 2; i++)
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, NULL, 0, &err), err);
  gr_session_free(s);
  gr_graph_free(g);
}

/* Devices by name: a graph pinned to tasks of a cluster runs in one process
 * on executors named as those tasks' devices, values crossing between them. */
static void test_named_devices(void) {
  static const char *const names[] = {"/job:ps/replica:0/task:0/device:CPU:0",
                                      "/job:worker/replica:0/task:1/device:CPU:0"};
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:ps/task:0");
  gr_output x = gr_add(g, gr_const_f32(g, 2), gr_const_f32(g, 3)); /* computed there, sent */
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output y = gr_add(g, x, gr_const_f32(g, 300));
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session_options o = {.num_devices = 2, .device_names = names};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (s) {
    gr_tensor t;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &y, 1, &t, NULL, 0, &err), err);
    GR_CHECK(gr_tensor_get_f64(&t, 0) == 305);
    gr_tensor_release(&t);
    GR_CHECK_EQ_INT(gr_session_last_transfers(s).sends, 1);
    gr_session_free(s);
  }
  /* a partial name, a duplicate, a missing name */
  static const char *const partial[] = {"/job:ps/task:0", "/job:worker/replica:0/task:1/cpu:0"};
  static const char *const dup[] = {names[1], names[1]};
  static const char *const none[] = {names[0], NULL};
  const char *const *bad[] = {partial, dup, none};
  const char *want[] = {"'/job:ps/task:0' is not a full device name", "devices 0 and 1 are both",
                        "session device 1: no name"};
  for (int i = 0; i < 3; i++) {
    o.device_names = bad[i];
    GR_CHECK(gr_session_new(g, &o, &err) == NULL);
    GR_CHECK_STR_CONTAINS(err.msg, want[i]);
  }
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_empty_run);
  GR_RUN(test_named_devices);
  GR_RUN(test_feeds_fetches);
  GR_RUN(test_check_feeds);
  GR_RUN(test_pruning);
  GR_RUN(test_targets_and_control_deps);
  GR_RUN(test_cache);
  GR_RUN(test_failing_kernel_cancels);
  GR_RUN(test_devices);
  GR_RUN(test_soft_placement);
  GR_RUN(test_gpu_pins);
  GR_RUN(test_threads_agree);
  return gr_test_finish();
}
