/* The op registry: name -> definition, plus attr lookup helpers and input
 * checks shared by shape functions and kernels. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_graph.h"
#include "core/gr_op.h"
#include "core/map.h"
#include "core/transfer_internal.h"

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static gr_map registry;
static const gr_op_def **sorted;
static int num_sorted, cap_sorted;
static gr_map added_gradients; /* op pointer -> gradient function (core's own ops) */

static gr_status add_op(const gr_op_def *op, gr_error *err) {
  pthread_mutex_lock(&registry_mu);
  const gr_op_def *old = gr_map_get_str(&registry, op->name);
  gr_status s = GR_OK;
  if (old && old != op) {
    s = gr_error_set(err, GR_ERR_ALREADY_EXISTS, "op '%s' is already registered", op->name);
  } else if (!old) {
    if (num_sorted == cap_sorted) {
      int cap = cap_sorted ? cap_sorted * 2 : 128;
      const gr_op_def **p = gr_realloc_array(sorted, (size_t)cap, sizeof *p);
      if (!p) {
        pthread_mutex_unlock(&registry_mu);
        return gr_error_set_oom(err);
      }
      sorted = p;
      cap_sorted = cap;
    }
    if (!gr_map_put_str(&registry, op->name, (void *)op)) {
      pthread_mutex_unlock(&registry_mu);
      return gr_error_set_oom(err);
    }
    int i = num_sorted++;
    while (i > 0 && strcmp(sorted[i - 1]->name, op->name) > 0) {
      sorted[i] = sorted[i - 1];
      i--;
    }
    sorted[i] = op;
  }
  pthread_mutex_unlock(&registry_mu);
  return s;
}

/* core's own ops (the transfer ops of the partitioner, const, identity and
 * the control-flow primitives) are always there */
static pthread_once_t core_once = PTHREAD_ONCE_INIT;
static void register_core_ops(void) {
  static const gr_op_def *const core_ops[] = {
      &gr_op__send, &gr_op__recv, &gr_op_const,          &gr_op_identity,  &gr_op_switch,
      &gr_op_merge, &gr_op_enter, &gr_op_next_iteration, &gr_op_loop_cond, &gr_op_exit};
  gr_map_init(&added_gradients, GR_MAP_U64);
  for (size_t i = 0; i < sizeof core_ops / sizeof core_ops[0]; i++) {
    gr_error err;
    if (add_op(core_ops[i], &err) != GR_OK) gr_assert_fail(err.msg, __FILE__, __LINE__);
  }
}

gr_status gr_op_registry_add(const gr_op_def *op, gr_error *err) {
  pthread_once(&core_once, register_core_ops);
  return add_op(op, err);
}

const gr_op_def *gr_op_registry_find(const char *name) {
  pthread_once(&core_once, register_core_ops);
  if (!name) return NULL;
  pthread_mutex_lock(&registry_mu);
  const gr_op_def *op = gr_map_get_str(&registry, name);
  pthread_mutex_unlock(&registry_mu);
  return op;
}

int gr_op_registry_count(void) {
  pthread_once(&core_once, register_core_ops);
  return num_sorted;
}
const gr_op_def *gr_op_registry_at(int i) {
  pthread_once(&core_once, register_core_ops);
  return i >= 0 && i < num_sorted ? sorted[i] : NULL;
}

gr_status gr_op_registry_add_gradient(const gr_op_def *op, gr_grad_fn fn, gr_error *err) {
  pthread_once(&core_once, register_core_ops);
  gr_status s = GR_OK;
  pthread_mutex_lock(&registry_mu);
  bool added;
  void **slot = gr_map_slot_u64(&added_gradients, (uint64_t)(uintptr_t)op, &added);
  if (!slot)
    s = gr_error_set_oom(err);
  else if (!added && *slot != (void *)fn)
    s = gr_error_set(err, GR_ERR_ALREADY_EXISTS, "op '%s' already has a gradient", op->name);
  else
    *slot = (void *)fn;
  pthread_mutex_unlock(&registry_mu);
  return s;
}

gr_grad_fn gr_op_registry_find_gradient(const gr_op_def *op) {
  if (op->grad_fn) return op->grad_fn;
  pthread_once(&core_once, register_core_ops);
  pthread_mutex_lock(&registry_mu);
  gr_grad_fn fn = (gr_grad_fn)gr_map_get_u64(&added_gradients, (uint64_t)(uintptr_t)op);
  pthread_mutex_unlock(&registry_mu);
  return fn;
}

gr_op_gradient gr_op_classify_gradient(const gr_op_def *op) {
  if (gr_op_registry_find_gradient(op)) return GR_OP_GRADIENT_DEFINED;
  if (op->flags & GR_OP_NO_GRADIENT) return GR_OP_GRADIENT_STOPS;
  if (op->max_inputs == 0) return GR_OP_GRADIENT_SOURCE;
  return GR_OP_GRADIENT_MISSING;
}

