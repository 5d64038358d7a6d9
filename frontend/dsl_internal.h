/* Internals of the DSL front end: arena, sources and diagnostics, tokens and
 * lexer (dsl_lex.c), AST and parser (dsl_parse.c), lowering (dsl_lower.c,
 * dsl_call.c). Not included outside frontend/. */
#ifndef GR_DSL_INTERNAL_H
#define GR_DSL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core_engine.h"
#include "gr_dsl.h"
#include "distributed/gr_distributed.h"
#include "ops/gr_ops.h"

/* ---- arena with mark/restore -------------------------------------------- */

typedef struct dsl_chunk {
  struct dsl_chunk *prev;
  size_t used, cap;
  size_t clean; /* data[clean..cap) was never handed out: still zero */
  _Alignas(16) char data[];
} dsl_chunk;

typedef struct dsl_arena {
  dsl_chunk *top;
} dsl_arena;

typedef struct dsl_mark {
  dsl_chunk *top;
  size_t used;
} dsl_mark;

void *dsl_alloc(dsl_arena *a, size_t n); /* zeroed, 16-byte aligned; NULL when out of memory */
/* Zeroed, aligned to align (a power of two, at most 16): records without
 * 16-byte members need not pay for its padding. */
void *dsl_alloc_aligned(dsl_arena *a, size_t n, size_t align);
char *dsl_strndup(dsl_arena *a, const char *s, size_t n);
dsl_mark dsl_arena_mark(dsl_arena *a);
/* Zeroed memory for chunks and tables; large blocks are mapped up front.
 * Free with dsl_calloc_free and the same size. */
void *dsl_calloc(size_t bytes);
void dsl_calloc_free(void *p, size_t bytes);
void dsl_arena_restore(dsl_arena *a, dsl_mark m);
void dsl_arena_free(dsl_arena *a);

/* ---- sources and positions ------------------------------------------------ */

typedef struct dsl_source {
  char *name;       /* as given (path or name) */
  const char *text; /* len bytes, read only while loading (NULL afterwards) */
  size_t len;
  char *owned; /* text, when the program read it (imports), else NULL: the caller's */
  struct dsl_source *next;
} dsl_source;

typedef struct dsl_pos {
  const dsl_source *src;
  int line, col; /* 1-based; col counts bytes */
} dsl_pos;

