/* DSL calls: user defs, built-in functions (variable, gradients, minimize,
 * optimizers, ...) and every registered op, by name, with positional and
 * keyword arguments typed by the op's attr schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

/* Filled in by ops/autodiff.c and ops/optimizers.c; weak so the front end
 * links (and reports a clear error) while they are not there. */
#pragma weak gr_gradients
#pragma weak gr_minimize

#define MAX_CALL_DEPTH 64
#define MAX_ARGS       256

typedef struct call_args {
  const dsl_expr *call;
  dsl_value *v;
  int n;
} call_args;

/* ---- attrs from compile-time values ------------------------------------------------ */

static bool as_int(const dsl_value *v, int64_t *out) {
  if (v->kind != V_NUM || !v->num.is_int) return false;
  *out = v->num.i;
  return true;
}

/* Where item i of an argument is written: its own position when the
 * argument is a list literal, else the argument's. */
static dsl_pos item_pos(const dsl_arg *arg, int i) {
  const dsl_expr *x = arg->value;
  return x->kind == E_LIST && i < x->list.n ? x->list.items[i]->pos : arg->pos;
}

/* A `path` attr (read_idx, read_npy, save, ...): a relative path is relative
 * to the .gr file the string is written in, as for `import`. */
static gr_status path_attr(gr_dsl_program *p, const dsl_value *v, dsl_pos pos, const char **out) {
  char *joined = dsl_path_join(v->str_src->name, v->str);
  if (!joined) return dsl_error(p->err, GR_ERR_RESOURCE_EXHAUSTED, pos, "out of memory");
  *out = dsl_strndup(&p->temp, joined, strlen(joined));
  free(joined);
  return *out ? GR_OK : dsl_error(p->err, GR_ERR_RESOURCE_EXHAUSTED, pos, "out of memory");
}

/* Converts a value to an attr of type `type`; lists go into the temp arena. */
static gr_status to_attr(gr_dsl_program *p, const dsl_value *v, const gr_attr_spec *spec,
                         const char *op, const dsl_arg *arg, gr_attr *out) {
  dsl_pos pos = arg->pos;
  out->name = spec->name;
  out->value.type = spec->type;
  const char *want = gr_attr_type_name(spec->type);
  const char *got = dsl_vkind_name(v->kind);
  if (v->kind == V_TENSOR)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                     "attr '%s' of %s must be a compile-time %s, got a tensor", spec->name, op,
                     want);
  switch (spec->type) {
    case GR_ATTR_INT:
      if (!as_int(v, &out->value.i)) goto bad;
      return GR_OK;
    case GR_ATTR_FLOAT:
      if (v->kind != V_NUM) goto bad;
      out->value.f = v->num.v;
      return GR_OK;
    case GR_ATTR_BOOL:
      if (v->kind != V_BOOL) goto bad;
      out->value.b = v->b;
      return GR_OK;
    case GR_ATTR_STRING:
      if (v->kind != V_STR) goto bad;
      out->value.s = v->str;
      if (strcmp(spec->name, "path") == 0 && v->str_src) /* a file, relative to its .gr file */
        return path_attr(p, v, pos, &out->value.s);
      return GR_OK;
    case GR_ATTR_DTYPE:
      if (v->kind != V_DTYPE) goto bad;
      out->value.dtype = v->dtype;
      return GR_OK;
    case GR_ATTR_SHAPE: {
      gr_shape s = {0};
      if (v->kind != V_LIST) goto bad;
      if (v->list.n > GR_MAX_RANK)
        return dsl_error(p->err, GR_ERR_SHAPE, pos, "attr '%s' of %s: rank %d is more than %d",
                         spec->name, op, v->list.n, GR_MAX_RANK);
      s.rank = v->list.n;
      for (int i = 0; i < v->list.n; i++) {
        const dsl_value *d = &v->list.items[i];
        dsl_pos at = item_pos(arg, i);
        if (d->kind == V_UNKNOWN_DIM)
          s.dims[i] = -1;
        else if (!as_int(d, &s.dims[i]))
          return dsl_error(p->err, GR_ERR_SHAPE, at,
                           "attr '%s' of %s: dim %d must be an integer >= 0 or '?', got a %s%s",
                           spec->name, op, i, dsl_vkind_name(d->kind),
                           d->kind == V_NUM ? " that is not an integer" : "");
        else if (s.dims[i] < -1)
          return dsl_error(p->err, GR_ERR_SHAPE, at,
                           "attr '%s' of %s: dim %d is negative (%lld); a dim is an integer >= 0, "
                           "or '?' when unknown",
                           spec->name, op, i, (long long)s.dims[i]);
      }
      out->value.shape = s;
      return GR_OK;
    }
    case GR_ATTR_INTS:
    case GR_ATTR_FLOATS: {
      int n = v->kind == V_LIST ? v->list.n : 1;
      const dsl_value *items = v->kind == V_LIST ? v->list.items : v;
      if (v->kind != V_LIST && v->kind != V_NUM) goto bad;
      bool ints = spec->type == GR_ATTR_INTS;
      void *arr = dsl_alloc(&p->temp, 8 * (size_t)(n + 1));
      if (!arr) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      for (int i = 0; i < n; i++) {
        if (ints ? !as_int(&items[i], &((int64_t *)arr)[i]) : items[i].kind != V_NUM)
          return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                           "attr '%s' of %s must be a %s: item %d is a %s%s", spec->name, op, want,
                           i, dsl_vkind_name(items[i].kind),
                           items[i].kind == V_NUM ? " that is not an integer" : "");
        if (!ints) ((double *)arr)[i] = items[i].num.v;
      }
      if (ints)
        out->value.ints.n = n, out->value.ints.v = arr;
      else
        out->value.floats.n = n, out->value.floats.v = arr;
      return GR_OK;
    }
    case GR_ATTR_TENSOR:
      return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, pos,
                       "tensor attr '%s' of %s: use const(...) in the DSL", spec->name, op);
    default:
      break;
  }
bad:
  return dsl_error(
      p->err, GR_ERR_INVALID_ARGUMENT, pos, "attr '%s' of %s must be %s, got %s%s", spec->name, op,
      want, v->kind == V_NUM ? (v->num.is_int ? "an integer" : "a non-integer number") : "a ",
      v->kind == V_NUM ? "" : got);
}

