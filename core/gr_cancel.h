/* Cancelling a running step from outside it, as TensorFlow's
 * CancellationManager. A step run with gr_step_info.watch set to a watch
 * made here ends when gr_step_cancel is called, however it waits: every
 * executor run of the step fails with the given error, the step's
 * rendezvous is aborted (every _recv fails) and each kernel parked in it
 * (a queue's dequeue or enqueue, an accumulator's take) gets its cancel
 * callback (gr_kernel_on_cancel). A kernel that computes finishes its
 * computation first; nothing after it runs. The distributed server gives
 * every step one, so that a master's ABORT, a closed connection and the
 * server's shutdown end a step waiting in a queue, not only its receives.
 *
 *   gr_step_watch *w = gr_step_watch_new();           // NULL: out of memory
 *   step.watch = w;
 *   gr_device_plan_run_async(plan, feeds, outs, &step, NULL, done, arg);
 *   gr_step_cancel(w, GR_ERR_CANCELLED, "aborted");   // any thread, any time, idempotent
 *   ... after done has run (no run of the step is left): gr_step_watch_free(w);
 *
 * A cancel before the step starts fails it as it starts. Thread-safe. */
#ifndef GR_CANCEL_H
#define GR_CANCEL_H

#include "core/gr_status.h"

typedef struct gr_step_watch gr_step_watch;

/* A watch for one step that no watchdog looks at (no timeout): it only
 * cancels. */
gr_step_watch *gr_step_watch_new(void);
/* Cancels the step with code and msg; later calls do nothing. */
void gr_step_cancel(gr_step_watch *w, gr_status code, const char *msg);
/* Frees w (NULL is ignored); the step's runs have ended. */
void gr_step_watch_free(gr_step_watch *w);

#endif
