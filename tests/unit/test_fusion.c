/* The fusion pass (passes/pass_fuse.c) and the fused kernels: on random
 * inputs, every fused chain gives the bits of the same graph run unfused
 * (gr_session_options.no_fusion), with 1 and 3 threads: conv2d with
 * bias_add, add of a vector (either side), batch norm at inference and
 * relu, on each kernel path (oneDNN, the direct kernels, im2col) and both
 * layouts; batch norm + relu and relu_grad + batch_norm_grad in training
 * steps of a small CNN (f32 and f64, NHWC and NCHW), with the traces
 * showing which nodes ran. And the chains it must leave alone (a value
 * fetched, read twice, fed, waited for, or on another device), and the
 * errors of the fused op built by hand. */
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "passes/passes_engine.h"
#include "test_util.h"

static gt_rng rng = {2024};

/* Local devices of the sessions run() makes. */
static int run_devices = 1;

static void release_n(gr_tensor *t, int n) {
  for (int i = 0; i < n; i++) gr_tensor_release(&t[i]);
}

/* The number of nodes of op `op` in g. */
static int count_op(const gr_graph *g, const char *op) {
  int k = 0;
  for (int i = 0; i < gr_graph_num_nodes(g); i++) k += !strcmp(gr_graph_node(g, i)->op->name, op);
  return k;
}

/* The graph a step with these endpoints runs (NULL: nothing fused). */
static gr_graph *fused_graph(gr_graph *g, const gr_feed *f, int nf, const gr_output *x, int nx,
                             const gr_output *t, int nt) {
  gr_output feeds[8];
  for (int i = 0; i < nf; i++) feeds[i] = f[i].output;
  gr_graph *out = NULL;
  gr_error err;
  GR_CHECK_OK(gr_passes_fuse_for_step(g, feeds, nf, x, nx, t, nt, &out, &err), err);
  return out;
}

/* Runs `steps` steps of (feeds, fetches x, targets t) in a new session
 * (fused or not, `threads` inter-op threads) and the fetches of the last
 * into out. The names of the nodes that ran in the last step are
 * appended to ran (if not NULL), one per line. */
static bool run(gr_graph *g, bool fuse, int threads, const gr_feed *f, int nf, const gr_output *x,
                int nx, const gr_output *t, int nt, int steps, gr_tensor *out, char *ran,
                size_t cap) {
  gr_error err;
  gr_session_options o = {
      .inter_op_threads = threads, .num_devices = run_devices, .no_fusion = !fuse};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s, "%s", err.msg);
  if (!s) return false;
  gr_step_trace *tr = gr_step_trace_new();
  bool ok = true;
  for (int i = 0; ok && i < steps; i++) {
    if (i) release_n(out, nx);
    gr_step_trace_clear(tr);
    ok = gr_session_run_traced(s, f, nf, x, nx, out, t, nt, tr, &err) == GR_OK;
    GR_CHECK_MSG(ok, "%s", err.msg);
  }
  for (int i = 0; ok && ran && i < gr_step_trace_count(tr); i++) {
    size_t len = strlen(ran);
    snprintf(ran + len, cap - len, "%s\n", gr_step_trace_event(tr, i)->node->name);
  }
  gr_step_trace_free(tr);
  gr_session_free(s);
  return ok;
}

/* Did the node called `name` run (a line of ran)? */
static bool ran_node(const char *ran, const char *name) {
  size_t n = strlen(name);
  for (const char *p = ran; (p = strstr(p, name)); p++)
    if ((p == ran || p[-1] == '\n') && p[n] == '\n') return true;
  return false;
}

/* Fused with 1 and 3 threads, the same bits as unfused with 1. */
static void check_same_bits(gr_graph *g, const gr_feed *f, int nf, const gr_output *x, int nx,
                            const gr_output *t, int nt, int steps, const char *what) {
  gr_tensor want[16], got[16];
  if (!run(g, false, 1, f, nf, x, nx, t, nt, steps, want, NULL, 0)) return;
  for (int threads = 1; threads <= 3; threads += 2) {
    if (!run(g, true, threads, f, nf, x, nx, t, nt, steps, got, NULL, 0)) continue;
    for (int i = 0; i < nx; i++)
      GR_CHECK_MSG(gt_bit_equal(&got[i], &want[i]), "%s, %d threads: fetch %d ('%s') differs", what,
                   threads, i, x[i].node->name);
    release_n(got, nx);
  }
  release_n(want, nx);
}

/* ---- conv2d epilogues ------------------------------------------------------------------- */

typedef enum { E_NONE, E_BIAS_ADD, E_ADD_RIGHT, E_ADD_LEFT, E_BN } epi_kind;

typedef struct epi_case {
  int64_t c, groups, oc, stride;
  bool nchw;
  epi_kind kind;
  bool relu;
  const char *path; /* for messages */
} epi_case;

