/* Property test of loops, conds, control dependencies, variables and their
 * gradients (issue 19): random small f64 programs are written as DSL text,
 * run on 1 device and spread over 3 (round-robin), and compared with a plain
 * tree-walking interpreter of the same program; the gradients of the result
 * with respect to every input are compared with central finite differences
 * of that interpreter.
 *
 * A program has 1 to 3 scalar f64 inputs (placeholders), 0 to 2 f64
 * variables, and a sequence of statements: arithmetic (tanh, sigmoid,
 * square, + - *), conds (one or two values, nested), while loops (a counter
 * plus 1 or 2 f64 loop variables; trip counts bounded, fixed, set by an outer
 * counter, or ended early by a float condition; nested up to depth 3; a
 * loop's results feeding later loops), control_dependencies blocks on loop
 * results (out of loops) and on outer values inside loop bodies (into
 * loops), gradients() in loop bodies (with respect to a loop variable, per
 * iteration), and variable updates (assign, assign_add) and reads. Every access
 * to a variable is ordered after the previous ones by control dependencies,
 * as a TensorFlow 1 program must do, so the program has one meaning: the
 * sequential one, which the interpreter computes. parallel_iterations is 10
 * or 1, per loop at random.
 *
 * Reproduce one program: GR_PROP_SEED=<seed> build/tests/unit/test_cf_property
 * (prints the program and its inputs); GR_PROP_REDUCE=<seed> leaves out
 * statements of a failing program while it fails the same way and prints
 * what is left. GR_PROP_N=<n> runs more programs (never fewer than the
 * default), GR_PROP_BASE=<b> another series. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

/* Gradients of a loop that contains another loop: supported (1), so a
 * refusal is a failure; 0 would accept the old refusal ("... contains
 * another loop ... not supported yet"). */
#define NESTED_LOOP_GRADIENTS 1

#define MIN_PROGRAMS 2000
#define MAX_SLOTS    400
#define MAX_IN       3
#define MAX_VARS     2
#define MAX_TOK      8
#define MAX_READS    4096

/* ---- the program ---------------------------------------------------------------------- */

enum { X_CONST, X_SLOT, X_ISLOT, X_VREAD, X_TANH, X_SIGM, X_SQUARE, X_NEG, X_ADD, X_SUB, X_MUL };
typedef struct ex {
  int kind;
  double c;
  int slot; /* X_SLOT, X_ISLOT; X_VREAD: the variable */
  struct ex *a, *b;
} ex;

enum { P_FGT, P_FLT, P_ILT };
typedef struct pred {
  int kind, a, b; /* slots */
  double c;       /* P_FGT: a > c; P_FLT: a < b; P_ILT: a < (int)c */
} pred;

enum { S_LET, S_UPDATE, S_COND, S_LOOP, S_DEPS, S_GRAD };
typedef struct st st;
typedef struct blk {
  st **s;
  int n, cap;
} blk;
struct st {
  int kind;
  bool skip; /* left out (GR_PROP_REDUCE) */
  int dst;   /* S_LET: slot written; S_UPDATE: the token slot */
  ex *e;     /* S_LET, S_UPDATE: the value; S_GRAD: d e / d slot wrt */
  int wrt;
  int var, add;
  /* S_COND */
  pred p;
  blk then_b, else_b;
  ex *then_v[2], *else_v[2];
  int nout, outs[2];
  /* S_LOOP: counter ctr < limit (a constant, or an outer counter + lim_k),
   * and, when fcap_slot >= 0, while that loop variable < fcap */
  int ctr, ctr_pos, lim_slot, lim_k, fcap_slot; /* ctr_pos: where the counter is listed */
  double fcap;
  int nv, vars[2];
  bool rebound[2]; /* a name is bound once per scope: vars[1] may be rebound once in the body */
  ex *init[2];
  blk body;
  /* S_DEPS */
  int ntok, tok[MAX_TOK];
  blk inner;
};

typedef struct prog {
  int nin, nvars, nslots;
  double var_init[MAX_VARS];
  char slot_int[MAX_SLOTS]; /* slot is an i32 counter */
  blk top;
  ex *result;
  bool nested_loop; /* a loop inside a loop body */
  int nloops, nconds, nupdates, nreads, ndeps, ngrads;
  /* every allocation, freed at once */
  void **mem;
  int nmem, capmem;
} prog;

static void *palloc(prog *p, size_t n) {
  if (p->nmem == p->capmem) {
    p->capmem = p->capmem ? p->capmem * 2 : 256;
    p->mem = realloc(p->mem, sizeof(void *) * (size_t)p->capmem);
    if (!p->mem) abort();
  }
  void *m = calloc(1, n);
  if (!m) abort();
  return p->mem[p->nmem++] = m;
}

static void prog_free(prog *p) {
  for (int i = 0; i < p->nmem; i++) free(p->mem[i]);
  free(p->mem);
}

static void blk_add(prog *p, blk *b, st *s) {
  if (b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 8;
    st **n = palloc(p, sizeof(st *) * (size_t)cap);
    if (b->n) memcpy(n, b->s, sizeof(st *) * (size_t)b->n);
    b->s = n;
    b->cap = cap;
  }
  b->s[b->n++] = s;
}

/* ---- the generator -------------------------------------------------------------------- */

/* What a block sees; a loop body or a branch restores it when it ends. */
typedef struct scope {
  int nf, ni; /* visible: gen.fvis[0, nf), gen.ivis[0, ni) */
  /* per variable: the slots every next access must wait for */
  int tok[MAX_VARS][MAX_TOK], ntok[MAX_VARS];
  /* the loop whose variables a statement here may rebind (NULL in a branch) */
  st *loop;
  /* slots made here that carry variable accesses a loop's exits must wait for */
  int dangling[MAX_TOK];
  int ndangling;
} scope;

typedef struct gen {
  prog *p;
  gt_rng r;
  int budget;          /* statements left */
  int fvis[MAX_SLOTS]; /* f64 slots visible here */
  int ivis[MAX_SLOTS]; /* counters visible here */
  scope sc;
  int loop_depth, depth;
  int body_nf0; /* fvis[0, body_nf0): values from outside the innermost loop */
} gen;

static int rnd(gen *g, int n) {
  return (int)gt_int(&g->r, 0, n - 1);
}
static bool chance(gen *g, double p) {
  return gt_uniform(&g->r, 0, 1) < p;
}
static double rconst(gen *g) {
  return round(gt_uniform(&g->r, -1.5, 1.5) * 8) / 8; /* short literals */
}

static int new_slot(gen *g, bool is_int) {
  prog *p = g->p;
  if (p->nslots >= MAX_SLOTS) abort();
  p->slot_int[p->nslots] = is_int;
  return p->nslots++;
}
static void see(gen *g, int slot) {
  if (g->p->slot_int[slot])
    g->ivis[g->sc.ni++] = slot;
  else
    g->fvis[g->sc.nf++] = slot;
}

static ex *mk(gen *g, int kind, ex *a, ex *b) {
  ex *e = palloc(g->p, sizeof *e);
  e->kind = kind;
  e->a = a;
  e->b = b;
  return e;
}
static ex *slot_ex(gen *g, int slot) {
  ex *e = mk(g, X_SLOT, NULL, NULL);
  e->slot = slot;
  return e;
}
static ex *const_ex(gen *g, double c) {
  ex *e = mk(g, X_CONST, NULL, NULL);
  e->c = c;
  return e;
}

