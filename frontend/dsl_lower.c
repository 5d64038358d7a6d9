/* DSL lowering: statements and expressions to builder calls. Values are
 * tensors (graph outputs) or compile-time values (numbers, strings, dtypes,
 * shapes, lists); a compile-time number becomes a constant node where a
 * tensor is needed. Calls are in dsl_call.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

/* ---- frames: maps of bindings ------------------------------------------------------ */

bool dsl_frame_init(dsl_frame *f, size_t cap, dsl_frame *parent, dsl_arena *arena) {
  f->parent = parent;
  f->arena = arena;
  f->count = 0;
  f->cap = cap;
  gr_idmap_init(&f->index);
  f->list = gr_alloc_array(cap, sizeof *f->list);
  if (f->list && gr_idmap_reserve(&f->index, cap)) return true;
  dsl_frame_free(f); /* nothing half made for the caller to free */
  return false;
}

void dsl_frame_free(dsl_frame *f) {
  gr_idmap_free(&f->index);
  free(f->list);
  f->list = NULL;
  f->count = f->cap = 0;
}

static bool same_name(const void *ctx, uint32_t id, const void *key) {
  const dsl_frame *f = ctx;
  return strcmp(f->list[id]->name, key) == 0;
}

static dsl_binding *find(const dsl_frame *f, const char *name, uint64_t h) {
  int64_t id = gr_idmap_find(&f->index, h, name, same_name, f);
  return id < 0 ? NULL : f->list[id];
}

dsl_binding *dsl_frame_find_local(const dsl_frame *f, const char *name) {
  return find(f, name, gr_map_hash_str(name));
}

dsl_binding *dsl_frame_lookup(const dsl_frame *f, const char *name) {
  uint64_t h = gr_map_hash_str(name);
  for (; f; f = f->parent) {
    dsl_binding *b = find(f, name, h);
    if (b) return b;
  }
  return NULL;
}

/* A new binding for name (the caller checked it is not there); NULL if out of memory. */
dsl_binding *dsl_frame_insert(dsl_frame *f, const char *name) {
  if (f->count == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 16;
    dsl_binding **list = gr_realloc_array(f->list, cap, sizeof *list);
    if (!list) return NULL;
    f->list = list;
    f->cap = cap;
  }
  dsl_binding *b = dsl_alloc_aligned(f->arena, sizeof *b, _Alignof(dsl_binding));
  if (!b || f->count >= UINT32_MAX ||
      !gr_idmap_insert(&f->index, gr_map_hash_str(name), (uint32_t)f->count))
    return NULL;
  b->name = name;
  f->list[f->count++] = b;
  return b;
}

/* ---- positions and graph errors --------------------------------------------------- */

static char *put_int(char *d, int v) {
  char tmp[16];
  int n = 0;
  unsigned u = v < 0 ? 0u : (unsigned)v;
  do tmp[n++] = (char)('0' + u % 10);
  while ((u /= 10) && n < 15);
  while (n) *d++ = tmp[--n];
  return d;
}

/* "file:line:col" without printf: this runs once per node. */
void dsl_set_loc(gr_dsl_program *p, dsl_pos pos) {
  const char *name = pos.src ? pos.src->name : "<input>";
  size_t ln = strlen(name);
  if (ln > sizeof p->loc - 32) ln = sizeof p->loc - 32;
  memcpy(p->loc, name, ln);
  char *d = p->loc + ln;
  *d++ = ':';
  d = put_int(d, pos.line);
  *d++ = ':';
  d = put_int(d, pos.col);
  *d = '\0';
  gr_graph_set_source_loc(p->g, p->loc);
}

gr_status dsl_check_graph(gr_dsl_program *p, dsl_pos pos) {
  const gr_error *ge = gr_graph_error(p->g);
  if (!ge) return GR_OK;
  const char *m = ge->msg;
  size_t ll = strlen(p->loc);
  if (strncmp(m, p->loc, ll) == 0 && m[ll] == ':') m += ll + 1;
  while (*m == ' ') m++;
  return dsl_error(p->err, ge->code, pos, "%s", m);
}

const char *dsl_vkind_name(dsl_vkind k) {
  static const char *names[] = {"nothing", "tensor", "number", "string", "bool",
                                "dtype",   "list",   "'?'",    "tuple",  "optimizer"};
  return k >= 0 && k <= V_OPTIMIZER ? names[k] : "?";
}

/* ---- expressions ------------------------------------------------------------------- */

