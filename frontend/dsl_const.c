/* DSL compile-time values to constant tensors. A literal (a number, a bool
 * or a nested list of them) takes the dtype it is given: the dtype of the
 * tensor it meets, a dtype asked for (const(7, i64)), else f32 (bool for
 * lists of booleans). As for Python scalars under NumPy's NEP 50, the
 * literal adopts that dtype only when its value survives: an integer literal
 * must be in the dtype's range (bool: 0 and 1), a float literal meeting an
 * integer or bool dtype is refused (it would be truncated), and a float must
 * be finite in the dtype. Anything else is an error at the literal, never a
 * silent truncation or wrap-around. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

gr_dtype dsl_dtype_of(const dsl_value *v) {
  if (!v->has_t || !v->t.node || v->t.index < 0) return GR_DTYPE_INVALID;
  return v->t.node->out_dtypes[v->t.index];
}

/* Shape of a (possibly nested) list of numbers/bools; false if ragged or not numeric. */
static bool list_shape(const dsl_value *v, gr_shape *s, int depth, bool *all_bool,
                       const char **why) {
  if (v->kind == V_NUM || v->kind == V_BOOL) {
    if (v->kind == V_NUM) *all_bool = false;
    if (depth == 0) s->rank = 0;
    return true;
  }
  if (v->kind != V_LIST) {
    *why = v->kind == V_TENSOR || v->has_t
               ? "a list of tensors is not a constant (use concat or add_n)"
               : "a constant list holds numbers or bools only";
    return false;
  }
  if (depth >= GR_MAX_RANK) {
    *why = "a constant list is nested deeper than the maximum rank 8";
    return false;
  }
  if (depth == 0) s->rank = 0;
  if (s->rank == depth) {
    s->rank = depth + 1;
    s->dims[depth] = v->list.n;
  } else if (s->dims[depth] != v->list.n) {
    *why = "a constant list is ragged (rows of different lengths)";
    return false;
  }
  if (v->list.n == 0) return true;
  for (int i = 0; i < v->list.n; i++)
    if (!list_shape(&v->list.items[i], s, depth + 1, all_bool, why)) return false;
  return true;
}

/* The shortest text that reads back as the number (0.9, not 0.90000000000000002),
 * with ".0" on an integral float so that it still reads as a float. */
void dsl_format_number(const dsl_value *v, char *buf, size_t cap) {
  if (v->num.is_int) {
    snprintf(buf, cap, "%lld", (long long)v->num.i);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, v->num.v);
    if (strtod(buf, NULL) == v->num.v) break;
  }
  if (!strpbrk(buf, ".en")) strncat(buf, ".0", cap - strlen(buf) - 1);
}

/* The integers a dtype holds exactly; false for float dtypes. */
static bool int_range(gr_dtype dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case GR_BOOL:
      *lo = 0, *hi = 1;
      return true;
    case GR_U8:
      *lo = 0, *hi = 255;
      return true;
    case GR_I32:
      *lo = INT32_MIN, *hi = INT32_MAX;
      return true;
    case GR_I64:
      *lo = INT64_MIN, *hi = INT64_MAX;
      return true;
    default:
      return false;
  }
}

/* An error at pos unless every number of v (a number or a nested list) keeps
 * its value as dtype dt. whose names where dt comes from ("'x'", "loop
 * variable 's'"; NULL: the dtype asked for here); fix (may be NULL) is a
 * rewrite to suggest for a float literal meeting an integer tensor. */