/* 3 when the text starts with a UTF-8 byte-order mark (skipped), else 0. */
size_t dsl_bom_len(const dsl_source *src);
/* Sets err to "file:line:col: error: MSG\n<line>\n<caret>"; returns code. */
gr_status dsl_error(gr_error *err, gr_status code, dsl_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The source text from `from` up to `to` (same line, trailing blanks
 * dropped) into buf; false when not available or not on one line. */
bool dsl_source_text(dsl_pos from, dsl_pos to, char *buf, size_t cap);
/* Appends "\nfile:line:col: note: NOTE\n<line>\n<caret>" to err. */
void dsl_error_note(gr_error *err, dsl_pos pos, const char *note);

/* ---- tokens --------------------------------------------------------------- */

#define DSL_TOKEN_LIST(X)                                                                          \
  X(T_EOF, "end of file")                                                                          \
  X(T_NEWLINE, "end of line")                                                                      \
  X(T_IDENT, "name")                                                                               \
  X(T_NUMBER, "number")                                                                            \
  X(T_STRING, "string")                                                                            \
  X(T_DEF, "'def'")                                                                                \
  X(T_RETURN, "'return'")                                                                          \
  X(T_IMPORT, "'import'")                                                                          \
  X(T_SCOPE, "'scope'")                                                                            \
  X(T_DEVICE, "'device'")                                                                          \
  X(T_COLOCATE, "'colocate_with'")                                                                 \
  X(T_DEPS, "'control_dependencies'")                                                              \
  X(T_COND, "'cond'")                                                                              \
  X(T_ELSE, "'else'")                                                                              \
  X(T_WHILE, "'while'")                                                                            \
  X(T_TRUE, "'true'")                                                                              \
  X(T_FALSE, "'false'")                                                                            \
  X(T_FETCH, "'fetch'")                                                                            \
  X(T_TARGET, "'target'")                                                                          \
  X(T_LPAREN, "'('")                                                                               \
  X(T_RPAREN, "')'")                                                                               \
  X(T_LBRACK, "'['")                                                                               \
  X(T_RBRACK, "']'")                                                                               \
  X(T_LBRACE, "'{'")                                                                               \
  X(T_RBRACE, "'}'")                                                                               \
  X(T_COMMA, "','")                                                                                \
  X(T_SEMI, "';'")                                                                                 \
  X(T_ASSIGN, "'='")                                                                               \
  X(T_PLUS, "'+'")                                                                                 \
  X(T_MINUS, "'-'")                                                                                \
  X(T_STAR, "'*'")                                                                                 \
  X(T_SLASH, "'/'")                                                                                \
  X(T_AT, "'@'")                                                                                   \
  X(T_POW, "'**'")                                                                                 \
  X(T_EQ, "'=='")                                                                                  \
  X(T_NE, "'!='")                                                                                  \
  X(T_LT, "'<'")                                                                                   \
  X(T_LE, "'<='")                                                                                  \
  X(T_GT, "'>'")                                                                                   \
  X(T_GE, "'>='")                                                                                  \
  X(T_NOT, "'!'")                                                                                  \
  X(T_AND, "'&&'")                                                                                 \
  X(T_OR, "'||'")                                                                                  \
  X(T_QUESTION, "'?'")

typedef enum dsl_tok {
#define DSL_X_TOK(e, s) e,
  DSL_TOKEN_LIST(DSL_X_TOK)
#undef DSL_X_TOK
      T_COUNT
} dsl_tok;

const char *dsl_tok_name(dsl_tok t);

typedef struct dsl_token {
  dsl_tok kind;
  dsl_pos pos;
  const char *start; /* into the source text */
  size_t len;
  double num;   /* T_NUMBER */
  int64_t inum; /* T_NUMBER when is_int */
  bool is_int;
} dsl_token;

#define DSL_LEX_MAX_DEPTH 256

typedef struct dsl_lexer {
  const dsl_source *src;
  const char *p, *end, *line_start;
  int line;
  int depth; /* bracket nesting: newlines directly inside ( or [ are not tokens */
  char stack[DSL_LEX_MAX_DEPTH];
  dsl_pos stack_pos[DSL_LEX_MAX_DEPTH]; /* where each open bracket is */
  dsl_token tok;                        /* the one-token lookahead */
  gr_error *err;
  bool failed;
} dsl_lexer;

void dsl_lex_init(dsl_lexer *lx, const dsl_source *src, gr_error *err);
/* Advances to the next token (into lx->tok); false on a lexical error. */
bool dsl_lex_next(dsl_lexer *lx);

/* ---- AST ------------------------------------------------------------------ */

typedef enum dsl_expr_kind {
  E_NUM,
  E_STR,
  E_BOOL,
  E_UNKNOWN_DIM, /* `?` in a shape */
  E_IDENT,
  E_LIST,
  E_CALL,
  E_BINARY,
  E_UNARY,
  E_COND,
  E_WHILE,
  E_TUPLE /* x, y: a block's value, `return p, q`, the right side of a binding */
} dsl_expr_kind;

typedef struct dsl_expr dsl_expr;
typedef struct dsl_stmt dsl_stmt;

typedef struct dsl_block {
  dsl_stmt **stmts;
  int n;
  dsl_pos open; /* the '{' */
} dsl_block;

typedef struct dsl_arg {
  const char *name; /* keyword, or NULL for a positional argument */
  dsl_pos pos;
  dsl_expr *value;
} dsl_arg;

typedef struct dsl_loopvar {
  const char *name;
  dsl_pos pos;
  dsl_expr *init;
} dsl_loopvar;

/* A number: v, and i when is_int (an integer literal or the result of
 * integer arithmetic). */
typedef struct dsl_num {
  double v;
  int64_t i;
  bool is_int;
} dsl_num;

struct dsl_expr {
  dsl_expr_kind kind;
  dsl_pos pos;
  union {
    dsl_num num;
    const char *str; /* E_STR, E_IDENT */
    bool b;
    struct {
      dsl_expr **items;
      int n;
    } list; /* E_LIST, E_TUPLE */
    struct {
      const char *name;
      dsl_arg *args;
      int nargs;
      dsl_block *block; /* a built-in that takes one (dsl_parse.c's list), else NULL */
    } call;
    struct {
      dsl_tok op;
      dsl_expr *a, *b;
    } bin; /* E_BINARY, E_UNARY (b NULL) */
    struct {
      dsl_expr *pred;
      dsl_block then_block, else_block;
    } cond;
    struct {
      dsl_loopvar *vars;
      int nvars;
      dsl_expr *pred;
      dsl_block body;
    } loop;
  };
};

typedef enum dsl_stmt_kind {
  S_BIND,   /* names = expr */
  S_EXPR,   /* expr (for its effect) */
  S_RETURN, /* return expr */
  S_IMPORT, /* import "path" */
  S_DEF,    /* def name(params) { body } */
  S_SCOPE,  /* scope "name" { } */
  S_DEVICE, /* device "spec" { } */
  S_COLOCATE,
  S_DEPS,
  S_FETCH,
  S_TARGET
} dsl_stmt_kind;

struct dsl_stmt {
  dsl_stmt_kind kind;
  dsl_pos pos;
  const char **names; /* S_BIND targets, S_DEF params, S_FETCH/S_TARGET names */
  dsl_pos *name_pos;
  int nnames;
  const char *str; /* S_IMPORT path, S_DEF name */
  dsl_expr *expr;  /* S_BIND/S_EXPR/S_RETURN value, S_SCOPE/S_DEVICE name */
  dsl_expr **args; /* S_COLOCATE/S_DEPS */
  int nargs;
  dsl_block block;
};

/* ---- parser ---------------------------------------------------------------- */

typedef struct dsl_parser {
  dsl_lexer lx;
  dsl_arena *arena;
  gr_error *err;
  int depth;         /* recursion guard */
  dsl_expr *pending; /* an IDENT already consumed by the statement rule */
} dsl_parser;

void dsl_parse_init(dsl_parser *ps, const dsl_source *src, dsl_arena *arena, gr_error *err);
/* The next top-level statement into *out (NULL at end of file). */
gr_status dsl_parse_next(dsl_parser *ps, dsl_stmt **out);

/* ---- lowering -------------------------------------------------------------- */

typedef enum dsl_vkind {
  V_NONE,
  V_TENSOR, /* t only */
  V_NUM,
  V_STR,
  V_BOOL,
  V_DTYPE,
  V_LIST,
  V_UNKNOWN_DIM,
  V_TUPLE, /* several tensors (gradients, multi-output ops) */
  V_OPTIMIZER
} dsl_vkind;

#define DSL_MAX_LIST (1 << 24) /* elements of a constant list, nesting included */
#define DSL_MAX_EVAL 3000      /* nested expressions, counting those in called defs */

typedef struct dsl_value dsl_value;
struct dsl_value {
  dsl_vkind kind;
  bool has_t;  /* compile-time values may also exist as a node (x = 2) */
  bool multi;  /* t is output 0 of an op with several outputs, which `a, b = ...` unpacks */
  gr_output t; /* when has_t */
  union {
    dsl_num num;
    struct {
      const char *str;
      const dsl_source *str_src; /* where a string literal is written (NULL: elsewhere) */
    };
    bool b;
    gr_dtype dtype;
    struct {
      dsl_value *items;
      int n;
      int64_t leaves;        /* numbers in the nested list (bounded, see DSL_MAX_LIST) */
    } list;                  /* V_LIST, V_TUPLE */
    const gr_optimizer *opt; /* in the temp arena */
  };
};

typedef struct dsl_binding {
  const char *name;
  dsl_value v;
  dsl_pos pos;
  const dsl_stmt *def; /* a def (v unused) */
} dsl_binding;

typedef struct dsl_frame {
  gr_idmap index;     /* name -> position in list (8-byte slots: a large program's
                         globals stay in cache) */
  dsl_binding **list; /* the bindings (they live in arena) */
  size_t count, cap;
  dsl_arena *arena;
  struct dsl_frame *parent; /* lookups fall back to it (defs see globals) */
} dsl_frame;

struct gr_dsl_program {
  gr_graph *g;
  gr_dsl_options opts;
  dsl_arena persist; /* sources' copies, defs' ASTs, names, bound values */
  dsl_arena temp;    /* one top-level statement's AST and values */
  dsl_source *sources;
  dsl_frame globals;
  dsl_frame scopes_used; /* name scopes opened by def calls (a set) */
  dsl_frame *frame;      /* current frame */
  const char **fetches, **targets;
  int nfetch, ntarget, capfetch, captarget;
  const char *last_bound;
  int call_depth, import_depth;
  int block_depth;
  int deps_depth; /* control_dependencies blocks open: a variable named there is read anew */
  struct dsl_fresh_read *fresh; /* those reads, one per variable and open block */
  int nfresh, capfresh;
  int eval_depth; /* nesting of scope/device/... blocks */
  int var_counter;
  int replica_copies; /* bodies a replicas/micro_batches block being lowered is built as
                         (the product over nested blocks; 1 outside any) */
  char **imported;
  int nimported;
  gr_error *err;
  dsl_value *ret; /* set by `return` inside a def */
  bool returned;
  char loc[512];
  /* opts.record_layers (dsl_layers.c): the bindings, the defs being called
   * ("cnn/conv_block") and where the outermost of those calls is */
  gr_dsl_layer *layers;
  int nlayers, caplayers;
  char def_path[512];
  size_t def_path_len;
  dsl_pos layer_call;
  /* the layer that made the value being bound, for the recording: its
   * node and kind ("dense", ...) (dsl_keras.c) */
  const gr_node *layer_node;
  const char *layer_kind;
  /* Keras-style layers (dsl_keras.c): the variable scope (the path of a
   * layer's variables: scope blocks and def instances), the counters of
   * unnamed layers and def instances and the layers used in the current
   * instance (a frame per def call and replica body), and every layer
   * made so far (path -> its configuration, where it was made) */
  char var_scope[512];
  size_t var_scope_len;
  int var_scope_too_deep; /* parts that did not fit */
  dsl_frame *layer_frame;
  dsl_frame top_layer_frame;
  dsl_frame layers_made;
  /* the defs being called (outermost first), and for each def that made
   * layers, whether as a model called at the top level or as a part */
  const char *keras_defs[64];
  int nkeras_defs;
  dsl_frame def_kinds;
  int loop_depth; /* while bodies being lowered */
};

/* ---- recorded bindings (dsl_layers.c), with opts.record_layers ------------ */

/* Around the lowering of a def's body called at `call`: *saved restores. */
void dsl_layers_enter_def(gr_dsl_program *p, const char *def, dsl_pos call, size_t *saved);
void dsl_layers_leave_def(gr_dsl_program *p, size_t saved);
/* After statement s bound its names: records those bound to tensors. n0:
 * the graph's node count before s, l0: the layer count before s. */
gr_status dsl_layers_record(gr_dsl_program *p, const dsl_stmt *s, int n0, int l0);

/* ---- Keras-style layers (dsl_keras.c) ----------------------------------- */

/* What a def call, a scope block or a replica's body changes in the
 * layers' naming; restored by the matching leave. */
typedef struct dsl_keras_saved {
  size_t var_scope_len;
  int too_deep;
  int ndefs;
  dsl_frame *frame;
  dsl_frame *own; /* the frame entered (freed on leave), NULL when none */
} dsl_keras_saved;
gr_status dsl_keras_init(gr_dsl_program *p);
void dsl_keras_free(gr_dsl_program *p);
/* A call of def `def` bound to `name` (NULL: unbound) at pos: its layers'
 * variables go under its instance path (the def's name at the top level;
 * inside a def, the binding, else the def's name numbered per call). */
gr_status dsl_keras_enter_def(gr_dsl_program *p, const char *def, const char *name, dsl_pos pos,
                              dsl_keras_saved *saved);
/* `scope "s" { ... }`: s joins the variable scope. */
gr_status dsl_keras_enter_scope(gr_dsl_program *p, const char *scope, dsl_pos pos,
                                dsl_keras_saved *saved);
/* A replica's (or micro-batch's) body: its layers are the replicas' shared
 * ones, reached once per replica. */
gr_status dsl_keras_enter_replica(gr_dsl_program *p, dsl_keras_saved *saved);
void dsl_keras_leave(gr_dsl_program *p, const dsl_keras_saved *saved);
/* A variable read made in an open control_dependencies block (deps_depth). */
typedef struct dsl_fresh_read {
  int depth;
  const gr_node *var;
  gr_output read;
} dsl_fresh_read;

/* cap: the bindings to make room for (it grows past them); bindings are
 * allocated in arena. false when out of memory. */
/* Appends a copy of name (in the program's memory) to a name list. */
gr_status dsl_add_name(gr_dsl_program *p, const char ***arr, int *n, int *cap, const char *name);
/* Loads a serialized graph (gr_wire_is_graph) as the program: its graph,
 * names bound as tensors, fetches and targets. name is for messages. */
gr_status dsl_load_serialized(gr_dsl_program *p, const char *name, const void *data, size_t len);

bool dsl_frame_init(dsl_frame *f, size_t cap, dsl_frame *parent, dsl_arena *arena);
void dsl_frame_free(dsl_frame *f);
dsl_binding *dsl_frame_find_local(const dsl_frame *f, const char *name);
dsl_binding *dsl_frame_lookup(const dsl_frame *f, const char *name);
dsl_binding *dsl_frame_insert(dsl_frame *f, const char *name);

gr_status dsl_lower_source(gr_dsl_program *p, dsl_source *src);
gr_status dsl_lower_block(gr_dsl_program *p, const dsl_block *b);
gr_status dsl_lower_stmt(gr_dsl_program *p, const dsl_stmt *s);
gr_status dsl_eval(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out);
/* The value as a tensor, making a constant when needed (dsl_const.c): of
 * dtype hint, or f32 (bool for booleans) when hint is GR_DTYPE_INVALID. A
 * literal that does not keep its value in that dtype is an error at pos. */
gr_status dsl_to_tensor(gr_dsl_program *p, dsl_value *v, dsl_pos pos, gr_dtype hint,
                        gr_output *out);
/* The same where the dtype is another value's: whose names it in messages
 * ("'x'", "loop variable 's'"), fix (may be NULL) suggests a rewrite for a
 * float literal meeting an integer tensor ("cast(x, f32) * 0.9"). */
gr_status dsl_to_tensor_like(gr_dsl_program *p, dsl_value *v, dsl_pos pos, gr_dtype dtype,
                             const char *whose, const char *fix, gr_output *out);
/* A compile-time number as the shortest text that reads back (0.9; 2.0 for
 * an integral float). */
void dsl_format_number(const dsl_value *v, char *buf, size_t cap);
/* The dtype of a value that is a tensor, else GR_DTYPE_INVALID. */
gr_dtype dsl_dtype_of(const dsl_value *v);
/* Sets the graph's source position and checks for a build error after a call. */
void dsl_set_loc(gr_dsl_program *p, dsl_pos pos);
gr_status dsl_check_graph(gr_dsl_program *p, dsl_pos pos);
gr_status dsl_call(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *out);
/* Lowers a block in the current frame; *v gets the value of its last
 * statement (an expression, a tuple or `return`), *last that statement. */
gr_status dsl_block_value(gr_dsl_program *p, const dsl_block *b, dsl_value *v,
                          const dsl_stmt **last);
/* The arguments of a built-in call, for the helpers below (dsl_bargs.c),
 * whose errors name the built-in (fn) and point at the argument. */
typedef struct dsl_bargs {
  gr_dsl_program *p;
  const dsl_expr *e;
  const char *fn;
  dsl_value *v;
  int n, npos; /* all, positional (they come first) */
} dsl_bargs;
/* The index of keyword argument `name`, -1 when not given. */
/* The arguments of call e of built-in fn: v[0..nargs), the positional ones first. */
dsl_bargs dsl_bargs_make(gr_dsl_program *p, const char *fn, const dsl_expr *e, dsl_value *v,
                         int nargs);
int dsl_bargs_kw(const dsl_bargs *a, const char *name);
/* Error unless every keyword argument is in allowed (NULL-terminated). */
gr_status dsl_bargs_only_keywords(const dsl_bargs *a, const char *const *allowed);
gr_status dsl_bargs_int(const dsl_bargs *a, int i, const char *what, int64_t lo, int64_t hi,
                        int64_t *out);
gr_status dsl_bargs_string(const dsl_bargs *a, int i, const char *what, const char **out);
gr_status dsl_bargs_bool(const dsl_bargs *a, int i, const char *what, bool *out);
/* Keyword argument kw, when given: a string that must be one of choices
 * (NULL-terminated), whose position goes to *index; the error says `want`
 * ("\"sum\" or \"mean\""). */
gr_status dsl_bargs_choice(const dsl_bargs *a, const char *kw, const char *const *choices,
                           const char *want, int *index);
/* *out = the tensor o (a value of kind V_TENSOR). */
void dsl_tensor_value(dsl_value *out, gr_output o);
/* *out = the tuple of the n tensors t (its items in p's temp arena). */
gr_status dsl_tuple_value(gr_dsl_program *p, const gr_output *t, int n, dsl_value *out);
/* *out = the tensor t[0] when n is 1, else the tuple of the n tensors t. */
gr_status dsl_tensors_value(gr_dsl_program *p, const gr_output *t, int n, dsl_value *out);
/* *out = the integer i (a value of kind V_NUM). */
void dsl_int_value(dsl_value *out, int64_t i);
/* A built-in function of the DSL (not an op), called as fn: gets the call e,
 * its evaluated arguments v[0..nargs), the name it is bound to (NULL: none)
 * and fills *out. The table of built-ins is in dsl_call.c. */
typedef gr_status dsl_builtin_handler(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                      const char *name, dsl_value *v, int nargs, dsl_value *out);
typedef dsl_builtin_handler *dsl_builtin_fn;
/* Defines the handler dsl_builtin_NAME as CALL, an expression of the call's
 * arguments `a` (a dsl_bargs), the bound `name` and `out`. */
#define DSL_BUILTIN(NAME, CALL)                                                                    \
  gr_status dsl_builtin_##NAME(gr_dsl_program *p, const char *fn, const dsl_expr *e,               \
                               const char *name, dsl_value *v, int nargs, dsl_value *out) {        \
    dsl_bargs a = dsl_bargs_make(p, fn, e, v, nargs);                                              \
    return CALL;                                                                                   \
  }
