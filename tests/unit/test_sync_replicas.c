/* Gradient accumulators (ops/accumulator.c) and synchronous replicas with
 * aggregation (ops/sync_replicas.c, TensorFlow's SyncReplicasOptimizer):
 * the accumulator's mean against a plain sum, stale gradients dropped and
 * counted, a take that waits for another client's gradients and one woken
 * by the step timeout, bad inputs; then between-graph training: workers
 * with graphs of their own, sessions sharing one container (the ps), a
 * chief thread running the update. Two workers give the same weights bit
 * for bit as in-graph replicas on the same batches (the mean of two
 * gradients is exact in any order), and the one-worker model on the whole
 * batch within 1e-6 (another summation order); a backup worker's late
 * gradients are dropped and counted; the DSL form. Every wait is bounded
 * by a step timeout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

#define TIMEOUT_MS 20000

static const char *graph_msg(gr_graph *g) {
  return gr_graph_error(g) ? gr_graph_error(g)->msg : "";
}

static gr_session *session_on(gr_graph *g, gr_resource_mgr *m, int timeout_ms) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = 2, .resources = m, .step_timeout_ms = timeout_ms};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  return s;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { /* xorshift, in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* ---- accumulators ------------------------------------------------------------------------ */

typedef struct acc_graph {
  gr_graph *g;
  gr_output acc, step, grad, apply, take, count, dropped, set;
} acc_graph;

static void acc_graph_make(acc_graph *t) {
  gr_graph *g = t->g = gr_graph_new();
  gr_shape sh = gr_shape_make(1, (int64_t[]){5});
  t->acc = gr_accumulator(g, "w/grad_accum", GR_F64, sh);
  t->step = gr_placeholder(g, "step", GR_I64, gr_shape_scalar());
  t->grad = gr_placeholder(g, "grad", GR_F64, sh);
  t->apply = gr_accumulator_apply_grad(g, t->acc, t->step, t->grad);
  t->take = gr_accumulator_take_grad(g, t->acc, gr_const_i64(g, 3));
  t->count = gr_accumulator_num_accumulated(g, t->acc);
  t->dropped = gr_accumulator_num_dropped(g, t->acc);
  t->set = gr_accumulator_set_global_step(g, t->acc, t->step);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
}

static gr_status apply(gr_session *s, acc_graph *t, int64_t step, const double *v, gr_error *err) {
  gr_tensor st = gr_tensor_scalar_i64(step), gt;
  gr_tensor_from_data(&gt, GR_F64, &(gr_shape){1, {5}}, v, err);
  gr_feed f[2] = {{t->step, &st}, {t->grad, &gt}};
  gr_status r = gr_session_run(s, f, 2, NULL, 0, NULL, &t->apply, 1, err);
  gr_tensor_release(&st), gr_tensor_release(&gt);
  return r;
}

static int64_t fetch_i64(gr_session *s, gr_output o) {
  gr_tensor t;
  gr_error err;
  if (gr_session_run(s, NULL, 0, &o, 1, &t, NULL, 0, &err) != GR_OK) return -1;
  int64_t v = (int64_t)gr_tensor_get_f64(&t, 0);
  gr_tensor_release(&t);
  return v;
}

