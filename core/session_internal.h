/* The session's multi-device step (session_devices.c): the partitions of one
 * prepared signature, an executor per device, and the threads that run the
 * devices of a step concurrently. Internal to core. */
#ifndef GR_SESSION_INTERNAL_H
#define GR_SESSION_INTERNAL_H

#include "core/gr_executor.h"
#include "core/gr_partition.h"
#include "core/gr_rendezvous.h"

typedef struct gr_device_plan gr_device_plan;

/* Partitions the nodes (each with assigned_device set) and builds one
 * executor per device. The plan owns the partitions; pool is borrowed. */
gr_status gr_device_plan_new(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             gr_threadpool *pool, const gr_partition_options *opts,
                             gr_device_plan **out, gr_error *err);
void gr_device_plan_free(gr_device_plan *p);
/* Runs every device's executor concurrently with a fresh rendezvous; the
 * first error (not a cancellation it caused) aborts the step everywhere and
 * is returned. As gr_executor_run otherwise (step->rendezvous is set here).
 * *stats (if not NULL): what crossed devices in the step. */
gr_status gr_device_plan_run(gr_device_plan *p, const gr_tensor *feed_values, gr_tensor *fetch_out,
                             const gr_step_info *step, gr_transfer_stats *stats, gr_error *err);
const gr_partitions *gr_device_plan_partitions(const gr_device_plan *p);

#endif
