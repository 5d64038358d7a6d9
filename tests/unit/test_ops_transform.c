/* Tests of ops/image_transform.c (random_flip, random_rotation,
 * random_zoom): each image of the result is what the documented geometry
 * gives for the image's draw (output 1), computed here by a plain
 * per-pixel reference; exact cases (a quarter turn, a zoom of 1/2 on pixel
 * centres, flips); values stay within the input's range except where
 * "constant" fills; the draws are the same for a seed and step in a fresh
 * session and change with the step and seed; no gradient flows; bad attrs
 * are errors naming the node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

#define NI 16
#define H  5
#define W  6
#define C  2

static gt_rng rng = {77};

/* Runs op on x in a fresh session of graph seed gseed, `steps` times; the
 * last step's outputs 0 and (when the op has it) 1. */
static void run_op(const char *op, const gr_attr *at, int na, const gr_tensor *x, uint64_t gseed,
                   int steps, gr_tensor *y, gr_tensor *draws) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, gseed);
  gr_output p = gr_placeholder(g, "x", x->dtype, x->shape);
  gr_output o = gr_op(g, op, "aug", &p, 1, at, na);
  GR_CHECK(o.node != NULL);
  int nout = o.node ? o.node->num_outputs : 0;
  gr_output f[2] = {o, gr_output_at(o, 1)};
  gr_error err;
  gr_session *s = o.node ? gr_session_new(g, NULL, &err) : NULL;
  gr_tensor out[2] = {gr_tensor_empty(), gr_tensor_empty()};
  for (int i = 0; i < steps && s; i++) {
    gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
    GR_CHECK_OK(gr_session_run(s, &(gr_feed){p, x}, 1, f, nout, out, NULL, 0, &err), err);
  }
  *y = out[0];
  if (draws)
    *draws = out[1];
  else
    gr_tensor_release(&out[1]);
  gr_session_free(s);
  gr_graph_free(g);
}

static double px(const gr_tensor *t, int64_t b, int64_t i, int64_t j, int64_t c) {
  return gr_tensor_get_f64(t, ((b * H + i) * W + j) * C + c);
}

/* A coordinate outside [0, n - 1] by fill mode, as the docs say:
 * reflect d c b a | a b c d | d c b a, wrap a b c d | a b c d, nearest
 * the edge; constant keeps it (the pixels it falls between that are
 * outside read the fill value). */
static double ref_coord(double v, int64_t n, const char *mode) {
  if (v >= 0 && v <= n - 1) return v;
  if (!strcmp(mode, "constant")) return v;
  if (!strcmp(mode, "nearest")) return v < 0 ? 0 : (double)(n - 1);
  double period = strcmp(mode, "wrap") == 0 ? (double)n : 2.0 * (double)n;
  while (v < 0) v += period;
  while (v >= period) v -= period;
  if (!strcmp(mode, "reflect") && v >= n) v = 2.0 * (double)n - v - 1;
  return v < 0 ? 0 : v > n - 1 ? (double)(n - 1) : v;
}

static double read_ref(const gr_tensor *x, int64_t b, int64_t i, int64_t j, int64_t c,
                       double fill) {
  return i < 0 || i >= H || j < 0 || j >= W ? fill : px(x, b, i, j, c);
}

/* Image b of the transform that reads input point (b0 j + b1 i + b2, a0 j
 * + a1 i + a2) (row, column) for output (i, j), bilinear or nearest. */
static bool image_matches(const gr_tensor *x, const gr_tensor *y, int64_t b, const double m[6],
                          const char *mode, bool nearest, double fill, double tol) {
  for (int64_t i = 0; i < H; i++)
    for (int64_t j = 0; j < W; j++) {
      double xs = ref_coord(m[0] * j + m[1] * i + m[2], W, mode);
      double ys = ref_coord(m[3] * j + m[4] * i + m[5], H, mode);
      for (int64_t c = 0; c < C; c++) {
        double want;
        if (nearest) {
          want = read_ref(x, b, llround(ys), llround(xs), c, fill);
        } else {
          double fy = floor(ys), fx = floor(xs), dy = ys - fy, dx = xs - fx;
          int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
          want = (1 - dy) * ((1 - dx) * read_ref(x, b, y0, x0, c, fill) +
                             dx * read_ref(x, b, y0, x0 + 1, c, fill)) +
                 dy * ((1 - dx) * read_ref(x, b, y0 + 1, x0, c, fill) +
                       dx * read_ref(x, b, y0 + 1, x0 + 1, c, fill));
        }
        if (fabs(px(y, b, i, j, c) - want) > tol) {
          fprintf(stderr, "  image %lld (%lld, %lld, %lld): %g, want %g\n", (long long)b,
                  (long long)i, (long long)j, (long long)c, px(y, b, i, j, c), want);
          return false;
        }
      }
    }
  return true;
}

