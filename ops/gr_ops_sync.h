/* Queues, gradient accumulators, synchronous replicas with aggregation and
 * partitioned variables: docs/strategies.md. Part of the ops face
 * (included by ops/gr_ops.h).
 *
 *   gr_output q = gr_fifo_queue(g, "batches", 2, (gr_dtype[]){GR_F32, GR_I32}, NULL, 8);
 *   gr_output enq = gr_queue_enqueue(g, q, (gr_output[]){x, y}, 2);  // a target
 *   gr_output xy[2];
 *   gr_queue_dequeue(g, q, xy);                                      // waits for one
 *
 * Every builder returns a null output (or an error status) and records the
 * graph's error when it fails; the ops of a queue or an accumulator are put
 * with the node that makes it (they run in the container that holds it). */
#ifndef GR_OPS_SYNC_H
#define GR_OPS_SYNC_H

#include "core/gr_core.h"

/* ---- FIFO queues (queue_ops.c, queue.c) ---------------------------------------------------- */

#define GR_QUEUE_COMPONENTS_MAX 16

/* The FIFO queue `name` (under the current name scope; shared by every
 * graph that names it in the same task's container) of elements of
 * num_components tensors of dtypes[c] and shapes[c] (shapes NULL, or a
 * shape of rank -1: any shape); capacity < 0: unbounded. Output: its handle
 * (u8, the name), the first input of the ops below. */
gr_output gr_fifo_queue(gr_graph *g, const char *name, int num_components, const gr_dtype *dtypes,
                        const gr_shape *shapes, int64_t capacity);
/* Adds one element; waits while the queue is full. Zero outputs: a target. */
gr_output gr_queue_enqueue(gr_graph *g, gr_output queue, const gr_output *components, int n);
/* Adds the elements along axis 0 of the components, in order. */
gr_output gr_queue_enqueue_many(gr_graph *g, gr_output queue, const gr_output *components, int n);
/* out[c] (one per component) gets the oldest element; waits while empty;
 * the step fails with GR_ERR_OUT_OF_RANGE when the queue is closed and empty. */
gr_status gr_queue_dequeue(gr_graph *g, gr_output queue, gr_output *out);
/* The n oldest elements stacked along a new axis 0. */
gr_status gr_queue_dequeue_many(gr_graph *g, gr_output queue, int64_t n, gr_output *out);
/* Closes the queue (a target). */
gr_output gr_queue_close(gr_graph *g, gr_output queue, bool cancel_pending_enqueues);
/* The number of elements (i64 scalar). */
gr_output gr_queue_size(gr_graph *g, gr_output queue);

/* ---- gradient accumulators (accumulator.c) ----------------------------------------------------
 */

/* The accumulator `name` (not scoped: the full name; shared by every graph
 * that names it in the same task's container) of gradients of dtype (f32,
 * f64) and shape (fully known). Output: its handle, for the ops below. */
gr_output gr_accumulator(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape);
/* Adds grad, computed at local_step (i64 scalar); a gradient of a step older
 * than the accumulator's is dropped and counted. Zero outputs: a target. */
gr_output gr_accumulator_apply_grad(gr_graph *g, gr_output acc, gr_output local_step,
                                    gr_output grad);
/* Adds grads[i] to accs[i] (i < n), computed at local_step, all or none:
 * when local_step is older than any accumulator's step, every one is
 * dropped and counted, so a take_grad never sees part of them. The
 * accumulators must live on one task (the op runs where accs[0] does). A
 * target. */
gr_output gr_accumulator_apply_grads(gr_graph *g, const gr_output *accs, const gr_output *grads,
                                     int n, gr_output local_step);
/* Waits until num_required (i64 scalar) gradients are in; their mean. The
 * accumulator empties and its step advances by one. */
gr_output gr_accumulator_take_grad(gr_graph *g, gr_output acc, gr_output num_required);
/* Raises the accumulator's step to step (i64 scalar). A target. */
gr_output gr_accumulator_set_global_step(gr_graph *g, gr_output acc, gr_output step);
/* Counters (i64 scalars): gradients in it now; gradients dropped as stale. */
gr_output gr_accumulator_num_accumulated(gr_graph *g, gr_output acc);
gr_output gr_accumulator_num_dropped(gr_graph *g, gr_output acc);

/* ---- synchronous replicas with aggregation (sync_replicas.c) ----------------------------------
 */

/* TensorFlow's SyncReplicasOptimizer, for between-graph training: every
 * worker builds the same model in its own graph and calls this with its
 * worker_index; the variables (on the ps), the accumulators (one per
 * variable) and the token queue (both with global_step) are shared by
 * name. A worker's gradients go into the accumulators in one op, all or
 * none: an update counts a worker's whole contribution or none of it. */
typedef struct gr_sync_replicas_options {
  gr_optimizer optimizer;
  int replicas_to_aggregate; /* gradients averaged per update */
  int total_num_replicas;    /* workers; more than replicas_to_aggregate: backup workers;
                                0: replicas_to_aggregate */
  int worker_index;          /* this worker: names its local step */
  const char *worker_device; /* where the local step lives; NULL: the current scope's */
  int64_t init_tokens;       /* tokens queued by init_tokens before the first update: 0 (the
                                default) makes the workers step together; TensorFlow's
                                default is replicas_to_aggregate */
} gr_sync_replicas_options;

typedef struct gr_sync_replicas {
  /* A worker's step (a target): its gradients go into the accumulators
   * tagged with its local step, then it waits for a token from the chief
   * and takes the token's step as its local step. */
  gr_output train;
  /* The chief's update (a target, run in a loop beside the workers, as
   * TensorFlow's chief queue runner): waits for replicas_to_aggregate
   * gradients of each variable, applies their mean with the optimizer,
   * advances global_step, and queues total_num_replicas tokens. */
  gr_output chief_update;
  gr_output init_tokens; /* a target (null output when init_tokens is 0) */
  gr_output num_dropped; /* i64: stale gradients dropped, summed over the accumulators */
  gr_output local_step;  /* this worker's local step (variable) */
} gr_sync_replicas;

/* Builds both parts in this graph (a worker that is not the chief just
 * never runs chief_update). var_list NULL/0: every float variable loss
 * depends on. Returns the graph's error status. */
gr_status gr_sync_replicas_minimize(gr_graph *g, const gr_sync_replicas_options *o, gr_output loss,
                                    const gr_output *var_list, int n, gr_sync_replicas *out);

#endif
