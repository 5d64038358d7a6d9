/* Kernels that wait on a shared resource (a queue, an accumulator) without
 * holding a thread: the async kernel parks a waiter in the resource and
 * returns; whoever makes it ready (an enqueue, an apply_grad, a close)
 * completes it with gr_kernel_done. A step that is cancelled (an error on
 * another node or task, an abort, the step timeout's watchdog) must wake
 * its parked kernels: each waiter gets an id in one registry, and the
 * kernel's cancel callback finds the waiter by id, so a callback that comes
 * late (the waiter completed and its context is gone) touches nothing.
 *
 *   uint64_t id = gr_wait_register(&q->owner);    // before arming
 *   gr_wait_arm(ctx, id);                         // may cancel at once
 *   pthread_mutex_lock(&q->owner.mu);
 *   if (gr_wait_cancelled_locked(id)) { ... unregister, fail ... }
 *   else park the waiter (ctx, id) in q
 *   ... later, with q->owner.mu held, a waiter leaves: gr_wait_unregister(id)
 *
 * Lock order: an owner's mu, then the registry's (internal). Internal to ops/. */
#ifndef GR_WAIT_INTERNAL_H
#define GR_WAIT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"

typedef struct gr_wait_owner {
  pthread_mutex_t mu; /* guards the owner's state and its parked waiters */
  int refs;           /* atomic; gr_wait_owner_unref at 0 calls destroy */
  void (*destroy)(struct gr_wait_owner *o);
  /* With mu held: removes the parked waiter `id` and returns its context,
   * NULL when it is not parked (completed already, or not parked yet). */
  gr_kernel_ctx *(*take_waiter)(struct gr_wait_owner *o, uint64_t id);
  char what[160]; /* "queue 'q'": cancellation messages name it */
} gr_wait_owner;

/* refs = 1, mu initialised. */
void gr_wait_owner_init(gr_wait_owner *o, void (*destroy)(gr_wait_owner *),
                        gr_kernel_ctx *(*take_waiter)(gr_wait_owner *, uint64_t), const char *what);
void gr_wait_owner_ref(gr_wait_owner *o);
void gr_wait_owner_unref(gr_wait_owner *o);

/* A new waiter id of owner o (0 when out of memory). */
uint64_t gr_wait_register(gr_wait_owner *o);
/* Registers the step's cancel callback for waiter id (may run it now). */
void gr_wait_arm(gr_kernel_ctx *ctx, uint64_t id);
/* With the owner's mu held: was waiter id cancelled before it was parked? */
bool gr_wait_cancelled_locked(uint64_t id);
/* With the owner's mu held: waiter id leaves (completed, failed, never parked). */
void gr_wait_unregister(uint64_t id);

#endif
