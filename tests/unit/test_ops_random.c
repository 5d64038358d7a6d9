/* Tests of the random ops (ops/random.c): reproducibility across graphs and
 * sessions, dependence on step / seeds / node name, an exact reference built
 * on core/gr_rng.h, statistics of 100k samples, and build errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

enum { K_UNIFORM, K_NORMAL, K_TRUNC, K_GLOROT, K_COUNT };
static const char *const kind_names[K_COUNT] = {"random_uniform", "random_normal",
                                                "truncated_normal", "glorot_uniform"};

static gr_output build_kind(gr_graph *g, int kind, gr_dtype dt, gr_shape s, int64_t seed) {
  switch (kind) {
    case K_UNIFORM:
      return gr_random_uniform(g, dt, s, -2.0, 3.0, seed);
    case K_NORMAL:
      return gr_random_normal(g, dt, s, 1.5, 2.0, seed);
    case K_TRUNC:
      return gr_truncated_normal(g, dt, s, -1.0, 0.5, seed);
    default:
      return gr_glorot_uniform(g, dt, s, seed);
  }
}

/* Runs the fetches once in a new session on g; results hold references. */
static gr_status run_once(gr_graph *g, const gr_output *fetches, int n, gr_tensor *out,
                          int threads) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return err.code;
  gr_status st = gr_session_run(s, NULL, 0, fetches, n, out, NULL, 0, &err);
  GR_CHECK_OK(st, err);
  gr_session_free(s);
  return st;
}

static bool bit_equal(const gr_tensor *a, const gr_tensor *b) {
  return a->buf && b->buf && a->dtype == b->dtype && gr_shape_equal(&a->shape, &b->shape) &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a)) == 0;
}

static bool differ_everywhere_mostly(const gr_tensor *a, const gr_tensor *b) {
  int64_t n = gr_tensor_num_elements(a), same = 0;
  for (int64_t i = 0; i < n; i++) same += gr_tensor_get_f64(a, i) == gr_tensor_get_f64(b, i);
  return same * 100 < n; /* under 1% equal by chance */
}

/* A graph holding every kind in both dtypes, with a graph seed. */
#define NF (K_COUNT * 2)
static gr_graph *build_all(uint64_t gseed, gr_output *f) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, gseed);
  for (int k = 0; k < K_COUNT; k++) {
    f[2 * k] = build_kind(g, k, GR_F32, gr_shape_make(2, (int64_t[]){17, 31}), 7);
    f[2 * k + 1] = build_kind(g, k, GR_F64, gr_shape_make(3, (int64_t[]){3, 5, 7}), 7);
  }
  GR_CHECK(gr_graph_error(g) == NULL);
  return g;
}

static void release_all(gr_tensor *t, int n) {
  for (int i = 0; i < n; i++) gr_tensor_release(&t[i]);
}

static void test_same_across_graphs_and_sessions(void) {
  gr_output f1[NF], f2[NF];
  gr_tensor a[NF], b[NF], c[NF];
  gr_graph *g1 = build_all(1234, f1), *g2 = build_all(1234, f2);
  run_once(g1, f1, NF, a, 1);
  run_once(g2, f2, NF, b, 1);
  run_once(g2, f2, NF, c, 4); /* another session, more threads: same values */
  for (int i = 0; i < NF; i++) {
    GR_CHECK_MSG(bit_equal(&a[i], &b[i]), "fetch %d differs across graphs", i);
    GR_CHECK_MSG(bit_equal(&a[i], &c[i]), "fetch %d differs with 4 threads", i);
    GR_CHECK_EQ_INT(a[i].dtype, i % 2 ? GR_F64 : GR_F32);
  }
  release_all(a, NF);
  release_all(b, NF);
  release_all(c, NF);
  gr_graph_free(g1);
  gr_graph_free(g2);
}

static void test_step_advances(void) {
  gr_output f[NF];
  gr_tensor r0[NF], r1[NF], again[NF];
  gr_graph *g = build_all(99, f);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  int64_t step0 = gr_session_step(s);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, f, NF, r0, NULL, 0, &err), err);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, f, NF, r1, NULL, 0, &err), err);
  GR_CHECK_EQ_INT(gr_session_step(s), step0 + 2);
  for (int i = 0; i < NF; i++)
    GR_CHECK_MSG(differ_everywhere_mostly(&r0[i], &r1[i]), "fetch %d repeats across steps", i);
  /* back to the first step: the first values again (what a restore relies on) */
  gr_session_set_step(s, step0);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, f, NF, again, NULL, 0, &err), err);
  for (int i = 0; i < NF; i++) GR_CHECK_MSG(bit_equal(&r0[i], &again[i]), "fetch %d", i);
  release_all(r0, NF);
  release_all(r1, NF);
  release_all(again, NF);
  gr_session_free(s);
  gr_graph_free(g);
}

