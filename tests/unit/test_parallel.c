/* Parallel training as graph construction (ops/parallel.c), in one process
 * whose devices carry cluster names (gr_session_options.device_names: the
 * partitions run as they will on a cluster): variables on parameter servers
 * (round-robin, greedy by bytes, slots following, explicit pins winning),
 * the ring all-reduce (values, bit-identical results on every device, the
 * bytes each device sends, fusion, its gradient), in-graph replicas with
 * the gradients added on the ps, mirrored variables kept equal by the
 * all-reduce, micro-batches, and the DSL forms with their errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

#define MAXDEV 6
static const char *const worker_names[MAXDEV] = {
    "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0",
    "/job:worker/replica:0/task:2/device:CPU:0", "/job:worker/replica:0/task:3/device:CPU:0",
    "/job:ps/replica:0/task:0/device:CPU:0",     "/job:ps/replica:0/task:1/device:CPU:0"};

static gr_session *named_session(gr_graph *g, const char *const *names, int n, gr_error *err) {
  gr_session_options o = {.num_devices = n, .device_names = names, .inter_op_threads = 2};
  return gr_session_new(g, &o, err);
}

/* ---- variables on parameter servers ----------------------------------------------------- */

static void test_ps_round_robin_and_slots(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  GR_CHECK(gr_graph_push_ps_placement(g, 2, GR_PS_ROUND_ROBIN) == GR_OK);
  gr_output w[4];
  for (int i = 0; i < 4; i++) {
    char name[8];
    snprintf(name, sizeof name, "w%d", i);
    w[i] = gr_variable(g, name, gr_zeros(g, GR_F64, gr_shape_make(1, (int64_t[]){3})));
  }
  gr_graph_push_device_scope(g, "/job:worker/task:1"); /* an explicit pin inside wins */
  gr_output pinned =
      gr_variable(g, "pinned", gr_zeros(g, GR_F64, gr_shape_make(1, (int64_t[]){3})));
  gr_graph_pop_device_scope(g);
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(1, (int64_t[]){3}));
  gr_output y = gr_add(g, gr_add(g, gr_mul(g, x, w[0]), w[1]), gr_add(g, w[2], w[3]));
  gr_output loss = gr_reduce_sum(g, gr_square(g, gr_add(g, y, pinned)), NULL, 0, false);
  gr_graph_pop_device_scope(g); /* the ps placement */
  /* slots are made where their variable lives, whatever scope minimize runs in */
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.1, .momentum = 0.9};
  gr_output train = gr_minimize(g, &opt, loss, NULL, 0);
  gr_graph_pop_device_scope(g);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  const char *want[4] = {"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:1"};
  for (int i = 0; i < 4; i++) {
    GR_CHECK_MSG(strcmp(w[i].node->requested_device, want[i]) == 0, "w%d on '%s'", i,
                 w[i].node->requested_device);
    char slot[32];
    snprintf(slot, sizeof slot, "w%d/momentum", i);
    gr_node *s = gr_graph_find_node(g, slot);
    GR_CHECK(s && strcmp(gr_graph_resolve_device(g, s), want[i]) == 0);
  }
  GR_CHECK_STR_CONTAINS(pinned.node->requested_device, "/job:worker/task:1");
  GR_CHECK_STR_CONTAINS(gr_graph_resolve_device(g, gr_graph_find_node(g, "pinned/momentum")),
                        "/job:worker/task:1");
  GR_CHECK_STR_CONTAINS(y.node->requested_device, "/job:worker/task:0"); /* computation */
  /* it runs: 2 workers, 2 ps */
  const char *names[4] = {worker_names[0], worker_names[1], worker_names[4], worker_names[5]};
  gr_error err;
  gr_session *s = named_session(g, names, 4, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (s) {
    gr_tensor xv = gt_make(GR_F64, gr_shape_make(1, (int64_t[]){3}), (double[]){1, 2, 3});
    gr_feed f = {x, &xv};
    gr_tensor l0, l1;
    GR_CHECK_OK(gr_session_run(s, &f, 1, &loss, 1, &l0, &train, 1, &err), err);
    GR_CHECK_OK(gr_session_run(s, &f, 1, &loss, 1, &l1, NULL, 0, &err), err);
    GR_CHECK(gr_tensor_get_f64(&l0, 0) == 0 && gr_tensor_get_f64(&l1, 0) == 0);
    GR_CHECK(gr_session_last_transfers(s).sends > 0);
    gr_tensor_release(&l0), gr_tensor_release(&l1), gr_tensor_release(&xv);
    gr_session_free(s);
  }
  gr_graph_free(g);
}

/* Slots made inside the placement are not variables of their own: the
 * round-robin goes on where the model's variables left it. */
static void test_ps_slots_not_counted(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_ps_placement(g, 3, GR_PS_ROUND_ROBIN);
  gr_output a0 = gr_variable(g, "a0", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){2})));
  gr_output a1 = gr_variable(g, "a1", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){2})));
  gr_output loss = gr_reduce_sum(g, gr_mul(g, a0, a1), NULL, 0, false);
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.1, .momentum = 0.9};
  gr_minimize(g, &opt, loss, NULL, 0);
  gr_output a2 = gr_variable(g, "a2", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){2})));
  gr_graph_pop_device_scope(g);
  GR_CHECK(!gr_graph_error(g));
  GR_CHECK(strcmp(a2.node->requested_device, "/job:ps/task:2") == 0);
  GR_CHECK(strcmp(gr_graph_resolve_device(g, gr_graph_find_node(g, "a1/momentum")),
                  "/job:ps/task:1") == 0);
  gr_graph_free(g);
}

