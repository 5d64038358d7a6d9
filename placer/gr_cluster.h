/* placer/: the cluster model (tasks, their devices and addresses, links)
 * and its readers: the cluster file, TensorFlow's ClusterSpec and TF_CONFIG,
 * Slurm's environment (docs/distributed.md, "Cluster specs"). Part of placer/'s face
 * (placer/gr_placer.h includes it); distributed/ uses it for addresses.
 *
 * Ownership: gr_cluster_new* and the readers return a cluster the caller
 * frees with gr_cluster_free; the task and device structs it hands out live
 * as long as the cluster. */
#ifndef GR_CLUSTER_H
#define GR_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/gr_core.h"

/* ---- cluster model -------------------------------------------------------- */

typedef enum gr_link_kind {
  GR_LINK_SAME_TASK,  /* two devices of one process */
  GR_LINK_SAME_HOST,  /* two tasks on one host (loopback) */
  GR_LINK_CROSS_HOST, /* network */
  GR_LINK_COUNT
} gr_link_kind;

typedef struct gr_link {
  double latency;   /* seconds per transfer (message) */
  double bandwidth; /* bytes per second, > 0 */
  /* Seconds a task adds to every step it takes part in (the client's RUN
   * and its response) when the client reaches it over this kind of link:
   * same_host for a server task on the client's host, cross_host for one
   * elsewhere; same_task is the client's own cost per step, paid once
   * (docs/placement.md). */
  double step;
} gr_link;

typedef struct gr_cluster_device {
  gr_device_spec spec;           /* full: job, replica 0, task, CPU, id */
  char name[GR_DEVICE_NAME_MAX]; /* canonical full name */
  double flops;                  /* flop/s, > 0 */
  double mem_bandwidth;          /* bytes/s an op reads+writes, > 0 */
  double overhead;               /* seconds added to every op (dispatch), >= 0 */
  double time_scale;             /* > 0: a node's time here is its measured or estimated
                                    time times this (1: as measured; a loaded task's
                                    steps run slower than the process that measured) */
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
  int threads; /* inter-op threads: nodes each of its devices runs at once (default 1) */
} gr_cluster_task;

/* Which task of a cluster this process is (TF_CONFIG's "task", Slurm's
 * SLURM_PROCID). */
typedef struct gr_cluster_self {
  char job[GR_DEVICE_JOB_MAX];
  int index; /* within the job */
  int task;  /* cluster-wide: gr_cluster_task_at(c, task) */
} gr_cluster_self;

/* An empty cluster with default links (same task 1 us + 10 GB/s, same host
 * 20 us + 3 GB/s, cross host 100 us + 1.25 GB/s; step costs 0, 50 us and
 * 200 us). NULL when out of memory. */
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
/* Adds the next task of `job` at address "host:port" (checked as
 * gr_cluster_set_task_address checks it; the host is the task's host) with
 * num_devices CPU devices of the default figures (GR_CLUSTER_DEFAULT_*);
 * *task_out (may be NULL) gets its index. */
gr_status gr_cluster_add_task_at(gr_cluster *c, const char *job, const char *address,
                                 int num_devices, int *task_out, gr_error *err);
void gr_cluster_set_link(gr_cluster *c, gr_link_kind kind, gr_link link);
/* A device's time scale (gr_cluster_device.time_scale; > 0, finite). */
gr_status gr_cluster_set_time_scale(gr_cluster *c, int device, double scale, gr_error *err);
/* Multiplies the time scale of every device of a task with an address (a
 * server) by factor (> 0, finite): a prediction of a step on the servers
 * that came out P for a measured M (step costs S) is fitted by
 * (M - S) / (P - S). */
gr_status gr_cluster_scale_servers(gr_cluster *c, double factor, gr_error *err);
/* Inter-op threads of a task (1..1024): how many nodes each of its devices
 * runs at once in the simulation (gr_cluster_task.threads). */
gr_status gr_cluster_set_task_threads(gr_cluster *c, int task, int threads, gr_error *err);
/* Cores of a host (by name, a host of one of the cluster's tasks; 0: no
 * limit, the default): how many nodes the devices of all its tasks run at
 * once in the simulation. */
gr_status gr_cluster_set_host_cores(gr_cluster *c, const char *host, int cores, gr_error *err);
/* Cores of host number host_id (gr_cluster_task.host_id); 0: no limit. */
int gr_cluster_host_cores(const gr_cluster *c, int host_id);
int gr_cluster_num_hosts(const gr_cluster *c);
const char *gr_cluster_host_name(const gr_cluster *c, int host_id);
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
/* The devices in the order a session over the cluster lists them (the
 * master's: the chief's tasks, the workers', other jobs' in file order, the
 * ps' last; devices of a task in order) into order[0 .. num_devices - 1].
 * order[0] is where a session runs the nodes nobody placed, and where the
 * client is taken to run (its host decides the step costs). */
void gr_cluster_session_order(const gr_cluster *c, int *order);
/* Seconds task `task` adds to every step it takes part in: 0 without an
 * address (devices of the client's own process), else the step cost of the
 * link from the client's host (the host of the session's first device) to
 * its host: same_host or cross_host. */
double gr_cluster_task_step(const gr_cluster *c, int task);
/* Seconds a step costs beyond its nodes and transfers when it uses the
 * tasks marked in used[0 .. num_tasks - 1]: same_task.step once, plus
 * gr_cluster_task_step of each used task. */
