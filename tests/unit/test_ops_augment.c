/* Tests of ops/image_augment.c: each image of the result is what the op
 * promises (mirrored or not, a shifted crop of the zero-padded image, a
 * constant added, contrast scaled about the channel means), the draws are
 * the same for a seed and step in a fresh session and change with the
 * step and seed, and bad input is an error naming the node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

#define N 64
#define H 5
#define W 6
#define C 3

static gt_rng rng = {53};

/* Runs op on x in a fresh session of graph seed gseed, `steps` times;
 * returns the last result. */
static gr_tensor run_aug(const char *op, const gr_attr *at, int na, const gr_tensor *x,
                         uint64_t gseed, int steps) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, gseed);
  gr_output p = gr_placeholder(g, "x", x->dtype, x->shape);
  gr_output y = gr_op(g, op, "aug", &p, 1, at, na);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out = gr_tensor_empty();
  for (int i = 0; i < steps && s; i++) {
    gr_tensor_release(&out);
    GR_CHECK_OK(gr_session_run(s, &(gr_feed){p, x}, 1, &y, 1, &out, NULL, 0, &err), err);
  }
  gr_session_free(s);
  gr_graph_free(g);
  return out;
}

static bool same(const gr_tensor *a, const gr_tensor *b) {
  return a->buf && b->buf &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b),
                (size_t)gr_tensor_num_elements(a) * gr_dtype_size(a->dtype)) == 0;
}

static double px(const gr_tensor *t, int64_t b, int64_t i, int64_t j, int64_t c) {
  return gr_tensor_get_f64(t, ((b * H + i) * W + j) * C + c);
}

/* Checks image b of y against image b of x for op; *param gets the
 * draw (flipped, the shift, the delta or the factor). */
static bool image_ok(const char *op, const gr_tensor *x, const gr_tensor *y, int64_t b,
                     double *param) {
  if (strcmp(op, "random_flip_left_right") == 0) {
    for (int f = 0; f < 2; f++) {
      bool ok = true;
      for (int64_t i = 0; i < H && ok; i++)
        for (int64_t j = 0; j < W && ok; j++)
          for (int64_t c = 0; c < C && ok; c++)
            ok = px(y, b, i, j, c) == px(x, b, i, f ? W - 1 - j : j, c);
      if (ok) return *param = f, true;
    }
    return false;
  }
  if (strcmp(op, "random_crop") == 0) {
    for (int64_t dy = -2; dy <= 2; dy++)
      for (int64_t dx = -2; dx <= 2; dx++) {
        bool ok = true;
        for (int64_t i = 0; i < H && ok; i++)
          for (int64_t j = 0; j < W && ok; j++)
            for (int64_t c = 0; c < C && ok; c++) {
              int64_t si = i + dy, sj = j + dx;
              double want = si < 0 || si >= H || sj < 0 || sj >= W ? 0 : px(x, b, si, sj, c);
              ok = px(y, b, i, j, c) == want;
            }
        if (ok) return *param = (double)(dy * 5 + dx), true;
      }
    return false;
  }
  if (strcmp(op, "random_brightness") == 0) {
    double d = px(y, b, 0, 0, 0) - px(x, b, 0, 0, 0);
    for (int64_t k = 0; k < H * W * C; k++)
      if (fabs(gr_tensor_get_f64(y, b * H * W * C + k) - gr_tensor_get_f64(x, b * H * W * C + k) -
               d) > 1e-5)
        return false;
    *param = d;
    return fabs(d) <= 0.3 + 1e-6;
  }
  /* contrast: per channel, y - m = f (x - m) with m the channel mean of x */
  double f = NAN;
  for (int64_t c = 0; c < C; c++) {
    double m = 0;
    for (int64_t i = 0; i < H; i++)
      for (int64_t j = 0; j < W; j++) m += px(x, b, i, j, c) / (H * W);
    for (int64_t i = 0; i < H; i++)
      for (int64_t j = 0; j < W; j++) {
        double xd = px(x, b, i, j, c) - m, yd = px(y, b, i, j, c) - m;
        if (isnan(f) && fabs(xd) > 0.1) f = yd / xd;
        if (!isnan(f) && fabs(yd - f * xd) > 1e-4) return false;
      }
  }
  *param = f;
  return f >= 0.5 - 1e-4 && f <= 1.5 + 1e-4;
}

static void check_op(const char *op, const gr_attr *at, int na) {
  gr_tensor x = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){N, H, W, C}), 0, 1);
  gr_tensor a = run_aug(op, at, na, &x, 5, 1), b = run_aug(op, at, na, &x, 5, 1);
  gr_tensor s2 = run_aug(op, at, na, &x, 5, 2), other = run_aug(op, at, na, &x, 6, 1);
  GR_CHECK_MSG(same(&a, &b), "%s: not deterministic for a seed and step", op);
  GR_CHECK_MSG(!same(&a, &s2), "%s: the same draws at steps 0 and 1", op);
  GR_CHECK_MSG(!same(&a, &other), "%s: the same draws for seeds 5 and 6", op);
  double params[N];
  int distinct = 0;
  for (int64_t i = 0; i < N; i++) {
    GR_CHECK_MSG(image_ok(op, &x, &a, i, &params[i]), "%s: image %lld", op, (long long)i);
    bool seen = false;
    for (int64_t k = 0; k < i; k++) seen = seen || params[k] == params[i];
    distinct += !seen;
  }
  GR_CHECK_MSG(distinct >= 2, "%s: every image drew the same", op);
  gr_tensor_release(&x), gr_tensor_release(&a), gr_tensor_release(&b);
  gr_tensor_release(&s2), gr_tensor_release(&other);
}

static void test_augment_ops(void) {
  check_op("random_flip_left_right", NULL, 0);
  check_op("random_crop", (gr_attr[]){gr_attr_int("padding", 2)}, 1);
  check_op("random_brightness", (gr_attr[]){gr_attr_float("max_delta", 0.3)}, 1);
  check_op("random_contrast", (gr_attr[]){gr_attr_float("lower", 0.5), gr_attr_float("upper", 1.5)},
           2);
}

static void expect_error(const char *op, gr_shape xs, const gr_attr *at, int na, const char *sub) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, xs);
  gr_output y = gr_op(g, op, "aug", &x, 1, at, na);
  GR_CHECK_MSG(!y.node && gr_graph_error(g), "%s", op);
  if (gr_graph_error(g)) {
    GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "node 'aug'");
    GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, sub);
  }
  gr_graph_free(g);
}

static void test_augment_errors(void) {
  gr_shape x4 = gr_shape_make(4, (int64_t[]){2, 4, 4, 3});
  expect_error("random_flip_left_right", gr_shape_make(3, (int64_t[]){4, 4, 3}), NULL, 0,
               "input must have rank 4 (NHWC), got shape [4, 4, 3]");
  expect_error("random_crop", x4, (gr_attr[]){gr_attr_int("padding", -1)}, 1,
               "attr 'padding' must be >= 0, got -1");
  expect_error("random_brightness", x4, (gr_attr[]){gr_attr_float("max_delta", -0.5)}, 1,
               "attr 'max_delta' must be finite and >= 0");
  expect_error("random_contrast", x4,
               (gr_attr[]){gr_attr_float("lower", 1.5), gr_attr_float("upper", 0.5)}, 2,
               "need finite 0 <= lower <= upper, got lower 1.5, upper 0.5");
}

int main(void) {
  GR_RUN(test_augment_ops);
  GR_RUN(test_augment_errors);
  return gr_test_finish();
}
