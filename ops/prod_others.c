/* prod_others: for each element x[j], the product of the other elements of
 * its group (the elements a reduction over attr axes combines), from prefix
 * and suffix products, so zeros in x give exact results where dy * y / x
 * would give 0 / 0. It is the gradient of reduce_prod.
 *
 * With direction tensors t_1..t_m (inputs 1..m, x's shape) it gives the
 * coefficient of e_1...e_m in prod_{k != j} (x_k + sum_r e_r t_r[k]), where
 * e_r^2 = 0: the prefix and suffix products are taken over those truncated
 * polynomials (2^m coefficients, one per subset of the e_r). The family is
 * closed under differentiation: the gradient with respect to x adds the
 * incoming gradient as one more direction, the one with respect to t_r puts
 * it in t_r's place, so every derivative of reduce_prod is exact at zeros.
 * Products accumulate in double. */
#include <stdlib.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static gr_status prod_others_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  for (int i = 1; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    if (!gr_shape_compatible(&ctx->in_shapes[0], &ctx->in_shapes[i])) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_shape_error(ctx, GR_ERR_SHAPE, "direction %d has shape %s, x has %s", i,
                            gr_shape_str(&ctx->in_shapes[i], b),
                            gr_shape_str(&ctx->in_shapes[0], a));
    }
  }
  if (ctx->in_shapes[0].rank >= 0) {
    bool mask[GR_MAX_RANK];
    GR_TRY(gr_ops_axes_mask(ctx, "axes", ctx->in_shapes[0].rank, true, mask));
  }
  return gr_shape_fn_unchanged(ctx);
}

/* The offsets (row-major strides) of the elements of the dims where mask ==
 * pick, in row-major order of those dims. */
static void offsets(const gr_shape *s, const bool *mask, bool pick, int64_t *out) {
  int64_t str[GR_MAX_RANK], dim[GR_MAX_RANK], st[GR_MAX_RANK], idx[GR_MAX_RANK] = {0};
  int n = 0;
  gr_ops_strides(s, str);
  for (int i = 0; i < s->rank; i++)
    if (mask[i] == pick) {
      dim[n] = s->dims[i];
      st[n++] = str[i];
    }
  int64_t count = 1, off = 0;
  for (int i = 0; i < n; i++) count *= dim[i];
  for (int64_t k = 0; k < count; k++) {
    out[k] = off;
    for (int d = n - 1; d >= 0; d--) {
      off += st[d];
      if (++idx[d] < dim[d]) break;
      off -= st[d] * dim[d];
      idx[d] = 0;
    }
  }
}

/* a *= (f[0] + sum_r e_r f[1 + r]) over the 2^m coefficients of a (bit r of
 * the index: e_r); descending, so each a[s without r] is still the old one. */
static void times_factor(double *a, int m, const double *f) {
  for (int s = (1 << m) - 1; s >= 0; s--) {
    double v = a[s] * f[0];
    for (int r = 0; r < m; r++)
      if (s & (1 << r)) v += a[s & ~(1 << r)] * f[1 + r];
    a[s] = v;
  }
}

static void set_one(double *a, int m) {
  for (int s = 0; s < (1 << m); s++) a[s] = s == 0;
}

static double at(const gr_tensor *t, int64_t i) {
  return t->dtype == GR_F32 ? ((const float *)gr_tensor_data(t))[i]
                            : ((const double *)gr_tensor_data(t))[i];
}

