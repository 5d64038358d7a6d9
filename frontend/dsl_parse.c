/* DSL parser: recursive descent, one function per grammar rule (the rule is
 * in the comment above it), one token of lookahead (ps->lx.tok). Builds the
 * AST in an arena; the first error stops parsing. The full grammar is in
 * docs/dsl.md. */
#include <stdio.h>
#include <string.h>

#include "dsl_internal.h"

#define MAX_DEPTH 200

typedef dsl_parser P;

#define TOK (ps->lx.tok)

static bool failed(P *ps) {
  return ps->err && ps->err->code != GR_OK;
}

static void describe(const dsl_token *t, char *buf, size_t cap) {
  if (t->kind == T_IDENT || t->kind == T_NUMBER || t->kind == T_STRING) {
    int len = t->len > 40 ? 40 : (int)t->len;
    snprintf(buf, cap, "%s '%.*s'", dsl_tok_name(t->kind), len, t->start);
  } else {
    snprintf(buf, cap, "%s", dsl_tok_name(t->kind));
  }
}

static bool advance(P *ps) {
  if (!dsl_lex_next(&ps->lx)) return false;
  return true;
}

static bool syntax_error(P *ps, const char *expected) {
  if (failed(ps)) return false;
  char found[80];
  describe(&TOK, found, sizeof found);
  if (TOK.kind == T_EOF && ps->lx.depth > 0) { /* name the bracket left open */
    dsl_pos open = ps->lx.stack_pos[ps->lx.depth - 1];
    char o = ps->lx.stack[ps->lx.depth - 1], note[32];
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos,
              "unclosed '%c' opened at line %d: expected %s before end of file", o, open.line,
              expected);
    snprintf(note, sizeof note, "'%c' opened here", o);
    dsl_error_note(ps->err, open, note);
    return false;
  }
  dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos, "expected %s, found %s", expected, found);
  return false;
}

static bool expect(P *ps, dsl_tok k, const char *what) {
  if (TOK.kind != k) return syntax_error(ps, what);
  return advance(ps);
}

/* A closing bracket: on a mismatch also shows where the bracket opened. */
static bool expect_close(P *ps, dsl_tok k, dsl_pos open, const char *what) {
  if (TOK.kind == k) return advance(ps);
  if (failed(ps)) return false;
  char found[80], note[64];
  describe(&TOK, found, sizeof found);
  const char *o = k == T_RBRACE ? "{" : k == T_RPAREN ? "(" : "[";
  if (TOK.kind == T_EOF)
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos,
              "unclosed '%s' opened at line %d: expected %s before end of file", o, open.line,
              what);
  else
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos,
              "expected %s to close the '%s' opened at line %d, found %s", what, o, open.line,
              found);
  snprintf(note, sizeof note, "'%s' opened here", o);
  dsl_error_note(ps->err, open, note);
  return false;
}

static const char *tok_text(P *ps) {
  return dsl_strndup(ps->arena, TOK.start, TOK.len);
}