static const epi_case epi_cases[] = {
    {8, 1, 16, 1, false, E_BIAS_ADD, true, "oneDNN"},
    {8, 1, 16, 2, false, E_BIAS_ADD, false, "oneDNN"},
    {8, 1, 12, 1, false, E_ADD_RIGHT, true, "oneDNN"},
    {8, 1, 12, 1, false, E_ADD_LEFT, true, "oneDNN"},
    {8, 1, 16, 1, false, E_BN, true, "oneDNN"},
    {8, 1, 16, 1, true, E_BN, true, "oneDNN NCHW"},
    {8, 1, 16, 2, true, E_BN, false, "oneDNN NCHW"},
    {8, 1, 16, 1, true, E_NONE, true, "oneDNN NCHW"},
    {3, 1, 16, 1, false, E_BIAS_ADD, true, "direct, registers"},
    {2, 1, 5, 1, false, E_BN, true, "direct"},
    {3, 1, 32, 1, true, E_BN, true, "direct NCHW"},
    {6, 6, 12, 1, false, E_ADD_RIGHT, true, "depthwise"},
    {6, 6, 6, 2, true, E_NONE, true, "depthwise NCHW"},
    {8, 2, 8, 1, false, E_BN, true, "im2col"},
    {8, 2, 8, 1, false, E_BIAS_ADD, false, "im2col"},
    {8, 2, 8, 1, true, E_BN, false, "im2col NCHW"},
};

static gr_tensor vec(int64_t n, double lo, double hi) {
  return gt_random(&rng, GR_F32, gr_shape_make(1, (int64_t[]){n}), lo, hi);
}

static void test_conv_epilogues(void) {
  for (size_t ci = 0; ci < sizeof epi_cases / sizeof epi_cases[0]; ci++) {
    const epi_case *k = &epi_cases[ci];
    int64_t n = 3, h = 9, w = 7;
    gr_shape xs = k->nchw ? gr_shape_make(4, (int64_t[]){n, k->c, h, w})
                          : gr_shape_make(4, (int64_t[]){n, h, w, k->c});
    gr_tensor xv = gt_random(&rng, GR_F32, xs, -1, 1);
    gr_tensor fv = gt_random(
        &rng, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, k->c / k->groups, k->oc}), -0.5, 0.5);
    gr_tensor pv[4] = {vec(k->oc, -0.5, 0.5), vec(k->oc, -0.5, 0.5), vec(k->oc, -0.2, 0.2),
                       vec(k->oc, 0.3, 2)};
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, xs), f = gr_placeholder(g, "f", GR_F32, fv.shape);
    gr_output p[4];
    static const char *const pn[4] = {"p0", "p1", "p2", "p3"};
    for (int i = 0; i < 4; i++) p[i] = gr_placeholder(g, pn[i], GR_F32, pv[i].shape);
    gr_conv_options co = {.padding = "SAME",
                          .strides = {k->stride, k->stride},
                          .groups = k->groups,
                          .data_format = k->nchw ? "NCHW" : "NHWC"};
    gr_output y = gr_conv2d(g, x, f, &co);
    if (k->kind == E_BIAS_ADD) y = gr_bias_add(g, y, p[0]);
    if (k->kind == E_ADD_RIGHT) y = gr_add(g, y, p[0]);
    if (k->kind == E_ADD_LEFT) y = gr_add(g, p[0], y);
    if (k->kind == E_BN)
      y = gr_batch_norm(g, y, p[0], p[1], p[2], p[3], false, 0.9, 1e-3, co.data_format);
    if (k->relu) y = gr_relu(g, y);
    gr_output out = gr_identity(g, y);
    gr_feed fd[6] = {{x, &xv},       {f, &fv},       {p[0], &pv[0]},
                     {p[1], &pv[1]}, {p[2], &pv[2]}, {p[3], &pv[3]}};
    char what[96];
    snprintf(what, sizeof what, "case %zu (%s)", ci, k->path);
    GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s: %s", what, gr_graph_error(g)->msg);
    gr_graph *fg = gr_graph_error(g) ? NULL : fused_graph(g, fd, 6, &out, 1, NULL, 0);
    GR_CHECK_MSG(fg && count_op(fg, "_fused_conv2d") == 1 && count_op(fg, "conv2d") == 0 &&
                     count_op(fg, "relu") == 0 && count_op(fg, "batch_norm") == 0 &&
                     count_op(fg, "bias_add") == 0 && count_op(fg, "add") == 0,
                 "%s: not fused", what);
    gr_graph_free(fg);
    if (!gr_graph_error(g)) check_same_bits(g, fd, 6, &out, 1, NULL, 0, 1, what);
    gr_graph_free(g);
    gr_tensor_release(&xv), gr_tensor_release(&fv);
    for (int i = 0; i < 4; i++) gr_tensor_release(&pv[i]);
  }
}

/* ---- training: batch norm + relu, relu_grad + batch_norm_grad -------------------------- */

/* conv, batch norm, relu, conv, batch norm, relu, max pool, dense, loss,
 * Adam: the fetches are the loss and every variable. */
typedef struct cnn {
  gr_graph *g;
  gr_tensor xv, lv;
  gr_feed f[2];
  gr_output x[9], train;
} cnn;

