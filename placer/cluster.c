/* The cluster model: tasks of jobs on hosts, CPU devices with compute rates,
 * and link latency + bandwidth by kind; read from and written to the JSON
 * cluster file (format in docs/placement.md). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_internal.h"
#include "placer_internal.h"

static const char *link_keys[GR_LINK_COUNT] = {"same_task", "same_host", "cross_host"};

gr_cluster *gr_cluster_new(void) {
  gr_cluster *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->links[GR_LINK_SAME_TASK] = (gr_link){1e-6, 10e9};
  c->links[GR_LINK_SAME_HOST] = (gr_link){20e-6, 3e9};
  c->links[GR_LINK_CROSS_HOST] = (gr_link){100e-6, 1.25e9};
  return c;
}

void gr_cluster_free(gr_cluster *c) {
  if (!c) return;
  for (int i = 0; i < c->num_hosts; i++) free(c->hosts[i]);
  free(c->hosts);
  free(c->tasks);
  free(c->devices);
  free(c);
}

static bool grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int ncap = *cap ? *cap * 2 : 8;
  while (ncap < need) ncap *= 2;
  void *q = realloc(*p, elem * (size_t)ncap);
  if (!q) return false;
  *p = q;
  *cap = ncap;
  return true;
}

static bool valid_job(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n >= GR_DEVICE_JOB_MAX || !isalpha((unsigned char)s[0])) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
  return true;
}

gr_status gr_cluster_add_task(gr_cluster *c, const char *job, const char *host, int *task_out,
                              gr_error *err) {
  if (!job || !valid_job(job))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "cluster: bad job name '%s' (letters, digits, '_' and '-', starting with "
                        "a letter, at most %d characters)",
                        job ? job : "(null)", GR_DEVICE_JOB_MAX - 1);
  if (!host) host = "localhost";
  if (!*host || strlen(host) > 255)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cluster: job '%s': bad host name '%.64s'",
                        job, host);
  int h = 0;
  while (h < c->num_hosts && strcmp(c->hosts[h], host) != 0) h++;
  if (h == c->num_hosts) {
    if (!grow((void **)&c->hosts, &c->cap_hosts, c->num_hosts + 1, sizeof(char *))) goto oom;
    c->hosts[h] = strdup(host);
    if (!c->hosts[h]) goto oom;
    c->num_hosts++;
  }
  if (!grow((void **)&c->tasks, &c->cap_tasks, c->num_tasks + 1, sizeof *c->tasks)) goto oom;
  int index = 0;
  for (int t = 0; t < c->num_tasks; t++) index += strcmp(c->tasks[t].job, job) == 0;
  gr_cluster_task *t = &c->tasks[c->num_tasks];
  memset(t, 0, sizeof *t);
  strcpy(t->job, job);
  t->index = index;
  t->host = h;
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
  if (!grow((void **)&c->devices, &c->cap_devices, c->num_devices + 1, sizeof *c->devices))
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cluster: out of memory");
  gr_cluster_task *t = &c->tasks[task];
  gr_cluster_device *d = &c->devices[c->num_devices++];
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
  d->task = task;
  d->host = t->host;
  return GR_OK;
}

void gr_cluster_set_link(gr_cluster *c, gr_link_kind kind, gr_link link) {
  if ((unsigned)kind < GR_LINK_COUNT) c->links[kind] = link;
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

double gr_cluster_transfer_time(const gr_cluster *c, int a, int b, double bytes) {
  if (a == b) return 0;
  const gr_link *l = &c->links[gr_cluster_link_kind(c, a, b)];
  return l->latency + bytes / l->bandwidth;
}

/* ---- the JSON cluster file -------------------------------------------------- */

typedef struct reader {
  const char *name;
  gr_error *err;
} reader;

static gr_status at(const reader *r, const gr_json *v, const char *fmt, const char *a,
                    const char *b) {
  char what[512];
  snprintf(what, sizeof what, fmt, a, b);
  return gr_error_set(r->err, GR_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s", r->name, v->line, v->col,
                      what);
}

static gr_status want(const reader *r, const gr_json *v, gr_json_type t, const char *what) {
  if (v->type == t) return GR_OK;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", gr_json_type_name(t));
  return at(r, v, "%s must be a JSON %s", what, buf);
}

/* Only the listed keys are allowed in object v. */
static gr_status check_keys(const reader *r, const gr_json *v, const char *const *keys, int n,
                            const char *what) {
  for (int i = 0; i < v->n; i++) {
    int k = 0;
    while (k < n && strcmp(v->keys[i], keys[k]) != 0) k++;
    if (k == n) {
      char list[256] = "";
      size_t m = 0;
      for (k = 0; k < n && m < sizeof list; k++)
        m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", k ? ", " : "", keys[k]);
      char key[80];
      snprintf(key, sizeof key, "%.60s\" in %s", v->keys[i], what);
      return at(r, &v->items[i], "unknown key \"%s (allowed: %s)", key, list);
    }
  }
  return GR_OK;
}

