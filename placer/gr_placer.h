/* placer/: the face header. The cluster model (placer/gr_cluster.h), the
 * cost model with measured profiles (placer/gr_cost.h), placement
 * constraints, and the simulated greedy placer that gives every node of a
 * graph a full device name. Graph passes live in passes/.
 *
 *   gr_error err;
 *   gr_cluster *c = NULL;
 *   if (gr_cluster_load_json("cluster.json", &c, &err) != GR_OK) { puts(err.msg); return 1; }
 *   gr_placer_options o = gr_placer_options_default();   // soft placement off
 *   gr_placement *p = NULL;
 *   if (gr_placer_place(g, c, &o, &p, &err) != GR_OK) { puts(err.msg); return 1; }
 *   printf("%s\n", gr_graph_node(g, 0)->assigned_device); // "/job:worker/replica:0/..."
 *   printf("step %.3g s\n", gr_placement_step_time(p));
 *   gr_placement_explain(p, stdout);                      // per node: device and why
 *   gr_placement_free(p);
 *   gr_cluster_free(c);
 *
 * Ownership: every _new / _load / _place result has one _free. The cluster
 * must outlive placements made with it; the graph owns the assigned device
 * strings the placer writes (one shared string per device). The lower-level
 * gr_place_graph form (flat arrays, nodes in topological order) is what the
 * placer works on; benchmarks and tests may build it directly. See
 * docs/placement.md. */
#ifndef GR_PLACER_H
#define GR_PLACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/gr_core.h"
#include "placer/gr_cluster.h"
#include "placer/gr_cost.h"

/* ---- the compact graph the placer works on --------------------------------- */

/* Nodes are in topological order: every in-edge's producer has a smaller
 * index than its consumer. Arrays are owned by the struct (gr_place_graph_init
 * allocates them, gr_place_graph_free frees them). */
typedef struct gr_place_graph {
  int num_nodes, num_edges;
  double *flops;    /* per node */
  double *bytes;    /* per node: memory traffic */
  double *seconds;  /* per node: measured time (< 0: none, use the estimate) */
  int *in_off;      /* num_nodes + 1: in-edges of v are in_off[v] .. in_off[v+1]-1 */
  int *in_src;      /* per edge: producer */
  double *in_bytes; /* per edge: tensor bytes (0 for control edges) */
  int *group;       /* per node: colocation representative (group[v] == v: own group) */
  int *allow;       /* per node: -1 any device, else an allowed-set index */
  int num_allow_sets, allow_words; /* sets are allow_words uint64 words each */
  uint64_t *allow_bits;
} gr_place_graph;

/* Allocates arrays for n nodes and e edges (group[v] = v, allow = -1,
 * seconds = -1, others 0); in_off must then be filled by the caller. */
gr_status gr_place_graph_init(gr_place_graph *pg, int n, int e, gr_error *err);
void gr_place_graph_free(gr_place_graph *pg);
/* Adds an allowed device set (device indices < num_devices); returns its index or -1 (OOM). */
int gr_place_graph_add_allow_set(gr_place_graph *pg, int num_devices, const int *devs, int n);
/* Checks topological order, edge ranges, groups and sets; errors name the node index. */
gr_status gr_place_graph_check(const gr_place_graph *pg, int num_devices, gr_error *err);

typedef enum gr_place_reason {
  GR_PLACE_CHOSEN,    /* earliest finish among the compared devices */
  GR_PLACE_PINNED,    /* the only device its pin (or its group's) allows */
  GR_PLACE_COLOCATED, /* its colocation group was placed with an earlier member */
  GR_PLACE_CONSUMER,  /* free source (constant, placeholder): with its first consumer */
  GR_PLACE_FALLBACK,  /* the whole greedy placement lost to a simpler one */
  GR_PLACE_LOCALITY,  /* the locality placement (with most of its inputs) beat the greedy one */
} gr_place_reason;

typedef struct gr_place_options {
  bool record;      /* keep per-node finish times per device (for explain) */
  bool no_fallback; /* return the greedy placement even if another candidate is better */
} gr_place_options;