/* vars_on: the device the variables are pinned to (-1: none). */
static void cnn_make(cnn *m, gr_dtype dt, bool nchw, int vars_on) {
  int64_t n = 4, h = 8, c = 3, c1 = 6, c2 = 8;
  gr_graph *g = m->g = gr_graph_new();
  gr_graph_set_seed(g, 7);
  gr_shape xs =
      nchw ? gr_shape_make(4, (int64_t[]){n, c, h, h}) : gr_shape_make(4, (int64_t[]){n, h, h, c});
  m->xv = gt_random(&rng, dt, xs, -1, 1);
  m->lv = gt_zeros(GR_I64, gr_shape_make(1, (int64_t[]){n}));
  for (int64_t i = 0; i < n; i++) ((int64_t *)gr_tensor_data(&m->lv))[i] = i % 3;
  gr_output x = gr_placeholder(g, "x", dt, xs),
            l = gr_placeholder(g, "labels", GR_I64, m->lv.shape);
  const char *fmt = nchw ? "NCHW" : "NHWC";
  gr_conv_options co = {.padding = "SAME", .data_format = fmt};
  int64_t w1s[4] = {3, 3, c, c1}, w2s[4] = {3, 3, c1, c2}, wds[2] = {c2 * (h / 2) * (h / 2), 3};
  if (vars_on >= 0) gt_pin(g, vars_on);
  gr_output w1 =
      gr_variable(g, "w1", gr_random_uniform(g, dt, gr_shape_make(4, w1s), -0.5, 0.5, 1));
  gr_output w2 =
      gr_variable(g, "w2", gr_random_uniform(g, dt, gr_shape_make(4, w2s), -0.3, 0.3, 2));
  gr_output wd =
      gr_variable(g, "wd", gr_random_uniform(g, dt, gr_shape_make(2, wds), -0.2, 0.2, 3));
  gr_output v[4];
  int64_t cs[2] = {c1, c2};
  static const char *const names[2][4] = {{"g1", "b1", "m1", "v1"}, {"g2", "b2", "m2", "v2"}};
  gr_output h1 = x, vb[2][4];
  for (int b = 0; b < 2; b++) {
    gr_shape s = gr_shape_make(1, (int64_t[]){cs[b]});
    vb[b][0] = gr_variable(g, names[b][0], gr_random_uniform(g, dt, s, 0.5, 1.5, 10 + b));
    vb[b][1] = gr_variable(g, names[b][1], gr_random_uniform(g, dt, s, -0.5, 0.5, 20 + b));
    vb[b][2] = gr_variable(g, names[b][2], gr_zeros(g, dt, s));
    vb[b][3] = gr_variable(g, names[b][3], gr_ones(g, dt, s));
  }
  if (vars_on >= 0) gr_graph_pop_device_scope(g);
  for (int b = 0; b < 2; b++) {
    memcpy(v, vb[b], sizeof v);
    h1 = gr_conv2d(g, h1, b ? w2 : w1, &co);
    h1 = gr_relu(g, gr_batch_norm(g, h1, v[0], v[1], v[2], v[3], true, 0.9, 1e-3, fmt));
    m->x[5 + 2 * b] = v[0], m->x[6 + 2 * b] = v[2];
  }
  h1 = gr_max_pool(g, h1, (int64_t[]){2, 2}, NULL, "SAME", fmt);
  gr_output logits = gr_matmul(g, gr_flatten(g, h1), wd, false, false);
  gr_output loss = gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, l), NULL, 0, false);
  gr_optimizer adam = {.kind = GR_OPT_ADAM, .learning_rate = 1e-2};
  m->train = gr_minimize(g, &adam, loss, NULL, 0);
  m->x[0] = loss, m->x[1] = w1, m->x[2] = w2, m->x[3] = wd, m->x[4] = logits;
  m->f[0] = (gr_feed){x, &m->xv}, m->f[1] = (gr_feed){l, &m->lv};
}

static void cnn_free(cnn *m) {
  gr_graph_free(m->g);
  gr_tensor_release(&m->xv), gr_tensor_release(&m->lv);
}

static void test_training_fused(void) {
  for (int k = 0; k < 3; k++) {
    gr_dtype dt = k == 2 ? GR_F64 : GR_F32;
    bool nchw = k == 1;
    cnn m;
    cnn_make(&m, dt, nchw, -1);
    char what[64];
    snprintf(what, sizeof what, "%s %s", gr_dtype_name(dt), nchw ? "NCHW" : "NHWC");
    GR_CHECK_MSG(!gr_graph_error(m.g), "%s: %s", what, gr_graph_error(m.g)->msg);
    if (gr_graph_error(m.g)) {
      cnn_free(&m);
      continue;
    }
    /* both relus into their batch norms, the first one's gradient into
     * batch_norm_grad (the second's is max_pool_grad's already) */
    gr_graph *fg = fused_graph(m.g, m.f, 2, m.x, 9, &m.train, 1);
    GR_CHECK_MSG(fg && count_op(fg, "relu") == 0 && count_op(fg, "relu_grad") == 0 &&
                     count_op(fg, "batch_norm") == 2 && count_op(fg, "batch_norm_grad") == 2,
                 "%s: not fused", what);
    int masked = 0;
    for (int i = 0; fg && i < gr_graph_num_nodes(fg); i++)
      masked += gr_graph_node(fg, i)->op == gr_ops_find("batch_norm_grad") &&
                gr_graph_node(fg, i)->num_inputs == 6;
    GR_CHECK_MSG(masked == 1, "%s: %d batch_norm_grad with relu_y", what, masked);
    gr_graph_free(fg);
    check_same_bits(m.g, m.f, 2, m.x, 9, &m.train, 1, 3, what);
    /* the step ran without the relus, and with them when not fused */
    static char ran[1 << 16], ran_plain[1 << 16];
    gr_tensor out[9];
    ran[0] = ran_plain[0] = '\0';
    if (run(m.g, true, 1, m.f, 2, m.x, 9, &m.train, 1, 1, out, ran, sizeof ran)) release_n(out, 9);
    if (run(m.g, false, 1, m.f, 2, m.x, 9, &m.train, 1, 1, out, ran_plain, sizeof ran_plain))
      release_n(out, 9);
    int relus = 0, relus_plain = 0;
    for (int i = 0; i < gr_graph_num_nodes(m.g); i++) {
      const gr_node *nd = gr_graph_node(m.g, i);
      if (strcmp(nd->op->name, "relu") && strcmp(nd->op->name, "relu_grad")) continue;
      relus += ran_node(ran, nd->name);
      relus_plain += ran_node(ran_plain, nd->name);
    }
    GR_CHECK_MSG(relus == 0 && relus_plain == 3, "%s: %d relu nodes ran fused, %d unfused", what,
                 relus, relus_plain);
    cnn_free(&m);
  }
}

