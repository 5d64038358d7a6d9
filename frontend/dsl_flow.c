/* DSL lowering of control flow: `cond(p) { ... } else { ... }` to gr_cond and
 * `while (v = init, ...; pred) { body }` to gr_while_loop. A block's value is
 * its last expression statement (or `return`); names bound inside a branch or
 * a loop body stay inside it. */
#include <stdio.h>
#include <string.h>

#include "dsl_internal.h"

/* Filled in by ops/control_flow.c; weak so the front end reports a clear
 * error in a build without them. */
#pragma weak gr_cond
#pragma weak gr_while_loop

typedef struct flow_ctx {
  gr_dsl_program *p;
  const dsl_expr *e;
  bool failed;
} flow_ctx;

/* Lowers a block in a new frame (child of the current one) and returns the
 * value of its last expression statement as a tensor in *out. */
static gr_status block_value(gr_dsl_program *p, const dsl_block *b, dsl_frame *frame,
                             gr_output *out) {
  dsl_frame *saved = p->frame;
  p->frame = frame;
  gr_status st = GR_OK;
  dsl_value v;
  memset(&v, 0, sizeof v);
  bool have = false;
  for (int i = 0; i < b->n && st == GR_OK; i++) {
    const dsl_stmt *s = b->stmts[i];
    if ((s->kind == S_EXPR || s->kind == S_RETURN) && i == b->n - 1) {
      st = dsl_eval(p, s->expr, NULL, &v);
      have = true;
    } else {
      st = dsl_lower_stmt(p, s);
    }
  }
  if (st == GR_OK && !have)
    st = dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, b->open,
                   "this block has no value: end it with an expression");
  if (st == GR_OK)
    st = dsl_to_tensor(p, &v, b->n ? b->stmts[b->n - 1]->pos : b->open, GR_DTYPE_INVALID, out);
  p->frame = saved;
  return st;
}

static void branch(gr_graph *g, flow_ctx *c, const dsl_block *b, gr_output *outs) {
  (void)g;
  outs[0] = (gr_output){NULL, 0};
  if (c->failed) return;
  dsl_frame frame;
  if (!dsl_frame_init(&frame, 16, c->p->frame, &c->p->temp)) {
    gr_error_set(c->p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    c->failed = true;
    return;
  }
  if (block_value(c->p, b, &frame, &outs[0]) != GR_OK) c->failed = true;
  dsl_frame_free(&frame);
}

static void then_fn(gr_graph *g, void *arg, gr_output *outs) {
  flow_ctx *c = arg;
  branch(g, c, &c->e->cond.then_block, outs);
}
static void else_fn(gr_graph *g, void *arg, gr_output *outs) {
  flow_ctx *c = arg;
  branch(g, c, &c->e->cond.else_block, outs);
}

gr_status dsl_lower_cond(gr_dsl_program *p, const dsl_expr *e, dsl_value *out) {
  if (!gr_cond)
    return dsl_error(p->err, GR_ERR_UNIMPLEMENTED, e->pos, "'cond' is not available in this build");
  dsl_value pv;
  gr_output pred;
  GR_TRY(dsl_eval(p, e->cond.pred, NULL, &pv));
  GR_TRY(dsl_to_tensor_like(p, &pv, e->cond.pred->pos, GR_BOOL, "the condition", NULL, &pred));
  flow_ctx c = {p, e, false};
  gr_output o;
  dsl_set_loc(p, e->pos);
  gr_status st = gr_cond(p->g, pred, then_fn, else_fn, &c, 1, &o);
  if (c.failed) return p->err->code;
  if (st != GR_OK || gr_graph_error(p->g)) return dsl_check_graph(p, e->pos);
  memset(out, 0, sizeof *out);
  out->kind = V_TENSOR;
  out->has_t = true;
  out->t = o;
  return GR_OK;
}

/* A frame binding the loop variables to vars. */
static bool bind_vars(flow_ctx *c, dsl_frame *f, const gr_output *vars) {
  if (!dsl_frame_init(f, 16, c->p->frame, &c->p->temp)) return false;
  for (int k = 0; k < c->e->loop.nvars; k++) {
    dsl_binding *b = dsl_frame_insert(f, c->e->loop.vars[k].name);
    if (!b) return false;
    b->v.kind = V_TENSOR;
    b->v.has_t = true;
    b->v.t = vars[k];
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
    gr_error_set(c->p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    c->failed = true;
  } else {
    dsl_frame *saved = c->p->frame;
    c->p->frame = &f;
    dsl_value v;
    if (dsl_eval(c->p, c->e->loop.pred, NULL, &v) != GR_OK ||
        dsl_to_tensor_like(c->p, &v, c->e->loop.pred->pos, GR_BOOL, "the condition", NULL, &r) !=
            GR_OK)
      c->failed = true;
    c->p->frame = saved;
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
    gr_error_set(c->p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    c->failed = true;
  } else {
    dsl_frame *saved = c->p->frame;
    c->p->frame = &body;
    if (dsl_lower_block(c->p, &c->e->loop.body) != GR_OK) c->failed = true;
    c->p->frame = saved;
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
  if (!vars) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
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
  memset(out, 0, sizeof *out);
  if (n == 1) {
    out->kind = V_TENSOR;
    out->has_t = true;
    out->t = vars[0];
    return GR_OK;
  }
  out->kind = V_TUPLE;
  out->list.n = n;
  out->list.items = dsl_alloc(&p->temp, sizeof(dsl_value) * (size_t)(n + 1));
  if (!out->list.items) return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0; k < n; k++) {
    out->list.items[k].kind = V_TENSOR;
    out->list.items[k].has_t = true;
    out->list.items[k].t = vars[k];
  }
  return GR_OK;
}
