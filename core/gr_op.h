/* Op definitions and the op registry.
 *
 * An op is defined in one place (a family file in ops/) as a gr_op_def: its
 * name, inputs, attr schema with defaults, shape function, cost function, CPU
 * kernel, gradient function and flags, and listed once in ops/op_list.h.
 * Nothing else in the engine switches on op names.
 *
 *   static gr_status neg_kernel(gr_kernel_ctx *ctx) { ... }
 *   const gr_op_def gr_op_neg = {
 *       .name = "neg", .doc = "-x elementwise", .min_inputs = 1, .max_inputs = 1,
 *       .input_names = (const char *[]){"x"}, .num_outputs = 1,
 *       .shape_fn = gr_shape_fn_unchanged, .kernel = neg_kernel};
 *   gr_op_registry_add(&gr_op_neg, &err);
 */
#ifndef GR_OP_H
#define GR_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_attr.h"
#include "core/gr_status.h"
#include "core/gr_tensor.h"

typedef struct gr_node gr_node;
typedef struct gr_graph gr_graph;
typedef struct gr_shape_ctx gr_shape_ctx;
typedef struct gr_kernel_ctx gr_kernel_ctx;
struct gr_grad_ctx; /* defined by the autodiff transform in ops/ */

typedef enum gr_op_flags {
  GR_OP_STATEFUL = 1 << 0,     /* has state or side effects: never pruned by CSE/folding */
  GR_OP_ASYNC = 1 << 1,        /* completes through gr_kernel_done */
  GR_OP_CONTROL_FLOW = 1 << 2, /* switch/merge/enter/exit/... */
  GR_OP_TRANSFER = 1 << 3,     /* send/recv */
  GR_OP_EXPENSIVE = 1 << 4,    /* run on the thread pool rather than inline */
  GR_OP_PLACEHOLDER = 1 << 5,  /* must be fed */
  GR_OP_CONSTANT = 1 << 6,     /* value in tensor attr "value"; seen by shape functions */
  GR_OP_VARIABLE = 1 << 7,     /* needs the variables named by string attrs "var" and
                                  "slot*" initialised */
  GR_OP_NO_GRADIENT = 1 << 8,  /* not differentiable: no gradient flows back through it
                                  (bool/integer results, comparisons, shape and
                                  zeros_like/ones_like, stop_gradient, stacks,
                                  transfers); gr_gradients treats it as a constant */
  GR_OP_STEP_STACKS = 1 << 9,  /* uses the step's stacks (gr_step_info.stacks) */
  GR_OP_UPDATES = 1 << 10,     /* writes state that later reads must see (assign, apply_*):
                                  a loop iteration's updates finish before the next starts */
  GR_OP_RUNS_DEAD = 1 << 11,   /* its kernel runs with a dead input too (ctx->dead set), as
                                  transfers do: it may record the deadness and go live */
  GR_OP_COLLECTIVE = 1 << 12,  /* one member of a group of nodes (string attr "group_key",
                                  int attrs "group_size" and "rank") that exchange values
                                  through the step's rendezvous; the partitioner writes the
                                  members' devices, in rank order, comma-separated, into its
                                  string attr "devices", a server connects to their tasks,
                                  and a session gives a step on one device a rendezvous */
  GR_OP_REMADE = 1 << 13,      /* made from its attrs alone, cheaply, without inputs (fill):
                                  a device that reads it makes its own copy instead of
                                  receiving it, as with a GR_OP_CONSTANT */
} gr_op_flags;

typedef struct gr_attr_spec {
  const char *name;
  gr_attr_type type;
  bool required;               /* no default */
  gr_attr_value default_value; /* used when not required and not given */
} gr_attr_spec;

/* Cost of one execution, from shapes: for the placer and the executor's
 * inline-or-pool decision. */
typedef struct gr_cost {
  double flops;
  double bytes; /* bytes read + written */
} gr_cost;

/* The executor's view of the control-flow primitives (TensorFlow's design):
 * switch forwards its data to output 1 (pred true) or 0 and makes the other
 * dead; merge forwards its first live input; enter moves a value into a child
 * frame (a loop), exit back to the parent, next_iteration to the next
 * iteration of the same frame; loop_cond marks a loop's predicate. */
typedef enum gr_cf_kind {
  GR_CF_NONE = 0,
  GR_CF_SWITCH,
  GR_CF_MERGE,
  GR_CF_ENTER,
  GR_CF_EXIT,
  GR_CF_NEXT_ITERATION,
  GR_CF_LOOP_COND,
} gr_cf_kind;

