/* Every form a cluster is read from (docs/distributed.md, "Cluster specs"): the cluster file
 * with task addresses, TensorFlow's ClusterSpec and TF_CONFIG, and Slurm's
 * node list; the task accessors; round trips through gr_cluster_write_json;
 * and malformed input of each form, whose message must say where. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

/* ---- helpers ------------------------------------------------------------------ */

static gr_cluster *parse(const char *text, const char *name) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(text, strlen(text), name, &c, &err), err);
  return c;
}

/* The checked-out task i: job, index, host, address (NULL: none). */
static void check_task(const gr_cluster *c, int i, const char *job, int index, const char *host,
                       const char *address) {
  const gr_cluster_task *t = gr_cluster_task_at(c, i);
  GR_CHECK_MSG(t != NULL, "no task %d", i);
  if (!t) return;
  GR_CHECK_MSG(strcmp(t->job, job) == 0, "task %d: job %s, want %s", i, t->job, job);
  GR_CHECK_EQ_INT(t->index, index);
  GR_CHECK_MSG(strcmp(t->host, host) == 0, "task %d: host %s, want %s", i, t->host, host);
  if (address)
    GR_CHECK_MSG(t->address && strcmp(t->address, address) == 0, "task %d: address %s, want %s", i,
                 t->address ? t->address : "(none)", address);
  else
    GR_CHECK_MSG(t->address == NULL, "task %d: address %s, want none", i, t->address);
  GR_CHECK_EQ_INT(gr_cluster_find_task(c, job, index), i);
}

static int failures;

/* The call failed, left *out NULL, and the message holds `where` and `what`. */
static void check_failed(gr_status s, gr_cluster *c, const gr_error *err, const char *input,
                         const char *where, const char *what) {
  GR_CHECK_MSG(s != GR_OK, "accepted: %s", input);
  GR_CHECK(c == NULL);
  failures++;
  if (s == GR_OK) {
    gr_cluster_free(c);
    return;
  }
  GR_CHECK_STR_CONTAINS(err->msg, where);
  GR_CHECK_STR_CONTAINS(err->msg, what);
}

static void bad_json(const char *text, const char *where, const char *what) {
  gr_cluster *c = (gr_cluster *)1;
  gr_error err;
  gr_status s = gr_cluster_parse_json(text, strlen(text), "c.json", &c, &err);
  check_failed(s, c, &err, text, where, what);
}

static void bad_tf(const char *text, const char *where, const char *what) {
  gr_cluster *c = (gr_cluster *)1;
  gr_cluster_self me = {.task = -7};
  gr_error err;
  gr_status s = gr_cluster_from_tf_config(text, &c, &me, &err);
  check_failed(s, c, &err, text, where, what);
  GR_CHECK_EQ_INT(me.task, -7); /* untouched on failure */
}

static void bad_slurm(const char *nodelist, int procid, int ntasks, const char *jobs, int port,
                      const char *where, const char *what) {
  gr_cluster *c = (gr_cluster *)1;
  gr_error err;
  gr_status s = gr_cluster_from_slurm(nodelist, procid, ntasks, jobs, port, &c, NULL, &err);
  check_failed(s, c, &err, nodelist ? nodelist : "(null)", where, what);
}