static void test_accumulator_mean_and_stale(void) {
  acc_graph t;
  acc_graph_make(&t);
  gr_session *s = session_on(t.g, NULL, TIMEOUT_MS);
  gr_error err;
  double g[3][5], sum[5] = {0};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 5; i++) g[k][i] = uniform();
  gr_tensor h;
  GR_CHECK(gr_session_run(s, NULL, 0, &t.acc, 1, &h, NULL, 0, &err) == GR_OK);
  gr_tensor_release(&h);
  for (int k = 0; k < 3; k++) {
    GR_CHECK_MSG(apply(s, &t, 0, g[k], &err) == GR_OK, "%s", err.msg);
    for (int i = 0; i < 5; i++) sum[i] += g[k][i];
  }
  GR_CHECK_EQ_INT(fetch_i64(s, t.count), 3);
  gr_tensor mean;
  GR_CHECK(gr_session_run(s, NULL, 0, &t.take, 1, &mean, NULL, 0, &err) == GR_OK);
  for (int i = 0; i < 5; i++)
    GR_CHECK_MSG(gr_tensor_get_f64(&mean, i) == sum[i] / 3, "%d: %.17g vs %.17g", i,
                 gr_tensor_get_f64(&mean, i), sum[i] / 3);
  gr_tensor_release(&mean);
  GR_CHECK_EQ_INT(fetch_i64(s, t.count), 0);
  /* the take advanced the step to 1: a gradient of step 0 is dropped */
  GR_CHECK(apply(s, &t, 0, g[0], &err) == GR_OK);
  GR_CHECK_EQ_INT(fetch_i64(s, t.count), 0);
  GR_CHECK_EQ_INT(fetch_i64(s, t.dropped), 1);
  GR_CHECK(apply(s, &t, 1, g[0], &err) == GR_OK);
  GR_CHECK_EQ_INT(fetch_i64(s, t.count), 1);
  /* set_global_step raises the step: step 1 is stale now */
  gr_tensor five = gr_tensor_scalar_i64(5);
  gr_feed f = {t.step, &five};
  GR_CHECK(gr_session_run(s, &f, 1, NULL, 0, NULL, &t.set, 1, &err) == GR_OK);
  GR_CHECK(apply(s, &t, 4, g[0], &err) == GR_OK);
  GR_CHECK_EQ_INT(fetch_i64(s, t.dropped), 2);
  gr_tensor_release(&five);
  gr_session_free(s);
  gr_graph_free(t.g);
}

typedef struct take_bg {
  gr_session *s;
  acc_graph *t;
  gr_status st;
  gr_error err;
  int finished;
} take_bg;

static void *take_run(void *arg) {
  take_bg *b = arg;
  gr_tensor m;
  b->st = gr_session_run(b->s, NULL, 0, &b->t->take, 1, &m, NULL, 0, &b->err);
  if (b->st == GR_OK) gr_tensor_release(&m);
  __atomic_store_n(&b->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_take_waits_and_times_out(void) {
  gr_resource_mgr *m = gr_resource_mgr_new();
  acc_graph t;
  acc_graph_make(&t);
  gr_session *a = session_on(t.g, m, TIMEOUT_MS), *b = session_on(t.g, m, TIMEOUT_MS);
  gr_error err;
  gr_tensor h;
  GR_CHECK(gr_session_run(a, NULL, 0, &t.acc, 1, &h, NULL, 0, &err) == GR_OK);
  gr_tensor_release(&h);
  take_bg bg = {.s = a, .t = &t};
  pthread_t th;
  pthread_create(&th, NULL, take_run, &bg);
  double g[5] = {1, 2, 3, 4, 5};
  for (int k = 0; k < 3; k++) {
    usleep(50 * 1000);
    GR_CHECK_MSG(!__atomic_load_n(&bg.finished, __ATOMIC_ACQUIRE), "took before gradient %d", k);
    GR_CHECK(apply(b, &t, 0, g, &err) == GR_OK);
  }
  for (int i = 0; i < 5000 && !__atomic_load_n(&bg.finished, __ATOMIC_ACQUIRE); i++) usleep(1000);
  GR_CHECK(__atomic_load_n(&bg.finished, __ATOMIC_ACQUIRE));
  pthread_join(th, NULL);
  GR_CHECK_MSG(bg.st == GR_OK, "%s", bg.err.msg);
  /* nobody applies: the step timeout ends the take */
  gr_session *c = session_on(t.g, m, 300);
  gr_tensor out;
  gr_status st = gr_session_run(c, NULL, 0, &t.take, 1, &out, NULL, 0, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "accumulator_take_grad");
  gr_session_free(a), gr_session_free(b), gr_session_free(c);
  gr_graph_free(t.g);
  gr_resource_mgr_free(m);
}

static void test_accumulator_bad_inputs(void) {
  gr_graph *g = gr_graph_new();
  gr_output acc = gr_accumulator(g, "a", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_accumulator_apply_grad(g, acc, gr_const_i64(g, 0),
                            gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){4})));
  GR_CHECK_STR_CONTAINS(graph_msg(g), "accumulator_apply_grad");
  GR_CHECK_STR_CONTAINS(graph_msg(g), "grad has shape [4], accumulator 'a' holds [3]");
  gr_graph_clear_error(g);
  gr_accumulator_apply_grad(g, acc, gr_const_f32(g, 0),
                            gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){3})));
  GR_CHECK_STR_CONTAINS(graph_msg(g), "local_step");
  gr_graph_clear_error(g);
  gr_accumulator(g, "b", GR_I32, gr_shape_make(1, (int64_t[]){3}));
  GR_CHECK_STR_CONTAINS(graph_msg(g), "an accumulator holds f32 or f64, not i32");
  gr_graph_clear_error(g);
  gr_accumulator_take_grad(g, gr_const_f32(g, 1), gr_const_i64(g, 1));
  GR_CHECK_STR_CONTAINS(graph_msg(g), "is not an accumulator");
  gr_graph_free(g);
}

