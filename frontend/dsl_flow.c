/* DSL lowering of control flow: `cond(p) { ... } else { ... }` to
 * gr_cond_tuple and `while (v = init, ...; pred) { body }` to gr_while_loop.
 * A block's value is its last expression statement (or `return`): one value,
 * or a tuple `x, y` that gives the cond as many results; names bound inside
 * a branch or a loop body stay inside it. */
#include <stdio.h>
#include <string.h>

#include "dsl_internal.h"

/* Filled in by ops/control_flow.c; weak so the front end reports a clear
 * error in a build without them. */
#pragma weak gr_cond_tuple
#pragma weak gr_while_loop

typedef struct flow_ctx {
  gr_dsl_program *p;
  const dsl_expr *e;
  bool failed;
} flow_ctx;

/* A cond being lowered: what the branch built first gave, to check the
 * other against (the same number of values, each of the same dtype). */
typedef struct cond_ctx {
  gr_dsl_program *p;
  const dsl_expr *e;
  bool failed;
  int n; /* values of the first branch built, 0 before */
  const char *first;
  dsl_pos first_at[GR_COND_MAX_OUTPUTS]; /* where each value is written */
  gr_dtype first_dt[GR_COND_MAX_OUTPUTS];
} cond_ctx;

gr_status dsl_block_value(gr_dsl_program *p, const dsl_block *b, dsl_value *v,
                          const dsl_stmt **last) {
  memset(v, 0, sizeof *v);
  *last = NULL;
  for (int i = 0; i < b->n; i++) {
    const dsl_stmt *s = b->stmts[i];
    if ((s->kind == S_EXPR || s->kind == S_RETURN) && i == b->n - 1) {
      *last = s;
      return dsl_eval(p, s->expr, NULL, v);
    }
    GR_TRY(dsl_lower_stmt(p, s));
  }
  return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, b->open,
                   "this block has no value: end it with an expression");
}

/* The tensors of a branch's value v (one, or each of a tuple) into outs,
 * checked against the branch built first; returns how many. */
static gr_status branch_outputs(cond_ctx *c, const char *side, dsl_value *v, const dsl_stmt *last,
                                gr_output *outs, int max, int *n) {
  gr_dsl_program *p = c->p;
  const dsl_expr *x = last->expr;
  bool tuple = v->kind == V_TUPLE;
  *n = tuple ? v->list.n : 1;
  if (!tuple && v->kind == V_LIST && !v->has_t)
    for (int i = 0; i < v->list.n; i++)
      if (v->list.items[i].has_t)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, x->pos,
                         "a branch's value is a tensor or several separated by ',' (x, y), "
                         "not a list of tensors");
  if (*n > max)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, x->pos, "a cond gives at most %d values, not %d",
                     max, *n);
  if (c->n && *n != c->n) {
    dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, x->pos,
              "the %s branch gives %d value%s but the %s branch gives %d", side, *n,
              *n == 1 ? "" : "s", c->first, c->n);
    char note[64];
    snprintf(note, sizeof note, "the %s branch's value%s", c->first, c->n == 1 ? "" : "s");
    dsl_error_note(p->err, c->first_at[0], note);
    return GR_ERR_INVALID_ARGUMENT;
  }
  for (int i = 0; i < *n; i++) {
    dsl_pos at = x->kind == E_TUPLE && i < x->list.n ? x->list.items[i]->pos : x->pos;
    GR_TRY(dsl_to_tensor(p, tuple ? &v->list.items[i] : v, at, GR_DTYPE_INVALID, &outs[i]));
    gr_dtype dt = outs[i].node->out_dtypes[outs[i].index];
    if (!c->n) {
      c->first_at[i] = at;
      c->first_dt[i] = dt;
    } else if (dt != c->first_dt[i]) {
      char what[32] = "", note[96];
      if (*n > 1) snprintf(what, sizeof what, " %d", i + 1);
      dsl_error(p->err, GR_ERR_DTYPE, at,
                "value%s of the cond is %s in the %s branch but %s in the %s branch (convert one, "
                "e.g. cast(..., %s), or write the literal as const(..., %s))",
                what, gr_dtype_name(dt), side, gr_dtype_name(c->first_dt[i]), c->first,
                gr_dtype_name(dt), gr_dtype_name(dt));
      snprintf(note, sizeof note, "the %s branch's value%s", c->first, what);
      dsl_error_note(p->err, c->first_at[i], note);
      return GR_ERR_DTYPE;
    }
  }
  if (!c->n) c->first = side, c->n = *n;
  return GR_OK;
}

