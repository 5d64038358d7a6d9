/* The seam between a session and the distributed runtime: a session whose
 * devices live in other processes runs through a remote runner. Part of
 * core's engine face (core/core_engine.h), not of the installed API. */
#ifndef GR_SESSION_REMOTE_H
#define GR_SESSION_REMOTE_H

#include "core/gr_session.h"
#include "core/partition.h"

/* A session whose devices live in other processes (the distributed
 * runtime's master, distributed/gr_distributed.h, implements it). The
 * session prunes, assigns devices and partitions as always, then hands each
 * prepared signature's partitions to the runner instead of building
 * executors, and runs its steps through it. Every callback may run on any
 * thread; several runs may be in flight at once. */
typedef struct gr_remote_runner {
  void *self;
  /* Takes parts (also on failure); *plan: the runner's handle for them. */
  gr_status (*prepare)(void *self, gr_partitions *parts, void **plan, gr_error *err);
  /* num_steps steps (gr_session_run_steps), as gr_device_plan_run each:
   * step ids step->step_id and on, the same feed_values (the caller's
   * order), fetch_out filled from the last step by the partitions'
   * fetch_index (one reference each); stats: the last step's transfers;
   * step->trace (if any): the last step's events. */
  gr_status (*run)(void *self, void *plan, const gr_tensor *feed_values, gr_tensor *fetch_out,
                   const gr_step_info *step, int64_t num_steps, gr_transfer_stats *stats,
                   gr_error *err);
  void (*free_plan)(void *self, void *plan);
  /* Does the variable of this name have a value on the task of `device`
   * (where the nodes that use it run)? */
  gr_status (*var_initialized)(void *self, const char *name, const char *device, bool *out,
                               gr_error *err);
} gr_remote_runner;

#endif
