/* The cluster model: tasks of jobs on hosts with their addresses, CPU
 * devices with compute rates (grouped by task), and link latency + bandwidth
 * by kind. The forms it is read from are in cluster_json.c, cluster_tf.c and
 * cluster_slurm.c; names are checked in cluster_names.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "placer_internal.h"

gr_cluster *gr_cluster_new(void) {
  gr_cluster *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->links[GR_LINK_SAME_TASK] = (gr_link){1e-6, 10e9, 0};
  c->links[GR_LINK_SAME_HOST] = (gr_link){20e-6, 3e9, 50e-6};
  c->links[GR_LINK_CROSS_HOST] = (gr_link){100e-6, 1.25e9, 200e-6};
  return c;
}

void gr_cluster_free(gr_cluster *c) {
  if (!c) return;
  for (int i = 0; i < c->num_hosts; i++) free(c->hosts[i]);
  free(c->hosts);
  free(c->host_cores);
  for (int t = 0; t < c->num_tasks; t++) {
    free((char *)c->tasks[t].job);
    free((char *)c->tasks[t].address);
  }
  free(c->tasks);
  free(c->devices);
  free(c);
}

static bool grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int ncap = *cap ? *cap * 2 : 8;
  while (ncap < need) ncap *= 2;
  void *q = gr_realloc_array(*p, (size_t)ncap, elem);
  if (!q) return false;
  *p = q;
  *cap = ncap;
  return true;
}

gr_status gr_cluster_add_task(gr_cluster *c, const char *job, const char *host, int *task_out,
                              gr_error *err) {
  char why[256];
  if (!job) job = "(null)";
  if (gr_cluster_job_problem(job, why, sizeof why))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: %s", why);
  if (!host) host = "localhost";
  if (gr_cluster_host_problem(host, why, sizeof why))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: job '%s': %s", job, why);
  if (c->num_tasks >= GR_CLUSTER_MAX_TASKS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: more than %d tasks",
                        GR_CLUSTER_MAX_TASKS);
  int h = 0;
  while (h < c->num_hosts && strcmp(c->hosts[h], host) != 0) h++;
  if (h == c->num_hosts) {
    int cap = c->cap_hosts;
    if (!grow((void **)&c->hosts, &c->cap_hosts, c->num_hosts + 1, sizeof(char *))) goto oom;
    if (c->cap_hosts != cap) {
      int *cores = gr_realloc_array(c->host_cores, (size_t)c->cap_hosts, sizeof(int));
      if (!cores) {
        c->cap_hosts = cap; /* hosts grew, host_cores did not: grow both again next time */
        goto oom;
      }
      c->host_cores = cores;
    }
    c->host_cores[h] = 0;
    c->hosts[h] = strdup(host);
    if (!c->hosts[h]) goto oom;
    c->num_hosts++;
  }
  if (!grow((void **)&c->tasks, &c->cap_tasks, c->num_tasks + 1, sizeof *c->tasks)) goto oom;
  char *name = strdup(job);
  if (!name) goto oom;
  int index = 0;
  for (int t = 0; t < c->num_tasks; t++) index += strcmp(c->tasks[t].job, job) == 0;
  c->tasks[c->num_tasks] = (gr_cluster_task){.job = name,
                                             .index = index,
                                             .host = c->hosts[h],
                                             .host_id = h,
                                             .address = NULL,
                                             .first_device = c->num_devices,
                                             .num_devices = 0,
                                             .threads = 1};
  if (task_out) *task_out = c->num_tasks;
  c->num_tasks++;
  return GR_OK;
oom:
  return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cluster: out of memory");
}

gr_status gr_cluster_add_device(gr_cluster *c, int task, double flops, double mem_bandwidth,
                                double overhead, gr_error *err) {
  if (task < 0 || task >= c->num_tasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no task %d (%d tasks)", task,
                        c->num_tasks);
  if (!(flops > 0) || !isfinite(flops) || !(mem_bandwidth > 0) || !isfinite(mem_bandwidth) ||
      !(overhead >= 0) || !isfinite(overhead))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: device rates must be finite, flops and mem_bandwidth > 0, "
                        "overhead >= 0 (got %g, %g, %g)",
                        flops, mem_bandwidth, overhead);
  if (c->num_devices >= GR_CLUSTER_MAX_DEVICES)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: more than %d devices",
                        GR_CLUSTER_MAX_DEVICES);
  if (!grow((void **)&c->devices, &c->cap_devices, c->num_devices + 1, sizeof *c->devices))
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cluster: out of memory");
  gr_cluster_task *t = &c->tasks[task];
  /* after the task's own devices; later tasks' devices move up by one */
  int at = t->first_device + t->num_devices;
  memmove(&c->devices[at + 1], &c->devices[at], sizeof *c->devices * (size_t)(c->num_devices - at));
  c->num_devices++;
  for (int u = task + 1; u < c->num_tasks; u++) c->tasks[u].first_device++;
  gr_cluster_device *d = &c->devices[at];
  memset(d, 0, sizeof *d);
  d->spec = gr_device_spec_any();
  strcpy(d->spec.job, t->job);
  d->spec.replica = 0;
  d->spec.task = t->index;
  strcpy(d->spec.type, "CPU");
  d->spec.id = t->num_devices++;
  gr_device_spec_str(&d->spec, d->name);
  d->flops = flops;
  d->mem_bandwidth = mem_bandwidth;
  d->overhead = overhead;
  d->time_scale = 1;
  d->task = task;
  d->host = t->host_id;
  return GR_OK;
}

