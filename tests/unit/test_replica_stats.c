/* Batch norm and random ops in in-graph replicas (gr_replicate), in one
 * process whose devices carry cluster names (the partitions run as on a
 * cluster): the moving statistics get one update per step, on the device of
 * their variable, from the mean of the replicas' batch statistics (and the
 * same update on every copy of mirrored ones), the replicas' batch norms
 * making none of their own; a single replica gets the same update from
 * the whole batch; dropout and flips draw other numbers in each
 * replica, the same on a rerun. The cluster run of the CNN is
 * test_dist_cnn.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static const char *const names[3] = {"/job:worker/replica:0/task:0/device:CPU:0",
                                     "/job:worker/replica:0/task:1/device:CPU:0",
                                     "/job:ps/replica:0/task:0/device:CPU:0"};
static const char *const two[] = {"/job:worker/task:0", "/job:worker/task:1"};

enum { ROWS = 8, C = 3 };
#define MOMENTUM 0.9

typedef struct bn_model {
  gr_output gamma, beta, mm, mv;
  bool read_value; /* the body reads the moving statistics through read_value nodes of its own */
} bn_model;

/* outputs: the mean of y, the batch mean and variance (batch_norm's 1, 3) */
static gr_status bn_body(gr_graph *g, void *arg, int replica, const gr_output *in, gr_output *out) {
  bn_model *m = arg;
  (void)replica;
  gr_output mm = m->read_value ? gr_read_value(g, m->mm) : m->mm;
  gr_output mv = m->read_value ? gr_read_value(g, m->mv) : m->mv;
  gr_output y = gr_batch_norm(g, in[0], m->gamma, m->beta, mm, mv, true, MOMENTUM, 1e-3, NULL);
  out[0] = gr_reduce_mean(g, y, NULL, 0, false);
  out[1] = gr_output_at(y, 1);
  out[2] = gr_output_at(y, 3);
  return GR_OK;
}

typedef struct bn_run {
  gr_tensor stats[2][2]; /* replica, mean / variance of step 1 */
  gr_tensor moving[2];   /* after steps */
  gr_tensor copies[2];   /* mirrored: replica 1's copies */
} bn_run;

static bool read_value_nodes; /* bn_model.read_value */

/* x [ROWS, 2, 2, C] through 2 replicas (n = 2) or 1, the variables on the
 * ps or (mirrored) on worker 0; runs `steps` steps. */