/* ---- synchronous replicas ------------------------------------------------------------------- */

#define IN    4
#define HID   8
#define OUT   3
#define ROWS  8 /* per worker */
#define STEPS 6

static float w1_0[IN * HID], w2_0[HID * OUT];
static float data_x[STEPS][3 * ROWS * IN];
static int64_t data_y[STEPS][3 * ROWS];

static void make_data(void) {
  for (int i = 0; i < IN * HID; i++) w1_0[i] = (float)(0.5 * uniform());
  for (int i = 0; i < HID * OUT; i++) w2_0[i] = (float)(0.5 * uniform());
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < 3 * ROWS * IN; i++) data_x[s][i] = (float)uniform();
    for (int i = 0; i < 3 * ROWS; i++) data_y[s][i] = (int64_t)((uniform() + 1) * 1.5) % OUT;
  }
}

typedef struct model {
  gr_output x, y, w1, b1, w2, b2, loss;
} model;

static gr_output const_f32(gr_graph *g, const float *v, int rank, const int64_t *dims) {
  gr_tensor t;
  gr_error err;
  gr_tensor_from_data(&t, GR_F32, &(gr_shape){rank, {dims[0], rank > 1 ? dims[1] : 0}}, v, &err);
  gr_output o = gr_const(g, &t);
  gr_tensor_release(&t);
  return o;
}

static void model_vars(gr_graph *g, model *m) {
  m->w1 = gr_variable(g, "w1", const_f32(g, w1_0, 2, (int64_t[]){IN, HID}));
  m->b1 = gr_variable(g, "b1", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){HID})));
  m->w2 = gr_variable(g, "w2", const_f32(g, w2_0, 2, (int64_t[]){HID, OUT}));
  m->b2 = gr_variable(g, "b2", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){OUT})));
}

static gr_output loss_of(gr_graph *g, const model *m, gr_output x, gr_output y) {
  gr_output h = gr_relu(g, gr_add(g, gr_matmul(g, x, m->w1, false, false), m->b1));
  gr_output logits = gr_add(g, gr_matmul(g, h, m->w2, false, false), m->b2);
  return gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, y), NULL, 0, false);
}

static gr_status replica_loss(gr_graph *g, void *arg, int replica, const gr_output *in,
                              gr_output *out) {
  (void)replica;
  out[0] = loss_of(g, arg, in[0], in[1]);
  return GR_OK;
}

static void placeholders(gr_graph *g, model *m) {
  m->x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){-1, IN}));
  m->y = gr_placeholder(g, "y", GR_I64, gr_shape_make(1, (int64_t[]){-1}));
}

/* Runs train on rows [r0, r0 + nrows) of step s's batch. */
static gr_status run_rows(gr_session *s, const model *m, gr_output train, int step, int r0,
                          int nrows, gr_error *err) {
  gr_tensor xt, yt;
  gr_tensor_from_data(&xt, GR_F32, &(gr_shape){2, {nrows, IN}}, data_x[step] + r0 * IN, err);
  gr_tensor_from_data(&yt, GR_I64, &(gr_shape){1, {nrows}}, data_y[step] + r0, err);
  gr_feed f[2] = {{m->x, &xt}, {m->y, &yt}};
  gr_status st = gr_session_run(s, f, 2, NULL, 0, NULL, &train, 1, err);
  gr_tensor_release(&xt), gr_tensor_release(&yt);
  return st;
}