/* The variables on device 1 (a parameter server's place), the rest on
 * device 0: fused, the step across the two gives the unfused bits. */
static void test_training_two_devices(void) {
  cnn m;
  cnn_make(&m, GR_F32, false, 1);
  gt_spread(m.g, 2); /* the others round robin: the colocation groups decide */
  gr_tensor want[9], got[9];
  run_devices = 2;
  bool ok = run(m.g, false, 1, m.f, 2, m.x, 9, &m.train, 1, 3, want, NULL, 0);
  static char ran[1 << 16];
  ran[0] = '\0';
  if (ok && run(m.g, true, 2, m.f, 2, m.x, 9, &m.train, 1, 3, got, ran, sizeof ran)) {
    for (int i = 0; i < 9; i++)
      GR_CHECK_MSG(gt_bit_equal(&got[i], &want[i]), "two devices: fetch %d", i);
    release_n(got, 9);
    GR_CHECK(!strstr(ran, "relu\n"));
  }
  run_devices = 1;
  if (ok) release_n(want, 9);
  cnn_free(&m);
}

/* The same bits with 1, 2 and 3 threads, fused. */
static void test_training_threads(void) {
  cnn m;
  cnn_make(&m, GR_F32, false, -1);
  gr_tensor want[9], got[9];
  if (run(m.g, true, 1, m.f, 2, m.x, 9, &m.train, 1, 3, want, NULL, 0)) {
    for (int threads = 2; threads <= 3; threads++) {
      if (!run(m.g, true, threads, m.f, 2, m.x, 9, &m.train, 1, 3, got, NULL, 0)) continue;
      for (int i = 0; i < 9; i++)
        GR_CHECK_MSG(gt_bit_equal(&got[i], &want[i]), "%d threads: fetch %d", threads, i);
      release_n(got, 9);
    }
    release_n(want, 9);
  }
  cnn_free(&m);
}

/* ---- what must not fuse ---------------------------------------------------------------- */

/* conv -> batch norm (inference) -> relu -> identity, with one thing
 * that forbids fusing the chain. */
typedef enum {
  N_FETCH_RELU,    /* the relu is fetched */
  N_BN_READ_TWICE, /* the batch norm's y has a second reader */
  N_FEED_BN,       /* the batch norm's y is fed */
  N_CTRL_ON_RELU,  /* a node waits for the relu */
  N_OTHER_DEVICE,  /* the relu is pinned to device 1 */
  N_COUNT
} no_fuse;

static void test_chains_left_alone(void) {
  for (int k = 0; k < N_COUNT; k++) {
    gr_graph *g = gr_graph_new();
    gr_shape xs = gr_shape_make(4, (int64_t[]){2, 5, 5, 8});
    gr_tensor xv = gt_random(&rng, GR_F32, xs, -1, 1), yv = gt_random(&rng, GR_F32, xs, -1, 1);
    gr_tensor fv = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 8, 8}), -0.5, 0.5);
    gr_output x = gr_placeholder(g, "x", GR_F32, xs), f = gr_const(g, &fv);
    gr_output ones = gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){8}));
    gr_output zeros = gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){8}));
    gr_conv_options co = {.padding = "SAME"};
    gr_output c = gr_conv2d(g, x, f, &co);
    gr_output b = gr_batch_norm(g, c, ones, zeros, zeros, ones, false, 0.9, 1e-3, NULL);
    gr_output r;
    if (k == N_OTHER_DEVICE) {
      gr_graph_push_device_scope(g, "/device:CPU:1");
      r = gr_relu(g, b);
      gr_graph_pop_device_scope(g);
    } else {
      r = gr_relu(g, b);
    }
    gr_output fetch[2] = {gr_identity(g, r), r};
    int nx = 1;
    if (k == N_FETCH_RELU) nx = 2;
    if (k == N_BN_READ_TWICE) fetch[nx++] = gr_reduce_sum(g, b, NULL, 0, false);
    if (k == N_CTRL_ON_RELU) {
      gr_graph_push_control_deps(g, &r, 1);
      fetch[nx++] = gr_identity(g, x);
      gr_graph_pop_control_deps(g);
    }
    gr_feed fd[2] = {{x, &xv}, {b, &yv}};
    int nf = k == N_FEED_BN ? 2 : 1;
    GR_CHECK_MSG(!gr_graph_error(g), "case %d: %s", k, gr_graph_error(g)->msg);
    gr_graph *fg = gr_graph_error(g) ? NULL : fused_graph(g, fd, nf, fetch, nx, NULL, 0);
    /* the relu stays; the conv still takes the batch norm, which has no
     * other reader, unless its output is fed */
    GR_CHECK_MSG(!fg || count_op(fg, "relu") == 1, "case %d: the relu was fused", k);
    GR_CHECK_MSG(!fg || count_op(fg, "_fused_conv2d") == (k != N_FEED_BN),
                 "case %d: %d fused convs", k, fg ? count_op(fg, "_fused_conv2d") : 0);
    gr_graph_free(fg);
    if (k != N_OTHER_DEVICE && !gr_graph_error(g))
      check_same_bits(g, fd, nf, fetch, nx, NULL, 0, 1, "left alone");
    gr_graph_free(g);
    gr_tensor_release(&xv), gr_tensor_release(&yv), gr_tensor_release(&fv);
  }
}