static ex *leaf(gen *g) {
  if (g->sc.nf && chance(g, 0.8)) return slot_ex(g, g->fvis[rnd(g, g->sc.nf)]);
  if (g->sc.ni && chance(g, 0.5)) {
    ex *e = mk(g, X_ISLOT, NULL, NULL);
    e->slot = g->ivis[rnd(g, g->sc.ni)];
    return e;
  }
  return const_ex(g, rconst(g));
}

/* A smooth expression of the visible values; squashed ones stay bounded. */
static ex *gen_expr(gen *g, int depth) {
  if (depth <= 0 || chance(g, 0.3)) return leaf(g);
  switch (rnd(g, 7)) {
    case 0:
      return mk(g, X_TANH, gen_expr(g, depth - 1), NULL);
    case 1:
      return mk(g, X_SIGM, gen_expr(g, depth - 1), NULL);
    case 2:
      return mk(g, X_SQUARE, mk(g, X_TANH, gen_expr(g, depth - 1), NULL), NULL);
    case 3:
      return mk(g, X_NEG, gen_expr(g, depth - 1), NULL);
    case 4:
      return mk(g, X_ADD, gen_expr(g, depth - 1), gen_expr(g, depth - 1));
    case 5:
      return mk(g, X_SUB, gen_expr(g, depth - 1), gen_expr(g, depth - 1));
    default:
      return mk(g, X_MUL, gen_expr(g, depth - 1), mk(g, X_TANH, gen_expr(g, depth - 1), NULL));
  }
}
static ex *squashed(gen *g, int depth) {
  return mk(g, chance(g, 0.7) ? X_TANH : X_SIGM, gen_expr(g, depth), NULL);
}

static void gen_block(gen *g, blk *b, int n);

static st *new_st(gen *g, int kind) {
  st *s = palloc(g->p, sizeof *s);
  s->kind = kind;
  s->lim_slot = s->fcap_slot = -1;
  return s;
}

/* Wraps s in control_dependencies(toks) when there are any. */
static st *with_deps(gen *g, const int *toks, int n, st *s) {
  if (!n) return s;
  st *d = new_st(g, S_DEPS);
  d->ntok = n;
  memcpy(d->tok, toks, sizeof(int) * (size_t)n);
  blk_add(g->p, &d->inner, s);
  g->p->ndeps++;
  return d;
}

static void add_tok(gen *g, int v, int slot) {
  if (g->sc.ntok[v] < MAX_TOK) g->sc.tok[v][g->sc.ntok[v]++] = slot;
}
static void add_dangling(gen *g, int slot) {
  if (g->sc.ndangling < MAX_TOK) g->sc.dangling[g->sc.ndangling++] = slot;
}

/* A loop variable of the enclosing loop to rebind, or a new slot. */
static int let_target(gen *g, bool *rebinds) {
  *rebinds = false;
  if (g->sc.loop && g->sc.loop->nv > 1 && !g->sc.loop->rebound[1] && chance(g, 0.4)) {
    *rebinds = g->sc.loop->rebound[1] = true;
    return g->sc.loop->vars[1];
  }
  return new_slot(g, false);
}

/* An update of variable v: after every access before it. */
static void gen_update(gen *g, blk *b, int v) {
  st *s = new_st(g, S_UPDATE);
  s->var = v;
  s->add = chance(g, 0.5);
  ex *val = squashed(g, 2);
  if (!s->add && chance(g, 0.6)) { /* v = 0.5 v + ...: a read feeding the update */
    ex *rd = mk(g, X_VREAD, NULL, NULL);
    rd->slot = v;
    val = mk(g, X_ADD, mk(g, X_MUL, rd, const_ex(g, 0.5)), val);
    g->p->nreads++;
  } else if (s->add) {
    val = mk(g, X_MUL, val, const_ex(g, 0.25));
  }
  s->e = val;
  s->dst = new_slot(g, false); /* the token; never used as a number */
  g->p->slot_int[s->dst] = 2;
  g->p->nupdates++;
  blk_add(g->p, b, with_deps(g, g->sc.tok[v], g->sc.ntok[v], s));
  g->sc.ntok[v] = 0;
  add_tok(g, v, s->dst);
  if (g->sc.loop) add_dangling(g, s->dst);
}

/* A read of variable v after every update before it. In a loop body it
 * rebinds a loop variable, so the loop's exits wait for it. */
static void gen_read(gen *g, blk *b, int v) {
  st *s = new_st(g, S_LET);
  ex *rd = mk(g, X_VREAD, NULL, NULL);
  rd->slot = v;
  bool rebinds = false;
  if (g->sc.loop && g->sc.loop->nv > 1 && !g->sc.loop->rebound[1]) {
    rebinds = g->sc.loop->rebound[1] = true;
    s->dst = g->sc.loop->vars[1];
    s->e = mk(g, X_ADD, mk(g, X_MUL, slot_ex(g, s->dst), const_ex(g, 0.5)),
              mk(g, X_TANH, mk(g, X_ADD, rd, gen_expr(g, 1)), NULL));
  } else {
    s->dst = new_slot(g, false);
    s->e = mk(g, X_MUL, rd, squashed(g, 1));
  }
  g->p->nreads++;
  blk_add(g->p, b, with_deps(g, g->sc.tok[v], g->sc.ntok[v], s));
  if (!rebinds) see(g, s->dst);
  if (!rebinds && g->sc.loop) add_dangling(g, s->dst);
  add_tok(g, v, s->dst);
}

static void gen_let(gen *g, blk *b) {
  st *s = new_st(g, S_LET);
  bool rebinds;
  s->dst = let_target(g, &rebinds);
  if (rebinds) /* bounded: a loop variable is updated every iteration */
    s->e = mk(g, X_ADD, mk(g, X_MUL, slot_ex(g, s->dst), const_ex(g, 0.6)),
              mk(g, X_MUL, squashed(g, 2), const_ex(g, 0.4)));
  else
    s->e = chance(g, 0.6) ? squashed(g, 2) : gen_expr(g, 2);
  blk_add(g->p, b, s);
  if (!rebinds) see(g, s->dst);
}

typedef scope saved_scope;
static void save_scope(gen *g, saved_scope *s) {
  *s = g->sc;
}
static bool accessed_since(gen *g, const saved_scope *s, int v) {
  return g->sc.ntok[v] != s->ntok[v] || memcmp(g->sc.tok[v], s->tok[v], sizeof(int) * MAX_TOK) != 0;
}

static pred gen_pred(gen *g) {
  pred p = {0};
  int k = rnd(g, 3);
  if (k == 2 && g->sc.ni) {
    p.kind = P_ILT;
    p.a = g->ivis[rnd(g, g->sc.ni)];
    p.c = rnd(g, 4);
  } else if (k == 1 && g->sc.nf >= 2) {
    p.kind = P_FLT;
    p.a = g->fvis[rnd(g, g->sc.nf)];
    p.b = g->fvis[rnd(g, g->sc.nf)];
    if (p.a == p.b) p.kind = P_FGT, p.c = rconst(g) / 3;
  } else if (g->sc.nf) {
    p.kind = P_FGT;
    p.a = g->fvis[rnd(g, g->sc.nf)];
    p.c = rconst(g) / 3;
  } else {
    p.kind = P_ILT;
    p.a = -1; /* no value yet: a constant predicate on nothing cannot happen (inputs exist) */
  }
  return p;
}

