/* placer/: the face header. Graph passes that run before placement (pruning,
 * common-subexpression elimination, constant folding), the cluster model,
 * placement constraints, cost model with measured profiles, and the simulated
 * greedy placer that gives every node of a graph a full device name.
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
 * docs/placement.md.
 *
 * Graph passes (docs/passes.md) make a new, smaller graph for one request:
 *
 *   gr_passes_options po = gr_passes_options_default();  // all passes, 1 MiB fold cap
 *   gr_passes_stats st;
 *   gr_graph *opt = NULL;
 *   if (gr_passes_optimize_graph(g, NULL, 0, &loss, 1, &train, 1, &po, &opt, &st, &err) != GR_OK)
 *     puts(err.msg);
 *   // run `opt` with the same feeds, fetching and targeting nodes by name
 *   gr_graph_free(opt); */
#ifndef GR_PLACER_H
#define GR_PLACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/gr_core.h"

/* ---- graph passes ------------------------------------------------------------ */

/* Default largest output (bytes) that constant folding replaces by a constant. */
#define GR_PASSES_FOLD_MAX_BYTES ((size_t)1 << 20)

typedef struct gr_passes_options {
  bool no_prune;         /* keep every node, not only those the fetches and targets need */
  bool no_cse;           /* no common-subexpression elimination */
  bool no_fold;          /* no constant folding */
  size_t fold_max_bytes; /* a node is folded only if its output has at most this many bytes */
} gr_passes_options;

/* Every pass on, fold_max_bytes = GR_PASSES_FOLD_MAX_BYTES. Start from this
 * rather than {0}: fold_max_bytes 0 folds only empty tensors. */
gr_passes_options gr_passes_options_default(void);

/* What the passes did. nodes_out = nodes_in - nodes_pruned - nodes_merged -
 * nodes_unused_after_folding. */
typedef struct gr_passes_stats {
  int nodes_in;                   /* nodes of the input graph */
  int nodes_pruned;               /* not needed by the fetches and targets */
  int nodes_merged;               /* CSE: duplicates whose consumers now use an equal node */
  int nodes_folded;               /* evaluated once by the passes (not counting constants) */
  int nodes_unused_after_folding; /* folded nodes and constants that only folded nodes used */
  int nodes_out;                  /* nodes of the new graph */
} gr_passes_stats;

/* Builds a new graph that gives the same results as g for runs with these
 * feeds, fetches and targets (endpoints of g; a target's index is ignored),
 * and stores it in *out. g is not changed.
 *
 * - Pruning keeps the nodes the fetches and targets need through data and
 *   control inputs, stopping at fed endpoints, plus what a run needs besides:
 *   the variables that kept nodes use with their initialisers, and colocation
 *   targets. A fed node that nothing else needs becomes a placeholder of the
 *   same name, dtype and shape. With no fetches and no targets, or with
 *   no_prune, every node is kept.
 * - CSE replaces a node by an earlier one with the same op, inputs (after
 *   CSE), attrs, control inputs, devices and colocation. Never for stateful,
 *   random, variable, placeholder, control-flow, async or transfer ops, nor
 *   for fed nodes; fetched and target nodes keep their names.
 * - Constant folding runs each single-output node whose inputs and control
 *   inputs are all constants (transitively; so never inside a loop or a
 *   branch) and whose op is pure (not stateful, random, control flow, async
 *   or transfer) once, with its own kernel, and replaces it by a `const` of
 *   the same name holding the bit-identical value, unless the output is over
 *   fold_max_bytes or the node is fed. A node whose kernel fails is left to
 *   fail at run time. Constants only folded nodes used are then dropped.
 *
 * Copies keep names, attrs, devices, colocation and source positions, and
 * the graph seed; random ops keep their streams (keyed by node name). Nodes
 * merged by CSE or dropped are gone from the new graph, so look nodes up by
 * the names of fetches, targets and feeds. o NULL: defaults; stats may be
 * NULL. Errors (a graph with a build error, endpoints of another graph) name
 * the node. Ownership: *out is a new graph for the caller (gr_graph_free),
 * independent of g; NULL on failure. */
