/* Reading a cluster from JSON: the one entry point for every JSON form
 * (gr_cluster_parse_json tells them apart) and the cluster file itself
 * (format in docs/placement.md): jobs of tasks with host, address and
 * devices, and the links. ClusterSpec and TF_CONFIG are in cluster_tf.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_json_internal.h"

static const char *const link_keys[GR_LINK_COUNT] = {"same_task", "same_host", "cross_host"};

/* The number member `key` of obj (at r's path): required when dflt is NAN;
 * > 0, or >= 0 with allow_zero. */
static gr_status number(gr_jreader *r, const json_t *obj, const char *key, double dflt,
                        bool allow_zero, double *out) {
  const json_t *v = json_object_get(obj, key);
  if (!v) {
    if (isnan(dflt)) return gr_jreader_fail(r, "missing \"%s\"", key);
    *out = dflt;
    return GR_OK;
  }
  gr_jreader_push_key(r, key);
  gr_status s = gr_jreader_want(r, v, JSON_REAL, NULL);
  double x = json_number_value(v);
  if (s == GR_OK && (allow_zero ? !(x >= 0) : !(x > 0)))
    s = gr_jreader_fail(r, "must be %s (got %g)", allow_zero ? ">= 0" : "> 0", x);
  gr_jreader_pop(r);
  *out = x;
  return s;
}

/* An optional string member `key` of obj, checked by the caller; NULL when absent. */
static gr_status string_member(gr_jreader *r, const json_t *obj, const char *key,
                               const char **out) {
  const json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (!v) return GR_OK;
  gr_jreader_push_key(r, key);
  gr_status s = gr_jreader_want(r, v, JSON_STRING, NULL);
  gr_jreader_pop(r);
  if (s == GR_OK) *out = json_string_value(v);
  return s;
}

static gr_status read_device(gr_jreader *r, gr_cluster *c, int t, const json_t *dv) {
  static const char *const keys[] = {"type",          "count",    "flops",
                                     "mem_bandwidth", "overhead", "time_scale"};
  GR_TRY(gr_jreader_want(r, dv, JSON_OBJECT, "a device"));
  GR_TRY(gr_jreader_check_keys(r, dv, keys, 6));
  const char *type;
  GR_TRY(string_member(r, dv, "type", &type));
  if (type && strcmp(type, "CPU") != 0 && strcmp(type, "cpu") != 0) {
    gr_jreader_push_key(r, "type");
    return gr_jreader_fail(r, "unknown device type \"%.40s\" (this build has CPU only)", type);
  }
  double count = 1, flops, bw, ov, scale;
  const json_t *cv = json_object_get(dv, "count");
  if (cv) {
    gr_jreader_push_key(r, "count");
    GR_TRY(gr_jreader_want(r, cv, JSON_REAL, NULL));
    count = json_number_value(cv);
    if (count < 1 || count > 4096 || count != floor(count))
      return gr_jreader_fail(r, "must be an integer in [1, 4096]");
    gr_jreader_pop(r);
  }
  GR_TRY(number(r, dv, "flops", NAN, false, &flops));
  GR_TRY(number(r, dv, "mem_bandwidth", GR_CLUSTER_DEFAULT_MEM_BANDWIDTH, false, &bw));
  GR_TRY(number(r, dv, "overhead", GR_CLUSTER_DEFAULT_OVERHEAD, true, &ov));
  GR_TRY(number(r, dv, "time_scale", 1, false, &scale));
  for (int k = 0; k < (int)count; k++) {
    gr_status s = gr_cluster_add_device(c, t, flops, bw, ov, r->err);
    const gr_cluster_task *tk = gr_cluster_task_at(c, t);
    if (s == GR_OK)
      s = gr_cluster_set_time_scale(c, tk->first_device + tk->num_devices - 1, scale, r->err);
    if (s != GR_OK) return gr_jreader_wrap(r, s);
  }
  return GR_OK;
}

/* An optional integer member `key` of obj in [lo, hi]; *out unchanged when absent. */
static gr_status int_member(gr_jreader *r, const json_t *obj, const char *key, int lo, int hi,
                            int *out) {
  const json_t *v = json_object_get(obj, key);
  if (!v) return GR_OK;
  gr_jreader_push_key(r, key);
  GR_TRY(gr_jreader_want(r, v, JSON_REAL, NULL));
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi) || x != floor(x))
    return gr_jreader_fail(r, "must be an integer in [%d, %d]", lo, hi);
  gr_jreader_pop(r);
  *out = (int)x;
  return GR_OK;
}

