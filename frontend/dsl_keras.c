/* Keras-style layers in the DSL (docs/dsl.md#layers): the built-ins
 * dense, conv2d, separable_conv2d, batch_norm, max_pool2d, avg_pool2d,
 * global_avg_pool2d, rescaling and the augmentation layers, lowered to
 * ops/gr_ops_layers.h; and how their variables are named and reused.
 *
 * A layer with variables has a path, its variables PATH/kernel, ...:
 * the variable scope (scope blocks and def instances) and the layer's
 * name, which is its binding (`h1 = dense(x, 256)`), else name="...",
 * else its kind numbered in its instance (dense, dense_1, ...). A def
 * called at the top level is one instance named after the def (every
 * top-level call of `model` shares model/...: Keras calling a model
 * again); called inside a def, an instance named by its binding, else by
 * the def's name numbered per call. The first call that reaches a path
 * makes the layer; every later call with that path reuses its variables
 * and must have the same configuration. Within one instance (a def call,
 * a replica's body, the top level) a path may be reached once: reaching
 * it again would silently share, so it is an error; and a def makes
 * layers either as a top-level model or as a part of other defs' calls,
 * never both (two sets where one was meant).
 *
 * State lives in the program (dsl_internal.h): the frames of counters and
 * reached paths are per instance (the top level's in the persistent
 * arena, a call's or a replica's in the statement's temp arena, freed on
 * leaving it); single-threaded, as all of the DSL's lowering. */
#include <stdio.h>
#include <string.h>

#include "dsl_internal.h"

/* Defines the handler dsl_builtin_NAME as CALL, an expression of the
 * handler's arguments (p, fn, e, name, v, n, out). */
#define LAYER_BUILTIN(NAME, CALL)                                                                  \
  gr_status dsl_builtin_##NAME(gr_dsl_program *p, const char *fn, const dsl_expr *e,               \
                               const char *name, dsl_value *v, int n, dsl_value *out) {            \
    return CALL;                                                                                   \
  }

static gr_status oom(gr_dsl_program *p) {
  return gr_error_set_oom(p->err);
}

/* ---- instances, scopes and counters ----------------------------------------------------- */

gr_status dsl_keras_init(gr_dsl_program *p) {
  if (!dsl_frame_init(&p->top_layer_frame, 16, NULL, &p->persist)) return oom(p);
  if (!dsl_frame_init(&p->layers_made, 16, NULL, &p->persist)) {
    dsl_frame_free(&p->top_layer_frame);
    return oom(p);
  }
  if (!dsl_frame_init(&p->def_kinds, 16, NULL, &p->persist)) {
    dsl_frame_free(&p->top_layer_frame);
    dsl_frame_free(&p->layers_made);
    return oom(p);
  }
  p->layer_frame = &p->top_layer_frame;
  return GR_OK;
}

void dsl_keras_free(gr_dsl_program *p) {
  dsl_frame_free(&p->top_layer_frame);
  dsl_frame_free(&p->layers_made);
  dsl_frame_free(&p->def_kinds);
}

/* The variable scope with `part` appended ("" joins nothing). A scope too
 * long to hold is an error only where a layer needs it (deep recursion of
 * defs without layers is the name scopes' to report): too_deep counts the
 * parts not joined. */
static void join_scope(gr_dsl_program *p, const char *part) {
  size_t n = strlen(part), at = p->var_scope_len + (p->var_scope_len && n ? 1 : 0);
  if (!n) return;
  if (p->var_scope_too_deep || at + n + 1 > sizeof p->var_scope) {
    p->var_scope_too_deep++;
    return;
  }
  if (p->var_scope_len) p->var_scope[p->var_scope_len] = '/';
  memcpy(p->var_scope + at, part, n + 1);
  p->var_scope_len = at + n;
}

static gr_status scope_fits(gr_dsl_program *p, dsl_pos pos) {
  if (!p->var_scope_too_deep) return GR_OK;
  return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos,
                   "the variable scope of this layer is longer than %zu characters ('%s/...')",
                   sizeof p->var_scope - 1, p->var_scope);
}

/* scope/part into buf (part alone at the top). */
static void scoped(const gr_dsl_program *p, const char *part, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s%s", p->var_scope, p->var_scope_len ? "/" : "", part);
}

/* The next name for an unnamed `kind` in the current instance: kind,
 * kind_1, ... (a counter per variable scope and kind, copied into each
 * replica's body). */