static dsl_expr *new_expr(P *ps, dsl_expr_kind k, dsl_pos pos) {
  dsl_expr *e = dsl_alloc(ps->arena, sizeof *e);
  if (!e) {
    gr_error_set(ps->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory while parsing");
    return NULL;
  }
  e->kind = k;
  e->pos = pos;
  return e;
}

/* Growable arrays in the arena (old copies stay until the arena resets). */
static bool grow(P *ps, void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return true;
  int nc = *cap ? *cap * 2 : 4;
  void *na = dsl_alloc(ps->arena, elem * (size_t)nc);
  if (!na) {
    gr_error_set(ps->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory while parsing");
    return false;
  }
  if (n) memcpy(na, *arr, elem * (size_t)n);
  *arr = na;
  *cap = nc;
  return true;
}

/* Bounds the parser's recursion: parentheses, brackets, call arguments,
 * blocks, unary operators and the right side of '**' nest; a flat chain of
 * binary operators does not (it is parsed by a loop). */
static bool enter(P *ps) {
  if (++ps->depth > MAX_DEPTH) {
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos,
              "nested too deeply: more than %d levels of parentheses, brackets, blocks, unary "
              "operators or '**'",
              MAX_DEPTH);
    return false;
  }
  return true;
}

static dsl_expr *parse_expr(P *ps);
static bool parse_block(P *ps, dsl_block *b);
static dsl_stmt *parse_stmt(P *ps);

/* string-literal contents with escapes resolved */
static const char *string_value(P *ps, const dsl_token *t) {
  char *s = dsl_alloc(ps->arena, t->len);
  if (!s) return NULL;
  size_t n = 0;
  for (size_t i = 1; i + 1 < t->len; i++) {
    char c = t->start[i];
    if (c == '\\') {
      c = t->start[++i];
      c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
    }
    s[n++] = c;
  }
  s[n] = '\0';
  return s;
}

/* args = "(" [ arg { "," arg } [","] ] ")"     arg = [ IDENT "=" ] expr */
static bool parse_call_args(P *ps, dsl_expr *call) {
  dsl_pos open = TOK.pos;
  if (!expect(ps, T_LPAREN, "'('")) return false;
  int cap = 0;
  while (TOK.kind != T_RPAREN) {
    if (!grow(ps, (void **)&call->call.args, call->call.nargs, &cap, sizeof(dsl_arg))) return false;
    dsl_arg *a = &call->call.args[call->call.nargs];
    a->pos = TOK.pos;
    if (TOK.kind == T_IDENT) {
      /* IDENT "=" is a keyword argument; otherwise the IDENT starts an expression */
      dsl_token id = TOK;
      if (!advance(ps)) return false;
      if (TOK.kind == T_ASSIGN) {
        a->name = dsl_strndup(ps->arena, id.start, id.len);
        if (!advance(ps)) return false;
        for (int i = 0; i < call->call.nargs; i++)
          if (call->call.args[i].name && strcmp(call->call.args[i].name, a->name) == 0) {
            dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, a->pos, "keyword argument '%s' given twice",
                      a->name);
            return false;
          }
        a->value = parse_expr(ps);
      } else {
        dsl_expr *e = new_expr(ps, E_IDENT, id.pos);
        if (!e) return false;
        e->str = dsl_strndup(ps->arena, id.start, id.len);
        ps->pending = e;
        a->value = parse_expr(ps);
      }
    } else {
      for (int i = 0; i < call->call.nargs; i++)
        if (call->call.args[i].name) {
          dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, a->pos,
                    "positional argument after keyword argument '%s'", call->call.args[i].name);
          return false;
        }
      a->value = parse_expr(ps);
    }
    if (!a->value) return false;
    if (!a->name)
      for (int i = 0; i < call->call.nargs; i++)
        if (call->call.args[i].name) {
          dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, a->pos,
                    "positional argument after keyword argument '%s'", call->call.args[i].name);
          return false;
        }
    call->call.nargs++;
    if (TOK.kind != T_COMMA) break;
    if (!advance(ps)) return false;
  }
  return expect_close(ps, T_RPAREN, open, "')'");
}

/* The built-ins that take a block (`replicas(2, x) { ... }`); lowered by
 * dsl_parallel.c, which needs the block. The grammar knows their names. */
static const char *const block_builtins[] = {"ps_variables", "replicas", "micro_batches"};

static bool takes_block(const char *name) {
  for (size_t i = 0; i < sizeof block_builtins / sizeof block_builtins[0]; i++)
    if (strcmp(name, block_builtins[i]) == 0) return true;
  return false;
}

/* block_call = IDENT args block, for the built-ins that take a block; the
 * block is optional here and required when lowering, so a missing one is
 * reported by name. */
static bool parse_call_block(P *ps, dsl_expr *call) {
  if (TOK.kind != T_LBRACE || !takes_block(call->call.name)) return true;
  call->call.block = dsl_alloc(ps->arena, sizeof *call->call.block);
  if (!call->call.block) {
    gr_error_set_oom(ps->err);
    return false;
  }
  return parse_block(ps, call->call.block);
}