static gr_status read_task(gr_jreader *r, gr_cluster *c, const char *job, const json_t *tv) {
  static const char *const keys[] = {"host", "address", "devices", "threads"};
  GR_TRY(gr_jreader_want(r, tv, JSON_OBJECT, "a task"));
  GR_TRY(gr_jreader_check_keys(r, tv, keys, 4));
  const char *host, *address;
  char why[256], addr_host[GR_CLUSTER_HOST_MAX];
  int port;
  GR_TRY(string_member(r, tv, "host", &host));
  GR_TRY(string_member(r, tv, "address", &address));
  if (host && gr_cluster_host_problem(host, why, sizeof why)) {
    gr_jreader_push_key(r, "host");
    return gr_jreader_fail(r, "%s", why);
  }
  if (address) {
    if (gr_cluster_address_problem(address, addr_host, sizeof addr_host, &port, why, sizeof why)) {
      gr_jreader_push_key(r, "address");
      return gr_jreader_fail(r, "%s", why);
    }
    if (!host) host = addr_host;
  }
  int t, threads = 1;
  GR_TRY(int_member(r, tv, "threads", 1, 1024, &threads));
  gr_status s = gr_cluster_add_task(c, job, host, &t, r->err);
  if (s == GR_OK) s = gr_cluster_set_task_threads(c, t, threads, r->err);
  if (s != GR_OK) return gr_jreader_wrap(r, s);
  if (address) {
    gr_jreader_push_key(r, "address");
    s = gr_cluster_set_task_address(c, t, address, r->err);
    if (s != GR_OK) return gr_jreader_wrap(r, s);
    gr_jreader_pop(r);
  }
  const json_t *devs = json_object_get(tv, "devices");
  if (!devs) return gr_jreader_fail(r, "a task needs \"devices\" (a list of device objects)");
  gr_jreader_push_key(r, "devices");
  GR_TRY(gr_jreader_want(r, devs, JSON_ARRAY, NULL));
  for (size_t i = 0; i < json_array_size(devs); i++) {
    gr_jreader_push_index(r, (int)i);
    GR_TRY(read_device(r, c, t, json_array_get(devs, i)));
    gr_jreader_pop(r);
  }
  gr_jreader_pop(r);
  return GR_OK;
}

static gr_status read_links(gr_jreader *r, gr_cluster *c, const json_t *links) {
  static const char *const lkeys[] = {"latency", "bandwidth", "step"};
  GR_TRY(gr_jreader_want(r, links, JSON_OBJECT, "\"links\""));
  GR_TRY(gr_jreader_check_keys(r, links, link_keys, GR_LINK_COUNT));
  for (int k = 0; k < GR_LINK_COUNT; k++) {
    const json_t *lv = json_object_get(links, link_keys[k]);
    if (!lv) continue;
    gr_jreader_push_key(r, link_keys[k]);
    GR_TRY(gr_jreader_want(r, lv, JSON_OBJECT, "a link"));
    GR_TRY(gr_jreader_check_keys(r, lv, lkeys, 3));
    gr_link l = gr_cluster_get_link(c, (gr_link_kind)k);
    GR_TRY(number(r, lv, "latency", l.latency, true, &l.latency));
    GR_TRY(number(r, lv, "bandwidth", l.bandwidth, false, &l.bandwidth));
    GR_TRY(number(r, lv, "step", l.step, true, &l.step));
    gr_cluster_set_link(c, (gr_link_kind)k, l);
    gr_jreader_pop(r);
  }
  return GR_OK;
}

/* "hosts": {name: {"cores": N}}, each a host of a task. */
static gr_status read_hosts(gr_jreader *r, gr_cluster *c, const json_t *hosts) {
  static const char *const hkeys[] = {"cores"};
  GR_TRY(gr_jreader_want(r, hosts, JSON_OBJECT, "\"hosts\" (host name -> {\"cores\": N})"));
  const char *name;
  json_t *hv;
  json_object_foreach((json_t *)hosts, name, hv) {
    gr_jreader_push_key(r, name);
    GR_TRY(gr_jreader_want(r, hv, JSON_OBJECT, "a host"));
    GR_TRY(gr_jreader_check_keys(r, hv, hkeys, 1));
    int cores = 0;
    GR_TRY(int_member(r, hv, "cores", 0, 65536, &cores));
    int h = 0;
    while (h < gr_cluster_num_hosts(c) && strcmp(gr_cluster_host_name(c, h), name) != 0) h++;
    if (h == gr_cluster_num_hosts(c)) return gr_jreader_fail(r, "no task is on this host");
    gr_status s = gr_cluster_set_host_cores(c, name, cores, r->err);
    if (s != GR_OK) return gr_jreader_wrap(r, s);
    gr_jreader_pop(r);
  }
  return GR_OK;
}