static void read_weights(gr_session *s, const model *m, float *out) {
  gr_output v[4] = {m->w1, m->b1, m->w2, m->b2};
  gr_tensor t[4];
  gr_error err;
  GR_CHECK_MSG(gr_session_run(s, NULL, 0, v, 4, t, NULL, 0, &err) == GR_OK, "%s", err.msg);
  int k = 0;
  for (int i = 0; i < 4; i++) {
    memcpy(out + k, gr_tensor_data(&t[i]), gr_tensor_num_bytes(&t[i]));
    k += (int)gr_tensor_num_elements(&t[i]);
    gr_tensor_release(&t[i]);
  }
}

#define NW (IN * HID + HID + HID * OUT + OUT)

/* In one graph: the reference trained on `replicas` in-graph replicas (0:
 * none) of the whole batch of `workers` * ROWS rows. */
static void reference(int workers, int replicas, float *w) {
  gr_graph *g = gr_graph_new();
  model m;
  placeholders(g, &m);
  model_vars(g, &m);
  gr_output loss;
  if (replicas) {
    gr_replicate_options o = {.num_replicas = replicas};
    gr_replicate(g, &o, (gr_output[]){m.x, m.y}, 2, replica_loss, &m, 1, &loss);
  } else {
    loss = loss_of(g, &m, m.x, m.y);
  }
  gr_optimizer opt = {.kind = GR_OPT_SGD, .learning_rate = 0.5};
  gr_output train = gr_minimize(g, &opt, loss, NULL, 0);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
  gr_session *s = session_on(g, NULL, TIMEOUT_MS);
  gr_error err;
  for (int step = 0; step < STEPS; step++)
    GR_CHECK_MSG(run_rows(s, &m, train, step, 0, workers * ROWS, &err) == GR_OK, "%s", err.msg);
  read_weights(s, &m, w);
  gr_session_free(s);
  gr_graph_free(g);
}

typedef struct worker {
  gr_graph *g;
  model m;
  gr_sync_replicas sr;
  gr_session *s, *chief;
  int index, steps, first_step;
  gr_status st;
  gr_error err;
} worker;

static void worker_make(worker *w, gr_resource_mgr *ps, int index, int aggregate, int total) {
  w->g = gr_graph_new();
  w->index = index;
  placeholders(w->g, &w->m);
  model_vars(w->g, &w->m);
  w->m.loss = loss_of(w->g, &w->m, w->m.x, w->m.y);
  gr_sync_replicas_options o = {.optimizer = {.kind = GR_OPT_SGD, .learning_rate = 0.5},
                                .replicas_to_aggregate = aggregate,
                                .total_num_replicas = total,
                                .worker_index = index};
  GR_CHECK(gr_sync_replicas_minimize(w->g, &o, w->m.loss, NULL, 0, &w->sr) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(w->g), "%s", graph_msg(w->g));
  w->s = session_on(w->g, ps, TIMEOUT_MS);
  w->chief = index == 0 ? session_on(w->g, ps, TIMEOUT_MS) : NULL;
}

static void worker_free(worker *w) {
  gr_session_free(w->s);
  if (w->chief) gr_session_free(w->chief);
  gr_graph_free(w->g);
}

static void *worker_run(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps && w->st == GR_OK; k++)
    w->st = run_rows(w->s, &w->m, w->sr.train, w->first_step + k, w->index * ROWS, ROWS, &w->err);
  return NULL;
}

typedef struct chief {
  worker *w;
  int updates;
  gr_status st;
  gr_error err;
} chief;

static void *chief_run(void *arg) {
  chief *c = arg;
  for (int k = 0; k < c->updates && c->st == GR_OK; k++)
    c->st = gr_session_run(c->w->chief, NULL, 0, NULL, 0, NULL, &c->w->sr.chief_update, 1, &c->err);
  return NULL;
}

/* Makes the workers' variables exist before they start together. */
static void warm_up(worker *w, int n) {
  for (int i = 0; i < n; i++) {
    gr_tensor t[2];
    gr_error err;
    gr_output f[2] = {w[i].sr.local_step, w[i].m.w1};
    GR_CHECK_MSG(gr_session_run(w[i].s, NULL, 0, f, 2, t, NULL, 0, &err) == GR_OK, "%s", err.msg);
    gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
  }
}

