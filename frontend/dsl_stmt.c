/* DSL lowering of statements (bindings, blocks, scopes, imports, defs) and
 * the public entry points of gr_dsl.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dsl_internal.h"

#define MAX_IMPORT_DEPTH 16
#define MAX_SOURCE_BYTES (1u << 30)

static gr_status oom(gr_dsl_program *p) {
  return gr_error_set_oom(p->err);
}

dsl_source *dsl_add_source(gr_dsl_program *p, const char *name, const char *text, size_t len,
                           bool owned) {
  dsl_source *s = dsl_alloc(&p->persist, sizeof *s);
  if (!s || !(s->name = dsl_strndup(&p->persist, name, strlen(name)))) {
    if (owned) free((char *)text);
    return NULL;
  }
  s->text = text;
  s->owned = owned ? (char *)text : NULL;
  s->len = len;
  s->next = p->sources;
  p->sources = s;
  return s;
}

/* Deep copy of a value into the persistent arena (globals outlive statements). */
static bool copy_value(gr_dsl_program *p, dsl_value *dst, const dsl_value *src) {
  *dst = *src;
  if (src->kind == V_STR) {
    dst->str = dsl_strndup(&p->persist, src->str, strlen(src->str));
    return dst->str != NULL;
  }
  if (src->kind == V_LIST || src->kind == V_TUPLE) {
    dst->list.items = dsl_alloc(&p->persist, sizeof(dsl_value) * (size_t)(src->list.n + 1));
    if (!dst->list.items) return false;
    for (int i = 0; i < src->list.n; i++)
      if (!copy_value(p, &dst->list.items[i], &src->list.items[i])) return false;
  }
  return true;
}

static bool is_global(const gr_dsl_program *p) {
  return p->frame == &p->globals;
}

/* A new binding for name in the current frame, or a "redefinition" error. */
static gr_status bind_checked(gr_dsl_program *p, const char *name, dsl_pos pos, const dsl_value *v,
                              const dsl_stmt *def, bool checked);

static gr_status bind(gr_dsl_program *p, const char *name, dsl_pos pos, const dsl_value *v,
                      const dsl_stmt *def) {
  return bind_checked(p, name, pos, v, def, false);
}

/* checked: the caller already knows name is not bound in this frame. */
static gr_status bind_checked(gr_dsl_program *p, const char *name, dsl_pos pos, const dsl_value *v,
                              const dsl_stmt *def, bool checked) {
  dsl_binding *old = checked ? NULL : dsl_frame_find_local(p->frame, name);
  if (old) {
    char note[128];
    dsl_error(p->err, GR_ERR_ALREADY_EXISTS, pos, "redefinition of '%s'", name);
    snprintf(note, sizeof note, "'%s' was first bound here", name);
    dsl_error_note(p->err, old->pos, note);
    return GR_ERR_ALREADY_EXISTS;
  }
  const char *key = name;
  if (is_global(p) && !(key = dsl_strndup(&p->persist, name, strlen(name)))) return oom(p);
  dsl_binding *b = dsl_frame_insert(p->frame, key);
  if (!b) return oom(p);
  b->pos = pos;
  b->def = def;
  if (v) {
    if (is_global(p)) {
      if (!copy_value(p, &b->v, v)) return oom(p);
    } else {
      b->v = *v;
    }
  }
  if (is_global(p) && !def) p->last_bound = key;
  return GR_OK;
}

/* Binds one name to v so that it names a node: a compile-time value becomes
 * a constant node named after it (x = 2; it keeps its value), a node made
 * before the statement began (node id < n0) gets an identity (y = x).
 * at: where the value is written. checked: as for bind_checked. */
