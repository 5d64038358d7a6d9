/* Keras' losses (ops/gr_losses.h, ops/losses.c) and the sigmoid_cross_entropy
 * op: every loss in both forms and every reduction against a plain
 * double-precision reference on random inputs of ranks 1 to 3, in f32 and
 * f64, with extreme logits (+-100, +-1e4) and probabilities at the clip
 * bounds; gradients (first and second order) by central differences;
 * Keras' documented values; the .gr built-ins and their errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

typedef enum loss_kind { L_BINARY, L_CATEGORICAL, L_SPARSE, L_MSE, L_HUBER, L_COUNT } loss_kind;
static const char *const loss_names[L_COUNT] = {"binary_crossentropy", "categorical_crossentropy",
                                                "sparse_categorical_crossentropy",
                                                "mean_squared_error", "huber"};

typedef struct loss_case {
  loss_kind kind;
  bool from_logits;
  bool via_activation; /* y_pred = sigmoid / softmax(logits), from_logits false */
  gr_loss_reduction reduction;
  double delta;
} loss_case;

static gr_output build_loss(gr_graph *g, const loss_case *c, gr_output t, gr_output p) {
  if (c->via_activation) p = c->kind == L_BINARY ? gr_sigmoid(g, p) : gr_softmax(g, p);
  switch (c->kind) {
    case L_BINARY:
      return gr_binary_crossentropy(g, t, p, c->from_logits, c->reduction);
    case L_CATEGORICAL:
      return gr_categorical_crossentropy(g, t, p, c->from_logits, c->reduction);
    case L_SPARSE:
      return gr_sparse_categorical_crossentropy(g, t, p, c->from_logits, c->reduction);
    case L_MSE:
      return gr_mean_squared_error(g, t, p, c->reduction);
    default:
      return gr_huber(g, t, p, c->delta, c->reduction);
  }
}

/* ---- the plain double references ---------------------------------------------------------- */

/* -(y log s + (1 - y) log(1 - s)), s = sigmoid(z), in a form other than the kernel's. */
static double ref_sigmoid_xent(double z, double y) {
  return z >= 0 ? z * (1 - y) + log1p(exp(-z)) : -z * y + log1p(exp(z));
}

/* Keras' clip bounds as the tensor's dtype holds them (1 - 1e-7 is
 * 0.99999988 in f32). */
static double lo_of(gr_dtype dt) {
  return dt == GR_F32 ? (double)(float)1e-7 : 1e-7;
}
static double hi_of(gr_dtype dt) {
  return dt == GR_F32 ? (double)(float)(1 - 1e-7) : 1 - 1e-7;
}
static double clip(double p, gr_dtype dt) {
  return p < lo_of(dt) ? lo_of(dt) : p > hi_of(dt) ? hi_of(dt) : p;
}

static double lse(const double *z, int64_t k) {
  double m = z[0], s = 0;
  for (int64_t j = 1; j < k; j++) m = z[j] > m ? z[j] : m;
  for (int64_t j = 0; j < k; j++) s += exp(z[j] - m);
  return m + log(s);
}

/* The per-example losses of case c (rows of d values of t and p; for the
 * sparse loss t holds one index per row), into per[0..rows). */
static void ref_per_example(const loss_case *c, gr_dtype dt, const double *t, const double *p,
                            int64_t rows, int64_t d, double *per) {
  bool logits = c->from_logits || c->via_activation;
  for (int64_t i = 0; i < rows; i++) {
    const double *tr = t + (c->kind == L_SPARSE ? i : i * d), *pr = p + i * d;
    double s = 0;
    if (c->kind == L_CATEGORICAL && logits) {
      double l = lse(pr, d);
      for (int64_t j = 0; j < d; j++) s += tr[j] * (l - pr[j]);
    } else if (c->kind == L_CATEGORICAL) {
      double sum = 0;
      for (int64_t j = 0; j < d; j++) sum += pr[j];
      for (int64_t j = 0; j < d; j++) s -= tr[j] * log(clip(pr[j] / sum, dt));
    } else if (c->kind == L_SPARSE) {
      int64_t k = (int64_t)tr[0];
      if (logits) {
        s = lse(pr, d) - pr[k];
      } else {
        double sum = 0;
        for (int64_t j = 0; j < d; j++) sum += clip(pr[j], dt);
        s = log(sum) - log(clip(pr[k], dt));
      }
    } else {
      for (int64_t j = 0; j < d; j++) {
        double y = tr[j], q = pr[j], e = q - y, a = fabs(e);
        if (c->kind == L_BINARY && logits)
          s += ref_sigmoid_xent(q, y);
        else if (c->kind == L_BINARY)
          s -= y * log(clip(q, dt)) + (1 - y) * log(1 - clip(q, dt));
        else if (c->kind == L_MSE)
          s += e * e;
        else
          s += a <= c->delta ? e * e / 2 : c->delta * a - c->delta * c->delta / 2;
      }
      s /= (double)d;
    }
    per[i] = s;
  }
}