static gr_tensor images(gr_dtype dt) {
  return gt_random(&rng, dt, gr_shape_make(4, (int64_t[]){NI, H, W, C}), -1, 1);
}

/* Rotation: Keras' matrix about the centre for each image's angle, in
 * [lo, hi] * 2 pi, every fill mode and both interpolations. */
static void test_rotation(void) {
  static const char *const modes[] = {"reflect", "wrap", "constant", "nearest"};
  gr_tensor x = images(GR_F64);
  for (int m = 0; m < 4; m++)
    for (int nearest = 0; nearest < 2; nearest++) {
      double f[2] = {-0.3, 0.2};
      gr_attr at[4] = {gr_attr_floats("factor", 2, f), gr_attr_string("fill_mode", modes[m]),
                       gr_attr_string("interpolation", nearest ? "nearest" : "bilinear"),
                       gr_attr_float("fill_value", 0.25)};
      gr_tensor y, ang;
      run_op("random_rotation", at, 4, &x, 1, 1, &y, &ang);
      double lo = 1, hi = -1;
      for (int64_t b = 0; b < NI; b++) {
        double t = gr_tensor_get_f64(&ang, b), cs = cos(t), sn = sin(t);
        lo = fmin(lo, t), hi = fmax(hi, t);
        GR_CHECK(t >= -0.3 * 2 * M_PI && t <= 0.2 * 2 * M_PI);
        double mm[6] = {cs, -sn, ((W - 1) - (cs * (W - 1) - sn * (H - 1))) / 2,
                        sn, cs,  ((H - 1) - (sn * (W - 1) + cs * (H - 1))) / 2};
        GR_CHECK_MSG(image_matches(&x, &y, b, mm, modes[m], nearest, 0.25, 1e-9),
                     "rotation, %s, %s", modes[m], nearest ? "nearest" : "bilinear");
        /* within the input's range (and the fill's, for constant) */
        for (int64_t i = 0; i < H * W * C; i++) {
          double v = gr_tensor_get_f64(&y, b * H * W * C + i);
          GR_CHECK(v >= -1 - 1e-12 && v <= 1 + 1e-12);
        }
      }
      GR_CHECK(hi - lo > 0.5); /* spread over the range */
      gr_tensor_release(&y), gr_tensor_release(&ang);
    }
  gr_tensor_release(&x);
}

/* A quarter turn (factor [0.25, 0.25]) of a square image is exact:
 * out[i][j] = in[j][n - 1 - i] (counter-clockwise). */
static void test_quarter_turn(void) {
  enum { S = 4 };
  double v[S * S];
  for (int i = 0; i < S * S; i++) v[i] = i;
  gr_tensor x = gt_make(GR_F32, gr_shape_make(4, (int64_t[]){1, S, S, 1}), v);
  double f[2] = {0.25, 0.25};
  gr_attr at[1] = {gr_attr_floats("factor", 2, f)};
  gr_tensor y, ang;
  run_op("random_rotation", at, 1, &x, 0, 1, &y, &ang);
  GR_CHECK_NEAR(gr_tensor_get_f64(&ang, 0), M_PI / 2, 1e-6);
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++)
      GR_CHECK_NEAR(gr_tensor_get_f64(&y, i * S + j), v[j * S + (S - 1 - i)], 1e-4);
  gr_tensor_release(&x), gr_tensor_release(&y), gr_tensor_release(&ang);
}

/* Zoom: the image shows (1 + d) times its height and width about the
 * centre; one factor zooms both axes alike, two draw apart. */