/* Writes c, reads it back and checks that the two are the same cluster. */
static void check_round_trip(const gr_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  gr_error err;
  FILE *f = open_memstream(&buf, &len);
  GR_CHECK_OK(gr_cluster_write_json(c, f, &err), err);
  fclose(f);
  gr_cluster *d = NULL;
  GR_CHECK_OK(gr_cluster_parse_json(buf, len, "written.json", &d, &err), err);
  if (d) {
    GR_CHECK_EQ_INT(gr_cluster_num_tasks(d), gr_cluster_num_tasks(c));
    for (int i = 0; i < gr_cluster_num_tasks(c) && i < gr_cluster_num_tasks(d); i++) {
      const gr_cluster_task *a = gr_cluster_task_at(c, i), *b = gr_cluster_task_at(d, i);
      GR_CHECK(strcmp(a->job, b->job) == 0 && a->index == b->index);
      GR_CHECK(strcmp(a->host, b->host) == 0);
      GR_CHECK((a->address == NULL) == (b->address == NULL));
      if (a->address && b->address) GR_CHECK(strcmp(a->address, b->address) == 0);
      GR_CHECK_EQ_INT(a->first_device, b->first_device);
      GR_CHECK_EQ_INT(a->num_devices, b->num_devices);
    }
    GR_CHECK_EQ_INT(gr_cluster_num_devices(d), gr_cluster_num_devices(c));
    for (int i = 0; i < gr_cluster_num_devices(c) && i < gr_cluster_num_devices(d); i++) {
      const gr_cluster_device *a = gr_cluster_device_at(c, i), *b = gr_cluster_device_at(d, i);
      GR_CHECK(strcmp(a->name, b->name) == 0);
      /* exact: the writer prints numbers that read back bit for bit */
      GR_CHECK(a->flops == b->flops && a->mem_bandwidth == b->mem_bandwidth &&
               a->overhead == b->overhead);
      for (int j = 0; j < gr_cluster_num_devices(c); j++)
        GR_CHECK_EQ_INT(gr_cluster_link_kind(c, i, j), gr_cluster_link_kind(d, i, j));
    }
    for (int k = 0; k < GR_LINK_COUNT; k++) {
      GR_CHECK(gr_cluster_get_link(c, k).latency == gr_cluster_get_link(d, k).latency);
      GR_CHECK(gr_cluster_get_link(c, k).bandwidth == gr_cluster_get_link(d, k).bandwidth);
    }
  } else {
    fprintf(stderr, "written:\n%s", buf);
  }
  free(buf);
  gr_cluster_free(d);
}

/* ---- the cluster file with addresses ----------------------------------------- */

static const char *file_form =
    "{\n"
    "  \"jobs\": {\n"
    "    \"ps\": [{\"address\": \"10.0.0.1:2222\", \"devices\": [{\"flops\": 5e10}]}],\n"
    "    \"worker\": [\n"
    "      {\"host\": \"w0\", \"address\": \"w0.example.org:2223\",\n"
    "       \"devices\": [{\"count\": 2, \"flops\": 1.1e11, \"overhead\": 3.3e-6}]},\n"
    "      {\"host\": \"w1\", \"devices\": [{\"flops\": 0.1}]},\n"
    "      {\"address\": \"[::1]:2224\", \"devices\": [{\"flops\": 1e11}]}\n"
    "    ]\n"
    "  },\n"
    "  \"links\": {\"cross_host\": {\"latency\": 1.7e-4, \"bandwidth\": 1.23456789e9}}\n"
    "}\n";

static void test_file_form(void) {
  gr_cluster *c = parse(file_form, "c.json");
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 4);
  check_task(c, 0, "ps", 0, "10.0.0.1", "10.0.0.1:2222"); /* host from the address */
  check_task(c, 1, "worker", 0, "w0", "w0.example.org:2223");
  check_task(c, 2, "worker", 1, "w1", NULL);
  check_task(c, 3, "worker", 2, "::1", "[::1]:2224");
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, 1)->first_device, 1);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, 1)->num_devices, 2);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, 3)->first_device, 4);
  GR_CHECK(gr_cluster_task_at(c, 4) == NULL && gr_cluster_task_at(c, -1) == NULL);
  GR_CHECK_EQ_INT(gr_cluster_find_task(c, "worker", 3), -1);
  GR_CHECK_EQ_INT(gr_cluster_find_task(c, "chief", 0), -1);
  GR_CHECK(strcmp(gr_cluster_device_at(c, 2)->name, "/job:worker/replica:0/task:0/device:CPU:1") ==
           0);
  GR_CHECK_EQ_INT(gr_cluster_device_at(c, 4)->task, 3);
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 0, 1), GR_LINK_CROSS_HOST);
  check_round_trip(c);
  gr_cluster_free(c);
}

