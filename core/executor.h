/* The executor: runs one (sub)graph many times.
 *
 * Built once from a set of nodes in topological order (pending counts, edge
 * lists, feed sources and fetch sinks), then run per step. Ready nodes run
 * inline on the calling thread when cheap; expensive ones (GR_OP_EXPENSIVE or
 * large cost) go to a shared queue that the inter-op thread pool and the
 * calling thread drain, but for one that the thread keeps and runs after
 * the cheap ones that are ready (sends go out before a long product); nodes
 * on a path to a send or a collective go before the others ("Urgent nodes
 * first" in docs/internals.md). Which thread may run which node:
 * docs/internals.md, "Threads and locks". Async kernels complete through
 * gr_kernel_done. A node's first error cancels the step: remaining kernels
 * are skipped, pending async kernels get their cancel callback, and the
 * error (naming the node) is returned.
 *
 *   gr_executor *ex;
 *   gr_executor_new(nodes, n, feeds, 1, fetches, 1, pool, &ex, &err);
 *   gr_tensor out;
 *   gr_executor_run(ex, &feed_value, &out, &step, &err);
 *   gr_tensor_release(&out);
 *   gr_executor_run_async(ex, &feed_value, &out, &step, on_done, arg); // returns at once
 *   ... on_done(arg, status, err) runs once, on some thread; out is filled ...
 *   gr_executor_free(ex);
 *
 * Ownership: the executor borrows the nodes (their graph must outlive it) and
 * the pool. Fetch results each hold one reference for the caller. */
#ifndef GR_EXECUTOR_H
#define GR_EXECUTOR_H

#include "core/gr_graph.h"
#include "core/threadpool.h"

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
 * of one executor may proceed at once. The calling thread runs nodes too
 * until the step is done: it is gr_executor_run_async and a wait. */
gr_status gr_executor_run(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                          const gr_step_info *step, gr_error *err);

/* The end of an asynchronous run: status and, when it is not GR_OK, err
 * (valid during the call only). */
typedef void (*gr_executor_done_fn)(void *arg, gr_status status, const gr_error *err);

/* Starts one step and returns without waiting for it. The calling thread
 * runs what is ready at once; later nodes run on the run's own threads
 * (docs/internals.md, "Threads and locks"). done(arg, status, err) is
 * called exactly once, on whichever thread finishes last (possibly this
 * one before the call returns): after every node has finished, fetch_out
 * is filled (released again on failure) and no pool task holds the run.
 * feed_values, fetch_out and *step are borrowed until done is called.
 * Errors (bad feeds, out of memory, a kernel's error, a cancellation by the
 * step's rendezvous abort or its watchdog) arrive through done, never as a
 * return value. */
void gr_executor_run_async(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                           const gr_step_info *step, gr_executor_done_fn done, void *arg);

/* Async kernels: registers fn(arg) to run if the step is cancelled before the
 * kernel calls gr_kernel_done. At most one per kernel invocation. */
void gr_kernel_on_cancel(gr_kernel_ctx *ctx, void (*fn)(void *arg), void *arg);

#endif