/* The queue, accumulator and sync-replicas built-ins (dsl_queues.c); the
 * queue ones have the names of the ops they build. */
extern dsl_builtin_handler dsl_builtin_fifo_queue, dsl_builtin_queue_enqueue,
    dsl_builtin_queue_enqueue_many, dsl_builtin_queue_dequeue, dsl_builtin_queue_dequeue_many,
    dsl_builtin_queue_close, dsl_builtin_queue_size, dsl_builtin_sync_replicas;
/* The parallel-training built-ins (dsl_parallel.c): ps_variables, replicas
 * and micro_batches, which take a block (e->call.block), and all_reduce,
 * num_tasks, task_index, num_replicas, replica_index, partitioned_variable
 * and mirror_spread. */
extern dsl_builtin_handler dsl_builtin_ps_variables, dsl_builtin_replicas,
    dsl_builtin_micro_batches, dsl_builtin_all_reduce, dsl_builtin_num_tasks,
    dsl_builtin_task_index, dsl_builtin_num_replicas, dsl_builtin_replica_index,
    dsl_builtin_partitioned_variable, dsl_builtin_mirror_spread;
/* Keras' losses and metrics (dsl_losses.c): one handler for every name. */
extern dsl_builtin_handler dsl_builtin_loss_or_metric;
/* Folders of images (dsl_images.c): image_folder, and one handler for
 * class_names, num_classes, num_images, num_batches and skipped_images. */