static void test_example_file(void) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_load_json(GR_SOURCE_DIR "/examples/cluster.json", &c, &err), err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 3);
  check_task(c, 0, "ps", 0, "localhost", "localhost:2222");
  check_task(c, 2, "worker", 1, "localhost", "localhost:2224");
  gr_cluster_free(c);
}

/* ---- the builder: tasks, addresses, devices grouped by task ------------------- */

static void test_builder(void) {
  gr_cluster *c = gr_cluster_new();
  gr_error err;
  int a, b;
  GR_CHECK_OK(gr_cluster_add_task(c, "ps", "h0", &a, &err), err);
  GR_CHECK_OK(gr_cluster_add_task(c, "worker", "h1", &b, &err), err);
  GR_CHECK_OK(gr_cluster_add_device(c, b, 1e9, 1e9, 0, &err), err);
  GR_CHECK_OK(gr_cluster_add_device(c, b, 2e9, 1e9, 0, &err), err);
  /* a device of the earlier task goes before the worker's, which move up */
  GR_CHECK_OK(gr_cluster_add_device(c, a, 3e9, 1e9, 0, &err), err);
  GR_CHECK(strcmp(gr_cluster_device_at(c, 0)->name, "/job:ps/replica:0/task:0/device:CPU:0") == 0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 0)->flops, 3e9, 0);
  GR_CHECK(strcmp(gr_cluster_device_at(c, 2)->name, "/job:worker/replica:0/task:0/device:CPU:1") ==
           0);
  GR_CHECK_NEAR(gr_cluster_device_at(c, 2)->flops, 2e9, 0);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, b)->first_device, 1);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, b)->num_devices, 2);
  GR_CHECK_EQ_INT(gr_cluster_find_device(c, "/job:worker/task:0/device:CPU:1"), 2);
  GR_CHECK_EQ_INT(gr_cluster_task_at(c, a)->host_id, gr_cluster_device_at(c, 0)->host);

  GR_CHECK_OK(gr_cluster_set_task_address(c, a, "h0:1000", &err), err);
  GR_CHECK(gr_cluster_set_task_address(c, b, "H0:1000", &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "already the address of /job:ps/task:0");
  GR_CHECK(gr_cluster_set_task_address(c, b, "h1:0", &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:worker/task:0: address \"h1:0\": port 0 is out of range");
  GR_CHECK(gr_cluster_set_task_address(c, 9, "h1:1", &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_cluster_task_at(c, b)->address == NULL);
  GR_CHECK_OK(gr_cluster_set_task_address(c, a, NULL, &err), err); /* removes it */
  GR_CHECK(gr_cluster_task_at(c, a)->address == NULL);
  GR_CHECK_OK(gr_cluster_set_task_address(c, b, "h0:1000", &err), err); /* free again */
  check_round_trip(c);
  gr_cluster_free(c);

  char host[GR_CLUSTER_HOST_MAX];
  int port = 0;
  GR_CHECK_OK(gr_cluster_split_address("[fe80::1%eth0]:65535", host, sizeof host, &port, &err),
              err);
  GR_CHECK(strcmp(host, "fe80::1%eth0") == 0 && port == 65535);
  GR_CHECK_OK(gr_cluster_split_address("node-7.cluster_a:1", host, sizeof host, &port, &err), err);
  GR_CHECK(strcmp(host, "node-7.cluster_a") == 0 && port == 1);
  static const char *const bad[][2] = {
      {"", "empty address"},
      {"host", "missing port"},
      {"host:", "missing port"},
      {"host:65536", "port 65536 is out of range"},
      {"host:-1", "not a number"},
      {"::1:2222", "needs brackets"},
      {"[::1]2222", "missing \":port\" after ']'"},
      {"[1.2.3.4]:80", "not an IPv6 address"},
      {"grpc://h:1", "no scheme"},
      {"a b:1", "bad host name"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    GR_CHECK_MSG(gr_cluster_split_address(bad[i][0], host, sizeof host, &port, &err) ==
                     GR_ERR_INVALID_ARGUMENT,
                 "accepted %s", bad[i][0]);
    GR_CHECK_STR_CONTAINS(err.msg, bad[i][1]);
  }
  /* the task limit */
  c = gr_cluster_new();
  gr_status s = GR_OK;
  int n = 0;
  while (s == GR_OK && n <= GR_CLUSTER_MAX_TASKS)
    s = gr_cluster_add_task(c, "w", NULL, NULL, &err), n++;
  GR_CHECK_EQ_INT(n, GR_CLUSTER_MAX_TASKS + 1);
  GR_CHECK_STR_CONTAINS(err.msg, "more than 4096 tasks");
  gr_cluster_free(c);
}

static void test_file_form_errors(void) {
  bad_json("{\"jobs\": {\"w\": [{\"address\": \"h\", \"devices\": []}]}}",
           "c.json:1:29: jobs.w[0].address", "missing port");
  bad_json("{\"jobs\": {\"w\": [{\"address\": \"h:0\", \"devices\": []}]}}",
           "c.json:1:29: jobs.w[0].address", "port 0 is out of range 1..65535");
  bad_json("{\"jobs\": {\"w\": [{\"address\": \"h:70000\", \"devices\": []}]}}",
           "c.json:1:29: jobs.w[0].address", "port 70000 is out of range");
  bad_json("{\"jobs\": {\"w\": [{\"address\": 2222, \"devices\": []}]}}",
           "c.json:1:29: jobs.w[0].address", "must be a string, found a number");
  bad_json("{\"jobs\": {\"w\": [{\"address\": \"::1:2222\", \"devices\": []}]}}",
           "c.json:1:29: jobs.w[0].address", "needs brackets");
  bad_json("{\"jobs\": {\"ps\": [{\"address\": \"h:1\", \"devices\": [{\"flops\": 1}]}],\n"
           "          \"w\": [{\"address\": \"h:1\", \"devices\": []}]}}",
           "c.json:2:29: jobs.w[0].address", "already the address of /job:ps/task:0");
  bad_json("{\"jobs\": {\"w\": [{\"host\": \"[::1]\", \"devices\": []}]}}",
           "c.json:1:26: jobs.w[0].host", "without brackets");
}

/* ---- ClusterSpec --------------------------------------------------------------- */

static void test_cluster_spec(void) {
  const char *spec = "{\"chief\": [\"c0:2222\"],\n"
                     " \"ps\": [\"p0:2222\", \"p1:2222\"],\n"
                     " \"worker\": [\"w0:2222\", \"w0:2223\", \"[::1]:2222\"],\n"
                     " \"evaluator\": [\"e0:2222\"]}";
  gr_cluster *c = parse(spec, "spec.json");
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 7);
  check_task(c, 0, "chief", 0, "c0", "c0:2222");
  check_task(c, 2, "ps", 1, "p1", "p1:2222");
  check_task(c, 3, "worker", 0, "w0", "w0:2222");
  check_task(c, 4, "worker", 1, "w0", "w0:2223");
  check_task(c, 5, "worker", 2, "::1", "[::1]:2222");
  check_task(c, 6, "evaluator", 0, "e0", "e0:2222");
  GR_CHECK_EQ_INT(gr_cluster_num_devices(c), 7);
  const gr_cluster_device *d = gr_cluster_device_at(c, 4);
  GR_CHECK(strcmp(d->name, "/job:worker/replica:0/task:1/device:CPU:0") == 0);
  GR_CHECK(d->flops == GR_CLUSTER_DEFAULT_FLOPS &&
           d->mem_bandwidth == GR_CLUSTER_DEFAULT_MEM_BANDWIDTH &&
           d->overhead == GR_CLUSTER_DEFAULT_OVERHEAD);
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 3, 4), GR_LINK_SAME_HOST); /* both on w0 */
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 1, 2), GR_LINK_CROSS_HOST);
  check_round_trip(c);
  gr_cluster_free(c);
  /* jobs named like the other forms' keys are still jobs when they hold lists */
  c = parse("{\"cluster\": [\"a:1\"], \"jobs\": [\"b:1\"]}", "spec.json");
  if (c) check_task(c, 1, "jobs", 0, "b", "b:1");
  gr_cluster_free(c);
}