/* Could value v be converted to an attr of this spec? */
static bool accepts(const gr_attr_spec *spec, const dsl_value *v) {
  switch (spec->type) {
    case GR_ATTR_INT:
      return v->kind == V_NUM && v->num.is_int;
    case GR_ATTR_FLOAT:
      return v->kind == V_NUM;
    case GR_ATTR_BOOL:
      return v->kind == V_BOOL;
    case GR_ATTR_STRING:
      return v->kind == V_STR;
    case GR_ATTR_DTYPE:
      return v->kind == V_DTYPE;
    case GR_ATTR_SHAPE:
      return v->kind == V_LIST;
    case GR_ATTR_INTS:
      return v->kind == V_LIST || (v->kind == V_NUM && v->num.is_int);
    case GR_ATTR_FLOATS:
      return v->kind == V_LIST || v->kind == V_NUM;
    default:
      return false;
  }
}

/* ---- generic op calls ----------------------------------------------------------------- */

static const gr_attr_spec *find_spec(const gr_op_def *op, const char *name) {
  for (int i = 0; i < op->num_attrs; i++)
    if (strcmp(op->attrs[i].name, name) == 0) return &op->attrs[i];
  return NULL;
}

static gr_status call_op(gr_dsl_program *p, const gr_op_def *op, const dsl_expr *e,
                         const char *name, call_args *a, dsl_value *out) {
  gr_output inputs[MAX_ARGS];
  gr_attr attrs[MAX_ARGS];
  int ni = 0, na = 0, attr_pos = 0;
  bool variadic = op->max_inputs < 0;
  /* literal inputs take the dtype of the first tensor input, preferring one
   * that is not bool (select(mask, x, 0) gives 0 the dtype of x) */
  gr_dtype hint = GR_DTYPE_INVALID;
  char whose[160] = "";
  for (int i = 0; i < a->n; i++) {
    gr_dtype dt = e->call.args[i].name ? GR_DTYPE_INVALID : dsl_dtype_of(&a->v[i]);
    if (dt == GR_DTYPE_INVALID || (hint != GR_DTYPE_INVALID && dt == GR_BOOL)) continue;
    const dsl_expr *x = e->call.args[i].value;
    snprintf(whose, sizeof whose, "'%s' (input %d of %s)",
             x->kind == E_IDENT ? x->str : a->v[i].t.node->name, i, op->name);
    if ((hint = dt) != GR_BOOL) break;
  }
  for (int i = 0; i < a->n; i++) {
    const dsl_arg *arg = &e->call.args[i];
    dsl_value *v = &a->v[i];
    if (arg->name) {
      const gr_attr_spec *spec = find_spec(op, arg->name);
      if (!spec) {
        char valid[400];
        size_t n = 0;
        valid[0] = '\0';
        for (int k = 0; k < op->num_attrs && n < sizeof valid; k++)
          n += (size_t)snprintf(valid + n, sizeof valid - n, "%s%s", k ? ", " : "",
                                op->attrs[k].name);
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                         "unknown attr '%s' for op %s (attrs: %s)", arg->name, op->name,
                         op->num_attrs ? valid : "none");
      }
      for (int k = 0; k < na; k++)
        if (attrs[k].name == spec->name)
          return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                           "attr '%s' of %s given twice (positionally and by keyword)", arg->name,
                           op->name);
      GR_TRY(to_attr(p, v, spec, op->name, arg, &attrs[na++]));
      continue;
    }
    bool is_input = variadic || ni < op->min_inputs || (ni < op->max_inputs && v->has_t);
    if (is_input) {
      if (variadic && v->kind == V_LIST && !v->has_t) { /* concat([a, b], axis=1) */
        bool all_t = v->list.n > 0;
        for (int k = 0; k < v->list.n; k++) all_t = all_t && v->list.items[k].has_t;
        if (all_t) {
          for (int k = 0; k < v->list.n && ni < MAX_ARGS; k++) inputs[ni++] = v->list.items[k].t;
          continue;
        }
      }
      GR_TRY(dsl_to_tensor_like(p, v, arg->pos, hint, whose[0] ? whose : NULL, NULL, &inputs[ni]));
      ni++;
      continue;
    }
    /* a positional attr: the first attr not yet given whose type accepts the value */
    int k = 0;
    for (; k < op->num_attrs; k++) {
      bool taken = false;
      for (int j = 0; j < na; j++) taken = taken || attrs[j].name == op->attrs[k].name;
      if (!taken && accepts(&op->attrs[k], v)) break;
    }
    if (k == op->num_attrs) {
      char rest[400];
      size_t n = 0;
      rest[0] = '\0';
      for (int j = 0; j < op->num_attrs && n < sizeof rest; j++) {
        bool taken = false;
        for (int q = 0; q < na; q++) taken = taken || attrs[q].name == op->attrs[j].name;
        if (!taken)
          n += (size_t)snprintf(rest + n, sizeof rest - n, "%s%s: %s", n ? ", " : "",
                                op->attrs[j].name, gr_attr_type_name(op->attrs[j].type));
      }
      if (v->has_t || v->kind == V_TENSOR || n == 0)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                         "too many arguments for op %s: it takes %d input%s and %d attr%s",
                         op->name, op->max_inputs, op->max_inputs == 1 ? "" : "s", op->num_attrs,
                         op->num_attrs == 1 ? "" : "s");
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                       "op %s has no attr left that takes a %s (%s%s)", op->name,
                       dsl_vkind_name(v->kind), n ? "remaining attrs: " : "all attrs given", rest);
    }
    GR_TRY(to_attr(p, v, &op->attrs[k], op->name, arg, &attrs[na++]));
    attr_pos++;
  }
  for (int s = 0; s < op->num_attrs; s++)
    if (op->attrs[s].required) {
      bool given = false;
      for (int k = 0; k < na; k++) given = given || attrs[k].name == op->attrs[s].name;
      if (!given)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos,
                         "op %s needs attr '%s' (%s): pass it as %s=...", op->name,
                         op->attrs[s].name, gr_attr_type_name(op->attrs[s].type),
                         op->attrs[s].name);
    }
  if (ni < op->min_inputs || (!variadic && ni > op->max_inputs))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "op %s takes %d input%s, got %d",
                     op->name, op->min_inputs, op->min_inputs == 1 ? "" : "s", ni);
  dsl_set_loc(p, e->pos);
  gr_output o = gr_op(p->g, op->name, name, inputs, ni, attrs, na); /* batch_norm: its updates */
  GR_TRY(dsl_check_graph(p, e->pos));
  dsl_tensor_value(out, o);
  out->multi = o.node && o.node->num_outputs > 1; /* a, b = split(x, 2) */
  return GR_OK;
}

