/* The gradient of a while loop: a reverse loop that runs as many iterations
 * as the forward one ran, last first. Every forward value the body's
 * gradient reads is pushed on a step-scoped stack in each forward iteration
 * and popped in the matching reverse iteration (a count stack drives the
 * reverse loop's condition). Gradients of loop invariants are summed over
 * the iterations in extra reverse-loop variables.
 *
 * Nested loops: the gradient of the outer body contains the reverse loop of
 * the inner loop, built inside the outer reverse loop's body. The inner
 * loop's stacks are keyed by the outer forward iteration they were pushed
 * in ("outer:3", see stack_ops.c); the outer count stack holds the name of
 * each forward iteration (loop_instance), and the outer reverse iteration
 * that undoes it pops that name and hands it to the inner reverse loop's
 * pops and count as their scope. Values of the outer body that the inner
 * gradient reads come from the outer loop's stacks (remap falls through to
 * the enclosing reverse loop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/autodiff_internal.h"
#include "ops/ops_internal.h"

void ad_loop_free(ad_loop *l) {
  free(l->enter);
  free(l->merge);
  free(l->swtch);
  free(l->exit);
  free(l->body);
  free(l->next);
  free(l->invariant);
  memset(l, 0, sizeof *l);
}

/* The node of the frame list consuming `of` output `idx` as input `slot` with kind `kind`
 * (kind 0: with op definition `op`). */
static gr_node *consumer(gr_node **nodes, int n, const gr_node *of, int idx, int slot,
                         gr_cf_kind kind, const gr_op_def *op) {
  for (int k = 0; k < n; k++) {
    gr_node *c = nodes[k];
    if (slot < c->num_inputs && c->inputs[slot].node == of && c->inputs[slot].index == idx &&
        (kind ? c->op->cf_kind == kind : c->op == op))
      return c;
  }
  return NULL;
}

gr_status ad_loop_find(gr_graph *g, const gr_frames *f, int frame, int total, ad_loop *l) {
  memset(l, 0, sizeof *l);
  l->frame = frame;
  gr_node **nodes = gr_alloc_array((size_t)total + 1, sizeof(gr_node *));
  int nn = 0;
  if (!nodes) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int id = 0; id < total; id++)
    if (f->of_node[id] == frame) nodes[nn++] = gr_graph_node(g, id);
  l->enter = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->merge = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->swtch = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->exit = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->body = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->next = calloc((size_t)nn + 1, sizeof(gr_node *));
  l->invariant = calloc((size_t)nn + 1, sizeof(gr_node *));
  gr_status st = GR_OK;
  if (!l->enter || !l->merge || !l->swtch || !l->exit || !l->body || !l->next || !l->invariant)
    st = gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0; k < nn && st == GR_OK; k++) {
    gr_node *e = nodes[k];
    if (e->op->cf_kind != GR_CF_ENTER) continue;
    if (gr_node_attr_bool(e, "is_constant", false)) {
      l->invariant[l->m++] = e;
      continue;
    }
    int i = l->n;
    l->enter[i] = e;
    l->merge[i] = consumer(nodes, nn, e, 0, 0, GR_CF_MERGE, NULL);
    l->swtch[i] = l->merge[i] ? consumer(nodes, nn, l->merge[i], 0, 0, GR_CF_SWITCH, NULL) : NULL;
    l->exit[i] = l->swtch[i] ? consumer(nodes, nn, l->swtch[i], 0, 0, GR_CF_EXIT, NULL) : NULL;
    l->body[i] = l->swtch[i] ? consumer(nodes, nn, l->swtch[i], 1, 0, 0, &gr_op_identity) : NULL;
    l->next[i] = l->merge[i] && l->merge[i]->num_inputs == 2 ? l->merge[i]->inputs[1].node : NULL;
    if (!l->exit[i] || !l->body[i] || !l->next[i] ||
        l->next[i]->op->cf_kind != GR_CF_NEXT_ITERATION)
      st = gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                               "gradients: loop '%s' is not shaped as gr_while_loop builds loops "
                               "(enter '%s'); cannot differentiate it",
                               f->frames[frame].name, e->name);
    l->n++;
  }
  if (st == GR_OK && l->n == 0)
    st = gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED, "gradients: loop '%s' has no loop variables",
                             f->frames[frame].name);
  free(nodes);
  if (st != GR_OK) ad_loop_free(l);
  return st;
}

