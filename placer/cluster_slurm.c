/* A cluster from a Slurm job step's layout: its node list ("node[01-03,07]"),
 * the tasks of each node ("2(x3),1"), how Slurm numbered the tasks over the
 * nodes (block, cyclic or plane), how the tasks split into jobs
 * ("ps:1,worker:3") and their ports: Slurm's reserved ports
 * (SLURM_STEP_RESV_PORTS) or a base port, each task taking the one of its
 * local index on its node (as TensorFlow's SlurmClusterResolver). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

typedef struct var_names { /* the variables a layout came from, for messages */
  const char *nodelist, *tasks_per_node, *ntasks;
} var_names;

static var_names names_of(const gr_slurm_layout *l) {
  if (l->job_level)
    return (var_names){"SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS"};
  return (var_names){"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"};
}

/* A number of 1..9 digits at s[*i], at most max. */
static bool read_count(const char *s, size_t *i, long max, long *v) {
  size_t start = *i;
  *v = 0;
  while (isdigit((unsigned char)s[*i]) && *i - start < 9) *v = *v * 10 + (s[(*i)++] - '0');
  return *i > start && !isdigit((unsigned char)s[*i]) && *v <= max;
}

/* "2(x3),1" (Slurm's SLURM_STEP_TASKS_PER_NODE): counts[0 .. nnodes). */
static gr_status parse_tasks_per_node(const char *var, const char *s, int *counts, int nnodes,
                                      int *sum, gr_error *err) {
  int n = 0;
  size_t i = 0;
  *sum = 0;
  for (;;) {
    long v, times = 1;
    size_t at = i;
    if (!read_count(s, &i, GR_CLUSTER_MAX_TASKS, &v) || v < 1)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "%s:1:%zu: expected a task count of 1..%d (in \"%.80s\")", var, at + 1,
                          GR_CLUSTER_MAX_TASKS, s);
    if (s[i] == '(') {
      size_t rep = i;
      i++;
      if (s[i++] != 'x' || !read_count(s, &i, GR_CLUSTER_MAX_TASKS, &times) || times < 1 ||
          s[i++] != ')')
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "%s:1:%zu: expected a repeat \"(xN)\" (in \"%.80s\")", var, rep + 1, s);
    }
    for (long k = 0; k < times; k++) {
      if (n == nnodes)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "%s=\"%.80s\" gives more nodes than the %d of the node list", var, s,
                            nnodes);
      counts[n++] = (int)v;
      *sum += (int)v;
      if (*sum > GR_CLUSTER_MAX_TASKS)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=\"%.80s\": more than %d tasks", var,
                            s, GR_CLUSTER_MAX_TASKS);
    }
    if (!s[i]) break;
    if (s[i] != ',')
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "%s:1:%zu: expected ',' between counts (in \"%.80s\")", var, i + 1, s);
    i++;
  }
  if (n != nnodes)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s=\"%.80s\" gives %d nodes, the node list has %d", var, s, n, nnodes);
  return GR_OK;
}

/* "12000-12003,12010" (SLURM_STEP_RESV_PORTS): at most cap ports. */
static gr_status parse_ports(const char *s, int *ports, int cap, int *n, gr_error *err) {
  size_t i = 0;
  *n = 0;
  for (;;) {
    long lo, hi;
    size_t at = i;
    if (!read_count(s, &i, 65535, &lo) || lo < 1)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_STEP_RESV_PORTS:1:%zu: expected a port of 1..65535 (in \"%.80s\")",
                          at + 1, s);
    hi = lo;
    if (s[i] == '-') {
      i++;
      at = i;
      if (!read_count(s, &i, 65535, &hi) || hi < lo)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "SLURM_STEP_RESV_PORTS:1:%zu: expected a port of %ld..65535 (in "
                            "\"%.80s\")",
                            at + 1, lo, s);
    }
    for (long p = lo; p <= hi && *n < cap; p++) ports[(*n)++] = (int)p;
    if (!s[i]) return GR_OK;
    if (s[i] != ',')
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_STEP_RESV_PORTS:1:%zu: expected ',' or '-' (in \"%.80s\")", i + 1,
                          s);
    i++;
  }
}

enum { DIST_BLOCK, DIST_CYCLIC, DIST_PLANE };