/* A name scope for a def call not used by an earlier call: base, base_1, ... */
static gr_status unique_scope(gr_dsl_program *p, const char *base, char *out, size_t cap,
                              dsl_pos pos) {
  const char *cur = gr_graph_name_scope(p->g);
  for (int k = 0;; k++) {
    char full[600];
    size_t n =
        k ? (size_t)snprintf(out, cap, "%s_%d", base, k) : (size_t)snprintf(out, cap, "%s", base);
    /* a cut name would be taken for every k: refuse it */
    if (n >= cap ||
        (size_t)snprintf(full, sizeof full, "%s%s%s", cur, *cur ? "/" : "", out) >= sizeof full)
      return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos,
                       "the name scope of this call, '%s/%s', is longer than %zu characters "
                       "(calls nested too deep?)",
                       cur, base, sizeof full - 1);
    if (dsl_frame_find_local(&p->scopes_used, full)) continue;
    char *key = dsl_strndup(&p->persist, full, strlen(full));
    if (!key || !dsl_frame_insert(&p->scopes_used, key))
      return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return GR_OK;
  }
}

/* ---- user defs ------------------------------------------------------------------------- */

static gr_status call_def(gr_dsl_program *p, const dsl_stmt *def, const dsl_expr *e,
                          const char *name, call_args *a, dsl_value *out) {
  if (p->call_depth >= MAX_CALL_DEPTH)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, e->pos,
                     "calls nested deeper than %d (a def calling itself?)", MAX_CALL_DEPTH);
  dsl_value *params = dsl_alloc(&p->temp, sizeof(dsl_value) * (size_t)(def->nnames + 1));
  bool *given = dsl_alloc(&p->temp, (size_t)def->nnames + 1);
  if (!params || !given) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  int pos_i = 0;
  for (int i = 0; i < a->n; i++) {
    const dsl_arg *arg = &e->call.args[i];
    int k = -1;
    if (arg->name) {
      for (int j = 0; j < def->nnames; j++)
        if (strcmp(def->names[j], arg->name) == 0) k = j;
      if (k < 0)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos, "%s has no parameter '%s'",
                         def->str, arg->name);
    } else {
      k = pos_i++;
      if (k >= def->nnames)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                         "too many arguments: %s takes %d", def->str, def->nnames);
    }
    if (given[k])
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos, "parameter '%s' given twice",
                       def->names[k]);
    given[k] = true;
    params[k] = a->v[i];
  }
  for (int j = 0; j < def->nnames; j++)
    if (!given[j])
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "%s: missing argument '%s'",
                       def->str, def->names[j]);
  dsl_frame frame;
  if (!dsl_frame_init(&frame, 16, &p->globals, &p->temp))
    return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int j = 0; j < def->nnames; j++) {
    dsl_binding *b = dsl_frame_insert(&frame, def->names[j]);
    if (!b) {
      dsl_frame_free(&frame);
      return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    }
    b->v = params[j];
    b->pos = def->name_pos[j];
  }
  char scope[256];
  if (unique_scope(p, name ? name : def->str, scope, sizeof scope, e->pos) != GR_OK) {
    dsl_frame_free(&frame);
    return p->err->code;
  }
  dsl_set_loc(p, e->pos);
  if (gr_graph_push_name_scope(p->g, scope) != GR_OK) {
    dsl_frame_free(&frame);
    return dsl_check_graph(p, e->pos);
  }
  dsl_frame *saved = p->frame;
  dsl_value *saved_ret = p->ret;
  int saved_block = p->block_depth;
  memset(out, 0, sizeof *out);
  p->frame = &frame;
  p->ret = out;
  p->returned = false;
  p->block_depth = 0;
  size_t saved_path;
  dsl_keras_saved keras;
  gr_status st = dsl_keras_enter_def(p, def->str, name, e->pos, &keras);
  dsl_layers_enter_def(p, def->str, e->pos, &saved_path);
  p->call_depth++;
  if (st == GR_OK) st = dsl_lower_block(p, &def->block);
  p->call_depth--;
  dsl_layers_leave_def(p, saved_path);
  dsl_keras_leave(p, &keras);
  p->frame = saved;
  p->ret = saved_ret;
  p->returned = false;
  p->block_depth = saved_block;
  gr_graph_pop_name_scope(p->g);
  dsl_frame_free(&frame);
  if (st != GR_OK) {
    char note[160];
    snprintf(note, sizeof note, "in this call of '%s'", def->str);
    dsl_error_note(p->err, e->pos, note);
  }
  return st;
}

/* ---- built-ins ------------------------------------------------------------------------- */

static gr_status want_tensor(gr_dsl_program *p, call_args *a, int i, gr_dtype hint, gr_output *o) {
  return dsl_to_tensor(p, &a->v[i], a->call->call.args[i].pos, hint, o);
}

static gr_status nargs(gr_dsl_program *p, call_args *a, const char *fn, int lo, int hi) {
  if (a->n < lo || a->n > hi) {
    if (lo == hi)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->pos,
                       "%s takes %d argument%s, got %d", fn, lo, lo == 1 ? "" : "s", a->n);
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->pos,
                     "%s takes %d to %d arguments, got %d", fn, lo, hi, a->n);
  }
  return GR_OK;
}

/* Index of keyword `kw` or positional index `pos_i`, -1 when absent. */
static int arg_index(call_args *a, const char *kw, int pos_i) {
  for (int i = 0; i < a->n; i++)
    if (a->call->call.args[i].name && strcmp(a->call->call.args[i].name, kw) == 0) return i;
  int k = 0;
  for (int i = 0; i < a->n; i++)
    if (!a->call->call.args[i].name && k++ == pos_i) return i;
  return -1;
}

static gr_status check_kw(gr_dsl_program *p, call_args *a, const char *fn,
                          const char *const *allowed) {
  int npos = 0;
  for (int i = 0; i < a->n; i++) npos += !a->call->call.args[i].name;
  for (int i = 0; i < a->n; i++) {
    const char *kw = a->call->call.args[i].name;
    if (!kw) continue;
    int k = 0;
    while (allowed[k] && strcmp(kw, allowed[k]) != 0) k++;
    if (allowed[k] && k < npos)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[i].pos,
                       "%s: '%s' given twice (positionally and by keyword)", fn, kw);
    if (!allowed[k])
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[i].pos,
                       "unknown keyword argument '%s' for %s", kw, fn);
  }
  return GR_OK;
}

