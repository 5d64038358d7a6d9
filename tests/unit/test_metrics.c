/* Keras' metrics (ops/gr_losses.h, ops/metrics.c) and the size op: the
 * accuracies, top-k accuracy (in_top_k's ties, non-finite scores and
 * targets out of range) and AUC, per batch and streaming, against plain
 * references on random inputs of several dtypes and ranks; Keras'
 * documented values; the .gr built-ins and their errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

typedef enum metric_kind {
  M_ACCURACY,
  M_BINARY,
  M_CATEGORICAL,
  M_SPARSE,
  M_TOP_K,
  M_SPARSE_TOP_K,
  M_AUC,
} metric_kind;

typedef struct metric_case {
  metric_kind kind;
  double threshold;
  int64_t k;
  bool from_logits;
} metric_case;

static gr_output build_metric(gr_graph *g, const metric_case *c, gr_output t, gr_output p) {
  switch (c->kind) {
    case M_ACCURACY:
      return gr_accuracy(g, t, p);
    case M_BINARY:
      return gr_binary_accuracy(g, t, p, c->threshold);
    case M_CATEGORICAL:
      return gr_categorical_accuracy(g, t, p);
    case M_SPARSE:
      return gr_sparse_categorical_accuracy(g, t, p);
    case M_TOP_K:
      return gr_top_k_categorical_accuracy(g, t, p, c->k);
    case M_SPARSE_TOP_K:
      return gr_sparse_top_k_categorical_accuracy(g, t, p, c->k);
    default:
      return gr_auc(g, t, p, c->k, c->from_logits);
  }
}

/* Runs the metric on t and p; NAN (with the error printed) when it fails.
 * Metrics are f32 scalars. */
static double run_metric(const metric_case *c, const gr_tensor *t, const gr_tensor *p) {
  gr_graph *g = gr_graph_new();
  gr_output pt = gr_placeholder(g, "t", t->dtype, t->shape);
  gr_output pp = gr_placeholder(g, "p", p->dtype, p->shape);
  gr_output y = build_metric(g, c, pt, pp);
  double v = NAN;
  gr_error err;
  if (gr_graph_error(g)) {
    fprintf(stderr, "build: %s\n", gr_graph_error(g)->msg);
  } else {
    GR_CHECK(y.node->out_dtypes[y.index] == GR_F32 && y.node->out_shapes[y.index].rank == 0);
    gr_session *s = gr_session_new(g, NULL, &err);
    gr_feed f[2] = {{pt, t}, {pp, p}};
    v = s ? gt_run_scalar(s, f, 2, y) : NAN;
    gr_session_free(s);
  }
  gr_graph_free(g);
  return v;
}

/* ---- references ---------------------------------------------------------------------------- */

static int64_t ref_argmax(const gr_tensor *t, int64_t row, int64_t c) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; j++)
    if (gr_tensor_get_f64(t, row * c + j) > gr_tensor_get_f64(t, row * c + best)) best = j;
  return best;
}

/* tf.math.in_top_k: fewer than k finite scores above a finite target score. */
static bool ref_in_top_k(const gr_tensor *p, int64_t row, int64_t c, int64_t target, int64_t k) {
  if (target < 0 || target >= c) return false;
  double v = gr_tensor_get_f64(p, row * c + target);
  int64_t above = 0;
  for (int64_t j = 0; j < c; j++) {
    double x = gr_tensor_get_f64(p, row * c + j);
    if (!isfinite(x)) return false;
    above += x > v;
  }
  return above < k;
}

/* The metric from its definition: the fraction of hits. */
static double ref_metric(const metric_case *c, const gr_tensor *t, const gr_tensor *p) {
  int64_t n = gr_tensor_num_elements(p), cl = p->shape.dims[p->shape.rank - 1];
  bool per_row = c->kind >= M_CATEGORICAL;
  int64_t rows = per_row ? n / cl : n, hits = 0;
  for (int64_t i = 0; i < rows; i++) {
    double y =
        per_row && (c->kind == M_SPARSE || c->kind == M_SPARSE_TOP_K) ? gr_tensor_get_f64(t, i) : 0;
    switch (c->kind) {
      case M_ACCURACY:
        hits += gr_tensor_get_f64(t, i) == gr_tensor_get_f64(p, i);
        break;
      case M_BINARY:
        hits += gr_tensor_get_f64(t, i) == (gr_tensor_get_f64(p, i) > c->threshold ? 1.0 : 0.0);
        break;
      case M_CATEGORICAL:
        hits += ref_argmax(t, i, cl) == ref_argmax(p, i, cl);
        break;
      case M_SPARSE:
        hits += y == (double)ref_argmax(p, i, cl);
        break;
      case M_TOP_K:
        hits += ref_in_top_k(p, i, cl, ref_argmax(t, i, cl), c->k);
        break;
      default:
        hits += ref_in_top_k(p, i, cl, (int64_t)y, c->k);
        break;
    }
  }
  return rows ? (double)hits / (double)rows : NAN;
}

