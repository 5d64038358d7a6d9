/* The executor's node core: starting a node (its kernel run on this thread,
 * or started asynchronously) and finishing it (outputs checked, traced, the
 * first error recorded, values handed on, inputs and outputs released,
 * successors made ready), one code for both run paths. What differs between
 * the paths is their propagator (TensorFlow's word): how a node's values
 * reach its consumers and how ready successors are found (a flat pending
 * count on the static path, executor.c; per frame and iteration on the
 * control-flow path, executor_cf.c), how a run fails, and what an async
 * completion does next. The paths call the core; the core calls back only
 * through the propagator. Internal to core.
 *
 * Threads: the core runs on whichever thread the path calls it on, with the
 * path's locks as the path holds them (none on the static path, whose
 * counts are atomic; the run's lock on the control-flow path, released
 * around kernels by the path). */
#ifndef GR_EXEC_NODE_H
#define GR_EXEC_NODE_H

#include "core/executor_internal.h"
#include "core/gr_trace.h"

typedef struct exec_run exec_run;
typedef struct exec_async exec_async;

/* One invocation of an exec node: the node in a frame instance and
 * iteration (the static path: no frame, iteration 0). Owned by the caller
 * of the core (on its stack, or in an exec_async). */
typedef struct exec_call {
  int node;
  void *frame; /* the path's frame instance (NULL on the static path) */
  int64_t iteration;
  const char *frame_name; /* gr_kernel_ctx.frame_name (NULL on the static path) */
  int frame_parent_len;
  const char *loop; /* the loop named in an error message; NULL outside loops */
  /* the node's inputs and outputs, released when it finishes; NULL for a
   * node that never started */
  gr_tensor *ins, *outs;
  int64_t start_ns; /* when its kernel started (traced steps); -1: it did not run */
} exec_call;

/* A run path's half of the node core. Each function gets the run (the
 * path's run state, whose first member is its exec_run). */
typedef struct exec_propagator {
  /* The run failed at a node: why names it (the first error wins). The
   * run is cancelled: later kernels are skipped, pending async kernels get
   * their cancel callbacks. */
  void (*fail)(exec_run *run, const gr_error *why);
  /* Hands c's outputs (dead: none, the node is dead; dead_mask: its dead
   * outputs) to its consumers' input slots and the fetches. A path whose
   * counts are under one lock may count down its successors here. */
  void (*deliver)(exec_run *run, exec_call *c, uint64_t dead_mask, bool dead);
  /* After c's inputs and outputs are released: c is finished; counts down
   * what deliver did not and makes ready the successors at zero. sched: the
   * path's ready list for this thread (gr_exec_finish's). */
  void (*advance)(exec_run *run, exec_call *c, void *sched);
  /* An async kernel completed (any thread; the watch has its end): the path
   * finishes the node (gr_exec_finish) and runs or hands on what is ready. */
  void (*done)(exec_async *a, gr_status status);
  /* gr_kernel_on_cancel of an async kernel: fn(arg) when the run is cancelled. */
  void (*on_cancel)(exec_async *a, void (*fn)(void *), void *arg);
} exec_propagator;

/* What the core knows of a run: the first member of each path's run state. */
struct exec_run {
  const exec_propagator *prop;
  gr_executor *e;
  const gr_step_info *step;
  const gr_tensor *feeds;
  gr_tensor *fetch_out;
  int cancelled;    /* static path: atomic; control-flow path: under its lock */
  bool waiting;     /* gr_executor_run: the caller helps, holds the run and finishes it */
  pthread_t caller; /* that caller (with waiting) */
};

/* An async kernel in flight: the first member of each path's async context
 * (ctx.exec_private points to it). */
struct exec_async {
  exec_run *run;
  exec_call call;
  gr_kernel_ctx ctx;
  gr_error err;
  gr_watch_wait wait; /* a step with a timeout: named if the step stalls */
};

/* A thread of the run's own (gr_exec_own_thread). */
static inline bool gr_exec_run_own_thread(const exec_run *run) {
  return gr_exec_own_thread(run->e, run->waiting, run->caller);
}

/* ---- node start and finish ----------------------------------------------
 * Defined here, once, and compiled into each path with the path's own
 * propagator as a constant (prop: the run's prop, from the path's file):
 * the calls to its deliver and advance are then direct, and the compiler
 * may inline them, as cheap per node as a path of its own. The cold parts
 * (a failed node's error, async kernels) are out of line, in exec_node.c. */

/* Node start. A feed source takes its value into c->outs[0]: true. */
static inline bool gr_exec_feed(exec_run *run, exec_call *c) {
  int f = run->e->nodes[c->node].feed_index;
  if (f < 0) return false;
  gr_tensor_ref(&c->outs[0], &run->feeds[f]);
  return true;
}

/* Fills *ctx, the kernel context of c (exec_private: the async context).
 * Field by field: a compound literal cleared the whole struct first (a
 * block store per node). Every field is set: a field added to
 * gr_kernel_ctx must be set here too (the size check below). */
_Static_assert(sizeof(gr_kernel_ctx) == 15 * sizeof(void *) || sizeof(void *) != 8,
               "gr_kernel_ctx changed: set its new fields in gr_exec_kernel_ctx");