static void test_ps_greedy_and_errors(void) {
  gr_graph *g = gr_graph_new();
  GR_CHECK(gr_graph_push_ps_placement(g, 3, GR_PS_GREEDY_BYTES) == GR_OK);
  int64_t sizes[] = {1000, 10, 10, 600, 500, 20};
  int want[] = {0, 1, 2, 1, 2, 2}; /* loads: 1000 | 10 -> 610 | 10 -> 510 -> 530 */
  for (int i = 0; i < 6; i++) {
    char name[8];
    snprintf(name, sizeof name, "v%d", i);
    gr_output v = gr_variable(g, name, gr_zeros(g, GR_F32, gr_shape_make(1, &sizes[i])));
    char dev[32];
    snprintf(dev, sizeof dev, "/job:ps/task:%d", want[i]);
    GR_CHECK_MSG(v.node && strcmp(v.node->requested_device, dev) == 0, "v%d on '%s', want %s", i,
                 v.node ? v.node->requested_device : "?", dev);
    gr_node *init = gr_graph_find_node(g, gr_node_attr_string(v.node, "initializer", ""));
    GR_CHECK(init && strcmp(gr_graph_resolve_device(g, init), dev) == 0);
  }
  gr_graph_pop_device_scope(g);
  gr_output after = gr_variable(g, "after", gr_zeros(g, GR_F32, gr_shape_scalar()));
  GR_CHECK(after.node && after.node->requested_device[0] == '\0');
  GR_CHECK(!gr_graph_error(g));
  GR_CHECK(gr_graph_push_ps_placement(g, 0, GR_PS_ROUND_ROBIN) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "the number of ps tasks must be 1..4096, got 0");
  gr_graph_free(g);
}

/* ---- ring all-reduce ------------------------------------------------------------------------ */

/* Small integers: every order of addition gives the same sum exactly. */
static double value_at(int d, int64_t i) {
  return (double)((i * 7 + d * 13) % 17) - 8.0;
}

/* values on n named devices; checks every output against the exact sum
 * (or the sum divided by n, as the ring divides), the same bits on every
 * device, and the bytes sent: chunk c goes n - 1 times around the ring in
 * each phase, so device d sends all but chunks d + 1 and d + 2. */
/* The graph ring's piece option (GRAPHRUN_ALL_REDUCE_PIECE when set, as a
 * user's environment gives it), for check_ring's count of sends. */
static int64_t piece_bytes(void) {
  const char *v = getenv("GRAPHRUN_ALL_REDUCE_PIECE");
  return v && v[0] ? atoll(v) : GR_ALL_REDUCE_PIECE_BYTES;
}