static gr_status numbered(gr_dsl_program *p, const char *kind, dsl_pos pos, char *out, size_t cap) {
  char key[600];
  snprintf(key, sizeof key, "#%s%s%s", p->var_scope, p->var_scope_len ? "/" : "", kind);
  dsl_frame *f = p->layer_frame;
  dsl_binding *b = dsl_frame_lookup(f, key);
  int64_t k = b ? b->v.num.i : 0;
  if (!b || !dsl_frame_find_local(f, key)) {
    char *copy = dsl_strndup(f->arena, key, strlen(key));
    if (!copy || !(b = dsl_frame_insert(f, copy))) return oom(p);
    b->pos = pos;
  }
  b->v.num.i = k + 1;
  if ((size_t)(k ? snprintf(out, cap, "%s_%lld", kind, (long long)k)
                 : snprintf(out, cap, "%s", kind)) >= cap)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos, "the name '%s' is too long", kind);
  return GR_OK;
}

/* Marks `path` as reached in the current instance; reaching it twice is
 * an error at pos with a note at the first time. */
static gr_status reach_once(gr_dsl_program *p, const char *path, const char *what, dsl_pos pos) {
  char key[600];
  snprintf(key, sizeof key, "@%s", path);
  dsl_binding *b = dsl_frame_lookup(p->layer_frame, key);
  if (b) {
    dsl_error(p->err, GR_ERR_ALREADY_EXISTS, pos,
              "%s '%s' is made twice in this %s: the second would share the first's variables; "
              "give it another name (`h2 = ...`, or name=\"...\")",
              what, path, p->call_depth ? "call" : "file");
    dsl_error_note(p->err, b->pos, "the first");
    return p->err->code;
  }
  char *copy = dsl_strndup(p->layer_frame->arena, key, strlen(key));
  if (!copy || !(b = dsl_frame_insert(p->layer_frame, copy))) return oom(p);
  b->pos = pos;
  return GR_OK;
}

static void save(const gr_dsl_program *p, dsl_keras_saved *s) {
  s->ndefs = p->nkeras_defs;
  s->var_scope_len = p->var_scope_len;
  s->too_deep = p->var_scope_too_deep;
  s->frame = p->layer_frame;
  s->own = NULL;
}

/* A frame of its own for the instance being entered (parent: counters
 * and reached paths seen through it). */
static gr_status own_frame(gr_dsl_program *p, dsl_frame *parent, dsl_keras_saved *s) {
  dsl_frame *f = dsl_alloc(&p->temp, sizeof *f);
  if (!f || !dsl_frame_init(f, 16, parent, &p->temp)) return oom(p);
  s->own = p->layer_frame = f;
  return GR_OK;
}

gr_status dsl_keras_enter_def(gr_dsl_program *p, const char *def, const char *name, dsl_pos pos,
                              dsl_keras_saved *saved) {
  save(p, saved);
  char inst[256], path[600];
  if (p->nkeras_defs < (int)(sizeof p->keras_defs / sizeof p->keras_defs[0]))
    p->keras_defs[p->nkeras_defs++] = def;
  if (p->call_depth == 0) { /* a top-level call: the def's one instance */
    snprintf(inst, sizeof inst, "%s", def);
  } else {
    if (name)
      snprintf(inst, sizeof inst, "%s", name);
    else
      GR_TRY(numbered(p, def, pos, inst, sizeof inst));
    scoped(p, inst, path, sizeof path);
    GR_TRY(reach_once(p, path, "the def instance", pos));
  }
  join_scope(p, inst);
  return own_frame(p, NULL, saved);
}

gr_status dsl_keras_enter_scope(gr_dsl_program *p, const char *scope, dsl_pos pos,
                                dsl_keras_saved *saved) {
  save(p, saved);
  (void)pos;
  if (scope[0] == '/') { /* absolute, as the name scope: from the top */
    p->var_scope_len = 0;
    p->var_scope[0] = '\0';
    p->var_scope_too_deep = 0;
  }
  join_scope(p, scope[0] == '/' ? scope + 1 : scope);
  return GR_OK;
}

gr_status dsl_keras_enter_replica(gr_dsl_program *p, dsl_keras_saved *saved) {
  save(p, saved);
  return own_frame(p, p->layer_frame, saved);
}

void dsl_keras_leave(gr_dsl_program *p, const dsl_keras_saved *saved) {
  p->nkeras_defs = saved->ndefs;
  p->var_scope_len = saved->var_scope_len;
  p->var_scope_too_deep = saved->too_deep;
  p->var_scope[p->var_scope_len] = '\0';
  p->layer_frame = saved->frame;
  if (saved->own) dsl_frame_free(saved->own);
}