/* SLURM_DISTRIBUTION's first part (the nodes'; the rest is the sockets'). */
static gr_status parse_dist(const char *d, int plane_size, int *kind, int *plane, gr_error *err) {
  size_t n = d ? strcspn(d, ":,") : 0;
  *plane = plane_size;
  if (!d || n == 0 || !strncmp(d, "block", n)) {
    *kind = DIST_BLOCK;
  } else if (!strncmp(d, "cyclic", n)) {
    *kind = DIST_CYCLIC;
  } else if (!strncmp(d, "plane", 5) && (n == 5 || d[5] == '=')) {
    *kind = DIST_PLANE;
    if (d[5] == '=') *plane = atoi(d + 6);
    if (*plane < 1)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_DISTRIBUTION=%.40s: the plane size (SLURM_DIST_PLANESIZE) must be "
                          "1 or more",
                          d);
  } else if (!strncmp(d, "arbitrary", n)) {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "SLURM_DISTRIBUTION=arbitrary: the tasks' nodes come from SLURM_HOSTFILE, "
                        "which graphrun does not read; leave the port out (--cluster slurm:JOBS) "
                        "so that the servers and the client meet at a rendezvous");
  } else {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "SLURM_DISTRIBUTION=%.40s: unknown distribution (graphrun knows block, "
                        "cyclic and plane)",
                        d);
  }
  return GR_OK;
}

/* Which node runs each rank and its local index there (SLURM_LOCALID:
 * the node's tasks in rank order). */
static void place_ranks(int kind, int plane, const int *counts, int nnodes, int ntasks, int *node,
                        int *local, int *filled) {
  int p = 0;
  memset(filled, 0, (size_t)nnodes * sizeof *filled);
  while (p < ntasks)
    for (int i = 0; i < nnodes && p < ntasks; i++) {
      int room = counts[i] - filled[i];
      int take = kind == DIST_BLOCK ? room : kind == DIST_CYCLIC ? 1 : plane;
      if (take > room) take = room;
      for (int k = 0; k < take; k++, p++) node[p] = i, local[p] = filled[i]++;
    }
}

typedef struct layout_work {
  char (*nodes)[GR_CLUSTER_HOST_MAX];
  int *counts, *node, *local, *filled; /* per node: counts, filled; per task: node, local */
  int *ports, *port;                   /* the reserved ports; each task's (0: none) */
  gr_job_count *jobs;
} layout_work;

static void work_free(layout_work *w) {
  free(w->nodes), free(w->counts), free(w->node), free(w->local), free(w->filled);
  free(w->ports), free(w->port), free(w->jobs);
}

/* Each task's port (0: none), checked against what the nodes run. */
static gr_status task_ports(const gr_slurm_layout *l, layout_work *w, int nnodes, int ntasks,
                            gr_error *err) {
  int most = 0, busiest = 0;
  for (int i = 0; i < nnodes; i++)
    if (w->counts[i] > most) most = w->counts[i], busiest = i;
  if (l->resv_ports) {
    int n;
    GR_TRY(parse_ports(l->resv_ports, w->ports, ntasks + 1, &n, err));
    if (n < most)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_STEP_RESV_PORTS=%.80s reserves %d ports, but node %s runs %d "
                          "tasks: give srun --resv-ports=%d",
                          l->resv_ports, n, w->nodes[busiest], most, most);
    for (int p = 0; p < ntasks; p++) w->port[p] = w->ports[w->local[p]];
  } else {
    if (l->base_port < 0 || l->base_port > 65535)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "slurm: base port %d is out of 1..65535",
                          l->base_port);
    if (l->base_port > 0 && l->base_port + most - 1 > 65535)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "slurm: %d tasks on %d nodes need ports %d..%d, above 65535", ntasks,
                          nnodes, l->base_port, l->base_port + most - 1);
    for (int p = 0; p < ntasks; p++) w->port[p] = l->base_port ? l->base_port + w->local[p] : 0;
  }
  return GR_OK;
}

static gr_status build(gr_cluster *c, const layout_work *w, int njobs, gr_error *err) {
  int p = 0;
  for (int j = 0; j < njobs; j++)
    for (int k = 0; k < w->jobs[j].count; k++, p++) {
      const char *host = w->nodes[w->node[p]];
      int t;
      GR_TRY(gr_cluster_add_task(c, w->jobs[j].name, host, &t, err));
      if (w->port[p]) {
        char address[GR_CLUSTER_ADDRESS_MAX];
        snprintf(address, sizeof address, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                 w->port[p]);
        GR_TRY(gr_cluster_set_task_address(c, t, address, err));
      }
      GR_TRY(gr_cluster_add_device(c, t, GR_CLUSTER_DEFAULT_FLOPS, GR_CLUSTER_DEFAULT_MEM_BANDWIDTH,
                                   GR_CLUSTER_DEFAULT_OVERHEAD, err));
    }
  return GR_OK;
}

/* The nodes and their task counts: from the list and tasks_per_node, else
 * ntasks spread as Slurm spreads them (the first nodes one more). */
