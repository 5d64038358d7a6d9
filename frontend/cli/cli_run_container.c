/* graphrun run: the container a cluster run keeps its variables in on the
 * tasks. By default each run has its own, private to its master and
 * dropped when the run ends, so a run starts from initial values whatever
 * ran on the servers before. --container NAME (or GRAPHRUN_CONTAINER, which
 * `graphrun launch --between-graph` sets for all its clients) names a
 * shared one instead: clients naming it share its variables, and it stays
 * on the tasks until `graphrun reset` (or --no-restore) clears it. */
#include <stdio.h>

#include "cli_run.h"
#include "commands.h"

int cli_run_pick_container(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  if (!r->cluster) {
    if (o->container && !o->container_from_env) {
      fprintf(stderr, "graphrun run: --container names a container on a cluster's tasks: it "
                      "needs --cluster (or GRAPHRUN_CLUSTER)\n");
      return GR_EXIT_USAGE;
    }
    return GR_EXIT_OK;
  }
  if (r->self.on && !o->container) {
    fprintf(stderr,
            "graphrun run: --job %s --task %d: between-graph clients share their variables "
            "through a named container on the tasks: give every client the same --container "
            "NAME (graphrun launch --between-graph does)\n",
            r->self.job, r->self.task);
    return GR_EXIT_USAGE;
  }
  cli_set_container(o->container);
  return GR_EXIT_OK;
}

int cli_run_fresh_container(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  if (!r->master || !o->container) return GR_EXIT_OK;
  if (!o->quiet)
    fprintf(stderr,
            "graphrun run: the variables live in the shared container '%s' on the tasks (kept "
            "after the run, until graphrun reset)\n",
            o->container);
  if (!o->no_restore) return GR_EXIT_OK;
  int dropped;
  gr_error err;
  if (gr_master_reset(r->master, o->container, &dropped, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --no-restore: resetting container '%s': %s\n", o->container,
            err.msg);
    return GR_EXIT_FAILURE;
  }
  if (!o->quiet)
    fprintf(stderr,
            "graphrun run: --no-restore: reset container '%s' (%d of the tasks held it): the "
            "variables start from their initial values\n",
            o->container, dropped);
  return GR_EXIT_OK;
}