/* ---- arguments ------------------------------------------------------------------------------ */

/* A layer call's arguments by parameter: at[i] is the index of the
 * argument given for params[i] (positionally or by keyword), -1 if none. */
typedef struct largs {
  dsl_bargs a;
  const char *const *params;
  int at[16];
} largs;

static gr_status bind_params(largs *l, gr_dsl_program *p, const char *fn, const dsl_expr *e,
                             dsl_value *v, int nargs, const char *const *params) {
  l->a = dsl_bargs_make(p, fn, e, v, nargs);
  l->params = params;
  int np = 0;
  while (params[np]) np++;
  for (int i = 0; i < 16; i++) l->at[i] = -1;
  for (int i = 0; i < nargs; i++) {
    const dsl_arg *arg = &e->call.args[i];
    int k = -1;
    if (!arg->name) {
      k = i;
      if (k >= np)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                         "too many arguments for %s: it takes %d", fn, np);
    } else {
      for (int j = 0; j < np && k < 0; j++)
        if (strcmp(params[j], arg->name) == 0) k = j;
      if (k < 0) {
        char list[400];
        size_t n = 0;
        for (int j = 0; j < np && n < sizeof list; j++)
          n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", params[j]);
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                         "unknown keyword argument '%s' for %s (it takes %s)", arg->name, fn, list);
      }
    }
    if (l->at[k] >= 0)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos, "%s: '%s' given twice", fn,
                       params[k]);
    l->at[k] = i;
  }
  return GR_OK;
}

static dsl_pos arg_pos(const largs *l, int k) {
  return l->a.e->call.args[l->at[k]].pos;
}

static gr_status bad_arg(const largs *l, int k, const char *want) {
  const dsl_value *v = &l->a.v[l->at[k]];
  return dsl_error(l->a.p->err, GR_ERR_INVALID_ARGUMENT, arg_pos(l, k), "%s: %s must be %s, got %s",
                   l->a.fn, l->params[k], want,
                   v->kind == V_TENSOR ? "a tensor (it must be known when the file loads)"
                                       : dsl_vkind_name(v->kind));
}

static gr_status need(const largs *l, int k) {
  if (l->at[k] >= 0) return GR_OK;
  return dsl_error(l->a.p->err, GR_ERR_INVALID_ARGUMENT, l->a.e->pos, "%s: missing argument '%s'",
                   l->a.fn, l->params[k]);
}

static gr_status tensor_arg(const largs *l, int k, gr_output *o) {
  GR_TRY(need(l, k));
  return dsl_to_tensor(l->a.p, &l->a.v[l->at[k]], arg_pos(l, k), GR_DTYPE_INVALID, o);
}

static bool is_int(const dsl_value *v) {
  return v->kind == V_NUM && v->num.is_int;
}

/* An integer >= 1 (dflt when not given). */
static gr_status count_arg(const largs *l, int k, int64_t dflt, int64_t *out) {
  *out = dflt;
  if (l->at[k] < 0) return GR_OK;
  const dsl_value *v = &l->a.v[l->at[k]];
  if (!is_int(v) || v->num.i < 1) return bad_arg(l, k, "an integer >= 1");
  *out = v->num.i;
  return GR_OK;
}

/* An integer >= 1 or a list of two: [h, w]. */
static gr_status pair_arg(const largs *l, int k, const int64_t dflt[2], int64_t out[2]) {
  out[0] = dflt[0], out[1] = dflt[1];
  if (l->at[k] < 0) return GR_OK;
  const dsl_value *v = &l->a.v[l->at[k]];
  if (is_int(v) && v->num.i >= 1) {
    out[0] = out[1] = v->num.i;
    return GR_OK;
  }
  if (v->kind == V_LIST && !v->has_t && v->list.n == 2 && is_int(&v->list.items[0]) &&
      is_int(&v->list.items[1]) && v->list.items[0].num.i >= 1 && v->list.items[1].num.i >= 1) {
    out[0] = v->list.items[0].num.i, out[1] = v->list.items[1].num.i;
    return GR_OK;
  }
  return bad_arg(l, k, "an integer >= 1 or a list of two ([height, width])");
}