static void check_ring(int n, int64_t size, gr_dtype dt, gr_reduction op) {
  gr_graph *g = gr_graph_new();
  gr_output x[MAXDEV], out[MAXDEV];
  gr_shape sh = size == 7 ? gr_shape_make(2, (int64_t[]){1, 7}) : gr_shape_make(1, &size);
  size_t es = gr_dtype_size(dt);
  for (int d = 0; d < n; d++) {
    gr_tensor t;
    gr_error e;
    gr_tensor_alloc(&t, dt, &sh, &e);
    for (int64_t i = 0; i < size; i++) {
      if (dt == GR_F32)
        ((float *)gr_tensor_data(&t))[i] = (float)value_at(d, i);
      else
        ((double *)gr_tensor_data(&t))[i] = value_at(d, i);
    }
    gr_graph_push_device_scope(g, worker_names[d]);
    x[d] = gr_const(g, &t);
    gr_graph_pop_device_scope(g);
    gr_tensor_release(&t);
  }
  int first = gr_graph_num_nodes(g);
  GR_CHECK(gr_all_reduce(g, x, n, NULL, op, out) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  /* bytes each device sends: inputs of ring nodes made on other devices */
  int64_t sent[MAXDEV] = {0};
  for (int id = first; id < gr_graph_num_nodes(g); id++) {
    gr_node *nd = gr_graph_node(g, id);
    for (int j = 0; j < nd->num_inputs; j++) {
      gr_node *src = nd->inputs[j].node;
      if (strcmp(src->requested_device, nd->requested_device) == 0) continue;
      int from = 0;
      while (from < n && strcmp(src->requested_device, worker_names[from]) != 0) from++;
      GR_CHECK(from < n);
      if (from < n)
        sent[from] += gr_shape_num_elements(&src->out_shapes[nd->inputs[j].index]) * (int64_t)es;
    }
  }
  int64_t len[MAXDEV], total_sent = 0;
  for (int c = 0; c < n; c++) len[c] = size / n + (c < size % n);
  for (int d = 0; d < n; d++) {
    int64_t want = n == 1 ? 0 : (2 * size - len[(d + 1) % n] - len[(d + 2) % n]) * (int64_t)es;
    GR_CHECK_MSG(sent[d] == want, "n %d size %lld device %d sends %lld bytes, want %lld", n,
                 (long long)size, d, (long long)sent[d], (long long)want);
    if (size % n == 0) GR_CHECK(sent[d] * n == 2 * (n - 1) * size * (int64_t)es);
    total_sent += sent[d];
  }
  gr_error err;
  gr_session *s = named_session(g, worker_names, n, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  gr_tensor r[MAXDEV];
  if (s && gr_session_run(s, NULL, 0, out, n, r, NULL, 0, &err) == GR_OK) {
    gr_transfer_stats ts = gr_session_last_transfers(s);
    /* each chunk travels in pieces of at most the piece option's bytes */
    int64_t pieces = 0, per_piece = piece_bytes() / (int64_t)es;
    for (int c = 0; c < n; c++) pieces += (len[c] + per_piece - 1) / per_piece;
    GR_CHECK_EQ_INT(ts.bytes, total_sent);
    GR_CHECK_EQ_INT(ts.sends, n > 1 && size > 0 ? 2 * (n - 1) * pieces : 0);
    int64_t bad = 0;
    for (int d = 0; d < n; d++) {
      GR_CHECK(gr_shape_equal(&r[d].shape, &sh) && r[d].dtype == dt);
      GR_CHECK(gt_bit_equal(&r[d], &r[0]));
    }
    for (int64_t i = 0; i < size && !bad; i++) {
      double sum = 0;
      for (int d = 0; d < n; d++) sum += value_at(d, i);
      double want = op == GR_REDUCE_SUM ? sum
                    : dt == GR_F32      ? (double)((float)sum / (float)n)
                                        : sum / n;
      double got =
          dt == GR_F32 ? ((float *)gr_tensor_data(&r[0]))[i] : ((double *)gr_tensor_data(&r[0]))[i];
      if (got != want) {
        bad++;
        GR_CHECK_MSG(got == want, "n %d size %lld %s %s: element %lld is %.17g, want %.17g", n,
                     (long long)size, gr_dtype_name(dt), op == GR_REDUCE_SUM ? "sum" : "mean",
                     (long long)i, got, want);
      }
    }
    for (int d = 0; d < n; d++) gr_tensor_release(&r[d]);
  } else if (s) {
    GR_CHECK_MSG(false, "n %d size %lld: %s", n, (long long)size, err.msg);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_all_reduce_sizes(void) {
  for (int n = 2; n <= 4; n++) {
    /* empty, one element, odd, one short of a chunk boundary, a multiple */
    int64_t sizes[] = {0, 1, 7, 4 * n - 1, 12 * n, 1001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
      for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 2; op++)
          check_ring(n, sizes[k], dt ? GR_F64 : GR_F32, op ? GR_REDUCE_MEAN : GR_REDUCE_SUM);
  }
  check_ring(1, 5, GR_F32, GR_REDUCE_MEAN);
  /* the piece option holds for the graph ring too: 1001 elements in pieces
   * of 64 bytes (16 f32, 8 f64) */
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "64", 1);
  for (int n = 2; n <= 3; n++)
    for (int dt = 0; dt < 2; dt++) check_ring(n, 1001, dt ? GR_F64 : GR_F32, GR_REDUCE_SUM);
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
}

static void test_all_reduce_large(void) {
  int64_t big = 16 << 20; /* 16 Mi elements: 64 MiB in f32, 128 MiB in f64 per device */
  for (int n = 2; n <= 4; n++) check_ring(n, big, GR_F32, GR_REDUCE_SUM);
  check_ring(3, big + 1, GR_F64, GR_REDUCE_MEAN);
}

/* Several tensors at once: the small ones go around the ring as one buffer. */
static void test_all_reduce_fused(void) {
  enum { N = 3, T = 4 };
  int64_t shapes[T][2] = {{2, 3}, {5, 1}, {40, 40}, {1, 1}}; /* 24, 20, 6400, 4 bytes in f32 */
  gr_graph *g = gr_graph_new();
  gr_output v[T * N], out[T * N];
  for (int t = 0; t < T; t++)
    for (int d = 0; d < N; d++) {
      gr_shape sh = gr_shape_make(2, shapes[t]);
      gt_rng r = {(uint64_t)(t * 10 + d + 1)};
      gr_tensor x = gt_random(&r, GR_F32, sh, -4, 4); /* integers: exact sums */
      for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++)
        gr_tensor_set_f64(&x, i, floor(gr_tensor_get_f64(&x, i)));
      gr_graph_push_device_scope(g, worker_names[d]);
      v[t * N + d] = gr_const(g, &x);
      gr_graph_pop_device_scope(g);
      gr_tensor_release(&x);
    }
  GR_CHECK(gr_all_reduce_n(g, v, T, N, NULL, GR_REDUCE_SUM, 1024, out) == GR_OK);
  /* the three small ones make one ring, the 6400-byte one another */
  int concats_in = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    gr_node *nd = gr_graph_node(g, id);
    if (strcmp(nd->op->name, "concat") == 0 && nd->num_inputs == 3 &&
        strcmp(nd->inputs[0].node->op->name, "reshape") == 0 &&
        gr_shape_num_elements(&nd->out_shapes[0]) == 12)
      concats_in++;
  }
  GR_CHECK_EQ_INT(concats_in, N); /* the fused buffer of 6 + 5 + 1 on each device */
  gr_error err;
  gr_session *s = named_session(g, worker_names, N, &err);
  gr_tensor r[T * N];
  GR_CHECK(s && gr_session_run(s, NULL, 0, out, T * N, r, NULL, 0, &err) == GR_OK);
  if (s) {
    /* 2 rings of 3 chunks: 2 (n - 1) n sends each */
    GR_CHECK_EQ_INT(gr_session_last_transfers(s).sends, 2 * 2 * (N - 1) * N);
    for (int t = 0; t < T; t++) {
      for (int d = 0; d < N; d++) {
        GR_CHECK(gr_shape_equal(&r[t * N + d].shape, &v[t * N].node->out_shapes[0]));
        GR_CHECK(gt_bit_equal(&r[t * N + d], &r[t * N]));
      }
      const gr_tensor *c[N];
      for (int d = 0; d < N; d++) c[d] = &gr_node_attr(v[t * N + d].node, "value")->tensor;
      for (int64_t i = 0; i < gr_tensor_num_elements(&r[t * N]); i++) {
        double sum = 0;
        for (int d = 0; d < N; d++) sum += gr_tensor_get_f64(c[d], i);
        GR_CHECK(gr_tensor_get_f64(&r[t * N], i) == sum);
      }
    }
    for (int i = 0; i < T * N; i++) gr_tensor_release(&r[i]);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* Fused values that are outputs other than 0 of their nodes (as batch
 * norm's gradients of gamma and beta are): the buffer is cut by each
 * value's own shape. */
static void test_all_reduce_other_outputs(void) {
  gr_graph *g = gr_graph_new();
  gr_shape cs = gr_shape_make(1, (int64_t[]){3});
  gr_output v[2 * 2], out[2 * 2];
  for (int d = 0; d < 2; d++) {
    gr_graph_push_device_scope(g, worker_names[d]);
    gr_output x = gr_fill(g, GR_F32, gr_shape_make(2, (int64_t[]){4, 3}), d + 1.0);
    gr_output mm = gr_fill(g, GR_F32, cs, d + 2.0), one = gr_ones(g, GR_F32, cs);
    gr_output y = gr_batch_norm(g, x, one, one, mm, one, false, 0.9, 1e-3, NULL); /* y [4, 3] */
    v[0 * 2 + d] = gr_output_at(y, 1);                                            /* mean: mm */
    v[1 * 2 + d] = gr_output_at(y, 2); /* rstd: 1 / sqrt(1 + 1e-3) */
    gr_graph_pop_device_scope(g);
  }
  GR_CHECK(gr_all_reduce_n(g, v, 2, 2, NULL, GR_REDUCE_SUM, 1024, out) == GR_OK);
  gr_error err;
  gr_session *s = named_session(g, worker_names, 2, &err);
  gr_tensor r[4];
  GR_CHECK(s && gr_session_run(s, NULL, 0, out, 4, r, NULL, 0, &err) == GR_OK);
  if (s) {
    for (int i = 0; i < 4; i++) {
      GR_CHECK(gr_shape_equal(&r[i].shape, &cs));
      for (int64_t k = 0; k < 3; k++)
        GR_CHECK(gr_tensor_get_f64(&r[i], k) ==
                 (i < 2 ? 2.0 + 3.0 : 2.0 * (float)(1 / sqrt(1 + 1e-3))));
      gr_tensor_release(&r[i]);
    }
  }
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_all_reduce_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output b = gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_output c = gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){4}));
  gr_output out[2];
  GR_CHECK(gr_all_reduce(g, (gr_output[]){a, b}, 2, NULL, GR_REDUCE_SUM, out) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "'a' has the partly unknown shape [?]");
  gr_graph_clear_error(g);
  GR_CHECK(gr_all_reduce(g, (gr_output[]){b, c}, 2, NULL, GR_REDUCE_SUM, out) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "every device must give the same dtype and shape");
  gr_graph_clear_error(g);
  gr_output i = gr_cast(g, b, GR_I32);
  GR_CHECK(gr_all_reduce(g, (gr_output[]){i, i}, 2, NULL, GR_REDUCE_MEAN, out) == GR_ERR_DTYPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "is i32; mean needs f32 or f64");
  gr_graph_free(g);
}

/* d/dx_d of sum_k sum(out_k * R_k): the all-reduce of the upstream gradients. */
static gr_output ring_of_three(gr_graph *g, const gr_output *x, void *arg) {
  gr_reduction op = *(gr_reduction *)arg;
  gr_output out[3];
  gr_all_reduce(g, x, 3, (const char *const[]){"", "", ""}, op, out);
  gr_output flat[3];
  for (int d = 0; d < 3; d++)
    flat[d] = gr_reshape(g, gr_mul(g, out[d], gr_const_f64(g, d + 1.0)),
                         gr_shape_make(1, (int64_t[]){-1}));
  return gr_concat(g, flat, 3, 0);
}

static void test_all_reduce_gradient(void) {
  gt_rng r = {42};
  gr_tensor x[3];
  for (int d = 0; d < 3; d++)
    x[d] = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){2, 5}), -1, 1);
  gr_reduction ops[2] = {GR_REDUCE_SUM, GR_REDUCE_MEAN};
  for (int k = 0; k < 2; k++) {
    GR_CHECK(gt_check_gradient("all_reduce", ring_of_three, &ops[k], x, 3, 1, 10, 1e-7));
    GR_CHECK(gt_check_gradient_on("all_reduce (3 devices)", ring_of_three, &ops[k], x, 3, 1, 10,
                                  1e-7, 3));
  }
  for (int d = 0; d < 3; d++) gr_tensor_release(&x[d]);
}