static inline void gr_exec_kernel_ctx(gr_kernel_ctx *ctx, exec_run *run, const exec_call *c,
                                      bool dead, gr_error *err, void *exec_private) {
  gr_executor *e = run->e;
  const exec_node *en = &e->nodes[c->node];
  ctx->node = en->node;
  ctx->num_inputs = en->num_inputs;
  ctx->inputs = c->ins;
  ctx->num_outputs = en->num_outputs;
  ctx->outputs = c->outs;
  ctx->step = run->step;
  ctx->state = &e->states[c->node];
  ctx->err = err;
  ctx->dead_outputs = 0;
  ctx->dead = dead;
  ctx->frame_name = c->frame_name;
  ctx->iteration = c->iteration;
  ctx->frame_parent_len = c->frame_parent_len;
  ctx->pool = e->pool;
  ctx->exec_private = exec_private;
}

/* Runs c's kernel on this thread with c's inputs and outputs (dead: the node
 * runs dead, control flow); the kernel's context is left in *ctx (its
 * dead_outputs and dead), its error in *kerr. */
static inline gr_status gr_exec_run_kernel(exec_run *run, exec_call *c, bool dead, gr_error *kerr,
                                           gr_kernel_ctx *ctx) {
  gr_exec_kernel_ctx(ctx, run, c, dead, kerr, NULL);
  if (run->step->trace) c->start_ns = gr_trace_now_ns();
  gr_watch_begin_kernel(run->step->watch);
  gr_status s = run->e->nodes[c->node].kernel(ctx);
  gr_watch_end_kernel(run->step->watch);
  return s;
}

/* Starts a's kernel (a->run and a->call set, a->call's inputs and outputs
 * in a): it completes through the propagator's done, also when it fails to
 * start. a belongs to the kernel until then. */
void gr_exec_start_async(exec_async *a, bool dead);

/* A kernel's outputs against the node's declaration (the dead ones aside):
 * GR_OK, or an internal error in kerr. */
static inline gr_status gr_exec_check_outputs(const exec_node *en, const gr_tensor *outs,
                                              uint64_t dead_mask, gr_error *kerr) {
  for (int k = 0; k < en->num_outputs; k++) {
    if (!((dead_mask >> (k & 63)) & 1) && !outs[k].buf)
      return gr_error_set(kerr, GR_ERR_INTERNAL, "kernel produced no output %d", k);
    if (outs[k].buf && outs[k].dtype != en->node->out_dtypes[k])
      return gr_error_set(kerr, GR_ERR_INTERNAL, "kernel produced %s for output %d, declared %s",
                          gr_dtype_name(outs[k].dtype), k, gr_dtype_name(en->node->out_dtypes[k]));
  }
  return GR_OK;
}

/* Node c failed with code (kerr its error): fails the run (the propagator's
 * fail) with the node's error (its source position, name and op, and its
 * loop and iteration) and releases c's outputs. */
void gr_exec_node_failed(exec_run *run, exec_call *c, gr_status code, const gr_error *kerr);

/* Node finish: c finished with status s (kerr its error). Checks its
 * outputs, traces it, records an error (gr_exec_node_failed), delivers its
 * values, releases its inputs and outputs, and advances (prop's, which is
 * run->prop). */
static inline void gr_exec_finish(const exec_propagator *prop, exec_run *run, exec_call *c,
                                  gr_status s, gr_error *kerr, uint64_t dead_mask, bool dead,
                                  void *sched) {
#ifdef GR_CHECK_INVARIANTS
  GR_ASSERT(prop == run->prop);
#endif
  const exec_node *en = &run->e->nodes[c->node];
  if (s == GR_OK && !dead && en->node && !__atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE))
    s = gr_exec_check_outputs(en, c->outs, dead_mask, kerr);
  if (s == GR_OK && c->start_ns >= 0 && run->step->trace &&
      !__atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE))
    gr_exec_trace(run->step, en->node, c->iteration, c->start_ns, c->outs,
                  dead ? 0 : en->num_outputs);
  if (s != GR_OK) {
    gr_exec_node_failed(run, c, s, kerr);
    dead = true;
  }
  prop->deliver(run, c, dead_mask, dead);
  if (c->outs)
    for (int k = 0; k < en->num_outputs; k++)
      if (c->outs[k].buf) gr_tensor_release(&c->outs[k]);
  if (c->ins)
    for (int k = 0; k < en->num_inputs; k++)
      if (c->ins[k].buf) gr_tensor_release(&c->ins[k]);
  prop->advance(run, c, sched);
}

/* Where an async completion runs the nodes it made ready. */
typedef enum {
  GR_EXEC_HERE,    /* on this thread, one completion deeper (gr_exec_done_depth) */
  GR_EXEC_HELPERS, /* handed to the run's pool or its waiting caller */
  GR_EXEC_DEFER,   /* neither: to this thread's outermost completion (gr_exec_defer) */
} gr_exec_where;
/* Here at most GR_DONE_INLINE_DEPTH completions deep, if the path lets this
 * thread run them (may_run_here); else the run's helpers, if it has any;
 * else deferred. */
gr_exec_where gr_exec_completion_where(const exec_run *run, bool may_run_here);

#endif