static void gen_branch(gen *g, blk *b, ex **vals, int nout, saved_scope *outer) {
  g->sc.loop = NULL; /* a branch rebinds nothing outside it */
  g->sc.ndangling = 0;
  g->depth++;
  gen_block(g, b, rnd(g, 3));
  g->depth--;
  for (int i = 0; i < nout; i++) vals[i] = chance(g, 0.7) ? squashed(g, 2) : gen_expr(g, 1);
  /* the cond's values wait for the branch's variable accesses */
  int toks[MAX_TOK], n = 0;
  for (int v = 0; v < g->p->nvars; v++)
    if (accessed_since(g, outer, v))
      for (int k = 0; k < g->sc.ntok[v] && n < MAX_TOK; k++) toks[n++] = g->sc.tok[v][k];
  if (n) {
    for (int i = 0; i < nout; i++) {
      st *s = new_st(g, S_LET);
      s->dst = new_slot(g, false);
      s->e = vals[i];
      blk_add(g->p, b, with_deps(g, toks, n, s));
      vals[i] = slot_ex(g, s->dst);
    }
  }
}

static void restore_scope(gen *g, const saved_scope *s) {
  g->sc = *s;
}

/* After a construct that accessed variables: later accesses wait for its results. */
static void after_construct(gen *g, const saved_scope *outer, bool accessed[MAX_VARS],
                            const int *outs, int nout) {
  for (int v = 0; v < g->p->nvars; v++) {
    if (!accessed[v]) continue;
    g->sc.ntok[v] = 0;
    for (int i = 0; i < nout; i++) add_tok(g, v, outs[i]);
  }
  bool any = false;
  for (int v = 0; v < g->p->nvars; v++) any |= accessed[v];
  if (any && g->sc.loop)
    for (int i = 0; i < nout; i++) add_dangling(g, outs[i]);
  (void)outer;
}

static void gen_cond(gen *g, blk *b) {
  st *s = new_st(g, S_COND);
  s->p = gen_pred(g);
  if (s->p.a < 0) return;
  s->nout = chance(g, 0.3) ? 2 : 1;
  saved_scope outer;
  save_scope(g, &outer);
  bool accessed[MAX_VARS] = {0};
  gen_branch(g, &s->then_b, s->then_v, s->nout, &outer);
  for (int v = 0; v < g->p->nvars; v++) accessed[v] |= accessed_since(g, &outer, v);
  restore_scope(g, &outer);
  gen_branch(g, &s->else_b, s->else_v, s->nout, &outer);
  for (int v = 0; v < g->p->nvars; v++) accessed[v] |= accessed_since(g, &outer, v);
  restore_scope(g, &outer);
  for (int i = 0; i < s->nout; i++) s->outs[i] = new_slot(g, false);
  for (int i = 0; i < s->nout; i++) see(g, s->outs[i]);
  after_construct(g, &outer, accessed, s->outs, s->nout);
  g->p->nconds++;
  blk_add(g->p, b, s);
}

static void gen_loop(gen *g, blk *b) {
  st *s = new_st(g, S_LOOP);
  prog *p = g->p;
  if (g->loop_depth > 0) p->nested_loop = true;
  s->ctr = new_slot(g, true);
  s->nv = 1 + chance(g, 0.5);
  s->ctr_pos = chance(g, 0.7) ? 0 : 1 + rnd(g, s->nv); /* the first loop variable is the pivot */
  for (int i = 0; i < s->nv; i++) {
    s->init[i] = chance(g, 0.2) ? const_ex(g, rconst(g)) : gen_expr(g, 1);
    s->vars[i] = new_slot(g, false);
  }
  if (g->sc.ni && chance(g, 0.4)) { /* the trip count depends on an outer counter */
    s->lim_slot = g->ivis[rnd(g, g->sc.ni)];
    s->lim_k = rnd(g, 2);
  } else {
    s->lim_k = rnd(g, 5); /* 0 to 4 iterations */
  }
  if (chance(g, 0.3)) { /* ends early when a variable reaches a bound */
    s->fcap_slot = s->vars[0];
    s->fcap = rconst(g) / 2;
  }
  saved_scope outer;
  save_scope(g, &outer);
  g->sc.loop = s;
  g->sc.ndangling = 0;
  int body_nf0 = g->body_nf0;
  g->body_nf0 = g->sc.nf;
  g->loop_depth++;
  g->depth++;
  see(g, s->ctr);
  for (int i = 0; i < s->nv; i++) see(g, s->vars[i]);
  gen_block(g, &s->body, 1 + rnd(g, 3));
  g->body_nf0 = body_nf0;
  /* every loop variable moves; accesses in the body feed one of them */
  for (int i = 0; i < s->nv; i++) {
    if (s->rebound[i]) continue;
    st *u = new_st(g, S_LET);
    u->dst = s->vars[i];
    ex *e = squashed(g, 2);
    for (int k = 0; k < g->sc.ndangling && i == 0; k++)
      if (!p->slot_int[g->sc.dangling[k]])
        e = mk(g, X_ADD, e, mk(g, X_TANH, slot_ex(g, g->sc.dangling[k]), NULL));
    u->e = mk(g, X_ADD, mk(g, X_MUL, slot_ex(g, s->vars[i]), const_ex(g, 0.6)),
              mk(g, X_MUL, e, const_ex(g, 0.4)));
    blk_add(p, &s->body, u);
  }
  g->depth--;
  g->loop_depth--;
  bool accessed[MAX_VARS] = {0};
  for (int v = 0; v < p->nvars; v++) accessed[v] = accessed_since(g, &outer, v);
  /* an update token (not a number) kept by the body: waited for through dangling */
  restore_scope(g, &outer);
  see(g, s->ctr);
  for (int i = 0; i < s->nv; i++) see(g, s->vars[i]);
  int outs[3] = {s->ctr, s->vars[0], s->nv > 1 ? s->vars[1] : s->vars[0]};
  after_construct(g, &outer, accessed, outs, 1 + s->nv);
  p->nloops++;
  blk_add(p, b, s);
}

/* control_dependencies(some visible values, often a loop's results) { ... } */
static void gen_deps(gen *g, blk *b) {
  st *s = new_st(g, S_DEPS);
  int n = 1 + rnd(g, 2);
  for (int i = 0; i < n; i++) {
    if (g->sc.ni && chance(g, 0.5))
      s->tok[s->ntok++] = g->ivis[rnd(g, g->sc.ni)];
    else if (g->sc.nf)
      s->tok[s->ntok++] = g->fvis[rnd(g, g->sc.nf)];
  }
  if (!s->ntok) return;
  g->depth++;
  gen_block(g, &s->inner, 1 + rnd(g, 2));
  g->depth--;
  g->p->ndeps++;
  blk_add(g->p, b, s);
}

/* An expression of the loop variable wrt, the loop's other variables not
 * rebound yet, and values from outside the loop (constants of the
 * iteration). */
static ex *grad_expr(gen *g, int wrt, int depth) {
  if (depth <= 0 || chance(g, 0.25)) {
    int k = rnd(g, 4);
    if (k < 2) return slot_ex(g, wrt);
    if (k == 2 && g->body_nf0) return slot_ex(g, g->fvis[rnd(g, g->body_nf0)]);
    for (int i = 0; i < g->sc.loop->nv; i++)
      if (!g->sc.loop->rebound[i] && chance(g, 0.5)) return slot_ex(g, g->sc.loop->vars[i]);
    return const_ex(g, rconst(g));
  }
  switch (rnd(g, 5)) {
    case 0:
      return mk(g, X_TANH, grad_expr(g, wrt, depth - 1), NULL);
    case 1:
      return mk(g, X_SIGM, grad_expr(g, wrt, depth - 1), NULL);
    case 2:
      return mk(g, X_SQUARE, mk(g, X_TANH, grad_expr(g, wrt, depth - 1), NULL), NULL);
    case 3:
      return mk(g, X_ADD, grad_expr(g, wrt, depth - 1), grad_expr(g, wrt, depth - 1));
    default:
      return mk(g, X_MUL, grad_expr(g, wrt, depth - 1), grad_expr(g, wrt, depth - 1));
  }
}