/* ---- running ---------------------------------------------------------------------------- */

/* Builds case c on placeholders fed t and p, runs it into *out. */
static bool run_loss(const loss_case *c, const gr_tensor *t, const gr_tensor *p, gr_tensor *out) {
  gr_graph *g = gr_graph_new();
  gr_output pt = gr_placeholder(g, "t", t->dtype, t->shape);
  gr_output pp = gr_placeholder(g, "p", p->dtype, p->shape);
  gr_output y = build_loss(g, c, pt, pp);
  gr_error err;
  bool ok = false;
  if (gr_graph_error(g)) {
    fprintf(stderr, "build: %s\n", gr_graph_error(g)->msg);
  } else {
    gr_session *s = gr_session_new(g, NULL, &err);
    gr_feed f[2] = {{pt, t}, {pp, p}};
    ok = s && gr_session_run(s, f, 2, &y, 1, out, NULL, 0, &err) == GR_OK;
    if (!ok) fprintf(stderr, "run: %s\n", err.msg);
    gr_session_free(s);
  }
  gr_graph_free(g);
  return ok;
}

static double *to_doubles(const gr_tensor *t) {
  int64_t n = gr_tensor_num_elements(t);
  double *v = malloc(sizeof *v * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) v[i] = gr_tensor_get_f64(t, i);
  return v;
}

/* Runs case c and compares with the reference, reduced as c says. */
static void check_case(const loss_case *c, const gr_tensor *t, const gr_tensor *p,
                       const char *what) {
  gr_tensor got = gr_tensor_empty();
  if (!run_loss(c, t, p, &got)) {
    GR_CHECK_MSG(false, "%s: %s did not run", what, loss_names[c->kind]);
    return;
  }
  int64_t d = p->shape.dims[p->shape.rank - 1];
  gr_shape ps = p->shape;
  ps.rank--;
  int64_t rows = gr_shape_num_elements(&ps);
  double *tv = to_doubles(t), *pv = to_doubles(p), *per = malloc(sizeof *per * (size_t)(rows + 1));
  ref_per_example(c, p->dtype, tv, pv, rows, d, per);
  gr_tensor want;
  if (c->reduction == GR_LOSS_NONE) {
    want = gt_make(p->dtype, ps, per);
  } else {
    double sum = 0;
    for (int64_t i = 0; i < rows; i++) sum += per[i];
    double v = c->reduction == GR_LOSS_SUM ? sum : sum / (double)rows;
    want = gt_make(p->dtype, gr_shape_scalar(), &v);
  }
  double tol = p->dtype == GR_F32 ? 2e-6 : 1e-12;
  char sb[GR_SHAPE_STR_MAX];
  GR_CHECK_MSG(gt_near(&got, &want, tol, tol), "%s: %s logits %d act %d reduction %d on %s %s",
               what, loss_names[c->kind], c->from_logits, c->via_activation, (int)c->reduction,
               gr_dtype_name(p->dtype), gr_shape_str(&p->shape, sb));
  free(tv), free(pv), free(per);
  gr_tensor_release(&got);
  gr_tensor_release(&want);
}

/* ---- random inputs -------------------------------------------------------------------------- */

/* Logits in [-span, span], with extremes (+-100, +-1e4) at a few places. */
static gr_tensor logits(gt_rng *r, gr_dtype dt, gr_shape s, double span, bool extremes) {
  gr_tensor z = gt_random(r, dt, s, -span, span);
  static const double ext[] = {100, -100, 1e4, -1e4, 0};
  int64_t n = gr_tensor_num_elements(&z);
  for (int64_t i = 0; extremes && i < n; i += 3) gr_tensor_set_f64(&z, i, ext[gt_int(r, 0, 4)]);
  return z;
}

/* Probabilities in [0, 1] with exact 0s and 1s and values beyond the clip
 * bounds at a few places. */
static gr_tensor probs(gt_rng *r, gr_dtype dt, gr_shape s, double lo) {
  gr_tensor p = gt_random(r, dt, s, lo, 1);
  static const double ext[] = {0, 1, 1e-9, 1 - 1e-9};
  int64_t n = gr_tensor_num_elements(&p);
  for (int64_t i = 1; lo == 0 && i < n; i += 4) gr_tensor_set_f64(&p, i, ext[gt_int(r, 0, 3)]);
  return p;
}