typedef struct gr_op_def {
  const char *name;
  const char *doc;                /* one line, shown by help and error hints */
  int min_inputs, max_inputs;     /* max_inputs -1: unbounded (variadic) */
  const char *const *input_names; /* min_inputs names (variadic: one name) */
  int num_outputs;                /* -1: the shape function decides */
  const gr_attr_spec *attrs;
  int num_attrs;
  /* Sets output dtypes and shapes from inputs and attrs; errors name shapes. */
  gr_status (*shape_fn)(gr_shape_ctx *ctx);
  /* Optional; default: one flop per output element, bytes of inputs + outputs. */
  void (*cost_fn)(const gr_node *node, gr_cost *out);
  gr_status (*kernel)(gr_kernel_ctx *ctx);
  /* Optional: builds the gradient nodes (see gr_grad_ctx in ops/gr_ops.h);
   * the ops it builds have gradients too, so gradients of gradients work.
   * An op with inputs has one or the flag GR_OP_NO_GRADIENT; one with
   * neither (state updates: assign, apply_*) cannot be differentiated
   * through, and gr_gradients says so (gr_op_classify_gradient). */
  gr_status (*grad_fn)(struct gr_grad_ctx *ctx);
  unsigned flags;
  /* Optional: frees what the kernel left in *ctx->state, when the executor goes. */
  void (*state_free)(void *state);
  gr_cf_kind cf_kind;
} gr_op_def;

/* ---- shape inference ---------------------------------------------------- */

#define GR_MAX_OUTPUTS 1024

struct gr_shape_ctx {
  const gr_node *node; /* name, op and attrs of the node being added */
  int num_inputs;
  const gr_dtype *in_dtypes;
  const gr_shape *in_shapes;
  /* Value of input i when its producer is a constant, else NULL. */
  const gr_tensor *const *in_values;
  int num_outputs; /* preset to op->num_outputs (or 1); the shape fn may change it */
  gr_dtype *out_dtypes;
  gr_shape *out_shapes;
  gr_error *err;
};