static gr_status num_arg(gr_dsl_program *p, call_args *a, const char *fn, const char *kw, int pos_i,
                         double dflt, double *out) {
  int i = arg_index(a, kw, pos_i);
  *out = dflt;
  if (i < 0) return GR_OK;
  if (a->v[i].kind != V_NUM || a->v[i].has_t)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[i].pos,
                     "%s: '%s' must be a number, got a %s", fn, kw, dsl_vkind_name(a->v[i].kind));
  *out = a->v[i].num.v;
  return GR_OK;
}

static gr_status optimizer(gr_dsl_program *p, call_args *a, const char *fn, dsl_value *out) {
  memset(out, 0, sizeof *out);
  out->kind = V_OPTIMIZER;
  gr_optimizer *o = dsl_alloc(&p->temp, sizeof *o);
  if (!o) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  out->opt = o;
  if (strcmp(fn, "sgd") == 0) {
    static const char *const kw[] = {"learning_rate", NULL};
    GR_TRY(check_kw(p, a, fn, kw));
    GR_TRY(nargs(p, a, fn, 1, 1));
    o->kind = GR_OPT_SGD;
  } else if (strcmp(fn, "momentum") == 0) {
    static const char *const kw[] = {"learning_rate", "momentum", "nesterov", NULL};
    GR_TRY(check_kw(p, a, fn, kw));
    GR_TRY(nargs(p, a, fn, 1, 3));
    o->kind = GR_OPT_MOMENTUM;
    GR_TRY(num_arg(p, a, fn, "momentum", 1, 0.9, &o->momentum));
    int i = arg_index(a, "nesterov", 2);
    if (i >= 0) {
      if (a->v[i].kind != V_BOOL)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[i].pos,
                         "momentum: 'nesterov' must be true or false");
      o->nesterov = a->v[i].b;
    }
  } else {
    static const char *const kw[] = {"learning_rate", "beta1", "beta2", "epsilon", NULL};
    GR_TRY(check_kw(p, a, fn, kw));
    GR_TRY(nargs(p, a, fn, 0, 4));
    o->kind = GR_OPT_ADAM;
    GR_TRY(num_arg(p, a, fn, "beta1", 1, 0.9, &o->beta1));
    GR_TRY(num_arg(p, a, fn, "beta2", 2, 0.999, &o->beta2));
    GR_TRY(num_arg(p, a, fn, "epsilon", 3, 1e-8, &o->epsilon));
  }
  GR_TRY(num_arg(p, a, fn, "learning_rate", 0, 0.001, &o->learning_rate));
  if (!(o->learning_rate > 0))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->pos, "%s: learning_rate must be > 0",
                     fn);
  return GR_OK;
}

static gr_status unique_var_name(gr_dsl_program *p, char *buf, size_t cap) {
  const char *scope = gr_graph_name_scope(p->g);
  for (;;) {
    int k = p->var_counter++;
    char full[600];
    snprintf(buf, cap, k ? "variable_%d" : "variable", k);
    snprintf(full, sizeof full, "%s%s%s", scope, *scope ? "/" : "", buf);
    if (!gr_graph_find_node(p->g, full)) return GR_OK;
  }
}

/* The end of a built-in that makes a tensor o: the graph's error if any,
 * else o, renamed to the binding name (name NULL: keep its name). */
static gr_status tensor_result(gr_dsl_program *p, dsl_pos pos, const char *name, gr_output o,
                               dsl_value *out) {
  GR_TRY(dsl_check_graph(p, pos));
  if (name && o.node && o.node->id >= 0) {
    const char *base = strrchr(o.node->name, '/');
    base = base ? base + 1 : o.node->name;
    if (strcmp(base, name) != 0) {
      dsl_set_loc(p, pos);
      o = gr_name(p->g, o, name);
      GR_TRY(dsl_check_graph(p, pos));
    }
  }
  dsl_tensor_value(out, o);
  return GR_OK;
}

gr_status dsl_tensor_result(gr_dsl_program *p, dsl_pos pos, const char *name, gr_output o,
                            dsl_value *out) {
  return tensor_result(p, pos, name, o, out);
}

gr_status dsl_call_as_op(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *v,
                         int nargs, dsl_value *out) {
  call_args a = {e, v, nargs};
  return call_op(p, gr_ops_find(e->call.name), e, name, &a, out);
}

/* The handlers of the built-ins table below (dsl_builtin_fn). */

static gr_status bi_optimizer(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                              const char *name, dsl_value *v, int n, dsl_value *out) {
  call_args a = {e, v, n};
  return optimizer(p, &a, fn, out);
}

static gr_status bi_variable(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                             dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  static const char *const kw[] = {"initial_value", NULL};
  GR_TRY(check_kw(p, a, fn, kw));
  GR_TRY(nargs(p, a, fn, 1, 1));
  gr_output x;
  GR_TRY(want_tensor(p, a, 0, GR_F32, &x));
  char buf[64];
  if (!name) GR_TRY(unique_var_name(p, buf, sizeof buf));
  dsl_set_loc(p, e->pos);
  /* named by gr_variable itself: no rename */
  return tensor_result(p, e->pos, NULL, gr_variable(p->g, name ? name : buf, x), out);
}

static gr_status bi_assign(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                           dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  gr_output x, y;
  GR_TRY(nargs(p, a, fn, 2, 2));
  GR_TRY(want_tensor(p, a, 0, GR_DTYPE_INVALID, &x));
  if (!x.node || !(x.node->op->flags & GR_OP_VARIABLE))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[0].pos,
                     "%s: the first argument must be a variable", fn);
  char whose[160];
  snprintf(whose, sizeof whose, "variable '%s'", x.node->name);
  GR_TRY(dsl_to_tensor_like(p, &a->v[1], a->call->call.args[1].pos, x.node->out_dtypes[0], whose,
                            NULL, &y));
  dsl_set_loc(p, e->pos);
  gr_output o = fn[6] == '\0'                   ? gr_assign(p->g, x, y)
                : strcmp(fn, "assign_add") == 0 ? gr_assign_add(p->g, x, y)
                                                : gr_assign_sub(p->g, x, y);
  return tensor_result(p, e->pos, name, o, out);
}