/* Each row a distribution (soft labels), or a one-hot row. */
static void distributions(gt_rng *r, gr_tensor *t, int64_t d, bool one_hot) {
  int64_t rows = gr_tensor_num_elements(t) / d;
  for (int64_t i = 0; i < rows; i++) {
    double s = 0;
    int64_t hot = gt_int(r, 0, d - 1);
    for (int64_t j = 0; j < d; j++) s += gr_tensor_get_f64(t, i * d + j);
    for (int64_t j = 0; j < d; j++)
      gr_tensor_set_f64(t, i * d + j, one_hot ? (j == hot) : gr_tensor_get_f64(t, i * d + j) / s);
  }
}

static const gr_loss_reduction reductions[] = {GR_LOSS_SUM_OVER_BATCH_SIZE, GR_LOSS_SUM,
                                               GR_LOSS_NONE};

/* Every loss, form and reduction on random shapes of rank 1 to 3. */
static void test_losses_against_reference(void) {
  gt_rng r = {2024};
  for (int kind = 0; kind < L_COUNT; kind++)
    for (int form = 0; form < 3; form++) /* probabilities, logits, through the activation */
      for (int dti = 0; dti < 2; dti++)
        for (int rank = 1; rank <= 3; rank++) {
          if (form > 0 && (kind == L_MSE || kind == L_HUBER)) continue;
          gr_dtype dt = dti ? GR_F64 : GR_F32;
          gr_shape s = gt_random_shape(&r, rank, 6);
          int64_t d = s.dims[rank - 1];
          loss_case c = {kind, form == 1, form == 2, GR_LOSS_SUM_OVER_BATCH_SIZE,
                         gt_int(&r, 0, 1) ? 1.0 : 0.3};
          gr_tensor p = form                               ? logits(&r, dt, s, 8, true)
                        : kind == L_MSE || kind == L_HUBER ? gt_random(&r, dt, s, -3, 3)
                                                           : probs(&r, dt, s, 0);
          if (kind == L_CATEGORICAL && !form) /* no row of zeros (0 / 0, NaN in Keras too) */
            for (int64_t i = 0; i < gr_tensor_num_elements(&p); i += d)
              gr_tensor_set_f64(&p, i, 0.5);
          gr_tensor t;
          if (kind == L_SPARSE) {
            gr_shape ls = s;
            ls.rank--;
            gr_dtype lt = rank == 1 ? GR_I64 : rank == 2 ? GR_I32 : GR_U8;
            t = gt_random(&r, lt, ls, 0, (double)(d - 1));
          } else {
            t = gt_random(&r, dt, s, kind >= L_MSE ? -3 : 0, kind >= L_MSE ? 3 : 1);
            if (kind == L_CATEGORICAL) distributions(&r, &t, d, gt_int(&r, 0, 1));
            if (kind == L_BINARY && gt_int(&r, 0, 1)) /* hard labels half the time */
              for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++)
                gr_tensor_set_f64(&t, i, gr_tensor_get_f64(&t, i) > 0.5);
          }
          for (int k = 0; k < 3; k++) {
            c.reduction = reductions[k];
            check_case(&c, &t, &p, "random");
          }
          gr_tensor_release(&t);
          gr_tensor_release(&p);
        }
}

/* Labels of another dtype (cast to y_pred's), [n] against [n, 1] (Keras
 * expands), sparse labels [n, 1] (squeezed) and of every integer dtype. */