static bool run_bn(int n, bool mirrored, int steps, bn_run *res) {
  gr_graph *g = gr_graph_new();
  gt_rng r = {11};
  gr_tensor xv = gt_random(&r, GR_F32, gr_shape_make(4, (int64_t[]){ROWS, 2, 2, C}), -2, 3);
  gr_output x = gr_const(g, &xv);
  gr_tensor_release(&xv);
  gr_shape cs = gr_shape_make(1, (int64_t[]){C});
  gr_graph_push_device_scope(g, mirrored ? "/job:worker/task:0" : "/job:ps/task:0");
  bn_model m = {gr_variable(g, "gamma", gr_ones(g, GR_F32, cs)),
                gr_variable(g, "beta", gr_zeros(g, GR_F32, cs)),
                gr_variable(g, "mm", gr_zeros(g, GR_F32, cs)),
                gr_variable(g, "mv", gr_ones(g, GR_F32, cs)), read_value_nodes};
  gr_graph_pop_device_scope(g);
  gr_output out[3], per[2 * 3];
  gr_replicate_options o = {
      .num_replicas = n, .devices = two, .mirror_variables = mirrored, .per_replica = per};
  bool ok = gr_replicate(g, &o, &x, 1, bn_body, &m, 3, out) == GR_OK;
  int updates = 0, off = 0;
  for (int id = 0; ok && id < gr_graph_num_nodes(g); id++) {
    gr_node *u = gr_graph_node(g, id);
    if (strcmp(u->op->name, "moving_average_update") == 0) {
      updates++; /* where the variable lives */
      GR_CHECK_STR_CONTAINS(gr_graph_resolve_device(g, u),
                            mirrored ? "/job:worker/task:" : "/job:ps/task:0");
      GR_CHECK_EQ_INT(u->num_inputs, n);
    }
    off += strcmp(u->op->name, "batch_norm") == 0 && !gr_node_attr_bool(u, "update_moving", true);
  }
  GR_CHECK_EQ_INT(updates, mirrored ? 2 * n : 2);
  GR_CHECK_EQ_INT(off, n);
  gr_error err;
  gr_session_options so = {.num_devices = 3, .device_names = names, .inter_op_threads = 2};
  gr_session *s = ok ? gr_session_new(g, &so, &err) : NULL;
  ok = s != NULL;
  for (int k = 0; k < steps && ok; k++) {
    gr_tensor t[1 + 2 * 3];
    gr_output f[1 + 2 * 3] = {out[0]};
    int nf = 1;
    for (int i = 0; i < n; i++) f[nf++] = per[i * 3 + 1], f[nf++] = per[i * 3 + 2];
    ok = gr_session_run(s, NULL, 0, f, nf, t, NULL, 0, &err) == GR_OK;
    for (int i = 0; ok && i < nf; i++) {
      if (k == 0 && i > 0)
        res->stats[(i - 1) / 2][(i - 1) % 2] = t[i];
      else
        gr_tensor_release(&t[i]);
    }
  }
  if (ok)
    ok = gr_session_run(s, NULL, 0, (gr_output[]){m.mm, m.mv}, 2, res->moving, NULL, 0, &err) ==
         GR_OK;
  if (ok && mirrored) {
    gr_node *c0 = gr_graph_find_node(g, "mm/replica_1"),
            *c1 = gr_graph_find_node(g, "mv/replica_1");
    GR_CHECK(c0 && c1);
    ok = c0 && c1 &&
         gr_session_run(s, NULL, 0, (gr_output[]){{c0, 0}, {c1, 0}}, 2, res->copies, NULL, 0,
                        &err) == GR_OK;
  }
  if (!ok) fprintf(stderr, "%s\n", gr_graph_error(g) ? gr_graph_error(g)->msg : err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  return ok;
}

static void release_run(bn_run *r, int n, bool mirrored) {
  for (int i = 0; i < n; i++)
    gr_tensor_release(&r->stats[i][0]), gr_tensor_release(&r->stats[i][1]);
  gr_tensor_release(&r->moving[0]), gr_tensor_release(&r->moving[1]);
  if (mirrored) gr_tensor_release(&r->copies[0]), gr_tensor_release(&r->copies[1]);
}

/* The statistics of rows [lo, hi) of the same x, in double: mean and the
 * variance with Bessel's correction. */
static void direct_stats(int lo, int hi, double *mean, double *var) {
  gt_rng r = {11};
  gr_tensor xv = gt_random(&r, GR_F32, gr_shape_make(4, (int64_t[]){ROWS, 2, 2, C}), -2, 3);
  int per = 2 * 2 * C, cnt = (hi - lo) * 4;
  for (int c = 0; c < C; c++) {
    double s = 0, ss = 0;
    for (int i = lo * per + c; i < hi * per; i += C) s += gr_tensor_get_f64(&xv, i);
    mean[c] = s / cnt;
    for (int i = lo * per + c; i < hi * per; i += C) {
      double d = gr_tensor_get_f64(&xv, i) - mean[c];
      ss += d * d;
    }
    var[c] = ss / (cnt - 1);
  }
  gr_tensor_release(&xv);
}

/* One step: moving = 0.9 moving + 0.1 (s0 + s1) / 2, bit for bit (the
 * kernel's double arithmetic, in replica order), once per variable even
 * when each replica reads it through a read_value of its own; each
 * replica's statistics are its own half's. */
static void test_moving_stats_averaged(void) {
  for (int mode = 0; mode < 3; mode++) { /* ps; mirrored; ps, through read_value nodes */
    bool mirrored = mode == 1;
    read_value_nodes = mode == 2;
    bn_run r;
    bool ok = run_bn(2, mirrored, 1, &r);
    read_value_nodes = false;
    GR_CHECK_MSG(ok, "mode %d", mode);
    if (!ok) continue;
    for (int k = 0; k < 2; k++) {
      double mean[C], var[C];
      direct_stats(k * ROWS / 2, (k + 1) * ROWS / 2, mean, var);
      for (int c = 0; c < C; c++) {
        GR_CHECK(fabs(gr_tensor_get_f64(&r.stats[k][0], c) - mean[c]) < 1e-6);
        GR_CHECK(fabs(gr_tensor_get_f64(&r.stats[k][1], c) - var[c]) < 1e-5);
      }
    }
    for (int c = 0; c < C; c++) {
      double m = (gr_tensor_get_f64(&r.stats[0][0], c) + gr_tensor_get_f64(&r.stats[1][0], c)) / 2;
      double v = (gr_tensor_get_f64(&r.stats[0][1], c) + gr_tensor_get_f64(&r.stats[1][1], c)) / 2;
      float wm = (float)(MOMENTUM * 0.0 + (1 - MOMENTUM) * m);
      float wv = (float)(MOMENTUM * 1.0 + (1 - MOMENTUM) * v);
      GR_CHECK_MSG(gr_tensor_get_f64(&r.moving[0], c) == wm, "mean %d: %.9g, want %.9g", c,
                   gr_tensor_get_f64(&r.moving[0], c), wm);
      GR_CHECK_MSG(gr_tensor_get_f64(&r.moving[1], c) == wv, "variance %d: %.9g, want %.9g", c,
                   gr_tensor_get_f64(&r.moving[1], c), wv);
      GR_CHECK(gr_tensor_get_f64(&r.stats[0][1], c) != gr_tensor_get_f64(&r.stats[1][1], c));
    }
    if (mirrored) { /* replica 1's copies got the same update */
      GR_CHECK(gt_bit_equal(&r.copies[0], &r.moving[0]));
      GR_CHECK(gt_bit_equal(&r.copies[1], &r.moving[1]));
    }
    release_run(&r, 2, mirrored);
  }
}

/* Several steps: the same bits on a rerun; the copies stay equal. */
static void test_moving_stats_repeat(void) {
  bn_run a, b;
  bool oka = run_bn(2, true, 5, &a), okb = run_bn(2, true, 5, &b);
  GR_CHECK(oka && okb);
  if (!oka || !okb) {
    if (oka) release_run(&a, 2, true);
    if (okb) release_run(&b, 2, true);
    return;
  }
  for (int i = 0; i < 2; i++) {
    GR_CHECK(gt_bit_equal(&a.moving[i], &b.moving[i]));
    GR_CHECK(gt_bit_equal(&a.copies[i], &a.moving[i]));
  }
  /* five steps on the same x: moving mean = (1 - 0.9^5) of the batch mean */
  double m = (gr_tensor_get_f64(&a.stats[0][0], 0) + gr_tensor_get_f64(&a.stats[1][0], 0)) / 2;
  GR_CHECK(fabs(gr_tensor_get_f64(&a.moving[0], 0) - (1 - pow(MOMENTUM, 5)) * m) < 1e-6);
  release_run(&a, 2, true), release_run(&b, 2, true);
}

/* One replica on a worker, the variables on the ps: the same update, from
 * the whole batch. */
static void test_single_replica(void) {
  bn_run r;
  bool ok = run_bn(1, false, 1, &r);
  GR_CHECK(ok);
  if (!ok) return;
  double mean[C], var[C];
  direct_stats(0, ROWS, mean, var);
  for (int c = 0; c < C; c++) {
    GR_CHECK(fabs(gr_tensor_get_f64(&r.moving[0], c) - (1 - MOMENTUM) * mean[c]) < 1e-6);
    float wv = (float)(MOMENTUM + (1 - MOMENTUM) * gr_tensor_get_f64(&r.stats[0][1], c));
    GR_CHECK(gr_tensor_get_f64(&r.moving[1], c) == wv &&
             fabs(wv - (MOMENTUM + 0.1 * var[c])) < 1e-6);
  }
  release_run(&r, 1, false);
}

/* Dropout and flips of the same rows in two replicas: other draws in each
 * (their nodes' names differ: replica_0/..., replica_1/...), the same bits
 * in a second graph. */
static gr_status random_body(gr_graph *g, void *arg, int replica, const gr_output *in,
                             gr_output *out) {
  (void)arg, (void)replica;
  out[0] = gr_output_at(gr_dropout(g, in[0], 0.5, 3, true), 1);
  out[1] = gr_random_flip_left_right(g, in[0], 1);
  return GR_OK;
}

static bool run_random(gr_tensor res[4]) {
  gr_graph *g = gr_graph_new();
  gt_rng r = {5};
  gr_tensor half = gt_random(&r, GR_F32, gr_shape_make(4, (int64_t[]){16, 4, 5, 1}), 0, 1);
  gr_output h = gr_const(g, &half);
  gr_tensor_release(&half);
  gr_output x = gr_concat(g, (gr_output[]){h, h}, 2, 0); /* both replicas get the same rows */
  gr_output out[2], per[4];
  gr_replicate_options o = {.num_replicas = 2, .devices = two, .per_replica = per};
  gr_error err;
  bool ok = gr_replicate(g, &o, &x, 1, random_body, NULL, 2, out) == GR_OK;
  gr_session_options so = {.num_devices = 3, .device_names = names, .inter_op_threads = 2};
  gr_session *s = ok ? gr_session_new(g, &so, &err) : NULL;
  ok = s && gr_session_run(s, NULL, 0, per, 4, res, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "%s\n", gr_graph_error(g) ? gr_graph_error(g)->msg : err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  return ok;
}

static void test_random_per_replica(void) {
  gr_tensor a[4], b[4];
  bool oka = run_random(a), okb = run_random(b);
  GR_CHECK(oka && okb);
  if (!oka || !okb) return;
  size_t bytes = gr_tensor_num_bytes(&a[0]), ib = gr_tensor_num_bytes(&a[1]);
  GR_CHECK_MSG(memcmp(gr_tensor_data(&a[0]), gr_tensor_data(&a[2]), bytes) != 0,
               "both replicas drew the same dropout mask");
  GR_CHECK_MSG(memcmp(gr_tensor_data(&a[1]), gr_tensor_data(&a[3]), ib) != 0,
               "both replicas flipped the same images");
  for (int i = 0; i < 4; i++) {
    GR_CHECK(gt_bit_equal(&a[i], &b[i]));
    gr_tensor_release(&a[i]), gr_tensor_release(&b[i]);
  }
}

int main(void) {
  GR_RUN(test_moving_stats_averaged);
  GR_RUN(test_moving_stats_repeat);
  GR_RUN(test_single_replica);
  GR_RUN(test_random_per_replica);
  return gr_test_finish();
}