double gr_cluster_step_overhead(const gr_cluster *c, const bool *used);
/* Seconds to move `bytes` from device a to b (0 when a == b). */
double gr_cluster_transfer_time(const gr_cluster *c, int a, int b, double bytes);

/* ---- reading clusters: cluster file, ClusterSpec, TF_CONFIG, Slurm --------- */

/* Reads a cluster from JSON text in any of its forms (docs/distributed.md, "Cluster specs"),
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

/* Slurm's node list syntax ("node[01-03,07],gpu5,r[1-2]n[1-2]": names,
 * bracket ranges and lists keeping the lower bound's zero padding, several
 * groups in one name expanding left to right, names separated by commas):
 * the first `limit` names into names[], *n of them. var names the list in
 * errors (`SLURM_STEP_NODELIST:1:6: descending range 3-1 (in "node[3-1]")`;
 * NULL: "node list"). A name listed twice is an error. */
gr_status gr_slurm_nodelist_expand(const char *var, const char *list,
                                   char (*names)[GR_CLUSTER_HOST_MAX], int limit, int *n,
                                   gr_error *err);

/* The job and index of task `rank` (0 .. ntasks - 1) when ntasks tasks of a
 * launcher split into jobs as `jobs` says: "ps:1,worker:3" gives them, in
 * rank order, to the jobs in turn, one job may leave out its count to take
 * the rest ("ps:1,worker"); NULL or "": every task is a "worker". launcher
 * ("slurm", "mpi") and ntasks_var ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
 * name them in errors: `mpi jobs "ps:1,worker:3":1:1: the jobs have 4 tasks,
 * OMPI_COMM_WORLD_SIZE=5`. */
gr_status gr_cluster_task_of_rank(const char *jobs, int ntasks, int rank, const char *launcher,
                                  const char *ntasks_var, char job[GR_DEVICE_JOB_MAX], int *index,
                                  gr_error *err);

/* How a Slurm job step laid its tasks out (what its tasks read in
 * SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS,
 * SLURM_DISTRIBUTION, SLURM_DIST_PLANESIZE and SLURM_STEP_RESV_PORTS). */
typedef struct gr_slurm_layout {
  const char *nodelist;       /* the nodes, gr_slurm_nodelist_expand's syntax */
  const char *tasks_per_node; /* each node's task count: "2(x3),1" is 2, 2, 2, 1; NULL: the
                                 ntasks spread as Slurm spreads them by default, over the
                                 first ntasks nodes, the first nodes one more */
  int ntasks;                 /* the tasks; 0 with tasks_per_node: its sum */
  const char *distribution;   /* how ranks go to nodes: "block" (also NULL, Slurm's default:
                                 node by node), "cyclic" (one per node in turn), "plane" or
                                 "plane=N" (N at a time, N from plane_size otherwise); a
                                 ":..." part (within a node) is ignored */
  int plane_size;
  const char *jobs;       /* "ps:1,worker:3", as gr_cluster_task_of_rank */
  const char *resv_ports; /* Slurm's reserved ports ("12000-12003,12010", the same on every
                             node): a task listens on the one of its local index (its
                             position among its node's tasks, SLURM_LOCALID); NULL: */
  int base_port;          /* base_port + its local index; 0: no addresses */
  bool job_level;         /* the job's variables (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE,
                             SLURM_NTASKS) rather than the step's: errors name them */
} gr_slurm_layout;

/* A cluster from a step's layout: task p (in rank order) on its node at its
 * port, with one default CPU device. *self (may be NULL; procid -1: none)
 * gets task procid. Errors name the variable (and for lists the column):
 * `SLURM_STEP_TASKS_PER_NODE="2(x2)" gives 4 tasks, SLURM_STEP_NUM_TASKS=5`,
 * `SLURM_STEP_RESV_PORTS=12000-12001 reserves 2 ports, but node n1 runs 3
 * tasks: give srun --resv-ports=3`. Ownership as gr_cluster_parse_json. */
gr_status gr_cluster_from_slurm_layout(const gr_slurm_layout *l, int procid, gr_cluster **out,
                                       gr_cluster_self *self, gr_error *err);

/* The layout of the tasks spread evenly, one per node in turn (Slurm's
 * cyclic distribution): task p on node p mod N (N nodes) at port
 * base_port + p / N. nodelist, procid and ntasks as SLURM_JOB_NODELIST,
 * SLURM_PROCID and SLURM_NTASKS; base_port 1..65535. */
gr_status gr_cluster_from_slurm(const char *nodelist, int procid, int ntasks, const char *jobs,
                                int base_port, gr_cluster **out, gr_cluster_self *self,
                                gr_error *err);
/* The layout Slurm gives this process: inside a task of a job step
 * (SLURM_STEP_NUM_TASKS is set) the step's variables, else (a batch script,
 * an salloc shell) the job's (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE,
 * SLURM_NTASKS); the distribution from SLURM_DISTRIBUTION (block when not
 * set), the ports from SLURM_STEP_RESV_PORTS, else base_port (0: none).
 * self NULL: SLURM_PROCID is not read (a client in a batch script is no
 * task). Else *self gets task SLURM_PROCID, which must run where the layout
 * puts it: on SLURMD_NODENAME (else node SLURM_NODEID), as task
 * SLURM_LOCALID of its node. */
gr_status gr_cluster_from_slurm_env(const char *jobs, int base_port, gr_cluster **out,
                                    gr_cluster_self *self, gr_error *err);

#endif