/* Graph seed, op seed and node name each change the stream. */
static void test_keys(void) {
  gr_shape sh = gr_shape_make(1, (int64_t[]){500});
  for (int k = 0; k < K_COUNT; k++) {
    gr_graph *g1 = gr_graph_new(), *g2 = gr_graph_new();
    gr_graph_set_seed(g2, 5);
    gr_output o[5];
    o[0] = build_kind(g1, k, GR_F32, sh, 1);
    o[1] = build_kind(g1, k, GR_F32, sh, 2); /* op seed (and name) differ */
    o[2] = gr_name(g1, build_kind(g1, k, GR_F32, sh, 1), "other");
    o[3] = build_kind(g2, k, GR_F32, sh, 1); /* same name and op seed, graph seed 5 */
    o[4] = build_kind(g2, k, GR_F32, sh, 2); /* named like o[1] */
    GR_CHECK(!gr_graph_error(g1) && !gr_graph_error(g2));
    if (gr_graph_error(g1) || gr_graph_error(g2)) return;
    GR_CHECK(strcmp(o[0].node->name, o[3].node->name) == 0);
    GR_CHECK(strcmp(o[1].node->name, o[4].node->name) == 0);
    gr_tensor t1[3], t2[2];
    run_once(g1, o, 3, t1, 1);
    run_once(g2, o + 3, 2, t2, 1);
    GR_CHECK_MSG(differ_everywhere_mostly(&t1[0], &t1[1]), "%s: op seed", kind_names[k]);
    GR_CHECK_MSG(differ_everywhere_mostly(&t1[0], &t1[2]), "%s: name", kind_names[k]);
    GR_CHECK_MSG(differ_everywhere_mostly(&t1[0], &t2[0]), "%s: graph seed", kind_names[k]);
    GR_CHECK_MSG(differ_everywhere_mostly(&t1[1], &t2[1]), "%s: graph seed 2", kind_names[k]);
    release_all(t1, 3);
    release_all(t2, 2);
    gr_graph_free(g1);
    gr_graph_free(g2);
  }
}

/* The documented keying, rebuilt here with the public generator: element i of
 * a node is a function of (graph seed ^ op seed * C, hash(name), step, i). */
static gr_rng ref_rng(uint64_t gseed, int64_t op_seed, const char *name, int64_t step) {
  return gr_rng_make(gseed ^ ((uint64_t)op_seed * 0xD1B54A32D192ED03ull), gr_rng_hash_name(name),
                     (uint64_t)step);
}

static double ref_value(int kind, const gr_rng *r, gr_dtype dt, uint64_t i, uint64_t n,
                        double limit) {
  double u = dt == GR_F32 ? gr_rng_uniform_f32(r, i) : gr_rng_uniform_f64(r, i);
  switch (kind) {
    case K_UNIFORM:
      return -2.0 + 5.0 * u;
    case K_GLOROT:
      return -limit + 2 * limit * u;
    case K_NORMAL:
      return 1.5 + 2.0 * gr_rng_normal(r, i);
    default: {
      double z = gr_rng_normal(r, i);
      for (uint64_t k = 1; fabs(z) > 2.0; k++) z = gr_rng_normal(r, i + k * n);
      return -1.0 + 0.5 * z;
    }
  }
}