static const char *binary_op_name(dsl_tok op) {
  switch (op) {
    case T_PLUS:
      return "add";
    case T_MINUS:
      return "sub";
    case T_STAR:
      return "mul";
    case T_SLASH:
      return "div";
    case T_AT:
      return "matmul";
    case T_POW:
      return "pow";
    case T_EQ:
      return "equal";
    case T_NE:
      return "not_equal";
    case T_LT:
      return "less";
    case T_LE:
      return "less_equal";
    case T_GT:
      return "greater";
    case T_GE:
      return "greater_equal";
    case T_AND:
      return "logical_and";
    case T_OR:
      return "logical_or";
    default:
      return NULL;
  }
}

/* x op y for integers, exactly; false on int64 overflow. */
static bool fold_ints(dsl_tok op, int64_t x, int64_t y, int64_t *r) {
  if (op == T_PLUS) return !__builtin_add_overflow(x, y, r);
  if (op == T_MINUS) return !__builtin_sub_overflow(x, y, r);
  if (op == T_STAR) return !__builtin_mul_overflow(x, y, r);
  int64_t acc = 1; /* T_POW with y >= 0, by squaring */
  while (y > 0) {
    if ((y & 1) && __builtin_mul_overflow(acc, x, &acc)) return false;
    y >>= 1;
    if (y && __builtin_mul_overflow(x, x, &x)) return false;
  }
  *r = acc;
  return true;
}

/* Folds a op b for compile-time numbers/bools; false when not foldable. */
static bool fold(gr_dsl_program *p, dsl_tok op, const dsl_value *a, const dsl_value *b,
                 dsl_value *r, dsl_pos pos, gr_status *st) {
  *st = GR_OK;
  if (op == T_AND || op == T_OR) {
    if (a->kind != V_BOOL || b->kind != V_BOOL) return false;
    *r = (dsl_value){.kind = V_BOOL, .b = op == T_AND ? (a->b && b->b) : (a->b || b->b)};
    return true;
  }
  if (a->kind != V_NUM || b->kind != V_NUM || op == T_AT) return false;
  double x = a->num.v, y = b->num.v;
  bool ints = a->num.is_int && b->num.is_int;
  memset(r, 0, sizeof *r);
  r->kind = V_NUM;
  if (ints && (op == T_PLUS || op == T_MINUS || op == T_STAR || (op == T_POW && b->num.i >= 0))) {
    if (!fold_ints(op, a->num.i, b->num.i, &r->num.i))
      *st = dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos,
                      "integer overflow in a constant expression (beyond 64 bits)");
    r->num.is_int = true;
    r->num.v = (double)r->num.i;
    return true;
  }
  double v;
  switch (op) {
    case T_PLUS:
      v = x + y;
      break;
    case T_MINUS:
      v = x - y;
      break;
    case T_STAR:
      v = x * y;
      break;
    case T_SLASH: /* true division, as in Python 3 and NumPy: 1 / 255 is not 0 */
      if (y == 0) {
        *st = dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos, "division by zero in a constant");
        return true;
      }
      v = x / y;
      break;
    case T_POW:
      v = pow(x, y); /* floats, or an integer to a negative power */
      break;
    case T_EQ:
    case T_NE:
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
      if (ints) x = (double)(a->num.i > b->num.i) - (double)(a->num.i < b->num.i), y = 0;
      bool c = op == T_EQ   ? x == y
               : op == T_NE ? x != y
               : op == T_LT ? x < y
               : op == T_LE ? x <= y
               : op == T_GT ? x > y
                            : x >= y;
      *r = (dsl_value){.kind = V_BOOL, .b = c};
      return true;
    }
    default:
      return false;
  }
  r->num.v = v; /* a float: integer + - * ** were folded exactly above */
  return true;
}

/* What a literal operand of e meets, for messages: the other operand by
 * name ("'x'") when it is one, and for a number a rewrite that keeps its
 * value ("cast(x, f32) * 0.9"). lit is the literal's side (0: left, 1: right). */
static void describe_other(const dsl_expr *e, int lit, const dsl_value *v, char *whose, size_t wcap,
                           char *fix, size_t fcap) {
  const dsl_expr *other = lit ? e->bin.a : e->bin.b;
  bool named = other->kind == E_IDENT;
  if (named)
    snprintf(whose, wcap, "'%s'", other->str);
  else
    snprintf(whose, wcap, "the other operand");
  if (v->kind != V_NUM) return;
  char text[64], num[40];
  if (named)
    snprintf(text, sizeof text, "%s", other->str);
  else if (!(lit && dsl_source_text(other->pos, e->pos, text, sizeof text)))
    snprintf(text, sizeof text, "...");
  dsl_format_number(v, num, sizeof num);
  const char *op = dsl_tok_name(e->bin.op); /* "'*'" */
  int oplen = (int)strlen(op) - 2;
  if (lit)
    snprintf(fix, fcap, "cast(%s, f32) %.*s %s", text, oplen, op + 1, num);
  else
    snprintf(fix, fcap, "%s %.*s cast(%s, f32)", num, oplen, op + 1, text);
}

