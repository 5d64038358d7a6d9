/* placer/: the face header. The cluster model (placer/gr_cluster.h), the
 * cost model with measured profiles (placer/gr_cost.h), placement
 * constraints, and the simulated greedy placer that gives every node of a
 * graph a full device name: it predicts the step a run executes (the
 * options' fetches and targets) as the executors run it, compares its
 * placement with the obvious ones (one task, pins only, by layer) and
 * returns the fastest; gr_placement_try runs the candidates on a cluster.
 * Graph passes live in passes/. docs/placement.md.
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
 * must outlive placements made with it (and not change while a placement is
 * made; gr_placement_fit_scale changes it between two); the graph owns the assigned device
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
  double *runs;     /* per node: how often it runs in a step (a loop's iterations; init: 1);
                       a transfer between two nodes costs the fewer of their runs times */
  uint8_t *active;  /* per node: 1 in the step that is predicted (its time counts), 0 outside
                       it (placed with its group or inputs afterwards: an evaluation
                       subgraph, a variable's initialiser); init sets every node to 1 */
  int num_allow_sets, allow_words; /* sets are allow_words uint64 words each */
  uint64_t *allow_bits;
} gr_place_graph;

/* Allocates arrays for n nodes and e edges (group[v] = v, allow = -1,
 * seconds = -1, runs = 1, active = 1, others 0); in_off must then be
 * filled by the caller. */
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
  GR_PLACE_OUTSIDE,   /* not in the step: with its group, its input or its consumer (cause) */
  GR_PLACE_SEARCH,    /* the local search moved its unit (layer or colocation group) here */
  GR_PLACE_CANDIDATE, /* an obvious candidate (one task, pins only, by layer) was faster */
} gr_place_reason;

/* The placements the cost placer compares in its simulator, the best kept:
 * its own (greedy, locality, local search) and the obvious ones. */
typedef enum gr_place_candidate {
  GR_PLACE_CAND_COST,     /* the cost placer's own */
  GR_PLACE_CAND_ONE_TASK, /* every node on one device (the best-rated), pinned groups as pinned */
  GR_PLACE_CAND_PINS,     /* pins only: the rest on the session's first device (--placement pins) */
  GR_PLACE_CAND_LAYERS,   /* round-robin by layer over the devices in session order, pins kept */
  GR_PLACE_CAND_COUNT
} gr_place_candidate;
/* "cost", "one-task", "pins", "layers". */
const char *gr_place_candidate_name(gr_place_candidate k);

/* Graphs with fewer nodes than this get the local search when asked. */
#define GR_PLACE_SEARCH_MAX_NODES 10000