static void test_exact_reference(void) {
  gt_rng tr = {11};
  for (int rep = 0; rep < 8; rep++) {
    uint64_t gseed = gt_next(&tr);
    int64_t op_seed = gt_int(&tr, -1000, 1000);
    int rank = (int)gt_int(&tr, 0, 4);
    gr_shape sh = gt_random_shape(&tr, rank, 9);
    gr_graph *g = gr_graph_new();
    gr_graph_set_seed(g, gseed);
    gr_output o[NF];
    for (int k = 0; k < K_COUNT; k++)
      for (int d = 0; d < 2; d++) o[2 * k + d] = build_kind(g, k, d ? GR_F64 : GR_F32, sh, op_seed);
    GR_CHECK(!gr_graph_error(g));
    gr_error err;
    gr_session *s = gr_session_new(g, NULL, &err);
    int64_t step = (int64_t)gt_int(&tr, 0, 1000000);
    gr_session_set_step(s, step);
    gr_tensor t[NF];
    GR_CHECK_OK(gr_session_run(s, NULL, 0, o, NF, t, NULL, 0, &err), err);
    /* Keras fans for the glorot limit */
    double fi = 1, fo = 1, rf = 1;
    if (rank == 1) fi = fo = (double)sh.dims[0];
    if (rank >= 2) {
      for (int i = 0; i < rank - 2; i++) rf *= (double)sh.dims[i];
      fi = (double)sh.dims[rank - 2] * rf;
      fo = (double)sh.dims[rank - 1] * rf;
    }
    double limit = sqrt(6.0 / (fi + fo));
    int64_t n = gr_shape_num_elements(&sh);
    for (int f = 0; f < NF; f++) {
      gr_dtype dt = f % 2 ? GR_F64 : GR_F32;
      gr_rng r = ref_rng(gseed, op_seed, o[f].node->name, step);
      gr_tensor want = gt_zeros(dt, sh);
      for (int64_t i = 0; i < n; i++)
        gr_tensor_set_f64(&want, i, ref_value(f / 2, &r, dt, (uint64_t)i, (uint64_t)n, limit));
      GR_CHECK_MSG(gt_equal(&t[f], &want), "%s %s rank %d", kind_names[f / 2], gr_dtype_name(dt),
                   rank);
      gr_tensor_release(&want);
    }
    release_all(t, NF);
    gr_session_free(s);
    gr_graph_free(g);
  }
}

/* ---- statistics over 100k samples ---------------------------------------------- */

#define NS 100000

typedef struct stats {
  double mean, var, min, max;
} stats;

static stats sample(int kind, gr_dtype dt, gr_shape sh, double a, double b, int64_t seed,
                    gr_tensor *keep) {
  gr_graph *g = gr_graph_new();
  gr_output o;
  if (kind == K_UNIFORM)
    o = gr_random_uniform(g, dt, sh, a, b, seed);
  else if (kind == K_NORMAL)
    o = gr_random_normal(g, dt, sh, a, b, seed);
  else if (kind == K_TRUNC)
    o = gr_truncated_normal(g, dt, sh, a, b, seed);
  else
    o = gr_glorot_uniform(g, dt, sh, seed);
  gr_tensor t = gr_tensor_empty();
  stats st = {0, 0, INFINITY, -INFINITY};
  if (run_once(g, &o, 1, &t, 2) == GR_OK) {
    int64_t n = gr_tensor_num_elements(&t);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = gr_tensor_get_f64(&t, i);
      sum += v;
      if (v < st.min) st.min = v;
      if (v > st.max) st.max = v;
    }
    st.mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++) {
      double d = gr_tensor_get_f64(&t, i) - st.mean;
      sq += d * d;
    }
    st.var = sq / (double)(n - 1);
  }
  if (keep)
    *keep = t;
  else
    gr_tensor_release(&t);
  gr_graph_free(g);
  return st;
}

static void test_uniform_stats(void) {
  const double ranges[][2] = {{0, 1}, {-3, 5}, {100, 100.5}};
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 3; r++) {
      gr_dtype dt = d ? GR_F64 : GR_F32;
      double a = ranges[r][0], b = ranges[r][1], w = b - a;
      gr_tensor t;
      stats s = sample(K_UNIFORM, dt, gr_shape_make(2, (int64_t[]){400, NS / 400}), a, b, r, &t);
      GR_CHECK_NEAR(s.mean, (a + b) / 2, 0.005 * w);
      GR_CHECK_NEAR(s.var, w * w / 12, 0.03 * w * w / 12);
      GR_CHECK_MSG(s.min >= a && s.max < b, "%g..%g outside [%g, %g)", s.min, s.max, a, b);
      GR_CHECK(s.min < a + 1e-3 * w && s.max > b - 1e-3 * w);
      /* ten equal bins each near a tenth */
      int64_t bins[10] = {0};
      for (int64_t i = 0; i < NS; i++) {
        int k = (int)((gr_tensor_get_f64(&t, i) - a) / w * 10);
        bins[k < 0 ? 0 : k > 9 ? 9 : k]++;
      }
      for (int k = 0; k < 10; k++) GR_CHECK_NEAR(bins[k], NS / 10, NS / 10 * 0.05);
      gr_tensor_release(&t);
    }
}

