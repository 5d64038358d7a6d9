/* graphrun run FILE.gr: builds the graph of a .gr file and runs it for N
 * steps with feeds read from files, printing the fetched tensors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_cluster.h"
#include "cli_util.h"
#include "commands.h"
#include "placer/gr_placer.h"

#define MAX_ITEMS CLI_MAX_NAMES
/* The most inter-op threads a session takes (gr_session_new refuses more). */
#define GR_CLI_MAX_THREADS 1024

static void usage(FILE *f) {
  fprintf(
      f, "usage: graphrun run FILE.gr [options]\n\n"
         "Builds the graph of FILE.gr, runs it and prints the fetched tensors.\n\n"
         "  --feed NAME=PATH   feed placeholder NAME from a file: IDX (also .gz), .npy or CSV;\n"
         "  --feed NAME=1,2,3  or a vector of numbers; --feed NAME=5: a scalar (repeatable)\n"
         "  --fetch A,B        names to fetch (default: the file's `fetch` names, else its last\n"
         "                     binding; one without a value, a train op, runs as a target)\n"
         "  --target T,U       nodes to run for their effect each step, e.g. a train op\n"
         "                     (default: the file's `target` names)\n"
         "  --steps N          run N steps (default 1); shows progress on stderr\n"
         "  --seed S           graph-level random seed (default 0)\n"
         "  --threads T        inter-op threads, at most 1024 (default: number of cores)\n"
         "  --devices N        local CPU devices /job:localhost/replica:0/task:0/device:CPU:K\n"
         "                     (default 1); a step spread over several runs one executor per\n"
         "                     device, joined by send/recv (docs/partitioning.md)\n"
         "  --placement P      where unpinned nodes run with --devices: 'pins' (device 0, the\n"
         "                     default), 'cost' (the cost-model placer), 'round-robin' (node\n"
         "                     i on device i mod N: spreads every graph, for testing)\n"
         "  --soft-placement   a pin to a device this run does not have (/job:worker/task:1)\n"
         "                     runs on a local device, with a note, instead of failing\n"
         "  --schedule-recvs   with --devices: start each receive as late as a critical-path\n"
         "                     estimate allows (holds received values for less time)\n"
         "  --trace PATH       write the last step's node runs (device, start, duration,\n"
         "                     bytes) as a Chrome trace: open in ui.perfetto.dev\n"
         "  --eval A,B         after the last step, run once more fetching A,B only (no\n"
         "                     targets), e.g. a test accuracy\n"
         "  --timeout S        fail a step in which no kernel runs or finishes for S seconds (a\n"
         "                     deadlock), naming the nodes still waiting (default 300; 0: no\n"
         "                     limit)\n"
         "  --json             print the fetches of the last step as one JSON object (floats\n"
         "                     exact; NaN and infinities as \"NaN\", \"Infinity\", \"-Infinity\")\n"
         "  --out DIR          also write each fetched tensor as DIR/NAME.npy (made if missing)\n"
         "  --quiet            no progress display\n"
         "  --ckpt PATH        checkpoint file (SQLite): restore the latest checkpoint on start\n"
         "                     and save to it; --steps then counts all steps, restored ones too;\n"
         "                     with --cluster a directory: each task saves its own shard file\n"
         "                     and a manifest commits them (docs/checkpoints.md)\n"
         "  --save-every N     save every N steps (default: only at the end)\n"
         "  --keep K           keep the newest K checkpoints (default 5; 0 keeps all)\n"
         "  --no-restore       start fresh even if PATH has checkpoints\n"
         "  --cluster C        run on a cluster's tasks (graphrun server processes): C is a\n"
         "                     JSON cluster file or text (ClusterSpec, TF_CONFIG or the placer's\n"
         "                     form, with host:port addresses), 'env' for TF_CONFIG, or\n"
         "                     'slurm[:JOBS][@PORT]' for Slurm's variables\n"
         "                     (default: GRAPHRUN_CLUSTER, which graphrun launch sets; unpinned\n"
         "                     nodes run on the chief's or worker 0's device)\n"
         "  --secret-file F    the cluster's shared secret (default: GRAPHRUN_SECRET_FILE)\n"
         "  --job J --task I   between-graph training: run as this worker's own client; the\n"
         "                     program's default device is /job:J/task:I, task_index() is I;\n"
         "                     the chief (job 'chief', else worker 0) initialises, restores and\n"
         "                     saves the shared variables (--ckpt is the chief's; the others\n"
         "                     ignore it), the others wait for them\n"
         "  --recovery-timeout S  with --cluster and --ckpt, a lost or restarted task is\n"
         "                     waited for up to S seconds (default 60), then the run restores\n"
         "                     the newest checkpoint and goes on from it\n"
         "  --max-failures K   give up after K recoveries (default 10)\n"
         "  --heartbeat MS:N   a task silent for MS ms is pinged and lost after N silent\n"
         "                     periods (default 100:5)\n\n"
         "Exit codes: 0 ok, 1 runtime failure, 2 usage or input error.\n");
}

