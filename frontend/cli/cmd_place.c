/* graphrun place FILE.gr --cluster C [--explain]: place every node of a
 * graph file on a cluster with the cost placer and print each node's
 * device (and, with --explain, why), the predicted step time of the step a
 * run executes (the file's fetches and targets), the bytes crossing devices
 * and the candidates compared; with --measure N, each candidate run N steps
 * on the cluster and its measured step printed beside the predicted one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_cluster.h"
#include "cli_options.h"
#include "cli_place.h"
#include "cli_util.h"
#include "commands.h"
#include "placer/gr_placer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun place FILE.gr --cluster C [--explain] [--soft] [--profiles DB]\n"
          "                              [--min-samples N] [--search] [--all] [--min-gain X]\n"
          "                              [--measure N [--secret-file F] [--cluster-id ID]\n"
          "                              [--insecure]]\n\n"
          "Places every node of FILE.gr on the devices of the cluster C (see\n"
          "docs/placement.md; `graphrun calibrate` writes a cluster file for this machine or a\n"
          "running cluster) and prints each node with its full device name, the predicted time\n"
          "of the step a run executes (the file's fetches and targets), the bytes that cross\n"
          "devices per step and the candidates compared (cost, one-task, pins, layers).\n"
          "  --cluster C       the cluster: a cluster file (jobs, tasks, devices, link speeds,\n"
          "                    step costs) or any spec graphrun run takes (ClusterSpec,\n"
          "                    TF_CONFIG, 'env', slurm[:JOBS]: the Slurm job's or step's\n"
          "                    layout, mpi[:JOBS]: its rendezvous)\n"
          "  --explain         per node: pinned / colocated with X / the finish times compared\n"
          "  --soft            soft placement: a pin no device satisfies is ignored\n"
          "  --profiles DB     measured op times (SQLite) replace the static estimates\n"
          "  --min-samples N   samples a profile needs before it is used (default 3)\n"
          "  --search          a local search over moves of whole layers and colocation\n"
          "                    groups, for graphs under 10,000 nodes\n"
          "  --all             predict a step of every node, not the file's fetches and targets\n"
          "  --min-gain X      pins only stays unless another placement is predicted faster by\n"
          "                    the fraction X (default 0.05; 0: the fastest)\n"
          "  --measure N       run N steps of each candidate on the cluster (its tasks must be\n"
          "                    running: their addresses, the secret of --secret-file or\n"
          "                    GRAPHRUN_SECRET_FILE) and print measured beside predicted\n"
          "Exit codes: 0 ok, 1 runtime failure, 2 error in the input files or flags.\n");
}

enum {
  F_EXPLAIN = 256,
  F_SOFT,
  F_CLUSTER,
  F_PROFILES,
  F_MIN_SAMPLES,
  F_SEARCH,
  F_ALL,
  F_MIN_GAIN,
  F_MEASURE,
  F_SECRET,
  F_CLUSTER_ID,
  F_INSECURE
};

static const struct option place_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"explain", no_argument, NULL, F_EXPLAIN},
    {"soft", no_argument, NULL, F_SOFT},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"profiles", required_argument, NULL, F_PROFILES},
    {"min-samples", required_argument, NULL, F_MIN_SAMPLES},
    {"search", no_argument, NULL, F_SEARCH},
    {"all", no_argument, NULL, F_ALL},
    {"min-gain", required_argument, NULL, F_MIN_GAIN},
    {"measure", required_argument, NULL, F_MEASURE},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"insecure", no_argument, NULL, F_INSECURE},
    {0},
};

typedef struct place_opts {
  const char *file, *cluster_path, *profiles, *secret_file, *cluster_id;
  gr_placer_options o;
  bool all, insecure;
  long measure;
} place_opts;

static int parse(int argc, char **argv, place_opts *a) {
  *a = (place_opts){.o = gr_placer_options_default()};
  cli_opts po;
  cli_opts_start(&po, "place", argc, argv, place_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    long k;
    double x;
    if (c == 'h') {
      usage(stdout);
      return -1;
    } else if (c == F_EXPLAIN) {
      a->o.explain = true;
    } else if (c == F_SOFT) {
      a->o.soft_placement = true;
    } else if (c == F_CLUSTER) {
      a->cluster_path = po.arg;
    } else if (c == F_PROFILES) {
      a->profiles = po.arg;
    } else if (c == F_MIN_SAMPLES) {
      if (!cli_opt_long(&po, 1, 1000000, &k)) return GR_EXIT_USAGE;
      a->o.min_samples = (int)k;
    } else if (c == F_SEARCH) {
      a->o.search = true;
    } else if (c == F_ALL) {
      a->all = true;
    } else if (c == F_MIN_GAIN) {
      if (!cli_parse_seconds(po.arg, 0.9, &x)) return cli_opt_bad(&po, "a fraction in [0, 0.9]");
      a->o.min_gain = x;
    } else if (c == F_MEASURE) {
      if (!cli_opt_long(&po, 1, 1000000, &a->measure)) return GR_EXIT_USAGE;
    } else if (c == F_SECRET) {
      a->secret_file = po.arg;
    } else if (c == F_CLUSTER_ID) {
      if (cli_opt_cluster_id(&po, &a->cluster_id) != GR_EXIT_OK) return GR_EXIT_USAGE;
    } else if (c == F_INSECURE) {
      a->insecure = true;
    } else if (c == CLI_OPTS_ARG && !a->file) {
      a->file = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun place: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  if (!a->file || !a->cluster_path) {
    fprintf(stderr, "graphrun place: %s (try --help)\n",
            !a->file ? "missing FILE.gr" : "missing --cluster C");
    return GR_EXIT_USAGE;
  }
  if (!a->measure && (a->secret_file || a->insecure || a->cluster_id)) {
    fprintf(stderr, "graphrun place: --secret-file, --insecure and --cluster-id are for "
                    "--measure\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* Each candidate run on the cluster, measured beside predicted. */