static void test_uniform_degenerate(void) {
  gr_tensor t;
  sample(K_UNIFORM, GR_F32, gr_shape_make(1, (int64_t[]){100}), 2.5, 2.5, 0, &t);
  for (int i = 0; i < 100; i++) GR_CHECK_EQ_INT(gr_tensor_get_f64(&t, i) == 2.5, 1);
  gr_tensor_release(&t);
  /* a range that f32 cannot resolve: values stay in [minval, maxval) */
  sample(K_UNIFORM, GR_F32, gr_shape_make(1, (int64_t[]){1000}), 1.0, 1.0 + 1e-7, 0, &t);
  for (int i = 0; i < 1000; i++) {
    double v = gr_tensor_get_f64(&t, i);
    GR_CHECK_MSG(v >= 1.0 && v < 1.0 + 1e-7, "%.17g", v);
  }
  gr_tensor_release(&t);
  /* zero-size and scalar shapes */
  sample(K_UNIFORM, GR_F64, gr_shape_make(2, (int64_t[]){0, 5}), 0, 1, 0, &t);
  GR_CHECK_EQ_INT(t.shape.rank, 2);
  GR_CHECK_EQ_INT(gr_tensor_num_elements(&t), 0);
  gr_tensor_release(&t);
  sample(K_NORMAL, GR_F64, gr_shape_scalar(), 0, 1, 0, &t);
  GR_CHECK_EQ_INT(t.shape.rank, 0);
  GR_CHECK(t.buf && isfinite(gr_tensor_get_f64(&t, 0)));
  gr_tensor_release(&t);
}

static void test_normal_stats(void) {
  for (int d = 0; d < 2; d++) {
    gr_dtype dt = d ? GR_F64 : GR_F32;
    double mean = d ? -4.0 : 0.0, sd = d ? 0.25 : 1.0;
    gr_tensor t;
    stats s = sample(K_NORMAL, dt, gr_shape_make(1, (int64_t[]){NS}), mean, sd, 3, &t);
    GR_CHECK_NEAR(s.mean, mean, 0.02 * sd);
    GR_CHECK_NEAR(s.var, sd * sd, 0.03 * sd * sd);
    /* tails: P(|z| > 2) = 4.55%, P(|z| > 3) = 0.27% */
    int64_t beyond2 = 0, beyond3 = 0, third = 0;
    for (int64_t i = 0; i < NS; i++) {
      double z = (gr_tensor_get_f64(&t, i) - mean) / sd;
      beyond2 += fabs(z) > 2;
      beyond3 += fabs(z) > 3;
      third += z > 0;
    }
    GR_CHECK_NEAR(beyond2 / (double)NS, 0.0455, 0.004);
    GR_CHECK_NEAR(beyond3 / (double)NS, 0.0027, 0.001);
    GR_CHECK_NEAR(third / (double)NS, 0.5, 0.01);
    gr_tensor_release(&t);
  }
  /* stddev 0: every value is the mean */
  gr_tensor t;
  sample(K_NORMAL, GR_F32, gr_shape_make(1, (int64_t[]){50}), 7.0, 0.0, 0, &t);
  for (int i = 0; i < 50; i++) GR_CHECK_NEAR(gr_tensor_get_f64(&t, i), 7.0, 0);
  gr_tensor_release(&t);
}

static void test_truncated_stats(void) {
  /* variance of a standard normal truncated to [-2, 2] */
  const double tvar = 1 - 4 * 0.05399096651318806 / 0.9544997361036416;
  for (int d = 0; d < 2; d++) {
    gr_dtype dt = d ? GR_F64 : GR_F32;
    double mean = d ? 10.0 : 0.0, sd = d ? 3.0 : 1.0;
    gr_tensor t;
    stats s = sample(K_TRUNC, dt, gr_shape_make(2, (int64_t[]){NS / 100, 100}), mean, sd, 4, &t);
    GR_CHECK_NEAR(s.mean, mean, 0.02 * sd);
    GR_CHECK_NEAR(s.var, tvar * sd * sd, 0.03 * tvar * sd * sd);
    double tol = dt == GR_F32 ? 1e-5 * (fabs(mean) + sd) : 0;
    GR_CHECK_MSG(s.min >= mean - 2 * sd - tol && s.max <= mean + 2 * sd + tol, "%g..%g", s.min,
                 s.max);
    GR_CHECK(s.min < mean - 1.99 * sd && s.max > mean + 1.99 * sd);
    gr_tensor_release(&t);
  }
}

