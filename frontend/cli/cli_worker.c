/* Between-graph training from the command line: `graphrun run --cluster C
 * --job worker --task I` runs one worker's own client. Its program's
 * default device is that worker's task; variables that a device function
 * puts on the ps tasks are shared with the other workers' clients. The
 * chief (the "chief" job's task, else worker 0) initialises, restores and
 * saves them; the other workers wait until they have values. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"

#include "cli_cluster.h"
#include "commands.h"

int cli_worker_setup(cli_worker *w, const char *job, long task, const gr_cluster *c) {
  memset(w, 0, sizeof *w);
  if (!job && task < 0) return GR_EXIT_OK;
  if (!job || task < 0) {
    fprintf(stderr, "graphrun run: --job and --task go together (this worker's task)\n");
    return GR_EXIT_USAGE;
  }
  if (!c) {
    fprintf(stderr, "graphrun run: --job and --task need a cluster (--cluster, or graphrun "
                    "launch --between-graph)\n");
    return GR_EXIT_USAGE;
  }
  if (gr_cluster_find_task(c, job, (int)task) < 0) {
    fprintf(stderr, "graphrun run: the cluster has no task /job:%s/task:%ld\n", job, task);
    return GR_EXIT_USAGE;
  }
  w->on = true;
  w->task = (int)task;
  snprintf(w->job, sizeof w->job, "%s", job);
  snprintf(w->device, sizeof w->device, "/job:%s/task:%ld", job, task);
  bool has_chief = false;
  for (int i = 0; i < gr_cluster_num_tasks(c); i++)
    has_chief |= strcmp(gr_cluster_task_at(c, i)->job, "chief") == 0;
  w->chief = has_chief ? strcmp(job, "chief") == 0 : strcmp(job, "worker") == 0 && task == 0;
  return GR_EXIT_OK;
}

gr_status cli_wait_for_chief(gr_session *s, const cli_worker *w, double timeout_s, bool quiet,
                             gr_error *err) {
  double end = cli_now() + timeout_s;
  bool said = false;
  for (;;) {
    const char *missing;
    GR_TRY(gr_session_find_uninitialized(s, w->device, &missing, err));
    if (!missing) return GR_OK;
    if (!said && !quiet)
      fprintf(stderr,
              "graphrun run: %s waits for the chief to initialise or restore the shared "
              "variables ('%s' has no value yet)\n",
              w->device, missing);
    said = true;
    if (cli_now() >= end)
      return gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED,
                          "the chief did not initialise variable '%s' within %.0f s "
                          "(--recovery-timeout)",
                          missing, timeout_s);
    struct timespec ts = {0, 50 * 1000000L}; /* a cheap poll: one small request per task */
    nanosleep(&ts, NULL);
  }
}