static gr_status bind_named(gr_dsl_program *p, const char *name, dsl_pos pos, dsl_pos at,
                            dsl_value *v, int n0, bool checked) {
  if (!v->has_t && (v->kind == V_NUM || v->kind == V_BOOL || v->kind == V_LIST)) {
    gr_status st = GR_OK;
    bool ok = true;
    if (v->kind == V_LIST) { /* shapes with '?' or lists of strings stay compile-time */
      gr_error e;
      gr_dsl_program tmp = *p;
      tmp.err = &e;
      ok = dsl_to_tensor(&tmp, v, at, GR_DTYPE_INVALID, &v->t) == GR_OK;
      if (!ok && gr_graph_error(p->g)) st = dsl_check_graph(p, at);
    } else {
      st = dsl_to_tensor(p, v, at, GR_DTYPE_INVALID, &v->t);
    }
    GR_TRY(st);
    if (ok) {
      dsl_set_loc(p, pos);
      v->t = gr_name(p->g, v->t, name);
      GR_TRY(dsl_check_graph(p, pos));
    }
  } else if (v->has_t && v->t.node && v->t.node->id < n0) {
    dsl_set_loc(p, pos);
    gr_output o = gr_op(p->g, "identity", name, &v->t, 1, NULL, 0);
    GR_TRY(dsl_check_graph(p, pos));
    v->t = o;
    v->multi = false;
  }
  return bind_checked(p, name, pos, v, NULL, checked);
}

static gr_status bind_stmt(gr_dsl_program *p, const dsl_stmt *s) {
  for (int i = 0; i < s->nnames; i++) {
    dsl_binding *old = dsl_frame_find_local(p->frame, s->names[i]);
    if (old) return bind(p, s->names[i], s->name_pos[i], NULL, NULL); /* the error */
    for (int j = 0; j < i; j++)
      if (strcmp(s->names[i], s->names[j]) == 0)
        return dsl_error(p->err, GR_ERR_ALREADY_EXISTS, s->name_pos[i], "'%s' is bound twice",
                         s->names[i]);
  }
  int n0 = gr_graph_num_nodes(p->g);
  dsl_value v;
  const char *name = s->nnames == 1 ? s->names[0] : NULL;
  const dsl_frame *frame = p->frame; /* checked above; evaluating cannot bind here */
  GR_TRY(dsl_eval(p, s->expr, name, &v));
  if (s->nnames == 1)
    return bind_named(p, name, s->name_pos[0], s->expr->pos, &v, n0, p->frame == frame);
  /* a, b = tuple (x, y; a def's `return p, q`; a cond's values) or an op's outputs */
  int have = v.kind == V_TUPLE ? v.list.n : v.multi ? v.t.node->num_outputs : 1;
  if (have != s->nnames)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->name_pos[0],
                     "cannot unpack %d value%s into %d names", have, have == 1 ? "" : "s",
                     s->nnames);
  for (int i = 0; i < s->nnames; i++) {
    dsl_value item;
    if (v.kind == V_TUPLE) {
      item = v.list.items[i];
    } else {
      dsl_tensor_value(&item, gr_output_at(v.t, i));
    }
    dsl_pos at = s->expr->kind == E_TUPLE ? s->expr->list.items[i]->pos : s->expr->pos;
    GR_TRY(bind_named(p, s->names[i], s->name_pos[i], at, &item, n0, false));
  }
  return GR_OK;
}

/* With opts.record_layers, the bindings are recorded (dsl_layers.c). */
static gr_status lower_bind(gr_dsl_program *p, const dsl_stmt *s) {
  if (!p->opts.record_layers) return bind_stmt(p, s);
  int n0 = gr_graph_num_nodes(p->g), l0 = p->nlayers;
  GR_TRY(bind_stmt(p, s));
  return dsl_layers_record(p, s, n0, l0);
}

/* Output tensors of a value (a tensor or a tuple/list of them), appended to outs. */
static gr_status collect_tensors(gr_dsl_program *p, dsl_value *v, dsl_pos pos, gr_output *outs,
                                 int *n, int cap) {
  if (v->kind == V_TUPLE || (v->kind == V_LIST && !v->has_t)) {
    for (int i = 0; i < v->list.n; i++)
      GR_TRY(collect_tensors(p, &v->list.items[i], pos, outs, n, cap));
    return GR_OK;
  }
  if (!v->has_t)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, pos, "expected a node, got a %s",
                     dsl_vkind_name(v->kind));
  if (*n >= cap) return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, pos, "more than %d nodes", cap);
  outs[(*n)++] = v->t;
  return GR_OK;
}