typedef struct gr_place_result {
  int *device;            /* per node: device index */
  double *start, *finish; /* per node, simulated seconds */
  double step_time;       /* predicted makespan of the returned placement */
  double greedy_time;     /* the greedy placement's makespan */
  double locality_time;   /* the locality placement's makespan (INFINITY: not tried) */
  bool by_locality;       /* the locality placement was returned */
  double baseline_time;   /* best of single device / pins only */
  int baseline_device;    /* the device of that baseline */
  bool fell_back;         /* the baseline was returned */
  double cross_bytes;     /* bytes moved between devices per step */
  uint8_t *reason;        /* per node gr_place_reason */
  int *cause;             /* per node: COLOCATED: the member that placed the group;
                             CONSUMER: the consumer it followed; else -1 */
  /* record only: num_nodes * num_devices finish times (INFINITY: not allowed) */
  double *cand_finish;
  int num_devices;
} gr_place_result;

/* Places pg on c. Deterministic. result is filled (free with gr_place_result_free). */
gr_status gr_place_schedule(const gr_place_graph *pg, const gr_cluster *c,
                            const gr_place_options *o, gr_place_result *result, gr_error *err);
void gr_place_result_free(gr_place_result *r);
/* Simulated makespan of a fixed assignment (same model the placer uses; a
 * free source (no inputs, no cost, unpinned) at device -1 goes with its
 * first consumer, as the placer puts it);
 * cross_bytes (may be NULL) gets the bytes moved between devices. -1 on OOM. */
double gr_place_simulate(const gr_place_graph *pg, const gr_cluster *c, const int *device,
                         double *cross_bytes);
/* Compute seconds of node v on device d (estimate or measured). */
double gr_place_node_time(const gr_place_graph *pg, const gr_cluster *c, int v, int d);
/* max(critical path on the fastest device, total work / number of devices),
 * transfers free: no placement can beat it. */
double gr_place_lower_bound(const gr_place_graph *pg, const gr_cluster *c);

/* ---- placing a gr_graph ---------------------------------------------------- */

typedef struct gr_placer_options {
  bool soft_placement;     /* unsatisfiable pins fall back to any device (off by default) */
  bool explain;            /* keep what gr_placement_explain prints */
  gr_profile_db *profiles; /* measured times (NULL: static estimates only) */
  int min_samples;         /* profiles used once they have this many samples */
} gr_placer_options;

gr_placer_options gr_placer_options_default(void);

typedef struct gr_placement gr_placement;

/* Resolves pins (node->requested_device) and colocation (shared attr "var",
 * node->colocate_with), estimates costs, places every node and writes its
 * full device name to node->assigned_device. Errors name the nodes and specs
 * involved and the devices that exist. *out (may be NULL) gets the placement. */
gr_status gr_placer_place(gr_graph *g, const gr_cluster *c, const gr_placer_options *o,
                          gr_placement **out, gr_error *err);
void gr_placement_free(gr_placement *p);

/* How the nodes that no pin decides get their devices (`graphrun run
 * --placement`): left to the session (its first device: the chief's or
 * worker 0's on a cluster), by the cost model, or round-robin. */
typedef enum gr_place_mode { GR_PLACE_PINS, GR_PLACE_COST, GR_PLACE_ROUND_ROBIN } gr_place_mode;
/* "pins", "cost" or "round-robin"; false for anything else. */
bool gr_place_mode_parse(const char *text, gr_place_mode *out);
/* The placement step of preparing a run, before gr_session_new or
 * gr_master_session_new: assigns devices by mode on cluster c's devices
 * (NULL: `devices` local CPUs, the cost model with static estimates).
 * soft: a pin no device satisfies is ignored (cost mode). */
gr_status gr_placer_assign(gr_graph *g, const gr_cluster *c, int devices, gr_place_mode mode,
                           bool soft, gr_error *err);
double gr_placement_step_time(const gr_placement *p);
double gr_placement_cross_bytes(const gr_placement *p);
/* Device index (into the cluster) of the node with this id, -1 if not placed. */
int gr_placement_device_of(const gr_placement *p, int node_id);
/* Per node: its device and why; then the predicted step time and the bytes
 * crossing devices. Needs options.explain for the finish-time comparisons. */
void gr_placement_explain(const gr_placement *p, FILE *f);

#endif
