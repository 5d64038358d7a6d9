/* The executor: runs one (sub)graph many times.
 *
 * Built once from a set of nodes in topological order (pending counts, edge
 * lists, feed sources and fetch sinks), then run per step. Ready nodes run
 * inline on the calling thread when cheap; expensive ones (GR_OP_EXPENSIVE or
 * large cost) go to a shared queue that the inter-op thread pool and the
 * calling thread drain. Async kernels complete through gr_kernel_done. A
 * node's first error cancels the step: remaining kernels are skipped, pending
 * async kernels get their cancel callback, and the error (naming the node) is
 * returned.
 *
 *   gr_executor *ex;
 *   gr_executor_new(nodes, n, feeds, 1, fetches, 1, pool, &ex, &err);
 *   gr_tensor out;
 *   gr_executor_run(ex, &feed_value, &out, &step, &err);
 *   gr_tensor_release(&out);
 *   gr_executor_free(ex);
 *
 * Ownership: the executor borrows the nodes (their graph must outlive it) and
 * the pool. Fetch results each hold one reference for the caller. */
#ifndef GR_EXECUTOR_H
#define GR_EXECUTOR_H

#include "core/gr_graph.h"
#include "core/gr_threadpool.h"

typedef struct gr_executor gr_executor;

/* nodes: every node to run, each once, inputs before consumers (e.g. by id).
 * feeds: endpoints whose value is supplied per run; their producers need not
 * be in `nodes`. fetches: endpoints returned per run. Every data and control
 * input of a node in `nodes` must be in `nodes` or fed. */
gr_status gr_executor_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                          int num_feeds, const gr_output *fetches, int num_fetches,
                          gr_threadpool *pool, gr_executor **out, gr_error *err);
void gr_executor_free(gr_executor *e);

/* Runs one step. feed_values[i] feeds feeds[i] (checked against its dtype and
 * inferred shape); fetch_out[i] receives fetches[i]. Thread-safe: several runs
 * of one executor may proceed at once. */
gr_status gr_executor_run(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                          const gr_step_info *step, gr_error *err);

/* Async kernels: registers fn(arg) to run if the step is cancelled before the
 * kernel calls gr_kernel_done. At most one per kernel invocation. */
void gr_kernel_on_cancel(gr_kernel_ctx *ctx, void (*fn)(void *arg), void *arg);

#endif