static int measure(const place_opts *a, gr_cluster *c, const char *from, gr_placement *pl,
                   const cli_step *st) {
  gr_error err;
  char *secret = NULL;
  cli_master_conf conf = {0};
  cli_set_identity(a->cluster_id, a->insecure);
  gr_status s = cli_read_secret(a->secret_file, a->insecure, &secret, &err);
  if (s == GR_OK) s = cli_master_options(c, from, secret, 0, &conf, &err);
  gr_place_trial t[GR_PLACE_CAND_COUNT];
  int steps = (int)a->measure;
  if (s == GR_OK) {
    gr_master_opener op;
    gr_master_opener_init(&op, &conf.mo);
    s = gr_placement_try(pl, st->fetch, st->nf, st->target, st->nt, &op.o, ~0u, steps, 0,
                         steps >= 30 ? 3 : 1, t, &steps, &err);
  }
  cli_master_conf_free(&conf);
  free(secret);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun place: --measure: %s\n", err.msg);
    return s == GR_ERR_INVALID_ARGUMENT ? GR_EXIT_USAGE : GR_EXIT_FAILURE;
  }
  printf("# measured on the cluster: median of %d steps each (rounds alternating)\n", steps);
  printf("%-9s %14s %14s %8s\n", "candidate", "predicted ms", "measured ms", "error");
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) {
    if (!t[k].tried) continue;
    printf("%-9s %14.3f %14.3f %+7.1f%%", gr_place_candidate_name((gr_place_candidate)k),
           t[k].predicted * 1e3, t[k].measured.median * 1e3,
           100 * (t[k].predicted - t[k].measured.median) / t[k].measured.median);
    if (k == GR_PLACE_CAND_COST)
      printf("  (%s)", gr_place_candidate_name(gr_placement_chosen(pl)));
    else if (t[k].same_as >= 0)
      printf("  (the same placement as %s)", gr_place_candidate_name(t[k].same_as));
    printf("\n");
  }
  return GR_EXIT_OK;
}

int gr_cmd_place(int argc, char **argv) {
  place_opts a;
  int rc = parse(argc, argv, &a);
  if (rc != GR_EXIT_OK) return rc < 0 ? GR_EXIT_OK : rc;
  gr_error err;
  gr_cluster *c = NULL;
  gr_cluster_self self;
  bool has_self;
  const char *from;
  /* --measure connects: the addresses too (a launcher's rendezvous) */
  if (cli_load_cluster_for(a.cluster_path, !a.measure, &c, &self, &has_self, &from, &err) !=
      GR_OK) {
    fprintf(stderr, "graphrun place: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  gr_profile_db *db = NULL;
  if (a.profiles && gr_profile_db_open(a.profiles, &db, &err) != GR_OK) {
    fprintf(stderr, "graphrun place: %s\n", err.msg);
    gr_cluster_free(c);
    return GR_EXIT_USAGE;
  }
  a.o.profiles = db;
  gr_graph *g = NULL;
  gr_dsl_program *p = NULL;
  cli_step st = {0};
  /* with the cluster: the program may ask it (num_tasks("worker")) */
  rc = cli_load_graph_on("place", a.file, 0, c, NULL, NULL, 0, &g, &p);
  if (rc == GR_EXIT_OK && !a.all) rc = cli_step_of("place", p, &st);
  if (rc == GR_EXIT_OK) {
    cli_step_options(&st, &a.o);
    gr_placement *pl = NULL;
    gr_status s = gr_placer_place(g, c, &a.o, &pl, &err);
    if (s != GR_OK) {
      fprintf(stderr, "graphrun place: %s: %s\n", a.file, err.msg);
      rc = s == GR_ERR_RESOURCE_EXHAUSTED ? GR_EXIT_FAILURE : GR_EXIT_USAGE;
    } else if (a.o.explain) {
      gr_placement_explain(pl, stdout);
    } else {
      for (int i = 0; i < gr_graph_num_nodes(g); i++) {
        const gr_node *n = gr_graph_node(g, i);
        printf("%s  %s\n", n->name, n->assigned_device);
      }
      printf("predicted step time: %.6g s (%s)\nbytes crossing devices: %.0f per step\n",
             gr_placement_step_time(pl),
             st.nf + st.nt ? "the file's fetches and targets" : "every node",
             gr_placement_cross_bytes(pl));
      printf("candidates:");
      for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) {
        double t = gr_placement_candidate_time(pl, (gr_place_candidate)k);
        if (isfinite(t)) printf(" %s %.6g s", gr_place_candidate_name((gr_place_candidate)k), t);
      }
      printf("; chosen: %s\n", gr_place_candidate_name(gr_placement_chosen(pl)));
    }
    if (rc == GR_EXIT_OK && a.measure) rc = measure(&a, c, from, pl, &st);
    gr_placement_free(pl);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  gr_profile_db_close(db);
  gr_cluster_free(c);
  return rc;
}
