/* Random training programs as .gr text (random_program.h). */
#include "random_program.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* Value kinds: f32 [4, 3], [3], [], [3, 3] (weights), [5, 3] (a table). */
enum { K_M, K_V, K_S, K_W, K_E };

#define MAX_VALS     512
#define MAX_COUNTERS 8
#define EXPR         640 /* room for one expression */

typedef struct val {
  char name[24];
  int kind;
  int level;    /* the block it was bound in: visible there and deeper */
  bool var;     /* a trained variable: never named in a control_dependencies block */
  unsigned dep; /* D_*: what it depends on */
} val;

enum { D_TRAIN = 1, D_LOOP = 2 }; /* depends on a trained variable, on a loop */

typedef struct counter {
  char name[24];
  int kind;      /* K_S or K_V */
  char last[24]; /* its last access in this step ("": none yet) */
} counter;

typedef struct gen {
  gt_rng r;
  gt_program *p;
  size_t cap;
  int indent, id, level, seeds;
  val v[MAX_VALS];
  int nv;
  counter c[MAX_COUNTERS];
  int nc;
  int workers;
  bool pins;
  bool no_vars;      /* inside control_dependencies: a variable named would be read anew */
  int pinned;        /* device blocks open around what is emitted now */
  unsigned used;     /* D_* of the operands since the last reset */
  const char *scope; /* the program's name scope */
} gen;

static void grow(gen *g, size_t more) {
  if (g->p->len + more + 1 <= g->cap) return;
  while (g->p->len + more + 1 > g->cap) g->cap = g->cap ? g->cap * 2 : 4096;
  g->p->text = realloc(g->p->text, g->cap);
  if (!g->p->text) abort();
}

/* One line at the current indentation. */
__attribute__((format(printf, 2, 3))) static void emit(gen *g, const char *fmt, ...) {
  char line[4 * EXPR];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line) abort(); /* a generator bug: lines are bounded */
  grow(g, (size_t)n + (size_t)g->indent * 2 + 1);
  for (int i = 0; i < g->indent * 2; i++) g->p->text[g->p->len++] = ' ';
  memcpy(g->p->text + g->p->len, line, (size_t)n);
  g->p->len += (size_t)n;
  g->p->text[g->p->len++] = '\n';
  g->p->text[g->p->len] = '\0';
}

static bool chance(gen *g, int percent) {
  return gt_int(&g->r, 0, 99) < percent;
}
static int rnd(gen *g, int lo, int hi) {
  return (int)gt_int(&g->r, lo, hi);
}

static void fresh(gen *g, const char *prefix, char *out) {
  snprintf(out, 24, "%s%d", prefix, ++g->id);
}

/* Fetched each step; only top-level names can be (a body's are inside its loop). */
static void add_fetch(gen *g, const char *name) {
  gt_program *p = g->p;
  if (g->level > 0) return;
  for (int i = 0; i < p->nfetch; i++)
    if (!strcmp(p->fetch[i], name)) return;
  if (p->nfetch < GT_PROG_MAX_FETCH)
    snprintf(p->fetch[p->nfetch++], sizeof p->fetch[0], "%s", name);
}

