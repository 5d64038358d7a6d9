/* graphrun run --trace: a step trace as a Chrome trace (chrome://tracing,
 * ui.perfetto.dev): one process per device, one complete event per node run,
 * and the bytes each link between devices carried (otherData). */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

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

int cli_write_trace_to(FILE *f, const gr_step_trace *t) {
  enum { MAX_DEVS = 64 };
  const char *devs[MAX_DEVS];
  int ndev = 0;
  int64_t t0 = 0;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    int64_t s = gr_step_trace_event(t, i)->start_ns;
    if (i == 0 || s < t0) t0 = s;
  }
  fprintf(f, "{\"traceEvents\": [\n");
  bool first = true;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    const char *dev = e->node->assigned_device ? e->node->assigned_device : "device";
    int pid = 0;
    while (pid < ndev && strcmp(devs[pid], dev) != 0) pid++;
    if (pid == ndev && ndev < MAX_DEVS) {
      devs[ndev++] = dev;
      fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": ",
              first ? "" : ",\n", pid);
      json_str(f, dev);
      fprintf(f, "}}");
      first = false;
    }
    fprintf(f, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"name\": ", first ? "" : ",\n", pid);
    json_str(f, e->node->name);
    fprintf(f, ", \"cat\": ");
    json_str(f, e->node->op->name);
    fprintf(f, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"bytes\": %lld, \"iteration\": %lld}}",
            (double)(e->start_ns - t0) / 1e3, (double)(e->end_ns - e->start_ns) / 1e3,
            (long long)e->out_bytes, (long long)e->iteration);
    first = false;
  }
  fprintf(f, "\n], \"otherData\": {\"bytes_per_link\": [");
  cli_link links[64];
  int nl = cli_trace_links(t, links, 64);
  for (int k = 0; k < nl; k++) {
    fprintf(f, "%s\n  {\"from\": ", k ? "," : "");
    json_str(f, links[k].from);
    fprintf(f, ", \"to\": ");
    json_str(f, links[k].to);
    fprintf(f, ", \"values\": %lld, \"bytes\": %lld}", links[k].values, links[k].bytes);
  }
  fprintf(f, "]}}\n");
  return ferror(f) ? -1 : 0;
}
