/* graphrun calibrate: measures this machine and the runtime, and writes a
 * cluster file for the placer (docs/placement.md, "How the model is
 * calibrated"): the devices' flop/s, per-op overhead and memory bandwidth
 * (cli_calibrate_machine.c); between real server tasks (two forked here,
 * or the tasks of a running cluster with --cluster) each link kind's
 * latency, bandwidth and per-task step cost (gr_calibrate_runtime); with
 * --profiles, the kernel times of graph files' steps into the profile
 * database, and on a cluster the tasks' time scale fitted to those steps. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cli_calibrate.h"
#include "cli_cluster.h"
#include "cli_local_tasks.h"
#include "cli_options.h"
#include "cli_place.h"
#include "cli_util.h"
#include "commands.h"

enum {
  F_QUICK = 256,
  F_OUT,
  F_DEVICES,
  F_JOB,
  F_CLUSTER,
  F_SECRET,
  F_INSECURE,
  F_CLUSTER_ID,
  F_PROFILES,
  F_STEPS
};

static const struct option calibrate_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"quick", no_argument, NULL, F_QUICK},
    {"out", required_argument, NULL, F_OUT},
    {"devices", required_argument, NULL, F_DEVICES},
    {"job", required_argument, NULL, F_JOB},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"insecure", no_argument, NULL, F_INSECURE},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"profiles", required_argument, NULL, F_PROFILES},
    {"steps", required_argument, NULL, F_STEPS},
    {0},
};

static void usage(void) {
  printf(
      "usage: graphrun calibrate [--out FILE] [--devices N] [--job NAME] [--quick]\n"
      "                          [--cluster C [--secret-file F] [--cluster-id ID] [--insecure]]\n"
      "                          [--profiles DB [--steps N] FILE.gr ...]\n\n"
      "Measures this machine and the runtime and writes a cluster file for `graphrun place\n"
      "--cluster` (format and model: docs/placement.md): each device's matmul flop/s (one\n"
      "thread), per-op overhead and memory bandwidth; between real server tasks, each link\n"
      "kind's per-message latency and bandwidth and the cost a task adds to a step (a RUN\n"
      "and its response). Without --cluster two tasks are started here and the file\n"
      "describes one task of job NAME (default localhost) with N CPU devices (default: the\n"
      "cores); with --cluster C (a running cluster: a file, a ClusterSpec, env or slurm, as\n"
      "graphrun run takes it) it describes C's tasks, with their threads, their hosts'\n"
      "cores and the time scale of their steps. Links no pair of tasks can measure keep\n"
      "their defaults (stderr says which).\n"
      "  --out FILE        write the file there (default: stdout)\n"
      "  --quick           smaller measurements (less accurate, for tests)\n"
      "  --profiles DB     time the kernels of each FILE.gr's step (its fetches and\n"
      "                    targets) in this process into the profile database DB\n"
      "                    (SQLite; graphrun place --profiles reads it); with --cluster\n"
      "                    also run each step on the cluster (pins only) and fit the\n"
      "                    tasks' time scale to it\n"
      "  --steps N         steps timed per file (default 30; --quick 5)\n"
      "Exit codes: 0 ok, 1 a measurement failed, 2 error in the flags or files.\n");
}

typedef struct calibrate_opts {
  const char *out_path, *job, *cluster_spec, *secret_file, *cluster_id, *profiles;
  const char *files[CLI_MAX_NAMES];
  int nfiles;
  long devices, steps;
  bool quick, insecure;
} calibrate_opts;

static int parse(int argc, char **argv, calibrate_opts *o) {
  *o = (calibrate_opts){.job = "localhost", .devices = sysconf(_SC_NPROCESSORS_ONLN)};
  cli_opts po;
  cli_opts_start(&po, "calibrate", argc, argv, calibrate_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage();
      return -1;
    } else if (c == F_QUICK) {
      o->quick = true;
    } else if (c == F_OUT) {
      o->out_path = po.arg;
    } else if (c == F_JOB) {
      o->job = po.arg;
    } else if (c == F_CLUSTER) {
      o->cluster_spec = po.arg;
    } else if (c == F_SECRET) {
      o->secret_file = po.arg;
    } else if (c == F_INSECURE) {
      o->insecure = true;
    } else if (c == F_CLUSTER_ID) {
      if (cli_opt_cluster_id(&po, &o->cluster_id) != GR_EXIT_OK) return GR_EXIT_USAGE;
    } else if (c == F_PROFILES) {
      o->profiles = po.arg;
    } else if (c == F_DEVICES) {
      if (!cli_opt_long(&po, 1, 4096, &o->devices)) return GR_EXIT_USAGE;
    } else if (c == F_STEPS) {
      if (!cli_opt_long(&po, 1, 100000, &o->steps)) return GR_EXIT_USAGE;
    } else if (c == CLI_OPTS_ARG && o->nfiles < CLI_MAX_NAMES) {
      o->files[o->nfiles++] = po.arg;
    } else {
      if (c == CLI_OPTS_ARG) fprintf(stderr, "graphrun calibrate: too many files\n");
      return GR_EXIT_USAGE;
    }
  }
  if (o->devices < 1) o->devices = 1;
  if (!o->steps) o->steps = o->quick ? 5 : 30;
  if (o->nfiles && !o->profiles) {
    fprintf(stderr, "graphrun calibrate: FILE.gr is profiled into a database: give --profiles DB "
                    "(try --help)\n");
    return GR_EXIT_USAGE;
  }
  if (!o->cluster_spec && (o->secret_file || o->insecure || o->cluster_id)) {
    fprintf(stderr, "graphrun calibrate: --secret-file, --insecure and --cluster-id are for "
                    "--cluster (a running cluster)\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* A random secret for the tasks this command starts. */
