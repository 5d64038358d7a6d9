/* The cluster model and its JSON file: valid files, every malformed form
 * with its line:column, the round trip through gr_cluster_write_json, and
 * random mutations that must never crash. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

static const char *good =
    "{\n"
    "  \"jobs\": {\n"
    "    \"ps\": [{\"host\": \"h0\", \"devices\": [{\"flops\": 1e9}]}],\n"
    "    \"worker\": [\n"
    "      {\"host\": \"h0\", \"devices\": [{\"type\": \"CPU\", \"count\": 2, \"flops\": 2e10,\n"
    "                                   \"mem_bandwidth\": 5e9, \"overhead\": 0}]},\n"
    "      {\"host\": \"h1\", \"devices\": [{\"flops\": 3e10}]}\n"
    "    ]\n"
    "  },\n"
    "  \"links\": {\"same_host\": {\"latency\": 2e-5, \"bandwidth\": 4e9},\n"
    "            \"cross_host\": {\"bandwidth\": 1e9}}\n"
    "}\n";

static void test_parse_good(void) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(good, strlen(good), "c.json", &c, &err), err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_devices(c), 4);
  GR_CHECK_STR_CONTAINS(gr_cluster_device_at(c, 0)->name, "/job:ps/replica:0/task:0/device:CPU:0");
  GR_CHECK(strcmp(gr_cluster_device_at(c, 2)->name, "/job:worker/replica:0/task:0/device:CPU:1") ==
           0);
  GR_CHECK(strcmp(gr_cluster_device_at(c, 3)->name, "/job:worker/replica:0/task:1/device:CPU:0") ==
           0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 1)->flops, 2e10, 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 1)->mem_bandwidth, 5e9, 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 0)->overhead, 1e-6, 0); /* default */
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 1, 2), GR_LINK_SAME_TASK);
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 0, 1), GR_LINK_SAME_HOST);
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 0, 3), GR_LINK_CROSS_HOST);
  GR_CHECK_NEAR(gr_cluster_transfer_time(c, 0, 1, 4e9), 2e-5 + 1.0, 1e-12);
  /* cross_host latency keeps its default when only bandwidth is given */
  GR_CHECK_NEAR(gr_cluster_transfer_time(c, 0, 3, 1e9), 100e-6 + 1.0, 1e-12);
  GR_CHECK_NEAR(gr_cluster_transfer_time(c, 2, 2, 1e9), 0, 0);
  GR_CHECK_EQ_INT(gr_cluster_find_device(c, "/job:worker/task:1"), 3);
  GR_CHECK_EQ_INT(gr_cluster_find_device(c, "/job:worker/task:0"), -1); /* two match */
  GR_CHECK_EQ_INT(gr_cluster_find_device(c, "/job:nope"), -1);
  gr_cluster_free(c);
}

/* Each bad file fails with a message naming the file and line:col and what is wrong. */
static void check_bad(const char *text, const char *where, const char *what) {
  gr_cluster *c = (gr_cluster *)1;
  gr_error err;
  gr_status s = gr_cluster_parse_json(text, strlen(text), "bad.json", &c, &err);
  GR_CHECK_MSG(s != GR_OK, "accepted: %s", text);
  GR_CHECK(c == NULL);
  if (s == GR_OK) {
    gr_cluster_free(c);
    return;
  }
  GR_CHECK_STR_CONTAINS(err.msg, where);
  GR_CHECK_STR_CONTAINS(err.msg, what);
}