static gr_status num_arg(const largs *l, int k, double dflt, double *out) {
  *out = dflt;
  if (l->at[k] < 0) return GR_OK;
  const dsl_value *v = &l->a.v[l->at[k]];
  if (v->kind != V_NUM) return bad_arg(l, k, "a number");
  *out = v->num.v;
  return GR_OK;
}

/* A number f or a list of one or two numbers; *n gets how many (0: not given). */
static gr_status factor_arg(const largs *l, int k, double out[2], int *n) {
  *n = 0;
  if (l->at[k] < 0) return GR_OK;
  const dsl_value *v = &l->a.v[l->at[k]];
  if (v->kind == V_NUM) {
    out[0] = v->num.v, *n = 1;
    return GR_OK;
  }
  if (v->kind == V_LIST && !v->has_t && (v->list.n == 1 || v->list.n == 2)) {
    for (int i = 0; i < v->list.n; i++) {
      if (v->list.items[i].kind != V_NUM) return bad_arg(l, k, "a number or [lower, upper]");
      out[i] = v->list.items[i].num.v;
    }
    *n = v->list.n;
    return GR_OK;
  }
  return bad_arg(l, k, "a number or [lower, upper]");
}

static gr_status bool_arg(const largs *l, int k, bool dflt, bool *out) {
  *out = dflt;
  if (l->at[k] < 0) return GR_OK;
  if (l->a.v[l->at[k]].kind != V_BOOL) return bad_arg(l, k, "true or false");
  *out = l->a.v[l->at[k]].b;
  return GR_OK;
}

static gr_status str_arg(const largs *l, int k, const char *dflt, const char **out) {
  *out = dflt;
  if (l->at[k] < 0) return GR_OK;
  if (l->a.v[l->at[k]].kind != V_STR) return bad_arg(l, k, "a string");
  *out = l->a.v[l->at[k]].str;
  return GR_OK;
}

static gr_status activation_arg(const largs *l, int k, gr_activation *out, const char **name) {
  *out = GR_ACT_LINEAR;
  GR_TRY(str_arg(l, k, "linear", name));
  if (!gr_activation_parse(*name, out))
    return bad_arg(l, k, "\"linear\", \"relu\", \"sigmoid\", \"tanh\" or \"softmax\"");
  return GR_OK;
}

static gr_status padding_arg(const largs *l, int k, const char **out) {
  GR_TRY(str_arg(l, k, "valid", out));
  if (strcmp(*out, "valid") != 0 && strcmp(*out, "same") != 0)
    return bad_arg(l, k, "\"valid\" or \"same\"");
  return GR_OK;
}

static gr_status seed_arg(const largs *l, int k, int64_t *out) {
  *out = 0;
  if (l->at[k] < 0) return GR_OK;
  if (!is_int(&l->a.v[l->at[k]])) return bad_arg(l, k, "an integer");
  *out = l->a.v[l->at[k]].num.i;
  return GR_OK;
}

/* ---- the layer's path, its record, its result ---------------------------------------------- */

/* A new layer at path, made inside the defs being called: each of them
 * makes layers either as a model called at the top level (one set, shared
 * by its calls) or as a part of another def's calls (a set per call),
 * never both: that would be two sets of variables where one was meant. */
static gr_status one_kind_of_instance(gr_dsl_program *p, const char *path, dsl_pos pos) {
  for (int i = 0; i < p->nkeras_defs; i++) {
    const char *def = p->keras_defs[i];
    bool top = i == 0;
    dsl_binding *b = dsl_frame_find_local(&p->def_kinds, def);
    if (!b) {
      char *first = dsl_strndup(&p->persist, path, strlen(path));
      if (!first || !(b = dsl_frame_insert(&p->def_kinds, def))) return oom(p);
      b->v.kind = V_STR, b->v.str = first, b->v.multi = top,
      b->pos = pos; /* multi: made at the top */
      continue;
    }
    if (b->v.multi == top) continue;
    const char *as_model = top ? path : b->v.str, *as_part = top ? b->v.str : path;
    dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
              "def '%s' makes layers both as a model called at the top level ('%s') and as a "
              "part of another def's call ('%s'): two sets of variables. Call the model at the "
              "top level only and give its output to the other def (docs/dsl.md#layers)",
              def, as_model, as_part);
    dsl_error_note(p->err, b->pos, "the other");
    return p->err->code;
  }
  return GR_OK;
}

/* The layer's path (name kw at k_name, else the binding, else numbered);
 * made or reused: *reuse. config describes the layer for the check that a
 * reused layer is the same. */
