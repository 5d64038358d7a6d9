/* Shared inside placer/: the cluster's internals. */
#ifndef GR_PLACER_INTERNAL_H
#define GR_PLACER_INTERNAL_H

#include <stddef.h>

#include "placer/gr_placer.h"

struct gr_cluster {
  gr_cluster_device *devices; /* grouped by task, in task order */
  int num_devices, cap_devices;
  gr_cluster_task *tasks; /* job and address strings owned here */
  int num_tasks, cap_tasks;
  char **hosts;
  int *host_cores; /* per host: cores (0: no limit); as large as hosts */
  int num_hosts, cap_hosts;
  gr_link links[GR_LINK_COUNT];
};

/* Checks of names every cluster form shares (cluster_names.c). Each returns
 * NULL when the name is good, else what is wrong, written into why[why_cap]
 * (returned) without naming where: the caller says where. */
const char *gr_cluster_job_problem(const char *job, char *why, size_t why_cap);
/* A host: 1..253 of letters, digits, '.', '-', '_' (names, IPv4), or an
 * IPv6 address without brackets (optionally with a %zone). */
const char *gr_cluster_host_problem(const char *host, char *why, size_t why_cap);
/* An address: "host:port" or "[IPv6]:port", port 1..65535. On success the
 * host (no brackets) is in host[host_cap] and the port in *port. */
const char *gr_cluster_address_problem(const char *address, char *host, size_t host_cap, int *port,
                                       char *why, size_t why_cap);

/* Runs one SQL statement without results on the profile database
 * (BEGIN, COMMIT); errors name it. */
gr_status gr_profile_db_exec(gr_profile_db *db, const char *sql, gr_error *err);

/* Launchers' jobs (cluster_jobs.c): "ps:1,worker:3" over ntasks tasks. */
typedef struct gr_job_count {
  char name[GR_DEVICE_JOB_MAX];
  int count; /* its tasks (after parsing: the job without a count takes the rest) */
} gr_job_count;
typedef struct gr_jobs_names { /* for messages */
  const char *launcher;        /* "slurm": errors start `slurm jobs "ps:1,worker":1:4:` */
  const char *ntasks_var;      /* "SLURM_NTASKS": `the jobs have 4 tasks, SLURM_NTASKS=5` */
} gr_jobs_names;
/* Parses jobs (at most ntasks of them) into out[*njobs]; the counts add up
 * to ntasks. Errors give the column. */
gr_status gr_jobs_parse(const char *jobs, int ntasks, const gr_jobs_names *nm, gr_job_count *out,
                        int *njobs, gr_error *err);

/* Whether allowed-set `set` (-1: any) of pg contains device d. */
static inline bool gr_place_allowed(const gr_place_graph *pg, int set, int d) {
  return set < 0 ||
         (pg->allow_bits[(size_t)set * (size_t)pg->allow_words + (size_t)(d / 64)] >> (d % 64)) & 1;
}

/* The locality placement (locality.c): each node on the allowed device that
 * holds most of its inputs (ties: the first input's), each device taking at most its flop-rate
 * share of every level's nodes; nodes without such a device fill the devices
 * in order. skip[v] marks free sources: their device is -1, which the
 * simulator reads as "with the first consumer". Writes device[0 .. n-1];
 * false when out of memory. */
bool gr_place_locality(const gr_place_graph *pg, const gr_cluster *c, const uint8_t *skip,
                       int *device);

/* The simulator of a schedule (sched.c) for the candidates and the search:
 * a fixed assignment (device per node; -1 for a free source or a node
 * outside the step: it follows, as in the greedy run) simulated again and
 * again on the same state. */
typedef struct sched gr_place_sim;
/* The makespan of `device` (as gr_place_simulate); *cross (may be NULL): bytes moved. */
double gr_place_sim_run(gr_place_sim *s, const int *device, double *cross);
/* Per node: a free source (follows its first consumer). */
const uint8_t *gr_place_sim_deferred(const gr_place_sim *s);
/* The devices in session order (gr_cluster_session_order). */
const int *gr_place_sim_session_order(const gr_place_sim *s);

/* The dataflow simulation of a fixed placement (dataflow.c): devices run
 * any node whose inputs are there, the highest rank first, on their task's
 * inter-op threads, within their host's cores. pos: per node its visiting
 * position (its rank's order: smaller runs first), deferred: free sources,
 * sorder: the session order (all borrowed, kept while it lives). NULL when
 * out of memory. */
typedef struct gr_dataflow gr_dataflow;
gr_dataflow *gr_dataflow_new(const gr_place_graph *pg, const gr_cluster *c, const int *pos,
                             const uint8_t *deferred, const int *sorder);
void gr_dataflow_free(gr_dataflow *f);
/* The makespan of device (per node; -1 for a free source: with its first
 * consumer by rank) with the step costs of the tasks used; *cross (may be
 * NULL) the bytes moved; start and finish (may be NULL) per node (0 for
 * free sources and nodes outside the step). */
double gr_dataflow_run(gr_dataflow *f, const int *device, double *cross, double *start,
                       double *finish);

/* The obvious candidates (candidates.c): one task (each device kind, or
 * each device of the first 16 when pins make the place matter; the best;
 * also result->baseline_time and baseline_device), pins only, and round
 * robin by layer when layer is not NULL. Fills result->cand_time and
 * cand_device; false when out of memory. */
bool gr_place_candidates(const gr_place_graph *pg, const gr_cluster *c, gr_place_sim *s,
                         const int *layer, gr_place_result *result);

/* The local search (search.c): from device (a full assignment) with
 * makespan *t, moves whole units (a layer joined with the colocation
 * groups of its nodes; without layers a colocation group) to another
 * device all their nodes allow, keeping a move when the simulator rates
 * it faster, in passes over the units until a pass keeps none or `budget`
 * simulations ran. device and *t get the best found; *moves and *sims
 * what it did. false when out of memory (device and *t unchanged). */
bool gr_place_search(const gr_place_graph *pg, const gr_cluster *c, gr_place_sim *s,
                     const int *layer, int budget, int *device, double *t, int *moves, int *sims);

#endif
