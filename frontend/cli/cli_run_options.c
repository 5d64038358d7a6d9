/* graphrun run: its flags (--help's text and their parsing into
 * cli_run_options). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "cli_epochs.h"
#include "cli_options.h"
#include "cli_resolve.h"
#include "cli_run.h"
#include "commands.h"

/* The most inter-op threads a session takes (gr_session_new refuses more). */
#define GR_CLI_MAX_THREADS 1024
/* Longest --timeout: about 24 days, so the milliseconds fit an int. */
#define MAX_TIMEOUT_S 2000000.0

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
         "  --steps-per-run K  on a cluster, run K steps at a time: each task loops over its\n"
         "                     part of the step K times with no message from this client\n"
         "                     between (the same bits as one at a time); fetches, progress\n"
         "                     and checkpoints after every K steps, or sooner to save\n"
         "                     (default 1; not with --epochs)\n"
         "  --seed S           graph-level random seed (default 0)\n"
         "  --threads T        inter-op threads, at most 1024 (default: number of cores)\n"
         "  --devices N        local CPU devices /job:localhost/replica:0/task:0/device:CPU:K\n"
         "                     (default 1); a step spread over several runs one executor per\n"
         "                     device, joined by send/recv (docs/partitioning.md)\n"
         "  --placement P      where unpinned nodes run with --devices: 'pins' (device 0, the\n"
         "                     default), 'cost' (the cost-model placer), 'round-robin' (node\n"
         "                     i on device i mod N: spreads every graph, for testing)\n"
         "  --soft-placement   a pin to a device this run does not have (/job:worker/task:1,\n"
         "                     /gpu:0) runs on a local device, with a note, instead of failing\n"
         "  --schedule-recvs   with --devices: start each receive as late as a critical-path\n"
         "                     estimate allows (holds received values for less time)\n"
         "  --no-fusion        run the nodes as built: no fusion of chains such as conv2d +\n"
         "                     bias_add + relu into one node (the same bits either way)\n"
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
         "  --save-async       save in the background: a copy of the variables taken between\n"
         "                     steps is written while the next steps run, one save at a time;\n"
         "                     a failed write fails the run at the next save or at its end;\n"
         "                     on a cluster each task writes its shard in the background\n"
         "  --keep K           keep the newest K checkpoints (default 5; 0 keeps all)\n"
         "  --no-restore       start fresh even if PATH has checkpoints (a --container\n"
         "                     is reset first: its variables start from initial values)\n"
         "  --cluster C        run on a cluster's tasks (graphrun server processes): C is a\n"
         "                     JSON cluster file or text (ClusterSpec, TF_CONFIG or the placer's\n"
         "                     form, with host:port addresses), 'env' for TF_CONFIG, or a\n"
         "                     launcher's servers: 'slurm[:JOBS][@PORT]' (in a Slurm job: the\n"
         "                     step's layout, or the rendezvous), 'mpi[:JOBS]' (the\n"
         "                     rendezvous) (default: GRAPHRUN_CLUSTER, which graphrun launch\n"
         "                     sets; unpinned nodes run on the chief's or worker 0's device)\n"
         "  --rendezvous DIR   where a launcher's servers said where they listen (default:\n"
         "                     GRAPHRUN_RENDEZVOUS, else $SLURM_SUBMIT_DIR/.graphrun/slurm-JOB)\n"
         "  --secret-file F    the cluster's shared secret, mode 0600 (default:\n"
         "                     GRAPHRUN_SECRET_FILE, which graphrun launch sets, else the\n"
         "                     rendezvous's); required\n"
         "  --cluster-id ID    the cluster's id: a task of another cluster is refused\n"
         "                     (default: GRAPHRUN_CLUSTER_ID, set by graphrun launch, else\n"
         "                     Slurm's job id, else the rendezvous's, else derived from the\n"
         "                     cluster spec)\n"
         "  --insecure         no secret: talk to servers started with --insecure\n");
  fputs(cli_tls_usage, f);
  fprintf(f,
          "  --container NAME   keep the variables (queues, accumulators) in the tasks' shared\n"
          "                     container NAME: every client naming it uses them, and they\n"
          "                     stay on the tasks after the run until `graphrun reset`\n"
          "                     (default: GRAPHRUN_CONTAINER, set by launch --between-graph;\n"
          "                     else this run's own container, dropped when it ends)\n"
          "  --job J --task I   between-graph training: run as this task's own client; the\n"
          "                     program's default device is /job:J/task:I, task_index() is I;\n"
          "                     the chief (job 'chief', else worker 0) initialises, restores and\n"
          "                     saves the shared variables and trains its share (--ckpt is the\n"
          "                     chief's; the others ignore it), the others wait for them and\n"
          "                     fail at once if the chief's process ends first; every client\n"
          "                     needs the same --container\n"
          "  --connect-timeout S  wait up to S seconds for every task to answer at the start\n"
          "                     (default 10; at a rendezvous 120; tasks that a scheduler\n"
          "                     starts later: longer)\n"
          "  --recovery-timeout S  with --cluster and --ckpt, a lost or restarted task is\n"
          "                     waited for up to S seconds (default 60), then the run restores\n"
          "                     the newest checkpoint and goes on from it\n"
          "  --max-failures K   give up after K recoveries (default 10)\n"
          "  --heartbeat MS:N   a task silent for MS ms is pinged and lost after N silent\n"
          "                     periods (default 100:5)\n\n");
  cli_epochs_usage(f);
  fprintf(f, "\nExit codes: 0 ok, 1 runtime failure, 2 usage or input error.\n");
}