gr_status gr_passes_optimize_graph(const gr_graph *g, const gr_output *feeds, int num_feeds,
                                   const gr_output *fetches, int num_fetches,
                                   const gr_output *targets, int num_targets,
                                   const gr_passes_options *o, gr_graph **out,
                                   gr_passes_stats *stats, gr_error *err);

/* ---- cluster model -------------------------------------------------------- */

typedef enum gr_link_kind {
  GR_LINK_SAME_TASK,  /* two devices of one process */
  GR_LINK_SAME_HOST,  /* two tasks on one host (loopback) */
  GR_LINK_CROSS_HOST, /* network */
  GR_LINK_COUNT
} gr_link_kind;

typedef struct gr_link {
  double latency;   /* seconds per transfer */
  double bandwidth; /* bytes per second, > 0 */
} gr_link;

typedef struct gr_cluster_device {
  gr_device_spec spec;           /* full: job, replica 0, task, CPU, id */
  char name[GR_DEVICE_NAME_MAX]; /* canonical full name */
  double flops;                  /* flop/s, > 0 */
  double mem_bandwidth;          /* bytes/s an op reads+writes, > 0 */
  double overhead;               /* seconds added to every op (dispatch), >= 0 */
  int task;                      /* index into the cluster's tasks */
  int host;                      /* index of the task's host */
} gr_cluster_device;

typedef struct gr_cluster gr_cluster;

/* Limits every form of cluster is checked against. */
#define GR_CLUSTER_MAX_TASKS   4096
#define GR_CLUSTER_MAX_DEVICES 65536
#define GR_CLUSTER_HOST_MAX    254 /* a host name has at most 253 characters */
#define GR_CLUSTER_ADDRESS_MAX 270 /* "[host]:port" */
/* The one CPU device a task of a ClusterSpec, TF_CONFIG or Slurm cluster gets
 * (those forms name no devices): the same defaults as a cluster file's device
 * without "mem_bandwidth" and "overhead". */
#define GR_CLUSTER_DEFAULT_FLOPS         1e11
#define GR_CLUSTER_DEFAULT_MEM_BANDWIDTH 1e10
#define GR_CLUSTER_DEFAULT_OVERHEAD      1e-6

/* One task: the process /job:JOB/replica:0/task:INDEX. Every pointer is owned
 * by the cluster and stays valid until the cluster is freed; the struct
 * itself (what gr_cluster_task_at returns) until the next gr_cluster_add_task
 * or gr_cluster_add_device. */
typedef struct gr_cluster_task {
  const char *job;     /* job name: letters, digits, '_', '-'; starts with a letter */
  int index;           /* task number within its job */
  const char *host;    /* host name (IPv6 without brackets); decides the link kinds */
  int host_id;         /* tasks with the same host_id share a host (= device.host) */
  const char *address; /* "host:port" or "[v6]:port" to reach the task; NULL when none */
  int first_device;    /* its devices: first_device .. first_device + num_devices - 1 */
  int num_devices;
} gr_cluster_task;

/* Which task of a cluster this process is (TF_CONFIG's "task", Slurm's
 * SLURM_PROCID). */
typedef struct gr_cluster_self {
  char job[GR_DEVICE_JOB_MAX];
  int index; /* within the job */
  int task;  /* cluster-wide: gr_cluster_task_at(c, task) */
} gr_cluster_self;

/* An empty cluster with default links (same task 1 us + 10 GB/s, same host
 * 20 us + 3 GB/s, cross host 100 us + 1.25 GB/s). NULL when out of memory. */
gr_cluster *gr_cluster_new(void);
void gr_cluster_free(gr_cluster *c);
/* Adds task number <count of tasks of job so far> of `job` on `host` (NULL:
 * "localhost"); *task_out (may be NULL) gets its cluster-wide task index.
 * The task has no address (gr_cluster_set_task_address) and no devices yet.
 * At most GR_CLUSTER_MAX_TASKS tasks. */
gr_status gr_cluster_add_task(gr_cluster *c, const char *job, const char *host, int *task_out,
                              gr_error *err);