static gr_status prod_others_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0];
  int m = ctx->num_inputs - 1, nc = 1 << m;
  for (int i = 1; i <= m; i++)
    if (!gr_shape_equal(&ctx->inputs[i].shape, &X->shape) || ctx->inputs[i].dtype != X->dtype) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "direction %d is %s %s, x is %s %s", i,
                             gr_dtype_name(ctx->inputs[i].dtype),
                             gr_shape_str(&ctx->inputs[i].shape, b), gr_dtype_name(X->dtype),
                             gr_shape_str(&X->shape, a));
    }
  bool mask[GR_MAX_RANK];
  GR_TRY(gr_ops_kernel_axes_mask(ctx, "axes", X->shape.rank, mask));
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &X->shape, &o));
  int64_t nk = 1, nr = 1;
  for (int i = 0; i < X->shape.rank; i++) *(mask[i] ? &nr : &nk) *= X->shape.dims[i];
  if (nk == 0 || nr == 0) return GR_OK;
  /* kept and reduced offsets, the group's factors, suffix products, the prefix */
  size_t words = (size_t)nk + (size_t)nr + (size_t)nr * (size_t)(m + 1) +
                 ((size_t)nr + 1) * (size_t)nc + (size_t)nc;
  char *scratch = gr_alloc_array(words, 8);
  if (!scratch) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  int64_t *koff = (int64_t *)scratch, *roff = koff + nk;
  double *fac = (double *)(roff + nr), *suf = fac + nr * (m + 1), *pre = suf + (nr + 1) * nc;
  offsets(&X->shape, mask, false, koff);
  offsets(&X->shape, mask, true, roff);
  for (int64_t k = 0; k < nk; k++) {
    for (int64_t r = 0; r < nr; r++)
      for (int d = 0; d <= m; d++) fac[r * (m + 1) + d] = at(&ctx->inputs[d], koff[k] + roff[r]);
    set_one(suf + nr * nc, m);
    for (int64_t r = nr - 1; r >= 0; r--) {
      for (int s = 0; s < nc; s++) suf[r * nc + s] = suf[(r + 1) * nc + s];
      times_factor(suf + r * nc, m, fac + r * (m + 1));
    }
    set_one(pre, m);
    for (int64_t r = 0; r < nr; r++) {
      /* the e_1...e_m coefficient of prefix * suffix: subsets and their complements */
      double v = 0;
      const double *after = suf + (r + 1) * nc;
      for (int s = 0; s < nc; s++) v += pre[s] * after[(nc - 1) ^ s];
      int64_t j = koff[k] + roff[r];
      if (X->dtype == GR_F32)
        ((float *)gr_tensor_data(o))[j] = (float)v;
      else
        ((double *)gr_tensor_data(o))[j] = v;
      times_factor(pre, m, fac + r * (m + 1));
    }
  }
  free(scratch);
  return GR_OK;
}

static gr_status prod_others_grad(gr_grad_ctx *c) {
  int m = c->node->num_inputs - 1;
  if (m >= GR_PROD_OTHERS_MAX_DIRECTIONS)
    return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                               "gradients: node '%s' (op prod_others): reduce_prod is "
                               "differentiated at most %d times",
                               c->node->name, GR_PROD_OTHERS_MAX_DIRECTIONS + 1);
  gr_output t[GR_PROD_OTHERS_MAX_DIRECTIONS];
  for (int r = 0; r < m; r++) t[r] = gr_grad_x(c, 1 + r);
  t[m] = c->grads[0];
  gr_output x = gr_grad_x(c, 0);
  const gr_attr_value *axes = gr_node_attr(c->node, "axes");
  c->dinputs[0] = gr_prod_others(c->graph, x, t, m + 1, axes->ints.v, axes->ints.n);
  for (int r = 0; r < m; r++) {
    gr_output own = t[r];
    t[r] = c->grads[0];
    c->dinputs[1 + r] = gr_prod_others(c->graph, x, t, m, axes->ints.v, axes->ints.n);
    t[r] = own;
  }
  return GR_OK;
}

static const gr_attr_spec prod_others_attrs[] = {
    {"axes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}}};

const gr_op_def gr_op_prod_others = {
    .name = "prod_others",
    .doc = "per element, the product of the others its reduction over axes combines (the "
           "gradient of reduce_prod, exact at zeros); inputs 1..m: directions for its "
           "derivatives",
    .min_inputs = 1,
    .max_inputs = 1 + GR_PROD_OTHERS_MAX_DIRECTIONS,
    .input_names = (const char *const[]){"x"},
    .num_outputs = 1,
    .attrs = prod_others_attrs,
    .num_attrs = 1,
    .shape_fn = prod_others_shape,
    .kernel = prod_others_kernel,
    .grad_fn = prod_others_grad};

gr_output gr_prod_others(gr_graph *g, gr_output x, const gr_output *t, int m, const int64_t *axes,
                         int n) {
  gr_output in[1 + GR_PROD_OTHERS_MAX_DIRECTIONS];
  if (m < 0 || m > GR_PROD_OTHERS_MAX_DIRECTIONS)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "prod_others: %d directions (at most %d)", m,
                       GR_PROD_OTHERS_MAX_DIRECTIONS);
  in[0] = x;
  for (int r = 0; r < m; r++) in[1 + r] = t[r];
  gr_attr a = gr_attr_ints("axes", axes ? n : 0, axes);
  return gr_ops_build(g, "prod_others", NULL, in, 1 + m, &a, 1);
}