/* a op b with both sides evaluated: folded when both are compile-time
 * values, else a node; a literal takes the dtype of the tensor it meets. */
static gr_status apply_binary(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *a,
                              dsl_value *b, dsl_value *out) {
  dsl_value folded;
  gr_status st;
  bool did_fold = fold(p, e->bin.op, a, b, &folded, e->pos, &st);
  if (st != GR_OK) return st;
  if (did_fold && !a->has_t && !b->has_t) {
    *out = folded;
    return GR_OK;
  }
  gr_output in[2];
  dsl_value *side[2] = {a, b};
  const dsl_expr *expr[2] = {e->bin.a, e->bin.b};
  for (int k = 0; k < 2; k++) {
    gr_dtype dt = dsl_dtype_of(side[1 - k]);
    char whose[96] = "", fix[160] = "";
    if (!side[k]->has_t && dt != GR_DTYPE_INVALID)
      describe_other(e, k, side[k], whose, sizeof whose, fix, sizeof fix);
    GR_TRY(dsl_to_tensor_like(p, side[k], expr[k]->pos, dt, whose[0] ? whose : NULL,
                              fix[0] ? fix : NULL, &in[k]));
  }
  dsl_set_loc(p, e->pos);
  gr_output o = gr_op(p->g, binary_op_name(e->bin.op), name, in, 2, NULL, 0);
  GR_TRY(dsl_check_graph(p, e->pos));
  if (did_fold)
    *out = folded;
  else
    memset(out, 0, sizeof *out), out->kind = V_TENSOR;
  out->has_t = true;
  out->t = o;
  return GR_OK;
}

/* a op b op c ... parses as a tree leaning left: its left spine is walked
 * with a loop (operands in source order), so a flat chain of any length is
 * not nesting. */
static gr_status eval_binary(gr_dsl_program *p, const dsl_expr *e, const char *name,
                             dsl_value *out) {
  const dsl_expr *few[16] = {0}, **spine = few;
  int n = 0;
  for (const dsl_expr *q = e; q->kind == E_BINARY; q = q->bin.a) n++;
  if (n > 16 && !(spine = dsl_alloc(&p->temp, sizeof *spine * (size_t)n)))
    return gr_error_set_oom(p->err);
  int k = n;
  for (const dsl_expr *q = e; q->kind == E_BINARY; q = q->bin.a) spine[--k] = q;
  dsl_value acc;
  GR_TRY(dsl_eval(p, spine[0]->bin.a, NULL, &acc));
  for (k = 0; k < n; k++) {
    dsl_value b;
    GR_TRY(dsl_eval(p, spine[k]->bin.b, NULL, &b));
    GR_TRY(apply_binary(p, spine[k], k == n - 1 ? name : NULL, &acc, &b, &acc));
  }
  *out = acc;
  return GR_OK;
}

static gr_status eval_unary(gr_dsl_program *p, const dsl_expr *e, const char *name,
                            dsl_value *out) {
  dsl_value a;
  GR_TRY(dsl_eval(p, e->bin.a, NULL, &a));
  if (e->bin.op == T_PLUS) {
    if (a.kind != V_NUM && !a.has_t)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "unary '+' of a %s",
                       dsl_vkind_name(a.kind));
    *out = a;
    return GR_OK;
  }
  bool neg = e->bin.op == T_MINUS;
  if (!a.has_t) {
    if (neg && a.kind == V_NUM) {
      *out = a;
      out->num.v = -a.num.v;
      out->num.i = -a.num.i;
      return GR_OK;
    }
    if (!neg && a.kind == V_BOOL) {
      *out = a;
      out->b = !a.b;
      return GR_OK;
    }
  }
  gr_output x;
  GR_TRY(dsl_to_tensor(p, &a, e->bin.a->pos, GR_DTYPE_INVALID, &x));
  dsl_set_loc(p, e->pos);
  gr_output o = gr_op(p->g, neg ? "neg" : "logical_not", name, &x, 1, NULL, 0);
  GR_TRY(dsl_check_graph(p, e->pos));
  dsl_tensor_value(out, o);
  return GR_OK;
}

/* A variable named inside a control_dependencies block is read after the
 * block's dependencies (TF's read_value), not at the start of the step:
 * one read per variable and block, so gradients() in the block see the
 * same node as the expressions. */
