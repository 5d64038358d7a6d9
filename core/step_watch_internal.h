/* The step watch: fails a step that makes no progress (a deadlock) instead
 * of letting it wait forever. Internal to core.
 *
 * A session with a step timeout (gr_session_options.step_timeout_ms) owns a
 * watchdog: one thread that looks at every running step of the session a
 * few times per timeout. A step makes progress while a kernel runs on some
 * thread or when a kernel finished since the last look. When neither
 * happens for the timeout, the only nodes left are waiting (a _recv whose
 * _send never runs, an async kernel that never completes): the watchdog
 * fails the step with GR_ERR_DEADLINE_EXCEEDED, naming the waiting nodes and
 * their devices, and cancels it the usual way: the step's rendezvous is
 * aborted, every executor run of the step is cancelled and waiting async
 * kernels get their cancel callbacks. A kernel that computes for longer
 * than the timeout is progress, not a stall. A step with no node waiting and
 * no kernel running is between kernels (on a loaded machine, for a while):
 * it stalls only after 10 timeouts (at least 1 s), which still ends a step
 * that the executor lost track of.
 *
 *   gr_watchdog *d = gr_watchdog_new(5000);              // session start
 *   gr_step_watch *w = gr_watchdog_begin_step(d);       // each step
 *   step.watch = w;                                      // executors report
 *   st = gr_executor_run(ex, feeds, outs, &step, err);
 *   st = gr_watchdog_end_step(d, w, st, err);            // frees w
 *   gr_watchdog_free(d);                                 // session end
 *
 * Executors report through the gr_watch_* hooks, which take a NULL watch (no
 * timeout) and then do nothing. The hook structs are embedded in the
 * executor's own state, so reporting allocates nothing. */
#ifndef GR_STEP_WATCH_INTERNAL_H
#define GR_STEP_WATCH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_graph.h"
#include "core/gr_rendezvous.h"

typedef struct gr_watchdog gr_watchdog;
typedef struct gr_step_watch gr_step_watch;

/* An async kernel in flight: what the watchdog names when the step stalls. */
typedef struct gr_watch_wait {
  struct gr_watch_wait *prev, *next;
  const gr_node *node;
  const char *frame; /* loop frame instance ("" or NULL outside loops) */
  int64_t iteration;
  void (*cancel_fn)(void *); /* kept by gr_watch_keep_cancel */
  void *cancel_arg;
} gr_watch_wait;

/* An executor run of the step and how to cancel it. */
typedef struct gr_watch_run {
  struct gr_watch_run *prev, *next;
  /* Fails the run with *why and cancels its async kernels; when the run had
   * failed already (a kernel error that then left the step waiting), copies
   * that error into *own instead. Called from the watchdog thread. Returns
   * true when the run holds itself open until release(arg): then it cannot
   * finish, and leave the watch, on the watchdog's thread while it fires. */
  bool (*cancel)(void *arg, const gr_error *why, gr_error *own);
  /* Called after a cancel that returned true, once the watchdog has stopped
   * firing; the run may finish in it. */
  void (*release)(void *arg);
  void *arg;
  struct gr_watch_run *fired_next; /* the watchdog's list of runs to release */
} gr_watch_run;

/* timeout_ms > 0. NULL when out of memory or the thread cannot start. */
gr_watchdog *gr_watchdog_new(int64_t timeout_ms);
/* Stops the thread. No step may be running. */
void gr_watchdog_free(gr_watchdog *d);
/* A new watch for a step that starts now; NULL when out of memory. */
gr_step_watch *gr_watchdog_begin_step(gr_watchdog *d);
/* Ends the step and frees w (waits for a firing watchdog to finish with it).
 * Returns st, except for a failed step that the watchdog stopped: then the
 * root cause, not the cancellations it caused, goes to err -- the first
 * error a run of the step had before it stalled, else the watchdog's
 * GR_ERR_DEADLINE_EXCEEDED naming the waiting nodes. */
gr_status gr_watchdog_end_step(gr_watchdog *d, gr_step_watch *w, gr_status st, gr_error *err);

/* ---- hooks for executors (w may be NULL) ---------------------------------------------- */

void gr_watch_count_kernel(gr_step_watch *w, int delta);
/* Around every synchronous kernel call. */
static inline void gr_watch_begin_kernel(gr_step_watch *w) {
  if (w) gr_watch_count_kernel(w, 1);
}
static inline void gr_watch_end_kernel(gr_step_watch *w) {
  if (w) gr_watch_count_kernel(w, -1);
}
/* Before an async kernel is called / when it completes (gr_kernel_done). */
void gr_watch_begin_wait(gr_step_watch *w, gr_watch_wait *wt, const gr_node *n, const char *frame,
                         int64_t iteration);
void gr_watch_end_wait(gr_step_watch *w, gr_watch_wait *wt);
/* For run paths that keep no cancel list of their own: remembers fn(arg) as
 * the waiting kernel's cancel callback, called if the watchdog stops the
 * step. Returns true when it stopped the step already (call fn now). */
bool gr_watch_keep_cancel(gr_step_watch *w, gr_watch_wait *wt, void (*fn)(void *), void *arg);
/* An executor run joins / leaves the step (leave waits for a firing
 * watchdog to be done with r). */
void gr_watch_attach_run(gr_step_watch *w, gr_watch_run *r);
void gr_watch_detach_run(gr_step_watch *w, gr_watch_run *r);
/* The step's rendezvous (multi-device steps), aborted when the step stalls;
 * NULL before it is freed (waits for a firing watchdog to be done with it). */
void gr_watch_set_rendezvous(gr_step_watch *w, gr_rendezvous *r);

#endif