/* `rounds` rounds: in each, workers[0..n) run one step each (from
 * first_step on) while the chief runs one update. A token is not a
 * worker's own (as in TensorFlow): a worker running ahead could take a
 * slower one's, so the test steps them round by round. */
static void run_rounds(worker *w, int n, int rounds) {
  for (int r = 0; r < rounds; r++) {
    pthread_t th[4], ct;
    chief c = {.w = &w[0], .updates = 1};
    for (int i = 0; i < n; i++) {
      w[i].steps = 1;
      pthread_create(&th[i], NULL, worker_run, &w[i]);
    }
    pthread_create(&ct, NULL, chief_run, &c);
    for (int i = 0; i < n; i++) {
      pthread_join(th[i], NULL);
      GR_CHECK_MSG(w[i].st == GR_OK, "worker %d: %s", i, w[i].err.msg);
      w[i].first_step++;
    }
    pthread_join(ct, NULL);
    GR_CHECK_MSG(c.st == GR_OK, "chief: %s", c.err.msg);
  }
}

static void test_two_workers_equal_in_graph_replicas(void) {
  float ref_replicas[NW], ref_single[NW], got[NW];
  reference(2, 2, ref_replicas);
  reference(2, 0, ref_single);
  gr_resource_mgr *ps = gr_resource_mgr_new();
  worker w[2] = {0};
  for (int i = 0; i < 2; i++) worker_make(&w[i], ps, i, 2, 2);
  warm_up(w, 2);
  run_rounds(w, 2, STEPS);
  read_weights(w[1].s, &w[1].m, got);
  int differ = 0;
  double worst = 0;
  for (int i = 0; i < NW; i++) {
    differ += got[i] != ref_replicas[i];
    double d = fabs((double)got[i] - ref_single[i]);
    if (d > worst) worst = d;
  }
  GR_CHECK_MSG(differ == 0, "%d of %d weights differ from in-graph replicas", differ, NW);
  GR_CHECK_MSG(worst <= 1e-6, "largest difference from the one-worker model %g", worst);
  printf("2 workers: bit-identical to in-graph replicas; largest difference from one worker on "
         "the whole batch %.3g\n",
         worst);
  gr_tensor t;
  gr_error err;
  gr_output gs = {gr_graph_find_node(w[0].g, "global_step"), 0};
  GR_CHECK(gr_session_run(w[0].s, NULL, 0, &gs, 1, &t, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&t, 0), STEPS);
  gr_tensor_release(&t);
  GR_CHECK_EQ_INT(fetch_i64(w[0].s, w[0].sr.num_dropped), 0);
  for (int i = 0; i < 2; i++) worker_free(&w[i]);
  gr_resource_mgr_free(ps);
}

/* Three workers, two gradients per update: worker 2 (the backup) comes
 * late, its gradients of step 0 are dropped and counted (one per
 * variable), and it goes on with the others' token. */
static void test_backup_worker_dropped(void) {
  gr_resource_mgr *ps = gr_resource_mgr_new();
  worker w[3] = {0};
  for (int i = 0; i < 3; i++) worker_make(&w[i], ps, i, 2, 3);
  warm_up(w, 3);
  run_rounds(w, 2, 1); /* workers 0 and 1, one update */
  gr_error err;
  GR_CHECK_MSG(run_rows(w[2].s, &w[2].m, w[2].sr.train, 0, 2 * ROWS, ROWS, &err) == GR_OK, "%s",
               err.msg);
  GR_CHECK_EQ_INT(fetch_i64(w[0].s, w[0].sr.num_dropped), 4);
  GR_CHECK_EQ_INT(fetch_i64(w[2].s, w[2].sr.local_step), 1);
  /* then all three step together: each update takes the first two (or three) to arrive */
  w[2].first_step = 1;
  run_rounds(w, 3, 3);
  gr_tensor t;
  gr_output gs = {gr_graph_find_node(w[0].g, "global_step"), 0};
  GR_CHECK(gr_session_run(w[0].s, NULL, 0, &gs, 1, &t, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&t, 0), 4);
  gr_tensor_release(&t);
  int64_t dropped = fetch_i64(w[0].s, w[0].sr.num_dropped);
  GR_CHECK_MSG(dropped >= 4 && dropped % 4 == 0, "dropped %lld", (long long)dropped);
  printf("backup worker: %lld gradients dropped as stale\n", (long long)dropped);
  for (int i = 0; i < 3; i++) worker_free(&w[i]);
  gr_resource_mgr_free(ps);
}