/* The cluster file: {"jobs": {job: [task, ...]}, "links": {...}, "hosts": {...}}. */
static gr_status read_cluster_file(gr_jreader *r, gr_cluster *c, const json_t *root) {
  static const char *const keys[] = {"jobs", "links", "hosts"};
  GR_TRY(gr_jreader_check_keys(r, root, keys, 3));
  const json_t *jobs = json_object_get(root, "jobs");
  if (!jobs) return gr_jreader_fail(r, "missing \"jobs\" (an object: job name -> list of tasks)");
  gr_jreader_push_key(r, "jobs");
  GR_TRY(gr_jreader_want(r, jobs, JSON_OBJECT, "\"jobs\" (job name -> list of tasks)"));
  const char *job;
  json_t *tasks;
  json_object_foreach((json_t *)jobs, job, tasks) {
    char why[256];
    gr_jreader_push_key(r, job);
    if (gr_cluster_job_problem(job, why, sizeof why)) return gr_jreader_fail(r, "%s", why);
    GR_TRY(gr_jreader_want(r, tasks, JSON_ARRAY, "a job (a list of tasks)"));
    if (json_array_size(tasks) == 0) return gr_jreader_fail(r, "a job needs at least one task");
    for (size_t t = 0; t < json_array_size(tasks); t++) {
      gr_jreader_push_index(r, (int)t);
      GR_TRY(read_task(r, c, job, json_array_get(tasks, t)));
      gr_jreader_pop(r);
    }
    gr_jreader_pop(r);
  }
  if (gr_cluster_num_devices(c) == 0) return gr_jreader_fail(r, "the cluster has no devices");
  gr_jreader_pop(r);
  const json_t *links = json_object_get(root, "links");
  if (links) {
    gr_jreader_push_key(r, "links");
    GR_TRY(read_links(r, c, links));
    gr_jreader_pop(r);
  }
  const json_t *hosts = json_object_get(root, "hosts");
  if (hosts) {
    gr_jreader_push_key(r, "hosts");
    GR_TRY(read_hosts(r, c, hosts));
    gr_jreader_pop(r);
  }
  return GR_OK;
}

/* Which form: "jobs" or "links" not holding a list: the cluster file;
 * "cluster" not holding a list: TF_CONFIG; else a ClusterSpec (whose jobs
 * hold lists, so a job called "jobs" or "cluster" is still read as one). */
static gr_status read_root(gr_jreader *r, gr_cluster *c, const json_t *root) {
  GR_TRY(gr_jreader_want(r, root, JSON_OBJECT, "a cluster"));
  const json_t *jobs = json_object_get(root, "jobs"), *links = json_object_get(root, "links");
  const json_t *cluster = json_object_get(root, "cluster");
  if ((jobs && !json_is_array(jobs)) || (links && !json_is_array(links)))
    return read_cluster_file(r, c, root);
  if (cluster && !json_is_array(cluster)) return gr_cluster_read_tf_config(r, root, c, NULL);
  return gr_cluster_read_spec(r, root, c);
}

gr_status gr_cluster_parse_json(const char *text, size_t len, const char *name, gr_cluster **out,
                                gr_error *err) {
  *out = NULL;
  gr_jreader r = {.name = name ? name : "<cluster>", .text = text, .len = len, .err = err};
  json_t *root;
  GR_TRY(gr_jreader_load(&r, &root));
  gr_cluster *c = gr_cluster_new();
  if (!c) {
    json_decref(root);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", r.name);
  }
  gr_status s = read_root(&r, c, root);
  json_decref(root);
  if (s != GR_OK) {
    gr_cluster_free(c);
    return s;
  }
  *out = c;
  return GR_OK;
}

gr_status gr_cluster_load_json(const char *path, gr_cluster **out, gr_error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 65536;
      if (cap > (size_t)GR_CLUSTER_JSON_MAX_BYTES + 65536) break; /* parse says: too large */
      char *b = realloc(buf, cap);
      if (!b) {
        free(buf);
        fclose(f);
        return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", path);
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return gr_error_set(err, GR_ERR_IO, "%s: read error", path);
  }
  gr_status s = gr_cluster_parse_json(buf ? buf : "", n, path, out, err);
  free(buf);
  return s;
}