/* One branch, in a new frame (a child of the current one): names bound
 * inside stay inside. Returns the number of outputs, 0 after an error. */
static int branch(cond_ctx *c, const dsl_block *b, const char *side, gr_output *outs, int max) {
  if (c->failed) return 0;
  dsl_frame frame, *saved = c->p->frame;
  if (!dsl_frame_init(&frame, 16, saved, &c->p->temp)) {
    gr_error_set_oom(c->p->err);
    c->failed = true;
    return 0;
  }
  c->p->frame = &frame;
  int nfresh = c->p->nfresh;
  dsl_value v;
  const dsl_stmt *last;
  int n = 0;
  if (dsl_block_value(c->p, b, &v, &last) != GR_OK ||
      branch_outputs(c, side, &v, last, outs, max, &n) != GR_OK)
    c->failed = true;
  c->p->frame = saved;
  /* a variable read in a control_dependencies block made in this branch is
   * dead in the other one: the other branch and what follows read anew */
  c->p->nfresh = nfresh;
  dsl_frame_free(&frame);
  return c->failed ? 0 : n;
}

static int then_fn(gr_graph *g, void *arg, gr_output *outs, int max) {
  cond_ctx *c = arg;
  (void)g;
  return branch(c, &c->e->cond.then_block, "then", outs, max);
}
static int else_fn(gr_graph *g, void *arg, gr_output *outs, int max) {
  cond_ctx *c = arg;
  (void)g;
  return branch(c, &c->e->cond.else_block, "else", outs, max);
}

gr_status dsl_lower_cond(gr_dsl_program *p, const dsl_expr *e, dsl_value *out) {
  if (!gr_cond_tuple)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, e->pos, "'cond' is not available in this build");
  dsl_value pv;
  gr_output pred;
  GR_TRY(dsl_eval(p, e->cond.pred, NULL, &pv));
  GR_TRY(dsl_to_tensor_like(p, &pv, e->cond.pred->pos, GR_BOOL, "the condition", NULL, &pred));
  cond_ctx *c = dsl_alloc(&p->temp, sizeof *c);
  gr_output *o = dsl_alloc(&p->temp, sizeof(gr_output) * GR_COND_MAX_OUTPUTS);
  if (!c || !o) return gr_error_set_oom(p->err);
  c->p = p;
  c->e = e;
  int n = 0;
  dsl_set_loc(p, e->pos);
  gr_status st = gr_cond_tuple(p->g, pred, then_fn, else_fn, c, &n, o);
  if (c->failed) return p->err->code;
  if (st != GR_OK || gr_graph_error(p->g)) return dsl_check_graph(p, e->pos);
  return dsl_tensors_value(p, o, n, out);
}

/* A frame binding the loop variables to vars. */
static bool bind_vars(flow_ctx *c, dsl_frame *f, const gr_output *vars) {
  if (!dsl_frame_init(f, 16, c->p->frame, &c->p->temp)) return false;
  for (int k = 0; k < c->e->loop.nvars; k++) {
    dsl_binding *b = dsl_frame_insert(f, c->e->loop.vars[k].name);
    if (!b) return false;
    dsl_tensor_value(&b->v, vars[k]);
    b->pos = c->e->loop.vars[k].pos;
  }
  return true;
}

static gr_output cond_fn(gr_graph *g, void *arg, const gr_output *vars) {
  (void)g;
  flow_ctx *c = arg;
  gr_output r = {NULL, 0};
  dsl_frame f;
  if (c->failed) return r;
  if (!bind_vars(c, &f, vars)) {
    gr_error_set_oom(c->p->err);
    c->failed = true;
  } else {
    dsl_frame *saved = c->p->frame;
    int nfresh = c->p->nfresh;
    c->p->frame = &f;
    dsl_value v;
    if (dsl_eval(c->p, c->e->loop.pred, NULL, &v) != GR_OK ||
        dsl_to_tensor_like(c->p, &v, c->e->loop.pred->pos, GR_BOOL, "the condition", NULL, &r) !=
            GR_OK)
      c->failed = true;
    c->p->frame = saved;
    c->p->nfresh = nfresh; /* reads made in the loop stay in it */
  }
  dsl_frame_free(&f);
  return r;
}

