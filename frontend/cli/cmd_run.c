/* graphrun run FILE.gr: builds the graph of a .gr file and runs it for N
 * steps with feeds read from files, printing the fetched tensors. This file
 * holds the steps of a run: load, resolve names and feeds, place and make the
 * session, the step loop (recovering from a lost task on a cluster); the
 * flags, checkpoints and output are in cli_run_*.c (cli_run.h). */
#include <stdlib.h>
#include <string.h>

#include "cli_epochs.h"
#include "cli_run.h"
#include "commands.h"

/* The cluster first (the program may ask it: num_tasks("worker")), this
 * process's worker role, then the graph. */
static int load_program(cli_run_state *r) {
  cli_run_options *o = &r->o;
  gr_error err;
  if (cli_load_cluster(o->cluster_spec, &r->cluster, &r->cluster_from, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  int rc = cli_worker_setup(&r->self, o->job, o->task_index, r->cluster);
  if (r->self.on &&
      !r->self.chief) /* the checkpoint is the chief's (launch gives all the same flags) */
    o->ckpt_path = NULL, o->save_every = 0, o->no_restore = false, o->save_async = false;
  if (rc != GR_EXIT_OK) return rc;
  return cli_load_graph_on("run", o->file, (uint64_t)o->seed, r->cluster,
                           r->self.on ? r->self.device : NULL, r->self.on ? r->self.job : NULL,
                           r->self.on ? r->self.task : 0, &r->g, &r->p);
}

/* The fetch, target and eval names (the file's by default) as outputs. */
static int resolve_names(cli_run_state *r) {
  cli_run_options *o = &r->o;
  cli_default_names(r->p, o->fetch_names, &o->nfetch, o->target_names, &o->ntarget);
  if (cli_lookup_names("run", r->p, o->fetch_names, o->nfetch, true, r->fetches) != GR_EXIT_OK ||
      cli_lookup_names("run", r->p, o->target_names, o->ntarget, false, r->targets) != GR_EXIT_OK)
    return GR_EXIT_USAGE;
  for (int i = 0; i < o->neval; i++)
    if (!gr_dsl_lookup(r->p, o->eval_names[i], &r->evals[i]) || r->evals[i].index < 0) {
      fprintf(stderr, "graphrun run: cannot evaluate '%s': no such name or node\n",
              o->eval_names[i]);
      return GR_EXIT_USAGE;
    }
  if (o->nfetch == 0 && o->ntarget == 0 && o->neval == 0) {
    fprintf(stderr, "graphrun run: nothing to run: the file binds no names; use --fetch or "
                    "--target\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* An inline vector (--feed x=1,2,3) for a placeholder of rows ([?, 3],
 * [?, 2, 2], or a first dimension of 1): one row of it. The count must be
 * a row's; anything else is left to the shape check. An exit code. */
static int inline_row(const char *name, const gr_node *n, const gr_shape *want, gr_tensor *v) {
  if (v->shape.rank > 1 || want->rank < 2 || (want->dims[0] >= 0 && want->dims[0] != 1))
    return GR_EXIT_OK;
  int64_t count = v->shape.rank ? v->shape.dims[0] : 1; /* "5": one number */
  gr_shape row = *want;
  row.dims[0] = 1;
  int64_t k = 1;
  for (int d = 1; d < want->rank; d++) {
    if (want->dims[d] < 0) return GR_EXIT_OK; /* the row's size is not known */
    k *= want->dims[d];
  }
  if (count != k) {
    char b[GR_SHAPE_STR_MAX];
    fprintf(stderr,
            "graphrun run: --feed %s: %lld number%s, but one row of '%s' %s has %lld (more rows: "
            "a CSV or .npy file)\n",
            name, (long long)count, count == 1 ? "" : "s", n->name, gr_shape_str(want, b),
            (long long)k);
    return GR_EXIT_USAGE;
  }
  v->shape = row; /* the same elements, in row-major order */
  return GR_EXIT_OK;
}

/* Reads each --feed's value, of its placeholder's dtype and shape. */
static int load_feeds(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  gr_error err;
  for (int i = 0; i < o->nfeed; i++) {
    gr_output out;
    if (!gr_dsl_lookup(r->p, o->feed_names[i], &out) || out.index < 0) {
      fprintf(stderr, "graphrun run: cannot feed '%s': no such name or node\n", o->feed_names[i]);
      return GR_EXIT_USAGE;
    }
    const gr_shape *want = &out.node->out_shapes[out.index];
    gr_tensor *v = &r->feed_vals[i];
    if (cli_read_tensor(o->feed_paths[i], out.node->out_dtypes[out.index], v, &err) != GR_OK) {
      fprintf(stderr, "graphrun run: --feed %s: %s\n", o->feed_names[i], err.msg);
      return GR_EXIT_USAGE;
    }
    r->nloaded++;
    if (cli_is_inline_value(o->feed_paths[i]) &&
        inline_row(o->feed_names[i], out.node, want, v) != GR_EXIT_OK)
      return GR_EXIT_USAGE;
    if (!gr_shape_compatible(&v->shape, want)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      fprintf(stderr, "graphrun run: --feed %s: the value has shape %s, '%s' wants %s\n",
              o->feed_names[i], gr_shape_str(&v->shape, a), out.node->name, gr_shape_str(want, b));
      return GR_EXIT_USAGE;
    }
    r->feeds[i] = (gr_feed){out, v};
  }
  return GR_EXIT_OK;
}

/* Assigns devices to the nodes that no pin decides, per --placement; the
 * cost model predicts the step the run repeats (its fetches and targets). */
static int place_nodes(const cli_run_state *r) {
  const cli_run_options *o = &r->o;
  gr_error err;
  if (r->cluster && o->devices > 1) {
    fprintf(stderr, "graphrun run: --devices is for one process; with a cluster the devices are "
                    "its tasks'\n");
    return GR_EXIT_USAGE;
  }
  /* the cost model predicts and places for the step this run repeats */
  gr_placer_options po = gr_placer_options_default();
  po.soft_placement = o->soft;
  po.fetches = r->fetches, po.num_fetches = o->nfetch;
  po.targets = r->targets, po.num_targets = o->ntarget;
  po.feeds = NULL, po.num_feeds = 0;
  gr_output feed_eps[CLI_MAX_NAMES];
  for (int i = 0; i < o->nfeed; i++) feed_eps[i] = r->feeds[i].output;
  if (o->nfeed) po.feeds = feed_eps, po.num_feeds = o->nfeed;
  if (gr_placer_assign_step(r->g, r->cluster, (int)o->devices, o->placement, &po, &err) == GR_OK)
    return GR_EXIT_OK;
  fprintf(stderr, "graphrun run: placement: %s\n", err.msg);
  if (!o->soft && strstr(err.msg, "soft placement is off"))
    fprintf(stderr, "  (--soft-placement runs it on a local device instead)\n");
  return GR_EXIT_USAGE;
}

/* gr_session_options.log_fn: notes (soft placement) go to stderr. */
static void print_note(void *arg, const char *msg) {
  (void)arg;
  fprintf(stderr, "graphrun run: note: %s\n", msg);
}

static gr_session_options session_options(const cli_run_options *o) {
  return (gr_session_options){.inter_op_threads = (int)o->threads,
                              .num_devices = (int)o->devices,
                              .schedule_recvs = o->schedule_recvs,
                              .soft_placement = o->soft,
                              .no_fusion = o->no_fusion,
                              .log_fn = print_note,
                              /* a sub-millisecond timeout is still a timeout */
                              .step_timeout_ms = o->timeout_s > 0 && o->timeout_s < 0.001
                                                     ? 1
                                                     : (int)(o->timeout_s * 1000.0 + 0.5)};
}

/* On a cluster, a master connected to its tasks; the between-graph chief
 * holds its lease (cli_worker.c) from then on. */
static int connect_cluster(cli_run_state *r) {
  gr_error err;
  int rc = cli_run_pick_container(r); /* the tasks' container of the variables */
  if (rc != GR_EXIT_OK || !r->cluster) return rc;
  cli_worker_set_container(&r->self, r->o.container);
  cli_set_identity(r->o.cluster_id, r->o.insecure);
  cli_set_tls(&r->o.tls);
  if (cli_read_secret(r->o.secret_file, r->o.insecure, &r->secret, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  cli_set_connect_timeout((int)(r->o.connect_s * 1000)); /* the first connect's; not recovery's */
  gr_status st = cli_connect(r->cluster, r->cluster_from, r->secret, r->opts.step_timeout_ms,
                             &r->master, &err);
  cli_set_connect_timeout(0);
  if (st != GR_OK || cli_chief_hold(&r->self, r->cluster, r->secret, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  if (!r->o.quiet) {
    int nd;
    gr_master_devices(r->master, &nd);
    fprintf(stderr, "graphrun run: cluster of %d tasks (%s), %d devices\n",
            gr_cluster_num_tasks(r->cluster), r->cluster_from, nd);
  }
  return cli_run_fresh_container(r); /* --no-restore with a shared one */
}

/* The session (local, or a master's) and a check of the feeds against it:
 * input errors (a placeholder not fed, a name fed twice) exit 2 before
 * anything runs. */
static int open_session(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  gr_error err;
  if (!(r->s = r->master ? gr_master_session_new(r->master, r->g, &r->opts, &err)
                         : gr_session_new(r->g, &r->opts, &err))) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  if (gr_session_check_feeds(r->s, r->feeds, o->nfeed, r->fetches, o->nfetch, r->targets,
                             o->ntarget, &err) != GR_OK ||
      gr_session_check_feeds(r->s, r->feeds, o->nfeed, r->evals, o->neval, NULL, 0, &err) !=
          GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    if (strstr(err.msg, "must be fed"))
      fprintf(stderr, "  (feed it: --feed NAME=FILE, --feed NAME=1.5 or --feed NAME=1,2,3)\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* Opens and restores --ckpt; a worker that is not the chief starts once the
 * chief has given the shared variables their values; on a cluster the first
 * checkpoint is saved before the first step. */
static int start_checkpoint(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  int rc;
  if (o->ckpt_path && (rc = cli_run_open_checkpoint(o->ckpt_path, (int)o->keep, o->no_restore,
                                                    o->restore_best, r->master != NULL, r->s, r->g,
                                                    &r->ck, &r->done_steps)) != GR_EXIT_OK)
    return rc;
  r->rec = (cli_recovery){.cluster = r->cluster,
                          .from = r->cluster_from,
                          .secret = r->secret,
                          .ckpt_path = o->ckpt_path,
                          .opts = &r->opts,
                          .timeout_s = o->recovery_s,
                          .max_failures = o->max_failures,
                          .ck = r->ck,
                          .g = r->g,
                          .self = &r->self};
  gr_error err;
  r->rec.pending = (cli_pending_save){.async = r->ck && o->save_async && r->master, .step = -1};
  if (r->ck && o->save_async && !r->master) {
    if (gr_ckpt_async_new(r->ck, &r->rec.async, &err) != GR_OK) {
      fprintf(stderr, "graphrun run: --save-async: %s\n", err.msg);
      return GR_EXIT_FAILURE;
    }
  }
  if (r->self.on && !r->self.chief &&
      cli_wait_for_chief(r->s, r->master, &r->self, o->recovery_s, o->quiet, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  if (r->master && r->ck) return cli_run_save_first(&r->rec, &r->master, &r->s);
  return GR_EXIT_OK;
}

/* Steps st to st + n - 1 (n > 1: one multi-step run, --steps-per-run),
 * then on a saving step the checkpoint (*in_save: it was the save that
 * failed); a lost task fails either. */
static gr_status run_step(cli_run_state *r, long st, long n, bool saving, bool *in_save,
                          gr_error *err) {
  const cli_run_options *o = &r->o;
  *in_save = false;
  gr_status ok =
      n > 1
          ? gr_session_run_steps(r->s, r->feeds, o->nfeed, r->fetches, o->nfetch, r->results,
                                 r->targets, o->ntarget, n,
                                 st + n - 1 == o->steps ? r->trace : NULL, err)
          : gr_session_run_traced(
                r->s, r->feeds, o->nfeed, r->fetches, o->nfetch, r->results, r->targets, o->ntarget,
                st == o->steps && r->trace ? r->trace : cli_epochs_trace_for(r->ep, st), err);
  st += n - 1; /* the last one */
  if (ok != GR_OK) return ok;
  r->moved = gr_session_last_transfers(r->s); /* before a checkpoint's own step */
  if (r->show) {
    int k = 0;
    while (k < o->nfetch && gr_tensor_num_elements(&r->results[k]) != 1) k++;
    cli_progress_update(&r->pr, st, k < o->nfetch ? o->fetch_names[k] : "", k < o->nfetch,
                        k < o->nfetch ? gr_tensor_get_f64(&r->results[k], 0) : 0);
  }
  *in_save = saving;
  return saving ? cli_run_save_checkpoint(&r->rec, r->s, st, r->master != NULL, err) : GR_OK;
}

/* Steps st to st + n - 1 (or the checkpoint after them) failed with err:
 * on a cluster with a checkpoint (or a follower's chief), recovers and
 * sets *resumed, the step after which the loop goes on (CLI_RUN_GO); else
 * reports err (GR_EXIT_FAILURE). */
static int step_failed(cli_run_state *r, long st, long n, bool in_save, gr_error *err,
                       long *resumed) {
  if (r->show && r->pr.tty) fputc('\n', stderr);
  char when[96];
  if (in_save)
    snprintf(when, sizeof when, "saving the checkpoint after step %ld", st + n - 1);
  else if (n > 1) /* the error names the step of them that failed */
    snprintf(when, sizeof when, "steps %ld-%ld", st, st + n - 1);
  else
    snprintf(when, sizeof when, "step %ld", st);
  int64_t at;
  double t_rec = cli_now();
  bool follower = r->self.on && !r->self.chief; /* recovers without a checkpoint of its own */
  int how = r->master && (r->ck || follower)
                ? cli_run_recover(&r->rec, when, err, &r->master, &r->s, &at)
                : CLI_NOT_RECOVERABLE;
  if (in_save) /* the step's results were fetched */
    for (int i = 0; i < r->o.nfetch; i++) gr_tensor_release(&r->results[i]);
  if (how == CLI_RECOVERY_FAILED) return GR_EXIT_FAILURE;
  if (how == CLI_NOT_RECOVERABLE) {
    cli_print_run_error("run", when, err);
    return GR_EXIT_FAILURE;
  }
  long done = in_save ? st + n - 1 : st - 1; /* at least */
  /* a follower goes on with its own count: the chief restored the shared state */
  *resumed = !r->ck ? done : at < 0 ? 0 : cli_run_steps_done(r->ck);
  fprintf(stderr, "graphrun run: recovered in %.0f ms: resuming after step %ld (%ld steps lost)\n",
          (cli_now() - t_rec) * 1000, *resumed, done - *resumed);
  return CLI_RUN_GO;
}

/* How many steps from `first` on one run takes: --steps-per-run, ending at
 * the next save (--save-every) or the last step (--trace's: a run's last). */
static long steps_in_run(const cli_run_state *r, long first) {
  const cli_run_options *o = &r->o;
  long n = o->steps_per_run > 1 && !r->ep ? o->steps_per_run : 1;
  if (n > o->steps - first + 1) n = o->steps - first + 1;
  if (r->ck && o->save_every) {
    long next = (first - 1) / o->save_every * o->save_every + o->save_every;
    if (n > next - first + 1) n = next - first + 1;
  }
  return n;
}

/* The steps after the restored ones, each saving per --save-every; the
 * results of the last stay in r->results. */
static int run_steps(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  gr_error err;
  r->show = o->steps - r->done_steps > 1 && !o->quiet && !r->ep; /* epochs: their own lines */
  if (r->show) cli_progress_start(&r->pr, o->steps, stderr);
  for (long first = r->done_steps + 1; first <= o->steps;) {
    long n = steps_in_run(r, first), st = first + n - 1; /* st: the run's last step */
    bool saving = r->ck && ((o->save_every && st % o->save_every == 0) || st == o->steps);
    bool in_save;
    if (run_step(r, first, n, saving, &in_save, &err) != GR_OK) {
      long resumed;
      int rc = step_failed(r, first, n, in_save, &err, &resumed);
      if (rc != CLI_RUN_GO) return rc;
      first = resumed + 1;
      continue;
    }
    first = st + 1;
    if (saving && !o->quiet && st < o->steps && !r->ep) {
      if (r->show && r->pr.tty) fputc('\n', stderr);
      fprintf(stderr, "graphrun run: %s a checkpoint after step %ld to %s\n",
              r->rec.async || r->rec.pending.async ? "saving (in the background)" : "saved", st,
              o->ckpt_path);
    }
    int erc = r->ep ? cli_epochs_after_step(r, st) : CLI_RUN_GO;
    if (erc != CLI_RUN_GO) return erc; /* stopped early (the results kept), or failed */
    if (st < o->steps)
      for (int i = 0; i < o->nfetch; i++) gr_tensor_release(&r->results[i]);
  }
  if (r->show) cli_progress_finish(&r->pr, o->steps);
  return GR_EXIT_OK;
}

static void free_run(cli_run_state *r) {
  cli_epochs_free(r->ep);
  gr_step_trace_free(r->trace);
  for (int i = 0; i < r->nloaded; i++) gr_tensor_release(&r->feed_vals[i]);
  cli_run_wait_saves(&r->rec, NULL); /* a write still in flight (a failed run) ends first */
  gr_ckpt_async_free(r->rec.async, NULL);
  gr_ckpt_close(r->ck);
  gr_session_free(r->s);
  gr_master_free(r->master);
  cli_worker_free(&r->self); /* last: the chief's lease ends with this connection */
  gr_cluster_free(r->cluster);
  free(r->secret);
  gr_dsl_program_free(r->p);
  gr_graph_free(r->g);
  free(r);
}

int gr_cmd_run(int argc, char **argv) {
  cli_run_state *r = calloc(1, sizeof *r);
  if (!r) {
    fprintf(stderr, "graphrun run: out of memory\n");
    return GR_EXIT_FAILURE;
  }
  int rc = cli_run_parse_options(argc, argv, &r->o);
  if (rc != CLI_RUN_GO) { /* --help, or a usage error */
    free_run(r);
    return rc;
  }
  rc = load_program(r);
  if (rc == GR_EXIT_OK) rc = resolve_names(r);
  if (rc == GR_EXIT_OK) rc = cli_epochs_setup(r);
  if (rc == GR_EXIT_OK) rc = load_feeds(r);
  if (rc == GR_EXIT_OK) rc = place_nodes(r);
  if (rc == GR_EXIT_OK) {
    r->opts = session_options(&r->o);
    rc = cli_run_prepare_outputs(&r->o, &r->trace);
  }
  if (rc == GR_EXIT_OK) rc = connect_cluster(r);
  if (rc == GR_EXIT_OK) rc = open_session(r);
  if (rc == GR_EXIT_OK) rc = start_checkpoint(r);
  if (rc == GR_EXIT_OK) rc = cli_epochs_start(r, argc, argv);
  if (rc == GR_EXIT_OK) rc = run_steps(r);
  if (rc == GR_EXIT_OK) rc = cli_run_wait_saves(&r->rec, r->s); /* the last checkpoint is durable */
  if (r->ep) cli_epochs_end(r, rc);
  if (rc == GR_EXIT_OK) rc = cli_run_report_step(r);
  if (rc == GR_EXIT_OK) rc = cli_run_print_results(r);
  free_run(r);
  return rc;
}