static void test_glorot_bounds(void) {
  const gr_shape shapes[] = {
      gr_shape_make(2, (int64_t[]){300, 200}),     /* 6/(300+200) */
      gr_shape_make(1, (int64_t[]){1000}),         /* 6/(1000+1000) */
      gr_shape_make(3, (int64_t[]){5, 40, 60}),    /* 6/(5*40 + 5*60) */
      gr_shape_make(4, (int64_t[]){3, 3, 64, 32}), /* 6/(9*64 + 9*32) */
      gr_shape_make(2, (int64_t[]){1, 4000}),      /* 6/4001 */
  };
  const double limits[] = {sqrt(6.0 / 500), sqrt(6.0 / 2000), sqrt(6.0 / 500), sqrt(6.0 / 864),
                           sqrt(6.0 / 4001)};
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < 5; c++) {
      gr_dtype dt = d ? GR_F64 : GR_F32;
      double L = limits[c];
      stats s = sample(K_GLOROT, dt, shapes[c], 0, 0, c, NULL);
      double big = fmax(-s.min, s.max);
      GR_CHECK_MSG(s.min >= -L && s.max < L, "case %d: %g..%g, limit %g", c, s.min, s.max, L);
      GR_CHECK_MSG(big > 0.99 * L, "case %d: max |v| %g, limit %g", c, big, L);
      GR_CHECK_NEAR(s.mean, 0, 0.05 * L);
      GR_CHECK_NEAR(s.var, L * L / 3, 0.1 * L * L / 3);
    }
  /* rank 0: fans 1 and 1 */
  for (int rep = 0; rep < 20; rep++) {
    stats s = sample(K_GLOROT, GR_F64, gr_shape_scalar(), 0, 0, rep, NULL);
    GR_CHECK(fabs(s.mean) < sqrt(3.0));
  }
}

/* ---- stateful, not merged ------------------------------------------------------ */

static void test_stateful(void) {
  for (int k = 0; k < K_COUNT; k++) {
    const gr_op_def *op = gr_ops_find(kind_names[k]);
    GR_CHECK(op && (op->flags & GR_OP_STATEFUL));
  }
  /* two identical nodes are two streams */
  gr_graph *g = gr_graph_new();
  gr_shape sh = gr_shape_make(1, (int64_t[]){64});
  gr_output o[2] = {gr_random_normal(g, GR_F32, sh, 0, 1, 3),
                    gr_random_normal(g, GR_F32, sh, 0, 1, 3)};
  gr_tensor t[2];
  if (run_once(g, o, 2, t, 1) == GR_OK) {
    GR_CHECK(differ_everywhere_mostly(&t[0], &t[1]));
    release_all(t, 2);
  }
  gr_graph_free(g);
}

/* A variable initialised from a random op keeps its first value. */
static void test_variable_init(void) {
  gr_graph *g = gr_graph_new();
  gr_output w =
      gr_variable(g, "w", gr_glorot_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){8, 4}), 1));
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  gr_tensor a, b;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &a, NULL, 0, &err), err);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &b, NULL, 0, &err), err);
  GR_CHECK(bit_equal(&a, &b));
  for (int i = 0; i < 32; i++) GR_CHECK(fabs(gr_tensor_get_f64(&a, i)) < sqrt(0.5));
  gr_tensor_release(&a);
  gr_tensor_release(&b);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- errors ---------------------------------------------------------------------- */

static void expect_build_error(gr_output (*build)(gr_graph *), gr_status code, const char *sub) {
  gr_graph *g = gr_graph_new();
  gr_output o = build(g);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(o.node == NULL);
  GR_CHECK(e != NULL);
  if (e) {
    GR_CHECK_MSG(e->code == code, "%s: %s", gr_status_name(e->code), e->msg);
    GR_CHECK_STR_CONTAINS(e->msg, "node '");
    GR_CHECK_STR_CONTAINS(e->msg, sub);
  }
  gr_graph_free(g);
}

