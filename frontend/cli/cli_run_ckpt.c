/* graphrun run: checkpoints (open and restore, save, the first save on a
 * cluster) and recovery from a lost task by restoring the newest one. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli_epochs.h"
#include "cli_run.h"
#include "commands.h"

static json_t *meta_member(const char *meta, const char *key, json_t **doc) {
  *doc = meta ? json_loads(meta, 0, NULL) : NULL;
  return json_object_get(*doc, key);
}

long cli_meta_long(const char *meta, const char *key) {
  json_t *doc, *v = meta_member(meta, key, &doc);
  long n = json_is_integer(v) ? (long)json_integer_value(v) : 0;
  json_decref(doc);
  return n;
}

bool cli_meta_has(const char *meta, const char *key) {
  json_t *doc, *v = meta_member(meta, key, &doc);
  bool has = v && !json_is_null(v);
  json_decref(doc);
  return has;
}

long cli_run_steps_done(gr_ckpt *ck) {
  gr_ckpt_info *infos = NULL;
  int n = 0;
  long done = 0;
  gr_error err;
  if (gr_ckpt_list(ck, &infos, &n, &err) == GR_OK && n > 0)
    done = cli_meta_long(infos[n - 1].metadata, "steps_done");
  gr_ckpt_infos_free(infos, n);
  return done;
}

int cli_run_open_checkpoint(const char *path, int keep, bool no_restore, bool best, bool remote,
                            gr_session *s, gr_graph *g, gr_ckpt **ck, long *done) {
  gr_error err;
  /* on a cluster a directory: each task saves its shard, the manifest commits them */
  /* one writer at a time: a second run on the same path is refused, naming the first */
  gr_ckpt_options o = {.max_to_keep = keep, .sharded = remote, .lock = true};
  if (gr_ckpt_open(path, &o, ck, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --ckpt: %s\n", err.msg);
    return err.code == GR_ERR_UNAVAILABLE ? GR_EXIT_FAILURE : GR_EXIT_USAGE;
  }
  *done = 0;
  if (no_restore) return GR_EXIT_OK;
  int64_t step = best ? cli_epochs_best_step(*ck, done) : -1;
  if (best && step < 0) return GR_EXIT_USAGE; /* none marked (said) */
  /* by name: the checkpoint's tensors this graph has no variable for (an
   * inference graph: the optimizer's slots, the global step) stay in it */
  gr_ckpt_restore_options ro = {.at_step = best, .step = step};
  gr_ckpt_restore_report rep = {.unused = 0};
  gr_status st = remote ? cli_restore_remote_at(*ck, s, g, &step, &err)
                        : gr_ckpt_restore(*ck, s, g, &ro, &rep, &err);
  if (st == GR_ERR_NOT_FOUND && !best) return GR_EXIT_OK;
  if (st != GR_OK) {
    fprintf(stderr, "graphrun run: restoring %s: %s\n(use --no-restore to start fresh)\n", path,
            err.msg);
    return GR_EXIT_FAILURE;
  }
  if (!best) *done = cli_run_steps_done(*ck);
  fprintf(stderr, "graphrun run: restored %s%s (%ld steps done)\n", path,
          best ? "'s checkpoint marked best" : "", *done);
  if (rep.unused)
    fprintf(stderr, "graphrun run: note: %d tensor%s of the checkpoint not in this graph: %s\n",
            rep.unused, rep.unused == 1 ? "" : "s", rep.unused_names);
  return GR_EXIT_OK;
}

gr_status cli_run_save_checkpoint(cli_recovery *r, gr_session *s, long steps_done, bool remote,
                                  gr_error *err) {
  json_t *doc = json_pack("{s:I}", "steps_done", (json_int_t)steps_done);
  char *meta = doc ? json_dumps(doc, 0) : NULL;
  json_decref(doc);
  if (!meta) return gr_error_set_oom(err);
  /* the first, before any step (what a lost task restarts from): synchronously */
  cli_pending_save *pending = steps_done > 0 ? &r->pending : NULL;
  gr_status st = remote     ? cli_save_remote(r->ck, s, r->g, meta, &r->vars_ready, pending, err)
                 : r->async ? gr_ckpt_save_session_async(r->async, s, r->g, meta, err)
                            : gr_ckpt_save_session(r->ck, s, r->g, meta, err);
  free(meta);
  return st;
}

int cli_run_wait_saves(cli_recovery *r, gr_session *s) {
  gr_error err;
  if (!r->pending.async) r->pending.step = -1;
  if (r->pending.step >= 0 && !s) cli_pending_forget(&r->pending);
  if (r->pending.step >= 0 && cli_commit_remote(r->ck, s, r->g, &r->pending, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: saving to %s: %s\n", r->ckpt_path, err.msg);
    return GR_EXIT_FAILURE;
  }
  if (!r->async || gr_ckpt_async_wait(r->async, &err) == GR_OK) return GR_EXIT_OK;
  fprintf(stderr, "graphrun run: saving to %s: %s\n", r->ckpt_path, err.msg);
  return GR_EXIT_FAILURE;
}

int cli_run_recover(cli_recovery *r, const char *what, gr_error *err, gr_master **m, gr_session **s,
                    int64_t *at) {
  if ((err->code != GR_ERR_UNAVAILABLE && err->code != GR_ERR_ABORTED) ||
      r->failures >= r->max_failures)
    return CLI_NOT_RECOVERABLE;
  r->failures++;
  r->vars_ready = false;           /* a new session */
  cli_pending_forget(&r->pending); /* the restore goes back to the newest committed */
  fprintf(stderr,
          "graphrun run: %s failed: %s\ngraphrun run: recovering (%ld of at most %ld): waiting "
          "up to %.0f s for every task, then %s%s\n",
          what, err->msg, r->failures, r->max_failures, r->timeout_s,
          r->ck ? "restoring " : "for the chief to restore the shared variables",
          r->ck ? r->ckpt_path : "");
  gr_status st = cli_recover(r->cluster, r->from, r->secret, r->opts->step_timeout_ms,
                             (int)(r->timeout_s * 1000), r->g, r->opts, r->ck, m, s, at, err);
  /* the chief takes its lease again if its task was restarted (without
   * it, training goes on: only the workers' early notice of its end is lost) */
  gr_error lerr;
  if (st == GR_OK && cli_chief_hold(r->self, r->cluster, r->secret, &lerr) != GR_OK)
    fprintf(stderr, "graphrun run: note: %s\n", lerr.msg);
  if (st == GR_OK && !r->ck) st = cli_wait_for_chief(*s, *m, r->self, r->timeout_s, false, err);
  if (st != GR_OK) {
    fprintf(stderr, "graphrun run: recovery failed: %s\n", err->msg);
    return CLI_RECOVERY_FAILED;
  }
  return CLI_RECOVERED;
}

int cli_run_save_first(cli_recovery *r, gr_master **m, gr_session **s) {
  int64_t latest;
  gr_error err;
  if (gr_ckpt_latest_step(r->ck, &latest, &err) != GR_ERR_NOT_FOUND) return GR_EXIT_OK;
  for (;;) { /* the checkpoint a lost task restarts from; a task lost before it is waited for */
    if (cli_run_save_checkpoint(r, *s, 0, true, &err) == GR_OK) return GR_EXIT_OK;
    int how = cli_run_recover(r, "saving the first checkpoint", &err, m, s, &latest);
    if (how == CLI_NOT_RECOVERABLE)
      fprintf(stderr, "graphrun run: saving the first checkpoint: %s\n", err.msg);
    if (how != CLI_RECOVERED) return GR_EXIT_FAILURE;
  }
}