static gr_status fresh_read(gr_dsl_program *p, const dsl_expr *e, dsl_value *out) {
  for (int k = p->nfresh - 1; k >= 0 && p->fresh[k].depth == p->deps_depth; k--)
    if (p->fresh[k].var == out->t.node) {
      out->t = p->fresh[k].read;
      return GR_OK;
    }
  if (p->nfresh == p->capfresh) {
    int cap = p->capfresh ? p->capfresh * 2 : 8;
    dsl_fresh_read *f = gr_realloc_array(p->fresh, (size_t)cap, sizeof *f);
    if (!f) return dsl_error(p->err, GR_ERR_RESOURCE_EXHAUSTED, e->pos, "out of memory");
    p->fresh = f;
    p->capfresh = cap;
  }
  dsl_set_loc(p, e->pos);
  gr_output r = gr_read_value(p->g, out->t);
  if (!r.node) return dsl_check_graph(p, e->pos);
  p->fresh[p->nfresh++] = (dsl_fresh_read){p->deps_depth, out->t.node, r};
  out->t = r;
  return GR_OK;
}

static gr_status eval_ident(gr_dsl_program *p, const dsl_expr *e, dsl_value *out) {
  dsl_binding *b = dsl_frame_lookup(p->frame, e->str);
  if (b) {
    if (b->def)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos,
                       "'%s' is a def: call it, e.g. %s(...)", e->str, e->str);
    *out = b->v;
    if (p->deps_depth > 0 && out->kind == V_TENSOR && out->has_t &&
        gr_ops_is_variable_read(out->t.node))
      return fresh_read(p, e, out);
    return GR_OK;
  }
  gr_dtype dt;
  if (gr_dtype_from_name(e->str, &dt)) {
    memset(out, 0, sizeof *out);
    out->kind = V_DTYPE;
    out->dtype = dt;
    return GR_OK;
  }
  if (gr_ops_find(e->str))
    return dsl_error(p->err, GR_ERR_NOT_FOUND, e->pos,
                     "undefined name '%s' ('%s' is an op: call it, e.g. %s(...))", e->str, e->str,
                     e->str);
  return dsl_error(p->err, GR_ERR_NOT_FOUND, e->pos, "undefined name '%s'", e->str);
}

static gr_status eval(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out);

gr_status dsl_eval(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out) {
  if (p->eval_depth >= DSL_MAX_EVAL)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, e->pos,
                     "expressions nested too deeply: more than %d levels of nested expressions, "
                     "counting those inside the defs they call",
                     DSL_MAX_EVAL);
  p->eval_depth++;
  gr_status st = eval(p, e, name, out);
  p->eval_depth--;
  return st;
}

static gr_status eval(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out) {
  memset(out, 0, sizeof *out);
  switch (e->kind) {
    case E_NUM:
      out->kind = V_NUM;
      out->num = e->num;
      return GR_OK;
    case E_STR:
      out->kind = V_STR;
      out->str = e->str;
      out->str_src = e->pos.src;
      return GR_OK;
    case E_BOOL:
      out->kind = V_BOOL;
      out->b = e->b;
      return GR_OK;
    case E_UNKNOWN_DIM:
      out->kind = V_UNKNOWN_DIM;
      return GR_OK;
    case E_IDENT:
      return eval_ident(p, e, out);
    case E_LIST:
    case E_TUPLE: {
      out->kind = e->kind == E_LIST ? V_LIST : V_TUPLE;
      out->list.n = e->list.n;
      out->list.items = dsl_alloc(&p->temp, sizeof(dsl_value) * (size_t)(e->list.n + 1));
      if (!out->list.items) return gr_error_set_oom(p->err);
      int64_t leaves = 0;
      for (int i = 0; i < e->list.n; i++) {
        dsl_value *it = &out->list.items[i];
        GR_TRY(dsl_eval(p, e->list.items[i], NULL, it));
        leaves += it->kind == V_LIST || it->kind == V_TUPLE ? it->list.leaves + 1 : 1;
        if (leaves > DSL_MAX_LIST)
          return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, e->pos,
                           "list too large (more than %d elements)", DSL_MAX_LIST);
      }
      out->list.leaves = leaves;
      return GR_OK;
    }
    case E_BINARY:
      return eval_binary(p, e, name, out);
    case E_UNARY:
      return eval_unary(p, e, name, out);
    case E_CALL:
      return dsl_call(p, e, name, out);
    case E_COND:
      return dsl_lower_cond(p, e, out);
    case E_WHILE:
      return dsl_lower_while(p, e, out);
  }
  return gr_error_set(p->err, GR_ERR_INTERNAL, "unknown expression kind");
}