/* ---- assemble: a concat that copies each piece in as it arrives ---------------------------- */

static gr_output assembled(gr_graph *g, const gr_output *x, void *arg) {
  (void)arg;
  gr_graph_push_device_scope(g, gt_device_name(0)); /* its nodes on one device */
  gr_output flat[3];
  for (int i = 0; i < 3; i++) flat[i] = gr_reshape(g, x[i], gr_shape_make(1, (int64_t[]){-1}));
  gr_output y = gr_assemble(g, flat, 3);
  gr_graph_pop_device_scope(g);
  return y;
}

static void test_assemble(void) {
  gt_rng r = {7};
  gr_tensor x[3];
  int64_t rows[3] = {2, 0, 3};
  for (int i = 0; i < 3; i++)
    x[i] = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){rows[i], 4}), -1, 1);
  /* the same bits as a concat, every run, and its gradient by central differences */
  gr_graph *g = gr_graph_new();
  gr_output ph[3], flat[3];
  for (int i = 0; i < 3; i++) {
    ph[i] = gr_placeholder(g, NULL, GR_F64, x[i].shape);
    flat[i] = gr_reshape(g, ph[i], gr_shape_make(1, (int64_t[]){-1}));
  }
  gr_output y[2] = {assembled(g, ph, NULL), gr_concat(g, flat, 3, 0)};
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  gr_feed f[3] = {{ph[0], &x[0]}, {ph[1], &x[1]}, {ph[2], &x[2]}};
  for (int run = 0; s && run < 3; run++) {
    gr_tensor out[2];
    GR_CHECK_OK(gr_session_run(s, f, 3, y, 2, out, NULL, 0, &err), err);
    if (!out[0].buf) break;
    GR_CHECK_EQ_INT(gr_tensor_num_elements(&out[0]), 20);
    GR_CHECK(gt_bit_equal(&out[0], &out[1]));
    gr_tensor_release(&out[0]);
    gr_tensor_release(&out[1]);
  }
  gr_session_free(s);
  gr_graph_free(g);
  GR_CHECK(gt_check_gradient("assemble", assembled, NULL, x, 3, 1, 20, 1e-7));
  /* a put writes only into an assemble_buffer: never into another tensor */
  g = gr_graph_new();
  gr_output v = gr_const_f64(g, 1), one = gr_reshape(g, v, gr_shape_make(1, (int64_t[]){1}));
  gr_node *put = gr_op(g, "assemble_put", NULL, (gr_output[]){one, one}, 2,
                       (gr_attr[]){gr_attr_int("offset", 0)}, 1)
                     .node;
  gr_output after = gr_identity(g, one);
  GR_CHECK(put && gr_graph_add_control_input(g, after.node, put) == GR_OK);
  s = gr_session_new(g, NULL, &err);
  gr_tensor o;
  GR_CHECK(s && gr_session_run(s, NULL, 0, &after, 1, &o, NULL, 0, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "writes only into an assemble_buffer");
  gr_session_free(s);
  gr_graph_free(g);
  for (int i = 0; i < 3; i++) gr_tensor_release(&x[i]);
}