static gr_status lower_scoped_block(gr_dsl_program *p, const dsl_stmt *s) {
  dsl_value v;
  gr_status st;
  if (s->kind == S_SCOPE || s->kind == S_DEVICE) {
    GR_TRY(dsl_eval(p, s->expr, NULL, &v));
    if (v.kind != V_STR)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->expr->pos, "%s needs a string, got a %s",
                       s->kind == S_SCOPE ? "scope" : "device", dsl_vkind_name(v.kind));
    dsl_set_loc(p, s->expr->pos);
    if (s->kind == S_DEVICE) {
      gr_device_spec spec;
      gr_error e;
      if (gr_device_spec_parse(v.str, &spec, &e) != GR_OK)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->expr->pos, "bad device string: %s",
                         e.msg);
      if (gr_graph_push_device_scope(p->g, v.str) != GR_OK) return dsl_check_graph(p, s->expr->pos);
    } else if (gr_graph_push_name_scope(p->g, v.str) != GR_OK) {
      return dsl_check_graph(p, s->expr->pos);
    }
    dsl_keras_saved keras;
    st = dsl_keras_enter_scope(p, s->kind == S_SCOPE ? v.str : "", s->expr->pos, &keras);
    p->block_depth++;
    if (st == GR_OK) st = dsl_lower_block(p, &s->block);
    p->block_depth--;
    dsl_keras_leave(p, &keras);
    if (s->kind == S_DEVICE)
      gr_graph_pop_device_scope(p->g);
    else
      gr_graph_pop_name_scope(p->g);
    return st;
  }
  if (s->kind == S_COLOCATE) {
    GR_TRY(dsl_eval(p, s->args[0], NULL, &v));
    if (!v.has_t || !v.t.node)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->args[0]->pos,
                       "colocate_with needs a node, got a %s", dsl_vkind_name(v.kind));
    int n0 = gr_graph_num_nodes(p->g);
    /* as TensorFlow's colocate_with: the enclosing device scopes do not
     * apply inside (a pin written inside the block does, and must agree) */
    if (gr_graph_push_device_scope_reset(p->g, "") != GR_OK) return dsl_check_graph(p, s->pos);
    p->block_depth++;
    st = dsl_lower_block(p, &s->block);
    p->block_depth--;
    gr_graph_pop_device_scope(p->g);
    GR_TRY(st);
    for (int i = n0; i < gr_graph_num_nodes(p->g); i++)
      if (gr_graph_set_colocation(p->g, gr_graph_node(p->g, i), v.t.node->name) != GR_OK)
        return dsl_check_graph(p, s->pos);
    return GR_OK;
  }
  /* S_DEPS */
  gr_output deps[256];
  int n = 0;
  for (int i = 0; i < s->nargs; i++) {
    GR_TRY(dsl_eval(p, s->args[i], NULL, &v));
    GR_TRY(collect_tensors(p, &v, s->args[i]->pos, deps, &n, 256));
  }
  dsl_set_loc(p, s->pos);
  if (gr_graph_push_control_deps(p->g, deps, n) != GR_OK) return dsl_check_graph(p, s->pos);
  p->block_depth++;
  p->deps_depth++;
  st = dsl_lower_block(p, &s->block);
  p->deps_depth--;
  while (p->nfresh > 0 && p->fresh[p->nfresh - 1].depth > p->deps_depth) p->nfresh--;
  p->block_depth--;
  gr_graph_pop_control_deps(p->g);
  return st;
}

char *dsl_path_join(const char *from, const char *path) {
  size_t n = strlen(from) + strlen(path) + 2;
  char *r = malloc(n);
  if (!r) return NULL;
  const char *slash = strrchr(from, '/');
  if (path[0] == '/' || !slash)
    snprintf(r, n, "%s", path);
  else
    snprintf(r, n, "%.*s/%s", (int)(slash - from), from, path);
  return r;
}