const char *gr_attr_type_name(gr_attr_type t) {
  static const char *const names[] = {
#define GR_X_ATN(e, s) s,
      GR_ATTR_TYPE_LIST(GR_X_ATN)
#undef GR_X_ATN
  };
  return (unsigned)t < GR_ATTR_TYPE_COUNT ? names[t] : "invalid";
}

const gr_attr_value *gr_node_attr(const gr_node *n, const char *name) {
  for (int i = 0; i < n->num_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i].value;
  return NULL;
}

int64_t gr_node_attr_int(const gr_node *n, const char *name, int64_t dflt) {
  const gr_attr_value *v = gr_node_attr(n, name);
  return v && v->type == GR_ATTR_INT ? v->i : dflt;
}
double gr_node_attr_float(const gr_node *n, const char *name, double dflt) {
  const gr_attr_value *v = gr_node_attr(n, name);
  if (v && v->type == GR_ATTR_FLOAT) return v->f;
  if (v && v->type == GR_ATTR_INT) return (double)v->i;
  return dflt;
}
bool gr_node_attr_bool(const gr_node *n, const char *name, bool dflt) {
  const gr_attr_value *v = gr_node_attr(n, name);
  return v && v->type == GR_ATTR_BOOL ? v->b : dflt;
}
const char *gr_node_attr_string(const gr_node *n, const char *name, const char *dflt) {
  const gr_attr_value *v = gr_node_attr(n, name);
  return v && v->type == GR_ATTR_STRING ? v->s : dflt;
}
gr_dtype gr_node_attr_dtype(const gr_node *n, const char *name, gr_dtype dflt) {
  const gr_attr_value *v = gr_node_attr(n, name);
  return v && v->type == GR_ATTR_DTYPE ? v->dtype : dflt;
}

bool gr_attr_names_variable(const gr_attr *a) {
  return a->value.type == GR_ATTR_STRING &&
         (strcmp(a->name, "var") == 0 || strncmp(a->name, "slot", 4) == 0);
}

gr_status gr_shape_error(gr_shape_ctx *ctx, gr_status code, const char *fmt, ...) {
  char msg[GR_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gr_error_set(ctx->err, code, "node '%s' (op %s): %s", ctx->node->name, ctx->node->op->name,
                      msg);
}

gr_status gr_shape_fn_unchanged(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->in_shapes[0];
  return GR_OK;
}

void gr_cost_fn_free(const gr_node *node, gr_cost *out) {
  out->flops = 0;
  out->bytes = 0;
}

gr_status gr_shape_fn_scalar_none(gr_shape_ctx *ctx) {
  ctx->num_outputs = 0;
  return GR_OK;
}

const char *gr_dtype_mask_str(unsigned mask, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (int t = 0; t < GR_DTYPE_COUNT && n < cap; t++)
    if (mask & GR_DT_BIT(t))
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", gr_dtype_name((gr_dtype)t));
  return buf;
}

static const char *input_name(gr_shape_ctx *ctx, int i, char *buf, size_t cap) {
  const gr_op_def *op = ctx->node->op;
  if (op->input_names && i < (op->min_inputs > 0 ? op->min_inputs : 1))
    snprintf(buf, cap, "input '%s'", op->input_names[i]);
  else if (op->input_names && op->max_inputs < 0)
    snprintf(buf, cap, "input %d ('%s')", i,
             op->input_names[op->min_inputs > 0 ? op->min_inputs - 1 : 0]);
  else
    snprintf(buf, cap, "input %d", i);
  return buf;
}

gr_status gr_shape_check_dtype(gr_shape_ctx *ctx, int i, unsigned mask) {
  if (mask & GR_DT_BIT(ctx->in_dtypes[i])) return GR_OK;
  char want[128], nm[96];
  return gr_shape_error(ctx, GR_ERR_DTYPE, "%s has dtype %s; expected one of %s",
                        input_name(ctx, i, nm, sizeof nm), gr_dtype_name(ctx->in_dtypes[i]),
                        gr_dtype_mask_str(mask, want, sizeof want));
}

gr_status gr_shape_check_same_dtype(gr_shape_ctx *ctx, int i, int j) {
  if (ctx->in_dtypes[i] == ctx->in_dtypes[j]) return GR_OK;
  char a[96], b[96];
  return gr_shape_error(ctx, GR_ERR_DTYPE, "%s is %s but %s is %s (cast one of them)",
                        input_name(ctx, i, a, sizeof a), gr_dtype_name(ctx->in_dtypes[i]),
                        input_name(ctx, j, b, sizeof b), gr_dtype_name(ctx->in_dtypes[j]));
}

gr_status gr_shape_check_rank(gr_shape_ctx *ctx, int i, int rank) {
  const gr_shape *s = &ctx->in_shapes[i];
  char nm[96], sb[GR_SHAPE_STR_MAX];
  if (s->rank < 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "%s needs a known rank",
                          input_name(ctx, i, nm, sizeof nm));
  if (rank >= 0 && s->rank != rank)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "%s must have rank %d, got shape %s",
                          input_name(ctx, i, nm, sizeof nm), rank, gr_shape_str(s, sb));
  return GR_OK;
}