static void test_label_dtypes_and_ranks(void) {
  gt_rng r = {7};
  gr_tensor p = probs(&r, GR_F32, gr_shape_make(2, (int64_t[]){5, 1}), 0.01);
  gr_tensor p1 = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){5}));
  memcpy(gr_tensor_data(&p1), gr_tensor_data(&p), 5 * sizeof(float));
  gr_tensor ti = gt_make(GR_I64, gr_shape_make(1, (int64_t[]){5}), (double[]){0, 1, 1, 0, 1});
  gr_tensor tf = gt_make(GR_F32, gr_shape_make(2, (int64_t[]){5, 1}), (double[]){0, 1, 1, 0, 1});
  gr_tensor tb = gt_make(GR_BOOL, gr_shape_make(1, (int64_t[]){5}), (double[]){0, 1, 1, 0, 1});
  loss_case c = {L_BINARY, false, false, GR_LOSS_SUM_OVER_BATCH_SIZE, 1};
  gr_tensor a, b, e, f;
  GR_CHECK(run_loss(&c, &tf, &p, &a));
  GR_CHECK(run_loss(&c, &ti, &p, &b));  /* i64 [5] against f32 [5, 1] */
  GR_CHECK(run_loss(&c, &tb, &p, &e));  /* bool [5] */
  GR_CHECK(run_loss(&c, &tf, &p1, &f)); /* f32 [5, 1] against [5] */
  GR_CHECK(gt_bit_equal(&b, &a) && gt_bit_equal(&e, &a) && gt_bit_equal(&f, &a));
  check_case(&c, &tf, &p, "labels");
  gr_tensor_release(&b), gr_tensor_release(&e), gr_tensor_release(&f);
  /* none: per example, [5] */
  c.reduction = GR_LOSS_NONE;
  GR_CHECK(run_loss(&c, &ti, &p, &b));
  GR_CHECK_EQ_INT(b.shape.rank, 1);
  GR_CHECK_EQ_INT(b.shape.dims[0], 5);
  gr_tensor_release(&b);
  /* sparse labels of each integer dtype and [n, 1] give the same losses */
  gr_tensor z = logits(&r, GR_F32, gr_shape_make(2, (int64_t[]){4, 3}), 5, false);
  gr_tensor l64 = gt_make(GR_I64, gr_shape_make(1, (int64_t[]){4}), (double[]){2, 0, 1, 2});
  loss_case sc = {L_SPARSE, true, false, GR_LOSS_NONE, 1};
  gr_tensor want;
  GR_CHECK(run_loss(&sc, &l64, &z, &want));
  const gr_dtype lts[] = {GR_I32, GR_U8, GR_I64};
  for (int i = 0; i < 3; i++) {
    gr_tensor l =
        gt_make(lts[i], gr_shape_make(i == 2 ? 2 : 1, (int64_t[]){4, 1}), (double[]){2, 0, 1, 2});
    gr_tensor got;
    GR_CHECK(run_loss(&sc, &l, &z, &got));
    GR_CHECK_MSG(gt_bit_equal(&got, &want), "labels %s", gr_dtype_name(lts[i]));
    gr_tensor_release(&got), gr_tensor_release(&l);
  }
  gr_tensor *all[] = {&p, &p1, &ti, &tf, &tb, &a, &z, &l64, &want};
  for (int i = 0; i < 9; i++) gr_tensor_release(all[i]);
}

/* The logits forms stay exact for any |z|: the loss of +-1e4 is 0 or 1e4,
 * never inf or NaN; through a sigmoid / softmax node the probability form
 * takes the logits (as Keras on TensorFlow), so sigmoid(-100) against 1
 * costs 100 where the clipped probability would give 16.1. */
static void test_extreme_logits(void) {
  gr_shape s = gr_shape_make(2, (int64_t[]){4, 1});
  gr_tensor z = gt_make(GR_F32, s, (double[]){1e4, -1e4, -100, 100});
  gr_tensor y = gt_make(GR_F32, s, (double[]){1, 1, 1, 0});
  const double want[] = {0, 1e4, 100, 100};
  for (int form = 0; form < 2; form++) {
    loss_case c = {L_BINARY, form == 0, form == 1, GR_LOSS_NONE, 1};
    gr_tensor got;
    GR_CHECK(run_loss(&c, &y, &z, &got));
    for (int i = 0; i < 4; i++) GR_CHECK_NEAR(gr_tensor_get_f64(&got, i), want[i], 1e-3);
    gr_tensor_release(&got);
  }
  /* the sigmoid is found before labels [4, 1] make predictions [4] [4, 1] */
  gr_tensor z1 =
      gt_make(GR_F32, gr_shape_make(1, (int64_t[]){4}), (double[]){1e4, -1e4, -100, 100});
  loss_case act = {L_BINARY, false, true, GR_LOSS_NONE, 1};
  gr_tensor got1;
  GR_CHECK(run_loss(&act, &y, &z1, &got1));
  for (int i = 0; i < 4; i++) GR_CHECK_NEAR(gr_tensor_get_f64(&got1, i), want[i], 1e-3);
  gr_tensor_release(&got1), gr_tensor_release(&z1);
  /* the clipped form saturates at -log(1e-7 in f32) */
  gr_tensor p = gt_make(GR_F32, s, (double[]){1, 0, 0, 1});
  loss_case c = {L_BINARY, false, false, GR_LOSS_NONE, 1};
  gr_tensor got;
  GR_CHECK(run_loss(&c, &y, &p, &got));
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 1), -log((double)(float)1e-7), 1e-5);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 3), -log(1 - (double)(float)(1 - 1e-7)), 1e-5);
  gr_tensor_release(&got);
  /* categorical and sparse from logits of +-1e4 */
  gr_shape s3 = gr_shape_make(2, (int64_t[]){2, 3});
  gr_tensor z3 = gt_make(GR_F32, s3, (double[]){1e4, -1e4, 0, -1e4, -1e4, 1e4});
  gr_tensor t3 = gt_make(GR_F32, s3, (double[]){0, 1, 0, 0.5, 0, 0.5});
  gr_tensor l3 = gt_make(GR_I32, gr_shape_make(1, (int64_t[]){2}), (double[]){1, 0});
  loss_case cc = {L_CATEGORICAL, true, false, GR_LOSS_NONE, 1};
  GR_CHECK(run_loss(&cc, &t3, &z3, &got));
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 0), 2e4, 1e-2);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 1), 1e4, 1e-2);
  gr_tensor_release(&got);
  cc.kind = L_SPARSE;
  GR_CHECK(run_loss(&cc, &l3, &z3, &got));
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 0), 2e4, 1e-2);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 1), 2e4, 1e-2);
  gr_tensor_release(&got);
  gr_tensor *all[] = {&z, &y, &p, &z3, &t3, &l3};
  for (int i = 0; i < 6; i++) gr_tensor_release(all[i]);
}