static void test_parse_errors(void) {
  /* syntax (jansson's message, at the offending token's first character) */
  check_bad("", "bad.json:1:1", "expected near end of file");
  check_bad("{", "bad.json:1:2", "string or '}' expected near end of file");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1},]}]}}", "bad.json:1:43",
            "unexpected token near ']'");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 01}]}]}}", "1:40", "invalid token");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1e999}]}]}}", "bad.json:1:40",
            "real number overflow");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1, \"flops\": 2}]}]}}", "1:43",
            "duplicate object key near '\"flops\"'");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]}} x", "1:48",
            "end of file expected");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"a\\qb\", \"devices\": []}]}}", "1:26",
            "invalid escape");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"ab", "1:26", "premature end of input");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"a\x01\"}]}}", "1:", "control character 0x1");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"\xff\"}]}}", "1:", "unable to decode byte 0xff");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"\\ud800x\"}]}}", "1:26", "invalid Unicode");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"\\u0000\"}]}}", "1:26", "\\u0000 is not allowed");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]}, \"x\": nul}", "1:53",
            "invalid token near 'nul'");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]}} // comment", "1:48",
            "end of file expected near '/'");
  check_bad("{'jobs': 1}", "1:2", "string or '}' expected");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": -}]}]}}", "1:40", "invalid token");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1.}]}]}}", "1:40", "invalid token");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1e}]}]}}", "1:40", "invalid token");
  /* line counting, and columns in characters after a multi-byte one */
  check_bad("{\n\n  \"jobs\": {\"w\": [{\"devices\": [{\"flops\": tru}]}]}}", "bad.json:3:41",
            "invalid token");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"\xc3\xa9\", \"devices\": [x]}]}}", "bad.json:1:43",
            "invalid token near 'x'");
  /* deep nesting is refused, not a stack overflow */
  size_t nd = 5000;
  char *deep = malloc(nd + 1);
  memset(deep, '[', nd);
  deep[nd] = '\0';
  check_bad(deep, "bad.json:1:", "depth");
  free(deep);

  /* after parsing: the value's line:column and its JSON path */
  check_bad("{\"jobs\": {}}", "bad.json:1:10: jobs", "no devices");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{}]}]}}", "bad.json:1:30: jobs.w[0].devices[0]",
            "missing \"flops\"");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": -1}]}]}}",
            "bad.json:1:40: jobs.w[0].devices[0].flops", "must be > 0");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 0}]}]}}", "1:40", "> 0");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": \"fast\"}]}]}}",
            "1:40: jobs.w[0].devices[0].flops", "must be a number, found a string");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1, \"gpus\": 2}]}]}}",
            "1:51: jobs.w[0].devices[0].gpus", "unknown key \"gpus\"");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"type\": \"GPU\", \"flops\": 1}]}]}}",
            "1:39: jobs.w[0].devices[0].type", "unknown device type");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"count\": 1.5, \"flops\": 1}]}]}}",
            "1:40: jobs.w[0].devices[0].count", "integer");
  check_bad("{\"jobs\": {\"9w\": [{\"devices\": [{\"flops\": 1}]}]}}", "1:17: jobs.9w",
            "bad job name");
  check_bad("{\"jobs\": {\"w\": {\"devices\": []}}}", "1:16: jobs.w", "must be an array");
  check_bad("{\"jobs\": {\"w\": []}}", "1:16: jobs.w", "at least one task");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"\", \"devices\": [{\"flops\": 1}]}]}}",
            "1:26: jobs.w[0].host", "empty host name");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"a b\", \"devices\": [{\"flops\": 1}]}]}}",
            "1:26: jobs.w[0].host", "bad host name");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]},\n \"links\": {\"lan\": {}}}",
            "bad.json:2:19: links.lan", "unknown key \"lan\"");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]},\n \"links\": {\"same_host\": "
            "{\"bandwidth\": 0}}}",
            "bad.json:2:39: links.same_host.bandwidth", "> 0");
  check_bad("[1, 2]", "bad.json:1:1", "must be an object, found an array");
  check_bad("{\"jobs\": 5}", "bad.json:1:10: jobs", "must be an object, found a number");
  check_bad("{\"links\": {}}", "bad.json:1:1", "missing \"jobs\"");
  /* a path through keys with escapes and other members before it */
  check_bad("{\"links\": {}, \"jobs\": {\"w\\u0031\": [{\"devices\": [], \"host\": \"a\"},\n"
            "  {\"host\": \"b\", \"devices\": [{\"flops\": 1, \"overhead\": -2}]}]}}",
            "bad.json:2:54: jobs.w1[1].devices[0].overhead", ">= 0");
}

/* c written as a cluster file and read back (NULL on failure, checked). */
static gr_cluster *rewritten(const gr_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  gr_cluster *d = NULL;
  gr_error err;
  FILE *f = open_memstream(&buf, &len);
  GR_CHECK_OK(gr_cluster_write_json(c, f, &err), err);
  fclose(f);
  GR_CHECK_OK(gr_cluster_parse_json(buf, len, "written.json", &d, &err), err);
  free(buf);
  return d;
}

static void test_round_trip(void) {
  gr_cluster *c = NULL, *d = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(good, strlen(good), "c.json", &c, &err), err);
  if (!c) return;
  d = rewritten(c);
  if (d) {
    GR_CHECK_EQ_INT(gr_cluster_num_devices(d), gr_cluster_num_devices(c));
    for (int i = 0; i < gr_cluster_num_devices(c); i++) {
      GR_CHECK(strcmp(gr_cluster_device_at(c, i)->name, gr_cluster_device_at(d, i)->name) == 0);
      GR_CHECK_NEAR(gr_cluster_device_at(c, i)->flops, gr_cluster_device_at(d, i)->flops, 1e4);
      for (int j = 0; j < gr_cluster_num_devices(c); j++)
        GR_CHECK_EQ_INT(gr_cluster_link_kind(c, i, j), gr_cluster_link_kind(d, i, j));
    }
    for (int k = 0; k < GR_LINK_COUNT; k++) {
      GR_CHECK_NEAR(gr_cluster_get_link(c, k).bandwidth, gr_cluster_get_link(d, k).bandwidth, 1e4);
      GR_CHECK_NEAR(gr_cluster_get_link(c, k).latency, gr_cluster_get_link(d, k).latency, 1e-11);
    }
  }
  gr_cluster_free(c);
  gr_cluster_free(d);
}