static void check_metric(const metric_case *c, const gr_tensor *t, const gr_tensor *p,
                         const char *what) {
  double got = run_metric(c, t, p), want = ref_metric(c, t, p);
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  GR_CHECK_MSG(fabs(got - want) <= 1e-6, "%s kind %d: %.9g, want %.9g (t %s %s, p %s %s)", what,
               (int)c->kind, got, want, gr_dtype_name(t->dtype), gr_shape_str(&t->shape, a),
               gr_dtype_name(p->dtype), gr_shape_str(&p->shape, b));
}

/* ---- the accuracies ------------------------------------------------------------------------- */

/* Scores with ties: values drawn from a few levels. */
static gr_tensor tied_scores(gt_rng *r, gr_dtype dt, gr_shape s) {
  gr_tensor p = gt_random(r, dt, s, 0, 1);
  for (int64_t i = 0; i < gr_tensor_num_elements(&p); i++)
    if (gt_int(r, 0, 2) == 0) gr_tensor_set_f64(&p, i, 0.25 * (double)gt_int(r, 0, 4));
  return p;
}

/* Whole numbers only (floats drawn in [lo, hi] floored). */
static gr_tensor whole(gt_rng *r, gr_dtype dt, gr_shape s, double hi) {
  gr_tensor t = gt_random(r, dt, s, 0, hi);
  for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++)
    gr_tensor_set_f64(&t, i, floor(gr_tensor_get_f64(&t, i) + 0.5));
  return t;
}

static void test_accuracies_against_reference(void) {
  gt_rng r = {31};
  const gr_dtype label_dts[] = {GR_I64, GR_I32, GR_U8, GR_F32, GR_BOOL};
  for (int round = 0; round < 30; round++) {
    gr_dtype pdt = round % 2 ? GR_F64 : GR_F32, ldt = label_dts[round % 5];
    int rank = 1 + round % 3;
    gr_shape s = gt_random_shape(&r, rank, 6), ls = s;
    ls.rank--;
    int64_t cl = s.dims[rank - 1];
    gr_tensor p = tied_scores(&r, pdt, s);
    /* accuracy: labels and predictions on a few integer levels */
    gr_tensor ta = whole(&r, ldt == GR_BOOL ? GR_I64 : ldt, s, 2);
    gr_tensor pa = whole(&r, round % 3 ? pdt : GR_I32, s, 2);
    check_metric(&(metric_case){.kind = M_ACCURACY}, &ta, &pa, "accuracy");
    /* binary: 0/1 labels of any dtype (float: some 0.7, which never match) */
    gr_tensor tb = gt_random(&r, ldt, s, 0, 1);
    if (ldt == GR_F32)
      for (int64_t i = 0; i < gr_tensor_num_elements(&tb); i++)
        gr_tensor_set_f64(&tb, i, gt_int(&r, 0, 3) == 0 ? 0.7 : (double)gt_int(&r, 0, 1));
    check_metric(&(metric_case){.kind = M_BINARY, .threshold = 0.5}, &tb, &p, "binary 0.5");
    check_metric(&(metric_case){.kind = M_BINARY, .threshold = 0.25}, &tb, &p, "binary 0.25");
    /* categorical: one-hot (or tied) labels, argmax first on ties */
    gr_tensor tc = tied_scores(&r, ldt == GR_BOOL || ldt == GR_F32 ? pdt : ldt, s);
    check_metric(&(metric_case){.kind = M_CATEGORICAL}, &tc, &p, "categorical");
    for (int64_t k = 1; k <= cl; k++)
      check_metric(&(metric_case){.kind = M_TOP_K, .k = k}, &tc, &p, "top_k");
    /* sparse: class indices, one out of range now and then (never a hit) */
    gr_dtype sdt = ldt == GR_BOOL ? GR_I64 : ldt;
    gr_tensor ts = whole(&r, sdt, ls, (double)(cl - 1));
    if (round % 4 == 0 && sdt != GR_U8) gr_tensor_set_f64(&ts, 0, round % 8 ? -1 : (double)cl);
    check_metric(&(metric_case){.kind = M_SPARSE}, &ts, &p, "sparse");
    if (sdt != GR_F32)
      for (int64_t k = 1; k <= cl; k++)
        check_metric(&(metric_case){.kind = M_SPARSE_TOP_K, .k = k}, &ts, &p, "sparse top_k");
    gr_tensor *all[] = {&p, &ta, &pa, &tb, &tc, &ts};
    for (int i = 0; i < 6; i++) gr_tensor_release(all[i]);
  }
}