typedef struct gr_place_options {
  bool record;      /* keep per-node finish times per device (for explain) */
  bool no_fallback; /* return the greedy placement even if another candidate is better */
  /* per node: its layer (numbered from 0 by first appearance; -1 none), for
   * the round-robin-by-layer candidate and the search's units; NULL: no
   * layer candidate, units are the colocation groups */
  const int *layer;
  /* > 0: after the greedy and locality placements, a local search from the
   * best placement so far (graphs under GR_PLACE_SEARCH_MAX_NODES nodes):
   * moves of a whole unit (a layer with the colocation groups it touches, or
   * a colocation group) to another allowed device, kept when the simulator
   * rates them faster, at most this many simulations */
  int search_budget;
  /* write into cand_device where the simulator put the free sources and
   * nodes outside the step (they are -1 there otherwise) */
  bool resolve_candidates;
  /* rate every placement (greedy, locality, candidates, search) and predict
   * the step with the dataflow simulation, as the executors run a step:
   * each device runs any node whose inputs are there, the highest rank
   * first, on its task's inter-op threads within its host's cores. Off: the
   * greedy's own rank-order simulation (no back-filling; faster on very
   * large graphs, what bench-placer rates) */
  bool dataflow;
  /* > 0: the pins-only candidate is returned unless another is rated faster
   * by at least this fraction (the model's error: a placement that moves
   * nodes must pay for the risk); 0: the fastest wins */
  double min_gain;
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
  /* the candidates compared: predicted step (INFINITY: not tried) and
   * device per node (NULL: not tried); chosen: the one returned */
  double cand_time[GR_PLACE_CAND_COUNT];
  int *cand_device[GR_PLACE_CAND_COUNT];
  gr_place_candidate chosen;
  double search_time; /* the cost placement after the search (INFINITY: no search) */
  int search_moves;   /* moves the search kept */
  int search_sims;    /* simulations it ran */
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
/* The same assignment in the dataflow simulation (gr_place_options.dataflow:
 * as the executors run a step; nodes outside the step left out; the step
 * costs of the tasks used added). -1 on OOM. */
double gr_place_simulate_dataflow(const gr_place_graph *pg, const gr_cluster *c, const int *device,
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
  /* The step the prediction is for: the nodes these fetches and targets
   * need, the walk stopping at the feeds, as a session prunes a run (all
   * borrowed, read during the call). None of them: every node. Nodes
   * outside the step are placed too (with their group, input or consumer)
   * but cost nothing. */
  const gr_output *fetches, *targets, *feeds;
  int num_fetches, num_targets, num_feeds;
  /* The local search (graphs under GR_PLACE_SEARCH_MAX_NODES nodes) with
   * at most search_budget simulations (0: GR_PLACE_SEARCH_BUDGET). */
  bool search;
  int search_budget;
  /* the pins-only placement stays unless another is predicted faster by
   * this fraction (default GR_PLACE_MIN_GAIN; 0: the fastest wins) */
  double min_gain;
} gr_placer_options;

#define GR_PLACE_MIN_GAIN 0.05

#define GR_PLACE_SEARCH_BUDGET 4000

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
/* The same for the step a run executes (cost mode predicts and places for
 * it; options' fetches, targets and feeds, may be NULL: every node) and
 * with the options' profiles. */
gr_status gr_placer_assign_step(gr_graph *g, const gr_cluster *c, int devices, gr_place_mode mode,
                                const gr_placer_options *o, gr_error *err);
double gr_placement_step_time(const gr_placement *p);
double gr_placement_cross_bytes(const gr_placement *p);
/* Device index (into the cluster) of the node with this id, -1 if not placed. */
int gr_placement_device_of(const gr_placement *p, int node_id);
/* The candidates compared (docs/placement.md): the predicted step of
 * candidate k (INFINITY: not tried), and the one returned. */
double gr_placement_candidate_time(const gr_placement *p, gr_place_candidate k);
/* The device index candidate k gives the node with this id (-1: not tried). */
int gr_placement_candidate_device(const gr_placement *p, gr_place_candidate k, int node_id);
gr_place_candidate gr_placement_chosen(const gr_placement *p);
/* The part of candidate k's predicted step that is step costs (the client's
 * and those of the tasks it uses: gr_cluster_step_overhead); 0 when k was
 * not tried. */
double gr_placement_step_costs(const gr_placement *p, gr_place_candidate k);
/* Writes candidate k's devices to the graph's nodes (assigned_device), as
 * gr_placer_place writes the chosen one's: to run or measure another
 * candidate. An error when k was not tried. */
gr_status gr_placement_apply(gr_placement *p, gr_place_candidate k, gr_error *err);
/* ---- measuring placements ------------------------------------------------- */

/* One placement to time: a session (local, or a master's on a cluster)
 * whose graph was placed so, and the step it runs (borrowed). */
typedef struct gr_place_run {
  gr_session *session;
  const gr_output *fetches, *targets;
  int num_fetches, num_targets;
} gr_place_run;

/* Seconds per step of a run: the median, the 10th percentile (a step that
 * other work on the machine left alone, about) and the spread (the 75th
 * less the 25th percentile). */
typedef struct gr_step_stats {
  double median, low, spread;
} gr_step_stats;

/* Times the runs' steps: each runs 3 untimed steps, then `rounds` rounds
 * in which each run in turn runs `steps` / `rounds` steps (at least one),
 * so that load that comes and goes touches them alike; stats[i] gets run
 * i's. A failed step is the error, prefixed with the run's index. */
gr_status gr_place_measure(const gr_place_run *runs, int n, int steps, int rounds,
                           gr_step_stats *stats, gr_error *err);

/* Trying the candidates of a placement on the runtime: how to open a
 * session of the graph over the cluster (its nodes' assigned devices as
 * they are: a master's, for a cluster of servers), and close it. */
typedef struct gr_place_opener {
  gr_session *(*open)(void *arg, gr_graph *g, gr_error *err);
  void (*close)(void *arg, gr_session *s);
  void *arg;
} gr_place_opener;

typedef struct gr_place_trial {
  bool tried;             /* placed and measured */
  double predicted;       /* seconds per step */
  gr_step_stats measured; /* the steps measured */
  int same_as;            /* -1, or an earlier candidate that puts the step's nodes on the same
                             devices (measured once) */
} gr_place_trial;

/* Runs the step (fetches and targets, as the placement was made for) of
 * each candidate in mask (bit k: gr_place_candidate k; GR_PLACE_CAND_COST:
 * the placement returned) on sessions from o, and fills out[k]. Pins only
 * runs as `--placement pins` does: nothing assigned, the session decides.
 * Each distinct placement gets a session, warmed by one step right after
 * its devices are assigned; then gr_place_measure times them in `rounds`
 * rounds, about budget seconds each (by the slowest prediction; at least 20
 * steps) and at most
 * max_steps steps (*steps, may be NULL: how many). The placement returned
 * is assigned again at the end. */
gr_status gr_placement_try(gr_placement *p, const gr_output *fetches, int num_fetches,
                           const gr_output *targets, int num_targets, const gr_place_opener *o,
                           unsigned mask, int max_steps, double budget, int rounds,
                           gr_place_trial *out, int *steps, gr_error *err);
/* Fits the time scale of the cluster's servers (gr_cluster_scale_servers)
 * to a measured step of the placement's pins-only candidate: measured less
 * its step costs over predicted less them (clamped to [0.3, 5]); *factor
 * (may be NULL) gets the factor. c is the cluster p was placed on (place
 * again to predict with the new scale). */
gr_status gr_placement_fit_scale(const gr_placement *p, gr_cluster *c, double measured,
                                 double *factor, gr_error *err);

/* Per node: its device and why; then the predicted step time and the bytes
 * crossing devices. Needs options.explain for the finish-time comparisons. */
void gr_placement_explain(const gr_placement *p, FILE *f);

/* ---- the scaling model (placer/scale.c; docs/scaling.md) ------------------------------- */

/* Synchronous data parallelism on n workers, each with its own copy of the
 * model, the gradients summed by a ring all-reduce in buckets overlapped
 * with the backward pass (as PyTorch DDP and Horovod do), the step driven
 * by one master. Times in seconds, sizes in bytes, rates in bytes/s. */
typedef struct gr_scale_params {
  double compute;      /* one worker's step of compute (forward + backward + update), > 0 */
  double backward;     /* the fraction of compute that is the backward pass, in (0, 1] */
  double grad_bytes;   /* the gradient all-reduced per step (the trainable variables), >= 0 */
  double bucket_bytes; /* all-reduce bucket (DDP's 25 MB); 0: one bucket */
  double link_bw;      /* the network link's bandwidth, > 0 */
  double host_bw;      /* what a task's transport moves per second with an infinitely fast
                          link (its copies and syscalls; loopback measures it); 0: no limit */
  double hop_latency;  /* per message of a ring step: network latency plus the per-message
                          CPU cost of both ends, >= 0 */
  double step_fixed;   /* the master's cost per step, once, >= 0 */
  double step_task;    /* the master's serial cost per task per step (building, sending
                          and reading its RUN), >= 0 */
  double control_rtt;  /* one round trip master -> tasks -> master over the network, >= 0 */
  int per_host;        /* workers per host: > 1 with several hosts, the hierarchical
                          all-reduce (a tree inside each host, the ring among the hosts'
                          leaders, as the collective does); 0 or 1: one ring over all */
  double host_hop;     /* per message of a step inside a host: both ends' CPU, no network */
} gr_scale_params;

typedef struct gr_scale_result {
  double step;       /* seconds per step on n workers */
  double allreduce;  /* seconds of all-reduce per step, overlapped or not */
  double exposed;    /* the part of it not hidden behind the backward pass */
  double control;    /* the master's part: step_fixed + n * step_task + control_rtt */
  double efficiency; /* one worker's step over this one (weak scaling: each worker keeps its
                        batch), in (0, 1] */
} gr_scale_result;

/* Seconds of one ring all-reduce of `bytes` over n workers: 2(n-1)/n *
 * bytes / bandwidth + 2(n-1) * hop_latency, bandwidth the harmonic sum of
 * link_bw and host_bw. 0 when n == 1. */
double gr_scale_ring_time(const gr_scale_params *p, int n, double bytes);
/* Seconds of one all-reduce of `bytes` over n workers as the collective
 * runs it: with per_host > 1 workers per host and more than one host,
 * hierarchical: a binomial tree reduce inside each host and the broadcast
 * back down, 2 ceil(log2 per_host) steps each moving the whole bucket
 * through the transport (bytes / host_bw + host_hop), plus the ring among
 * the ceil(n / per_host) leaders (gr_scale_ring_time); else the ring. */
double gr_scale_allreduce_time(const gr_scale_params *p, int n, double bytes);
/* The network latency per message the model adds to a cluster's own
 * per-message cost when none is given: a datacenter TCP hop. */
#define GR_SCALE_NET_LATENCY 25e-6
/* Fills the host and master constants of p from cluster c's links (as
 * `graphrun calibrate` measured them, or gr_cluster_new's defaults):
 * hop_latency = same_host latency (a message's CPU cost at both ends, on
 * loopback) + net_latency; host_hop = same_host latency; host_bw =
 * same_host bandwidth; step_fixed =
 * same_task step (the client's own); step_task = same_host step (what one
 * more task adds); control_rtt = 2 net_latency. The rest of p is kept. */
void gr_scale_params_from_cluster(gr_scale_params *p, const gr_cluster *c, double net_latency);
/* The modelled step on n workers (1 ... GR_CLUSTER_MAX_TASKS). Errors name
 * the parameter out of range. */
gr_status gr_scale_predict(const gr_scale_params *p, int n, gr_scale_result *out, gr_error *err);

#endif
