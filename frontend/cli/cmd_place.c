/* graphrun place FILE.gr --cluster C.json [--explain]: place every node of a
 * graph file on a cluster with the simulated greedy placer and print each
 * node's device (and, with --explain, why), the predicted step time and the
 * bytes crossing devices. */
#include <string.h>

#include "cli_cluster.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "placer/gr_placer.h"

static void usage(FILE *f) {
  fprintf(f, "usage: graphrun place FILE.gr --cluster C [--explain] [--soft] [--profiles DB]\n"
             "                              [--min-samples N]\n\n"
             "Places every node of FILE.gr on the devices of the cluster C (see\n"
             "docs/placement.md; `graphrun calibrate` writes a cluster file for this machine)\n"
             "and prints each node with its full device name, the predicted step time and the\n"
             "bytes that cross devices per step.\n"
             "  --cluster C       the cluster: a cluster file (jobs, tasks, devices, link speeds)\n"
             "                    or any spec graphrun run takes (ClusterSpec, TF_CONFIG, 'env',\n"
             "                    slurm[:JOBS]: the Slurm job's or step's layout, mpi[:JOBS]:\n"
             "                    its rendezvous)\n"
             "  --explain         per node: pinned / colocated with X / the finish times compared\n"
             "  --soft            soft placement: a pin no device satisfies is ignored\n"
             "  --profiles DB     measured op times (SQLite) replace the static estimates\n"
             "  --min-samples N   samples a profile needs before it is used (default 3)\n"
             "Exit codes: 0 ok, 1 runtime failure, 2 error in the input files or flags.\n");
}

enum { F_EXPLAIN = 256, F_SOFT, F_CLUSTER, F_PROFILES, F_MIN_SAMPLES };

static const struct option place_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"explain", no_argument, NULL, F_EXPLAIN},
    {"soft", no_argument, NULL, F_SOFT},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"profiles", required_argument, NULL, F_PROFILES},
    {"min-samples", required_argument, NULL, F_MIN_SAMPLES},
    {0},
};

int gr_cmd_place(int argc, char **argv) {
  const char *file = NULL, *cluster_path = NULL, *profiles = NULL;
  gr_placer_options o = gr_placer_options_default();
  cli_opts po;
  cli_opts_start(&po, "place", argc, argv, place_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    long k;
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == F_EXPLAIN) {
      o.explain = true;
    } else if (c == F_SOFT) {
      o.soft_placement = true;
    } else if (c == F_CLUSTER) {
      cluster_path = po.arg;
    } else if (c == F_PROFILES) {
      profiles = po.arg;
    } else if (c == F_MIN_SAMPLES) {
      if (!cli_opt_long(&po, 1, 1000000, &k)) return GR_EXIT_USAGE;
      o.min_samples = (int)k;
    } else if (c == CLI_OPTS_ARG && !file) {
      file = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun place: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  if (!file || !cluster_path) {
    fprintf(stderr, "graphrun place: %s (try --help)\n",
            !file ? "missing FILE.gr" : "missing --cluster C");
    return GR_EXIT_USAGE;
  }
  gr_error err;
  gr_cluster *c = NULL;
  gr_cluster_self self;
  bool has_self;
  const char *from;
  if (cli_load_cluster_for(cluster_path, true, &c, &self, &has_self, &from, &err) != GR_OK) {
    fprintf(stderr, "graphrun place: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  gr_profile_db *db = NULL;
  if (profiles && gr_profile_db_open(profiles, &db, &err) != GR_OK) {
    fprintf(stderr, "graphrun place: %s\n", err.msg);
    gr_cluster_free(c);
    return GR_EXIT_USAGE;
  }
  o.profiles = db;
  gr_graph *g = NULL;
  gr_dsl_program *p = NULL;
  /* with the cluster: the program may ask it (num_tasks("worker")) */
  int rc = cli_load_graph_on("place", file, 0, c, NULL, NULL, 0, &g, &p);
  if (rc == GR_EXIT_OK) {
    gr_placement *pl = NULL;
    gr_status s = gr_placer_place(g, c, &o, &pl, &err);
    if (s != GR_OK) {
      fprintf(stderr, "graphrun place: %s: %s\n", file, err.msg);
      rc = s == GR_ERR_RESOURCE_EXHAUSTED ? GR_EXIT_FAILURE : GR_EXIT_USAGE;
    } else if (o.explain) {
      gr_placement_explain(pl, stdout);
    } else {
      for (int i = 0; i < gr_graph_num_nodes(g); i++) {
        const gr_node *n = gr_graph_node(g, i);
        printf("%s  %s\n", n->name, n->assigned_device);
      }
      printf("predicted step time: %.6g s\nbytes crossing devices: %.0f per step\n",
             gr_placement_step_time(pl), gr_placement_cross_bytes(pl));
    }
    gr_placement_free(pl);
    gr_dsl_program_free(p);
    gr_graph_free(g);
  }
  gr_profile_db_close(db);
  gr_cluster_free(c);
  return rc;
}
