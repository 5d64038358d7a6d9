/* DSL built-ins for Keras' losses and metrics (ops/gr_losses.h), with
 * Keras' argument names, order and defaults:
 *
 *   loss = binary_crossentropy(labels, logits, from_logits=true)
 *   per_example = sparse_categorical_crossentropy(y, probs, reduction="none")
 *   acc = sparse_categorical_accuracy(y, probs)
 *   top5 = sparse_top_k_categorical_accuracy(y, probs, k=5)
 *   auc_value, auc_update, auc_reset = streaming_auc(y, probs)
 *
 * y_true and y_pred are positional or keywords; the options after them
 * too. A literal y_true takes y_pred's dtype (the sparse forms: i64). */
#include <stdio.h>
#include <string.h>

#include "dsl_internal.h"

typedef enum fn_kind {
  F_BINARY_XENT,
  F_CATEGORICAL_XENT,
  F_SPARSE_XENT,
  F_MSE,
  F_HUBER,
  F_ACCURACY,
  F_BINARY_ACCURACY,
  F_CATEGORICAL_ACCURACY,
  F_SPARSE_ACCURACY,
  F_TOP_K,
  F_SPARSE_TOP_K,
  F_AUC,
  F_STREAMING_AUC,
} fn_kind;

#define MAX_PARAMS 6
typedef struct fn_spec {
  const char *name;
  fn_kind kind;
  const char *params[MAX_PARAMS]; /* after y_true and y_pred, NULL-terminated */
} fn_spec;

static const fn_spec specs[] = {
    {"binary_crossentropy", F_BINARY_XENT, {"from_logits", "reduction"}},
    {"categorical_crossentropy", F_CATEGORICAL_XENT, {"from_logits", "reduction"}},
    {"sparse_categorical_crossentropy", F_SPARSE_XENT, {"from_logits", "reduction"}},
    {"mean_squared_error", F_MSE, {"reduction"}},
    {"huber", F_HUBER, {"delta", "reduction"}},
    {"accuracy", F_ACCURACY, {NULL}},
    {"binary_accuracy", F_BINARY_ACCURACY, {"threshold"}},
    {"categorical_accuracy", F_CATEGORICAL_ACCURACY, {NULL}},
    {"sparse_categorical_accuracy", F_SPARSE_ACCURACY, {NULL}},
    {"top_k_categorical_accuracy", F_TOP_K, {"k"}},
    {"sparse_top_k_categorical_accuracy", F_SPARSE_TOP_K, {"k"}},
    {"auc", F_AUC, {"num_thresholds", "from_logits"}},
    {"streaming_auc", F_STREAMING_AUC, {"num_thresholds", "from_logits", "name"}},
};

/* The options of a call, Keras' defaults first. */
typedef struct options {
  bool from_logits;
  gr_loss_reduction reduction;
  double delta, threshold;
  int64_t k, num_thresholds;
  const char *name;
} options;

/* The argument of parameter j (positional j, or its keyword), -1 when
 * absent; an error when given both ways. */
static gr_status arg_of(const dsl_bargs *a, const char *const *params, int j, int *out) {
  int kw = dsl_bargs_kw(a, params[j]);
  if (j < a->npos && kw >= 0)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[kw].pos,
                     "%s: '%s' given twice (positionally and by keyword)", a->fn, params[j]);
  *out = j < a->npos ? j : kw;
  return GR_OK;
}

static gr_status number(const dsl_bargs *a, int i, const char *what, double *out) {
  if (a->v[i].kind != V_NUM || a->v[i].has_t)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                     "%s: %s must be a number, got a %s", a->fn, what,
                     dsl_vkind_name(a->v[i].kind));
  *out = a->v[i].num.v;
  return GR_OK;
}

static gr_status option(const dsl_bargs *a, const char *param, int i, options *o) {
  if (strcmp(param, "from_logits") == 0) return dsl_bargs_bool(a, i, param, &o->from_logits);
  if (strcmp(param, "delta") == 0) return number(a, i, param, &o->delta);
  if (strcmp(param, "threshold") == 0) return number(a, i, param, &o->threshold);
  if (strcmp(param, "k") == 0) return dsl_bargs_int(a, i, param, 1, INT32_MAX, &o->k);
  if (strcmp(param, "num_thresholds") == 0)
    return dsl_bargs_int(a, i, param, 2, 1 << 20, &o->num_thresholds);
  if (strcmp(param, "name") == 0) return dsl_bargs_string(a, i, param, &o->name);
  const char *s = "";
  GR_TRY(dsl_bargs_string(a, i, param, &s));
  if (!gr_loss_reduction_parse(s, &o->reduction))
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                     "%s: reduction \"%s\": want \"sum_over_batch_size\" (or \"mean\"), \"sum\" "
                     "or \"none\"",
                     a->fn, s);
  return GR_OK;
}