/* ---- the fused op built by hand --------------------------------------------------------- */

static void test_fused_op_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){1, 4, 4, 8}));
  gr_output xc = gr_placeholder(g, "xc", GR_F32, gr_shape_make(4, (int64_t[]){1, 8, 4, 4}));
  gr_output f = gr_placeholder(g, "f", GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 8, 4}));
  gr_output b4 = gr_placeholder(g, "b4", GR_F32, gr_shape_make(1, (int64_t[]){4}));
  gr_output b5 = gr_placeholder(g, "b5", GR_F32, gr_shape_make(1, (int64_t[]){5}));
  gr_output bu = gr_placeholder(g, "bu", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_attr relu = gr_attr_string("fused_ops", "relu"),
          bias = gr_attr_string("fused_ops", "bias_add");
  gr_attr bad = gr_attr_string("fused_ops", "sigmoid");
  gr_attr nchw[2] = {bias, gr_attr_string("data_format", "NCHW")};
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_conv2d", "k1", (gr_output[]){x, f}, 2, &bad, 1), g,
                           GR_ERR_INVALID_ARGUMENT, "fused_ops must be relu, bias_add"));
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_conv2d", "k2", (gr_output[]){x, f}, 2, &bias, 1), g,
                           GR_ERR_INVALID_ARGUMENT, "fused_ops bias_add takes 3 inputs, got 2"));
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_conv2d", "k3", (gr_output[]){x, f, b5}, 3, &bias, 1), g,
                           GR_ERR_SHAPE, "input 2 must be [4] (the output channels)"));
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_conv2d", "k4", (gr_output[]){xc, f, b4}, 3, nchw, 2), g,
                           GR_ERR_INVALID_ARGUMENT, "NHWC convolutions only"));
  gr_output ok = gr_op(g, "_fused_conv2d", "k5", (gr_output[]){x, f}, 2, &relu, 1);
  gr_output late = gr_op(g, "_fused_conv2d", "k6", (gr_output[]){x, f, bu}, 3, &bias, 1);
  GR_CHECK(ok.node && late.node && !gr_graph_error(g));
  /* a bias of the wrong length fed at run time: the kernel's error */
  gr_tensor xv = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){1, 4, 4, 8}), -1, 1);
  gr_tensor fv = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 8, 4}), -1, 1);
  gr_tensor bv = gt_random(&rng, GR_F32, gr_shape_make(1, (int64_t[]){5}), -1, 1);
  gr_feed fd[3] = {{x, &xv}, {f, &fv}, {bu, &bv}};
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out;
  GR_CHECK(s && gr_session_run(s, fd, 3, &late, 1, &out, NULL, 0, &err) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "k6");
  GR_CHECK_STR_CONTAINS(err.msg, "input 2 must be [4] (the output channels), got shape [5]");
  /* relu alone: conv then max(y, 0) */
  if (s && gr_session_run(s, fd, 2, &ok, 1, &out, NULL, 0, &err) == GR_OK) {
    for (int64_t i = 0; i < gr_tensor_num_elements(&out); i++)
      GR_CHECK(gr_tensor_get_f64(&out, i) >= 0);
    gr_tensor_release(&out);
  }
  gr_session_free(s);
  gr_tensor_release(&xv), gr_tensor_release(&fv), gr_tensor_release(&bv);
  gr_graph_free(g);
  /* no gradient through a batch norm with a fused relu, nor through a
   * batch_norm_grad with relu_y */
  g = gr_graph_new();
  gr_output xv8 = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){4, 8}));
  gr_output v8 = gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){8}));
  gr_attr at[2] = {gr_attr_bool("relu", true), gr_attr_bool("update_moving", false)};
  gr_output bn = gr_op(g, "batch_norm", "bnr", (gr_output[]){xv8, v8, v8, v8, v8}, 5, at, 2);
  gr_output d;
  GR_CHECK(bn.node && gr_gradients(g, &bn, 1, &xv8, 1, NULL, false, &d) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK(gr_graph_error(g) && strstr(gr_graph_error(g)->msg, "'bnr' has a fused relu"));
  gr_graph_free(g);
  g = gr_graph_new();
  x = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){1, 4, 4, 8}));
  f = gr_placeholder(g, "f", GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 8, 4}));
  gr_output fc = gr_op(g, "_fused_conv2d", "fc", (gr_output[]){x, f}, 2, &relu, 1);
  GR_CHECK(fc.node && gr_gradients(g, &fc, 1, &x, 1, NULL, false, &d) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK(gr_graph_error(g) && strstr(gr_graph_error(g)->msg, "node 'fc' is a _fused_conv2d"));
  gr_graph_free(g);
}

