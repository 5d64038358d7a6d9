/* The random graphs of the partition property test, shared with the tests
 * that must give the same results another way (serialization, the
 * distributed runtime): see random_graph.h. */
#include "random_graph.h"

#include <string.h>

#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

/* These helpers serve many test programs: a failure ends the program (a
 * failed test) rather than counting in a file of its own. */
static void must_not_fail(const char *what, uint64_t seed, const gr_error *err) {
  fprintf(stderr, "random graph: %s a random graph (seed %llu) failed: %s\n", what,
          (unsigned long long)seed, err->msg);
  abort();
}

void gt_then_fn(gr_graph *g, void *p, gr_output *outs) {
  gt_branch_arg *a = p;
  if (a->dev_then >= 0) gt_pin(g, a->dev_then);
  outs[0] = gr_mul(g, gr_tanh(g, a->a), a->b);
  if (a->dev_then >= 0) gr_graph_pop_device_scope(g);
}
void gt_else_fn(gr_graph *g, void *p, gr_output *outs) {
  gt_branch_arg *a = p;
  if (a->dev_else >= 0) gt_pin(g, a->dev_else);
  outs[0] = gr_sub(g, a->a, gr_relu(g, a->b));
  if (a->dev_else >= 0) gr_graph_pop_device_scope(g);
}

typedef struct loop_arg {
  gr_output w, limit;
  gt_rng *dr; /* device draws; NULL: no pins */
  int devices;
  int inner;      /* > 0: the body runs an inner loop of inner - 1 iterations too */
  bool with_cond; /* the body runs a cond too */
} loop_arg;
static void loop_pin(gr_graph *g, loop_arg *a) {
  if (a->dr) gt_pin(g, (int)gt_int(a->dr, 0, a->devices - 1));
}
static void loop_unpin(gr_graph *g, loop_arg *a) {
  if (a->dr) gr_graph_pop_device_scope(g);
}
static gr_output loop_cond(gr_graph *g, void *p, const gr_output *v) {
  loop_arg *a = p;
  loop_pin(g, a);
  gr_output c = gr_less(g, v[0], a->limit);
  loop_unpin(g, a);
  return c;
}
/* Every op of the body on a device of its own draw. */
static void loop_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  loop_arg *a = p;
  loop_pin(g, a);
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  loop_unpin(g, a);
  loop_pin(g, a);
  gr_output m = gr_matmul(g, v[1], a->w, false, false);
  loop_unpin(g, a);
  loop_pin(g, a);
  gr_output s = gr_add(g, m, v[1]);
  loop_unpin(g, a);
  if (a->inner) { /* an inner loop on s, its ops spread too */
    loop_arg in = {a->w, gr_const_i64(g, a->inner - 1), a->dr, a->devices, 0, a->with_cond};
    gr_output iv[2] = {gr_const_i64(g, 0), s};
    gr_while_loop(g, loop_cond, loop_body, &in, 2, iv, 0);
    s = iv[1];
  }
  if (a->with_cond) { /* a cond in the body, its branches on devices of their own */
    gt_branch_arg ba = {s, m, a->dr ? (int)gt_int(a->dr, 0, a->devices - 1) : -1,
                        a->dr ? (int)gt_int(a->dr, 0, a->devices - 1) : -1};
    loop_pin(g, a);
    gr_output pred = gr_greater(g, gr_reduce_sum(g, s, NULL, 0, false), gr_const_f32(g, 0));
    gr_cond(g, pred, gt_then_fn, gt_else_fn, &ba, 1, &s);
    loop_unpin(g, a);
  }
  loop_pin(g, a);
  next[1] = gr_tanh(g, s);
  loop_unpin(g, a);
}

/* A random DAG over [4,4] f32 values. devices 0: no pins; else each node is
 * pinned to a random one of `devices` (drawn from dev_rng, so the structure
 * does not depend on the placement). */