static bool random_secret(char out[65]) {
  unsigned char b[32];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = getrandom(b + got, sizeof b - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += (size_t)r;
  }
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
  return true;
}

/* The device figures of this machine. */
typedef struct figures {
  double flops, overhead, copy_bw, small;
} figures;

static int measure_machine(bool quick, figures *f) {
  gr_error err;
  f->flops = cli_measure_flops(quick ? 128 : 512, quick ? 5 : 15, &err);
  if (f->flops <= 0) {
    fprintf(stderr, "graphrun calibrate: matmul measurement failed: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  f->overhead = cli_measure_overhead(&err);
  if (f->overhead < 0) {
    fprintf(stderr, "graphrun calibrate: overhead measurement failed: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  f->copy_bw = cli_measure_memcpy(quick ? (4u << 20) : (64u << 20), 5, &f->small);
  if (f->copy_bw <= 0) {
    fprintf(stderr, "graphrun calibrate: memcpy measurement failed\n");
    return GR_EXIT_FAILURE;
  }
  return GR_EXIT_OK;
}

/* Adds task t of `from` (job, host, address) to c with `devices` devices of
 * the measured figures, the threads and cores master m's task k says. */
static gr_status add_task(gr_cluster *c, const char *job, const char *host, const char *address,
                          int devices, const figures *f, const gr_master *m, int k, gr_error *err) {
  int t;
  GR_TRY(gr_cluster_add_task(c, job, host, &t, err));
  if (address) GR_TRY(gr_cluster_set_task_address(c, t, address, err));
  for (int d = 0; d < devices; d++)
    GR_TRY(gr_cluster_add_device(c, t, f->flops, 2 * f->copy_bw, f->overhead, err));
  if (m && gr_master_task_threads(m, k) > 0)
    GR_TRY(gr_cluster_set_task_threads(c, t, gr_master_task_threads(m, k), err));
  int cores = m && gr_master_task_cores(m, k) > 0 ? gr_master_task_cores(m, k) : 0;
  if (!address) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0) GR_TRY(gr_cluster_set_host_cores(c, host, cores, err));
  return GR_OK;
}

static void report(const gr_cluster *c, const gr_calibration *cal, const figures *f) {
  static const char *const kinds[GR_LINK_COUNT] = {"same task", "same host", "cross host"};
  fprintf(stderr,
          "calibrate: matmul %.3g Gflop/s per device, op overhead %.3g us, memcpy %.3g GB/s\n",
          f->flops / 1e9, f->overhead * 1e6, f->copy_bw / 1e9);
  for (int k = 0; k < GR_LINK_COUNT; k++) {
    gr_link l = gr_cluster_get_link(c, (gr_link_kind)k);
    fprintf(stderr, "calibrate: %-10s latency %.3g us, bandwidth %.3g GB/s, step %.3g us%s\n",
            kinds[k], l.latency * 1e6, l.bandwidth / 1e9, l.step * 1e6,
            cal->link[k].measured ? "" : " (not measured: no such pair of tasks; the default)");
  }
  const gr_calibration_link *h = &cal->link[GR_LINK_SAME_HOST];
  if (h->measured)
    fprintf(stderr,
            "calibrate: two tasks' work at once: x%.2f of one (%s); their steps %.3g x this "
            "process's\n",
            h->parallelism, h->parallelism < 1.5 ? "the host counts as one core" : "in parallel",
            cal->time_scale);
}

/* Profiles each file's step into db; on a cluster (opener not NULL) also
 * tries its pins-only placement there and fits the tasks' time scale to the
 * geometric mean of the files' factors. */
static int profile_files(const calibrate_opts *o, gr_cluster *c, gr_profile_db *db,
                         gr_master_opener *op) {
  double log_sum = 0;
  int fitted = 0;
  for (int i = 0; i < o->nfiles; i++) {
    gr_graph *g = NULL;
    gr_dsl_program *p = NULL;
    int rc = cli_load_graph_on("calibrate", o->files[i], 0, c, NULL, NULL, 0, &g, &p);
    cli_step st;
    if (rc == GR_EXIT_OK) rc = cli_step_of("calibrate", p, &st);
    gr_error err;
    int nodes = 0;
    if (rc == GR_EXIT_OK &&
        gr_profile_db_record_step(db, g, NULL, 0, st.fetch, st.nf, st.target, st.nt, (int)o->steps,
                                  &nodes, &err) != GR_OK) {
      fprintf(stderr, "graphrun calibrate: %s: %s\n", o->files[i], err.msg);
      rc = GR_EXIT_FAILURE;
    }
    gr_dsl_program_free(p);
    gr_graph_free(g);
    if (rc != GR_EXIT_OK) return rc;
    fprintf(stderr, "calibrate: %s: %d nodes timed\n", o->files[i], nodes);
    if (!op) continue;
    /* the step's pins-only placement on the cluster: predicted, run, fitted */
    rc = cli_load_graph_on("calibrate", o->files[i], 0, c, NULL, NULL, 0, &g, &p);
    if (rc == GR_EXIT_OK) rc = cli_step_of("calibrate", p, &st);
    gr_placer_options po = gr_placer_options_default();
    po.profiles = db;
    po.min_samples = 1;
    cli_step_options(&st, &po);
    gr_placement *pl = NULL;
    gr_place_trial t[GR_PLACE_CAND_COUNT];
    double f = 1;
    gr_status s = rc == GR_EXIT_OK ? gr_placer_place(g, c, &po, &pl, &err) : GR_OK;
    if (rc == GR_EXIT_OK && s == GR_OK)
      s = gr_placement_try(pl, st.fetch, st.nf, st.target, st.nt, &op->o, 1u << GR_PLACE_CAND_PINS,
                           (int)o->steps, 2, 1, t, NULL, &err);
    if (rc == GR_EXIT_OK && s == GR_OK)
      s = gr_placement_fit_scale(pl, c, t[GR_PLACE_CAND_PINS].measured.median, &f, &err);
    if (rc == GR_EXIT_OK && s == GR_OK)
      gr_cluster_scale_servers(c, 1 / f, NULL); /* undone: the mean below */
    gr_placement_free(pl);
    gr_dsl_program_free(p);
    gr_graph_free(g);
    if (rc != GR_EXIT_OK) return rc;
    if (s != GR_OK) {
      fprintf(stderr, "graphrun calibrate: %s on the cluster: %s\n", o->files[i], err.msg);
      return GR_EXIT_FAILURE;
    }
    fprintf(stderr,
            "calibrate: %s: pins only predicted %.3g ms, measured %.3g ms: time scale x%.3g\n",
            o->files[i], t[GR_PLACE_CAND_PINS].predicted * 1e3,
            t[GR_PLACE_CAND_PINS].measured.median * 1e3, f);
    log_sum += log(f);
    fitted++;
  }
  if (fitted) gr_cluster_scale_servers(c, exp(log_sum / fitted), NULL);
  return GR_EXIT_OK;
}

/* The file: stdout or --out. */
static int write_cluster(const gr_cluster *c, const char *path) {
  gr_error err;
  FILE *f = path ? fopen(path, "w") : stdout;
  if (!f) {
    fprintf(stderr, "graphrun calibrate: cannot write '%s': %s\n", path, strerror(errno));
    return GR_EXIT_USAGE;
  }
  gr_status s = gr_cluster_write_json(c, f, &err);
  if (path && fclose(f) != 0 && s == GR_OK)
    s = gr_error_set(&err, GR_ERR_IO, "%s: write error", path);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun calibrate: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  return GR_EXIT_OK;
}

int gr_cmd_calibrate(int argc, char **argv) {
  calibrate_opts o;
  int rc = parse(argc, argv, &o);
  if (rc != GR_EXIT_OK) return rc < 0 ? GR_EXIT_OK : rc;
  gr_error err;
  gr_cluster *given = NULL, *c = gr_cluster_new(), *pair = NULL;
  const char *from = "the local tasks";
  char local_secret[65], *secret = NULL;
  cli_master_conf conf = {0};
  cli_tasks tasks = {.life_w = -1};
  gr_master *m = NULL;
  gr_profile_db *db = NULL;
  figures fig;
  if (!c) return GR_EXIT_FAILURE;
  if (o.cluster_spec) { /* a running cluster */
    cli_set_identity(o.cluster_id, o.insecure);
    if (cli_load_cluster(o.cluster_spec, &given, &from, &err) != GR_OK ||
        cli_read_secret(o.secret_file, o.insecure, &secret, &err) != GR_OK) {
      fprintf(stderr, "graphrun calibrate: %s\n", err.msg);
      rc = GR_EXIT_USAGE;
      goto out;
    }
  } else if (!random_secret(local_secret)) {
    fprintf(stderr, "graphrun calibrate: no random bytes for the local tasks' secret\n");
    rc = GR_EXIT_FAILURE;
    goto out;
  } else if (cli_tasks_start(&tasks, 2, local_secret, &err) != GR_OK) { /* before any thread */
    fprintf(stderr, "graphrun calibrate: starting two local tasks: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
    goto out;
  }
  if ((rc = measure_machine(o.quick, &fig)) != GR_EXIT_OK) goto out;
  cli_blas_note();
  /* the master, and the cluster model the runtime is measured on */
  conf.mo =
      (gr_master_options){.num_tasks = tasks.n, .addresses = tasks.addrs, .secret = local_secret};
  gr_status s = given ? cli_master_options(given, from, secret, 0, &conf, &err) : GR_OK;
  if (s == GR_OK) s = gr_master_new(&conf.mo, &m, &err);
  gr_cluster *target = c;
  if (s == GR_OK && given) {
    for (int k = 0; k < gr_cluster_num_tasks(given) && s == GR_OK; k++) {
      const gr_cluster_task *t = gr_cluster_task_at(given, k);
      s = add_task(c, t->job, t->host, t->address, t->num_devices, &fig, m, k, &err);
    }
  } else if (s == GR_OK) {
    pair = gr_cluster_new();
    for (int k = 0; k < tasks.n && s == GR_OK; k++)
      s = pair ? add_task(pair, "worker", "127.0.0.1", tasks.addrs[k], 1, &fig, m, k, &err)
               : gr_error_set_oom(&err);
    if (s == GR_OK) s = add_task(c, o.job, "localhost", NULL, (int)o.devices, &fig, NULL, 0, &err);
    target = pair;
  }
  gr_calibration cal;
  gr_calibrate_options co = {.steps = o.quick ? 10 : 0,
                             .rounds = o.quick ? 1 : 0,
                             .bulk_bytes = o.quick ? (size_t)1 << 20 : 0};
  if (s == GR_OK) s = gr_calibrate_runtime(m, target, &co, &cal, &err);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun calibrate: %s: %s\n", from, err.msg);
    rc = s == GR_ERR_INVALID_ARGUMENT ? GR_EXIT_USAGE : GR_EXIT_FAILURE;
    goto out;
  }
  if (pair) /* the local file: the links measured between the two tasks */
    for (int k = 0; k < GR_LINK_COUNT; k++)
      gr_cluster_set_link(c, (gr_link_kind)k, gr_cluster_get_link(pair, (gr_link_kind)k));
  report(c, &cal, &fig);
  if (o.profiles) {
    if (gr_profile_db_open(o.profiles, &db, &err) != GR_OK) {
      fprintf(stderr, "graphrun calibrate: %s\n", err.msg);
      rc = GR_EXIT_USAGE;
      goto out;
    }
    gr_master_opener op;
    gr_master_opener_init(&op, &conf.mo);
    if ((rc = profile_files(&o, c, db, given ? &op : NULL)) != GR_EXIT_OK) goto out;
  }
  rc = write_cluster(c, o.out_path);
out:
  gr_master_free(m);
  cli_master_conf_free(&conf);
  cli_tasks_stop(&tasks);
  gr_profile_db_close(db);
  gr_cluster_free(pair);
  gr_cluster_free(given);
  gr_cluster_free(c);
  free(secret);
  return rc;
}