/* gradients() in a loop body: d e / d (a loop variable), per iteration. */
static void gen_grad(gen *g, blk *b) {
  st *s = new_st(g, S_GRAD);
  int cand[2], n = 0;
  for (int i = 0; i < g->sc.loop->nv; i++)
    if (!g->sc.loop->rebound[i]) cand[n++] = g->sc.loop->vars[i];
  s->wrt = cand[rnd(g, n)];
  s->e = grad_expr(g, s->wrt, 3);
  s->dst = new_slot(g, false);
  g->p->ngrads++;
  blk_add(g->p, b, s);
  see(g, s->dst);
  add_dangling(g, s->dst); /* feeds a loop variable, so the result counts */
}

static void gen_stmt(gen *g, blk *b) {
  g->budget--;
  int k = rnd(g, 100);
  bool deep = g->depth >= 3;
  if (k < 25 || (deep && k < 60)) {
    if (g->sc.loop && k < 8)
      gen_grad(g, b);
    else
      gen_let(g, b);
  } else if (k < 40 && g->p->nvars) {
    int v = rnd(g, g->p->nvars);
    if (chance(g, 0.5))
      gen_update(g, b, v);
    else
      gen_read(g, b, v);
  } else if (k < 60 && !deep) {
    gen_cond(g, b);
  } else if (k < 88 && !deep) {
    gen_loop(g, b);
  } else if (!deep) {
    gen_deps(g, b);
  } else {
    gen_let(g, b);
  }
}

static void gen_block(gen *g, blk *b, int n) {
  for (int i = 0; i < n && g->budget > 0; i++) gen_stmt(g, b);
}

static void gen_prog(prog *p, uint64_t seed) {
  memset(p, 0, sizeof *p);
  gen g;
  memset(&g, 0, sizeof g);
  g.p = p;
  g.r.s = seed * 0x9E3779B97F4A7C15ull + 12345;
  p->nin = 1 + rnd(&g, MAX_IN);
  p->nvars = rnd(&g, MAX_VARS + 1);
  for (int v = 0; v < p->nvars; v++) p->var_init[v] = rconst(&g);
  for (int i = 0; i < p->nin; i++) see(&g, new_slot(&g, false)); /* slots 0..nin-1: inputs */
  g.budget = 4 + rnd(&g, 10);
  while (g.budget > 0) gen_stmt(&g, &p->top);
  /* the result depends on the last values and, through them, on everything */
  ex *e = NULL;
  for (int k = 0; k < 3 && g.sc.nf; k++) {
    ex *t = slot_ex(&g, g.fvis[g.sc.nf - 1 - rnd(&g, g.sc.nf < 4 ? g.sc.nf : 4)]);
    e = e ? mk(&g, chance(&g, 0.5) ? X_ADD : X_MUL, e, t) : t;
  }
  p->result =
      mk(&g, X_ADD, e, mk(&g, X_MUL, slot_ex(&g, g.fvis[rnd(&g, g.sc.nf)]), const_ex(&g, 0.5)));
}

/* ---- DSL text --------------------------------------------------------------------------- */

typedef struct sbuf {
  char *s;
  size_t n, cap;
} sbuf;
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) abort();
    if (b->s && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->s = realloc(b->s, b->cap);
    if (!b->s) abort();
    if (b->n == 0) b->s[0] = '\0';
  }
}
static void indent(sbuf *b, int d) {
  sb_printf(b, "%*s", 2 * d, "");
}

static void emit_ex(sbuf *b, const ex *e) {
  switch (e->kind) {
    case X_CONST:
      sb_printf(b, "const(%.17g, f64)", e->c);
      break;
    case X_SLOT:
      sb_printf(b, "s%d", e->slot);
      break;
    case X_ISLOT:
      sb_printf(b, "cast(s%d, f64)", e->slot);
      break;
    case X_VREAD:
      sb_printf(b, "v%d", e->slot);
      break;
    case X_TANH:
    case X_SIGM:
    case X_SQUARE:
      sb_printf(b, "%s(", e->kind == X_TANH ? "tanh" : e->kind == X_SIGM ? "sigmoid" : "square");
      emit_ex(b, e->a);
      sb_printf(b, ")");
      break;
    case X_NEG:
      sb_printf(b, "-(");
      emit_ex(b, e->a);
      sb_printf(b, ")");
      break;
    default:
      sb_printf(b, "(");
      emit_ex(b, e->a);
      sb_printf(b, " %s ", e->kind == X_ADD ? "+" : e->kind == X_SUB ? "-" : "*");
      emit_ex(b, e->b);
      sb_printf(b, ")");
  }
}

static void emit_pred(sbuf *b, const pred *p) {
  if (p->kind == P_FGT)
    sb_printf(b, "s%d > %.17g", p->a, p->c);
  else if (p->kind == P_FLT)
    sb_printf(b, "s%d < s%d", p->a, p->b);
  else
    sb_printf(b, "s%d < %d", p->a, (int)p->c);
}

static void emit_blk(sbuf *b, const prog *p, const blk *k, int d);

/* A branch's statements and its values, then the indent of the closing brace. */
static void emit_branch(sbuf *b, const prog *p, const blk *k, ex *const *vals, int n, int d) {
  emit_blk(b, p, k, d + 1);
  indent(b, d + 1);
  for (int i = 0; i < n; i++) {
    if (i) sb_printf(b, ", ");
    emit_ex(b, vals[i]);
  }
  sb_printf(b, "\n");
  indent(b, d);
}

static void emit_st(sbuf *b, const prog *p, const st *s, int d) {
  indent(b, d);
  switch (s->kind) {
    case S_LET:
      sb_printf(b, "s%d = ", s->dst);
      emit_ex(b, s->e);
      sb_printf(b, "\n");
      break;
    case S_GRAD:
      sb_printf(b, "s%d = gradients(", s->dst);
      emit_ex(b, s->e);
      sb_printf(b, ", s%d)\n", s->wrt);
      break;
    case S_UPDATE:
      sb_printf(b, "s%d = %s(v%d, ", s->dst, s->add ? "assign_add" : "assign", s->var);
      emit_ex(b, s->e);
      sb_printf(b, ")\n");
      break;
    case S_COND:
      for (int i = 0; i < s->nout; i++) sb_printf(b, "%ss%d", i ? ", " : "", s->outs[i]);
      sb_printf(b, " = cond(");
      emit_pred(b, &s->p);
      sb_printf(b, ") {\n");
      emit_branch(b, p, &s->then_b, s->then_v, s->nout, d);
      sb_printf(b, "} else {\n");
      emit_branch(b, p, &s->else_b, s->else_v, s->nout, d);
      sb_printf(b, "}\n");
      break;
    case S_LOOP:
      for (int i = 0, k = 0; i <= s->nv; i++)
        sb_printf(b, "%ss%d", i ? ", " : "", i == s->ctr_pos ? s->ctr : s->vars[k++]);
      sb_printf(b, " = while (");
      for (int i = 0, k = 0; i <= s->nv; i++) {
        if (i) sb_printf(b, ", ");
        if (i == s->ctr_pos) {
          sb_printf(b, "s%d = const(0, i32)", s->ctr);
          continue;
        }
        sb_printf(b, "s%d = ", s->vars[k]);
        emit_ex(b, s->init[k++]);
      }
      if (s->lim_slot >= 0)
        sb_printf(b, "; s%d < s%d + %d", s->ctr, s->lim_slot, s->lim_k);
      else
        sb_printf(b, "; s%d < %d", s->ctr, s->lim_k);
      if (s->fcap_slot >= 0) sb_printf(b, " && s%d < %.17g", s->fcap_slot, s->fcap);
      sb_printf(b, ") {\n");
      emit_blk(b, p, &s->body, d + 1);
      indent(b, d + 1);
      sb_printf(b, "s%d = s%d + 1\n", s->ctr, s->ctr);
      indent(b, d);
      sb_printf(b, "}\n");
      break;
    case S_DEPS:
      sb_printf(b, "control_dependencies(");
      for (int i = 0; i < s->ntok; i++) sb_printf(b, "%ss%d", i ? ", " : "", s->tok[i]);
      sb_printf(b, ") {\n");
      emit_blk(b, p, &s->inner, d + 1);
      indent(b, d);
      sb_printf(b, "}\n");
      break;
  }
}