static void test_cluster_spec_errors(void) {
  bad_json("{\"worker\": [\"w0:1\",\n  \"w1:1\"\n  \"w2:1\"]}", "c.json:3:3",
           "']' expected near '\"w2:1\"'");
  bad_json("{\"worker\": [\"w0:1\"],\n \"ps\": [\"p:1\"],\n \"worker\": [\"w1:1\"]}", "c.json:3:2",
           "duplicate object key near '\"worker\"'");
  bad_json("{\"worker\": []}", "c.json:1:12: worker", "at least one task");
  bad_json("{\"worker\": \"w0:1\"}", "c.json:1:12: worker",
           "must be a list of \"host:port\" strings, found a string");
  bad_json("{\"job\": {\"w\": []}}", "c.json:1:9: job", "a cluster file has its jobs under");
  bad_json("{\"worker\": [2222]}", "c.json:1:13: worker[0]", "must be a string, found a number");
  bad_json("{}", "c.json:1:1", "no jobs");
  bad_json("{\"9x\": [\"h:1\"]}", "c.json:1:8: 9x", "bad job name");
  bad_json("{\"chief\": [\"a:1\", \"b:1\"]}", "c.json:1:11: chief", "one \"chief\" task, found 2");
  bad_json("{\"worker\": [\"w0:1\", \"w1:http\"]}", "c.json:1:21: worker[1]", "not a number");
  bad_json("{\"worker\": [\"\"]}", "c.json:1:13: worker[0]", "empty address");
  bad_json("{\"worker\": [\"[::1:2222\"]}", "c.json:1:13: worker[0]", "'[' without ']'");
  bad_json("{\"worker\": [\"w:1\", \"W:1\"]}", "c.json:1:20: worker[1]", "already the address");
}