/* ---- gradients ------------------------------------------------------------------------------ */

static gr_output grad_build(gr_graph *g, const gr_output *x, void *arg) {
  return build_loss(g, arg, x[0], x[1]);
}

/* Every loss, form and reduction, at orders 1 and 2, on f64 inputs away
 * from the clip bounds and Huber's kink (central differences need smooth
 * neighbourhoods); y_true is differentiated too, except class indices. */
static void test_loss_gradients(void) {
  gt_rng r = {99};
  for (int kind = 0; kind < L_COUNT; kind++)
    for (int form = 0; form < 3; form++)
      for (int k = 0; k < 3; k++) {
        if (form > 0 && (kind == L_MSE || kind == L_HUBER)) continue;
        int rank = 1 + k;
        gr_shape s = gt_shape_in(&r, rank, 2, 4);
        int64_t d = s.dims[rank - 1];
        loss_case c = {kind, form == 1, form == 2, reductions[k], 0.7};
        gr_tensor in[2];
        in[1] = form            ? logits(&r, GR_F64, s, 3, false)
                : kind >= L_MSE ? gt_random(&r, GR_F64, s, -2, 2)
                                : probs(&r, GR_F64, s, 0.05);
        if (kind <= L_SPARSE && !form) /* below the clip's upper bound too */
          for (int64_t i = 0; i < gr_tensor_num_elements(&in[1]); i++)
            gr_tensor_set_f64(&in[1], i, gr_tensor_get_f64(&in[1], i) * 0.9);
        if (kind == L_SPARSE) {
          gr_shape ls = s;
          ls.rank--;
          in[0] = gt_random(&r, GR_I64, ls, 0, (double)(d - 1));
        } else {
          in[0] = gt_random(&r, GR_F64, s, kind >= L_MSE ? -2 : 0.1, kind >= L_MSE ? 2 : 0.9);
        }
        if (kind == L_HUBER) /* |e| at least 0.05 from delta */
          for (int64_t i = 0; i < gr_tensor_num_elements(&in[1]); i++) {
            double t = gr_tensor_get_f64(&in[0], i), e = gr_tensor_get_f64(&in[1], i) - t;
            if (fabs(fabs(e) - c.delta) < 0.05) gr_tensor_set_f64(&in[1], i, t + e * 0.5);
          }
        char what[128];
        snprintf(what, sizeof what, "%s logits %d act %d reduction %d", loss_names[kind],
                 c.from_logits, c.via_activation, (int)c.reduction);
        for (int order = 1; order <= 2; order++)
          GR_CHECK_MSG(gt_check_gradient(what, grad_build, &c, in, 2, order, 12, 1e-5), "%s", what);
        gr_tensor_release(&in[0]);
        gr_tensor_release(&in[1]);
      }
}

/* d/dz at z = 0 is sigmoid(0) - y = 1/2 - y (the hand-written max(z, 0) -
 * z y + log(1 + e^-|z|) gave 1 - y there), and at +-1e4 it is 0 or -1,
 * finite. */
static void test_binary_gradient_at_zero_and_extremes(void) {
  gr_shape s = gr_shape_make(2, (int64_t[]){4, 1});
  gr_tensor zv = gt_make(GR_F32, s, (double[]){0, 0, 1e4, -1e4});
  gr_tensor yv = gt_make(GR_F32, s, (double[]){1, 0.25, 0, 1});
  gr_graph *g = gr_graph_new();
  gr_output z = gr_placeholder(g, "z", GR_F32, s), y = gr_placeholder(g, "y", GR_F32, s);
  gr_output loss = gr_binary_crossentropy(g, y, z, true, GR_LOSS_SUM_OVER_BATCH_SIZE), dz;
  GR_CHECK_EQ_INT(gr_gradients(g, &loss, 1, &z, 1, NULL, false, &dz), GR_OK);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_feed f[2] = {{z, &zv}, {y, &yv}};
  gr_tensor got;
  GR_CHECK_OK(gr_session_run(sess, f, 2, &dz, 1, &got, NULL, 0, &err), err);
  const double want[] = {-0.5 / 4, 0.25 / 4, 1.0 / 4, -1.0 / 4};
  for (int i = 0; i < 4; i++) GR_CHECK_NEAR(gr_tensor_get_f64(&got, i), want[i], 1e-7);
  gr_tensor_release(&got);
  gr_session_free(sess);
  gr_graph_free(g);
  gr_tensor_release(&zv), gr_tensor_release(&yv);
}