/* [n, 1] labels against [n] predictions and back (Keras' rank rule), and
 * sparse labels [n, 1]. */
static void test_label_shapes(void) {
  const double pv[] = {0.9, 0.2, 0.6, 0.4}, tv[] = {1, 1, 1, 1};
  gr_shape n1 = gr_shape_make(2, (int64_t[]){4, 1}), n = gr_shape_make(1, (int64_t[]){4});
  gr_tensor p = gt_make(GR_F32, n1, pv), t = gt_make(GR_I64, n, tv);
  gr_tensor p1 = gt_make(GR_F32, n, pv), t1 = gt_make(GR_I64, n1, tv);
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_BINARY, .threshold = 0.5}, &t, &p), 0.5, 1e-7);
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_BINARY, .threshold = 0.5}, &t1, &p1), 0.5,
                1e-7);
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_ACCURACY}, &t, &t1), 1.0, 1e-7);
  gr_tensor q = gt_make(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}), (double[]){1, 3, 2, 5, 4, 6});
  gr_tensor l = gt_make(GR_I32, gr_shape_make(2, (int64_t[]){2, 1}), (double[]){1, 1});
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_SPARSE}, &l, &q), 0.5, 1e-7);
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_SPARSE_TOP_K, .k = 2}, &l, &q), 0.5, 1e-7);
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_SPARSE_TOP_K, .k = 3}, &l, &q), 1.0, 1e-7);
  gr_tensor *all[] = {&p, &t, &p1, &t1, &q, &l};
  for (int i = 0; i < 6; i++) gr_tensor_release(all[i]);
}

/* ---- in_top_k ------------------------------------------------------------------------------- */

static void test_in_top_k_op(void) {
  gr_shape s = gr_shape_make(2, (int64_t[]){6, 4});
  gr_tensor p = gt_make(GR_F32, s, (double[]){1, 2,   2, 3, /* target 1 (2): one above */
                                              3, 2,   2, 1, /* target 2: ties with 1 count for it */
                                              1, NAN, 2, 3, /* a NaN in the row: false */
                                              1, 2,   3, INFINITY, /* inf: false */
                                              1, 2,   3, 4,        /* target -1: false */
                                              1, 2,   3, 4});      /* target 4: false */
  gr_tensor t = gt_make(GR_I64, gr_shape_make(1, (int64_t[]){6}), (double[]){1, 2, 2, 2, -1, 4});
  const bool want[3][6] = {{0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}};
  for (int64_t k = 1; k <= 3; k++) {
    gr_attr a = gr_attr_int("k", k);
    gr_tensor got;
    gr_error err;
    GR_CHECK_OK(
        gt_run_op_fresh("in_top_k", (gr_tensor[]){p, t}, 2, NULL, &a, 1, 0, &got, NULL, &err), err);
    for (int i = 0; i < 6; i++)
      GR_CHECK_MSG(gt_get_int(&got, i) == want[k - 1][i], "k %lld row %d", (long long)k, i);
    gr_tensor_release(&got);
  }
  gr_attr k0 = gr_attr_int("k", 0), k2 = gr_attr_int("k", 2);
  GR_CHECK(gt_op_fails("in_top_k", (gr_tensor[]){p, t}, 2, NULL, &k0, 1, GR_ERR_INVALID_ARGUMENT,
                       "k must be >= 1"));
  gr_tensor t2 = gt_zeros(GR_I32, gr_shape_make(1, (int64_t[]){5}));
  gr_tensor tf = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){6}));
  GR_CHECK(gt_op_fails("in_top_k", (gr_tensor[]){p, t2}, 2, NULL, &k2, 1, GR_ERR_SHAPE, "targets"));
  GR_CHECK(gt_op_fails("in_top_k", (gr_tensor[]){p, tf}, 2, NULL, &k2, 1, GR_ERR_DTYPE, "targets"));
  gr_shape unk[2] = {gr_shape_make(2, (int64_t[]){-1, 4}), gr_shape_make(1, (int64_t[]){-1})};
  GR_CHECK(
      gt_op_fails("in_top_k", (gr_tensor[]){p, t2}, 2, unk, &k2, 1, GR_ERR_SHAPE, "do not match"));
  gr_tensor *all[] = {&p, &t, &t2, &tf};
  for (int i = 0; i < 4; i++) gr_tensor_release(all[i]);
}

