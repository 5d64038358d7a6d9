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

#endif