static gr_status layer_path(const largs *l, int k_name, const char *kind, const char *binding,
                            const char *config, char *path, size_t cap, gr_layer_reuse *reuse) {
  gr_dsl_program *p = l->a.p;
  dsl_pos pos = l->a.e->pos;
  const char *given;
  char base[256];
  GR_TRY(scope_fits(p, pos));
  GR_TRY(str_arg(l, k_name, NULL, &given));
  if (given && (!given[0] || given[0] == '/' || strstr(given, "//")))
    return bad_arg(l, k_name, "a name without a leading '/' (\"conv1\", \"block1/conv\")");
  if (given || binding)
    snprintf(base, sizeof base, "%s", given ? given : binding);
  else
    GR_TRY(numbered(p, kind, pos, base, sizeof base));
  scoped(p, base, path, cap);
  GR_TRY(reach_once(p, path, "layer", pos));
  char full[700];
  snprintf(full, sizeof full, "%s(%s)", kind, config);
  dsl_binding *made = dsl_frame_find_local(&p->layers_made, path);
  if (made) {
    if (strcmp(made->v.str, full) != 0) {
      dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos,
                "layer '%s' is %s here but %s where it was made: a layer applied again must be "
                "the same (a def called at the top level is one model, whose layers every call "
                "shares: docs/dsl.md#layers)",
                path, full, made->v.str);
      dsl_error_note(p->err, made->pos, "made here");
      return p->err->code;
    }
    *reuse = GR_LAYER_REUSE;
    return GR_OK;
  }
  if (p->loop_depth)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, pos,
                     "layer '%s' would be made inside a while loop's body, which cannot make "
                     "variables: call it once before the loop (the training pass), and the loop "
                     "applies the same layer",
                     path);
  GR_TRY(one_kind_of_instance(p, path, pos));
  char *key = dsl_strndup(&p->persist, path, strlen(path));
  char *desc = dsl_strndup(&p->persist, full, strlen(full));
  if (!key || !desc || !(made = dsl_frame_insert(&p->layers_made, key))) return oom(p);
  made->v.kind = V_STR;
  made->v.str = desc;
  made->pos = pos;
  *reuse = GR_LAYER_NEW;
  return GR_OK;
}

/* The layer's output o, named by the binding, recorded as made by kind
 * (the recording outlives the call's text: a static name). */
static gr_status layer_result(const largs *l, const char *kind, const char *name, gr_output o,
                              dsl_value *out) {
  static const char *const kinds[] = {
      "dense",       "conv2d",          "separable_conv2d",  "batch_norm",
      "max_pool2d",  "avg_pool2d",      "global_avg_pool2d", "rescaling",
      "random_flip", "random_rotation", "random_zoom",       "random_contrast"};
  gr_dsl_program *p = l->a.p;
  GR_TRY(dsl_tensor_result(p, l->a.e->pos, name, o, out));
  p->layer_node = out->t.node;
  p->layer_kind = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kind, kinds[i]) == 0) p->layer_kind = kinds[i];
  return GR_OK;
}

/* Names the layer being built (layer_path) into path, sets o->name and
 * o->reuse, and points the graph at the call. */
static gr_status name_layer(const largs *l, int k_name, const char *kind, const char *binding,
                            const char *config, gr_layer_options *o, char *path, size_t cap) {
  GR_TRY(layer_path(l, k_name, kind, binding, config, path, cap, &o->reuse));
  o->name = path;
  dsl_set_loc(l->a.p, l->a.e->pos);
  return GR_OK;
}

/* ---- layers with variables ------------------------------------------------------------------- */

static gr_status dense(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                       dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x",    "units", "activation", "use_bias",
                                       "name", "seed",  NULL};
  largs l;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  gr_layer_options o = gr_layer_options_default();
  gr_output x;
  int64_t units;
  const char *act;
  GR_TRY(tensor_arg(&l, 0, &x));
  GR_TRY(need(&l, 1));
  GR_TRY(count_arg(&l, 1, 1, &units));
  GR_TRY(activation_arg(&l, 2, &o.activation, &act));
  GR_TRY(bool_arg(&l, 3, true, &o.use_bias));
  GR_TRY(seed_arg(&l, 5, &o.seed));
  char config[200], path[600];
  snprintf(config, sizeof config, "units=%lld, activation=\"%s\", use_bias=%s", (long long)units,
           act, o.use_bias ? "true" : "false");
  GR_TRY(name_layer(&l, 4, fn, name, config, &o, path, sizeof path));
  return layer_result(&l, fn, name, gr_dense_layer(p->g, x, units, &o), out);
}