/* Sets the error with a message prefixed by the node name and op. */
gr_status gr_shape_error(gr_shape_ctx *ctx, gr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* dtype sets for input checks */
#define GR_DT_BIT(t)  (1u << (t))
#define GR_DT_FLOAT   (GR_DT_BIT(GR_F32) | GR_DT_BIT(GR_F64))
#define GR_DT_INT     (GR_DT_BIT(GR_I32) | GR_DT_BIT(GR_I64) | GR_DT_BIT(GR_U8))
#define GR_DT_NUMERIC (GR_DT_FLOAT | GR_DT_INT)
#define GR_DT_INDEX   (GR_DT_BIT(GR_I32) | GR_DT_BIT(GR_I64))
#define GR_DT_BOOL    GR_DT_BIT(GR_BOOL)
#define GR_DT_ALL     (GR_DT_NUMERIC | GR_DT_BOOL)

/* Error unless input i's dtype is in mask; the message names the node, the
 * input and the allowed dtypes. */
gr_status gr_shape_check_dtype(gr_shape_ctx *ctx, int i, unsigned mask);
/* Error unless inputs i and j have the same dtype. */
gr_status gr_shape_check_same_dtype(gr_shape_ctx *ctx, int i, int j);
/* Error unless the input's rank is known and equals rank (or rank < 0: any). */
gr_status gr_shape_check_rank(gr_shape_ctx *ctx, int i, int rank);
/* Formats a dtype mask ("f32, f64") into buf (cap bytes); returns buf. */
const char *gr_dtype_mask_str(unsigned mask, char *buf, size_t cap);
/* Common shape functions. */
gr_status gr_shape_fn_unchanged(gr_shape_ctx *ctx);   /* output 0 = input 0 */
gr_status gr_shape_fn_scalar_none(gr_shape_ctx *ctx); /* no outputs */
/* A cost function for ops that cost nothing (views, constants, transfers
 * whose cost is the edge's): no flops, no bytes. */
void gr_cost_fn_free(const gr_node *node, gr_cost *out);

/* ---- attrs of a node (defaults already filled in) ----------------------- */

const gr_attr_value *gr_node_attr(const gr_node *n, const char *name);
int64_t gr_node_attr_int(const gr_node *n, const char *name, int64_t dflt);
double gr_node_attr_float(const gr_node *n, const char *name, double dflt);
bool gr_node_attr_bool(const gr_node *n, const char *name, bool dflt);
const char *gr_node_attr_string(const gr_node *n, const char *name, const char *dflt);
gr_dtype gr_node_attr_dtype(const gr_node *n, const char *name, gr_dtype dflt);

/* Does this attr name a variable its node reads or updates: a string attr
 * "var", or "slot..." (an optimizer's slots, as "slot_m")? A GR_OP_VARIABLE
 * node needs every variable so named initialised (the session does it) and
 * kept by pruning. The one statement of that convention. */
bool gr_attr_names_variable(const gr_attr *a);

/* ---- kernels ------------------------------------------------------------- */

typedef struct gr_var gr_var;
typedef struct gr_resource_mgr gr_resource_mgr;

typedef struct gr_step_stacks gr_step_stacks;

/* What a kernel knows about the step it runs in. */
typedef struct gr_step_info {
  int64_t step_id; /* the session's run counter */
  uint64_t seed;   /* the session's random seed */
  gr_resource_mgr *resources;
  gr_step_stacks *stacks;           /* stacks that live for this step (loop gradients); set
                                       only for steps that run a GR_OP_STEP_STACKS op */
  struct gr_rendezvous *rendezvous; /* where _send and _recv meet (partitioned
                                       steps); NULL otherwise */
  struct gr_step_trace *trace;      /* when set, every node run adds an event */
  struct gr_step_watch *watch;      /* when set (a step timeout), executors report
                                       progress and waits to it (core/step_watch_internal.h) */
} gr_step_info;

/* Step-scoped stacks of tensors, by name (thread-safe). Push takes a new
 * reference; pop hands the top's reference to *out (GR_ERR_OUT_OF_RANGE when
 * empty). Everything left is released when the step ends. */
gr_step_stacks *gr_step_stacks_new(void);
void gr_step_stacks_free(gr_step_stacks *s);
gr_status gr_step_stack_push(gr_step_stacks *s, const char *name, const gr_tensor *t,
                             gr_error *err);
gr_status gr_step_stack_pop(gr_step_stacks *s, const char *name, gr_tensor *out, gr_error *err);
int64_t gr_step_stack_size(gr_step_stacks *s, const char *name);

struct gr_kernel_ctx {
  const gr_node *node;
  int num_inputs;
  /* Owned by the executor; a kernel may take one over with
   * gr_kernel_forward_or_alloc. */
  gr_tensor *inputs;
  int num_outputs;
  gr_tensor *outputs; /* filled by the kernel; each holds one reference */
  const gr_step_info *step;
  void **state; /* per-node slot that persists across runs of one executor */
  gr_error *err;
  /* Bit i set: output i is dead (control flow: the untaken side of a switch).
   * A dead output carries no tensor. */
  uint64_t dead_outputs;
  /* Control flow: the node is dead (a dead input). Only GR_OP_TRANSFER
   * kernels run while dead, to carry deadness to another device; a Recv sets
   * it when its Send was dead. */
  bool dead;
  /* The loop frame instance and iteration the node runs in ("" and 0
   * outside loops). A nested frame's name carries its parents' iterations:
   * "outer:3/inner" is loop inner in iteration 3 of loop outer. */
  const char *frame_name;
  int64_t iteration;
  /* The first frame_parent_len characters of frame_name name the enclosing
   * frame instance and its iteration ("outer:3"; 0 for a top-level loop):
   * two loops run in the same outer iteration share it. */
  int frame_parent_len;
  /* The executor's inter-op thread pool (NULL: none, as in constant
   * folding): gr_kernel_parallel spreads a kernel's chunks over it. */
  struct gr_threadpool *pool;
  /* executor internals (async completion) */
  void *exec_private;
};

/* Allocates output i (uninitialised) and returns it in *out. */
gr_status gr_kernel_alloc_output(gr_kernel_ctx *ctx, int i, gr_dtype dtype, const gr_shape *shape,
                                 gr_tensor **out);
/* Like alloc_output, but reuses input `in`'s buffer when this kernel holds the
 * only reference and it has the right size: lets a chain of elementwise ops
 * run in place. */
gr_status gr_kernel_forward_or_alloc(gr_kernel_ctx *ctx, int in, int i, gr_dtype dtype,
                                     const gr_shape *shape, gr_tensor **out);
/* Sets output i to a new reference of t. */
void gr_kernel_set_output(gr_kernel_ctx *ctx, int i, const gr_tensor *t);
/* Sets the error (message prefixed with nothing: the executor adds the node). */
gr_status gr_kernel_error(gr_kernel_ctx *ctx, gr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Async kernels only: report completion exactly once, from any thread. */
void gr_kernel_done(gr_kernel_ctx *ctx, gr_status status);
/* Runs fn(arg, i) for every chunk i in [0, n) and returns when all are done:
 * the calling thread and the idle threads of the executor's inter-op pool
 * share them; a chunk nobody else has started runs on the calling thread,
 * so a busy pool costs only the split. Which thread runs a chunk varies; what
 * a chunk computes must not (split work by a rule that depends on the sizes
 * and gr_kernel_parallel_threads only, never on timing), so a step gives the
 * same bits whatever the schedule. Chunks must not block on each other. */
void gr_kernel_parallel(gr_kernel_ctx *ctx, int n, void (*fn)(void *arg, int chunk), void *arg);
/* The threads gr_kernel_parallel may use: 1 + the pool's threads (fixed for an
 * executor: the session's inter-op threads). */
int gr_kernel_parallel_threads(const gr_kernel_ctx *ctx);

/* ---- variables (resources owned by a session) ---------------------------- */

/* The variable named `name`, created empty on first use. NULL if out of memory. */
gr_var *gr_resource_mgr_get_var(gr_resource_mgr *mgr, const char *name);
void gr_var_lock(gr_var *v);
void gr_var_unlock(gr_var *v);
/* With the lock held: the value (empty when uninitialised). */
gr_tensor *gr_var_value(gr_var *v);
bool gr_var_is_initialized(gr_var *v);
const char *gr_var_name(const gr_var *v);

/* ---- registry ------------------------------------------------------------ */

/* Registers an op definition (not copied: it must outlive the process's use
 * of graphs). GR_ERR_ALREADY_EXISTS if the name is taken by another def. */
gr_status gr_op_registry_add(const gr_op_def *op, gr_error *err);
/* NULL when unknown. Thread-safe after registration. */
const gr_op_def *gr_op_registry_find(const char *name);
int gr_op_registry_count(void);
const gr_op_def *gr_op_registry_at(int i); /* sorted by name */

/* A gradient function (see gr_grad_ctx in ops/gr_ops.h). */
typedef gr_status (*gr_grad_fn)(struct gr_grad_ctx *ctx);
/* Gives op the gradient function fn, for an op defined below the layer that
 * can build its gradient: core's own ops (below), whose gradients build ops
 * of ops/ (ops/op_list.h adds them). Ops defined in ops/ set .grad_fn.
 * Adding the same fn again is a no-op; GR_ERR_ALREADY_EXISTS if op has
 * another; GR_ERR_RESOURCE_EXHAUSTED when out of memory. Thread-safe. */
gr_status gr_op_registry_add_gradient(const gr_op_def *op, gr_grad_fn fn, gr_error *err);
/* op->grad_fn, else the function added for op; NULL when it has none. */
gr_grad_fn gr_op_registry_find_gradient(const gr_op_def *op);

/* How gr_gradients treats an op on the path from xs to ys. */
typedef enum gr_op_gradient {
  GR_OP_GRADIENT_SOURCE,  /* no inputs: nothing to differentiate */
  GR_OP_GRADIENT_DEFINED, /* its gradient function builds the gradient */
  GR_OP_GRADIENT_STOPS,   /* GR_OP_NO_GRADIENT: no gradient flows through it */
  GR_OP_GRADIENT_MISSING, /* none: differentiating through it is an error */
} gr_op_gradient;
gr_op_gradient gr_op_classify_gradient(const gr_op_def *op);

/* ---- the ops core defines itself ---------------------------------------- */

/* const, identity and the control-flow primitives (core/base_ops.c), and
 * the transfer ops _send/_recv (core/transfer_ops.c), are always registered:
 * the partitioner builds them without the ops layer. Code that looks for
 * one of them tests the definition, never the name:
 *   if (n->op == &gr_op_identity) ...   or   if (n->op->cf_kind == GR_CF_MERGE) ... */
extern const gr_op_def gr_op_const, gr_op_identity;
extern const gr_op_def gr_op_switch, gr_op_merge, gr_op_enter, gr_op_exit, gr_op_next_iteration,
    gr_op_loop_cond;

#endif
