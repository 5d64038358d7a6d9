/* Device plans: the partitions of a step, one executor per device, run
 * concurrently and joined by a rendezvous. The session builds one per
 * prepared multi-device signature; a server task builds one from the
 * partitions a master registered with it.
 *
 *   gr_partitions *parts;                        // gr_partition_graph(...)
 *   gr_device_plan *plan;
 *   gr_device_plan_new_from(parts, pool, &plan, &err);   // takes parts
 *   gr_step_info step = {.step_id = 7, .resources = rm};  // rendezvous NULL: a fresh local one
 *   gr_device_plan_run(plan, feed_values, fetch_out, &step, NULL, &err);
 *   gr_device_plan_run_async(plan, feed_values, fetch_out, &step, NULL, on_done, arg);
 *   gr_device_plan_free(plan);
 *
 * Feeds and fetches are indexed as the caller's: partition k's feed i is
 * feed_values[parts[k].feed_index[i]], its fetch i lands in
 * fetch_out[parts[k].fetch_index[i]]. */
#ifndef GR_DEVICE_PLAN_H
#define GR_DEVICE_PLAN_H

#include "core/executor.h"
#include "core/partition.h"
#include "core/gr_rendezvous.h"

typedef struct gr_device_plan gr_device_plan;

/* Partitions the nodes (each with assigned_device set) and builds one
 * executor per device. The plan owns the partitions; pool is borrowed. */
gr_status gr_device_plan_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             gr_threadpool *pool, const gr_partition_options *opts,
                             gr_device_plan **out, gr_error *err);
/* A plan over partitions made elsewhere; takes parts (freed with the plan,
 * also when this fails). */
gr_status gr_device_plan_new_from(gr_partitions *parts, gr_threadpool *pool, gr_device_plan **out,
                                  gr_error *err);
void gr_device_plan_free(gr_device_plan *p);

/* Runs every device's executor concurrently; the first error (not a
 * cancellation it caused) aborts the step's rendezvous and is returned.
 * step->rendezvous: the rendezvous to use (borrowed: a remote one on a
 * server task), or NULL for a fresh local one. *stats (if not NULL): what
 * crossed devices through it. fetch_out needs room for every partition's
 * fetches (the largest fetch_index + 1). */
gr_status gr_device_plan_run(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                             const gr_step_info *step, gr_transfer_stats *stats, gr_error *err);
/* The same without waiting (gr_executor_run_async per device): done(arg,
 * status, err) is called once, on whichever thread finishes the last
 * device (possibly this one before the call returns), after fetch_out and
 * *stats are filled. feed_values, fetch_out, *stats and step->rendezvous are
 * borrowed until then; *step is copied. */
void gr_device_plan_run_async(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                              const gr_step_info *step, gr_transfer_stats *stats,
                              gr_executor_done_fn done, void *arg);
const gr_partitions *gr_device_plan_partitions(const gr_device_plan *p);
/* Number of caller fetches the plan fills (largest fetch_index + 1). */
int gr_device_plan_num_fetches(const gr_device_plan *p);

#endif