/* list = "[" [ expr { "," expr } [","] ] "]" */
static dsl_expr *parse_list(P *ps) {
  dsl_expr *e = new_expr(ps, E_LIST, TOK.pos);
  if (!e || !advance(ps)) return NULL;
  int cap = 0;
  while (TOK.kind != T_RBRACK) {
    if (!grow(ps, (void **)&e->list.items, e->list.n, &cap, sizeof(dsl_expr *))) return NULL;
    dsl_expr *it = parse_expr(ps);
    if (!it) return NULL;
    e->list.items[e->list.n++] = it;
    if (TOK.kind != T_COMMA) break;
    if (!advance(ps)) return NULL;
  }
  return expect_close(ps, T_RBRACK, e->pos, "']'") ? e : NULL;
}

/* cond_expr = "cond" "(" expr ")" block [NEWLINE] "else" block */
static dsl_expr *parse_cond(P *ps) {
  dsl_expr *e = new_expr(ps, E_COND, TOK.pos);
  if (!e || !advance(ps)) return NULL;
  dsl_pos open = TOK.pos;
  if (!expect(ps, T_LPAREN, "'(' after 'cond'")) return NULL;
  if (!(e->cond.pred = parse_expr(ps))) return NULL;
  if (!expect_close(ps, T_RPAREN, open, "')'")) return NULL;
  if (!parse_block(ps, &e->cond.then_block)) return NULL;
  while (TOK.kind == T_NEWLINE)
    if (!advance(ps)) return NULL;
  if (!expect(ps, T_ELSE, "'else' (cond needs both branches)")) return NULL;
  if (!parse_block(ps, &e->cond.else_block)) return NULL;
  return e;
}

/* while_expr = "while" "(" loopvar { "," loopvar } ";" expr ")" block
 * loopvar    = IDENT "=" expr */
static dsl_expr *parse_while(P *ps) {
  dsl_expr *e = new_expr(ps, E_WHILE, TOK.pos);
  if (!e || !advance(ps)) return NULL;
  dsl_pos open = TOK.pos;
  if (!expect(ps, T_LPAREN, "'(' after 'while'")) return NULL;
  int cap = 0;
  for (;;) {
    if (TOK.kind != T_IDENT)
      return syntax_error(ps, "a loop variable (name = initial value)"), NULL;
    if (!grow(ps, (void **)&e->loop.vars, e->loop.nvars, &cap, sizeof(dsl_loopvar))) return NULL;
    dsl_loopvar *v = &e->loop.vars[e->loop.nvars++];
    v->pos = TOK.pos;
    v->name = tok_text(ps);
    if (!advance(ps) || !expect(ps, T_ASSIGN, "'=' after the loop variable")) return NULL;
    if (!(v->init = parse_expr(ps))) return NULL;
    if (TOK.kind != T_COMMA) break;
    if (!advance(ps)) return NULL;
  }
  if (!expect(ps, T_SEMI, "';' before the loop condition")) return NULL;
  if (!(e->loop.pred = parse_expr(ps))) return NULL;
  if (!expect_close(ps, T_RPAREN, open, "')'")) return NULL;
  if (!parse_block(ps, &e->loop.body)) return NULL;
  return e;
}

/* primary = NUMBER | STRING | "true" | "false" | "?" | IDENT [ args ]
 *         | "(" expr ")" | list | cond_expr | while_expr */
/* An identifier e followed by '(' is a call: its arguments and block. */
static dsl_expr *call_if_called(P *ps, dsl_expr *e) {
  if (TOK.kind == T_LPAREN) {
    const char *name = e->str;
    e->kind = E_CALL;
    e->call.name = name;
    if (!parse_call_args(ps, e) || !parse_call_block(ps, e)) return NULL;
  }
  return e;
}