/* ---- a worker's contribution: all or nothing ---------------------------------------------- */

/* accumulator_apply_grads adds all of its gradients or drops them all: with
 * one accumulator's step ahead (its take ran), nothing goes into the other
 * either, and both count the drop. */
static void test_apply_grads_all_or_nothing(void) {
  gr_graph *g = gr_graph_new();
  gr_shape sh = gr_shape_make(1, (int64_t[]){2});
  gr_output acc[2] = {gr_accumulator(g, "a/grad_accum", GR_F32, sh),
                      gr_accumulator(g, "b/grad_accum", GR_F32, sh)};
  gr_output step = gr_placeholder(g, "step", GR_I64, gr_shape_scalar());
  gr_tensor gv[2] = {gt_make(GR_F32, sh, (double[]){1, 2}), gt_make(GR_F32, sh, (double[]){3, 4})};
  gr_output grads[2] = {gr_const(g, &gv[0]), gr_const(g, &gv[1])};
  gr_tensor_release(&gv[0]), gr_tensor_release(&gv[1]);
  gr_output apply = gr_accumulator_apply_grads(g, acc, grads, 2, step);
  gr_output take = gr_accumulator_take_grad(g, acc[0], gr_const_i64(g, 1));
  gr_output counts[4] = {
      gr_accumulator_num_accumulated(g, acc[0]), gr_accumulator_num_accumulated(g, acc[1]),
      gr_accumulator_num_dropped(g, acc[0]), gr_accumulator_num_dropped(g, acc[1])};
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
  gr_session *s = session_on(g, NULL, TIMEOUT_MS);
  gr_error err;
  gr_tensor zero = gr_tensor_scalar_i64(0), t, c[4];
  gr_feed f = {step, &zero};
  if (s) {
    GR_CHECK_OK(gr_session_run(s, &f, 1, NULL, 0, NULL, &apply, 1, &err), err);
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &take, 1, &t, NULL, 0, &err), err); /* a's step: 1 */
    gr_tensor_release(&t);
    GR_CHECK_OK(gr_session_run(s, &f, 1, NULL, 0, NULL, &apply, 1, &err), err); /* stale for a */
    GR_CHECK_OK(gr_session_run(s, NULL, 0, counts, 4, c, NULL, 0, &err), err);
    int64_t want[4] = {0, 1, 1, 1}; /* b keeps only the first apply's gradient */
    for (int i = 0; i < 4; i++) {
      GR_CHECK_EQ_INT(gt_get_int(&c[i], 0), want[i]);
      gr_tensor_release(&c[i]);
    }
  }
  gr_tensor_release(&zero);
  gr_session_free(s);
  gr_graph_free(g);
}

/* Between-graph sync_replicas under load, 3 workers and 2 gradients per
 * update (a backup worker): worker w's gradient of every variable is 2^w
 * (loss = c * the sum of all weights, c fed), so an update's mean tells
 * which workers it took. If it took part of a worker's gradients (some
 * variables' before the update came, the rest dropped as stale after), the
 * variables would differ; all of a worker's or none keeps them equal, bit
 * for bit, round after round. 16 variables, 300 rounds, two busy threads
 * beside the workers and the chief (the test failed on a busy machine when
 * a worker's gradients went in one accumulator at a time). */
enum { AON_VARS = 16, AON_WORKERS = 3, AON_ROUNDS = 300 };

typedef struct aon_worker {
  gr_graph *g;
  gr_output c, vars[AON_VARS];
  gr_sync_replicas sr;
  gr_session *s, *chief;
  int index;
  gr_status st;
  gr_error err;
} aon_worker;