/* A number member (optional when dflt is not NAN) that must be > 0 (or >= 0). */
static gr_status number(const reader *r, const gr_json *obj, const char *key, double dflt,
                        bool allow_zero, double *out) {
  const gr_json *v = gr_json_get(obj, key);
  if (!v) {
    if (isnan(dflt)) return at(r, obj, "missing \"%s\"%s", key, "");
    *out = dflt;
    return GR_OK;
  }
  GR_TRY(want(r, v, GR_JSON_NUMBER, key));
  if (allow_zero ? !(v->num >= 0) : !(v->num > 0))
    return at(r, v, "\"%s\" must be %s", key, allow_zero ? ">= 0" : "> 0");
  *out = v->num;
  return GR_OK;
}

static gr_status read_task(const reader *r, gr_cluster *c, const char *job, const gr_json *tv) {
  static const char *const keys[] = {"host", "devices"};
  GR_TRY(want(r, tv, GR_JSON_OBJECT, "a task"));
  GR_TRY(check_keys(r, tv, keys, 2, "a task"));
  const char *host = "localhost";
  const gr_json *h = gr_json_get(tv, "host");
  if (h) {
    GR_TRY(want(r, h, GR_JSON_STRING, "\"host\""));
    host = h->str;
  }
  int t;
  if (gr_cluster_add_task(c, job, host, &t, r->err) != GR_OK) {
    gr_error_prefix(r->err, "%s:%d:%d", r->name, tv->line, tv->col);
    return r->err ? r->err->code : GR_ERR_INVALID_ARGUMENT;
  }
  const gr_json *devs = gr_json_get(tv, "devices");
  if (!devs) return at(r, tv, "a task needs \"devices\" (a list of device objects)%s%s", "", "");
  GR_TRY(want(r, devs, GR_JSON_ARRAY, "\"devices\""));
  for (int i = 0; i < devs->n; i++) {
    static const char *const dkeys[] = {"type", "count", "flops", "mem_bandwidth", "overhead"};
    const gr_json *dv = &devs->items[i];
    GR_TRY(want(r, dv, GR_JSON_OBJECT, "a device"));
    GR_TRY(check_keys(r, dv, dkeys, 5, "a device"));
    const gr_json *type = gr_json_get(dv, "type");
    if (type) {
      GR_TRY(want(r, type, GR_JSON_STRING, "\"type\""));
      if (strcmp(type->str, "CPU") != 0 && strcmp(type->str, "cpu") != 0)
        return at(r, type, "unknown device type \"%.40s\" (this build has CPU only)%s", type->str,
                  "");
    }
    double count = 1, flops, bw, ov;
    const gr_json *cv = gr_json_get(dv, "count");
    if (cv) {
      GR_TRY(want(r, cv, GR_JSON_NUMBER, "\"count\""));
      if (cv->num < 1 || cv->num > 4096 || cv->num != floor(cv->num))
        return at(r, cv, "\"count\" must be an integer in [1, 4096]%s%s", "", "");
      count = cv->num;
    }
    GR_TRY(number(r, dv, "flops", NAN, false, &flops));
    GR_TRY(number(r, dv, "mem_bandwidth", 10e9, false, &bw));
    GR_TRY(number(r, dv, "overhead", 1e-6, true, &ov));
    if (c->num_devices + count > 65536)
      return at(r, dv, "too many devices (max 65536)%s%s", "", "");
    for (int k = 0; k < (int)count; k++)
      if (gr_cluster_add_device(c, t, flops, bw, ov, r->err) != GR_OK) {
        gr_error_prefix(r->err, "%s:%d:%d", r->name, dv->line, dv->col);
        return r->err ? r->err->code : GR_ERR_INVALID_ARGUMENT;
      }
  }
  return GR_OK;
}

