/* Argument helpers of the built-in calls (dsl_internal.h, dsl_bargs). */
#include <string.h>

#include "dsl_internal.h"

int dsl_bargs_kw(const dsl_bargs *a, const char *name) {
  for (int i = a->npos; i < a->n; i++)
    if (strcmp(a->e->call.args[i].name, name) == 0) return i;
  return -1;
}

gr_status dsl_bargs_only_keywords(const dsl_bargs *a, const char *const *allowed) {
  for (int i = a->npos; i < a->n; i++) {
    const char *k = a->e->call.args[i].name;
    int j = 0;
    while (allowed[j] && strcmp(k, allowed[j]) != 0) j++;
    if (!allowed[j])
      return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                       "unknown keyword argument '%s' for %s", k, a->fn);
  }
  return GR_OK;
}

gr_status dsl_bargs_int(const dsl_bargs *a, int i, const char *what, int64_t lo, int64_t hi,
                        int64_t *out) {
  const dsl_value *v = &a->v[i];
  if (v->kind != V_NUM || !v->num.is_int || v->num.i < lo || v->num.i > hi)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                     "%s: %s must be an integer from %lld to %lld", a->fn, what, (long long)lo,
                     (long long)hi);
  *out = v->num.i;
  return GR_OK;
}

gr_status dsl_bargs_string(const dsl_bargs *a, int i, const char *what, const char **out) {
  if (a->v[i].kind != V_STR)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                     "%s: %s must be a string, got a %s", a->fn, what,
                     dsl_vkind_name(a->v[i].kind));
  *out = a->v[i].str;
  return GR_OK;
}

gr_status dsl_bargs_choice(const dsl_bargs *a, const char *kw, const char *const *choices,
                           const char *want, int *index) {
  int i = dsl_bargs_kw(a, kw);
  if (i < 0) return GR_OK;
  const char *s = "";
  GR_TRY(dsl_bargs_string(a, i, kw, &s));
  for (int k = 0; choices[k]; k++)
    if (strcmp(s, choices[k]) == 0) {
      *index = k;
      return GR_OK;
    }
  return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                   "%s: %s \"%s\": want %s", a->fn, kw, s, want);
}

gr_status dsl_bargs_bool(const dsl_bargs *a, int i, const char *what, bool *out) {
  if (a->v[i].kind != V_BOOL)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                     "%s: %s must be true or false", a->fn, what);
  *out = a->v[i].b;
  return GR_OK;
}

void dsl_tensor_value(dsl_value *out, gr_output o) {
  memset(out, 0, sizeof *out);
  out->kind = V_TENSOR;
  out->has_t = true;
  out->t = o;
}

gr_status dsl_tensors_value(gr_dsl_program *p, const gr_output *t, int n, dsl_value *out) {
  if (n != 1) return dsl_tuple_value(p, t, n, out);
  dsl_tensor_value(out, t[0]);
  return GR_OK;
}

gr_status dsl_tuple_value(gr_dsl_program *p, const gr_output *t, int n, dsl_value *out) {
  memset(out, 0, sizeof *out);
  out->kind = V_TUPLE;
  out->list.n = n;
  out->list.leaves = n;
  out->list.items = dsl_alloc(&p->temp, sizeof(dsl_value) * (size_t)(n + 1));
  if (!out->list.items) return gr_error_set_oom(p->err);
  for (int k = 0; k < n; k++) dsl_tensor_value(&out->list.items[k], t[k]);
  return GR_OK;
}

void dsl_int_value(dsl_value *out, int64_t i) {
  memset(out, 0, sizeof *out);
  out->kind = V_NUM;
  out->num = (dsl_num){.v = (double)i, .i = i, .is_int = true};
}

dsl_bargs dsl_bargs_make(gr_dsl_program *p, const char *fn, const dsl_expr *e, dsl_value *v,
                         int nargs) {
  dsl_bargs a = {.p = p, .e = e, .fn = fn, .v = v, .n = nargs};
  while (a.npos < nargs && !e->call.args[a.npos].name) a.npos++;
  return a;
}