/* ---- elementwise chains --------------------------------------------------------------- */

static const char *const ew_binary[] = {"add",     "sub",     "mul",      "div",
                                        "maximum", "minimum", "relu_grad"};
static const char *const ew_unary[] = {"neg", "square", "relu"};

/* Random chains of 2 to 8 elementwise ops on placeholders of an odd size
 * (or a scalar), f32 and f64: one _fused_elementwise with none of the
 * chain's nodes left, the unfused bits with 1 and 3 threads. */
static void test_elementwise_chains(void) {
  static const int64_t sizes[][2] = {{1, 1}, {3, 7}, {1, 255}, {1, 257}, {13, 77}, {129, 33}};
  for (int k = 0; k < 48; k++) {
    gr_dtype dt = k % 2 ? GR_F64 : GR_F32;
    const int64_t *sz = sizes[k % 6];
    gr_shape xs = gr_shape_make(2, (int64_t[]){sz[0], sz[1]});
    gr_graph *g = gr_graph_new();
    gr_tensor v[4];
    gr_feed fd[4];
    gr_output p[4];
    static const char *const pn[4] = {"p0", "p1", "p2", "p3"};
    for (int i = 0; i < 4; i++) {
      v[i] = gt_random(&rng, dt, xs, -2, 2);
      p[i] = gr_placeholder(g, pn[i], dt, xs);
      fd[i] = (gr_feed){p[i], &v[i]};
    }
    gr_output cur = p[0];
    int steps = 2 + k % 7;
    char chain[256] = "";
    for (int st = 0; st < steps; st++) {
      bool unary = gt_int(&rng, 0, 3) == 0;
      const char *op = unary ? ew_unary[gt_int(&rng, 0, 2)] : ew_binary[gt_int(&rng, 0, 6)];
      gr_output other = p[gt_int(&rng, 0, 3)];
      if (!unary && strcmp(op, "relu_grad") && gt_int(&rng, 0, 2) == 0)
        other = dt == GR_F32 ? gr_const_f32(g, (float)gt_uniform(&rng, -2, 2))
                             : gr_const_f64(g, gt_uniform(&rng, -2, 2));
      bool left = gt_int(&rng, 0, 1);
      gr_output in[2] = {left ? cur : other, left ? other : cur};
      cur = gr_op(g, op, NULL, unary ? &cur : in, unary ? 1 : 2, NULL, 0);
      snprintf(chain + strlen(chain), sizeof chain - strlen(chain), " %s", op);
    }
    char what[320];
    snprintf(what, sizeof what, "chain %d (%s, [%lld, %lld]):%s", k, gr_dtype_name(dt),
             (long long)sz[0], (long long)sz[1], chain);
    GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s: %s", what, gr_graph_error(g)->msg);
    gr_graph *fg = gr_graph_error(g) ? NULL : fused_graph(g, fd, 4, &cur, 1, NULL, 0);
    int left = 0;
    for (size_t i = 0; fg && i < 7; i++) left += count_op(fg, ew_binary[i]);
    for (size_t i = 0; fg && i < 3; i++) left += count_op(fg, ew_unary[i]);
    GR_CHECK_MSG(fg && count_op(fg, "_fused_elementwise") == 1 && left == 0,
                 "%s: not fused (%d fused nodes, %d of the chain left)", what,
                 fg ? count_op(fg, "_fused_elementwise") : 0, left);
    gr_graph_free(fg);
    if (!gr_graph_error(g)) check_same_bits(g, fd, 4, &cur, 1, NULL, 0, 1, what);
    gr_graph_free(g);
    for (int i = 0; i < 4; i++) gr_tensor_release(&v[i]);
  }
}

/* What must stay apart: a value read twice or fetched splits the chain,
 * a broadcast (not of a scalar) and integers are not fused, a fused node
 * takes eight ops at most. */
