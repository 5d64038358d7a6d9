/* Between-graph training from the command line: `graphrun run --cluster C
 * --job worker --task I` runs one worker's own client. Its program's
 * default device is that worker's task; variables that a device function
 * puts on the ps tasks are shared with the other clients. The chief (the
 * "chief" job's task, else worker 0) initialises, restores and saves them;
 * the other workers wait until they have values.
 *
 * The chief holds a lease on its own task while its process lives
 * ("chief/CONTAINER", through a connection of its own: its recoveries, which
 * reconnect everything else, keep it). A waiting worker looks at that
 * lease with each poll, so a chief that ended (crashed, killed, or done
 * without giving the variables values) is reported within the poll, not
 * after the whole timeout. The lease lives on a server, not in `graphrun
 * launch`: clients started by hand or by Slurm see it too. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"

#include "cli_cluster.h"
#include "commands.h"

int cli_worker_setup(cli_worker *w, const char *job, long task, const gr_cluster *c) {
  memset(w, 0, sizeof *w);
  w->started = cli_now();
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
  bool has_chief = gr_cluster_find_task(c, "chief", 0) >= 0;
  snprintf(w->chief_job, sizeof w->chief_job, "%s", has_chief ? "chief" : "worker");
  snprintf(w->chief_task, sizeof w->chief_task, "/job:%s/replica:0/task:0", w->chief_job);
  w->chief = strcmp(job, w->chief_job) == 0 && task == 0;
  cli_worker_set_container(w, NULL);
  return GR_EXIT_OK;
}

void cli_worker_set_container(cli_worker *w, const char *container) {
  snprintf(w->lease_name, sizeof w->lease_name, "chief%s%s", container ? "/" : "",
           container ? container : "");
}

gr_status cli_chief_hold(cli_worker *w, const gr_cluster *c, const char *secret, gr_error *err) {
  if (!w->on || !w->chief) return GR_OK;
  char host[256] = "?", holder[GR_DEVICE_NAME_MAX + 320];
  gethostname(host, sizeof host - 1);
  snprintf(holder, sizeof holder, "%s, pid %d on %.200s", w->device, (int)getpid(), host);
  gr_lease_state ls;
  if (w->lease && gr_master_lease(w->lease, 0, w->lease_name, holder, &ls, err) == GR_OK)
    return GR_OK;
  gr_master_free(w->lease); /* its task was restarted (or is not there yet): connect anew */
  w->lease = NULL;
  const gr_cluster_task *t = gr_cluster_task_at(c, gr_cluster_find_task(c, w->job, w->task));
  if (!t->address)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "task %s has no address", w->device);
  const char *addr = t->address;
  /* no heartbeats: a busy task's slow answer must not end the lease */
  gr_master_options mo = {.num_tasks = 1, .addresses = &addr, .heartbeat_ms = -1};
  char id[GR_CLUSTER_ID_MAX + 1];
  gr_status st = cli_master_identity(c, secret, &mo, id, err);
  if (st == GR_OK) st = gr_master_new(&mo, &w->lease, err);
  if (st == GR_OK) st = gr_master_lease(w->lease, 0, w->lease_name, holder, &ls, err);
  if (st != GR_OK) gr_error_prefix(err, "holding the chief's lease on %s", w->device);
  return st;
}

void cli_worker_free(cli_worker *w) {
  gr_master_free(w->lease);
  w->lease = NULL;
}

/* The task of m that holds the chief's lease, -1 when m has none. */
static int chief_task_of(const gr_master *m, const cli_worker *w) {
  const char *name;
  for (int k = 0; (name = gr_master_task_name(m, k)); k++)
    if (!strcmp(name, w->chief_task)) return k;
  return -1;
}

gr_status cli_wait_for_chief(gr_session *s, gr_master *m, const cli_worker *w, double timeout_s,
                             bool quiet, gr_error *err) {
  double end = cli_now() + timeout_s;
  bool said = false;
  int k = chief_task_of(m, w);
  for (;;) {
    /* the lease first: a chief that ends after this look and before the
     * variables' has given them their values, or is seen ended next time.
     * A look that fails (the chief's task is being restarted) says nothing:
     * the variables decide, and the next look */
    gr_lease_state ls = {.held = true};
    gr_error lerr;
    if (k < 0 || gr_master_lease(m, k, w->lease_name, NULL, &ls, &lerr) != GR_OK)
      ls = (gr_lease_state){.held = true};
    const char *missing;
    GR_TRY(gr_session_find_uninitialized(s, w->device, &missing, err));
    if (!missing) return GR_OK;
    /* ended after this client started: this run's chief, which will not come back by itself */
    if (!ls.held && ls.taken > 0 && ls.ended_ms_ago / 1000.0 < cli_now() - w->started)
      return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                          "the chief client (%s) ended %.1f s ago, before initialising or "
                          "restoring the shared variables ('%s' has no value): start it again, "
                          "then this worker",
                          ls.holder, ls.ended_ms_ago / 1000.0, missing);
    if (!said && !quiet)
      fprintf(stderr,
              "graphrun run: %s waits for the chief to initialise or restore the shared "
              "variables ('%s' has no value yet)\n",
              w->device, missing);
    said = true;
    if (cli_now() >= end) {
      char hint[2 * GR_DEVICE_NAME_MAX + 128] = "";
      if (!ls.held)
        snprintf(hint, sizeof hint,
                 ": no chief client holds its lease on %s (is a client with --job %s --task 0 "
                 "running?)",
                 w->chief_task, w->chief_job);
      return gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED,
                          "the chief did not initialise variable '%s' within %.0f s "
                          "(--recovery-timeout)%s",
                          missing, timeout_s, hint);
    }
    struct timespec ts = {0, 50 * 1000000L}; /* a cheap poll: one small request per task */
    nanosleep(&ts, NULL);
  }
}