static void aon_make(aon_worker *w, gr_resource_mgr *ps, int index) {
  gr_graph *g = w->g = gr_graph_new();
  w->index = index;
  w->c = gr_placeholder(g, "c", GR_F32, gr_shape_scalar());
  gr_output sum = {NULL, 0};
  for (int i = 0; i < AON_VARS; i++) {
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    w->vars[i] = gr_variable(g, name, gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){64})));
    gr_output r = gr_reduce_sum(g, w->vars[i], NULL, 0, false);
    sum = sum.node ? gr_add(g, sum, r) : r;
  }
  gr_output loss = gr_mul(g, sum, w->c);
  gr_sync_replicas_options o = {.optimizer = {.kind = GR_OPT_SGD, .learning_rate = 1},
                                .replicas_to_aggregate = 2,
                                .total_num_replicas = AON_WORKERS,
                                .worker_index = index};
  GR_CHECK(gr_sync_replicas_minimize(g, &o, loss, NULL, 0, &w->sr) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
  w->s = session_on(g, ps, TIMEOUT_MS);
  w->chief = index == 0 ? session_on(g, ps, TIMEOUT_MS) : NULL;
}

static void *aon_step(void *arg) {
  aon_worker *w = arg;
  gr_tensor c = gr_tensor_scalar_f32((float)(1 << w->index));
  gr_feed f = {w->c, &c};
  w->st = gr_session_run(w->s, &f, 1, NULL, 0, NULL, &w->sr.train, 1, &w->err);
  gr_tensor_release(&c);
  return NULL;
}

static void *aon_update(void *arg) {
  aon_worker *w = arg;
  w->st = gr_session_run(w->chief, NULL, 0, NULL, 0, NULL, &w->sr.chief_update, 1, &w->err);
  return NULL;
}

static volatile int aon_busy;
static void *aon_spin(void *arg) {
  volatile double x = 1;
  while (aon_busy) x = x * 1.0000001 + 1e-9;
  return NULL;
}

static void test_contribution_all_or_nothing(void) {
  gr_resource_mgr *ps = gr_resource_mgr_new();
  aon_worker w[AON_WORKERS] = {0}, chief;
  for (int i = 0; i < AON_WORKERS; i++) aon_make(&w[i], ps, i);
  gr_tensor t[AON_VARS];
  gr_error err;
  GR_CHECK_OK(gr_session_run(w[0].s, NULL, 0, w[0].vars, AON_VARS, t, NULL, 0, &err), err);
  for (int i = 0; i < AON_VARS; i++) gr_tensor_release(&t[i]);
  aon_busy = 1;
  pthread_t spin[2];
  for (int k = 0; k < 2; k++) pthread_create(&spin[k], NULL, aon_spin, NULL);
  int unequal = 0;
  for (int r = 0; r < AON_ROUNDS && !unequal; r++) {
    pthread_t th[AON_WORKERS], ct;
    chief = w[0];
    pthread_create(&ct, NULL, aon_update, &chief);
    for (int i = 0; i < AON_WORKERS; i++) pthread_create(&th[i], NULL, aon_step, &w[i]);
    for (int i = 0; i < AON_WORKERS; i++) {
      pthread_join(th[i], NULL);
      GR_CHECK_MSG(w[i].st == GR_OK, "worker %d: %s", i, w[i].err.msg);
    }
    pthread_join(ct, NULL);
    GR_CHECK_MSG(chief.st == GR_OK, "chief: %s", chief.err.msg);
    if (gr_session_run(w[0].s, NULL, 0, w[0].vars, AON_VARS, t, NULL, 0, &err) != GR_OK) break;
    for (int i = 0; i < AON_VARS; i++) {
      const float *a = gr_tensor_data(&t[0]), *b = gr_tensor_data(&t[i]);
      for (int k = 0; k < 64; k++) unequal += a[0] != b[k];
    }
    if (unequal)
      fprintf(stderr,
              "round %d: v0[0] %g, v%d[0] %g: an update took part of a worker's gradients\n", r,
              (double)((const float *)gr_tensor_data(&t[0]))[0], AON_VARS - 1,
              (double)((const float *)gr_tensor_data(&t[AON_VARS - 1]))[0]);
    for (int i = 0; i < AON_VARS; i++) gr_tensor_release(&t[i]);
  }
  aon_busy = 0;
  for (int k = 0; k < 2; k++) pthread_join(spin[k], NULL);
  GR_CHECK_EQ_INT(unequal, 0);
  int64_t dropped = 0;
  gr_tensor d;
  if (gr_session_run(w[0].s, NULL, 0, &w[0].sr.num_dropped, 1, &d, NULL, 0, &err) == GR_OK)
    dropped = gt_get_int(&d, 0), gr_tensor_release(&d);
  GR_CHECK_MSG(dropped % AON_VARS == 0, "dropped %lld", (long long)dropped);
  printf("all or nothing: %d rounds, %lld gradients dropped as stale (whole workers' sets)\n",
         AON_ROUNDS, (long long)dropped);
  for (int i = 0; i < AON_WORKERS; i++) {
    gr_session_free(w[i].s);
    if (w[i].chief) gr_session_free(w[i].chief);
    gr_graph_free(w[i].g);
  }
  gr_resource_mgr_free(ps);
}