static void test_elementwise_limits(void) {
  gr_graph *g = gr_graph_new();
  gr_shape xs = gr_shape_make(2, (int64_t[]){5, 3});
  gr_output x = gr_placeholder(g, "x", GR_F32, xs), y = gr_placeholder(g, "y", GR_F32, xs);
  gr_output r = gr_placeholder(g, "r", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_output a = gr_mul(g, x, y);
  gr_output twice = gr_add(g, gr_neg(g, a), gr_square(g, a)); /* a read twice */
  gr_output bc = gr_sub(g, gr_mul(g, x, r), y);               /* x * r broadcasts */
  gr_output i = gr_placeholder(g, "i", GR_I32, xs);
  gr_output ints = gr_add(g, gr_mul(g, i, i), i);
  gr_output nine = x;
  for (int k = 0; k < 9; k++) nine = gr_add(g, nine, y);
  gr_output fetch[4] = {twice, bc, ints, nine};
  gr_feed fd[4];
  gr_tensor v[4] = {gt_random(&rng, GR_F32, xs, -1, 1), gt_random(&rng, GR_F32, xs, -1, 1),
                    gt_random(&rng, GR_F32, r.node->out_shapes[0], -1, 1),
                    gt_random(&rng, GR_I32, xs, -9, 9)};
  gr_output in[4] = {x, y, r, i};
  for (int k = 0; k < 4; k++) fd[k] = (gr_feed){in[k], &v[k]};
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_graph *fg = fused_graph(g, fd, 4, fetch, 4, NULL, 0);
  /* neg, square -> add (a stays); bc: nothing; ints: nothing; nine adds:
   * the last eight (a fused node's limit), the first left alone */
  GR_CHECK_MSG(fg && count_op(fg, "_fused_elementwise") == 2 && count_op(fg, "mul") == 3 &&
                   count_op(fg, "add") == 2 && count_op(fg, "sub") == 1 &&
                   count_op(fg, "neg") == 0 && count_op(fg, "square") == 0,
               "fused %d, mul %d, add %d, sub %d", fg ? count_op(fg, "_fused_elementwise") : -1,
               fg ? count_op(fg, "mul") : -1, fg ? count_op(fg, "add") : -1,
               fg ? count_op(fg, "sub") : -1);
  gr_graph_free(fg);
  check_same_bits(g, fd, 4, fetch, 4, NULL, 0, 1, "limits");
  gr_graph_free(g);
  for (int k = 0; k < 4; k++) gr_tensor_release(&v[k]);
}

/* Updates whose gradient is an elementwise chain: an MLP with an L2 weight
 * penalty, whose weight gradients are add_n(product, scale * w * 2); the
 * chain goes into the apply_* op (attr grad_program), and six steps of
 * each optimizer give the unfused bits (f32 and f64). */
static int count_grad_programs(const gr_graph *g) {
  int k = 0;
  for (int i = 0; g && i < gr_graph_num_nodes(g); i++)
    k += *gr_node_attr_string(gr_graph_node(g, i), "grad_program", "") != '\0';
  return k;
}

static void test_fused_updates(void) {
  for (int k = 0; k < 6; k++) {
    gr_dtype dt = k % 2 ? GR_F64 : GR_F32;
    gr_optimizer opt = {.kind = (gr_optimizer_kind)(k / 2),
                        .learning_rate = 0.05,
                        .momentum = 0.9,
                        .nesterov = k == 3};
    gr_graph *g = gr_graph_new();
    gr_shape xs = gr_shape_make(2, (int64_t[]){17, 11});
    gr_tensor xv = gt_random(&rng, dt, xs, -1, 1);
    gr_tensor lv = gt_zeros(GR_I64, gr_shape_make(1, (int64_t[]){17}));
    for (int i = 0; i < 17; i++) ((int64_t *)gr_tensor_data(&lv))[i] = i % 5;
    gr_tensor w1v = gt_random(&rng, dt, gr_shape_make(2, (int64_t[]){11, 9}), -0.5, 0.5);
    gr_tensor w2v = gt_random(&rng, dt, gr_shape_make(2, (int64_t[]){9, 5}), -0.5, 0.5);
    gr_tensor b1v = gt_random(&rng, dt, gr_shape_make(1, (int64_t[]){9}), -0.1, 0.1);
    gr_output x = gr_placeholder(g, "x", dt, xs);
    gr_output l = gr_placeholder(g, "l", GR_I64, lv.shape);
    gr_output w1 = gr_variable(g, "w1", gr_const(g, &w1v)),
              w2 = gr_variable(g, "w2", gr_const(g, &w2v));
    gr_output b1 = gr_variable(g, "b1", gr_const(g, &b1v));
    gr_output h = gr_relu(g, gr_add(g, gr_matmul(g, x, w1, false, false), b1));
    gr_output logits = gr_matmul(g, h, w2, false, false);
    gr_output ce = gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, l), NULL, 0, false);
    gr_output l2 = gr_add(g, gr_reduce_sum(g, gr_square(g, w1), NULL, 0, false),
                          gr_reduce_sum(g, gr_square(g, w2), NULL, 0, false));
    gr_output decay = dt == GR_F32 ? gr_const_f32(g, 1e-2f) : gr_const_f64(g, 1e-2);
    gr_output loss = gr_add(g, ce, gr_mul(g, decay, l2));
    gr_output train = gr_minimize(g, &opt, loss, NULL, 0);
    gr_output fetch[4] = {loss, w1, w2, b1};
    gr_feed fd[2] = {{x, &xv}, {l, &lv}};
    char what[64];
    snprintf(what, sizeof what, "%s %s%s", gr_dtype_name(dt),
             k / 2 == 0   ? "sgd"
             : k / 2 == 1 ? "momentum"
                          : "adam",
             k == 3 ? " (Nesterov)" : "");
    GR_CHECK_MSG(!gr_graph_error(g), "%s: %s", what, gr_graph_error(g)->msg);
    if (!gr_graph_error(g)) {
      gr_graph *fg = fused_graph(g, fd, 2, fetch, 4, &train, 1);
      /* both weights' updates take their gradient's chain; no add_n left */
      GR_CHECK_MSG(count_grad_programs(fg) == 2 && count_op(fg, "add_n") == 0,
                   "%s: %d updates with grad_program, %d add_n left", what, count_grad_programs(fg),
                   fg ? count_op(fg, "add_n") : -1);
      gr_graph_free(fg);
      check_same_bits(g, fd, 2, fetch, 4, &train, 1, 6, what);
    }
    gr_graph_free(g);
    gr_tensor_release(&xv), gr_tensor_release(&lv), gr_tensor_release(&w1v);
    gr_tensor_release(&w2v), gr_tensor_release(&b1v);
  }
}

