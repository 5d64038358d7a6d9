/* Writing a cluster as a cluster file (docs/placement.md) that
 * gr_cluster_parse_json reads back as the same cluster: tasks grouped by job,
 * each with its host, address and devices (equal neighbours as one "count"),
 * then the links; numbers in the shortest text that reads back exactly (as
 * text: jansson writes every real with 17 digits); every string through
 * jansson's encoder. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

/* s as a JSON string (quoted, escaped) on f; false when it is not UTF-8 or
 * memory runs out. */
static bool str(FILE *f, const char *s) {
  json_t *j = json_string(s);
  char *text = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
  json_decref(j);
  if (text) fputs(text, f);
  free(text);
  return text != NULL;
}

static const char *const link_keys[GR_LINK_COUNT] = {"same_task", "same_host", "cross_host"};

/* The shortest %g form of v that strtod reads back as v. */
static const char *num(double v, char buf[32]) {
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, 32, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

static bool same_rates(const gr_cluster_device *a, const gr_cluster_device *b) {
  return a->task == b->task && a->flops == b->flops && a->mem_bandwidth == b->mem_bandwidth &&
         a->overhead == b->overhead && a->time_scale == b->time_scale;
}

static bool write_task(const gr_cluster *c, const gr_cluster_task *t, FILE *f) {
  fprintf(f, "{\"host\": ");
  if (!str(f, t->host)) return false;
  if (t->address) {
    fprintf(f, ", \"address\": ");
    if (!str(f, t->address)) return false;
  }
  fprintf(f, ", \"devices\": [");
  int end = t->first_device + t->num_devices;
  for (int d = t->first_device, e; d < end; d = e) {
    for (e = d + 1; e < end && same_rates(&c->devices[d], &c->devices[e]);) e++;
    const gr_cluster_device *dv = &c->devices[d];
    char a[32], b[32], o[32];
    fprintf(f,
            "%s\n        {\"type\": \"CPU\", \"count\": %d, \"flops\": %s, \"mem_bandwidth\": %s, "
            "\"overhead\": %s",
            d > t->first_device ? "," : "", e - d, num(dv->flops, a), num(dv->mem_bandwidth, b),
            num(dv->overhead, o));
    if (dv->time_scale != 1) fprintf(f, ", \"time_scale\": %s", num(dv->time_scale, o));
    fprintf(f, "}");
  }
  fprintf(f, "]");
  if (t->threads != 1) fprintf(f, ", \"threads\": %d", t->threads);
  fprintf(f, "}");
  return true;
}

static gr_status bad_name(const char *name, gr_error *err) {
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "cluster: a name near '%.40s' is not UTF-8 (or out of memory)", name);
}

gr_status gr_cluster_write_json(const gr_cluster *c, FILE *f, gr_error *err) {
  fprintf(f, "{\n  \"jobs\": {");
  int njobs = 0;
  for (int t = 0; t < c->num_tasks; t++) {
    bool first = true;
    for (int u = 0; u < t && first; u++) first = strcmp(c->tasks[u].job, c->tasks[t].job) != 0;
    if (!first) continue;
    fprintf(f, "%s\n    ", njobs++ ? "," : "");
    if (!str(f, c->tasks[t].job)) return bad_name(c->tasks[t].job, err);
    fprintf(f, ": [");
    int ntasks = 0;
    for (int u = t; u < c->num_tasks; u++) {
      if (strcmp(c->tasks[u].job, c->tasks[t].job) != 0) continue;
      fprintf(f, "%s\n      ", ntasks++ ? "," : "");
      if (!write_task(c, &c->tasks[u], f)) return bad_name(c->tasks[u].host, err);
    }
    fprintf(f, "\n    ]");
  }
  fprintf(f, "\n  },\n  \"links\": {");
  for (int k = 0; k < GR_LINK_COUNT; k++) {
    char a[32], b[32], st[32];
    fprintf(f, "%s\n    \"%s\": {\"latency\": %s, \"bandwidth\": %s, \"step\": %s}", k ? "," : "",
            link_keys[k], num(c->links[k].latency, a), num(c->links[k].bandwidth, b),
            num(c->links[k].step, st));
  }
  fprintf(f, "\n  }");
  int nh = 0;
  for (int h = 0; h < c->num_hosts; h++) {
    if (!c->host_cores[h]) continue;
    fprintf(f, "%s\n    ", nh++ ? "," : ",\n  \"hosts\": {");
    if (!str(f, c->hosts[h])) return bad_name(c->hosts[h], err);
    fprintf(f, ": {\"cores\": %d}", c->host_cores[h]);
  }
  fprintf(f, "%s\n}\n", nh ? "\n  }" : "");
  if (ferror(f)) return gr_error_set(err, GR_ERR_IO, "cluster: write error");
  return GR_OK;
}