enum {
  F_JSON = 256,
  F_QUIET,
  F_NO_RESTORE,
  F_SCHEDULE_RECVS,
  F_SOFT,
  F_NO_FUSION,
  F_TIMEOUT,
  F_CLUSTER,
  F_SECRET,
  F_CLUSTER_ID,
  F_INSECURE,
  F_CONTAINER,
  F_HEARTBEAT,
  F_JOB,
  F_TASK,
  F_RECOVERY,
  F_MAX_FAILURES,
  F_RENDEZVOUS,
  F_CONNECT_TIMEOUT,
  F_OUT,
  F_TRACE,
  F_DEVICES,
  F_PLACEMENT,
  F_CKPT,
  F_SAVE_EVERY,
  F_SAVE_ASYNC,
  F_KEEP,
  F_FEED,
  F_FETCH,
  F_EVAL,
  F_TARGET,
  F_STEPS,
  F_STEPS_PER_RUN,
  F_SEED,
  F_THREADS,
  F_TLS /* and F_TLS + 1, + 2 */
};

static const struct option flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, F_JSON},
    {"quiet", no_argument, NULL, F_QUIET},
    {"no-restore", no_argument, NULL, F_NO_RESTORE},
    {"schedule-recvs", no_argument, NULL, F_SCHEDULE_RECVS},
    {"soft-placement", no_argument, NULL, F_SOFT},
    {"no-fusion", no_argument, NULL, F_NO_FUSION},
    {"timeout", required_argument, NULL, F_TIMEOUT},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"insecure", no_argument, NULL, F_INSECURE},
    {"container", required_argument, NULL, F_CONTAINER},
    {"heartbeat", required_argument, NULL, F_HEARTBEAT},
    {"job", required_argument, NULL, F_JOB},
    {"task", required_argument, NULL, F_TASK},
    {"recovery-timeout", required_argument, NULL, F_RECOVERY},
    {"max-failures", required_argument, NULL, F_MAX_FAILURES},
    {"rendezvous", required_argument, NULL, F_RENDEZVOUS},
    {"connect-timeout", required_argument, NULL, F_CONNECT_TIMEOUT},
    {"out", required_argument, NULL, F_OUT},
    {"trace", required_argument, NULL, F_TRACE},
    {"devices", required_argument, NULL, F_DEVICES},
    {"placement", required_argument, NULL, F_PLACEMENT},
    {"ckpt", required_argument, NULL, F_CKPT},
    {"save-every", required_argument, NULL, F_SAVE_EVERY},
    {"save-async", no_argument, NULL, F_SAVE_ASYNC},
    {"keep", required_argument, NULL, F_KEEP},
    {"feed", required_argument, NULL, F_FEED},
    {"fetch", required_argument, NULL, F_FETCH},
    {"eval", required_argument, NULL, F_EVAL},
    {"target", required_argument, NULL, F_TARGET},
    {"steps", required_argument, NULL, F_STEPS},
    {"steps-per-run", required_argument, NULL, F_STEPS_PER_RUN},
    {"seed", required_argument, NULL, F_SEED},
    {"threads", required_argument, NULL, F_THREADS},
    CLI_EPOCH_FLAGS,
    CLI_TLS_FLAGS(F_TLS),
    {0},
};

/* Not a flag of the group: the next group's turn. */
#define NOT_MINE (-1)

