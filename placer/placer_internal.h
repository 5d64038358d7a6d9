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

#endif
