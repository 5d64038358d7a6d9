/* Server tasks of this machine, forked for a measurement (graphrun
 * calibrate without --cluster). Internal to frontend/cli/.
 *
 *   cli_tasks t;
 *   if (cli_tasks_start(&t, 2, secret, &err) != GR_OK) ...   // before any thread
 *   ... gr_master_options mo = {.num_tasks = t.n, .addresses = t.addrs, .secret = secret};
 *   cli_tasks_stop(&t);                                      // kills and reaps them
 *
 * Ownership: the caller stops what it started (also after a failure, which
 * stops what had started); the children also end when this process does. */
#ifndef GR_CLI_LOCAL_TASKS_H
#define GR_CLI_LOCAL_TASKS_H

#include <graphrun.h>
#include <sys/types.h>

#define CLI_TASKS_MAX 8

typedef struct cli_tasks {
  int n;
  pid_t pid[CLI_TASKS_MAX];
  char addr[CLI_TASKS_MAX][32];
  const char *addrs[CLI_TASKS_MAX]; /* "127.0.0.1:PORT" of each */
  int life_w;                       /* closing it ends the children */
} cli_tasks;

/* Forks n tasks /job:worker/task:K (one inter-op thread, quiet) with the
 * secret; returns when each said its port. */
gr_status cli_tasks_start(cli_tasks *t, int n, const char *secret, gr_error *err);
void cli_tasks_stop(cli_tasks *t);

#endif