/* a read that runs where it is written */
static gr_status bi_read_value(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                               const char *name, dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  gr_output x;
  GR_TRY(nargs(p, a, fn, 1, 1));
  GR_TRY(want_tensor(p, a, 0, GR_DTYPE_INVALID, &x));
  if (!x.node || !gr_ops_is_variable_read(x.node))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[0].pos,
                     "read_value: the argument must be a variable");
  dsl_set_loc(p, e->pos);
  return tensor_result(p, e->pos, name, gr_read_value(p->g, x), out);
}

static gr_status bi_global_step(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                const char *name, dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  GR_TRY(nargs(p, a, fn, 0, 0));
  dsl_set_loc(p, e->pos);
  dsl_tensor_value(out, gr_global_step(p->g));
  return dsl_check_graph(p, e->pos);
}

static gr_status bi_group(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                          dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  gr_output deps[MAX_ARGS];
  for (int i = 0; i < a->n; i++) GR_TRY(want_tensor(p, a, i, GR_DTYPE_INVALID, &deps[i]));
  dsl_set_loc(p, e->pos);
  dsl_tensor_value(out, gr_group(p->g, name, deps, a->n));
  return dsl_check_graph(p, e->pos);
}

static gr_status bi_const(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                          dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  static const char *const kw[] = {"value", "dtype", NULL};
  GR_TRY(check_kw(p, a, fn, kw));
  GR_TRY(nargs(p, a, fn, 1, 2));
  int vi = arg_index(a, "value", 0), di = arg_index(a, "dtype", 1);
  gr_dtype dt = GR_DTYPE_INVALID; /* f32, or bool for booleans */
  if (di >= 0) {
    if (a->v[di].kind != V_DTYPE)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[di].pos,
                       "const: dtype must be a dtype (f32, i64, ...), got a %s",
                       dsl_vkind_name(a->v[di].kind));
    dt = a->v[di].dtype;
  }
  if (vi < 0) return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "const: missing value");
  if (a->v[vi].has_t)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[vi].pos,
                     "const: the value must be a literal, not a tensor");
  gr_output o;
  GR_TRY(want_tensor(p, a, vi, dt, &o));
  return tensor_result(p, e->pos, name, o, out);
}

static gr_status bi_fill(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                         dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  static const gr_attr_spec specs[] = {{.name = "shape", .type = GR_ATTR_SHAPE},
                                       {.name = "dtype", .type = GR_ATTR_DTYPE}};
  static const char *const kw[] = {"shape", "dtype", NULL};
  GR_TRY(check_kw(p, a, fn, kw));
  GR_TRY(nargs(p, a, fn, 1, 2));
  gr_attr sh, dt = gr_attr_dtype("dtype", GR_F32);
  int si = arg_index(a, "shape", 0), di = arg_index(a, "dtype", 1);
  if (si < 0) return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "%s: missing shape", fn);
  GR_TRY(to_attr(p, &a->v[si], &specs[0], fn, &a->call->call.args[si], &sh));
  if (di >= 0) GR_TRY(to_attr(p, &a->v[di], &specs[1], fn, &a->call->call.args[di], &dt));
  for (int i = 0; i < sh.value.shape.rank; i++) /* -1 ('?' elsewhere) cannot be filled */
    if (sh.value.shape.dims[i] < 0)
      return dsl_error(p->err, GR_ERR_SHAPE, item_pos(&a->call->call.args[si], i),
                       "%s: dim %d is %s; %s needs a known shape (dims >= 0)", fn, i,
                       a->v[si].list.items[i].kind == V_UNKNOWN_DIM ? "'?'" : "negative (-1)", fn);
  dsl_set_loc(p, e->pos);
  gr_output o = fn[0] == 'z' ? gr_zeros(p->g, dt.value.dtype, sh.value.shape)
                             : gr_ones(p->g, dt.value.dtype, sh.value.shape);
  return tensor_result(p, e->pos, name, o, out);
}

static gr_status bi_dim(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                        dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  gr_output x;
  GR_TRY(nargs(p, a, fn, 2, 2));
  GR_TRY(want_tensor(p, a, 0, GR_DTYPE_INVALID, &x));
  int64_t axis;
  if (!as_int(&a->v[1], &axis))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[1].pos,
                     "dim: the axis must be an integer");
  const gr_shape *s = &x.node->out_shapes[x.index < 0 ? 0 : x.index];
  int ax;
  if (x.index < 0 || s->rank < 0 || !gr_shape_normalize_axis(s->rank, axis, &ax))
    return dsl_error(p->err, GR_ERR_SHAPE, a->call->call.args[1].pos,
                     "dim: axis %lld is out of range for rank %d", (long long)axis, s->rank);
  if (s->dims[ax] < 0)
    return dsl_error(p->err, GR_ERR_SHAPE, e->pos, "dim: dim %d of '%s' is unknown ('?')", ax,
                     x.node->name);
  dsl_int_value(out, s->dims[ax]);
  return GR_OK;
}

static gr_status bi_gradients(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                              const char *name, dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  dsl_pos pos = e->pos;
  GR_TRY(nargs(p, a, fn, 2, 2));
  if (!gr_gradients)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, pos,
                     "gradients are not available in this build");
  gr_output ys[MAX_ARGS], xs[MAX_ARGS], dxs[MAX_ARGS];
  int ny = 0, nx = 0;
  dsl_value *yv = &a->v[0], *xv = &a->v[1];
  bool single = xv->has_t;
  for (int k = 0; k < (yv->has_t ? 1 : (yv->kind == V_LIST ? yv->list.n : 1)) && k < MAX_ARGS; k++)
    GR_TRY(dsl_to_tensor(p, yv->has_t || yv->kind != V_LIST ? yv : &yv->list.items[k],
                         a->call->call.args[0].pos, GR_DTYPE_INVALID, &ys[ny++]));
  for (int k = 0; k < (single ? 1 : (xv->kind == V_LIST ? xv->list.n : 1)) && k < MAX_ARGS; k++)
    GR_TRY(dsl_to_tensor(p, single || xv->kind != V_LIST ? xv : &xv->list.items[k],
                         a->call->call.args[1].pos, GR_DTYPE_INVALID, &xs[nx++]));
  dsl_set_loc(p, pos);
  if (gr_gradients(p->g, ys, ny, xs, nx, NULL, false, dxs) != GR_OK || gr_graph_error(p->g))
    return dsl_check_graph(p, pos);
  if (single) {
    dsl_tensor_value(out, dxs[0]);
    return GR_OK;
  }
  return dsl_tuple_value(p, dxs, nx, out);
}

