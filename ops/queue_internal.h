/* The FIFO queue resource behind the queue ops (queue_ops.c), TensorFlow's
 * FIFOQueue: elements of `ncomp` tensors in a task's resource container,
 * shared by name, with an optional capacity. Enqueues wait while it is full
 * and dequeues while it has too few elements; both wait parked
 * (wait_internal.h), not on a thread. Close makes later enqueues fail
 * (GR_ERR_CANCELLED) and dequeues that can no longer be served fail with
 * GR_ERR_OUT_OF_RANGE ("closed and has too few elements"). Internal to ops/. */
#ifndef GR_QUEUE_INTERNAL_H
#define GR_QUEUE_INTERNAL_H

#include "core/gr_core.h"
#include "ops/gr_ops.h"

#define GR_QUEUE_MAX_COMPONENTS GR_QUEUE_COMPONENTS_MAX

typedef struct gr_queue gr_queue;

typedef struct gr_queue_spec {
  int ncomp;
  gr_dtype dtypes[GR_QUEUE_MAX_COMPONENTS];
  gr_shape shapes[GR_QUEUE_MAX_COMPONENTS]; /* rank -1: any shape */
  int64_t capacity;                         /* < 0: unbounded */
} gr_queue_spec;

/* The queue `name` in the container, made with spec when absent; an
 * existing queue must have the same spec (the error says how they differ). */
gr_status gr_queue_lookup_or_create(gr_resource_mgr *m, const char *name, const gr_queue_spec *spec,
                                    gr_queue **out, gr_error *err);
/* The queue `name`, or an error naming it when it was not made yet. */
gr_status gr_queue_find(gr_resource_mgr *m, const char *name, gr_queue **out, gr_error *err);
const gr_queue_spec *gr_queue_get_spec(const gr_queue *q);

/* The async kernels' bodies. Each completes ctx (gr_kernel_done) and
 * returns GR_OK, or returns an error without completing it.
 * enqueue: comps[0..ncomp) is one element, or (many) n elements along axis 0.
 * dequeue: n elements (many: stacked along a new axis 0, n may be 0) or one
 * element into ctx->outputs. */
gr_status gr_queue_do_enqueue(gr_queue *q, gr_kernel_ctx *ctx, const gr_tensor *comps, bool many);
gr_status gr_queue_do_dequeue(gr_queue *q, gr_kernel_ctx *ctx, int64_t n, bool many);
/* Closes q; cancel_pending: waiting enqueues fail instead of finishing. */
void gr_queue_do_close(gr_queue *q, bool cancel_pending);
int64_t gr_queue_count(gr_queue *q);
bool gr_queue_is_closed(gr_queue *q);

#endif