/* ---- TF_CONFIG ----------------------------------------------------------------- */

static const char *tf_config = "{\"cluster\": {\"chief\": [\"host0:2222\"],\n"
                               "             \"worker\": [\"host1:2222\", \"host2:2222\"],\n"
                               "             \"ps\": [\"host3:2222\"]},\n"
                               " \"task\": {\"type\": \"worker\", \"index\": 1},\n"
                               " \"environment\": \"cloud\", \"rpc_layer\": \"grpc\"}";

static void test_tf_config(void) {
  gr_cluster *c = NULL;
  gr_cluster_self me = {.task = -1};
  gr_error err;
  GR_CHECK_OK(gr_cluster_from_tf_config(tf_config, &c, &me, &err), err);
  if (!c) return;
  GR_CHECK(strcmp(me.job, "worker") == 0);
  GR_CHECK_EQ_INT(me.index, 1);
  GR_CHECK_EQ_INT(me.task, 2);
  check_task(c, me.task, "worker", 1, "host2", "host2:2222");
  check_task(c, 0, "chief", 0, "host0", "host0:2222");
  check_task(c, 3, "ps", 0, "host3", "host3:2222");
  gr_cluster_free(c);
  /* the same text through the one entry point: the same cluster, task dropped */
  c = parse(tf_config, "tf.json");
  if (c) {
    GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 4);
    check_task(c, 2, "worker", 1, "host2", "host2:2222");
    check_round_trip(c);
  }
  gr_cluster_free(c);
  /* the chief, index left out (0), and from the environment */
  setenv("TF_CONFIG",
         "{\"cluster\": {\"chief\": [\"localhost:2222\"], \"worker\": [\"localhost:2223\"]},"
         " \"task\": {\"type\": \"chief\"}}",
         1);
  GR_CHECK_OK(gr_cluster_from_tf_config_env(&c, &me, &err), err);
  GR_CHECK(strcmp(me.job, "chief") == 0 && me.index == 0 && me.task == 0);
  if (c) check_task(c, 1, "worker", 0, "localhost", "localhost:2223");
  gr_cluster_free(c);
  unsetenv("TF_CONFIG");
  c = (gr_cluster *)1;
  GR_CHECK(gr_cluster_from_tf_config_env(&c, &me, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(c == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "TF_CONFIG: not set");
}

static void test_tf_config_errors(void) {
  const char *cl = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, ";
  char buf[512];
#define TF(rest) (snprintf(buf, sizeof buf, "%s%s", cl, rest), buf)
  /* cl is 40 characters: "task" starts at column 41 */
  bad_tf(TF("\"task\": {\"type\": \"worker\", \"index\": 2}}"), "TF_CONFIG:1:77: task.index",
         "2 is out of range: job \"worker\" has 2 tasks (0..1)");
  bad_tf(TF("\"task\": {\"type\": \"worker\", \"index\": -1}}"), "TF_CONFIG:1:77: task.index",
         "-1 is out of range");
  bad_tf(TF("\"task\": {\"type\": \"worker\", \"index\": \"1\"}}"), "TF_CONFIG:1:77: task.index",
         "must be an integer, found a string");
  bad_tf(TF("\"task\": {\"type\": \"master\", \"index\": 0}}"), "TF_CONFIG:1:58: task.type",
         "unknown task type \"master\": the cluster's jobs are worker");
  bad_tf(TF("\"task\": {\"index\": 0}}"), "TF_CONFIG:1:49: task", "missing \"type\"");
  bad_tf(TF("\"task\": {\"type\": \"worker\", \"id\": 0}}"), "TF_CONFIG:1:74: task.id",
         "unknown key \"id\"");
  bad_tf(TF("\"task\": [\"worker\", 0]}"), "TF_CONFIG:1:49: task", "must be an object");
  bad_tf(TF("\"environment\": 1}"), "TF_CONFIG:1:56: environment", "must be a string");
  bad_tf(TF("\"tasks\": {}}"), "TF_CONFIG:1:50: tasks", "unknown key \"tasks\"");
  bad_tf("{\"cluster\": {\"worker\": [\"a:1\"]}}", "TF_CONFIG:1:1", "missing \"task\"");
  bad_tf("{\"task\": {\"type\": \"worker\"}}", "TF_CONFIG:1:1", "missing \"cluster\"");
  bad_tf("{\"cluster\": 5, \"task\": {\"type\": \"worker\"}}", "TF_CONFIG:1:13: cluster",
         "must be an object, found a number");
  bad_tf("{\"cluster\": {\"worker\": [\"a:99999\"]}, \"task\": {\"type\": \"worker\"}}",
         "TF_CONFIG:1:25: cluster.worker[0]", "port 99999 is out of range");
  bad_tf("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\",}}",
         "TF_CONFIG:1:60", "string or '}' expected near '}'");
  bad_tf("", "TF_CONFIG:1:1", "expected near end of file");
#undef TF
}

/* ---- Slurm --------------------------------------------------------------------- */

static void test_slurm(void) {
  gr_cluster *c = NULL;
  gr_cluster_self me;
  gr_error err;
  /* 7 nodes, 9 tasks: tasks 7 and 8 wrap onto the first two nodes, next port */
  GR_CHECK_OK(gr_cluster_from_slurm("node[01-03,07],gpu5,big[1-2]", 8, 9, "ps:2,worker", 2222, &c,
                                    &me, &err),
              err);
  if (!c) return;
  GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 9);
  check_task(c, 0, "ps", 0, "node01", "node01:2222");
  check_task(c, 1, "ps", 1, "node02", "node02:2222");
  check_task(c, 2, "worker", 0, "node03", "node03:2222");
  check_task(c, 3, "worker", 1, "node07", "node07:2222");
  check_task(c, 4, "worker", 2, "gpu5", "gpu5:2222");
  check_task(c, 5, "worker", 3, "big1", "big1:2222");
  check_task(c, 6, "worker", 4, "big2", "big2:2222");
  check_task(c, 7, "worker", 5, "node01", "node01:2223");
  check_task(c, 8, "worker", 6, "node02", "node02:2223");
  GR_CHECK(strcmp(me.job, "worker") == 0 && me.index == 6 && me.task == 8);
  GR_CHECK_EQ_INT(gr_cluster_link_kind(c, 0, 7), GR_LINK_SAME_HOST);
  check_round_trip(c);
  gr_cluster_free(c);

  /* two bracket groups in one name; padding from the lower bound; jobs NULL */
  GR_CHECK_OK(gr_cluster_from_slurm("r[1-2]n[8-10]", 0, 6, NULL, 5000, &c, &me, &err), err);
  if (c) {
    check_task(c, 0, "worker", 0, "r1n8", "r1n8:5000");
    check_task(c, 2, "worker", 2, "r1n10", "r1n10:5000");
    check_task(c, 5, "worker", 5, "r2n10", "r2n10:5000");
  }
  GR_CHECK(strcmp(me.job, "worker") == 0 && me.index == 0 && me.task == 0);
  gr_cluster_free(c);
  /* a long list (more nodes than tasks): only the first ntasks are used */
  GR_CHECK_OK(gr_cluster_from_slurm("n[000001-999999]", 1, 2, "chief:1,worker:1", 1, &c, &me, &err),
              err);
  if (c) check_task(c, 1, "worker", 0, "n000002", "n000002:1");
  gr_cluster_free(c);

  /* from the environment */
  setenv("SLURM_JOB_NODELIST", "cn[1-2]", 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_NODEID", "1", 1);
  GR_CHECK_OK(gr_cluster_from_slurm_env("ps:1,worker:3", 7000, &c, &me, &err), err);
  if (c) check_task(c, 3, "worker", 2, "cn2", "cn2:7001");
  GR_CHECK(strcmp(me.job, "worker") == 0 && me.index == 2 && me.task == 3);
  gr_cluster_free(c);
  /* Slurm says it put task 3 on node 0, where the block distribution does
   * not: refused, not mis-bound */
  setenv("SLURM_NODEID", "0", 1);
  c = (gr_cluster *)1;
  GR_CHECK(gr_cluster_from_slurm_env("ps:1,worker:3", 7000, &c, &me, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(c == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_NODEID=0: task 3");
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_DISTRIBUTION=block over the job's nodes");
  failures++;
  unsetenv("SLURM_NODEID");
  setenv("SLURM_PROCID", "x", 1);
  GR_CHECK(gr_cluster_from_slurm_env(NULL, 7000, &c, &me, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_PROCID=\"x\" is not a non-negative integer");
  failures++;
  unsetenv("SLURM_JOB_NODELIST");
  GR_CHECK(gr_cluster_from_slurm_env(NULL, 7000, &c, &me, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_JOB_NODELIST is not set");
  failures++;
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
}

static void test_slurm_errors(void) {
  const char *nl = "SLURM_JOB_NODELIST:1:";
  char where[64];
#define AT(col) (snprintf(where, sizeof where, "%s%d:", nl, col), where)
  bad_slurm("node[3-1]", 0, 1, NULL, 2222, AT(6), "descending range 3-1 (in \"node[3-1]\")");
  bad_slurm("node[", 0, 1, NULL, 2222, AT(5), "'[' is not closed");
  bad_slurm("node[1-3", 0, 1, NULL, 2222, AT(5), "'[' is not closed");
  bad_slurm("", 0, 1, NULL, 2222, "SLURM_JOB_NODELIST: empty node list", "");
  bad_slurm("a,,b", 0, 1, NULL, 2222, AT(3), "empty node name");
  bad_slurm("a,b,", 0, 1, NULL, 2222, AT(5), "empty node name");
  bad_slurm("node]", 0, 1, NULL, 2222, AT(5), "']' without '['");
  bad_slurm("node[1-]", 0, 1, NULL, 2222, AT(8), "expected a number in the range list, found ']'");
  bad_slurm("node[]", 0, 1, NULL, 2222, AT(6), "expected a number");
  bad_slurm("node[1;2]", 0, 1, NULL, 2222, AT(7), "expected ',' or ']'");
  bad_slurm("no de", 0, 1, NULL, 2222, AT(3), "bad character ' ' in a node name");
  bad_slurm("a,n[1234567890]", 0, 1, NULL, 2222, AT(5), "longer than 9 digits");
  bad_slurm("b,a[1-2],a2", 0, 4, NULL, 2222, AT(10), "node \"a2\" is listed twice");
  char longname[300];
  memset(longname, 'x', 250);
  strcpy(longname + 250, "[1000-1001]");
  bad_slurm(longname, 0, 1, NULL, 2222, AT(1), "longer than 253 characters");
  bad_slurm(NULL, 0, 1, NULL, 2222, "SLURM_JOB_NODELIST: no node list", "");
  /* the numbers */
  bad_slurm("a,b", 4, 4, NULL, 2222, "SLURM_PROCID=4: must be in 0..3 (SLURM_NTASKS=4)", "");
  bad_slurm("a,b", -1, 4, NULL, 2222, "SLURM_PROCID=-1", "must be in 0..3");
  bad_slurm("a,b", 0, 0, NULL, 2222, "SLURM_NTASKS=0: must be in 1..4096", "");
  bad_slurm("a,b", 0, 5000, NULL, 2222, "SLURM_NTASKS=5000: must be in 1..4096", "");
  bad_slurm("a,b", 0, 2, NULL, 0, "slurm: base port 0 is out of 1..65535", "");
  bad_slurm("a,b", 0, 5, NULL, 65534, "slurm: 5 tasks on 2 nodes need ports 65534..65536", "");
  /* the jobs */
  bad_slurm("a,b", 0, 5, "ps:1,worker:3", 2222,
            "slurm jobs \"ps:1,worker:3\":1:1:", "the jobs have 4 tasks, SLURM_NTASKS=5");
  bad_slurm("a,b", 0, 2, "ps:0,worker", 2222,
            "slurm jobs \"ps:0,worker\":1:4:", "task count must be in 1..4096");
  bad_slurm("a,b", 0, 3, "ps:1,,worker", 2222,
            "slurm jobs \"ps:1,,worker\":1:6:", "empty job name");
  bad_slurm("a,b", 0, 3, "ps,worker", 2222,
            "slurm jobs \"ps,worker\":1:4:", "two jobs without a task count");
  bad_slurm("a,b", 0, 3, "ps:1,ps:2", 2222,
            "slurm jobs \"ps:1,ps:2\":1:6:", "job \"ps\" is named twice");
  bad_slurm("a,b", 0, 3, "ps:x", 2222, "slurm jobs \"ps:x\":1:4:", "not a number");
  bad_slurm("a,b", 0, 3, "p s:3", 2222, "slurm jobs \"p s:3\":1:1:", "bad job name");
  bad_slurm("a,b", 0, 2, "ps:2,worker", 2222,
            "slurm jobs \"ps:2,worker\":1:1:", "none are left for \"worker\"");
#undef AT
}

int main(void) {
  GR_RUN(test_file_form);
  GR_RUN(test_example_file);
  GR_RUN(test_builder);
  GR_RUN(test_file_form_errors);
  GR_RUN(test_cluster_spec);
  GR_RUN(test_cluster_spec_errors);
  GR_RUN(test_tf_config);
  GR_RUN(test_tf_config_errors);
  GR_RUN(test_slurm);
  GR_RUN(test_slurm_errors);
  printf("%d malformed inputs refused with their location\n", failures);
  return gr_test_finish();
}