static gr_status check_fits(gr_dsl_program *p, const dsl_value *v, dsl_pos pos, gr_dtype dt,
                            const char *whose, const char *fix) {
  if (v->kind == V_LIST) {
    for (int i = 0; i < v->list.n; i++)
      GR_TRY(check_fits(p, &v->list.items[i], pos, dt, whose, fix));
    return GR_OK;
  }
  if (v->kind != V_NUM) return GR_OK;
  char num[40], of[160] = "";
  dsl_format_number(v, num, sizeof num);
  if (whose) snprintf(of, sizeof of, ", the dtype of %s", whose);
  int64_t lo, hi;
  if (!int_range(dt, &lo, &hi)) {
    /* A literal fits when it rounds to a finite value: 3.4028235e38 is f32's
     * largest value as printed, a little above FLT_MAX
     * before rounding (half an f32 ulp at the top is 2^103). */
    double max = dt == GR_F32 ? FLT_MAX : DBL_MAX;
    if (dt != GR_F32 || fabs(v->num.v) < (double)FLT_MAX + 0x1p103) return GR_OK;
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos,
                     "literal %s is out of range for %s (largest %.9g)%s", num, gr_dtype_name(dt),
                     max, of);
  }
  if (!v->num.is_int)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                     "literal %s is a float but %s is %s (it would be truncated)%s%s", num,
                     whose ? whose : "the dtype asked for", gr_dtype_name(dt),
                     fix ? "; write " : "", fix ? fix : "");
  if (v->num.i >= lo && v->num.i <= hi) return GR_OK;
  return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos,
                   "integer literal %s is out of range for %s (%lld to %lld)%s", num,
                   gr_dtype_name(dt), (long long)lo, (long long)hi, of);
}

static void list_fill(const dsl_value *v, gr_tensor *t, int64_t *k) {
  if (v->kind == V_LIST) {
    for (int i = 0; i < v->list.n; i++) list_fill(&v->list.items[i], t, k);
    return;
  }
  if (t->dtype == GR_I64 && v->kind == V_NUM && v->num.is_int) /* exact beyond 2^53 */
    ((int64_t *)gr_tensor_data(t))[(*k)++] = v->num.i;
  else
    gr_tensor_set_f64(t, (*k)++, v->kind == V_BOOL ? (v->b ? 1 : 0) : v->num.v);
}

/* A constant tensor of a compile-time value (number, bool, nested list). */
static gr_status const_tensor(gr_dsl_program *p, const dsl_value *v, dsl_pos pos, gr_dtype dtype,
                              const char *whose, const char *fix, gr_tensor *t) {
  gr_shape s = {0};
  bool all_bool = true;
  const char *why = NULL;
  if (v->kind == V_NONE)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                     "this has no value (a def without 'return'?)");
  if (v->kind != V_NUM && v->kind != V_BOOL && v->kind != V_LIST)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos, "a %s is not a tensor",
                     dsl_vkind_name(v->kind));
  if (!list_shape(v, &s, 0, &all_bool, &why))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos, "%s", why);
  if (dtype == GR_DTYPE_INVALID) dtype = all_bool ? GR_BOOL : GR_F32;
  GR_TRY(check_fits(p, v, pos, dtype, whose, fix));
  gr_error e;
  if (gr_tensor_alloc(t, dtype, &s, &e) != GR_OK)
    return dsl_error(p->err, e.code, pos, "constant: %s", e.msg);
  int64_t k = 0;
  list_fill(v, t, &k);
  return GR_OK;
}

gr_status dsl_to_tensor_like(gr_dsl_program *p, dsl_value *v, dsl_pos pos, gr_dtype dtype,
                             const char *whose, const char *fix, gr_output *out) {
  if (v->has_t) {
    if (!v->t.node || v->t.index < 0)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                       "'%s' (op %s) has no outputs: use it as a target or a control dependency",
                       v->t.node ? v->t.node->name : "?", v->t.node ? v->t.node->op->name : "?");
    *out = v->t;
    return GR_OK;
  }
  if (v->kind == V_TUPLE)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                     "a tuple of %d values where one tensor is expected (unpack it: a, b = ...)",
                     v->list.n);
  gr_tensor t;
  GR_TRY(const_tensor(p, v, pos, dtype, whose, fix, &t));
  dsl_set_loc(p, pos);
  *out = gr_const(p->g, &t);
  gr_tensor_release(&t);
  GR_TRY(dsl_check_graph(p, pos));
  v->has_t = true;
  v->t = *out;
  return GR_OK;
}

gr_status dsl_to_tensor(gr_dsl_program *p, dsl_value *v, dsl_pos pos, gr_dtype hint,
                        gr_output *out) {
  return dsl_to_tensor_like(p, v, pos, hint, NULL, NULL, out);
}