/* The next value of loop variable k, rebound by the body in b: a literal
 * takes the variable's dtype (s = 0 for an i32 s), a tensor must have it. */
static gr_status next_value(flow_ctx *c, int k, const dsl_binding *b, gr_output var,
                            gr_output *next) {
  gr_dtype dt = var.node->out_dtypes[var.index];
  const char *name = c->e->loop.vars[k].name;
  char whose[160];
  snprintf(whose, sizeof whose, "loop variable '%s'", name);
  dsl_value v = b->v;
  if (v.kind == V_NUM || v.kind == V_BOOL || v.kind == V_LIST) v.has_t = false; /* made in dt */
  GR_TRY(dsl_to_tensor_like(c->p, &v, b->pos, dt, whose, NULL, next));
  gr_dtype got = next->node->out_dtypes[next->index];
  if (got == dt) return GR_OK;
  return dsl_error(c->p->err, GR_ERR_DTYPE, b->pos,
                   "loop variable '%s' is %s but the body makes it %s (a loop variable keeps "
                   "its dtype in every iteration: cast the new value, cast(..., %s))",
                   name, gr_dtype_name(dt), gr_dtype_name(got), gr_dtype_name(dt));
}

/* The body sees the loop variables (frame f) and rebinds them in its own
 * frame (body); a variable it does not rebind keeps its value. */
static void body_fn(gr_graph *g, void *arg, const gr_output *vars, gr_output *next) {
  (void)g;
  flow_ctx *c = arg;
  for (int k = 0; k < c->e->loop.nvars; k++) next[k] = (gr_output){NULL, 0};
  if (c->failed) return;
  dsl_frame f, body;
  memset(&body, 0, sizeof body);
  if (!bind_vars(c, &f, vars) || !dsl_frame_init(&body, 16, &f, &c->p->temp)) {
    gr_error_set_oom(c->p->err);
    c->failed = true;
  } else {
    dsl_frame *saved = c->p->frame;
    int nfresh = c->p->nfresh;
    c->p->frame = &body;
    c->p->loop_depth++; /* a layer's first call may not be here (dsl_keras.c) */
    if (dsl_lower_block(c->p, &c->e->loop.body) != GR_OK) c->failed = true;
    c->p->loop_depth--;
    c->p->frame = saved;
    c->p->nfresh = nfresh; /* reads made in the loop stay in it */
    for (int k = 0; k < c->e->loop.nvars && !c->failed; k++) {
      dsl_binding *b = dsl_frame_find_local(&body, c->e->loop.vars[k].name);
      next[k] = vars[k];
      if (b && next_value(c, k, b, vars[k], &next[k]) != GR_OK) c->failed = true;
    }
  }
  dsl_frame_free(&body);
  dsl_frame_free(&f);
}

gr_status dsl_lower_while(gr_dsl_program *p, const dsl_expr *e, dsl_value *out) {
  if (!gr_while_loop)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, e->pos,
                     "'while' is not available in this build");
  int n = e->loop.nvars;
  for (int k = 0; k < n; k++)
    for (int j = 0; j < k; j++)
      if (strcmp(e->loop.vars[k].name, e->loop.vars[j].name) == 0)
        return dsl_error(p->err, GR_ERR_ALREADY_EXISTS, e->loop.vars[k].pos,
                         "loop variable '%s' given twice", e->loop.vars[k].name);
  gr_output *vars = dsl_alloc(&p->temp, sizeof(gr_output) * (size_t)(n + 1));
  if (!vars) return gr_error_set_oom(p->err);
  for (int k = 0; k < n; k++) {
    dsl_value v;
    GR_TRY(dsl_eval(p, e->loop.vars[k].init, NULL, &v));
    GR_TRY(dsl_to_tensor(p, &v, e->loop.vars[k].init->pos, GR_DTYPE_INVALID, &vars[k]));
  }
  flow_ctx c = {p, e, false};
  dsl_set_loc(p, e->pos);
  gr_status st = gr_while_loop(p->g, cond_fn, body_fn, &c, n, vars, 0);
  if (c.failed) return p->err->code;
  if (st != GR_OK || gr_graph_error(p->g)) return dsl_check_graph(p, e->pos);
  return dsl_tensors_value(p, vars, n, out);
}