static gr_status bi_minimize(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                             dsl_value *v, int n, dsl_value *out) {
  call_args ca = {e, v, n}, *a = &ca;
  dsl_pos pos = e->pos;
  static const char *const kw[] = {"loss", "optimizer", "var_list", NULL};
  GR_TRY(check_kw(p, a, fn, kw));
  GR_TRY(nargs(p, a, fn, 2, 3));
  int li = arg_index(a, "loss", 0), oi = arg_index(a, "optimizer", 1),
      vi = arg_index(a, "var_list", 2);
  if (li < 0 || oi < 0)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos, "minimize(loss, optimizer)");
  if (a->v[oi].kind != V_OPTIMIZER)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[oi].pos,
                     "minimize: the optimizer must be sgd(...), momentum(...) or adam(...), "
                     "got a %s",
                     dsl_vkind_name(a->v[oi].kind));
  if (!gr_minimize)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, pos, "minimize is not available in this build");
  gr_output x;
  GR_TRY(want_tensor(p, a, li, GR_DTYPE_INVALID, &x));
  gr_output vars[MAX_ARGS];
  int nv = 0;
  if (vi >= 0) {
    dsl_value *lv = &a->v[vi];
    if (lv->kind != V_LIST || lv->has_t)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->call->call.args[vi].pos,
                       "minimize: var_list must be a list of variables");
    for (int k = 0; k < lv->list.n && nv < MAX_ARGS; k++)
      GR_TRY(dsl_to_tensor(p, &lv->list.items[k], a->call->call.args[vi].pos, GR_DTYPE_INVALID,
                           &vars[nv++]));
  }
  dsl_set_loc(p, pos);
  return tensor_result(p, pos, name, gr_minimize(p->g, a->v[oi].opt, x, nv ? vars : NULL, nv), out);
}

/* The built-in functions: one entry each, which dsl_call dispatches on and
 * "did you mean" hints search (in this order), and which gr_dsl_print_builtins
 * prints as the table of docs/dsl.md (an entry without usage shares the row
 * above). */
typedef struct dsl_builtin {
  const char *name;
  dsl_builtin_fn handler;
  const char *usage; /* the call as the docs show it, in backquotes */
  const char *help;
  bool op_named; /* named like the op it builds (the queues): it comes first */
} dsl_builtin;