/* ---- the reverse loop ------------------------------------------------------------------- */

typedef struct rev {
  gr_graph *g;
  const gr_frames *fr;
  const ad_loop *loop;
  const ad_reverse *outer; /* the enclosing reverse loop, or NULL */
  int total;               /* nodes that existed when the frames were computed */
  int nf;                  /* float loop variables */
  int *fvar;               /* their indices */
  int nw;                  /* invariants that want a gradient */
  int *winv;               /* their indices */
  char count_stack[256];
  /* in the reverse body: the name of the forward iteration it undoes (the
   * count pop, live exactly when the body is); the other pops run after it */
  gr_output name;
  gr_output *fwd, *pop; /* forward value -> its pop in the reverse loop */
  int nmap, capmap;
  gr_node **pops;
  int npops, cappops;
  int serial;
} rev;

static bool add_pop(rev *r, gr_node *p) {
  if (r->npops == r->cappops) {
    int cap = r->cappops ? r->cappops * 2 : 8;
    gr_node **v = gr_realloc_array(r->pops, (size_t)cap, sizeof *v);
    if (!v) return false;
    r->pops = v;
    r->cappops = cap;
  }
  r->pops[r->npops++] = p;
  return true;
}

/* A pop from stack `stack` in the reverse body (pop), or its size in the
 * reverse condition, after `after` (the body's pivot or count pop, or a
 * merge for the condition), in the forward iteration that the enclosing
 * reverse loop undoes (its scope). No control inputs: built while a nested
 * reverse loop is being built, the node stays in this loop's frame (it
 * depends on nothing of the nested loop). */
static gr_output stack_read(rev *r, bool pop, const char *stack, gr_output after, gr_dtype dtype,
                            gr_shape shape) {
  gr_graph *g = r->g;
  gr_attr qa[] = {gr_attr_string("stack", stack), gr_attr_dtype("dtype", dtype),
                  gr_attr_shape("shape", shape)};
  gr_output in[2] = {after, r->outer ? r->outer->scope : (gr_output){NULL, 0}};
  gr_graph_push_no_control_deps(g);
  gr_output o =
      gr_op(g, pop ? "stack_pop" : "stack_size", NULL, in, in[1].node ? 2 : 1, qa, pop ? 3 : 1);
  gr_graph_pop_control_deps(g);
  if (o.node && pop && !add_pop(r, o.node)) {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return (gr_output){NULL, 0};
  }
  return o;
}

/* Pushes fwd in every forward iteration (the push gates the loop's
 * next_iteration, so it runs and runs in order) and pops it here. */
static gr_output stack_pair(rev *r, gr_output fwd, const char *stack) {
  gr_graph *g = r->g;
  gr_attr pa = gr_attr_string("stack", stack);
  gr_graph_push_no_control_deps(g);
  /* the body's pivot tells a dead value in a branch not taken (pushed as
   * dead) from an iteration that did not run (nothing pushed) */
  gr_output in[2] = {fwd, {r->loop->body[0], 0}};
  gr_output push = gr_op(g, "stack_push", NULL, in, fwd.node == r->loop->body[0] ? 1 : 2, &pa, 1);
  gr_graph_pop_control_deps(g);
  if (!push.node || gr_graph_add_control_input(g, r->loop->next[0], push.node) != GR_OK)
    return (gr_output){NULL, 0};
  return stack_read(r, true, stack, r->name, fwd.node->out_dtypes[fwd.index],
                    fwd.node->out_shapes[fwd.index]);
}