static gr_output b_unknown_rank(gr_graph *g) {
  return gr_random_uniform(g, GR_F32, gr_shape_unknown(), 0, 1, 0);
}
static gr_output b_unknown_dim(gr_graph *g) {
  return gr_random_normal(g, GR_F32, gr_shape_make(2, (int64_t[]){-1, 3}), 0, 1, 0);
}
static gr_output b_trunc_unknown(gr_graph *g) {
  return gr_truncated_normal(g, GR_F64, gr_shape_make(1, (int64_t[]){-1}), 0, 1, 0);
}
static gr_output b_glorot_unknown(gr_graph *g) {
  return gr_glorot_uniform(g, GR_F64, gr_shape_unknown(), 0);
}
static gr_output b_i32(gr_graph *g) {
  return gr_random_uniform(g, GR_I32, gr_shape_make(1, (int64_t[]){3}), 0, 10, 0);
}
static gr_output b_bool(gr_graph *g) {
  return gr_random_normal(g, GR_BOOL, gr_shape_make(1, (int64_t[]){3}), 0, 1, 0);
}
static gr_output b_glorot_u8(gr_graph *g) {
  return gr_glorot_uniform(g, GR_U8, gr_shape_make(2, (int64_t[]){3, 3}), 0);
}
static gr_output b_trunc_i64(gr_graph *g) {
  return gr_truncated_normal(g, GR_I64, gr_shape_make(1, (int64_t[]){3}), 0, 1, 0);
}
static gr_output b_min_gt_max(gr_graph *g) {
  return gr_random_uniform(g, GR_F32, gr_shape_make(1, (int64_t[]){3}), 2, 1, 0);
}
static gr_output b_inf_max(gr_graph *g) {
  return gr_random_uniform(g, GR_F32, gr_shape_make(1, (int64_t[]){3}), 0, INFINITY, 0);
}
static gr_output b_neg_stddev(gr_graph *g) {
  return gr_random_normal(g, GR_F32, gr_shape_make(1, (int64_t[]){3}), 0, -1, 0);
}
static gr_output b_nan_mean(gr_graph *g) {
  return gr_truncated_normal(g, GR_F32, gr_shape_make(1, (int64_t[]){3}), NAN, 1, 0);
}
static gr_output b_huge(gr_graph *g) {
  return gr_random_uniform(g, GR_F32, gr_shape_make(3, (int64_t[]){1 << 30, 1 << 30, 1 << 30}), 0,
                           1, 0);
}
static gr_output b_no_shape(gr_graph *g) {
  return gr_op(g, "random_uniform", NULL, NULL, 0, NULL, 0);
}
static gr_output b_input(gr_graph *g) {
  gr_output x = gr_const_f32(g, 1);
  gr_attr a = gr_attr_shape("shape", gr_shape_scalar());
  return gr_op(g, "random_normal", NULL, &x, 1, &a, 1);
}

static void test_errors(void) {
  expect_build_error(b_unknown_rank, GR_ERR_SHAPE, "fully known");
  expect_build_error(b_unknown_rank, GR_ERR_SHAPE, "random_uniform");
  expect_build_error(b_unknown_dim, GR_ERR_SHAPE, "[?, 3]");
  expect_build_error(b_trunc_unknown, GR_ERR_SHAPE, "truncated_normal");
  expect_build_error(b_glorot_unknown, GR_ERR_SHAPE, "glorot_uniform");
  expect_build_error(b_i32, GR_ERR_DTYPE, "i32");
  expect_build_error(b_bool, GR_ERR_DTYPE, "bool");
  expect_build_error(b_glorot_u8, GR_ERR_DTYPE, "u8");
  expect_build_error(b_trunc_i64, GR_ERR_DTYPE, "i64");
  expect_build_error(b_min_gt_max, GR_ERR_INVALID_ARGUMENT, "minval");
  expect_build_error(b_inf_max, GR_ERR_INVALID_ARGUMENT, "maxval");
  expect_build_error(b_neg_stddev, GR_ERR_INVALID_ARGUMENT, "stddev");
  expect_build_error(b_nan_mean, GR_ERR_INVALID_ARGUMENT, "mean");
  expect_build_error(b_huge, GR_ERR_OUT_OF_RANGE, "too many elements");
  expect_build_error(b_no_shape, GR_ERR_INVALID_ARGUMENT, "shape");
  expect_build_error(b_input, GR_ERR_INVALID_ARGUMENT, "input");
}

int main(void) {
  GR_RUN(test_same_across_graphs_and_sessions);
  GR_RUN(test_step_advances);
  GR_RUN(test_keys);
  GR_RUN(test_exact_reference);
  GR_RUN(test_uniform_stats);
  GR_RUN(test_uniform_degenerate);
  GR_RUN(test_normal_stats);
  GR_RUN(test_truncated_stats);
  GR_RUN(test_glorot_bounds);
  GR_RUN(test_stateful);
  GR_RUN(test_variable_init);
  GR_RUN(test_errors);
  return gr_test_finish();
}
