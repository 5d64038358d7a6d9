/* A batch norm whose variables, moving statistics included, live on a
 * parameter server (tests/data/ps_batch_norm.gr: conv, batch norm and
 * dense in a ps_variables block) trains on a launched cluster (`graphrun
 * launch --ps 1 --workers 2`, real processes, bounded in time and reaped)
 * and on two local devices (the variables on device 1, the batch norm on
 * device 0) to the bits of one process: the loss, the moving statistics
 * and an inference pass that reads them. The traces show where the nodes
 * ran: the batch norm with the batch (the worker, device 0), the updates
 * of its moving statistics with the variables (the ps, device 1). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char tmp[] = "/tmp/gr_dist_bn_XXXXXX";

/* Runs argv to its end (at most 120 s); its JSON line (the fetches) into
 * json. false, with the output printed, when it fails. */
static bool run_json(char *const argv[], char *json, size_t cap) {
  gt_proc p;
  gt_proc_start(&p, argv);
  bool ended = gt_proc_wait(&p, NULL, 120);
  gt_proc_finish(&p);
  GR_CHECK_MSG(ended, "%s %s did not end within 120 s:\n%s", argv[1], argv[2], p.buf);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "%s %s failed:\n%s", argv[1], argv[2], p.buf);
  const char *l = strstr(p.buf, "\n{\"loss\"");
  l = l ? l + 1 : strncmp(p.buf, "{\"loss\"", 7) == 0 ? p.buf : NULL;
  const char *e = l ? strchr(l, '\n') : NULL;
  GR_CHECK_MSG(e && (size_t)(e - l) < cap, "no JSON line:\n%s", p.buf);
  if (!ended || gt_proc_exit_code(&p) != 0 || !e || (size_t)(e - l) >= cap) return false;
  memcpy(json, l, (size_t)(e - l));
  json[e - l] = '\0';
  return true;
}

/* The device that ran the node `node` in a trace file (Chrome format, as
 * graphrun writes it: a complete event per node run with the pid of its
 * device, one process per device, named by a process_name event), into dev. */
static bool traced_device(const char *trace, const char *node, char *dev, size_t cap) {
  json_t *doc = json_loads(trace, 0, NULL);
  json_t *events = json_object_get(doc, "traceEvents"), *e;
  json_int_t pid = -1;
  size_t i;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph")),
               *name = json_string_value(json_object_get(e, "name"));
    if (ph && name && !strcmp(ph, "X") && !strcmp(name, node))
      pid = json_integer_value(json_object_get(e, "pid"));
  }
  bool found = false;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    const char *d = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
    if (pid >= 0 && ph && d && !strcmp(ph, "M") &&
        json_integer_value(json_object_get(e, "pid")) == pid && strlen(d) < cap) {
      snprintf(dev, cap, "%s", d);
      found = true;
    }
  }
  json_decref(doc);
  return found;
}

/* The trace at path: the batch norm ran on a device whose name holds
 * `batch`, the two updates on one holding `vars`. */
static void check_trace(const char *path, const char *batch, const char *vars) {
  FILE *f = fopen(path, "r");
  GR_CHECK_MSG(f != NULL, "no trace %s", path);
  if (!f) return;
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  static const char *const nodes[3] = {"h/batch_norm", "h/update_moving_mean",
                                       "h/update_moving_variance"};
  for (int i = 0; i < 3; i++) {
    char dev[256] = "";
    bool found = traced_device(text, nodes[i], dev, sizeof dev);
    const char *want = i ? vars : batch;
    GR_CHECK_MSG(found && strstr(dev, want), "%s ran on '%s', want %s", nodes[i],
                 found ? dev : "(not in the trace)", want);
  }
}

/* tests/data/ps_batch_norm.gr with the ps_variables block a device block
 * for local device 1 and the batch norm's line in one for device 0. */
static void write_local_variant(const char *src, char *path, size_t cap) {
  FILE *f = fopen(src, "r");
  static char in[8192], out[8192];
  size_t n = f ? fread(in, 1, sizeof in - 1, f) : 0;
  if (f) fclose(f);
  in[n] = '\0';
  char *block = strstr(in, "ps_variables(1) {"), *h = strstr(in, "\n  h = batch_norm(");
  char *h_end = h ? strchr(h + 1, '\n') : NULL;
  GR_CHECK(block && h_end && block < h);
  if (!block || !h_end || block > h) return;
  snprintf(
      out, sizeof out, "%.*sdevice \"/device:CPU:1\" {%.*s\n  device \"/device:CPU:0\" {%.*s }%s",
      (int)(block - in), in, (int)(h - block - 17), block + 17, (int)(h_end - h - 1), h + 1, h_end);
  gt_write_file(tmp, "local.gr", out);
  snprintf(path, cap, "%s/local.gr", tmp);
}

static void test_ps_batch_norm(void) {
  char file[PATH_MAX], local[PATH_MAX + 16], trace_l[PATH_MAX + 16], trace_c[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/tests/data/ps_batch_norm.gr", GR_SOURCE_DIR);
  snprintf(trace_l, sizeof trace_l, "%s/local.json", tmp);
  snprintf(trace_c, sizeof trace_c, "%s/cluster.json", tmp);
  write_local_variant(file, local, sizeof local);
  static char one[32768], two[32768], cluster[32768];
  /* one process: the ps pins fall back to the only device */
  bool ok1 = run_json((char *[]){"graphrun", "run", file, "--soft-placement", "--steps", "5",
                                 "--json", "--quiet", NULL},
                      one, sizeof one);
  bool ok2 = run_json((char *[]){"graphrun", "run", local, "--devices", "2", "--steps", "5",
                                 "--json", "--quiet", "--trace", trace_l, NULL},
                      two, sizeof two);
  bool ok3 = run_json((char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", file,
                                 "--steps", "5", "--json", "--quiet", "--trace", trace_c,
                                 "--timeout", "60", "--heartbeat", "250:12", NULL},
                      cluster, sizeof cluster);
  if (ok1) { /* the moving statistics moved from their zeros and ones */
    static const char *const pre[2] = {"\"mm\": {\"dtype\": \"f32\", \"shape\": [4], \"data\": [",
                                       "\"mv\": {\"dtype\": \"f32\", \"shape\": [4], \"data\": ["};
    for (int i = 0; i < 2; i++) {
      const char *at = strstr(one, pre[i]);
      double first = at ? strtod(at + strlen(pre[i]), NULL) : i;
      GR_CHECK_MSG(at && first != i, "%s did not move: %s", i ? "mv" : "mm", one);
    }
  }
  if (ok1 && ok2) GR_CHECK_MSG(!strcmp(one, two), "two devices:\n%s\none:\n%s", two, one);
  if (ok1 && ok3) GR_CHECK_MSG(!strcmp(one, cluster), "cluster:\n%s\none:\n%s", cluster, one);
  if (ok2) check_trace(trace_l, "device:CPU:0", "device:CPU:1");
  if (ok3) check_trace(trace_c, "/job:worker/", "/job:ps/");
}

int main(void) {
  gt_proc_isolate();
  if (!mkdtemp(tmp)) return 1;
  GR_RUN(test_ps_batch_norm);
  gt_remove_tree(tmp);
  return gr_test_finish();
}