/* A forward value outside this loop: the enclosing reverse loop's pop of
 * it, or the value itself at the level where the gradient runs. */
static gr_output outer_value(const rev *r, gr_output fwd) {
  return r->outer ? r->outer->remap(r->outer->arg, fwd) : fwd;
}

static gr_output remap(void *arg, gr_output fwd) {
  rev *r = arg;
  gr_node *n = fwd.node;
  if (!n || n->id >= r->total) return fwd; /* built for the gradient */
  if (gr_frames_output_frame(r->fr, n->id) != r->loop->frame) return outer_value(r, fwd);
  if (n->op->cf_kind == GR_CF_ENTER && gr_node_attr_bool(n, "is_constant", false))
    return outer_value(r, n->inputs[0]); /* an invariant: its outside value */
  for (int k = 0; k < r->nmap; k++)
    if (r->fwd[k].node == n && r->fwd[k].index == fwd.index) return r->pop[k];
  if (r->nmap == r->capmap) {
    int cap = r->capmap ? r->capmap * 2 : 8;
    gr_output *a = gr_realloc_array(r->fwd, (size_t)cap, sizeof *a), *b;
    if (!a) return (gr_output){NULL, 0};
    r->fwd = a;
    b = gr_realloc_array(r->pop, (size_t)cap, sizeof *b);
    if (!b) return (gr_output){NULL, 0};
    r->pop = b;
    r->capmap = cap;
  }
  char stack[300];
  snprintf(stack, sizeof stack, "%s/grad_stack_%d", r->fr->frames[r->loop->frame].name,
           r->serial++);
  gr_output p = stack_pair(r, fwd, stack);
  if (!p.node) return p;
  r->fwd[r->nmap] = fwd;
  r->pop[r->nmap++] = p;
  return p;
}

static gr_output rev_cond(gr_graph *g, void *arg, const gr_output *vars) {
  rev *r = arg;
  gr_output size = stack_read(r, false, r->count_stack, vars[0], GR_I64, gr_shape_scalar());
  return gr_greater(g, size, gr_const_i64(g, 0));
}

