/* The parts of `graphrun run` (cmd_run.c: load, prepare, the step loop): its
 * options (cli_run_options.c), the state of one run, its checkpoints and
 * recovery from a lost task (cli_run_ckpt.c), and what it prints and writes
 * (cli_run_output.c). Internal to frontend/cli/. */
#ifndef GR_CLI_RUN_H
#define GR_CLI_RUN_H

#include <graphrun.h>
#include <stdbool.h>

#include "cli_cluster.h"
#include "cli_util.h"
#include "placer/gr_placer.h"

/* The flags of `graphrun run` (see its --help), after their defaults. */
typedef struct cli_run_options {
  const char *file;
  const char *feed_names[CLI_MAX_NAMES], *feed_paths[CLI_MAX_NAMES];
  const char *fetch_names[CLI_MAX_NAMES], *target_names[CLI_MAX_NAMES];
  const char *eval_names[CLI_MAX_NAMES];
  int nfeed, nfetch, ntarget, neval;
  long steps, seed, threads, devices;
  long save_every, keep, max_failures, task_index;
  long steps_per_run;                      /* --steps-per-run (0: not given, 1) */
  double timeout_s, recovery_s, connect_s; /* connect_s: the first connect's bound (0: 10 s) */
  gr_place_mode placement;
  bool json, quiet, no_restore, schedule_recvs, soft, no_fusion;
  bool save_async; /* --save-async */
  const char *ckpt_path, *trace_path, *out_dir;
  const char *cluster_spec, *secret_file, *job;
  const char *cluster_id;  /* --cluster-id (NULL: the default, cli_cluster_id) */
  bool insecure;           /* --insecure */
  cli_tls tls;             /* --tls-cert, --tls-key, --tls-ca */
  const char *container;   /* --container, else GRAPHRUN_CONTAINER; NULL: a private one */
  bool container_from_env; /* it came from GRAPHRUN_CONTAINER */
  bool steps_given;        /* --steps was given */
  /* training by epochs (cli_epochs.h): 0 and NULL when not given */
  long epochs, steps_per_epoch;
  const char *validate_names[CLI_MAX_NAMES];
  int nvalidate;
  const char *early_stop, *keep_best, *logdir;
  bool restore_best;
} cli_run_options;

/* Returned by cli_run_parse_options when the run goes on. */
#define CLI_RUN_GO (-1)

/* Reads run's flags (argv[0] "run"; the strings stay argv's, --feed's are
 * split in place). CLI_RUN_GO, or the exit code after --help or an error
 * (printed). */
int cli_run_parse_options(int argc, char **argv, cli_run_options *o);

/* What a cluster run with --ckpt needs to recover from a lost task. */
typedef struct cli_recovery {
  const gr_cluster *cluster;
  const char *from, *secret, *ckpt_path;
  const gr_session_options *opts;
  double timeout_s;
  long failures, max_failures;
  gr_ckpt *ck; /* NULL: a worker that is not the chief (it waits for the chief) */
  gr_graph *g;
  cli_worker *self; /* the chief's lease is taken again after a recovery */
  /* every variable of the session has a value (after the first save; a
   * recovery's new session clears it): saves skip initialising them */
  bool vars_ready;
  gr_ckpt_async *async;     /* --save-async in one process: the background writer, else NULL */
  cli_pending_save pending; /* --save-async on a cluster: .async, the save in flight */
} cli_recovery;

enum { CLI_RECOVERED, CLI_NOT_RECOVERABLE, CLI_RECOVERY_FAILED };

/* After `what` failed with err: when a task was lost or restarted and
 * failures remain, waits for the tasks and restores the newest checkpoint
 * into a new master and session (*m, *s; *at its step, -1 when there was
 * none yet). CLI_NOT_RECOVERABLE: the caller reports err;
 * CLI_RECOVERY_FAILED: reported here. */
int cli_run_recover(cli_recovery *r, const char *what, gr_error *err, gr_master **m, gr_session **s,
                    int64_t *at);

