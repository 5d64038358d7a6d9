/* Executor internals. The files, from the bottom: exec_core.c (what both
 * run paths share: deferred completions, traces, kernel context helpers)
 * and exec_node.h with exec_node.c (node start and finish, inline in each
 * path with its propagator; async dispatch), the two run paths on them (executor.c: static graphs;
 * executor_cf.c with executor_cf_plan.c: control flow), and on top
 * executor_run.c (starting a run on the right path, freeing) and
 * executor_build.c. Threads and locks of a run: docs/internals.md,
 * "Threads and locks". Internal to core. */
#ifndef GR_EXECUTOR_INTERNAL_H
#define GR_EXECUTOR_INTERNAL_H

#include <pthread.h>

#include "core/executor.h"
#include "core/threadpool.h"
#include "core/step_watch_internal.h"

typedef struct exec_edge {
  int src_output;
  int dst;      /* exec node index; -1: fetch sink */
  int dst_slot; /* absolute input slot, or fetch index */
  int move;     /* last edge of its output: hand the reference over */
} exec_edge;

typedef struct exec_node {
  gr_node *node; /* NULL for a feed source */
  gr_status (*kernel)(gr_kernel_ctx *);
  int num_inputs, input_base;
  int num_outputs, output_base;
  int edge_begin, edge_end; /* data edges */
  int ctrl_begin, ctrl_end; /* control successors in ctrl_dsts */
  int initial_pending;
  int feed_index; /* >= 0 for feed sources */
  unsigned char expensive, async;
  /* on a path to a data send or a collective (another device waits for
   * it): run before the nodes that are not (docs/internals.md) */
  unsigned char urgent;
  /* may run on a thread that is not the run's own (a server's network
   * thread delivering a tensor): a transfer, or a node whose inputs and
   * outputs have known shapes and few bytes (GR_LIGHT_BYTES) and which is
   * not expensive. A node of unknown size may be a large copy. */
  unsigned char light;
  unsigned char cf_kind; /* gr_cf_kind of the op */
} exec_node;

struct gr_executor {
  exec_node *nodes;
  int num_nodes, num_real;
  exec_edge *edges;
  int *ctrl_dsts;
  int num_slots, num_out_slots;
  const gr_output *feeds_ref;
  gr_output *feeds, *fetches;
  int num_feeds, num_fetches;
  int *roots;
  int num_roots;
  void **states;
  gr_threadpool *pool;
  int pool_size;
  pthread_mutex_t mu;
  struct run_state *free_states;
  struct cf_plan *cf; /* set when the graph has control flow */
};

/* A thread of a run's own (both run paths): e's pool's, or the run's
 * caller when it waits for the run. Other threads (a server's network
 * thread completing a receive, another device's thread) run only light
 * nodes of the run (exec_node) on the static path, and none on the
 * control-flow path. */
static inline bool gr_exec_own_thread(const gr_executor *e, bool waiting, pthread_t caller) {
  return (e->pool_size > 0 && gr_threadpool_current() == e->pool) ||
         (waiting && pthread_equal(pthread_self(), caller));
}

/* Async completions may arrive inside another executor's work on the same
 * thread (a Send handing its value to a waiting Recv). They run the nodes
 * they make ready inline only this many levels deep and otherwise leave them
 * to the run's own threads, so a chain of transfers cannot grow the stack. */
enum { GR_DONE_INLINE_DEPTH = 8 };
extern _Thread_local int gr_exec_done_depth;

/* A run with no pool threads and no caller waiting for it has nobody to
 * hand those nodes to: the completion defers fn(arg) (which drains the run)
 * to the outermost completion on its thread, which calls
 * gr_exec_run_deferred when it returns to depth 0. fn must hold the run. */
void gr_exec_defer(void (*fn)(void *), void *arg);
/* Runs what was deferred on this thread (call at depth 0). */
void gr_exec_run_deferred(void);

/* The static path (executor.c): starts a run of a graph without control
 * flow (as gr_cf_run_start); frees its recycled run states. */
void gr_exec_static_start(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                          const gr_step_info *step, gr_executor_done_fn done, void *arg, bool wait);
void gr_exec_static_free(gr_executor *e);

/* Control flow (executor_cf.c): frames and iterations. */
struct cf_plan;
/* Assigns frames to nodes and checks the loop structure; e->cf on success. */
gr_status gr_cf_plan_new(gr_executor *e, gr_error *err);
void gr_cf_plan_free(struct cf_plan *p);
/* Starts a run of a graph with control flow (gr_executor_run_async). wait:
 * the calling thread helps and waits, and done is called on it before this
 * returns (gr_executor_run). */
void gr_cf_run_start(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                     const gr_step_info *step, gr_executor_done_fn done, void *arg, bool wait);

/* Adds a trace event for node n (a step with a trace) that started at start_ns
 * and produced outs[0..nout) just now. */
void gr_exec_trace(const gr_step_info *step, const gr_node *n, int64_t iteration, int64_t start_ns,
                   const gr_tensor *outs, int nout);

#endif