gt_rgraph gt_random_graph(uint64_t seed, int devices, uint64_t dev_seed, bool with_cf) {
  gt_rng r = {seed}, dr = {dev_seed};
  gt_rgraph rg;
  memset(&rg, 0, sizeof rg);
  gr_graph *g = rg.g = gr_graph_new();
  gr_graph_set_seed(g, seed);
  gr_output vals[64];
  int nv = 0;
#define PIN()                                                                                      \
  if (devices) gt_pin(g, (int)gt_int(&dr, 0, devices - 1))
#define UNPIN()                                                                                    \
  if (devices) gr_graph_pop_device_scope(g)
  gr_shape s44 = {2, {4, 4}};
  PIN();
  rg.x = vals[nv++] = gr_placeholder(g, "x", GR_F32, s44);
  UNPIN();
  PIN();
  gr_tensor cv = gt_random(&(gt_rng){seed ^ 7}, GR_F32, s44, -1, 1);
  vals[nv++] = gr_const(g, &cv);
  gr_tensor_release(&cv);
  UNPIN();
  PIN();
  vals[nv++] = gr_variable(g, "v", gr_random_uniform(g, GR_F32, s44, -1, 1, 3));
  UNPIN();
  int n = (int)gt_int(&r, 6, 24);
  for (int i = 0; i < n; i++) {
    gr_output a = vals[gt_int(&r, 0, nv - 1)], b = vals[gt_int(&r, 0, nv - 1)];
    bool ctrl = gt_int(&r, 0, 5) == 0;
    gr_output dep = vals[gt_int(&r, 0, nv - 1)];
    int kind = (int)gt_int(&r, 0, 7);
    PIN();
    if (ctrl) gr_graph_push_control_deps(g, &dep, 1);
    gr_output y;
    switch (kind) {
      case 0:
        y = gr_add(g, a, b);
        break;
      case 1:
        y = gr_sub(g, a, b);
        break;
      case 2:
        y = gr_mul(g, a, b);
        break;
      case 3:
        y = gr_matmul(g, a, b, false, gt_int(&r, 0, 1));
        break;
      case 4:
        y = gr_tanh(g, a);
        break;
      case 5:
        y = gr_maximum(g, a, gr_neg(g, b));
        break;
      case 6:
        y = gr_add(g, a, gr_reduce_sum(g, b, (int64_t[]){1}, 1, true));
        break;
      default:
        y = gr_mul(g, a, gr_random_uniform(g, GR_F32, s44, 0, 1, 0));
        break;
    }
    if (ctrl) gr_graph_pop_control_deps(g);
    UNPIN();
    vals[nv++] = y;
  }
  rg.fetches[rg.nf++] = vals[nv - 1];
  rg.fetches[rg.nf++] = vals[nv - 2];
  rg.fetches[rg.nf++] = vals[gt_int(&r, 3, nv - 1)];
  if (with_cf) {
    /* a cond whose branches may live on other devices than its switch */
    gt_branch_arg ba = {vals[gt_int(&r, 0, nv - 1)], vals[gt_int(&r, 0, nv - 1)],
                        devices ? (int)gt_int(&dr, 0, devices - 1) : -1,
                        devices ? (int)gt_int(&dr, 0, devices - 1) : -1};
    gr_output out;
    PIN();
    gr_output pred = gr_greater(g, gr_reduce_sum(g, vals[gt_int(&r, 0, nv - 1)], NULL, 0, false),
                                gr_const_f32(g, 0));
    gr_cond(g, pred, gt_then_fn, gt_else_fn, &ba, 1, &out);
    UNPIN();
    rg.fetches[rg.nf++] = out;
    /* a loop (nested in every third case) whose ops are spread over the
     * devices, using values from other devices */
    loop_arg la = {gr_mul(g, vals[gt_int(&r, 0, nv - 1)], gr_const_f32(g, 0.25f)),
                   gr_const_i64(g, gt_int(&r, 0, 4)),
                   devices ? &dr : NULL,
                   devices,
                   seed % 3 == 0 ? (int)gt_int(&r, 1, 3) : 0,
                   seed % 4 == 2};
    gr_output lv[2] = {gr_const_i64(g, 0), vals[gt_int(&r, 0, nv - 1)]};
    PIN();
    gr_while_loop(g, loop_cond, loop_body, &la, 2, lv, (int)gt_int(&r, 1, 4));
    UNPIN();
    rg.fetches[rg.nf++] = gr_add(g, lv[1], out);
  }
#undef PIN
#undef UNPIN
  if (gr_graph_error(g)) must_not_fail("building", seed, gr_graph_error(g));
  return rg;
}

/* Runs rg for two steps; writes the fetched values of the second. */
void gt_random_graph_run(gt_rgraph *rg, int devices, int threads, bool schedule_recvs,
                         gr_tensor *out) {
  gr_error err;
  gr_session_options o = {
      .num_devices = devices, .inter_op_threads = threads, .schedule_recvs = schedule_recvs};
  gr_session *s = gr_session_new(rg->g, &o, &err);
  if (!s) must_not_fail("making a session for", 0, &err);
  gt_random_graph_run_session(rg, s, out);
  gr_session_free(s);
}

void gt_random_graph_run_session(gt_rgraph *rg, gr_session *s, gr_tensor *out) {
  gr_error err;
  gr_tensor xv = gt_random(&(gt_rng){99}, GR_F32, (gr_shape){2, {4, 4}}, -1, 1);
  gr_feed f = {rg->x, &xv};
  for (int step = 0; step < 2; step++) {
    if (gr_session_run(s, &f, 1, rg->fetches, rg->nf, out, NULL, 0, &err) != GR_OK)
      must_not_fail("running", 0, &err);
    if (step == 0)
      for (int i = 0; i < rg->nf; i++) gr_tensor_release(&out[i]);
  }
  gr_tensor_release(&xv);
}