void gr_cluster_set_link(gr_cluster *c, gr_link_kind kind, gr_link link) {
  if ((unsigned)kind < GR_LINK_COUNT) c->links[kind] = link;
}

gr_status gr_cluster_set_time_scale(gr_cluster *c, int device, double scale, gr_error *err) {
  if (device < 0 || device >= c->num_devices)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no device %d (%d devices)", device,
                        c->num_devices);
  if (!(scale > 0) || !isfinite(scale))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: %s: time_scale must be finite and > 0 (got %g)",
                        c->devices[device].name, scale);
  c->devices[device].time_scale = scale;
  return GR_OK;
}

gr_status gr_cluster_scale_servers(gr_cluster *c, double factor, gr_error *err) {
  if (!(factor > 0) || !isfinite(factor))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: a time scale factor must be finite and > 0 (got %g)", factor);
  for (int d = 0; d < c->num_devices; d++)
    if (c->tasks[c->devices[d].task].address) c->devices[d].time_scale *= factor;
  return GR_OK;
}

gr_status gr_cluster_set_task_threads(gr_cluster *c, int task, int threads, gr_error *err) {
  if (task < 0 || task >= c->num_tasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no task %d (%d tasks)", task,
                        c->num_tasks);
  if (threads < 1 || threads > 1024)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: /job:%s/task:%d: threads must be in [1, 1024] (got %d)",
                        c->tasks[task].job, c->tasks[task].index, threads);
  c->tasks[task].threads = threads;
  return GR_OK;
}

gr_status gr_cluster_set_host_cores(gr_cluster *c, const char *host, int cores, gr_error *err) {
  int h = 0;
  while (h < c->num_hosts && strcmp(c->hosts[h], host ? host : "") != 0) h++;
  if (h == c->num_hosts)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no task is on host \"%s\"",
                        host ? host : "(null)");
  if (cores < 0 || cores > 65536)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: host \"%s\": cores must be in [0, 65536] (got %d)", host, cores);
  c->host_cores[h] = cores;
  return GR_OK;
}

int gr_cluster_host_cores(const gr_cluster *c, int host_id) {
  return host_id >= 0 && host_id < c->num_hosts ? c->host_cores[host_id] : 0;
}

int gr_cluster_num_hosts(const gr_cluster *c) {
  return c->num_hosts;
}

const char *gr_cluster_host_name(const gr_cluster *c, int host_id) {
  return host_id >= 0 && host_id < c->num_hosts ? c->hosts[host_id] : NULL;
}

gr_link gr_cluster_get_link(const gr_cluster *c, gr_link_kind kind) {
  return c->links[(unsigned)kind < GR_LINK_COUNT ? kind : GR_LINK_CROSS_HOST];
}

gr_cluster *gr_cluster_new_local(int n, double flops, double mem_bandwidth, double overhead) {
  gr_cluster *c = gr_cluster_new();
  int t;
  if (!c || gr_cluster_add_task(c, "localhost", "localhost", &t, NULL) != GR_OK) goto fail;
  for (int i = 0; i < n; i++)
    if (gr_cluster_add_device(c, t, flops, mem_bandwidth, overhead, NULL) != GR_OK) goto fail;
  return c;
fail:
  gr_cluster_free(c);
  return NULL;
}

int gr_cluster_num_tasks(const gr_cluster *c) {
  return c->num_tasks;
}

const gr_cluster_task *gr_cluster_task_at(const gr_cluster *c, int i) {
  return i >= 0 && i < c->num_tasks ? &c->tasks[i] : NULL;
}

int gr_cluster_find_task(const gr_cluster *c, const char *job, int index) {
  if (!job) return -1;
  for (int t = 0; t < c->num_tasks; t++)
    if (c->tasks[t].index == index && strcmp(c->tasks[t].job, job) == 0) return t;
  return -1;
}

gr_status gr_cluster_split_address(const char *address, char *host, size_t host_cap, int *port,
                                   gr_error *err) {
  char why[256];
  if (!address) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no address");
  if (gr_cluster_address_problem(address, host, host_cap, port, why, sizeof why))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s", why);
  return GR_OK;
}