static void rev_body(gr_graph *g, void *arg, const gr_output *vars, gr_output *next) {
  rev *r = arg;
  const ad_loop *l = r->loop;
  int nx = r->nf + r->nw;
  /* this iteration's count pop, after the pivot: the name of the forward
   * iteration it undoes (a few bytes: the value pops wait for it rather
   * than for the pivot, a gradient that may live on another device) */
  gr_output name = stack_read(r, true, r->count_stack, vars[0], GR_U8,
                              (gr_shape){.rank = 1, .dims = {GR_DIM_UNKNOWN}});
  r->name = name;
  ad_reverse self = {remap, r, name};
  gr_output *ys = calloc((size_t)r->nf + 1, sizeof *ys), *xs = calloc((size_t)nx + 1, sizeof *xs);
  gr_output *d = calloc((size_t)nx + 1, sizeof *d);
  if (!ys || !xs || !d) {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (int k = 0; k < r->nf; k++) {
    ys[k] = l->next[r->fvar[k]]->inputs[0]; /* the body's result for variable fvar[k] */
    xs[k] = (gr_output){l->body[r->fvar[k]], 0};
  }
  for (int k = 0; k < r->nw; k++) xs[r->nf + k] = (gr_output){l->invariant[r->winv[k]], 0};
  if (!name.node || ad_gradients(g, ys, r->nf, xs, nx, vars, true, d, r->fr->frames[l->frame].name,
                                 &self) != GR_OK)
    goto out;
  for (int k = 0; k < r->nf; k++) next[k] = d[k].node ? d[k] : gr_zeros_like(g, vars[k]);
  for (int k = 0; k < r->nw; k++) {
    gr_output dv = d[r->nf + k];
    next[r->nf + k] = dv.node ? gr_add(g, vars[r->nf + k], dv) : vars[r->nf + k];
  }
  /* every pop must happen in every iteration, used or not */
  gr_output *deps = calloc((size_t)r->npops + 1, sizeof *deps);
  if (!deps) goto out;
  for (int k = 0; k < r->npops; k++) deps[k] = (gr_output){r->pops[k], 0};
  gr_graph_push_control_deps(g, deps, r->npops);
  for (int k = 0; k < nx; k++) next[k] = gr_identity(g, next[k]);
  gr_graph_pop_control_deps(g);
  free(deps);
out:
  free(ys);
  free(xs);
  free(d);
}

gr_status ad_while_gradient(gr_graph *g, const gr_frames *f, const ad_loop *l,
                            const gr_output *d_exits, const bool *want_inv, gr_output *d_init,
                            gr_output *d_inv, const ad_reverse *outer) {
  rev r;
  memset(&r, 0, sizeof r);
  r.g = g;
  r.fr = f;
  r.loop = l;
  r.outer = outer;
  r.total = f->num_nodes;
  r.fvar = calloc((size_t)l->n + 1, sizeof(int));
  r.winv = calloc((size_t)l->m + 1, sizeof(int));
  gr_output *vars = calloc((size_t)(l->n + l->m) + 1, sizeof *vars);
  gr_status st = GR_OK;
  if (!r.fvar || !r.winv || !vars) {
    st = gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (int i = 0; i < l->n; i++)
    if (gr_dtype_is_float(l->enter[i]->out_dtypes[0])) r.fvar[r.nf++] = i;
  for (int j = 0; j < l->m; j++)
    if (want_inv[j]) r.winv[r.nw++] = j;
  if (r.nf == 0) goto out; /* nothing differentiable flows around the loop */
  snprintf(r.count_stack, sizeof r.count_stack, "%s/grad_count_%d", f->frames[l->frame].name,
           gr_graph_num_nodes(g));
  r.serial = gr_graph_num_nodes(g);
  /* one count push per forward iteration that ran the body: its name, the
   * scope of the stacks of the loops nested in it */
  gr_attr pa = gr_attr_string("stack", r.count_stack);
  gr_graph_push_no_control_deps(g);
  gr_output b0 = {l->body[0], 0};
  gr_output iname = gr_op(g, "loop_instance", NULL, &b0, 1, NULL, 0);
  gr_output cpush = iname.node ? gr_op(g, "stack_push", NULL, &iname, 1, &pa, 1) : iname;
  gr_graph_pop_control_deps(g);
  if (!cpush.node || gr_graph_add_control_input(g, l->next[0], cpush.node) != GR_OK) {
    st = gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
    goto out;
  }
  for (int k = 0; k < r.nf; k++) {
    int i = r.fvar[k];
    vars[k] = d_exits[i].node ? d_exits[i]
                              : gr_zeros_like(g, outer_value(&r, (gr_output){l->exit[i], 0}));
  }
  for (int k = 0; k < r.nw; k++)
    vars[r.nf + k] = gr_zeros_like(g, outer_value(&r, l->invariant[r.winv[k]]->inputs[0]));
  char scope[300];
  snprintf(scope, sizeof scope, "/gradients/%s_grad", f->frames[l->frame].name);
  gr_graph_push_name_scope(g, scope);
  /* one iteration at a time: pops must follow pushes in reverse order */
  st = gr_while_loop(g, rev_cond, rev_body, &r, r.nf + r.nw, vars, 1);
  gr_graph_pop_name_scope(g);
  if (st != GR_OK) goto out;
  for (int k = 0; k < r.nf; k++) d_init[r.fvar[k]] = vars[k];
  for (int k = 0; k < r.nw; k++) d_inv[r.winv[k]] = vars[r.nf + k];
out:
  free(r.fvar);
  free(r.winv);
  free(r.fwd);
  free(r.pop);
  free(r.pops);
  free(vars);
  return st;
}