/* ---- AUC ------------------------------------------------------------------------------------ */

/* Keras' AUC from its definition: thresholds -1e-7, i/(T-1) (as f32), 1 +
 * 1e-7; positive where p > t; a label not 0 is a positive; trapezoids of
 * recall over the false-positive rate, 0 / 0 as 0. */
static double ref_auc(const double *labels, const double *p, int64_t n, int64_t t) {
  double *tp = calloc((size_t)t, sizeof *tp), *fp = calloc((size_t)t, sizeof *fp), pos = 0, neg = 0;
  double *y = malloc(sizeof *y * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) y[i] = labels[i] != 0;
  for (int64_t j = 0; j < t; j++) {
    double th = j == 0       ? -1e-7
                : j == t - 1 ? 1 + 1e-7
                             : (double)(float)((double)j / (double)(t - 1));
    for (int64_t i = 0; i < n; i++)
      if ((double)(float)p[i] > th) tp[j] += y[i], fp[j] += 1 - y[i];
  }
  for (int64_t i = 0; i < n; i++) pos += y[i], neg += 1 - y[i];
  double auc = 0;
  for (int64_t j = 0; j + 1 < t; j++) {
    double r0 = pos ? tp[j] / pos : 0, r1 = pos ? tp[j + 1] / pos : 0;
    double f0 = neg ? fp[j] / neg : 0, f1 = neg ? fp[j + 1] / neg : 0;
    auc += (f0 - f1) * (r0 + r1) / 2;
  }
  free(tp), free(fp), free(y);
  return auc;
}

/* A prediction in [0, 1] not within f32 rounding of a threshold (whether
 * it is above one then depends on how the product rounds, in Keras too). */
static double clear_prediction(gt_rng *r, int64_t t) {
  for (;;) {
    double p = gt_uniform(r, 0, 1), x = p * (double)(t - 1);
    if (fabs(x - nearbyint(x)) > 1e-3) return p;
  }
}

static void test_auc_against_reference(void) {
  gt_rng r = {8};
  const int64_t ts[] = {200, 3, 10, 2, 200, 1000};
  for (int round = 0; round < 24; round++) {
    int64_t t = ts[round % 6], n = gt_int(&r, 1, 300);
    gr_dtype pdt = round % 2 ? GR_F64 : GR_F32;
    gr_dtype ldt = round % 4 == 3 ? GR_F32 : round % 4 == 2 ? GR_BOOL : GR_I64;
    double *y = malloc(sizeof *y * (size_t)n), *p = malloc(sizeof *p * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      /* labels 0, 1, or (f32) any value: not 0 is a positive */
      y[i] = ldt == GR_F32 && i % 3 ? gt_uniform(&r, 0, 1) : (double)gt_int(&r, 0, 1);
      p[i] = clear_prediction(&r, t);
      if (i % 7 == 3) p[i] = (double)gt_int(&r, 0, 1); /* 0 and 1 exactly */
      if (round % 6 == 1 && i % 5 == 0) p[i] = 0.5;    /* on T = 3's middle threshold */
    }
    if (round == 4)
      for (int64_t i = 0; i < n; i++) y[i] = 1; /* no negatives: 0 */
    gr_shape s = gr_shape_make(1, (int64_t[]){n});
    gr_tensor tt = gt_make(ldt, s, y), tp = gt_make(pdt, s, p);
    if (ldt == GR_BOOL)
      for (int64_t i = 0; i < n; i++) y[i] = gr_tensor_get_f64(&tt, i);
    double want = ref_auc(y, p, n, t);
    metric_case c = {M_AUC, .k = t};
    double got = run_metric(&c, &tt, &tp);
    GR_CHECK_MSG(fabs(got - want) <= 1e-6, "round %d, T %lld, n %lld: %.9g, want %.9g", round,
                 (long long)t, (long long)n, got, want);
    /* from logits: the sigmoid first */
    gr_tensor tz = gt_zeros(pdt, s);
    for (int64_t i = 0; i < n; i++)
      gr_tensor_set_f64(&tz, i, p[i] <= 0 ? -30 : p[i] >= 1 ? 30 : log(p[i] / (1 - p[i])));
    c.from_logits = true;
    double from_logits = run_metric(&c, &tt, &tz);
    GR_CHECK_MSG(fabs(from_logits - want) <= 1e-6, "from logits: %.9g, want %.9g", from_logits,
                 want);
    gr_tensor_release(&tt), gr_tensor_release(&tp), gr_tensor_release(&tz);
    free(y), free(p);
  }
  /* a [n, 1] against [n] and a [2, 3] against [6]: the examples flattened */
  gr_tensor t = gt_make(GR_I32, gr_shape_make(2, (int64_t[]){2, 3}), (double[]){0, 0, 1, 1, 0, 1});
  gr_tensor p =
      gt_make(GR_F32, gr_shape_make(1, (int64_t[]){6}), (double[]){0.1, 0.4, 0.35, 0.8, 0.7, 0.9});
  double y[] = {0, 0, 1, 1, 0, 1}, pv[] = {0.1, 0.4, 0.35, 0.8, 0.7, 0.9};
  GR_CHECK_NEAR(run_metric(&(metric_case){.kind = M_AUC, .k = 200}, &t, &p), ref_auc(y, pv, 6, 200),
                1e-6);
  gr_tensor_release(&t), gr_tensor_release(&p);
}