/* conv2d and separable_conv2d: x, filters, kernel_size, ... */
static gr_status conv_layer(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                            dsl_value *v, int n, dsl_value *out, bool separable) {
  static const char *const params[] = {"x",       "filters",          "kernel_size", "strides",
                                       "padding", "activation",       "use_bias",    "name",
                                       "seed",    "depth_multiplier", NULL};
  largs l;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  if (!separable && l.at[9] >= 0)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg_pos(&l, 9),
                     "conv2d has no depth_multiplier (separable_conv2d has)");
  gr_layer_options o = gr_layer_options_default();
  gr_output x;
  int64_t filters, k[2];
  const char *act;
  GR_TRY(tensor_arg(&l, 0, &x));
  GR_TRY(need(&l, 1));
  GR_TRY(count_arg(&l, 1, 1, &filters));
  GR_TRY(need(&l, 2));
  GR_TRY(pair_arg(&l, 2, (int64_t[]){1, 1}, k));
  GR_TRY(pair_arg(&l, 3, (int64_t[]){1, 1}, o.strides));
  GR_TRY(padding_arg(&l, 4, &o.padding));
  GR_TRY(activation_arg(&l, 5, &o.activation, &act));
  GR_TRY(bool_arg(&l, 6, true, &o.use_bias));
  GR_TRY(seed_arg(&l, 8, &o.seed));
  GR_TRY(count_arg(&l, 9, 1, &o.depth_multiplier));
  char config[300], path[600];
  snprintf(config, sizeof config,
           "filters=%lld, kernel_size=[%lld, %lld], strides=[%lld, %lld], padding=\"%s\", "
           "activation=\"%s\", use_bias=%s",
           (long long)filters, (long long)k[0], (long long)k[1], (long long)o.strides[0],
           (long long)o.strides[1], o.padding, act, o.use_bias ? "true" : "false");
  if (separable)
    snprintf(config + strlen(config), sizeof config - strlen(config), ", depth_multiplier=%lld",
             (long long)o.depth_multiplier);
  GR_TRY(name_layer(&l, 7, fn, name, config, &o, path, sizeof path));
  gr_output y = separable ? gr_separable_conv2d_layer(p->g, x, filters, k[0], k[1], &o)
                          : gr_conv2d_layer(p->g, x, filters, k[0], k[1], &o);
  return layer_result(&l, fn, name, y, out);
}

/* conv2d(x, w, ...) with a tensor w is the op; conv2d(x, 32, 3) the layer. */
static bool conv2d_is_layer(const dsl_expr *e, const dsl_value *v, int n) {
  static const char *const layer_only[] = {"filters", "kernel_size", "activation", "use_bias",
                                           "name"};
  for (int i = 0; i < n; i++) {
    const char *kw = e->call.args[i].name;
    for (size_t j = 0; kw && j < sizeof layer_only / sizeof layer_only[0]; j++)
      if (strcmp(kw, layer_only[j]) == 0) return true;
  }
  return n >= 2 && !e->call.args[1].name && is_int(&v[1]);
}

LAYER_BUILTIN(dense, dense(p, fn, e, name, v, n, out))

LAYER_BUILTIN(conv2d, conv2d_is_layer(e, v, n) ? conv_layer(p, fn, e, name, v, n, out, false)
                                               : dsl_call_as_op(p, e, name, v, n, out))

LAYER_BUILTIN(separable_conv2d, conv_layer(p, fn, e, name, v, n, out, true))

/* batch_norm(x, ...) with x alone is the layer; with gamma, beta, ... the op. */
gr_status dsl_builtin_batch_norm(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                 const char *name, dsl_value *v, int n, dsl_value *out) {
  int npos = 0;
  while (npos < n && !e->call.args[npos].name) npos++;
  if (npos > 1) return dsl_call_as_op(p, e, name, v, n, out);
  static const char *const params[] = {"x", "momentum", "epsilon", "training", "name", NULL};
  largs l;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  gr_layer_options o = gr_layer_options_default();
  gr_output x;
  GR_TRY(tensor_arg(&l, 0, &x));
  GR_TRY(num_arg(&l, 1, 0.99, &o.momentum));
  GR_TRY(num_arg(&l, 2, 1e-3, &o.epsilon));
  GR_TRY(bool_arg(&l, 3, true, &o.training));
  char config[200], path[600], m[40], ep[40];
  dsl_format_number(&(dsl_value){.kind = V_NUM, .num = {.v = o.momentum}}, m, sizeof m);
  dsl_format_number(&(dsl_value){.kind = V_NUM, .num = {.v = o.epsilon}}, ep, sizeof ep);
  snprintf(config, sizeof config, "momentum=%s, epsilon=%s", m, ep);
  GR_TRY(name_layer(&l, 4, fn, name, config, &o, path, sizeof path));
  return layer_result(&l, fn, name, gr_batch_norm_layer(p->g, x, &o), out);
}