static const dsl_builtin builtins[] = {
    {"variable", bi_variable, "`variable(init)`",
     "a variable named by its binding (`w = variable(glorot_uniform([784, 256]))`), initialised "
     "from `init`",
     false},
    {"assign", bi_assign, "`assign(v, x)`, `assign_add(v, x)`, `assign_sub(v, x)`",
     "update a variable", false},
    {"assign_add", bi_assign, NULL, NULL, false},
    {"assign_sub", bi_assign, NULL, NULL, false},
    {"group", bi_group, "`group(a, b, ...)`", "a `no_op` that runs all its arguments (a train op)",
     false},
    {"const", bi_const, "`const(value, dtype)`",
     "a constant of a chosen dtype (default `f32`, `bool` for booleans); the value must fit it",
     false},
    {"zeros", bi_fill, "`zeros(shape, dtype=f32)`, `ones(shape, dtype=f32)`",
     "filled tensors; every dim known and `>= 0` (`zeros([-5, 3])` is an error at `-5`)", false},
    {"ones", bi_fill, NULL, NULL, false},
    {"dim", bi_dim, "`dim(x, axis)`",
     "the static size of an axis of `x`, as a compile-time integer (error if unknown)", false},
    {"gradients", bi_gradients, "`gradients(ys, xs)`",
     "d(sum of ys)/d(xs): one tensor, or a tuple when `xs` is a list (`dw, db = gradients(loss, "
     "[w, b])`)",
     false},
    {"minimize", bi_minimize, "`minimize(loss, optimizer, var_list=[...])`",
     "gradients and one update per variable, grouped in a train op; increments `global_step` if "
     "there is one",
     false},
    {"sgd", bi_optimizer,
     "`sgd(lr)`, `momentum(lr, momentum=0.9, nesterov=false)`, `adam(lr=0.001, beta1, beta2, "
     "epsilon)`",
     "optimizers", false},
    {"momentum", bi_optimizer, NULL, NULL, false},
    {"adam", bi_optimizer, NULL, NULL, false},
    {"global_step", bi_global_step, "`global_step()`",
     "the i64 step counter variable `global_step`", false},
    {"read_value", bi_read_value, "`read_value(v)`",
     "the variable's value, read where the call is written (after the updates of an enclosing "
     "`control_dependencies` block); naming `v` in such a block reads it anew too",
     false},
    {"ps_variables", dsl_builtin_ps_variables,
     "`ps_variables(n, strategy=\"round_robin\") { ... }`",
     "a scope: variables made inside go to `/job:ps/task:K` (round-robin, or `\"greedy\"` by "
     "bytes); the rest stays where the enclosing scopes put it ([strategies.md](strategies.md))",
     false},
    {"replicas", dsl_builtin_replicas,
     "`replicas(n, x, y, devices=[...], all_reduce=false, shard_input=false) { ... }`",
     "the block built once per worker (`/job:worker/task:i`) on its slice of `x`, `y` (axis 0 "
     "cut in `n`); its value averaged over the replicas; `all_reduce=true`: each worker reads "
     "its own copy of the variables, kept equal by a ring all-reduce of the gradients "
     "(`algorithm=\"hier\"`, `bucket=`, `piece=` bytes: its options, "
     "[strategies.md](strategies.md#collective-all-reduce-the-default)); "
     "`shard_input=true` (`x`, `y` from `batch`): each worker reads its own slice of the batch "
     "from its own copy of the files",
     false},
    {"micro_batches", dsl_builtin_micro_batches, "`micro_batches(m, x, y) { ... }`",
     "the same without pins: micro-batches whose stages the block pins itself (model "
     "parallelism)",
     false},
    {"all_reduce", dsl_builtin_all_reduce, "`all_reduce(x0, x1, ..., op=\"sum\")`",
     "a ring all-reduce over the inputs' devices: a tuple of the sums (or `\"mean\"`s), one on "
     "each device; `algorithm=` (`\"ring\"`, `\"tree\"`, `\"hier\"`, ...), `piece=` bytes, "
     "`hosts=[...]` (one host name per input: the hierarchical all-reduce's grouping)",
     false},
    {"num_tasks", dsl_builtin_num_tasks, "`num_tasks(\"worker\", default=1)`",
     "the number of tasks of a job in the cluster the file will run on (`GRAPHRUN_CLUSTER`, "
     "which `graphrun launch` sets), `default` without one",
     false},
    {"mirror_spread", dsl_builtin_mirror_spread, "`mirror_spread()`",
     "the largest difference between a variable and its copies (f64), read when it runs; 0 "
     "without moving the copies when their fingerprints (XXH64 of the bytes) equal the "
     "variable's",
     false},
    /* sync_replicas and the queues are described in docs/strategies.md */
    {"sync_replicas", dsl_builtin_sync_replicas, NULL, NULL, false},
    {"task_index", dsl_builtin_task_index, "`task_index()`",
     "this client's task index: I under `graphrun run --job J --task I` (between-graph "
     "training, one client per worker), else 0",
     false},
    {"num_replicas", dsl_builtin_num_replicas, "`num_replicas()`",
     "the clients that train in between-graph training: the cluster's `chief` and `worker` "
     "tasks (1 without a cluster)",
     false},
    {"replica_index", dsl_builtin_replica_index, "`replica_index()`",
     "this client's place among them: 0 for the chief, I + 1 for worker I (I without a "
     "`chief` job); `batch(step * num_replicas() + replica_index(), ...)` gives each client its "
     "own shard",
     false},
    {"partitioned_variable", dsl_builtin_partitioned_variable,
     "`w = partitioned_variable(init, parts=K)`",
     "a variable split along axis 0 into `w/part_0` .. `w/part_{K-1}` (inside `ps_variables`: "
     "spread over the ps tasks); `w` is their concatenation, trained and checkpointed as one "
     "([strategies.md](strategies.md#partitioned-variables))",
     false},
    /* Keras' losses and metrics (dsl_losses.c) */
    {"binary_crossentropy", dsl_builtin_loss_or_metric,
     "`binary_crossentropy(y_true, y_pred, from_logits=false, reduction=\"sum_over_batch_size\")`, "
     "`categorical_crossentropy(...)`, `sparse_categorical_crossentropy(...)` (the same "
     "arguments)",
     "Keras' cross-entropy losses: the mean over the batch (`reduction=\"sum\"`, `\"none\"`: per "
     "example); from probabilities clipped to [1e-7, 1 - 1e-7], or from logits, stable for any "
     "logit ([training.md](training.md#losses-and-metrics))",
     false},
    {"categorical_crossentropy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"sparse_categorical_crossentropy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"mean_squared_error", dsl_builtin_loss_or_metric,
     "`mean_squared_error(y_true, y_pred, reduction=...)`, `huber(y_true, y_pred, delta=1.0, "
     "reduction=...)`",
     "Keras' regression losses, reduced as above", false},
    {"huber", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"accuracy", dsl_builtin_loss_or_metric,
     "`accuracy(y_true, y_pred)`, `binary_accuracy(y_true, y_pred, threshold=0.5)`, "
     "`categorical_accuracy(y_true, y_pred)`, `sparse_categorical_accuracy(y_true, y_pred)`, "
     "`top_k_categorical_accuracy(y_true, y_pred, k=5)`, "
     "`sparse_top_k_categorical_accuracy(y_true, "
     "y_pred, k=5)`",
     "Keras' accuracies of the batch (f32); labels of any integer dtype", false},
    {"binary_accuracy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"categorical_accuracy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"sparse_categorical_accuracy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"top_k_categorical_accuracy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"sparse_top_k_categorical_accuracy", dsl_builtin_loss_or_metric, NULL, NULL, false},
    {"auc", dsl_builtin_loss_or_metric,
     "`auc(y_true, y_pred, num_thresholds=200, from_logits=false)`",
     "Keras' AUC (ROC, trapezoids) of the batch (f32)", false},
    {"streaming_auc", dsl_builtin_loss_or_metric,
     "`value, update, reset = streaming_auc(y_true, y_pred, num_thresholds=200, "
     "from_logits=false, name=...)`",
     "the AUC over many batches, its counts in a variable (named by `name`, else "
     "`streaming_auc`): `update` adds a batch and gives the AUC so far, `value` reads it, `reset` "
     "zeroes the counts",
     false},
    /* folders of images (dsl_images.c) */
    {"image_folder", dsl_builtin_image_folder,
     "`images, labels = image_folder(dir, size=[256, 256], batch=32, validation_split=0.2, "
     "subset=\"training\", seed=1, shuffle=true, color_mode=\"rgb\", label_mode=\"int\", "
     "step=global_step())`",
     "batch number `step` of a folder of class sub-folders of PNG and JPEG files, as Keras' "
     "`image_dataset_from_directory`; `subset=\"both\"` gives four tensors (training, then "
     "validation, read at `validation_step`) ([training.md](training.md#image-folders))",
     false},
    {"class_names", dsl_builtin_image_folder_info,
     "`class_names(images)`, `num_classes(images)`, `num_images(images)`, "
     "`num_batches(images)`, `skipped_images(images)`",
     "of an `image_folder`: its classes (a list of strings, in label order), their number, the "
     "images of an epoch of its subset (and shard), the batches of an epoch (the rest is "
     "dropped), and the unreadable files skipped so far (an i64 tensor)",
     false},
    {"num_classes", dsl_builtin_image_folder_info, NULL, NULL, false},
    {"num_images", dsl_builtin_image_folder_info, NULL, NULL, false},
    {"num_batches", dsl_builtin_image_folder_info, NULL, NULL, false},
    {"skipped_images", dsl_builtin_image_folder_info, NULL, NULL, false},
    {"fifo_queue", dsl_builtin_fifo_queue, NULL, NULL, true},
    {"queue_enqueue", dsl_builtin_queue_enqueue, NULL, NULL, true},
    {"queue_enqueue_many", dsl_builtin_queue_enqueue_many, NULL, NULL, true},
    {"queue_dequeue", dsl_builtin_queue_dequeue, NULL, NULL, true},
    {"queue_dequeue_many", dsl_builtin_queue_dequeue_many, NULL, NULL, true},
    {"queue_close", dsl_builtin_queue_close, NULL, NULL, true},
    {"queue_size", dsl_builtin_queue_size, NULL, NULL, true},
    /* Keras-style layers (dsl_keras.c; docs/dsl.md#layers) */
    {"dense", dsl_builtin_dense, "`dense(x, units, activation=\"linear\", use_bias=true)`",
     "a layer: `activation(x @ kernel + bias)`, variables PATH/kernel (glorot_uniform), "
     "PATH/bias (zeros); PATH: the binding, or `name=`, in the variable scope "
     "([layers](#layers))",
     false},
    {"conv2d", dsl_builtin_conv2d,
     "`conv2d(x, filters, kernel_size, strides=1, padding=\"valid\", activation, use_bias)`",
     "a Conv2D layer (PATH/kernel, PATH/bias); `conv2d(x, w, ...)` with a filter tensor `w` is "
     "the op",
     true},
    {"separable_conv2d", dsl_builtin_separable_conv2d,
     "`separable_conv2d(x, filters, kernel_size, strides, padding, depth_multiplier=1, ...)`",
     "a depthwise then a 1x1 convolution (PATH/depthwise_kernel, PATH/pointwise_kernel, "
     "PATH/bias)",
     false},
    {"batch_norm", dsl_builtin_batch_norm,
     "`batch_norm(x, momentum=0.99, epsilon=0.001, training=true)`",
     "a BatchNormalization layer over the last axis (PATH/gamma, PATH/beta trained; "
     "PATH/moving_mean, PATH/moving_variance updated in training); with gamma, beta, ... "
     "given, the op",
     true},
    {"max_pool2d", dsl_builtin_max_pool2d,
     "`max_pool2d(x, pool_size=2, strides=pool_size, padding=\"valid\")`, `avg_pool2d(...)`",
     "pooling layers (the ops `max_pool`, `avg_pool`)", false},
    {"avg_pool2d", dsl_builtin_avg_pool2d, NULL, NULL, false},
    {"global_avg_pool2d", dsl_builtin_global_avg_pool2d, "`global_avg_pool2d(x)`",
     "the mean over height and width: `[n, h, w, c]` to `[n, c]`", false},
    {"rescaling", dsl_builtin_rescaling, "`rescaling(x, scale, offset=0)`", "`x * scale + offset`",
     false},
    {"random_flip", dsl_builtin_random_flip,
     "`random_flip(x, mode=\"horizontal_and_vertical\")`, `random_rotation(x, factor, "
     "fill_mode=\"reflect\", interpolation=\"bilinear\", fill_value=0)`, `random_zoom(x, "
     "height_factor, width_factor, ...)`, `random_contrast(x, factor)`",
     "augmentation layers (also `seed=`, `training=true`): in training the op of that name "
     "([ops.md](ops.md)), else `x` itself; `random_contrast` with `lower=`, `upper=` is the op",
     true},
    {"random_rotation", dsl_builtin_random_rotation, NULL, NULL, true},
    {"random_zoom", dsl_builtin_random_zoom, NULL, NULL, true},
    {"random_contrast", dsl_builtin_random_contrast, NULL, NULL, true},
};
#define NUM_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