/* Adds CPU device number <devices of that task so far> to a task. Devices
 * stay grouped by task in task order: a device added to a task that is not
 * the last one with devices moves the devices of later tasks up by one index. */
gr_status gr_cluster_add_device(gr_cluster *c, int task, double flops, double mem_bandwidth,
                                double overhead, gr_error *err);
void gr_cluster_set_link(gr_cluster *c, gr_link_kind kind, gr_link link);
gr_link gr_cluster_get_link(const gr_cluster *c, gr_link_kind kind);
/* One job "localhost", one task, n identical CPU devices. */
gr_cluster *gr_cluster_new_local(int n, double flops, double mem_bandwidth, double overhead);

int gr_cluster_num_tasks(const gr_cluster *c);
/* Task i (0 .. num_tasks - 1), NULL when out of range; see gr_cluster_task
 * for how long it stays valid. */
const gr_cluster_task *gr_cluster_task_at(const gr_cluster *c, int i);
/* Cluster-wide index of /job:job/task:index, -1 when none. */
int gr_cluster_find_task(const gr_cluster *c, const char *job, int index);
/* Sets (address NULL: removes) the address a task is reached at: "host:port"
 * or "[IPv6]:port", port 1..65535. The cluster keeps a copy. Refused when
 * malformed or when another task already has it (case-insensitive). */
gr_status gr_cluster_set_task_address(gr_cluster *c, int task, const char *address, gr_error *err);
/* Splits an address as gr_cluster_set_task_address checks it: host (IPv6
 * without brackets) into host[host_cap] (host_cap >= GR_CLUSTER_HOST_MAX is
 * always enough), the port into *port. Errors quote the address. */
gr_status gr_cluster_split_address(const char *address, char *host, size_t host_cap, int *port,
                                   gr_error *err);

int gr_cluster_num_devices(const gr_cluster *c);
const gr_cluster_device *gr_cluster_device_at(const gr_cluster *c, int i);
/* Index of the device with this full name (or spec text that matches exactly
 * one device), -1 when none. */
int gr_cluster_find_device(const gr_cluster *c, const char *name);
/* Link between two different devices. */
gr_link_kind gr_cluster_link_kind(const gr_cluster *c, int a, int b);
/* Seconds to move `bytes` from device a to b (0 when a == b). */
double gr_cluster_transfer_time(const gr_cluster *c, int a, int b, double bytes);

/* ---- reading clusters: cluster file, ClusterSpec, TF_CONFIG, Slurm --------- */

/* Reads a cluster from JSON text in any of its forms (docs/cluster-specs.md),
 * told apart by the top-level object:
 *   - "jobs" is an object: the cluster file (docs/placement.md), tasks with
 *     host, optional "address" and devices, plus "links";
 *   - "cluster" is an object: TF_CONFIG ({"cluster": ClusterSpec, "task":
 *     {"type": "worker", "index": 1}}); "task" is checked, then dropped (use
 *     gr_cluster_from_tf_config to keep it);
 *   - else a TensorFlow ClusterSpec: job name -> list of "host:port"; each
 *     task gets its address, the address's host and one default CPU device.
 * A syntax error names `name`:line:column (jansson's position); any other
 * error names `name`:line:column of the value and its JSON path, e.g.
 * `c.json:5:40: jobs.worker[1].devices[0].flops: must be > 0`.
 * name NULL: "<cluster>". Ownership: *out is a new cluster for the caller
 * (gr_cluster_free); NULL on failure. */
gr_status gr_cluster_parse_json(const char *text, size_t len, const char *name, gr_cluster **out,
                                gr_error *err);
/* gr_cluster_parse_json on a file's contents (at most 16 MiB), named by its path. */
gr_status gr_cluster_load_json(const char *path, gr_cluster **out, gr_error *err);
/* Writes the cluster as a cluster file (tasks grouped by job, with their
 * addresses; numbers in the shortest form that reads back exactly) that
 * gr_cluster_parse_json reads back as the same cluster. */
gr_status gr_cluster_write_json(const gr_cluster *c, FILE *f, gr_error *err);