/* ---- layers without variables ------------------------------------------------------------------
 */

static gr_status pool(gr_dsl_program *p, const char *fn, const dsl_expr *e, const char *name,
                      dsl_value *v, int n, dsl_value *out, bool max) {
  static const char *const params[] = {"x", "pool_size", "strides", "padding", NULL};
  largs l;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  gr_output x;
  int64_t size[2], strides[2];
  const char *padding;
  GR_TRY(tensor_arg(&l, 0, &x));
  GR_TRY(pair_arg(&l, 1, (int64_t[]){2, 2}, size));
  GR_TRY(pair_arg(&l, 2, size, strides));
  GR_TRY(padding_arg(&l, 3, &padding));
  const char *pad = padding[0] == 's' ? "SAME" : "VALID";
  dsl_set_loc(p, e->pos);
  gr_output y = max ? gr_max_pool(p->g, x, size, strides, pad, NULL)
                    : gr_avg_pool(p->g, x, size, strides, pad, NULL);
  return layer_result(&l, fn, name, y, out);
}

LAYER_BUILTIN(max_pool2d, pool(p, fn, e, name, v, n, out, true))

LAYER_BUILTIN(avg_pool2d, pool(p, fn, e, name, v, n, out, false))

gr_status dsl_builtin_global_avg_pool2d(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                        const char *name, dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x", NULL};
  largs l;
  gr_output x;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  GR_TRY(tensor_arg(&l, 0, &x));
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_global_avg_pool(p->g, x, NULL), out);
}

gr_status dsl_builtin_rescaling(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                const char *name, dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x", "scale", "offset", NULL};
  largs l;
  gr_output x;
  double scale, offset;
  GR_TRY(bind_params(&l, p, fn, e, v, n, params));
  GR_TRY(tensor_arg(&l, 0, &x));
  GR_TRY(need(&l, 1));
  GR_TRY(num_arg(&l, 1, 1, &scale));
  GR_TRY(num_arg(&l, 2, 0, &offset));
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_rescaling(p->g, x, scale, offset), out);
}

/* ---- augmentation: in training only ---------------------------------------------------------- */

/* The call's x, seed (param k_seed) and training (the last param);
 * *on false in inference, where an augmentation layer is x itself (*out:
 * a binding of it makes an identity, as `y = x` does). */
static gr_status augment_args(largs *l, gr_dsl_program *p, const char *fn, const dsl_expr *e,
                              dsl_value *v, int n, const char *const *params, int k_seed,
                              gr_output *x, int64_t *seed, bool *on, dsl_value *out) {
  int k_training = 0;
  while (params[k_training + 1]) k_training++;
  GR_TRY(bind_params(l, p, fn, e, v, n, params));
  GR_TRY(tensor_arg(l, 0, x));
  GR_TRY(seed_arg(l, k_seed, seed));
  GR_TRY(bool_arg(l, k_training, true, on));
  if (!*on) dsl_tensor_value(out, *x);
  return GR_OK;
}

/* A required factor (param k): a number f >= 0 or [lower, upper]. */
static gr_status need_factor(const largs *l, int k, double f[2], int *nf) {
  GR_TRY(need(l, k));
  GR_TRY(factor_arg(l, k, f, nf));
  if (*nf == 1 && f[0] < 0) return bad_arg(l, k, "a number >= 0 or [lower, upper]");
  return GR_OK;
}

/* The fill arguments of rotation and zoom at params k, k + 1, k + 2. */
static gr_status fill_args(const largs *l, int k, gr_image_fill *f) {
  static const char *const modes[] = {"reflect", "wrap", "constant", "nearest", NULL};
  GR_TRY(str_arg(l, k, "reflect", &f->fill_mode));
  GR_TRY(str_arg(l, k + 1, "bilinear", &f->interpolation));
  GR_TRY(num_arg(l, k + 2, 0, &f->fill_value));
  int m = 0;
  while (modes[m] && strcmp(modes[m], f->fill_mode) != 0) m++;
  if (!modes[m]) return bad_arg(l, k, "\"reflect\", \"wrap\", \"constant\" or \"nearest\"");
  if (strcmp(f->interpolation, "bilinear") != 0 && strcmp(f->interpolation, "nearest") != 0)
    return bad_arg(l, k + 1, "\"bilinear\" or \"nearest\"");
  return GR_OK;
}