static const dsl_builtin *find_builtin(const char *fn) {
  for (int i = 0; i < NUM_BUILTINS; i++)
    if (strcmp(fn, builtins[i].name) == 0) return &builtins[i];
  return NULL;
}

static const char *closest_name(const char *name) {
  const char *best = NULL;
  int bd = 3;
  for (int i = 0; i < gr_op_registry_count(); i++) {
    int d = gr_dsl_edit_distance(name, gr_op_registry_at(i)->name);
    if (d < bd) bd = d, best = gr_op_registry_at(i)->name;
  }
  for (int i = 0; i < NUM_BUILTINS; i++) {
    int d = gr_dsl_edit_distance(name, builtins[i].name);
    if (d < bd) bd = d, best = builtins[i].name;
  }
  return best;
}

void gr_dsl_print_builtins(FILE *out) {
  fprintf(out, "| call | does |\n|---|---|\n");
  for (int i = 0; i < NUM_BUILTINS; i++)
    if (builtins[i].usage) fprintf(out, "| %s | %s |\n", builtins[i].usage, builtins[i].help);
}

gr_status dsl_call(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out) {
  const char *fn = e->call.name;
  if (e->call.nargs > MAX_ARGS)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, e->pos, "more than %d arguments", MAX_ARGS);
  dsl_binding *b = dsl_frame_lookup(p->frame, fn);
  const gr_op_def *op = NULL;
  if (b && !b->def)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "'%s' is a %s, not a function", fn,
                     dsl_vkind_name(b->v.kind));
  const dsl_builtin *builtin = NULL;
  if (!b) {
    builtin = find_builtin(fn);
    /* one named like the op it builds still needs the op */
    if ((!builtin || builtin->op_named) && !(op = gr_ops_find(fn))) {
      const char *hint = closest_name(fn);
      if (hint)
        return dsl_error(p->err, GR_ERR_NOT_FOUND, e->pos,
                         "unknown op or function '%s' (did you mean '%s'?)", fn, hint);
      return dsl_error(p->err, GR_ERR_NOT_FOUND, e->pos,
                       "unknown op or function '%s' (see `graphrun ops`)", fn);
    }
  }
  call_args *a = dsl_alloc(&p->temp, sizeof *a);
  if (!a) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  a->call = e;
  a->n = e->call.nargs;
  a->v = dsl_alloc(&p->temp, sizeof(dsl_value) * (size_t)(a->n + 1));
  if (!a->v) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < a->n; i++) GR_TRY(dsl_eval(p, e->call.args[i].value, NULL, &a->v[i]));
  memset(out, 0, sizeof *out);
  if (e->call.block && (b || op))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->call.block->open,
                     "'%s' is a %s here, which takes no block (a def of that name hides the "
                     "built-in)",
                     fn, b ? "def" : "op");
  if (b) return call_def(p, b->def, e, name, a, out);
  if (builtin) return builtin->handler(p, fn, e, name, a->v, a->n, out);
  return call_op(p, op, e, name, a, out);
}
