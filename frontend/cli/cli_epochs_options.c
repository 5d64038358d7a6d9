/* graphrun run: the flags of training by epochs (--epochs, --steps-per-epoch,
 * --validate, --early-stop, --keep-best, --logdir, --restore-best), their
 * --help lines and the checks of their combinations. */
#include <limits.h>
#include <string.h>

#include "cli_epochs.h"
#include "cli_run.h"
#include "commands.h"

void cli_epochs_usage(FILE *f) {
  fprintf(f,
          "Training by epochs (docs/training.md#validation-history-and-the-dashboard):\n"
          "  --epochs N         run N epochs (instead of --steps); after each, one line\n"
          "                     `epoch 3/10  loss 0.41  val_loss 0.45 ...  12.3 s` on stderr:\n"
          "                     the epoch's mean of each scalar fetch, then --validate's values\n"
          "  --steps-per-epoch S  steps of an epoch (default: from the data: rows / batch_size\n"
          "                     of the `batch` op, or images of the `image_folder`, the step\n"
          "                     reads: the steps of one pass)\n"
          "  --validate A,B     after each epoch, run A,B once (no targets) and report them as\n"
          "                     val_A, val_B (a name starting with val_ keeps it)\n"
          "  --early-stop M[,patience=P][,min_delta=D][,mode=min|max]\n"
          "                     stop when metric M (loss, val_accuracy, ...) has not improved by\n"
          "                     more than D for P epochs (default 0, 0; mode: max for names with\n"
          "                     acc, auc, precision or recall, else min)\n"
          "  --keep-best M[,mode=min|max]  with --ckpt: a checkpoint at each epoch's end, and\n"
          "                     the one of the best epoch by M kept and marked \"best\"\n"
          "  --restore-best     with --ckpt: restore the checkpoint marked best, not the newest\n"
          "  --logdir DIR       write the run database DIR/runs.db (graphrun board DIR shows it;\n"
          "                     default with --ckpt: beside the checkpoint)\n");
}

int cli_epochs_flag(const cli_opts *po, int c, cli_run_options *o) {
  switch (c) {
    case CLI_F_EPOCHS:
      return cli_opt_long(po, 1, 1000000000, &o->epochs) ? GR_EXIT_OK : GR_EXIT_USAGE;
    case CLI_F_STEPS_PER_EPOCH:
      return cli_opt_long(po, 1, 1000000000, &o->steps_per_epoch) ? GR_EXIT_OK : GR_EXIT_USAGE;
    case CLI_F_VALIDATE:
      o->nvalidate = cli_split_names(po->arg, o->validate_names, o->nvalidate);
      return GR_EXIT_OK;
    case CLI_F_EARLY_STOP:
      o->early_stop = po->arg;
      return GR_EXIT_OK;
    case CLI_F_KEEP_BEST:
      o->keep_best = po->arg;
      return GR_EXIT_OK;
    case CLI_F_LOGDIR:
      if (!*po->arg) return cli_opt_bad(po, "a directory");
      o->logdir = po->arg;
      return GR_EXIT_OK;
    case CLI_F_RESTORE_BEST:
      o->restore_best = true;
      return GR_EXIT_OK;
    default:
      return -1;
  }
}

int cli_epochs_check_options(cli_run_options *o) {
  const char *needs = o->nvalidate         ? "--validate"
                      : o->early_stop      ? "--early-stop"
                      : o->keep_best       ? "--keep-best"
                      : o->logdir          ? "--logdir"
                      : o->steps_per_epoch ? "--steps-per-epoch"
                                           : NULL;
  if (needs && !o->epochs) {
    fprintf(stderr, "graphrun run: %s needs --epochs N (training by epochs)\n", needs);
    return GR_EXIT_USAGE;
  }
  if (o->epochs && o->steps_given) {
    fprintf(stderr, "graphrun run: --steps and --epochs do not go together: --epochs N runs N "
                    "epochs of --steps-per-epoch steps\n");
    return GR_EXIT_USAGE;
  }
  if ((o->keep_best || o->restore_best) && !o->ckpt_path) {
    fprintf(stderr, "graphrun run: %s needs --ckpt PATH\n",
            o->keep_best ? "--keep-best" : "--restore-best");
    return GR_EXIT_USAGE;
  }
  if (o->restore_best && o->no_restore) {
    fprintf(stderr, "graphrun run: --restore-best and --no-restore contradict each other\n");
    return GR_EXIT_USAGE;
  }
  return CLI_RUN_GO;
}