/* ---- the op itself -------------------------------------------------------------------------- */

static void test_sigmoid_cross_entropy_op(void) {
  gt_rng r = {5};
  for (int dti = 0; dti < 2; dti++) {
    gr_dtype dt = dti ? GR_F64 : GR_F32;
    gr_shape s = gt_random_shape(&r, 3, 7);
    gr_tensor in[2] = {logits(&r, dt, s, 30, true), gt_random(&r, dt, s, 0, 1)};
    int64_t n = gr_tensor_num_elements(&in[0]);
    gr_tensor want = gt_zeros(dt, s), got;
    for (int64_t i = 0; i < n; i++)
      gr_tensor_set_f64(
          &want, i, ref_sigmoid_xent(gr_tensor_get_f64(&in[0], i), gr_tensor_get_f64(&in[1], i)));
    gr_error err;
    for (int fresh = 0; fresh < 2; fresh++) { /* in place too */
      GR_CHECK_OK(
          gt_run_op_fresh("sigmoid_cross_entropy", in, 2, NULL, NULL, 0, fresh, &got, NULL, &err),
          err);
      GR_CHECK(gt_near(&got, &want, dt == GR_F32 ? 1e-6 : 1e-14, 1e-12));
      gr_tensor_release(&got);
    }
    gr_tensor_release(&in[0]), gr_tensor_release(&in[1]), gr_tensor_release(&want);
  }
  /* shapes, dtypes */
  gr_tensor a = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_tensor b = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){3, 2}));
  gr_tensor c = gt_zeros(GR_F64, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_tensor i = gt_zeros(GR_I32, gr_shape_make(2, (int64_t[]){2, 3}));
  GR_CHECK(gt_op_fails("sigmoid_cross_entropy", (gr_tensor[]){a, b}, 2, NULL, NULL, 0, GR_ERR_SHAPE,
                       "differ"));
  GR_CHECK(gt_op_fails("sigmoid_cross_entropy", (gr_tensor[]){a, c}, 2, NULL, NULL, 0, GR_ERR_DTYPE,
                       "labels"));
  GR_CHECK(gt_op_fails("sigmoid_cross_entropy", (gr_tensor[]){i, i}, 2, NULL, NULL, 0, GR_ERR_DTYPE,
                       "logits"));
  gr_shape unk[2] = {gr_shape_make(2, (int64_t[]){-1, 3}), gr_shape_make(2, (int64_t[]){-1, -1})};
  GR_CHECK(gt_op_fails("sigmoid_cross_entropy", (gr_tensor[]){a, b}, 2, unk, NULL, 0, GR_ERR_SHAPE,
                       "differ"));
  gr_tensor_release(&a), gr_tensor_release(&b), gr_tensor_release(&c), gr_tensor_release(&i);
}

/* ---- errors of the builders ------------------------------------------------------------------ */

static void expect_build_error(gr_output (*fn)(gr_graph *, gr_output, gr_output), gr_dtype tdt,
                               gr_shape ts, gr_dtype pdt, gr_shape ps, gr_status code,
                               const char *text) {
  gr_graph *g = gr_graph_new();
  gr_output o = fn(g, gr_placeholder(g, "t", tdt, ts), gr_placeholder(g, "p", pdt, ps));
  GR_CHECK_MSG(!o.node && gr_graph_error(g) && gr_graph_error(g)->code == code &&
                   strstr(gr_graph_error(g)->msg, text),
               "want %s '%s', got '%s'", gr_status_name(code), text,
               gr_graph_error(g) ? gr_graph_error(g)->msg : "no error");
  gr_graph_free(g);
}
static gr_output bce(gr_graph *g, gr_output t, gr_output p) {
  return gr_binary_crossentropy(g, t, p, false, GR_LOSS_SUM_OVER_BATCH_SIZE);
}
static gr_output scce(gr_graph *g, gr_output t, gr_output p) {
  return gr_sparse_categorical_crossentropy(g, t, p, true, GR_LOSS_SUM_OVER_BATCH_SIZE);
}
static gr_output cce(gr_graph *g, gr_output t, gr_output p) {
  return gr_categorical_crossentropy(g, t, p, true, GR_LOSS_NONE);
}
static gr_output huber0(gr_graph *g, gr_output t, gr_output p) {
  return gr_huber(g, t, p, 0, GR_LOSS_SUM);
}
static gr_output bad_reduction(gr_graph *g, gr_output t, gr_output p) {
  return gr_mean_squared_error(g, t, p, (gr_loss_reduction)7);
}