/* --feed NAME=PATH (split in place). */
static int set_feed(const cli_opts *po, cli_run_options *o) {
  char *eq = strchr(po->arg, '=');
  if (!eq || eq == po->arg || !eq[1] || o->nfeed == CLI_MAX_NAMES)
    return cli_opt_bad(po, "NAME=PATH");
  *eq = '\0';
  o->feed_names[o->nfeed] = po->arg;
  o->feed_paths[o->nfeed++] = eq + 1;
  return GR_EXIT_OK;
}

/* What a step runs and on what: feeds, fetches, counts, devices, outputs. */
static int set_step_flag(const cli_opts *po, int c, cli_run_options *o) {
  switch (c) {
    case F_FEED:
      return set_feed(po, o);
    case F_FETCH:
      o->nfetch = cli_split_names(po->arg, o->fetch_names, o->nfetch);
      break;
    case F_EVAL:
      o->neval = cli_split_names(po->arg, o->eval_names, o->neval);
      break;
    case F_TARGET:
      o->ntarget = cli_split_names(po->arg, o->target_names, o->ntarget);
      break;
    case F_STEPS:
      if (!cli_parse_long(po->arg, 1, LONG_MAX, &o->steps))
        return cli_opt_bad(po, "a positive integer");
      o->steps_given = true;
      break;
    case F_STEPS_PER_RUN:
      if (!cli_parse_long(po->arg, 1, 1L << 30, &o->steps_per_run))
        return cli_opt_bad(po, "an integer from 1 to 1073741824");
      break;
    case F_SEED:
      if (!cli_parse_long(po->arg, 0, LONG_MAX, &o->seed))
        return cli_opt_bad(po, "a non-negative integer");
      break;
    case F_THREADS:
      if (!cli_parse_long(po->arg, 0, GR_CLI_MAX_THREADS, &o->threads))
        return cli_opt_bad(po,
                           "an integer in [0, %d] (a session runs at most %d inter-op threads; 0: "
                           "one per core, %d on this machine)",
                           GR_CLI_MAX_THREADS, GR_CLI_MAX_THREADS, gr_num_cores());
      break;
    case F_DEVICES:
      return cli_opt_long(po, 1, 64, &o->devices) ? GR_EXIT_OK : GR_EXIT_USAGE;
    case F_PLACEMENT:
      if (!gr_place_mode_parse(po->arg, &o->placement))
        return cli_opt_bad(po, "'pins', 'cost' or 'round-robin'");
      break;
    case F_TIMEOUT:
      if (!cli_parse_seconds(po->arg, MAX_TIMEOUT_S, &o->timeout_s))
        return cli_opt_bad(po, "seconds in [0, %.0f] (0: no limit)", MAX_TIMEOUT_S);
      break;
    case F_JSON:
      o->json = true;
      break;
    case F_QUIET:
      o->quiet = true;
      break;
    case F_SCHEDULE_RECVS:
      o->schedule_recvs = true;
      break;
    case F_SOFT:
      o->soft = true;
      break;
    case F_NO_FUSION:
      o->no_fusion = true;
      break;
    case F_OUT:
      o->out_dir = po->arg;
      break;
    case F_TRACE:
      o->trace_path = po->arg;
      break;
    default:
      return NOT_MINE;
  }
  return GR_EXIT_OK;
}

/* --heartbeat MS:N, set for the masters this process connects. */
static int set_heartbeat(const cli_opts *po) {
  int ms = 0, missed = 0, used = 0;
  if (sscanf(po->arg, "%d:%d%n", &ms, &missed, &used) != 2 || po->arg[used] || ms < 10 ||
      ms > 60000 || missed < 2 || missed > 1000)
    return cli_opt_bad(po, "MS:N (a ping after MS ms of silence, 10 to 60000; lost after N "
                           "silent periods, 2 to 1000)");
  cli_set_heartbeat(ms, missed);
  return GR_EXIT_OK;
}