static dsl_expr *parse_primary(P *ps) {
  dsl_expr *e;
  if (ps->pending) { /* an IDENT the caller already consumed */
    e = ps->pending;
    ps->pending = NULL;
    return call_if_called(ps, e);
  }
  switch (TOK.kind) {
    case T_NUMBER:
      if (!(e = new_expr(ps, E_NUM, TOK.pos))) return NULL;
      e->num.v = TOK.num;
      e->num.i = TOK.inum;
      e->num.is_int = TOK.is_int;
      return advance(ps) ? e : NULL;
    case T_STRING:
      if (!(e = new_expr(ps, E_STR, TOK.pos))) return NULL;
      if (!(e->str = string_value(ps, &TOK))) return NULL;
      return advance(ps) ? e : NULL;
    case T_TRUE:
    case T_FALSE:
      if (!(e = new_expr(ps, E_BOOL, TOK.pos))) return NULL;
      e->b = TOK.kind == T_TRUE;
      return advance(ps) ? e : NULL;
    case T_QUESTION:
      if (!(e = new_expr(ps, E_UNKNOWN_DIM, TOK.pos))) return NULL;
      return advance(ps) ? e : NULL;
    case T_IDENT:
      if (!(e = new_expr(ps, E_IDENT, TOK.pos))) return NULL;
      e->str = tok_text(ps);
      if (!advance(ps)) return NULL;
      return call_if_called(ps, e);
    case T_LPAREN: {
      dsl_pos open = TOK.pos;
      if (!advance(ps) || !(e = parse_expr(ps))) return NULL;
      return expect_close(ps, T_RPAREN, open, "')'") ? e : NULL;
    }
    case T_LBRACK:
      return parse_list(ps);
    case T_COND:
      return parse_cond(ps);
    case T_WHILE:
      return parse_while(ps);
    default:
      syntax_error(ps, "an expression");
      return NULL;
  }
}

static dsl_expr *parse_unary(P *ps);

/* power = primary [ "**" unary ]        (right-associative, binds tighter than unary minus) */
static dsl_expr *parse_power(P *ps) {
  dsl_expr *a = parse_primary(ps);
  if (!a || TOK.kind != T_POW) return a;
  dsl_expr *e = new_expr(ps, E_BINARY, TOK.pos);
  if (!e || !advance(ps)) return NULL;
  e->bin.op = T_POW;
  e->bin.a = a;
  if (!enter(ps) || !(e->bin.b = parse_unary(ps))) return NULL;
  ps->depth--;
  return e;
}

/* unary = ( "-" | "+" | "!" ) unary | power */
static dsl_expr *parse_unary(P *ps) {
  if (!ps->pending && (TOK.kind == T_MINUS || TOK.kind == T_PLUS || TOK.kind == T_NOT)) {
    if (!enter(ps)) return NULL;
    dsl_expr *e = new_expr(ps, E_UNARY, TOK.pos);
    if (!e) return NULL;
    e->bin.op = TOK.kind;
    if (!advance(ps) || !(e->bin.a = parse_unary(ps))) return NULL;
    ps->depth--;
    return e;
  }
  return parse_power(ps);
}

typedef dsl_expr *(*level_fn)(P *ps);

/* One left-associative binary level: next { op next }. */
static dsl_expr *parse_level(P *ps, level_fn next, const dsl_tok *ops, int nops) {
  dsl_expr *a = next(ps);
  while (a) {
    int k = 0;
    while (k < nops && TOK.kind != ops[k]) k++;
    if (k == nops) return a;
    dsl_expr *e = new_expr(ps, E_BINARY, TOK.pos);
    if (!e) return NULL;
    e->bin.op = TOK.kind;
    e->bin.a = a;
    if (!advance(ps) || !(e->bin.b = next(ps))) return NULL;
    a = e;
  }
  return NULL;
}

/* mul_expr = unary { ( "*" | "/" | "@" ) unary } */
static dsl_expr *parse_mul(P *ps) {
  static const dsl_tok ops[] = {T_STAR, T_SLASH, T_AT};
  return parse_level(ps, parse_unary, ops, 3);
}
/* add_expr = mul_expr { ( "+" | "-" ) mul_expr } */
static dsl_expr *parse_add(P *ps) {
  static const dsl_tok ops[] = {T_PLUS, T_MINUS};
  return parse_level(ps, parse_mul, ops, 2);
}
/* cmp_expr = add_expr { ( "==" | "!=" | "<" | "<=" | ">" | ">=" ) add_expr } */
static dsl_expr *parse_cmp(P *ps) {
  static const dsl_tok ops[] = {T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE};
  return parse_level(ps, parse_add, ops, 6);
}
/* and_expr = cmp_expr { "&&" cmp_expr } */
static dsl_expr *parse_and(P *ps) {
  static const dsl_tok ops[] = {T_AND};
  return parse_level(ps, parse_cmp, ops, 1);
}