/* The steps of `graphrun run` done when the newest checkpoint was saved. */
/* A checkpoint's metadata (JSON text, or NULL): its member key as an
 * integer (0 when missing or not a number), whether it has a non-null key. */
long cli_meta_long(const char *meta, const char *key);
bool cli_meta_has(const char *meta, const char *key);
long cli_run_steps_done(gr_ckpt *ck);
/* Opens the checkpoint file (a directory of shards when remote) and, unless
 * no_restore, restores its newest checkpoint (best: the one marked best,
 * --restore-best); *done: the steps already done then. An exit code
 * (messages printed); *ck is the caller's to close. */
int cli_run_open_checkpoint(const char *path, int keep, bool no_restore, bool best, bool remote,
                            gr_session *s, gr_graph *g, gr_ckpt **ck, long *done);
/* Saves the variables after steps_done steps into r->ck (a file, or on a
 * cluster each task's shard and the manifest; with --save-async, the
 * manifest row at the next save: r->pending, unless steps_done is 0). */
gr_status cli_run_save_checkpoint(cli_recovery *r, gr_session *s, long steps_done, bool remote,
                                  gr_error *err);
/* --save-async: waits for the write in flight (on a cluster: the tasks'
 * shards, through s, then the manifest is committed; s NULL: forgotten, a
 * failed run); a failed write is printed (naming the file) and gives
 * GR_EXIT_FAILURE. GR_EXIT_OK without one. */
int cli_run_wait_saves(cli_recovery *r, gr_session *s);
/* On a cluster with a checkpoint that has none yet: saves the first one,
 * which a lost task restarts from (a task lost before it is waited for).
 * *s and *m may change (a recovery). An exit code (messages printed). */
int cli_run_save_first(cli_recovery *r, gr_master **m, gr_session **s);

/* One run: its options, what it loaded and what it holds (freed by
 * cmd_run.c at the end). */
typedef struct cli_run_state {
  cli_run_options o;
  gr_cluster *cluster;
  const char *cluster_from;
  cli_worker self;
  gr_graph *g;
  gr_dsl_program *p;
  gr_output fetches[CLI_MAX_NAMES], targets[CLI_MAX_NAMES], evals[CLI_MAX_NAMES];
  gr_feed feeds[CLI_MAX_NAMES];
  gr_tensor feed_vals[CLI_MAX_NAMES], results[CLI_MAX_NAMES];
  int nloaded; /* feed_vals held */
  gr_session_options opts;
  gr_master *master; /* NULL: a local run */
  char *secret;
  gr_session *s;
  gr_ckpt *ck;
  cli_recovery rec;
  gr_step_trace *trace; /* --trace: the last step's */
  long done_steps;      /* restored from the checkpoint */
  gr_transfer_stats moved;
  cli_progress pr;
  bool show;             /* the progress display is on */
  struct cli_epochs *ep; /* --epochs (cli_epochs.h), else NULL */
} cli_run_state;

/* The container of a cluster run's variables on the tasks (cli_run_container.c):
 * checks --container against the rest (it needs a cluster; --job and
 * --task need one) and sets it for the masters this process connects.
 * An exit code (messages printed). */
int cli_run_pick_container(cli_run_state *r);
/* Connected, with a named container: says so (unless --quiet), and with
 * --no-restore resets it on the tasks, so the run starts from initial
 * values. An exit code. */
int cli_run_fresh_container(cli_run_state *r);

/* --out DIR made now if missing, and --trace's file tried, so a bad path
 * fails before the run; *trace: a new trace when --trace is given. An exit
 * code (messages printed). */
int cli_run_prepare_outputs(const cli_run_options *o, gr_step_trace **trace);
/* After the steps: writes --trace's file and says what crossed devices. */
int cli_run_report_step(const cli_run_state *r);
/* Prints the last step's fetches (fetching once more when every step was
 * done before), then --eval's, as text or JSON, writing --out's files. */
int cli_run_print_results(cli_run_state *r);

#endif