static bool parse_long(const char *s, long lo, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo) return false;
  *out = v;
  return true;
}

/* Longest --timeout: about 24 days, so the milliseconds fit an int. */
#define MAX_TIMEOUT_S 2000000.0

static bool parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0 && v <= MAX_TIMEOUT_S)) return false;
  *out = v;
  return true;
}

/* Prints the results (text, or JSON members) and with --out writes each as
 * OUT_DIR/NAME.npy. Returns a GR_EXIT_ code. */
static int output_results(const char *const *names, const gr_tensor *results, int n, bool json,
                          bool first, const char *out_dir) {
  for (int i = 0; i < n; i++) {
    if (json) {
      printf("%s\"%s\": ", first && i == 0 ? "" : ", ", names[i]);
      cli_print_tensor_json(stdout, &results[i]);
    } else {
      if (results[i].shape.rank == 0) {
        printf("%s = ", names[i]);
      } else {
        char sh[GR_SHAPE_STR_MAX];
        printf("%s = %s%s\n", names[i], gr_dtype_name(results[i].dtype),
               gr_shape_str(&results[i].shape, sh));
      }
      cli_print_tensor(stdout, &results[i]);
      printf("\n");
    }
    if (!out_dir) continue;
    char *path;
    gr_error err;
    if (cli_out_path("run --out", out_dir, names[i], ".npy", &path) != GR_EXIT_OK)
      return GR_EXIT_FAILURE;
    gr_status st = gr_ckpt_write_npy(&results[i], path, &err);
    free(path);
    if (st != GR_OK) {
      fprintf(stderr, "graphrun run: --out: %s\n", err.msg);
      return GR_EXIT_FAILURE;
    }
  }
  return GR_EXIT_OK;
}