/* expr = and_expr { "||" and_expr } */
static dsl_expr *parse_expr(P *ps) {
  static const dsl_tok ops[] = {T_OR};
  if (!enter(ps)) return NULL;
  dsl_expr *e = parse_level(ps, parse_and, ops, 1);
  ps->depth--;
  return e;
}

/* block = "{" { stmt } "}" */
static bool parse_block(P *ps, dsl_block *b) {
  b->open = TOK.pos;
  if (!expect(ps, T_LBRACE, "'{'")) return false;
  if (!enter(ps)) return false;
  int cap = 0;
  for (;;) {
    while (TOK.kind == T_NEWLINE || TOK.kind == T_SEMI)
      if (!advance(ps)) return false;
    if (TOK.kind == T_RBRACE || TOK.kind == T_EOF) break;
    if (!grow(ps, (void **)&b->stmts, b->n, &cap, sizeof(dsl_stmt *))) return false;
    dsl_stmt *s = parse_stmt(ps);
    if (!s) return false;
    b->stmts[b->n++] = s;
  }
  ps->depth--;
  return expect_close(ps, T_RBRACE, b->open, "'}'");
}

/* tuple = expr { "," expr }: one expression is its own value, several are
 * a tuple (a block's value, `return p, q`, the right side of a binding).
 * first is the first expression, already parsed. */
static dsl_expr *parse_tuple_rest(P *ps, dsl_expr *first) {
  if (!first || TOK.kind != T_COMMA) return first;
  dsl_expr *t = new_expr(ps, E_TUPLE, first->pos);
  if (!t) return NULL;
  int cap = 0;
  for (dsl_expr *it = first; it;) {
    if (!grow(ps, (void **)&t->list.items, t->list.n, &cap, sizeof(dsl_expr *))) return NULL;
    t->list.items[t->list.n++] = it;
    if (TOK.kind != T_COMMA) return t;
    if (!advance(ps)) return NULL;
    if (TOK.kind == T_ASSIGN) return syntax_error(ps, "a name or an expression after ','"), NULL;
    it = parse_expr(ps);
  }
  return NULL;
}

static dsl_expr *parse_tuple(P *ps) {
  return parse_tuple_rest(ps, parse_expr(ps));
}

