/* TensorFlow's forms of a cluster: a ClusterSpec ({"ps": ["host:port"],
 * "worker": [...]}) and TF_CONFIG ({"cluster": ClusterSpec, "task": {"type":
 * "worker", "index": 1}}). Each task gets its address, the address's host
 * and one CPU device with the default rates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_json_internal.h"

/* One job: a list of "host:port" strings. */
static gr_status read_job(gr_jreader *r, gr_cluster *c, const char *job, const json_t *tasks) {
  char why[256];
  if (gr_cluster_job_problem(job, why, sizeof why)) return gr_jreader_fail(r, "%s", why);
  if (!json_is_array(tasks))
    return gr_jreader_fail(
        r, "a job must be a list of \"host:port\" strings, found %s%s", gr_jreader_type_name(tasks),
        json_is_object(tasks) ? " (a cluster file has its jobs under \"jobs\")" : "");
  size_t n = json_array_size(tasks);
  if (n == 0) return gr_jreader_fail(r, "a job needs at least one task");
  if (n > 1 && (strcmp(job, "chief") == 0 || strcmp(job, "evaluator") == 0))
    return gr_jreader_fail(r, "TensorFlow allows one \"%s\" task, found %zu", job, n);
  for (size_t i = 0; i < n; i++) {
    const json_t *a = json_array_get(tasks, i);
    gr_jreader_push_index(r, (int)i);
    GR_TRY(gr_jreader_want(r, a, JSON_STRING, "a task's address (\"host:port\")"));
    const char *address = json_string_value(a);
    char host[GR_CLUSTER_HOST_MAX];
    int port;
    if (gr_cluster_address_problem(address, host, sizeof host, &port, why, sizeof why))
      return gr_jreader_fail(r, "%s", why);
    gr_status s = gr_cluster_add_task_at(c, job, address, 1, NULL, r->err);
    if (s != GR_OK) return gr_jreader_wrap(r, s);
    gr_jreader_pop(r);
  }
  return GR_OK;
}

gr_status gr_cluster_read_spec(gr_jreader *r, const json_t *spec, gr_cluster *c) {
  GR_TRY(gr_jreader_want(r, spec, JSON_OBJECT, "a ClusterSpec"));
  if (json_object_size(spec) == 0)
    return gr_jreader_fail(r, "no jobs (a ClusterSpec is {\"worker\": [\"host:port\", ...]})");
  const char *job;
  json_t *tasks;
  json_object_foreach((json_t *)spec, job, tasks) {
    gr_jreader_push_key(r, job);
    GR_TRY(read_job(r, c, job, tasks));
    gr_jreader_pop(r);
  }
  return GR_OK;
}

/* "task": {"type": T, "index": I} of cluster c into *self. */
static gr_status read_task(gr_jreader *r, const json_t *task, const gr_cluster *c,
                           gr_cluster_self *self) {
  static const char *const keys[] = {"type", "index", "trial", "cloud"};
  GR_TRY(gr_jreader_want(r, task, JSON_OBJECT, "\"task\" ({\"type\": ..., \"index\": ...})"));
  GR_TRY(gr_jreader_check_keys(r, task, keys, 4));
  const json_t *type = json_object_get(task, "type"), *index = json_object_get(task, "index");
  if (!type) return gr_jreader_fail(r, "missing \"type\" (the job of this task)");
  gr_jreader_push_key(r, "type");
  GR_TRY(gr_jreader_want(r, type, JSON_STRING, NULL));
  const char *job = json_string_value(type);
  if (gr_cluster_find_task(c, job, 0) < 0) {
    char jobs[256] = "";
    size_t m = 0;
    for (int t = 0; t < gr_cluster_num_tasks(c) && m < sizeof jobs; t++) {
      const gr_cluster_task *k = gr_cluster_task_at(c, t);
      if (k->index == 0)
        m += (size_t)snprintf(jobs + m, sizeof jobs - m, "%s%s", m ? ", " : "", k->job);
    }
    return gr_jreader_fail(r, "unknown task type \"%.64s\": the cluster's jobs are %s", job, jobs);
  }
  gr_jreader_pop(r);
  json_int_t i = 0;
  if (index) {
    gr_jreader_push_key(r, "index");
    GR_TRY(gr_jreader_want(r, index, JSON_INTEGER, NULL));
    i = json_integer_value(index);
    int ntasks = 0;
    while (gr_cluster_find_task(c, job, ntasks) >= 0) ntasks++;
    if (i < 0 || i >= ntasks)
      return gr_jreader_fail(r, "%lld is out of range: job \"%s\" has %d task%s (0..%d)",
                             (long long)i, job, ntasks, ntasks == 1 ? "" : "s", ntasks - 1);
    gr_jreader_pop(r);
  }
  if (self) {
    snprintf(self->job, sizeof self->job, "%s", job);
    self->index = (int)i;
    self->task = gr_cluster_find_task(c, job, (int)i);
  }
  return GR_OK;
}

gr_status gr_cluster_read_tf_config(gr_jreader *r, const json_t *root, gr_cluster *c,
                                    gr_cluster_self *self) {
  static const char *const keys[] = {"cluster", "task", "environment", "rpc_layer", "job"};
  GR_TRY(gr_jreader_want(r, root, JSON_OBJECT, "TF_CONFIG"));
  GR_TRY(gr_jreader_check_keys(r, root, keys, 5));
  for (int k = 2; k < 4; k++) {
    const json_t *v = json_object_get(root, keys[k]);
    if (!v) continue;
    gr_jreader_push_key(r, keys[k]);
    GR_TRY(gr_jreader_want(r, v, JSON_STRING, NULL));
    gr_jreader_pop(r);
  }
  const json_t *spec = json_object_get(root, "cluster"), *task = json_object_get(root, "task");
  if (!spec) return gr_jreader_fail(r, "missing \"cluster\" (the ClusterSpec)");
  gr_jreader_push_key(r, "cluster");
  GR_TRY(gr_cluster_read_spec(r, spec, c));
  gr_jreader_pop(r);
  if (!task) {
    if (self) return gr_jreader_fail(r, "missing \"task\" ({\"type\": \"worker\", \"index\": 0})");
    return GR_OK;
  }
  gr_jreader_push_key(r, "task");
  GR_TRY(read_task(r, task, c, self));
  gr_jreader_pop(r);
  return GR_OK;
}

gr_status gr_cluster_from_tf_config(const char *json_text, gr_cluster **out, gr_cluster_self *self,
                                    gr_error *err) {
  *out = NULL;
  if (!json_text) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "TF_CONFIG: no text");
  gr_jreader r = {.name = "TF_CONFIG", .text = json_text, .len = strlen(json_text), .err = err};
  json_t *root;
  GR_TRY(gr_jreader_load(&r, &root));
  gr_cluster *c = gr_cluster_new();
  gr_cluster_self me = {.task = -1};
  gr_status s = c ? gr_cluster_read_tf_config(&r, root, c, &me)
                  : gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "TF_CONFIG: out of memory");
  json_decref(root);
  if (s != GR_OK) {
    gr_cluster_free(c);
    return s;
  }
  if (self) *self = me;
  *out = c;
  return GR_OK;
}

gr_status gr_cluster_from_tf_config_env(gr_cluster **out, gr_cluster_self *self, gr_error *err) {
  *out = NULL;
  const char *text = getenv("TF_CONFIG");
  if (!text) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "TF_CONFIG: not set");
  return gr_cluster_from_tf_config(text, out, self, err);
}