/* Buffers allocated by one run of s (after a first run). */
static uint64_t step_allocs(gr_session *s, const gr_feed *f, int nf, const gr_output *x) {
  gr_error err;
  gr_tensor out;
  uint64_t n = 0;
  for (int run = 0; run < 2; run++) {
    gr_buffer_pool_stats a, b;
    gr_buffer_pool_get_stats(&a);
    GR_CHECK_OK(gr_session_run(s, f, nf, x, 1, &out, NULL, 0, &err), err);
    gr_buffer_pool_get_stats(&b);
    n = (b.system_allocs + b.pool_hits) - (a.system_allocs + a.pool_hits);
    gr_tensor_release(&out);
  }
  return n;
}

/* In place: a chain whose input dies with it (exp's output) writes over
 * that input's buffer, as the unfused ops do one after the other: the
 * fused step allocates as many buffers as the unfused one (exp's output),
 * one fewer than a fused node that allocated its own. */
static void test_elementwise_in_place(void) {
  gr_graph *g = gr_graph_new();
  gr_shape xs = gr_shape_make(1, (int64_t[]){1001});
  gr_output x = gr_placeholder(g, "x", GR_F32, xs);
  gr_output e = gr_exp(g, x);
  gr_output y = gr_add(g, gr_mul(g, e, gr_const_f32(g, 2)), x);
  gr_tensor xv = gt_random(&rng, GR_F32, xs, -1, 1);
  gr_feed fd = {x, &xv};
  gr_graph *fg = fused_graph(g, &fd, 1, &y, 1, NULL, 0);
  GR_CHECK(fg && count_op(fg, "_fused_elementwise") == 1 && count_op(fg, "exp") == 1);
  gr_graph_free(fg);
  uint64_t allocs[2];
  for (int fuse = 0; fuse < 2; fuse++) {
    gr_error err;
    gr_session_options o = {.inter_op_threads = 1, .no_fusion = !fuse};
    gr_session *s = gr_session_new(g, &o, &err);
    GR_CHECK_MSG(s, "%s", s ? "" : err.msg);
    allocs[fuse] = s ? step_allocs(s, &fd, 1, &y) : 0;
    gr_session_free(s);
  }
  GR_CHECK_MSG(allocs[1] == allocs[0] && allocs[0] >= 1, "%llu buffers fused, %llu unfused",
               (unsigned long long)allocs[1], (unsigned long long)allocs[0]);
  check_same_bits(g, &fd, 1, &y, 1, NULL, 0, 1, "in place");
  gr_graph_free(g);
  gr_tensor_release(&xv);
}

/* _fused_elementwise built by hand: its errors name the program. */
static void test_fused_elementwise_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){4}));
  gr_output y = gr_placeholder(g, "y", GR_F32, gr_shape_make(1, (int64_t[]){5}));
  gr_output d = gr_placeholder(g, "d", GR_F64, gr_shape_make(1, (int64_t[]){4}));
  static const char *const bad[][2] = {{"mul 0 2", "an operand is not an input"},
                                       {"tanh 0", "no unary op"},
                                       {"add 0", "no unary op"},
                                       {"neg 0 1", "no binary op"},
                                       {"", "no steps"},
                                       {"neg 0;;", "want 'op operand"},
                                       {"neg 2;neg 1", "an operand is not"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    gr_attr a = gr_attr_string("program", bad[k][0]);
    char name[16];
    snprintf(name, sizeof name, "e%zu", k);
    GR_CHECK_MSG(
        gt_build_failed(gr_op(g, "_fused_elementwise", name, (gr_output[]){x, x}, 2, &a, 1), g,
                        GR_ERR_INVALID_ARGUMENT, bad[k][1]),
        "program '%s'", bad[k][0]);
  }
  gr_attr add = gr_attr_string("program", "add 0 1");
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_elementwise", "s", (gr_output[]){x, y}, 2, &add, 1), g,
                           GR_ERR_SHAPE, "neither a scalar nor"));
  GR_CHECK(gt_build_failed(gr_op(g, "_fused_elementwise", "t", (gr_output[]){x, d}, 2, &add, 1), g,
                           GR_ERR_DTYPE, ""));
  gr_output ok = gr_op(g, "_fused_elementwise", "ok", (gr_output[]){x, x}, 2, &add, 1);
  gr_output dx;
  GR_CHECK(ok.node && gr_gradients(g, &ok, 1, &x, 1, NULL, false, &dx) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK(gr_graph_error(g) && strstr(gr_graph_error(g)->msg, "'ok' is a _fused_elementwise"));
  gr_graph_free(g);
}

int main(void) {
  gr_init();
  GR_RUN(test_conv_epilogues);
  GR_RUN(test_training_fused);
  GR_RUN(test_training_threads);
  GR_RUN(test_training_two_devices);
  GR_RUN(test_chains_left_alone);
  GR_RUN(test_fused_op_errors);
  GR_RUN(test_elementwise_chains);
  GR_RUN(test_elementwise_limits);
  GR_RUN(test_fused_elementwise_errors);
  GR_RUN(test_fused_updates);
  GR_RUN(test_elementwise_in_place);
  return gr_test_finish();
}