/* A name for streaming_auc's variable not yet used in the current scope:
 * streaming_auc, streaming_auc_1, ... */
static void unique_name(gr_dsl_program *p, char *buf, size_t cap) {
  const char *scope = gr_graph_name_scope(p->g);
  for (int k = 0;; k++) {
    char full[600];
    snprintf(buf, cap, k ? "streaming_auc_%d" : "streaming_auc", k);
    snprintf(full, sizeof full, "%s%s%s", scope, *scope ? "/" : "", buf);
    if (!gr_graph_find_node(p->g, full)) return;
  }
}

static gr_output build(gr_graph *g, fn_kind kind, gr_output t, gr_output y, const options *o) {
  switch (kind) {
    case F_BINARY_XENT:
      return gr_binary_crossentropy(g, t, y, o->from_logits, o->reduction);
    case F_CATEGORICAL_XENT:
      return gr_categorical_crossentropy(g, t, y, o->from_logits, o->reduction);
    case F_SPARSE_XENT:
      return gr_sparse_categorical_crossentropy(g, t, y, o->from_logits, o->reduction);
    case F_MSE:
      return gr_mean_squared_error(g, t, y, o->reduction);
    case F_HUBER:
      return gr_huber(g, t, y, o->delta, o->reduction);
    case F_ACCURACY:
      return gr_accuracy(g, t, y);
    case F_BINARY_ACCURACY:
      return gr_binary_accuracy(g, t, y, o->threshold);
    case F_CATEGORICAL_ACCURACY:
      return gr_categorical_accuracy(g, t, y);
    case F_SPARSE_ACCURACY:
      return gr_sparse_categorical_accuracy(g, t, y);
    case F_TOP_K:
      return gr_top_k_categorical_accuracy(g, t, y, o->k);
    case F_SPARSE_TOP_K:
      return gr_sparse_top_k_categorical_accuracy(g, t, y, o->k);
    default:
      return gr_auc(g, t, y, o->num_thresholds, o->from_logits);
  }
}

static gr_status loss_or_metric(const dsl_bargs *a, const char *bound, dsl_value *out) {
  gr_dsl_program *p = a->p;
  const fn_spec *s = &specs[0];
  while (strcmp(s->name, a->fn) != 0) s++;
  const char *params[MAX_PARAMS + 3] = {"y_true", "y_pred"};
  int np = 2;
  for (int j = 0; j < MAX_PARAMS && s->params[j]; j++) params[np++] = s->params[j];
  GR_TRY(dsl_bargs_only_keywords(a, params));
  if (a->npos > np)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[np].pos,
                     "%s takes at most %d arguments, got %d", a->fn, np, a->npos);
  int it = -1, ip = -1;
  GR_TRY(arg_of(a, params, 0, &it));
  GR_TRY(arg_of(a, params, 1, &ip));
  if (it < 0 || ip < 0)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s(y_true, y_pred, ...): missing %s", a->fn, it < 0 ? "y_true" : "y_pred");
  options o = {.reduction = GR_LOSS_SUM_OVER_BATCH_SIZE,
               .delta = 1.0,
               .threshold = 0.5,
               .k = 5,
               .num_thresholds = 200,
               .name = bound};
  for (int j = 2; j < np; j++) {
    int i = -1;
    GR_TRY(arg_of(a, params, j, &i));
    if (i >= 0) GR_TRY(option(a, params[j], i, &o));
  }
  gr_output y, t;
  GR_TRY(dsl_to_tensor(p, &a->v[ip], a->e->call.args[ip].pos, GR_DTYPE_INVALID, &y));
  bool sparse =
      s->kind == F_SPARSE_XENT || s->kind == F_SPARSE_ACCURACY || s->kind == F_SPARSE_TOP_K;
  GR_TRY(dsl_to_tensor(p, &a->v[it], a->e->call.args[it].pos,
                       sparse || !y.node ? GR_I64 : y.node->out_dtypes[y.index], &t));
  dsl_set_loc(p, a->e->pos);
  if (s->kind != F_STREAMING_AUC)
    return dsl_tensor_result(p, a->e->pos, bound, build(p->g, s->kind, t, y, &o), out);
  char buf[64];
  if (!o.name) unique_name(p, buf, sizeof buf), o.name = buf;
  gr_output r[3];
  gr_streaming_auc(p->g, o.name, t, y, o.num_thresholds, o.from_logits, r);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  return dsl_tuple_value(p, r, 3, out);
}

DSL_BUILTIN(loss_or_metric, loss_or_metric(&a, name, out))