static gr_status nodes_and_counts(const gr_slurm_layout *l, const var_names *nm, layout_work *w,
                                  int *ntasks, int *nnodes, gr_error *err) {
  int limit = l->tasks_per_node ? GR_CLUSTER_MAX_TASKS : *ntasks;
  if (!(w->nodes = gr_alloc_array((size_t)limit + 1, sizeof *w->nodes)) ||
      !(w->counts = gr_alloc_array((size_t)limit + 1, sizeof *w->counts)))
    return gr_error_set_oom(err);
  GR_TRY(gr_slurm_nodelist_expand(nm->nodelist, l->nodelist, w->nodes, limit, nnodes, err));
  if (!l->tasks_per_node) {
    for (int i = 0; i < *nnodes; i++)
      w->counts[i] = *ntasks / *nnodes + (i < *ntasks % *nnodes ? 1 : 0);
    return GR_OK;
  }
  int sum;
  GR_TRY(
      parse_tasks_per_node(nm->tasks_per_node, l->tasks_per_node, w->counts, *nnodes, &sum, err));
  if (*ntasks > 0 && sum != *ntasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=\"%.80s\" gives %d tasks, %s=%d",
                        nm->tasks_per_node, l->tasks_per_node, sum, nm->ntasks, *ntasks);
  *ntasks = sum;
  return GR_OK;
}

gr_status gr_cluster_from_slurm_layout(const gr_slurm_layout *l, int procid, gr_cluster **out,
                                       gr_cluster_self *self, gr_error *err) {
  *out = NULL;
  var_names nm = names_of(l);
  int ntasks = l->ntasks, nnodes = 0, kind, plane, njobs = 0;
  if (!l->nodelist)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: no node list", nm.nodelist);
  if (ntasks > GR_CLUSTER_MAX_TASKS || (ntasks < 1 && !l->tasks_per_node))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=%d: must be in 1..%d", nm.ntasks, ntasks,
                        GR_CLUSTER_MAX_TASKS);
  GR_TRY(parse_dist(l->distribution, l->plane_size, &kind, &plane, err));
  layout_work w = {0};
  gr_status s = nodes_and_counts(l, &nm, &w, &ntasks, &nnodes, err);
  if (s == GR_OK && (procid < -1 || procid >= ntasks))
    s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "SLURM_PROCID=%d: must be in 0..%d (%s=%d)",
                     procid, ntasks - 1, nm.ntasks, ntasks);
  size_t nt = (size_t)ntasks + 1;
  if (s == GR_OK &&
      (!(w.node = calloc(nt, sizeof *w.node)) || !(w.local = calloc(nt, sizeof *w.local)) ||
       !(w.filled = calloc((size_t)nnodes + 1, sizeof *w.filled)) ||
       !(w.ports = calloc(nt, sizeof *w.ports)) || !(w.port = calloc(nt, sizeof *w.port)) ||
       !(w.jobs = calloc(nt, sizeof *w.jobs))))
    s = gr_error_set_oom(err);
  if (s == GR_OK) place_ranks(kind, plane, w.counts, nnodes, ntasks, w.node, w.local, w.filled);
  if (s == GR_OK) s = task_ports(l, &w, nnodes, ntasks, err);
  gr_jobs_names jn = {"slurm", nm.ntasks};
  if (s == GR_OK)
    s = gr_jobs_parse(l->jobs && *l->jobs ? l->jobs : "worker", ntasks, &jn, w.jobs, &njobs, err);
  gr_cluster *c = s == GR_OK ? gr_cluster_new() : NULL;
  if (s == GR_OK && !c) s = gr_error_set_oom(err);
  if (s == GR_OK) s = build(c, &w, njobs, err);
  work_free(&w);
  if (s != GR_OK) {
    gr_cluster_free(c);
    return s;
  }
  if (self && procid >= 0) {
    const gr_cluster_task *t = gr_cluster_task_at(c, procid);
    snprintf(self->job, sizeof self->job, "%s", t->job);
    self->index = t->index;
    self->task = procid;
  }
  *out = c;
  return GR_OK;
}

gr_status gr_cluster_from_slurm(const char *nodelist, int procid, int ntasks, const char *jobs,
                                int base_port, gr_cluster **out, gr_cluster_self *self,
                                gr_error *err) {
  *out = NULL;
  if (ntasks < 1 || ntasks > GR_CLUSTER_MAX_TASKS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "SLURM_NTASKS=%d: must be in 1..%d", ntasks,
                        GR_CLUSTER_MAX_TASKS);
  if (procid < 0 || procid >= ntasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "SLURM_PROCID=%d: must be in 0..%d (SLURM_NTASKS=%d)", procid, ntasks - 1,
                        ntasks);
  if (base_port < 1 || base_port > 65535)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "slurm: base port %d is out of 1..65535",
                        base_port);
  /* one task per node in order, wrapping round-robin: Slurm's cyclic
   * distribution over the tasks spread evenly */
  gr_slurm_layout l = {.nodelist = nodelist,
                       .ntasks = ntasks,
                       .distribution = "cyclic",
                       .jobs = jobs,
                       .base_port = base_port,
                       .job_level = true};
  return gr_cluster_from_slurm_layout(&l, procid, out, self, err);
}
