/* Placing a graph over a master's tasks: the cluster model of what the
 * master connected to (each task's job, index, host, devices, inter-op
 * threads and host cores; default device speeds and links), handed to the
 * placer. */
#include <stdlib.h>
#include <string.h>

#include "distributed/master_internal.h"
#include "placer/gr_placer.h"

/* Index into ms->tasks of /job:job/task:index, -1 when the master has none. */
static int task_of(const gr_master *ms, const char *job, int index) {
  for (int k = 0; k < ms->num_tasks; k++) {
    gr_device_spec d;
    if (gr_device_spec_parse(ms->tasks[k].name, &d, NULL) == GR_OK && d.task == index &&
        !strcmp(d.job, job))
      return k;
  }
  return -1;
}

/* The cluster model: jobs in the order the master lists their devices, each
 * job's tasks by index (0, 1, ... without gaps: the cluster model numbers
 * them so). */
static gr_status cluster_of(const gr_master *ms, gr_cluster **out, gr_error *err) {
  gr_cluster *c = gr_cluster_new();
  if (!c) return gr_error_set_oom(err);
  gr_status st = GR_OK;
  bool *added = calloc((size_t)ms->num_tasks + 1, sizeof *added);
  if (!added) st = gr_error_set_oom(err);
  for (int k = 0; st == GR_OK && k < ms->num_tasks; k++) {
    gr_device_spec first;
    st = gr_device_spec_parse(ms->tasks[k].name, &first, err);
    if (st != GR_OK || added[k]) continue;
    for (int i = 0; st == GR_OK; i++) { /* every task of this job, by index */
      int t = task_of(ms, first.job, i);
      if (t < 0) break;
      added[t] = true;
      int ct;
      st = gr_cluster_add_task_at(c, first.job, ms->tasks[t].address, ms->tasks[t].num_devices, &ct,
                                  err);
      /* what the task said of its threads and its host's cores */
      if (st == GR_OK && ms->tasks[t].threads > 0)
        st = gr_cluster_set_task_threads(c, ct, ms->tasks[t].threads, err);
      if (st == GR_OK && ms->tasks[t].cores > 0)
        st = gr_cluster_set_host_cores(c, gr_cluster_task_at(c, ct)->host, ms->tasks[t].cores, err);
    }
    if (st == GR_OK && !added[k])
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "placement: the master's tasks of job '%s' are not numbered 0, 1, ... "
                        "(%s has no task 0 before it)",
                        first.job, ms->tasks[k].name);
  }
  free(added);
  if (st != GR_OK) {
    gr_cluster_free(c);
    return st;
  }
  *out = c;
  return GR_OK;
}

static gr_session *open_session(void *arg, gr_graph *g, gr_error *err) {
  gr_master_opener *op = arg;
  int k = 0;
  while (k < GR_PLACE_CAND_COUNT && op->s[k]) k++;
  if (k == GR_PLACE_CAND_COUNT) {
    gr_error_set(err, GR_ERR_INTERNAL, "placement trials: more than %d sessions at once",
                 GR_PLACE_CAND_COUNT);
    return NULL;
  }
  if (gr_master_new(&op->mo, &op->m[k], err) != GR_OK) return NULL;
  op->s[k] = gr_master_session_new(op->m[k], g, NULL, err);
  if (!op->s[k]) {
    gr_master_free(op->m[k]);
    op->m[k] = NULL;
  }
  return op->s[k];
}

static void close_session(void *arg, gr_session *s) {
  gr_master_opener *op = arg;
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++)
    if (op->s[k] == s) {
      gr_session_free(s);
      gr_master_free(op->m[k]);
      op->s[k] = NULL, op->m[k] = NULL;
    }
}

void gr_master_opener_init(gr_master_opener *op, const gr_master_options *mo) {
  memset(op, 0, sizeof *op);
  op->o = (gr_place_opener){open_session, close_session, op};
  op->mo = *mo;
}

gr_status gr_master_place_graph(gr_master *ms, gr_graph *g, gr_place_mode mode, bool soft,
                                gr_error *err) {
  gr_cluster *c = NULL;
  gr_status st = cluster_of(ms, &c, err);
  if (st != GR_OK) return st;
  st = gr_placer_assign(g, c, 0, mode, soft, err);
  gr_cluster_free(c);
  return st;
}