/* ---- replicas ------------------------------------------------------------------------------- */

/* Linear regression y ~ x w + b on a fixed batch of 12 rows. */
typedef struct lin {
  gr_output w, b;
} lin;

static gr_status lin_loss(gr_graph *g, void *arg, int replica, const gr_output *in,
                          gr_output *out) {
  lin *m = arg;
  (void)replica;
  gr_output pred = gr_add(g, gr_matmul(g, in[0], m->w, false, false), m->b);
  out[0] = gr_reduce_mean(g, gr_square(g, gr_sub(g, pred, in[1])), NULL, 0, false);
  return GR_OK;
}

typedef struct lin_run {
  gr_tensor w, b;
  double loss;
  double spread;
} lin_run;

/* The backward pass of the replica on dev reads no gradient from another
 * device but constants and fills (which each device makes for itself): its
 * part of the mean over replicas is divided there, so the loss gradient's
 * seed is not sent to it between its forward and backward passes. */
static void check_backward_local(gr_graph *g, const char *dev) {
  int on_dev = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    gr_node *n = gr_graph_node(g, id);
    if (strncmp(n->name, "gradients/", 10) != 0 || strcmp(gr_graph_resolve_device(g, n), dev))
      continue;
    on_dev++;
    for (int i = 0; i < n->num_inputs; i++) {
      const gr_node *in = n->inputs[i].node;
      bool made_here = (in->op->flags & (GR_OP_CONSTANT | GR_OP_REMADE)) && !in->num_inputs;
      if (strncmp(in->name, "gradients/", 10) != 0) continue; /* a forward value */
      GR_CHECK_MSG(made_here || !strcmp(gr_graph_resolve_device(g, in), dev),
                   "gradient node '%s' on %s reads '%s' (%s) from %s", n->name, dev, in->name,
                   in->op->name, gr_graph_resolve_device(g, in));
    }
  }
  GR_CHECK(on_dev > 0);
}

/* mode 0: no replicas; 1: 2 replicas, variables on the ps; 2: 2 replicas,
 * mirrored (all-reduce); 3: 4 micro-batches, stages on two workers. */
static bool train_lin(int mode, int steps, lin_run *res) {
  gr_graph *g = gr_graph_new();
  gt_rng r = {7};
  gr_tensor xv = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){12, 3}), -1, 1);
  gr_tensor yv = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){12, 1}), -1, 1);
  gr_output x = gr_const(g, &xv), y = gr_const(g, &yv);
  gr_tensor_release(&xv), gr_tensor_release(&yv);
  if (mode == 1) gr_graph_push_ps_placement(g, 1, GR_PS_ROUND_ROBIN);
  lin m = {gr_variable(g, "w",
                       gr_random_uniform(g, GR_F64, gr_shape_make(2, (int64_t[]){3, 1}), -1, 1, 3)),
           gr_variable(g, "b", gr_zeros(g, GR_F64, gr_shape_make(1, (int64_t[]){1})))};
  if (mode == 1) gr_graph_pop_device_scope(g);
  gr_output loss;
  static const char *const two[] = {"/job:worker/task:0", "/job:worker/task:1"};
  gr_replicate_options o = {.num_replicas = mode == 3 ? 4 : 2,
                            .devices = mode == 3 ? NULL : two,
                            .mirror_variables = mode == 2,
                            .scope = mode == 3 ? "micro" : NULL};
  if (mode == 0)
    lin_loss(g, &m, 0, (gr_output[]){x, y}, &loss);
  else
    gr_replicate(g, &o, (gr_output[]){x, y}, 2, lin_loss, &m, 1, &loss);
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.05, .momentum = 0.9};
  gr_output train = gr_minimize(g, &opt, loss, NULL, 0);
  gr_graph_push_control_deps(g, &train, 1);
  gr_output spread = gr_mirror_spread(g);
  gr_graph_pop_control_deps(g);
  if (gr_graph_error(g)) {
    fprintf(stderr, "mode %d: %s\n", mode, gr_graph_error(g)->msg);
    gr_graph_free(g);
    return false;
  }
  if (mode == 1) {       /* the replicas' gradients are added on the ps, where w lives */
    gr_node *sum = NULL; /* the gradient w's update reads */
    for (int id = 0; id < gr_graph_num_nodes(g); id++) {
      gr_node *u = gr_graph_node(g, id);
      if (strcmp(u->op->name, "apply_momentum") == 0 &&
          strcmp(gr_node_attr_string(u, "var", ""), "w") == 0)
        sum = u->inputs[1].node;
    }
    GR_CHECK(sum && strcmp(sum->op->name, "add_n") == 0);
    GR_CHECK(sum && strcmp(gr_graph_resolve_device(g, sum), "/job:ps/task:0") == 0);
  }
  if (mode == 2) check_backward_local(g, "/job:worker/task:1");
  gr_error err;
  const char *names[3] = {worker_names[0], worker_names[1], worker_names[4]};
  gr_session *s = mode == 0 ? gr_session_new(g, NULL, &err) : named_session(g, names, 3, &err);
  bool ok = s != NULL;
  double worst = 0;
  for (int k = 0; k < steps && ok; k++) {
    gr_tensor t[2];
    ok = gr_session_run(s, NULL, 0, (gr_output[]){loss, spread}, 2, t, &train, 1, &err) == GR_OK;
    if (ok) {
      res->loss = gr_tensor_get_f64(&t[0], 0);
      worst = fmax(worst, gr_tensor_get_f64(&t[1], 0));
      gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
    }
  }
  res->spread = worst;
  ok =
      ok && gr_session_run(s, NULL, 0, (gr_output[]){m.w, m.b}, 2, &res->w, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "mode %d: %s\n", mode, err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  return ok;
}