static void test_auc_errors(void) {
  gr_shape s = gr_shape_make(1, (int64_t[]){3});
  gr_tensor t = gt_make(GR_I64, s, (double[]){0, 1, 1});
  gr_tensor big = gt_make(GR_F32, s, (double[]){0.5, 1.5, 0.2});
  gr_tensor nan = gt_make(GR_F32, s, (double[]){0.5, NAN, 0.2});
  GR_CHECK(gt_op_fails("auc_confusion", (gr_tensor[]){t, big}, 2, NULL, NULL, 0,
                       GR_ERR_INVALID_ARGUMENT, "prediction 1.5 at element 1 is not in [0, 1]"));
  GR_CHECK(gt_op_fails("auc_confusion", (gr_tensor[]){t, nan}, 2, NULL, NULL, 0,
                       GR_ERR_INVALID_ARGUMENT, "from_logits=true"));
  gr_attr one = gr_attr_int("num_thresholds", 1);
  GR_CHECK(gt_op_fails("auc_confusion", (gr_tensor[]){t, big}, 2, NULL, &one, 1,
                       GR_ERR_INVALID_ARGUMENT, "num_thresholds must be from 2"));
  gr_tensor p4 = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){4}));
  GR_CHECK(gt_op_fails("auc_confusion", (gr_tensor[]){t, p4}, 2, NULL, NULL, 0, GR_ERR_SHAPE,
                       "as many elements"));
  gr_shape unk[2] = {gr_shape_make(1, (int64_t[]){-1}), gr_shape_make(1, (int64_t[]){-1})};
  GR_CHECK(gt_op_fails("auc_confusion", (gr_tensor[]){t, p4}, 2, unk, NULL, 0, GR_ERR_SHAPE,
                       "as many elements"));
  gr_tensor c = gt_zeros(GR_F64, gr_shape_make(2, (int64_t[]){3, 5}));
  GR_CHECK(gt_op_fails("auc_from_confusion", &c, 1, NULL, NULL, 0, GR_ERR_SHAPE, "[4, T]"));
  gr_shape cu = gr_shape_make(2, (int64_t[]){-1, -1});
  GR_CHECK(gt_op_fails("auc_from_confusion", &c, 1, &cu, NULL, 0, GR_ERR_SHAPE, "[4, T]"));
  gr_tensor *all[] = {&t, &big, &nan, &p4, &c};
  for (int i = 0; i < 5; i++) gr_tensor_release(all[i]);
}

/* The counts of several batches in a variable: each update gives the AUC
 * of every batch so far, the value reads it, reset starts again. */
