/* Partitioning: a placed graph becomes one subgraph per device.
 *
 * Every node of the input (a pruned node set whose assigned_device is set) is
 * copied into the graph of its device's partition. Where a data edge crosses
 * devices, one _send (on the producer's device) and one _recv (on the
 * consumer's) carry the tensor, shared by all consumers on that device: one
 * pair per (tensor, destination device). A control edge that crosses devices
 * is carried the same way with an empty dummy tensor. Constants without
 * inputs are copied to each device that uses them instead of being sent.
 * Fed endpoints are fed to every partition that uses them.
 *
 * Loops may span devices. Each device a loop frame spans runs a small
 * control loop (enter, merge, switch, next_iteration) driven by the loop's
 * predicate, which the device of its loop_cond sends every iteration; the
 * receives inside the frame hang off that control loop, so each runs once per
 * iteration in step with its send. Nested frames chain: the inner control
 * loop starts once per iteration of the outer. A loop's exits run on their
 * input's device, its next_iterations on their merge's, and an enter is
 * copied to every device that uses it (a loop invariant crosses devices once
 * per step, not once per iteration). Per iteration, a loop spanning k devices
 * costs k - 1 predicate pairs plus one pair per (tensor, device) crossing
 * inside it. Dead values (the untaken side of a cond, the last iteration's
 * body) cross devices as dead.
 *
 *   gr_partitions *ps;
 *   gr_partition_graph(nodes, n, feeds, nf, fetches, nx, &opts, &ps, &err);
 *   for (int k = 0; k < ps->num_parts; k++) run ps->parts[k] on its device;
 *   gr_partitions_free(ps);
 *
 * Ownership: the partitions own their graphs and arrays; the input nodes are
 * only read (their graph may be freed once the partitions exist). */
#ifndef GR_PARTITION_H
#define GR_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_graph.h"

typedef struct gr_partition {
  const char *device; /* full device name (in graph's arena) */
  gr_graph *graph;    /* copies, sends and receives of this device */
  gr_node **nodes;    /* to run, inputs before consumers (feed stand-ins excluded) */
  int num_nodes;
  gr_output *feeds; /* endpoints of this graph fed with the caller's feeds[feed_index[i]] */
  int *feed_index, num_feeds;
  gr_output *fetches; /* endpoints giving the caller's fetches[fetch_index[i]] */
  int *fetch_index, num_fetches;
} gr_partition;

typedef struct gr_partitions {
  gr_partition *parts;
  int num_parts;
  int num_sends;            /* _send/_recv pairs inserted, control pairs included */
  int num_control_sends;    /* of which carry a control edge */
  int num_grouped_controls; /* control edges that share a pair with another of their node's */
  int num_dup_consts;       /* constants and fills copied to a second device */
  int num_dup_enters;       /* loop enters copied to a second device */
  int num_loop_sends;       /* pairs inside loops: each runs once per iteration */
  int num_control_loops;    /* control-loop state machines: one per (loop frame, device) */
  int num_scheduled_recvs;  /* receives given a later start (schedule_recvs) */
} gr_partitions;

typedef struct gr_partition_options {
  uint64_t incarnation; /* part of every rendezvous key (e.g. per session) */
  /* Start each top-level _recv as late as a critical-path estimate allows
   * (a control input from the node of its device that finishes last before
   * the value is needed) instead of at the start of the step: received
   * values are held for less time. */
  bool schedule_recvs;
} gr_partition_options;

/* nodes: the nodes to run (each once; every input is in the set or fed), each
 * with assigned_device set. feeds/fetches: as for gr_executor_new. *out is
 * NULL on failure. */
gr_status gr_partition_graph(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             const gr_partition_options *opts, gr_partitions **out, gr_error *err);
void gr_partitions_free(gr_partitions *p);

#endif