static void test_replicas_train_like_one(void) {
  lin_run ref, rep[3];
  GR_CHECK(train_lin(0, 30, &ref));
  for (int mode = 1; mode <= 3; mode++) {
    GR_CHECK_MSG(train_lin(mode, 30, &rep[mode - 1]), "mode %d", mode);
    GR_CHECK_MSG(gt_near(&rep[mode - 1].w, &ref.w, 1e-12, 1e-12), "mode %d: w differs", mode);
    GR_CHECK(gt_near(&rep[mode - 1].b, &ref.b, 1e-12, 1e-12));
    GR_CHECK_EQ_INT(rep[mode - 1].spread, 0); /* mirrors equal bit for bit after every step */
    gr_tensor_release(&rep[mode - 1].w), gr_tensor_release(&rep[mode - 1].b);
  }
  GR_CHECK(ref.loss < 0.5);
  gr_tensor_release(&ref.w), gr_tensor_release(&ref.b);
}

/* A linear model (w [3, 1], b [1], f64) and its inputs (x ones [4, 3], y
 * zeros [4, 1]) in a new graph, with options mirroring it over two
 * workers. */
typedef struct mirrored_lin {
  gr_graph *g;
  lin m;
  gr_output x, y;
  gr_replicate_options o;
} mirrored_lin;

static mirrored_lin mirrored_lin_new(void) {
  static const char *const two[] = {"/job:worker/task:0", "/job:worker/task:1"};
  gr_graph *g = gr_graph_new();
  return (mirrored_lin){
      g,
      {gr_variable(g, "w", gr_ones(g, GR_F64, gr_shape_make(2, (int64_t[]){3, 1}))),
       gr_variable(g, "b", gr_zeros(g, GR_F64, gr_shape_make(1, (int64_t[]){1})))},
      gr_ones(g, GR_F64, gr_shape_make(2, (int64_t[]){4, 3})),
      gr_zeros(g, GR_F64, gr_shape_make(2, (int64_t[]){4, 1})),
      {.num_replicas = 2, .devices = two, .mirror_variables = true}};
}

/* A second mirrored replicate (say, an evaluation) reads the same copies. */
static void test_mirrors_shared(void) {
  mirrored_lin ml = mirrored_lin_new();
  gr_graph *g = ml.g;
  lin m = ml.m;
  gr_output x = ml.x, y = ml.y;
  gr_replicate_options o = ml.o;
  gr_output l1, l2;
  GR_CHECK(gr_replicate(g, &o, (gr_output[]){x, y}, 2, lin_loss, &m, 1, &l1) == GR_OK);
  o.scope = "eval";
  GR_CHECK(gr_replicate(g, &o, (gr_output[]){x, y}, 2, lin_loss, &m, 1, &l2) == GR_OK);
  int copies = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++)
    copies += gr_node_attr_string(gr_graph_node(g, id), "mirror_of", "")[0] != '\0';
  GR_CHECK_EQ_INT(copies, 2); /* w/replica_1, b/replica_1 */
  gr_node *mw = gr_graph_find_node(g, "w/replica_1");
  GR_CHECK(mw && strcmp(mw->requested_device, "/job:worker/task:1") == 0);
  /* the same replica on another device is refused */
  static const char *const other[] = {"/job:worker/task:0", "/job:worker/task:2"};
  o.devices = other;
  o.scope = "elsewhere";
  GR_CHECK(gr_replicate(g, &o, (gr_output[]){x, y}, 2, lin_loss, &m, 1, &l2) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg,
                        "the copy 'w/replica_1' of replica 1 is on '/job:worker/task:1', not on "
                        "'/job:worker/task:2'");
  gr_graph_free(g);
}

/* mirror_spread compares fingerprints and moves the copies only when one
 * differs: 0 while they agree, the exact largest difference once a copy
 * is changed behind the mirror's back (both on the copies' own devices). */
static void test_mirror_spread_drift(void) {
  mirrored_lin ml = mirrored_lin_new();
  gr_graph *g = ml.g;
  lin m = ml.m;
  gr_output x = ml.x, y = ml.y;
  gr_replicate_options o = ml.o;
  gr_output loss;
  GR_CHECK(gr_replicate(g, &o, (gr_output[]){x, y}, 2, lin_loss, &m, 1, &loss) == GR_OK);
  gr_output spread = gr_mirror_spread(g);
  gr_node *copy = gr_graph_find_node(g, "w/replica_1");
  GR_CHECK(copy != NULL);
  if (!copy || gr_graph_error(g)) {
    gr_graph_free(g);
    return;
  }
  double bump[3] = {0, 0.25, -0.5};
  gr_output drift = gr_assign_add(
      g, (gr_output){copy, 0}, gr_const_data(g, GR_F64, gr_shape_make(2, (int64_t[]){3, 1}), bump));
  int fps = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++)
    fps += strcmp(gr_graph_node(g, id)->op->name, "fingerprint") == 0;
  GR_CHECK_EQ_INT(fps, 4); /* w, b and their copies */
  /* the cond's switch of a copy runs where the copy is: an untaken branch
   * moves nothing */
  int switches = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    gr_node *n = gr_graph_node(g, id);
    if (strcmp(n->op->name, "switch") != 0 || n->inputs[0].node != copy) continue;
    switches++;
    GR_CHECK(strcmp(gr_graph_resolve_device(g, n), "/job:worker/task:1") == 0);
  }
  GR_CHECK_EQ_INT(switches, 1);
  gr_error err;
  gr_session *s = named_session(g, worker_names, 2, &err);
  GR_CHECK(s != NULL);
  gr_tensor t;
  bool ok = s && gr_session_run(s, NULL, 0, &spread, 1, &t, NULL, 0, &err) == GR_OK;
  GR_CHECK(ok && gr_tensor_get_f64(&t, 0) == 0);
  if (ok) gr_tensor_release(&t);
  ok = ok && gr_session_run(s, NULL, 0, NULL, 0, NULL, &drift, 1, &err) == GR_OK &&
       gr_session_run(s, NULL, 0, &spread, 1, &t, NULL, 0, &err) == GR_OK;
  if (!ok && s) fprintf(stderr, "mirror_spread: %s\n", err.msg);
  GR_CHECK(ok && gr_tensor_get_f64(&t, 0) == 0.5);
  if (ok) gr_tensor_release(&t);
  gr_session_free(s);
  gr_graph_free(g);
}