/* Checkpoints, the cluster and recovery. */
static int set_cluster_flag(const cli_opts *po, int c, cli_run_options *o) {
  switch (c) {
    case F_CKPT:
      o->ckpt_path = po->arg;
      break;
    case F_SAVE_EVERY:
      if (!cli_parse_long(po->arg, 1, 1000000000, &o->save_every))
        return cli_opt_bad(po, "a positive integer");
      break;
    case F_KEEP:
      if (!cli_parse_long(po->arg, 0, 1000000000, &o->keep))
        return cli_opt_bad(po, "a non-negative integer");
      break;
    case F_NO_RESTORE:
      o->no_restore = true;
      break;
    case F_SAVE_ASYNC:
      o->save_async = true;
      break;
    case F_CLUSTER:
      o->cluster_spec = po->arg;
      break;
    case F_SECRET:
      o->secret_file = po->arg;
      break;
    case F_CLUSTER_ID:
      return cli_opt_cluster_id(po, &o->cluster_id);
    case F_INSECURE:
      o->insecure = true;
      break;
    case F_TLS:
    case F_TLS + 1:
    case F_TLS + 2:
      cli_tls_flag(c, F_TLS, po->arg, &o->tls);
      break;
    case F_CONTAINER:
      if (gr_container_check_name(po->arg, NULL) != GR_OK)
        return cli_opt_bad(po,
                           "a container name: 1 to %d letters, digits, '_', '-' or '.', "
                           "starting with a letter or a digit",
                           GR_CONTAINER_NAME_MAX);
      o->container = po->arg;
      break;
    case F_HEARTBEAT:
      return set_heartbeat(po);
    case F_JOB:
      o->job = po->arg;
      break;
    case F_TASK:
      if (!cli_parse_long(po->arg, 0, 100000, &o->task_index))
        return cli_opt_bad(po, "a task index in [0, 100000]");
      break;
    case F_RECOVERY:
      return cli_opt_seconds(po, MAX_TIMEOUT_S, &o->recovery_s) ? GR_EXIT_OK : GR_EXIT_USAGE;
    case F_MAX_FAILURES:
      return cli_opt_long(po, 0, 1000000, &o->max_failures) ? GR_EXIT_OK : GR_EXIT_USAGE;
    case F_RENDEZVOUS:
      cli_set_rendezvous(po->arg);
      break;
    case F_CONNECT_TIMEOUT: /* at the rendezvous too */
      if (!cli_opt_seconds(po, MAX_TIMEOUT_S, &o->connect_s)) return GR_EXIT_USAGE;
      cli_set_rendezvous_wait(o->connect_s);
      break;
    default:
      return NOT_MINE;
  }
  return GR_EXIT_OK;
}

/* The flags' defaults, then one pass over argv. */
int cli_run_parse_options(int argc, char **argv, cli_run_options *o) {
  *o = (cli_run_options){.steps = 1,
                         .keep = 5,
                         .devices = 1,
                         .timeout_s = 300,
                         .placement = GR_PLACE_PINS,
                         .recovery_s = 60,
                         .max_failures = 10,
                         .task_index = -1};
  cli_opts po;
  cli_opts_start(&po, "run", argc, argv, flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    int rc = NOT_MINE;
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == CLI_OPTS_ERROR) {
      return GR_EXIT_USAGE;
    } else if (c == CLI_OPTS_ARG && o->file) {
      fprintf(stderr, "graphrun run: more than one file given ('%s', '%s')\n", o->file, po.arg);
      return GR_EXIT_USAGE;
    } else if (c == CLI_OPTS_ARG) {
      o->file = po.arg, rc = GR_EXIT_OK;
    } else if ((rc = set_step_flag(&po, c, o)) == NOT_MINE &&
               (rc = set_cluster_flag(&po, c, o)) == NOT_MINE) {
      rc = cli_epochs_flag(&po, c, o);
    }
    if (rc == NOT_MINE) rc = GR_EXIT_USAGE; /* a flag of the table that no group takes */
    if (rc != GR_EXIT_OK) return rc;
  }
  if (!o->file) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  if (!o->ckpt_path && (o->save_every || o->no_restore || o->save_async)) {
    fprintf(stderr, "graphrun run: --save-every, --save-async and --no-restore need --ckpt PATH\n");
    return GR_EXIT_USAGE;
  }
  if (cli_epochs_check_options(o) != CLI_RUN_GO) return GR_EXIT_USAGE;
  if (o->steps_per_run > 1 && o->epochs) {
    fprintf(stderr, "graphrun run: --steps-per-run runs steps without this client between them: "
                    "not with --epochs (which validates and logs after each)\n");
    return GR_EXIT_USAGE;
  }
  const char *env = getenv("GRAPHRUN_CONTAINER");
  if (!o->container && env && *env) {
    gr_error err;
    if (gr_container_check_name(env, &err) != GR_OK) {
      fprintf(stderr, "graphrun run: GRAPHRUN_CONTAINER: %s\n", err.msg);
      return GR_EXIT_USAGE;
    }
    o->container = env;
    o->container_from_env = true;
  }
  return CLI_RUN_GO;
}