static void emit_blk(sbuf *b, const prog *p, const blk *k, int d) {
  for (int i = 0; i < k->n; i++)
    if (!k->s[i]->skip) emit_st(b, p, k->s[i], d);
}

/* The program's text; with_grad adds `g0, ... = gradients(r, [s0, ...])`. */
static char *emit_prog(const prog *p, bool with_grad) {
  sbuf b = {0};
  sb_printf(&b, "# inputs\n");
  for (int i = 0; i < p->nin; i++) sb_printf(&b, "s%d = placeholder(f64, [])\n", i);
  for (int v = 0; v < p->nvars; v++)
    sb_printf(&b, "v%d = variable(const(%.17g, f64))\n", v, p->var_init[v]);
  emit_blk(&b, p, &p->top, 0);
  sb_printf(&b, "r = ");
  emit_ex(&b, p->result);
  sb_printf(&b, "\n");
  if (with_grad) {
    for (int i = 0; i < p->nin; i++) sb_printf(&b, "%sg%d", i ? ", " : "", i);
    if (p->nin == 1)
      sb_printf(&b, " = gradients(r, s0)\n");
    else {
      sb_printf(&b, " = gradients(r, [");
      for (int i = 0; i < p->nin; i++) sb_printf(&b, "%ss%d", i ? ", " : "", i);
      sb_printf(&b, "])\n");
    }
  }
  return b.s;
}

/* ---- the interpreter -------------------------------------------------------------------- */

typedef struct interp {
  const prog *p;
  double env[MAX_SLOTS];
  double var[MAX_VARS];
  uint64_t path; /* every decision: branches taken, trip counts */
  /* reads of variables: recorded, or replayed (gradients stop at a read) */
  bool replay;
  double reads[MAX_READS];
  int nreads, ireads;
  bool overflow;
} interp;

static void mix(interp *it, uint64_t v) {
  it->path = (it->path ^ v) * 0x100000001B3ull + 0x9E37;
}