gr_status gr_cluster_set_task_address(gr_cluster *c, int task, const char *address, gr_error *err) {
  if (task < 0 || task >= c->num_tasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: no task %d (%d tasks)", task,
                        c->num_tasks);
  gr_cluster_task *t = &c->tasks[task];
  char *copy = NULL;
  if (address) {
    char host[GR_CLUSTER_HOST_MAX], why[256];
    int port;
    if (gr_cluster_address_problem(address, host, sizeof host, &port, why, sizeof why))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: /job:%s/task:%d: %s", t->job,
                          t->index, why);
    for (int u = 0; u < c->num_tasks; u++)
      if (u != task && c->tasks[u].address && strcasecmp(c->tasks[u].address, address) == 0)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "cluster: /job:%s/task:%d: address \"%s\" is already the address of "
                            "/job:%s/task:%d",
                            t->job, t->index, address, c->tasks[u].job, c->tasks[u].index);
    copy = strdup(address);
    if (!copy) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cluster: out of memory");
  }
  free((char *)t->address);
  t->address = copy;
  return GR_OK;
}

int gr_cluster_num_devices(const gr_cluster *c) {
  return c->num_devices;
}

const gr_cluster_device *gr_cluster_device_at(const gr_cluster *c, int i) {
  return i >= 0 && i < c->num_devices ? &c->devices[i] : NULL;
}

int gr_cluster_find_device(const gr_cluster *c, const char *name) {
  gr_device_spec s;
  if (gr_device_spec_parse(name, &s, NULL) != GR_OK) return -1;
  int found = -1;
  for (int i = 0; i < c->num_devices; i++)
    if (gr_device_spec_matches(&s, &c->devices[i].spec)) {
      if (found >= 0) return -1;
      found = i;
    }
  return found;
}

gr_link_kind gr_cluster_link_kind(const gr_cluster *c, int a, int b) {
  const gr_cluster_device *x = &c->devices[a], *y = &c->devices[b];
  if (x->task == y->task) return GR_LINK_SAME_TASK;
  if (x->host == y->host) return GR_LINK_SAME_HOST;
  return GR_LINK_CROSS_HOST;
}

/* Rank of a job in the session's order: chief, worker, the others, ps. */
static int job_rank(const char *job) {
  return !strcmp(job, "chief") ? 0 : !strcmp(job, "worker") ? 1 : !strcmp(job, "ps") ? 3 : 2;
}

void gr_cluster_session_order(const gr_cluster *c, int *order) {
  int k = 0;
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < c->num_tasks; t++)
      if (job_rank(c->tasks[t].job) == r)
        for (int i = 0; i < c->tasks[t].num_devices; i++) order[k++] = c->tasks[t].first_device + i;
}

/* The host of the session's first device: where the client runs. */
static int client_host(const gr_cluster *c) {
  int best = -1, rank = 4;
  for (int t = 0; t < c->num_tasks; t++)
    if (c->tasks[t].num_devices > 0 && job_rank(c->tasks[t].job) < rank)
      rank = job_rank(c->tasks[t].job), best = t;
  return best < 0 ? -1 : c->tasks[best].host_id;
}

double gr_cluster_task_step(const gr_cluster *c, int task) {
  if (task < 0 || task >= c->num_tasks || !c->tasks[task].address) return 0;
  int h = client_host(c);
  return c->links[c->tasks[task].host_id == h ? GR_LINK_SAME_HOST : GR_LINK_CROSS_HOST].step;
}

double gr_cluster_step_overhead(const gr_cluster *c, const bool *used) {
  double t = c->links[GR_LINK_SAME_TASK].step;
  for (int k = 0; k < c->num_tasks; k++)
    if (used[k]) t += gr_cluster_task_step(c, k);
  return t;
}

double gr_cluster_transfer_time(const gr_cluster *c, int a, int b, double bytes) {
  if (a == b) return 0;
  const gr_link *l = &c->links[gr_cluster_link_kind(c, a, b)];
  return l->latency + bytes / l->bandwidth;
}

gr_status gr_cluster_add_task_at(gr_cluster *c, const char *job, const char *address,
                                 int num_devices, int *task_out, gr_error *err) {
  char host[GR_CLUSTER_HOST_MAX + 1];
  int port, t;
  gr_status s = gr_cluster_split_address(address, host, sizeof host, &port, err);
  if (s == GR_OK) s = gr_cluster_add_task(c, job, host, &t, err);
  if (s == GR_OK) s = gr_cluster_set_task_address(c, t, address, err);
  for (int d = 0; s == GR_OK && d < num_devices; d++)
    s = gr_cluster_add_device(c, t, GR_CLUSTER_DEFAULT_FLOPS, GR_CLUSTER_DEFAULT_MEM_BANDWIDTH,
                              GR_CLUSTER_DEFAULT_OVERHEAD, err);
  if (s == GR_OK && task_out) *task_out = t;
  return s;
}