static gr_status read_cluster(const reader *r, gr_cluster *c, const gr_json *root) {
  static const char *const keys[] = {"jobs", "links"};
  GR_TRY(want(r, root, GR_JSON_OBJECT, "the cluster file"));
  GR_TRY(check_keys(r, root, keys, 2, "the cluster file"));
  const gr_json *jobs = gr_json_get(root, "jobs");
  if (!jobs)
    return at(r, root, "missing \"jobs\" (an object: job name -> list of tasks)%s%s", "", "");
  GR_TRY(want(r, jobs, GR_JSON_OBJECT, "\"jobs\""));
  for (int j = 0; j < jobs->n; j++) {
    const gr_json *tasks = &jobs->items[j];
    if (!valid_job(jobs->keys[j]))
      return at(r, tasks,
                "bad job name \"%.64s\" (letters, digits, '_' and '-', starting with a letter)%s",
                jobs->keys[j], "");
    GR_TRY(want(r, tasks, GR_JSON_ARRAY, "a job"));
    if (tasks->n > 4096) return at(r, tasks, "too many tasks (max 4096)%s%s", "", "");
    for (int t = 0; t < tasks->n; t++) GR_TRY(read_task(r, c, jobs->keys[j], &tasks->items[t]));
  }
  if (c->num_devices == 0) return at(r, jobs, "the cluster has no devices%s%s", "", "");
  const gr_json *links = gr_json_get(root, "links");
  if (links) {
    GR_TRY(want(r, links, GR_JSON_OBJECT, "\"links\""));
    GR_TRY(check_keys(r, links, link_keys, GR_LINK_COUNT, "\"links\""));
    for (int k = 0; k < GR_LINK_COUNT; k++) {
      static const char *const lkeys[] = {"latency", "bandwidth"};
      const gr_json *lv = gr_json_get(links, link_keys[k]);
      if (!lv) continue;
      GR_TRY(want(r, lv, GR_JSON_OBJECT, link_keys[k]));
      GR_TRY(check_keys(r, lv, lkeys, 2, link_keys[k]));
      gr_link l = c->links[k];
      GR_TRY(number(r, lv, "latency", l.latency, true, &l.latency));
      GR_TRY(number(r, lv, "bandwidth", l.bandwidth, false, &l.bandwidth));
      c->links[k] = l;
    }
  }
  return GR_OK;
}

gr_status gr_cluster_parse_json(const char *text, size_t len, const char *name, gr_cluster **out,
                                gr_error *err) {
  *out = NULL;
  reader r = {name ? name : "<cluster>", err};
  gr_json *root;
  GR_TRY(gr_json_parse(text, len, r.name, &root, err));
  gr_cluster *c = gr_cluster_new();
  if (!c) {
    gr_json_free(root);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", r.name);
  }
  gr_status s = read_cluster(&r, c, root);
  gr_json_free(root);
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
      if (cap > (size_t)GR_JSON_MAX_BYTES + 65536) break;
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

static bool same_rates(const gr_cluster_device *a, const gr_cluster_device *b) {
  return a->task == b->task && a->flops == b->flops && a->mem_bandwidth == b->mem_bandwidth &&
         a->overhead == b->overhead;
}

gr_status gr_cluster_write_json(const gr_cluster *c, FILE *f, gr_error *err) {
  fprintf(f, "{\n  \"jobs\": {");
  int njobs = 0;
  for (int t = 0; t < c->num_tasks; t++) {
    bool first = true;
    for (int u = 0; u < t; u++) first &= strcmp(c->tasks[u].job, c->tasks[t].job) != 0;
    if (!first) continue;
    fprintf(f, "%s\n    \"%s\": [", njobs++ ? "," : "", c->tasks[t].job);
    int ntasks = 0;
    for (int u = t; u < c->num_tasks; u++) {
      if (strcmp(c->tasks[u].job, c->tasks[t].job) != 0) continue;
      fprintf(f, "%s\n      {\"host\": \"", ntasks++ ? "," : "");
      for (const char *h = c->hosts[c->tasks[u].host]; *h; h++) {
        if (*h == '"' || *h == '\\')
          fprintf(f, "\\%c", *h);
        else if ((unsigned char)*h < 0x20)
          fprintf(f, "\\u%04x", (unsigned char)*h);
        else
          fputc(*h, f);
      }
      fprintf(f, "\", \"devices\": [");
      int ndev = 0;
      for (int d = 0; d < c->num_devices;) {
        if (c->devices[d].task != u) {
          d++;
          continue;
        }
        int e = d + 1;
        while (e < c->num_devices && same_rates(&c->devices[d], &c->devices[e])) e++;
        const gr_cluster_device *dv = &c->devices[d];
        fprintf(f,
                "%s\n        {\"type\": \"CPU\", \"count\": %d, \"flops\": %.6g, "
                "\"mem_bandwidth\": %.6g, \"overhead\": %.6g}",
                ndev++ ? "," : "", e - d, dv->flops, dv->mem_bandwidth, dv->overhead);
        d = e;
      }
      fprintf(f, "]}");
    }
    fprintf(f, "\n    ]");
  }
  fprintf(f, "\n  },\n  \"links\": {");
  for (int k = 0; k < GR_LINK_COUNT; k++)
    fprintf(f, "%s\n    \"%s\": {\"latency\": %.6g, \"bandwidth\": %.6g}", k ? "," : "",
            link_keys[k], c->links[k].latency, c->links[k].bandwidth);
  fprintf(f, "\n  }\n}\n");
  if (ferror(f)) return gr_error_set(err, GR_ERR_IO, "cluster: write error");
  return GR_OK;
}