typedef struct dsl_bg {
  gr_session *s;
  gr_output train;
  gr_feed feed;
  gr_status st;
  gr_error err;
} dsl_bg;

static void *dsl_train(void *arg) {
  dsl_bg *b = arg;
  b->st = gr_session_run(b->s, &b->feed, 1, NULL, 0, NULL, &b->train, 1, &b->err);
  return NULL;
}

static void test_dsl(void) {
  const char *src = "x = placeholder(f32, [-1, 2])\n"
                    "w = variable(zeros([2, 1]))\n"
                    "loss = reduce_mean(square(x @ w - 1))\n"
                    "train, update, dropped = sync_replicas(loss, sgd(0.1), "
                    "replicas_to_aggregate=1, worker_index=0)\n";
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p;
  gr_error err;
  GR_CHECK_MSG(gr_dsl_load_string("s.gr", src, g, NULL, &p, &err) == GR_OK, "%s", err.msg);
  gr_output train, update, dropped, x, w;
  GR_CHECK(gr_dsl_lookup(p, "train", &train) && gr_dsl_lookup(p, "update", &update) &&
           gr_dsl_lookup(p, "dropped", &dropped) && gr_dsl_lookup(p, "x", &x) &&
           gr_dsl_lookup(p, "w", &w));
  gr_session *s = session_on(g, NULL, TIMEOUT_MS);
  float xv[2] = {1, 1};
  gr_tensor xt;
  gr_tensor_from_data(&xt, GR_F32, &(gr_shape){2, {1, 2}}, xv, &err);
  gr_feed f = {x, &xt};
  /* one worker: its step waits for the chief's update */
  dsl_bg b = {.s = s, .train = train, .feed = f};
  pthread_t th;
  pthread_create(&th, NULL, dsl_train, &b);
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &update, 1, &err) == GR_OK);
  pthread_join(th, NULL);
  GR_CHECK_MSG(b.st == GR_OK, "%s", b.err.msg);
  gr_tensor wt;
  GR_CHECK(gr_session_run(s, NULL, 0, &w, 1, &wt, NULL, 0, &err) == GR_OK);
  /* d/dw mean((x w - 1)^2) at w = 0, x = (1, 1): -2 each; w = 0.2 */
  GR_CHECK_NEAR(gr_tensor_get_f64(&wt, 0), 0.2, 1e-7);
  gr_tensor_release(&wt);
  gr_tensor_release(&xt);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  g = gr_graph_new();
  GR_CHECK(gr_dsl_load_string("s.gr",
                              "w = variable(zeros([2]))\nt, u, d = sync_replicas(reduce_sum(w), "
                              "sgd(0.1), replicas_to_aggregate=2, total_num_replicas=1)",
                              g, NULL, &p, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "s.gr:2:");
  GR_CHECK_STR_CONTAINS(err.msg, "total_num_replicas");
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

int main(void) {
  make_data();
  GR_RUN(test_accumulator_mean_and_stale);
  GR_RUN(test_take_waits_and_times_out);
  GR_RUN(test_accumulator_bad_inputs);
  GR_RUN(test_two_workers_equal_in_graph_replicas);
  GR_RUN(test_backup_worker_dropped);
  GR_RUN(test_apply_grads_all_or_nothing);
  GR_RUN(test_contribution_all_or_nothing);
  GR_RUN(test_dsl);
  return gr_test_finish();
}
