/* graphrun reset: clears shared containers on a cluster's server tasks, as
 * TensorFlow's Session.reset (docs/distributed.md#containers). */
#include <stdio.h>
#include <stdlib.h>

#include "cli_cluster.h"
#include "cli_resolve.h"
#include "cli_options.h"
#include "commands.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun reset [--cluster C] [--container NAME] [options]\n\n"
          "Clears shared containers on a cluster's server tasks (TensorFlow's Session.reset):\n"
          "the container NAME, or every shared container. Their variables, queues and\n"
          "accumulators are dropped: the next run naming the container starts from initial\n"
          "values, and a run still using it fails its next step (\"container 'NAME' was\n"
          "reset\"). A run's own private container ends with the run; reset leaves it alone.\n\n"
          "  --cluster C        the cluster (a spec as for graphrun run; default:\n"
          "                     GRAPHRUN_CLUSTER)\n"
          "  --rendezvous DIR   where a launcher's servers said where they listen (default:\n"
          "                     GRAPHRUN_RENDEZVOUS, else $SLURM_SUBMIT_DIR/.graphrun/slurm-JOB)\n"
          "  --container NAME   only this container (default: every shared container)\n"
          "  --secret-file F    the cluster's shared secret (default: GRAPHRUN_SECRET_FILE,\n"
          "                     else the rendezvous's)\n"
          "  --cluster-id ID    the cluster's id (default: GRAPHRUN_CLUSTER_ID, else Slurm's\n"
          "                     job id, else the rendezvous's, else derived from the spec)\n"
          "  --insecure         no secret: talk to servers started with --insecure\n");
  fputs(cli_tls_usage, f);
  fprintf(f, "  --timeout S        give up connecting to a task after S seconds (default and\n"
             "                     at most 10)\n"
             "  --quiet            print nothing when it worked\n\n"
             "Exit codes: 0 ok, 1 a task could not be reached or refused, 2 usage error.\n");
}

enum {
  F_CLUSTER = 256,
  F_CONTAINER,
  F_SECRET,
  F_CLUSTER_ID,
  F_INSECURE,
  F_TIMEOUT,
  F_QUIET,
  F_RENDEZVOUS,
  F_TLS /* and F_TLS + 1, + 2 */
};

static const struct option reset_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"container", required_argument, NULL, F_CONTAINER},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"insecure", no_argument, NULL, F_INSECURE},
    {"timeout", required_argument, NULL, F_TIMEOUT},
    {"quiet", no_argument, NULL, F_QUIET},
    CLI_TLS_FLAGS(F_TLS),
    {"rendezvous", required_argument, NULL, F_RENDEZVOUS},
    {0},
};

typedef struct reset_options {
  const char *spec, *container, *secret_file, *cluster_id;
  double timeout_s;
  bool quiet, insecure;
  cli_tls tls;
} reset_options;

/* CLI_OPTS_END when the reset goes on, else the exit code. */
static int parse(int argc, char **argv, reset_options *o) {
  *o = (reset_options){.timeout_s = 10};
  cli_opts po;
  cli_opts_start(&po, "reset", argc, argv, reset_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (cli_tls_flag(c, F_TLS, po.arg, &o->tls)) continue;
    switch (c) {
      case 'h':
        usage(stdout);
        return GR_EXIT_OK;
      case F_CLUSTER:
        o->spec = po.arg;
        break;
      case F_CONTAINER:
        if (gr_container_check_name(po.arg, NULL) != GR_OK)
          return cli_opt_bad(&po,
                             "a container name: 1 to %d letters, digits, '_', '-' or '.', "
                             "starting with a letter or a digit",
                             GR_CONTAINER_NAME_MAX);
        o->container = po.arg;
        break;
      case F_SECRET:
        o->secret_file = po.arg;
        break;
      case F_CLUSTER_ID:
        if (cli_opt_cluster_id(&po, &o->cluster_id) != GR_EXIT_OK) return GR_EXIT_USAGE;
        break;
      case F_INSECURE:
        o->insecure = true;
        break;
      case F_TIMEOUT:
        if (!cli_opt_seconds(&po, 10, &o->timeout_s)) return GR_EXIT_USAGE;
        break;
      case F_QUIET:
        o->quiet = true;
        break;
      case F_RENDEZVOUS:
        cli_set_rendezvous(po.arg);
        break;
      case CLI_OPTS_ARG:
        fprintf(stderr, "graphrun reset: unexpected argument '%s' (try --help)\n", po.arg);
        return GR_EXIT_USAGE;
      default:
        return GR_EXIT_USAGE;
    }
  }
  return CLI_OPTS_END;
}

int gr_cmd_reset(int argc, char **argv) {
  reset_options o;
  int rc = parse(argc, argv, &o);
  if (rc != CLI_OPTS_END) return rc;
  gr_cluster *c = NULL;
  const char *from;
  char *secret = NULL;
  gr_master *m = NULL;
  gr_error err;
  if (cli_load_cluster(o.spec, &c, &from, &err) != GR_OK) {
    fprintf(stderr, "graphrun reset: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  if (!c) {
    fprintf(stderr, "graphrun reset: which cluster? give --cluster C (or set GRAPHRUN_CLUSTER)\n");
    return GR_EXIT_USAGE;
  }
  int dropped = 0;
  int ms = o.timeout_s > 0 && o.timeout_s < 0.001 ? 1 : (int)(o.timeout_s * 1000 + 0.5);
  rc = GR_EXIT_FAILURE;
  cli_set_identity(o.cluster_id, o.insecure);
  cli_set_tls(&o.tls);
  if (cli_read_secret(o.secret_file, o.insecure, &secret, &err) != GR_OK) {
    fprintf(stderr, "graphrun reset: %s\n", err.msg);
    gr_cluster_free(c);
    return GR_EXIT_USAGE;
  }
  if (cli_connect(c, from, secret, ms, &m, &err) == GR_OK &&
      gr_master_reset(m, o.container, &dropped, &err) == GR_OK)
    rc = GR_EXIT_OK;
  if (rc != GR_EXIT_OK)
    fprintf(stderr, "graphrun reset: %s\n", err.msg);
  else if (!o.quiet && o.container)
    printf("graphrun reset: container '%s': dropped on %d of %d tasks\n", o.container, dropped,
           gr_cluster_num_tasks(c));
  else if (!o.quiet)
    printf("graphrun reset: every shared container: %d dropped on %d tasks\n", dropped,
           gr_cluster_num_tasks(c));
  gr_master_free(m);
  free(secret);
  gr_cluster_free(c);
  return rc;
}
