/* graphrun run --trace: a step trace as a Chrome trace (chrome://tracing,
 * ui.perfetto.dev): one process per device, one complete event per node run,
 * and the bytes each link between devices carried (otherData). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"

int cli_trace_links(const gr_step_trace *t, cli_link *links, int cap) {
  int n = 0;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    const gr_node *v = e->node;
    /* a receive: what crossed the link from its sender's device to its own */
    if (!(v->op->flags & GR_OP_TRANSFER) || v->num_outputs < 1) continue;
    const char *from = gr_node_attr_string(v, "send_device", "?"),
               *to = gr_node_attr_string(v, "recv_device", "?");
    int k = 0;
    while (k < n && !(strcmp(links[k].from, from) == 0 && strcmp(links[k].to, to) == 0)) k++;
    if (k == n) {
      if (n == cap) continue;
      links[n++] = (cli_link){from, to, 0, 0};
    }
    links[k].values++;
    links[k].bytes += e->out_bytes;
  }
  return n;
}

int cli_write_trace(const char *path, const gr_step_trace *t) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int rc = cli_write_trace_to(f, t);
  return fclose(f) == 0 ? rc : -1;
}

/* The trace as a JSON document (a new reference), or NULL when out of memory. */
static json_t *trace_json(const gr_step_trace *t) {
  enum { MAX_DEVS = 64 };
  const char *devs[MAX_DEVS];
  int ndev = 0;
  int64_t t0 = 0;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    int64_t s = gr_step_trace_event(t, i)->start_ns;
    if (i == 0 || s < t0) t0 = s;
  }
  json_t *events = json_array(), *links_j = json_array();
  bool ok = events && links_j;
  for (int i = 0; ok && i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    const char *dev = e->node->assigned_device ? e->node->assigned_device : "device";
    int pid = 0;
    while (pid < ndev && strcmp(devs[pid], dev) != 0) pid++;
    if (pid == ndev && ndev < MAX_DEVS) {
      devs[ndev++] = dev;
      ok = json_array_append_new(events,
                                 json_pack("{s:s, s:s, s:i, s:{s:s}}", "ph", "M", "name",
                                           "process_name", "pid", pid, "args", "name", dev)) == 0;
    }
    ok = ok && json_array_append_new(
                   events,
                   json_pack("{s:s, s:i, s:i, s:s, s:s, s:f, s:f, s:{s:I, s:I}}", "ph", "X", "pid",
                             pid, "tid", 0, "name", e->node->name, "cat", e->node->op->name, "ts",
                             (double)(e->start_ns - t0) / 1e3, "dur",
                             (double)(e->end_ns - e->start_ns) / 1e3, "args", "bytes",
                             (json_int_t)e->out_bytes, "iteration", (json_int_t)e->iteration)) == 0;
  }
  cli_link links[64];
  int nl = cli_trace_links(t, links, 64);
  for (int k = 0; ok && k < nl; k++)
    ok = json_array_append_new(links_j,
                               json_pack("{s:s, s:s, s:I, s:I}", "from", links[k].from, "to",
                                         links[k].to, "values", (json_int_t)links[k].values,
                                         "bytes", (json_int_t)links[k].bytes)) == 0;
  if (!ok) {
    json_decref(events);
    json_decref(links_j);
    return NULL;
  }
  return json_pack("{s:o, s:{s:o}}", "traceEvents", events, "otherData", "bytes_per_link", links_j);
}

int cli_write_trace_to(FILE *f, const gr_step_trace *t) {
  json_t *doc = trace_json(t);
  int rc = doc ? json_dumpf(doc, f, JSON_REAL_PRECISION(15)) : -1;
  json_decref(doc);
  if (rc == 0) fputc('\n', f);
  return rc != 0 || ferror(f) ? -1 : 0;
}
