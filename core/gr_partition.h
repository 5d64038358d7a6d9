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
 * Loops: every node of a loop (its enter, merge, switch, body, next_iteration
 * and exit nodes, nested loops included) runs on one device: the device of
 * the loop's first node pinned by a device spec, else of its first enter.
 * A loop whose pinned nodes ask for devices that cannot be one is an error
 * naming them. Branches of a cond may live on different devices: dead values
 * cross devices as dead.
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
  int num_sends;         /* _send/_recv pairs inserted, control pairs included */
  int num_control_sends; /* of which carry a control edge */
  int num_dup_consts;    /* constants copied to a second device */
} gr_partitions;

typedef struct gr_partition_options {
  uint64_t incarnation; /* part of every rendezvous key (e.g. per session) */
} gr_partition_options;

/* nodes: the nodes to run (each once; every input is in the set or fed), each
 * with assigned_device set. feeds/fetches: as for gr_executor_new. *out is
 * NULL on failure. */
gr_status gr_partition_graph(gr_node *const *nodes, int num_nodes, const gr_output *feeds,
                             int num_feeds, const gr_output *fetches, int num_fetches,
                             const gr_partition_options *opts, gr_partitions **out, gr_error *err);
void gr_partitions_free(gr_partitions *p);

#endif