/* What graphrun calibrate measures of the runtime: per link kind the step a
 * task adds; per task its inter-op threads; per host its cores; per device
 * its time scale. A file without them (as files were before) reads with the
 * defaults; each round-trips. */
static const char *runtime =
    "{\"jobs\": {\"worker\": [\n"
    "   {\"host\": \"a\", \"address\": \"a:1\", \"threads\": 2,\n"
    "    \"devices\": [{\"flops\": 1e9, \"time_scale\": 1.25}]},\n"
    "   {\"host\": \"b\", \"address\": \"b:1\", \"devices\": [{\"flops\": 1e9}]}]},\n"
    " \"links\": {\"same_task\": {\"step\": 3e-6}, \"same_host\": {\"step\": 2e-5},\n"
    "           \"cross_host\": {\"latency\": 1e-4, \"bandwidth\": 1e9, \"step\": 4e-4}},\n"
    " \"hosts\": {\"a\": {\"cores\": 4}}}\n";

static void test_runtime_figures(void) {
  gr_cluster *c = NULL, *d = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(runtime, strlen(runtime), "r.json", &c, &err), err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, 0)->threads, 2);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, 1)->threads, 1);
  GR_CHECK_EQ_INT(gr_cluster_host_cores(c, gr_cluster_task_at(c, 0)->host_id), 4);
  GR_CHECK_EQ_INT(gr_cluster_host_cores(c, gr_cluster_task_at(c, 1)->host_id), 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 0)->time_scale, 1.25, 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 1)->time_scale, 1, 0);
  GR_CHECK_NEAR(gr_cluster_get_link(c, GR_LINK_SAME_TASK).step, 3e-6, 0);
  GR_CHECK_NEAR(gr_cluster_get_link(c, GR_LINK_SAME_TASK).latency, 1e-6, 0); /* default */
  GR_CHECK_NEAR(gr_cluster_get_link(c, GR_LINK_CROSS_HOST).step, 4e-4, 0);
  /* the client is on the first worker's host: a's task is same-host, b's cross-host */
  GR_CHECK_NEAR(gr_cluster_task_step(c, 0), 2e-5, 0);
  GR_CHECK_NEAR(gr_cluster_task_step(c, 1), 4e-4, 0);
  d = rewritten(c);
  if (d) {
    GR_CHECK_EQ_INT(gr_cluster_task_at(d, 0)->threads, 2);
    GR_CHECK_EQ_INT(gr_cluster_host_cores(d, gr_cluster_task_at(d, 0)->host_id), 4);
    GR_CHECK_NEAR(gr_cluster_device_at(d, 0)->time_scale, 1.25, 0);
    for (int k = 0; k < GR_LINK_COUNT; k++)
      GR_CHECK_NEAR(gr_cluster_get_link(d, k).step, gr_cluster_get_link(c, k).step, 0);
  }
  gr_cluster_free(d);
  /* a file of the former format: every new figure at its default */
  GR_CHECK_OK(gr_cluster_parse_json(good, strlen(good), "old.json", &d, &err), err);
  if (d) {
    GR_CHECK_EQ_INT(gr_cluster_task_at(d, 1)->threads, 1);
    GR_CHECK_EQ_INT(gr_cluster_host_cores(d, 0), 0);
    GR_CHECK_NEAR(gr_cluster_device_at(d, 1)->time_scale, 1, 0);
    GR_CHECK_NEAR(gr_cluster_get_link(d, GR_LINK_SAME_TASK).step, 0, 0);
    GR_CHECK_NEAR(gr_cluster_get_link(d, GR_LINK_SAME_HOST).step, 50e-6, 0);
    GR_CHECK_NEAR(gr_cluster_get_link(d, GR_LINK_CROSS_HOST).step, 200e-6, 0);
    GR_CHECK_NEAR(gr_cluster_task_step(d, 1), 0, 0); /* no address: no server to reach */
  }
  gr_cluster_free(d);
  /* fitting the servers' time scale multiplies every device of a task with an address */
  GR_CHECK_OK(gr_cluster_scale_servers(c, 2, &err), err);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 0)->time_scale, 2.5, 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 1)->time_scale, 2, 0);
  GR_CHECK(gr_cluster_scale_servers(c, -1, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_cluster_set_task_threads(c, 0, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:worker/task:0: threads must be in [1, 1024]");
  GR_CHECK(gr_cluster_set_host_cores(c, "nowhere", 2, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "no task is on host \"nowhere\"");
  gr_cluster_free(c);
  /* the new keys' errors name the value's place */
  check_bad("{\"jobs\": {\"w\": [{\"threads\": 0, \"devices\": [{\"flops\": 1}]}]}}", "1:29",
            "jobs.w[0].threads: must be an integer in [1, 1024]");
  check_bad("{\"jobs\": {\"w\": [{\"threads\": 1.5, \"devices\": [{\"flops\": 1}]}]}}", "1:29",
            "must be an integer");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1, \"time_scale\": 0}]}]}}", "1:57",
            "jobs.w[0].devices[0].time_scale: must be > 0 (got 0)");
  check_bad("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1}]}]}, \"links\": {\"same_host\": "
            "{\"step\": -1}}}",
            "bad.json:1:", "links.same_host.step: must be >= 0 (got -1)");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"a\", \"devices\": [{\"flops\": 1}]}]}, \"hosts\": "
            "{\"b\": {\"cores\": 2}}}",
            "bad.json:1:", "hosts.b: no task is on this host");
  check_bad("{\"jobs\": {\"w\": [{\"host\": \"a\", \"devices\": [{\"flops\": 1}]}]}, \"hosts\": "
            "{\"a\": {\"cpus\": 2}}}",
            "bad.json:1:", "hosts.a");
}

static void test_load_file_errors(void) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK(gr_cluster_load_json("/nonexistent/cluster.json", &c, &err) == GR_ERR_IO);
  GR_CHECK_STR_CONTAINS(err.msg, "/nonexistent/cluster.json");
  char path[] = "/tmp/gr_test_clusterXXXXXX";
  int fd = mkstemp(path);
  GR_CHECK(fd >= 0);
  if (fd < 0) return;
  FILE *f = fdopen(fd, "w");
  fputs("{\"jobs\": {\"w\": [{\"devices\": [{\"flops\": 1e9, \"count\": 3}]}]}}\n", f);
  fclose(f);
  GR_CHECK_OK(gr_cluster_load_json(path, &c, &err), err);
  if (c) GR_CHECK_EQ_INT(gr_cluster_num_devices(c), 3);
  gr_cluster_free(c);
  remove(path);
}