static gr_status make_var(gr_graph *g, void *arg, int replica, const gr_output *in,
                          gr_output *out) {
  (void)arg, (void)replica;
  out[0] = gr_reduce_sum(g, gr_mul(g, in[0], gr_variable(g, "oops", gr_const_f32(g, 1))), NULL, 0,
                         false);
  return GR_OK;
}

static void test_replicas_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_zeros(g, GR_F32, gr_shape_make(2, (int64_t[]){6, 2}));
  gr_output out;
  gr_replicate_options o = {.num_replicas = 4};
  GR_CHECK(gr_replicate(g, &o, &x, 1, make_var, NULL, 1, &out) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg,
                        "has 6 rows, which 4 replicas cannot share equally");
  gr_graph_clear_error(g);
  o.num_replicas = 2;
  GR_CHECK(gr_replicate(g, &o, &x, 1, make_var, NULL, 1, &out) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "replica 0 makes variable 'replica_0/oops'");
  gr_graph_clear_error(g);
  o.mirror_variables = true;
  GR_CHECK(gr_replicate(g, &o, &x, 1, make_var, NULL, 1, &out) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "mirrored variables need a device per replica");
  gr_graph_free(g);
}

/* ---- the DSL forms ----------------------------------------------------------------------------
 */

static void test_dsl_forms(void) {
  const char *src = "ps_variables(2, strategy=\"greedy\") {\n"
                    "  w = variable(ones([4, 1]))\n"
                    "  b = variable(zeros([1]))\n"
                    "}\n"
                    "x = const([[1, 2, 3, 4], [2, 3, 4, 5], [1, 1, 1, 1], [0, 1, 0, 1]])\n"
                    "y = const([[1], [2], [3], [4]])\n"
                    "loss = replicas(2, x, y) { reduce_mean((x @ w + b - y) ** 2) }\n"
                    "mb = micro_batches(4, x, y) { reduce_mean((x @ w + b - y) ** 2) }\n"
                    "a0, a1 = all_reduce(x, 2 * x, op=\"mean\")\n"
                    "n = num_tasks(\"worker\", default=3)\n"
                    "z = zeros([n])\n";
  unsetenv("GRAPHRUN_CLUSTER");
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", src, g, NULL, &p, &err), err);
  gr_output w, b, loss, mb, a0, z;
  GR_CHECK(gr_dsl_lookup(p, "w", &w) && gr_dsl_lookup(p, "b", &b) &&
           gr_dsl_lookup(p, "loss", &loss));
  GR_CHECK(gr_dsl_lookup(p, "mb", &mb) && gr_dsl_lookup(p, "a0", &a0) && gr_dsl_lookup(p, "z", &z));
  if (!gr_graph_error(g) && p && w.node) {
    GR_CHECK_STR_CONTAINS(w.node->requested_device, "/job:ps/task:0");
    GR_CHECK_STR_CONTAINS(b.node->requested_device, "/job:ps/task:1");
    GR_CHECK(strcmp(loss.node->name, "loss") == 0);
    GR_CHECK(gr_graph_find_node(g, "replica_1/matmul") != NULL);
    GR_CHECK_STR_CONTAINS(gr_graph_find_node(g, "replica_1/matmul")->requested_device,
                          "/job:worker/task:1");
    GR_CHECK(gr_graph_find_node(g, "micro_batch_3/matmul") != NULL);
    GR_CHECK_EQ_INT(z.node->out_shapes[0].dims[0], 3);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  /* the same in one process, soft: values */
  const char *run = "x = const([[1, 2], [2, 3], [1, 1], [0, 1]])\n"
                    "y = const([[1], [2], [3], [4]])\n"
                    "w = variable(ones([2, 1]))\n"
                    "whole = reduce_mean((x @ w - y) ** 2)\n"
                    "mb = micro_batches(2, x, y) { reduce_mean((x @ w - y) ** 2) }\n"
                    "d0, d1 = micro_batches(4, x, y) { reduce_sum(x), reduce_sum(y) }\n";
  gr_tensor t[4];
  GR_CHECK(gt_dsl_run(run, "whole,mb,d0,d1", 1, t));
  GR_CHECK(gr_tensor_get_f64(&t[0], 0) == gr_tensor_get_f64(&t[1], 0));
  GR_CHECK(gr_tensor_get_f64(&t[2], 0) == 11.0 / 4 && gr_tensor_get_f64(&t[3], 0) == 10.0 / 4);
  for (int i = 0; i < 4; i++) gr_tensor_release(&t[i]);
}

static void test_dsl_errors(void) {
  struct {
    const char *src, *want;
  } cases[] = {
      {"ps_variables(2)\n",
       "t.gr:1:1: error: ps_variables needs a block: ps_variables(...) { ... }"},
      {"ps_variables(0) { }\n", "ps_variables: the number of ps tasks must be an integer from 1"},
      {"ps_variables(1, strategy=\"fast\") { }\n",
       "t.gr:1:17: error: ps_variables: strategy \"fast\": want \"round_robin\" or \"greedy\""},
      {"v = ps_variables(1) { }\n", "is a scope and has no value to bind to 'v'"},
      {"x = zeros([4, 2])\nl = replicas(2, x + 1) { reduce_sum(x) }\n",
       "t.gr:2:17: error: replicas: after the count come names of tensors"},
      {"x = zeros([6, 2])\nl = replicas(4, x) { reduce_sum(x) }\n",
       "t.gr:2:5: error: replicate: input 'x' [6, 2] has 6 rows, which 4 replicas cannot share"},
      {"x = zeros([4, 2])\nl = replicas(2, x) { v = 1 }\n", "this block has no value"},
      {"x = zeros([4, 2])\nl = replicas(2, x) { reduce_sum(y) }\n",
       "t.gr:2:33: error: undefined name 'y'"},
      {"x = zeros([4, 2])\nl = replicas(2, x, devices=[\"/job:w/task:0\"]) { reduce_sum(x) }\n",
       "replicas: devices must be a list of 2 device strings"},
      {"x = zeros([4, 2])\nl = micro_batches(2, x, all_reduce=true) { reduce_sum(x) }\n",
       "unknown keyword argument 'all_reduce' for micro_batches"},
      {"x = zeros([4, 2])\nl = replicas(2, x) { variable(1.0) * reduce_sum(x) }\n",
       "replicate: replica 0 makes variable 'replica_0/variable'"},
      {"a = all_reduce(zeros([2]), zeros([3]))\n",
       "every device must give the same dtype and shape"},
      {"a = all_reduce(zeros([2]), op=\"max\")\n",
       "all_reduce: op \"max\": want \"sum\" or \"mean\""},
      {"n = num_tasks(3)\n", "num_tasks: the job must be a string"},
      {"def replicas(x) { return x }\ny = replicas(2) { 1 }\n", "'replicas' is a def here"},
      {"x = placeholder(f32, [?, 2])\nl = replicas(64, x) { micro_batches(32, x) { reduce_sum(x) } "
       "}\n",
       "t.gr:2:23: error: micro_batches: nested blocks would build the body 2048 times (at most "
       "1024)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gr_error err;
    GR_CHECK_MSG(gt_dsl_error(cases[i].src, &err), "case %zu loaded", i);
    GR_CHECK_MSG(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg,
                 cases[i].want);
  }
}

static void test_num_tasks_from_env(void) {
  setenv("GRAPHRUN_CLUSTER",
         "{\"ps\": [\"127.0.0.1:2\"], \"worker\": [\"127.0.0.1:3\", "
         "\"127.0.0.1:4\", \"127.0.0.1:5\"]}",
         1);
  GR_CHECK(
      gt_dsl_value("n = num_tasks(\"worker\")\ny = zeros([n])\nz = reduce_sum(y + 1)\n", "z") == 3);
  GR_CHECK(gt_dsl_value("n = num_tasks(\"ps\")\nz = reduce_sum(zeros([n]) + 1)\n", "z") == 1);
  GR_CHECK(gt_dsl_value("n = num_tasks(\"chief\", default=5)\nz = reduce_sum(zeros([n + 1]) + 1)\n",
                        "z") == 1);
  setenv("GRAPHRUN_CLUSTER", "{\"worker\": 3}", 1);
  gr_error err;
  GR_CHECK(gt_dsl_error("n = num_tasks(\"worker\")\n", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "num_tasks: GRAPHRUN_CLUSTER:");
  unsetenv("GRAPHRUN_CLUSTER");
}

/* The length of z = zeros([EXPR]) loaded as job:task (job NULL: no --job),
 * -1 when it does not load. */
static int64_t dsl_len_as(const char *expr, const char *job, int task) {
  char src[256];
  snprintf(src, sizeof src, "z = zeros([%s])\n", expr);
  gr_dsl_options o = {.job = job, .task_index = task};
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  gr_output z;
  int64_t n = -1;
  if (gr_dsl_load_string("t.gr", src, g, &o, &p, &err) == GR_OK && gr_dsl_lookup(p, "z", &z))
    n = z.node->out_shapes[0].dims[0];
  else
    fprintf(stderr, "%s: %s\n", expr, err.msg);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return n;
}

/* num_replicas() counts the chief and the workers; replica_index() puts
 * the chief first, so that every client reads its own shard. */
static void test_replica_index(void) {
  unsetenv("GRAPHRUN_CLUSTER");
  GR_CHECK_EQ_INT(dsl_len_as("num_replicas()", NULL, 0), 1); /* no cluster: one process */
  GR_CHECK_EQ_INT(dsl_len_as("replica_index() + 1", "worker", 2), 3);
  setenv("GRAPHRUN_CLUSTER",
         "{\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"], \"worker\": "
         "[\"127.0.0.1:3\", \"127.0.0.1:4\"]}",
         1);
  GR_CHECK_EQ_INT(dsl_len_as("num_replicas()", "worker", 1), 3);
  GR_CHECK_EQ_INT(dsl_len_as("replica_index() + 1", "chief", 0), 1);
  GR_CHECK_EQ_INT(dsl_len_as("replica_index() + 1", "worker", 0), 2);
  GR_CHECK_EQ_INT(dsl_len_as("replica_index() + 1", "worker", 1), 3);
  GR_CHECK_EQ_INT(dsl_len_as("task_index() + 1", "worker", 1), 2); /* the task's own index */
  setenv("GRAPHRUN_CLUSTER", "{\"ps\": [\"127.0.0.1:2\"], \"worker\": [\"127.0.0.1:3\"]}", 1);
  GR_CHECK_EQ_INT(dsl_len_as("num_replicas()", "worker", 0), 1);
  GR_CHECK_EQ_INT(dsl_len_as("replica_index() + 1", "worker", 0), 1);
  gr_error err;
  GR_CHECK(gt_dsl_error("n = replica_index(1)\n", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "replica_index takes no arguments");
  setenv("GRAPHRUN_CLUSTER", "{\"worker\": 3}", 1);
  GR_CHECK(gt_dsl_error("n = num_replicas()\n", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "num_replicas: GRAPHRUN_CLUSTER:");
  unsetenv("GRAPHRUN_CLUSTER");
}

int main(void) {
  unsetenv("GRAPHRUN_CLUSTER");
  GR_RUN(test_ps_round_robin_and_slots);
  GR_RUN(test_ps_slots_not_counted);
  GR_RUN(test_ps_greedy_and_errors);
  /* the graph ring's nodes and sends (the collective's: test_collective.c) */
  setenv("GRAPHRUN_ALL_REDUCE", "graph", 1);
  GR_RUN(test_all_reduce_sizes);
  GR_RUN(test_all_reduce_large);
  GR_RUN(test_all_reduce_fused);
  unsetenv("GRAPHRUN_ALL_REDUCE");
  GR_RUN(test_all_reduce_other_outputs);
  GR_RUN(test_all_reduce_errors);
  GR_RUN(test_all_reduce_gradient);
  GR_RUN(test_assemble);
  GR_RUN(test_replicas_train_like_one);
  GR_RUN(test_replicas_errors);
  GR_RUN(test_mirrors_shared);
  GR_RUN(test_mirror_spread_drift);
  GR_RUN(test_replica_index);
  GR_RUN(test_dsl_forms);
  GR_RUN(test_dsl_errors);
  GR_RUN(test_num_tasks_from_env);
  return gr_test_finish();
}