/* Reads a regular file into a malloc'd buffer. */
static gr_status read_file(const char *path, char **text, size_t *len, gr_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "cannot open '%s': no such file", path);
  if (!S_ISREG(st.st_mode))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "'%s' is not a regular file", path);
  if ((unsigned long long)st.st_size > MAX_SOURCE_BYTES)
    return gr_error_set(err, GR_ERR_OUT_OF_RANGE, "'%s' is larger than 1 GiB", path);
  FILE *f = fopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_IO, "cannot open '%s'", path);
  *text = malloc((size_t)st.st_size + 1);
  if (!*text) {
    fclose(f);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory reading '%s'", path);
  }
  *len = fread(*text, 1, (size_t)st.st_size, f);
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(*text);
    return gr_error_set(err, GR_ERR_IO, "error reading '%s'", path);
  }
  return GR_OK;
}

/* Adds a copy of real to the files imported (each is lowered once); false
 * when out of memory, with p unchanged. */
static bool remember_import(gr_dsl_program *p, const char *real) {
  char **ni = gr_realloc_array(p->imported, (size_t)(p->nimported + 1), sizeof(char *));
  if (!ni) return false;
  p->imported = ni;
  if (!(ni[p->nimported] = strdup(real))) return false;
  p->nimported++;
  return true;
}

static gr_status lower_import(gr_dsl_program *p, const dsl_stmt *s) {
  if (p->opts.no_imports)
    return dsl_error(p->err, GR_ERR_FAILED_PRECONDITION, s->pos, "imports are disabled here");
  if (!is_global(p) || p->block_depth)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->pos,
                     "'import' is only allowed at the top level of a file");
  if (p->import_depth >= MAX_IMPORT_DEPTH)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, s->pos, "imports nested deeper than %d",
                     MAX_IMPORT_DEPTH);
  char *path = dsl_path_join(s->pos.src->name, s->str);
  if (!path) return oom(p);
  char real[PATH_MAX];
  gr_error e;
  char *text = NULL;
  size_t len = 0;
  if (!realpath(path, real) || read_file(real, &text, &len, &e) != GR_OK) {
    if (!realpath(path, real)) gr_error_set(&e, GR_ERR_NOT_FOUND, "no such file");
    gr_status c =
        dsl_error(p->err, e.code, s->pos, "cannot import \"%s\" (%s): %s", s->str, path, e.msg);
    free(path);
    return c;
  }
  for (int i = 0; i < p->nimported; i++)
    if (strcmp(p->imported[i], real) == 0) { /* already imported: nothing to do */
      free(text);
      free(path);
      return GR_OK;
    }
  if (!remember_import(p, real)) {
    free(text);
    free(path);
    return oom(p);
  }
  dsl_source *src = dsl_add_source(p, path, text, len, true);
  free(path);
  if (!src) return oom(p);
  p->import_depth++;
  gr_status st = dsl_lower_source(p, src);
  p->import_depth--;
  if (st != GR_OK) dsl_error_note(p->err, s->pos, "imported from here");
  return st;
}

gr_status dsl_add_name(gr_dsl_program *p, const char ***arr, int *n, int *cap, const char *name) {
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 4;
    const char **na = dsl_alloc(&p->persist, sizeof(char *) * (size_t)nc);
    if (!na) return oom(p);
    if (*n) memcpy(na, *arr, sizeof(char *) * (size_t)*n);
    *arr = na;
    *cap = nc;
  }
  if (!((*arr)[(*n)++] = dsl_strndup(&p->persist, name, strlen(name)))) return oom(p);
  return GR_OK;
}