static void test_builder_errors(void) {
  gr_cluster *c = gr_cluster_new();
  gr_error err;
  int t;
  GR_CHECK(gr_cluster_add_task(c, "bad job", NULL, &t, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "bad job");
  GR_CHECK(gr_cluster_add_device(c, 0, 1e9, 1e9, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_OK(gr_cluster_add_task(c, "w", NULL, &t, &err), err);
  GR_CHECK(gr_cluster_add_device(c, t, NAN, 1e9, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_cluster_add_device(c, t, 1e9, 1e9, -1, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_OK(gr_cluster_add_device(c, t, 1e9, 1e9, 0, &err), err);
  GR_CHECK_EQ_INT(gr_cluster_num_devices(c), 1);
  gr_cluster_free(c);
}

/* Random byte mutations of a valid file: parse or fail cleanly, never crash. */
static void test_mutations(void) {
  size_t n = strlen(good);
  char *buf = malloc(n + 1);
  uint64_t s = 12345;
  int ok = 0, failed = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(buf, good, n + 1);
    int muts = 1 + (int)(it % 4);
    size_t len = n;
    for (int m = 0; m < muts; m++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      size_t pos = (size_t)(s >> 33) % len;
      int op = (int)((s >> 20) % 3);
      if (op == 0)
        buf[pos] = (char)(s >> 40);
      else if (op == 1)
        len = pos; /* truncate */
      else
        buf[pos] = "{}[],:\"\\0e-."[(s >> 44) % 12];
      if (len == 0) break;
    }
    gr_cluster *c = NULL;
    gr_error err;
    if (gr_cluster_parse_json(buf, len, "m.json", &c, &err) == GR_OK) {
      ok++;
      GR_CHECK(gr_cluster_num_devices(c) > 0);
      gr_cluster_free(c);
    } else {
      failed++;
      GR_CHECK_STR_CONTAINS(err.msg, "m.json:");
    }
  }
  GR_CHECK(failed > 0);
  free(buf);
}

int main(void) {
  GR_RUN(test_parse_good);
  GR_RUN(test_parse_errors);
  GR_RUN(test_round_trip);
  GR_RUN(test_runtime_figures);
  GR_RUN(test_load_file_errors);
  GR_RUN(test_builder_errors);
  GR_RUN(test_mutations);
  return gr_test_finish();
}