/* TF_CONFIG text ({"cluster": {...}, "task": {"type": T, "index": I}}, as
 * TensorFlow reads it; "environment", "rpc_layer" and Cloud ML's "job" may be
 * there and are ignored). "task" is required: "type" must be a job of the
 * cluster and "index" (default 0) one of its tasks. Errors start with
 * "TF_CONFIG:line:column:". Ownership: *out as gr_cluster_parse_json; *self
 * (may be NULL) gets the task this process is. */
gr_status gr_cluster_from_tf_config(const char *json_text, gr_cluster **out, gr_cluster_self *self,
                                    gr_error *err);
/* The same on getenv("TF_CONFIG"); an error when it is not set. */
gr_status gr_cluster_from_tf_config_env(gr_cluster **out, gr_cluster_self *self, gr_error *err);

/* A cluster from Slurm's view of a job step:
 *   nodelist: SLURM_JOB_NODELIST syntax, e.g. "node[01-03,07],gpu5,big[1-2]"
 *             (ranges keep their zero padding; several bracket groups in one
 *             name expand left to right);
 *   ntasks, procid: SLURM_NTASKS and this process's SLURM_PROCID;
 *   jobs: how the ntasks tasks split into jobs, in order, e.g. "ps:1,worker:3";
 *         one job may leave out its count to take the tasks left over
 *         ("ps:1,worker"); NULL or "": every task is a "worker";
 *   base_port: the port of the first task on each node.
 * Task p (in SLURM_PROCID order) runs on node p mod N (N nodes) at port
 * base_port + p / N: one task per node in order, wrapping round-robin when
 * there are more tasks than nodes (run srun with --distribution=cyclic then,
 * so that Slurm puts the tasks where this says). Each task gets its address
 * and one default CPU device. Errors name the variable, and for the node list
 * the column: `SLURM_JOB_NODELIST:1:6: descending range 3-1`. Ownership as
 * gr_cluster_parse_json; *self (may be NULL) gets task procid. */
gr_status gr_cluster_from_slurm(const char *nodelist, int procid, int ntasks, const char *jobs,
                                int base_port, gr_cluster **out, gr_cluster_self *self,
                                gr_error *err);
/* The same with nodelist, procid and ntasks from the environment
 * (SLURM_JOB_NODELIST, SLURM_PROCID, SLURM_NTASKS). When SLURM_NODEID is set,
 * it must be the node the round-robin order gives this task. */
gr_status gr_cluster_from_slurm_env(const char *jobs, int base_port, gr_cluster **out,
                                    gr_cluster_self *self, gr_error *err);

/* ---- cost model and profiles ---------------------------------------------- */

/* Unknown dims (batch) count as this many in cost estimates. */
#define GR_COST_DEFAULT_DIM 32

/* Static cost of one execution of n: the op's cost_fn (default: flops =
 * output elements, bytes = inputs + outputs), with unknown dims taken as
 * GR_COST_DEFAULT_DIM. */
gr_cost gr_cost_of_node(const gr_node *n);
/* Bytes of output i of n (unknown dims as GR_COST_DEFAULT_DIM). */
double gr_cost_output_bytes(const gr_node *n, int i);
/* Profile key: "op(dtype[dims],...)" from the op name and the input shapes. */
void gr_cost_profile_key(const gr_node *n, char *buf, size_t cap);

/* Measured op times, keyed by op kind + input shapes, in a SQLite database
 * (table op_profiles, see docs/placement.md) that later runs reuse. */
typedef struct gr_profile_db gr_profile_db;
/* Opens (creating if needed) the database at path (":memory:" for none). */
gr_status gr_profile_db_open(const char *path, gr_profile_db **out, gr_error *err);
void gr_profile_db_close(gr_profile_db *db);
/* Adds one measured execution time (seconds) to the running average of key. */
gr_status gr_profile_db_record(gr_profile_db *db, const char *key, double seconds, gr_error *err);
/* The average and its sample count (0 when unknown). */
gr_status gr_profile_db_lookup(gr_profile_db *db, const char *key, double *mean_seconds,
                               int64_t *samples, gr_error *err);

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