gr_status dsl_lower_stmt(gr_dsl_program *p, const dsl_stmt *s) {
  switch (s->kind) {
    case S_BIND:
      return lower_bind(p, s);
    case S_EXPR: {
      dsl_value v;
      return dsl_eval(p, s->expr, NULL, &v);
    }
    case S_RETURN:
      if (p->call_depth == 0)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->pos, "'return' outside a def");
      GR_TRY(dsl_eval(p, s->expr, NULL, p->ret));
      p->returned = true;
      return GR_OK;
    case S_IMPORT:
      return lower_import(p, s);
    case S_DEF:
      if (!is_global(p) || p->block_depth)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->pos,
                         "'def' is only allowed at the top level of a file");
      return bind(p, s->str, s->pos, NULL, s);
    case S_SCOPE:
    case S_DEVICE:
    case S_COLOCATE:
    case S_DEPS:
      return lower_scoped_block(p, s);
    case S_FETCH:
    case S_TARGET:
      if (!is_global(p) || p->block_depth)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, s->pos,
                         "'%s' is only allowed at the top level of a file",
                         s->kind == S_FETCH ? "fetch" : "target");
      for (int i = 0; i < s->nnames; i++) {
        gr_output o;
        if (!gr_dsl_lookup(p, s->names[i], &o))
          return dsl_error(p->err, GR_ERR_NOT_FOUND, s->name_pos[i],
                           "%s: undefined name '%s' (bind it before declaring it)",
                           s->kind == S_FETCH ? "fetch" : "target", s->names[i]);
        if (s->kind == S_FETCH)
          GR_TRY(dsl_add_name(p, &p->fetches, &p->nfetch, &p->capfetch, s->names[i]));
        else
          GR_TRY(dsl_add_name(p, &p->targets, &p->ntarget, &p->captarget, s->names[i]));
      }
      return GR_OK;
  }
  return gr_error_set(p->err, GR_ERR_INTERNAL, "unknown statement kind");
}

gr_status dsl_lower_block(gr_dsl_program *p, const dsl_block *b) {
  for (int i = 0; i < b->n && !p->returned; i++) GR_TRY(dsl_lower_stmt(p, b->stmts[i]));
  return GR_OK;
}

/* Parses and lowers one statement at a time; the AST of a statement is freed
 * after lowering, except for defs and imports (whose defs stay callable). */
gr_status dsl_lower_source(gr_dsl_program *p, dsl_source *src) {
  dsl_parser ps;
  dsl_parse_init(&ps, src, &p->temp, p->err);
  for (;;) {
    dsl_mark m = dsl_arena_mark(&p->temp);
    dsl_stmt *s;
    GR_TRY(dsl_parse_next(&ps, &s));
    if (!s) return GR_OK;
    GR_TRY(dsl_lower_stmt(p, s));
    if (s->kind != S_DEF && s->kind != S_IMPORT) dsl_arena_restore(&p->temp, m);
  }
}

/* ---- public API ------------------------------------------------------------------------ */

/* Room for the globals of a program of len bytes: a binding per line at
 * most, usually, so a large program's table is sized once (up to a bound)
 * instead of being rehashed as it grows. */
static size_t globals_cap(const char *text, size_t len) {
  size_t lines = 1, cap = 64;
  for (const char *q = text, *end = text + len; (q = memchr(q, '\n', (size_t)(end - q))); q++)
    lines++;
  while (cap < lines && cap < (1u << 21)) cap *= 2;
  return cap;
}

static gr_status load(const char *name, const char *text, size_t len, gr_graph *g,
                      const gr_dsl_options *opts, gr_dsl_program **program, gr_error *err,
                      const char *real) {
  gr_error local;
  if (!err) err = &local;
  gr_error_clear(err);
  if (program) *program = NULL;
  if (!g) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_dsl_load: graph is NULL");
  gr_init(); /* the ops, and the sessions' fusion */
  gr_dsl_program *p = calloc(1, sizeof *p);
  if (!p || !dsl_frame_init(&p->globals, globals_cap(text, len), NULL, &p->persist) ||
      !dsl_frame_init(&p->scopes_used, 16, NULL, &p->persist)) {
    if (p) dsl_frame_free(&p->globals);
    free(p);
    return gr_error_set_oom(err);
  }
  p->g = g;
  if (opts) p->opts = *opts;
  p->frame = &p->globals;
  p->err = err;
  if (dsl_keras_init(p) != GR_OK) {
    dsl_frame_free(&p->globals);
    dsl_frame_free(&p->scopes_used);
    free(p);
    return err->code;
  }
  if (real && !remember_import(p, real)) {
    gr_dsl_program_free(p);
    return gr_error_set_oom(err);
  }
  gr_status st;
  dsl_source *src = NULL;
  if (gr_wire_is_graph(text, len))
    st = dsl_load_serialized(p, name ? name : "<input>", text, len);
  else if (!(src = dsl_add_source(p, name ? name : "<input>", text, len, false)))
    st = gr_error_set_oom(err);
  else
    st = dsl_lower_source(p, src);
  for (dsl_source *s = p->sources; s; s = s->next) { /* the texts are read only until here */
    free(s->owned);
    s->owned = NULL;
    s->text = NULL;
    s->len = 0;
  }
  gr_graph_set_source_loc(g, NULL);
  if (st == GR_OK && gr_graph_error(g)) { /* should not happen: every call is checked */
    gr_error_set(err, gr_graph_error(g)->code, "%s", gr_graph_error(g)->msg);
    st = err->code;
  }
  if (st == GR_OK && p->nfetch == 0 && p->last_bound)
    st = dsl_add_name(p, &p->fetches, &p->nfetch, &p->capfetch, p->last_bound);
  p->err = NULL;
  if (program)
    *program = p;
  else
    gr_dsl_program_free(p);
  return st;
}