static void test_zoom(void) {
  gr_tensor x = images(GR_F32);
  for (int both = 0; both < 2; both++) {
    double hf[2] = {-0.5, 0.4}, wf[2] = {0.1, 0.9};
    gr_attr at[3] = {gr_attr_floats("height_factor", 2, hf),
                     gr_attr_floats("width_factor", both ? 2 : 0, wf),
                     gr_attr_string("fill_mode", "reflect")};
    gr_tensor y, z;
    run_op("random_zoom", at, 3, &x, 3, 2, &y, &z);
    for (int64_t b = 0; b < NI; b++) {
      double zy = gr_tensor_get_f64(&z, 2 * b), zx = gr_tensor_get_f64(&z, 2 * b + 1);
      GR_CHECK(zy >= 0.5 - 1e-6 && zy <= 1.4 + 1e-6);
      if (both)
        GR_CHECK(zx >= 1.1 - 1e-6 && zx <= 1.9 + 1e-6);
      else
        GR_CHECK(zx == zy);
      double m[6] = {zx, 0, (W - 1) * (1 - zx) / 2, 0, zy, (H - 1) * (1 - zy) / 2};
      GR_CHECK(image_matches(&x, &y, b, m, "reflect", false, 0, 1e-5));
    }
    gr_tensor_release(&y), gr_tensor_release(&z);
  }
  /* zooming in by 1/2 on 5 columns reads columns 1, 1.5, 2, 2.5, 3 */
  double v[5] = {0, 10, 20, 30, 40};
  gr_tensor row = gt_make(GR_F64, gr_shape_make(4, (int64_t[]){1, 1, 5, 1}), v);
  double half[2] = {-0.5, -0.5};
  gr_attr at[1] = {gr_attr_floats("height_factor", 2, half)};
  gr_tensor y;
  run_op("random_zoom", at, 1, &row, 0, 1, &y, NULL);
  double want[5] = {10, 15, 20, 25, 30};
  for (int j = 0; j < 5; j++) GR_CHECK_NEAR(gr_tensor_get_f64(&y, j), want[j], 1e-12);
  gr_tensor_release(&row), gr_tensor_release(&y), gr_tensor_release(&x);
}

/* Flips: each image is one of the mirror images the mode allows; over the
 * batch, each of them. */
static void test_flip(void) {
  gr_tensor x = images(GR_F32);
  static const char *const modes[] = {"horizontal", "vertical", "horizontal_and_vertical"};
  for (int m = 0; m < 3; m++) {
    gr_attr at[1] = {gr_attr_string("mode", modes[m])};
    gr_tensor y;
    run_op("random_flip", at, 1, &x, 5, 1, &y, NULL);
    int seen[4] = {0};
    for (int64_t b = 0; b < NI; b++) {
      int found = -1;
      for (int k = 0; k < 4 && found < 0; k++) {
        bool fx = k & 1, fy = k & 2;
        if ((fx && m == 1) || (fy && m == 0)) continue;
        bool ok = true;
        for (int64_t i = 0; i < H && ok; i++)
          for (int64_t j = 0; j < W && ok; j++)
            for (int64_t c = 0; c < C && ok; c++)
              ok = px(&y, b, i, j, c) == px(&x, b, fy ? H - 1 - i : i, fx ? W - 1 - j : j, c);
        if (ok) found = k;
      }
      GR_CHECK_MSG(found >= 0, "image %lld of mode %s is no allowed flip", (long long)b, modes[m]);
      if (found >= 0) seen[found]++;
    }
    int kinds = (seen[0] > 0) + (seen[1] > 0) + (seen[2] > 0) + (seen[3] > 0);
    GR_CHECK_EQ_INT(kinds, m == 2 ? 4 : 2);
    gr_tensor_release(&y);
  }
  gr_tensor_release(&x);
}

/* The same seed and step in a fresh session: the same bits; another step
 * or seed: other draws. */