static void test_streaming_auc(void) {
  gt_rng r = {12};
  gr_graph *g = gr_graph_new();
  gr_output ty = gr_placeholder(g, "y", GR_I32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output tp = gr_placeholder(g, "p", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output m[3];
  GR_CHECK_EQ_INT(gr_streaming_auc(g, "auc", ty, tp, 200, false, m), GR_OK);
  GR_CHECK(gr_graph_find_node(g, "auc") != NULL);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  double y[300], p[300];
  int64_t n = 0;
  for (int b = 0; b < 4; b++) {
    int64_t k = gt_int(&r, 5, 60);
    if (b == 3) { /* after a reset: this batch alone */
      GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &m[2], 1, &err), err);
      GR_CHECK_NEAR(gt_run_scalar(s, NULL, 0, m[0]), 0, 0);
      n = 0;
    }
    for (int64_t i = 0; i < k; i++)
      y[n + i] = (double)gt_int(&r, 0, 1), p[n + i] = clear_prediction(&r, 200);
    gr_shape sh = gr_shape_make(1, (int64_t[]){k});
    gr_tensor yt = gt_make(GR_I32, sh, y + n), pt = gt_make(GR_F32, sh, p + n);
    n += k;
    gr_feed f[2] = {{ty, &yt}, {tp, &pt}};
    double want = ref_auc(y, p, n, 200);
    GR_CHECK_NEAR(gt_run_scalar(s, f, 2, m[1]), want, 1e-6);
    GR_CHECK_NEAR(gt_run_scalar(s, NULL, 0, m[0]), want, 1e-6);
    gr_tensor_release(&yt), gr_tensor_release(&pt);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- size ----------------------------------------------------------------------------------- */

static void test_size_op(void) {
  const gr_shape shapes[] = {gr_shape_scalar(), gr_shape_make(2, (int64_t[]){2, 3}),
                             gr_shape_make(3, (int64_t[]){4, 0, 5}),
                             gr_shape_make(4, (int64_t[]){2, 3, 4, 5})};
  const gr_dtype dts[] = {GR_F32, GR_I64, GR_BOOL, GR_U8};
  for (int i = 0; i < 4; i++)
    for (int unknown = 0; unknown < 3; unknown++)
      for (int odt = 0; odt < 2; odt++) {
        gr_tensor x = gt_zeros(dts[i], shapes[i]), got;
        gr_attr a = gr_attr_dtype("dtype", odt ? GR_I32 : GR_I64);
        gr_error err;
        gr_status st = unknown ? gt_run1_unknown("size", &x, unknown == 1, &a, odt, &got, &err)
                               : gt_run1("size", &x, &a, odt, &got, &err);
        GR_CHECK_OK(st, err);
        if (st != GR_OK) continue;
        GR_CHECK(got.dtype == (odt ? GR_I32 : GR_I64) && got.shape.rank == 0);
        GR_CHECK_EQ_INT(gt_get_int(&got, 0), gr_shape_num_elements(&shapes[i]));
        gr_tensor_release(&got), gr_tensor_release(&x);
      }
  gr_tensor x = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_attr bad = gr_attr_dtype("dtype", GR_F32);
  GR_CHECK(gt_op_fails("size", &x, 1, NULL, &bad, 1, GR_ERR_DTYPE, "i32 or i64"));
  gr_tensor_release(&x);
  /* in a graph file: an op like any other, i64 by default */
  gr_tensor out[2];
  GR_CHECK(gt_dsl_run("x = zeros([3, 7])\nn = size(x)\nm = size(x, i32)\n", "n,m", 1, out));
  GR_CHECK(out[0].dtype == GR_I64 && gt_get_int(&out[0], 0) == 21);
  GR_CHECK(out[1].dtype == GR_I32 && gt_get_int(&out[1], 0) == 21);
  gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
}

/* ---- Keras' documented values and the .gr built-ins ---------------------------------------- */

static void test_keras_values_in_dsl(void) {
  const char *src =
      "a0 = accuracy([[1], [2], [3], [4]], [[0], [2], [3], [4]])\n"
      "a1 = binary_accuracy([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]])\n"
      "a2 = binary_accuracy([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]], threshold=0.7)\n"
      "a3 = categorical_accuracy([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])\n"
      "a4 = sparse_categorical_accuracy([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])\n"
      "a5 = top_k_categorical_accuracy([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]],"
      " k=1)\n"
      "a6 = sparse_top_k_categorical_accuracy([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]], k=1)\n"
      "a7 = sparse_top_k_categorical_accuracy([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])\n"
      "u1 = auc([0, 0, 1, 1], [0, 0.5, 0.3, 0.9], num_thresholds=3)\n"
      "u2 = auc([0, 0, 1, 1], [0, 0.5, 0.3, 0.9])\n"
      "u3 = auc([0, 0, 1, 1], [-5, 0, -0.8, 2.2], from_logits=true)\n"
      "s1, s2, s3 = streaming_auc([0, 1, 1, 0, 1], [0.1, 0.4, 0.35, 0.8, 0.7], name=\"test_auc\")\n"
      "n = size([[1, 2, 3], [4, 5, 6]])\n";
  const double want[] = {0.75, 0.75, 1.0, 0.5, 0.5, 0.5, 0.5, 1.0, 0.75, 0.75, 0.75, 0.5, 6};
  gr_tensor out[13];
  GR_CHECK(gt_dsl_run(src, "a0,a1,a2,a3,a4,a5,a6,a7,u1,u2,u3,s2,n", 1, out));
  for (int i = 0; i < 13; i++) {
    GR_CHECK_MSG(fabs(gr_tensor_get_f64(&out[i], 0) - want[i]) <= 1e-6, "value %d: %.9g, want %g",
                 i, gr_tensor_get_f64(&out[i], 0), want[i]);
    gr_tensor_release(&out[i]);
  }
  gr_graph *g = gr_graph_new();
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", src, g, NULL, NULL, &err), err);
  GR_CHECK(gr_graph_find_node(g, "test_auc") && gr_graph_find_node(g, "a6"));
  gr_graph_free(g);
  /* unnamed: streaming_auc, streaming_auc_1, ... */
  g = gr_graph_new();
  GR_CHECK_OK(gr_dsl_load_string("t.gr",
                                 "a, b, c = streaming_auc([0, 1], [0.2, 0.9])\n"
                                 "d, e, f = streaming_auc([0, 1], [0.2, 0.9])\n",
                                 g, NULL, NULL, &err),
              err);
  GR_CHECK(gr_graph_find_node(g, "streaming_auc") && gr_graph_find_node(g, "streaming_auc_1"));
  gr_graph_free(g);
}

#define GR_CHECK_DSL_FAILS(src, text) GR_CHECK(gt_dsl_fails_with(src, text))

static void test_dsl_errors(void) {
  GR_CHECK_DSL_FAILS("a = top_k_categorical_accuracy([[0, 1]], [[0.3, 0.7]], k=0)",
                     "t.gr:1:56: error: top_k_categorical_accuracy: k must be an integer from 1");
  GR_CHECK_DSL_FAILS("a = auc([0], [1], num_thresholds=1)", "num_thresholds must be an integer");
  GR_CHECK_DSL_FAILS("a = auc([0], [1], from_logits=\"yes\")", "from_logits must be true or false");
  GR_CHECK_DSL_FAILS("a = streaming_auc([0], [1], name=3)", "name must be a string");
  GR_CHECK_DSL_FAILS("a = binary_accuracy([0], [1], threshold=true)", "threshold must be a number");
  GR_CHECK_DSL_FAILS("a = accuracy([0, 1], [[1, 2, 3]])",
                     "accuracy: y_true [2] and y_pred [1, 3] differ");
  GR_CHECK_DSL_FAILS("a = sparse_categorical_accuracy([1, 2, 3], [[0.5, 0.5]])",
                     "must have the shape of y_pred [1, 2] without the classes");
  GR_CHECK_DSL_FAILS("a = sparse_top_k_categorical_accuracy([0.5], [[0.5, 0.5]])", "0.5");
  GR_CHECK_DSL_FAILS("a = categorical_accuracy([[1, 0]], [[0.2, 0.3, 0.5]])",
                     "must have one shape [..., classes]");
  GR_CHECK_DSL_FAILS("x = placeholder(f32, [4, 2])\na = auc(x, const([[0.5, 0.1, 0.3]]))",
                     "as many elements");
}

int main(void) {
  GR_RUN(test_accuracies_against_reference);
  GR_RUN(test_label_shapes);
  GR_RUN(test_in_top_k_op);
  GR_RUN(test_auc_against_reference);
  GR_RUN(test_auc_errors);
  GR_RUN(test_streaming_auc);
  GR_RUN(test_size_op);
  GR_RUN(test_keras_values_in_dsl);
  GR_RUN(test_dsl_errors);
  return gr_test_finish();
}
