/* Training by epochs in `graphrun run` (cli_epochs.c) and the run database
 * it writes (cli_rundb.c), which `graphrun board` (cmd_board.c) reads.
 * Internal to frontend/cli/.
 *
 * --epochs N runs N epochs of --steps-per-epoch S steps (else S from the
 * data: the `batch` op the step reads). After each epoch's last step the
 * client (this process, also on a cluster) runs the --validate names once,
 * prints one line (`epoch 3/10  loss 0.41 ... val_loss 0.45 ... 12.3 s`),
 * writes the epoch's scalars, weight histograms and step trace into the run
 * database, marks the best checkpoint (--keep-best) and may stop early
 * (--early-stop). Everything here runs on the thread of `graphrun run`. */
#ifndef GR_CLI_EPOCHS_H
#define GR_CLI_EPOCHS_H

#include <graphrun.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli_options.h"

struct cli_run_options;
struct cli_run_state;

/* ---- run's flags of this file -------------------------------------------- */

enum {
  CLI_F_EPOCHS = 512,
  CLI_F_STEPS_PER_EPOCH,
  CLI_F_VALIDATE,
  CLI_F_EARLY_STOP,
  CLI_F_KEEP_BEST,
  CLI_F_LOGDIR,
  CLI_F_RESTORE_BEST,
};

/* The entries of run's getopt table for these flags. */
#define CLI_EPOCH_FLAGS                                                                            \
  {"epochs", required_argument, NULL, CLI_F_EPOCHS},                                               \
      {"steps-per-epoch", required_argument, NULL, CLI_F_STEPS_PER_EPOCH},                         \
      {"validate", required_argument, NULL, CLI_F_VALIDATE},                                       \
      {"early-stop", required_argument, NULL, CLI_F_EARLY_STOP},                                   \
      {"keep-best", required_argument, NULL, CLI_F_KEEP_BEST},                                     \
      {"logdir", required_argument, NULL, CLI_F_LOGDIR}, {                                         \
    "restore-best", no_argument, NULL, CLI_F_RESTORE_BEST                                          \
  }

/* Their lines of `graphrun run --help`. */
void cli_epochs_usage(FILE *f);
/* Takes flag c (the value in po) into o: GR_EXIT_OK, GR_EXIT_USAGE (reported), or -1 when c is
 * not one of these flags. */
int cli_epochs_flag(const cli_opts *po, int c, struct cli_run_options *o);
/* After all flags: the combinations (--steps with --epochs, --validate
 * without --epochs, ...). CLI_RUN_GO or GR_EXIT_USAGE (reported). */
int cli_epochs_check_options(struct cli_run_options *o);

/* ---- the epochs of one run (cmd_run.c calls these) --------------------------- */

typedef struct cli_epochs cli_epochs;

/* After the names are resolved: with --epochs, r->ep is made, the steps per
 * epoch found (from the data when not given), o->steps set to all the
 * epochs' steps and o->save_every to an epoch when --ckpt is given without
 * it. An exit code (messages printed). */
int cli_epochs_setup(struct cli_run_state *r);
/* After the checkpoint is restored: opens the run database (--logdir, else
 * beside --ckpt) and records the run, its graph and placement. argv: the
 * command line, recorded. An exit code. */
int cli_epochs_start(struct cli_run_state *r, int argc, char **argv);
/* The trace step st of the run should record (the last step of an epoch,
 * when a database is written), else NULL. */
gr_step_trace *cli_epochs_trace_for(cli_epochs *ep, long st);
/* After step st succeeded (its fetches in r->results): accumulates the
 * scalar fetches; after an epoch's last step validates, prints, records,
 * marks the best checkpoint and decides on stopping. CLI_RUN_GO to go on,
 * GR_EXIT_OK to stop early (o->steps is set to st; the results kept for
 * printing), else an exit code (message printed, r->results released). */
int cli_epochs_after_step(struct cli_run_state *r, long st);
/* The run is over with exit code rc: records how it ended. */
void cli_epochs_end(struct cli_run_state *r, int rc);
void cli_epochs_free(cli_epochs *ep);

/* --restore-best: the step of the newest checkpoint of ck marked best (its
 * metadata holds "best"), *steps_done from its metadata; -1, with a
 * message, when none is. */
int64_t cli_epochs_best_step(gr_ckpt *ck, long *steps_done);

/* ---- the run database (cli_rundb.c) ---------------------------------------- */

/* DIR/runs.db, SQLite; the schema is in docs/training.md. One writer: the
 * client of a run (a between-graph worker that is not the chief writes
 * nothing); readers (graphrun board, sqlite3) may read while it writes (WAL). */
#define CLI_RUNDB_FILE "runs.db"

typedef struct cli_rundb cli_rundb;

typedef struct cli_rundb_run {
  const char *command, *file, *ckpt, *host;
  long epochs, steps_per_epoch, batch_size, first_step;
} cli_rundb_run;

/* Opens (making DIR and the file when missing) DIR/runs.db for writing. */
gr_status cli_rundb_open(const char *dir, cli_rundb **out, gr_error *err);
void cli_rundb_close(cli_rundb *db);
/* A new run row (status "running"); *id its id. */
gr_status cli_rundb_begin_run(cli_rundb *db, const cli_rundb_run *run, int64_t *id, gr_error *err);
/* The run's graph (DOT text, coloured by device) and each node's device. */
gr_status cli_rundb_graph(cli_rundb *db, int64_t run, const char *dot, const gr_graph *g,
                          gr_error *err);
/* One epoch's rows go in one transaction: begin, rows, commit. */
gr_status cli_rundb_begin(cli_rundb *db, gr_error *err);
gr_status cli_rundb_commit(cli_rundb *db, gr_error *err);
gr_status cli_rundb_scalar(cli_rundb *db, int64_t run, long epoch, long step, const char *tag,
                           double value, gr_error *err);
/* A histogram of t's elements (f32 or f64) in CLI_RUNDB_BUCKETS equal buckets. */
#define CLI_RUNDB_BUCKETS 30
gr_status cli_rundb_histogram(cli_rundb *db, int64_t run, long epoch, long step, const char *tag,
                              const gr_tensor *t, gr_error *err);
/* The step trace of the epoch's last step, as Chrome trace JSON. */
gr_status cli_rundb_trace(cli_rundb *db, int64_t run, long epoch, long step, const char *json,
                          gr_error *err);
/* The best epoch so far (--keep-best): metric, value, epoch, the checkpoint's step. */
gr_status cli_rundb_best(cli_rundb *db, int64_t run, const char *metric, double value, long epoch,
                         long step, gr_error *err);
/* The run's status: "running" (after each epoch), or how it ended: "done",
 * "stopped" (early), "failed" (which sets its end time). */
gr_status cli_rundb_set_status(cli_rundb *db, int64_t run, const char *status, long epochs_done,
                               gr_error *err);

#endif