extern dsl_builtin_handler dsl_builtin_image_folder, dsl_builtin_image_folder_info;
/* The layer built-ins (dense, conv2d, batch_norm, max_pool2d, ...). conv2d,
 * batch_norm and random_contrast also build their op when called as the op
 * (conv2d(x, w), batch_norm(x, gamma, beta, mean, variance), ...). */
extern dsl_builtin_handler dsl_builtin_dense, dsl_builtin_conv2d, dsl_builtin_separable_conv2d,
    dsl_builtin_batch_norm, dsl_builtin_max_pool2d, dsl_builtin_avg_pool2d,
    dsl_builtin_global_avg_pool2d, dsl_builtin_rescaling, dsl_builtin_random_flip,
    dsl_builtin_random_rotation, dsl_builtin_random_zoom, dsl_builtin_random_contrast;
/* For built-ins named like an op: the call e as a plain op call (dsl_call.c). */
gr_status dsl_call_as_op(gr_dsl_program *p, const dsl_expr *e, const char *name, dsl_value *v,
                         int nargs, dsl_value *out);
/* The end of a built-in that made tensor o: the graph's error if any, else
 * o renamed to the binding `name` (NULL: kept) (dsl_call.c). */
gr_status dsl_tensor_result(gr_dsl_program *p, dsl_pos pos, const char *name, gr_output o,
                            dsl_value *out);
gr_status dsl_lower_cond(gr_dsl_program *p, const dsl_expr *e, dsl_value *out);
gr_status dsl_lower_while(gr_dsl_program *p, const dsl_expr *e, dsl_value *out);
/* A source for text[0..len), which is not copied: owned (a malloc'd text the
 * source takes and frees) or the caller's, alive until the load returns. */
dsl_source *dsl_add_source(gr_dsl_program *p, const char *name, const char *text, size_t len,
                           bool owned);
const char *dsl_vkind_name(dsl_vkind k);
/* path relative to the directory of the file from (unchanged when absolute
 * or when from has no directory); malloc'd, NULL when out of memory. */
char *dsl_path_join(const char *from, const char *path);

#endif