gr_status gr_dsl_load_buffer(const char *name, const char *text, size_t len, gr_graph *g,
                             const gr_dsl_options *opts, gr_dsl_program **program, gr_error *err) {
  return load(name, text ? text : "", text ? len : 0, g, opts, program, err, NULL);
}

gr_status gr_dsl_load_string(const char *name, const char *text, gr_graph *g,
                             const gr_dsl_options *opts, gr_dsl_program **program, gr_error *err) {
  return gr_dsl_load_buffer(name, text, text ? strlen(text) : 0, g, opts, program, err);
}

gr_status gr_dsl_load_file(const char *path, gr_graph *g, const gr_dsl_options *opts,
                           gr_dsl_program **program, gr_error *err) {
  gr_error local;
  if (!err) err = &local;
  if (program) *program = NULL;
  char *text = NULL;
  size_t len = 0;
  if (!path) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_dsl_load_file: path is NULL");
  GR_TRY(read_file(path, &text, &len, err));
  char real[PATH_MAX];
  gr_status st = load(path, text, len, g, opts, program, err, realpath(path, real) ? real : NULL);
  free(text);
  return st;
}

void gr_dsl_program_free(gr_dsl_program *p) {
  if (!p) return;
  for (int i = 0; i < p->nimported; i++) free(p->imported[i]);
  free(p->imported);
  free(p->fresh);
  dsl_frame_free(&p->globals);
  dsl_frame_free(&p->scopes_used);
  dsl_keras_free(p);
  dsl_arena_free(&p->temp);
  dsl_arena_free(&p->persist);
  free(p);
}

bool gr_dsl_lookup(const gr_dsl_program *p, const char *name, gr_output *out) {
  if (!p || !name) return false;
  dsl_binding *b = dsl_frame_find_local(&p->globals, name);
  if (b && !b->def && b->v.has_t && b->v.t.node) {
    *out = b->v.t;
    return true;
  }
  if (b && !b->def && b->v.kind == V_TUPLE && b->v.list.n > 0 && b->v.list.items[0].has_t) {
    *out = b->v.list.items[0].t;
    return true;
  }
  char buf[512];
  snprintf(buf, sizeof buf, "%s", name);
  int index = 0;
  char *colon = strrchr(buf, ':');
  if (colon && colon[1]) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (*end == '\0' && v >= 0) {
      *colon = '\0';
      index = (int)v;
    }
  }
  gr_node *n = gr_graph_find_node(p->g, buf);
  if (!n || (index >= n->num_outputs && !(index == 0 && n->num_outputs == 0))) return false;
  *out = (gr_output){n, n->num_outputs == 0 ? -1 : index};
  return true;
}

gr_graph *gr_dsl_graph(const gr_dsl_program *p) {
  return p ? p->g : NULL;
}
int gr_dsl_num_fetches(const gr_dsl_program *p) {
  return p ? p->nfetch : 0;
}
const char *gr_dsl_fetch_name(const gr_dsl_program *p, int i) {
  return p && i >= 0 && i < p->nfetch ? p->fetches[i] : NULL;
}
int gr_dsl_num_targets(const gr_dsl_program *p) {
  return p ? p->ntarget : 0;
}
const char *gr_dsl_target_name(const gr_dsl_program *p, int i) {
  return p && i >= 0 && i < p->ntarget ? p->targets[i] : NULL;
}