static dsl_stmt *new_stmt(P *ps, dsl_stmt_kind k) {
  dsl_stmt *s = dsl_alloc(ps->arena, sizeof *s);
  if (!s) {
    gr_error_set(ps->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory while parsing");
    return NULL;
  }
  s->kind = k;
  s->pos = TOK.pos;
  return s;
}

/* names = IDENT { "," IDENT } */
static bool parse_names(P *ps, dsl_stmt *s, const char *what) {
  int cap = 0;
  for (;;) {
    if (TOK.kind != T_IDENT) return syntax_error(ps, what);
    if (!grow(ps, (void **)&s->names, s->nnames, &cap, sizeof(char *))) return false;
    int cap2 = cap / 2 > s->nnames ? cap / 2 : 0;
    (void)cap2;
    dsl_pos *np = dsl_alloc(ps->arena, sizeof(dsl_pos) * (size_t)cap);
    if (!np) return false;
    if (s->nnames) memcpy(np, s->name_pos, sizeof(dsl_pos) * (size_t)s->nnames);
    s->name_pos = np;
    s->name_pos[s->nnames] = TOK.pos;
    s->names[s->nnames++] = tok_text(ps);
    if (!advance(ps)) return false;
    if (TOK.kind != T_COMMA) return true;
    if (!advance(ps)) return false;
  }
}

/* The names of a binding, from what was parsed before its '=': a name or
 * a tuple of names. Anything else is an error at the first non-name. */
static bool bind_targets(P *ps, dsl_stmt *s, dsl_expr *lhs) {
  int n = lhs->kind == E_TUPLE ? lhs->list.n : 1;
  dsl_expr **items = lhs->kind == E_TUPLE ? lhs->list.items : &lhs;
  s->names = dsl_alloc(ps->arena, sizeof(char *) * (size_t)n);
  s->name_pos = dsl_alloc(ps->arena, sizeof(dsl_pos) * (size_t)n);
  if (!s->names || !s->name_pos) {
    gr_error_set(ps->err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory while parsing");
    return false;
  }
  for (int i = 0; i < n; i++) {
    if (items[i]->kind != E_IDENT) {
      const dsl_expr *start = items[i]; /* a binary expression's position is its operator's */
      while (start->kind == E_BINARY) start = start->bin.a;
      dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, start->pos,
                "only names can be bound: the left of '=' is a name or names separated by ','");
      return false;
    }
    s->names[i] = items[i]->str;
    s->name_pos[i] = items[i]->pos;
  }
  s->nnames = n;
  return true;
}

/* def_stmt = "def" IDENT "(" [ IDENT { "," IDENT } ] ")" block */
static dsl_stmt *parse_def(P *ps, dsl_stmt *s) {
  if (TOK.kind != T_IDENT) return syntax_error(ps, "a name after 'def'"), NULL;
  s->str = tok_text(ps);
  if (!advance(ps)) return NULL;
  dsl_pos open = TOK.pos;
  if (!expect(ps, T_LPAREN, "'(' after the def name")) return NULL;
  if (TOK.kind != T_RPAREN && !parse_names(ps, s, "a parameter name")) return NULL;
  for (int i = 0; i < s->nnames; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(s->names[i], s->names[j]) == 0) {
        dsl_error(ps->err, GR_ERR_ALREADY_EXISTS, s->name_pos[i], "parameter '%s' given twice",
                  s->names[i]);
        return NULL;
      }
  if (!expect_close(ps, T_RPAREN, open, "')'")) return NULL;
  return parse_block(ps, &s->block) ? s : NULL;
}

/* colocate_stmt = "colocate_with" "(" expr ")" block
 * deps_stmt     = "control_dependencies" "(" expr { "," expr } ")" block */
static dsl_stmt *parse_with_args(P *ps, dsl_stmt *s) {
  dsl_pos open = TOK.pos;
  if (!expect(ps, T_LPAREN, "'('")) return NULL;
  int cap = 0;
  for (;;) {
    if (!grow(ps, (void **)&s->args, s->nargs, &cap, sizeof(dsl_expr *))) return NULL;
    if (!(s->args[s->nargs++] = parse_expr(ps))) return NULL;
    if (TOK.kind != T_COMMA) break;
    if (!advance(ps)) return NULL;
  }
  if (s->kind == S_COLOCATE && s->nargs != 1) {
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, s->args[1]->pos,
              "colocate_with takes one node, got %d", s->nargs);
    return NULL;
  }
  if (!expect_close(ps, T_RPAREN, open, "')'")) return NULL;
  return parse_block(ps, &s->block) ? s : NULL;
}

/* stmt = import_stmt | def_stmt | scope_stmt | device_stmt | colocate_stmt
 *      | deps_stmt | fetch_stmt | target_stmt | return_stmt | binding | tuple
 * import_stmt = "import" STRING          scope_stmt  = "scope" expr block
 * device_stmt = "device" expr block      return_stmt = "return" tuple
 * fetch_stmt  = "fetch" names            target_stmt = "target" names
 * binding     = names "=" tuple
 * followed by a newline, ';', '}' or the end of the file. A binding's names
 * are parsed as a tuple first (`a, b = ...` and `a, b + 1` start alike). */