static void test_determinism(void) {
  gr_tensor x = images(GR_F32);
  double f[1] = {0.2};
  gr_attr at[2] = {gr_attr_floats("factor", 1, f), gr_attr_int("seed", 9)};
  gr_tensor a, b, c, d;
  run_op("random_rotation", at, 2, &x, 4, 2, &a, NULL);
  run_op("random_rotation", at, 2, &x, 4, 2, &b, NULL);
  run_op("random_rotation", at, 2, &x, 4, 3, &c, NULL);
  run_op("random_rotation", at, 2, &x, 5, 2, &d, NULL);
  GR_CHECK(gt_bit_equal(&a, &b));
  GR_CHECK(memcmp(gr_tensor_data(&a), gr_tensor_data(&c), gr_tensor_num_elements(&a) * 4) != 0);
  GR_CHECK(memcmp(gr_tensor_data(&a), gr_tensor_data(&d), gr_tensor_num_elements(&a) * 4) != 0);
  gr_tensor_release(&a), gr_tensor_release(&b), gr_tensor_release(&c), gr_tensor_release(&d);
  gr_tensor_release(&x);
}

/* Augmentation is data: the gradient through it is zero. */
static void test_no_gradient(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(4, (int64_t[]){2, 3, 3, 1}));
  gr_output y = gr_random_rotation(g, x, -0.1, 0.1, NULL, 0);
  gr_output l = gr_reduce_sum(g, y, NULL, 0, false), d;
  GR_CHECK(gr_gradients(g, &l, 1, &x, 1, NULL, true, &d) == GR_OK);
  GR_CHECK(d.node == NULL); /* unconnected */
  gr_graph_free(g);
}

static void test_errors(void) {
  gr_tensor x = images(GR_F32);
  gr_tensor bad = gt_random(&rng, GR_F32, gr_shape_make(2, (int64_t[]){3, 4}), 0, 1);
  double ok[1] = {0.1}, neg[1] = {-0.1}, back[2] = {0.3, 0.1}, toofar[2] = {-1.5, 0},
         three[3] = {0, 0, 0};
  struct {
    const char *op;
    gr_attr at[2];
    int na;
    const gr_tensor *in;
    gr_status code;
    const char *want;
  } cases[] = {
      {"random_flip",
       {gr_attr_string("mode", "diagonal")},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "attr 'mode' must be \"horizontal\", \"vertical\" or \"horizontal_and_vertical\""},
      {"random_rotation",
       {gr_attr_floats("factor", 1, neg)},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "attr 'factor' must be a finite value >= 0, got -0.1"},
      {"random_rotation",
       {gr_attr_floats("factor", 2, back)},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "lower <= upper, got [0.3, 0.1]"},
      {"random_rotation",
       {gr_attr_floats("factor", 3, three)},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "one value f (the range [-f, f]) or two [lower, upper], got 3"},
      {"random_rotation",
       {gr_attr_floats("factor", 0, NULL)},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "attr 'factor' is empty"},
      {"random_zoom",
       {gr_attr_floats("height_factor", 2, toofar)},
       1,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "a zoom of 1 + -1.5 would be negative"},
      {"random_rotation",
       {gr_attr_floats("factor", 1, ok), gr_attr_string("fill_mode", "mirror")},
       2,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "attr 'fill_mode' must be"},
      {"random_zoom",
       {gr_attr_floats("height_factor", 1, ok), gr_attr_string("interpolation", "cubic")},
       2,
       &x,
       GR_ERR_INVALID_ARGUMENT,
       "attr 'interpolation' must be \"bilinear\" or \"nearest\""},
      {"random_flip", {gr_attr_string("mode", "horizontal")}, 1, &bad, GR_ERR_SHAPE, "rank 4"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    GR_CHECK_MSG(gt_op_fails(cases[i].op, cases[i].in, 1, NULL, cases[i].at, cases[i].na,
                             cases[i].code, cases[i].want),
                 "case %zu", i);
  gr_tensor_release(&x), gr_tensor_release(&bad);
}

int main(void) {
  gr_init();
  GR_RUN(test_rotation);
  GR_RUN(test_quarter_turn);
  GR_RUN(test_zoom);
  GR_RUN(test_flip);
  GR_RUN(test_determinism);
  GR_RUN(test_no_gradient);
  GR_RUN(test_errors);
  return gr_test_finish();
}