static void test_build_errors(void) {
  gr_shape n3 = gr_shape_make(2, (int64_t[]){-1, 3}), n1 = gr_shape_make(2, (int64_t[]){-1, 1});
  gr_shape n = gr_shape_make(1, (int64_t[]){-1}), sc = gr_shape_scalar();
  gr_shape n2 = gr_shape_make(2, (int64_t[]){-1, 2});
  /* [?, 3] against [?, 1] would broadcast: an error, not a silent [?, 3] */
  expect_build_error(bce, GR_F32, n3, GR_F32, n1, GR_ERR_SHAPE, "y_true [?, 3] and y_pred [?, 1]");
  expect_build_error(bce, GR_F32, n, GR_I32, n, GR_ERR_DTYPE, "y_pred must be f32 or f64");
  expect_build_error(bce, GR_F32, sc, GR_F32, sc, GR_ERR_SHAPE, "rank >= 1");
  expect_build_error(scce, GR_F32, n, GR_F32, n3, GR_ERR_DTYPE, "cast(labels, i64)");
  expect_build_error(scce, GR_I32, n2, GR_F32, n3, GR_ERR_SHAPE, "labels must have rank 1");
  expect_build_error(scce, GR_I64, n, GR_I64, n3, GR_ERR_DTYPE, "y_pred must be f32 or f64");
  expect_build_error(cce, GR_F32, n2, GR_F32, n3, GR_ERR_SHAPE, "differ");
  expect_build_error(huber0, GR_F32, n, GR_F32, n, GR_ERR_INVALID_ARGUMENT, "delta must be");
  expect_build_error(bad_reduction, GR_F32, n, GR_F32, n, GR_ERR_INVALID_ARGUMENT,
                     "unknown reduction");
  gr_loss_reduction red;
  GR_CHECK(gr_loss_reduction_parse("sum_over_batch_size", &red) &&
           red == GR_LOSS_SUM_OVER_BATCH_SIZE);
  GR_CHECK(gr_loss_reduction_parse("mean", &red) && red == GR_LOSS_SUM_OVER_BATCH_SIZE);
  GR_CHECK(gr_loss_reduction_parse("sum", &red) && red == GR_LOSS_SUM);
  GR_CHECK(gr_loss_reduction_parse("none", &red) && red == GR_LOSS_NONE);
  GR_CHECK(!gr_loss_reduction_parse("auto", &red) && !gr_loss_reduction_parse(NULL, &red));
  /* a label out of range is an error naming the example when the step runs */
  loss_case c = {L_SPARSE, false, false, GR_LOSS_SUM, 1};
  gr_tensor p = gt_make(GR_F32, gr_shape_make(2, (int64_t[]){2, 2}), (double[]){0.5, 0.5, 1, 0});
  gr_tensor l = gt_make(GR_I32, gr_shape_make(1, (int64_t[]){2}), (double[]){1, 2});
  gr_tensor got;
  GR_CHECK(!run_loss(&c, &l, &p, &got));
  gr_tensor_release(&p), gr_tensor_release(&l);
}

/* ---- Keras' documented values and the .gr built-ins ---------------------------------------- */

static void test_keras_values_in_dsl(void) {
  const char *src =
      "b1 = binary_crossentropy([0, 1], [0.3, 0.8])\n"
      "b2 = binary_crossentropy([[0, 1], [0, 0]], [[0.6, 0.4], [0.4, 0.6]], reduction=\"none\")\n"
      "b3 = binary_crossentropy([0, 1, 0, 0], [-18.6, 0.51, 2.94, -12.8], from_logits=true)\n"
      "b4 = binary_crossentropy(y_pred=[0.3, 0.8], y_true=[0, 1], reduction=\"sum\")\n"
      "c1 = categorical_crossentropy([[0, 1, 0], [0, 0, 1]], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]],"
      " reduction=\"none\")\n"
      "c2 = categorical_crossentropy([[0, 1.0]], [[2, 1.0]], true)\n"
      "s1 = sparse_categorical_crossentropy([1, 2], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]], "
      "reduction=\"none\")\n"
      "s2 = sparse_categorical_crossentropy(const([[1]], u8), [[2, 1.0]], from_logits=true)\n"
      "m1 = mean_squared_error([[0., 1.], [0., 0.]], [[1., 1.], [1., 0.]])\n"
      "h1 = huber([[0, 1], [0, 0]], [[0.6, 0.4], [0.4, 0.6]])\n"
      "h2 = huber([0, 0], [3, 0.5], delta=2.0, reduction=\"sum\")\n"
      "fetch b1\n";
  /* rank 1: one example, so "sum" is its mean over the last axis, as in Keras */
  const double want[] = {0.2899092476264711,
                         0.916290731874155,
                         0.7135581778200728,
                         0.8654579497810972,
                         0.2899092476264711,
                         0.05129329438755058,
                         2.3025850929940455,
                         1.3132616875182228,
                         0.051293394387545634,
                         2.3025850929940455,
                         1.3132616875182228,
                         0.5,
                         0.155,
                         2.0625};
  gr_tensor out[11];
  GR_CHECK(gt_dsl_run(src, "b1,b2,b3,b4,c1,c2,s1,s2,m1,h1,h2", 1, out));
  int w = 0;
  for (int i = 0; i < 11; i++) {
    for (int64_t e = 0; e < gr_tensor_num_elements(&out[i]); e++, w++)
      GR_CHECK_MSG(fabs(gr_tensor_get_f64(&out[i], e) - want[w]) <= 2e-6 * (1 + want[w]),
                   "value %d: %.9g, want %.9g", w, gr_tensor_get_f64(&out[i], e), want[w]);
    gr_tensor_release(&out[i]);
  }
  GR_CHECK_EQ_INT(w, 14);
  /* the binding names the node */
  gr_graph *g = gr_graph_new();
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", src, g, NULL, NULL, &err), err);
  GR_CHECK(gr_graph_find_node(g, "b1") && gr_graph_find_node(g, "h2"));
  gr_graph_free(g);
}