static dsl_stmt *parse_stmt(P *ps) {
  dsl_tok k = TOK.kind;
  dsl_stmt *s = NULL;
  bool needs_end = true;
  switch (k) {
    case T_IMPORT:
      if (!(s = new_stmt(ps, S_IMPORT)) || !advance(ps)) return NULL;
      if (TOK.kind != T_STRING) return syntax_error(ps, "a file name string after 'import'"), NULL;
      if (!(s->str = string_value(ps, &TOK)) || !advance(ps)) return NULL;
      break;
    case T_DEF:
      if (!(s = new_stmt(ps, S_DEF)) || !advance(ps) || !parse_def(ps, s)) return NULL;
      needs_end = false;
      break;
    case T_SCOPE:
    case T_DEVICE:
      if (!(s = new_stmt(ps, k == T_SCOPE ? S_SCOPE : S_DEVICE)) || !advance(ps)) return NULL;
      if (!(s->expr = parse_expr(ps)) || !parse_block(ps, &s->block)) return NULL;
      needs_end = false;
      break;
    case T_COLOCATE:
    case T_DEPS:
      if (!(s = new_stmt(ps, k == T_COLOCATE ? S_COLOCATE : S_DEPS)) || !advance(ps)) return NULL;
      if (!parse_with_args(ps, s)) return NULL;
      needs_end = false;
      break;
    case T_FETCH:
    case T_TARGET:
      if (!(s = new_stmt(ps, k == T_FETCH ? S_FETCH : S_TARGET)) || !advance(ps)) return NULL;
      if (!parse_names(ps, s, "a name")) return NULL;
      break;
    case T_RETURN:
      if (!(s = new_stmt(ps, S_RETURN)) || !advance(ps)) return NULL;
      if (!(s->expr = parse_tuple(ps))) return NULL;
      break;
    case T_IDENT: {
      if (!(s = new_stmt(ps, S_BIND))) return NULL;
      dsl_token id = TOK;
      if (!advance(ps)) return NULL;
      dsl_expr *e = new_expr(ps, E_IDENT, id.pos);
      if (!e || !(e->str = dsl_strndup(ps->arena, id.start, id.len))) return NULL;
      if (TOK.kind != T_ASSIGN) { /* the name starts an expression, a tuple or names */
        ps->pending = e;
        if (!(e = parse_tuple_rest(ps, parse_expr(ps)))) return NULL;
      }
      if (TOK.kind != T_ASSIGN) {
        s->kind = S_EXPR;
        s->expr = e;
        break;
      }
      if (!bind_targets(ps, s, e) || !advance(ps) || !(s->expr = parse_tuple(ps))) return NULL;
      break;
    }
    default:
      if (!(s = new_stmt(ps, S_EXPR))) return NULL;
      if (!(s->expr = parse_tuple(ps))) return NULL;
      if (TOK.kind == T_ASSIGN) return bind_targets(ps, s, s->expr), NULL;
  }
  if (needs_end && TOK.kind != T_NEWLINE && TOK.kind != T_SEMI && TOK.kind != T_RBRACE &&
      TOK.kind != T_EOF)
    return syntax_error(ps, "end of statement (newline or ';')"), NULL;
  return s;
}

void dsl_parse_init(dsl_parser *ps, const dsl_source *src, dsl_arena *arena, gr_error *err) {
  memset(ps, 0, sizeof *ps);
  ps->arena = arena;
  ps->err = err;
  dsl_lex_init(&ps->lx, src, err);
  dsl_lex_next(&ps->lx);
}

/* program = { stmt } EOF        (one top-level statement per call) */
gr_status dsl_parse_next(dsl_parser *ps, dsl_stmt **out) {
  *out = NULL;
  if (ps->lx.failed || failed(ps)) return ps->err ? ps->err->code : GR_ERR_INVALID_ARGUMENT;
  while (TOK.kind == T_NEWLINE || TOK.kind == T_SEMI)
    if (!advance(ps)) return ps->err->code;
  if (TOK.kind == T_EOF) return GR_OK;
  if (TOK.kind == T_RBRACE) {
    dsl_error(ps->err, GR_ERR_INVALID_ARGUMENT, TOK.pos, "unexpected '}' (no block is open)");
    return ps->err->code;
  }
  ps->depth = 0;
  dsl_stmt *s = parse_stmt(ps);
  if (!s) {
    if (!failed(ps)) gr_error_set(ps->err, GR_ERR_INTERNAL, "parser failed without a message");
    return ps->err->code;
  }
  *out = s;
  return GR_OK;
}
