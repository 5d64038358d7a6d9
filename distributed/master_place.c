/* Placing a graph over a master's tasks: the cluster model of what the
 * master connected to (each task's job, index, host and devices, default
 * device speeds and links), handed to the placer. */
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
      st = gr_cluster_add_task_at(c, first.job, ms->tasks[t].address, ms->tasks[t].num_devices,
                                  NULL, err);
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

gr_status gr_master_place_graph(gr_master *ms, gr_graph *g, gr_place_mode mode, bool soft,
                                gr_error *err) {
  gr_cluster *c = NULL;
  gr_status st = cluster_of(ms, &c, err);
  if (st != GR_OK) return st;
  st = gr_placer_assign(g, c, 0, mode, soft, err);
  gr_cluster_free(c);
  return st;
}