/* One value f as [-f, f], two as given. */
static void range_of(const double f[2], int n, double out[2]) {
  out[0] = n == 1 ? -f[0] : f[0];
  out[1] = f[n == 1 ? 0 : 1];
}

gr_status dsl_builtin_random_flip(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                  const char *name, dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x", "mode", "seed", "training", NULL};
  largs l;
  gr_output x;
  const char *mode;
  int64_t seed;
  bool on;
  GR_TRY(augment_args(&l, p, fn, e, v, n, params, 2, &x, &seed, &on, out));
  if (!on) return GR_OK;
  GR_TRY(str_arg(&l, 1, "horizontal_and_vertical", &mode));
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_random_flip(p->g, x, mode, seed), out);
}

gr_status dsl_builtin_random_rotation(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                      const char *name, dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x",          "factor", "fill_mode", "interpolation",
                                       "fill_value", "seed",   "training",  NULL};
  largs l;
  gr_output x;
  double f[2], r[2];
  int nf;
  gr_image_fill fill;
  int64_t seed;
  bool on;
  GR_TRY(augment_args(&l, p, fn, e, v, n, params, 5, &x, &seed, &on, out));
  if (!on) return GR_OK;
  GR_TRY(need_factor(&l, 1, f, &nf));
  GR_TRY(fill_args(&l, 2, &fill));
  range_of(f, nf, r);
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_random_rotation(p->g, x, r[0], r[1], &fill, seed), out);
}

gr_status dsl_builtin_random_zoom(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                  const char *name, dsl_value *v, int n, dsl_value *out) {
  static const char *const params[] = {"x",         "height_factor", "width_factor",
                                       "fill_mode", "interpolation", "fill_value",
                                       "seed",      "training",      NULL};
  largs l;
  gr_output x;
  double hf[2], wf[2], h[2], w[2];
  int nh, nw = 0;
  gr_image_fill fill;
  int64_t seed;
  bool on;
  GR_TRY(augment_args(&l, p, fn, e, v, n, params, 6, &x, &seed, &on, out));
  if (!on) return GR_OK;
  GR_TRY(need_factor(&l, 1, hf, &nh));
  if (l.at[2] >= 0) GR_TRY(need_factor(&l, 2, wf, &nw));
  GR_TRY(fill_args(&l, 3, &fill));
  range_of(hf, nh, h);
  if (nw) range_of(wf, nw, w);
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_random_zoom(p->g, x, h, nw ? w : NULL, &fill, seed), out);
}

/* random_contrast(x, factor) is Keras' layer (contrast uniform in
 * [1 - factor, 1 + factor], or [lower, upper] given as a list); with
 * lower= or upper= (or both positionally) the op. */
gr_status dsl_builtin_random_contrast(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                      const char *name, dsl_value *v, int n, dsl_value *out) {
  int npos = 0;
  bool op = false;
  while (npos < n && !e->call.args[npos].name) npos++;
  for (int i = npos; i < n; i++)
    op = op || !strcmp(e->call.args[i].name, "lower") || !strcmp(e->call.args[i].name, "upper");
  if (op || npos >= 3) return dsl_call_as_op(p, e, name, v, n, out);
  static const char *const params[] = {"x", "factor", "seed", "training", NULL};
  largs l;
  gr_output x;
  double f[2];
  int nf;
  int64_t seed;
  bool on;
  GR_TRY(augment_args(&l, p, fn, e, v, n, params, 2, &x, &seed, &on, out));
  if (!on) return GR_OK;
  GR_TRY(need_factor(&l, 1, f, &nf));
  if (nf == 1 && f[0] > 1) return bad_arg(&l, 1, "a number in [0, 1] or [lower, upper]");
  double lo = nf == 1 ? 1 - f[0] : f[0], hi = nf == 1 ? 1 + f[0] : f[1];
  dsl_set_loc(p, e->pos);
  return layer_result(&l, fn, name, gr_random_contrast(p->g, x, lo, hi, seed), out);
}