static double sigm(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

/* d e / d env[wrt], everything else constant (forward mode). */
static double dev(interp *it, const ex *e, int wrt, double *d) {
  double a, b, da = 0, db = 0;
  switch (e->kind) {
    case X_SLOT:
      *d = e->slot == wrt;
      return it->env[e->slot];
    case X_CONST:
    case X_ISLOT:
    case X_VREAD:
      *d = 0;
      return e->kind == X_CONST ? e->c : it->env[e->slot];
    case X_TANH:
      a = tanh(dev(it, e->a, wrt, &da));
      *d = (1 - a * a) * da;
      return a;
    case X_SIGM:
      a = sigm(dev(it, e->a, wrt, &da));
      *d = a * (1 - a) * da;
      return a;
    case X_SQUARE:
      a = dev(it, e->a, wrt, &da);
      *d = 2 * a * da;
      return a * a;
    case X_NEG:
      a = dev(it, e->a, wrt, &da);
      *d = -da;
      return -a;
    default:
      a = dev(it, e->a, wrt, &da);
      b = dev(it, e->b, wrt, &db);
      if (e->kind == X_ADD) return *d = da + db, a + b;
      if (e->kind == X_SUB) return *d = da - db, a - b;
      return *d = da * b + a * db, a * b;
  }
}

static double ev(interp *it, const ex *e) {
  switch (e->kind) {
    case X_CONST:
      return e->c;
    case X_SLOT:
    case X_ISLOT:
      return it->env[e->slot];
    case X_VREAD:
      if (it->replay) {
        if (it->ireads < it->nreads) return it->reads[it->ireads++];
        it->overflow = true;
        return it->var[e->slot];
      }
      if (it->nreads < MAX_READS)
        it->reads[it->nreads++] = it->var[e->slot];
      else
        it->overflow = true;
      return it->var[e->slot];
    case X_TANH:
      return tanh(ev(it, e->a));
    case X_SIGM:
      return sigm(ev(it, e->a));
    case X_SQUARE: {
      double a = ev(it, e->a);
      return a * a;
    }
    case X_NEG:
      return -ev(it, e->a);
    case X_ADD: {
      double a = ev(it, e->a);
      return a + ev(it, e->b);
    }
    case X_SUB: {
      double a = ev(it, e->a);
      return a - ev(it, e->b);
    }
    default: {
      double a = ev(it, e->a);
      return a * ev(it, e->b);
    }
  }
}

static bool ev_pred(interp *it, const pred *p) {
  bool t = p->kind == P_FGT   ? it->env[p->a] > p->c
           : p->kind == P_FLT ? it->env[p->a] < it->env[p->b]
                              : it->env[p->a] < p->c;
  mix(it, t);
  return t;
}

static void run_blk(interp *it, const blk *b);

static void run_st(interp *it, const st *s) {
  switch (s->kind) {
    case S_LET:
      it->env[s->dst] = ev(it, s->e);
      break;
    case S_UPDATE: {
      double v = ev(it, s->e);
      it->var[s->var] = s->add ? it->var[s->var] + v : v;
      it->env[s->dst] = it->var[s->var];
      break;
    }
    case S_COND: {
      bool t = ev_pred(it, &s->p);
      run_blk(it, t ? &s->then_b : &s->else_b);
      double o[2];
      for (int i = 0; i < s->nout; i++) o[i] = ev(it, t ? s->then_v[i] : s->else_v[i]);
      for (int i = 0; i < s->nout; i++) it->env[s->outs[i]] = o[i];
      break;
    }
    case S_LOOP: {
      double init[2];
      for (int i = 0; i < s->nv; i++) init[i] = ev(it, s->init[i]);
      for (int i = 0; i < s->nv; i++) it->env[s->vars[i]] = init[i];
      double lim = s->lim_k + (s->lim_slot >= 0 ? it->env[s->lim_slot] : 0);
      int trips = 0;
      for (it->env[s->ctr] = 0;; trips++) {
        if (!(it->env[s->ctr] < lim)) break;
        if (s->fcap_slot >= 0 && !(it->env[s->fcap_slot] < s->fcap)) break;
        run_blk(it, &s->body);
        it->env[s->ctr] += 1;
      }
      mix(it, 1000 + (uint64_t)trips);
      break;
    }
    case S_DEPS:
      run_blk(it, &s->inner);
      break;
    case S_GRAD: {
      double d;
      dev(it, s->e, s->wrt, &d);
      it->env[s->dst] = d;
      break;
    }
  }
}

static void run_blk(interp *it, const blk *b) {
  for (int i = 0; i < b->n; i++)
    if (!b->s[i]->skip) run_st(it, b->s[i]);
}

static double interpret(interp *it, const prog *p, const double *x) {
  memset(it->env, 0, sizeof it->env);
  it->p = p;
  it->path = 1469598103934665603ull;
  it->ireads = 0;
  if (!it->replay) it->nreads = 0;
  it->overflow = false;
  for (int v = 0; v < p->nvars; v++) it->var[v] = p->var_init[v];
  for (int i = 0; i < p->nin; i++) it->env[i] = x[i];
  run_blk(it, &p->top);
  return ev(it, p->result);
}

/* ---- running it in the engine ----------------------------------------------------------- */

/* parallel_iterations 1 for about half of the loops (by frame name and
 * seed; the builder's default is 10). The DSL has no syntax for it, so the
 * enters' attr is set before any session sees the graph. Only lowered,
 * never raised: reverse loops of gradients keep theirs. */
static void set_parallel(gr_graph *g, uint64_t seed) {
  int n = gr_graph_num_nodes(g);
  for (int i = 0; i < n; i++) {
    gr_node *nd = gr_graph_node(g, i);
    if (strcmp(nd->op->name, "enter") != 0) continue;
    const char *f = gr_node_attr_string(nd, "frame_name", "");
    uint64_t h = seed * 31 + 7;
    for (const char *c = f; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001B3ull;
    if (!((h >> 17) & 1)) continue;
    for (int a = 0; a < nd->num_attrs; a++)
      if (strcmp(nd->attrs[a].name, "parallel_iterations") == 0) nd->attrs[a].value.i = 1;
  }
}

typedef struct outcome {
  bool loaded, ran;
  char msg[1024];
  double r, g[MAX_IN];
} outcome;

static void run_engine(const char *src, const prog *p, const double *x, bool with_grad, int devices,
                       uint64_t seed, outcome *o) {
  memset(o, 0, sizeof *o);
  gr_graph *g = gr_graph_new();
  gr_dsl_program *dp = NULL;
  gr_error err = {0};
  if (gr_dsl_load_string("prop.gr", src, g, NULL, &dp, &err) != GR_OK) {
    snprintf(o->msg, sizeof o->msg, "%s", err.msg);
    goto out;
  }
  o->loaded = true;
  gr_output fetch[1 + MAX_IN], in[MAX_IN];
  int nf = 0;
  char name[16];
  if (!gr_dsl_lookup(dp, "r", &fetch[nf++])) abort();
  for (int i = 0; i < p->nin && with_grad; i++) {
    snprintf(name, sizeof name, "g%d", i);
    if (!gr_dsl_lookup(dp, name, &fetch[nf++])) abort();
  }
  for (int i = 0; i < p->nin; i++) {
    snprintf(name, sizeof name, "s%d", i);
    if (!gr_dsl_lookup(dp, name, &in[i])) abort();
  }
  set_parallel(g, seed);
  if (devices > 1) gt_spread(g, devices);
  gr_session *s = gt_session(g, devices, 2);
  gr_tensor ft[MAX_IN], res[1 + MAX_IN];
  gr_feed fd[MAX_IN];
  for (int i = 0; i < p->nin; i++) {
    ft[i] = gt_make(GR_F64, gr_shape_scalar(), &x[i]);
    fd[i] = (gr_feed){in[i], &ft[i]};
  }
  for (int i = 0; i < nf; i++) res[i] = gr_tensor_empty();
  if (gr_session_run(s, fd, p->nin, fetch, nf, res, NULL, 0, &err) != GR_OK) {
    snprintf(o->msg, sizeof o->msg, "run: %s", err.msg);
  } else {
    o->ran = true;
    o->r = gr_tensor_get_f64(&res[0], 0);
    for (int i = 1; i < nf; i++) o->g[i - 1] = gr_tensor_get_f64(&res[i], 0);
  }
  for (int i = 0; i < nf; i++) gr_tensor_release(&res[i]);
  for (int i = 0; i < p->nin; i++) gr_tensor_release(&ft[i]);
  gr_session_free(s);
out:
  gr_dsl_program_free(dp);
  gr_graph_free(g);
}

/* ---- one program ------------------------------------------------------------------------ */

typedef struct stats {
  int programs, runs, grads_checked, grads_refused, fd_skipped, fwd_skipped;
  int loops, nested, conds, updates, reads, deps, body_grads;
  int failures;
} stats;

static bool verbose;

static bool close_to(double a, double b, double rtol, double atol) {
  return fabs(a - b) <= atol + rtol * fabs(b);
}

static bool quiet;         /* while reducing: failures are not printed */
static char last_what[64]; /* the start of the last failure's message */

static void report(uint64_t seed, const char *src, const char *what) {
  snprintf(last_what, sizeof last_what, "%s", what);
  if (quiet) return;
  fprintf(stderr, "property test: program seed %llu: %s\n", (unsigned long long)seed, what);
  static int shown;
  if (shown++ < 3 || verbose)
    fprintf(stderr, "---- program (GR_PROP_SEED=%llu) ----\n%s----\n", (unsigned long long)seed,
            src);
}

/* Checks one program; true when it passed. */
static bool check_prog(prog *pp, uint64_t seed, const double *x, stats *st) {
  prog p = *pp;
  char *src = emit_prog(&p, true), *fwd_src = emit_prog(&p, false);
  if (verbose) {
    fprintf(stderr, "---- seed %llu ----\n%s---- fed:", (unsigned long long)seed, src);
    for (int i = 0; i < p.nin; i++) fprintf(stderr, " s%d=%.17g", i, x[i]);
    fprintf(stderr, "\n");
  }
  st->programs++;
  st->loops += p.nloops;
  st->nested += p.nested_loop;
  st->conds += p.nconds;
  st->updates += p.nupdates;
  st->reads += p.nreads;
  st->deps += p.ndeps;
  st->body_grads += p.ngrads;

  static interp it, it2;
  it.replay = false;
  double want = interpret(&it, &p, x);
  uint64_t path = it.path;
  bool failed = false;
  char what[1400];
  outcome o[2];
  bool grads = true;
  for (int k = 0; k < 2; k++) {
    int devices = k ? 3 : 1;
    run_engine(src, &p, x, true, devices, seed, &o[k]);
    st->runs++;
    if (!o[k].loaded) {
      bool refusal =
          strstr(o[k].msg, "contains another loop") && strstr(o[k].msg, "not supported yet");
      if (refusal && p.nested_loop && !NESTED_LOOP_GRADIENTS) {
        if (k == 0) st->grads_refused++;
        grads = false;
        run_engine(fwd_src, &p, x, false, devices, seed, &o[k]);
      }
      if (!o[k].loaded) {
        snprintf(what, sizeof what, "%d device(s): load failed: %s", devices, o[k].msg);
        report(seed, src, what);
        failed = true;
        break;
      }
    }
    if (!o[k].ran) {
      snprintf(what, sizeof what, "%d device(s): %s", devices, o[k].msg);
      report(seed, src, what);
      failed = true;
      break;
    }
    if (!close_to(o[k].r, want, 1e-9, 1e-9)) {
      snprintf(what, sizeof what, "%d device(s): r = %.17g, the interpreter says %.17g", devices,
               o[k].r, want);
      report(seed, src, what);
      failed = true;
    }
  }
  if (!failed && memcmp(&o[0].r, &o[1].r, sizeof(double)) != 0) {
    snprintf(what, sizeof what, "r = %.17g on 1 device, %.17g on 3", o[0].r, o[1].r);
    report(seed, src, what);
    failed = true;
  }
  /* gradients: central differences of the interpreter, reads of variables
   * replayed (a read is where a gradient stops), when no decision changes */
  for (int i = 0; i < p.nin && grads && !failed; i++) {
    double h = 1e-5, xp[MAX_IN], xm[MAX_IN];
    memcpy(xp, x, sizeof xp);
    memcpy(xm, x, sizeof xm);
    xp[i] += h;
    xm[i] -= h;
    it2 = it;
    it2.replay = true;
    double fp = interpret(&it2, &p, xp);
    uint64_t pp = it2.path;
    bool ok = !it2.overflow && it2.ireads == it.nreads;
    double fm = interpret(&it2, &p, xm);
    ok = ok && !it2.overflow && it2.ireads == it.nreads && pp == path && it2.path == path;
    if (!ok || it.overflow) {
      st->fd_skipped++;
      continue;
    }
    double fd = (fp - fm) / (2 * h);
    st->grads_checked++;
    for (int k = 0; k < 2; k++)
      if (!close_to(o[k].g[i], fd, 1e-4, 1e-5)) {
        snprintf(what, sizeof what, "%d device(s): d r / d s%d = %.17g, finite differences %.17g",
                 k ? 3 : 1, i, o[k].g[i], fd);
        report(seed, src, what);
        failed = true;
      }
    if (!failed && memcmp(&o[0].g[i], &o[1].g[i], sizeof(double)) != 0) {
      snprintf(what, sizeof what, "d r / d s%d = %.17g on 1 device, %.17g on 3", i, o[0].g[i],
               o[1].g[i]);
      report(seed, src, what);
      failed = true;
    }
  }
  if (failed) st->failures++;
  free(src);
  free(fwd_src);
  return !failed;
}

static void program_inputs(const prog *p, uint64_t seed, double *x) {
  gt_rng xr = {seed ^ 0xabcdef};
  for (int i = 0; i < p->nin; i++) x[i] = gt_uniform(&xr, -1.5, 1.5);
}

static void check_program(uint64_t seed, stats *st) {
  prog p;
  gen_prog(&p, seed);
  double x[MAX_IN];
  program_inputs(&p, seed, x);
  check_prog(&p, seed, x, st);
  prog_free(&p);
}

/* The kind of a failure: its message up to the first number. */
static void failure_kind(char *kind, size_t cap) {
  const char *w = strstr(last_what, "device(s): ");
  snprintf(kind, cap, "%s", w ? w + 11 : last_what);
  kind[strcspn(kind, "0123456789")] = '\0';
}

static void collect(const blk *b, st **all, int *n) {
  for (int i = 0; i < b->n; i++) {
    st *s = b->s[i];
    all[(*n)++] = s;
    collect(&s->then_b, all, n);
    collect(&s->else_b, all, n);
    collect(&s->body, all, n);
    collect(&s->inner, all, n);
  }
}

/* GR_PROP_REDUCE=<seed>: leaves out statements of a failing program while
 * it still fails the same way, and prints what is left (greedy, bounded). */
static void reduce_program(uint64_t seed) {
  prog p;
  gen_prog(&p, seed);
  double x[MAX_IN];
  program_inputs(&p, seed, x);
  stats sts = {0};
  char kind[64], k2[64];
  quiet = true;
  if (check_prog(&p, seed, x, &sts)) {
    quiet = false;
    fprintf(stderr, "program %llu passes: nothing to reduce\n", (unsigned long long)seed);
    prog_free(&p);
    return;
  }
  failure_kind(kind, sizeof kind);
  static st *all[4096];
  int n = 0;
  collect(&p.top, all, &n);
  for (int round = 0, changed = 1; changed && round < 8; round++) {
    changed = 0;
    for (int i = 0; i < n; i++) {
      if (all[i]->skip) continue;
      all[i]->skip = true;
      bool still = !check_prog(&p, seed, x, &sts);
      failure_kind(k2, sizeof k2);
      if (still && strcmp(k2, kind) == 0)
        changed = 1;
      else
        all[i]->skip = false;
    }
  }
  quiet = false;
  verbose = true;
  fprintf(stderr, "reduced (failure: %s...):\n", kind);
  check_prog(&p, seed, x, &sts);
  prog_free(&p);
}

/* ---- reproducers of what the property test found ---------------------------------------- */

/* Runs DSL text on `devices` devices, feeding f64 scalars s0 (and s1) when
 * the program has them, and fetches the f64 scalar `name`. */
static bool run_named(const char *src, int devices, const double *feeds, int nfeeds,
                      const char *name, double *out) {
  gr_tensor ft[2] = {gr_tensor_empty(), gr_tensor_empty()}, res;
  for (int i = 0; i < nfeeds; i++) ft[i] = gt_make(GR_F64, gr_shape_scalar(), &feeds[i]);
  bool ok = gt_dsl_run_fed(src, name, devices,
                           nfeeds == 2 ? "s0,s1"
                           : nfeeds    ? "s0"
                                       : NULL,
                           ft, NULL, NULL, &res, NULL);
  for (int i = 0; i < nfeeds; i++) gr_tensor_release(&ft[i]);
  if (ok) {
    *out = gr_tensor_get_f64(&res, 0);
    gr_tensor_release(&res);
  }
  return ok;
}

static void check_named(const char *what, const char *src, const double *feeds, int nfeeds,
                        const char *name, double want) {
  for (int d = 1; d <= 3; d += 2) {
    double got = NAN;
    bool ok = run_named(src, d, feeds, nfeeds, name, &got);
    if (ok && !close_to(got, want, 1e-12, 1e-12))
      fprintf(stderr, "%s on %d device(s): %s = %.17g, want %.17g\n", what, d, name, got, want);
    GR_CHECK(ok && close_to(got, want, 1e-12, 1e-12));
  }
}

/* Three loops deep, the middle one updating a variable with a value of the
 * innermost: the innermost loop's enters were tied to the outer body's
 * pivot, across two frames ("... crosses a loop boundary"). */
static void test_update_with_value_of_loop_two_deep(void) {
  const char *src = "v1 = variable(const(0.0, f64))\n"
                    "s5, s6 = while (s5 = const(0, i32), s6 = const(1.5, f64); s5 < 2) {\n"
                    "  s8 = while (s8 = const(0, i32); s8 < 3) {\n"
                    "    s10, s12 = while (s10 = const(0, i32), s12 = s6; s10 < 1) {\n"
                    "      s12 = s12 * 0.5\n"
                    "      s10 = s10 + 1\n"
                    "    }\n"
                    "    s15 = assign_add(v1, s12)\n"
                    "    s8 = s8 + 1\n"
                    "  }\n"
                    "  s6 = s6 + 1.0\n"
                    "  s5 = s5 + 1\n"
                    "}\n"
                    "control_dependencies(s5) { r = v1 * 1.0 }\n";
  double v = 0, s6 = 1.5;
  for (int i = 0; i < 2; i++, s6 += 1)
    for (int j = 0; j < 3; j++) v += s6 * 0.5;
  check_named("an update of a value two loops deep", src, NULL, 0, "r", v);
}

/* An update in a cond branch of a loop body: dead in the iterations of the
 * other branch, it ended the loop there (its next_iteration waited for it). */
static void test_update_in_branch_of_loop(void) {
  for (int flip = 0; flip < 2; flip++) {
    char src[600];
    snprintf(src, sizeof src,
             "v = variable(const(0.0, f64))\n"
             "i, s = while (i = const(0, i32), s = const(0.0, f64); i < 4) {\n"
             "  t = cond(%s) {\n"
             "    u = assign_add(v, 1.0)\n"
             "    control_dependencies(u) { w = s + v }\n"
             "    w\n"
             "  } else {\n"
             "    s + 10.0\n"
             "  }\n"
             "  s = t\n"
             "  i = i + 1\n"
             "}\n",
             flip ? "i >= 2" : "i < 2");
    double v = 0, s = 0;
    for (int i = 0; i < 4; i++) {
      if ((i < 2) != flip)
        v += 1, s += v;
      else
        s += 10;
    }
    check_named("an update in a branch of a loop body", src, NULL, 0, "s", s);
  }
}

/* A value computed before a loop and used only inside it: the walk back
 * from the ys did not go around the loop's back edge, so its gradient
 * through the loop was dropped (0). */
static void test_gradient_of_invariant_used_only_in_loop(void) {
  const char *src = "s0 = placeholder(f64, [])\n"
                    "s2 = s0 * 2.0\n"
                    "s3, s4 = while (s3 = const(0, i32), s4 = const(0.0, f64); s3 < 3) {\n"
                    "  s4 = s4 * 0.5 + tanh(s2)\n"
                    "  s3 = s3 + 1\n"
                    "}\n"
                    "g0 = gradients(s4, s0)\n";
  double x = 0.3, t = tanh(2 * x), dt = 2 * (1 - t * t);
  /* s4 = t (0.25 + 0.5 + 1) */
  check_named("the gradient of a loop invariant used only in the loop", src, &x, 1, "g0",
              dt * 1.75);
}

/* In a control_dependencies block, a variable read first made in a cond
 * branch or a loop body was reused in the other branch (dead) or after the
 * loop (a value from inside its frame). */
static void test_read_in_branch_or_loop_not_reused(void) {
  const char *src = "s0 = placeholder(f64, [])\n"
                    "v1 = variable(const(0.125, f64))\n"
                    "control_dependencies(s0) {\n"
                    "  r = cond(s0 > 0.375) { v1 * 2.0 } else { v1 * 3.0 }\n"
                    "}\n";
  for (int k = 0; k < 2; k++) {
    double x = k ? 0.5 : 0.25;
    check_named("a variable read in both branches", src, &x, 1, "r", 0.125 * (k ? 2 : 3));
  }
  check_named("a variable read in a loop body and after it",
              "v1 = variable(const(0.125, f64))\n"
              "c = const(1.0, f64)\n"
              "control_dependencies(c) {\n"
              "  i, s = while (i = const(0, i32), s = const(0.0, f64); i < 3) {\n"
              "    s = s + v1\n"
              "    i = i + 1\n"
              "  }\n"
              "  t = v1 * 10.0\n"
              "}\n"
              "r = s + t\n",
              NULL, 0, "r", 3 * 0.125 + 1.25);
}

/* Iteration t + 1 of a loop updated a variable before iteration t (in a
 * nested loop) had read it: the next iteration waited for the updates only,
 * not for the reads. */
static void test_read_before_next_iterations_update(void) {
  const char *src = "v = variable(const(0.0, f64))\n"
                    "i, s = while (i = const(0, i32), s = const(0.0, f64); i < 5) {\n"
                    "  u = assign_add(v, 1.0)\n"
                    "  j, t = while (j = const(0, i32), t = s; j < 2) {\n"
                    "    control_dependencies(u) { t = t + v }\n"
                    "    j = j + 1\n"
                    "  }\n"
                    "  s = t\n"
                    "  i = i + 1\n"
                    "}\n";
  double v = 0, s = 0;
  for (int i = 0; i < 5; i++) {
    v += 1;
    for (int j = 0; j < 2; j++) s += v;
  }
  check_named("reads in a nested loop before the next iteration's update", src, NULL, 0, "s", s);
}

/* gradients() in a loop body, in control_dependencies on a nested loop
 * whose own nested loop uses a value from outside the body: while the body
 * was being built, that loop's frame was placed twice (under the body and
 * under the top level), and the gradient was 0. */
static void test_gradient_in_body_after_nested_loop(void) {
  const char *src =
      "s0 = placeholder(f64, [])\n"
      "s1 = placeholder(f64, [])\n"
      "s5, s3, gg = while (s5 = s0 * tanh(s1), s3 = const(0, i32), gg = const(0.0, f64);"
      " s3 < 2) {\n"
      "  s6 = while (s6 = const(0, i32); s6 < s3 + 1) {\n"
      "    s9, s10 = while (s9 = const(0, i32), s10 = s0; s9 < 0) { s9 = s9 + 1 }\n"
      "    s6 = s6 + 1\n"
      "  }\n"
      "  control_dependencies(s6) { s14 = gradients(sigmoid(s5) * s5, s5) }\n"
      "  gg = gg + s14\n"
      "  s5 = s5 + 0.5\n"
      "  s3 = s3 + 1\n"
      "}\n";
  double x[2] = {-0.9, -0.3}, s5 = x[0] * tanh(x[1]), gg = 0;
  for (int i = 0; i < 2; i++, s5 += 0.5) gg += sigm(s5) * (1 - sigm(s5)) * s5 + sigm(s5);
  check_named("gradients() in a body after a nested loop", src, x, 2, "gg", gg);
}

static void test_random_programs(void) {
  const char *one = getenv("GR_PROP_SEED"), *red = getenv("GR_PROP_REDUCE");
  const char *ns = getenv("GR_PROP_N"), *bs = getenv("GR_PROP_BASE");
  stats st = {0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (red) {
    reduce_program(strtoull(red, NULL, 10));
    return;
  }
  if (one) {
    verbose = true;
    check_program(strtoull(one, NULL, 10), &st);
  } else {
    long n = ns ? strtol(ns, NULL, 10) : 0;
    if (n < MIN_PROGRAMS) n = MIN_PROGRAMS;
    uint64_t base = bs ? strtoull(bs, NULL, 10) : 1;
    for (long i = 0; i < n; i++) check_program(base + (uint64_t)i, &st);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  printf("property: %d programs (%d runs on 1 and 3 devices) in %.1f s: %d loops (%d programs "
         "with nested loops), %d conds, %d variable updates, %d reads, %d control-dependency "
         "blocks, %d gradients() in loop bodies; %d gradients checked, %d refused (nested loops), "
         "%d not checked (a "
         "decision changes within the step); %d failed\n",
         st.programs, st.runs, secs, st.loops, st.nested, st.conds, st.updates, st.reads, st.deps,
         st.body_grads, st.grads_checked, st.grads_refused, st.fd_skipped, st.failures);
  GR_CHECK_EQ_INT(st.failures, 0);
  if (!one) {
    GR_CHECK(st.programs >= MIN_PROGRAMS);
    GR_CHECK(st.grads_checked > st.programs / 2); /* the gradients are checked, mostly */
  }
}

int main(void) {
  GR_RUN(test_update_with_value_of_loop_two_deep);
  GR_RUN(test_update_in_branch_of_loop);
  GR_RUN(test_gradient_of_invariant_used_only_in_loop);
  GR_RUN(test_read_in_branch_or_loop_not_reused);
  GR_RUN(test_read_before_next_iterations_update);
  GR_RUN(test_gradient_in_body_after_nested_loop);
  GR_RUN(test_random_programs);
  return gr_test_finish();
}