static void add_val(gen *g, const char *name, int kind, bool var, unsigned dep) {
  if (g->nv == MAX_VALS) return;
  val *v = &g->v[g->nv++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->kind = kind;
  v->level = g->level;
  v->var = var;
  v->dep = dep | (var ? D_TRAIN : 0u);
}

/* Leaves a block: its bindings are out of reach. */
static void pop_level(gen *g) {
  while (g->nv > 0 && g->v[g->nv - 1].level >= g->level) g->nv--;
  g->level--;
}

/* A random visible value of kind k (-1: none). */
static int pick(gen *g, int k) {
  int all[MAX_VALS], here[MAX_VALS], n = 0, nh = 0;
  for (int i = 0; i < g->nv; i++) {
    if (g->v[i].kind != k || (g->no_vars && g->v[i].var)) continue;
    all[n++] = i;
    if (g->level > 0 && g->v[i].level == g->level) here[nh++] = i;
  }
  if (nh && chance(g, 50)) return here[rnd(g, 0, nh - 1)]; /* in a block, its own values */
  return n ? all[rnd(g, 0, n - 1)] : -1;
}

/* A name of kind k, or a constant of that shape when there is none. */
static void operand(gen *g, int k, char *out) {
  int i = pick(g, k);
  if (i >= 0 && (k >= K_W || !chance(g, 8))) {
    snprintf(out, EXPR, "%s", g->v[i].name);
    g->used |= g->v[i].dep;
    return;
  }
  switch (k) {
    case K_M:
      snprintf(out, EXPR, "(ones([4, 3]) * %.2f)", 0.25 * rnd(g, 1, 4));
      break;
    case K_V:
      snprintf(out, EXPR, "(ones([3]) * %.2f)", 0.25 * rnd(g, 1, 4));
      break;
    case K_S:
      snprintf(out, EXPR, "const(%.2f)", 0.25 * rnd(g, 1, 4));
      break;
    default:
      snprintf(out, EXPR, "(ones([%d, 3]) * 0.5)", k == K_W ? 3 : 5);
      break;
  }
}

/* An expression form: `$1`, `$2` are operands of kinds k1, k2; `$W` a
 * weight and `$E` a table (variables: the form is left out where they may
 * not be named), `$I` four indices into 4 rows, `$J` into 5, `$D` a new seed. */
typedef struct form {
  const char *t;
  int k1, k2;
} form;

static const form m_forms[] = {
    {"tanh($1)", K_M, -1},
    {"sigmoid($1)", K_M, -1},
    {"relu($1)", K_M, -1},
    {"$1 + $2", K_M, K_M},
    {"$1 - $2", K_M, K_M},
    {"tanh($1 * $2)", K_M, K_M},
    {"tanh($1 @ $W)", K_M, -1},
    {"tanh($1 @ $W)", K_M, -1},
    {"$1 + $2", K_M, K_V},
    {"tanh($1 * $2)", K_M, K_S},
    {"$1 + reduce_sum($1, axes=[1], keepdims=true) * 0.1", K_M, -1},
    {"gather($1, $I)", K_M, -1},
    {"$1 + gather($E, $J)", K_M, -1},
    {"stop_gradient($1)", K_M, -1},
    {"maximum($1, $2)", K_M, K_M},
    {"minimum($1, $2)", K_M, K_M},
    {"softmax($1)", K_M, -1},
    {"$1 - reduce_max($1, axes=[0])", K_M, -1},
    {"slice(concat([$1, $2], axis=0), begin=[2, 0], size=[4, 3])", K_M, K_M},
    {"tanh($1 @ transpose($W))", K_M, -1},
    {"select($1 > $2, $1, $2)", K_M, K_M},
    {"dropout($1, rate=0.25, seed=$D)", K_M, -1},
    {"slice(pad($1, paddings=[1, 1, 0, 0]), begin=[1, 0], size=[4, 3])", K_M, -1},
};
static const form v_forms[] = {
    {"reduce_mean($1, axes=[0])", K_M, -1},
    {"reduce_max($1, axes=[0])", K_M, -1},
    {"tanh($1 + $2)", K_V, K_V},
    {"$1 * $2", K_V, K_S},
    {"reduce_min($1, axes=[0])", K_M, -1},
    {"reduce_sum($1 * $1, axes=[0]) * 0.1", K_M, -1},
};
static const form s_forms[] = {
    {"reduce_sum($1) * 0.1", K_M, -1},    {"reduce_mean($1)", K_V, -1}, {"tanh($1 * $1)", K_S, -1},
    {"reduce_prod($1)", K_V, -1},         {"$1 + $2", K_S, K_S},        {"reduce_max($1)", K_M, -1},
    {"reduce_mean(square($1))", K_M, -1},
};

/* One of the n forms, its operands drawn, into o. */
static void from_forms(gen *g, const form *f, int n, char *o) {
  const form *x;
  do /* a form that names variables only where they may be named, and exist */
    x = &f[rnd(g, 0, n - 1)];
  while ((strstr(x->t, "$W") && (g->no_vars || pick(g, K_W) < 0)) ||
         (strstr(x->t, "$E") && (g->no_vars || pick(g, K_E) < 0)));
  char a[EXPR] = "", b[EXPR] = "", w[EXPR] = "";
  if (x->k1 >= 0) operand(g, x->k1, a);
  if (x->k2 >= 0) operand(g, x->k2, b);
  size_t n_out = 0;
  for (const char *t = x->t; *t; t++) {
    if (n_out + 1 >= EXPR) abort(); /* a generator bug: expressions are bounded */
    if (*t != '$') {
      o[n_out++] = *t;
      continue;
    }
    char ix[64] = "";
    const char *put = ix;
    switch (*++t) {
      case '1':
        put = a;
        break;
      case '2':
        put = b;
        break;
      case 'W':
      case 'E':
        operand(g, *t == 'W' ? K_W : K_E, w);
        put = w;
        break;
      case 'I':
      case 'J': {
        int len = snprintf(ix, sizeof ix, "const([");
        for (int i = 0; i < 4; i++)
          len += snprintf(ix + len, sizeof ix - (size_t)len, "%s%d", i ? ", " : "",
                          rnd(g, 0, *t == 'I' ? 3 : 4));
        snprintf(ix + len, sizeof ix - (size_t)len, "], i64)");
        break;
      }
      default: /* D */
        snprintf(ix, sizeof ix, "%d", ++g->seeds);
        break;
    }
    size_t len = strlen(put);
    if (n_out + len >= EXPR) abort(); /* a generator bug: expressions are bounded */
    memcpy(o + n_out, put, len);
    n_out += len;
  }
  o[n_out] = '\0';
}

#define FORMS(f) f, (int)(sizeof f / sizeof *f)

static void m_expr(gen *g, char *o) {
  from_forms(g, FORMS(m_forms), o);
}
static void s_expr(gen *g, char *o) {
  from_forms(g, FORMS(s_forms), o);
}

static void expr_of(gen *g, int k, char *o) {
  if (k == K_M)
    m_expr(g, o);
  else if (k == K_V)
    from_forms(g, FORMS(v_forms), o);
  else
    s_expr(g, o);
}

/* name = an expression of kind k, added to the visible values. */
static void let(gen *g, const char *prefix, int k, char *name) {
  char e[EXPR];
  g->used = 0;
  expr_of(g, k, e);
  fresh(g, prefix, name);
  emit(g, "%s = %s", name, e);
  add_val(g, name, k, false, g->used);
}

/* ---- counters: variables updated with assign, each access ordered after the last ---------- */

static counter *new_counter(gen *g) {
  if (g->nc == MAX_COUNTERS) return NULL;
  counter *c = &g->c[g->nc++];
  c->kind = chance(g, 70) ? K_S : K_V;
  c->last[0] = '\0';
  fresh(g, "c", c->name);
  emit(g, "%s = variable(%s)", c->name, c->kind == K_S ? "const(1.5)" : "ones([3]) * 0.5");
  g->p->features |= GT_PF_COUNTER;
  return c;
}

/* A value of the counter's shape without variables (it may be computed in a
 * control_dependencies block). */
static void counter_delta(gen *g, const counter *c, char *o) {
  bool saved = g->no_vars;
  g->no_vars = true;
  char a[EXPR];
  if (chance(g, 50)) {
    snprintf(o, EXPR, "%s", c->kind == K_S ? "0.5" : "ones([3]) * 0.25");
  } else {
    operand(g, c->kind, a);
    snprintf(o, EXPR, "stop_gradient(tanh(%s)) * 0.5", a);
  }
  g->no_vars = saved;
}

/* One access to top-level counter c: an update, a read, or an update in a
 * cond; ordered after c's last access. */
static void counter_access(gen *g, counter *c) {
  char name[24], d[EXPR], pred[EXPR];
  bool block = c->last[0] != '\0';
  if (block) {
    emit(g, "control_dependencies(%s) {", c->last);
    g->indent++;
  }
  bool saved = g->no_vars;
  g->no_vars = true;
  int what = rnd(g, 0, 4);
  switch (what) {
    case 0: /* assign_add / assign_sub */
      counter_delta(g, c, d);
      fresh(g, "u", name);
      emit(g, "%s = %s(%s, %s)", name, chance(g, 50) ? "assign_add" : "assign_sub", c->name, d);
      add_fetch(g, name);
      break;
    case 1: /* a read, after the last access */
      fresh(g, "r", name);
      emit(g, "%s = stop_gradient(%s * 2.0)", name, c->name);
      add_val(g, name, c->kind, false, 0);
      add_fetch(g, name);
      break;
    case 2: /* assign of a function of itself */
      fresh(g, "u", name);
      emit(g, "%s = assign(%s, %s * 0.5 + 1.0)", name, c->name, c->name);
      add_fetch(g, name);
      break;
    default: /* an update in a cond: one branch runs */
      operand(g, K_M, pred);
      fresh(g, "u", name);
      emit(g, "%s = cond(reduce_sum(%s) > 0.0) { assign_add(%s, %s) } else { assign_sub(%s, %s) }",
           name, pred, c->name, c->kind == K_S ? "1.0" : "ones([3])", c->name,
           c->kind == K_S ? "0.5" : "ones([3]) * 0.5");
      add_fetch(g, name);
      g->p->features |= GT_PF_COND;
      break;
  }
  g->no_vars = saved;
  if (block) {
    g->indent--;
    emit(g, "}");
  }
  snprintf(c->last, sizeof c->last, "%s", name);
}

/* ---- statements ------------------------------------------------------------------------ */

static void statement(gen *g, int loop_depth, const char *loop_ctr);

/* `device "..." {` around what follows, in programs with pins; true when opened. */
static bool open_pin(gen *g) {
  if (!g->pins || !chance(g, 30)) return false;
  int k = rnd(g, -1, g->workers - 1);
  if (k < 0)
    emit(g, "device \"/job:ps/task:0\" {");
  else
    emit(g, "device \"/job:worker/task:%d\" {", k);
  g->indent++;
  g->pinned++;
  g->p->features |= GT_PF_PINS;
  return true;
}
static void close_block(gen *g, bool opened) {
  if (!opened) return;
  g->pinned--;
  g->indent--;
  emit(g, "}");
}

/* A counted loop over a [4, 3] value (and sometimes a scalar), its body a
 * few statements, maybe a loop nested in it (its trip count set by this
 * loop's counter), a cond, a counter of its own, gradients() in the body. */
static void counted_loop(gen *g, int depth, const char *outer_ctr) {
  char li[24], lh[24], ls[24], ri[24], rh[24], rs[24], init[EXPR], sinit[EXPR], bound[64];
  int id = ++g->id;
  snprintf(li, sizeof li, "li%d", id);
  snprintf(lh, sizeof lh, "lh%d", id);
  snprintf(ls, sizeof ls, "ls%d", id);
  snprintf(ri, sizeof ri, "ri%d", id);
  snprintf(rh, sizeof rh, "rh%d", id);
  snprintf(rs, sizeof rs, "rs%d", id);
  bool two = chance(g, 35);
  g->used = 0;
  operand(g, K_M, init);
  unsigned outer = g->used, outer_s = 0; /* what the start values depend on */
  g->used = 0;
  if (two) operand(g, K_S, sinit);
  outer_s = g->used;
  if (outer_ctr && chance(g, 60))
    snprintf(bound, sizeof bound, "%s + 1", outer_ctr);
  else
    snprintf(bound, sizeof bound, "%d", rnd(g, 1, 4));
  counter *c = depth == 0 && g->nc < MAX_COUNTERS && chance(g, 25) ? new_counter(g) : NULL;
  if (two)
    emit(g, "%s, %s, %s = while (%s = const(0, i32), %s = %s, %s = %s; %s < %s) {", ri, rh, rs, li,
         lh, init, ls, sinit, li, bound);
  else
    emit(g, "%s, %s = while (%s = const(0, i32), %s = %s; %s < %s) {", ri, rh, li, lh, init, li,
         bound);
  g->level++;
  g->indent++;
  add_val(g, lh, K_M, false, outer);
  if (two) add_val(g, ls, K_S, false, outer_s);
  emit(g, "%s = %s + 1", li, li);
  g->p->features |= GT_PF_LOOP | (depth ? GT_PF_NESTED : 0);
  int n = rnd(g, 1, 3);
  for (int s = 0; s < n; s++) {
    g->used = 0;
    statement(g, depth + 1, li);
  }
  char read[24] = ""; /* this loop's own counter: updated, then read, in every iteration */
  if (c) {
    char u[24], *r = read, d[EXPR];
    counter_delta(g, c, d);
    fresh(g, "u", u);
    emit(g, "%s = assign_add(%s, %s)", u, c->name, d);
    fresh(g, "r", r);
    emit(g, "control_dependencies(%s) { %s = stop_gradient(%s * 0.5) }", u, r, c->name);
    add_val(g, r, c->kind, false, 0);
    g->p->features |= GT_PF_LOOP_STATE;
  }
  char e[EXPR], r[EXPR] = "";
  if (c) snprintf(r, sizeof r, " + %s * 0.1", read);
  g->used = 0;
  m_expr(g, e);
  emit(g, "%s = tanh(%s * 0.5 + %s%s)", lh, lh, e, r);
  if (two) {
    g->used = 0;
    s_expr(g, e);
    emit(g, "%s = tanh(%s * 0.9 + %s * 0.1)", ls, ls, e);
  }
  g->indent--;
  emit(g, "}");
  pop_level(g);
  /* D_TRAIN only from the start values: minimize() misses variables used
   * only in a loop body (gr_ops_float_vars does not follow the loop's back
   * edge: "depends on no float variable", or the variable is not trained),
   * so the loss needs a variable outside the loop too */
  add_val(g, rh, K_M, false, outer | D_LOOP);
  if (two) add_val(g, rs, K_S, false, outer_s | D_LOOP);
  g->used = outer | outer_s | D_LOOP;
  if (chance(g, 30)) add_fetch(g, ri);
  if (c) { /* read after the loop: after its last update */
    char f[24];
    fresh(g, "r", f);
    emit(g, "control_dependencies(%s) { %s = stop_gradient(%s * 1.0) }", ri, f, c->name);
    add_fetch(g, f);
    add_val(g, f, c->kind, false, 0);
    c->last[0] = '\0';
    snprintf(c->last, sizeof c->last, "%s", f);
  }
}

/* A loop ended by a float condition: the issue's `while (x = v; x < 100)
 * { x = x * a }`, kept growing so it ends; or a counter and a [4, 3] value. */
static void data_loop(gen *g) {
  char s[EXPR], a[EXPR], ls[24], rs[24], t[24];
  int id = ++g->id;
  snprintf(ls, sizeof ls, "ls%d", id);
  snprintf(rs, sizeof rs, "rs%d", id);
  g->used = 0;
  g->p->features |= GT_PF_LOOP | GT_PF_DATA_LOOP;
  if (chance(g, 60)) {
    operand(g, K_S, s);
    unsigned start = g->used; /* the body's variables do not count (counted_loop) */
    operand(g, K_S, a);
    g->used = start;
    emit(g, "%s = while (%s = abs(%s) + 0.5; %s < %d.0) { %s = %s * (abs(%s) + 1.1) }", rs, ls, s,
         ls, rnd(g, 2, 40), ls, ls, a);
    if (g->level == 0 && chance(g, 60) && !strchr(s, '(') && !strchr(a, '(')) {
      char gn[24];
      fresh(g, "g", gn);
      if (!strcmp(s, a))
        emit(g, "%s = gradients(%s, %s)", gn, rs, a);
      else
        emit(g, "%s_a, %s_s = gradients(%s, [%s, %s])", gn, gn, rs, a, s);
      if (!strcmp(s, a)) {
        add_fetch(g, gn);
      } else {
        char n1[32], n2[32];
        snprintf(n1, sizeof n1, "%s_a", gn);
        snprintf(n2, sizeof n2, "%s_s", gn);
        add_fetch(g, n1);
        add_fetch(g, n2);
      }
      g->p->features |= GT_PF_LOOP_GRAD | GT_PF_GRADIENTS;
    }
    add_fetch(g, rs);
    fresh(g, "t", t);
    emit(g, "%s = tanh(%s * 0.01)", t, rs);
    add_val(g, t, K_S, false, g->used | D_LOOP);
  } else {
    char lh[24], rh[24], m[EXPR], w[EXPR];
    snprintf(lh, sizeof lh, "lh%d", id);
    snprintf(rh, sizeof rh, "rh%d", id);
    operand(g, K_M, m);
    unsigned start = g->used;
    operand(g, K_W, w);
    g->used = start;
    emit(g,
         "%s, %s = while (%s = const(0.5), %s = %s; %s < 3.0) { %s = %s + reduce_mean(abs(%s)) + "
         "0.25; %s = tanh(%s @ %s) }",
         rs, rh, ls, lh, m, ls, ls, ls, lh, lh, lh, w);
    add_val(g, rh, K_M, false, g->used | D_LOOP);
    add_fetch(g, rs);
  }
}

/* A cond at this level: one value, or a [4, 3] value and a scalar. */
static void cond_stmt(gen *g) {
  char p[EXPR], a[EXPR], b[EXPR], n1[24];
  g->used = 0;
  operand(g, K_M, p);
  unsigned pred = g->used; /* every value of the cond depends on its predicate */
  const char *op = chance(g, 50) ? ">" : "<";
  fresh(g, "t", n1);
  g->p->features |= GT_PF_COND;
  if (chance(g, 70)) {
    m_expr(g, a);
    m_expr(g, b);
    emit(g, "%s = cond(reduce_mean(%s) %s 0.0) { %s } else { %s }", n1, p, op, a, b);
    add_val(g, n1, K_M, false, g->used);
  } else {
    char n2[24], c[EXPR], d[EXPR];
    unsigned first, second;
    fresh(g, "t", n2);
    g->used = pred;
    m_expr(g, a);
    m_expr(g, b);
    first = g->used;
    g->used = pred;
    s_expr(g, c);
    s_expr(g, d);
    second = g->used;
    emit(g, "%s, %s = cond(reduce_mean(%s) %s 0.0) { %s, %s } else { %s, %s }", n1, n2, p, op, a, c,
         b, d);
    add_val(g, n1, K_M, false, first);
    add_val(g, n2, K_S, false, second);
    g->used = first | second;
  }
}

/* gradients() in a loop body, with respect to the loop's value. */
static void body_gradient(gen *g) {
  int idx[MAX_VALS], n = 0, w = pick(g, K_W);
  for (int i = 0; i < g->nv; i++) /* a value of this body: the iteration differentiates it */
    if (g->v[i].kind == K_M && g->v[i].level == g->level) idx[n++] = i;
  if (!n || w < 0) return;
  int h = idx[rnd(g, 0, n - 1)];
  char d[24], b[24];
  fresh(g, "d", d);
  fresh(g, "b", b);
  emit(g, "%s = gradients(reduce_sum(tanh(%s @ %s)), %s)", d, g->v[h].name, g->v[w].name,
       g->v[h].name);
  emit(g, "%s = %s - %s * 0.1", b, g->v[h].name, d);
  add_val(g, b, K_M, false, D_TRAIN);
  g->used |= D_TRAIN;
  g->p->features |= GT_PF_BODY_GRAD;
}

/* A value made in a colocate_with block: with value x. Not inside a device
 * block: a pin and a colocation that exclude each other are the program's
 * error (docs/placement.md), which the cost placer rightly refuses. */
static void colocated(gen *g, int x, const char *prefix) {
  char a[EXPR], n[24];
  if (g->pinned) return;
  operand(g, K_M, a);
  fresh(g, prefix, n);
  emit(g, "colocate_with(%s) { %s = tanh(%s) * 0.5 }", g->v[x].name, n, a);
  add_val(g, n, K_M, false, g->used);
  g->p->features |= GT_PF_COLOCATE;
}

/* A statement at loop depth loop_depth (0: the top level). */
static void statement(gen *g, int loop_depth, const char *loop_ctr) {
  char n[24];
  bool pinned = open_pin(g);
  int w = rnd(g, 0, 99);
  g->used = 0;
  if (loop_depth > 0) { /* in a loop body */
    if (w < 45) {
      let(g, "b", chance(g, 75) ? K_M : (chance(g, 50) ? K_V : K_S), n);
    } else if (w < 60 && loop_depth < 3) {
      counted_loop(g, loop_depth, loop_ctr);
    } else if (w < 80) {
      cond_stmt(g);
      g->p->features |= GT_PF_COND_LOOP;
    } else if (w < 88) {
      body_gradient(g);
    } else if (w < 94) {
      int x = pick(g, K_M);
      if (x >= 0) colocated(g, x, "b");
    } else {
      data_loop(g);
    }
    close_block(g, pinned);
    return;
  }
  if (w < 25) {
    let(g, "t", chance(g, 70) ? K_M : (chance(g, 50) ? K_V : K_S), n);
    if (chance(g, 30)) add_fetch(g, n);
  } else if (w < 45) {
    counted_loop(g, 0, NULL);
  } else if (w < 52) {
    data_loop(g);
  } else if (w < 62) {
    cond_stmt(g);
  } else if (w < 74) {
    counter *c = g->nc && chance(g, 60) ? &g->c[rnd(g, 0, g->nc - 1)] : new_counter(g);
    if (c) counter_access(g, c);
  } else if (w < 86) { /* gradients() of a visible value, with respect to a few */
    int y = rnd(g, 0, g->nv - 1), nx = rnd(g, 1, 3), xs[3];
    char list[256] = "", outs[256] = "";
    size_t ll = 0, lo = 0;
    for (int i = 0; i < nx; i++) {
      xs[i] = rnd(g, 0, g->nv - 1);
      fresh(g, "g", n);
      ll += (size_t)snprintf(list + ll, sizeof list - ll, "%s%s", i ? ", " : "", g->v[xs[i]].name);
      lo += (size_t)snprintf(outs + lo, sizeof outs - lo, "%s%s", i ? ", " : "", n);
      add_fetch(g, n);
    }
    if (g->v[y].dep & D_LOOP) g->p->features |= GT_PF_LOOP_GRAD;
    if (nx == 1)
      emit(g, "%s = gradients(reduce_sum(%s), %s)", outs, g->v[y].name, list);
    else
      emit(g, "%s = gradients(reduce_sum(%s), [%s])", outs, g->v[y].name, list);
    g->p->features |= GT_PF_GRADIENTS;
  } else if (w < 93) {
    colocated(g, rnd(g, 0, g->nv - 1), "t");
  } else {
    let(g, "t", K_S, n);
    add_fetch(g, n);
  }
  close_block(g, pinned);
}

/* A FIFO queue: two enqueues and one dequeue per step (it grows by one
 * element a step, so a dequeue sees an earlier step's value), or many at a
 * time; the ops in one ordered chain. */
static void queue_block(gen *g) {
  char q[24], e1[24], e2[24], d[24], n[24], a[EXPR], b[EXPR];
  fresh(g, "q", q);
  fresh(g, "e", e1);
  fresh(g, "e", e2);
  fresh(g, "dq", d);
  fresh(g, "n", n);
  g->p->features |= GT_PF_QUEUE;
  g->used = 0;
  if (chance(g, 60)) {
    emit(g, "%s = fifo_queue([f32], shapes=[[4, 3]])", q);
    operand(g, K_M, a);
    emit(g, "%s = queue_enqueue(%s, %s)", e1, q, a);
    g->no_vars = true;
    operand(g, K_M, b);
    emit(g, "control_dependencies(%s) { %s = queue_enqueue(%s, %s) }", e1, e2, q, b);
    g->no_vars = false;
    emit(g, "control_dependencies(%s) { %s = queue_dequeue(%s) }", e2, d, q);
    add_val(g, d, K_M, false, 0);
  } else {
    char ids[24];
    fresh(g, "di", ids);
    emit(g, "%s = fifo_queue([f32, i64], shapes=[[3], []])", q);
    operand(g, K_M, a);
    emit(g, "%s = queue_enqueue_many(%s, %s, const([%d, %d, %d, %d], i64))", e1, q, a, rnd(g, 0, 9),
         rnd(g, 0, 9), rnd(g, 0, 9), rnd(g, 0, 9));
    emit(g, "control_dependencies(%s) { %s, %s = queue_dequeue_many(%s, 3) }", e1, d, ids, q);
    snprintf(e2, sizeof e2, "%s", d);
    char t[24];
    fresh(g, "t", t);
    emit(g, "%s = reduce_sum(%s, axes=[0])", t, d);
    add_val(g, t, K_V, false, 0);
    add_fetch(g, ids);
  }
  emit(g, "control_dependencies(%s) { %s = queue_size(%s) }", d, n, q);
  add_fetch(g, d);
  add_fetch(g, n);
}

/* A gradient accumulator: apply a value, take the mean of the one gradient,
 * count what it holds; in that order. */
static void accumulator_block(gen *g) {
  char ac[24], ap[24], tk[24], na[24], a[EXPR], attrs[128];
  fresh(g, "ac", ac);
  fresh(g, "ap", ap);
  fresh(g, "tk", tk);
  fresh(g, "na", na);
  snprintf(attrs, sizeof attrs, "accumulator=\"%s/%s\", dtype=f32, shape=[3]", g->scope, ac);
  emit(g, "%s = accumulator(%s)", ac, attrs);
  operand(g, K_V, a);
  emit(g, "%s = accumulator_apply_grad(%s, const(1000000, i64), %s, %s)", ap, ac, a, attrs);
  emit(g, "control_dependencies(%s) { %s = accumulator_take_grad(%s, const(1, i64), %s) }", ap, tk,
       ac, attrs);
  emit(g, "control_dependencies(%s) { %s = accumulator_num_accumulated(%s, %s) }", tk, na, ac,
       attrs);
  add_val(g, tk, K_V, false, 0);
  add_fetch(g, tk);
  add_fetch(g, na);
  g->p->features |= GT_PF_ACCUM;
}

/* Batch norm in training over a [4, 3] value: trained gamma and beta, and
 * moving statistics it updates itself. */
static void batch_norm_block(gen *g) {
  char gm[24], bt[24], mm[24], mv[24], bn[24], a[EXPR];
  fresh(g, "gm", gm);
  fresh(g, "bt", bt);
  fresh(g, "mm", mm);
  fresh(g, "mv", mv);
  fresh(g, "bn", bn);
  emit(g, "%s = variable(ones([3]))", gm);
  emit(g, "%s = variable(zeros([3]))", bt);
  emit(g, "%s = variable(zeros([3]))", mm);
  emit(g, "%s = variable(ones([3]))", mv);
  g->used = 0;
  operand(g, K_M, a);
  emit(g, "%s = batch_norm(%s, %s, %s, %s, %s, momentum=0.9)", bn, a, gm, bt, mm, mv);
  add_val(g, gm, K_V, true, 0);
  add_val(g, bt, K_V, true, 0);
  add_val(g, bn, K_M, false, D_TRAIN | g->used);
  g->p->features |= GT_PF_BATCH_NORM;
}

/* The loss of 1 to 3 visible values (at least one depending on a trained
 * variable) and its minimize. Every update waits for the loss (the
 * gradients start from ones_like(loss)), so for every read of a variable
 * it updates (the variable's one node, which the loss reads). In a quarter
 * of the programs inside control_dependencies(loss) as well: the slots and
 * their initialisers stay out of it (initialising them must not run the
 * loss, batch norm's update or a counter's, once more). */
static void training(gen *g) {
  char terms[4 * EXPR] = "";
  size_t len = 0;
  unsigned dep = 0;
  int n = rnd(g, 1, 3);
  for (int i = 0; i < n; i++) {
    int k = rnd(g, 0, g->nv - 1);
    const val *v = &g->v[k];
    const char *sep = i ? " + " : "";
    if (v->kind == K_M)
      len += (size_t)snprintf(terms + len, sizeof terms - len, "%sreduce_mean(square(%s)) * 0.5",
                              sep, v->name);
    else if (v->kind == K_S)
      len += (size_t)snprintf(terms + len, sizeof terms - len, "%s%s * 0.1", sep, v->name);
    else
      len += (size_t)snprintf(terms + len, sizeof terms - len, "%sreduce_sum(square(%s)) * 0.1",
                              sep, v->name);
    dep |= v->dep;
  }
  if (dep & D_LOOP) g->p->features |= GT_PF_LOOP_GRAD;
  if (!(dep & D_TRAIN)) {
    int w = pick(g, K_W);
    char x[EXPR];
    operand(g, K_M, x);
    snprintf(terms + len, sizeof terms - len, " + reduce_mean(square(tanh(%s @ %s))) * 0.1", x,
             g->v[w].name);
  }
  emit(g, "loss = %s", terms);
  add_fetch(g, "loss");
  const char *opt;
  char ob[96];
  switch (rnd(g, 0, 3)) {
    case 0:
      opt = "sgd(0.05)";
      break;
    case 1:
      opt = "momentum(0.05, momentum=0.9)";
      break;
    case 2:
      opt = "momentum(0.05, momentum=0.9, nesterov=true)";
      break;
    default:
      opt = "adam(0.01)";
      break;
  }
  snprintf(ob, sizeof ob, "%s", opt);
  if (rnd(g, 0, 3) == 0)
    emit(g, "control_dependencies(loss) { train = minimize(loss, %s) }", ob);
  else
    emit(g, "train = minimize(loss, %s)", ob);
  snprintf(g->p->target, sizeof g->p->target, "train");
  g->p->features |= GT_PF_TRAIN;
}

void gt_program_make(uint64_t seed, const char *scope, int workers, gt_program *p) {
  memset(p, 0, sizeof *p);
  gen *g = calloc(1, sizeof *g);
  if (!g) abort();
  g->r.s = seed * 0x2545f4914f6cdd1dull + 17;
  g->p = p;
  g->workers = workers > 0 ? workers : 1;
  g->scope = scope;
  g->pins = chance(g, 33);
  emit(g, "# random program %llu (tests/unit/random_program.c)", (unsigned long long)seed);
  emit(g, "scope \"%s\" {", scope);
  g->indent++;
  /* inputs: fresh random values every step, a constant */
  char n[24];
  int ninputs = rnd(g, 1, 2);
  for (int i = 0; i < ninputs; i++) {
    fresh(g, "x", n);
    emit(g, "%s = random_uniform([4, 3], minval=-1, maxval=1, seed=%d)", n, ++g->seeds);
    add_val(g, n, K_M, false, 0);
  }
  fresh(g, "k", n);
  emit(g, "%s = const(%.2f)", n, 0.25 * rnd(g, 1, 8));
  add_val(g, n, K_S, false, 0);
  /* trained variables */
  int nw = rnd(g, 1, 2);
  for (int i = 0; i < nw; i++) {
    fresh(g, "w", n);
    emit(g, "%s = variable(random_uniform([3, 3], minval=-0.6, maxval=0.6, seed=%d))", n,
         ++g->seeds);
    add_val(g, n, K_W, true, 0);
  }
  if (chance(g, 60)) {
    fresh(g, "b", n);
    emit(g, "%s = variable(zeros([3]))", n);
    add_val(g, n, K_V, true, 0);
  }
  if (chance(g, 40)) {
    fresh(g, "a", n);
    emit(g, "%s = variable(const(%.2f))", n, 0.5 + 0.25 * rnd(g, 0, 4));
    add_val(g, n, K_S, true, 0);
  }
  if (chance(g, 30)) {
    fresh(g, "e", n);
    emit(g, "%s = variable(random_uniform([5, 3], minval=-1, maxval=1, seed=%d))", n, ++g->seeds);
    add_val(g, n, K_E, true, 0);
  }
  bool queue = chance(g, 20), accum = chance(g, 12), bn = chance(g, 25);
  int nstmt = rnd(g, 3, 10);
  int at_queue = rnd(g, 0, nstmt), at_accum = rnd(g, 0, nstmt), at_bn = rnd(g, 0, nstmt);
  for (int s = 0; s <= nstmt; s++) {
    if (queue && s == at_queue) queue_block(g);
    if (accum && s == at_accum) accumulator_block(g);
    if (bn && s == at_bn) batch_norm_block(g);
    if (s < nstmt) statement(g, 0, NULL);
  }
  /* a few more values to look at */
  for (int i = 0; i < 2; i++) {
    int k = rnd(g, 0, g->nv - 1);
    if (g->v[k].level == 0 && !g->v[k].var) add_fetch(g, g->v[k].name);
  }
  if (chance(g, 85)) training(g);
  g->indent--;
  emit(g, "}");
  char line[GT_PROG_MAX_FETCH * 34 + 16];
  size_t len = (size_t)snprintf(line, sizeof line, "fetch ");
  for (int i = 0; i < p->nfetch; i++)
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", i ? ", " : "", p->fetch[i]);
  if (p->nfetch) emit(g, "%s", line);
  if (p->target[0]) emit(g, "target %s", p->target);
  free(g);
}

void gt_program_free(gt_program *p) {
  free(p->text);
  memset(p, 0, sizeof *p);
}

const char *gt_program_feature_name(int i) {
  static const char *const names[GT_PF_COUNT] = {
      "loop",        "nested loop", "cond in loop", "data loop",  "loop gradient", "body gradient",
      "train",       "queue",       "accumulator",  "batch norm", "counter",       "loop counter",
      "device pins", "colocate",    "gradients",    "cond"};
  return i >= 0 && i < GT_PF_COUNT ? names[i] : "?";
}