/* --out DIR: made now if missing, so a bad path fails before the run. */
static int make_out_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return GR_EXIT_OK;
  if (mkdir(dir, 0755) != 0) {
    fprintf(stderr, "graphrun run: --out %s: %s\n", dir, strerror(errno));
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* The steps of this command done when the newest checkpoint was saved. */
static long steps_done_of(gr_ckpt *ck) {
  gr_ckpt_info *infos = NULL;
  int n = 0;
  long done = 0;
  gr_error err;
  if (gr_ckpt_list(ck, &infos, &n, &err) == GR_OK && n > 0 && infos[n - 1].metadata) {
    const char *m = strstr(infos[n - 1].metadata, "\"steps_done\":");
    if (m) done = strtol(m + 14, NULL, 10);
  }
  gr_ckpt_infos_free(infos, n);
  return done;
}

/* Opens the checkpoint file and, unless no_restore, restores its newest
 * checkpoint; *done: the steps of this command already done then. */
static int open_checkpoint(const char *path, int keep, bool no_restore, bool remote, gr_session *s,
                           gr_graph *g, gr_ckpt **ck, long *done) {
  gr_error err;
  /* on a cluster a directory: each task saves its shard, the manifest commits them */
  gr_ckpt_options o = {.max_to_keep = keep, .sharded = remote};
  if (gr_ckpt_open(path, &o, ck, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --ckpt: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  *done = 0;
  if (no_restore) return GR_EXIT_OK;
  int64_t step;
  gr_status st = remote ? cli_restore_remote(*ck, s, g, &step, &err)
                        : gr_ckpt_restore_latest(*ck, s, g, &step, &err);
  if (st == GR_ERR_NOT_FOUND) return GR_EXIT_OK;
  if (st != GR_OK) {
    fprintf(stderr, "graphrun run: restoring %s: %s\n(use --no-restore to start fresh)\n", path,
            err.msg);
    return GR_EXIT_FAILURE;
  }
  *done = steps_done_of(*ck);
  fprintf(stderr, "graphrun run: restored %s (%ld steps done)\n", path, *done);
  return GR_EXIT_OK;
}

/* Saves the variables after steps_done steps (a file, or on a cluster each
 * task's shard and the manifest). */
static gr_status save_checkpoint(gr_ckpt *ck, gr_session *s, gr_graph *g, long steps_done,
                                 bool remote, gr_error *err) {
  char meta[64];
  snprintf(meta, sizeof meta, "{\"steps_done\": %ld}", steps_done);
  return remote ? cli_save_remote(ck, s, g, meta, err) : gr_ckpt_save_session(ck, s, g, meta, err);
}

/* Assigns devices to the nodes that no pin decides, per --placement. */
static int place_nodes(gr_graph *g, int devices, gr_place_mode mode, bool soft,
                       const gr_cluster *cluster) {
  gr_error err;
  if (gr_placer_assign(g, cluster, devices, mode, soft, &err) == GR_OK) return GR_EXIT_OK;
  fprintf(stderr, "graphrun run: placement: %s\n", err.msg);
  if (!soft && strstr(err.msg, "soft placement is off"))
    fprintf(stderr, "  (--soft-placement runs it on a local device instead)\n");
  return GR_EXIT_USAGE;
}

/* What a cluster run with --ckpt needs to recover from a lost task. */
typedef struct recovery {
  const gr_cluster *cluster;
  const char *from, *secret, *ckpt_path;
  const gr_session_options *opts;
  double timeout_s;
  long failures, max_failures;
  gr_ckpt *ck; /* NULL: a worker that is not the chief (it waits for the chief) */
  gr_graph *g;
  const cli_worker *self;
} recovery;

enum { RECOVERED, NOT_RECOVERABLE, RECOVERY_FAILED };

/* After `what` failed with err: when a task was lost or restarted and
 * failures remain, waits for the tasks and restores the newest checkpoint
 * into a new master and session (*m, *s; *at its step, -1 when there was
 * none yet). NOT_RECOVERABLE: the caller reports err; RECOVERY_FAILED:
 * reported here. */
static int recover(recovery *r, const char *what, gr_error *err, gr_master **m, gr_session **s,
                   int64_t *at) {
  if ((err->code != GR_ERR_UNAVAILABLE && err->code != GR_ERR_ABORTED) ||
      r->failures >= r->max_failures)
    return NOT_RECOVERABLE;
  r->failures++;
  fprintf(stderr,
          "graphrun run: %s failed: %s\ngraphrun run: recovering (%ld of at most %ld): waiting "
          "up to %.0f s for every task, then %s%s\n",
          what, err->msg, r->failures, r->max_failures, r->timeout_s,
          r->ck ? "restoring " : "for the chief to restore the shared variables",
          r->ck ? r->ckpt_path : "");
  gr_status st = cli_recover(r->cluster, r->from, r->secret, r->opts->step_timeout_ms,
                             (int)(r->timeout_s * 1000), r->g, r->opts, r->ck, m, s, at, err);
  if (st == GR_OK && !r->ck) st = cli_wait_for_chief(*s, r->self, r->timeout_s, false, err);
  if (st != GR_OK) {
    fprintf(stderr, "graphrun run: recovery failed: %s\n", err->msg);
    return RECOVERY_FAILED;
  }
  return RECOVERED;
}

/* gr_session_options.log_fn: notes (soft placement) go to stderr. */
static void print_note(void *arg, const char *msg) {
  (void)arg;
  fprintf(stderr, "graphrun run: note: %s\n", msg);
}

int gr_cmd_run(int argc, char **argv) {
  const char *file = NULL, *feed_names[MAX_ITEMS], *feed_paths[MAX_ITEMS];
  const char *fetch_names[MAX_ITEMS], *target_names[MAX_ITEMS], *eval_names[MAX_ITEMS];
  int nfeed = 0, nfetch = 0, ntarget = 0, neval = 0;
  long steps = 1, seed = 0, threads = 0, save_every = 0, keep = 5, devices = 1;
  double timeout_s = 300;
  gr_place_mode placement = GR_PLACE_PINS;
  bool json = false, quiet = false, no_restore = false;
  const char *ckpt_path = NULL, *trace_path = NULL, *out_dir = NULL;
  const char *cluster_spec = NULL, *secret_file = NULL;
  double recovery_s = 60;
  long max_failures = 10, task_index = -1;
  const char *job = NULL;
  bool schedule_recvs = false, soft = false;
  gr_step_trace *trace = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = true;
    } else if (strcmp(a, "--no-restore") == 0) {
      no_restore = true;
    } else if (strcmp(a, "--schedule-recvs") == 0) {
      schedule_recvs = true;
    } else if (strcmp(a, "--soft-placement") == 0) {
      soft = true;
    } else if (strcmp(a, "--timeout") == 0 && has_val) {
      if (!parse_seconds(argv[++i], &timeout_s)) {
        fprintf(stderr,
                "graphrun run: --timeout wants seconds in [0, %.0f] (0: no limit), got '%s'\n",
                MAX_TIMEOUT_S, argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--cluster") == 0 && has_val) {
      cluster_spec = argv[++i];
    } else if (strcmp(a, "--secret-file") == 0 && has_val) {
      secret_file = argv[++i];
    } else if (strcmp(a, "--heartbeat") == 0 && has_val) {
      int ms = 0, missed = 0, used = 0;
      if (sscanf(argv[++i], "%d:%d%n", &ms, &missed, &used) != 2 || argv[i][used] || ms < 10 ||
          ms > 60000 || missed < 2 || missed > 1000) {
        fprintf(stderr,
                "graphrun run: --heartbeat wants MS:N (a ping after MS ms of silence, 10 to "
                "60000; lost after N silent periods, 2 to 1000), got '%s'\n",
                argv[i]);
        return GR_EXIT_USAGE;
      }
      cli_set_heartbeat(ms, missed);
    } else if (strcmp(a, "--job") == 0 && has_val) {
      job = argv[++i];
    } else if (strcmp(a, "--task") == 0 && has_val) {
      if (!parse_long(argv[++i], 0, &task_index) || task_index > 100000) {
        fprintf(stderr, "graphrun run: --task wants a task index in [0, 100000], got '%s'\n",
                argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--recovery-timeout") == 0 && has_val) {
      if (!parse_seconds(argv[++i], &recovery_s)) {
        fprintf(stderr, "graphrun run: --recovery-timeout wants seconds in [0, %.0f], got '%s'\n",
                MAX_TIMEOUT_S, argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--max-failures") == 0 && has_val) {
      if (!parse_long(argv[++i], 0, &max_failures) || max_failures > 1000000) {
        fprintf(stderr, "graphrun run: --max-failures wants an integer in [0, 1000000], got '%s'\n",
                argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--out") == 0 && has_val) {
      out_dir = argv[++i];
    } else if (strcmp(a, "--trace") == 0 && has_val) {
      trace_path = argv[++i];
    } else if (strcmp(a, "--devices") == 0 && has_val) {
      if (!parse_long(argv[++i], 1, &devices) || devices > 64) {
        fprintf(stderr, "graphrun run: --devices wants an integer in [1, 64], got '%s'\n", argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--placement") == 0 && has_val) {
      if (!gr_place_mode_parse(argv[++i], &placement)) {
        fprintf(stderr,
                "graphrun run: --placement wants 'pins', 'cost' or 'round-robin', got '%s'\n",
                argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--ckpt") == 0 && has_val) {
      ckpt_path = argv[++i];
    } else if ((strcmp(a, "--save-every") == 0 || strcmp(a, "--keep") == 0) && has_val) {
      long *dst = a[2] == 's' ? &save_every : &keep;
      if (!parse_long(argv[++i], dst == &save_every ? 1 : 0, dst) || *dst > 1000000000) {
        fprintf(stderr, "graphrun run: %s wants a %s integer, got '%s'\n", a,
                dst == &save_every ? "positive" : "non-negative", argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (strcmp(a, "--feed") == 0 && has_val) {
      char *eq = strchr(argv[++i], '=');
      if (!eq || eq == argv[i] || !eq[1] || nfeed == MAX_ITEMS) {
        fprintf(stderr, "graphrun run: --feed wants NAME=PATH, got '%s'\n", argv[i]);
        return GR_EXIT_USAGE;
      }
      *eq = '\0';
      feed_names[nfeed] = argv[i];
      feed_paths[nfeed++] = eq + 1;
    } else if (strcmp(a, "--fetch") == 0 && has_val) {
      nfetch = cli_split_names(argv[++i], fetch_names, nfetch);
    } else if (strcmp(a, "--eval") == 0 && has_val) {
      neval = cli_split_names(argv[++i], eval_names, neval);
    } else if (strcmp(a, "--target") == 0 && has_val) {
      ntarget = cli_split_names(argv[++i], target_names, ntarget);
    } else if ((strcmp(a, "--steps") == 0 || strcmp(a, "--seed") == 0 ||
                strcmp(a, "--threads") == 0) &&
               has_val) {
      long *dst = a[2] == 's' && a[3] == 't' ? &steps : a[2] == 's' ? &seed : &threads;
      if (dst == &threads && (!parse_long(argv[++i], 0, dst) || *dst > GR_CLI_MAX_THREADS)) {
        fprintf(stderr,
                "graphrun run: --threads wants an integer in [0, %d] (a session runs at most %d "
                "inter-op threads; 0: one per core, %d on this machine), got '%s'\n",
                GR_CLI_MAX_THREADS, GR_CLI_MAX_THREADS, gr_num_cores(), argv[i]);
        return GR_EXIT_USAGE;
      }
      if (dst != &threads && !parse_long(argv[++i], dst == &steps ? 1 : 0, dst)) {
        fprintf(stderr, "graphrun run: %s wants a %s integer, got '%s'\n", a,
                dst == &steps ? "positive" : "non-negative", argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "graphrun run: unknown option or missing value: '%s' (try --help)\n", a);
      return GR_EXIT_USAGE;
    } else if (!file) {
      file = a;
    } else {
      fprintf(stderr, "graphrun run: more than one file given ('%s', '%s')\n", file, a);
      return GR_EXIT_USAGE;
    }
  }
  if (!file) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  if (!ckpt_path && (save_every || no_restore)) {
    fprintf(stderr, "graphrun run: --save-every and --no-restore need --ckpt PATH\n");
    return GR_EXIT_USAGE;
  }
  gr_graph *g;
  gr_dsl_program *p;
  /* the cluster first: the program may ask it (num_tasks("worker")) */
  gr_cluster *cluster = NULL;
  const char *cluster_from = NULL;
  gr_error cerr;
  if (cli_load_cluster(cluster_spec, &cluster, &cluster_from, &cerr) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", cerr.msg);
    return GR_EXIT_USAGE;
  }
  cli_worker self;
  int rc = cli_worker_setup(&self, job, task_index, cluster);
  if (self.on && !self.chief) /* the checkpoint is the chief's (launch gives all the same flags) */
    ckpt_path = NULL, save_every = 0, no_restore = false;
  if (rc == GR_EXIT_OK)
    rc = cli_load_graph_on("run", file, (uint64_t)seed, cluster, self.on ? self.device : NULL,
                           self.on ? self.task : 0, &g, &p);
  if (rc != GR_EXIT_OK) {
    gr_cluster_free(cluster);
    return rc;
  }
  cli_default_names(p, fetch_names, &nfetch, target_names, &ntarget);
  gr_output fetches[MAX_ITEMS], targets[MAX_ITEMS], evals[MAX_ITEMS];
  gr_feed feeds[MAX_ITEMS];
  gr_tensor feed_vals[MAX_ITEMS], results[MAX_ITEMS];
  int nloaded = 0;
  gr_session *s = NULL;
  gr_ckpt *ck = NULL;
  gr_master *master = NULL;
  char *secret = NULL;
  long done_steps = 0;
  gr_error err;
  rc = GR_EXIT_USAGE;
  if (cli_lookup_names("run", p, fetch_names, nfetch, true, fetches) != GR_EXIT_OK ||
      cli_lookup_names("run", p, target_names, ntarget, false, targets) != GR_EXIT_OK)
    goto done;
  for (int i = 0; i < neval; i++)
    if (!gr_dsl_lookup(p, eval_names[i], &evals[i]) || evals[i].index < 0) {
      fprintf(stderr, "graphrun run: cannot evaluate '%s': no such name or node\n", eval_names[i]);
      goto done;
    }
  if (nfetch == 0 && ntarget == 0 && neval == 0) {
    fprintf(stderr, "graphrun run: nothing to run: the file binds no names; use --fetch or "
                    "--target\n");
    goto done;
  }
  for (int i = 0; i < nfeed; i++) {
    gr_output o;
    if (!gr_dsl_lookup(p, feed_names[i], &o) || o.index < 0) {
      fprintf(stderr, "graphrun run: cannot feed '%s': no such name or node\n", feed_names[i]);
      goto done;
    }
    const gr_shape *want = &o.node->out_shapes[o.index];
    if (cli_read_tensor(feed_paths[i], o.node->out_dtypes[o.index], &feed_vals[i], &err) != GR_OK) {
      fprintf(stderr, "graphrun run: --feed %s: %s\n", feed_names[i], err.msg);
      goto done;
    }
    nloaded++;
    if (!gr_shape_compatible(&feed_vals[i].shape, want)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      fprintf(stderr, "graphrun run: --feed %s: the value has shape %s, '%s' wants %s\n",
              feed_names[i], gr_shape_str(&feed_vals[i].shape, a), o.node->name,
              gr_shape_str(want, b));
      goto done;
    }
    feeds[i] = (gr_feed){o, &feed_vals[i]};
  }
  if (cluster && devices > 1) {
    fprintf(stderr, "graphrun run: --devices is for one process; with a cluster the devices are "
                    "its tasks'\n");
    goto done;
  }
  if ((rc = place_nodes(g, (int)devices, placement, soft, cluster)) != GR_EXIT_OK) goto done;
  rc = GR_EXIT_FAILURE;
  gr_session_options opts = {
      .inter_op_threads = (int)threads,
      .num_devices = (int)devices,
      .schedule_recvs = schedule_recvs,
      .soft_placement = soft,
      .log_fn = print_note,
      /* a sub-millisecond timeout is still a timeout */
      .step_timeout_ms = timeout_s > 0 && timeout_s < 0.001 ? 1 : (int)(timeout_s * 1000.0 + 0.5)};
  if (out_dir && (rc = make_out_dir(out_dir)) != GR_EXIT_OK) goto done;
  rc = GR_EXIT_FAILURE;
  if (trace_path) { /* a path that cannot be written fails now, not after the run */
    bool existed = access(trace_path, F_OK) == 0;
    FILE *tf = fopen(trace_path, "a"); /* neither truncates nor leaves an empty file behind */
    if (!tf) {
      fprintf(stderr, "graphrun run: --trace %s: %s\n", trace_path, strerror(errno));
      rc = GR_EXIT_USAGE;
      goto done;
    }
    fclose(tf);
    if (!existed) remove(trace_path);
    if (!(trace = gr_step_trace_new())) {
      fprintf(stderr, "graphrun run: out of memory\n");
      goto done;
    }
  }
  if (cluster &&
      (cli_read_secret(secret_file, &secret, &err) != GR_OK ||
       cli_connect(cluster, cluster_from, secret, opts.step_timeout_ms, &master, &err) != GR_OK)) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    goto done;
  }
  if (master && !quiet) {
    int nd;
    gr_master_devices(master, &nd);
    fprintf(stderr, "graphrun run: cluster of %d tasks (%s), %d devices\n",
            gr_cluster_num_tasks(cluster), cluster_from, nd);
  }
  if (!(s = master ? gr_master_session_new(master, g, &opts, &err)
                   : gr_session_new(g, &opts, &err))) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    goto done;
  }
  /* input errors (a placeholder not fed, a name fed twice) exit 2 before anything runs */
  if (gr_session_check_feeds(s, feeds, nfeed, fetches, nfetch, targets, ntarget, &err) != GR_OK ||
      gr_session_check_feeds(s, feeds, nfeed, evals, neval, NULL, 0, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    if (strstr(err.msg, "must be fed"))
      fprintf(stderr, "  (feed it: --feed NAME=FILE, --feed NAME=1.5 or --feed NAME=1,2,3)\n");
    rc = GR_EXIT_USAGE;
    goto done;
  }
  if (ckpt_path && (rc = open_checkpoint(ckpt_path, (int)keep, no_restore, master != NULL, s, g,
                                         &ck, &done_steps)) != GR_EXIT_OK)
    goto done;
  recovery rec = {cluster, cluster_from, secret, ckpt_path, &opts, recovery_s,
                  0,       max_failures, ck,     g,         &self};
  /* a worker that is not the chief starts once the chief has given the
   * shared variables their values */
  if (self.on && !self.chief && cli_wait_for_chief(s, &self, recovery_s, quiet, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
    goto done;
  }
  int64_t latest;
  if (master && ck && gr_ckpt_latest_step(ck, &latest, &err) == GR_ERR_NOT_FOUND)
    for (;;) { /* the checkpoint a lost task restarts from; a task lost before it is waited for */
      if (save_checkpoint(ck, s, g, 0, true, &err) == GR_OK) break;
      int how = recover(&rec, "saving the first checkpoint", &err, &master, &s, &latest);
      if (how == NOT_RECOVERABLE)
        fprintf(stderr, "graphrun run: saving the first checkpoint: %s\n", err.msg);
      if (how != RECOVERED) {
        rc = GR_EXIT_FAILURE;
        goto done;
      }
    }
  rc = GR_EXIT_FAILURE;
  cli_progress pr;
  gr_transfer_stats moved = {0, 0};
  bool show = steps - done_steps > 1 && !quiet;
  if (show) cli_progress_start(&pr, steps, stderr);
  for (long st = done_steps + 1; st <= steps; st++) {
    /* the step, then on a saving step the checkpoint: a lost task fails either */
    bool saving = ck && ((save_every && st % save_every == 0) || st == steps);
    gr_status ok = gr_session_run_traced(s, feeds, nfeed, fetches, nfetch, results, targets,
                                         ntarget, st == steps ? trace : NULL, &err);
    bool in_save = false;
    if (ok == GR_OK) {
      moved = gr_session_last_transfers(s); /* before a checkpoint's own step */
      if (show) {
        int k = 0;
        while (k < nfetch && gr_tensor_num_elements(&results[k]) != 1) k++;
        cli_progress_update(&pr, st, k < nfetch ? fetch_names[k] : "", k < nfetch,
                            k < nfetch ? gr_tensor_get_f64(&results[k], 0) : 0);
      }
      in_save = saving;
      if (saving) ok = save_checkpoint(ck, s, g, st, master != NULL, &err);
    }
    if (ok != GR_OK) {
      if (show && pr.tty) fputc('\n', stderr);
      char when[64];
      snprintf(when, sizeof when, in_save ? "saving the checkpoint after step %ld" : "step %ld",
               st);
      int64_t at;
      double t_rec = cli_now();
      bool follower = self.on && !self.chief; /* recovers without a checkpoint of its own */
      int how = master && (ck || follower) ? recover(&rec, when, &err, &master, &s, &at)
                                           : NOT_RECOVERABLE;
      if (how == RECOVERY_FAILED) goto done;
      if (in_save)
        for (int i = 0; i < nfetch; i++) gr_tensor_release(&results[i]);
      if (how == RECOVERED) {
        /* a follower goes on with its own count: the chief restored the shared state */
        long resumed = !ck ? (in_save ? st : st - 1) : at < 0 ? 0 : steps_done_of(ck);
        fprintf(stderr,
                "graphrun run: recovered in %.0f ms: resuming after step %ld (%ld steps lost)\n",
                (cli_now() - t_rec) * 1000, resumed, (in_save ? st : st - 1) - resumed);
        st = resumed; /* the loop goes on with step resumed + 1 */
        continue;
      }
      cli_print_run_error("run", when, &err);
      goto done;
    }
    if (saving && !quiet && st < steps) {
      if (show && pr.tty) fputc('\n', stderr);
      fprintf(stderr, "graphrun run: saved a checkpoint after step %ld to %s\n", st, ckpt_path);
    }
    if (st < steps)
      for (int i = 0; i < nfetch; i++) gr_tensor_release(&results[i]);
  }
  if (show) cli_progress_finish(&pr, steps);
  if (trace && done_steps < steps) {
    if (cli_write_trace(trace_path, trace) != 0) {
      fprintf(stderr, "graphrun run: --trace %s: %s\n", trace_path, strerror(errno));
      goto done;
    }
    if (!quiet) {
      fprintf(stderr, "graphrun run: wrote the last step's trace (%d node runs) to %s\n",
              gr_step_trace_count(trace), trace_path);
      cli_link links[64];
      int nl = cli_trace_links(trace, links, 64);
      for (int k = 0; k < nl; k++)
        fprintf(stderr, "graphrun run:   %s -> %s: %lld values, %lld bytes\n", links[k].from,
                links[k].to, links[k].values, links[k].bytes);
    }
  }
  if ((devices > 1 || master) && !quiet && done_steps < steps) {
    fprintf(stderr, "graphrun run: the last step sent %lld values between devices (%lld bytes)\n",
            (long long)moved.sends, (long long)moved.bytes);
  }
  if (done_steps >= steps) { /* everything was done before: fetch once more to print */
    if (gr_session_run(s, feeds, nfeed, fetches, nfetch, results, NULL, 0, &err) != GR_OK) {
      cli_print_run_error("run", NULL, &err);
      goto done;
    }
  }
  if (json) printf("{");
  int orc = output_results(fetch_names, results, nfetch, json, true, out_dir);
  for (int i = 0; i < nfetch; i++) gr_tensor_release(&results[i]);
  if (orc != GR_EXIT_OK) goto done;
  if (neval) {
    if (gr_session_run(s, feeds, nfeed, evals, neval, results, NULL, 0, &err) != GR_OK) {
      cli_print_run_error("run", "--eval", &err);
      goto done;
    }
    orc = output_results(eval_names, results, neval, json, nfetch == 0, out_dir);
    for (int i = 0; i < neval; i++) gr_tensor_release(&results[i]);
    if (orc != GR_EXIT_OK) goto done;
  }
  if (json) printf("}\n");
  if (!quiet && out_dir && nfetch + neval > 0)
    fprintf(stderr, "graphrun run: wrote %d .npy file%s to %s\n", nfetch + neval,
            nfetch + neval > 1 ? "s" : "", out_dir);
  if (!quiet && !show && !json && nfetch + neval == 0)
    fprintf(stderr, "graphrun run: %ld step%s run, nothing fetched (--fetch NAME prints a value)\n",
            steps, steps > 1 ? "s" : "");
  rc = GR_EXIT_OK;
done:
  gr_step_trace_free(trace);
  for (int i = 0; i < nloaded; i++) gr_tensor_release(&feed_vals[i]);
  gr_ckpt_close(ck);
  gr_session_free(s);
  gr_master_free(master);
  gr_cluster_free(cluster);
  free(secret);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