/* Training on the built-in: a logistic regression learns its weight. */
static void test_dsl_training(void) {
  const char *src = "x = const([[-2.0], [-1.0], [1.0], [2.0]])\n"
                    "y = const([[0], [0], [1], [1]], i64)\n"
                    "w = variable(zeros([1, 1]))\n"
                    "loss = binary_crossentropy(y, x @ w, from_logits=true)\n"
                    "train = minimize(loss, sgd(1.0))\n"
                    "w1 = read_value(w)\n";
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", src, g, NULL, &p, &err), err);
  gr_output loss, train;
  GR_CHECK(gr_dsl_lookup(p, "loss", &loss) && gr_dsl_lookup(p, "train", &train));
  gr_session *s = gr_session_new(g, NULL, &err);
  double first = gt_run_scalar(s, NULL, 0, loss), last = first;
  for (int i = 0; i < 50; i++) {
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
    last = gt_run_scalar(s, NULL, 0, loss);
  }
  GR_CHECK_NEAR(first, log(2.0), 1e-6); /* w = 0: every probability 1/2 */
  GR_CHECK_MSG(last < 0.1 * first, "loss %g after 50 steps, %g at first", last, first);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

#define GR_CHECK_DSL_FAILS(src, text) GR_CHECK(gt_dsl_fails_with(src, text))

static void test_dsl_errors(void) {
  GR_CHECK_DSL_FAILS("l = binary_crossentropy([0, 1], [0.3, 0.8], reduction=\"avg\")",
                     "t.gr:1:45: error: binary_crossentropy: reduction \"avg\": want");
  GR_CHECK_DSL_FAILS("l = huber([0], [1], deltas=2)",
                     "unknown keyword argument 'deltas' for huber");
  GR_CHECK_DSL_FAILS("l = huber([0], [1], 2.0, y_true=[1])", "'y_true' given twice");
  GR_CHECK_DSL_FAILS("l = mean_squared_error([0], [1], \"sum\", 4)", "takes at most 3 arguments");
  GR_CHECK_DSL_FAILS("l = mean_squared_error([0])", "missing y_pred");
  GR_CHECK_DSL_FAILS("l = binary_crossentropy([0], [1], from_logits=1)",
                     "from_logits must be true or false");
  GR_CHECK_DSL_FAILS("l = huber([0], [1], delta=\"x\")", "delta must be a number");
  GR_CHECK_DSL_FAILS("l = sparse_categorical_crossentropy([0.5], [[1, 2]])", "0.5");
  GR_CHECK_DSL_FAILS("y = placeholder(f32, [?, 3])\nl = categorical_crossentropy(y, [[1.0, 2.0]])",
                     "t.gr:2:5: error: categorical_crossentropy: y_true [?, 3] and y_pred [1, 2]");
  GR_CHECK_DSL_FAILS("l = huber([0], [1], delta=-1)", "delta must be a number > 0");
}

int main(void) {
  GR_RUN(test_losses_against_reference);
  GR_RUN(test_label_dtypes_and_ranks);
  GR_RUN(test_extreme_logits);
  GR_RUN(test_loss_gradients);
  GR_RUN(test_binary_gradient_at_zero_and_extremes);
  GR_RUN(test_sigmoid_cross_entropy_op);
  GR_RUN(test_build_errors);
  GR_RUN(test_keras_values_in_dsl);
  GR_RUN(test_dsl_training);
  GR_RUN(test_dsl_errors);
  return gr_test_finish();
}
