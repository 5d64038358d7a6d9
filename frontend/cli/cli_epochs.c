/* graphrun run --epochs: the epochs of a run. The step loop stays in
 * cmd_run.c (recovery included); after each step this file accumulates the
 * scalar fetches, and after an epoch's last step it runs --validate once
 * (fetching the learning rate too when an optimizer's is known), prints the
 * epoch's line, writes its rows into the run database (cli_rundb.c), marks
 * the best checkpoint (--keep-best) and decides on stopping (--early-stop).
 * All on the thread of `graphrun run`. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_epochs.h"
#include "cli_run.h"
#include "commands.h"

#define MAX_HIST_VARS 64
#define MAX_METRICS   (2 * CLI_MAX_NAMES + 8)

/* A metric watched by --early-stop or --keep-best: its name, direction and
 * best value so far. */
typedef struct watch {
  char name[128];
  int sign; /* +1: higher is better, -1: lower */
  double min_delta;
  long patience;
  bool have;
  double best;
  long best_epoch, best_ckpt_step, waited;
} watch;

struct cli_epochs {
  long epochs, spe, batch;          /* batch: the batch op's batch_size, -1 unknown */
  gr_output val[CLI_MAX_NAMES + 1]; /* --validate's outputs, then the learning rate */
  char val_tags[CLI_MAX_NAMES][128];
  int nval;
  bool has_lr;
  gr_output vars[MAX_HIST_VARS]; /* the trained variables, for histograms */
  const char *var_names[MAX_HIST_VARS];
  int nvars;
  /* this epoch so far: sums of the scalar fetches over the steps seen */
  double sum[CLI_MAX_NAMES];
  long count[CLI_MAX_NAMES];
  long last_step, epoch_first; /* the last step seen; the step before the first summed */
  double epoch_start;
  watch stop, best;
  bool stopping, keeping;
  cli_rundb *db;
  int64_t run;
  gr_step_trace *trace;
  long epochs_done;
};

/* ---- setup -------------------------------------------------------------------- */

static bool has_word(const char *s, const char *w) {
  return strstr(s, w) != NULL;
}

/* "M[,patience=P][,min_delta=D][,mode=min|max]" into w (only mode=
 * unless stop_keys). */
static int parse_watch(const char *flag, const char *spec, bool stop_keys, watch *w) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL, *tok = strtok_r(buf, ",", &save);
  if (!tok || !*tok || strchr(tok, '=')) {
    fprintf(stderr,
            "graphrun run: %s wants a metric name first (val_loss, accuracy, ...), got '%s'\n",
            flag, spec);
    return GR_EXIT_USAGE;
  }
  snprintf(w->name, sizeof w->name, "%s", tok);
  bool acc = has_word(tok, "acc") || has_word(tok, "auc") || has_word(tok, "precision") ||
             has_word(tok, "recall");
  w->sign = acc ? 1 : -1;
  while ((tok = strtok_r(NULL, ",", &save))) {
    char *eq = strchr(tok, '=');
    const char *val = eq ? eq + 1 : "";
    if (eq) *eq = '\0';
    char *end = NULL;
    if (stop_keys && !strcmp(tok, "patience") && cli_parse_long(val, 0, 1000000, &w->patience))
      continue;
    if (stop_keys && !strcmp(tok, "min_delta") && (w->min_delta = strtod(val, &end)) >= 0 &&
        end != val && !*end && isfinite(w->min_delta))
      continue;
    if (!strcmp(tok, "mode") && (!strcmp(val, "min") || !strcmp(val, "max"))) {
      w->sign = !strcmp(val, "max") ? 1 : -1;
      continue;
    }
    fprintf(stderr, "graphrun run: %s: bad setting '%s%s%s' (%s)\n", flag, tok, eq ? "=" : "", val,
            stop_keys ? "patience=P (epochs, >= 0), min_delta=D (>= 0), mode=min|max"
                      : "mode=min|max");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* The metric names an epoch reports: the fetches', val_ names, lr. */
static bool known_metric(const cli_run_state *r, const cli_epochs *ep, const char *name) {
  for (int i = 0; i < r->o.nfetch; i++)
    if (!strcmp(r->o.fetch_names[i], name)) return true;
  for (int i = 0; i < ep->nval; i++)
    if (!strcmp(ep->val_tags[i], name)) return true;
  return ep->has_lr && !strcmp(name, "lr");
}

static int check_metric(const cli_run_state *r, const cli_epochs *ep, const char *flag,
                        const char *name) {
  if (known_metric(r, ep, name)) return GR_EXIT_OK;
  fprintf(stderr, "graphrun run: %s: no metric '%s'; an epoch reports", flag, name);
  for (int i = 0; i < r->o.nfetch; i++) fprintf(stderr, " %s", r->o.fetch_names[i]);
  for (int i = 0; i < ep->nval; i++) fprintf(stderr, " %s", ep->val_tags[i]);
  fprintf(stderr, "%s (the scalar fetches, and --validate's names as val_NAME)\n",
          ep->has_lr ? " lr" : "");
  return GR_EXIT_USAGE;
}

/* The nodes a step of the run needs (targets and fetches). */
static unsigned char *needed_nodes(const cli_run_state *r) {
  int n = gr_graph_num_nodes(r->g);
  unsigned char *mark = calloc((size_t)n + 1, 1);
  gr_prune_request q = {.fetches = r->fetches,
                        .num_fetches = r->o.nfetch,
                        .targets = r->targets,
                        .num_targets = r->o.ntarget};
  gr_error err;
  if (mark && gr_graph_mark_needed(r->g, &q, mark, NULL, &err) != GR_OK) {
    free(mark);
    return NULL;
  }
  return mark;
}

/* From the `batch` and `image_folder` ops a step reads: the steps of one
 * pass over their data (the op's own epoch: rows or images of its shard /
 * batch_size, the rest dropped). -1 when there is none, -2 when they
 * disagree or their rows are unknown (said unless quiet: --steps-per-epoch
 * is given). */
static long data_steps(const cli_run_state *r, const unsigned char *mark, bool quiet, long *batch) {
  long spe = -1;
  const gr_node *first = NULL;
  for (int i = 0; i < gr_graph_num_nodes(r->g); i++) {
    const gr_node *n = gr_graph_node(r->g, i);
    bool folder = !strcmp(n->op->name, "image_folder");
    if (!mark[i] || (!folder && (strcmp(n->op->name, "batch") || n->num_inputs < 2))) continue;
    const gr_output x = folder ? (gr_output){NULL, 0} : n->inputs[1];
    int64_t rows = folder ? gr_image_folder_num_images((gr_output){(gr_node *)n, 0})
                   : x.node->out_shapes[x.index].rank > 0 ? x.node->out_shapes[x.index].dims[0]
                                                          : -1;
    int64_t b = gr_node_attr_int(n, "batch_size", 1);
    /* a folder's count is of its shard already */
    int64_t shards = folder ? 1 : gr_node_attr_int(n, "num_shards", 1),
            shard = folder ? 0 : gr_node_attr_int(n, "shard_index", 0);
    if (rows < 0) {
      if (quiet) return -2;
      fprintf(stderr,
              "graphrun run: --epochs: the rows of the data of '%s' are not known before the "
              "run; give --steps-per-epoch S\n",
              n->name);
      return -2;
    }
    long s = (long)((rows - shard + shards - 1) / shards / b);
    if (first && s != spe) {
      if (quiet) return -2;
      fprintf(stderr,
              "graphrun run: --epochs: the batch ops '%s' (%ld steps a pass) and '%s' (%ld) "
              "disagree on an epoch; give --steps-per-epoch S\n",
              first->name, spe, n->name, s);
      return -2;
    }
    first = n, spe = s, *batch = (long)b;
  }
  return spe;
}

/* The optimizer updates a step runs (ops with an "lr" input first): their
 * learning rate (the first's) and the variables they train. */
static void find_trained(cli_run_state *r, cli_epochs *ep, const unsigned char *mark) {
  int n = gr_graph_num_nodes(r->g);
  for (int i = 0; i < n; i++) {
    const gr_node *u = gr_graph_node(r->g, i);
    if (!mark[i] || !(u->op->flags & GR_OP_UPDATES) || u->num_inputs < 1 || !u->op->input_names ||
        strcmp(u->op->input_names[0], "lr"))
      continue;
    if (!ep->has_lr && u->inputs[0].node->out_shapes[u->inputs[0].index].rank == 0)
      ep->val[ep->nval] = u->inputs[0], ep->has_lr = true;
    const char *var = gr_node_attr_string(u, "var", NULL);
    for (int k = 0; var && k < n && ep->nvars < MAX_HIST_VARS; k++) {
      gr_node *v = gr_graph_node(r->g, k);
      if (!(v->op->flags & GR_OP_VARIABLE) || (v->op->flags & GR_OP_UPDATES) ||
          v->num_outputs != 1 || (v->out_dtypes[0] != GR_F32 && v->out_dtypes[0] != GR_F64) ||
          strcmp(gr_node_attr_string(v, "var", v->name), var))
        continue;
      bool seen = false;
      for (int j = 0; j < ep->nvars && !seen; j++) seen = !strcmp(ep->var_names[j], var);
      if (!seen) ep->vars[ep->nvars] = (gr_output){v, 0}, ep->var_names[ep->nvars++] = var;
      break;
    }
  }
}

/* --validate's names as outputs and their tags (val_NAME). */
static int resolve_validate(cli_run_state *r, cli_epochs *ep) {
  for (int i = 0; i < r->o.nvalidate; i++) {
    const char *name = r->o.validate_names[i];
    if (!gr_dsl_lookup(r->p, name, &ep->val[i]) || ep->val[i].index < 0) {
      fprintf(stderr, "graphrun run: cannot validate '%s': no such name or node%s\n", name,
              ep->val[i].node ? " with a value" : "");
      return GR_EXIT_USAGE;
    }
    snprintf(ep->val_tags[i], sizeof ep->val_tags[i], "%s%s",
             strncmp(name, "val_", 4) ? "val_" : "", name);
  }
  ep->nval = r->o.nvalidate;
  return GR_EXIT_OK;
}

int cli_epochs_setup(cli_run_state *r) {
  cli_run_options *o = &r->o;
  if (!o->epochs) return GR_EXIT_OK;
  cli_epochs *ep = r->ep = calloc(1, sizeof *ep);
  unsigned char *mark = ep ? needed_nodes(r) : NULL;
  if (!mark) {
    fprintf(stderr, "graphrun run: out of memory\n");
    return GR_EXIT_FAILURE;
  }
  ep->epochs = o->epochs;
  ep->batch = -1;
  bool given = o->steps_per_epoch > 0;
  long from_data = data_steps(r, mark, given, &ep->batch);
  int rc = resolve_validate(r, ep);
  if (rc == GR_EXIT_OK) find_trained(r, ep, mark);
  free(mark);
  if (rc != GR_EXIT_OK || (from_data == -2 && !given)) return GR_EXIT_USAGE;
  ep->spe = o->steps_per_epoch ? o->steps_per_epoch : from_data;
  if (ep->spe < 1) {
    fprintf(stderr, "graphrun run: --epochs: %s; give --steps-per-epoch S\n",
            from_data == 0
                ? "the data has fewer rows than a batch"
                : "no `batch` or `image_folder` op in the step tells the steps of an epoch");
    return GR_EXIT_USAGE;
  }
  if (ep->spe > LONG_MAX / ep->epochs) {
    fprintf(stderr, "graphrun run: --epochs %ld of %ld steps: too many steps\n", ep->epochs,
            ep->spe);
    return GR_EXIT_USAGE;
  }
  o->steps = ep->epochs * ep->spe;
  if (o->logdir) mkdir(o->logdir, 0755); /* now: --ckpt may name a file in it (errors: at open) */
  bool chief = !r->self.on || r->self.chief; /* the others validate, log and keep nothing */
  ep->stopping = o->early_stop != NULL;
  ep->keeping = o->keep_best && o->ckpt_path;
  if (o->ckpt_path && !o->save_every) o->save_every = ep->spe; /* a checkpoint per epoch */
  if (ep->keeping && ep->spe % o->save_every) {
    fprintf(stderr,
            "graphrun run: --keep-best needs a checkpoint at each epoch's end: --save-every %ld "
            "does not divide the %ld steps of an epoch\n",
            o->save_every, ep->spe);
    return GR_EXIT_USAGE;
  }
  if ((ep->stopping && (rc = parse_watch("--early-stop", o->early_stop, true, &ep->stop))) ||
      (ep->stopping && (rc = check_metric(r, ep, "--early-stop", ep->stop.name))) ||
      (o->keep_best && (rc = parse_watch("--keep-best", o->keep_best, false, &ep->best))) ||
      (o->keep_best && (rc = check_metric(r, ep, "--keep-best", ep->best.name))))
    return rc;
  if (!chief) ep->nval = 0, ep->has_lr = false, ep->nvars = 0, ep->stopping = false;
  return GR_EXIT_OK;
}

/* ---- the run database --------------------------------------------------------- */

/* The command line as one string, arguments with spaces quoted. */
static char *command_line(int argc, char **argv) {
  size_t n = 16;
  for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 3;
  char *s = malloc(n);
  if (!s) return NULL;
  size_t len = (size_t)snprintf(s, n, "graphrun");
  for (int i = 0; i < argc; i++)
    len +=
        (size_t)snprintf(s + len, n - len, strpbrk(argv[i], " \t'\"") ? " '%s'" : " %s", argv[i]);
  return s;
}

/* --logdir, else the directory of --ckpt's file (its directory on a cluster). */
static char *log_dir(const cli_run_state *r) {
  const char *c = r->o.ckpt_path;
  if (r->o.logdir) return strdup(r->o.logdir);
  if (!c) return NULL;
  if (r->master) return strdup(c);
  const char *slash = strrchr(c, '/');
  return slash ? strndup(c, (size_t)(slash - c) + (slash == c)) : strdup(".");
}

/* The graph as DOT text, coloured by the devices its nodes run on. */
static char *graph_dot(gr_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  int rc = cli_write_dot(f, g, true);
  if (fclose(f) != 0 || rc != GR_EXIT_OK) {
    free(buf);
    return NULL;
  }
  return buf;
}

int cli_epochs_start(cli_run_state *r, int argc, char **argv) {
  cli_epochs *ep = r->ep;
  if (!ep) return GR_EXIT_OK;
  ep->last_step = ep->epoch_first = r->done_steps;
  ep->epoch_start = cli_now();
  ep->epochs_done = r->done_steps / ep->spe;
  char *dir = r->self.on && !r->self.chief ? NULL : log_dir(r);
  if (!dir) return GR_EXIT_OK;
  gr_error err;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  char *cmd = command_line(argc, argv), *dot = graph_dot(r->g);
  cli_rundb_run run = {.command = cmd ? cmd : "graphrun run",
                       .file = r->o.file,
                       .ckpt = r->o.ckpt_path,
                       .host = host,
                       .epochs = ep->epochs,
                       .steps_per_epoch = ep->spe,
                       .batch_size = ep->batch,
                       .first_step = r->done_steps};
  gr_status st = cli_rundb_open(dir, &ep->db, &err);
  if (st == GR_OK) st = cli_rundb_begin_run(ep->db, &run, &ep->run, &err);
  if (st == GR_OK)
    st = cli_rundb_graph(ep->db, ep->run, dot ? dot : "digraph graphrun {}", r->g, &err);
  if (st == GR_OK && !(ep->trace = gr_step_trace_new())) st = gr_error_set_oom(&err);
  if (st == GR_OK && !r->o.quiet)
    fprintf(stderr, "graphrun run: run %lld of %s/%s (graphrun board %s)\n", (long long)ep->run,
            dir, CLI_RUNDB_FILE, dir);
  free(cmd);
  free(dot);
  free(dir);
  if (st == GR_OK) return GR_EXIT_OK;
  fprintf(stderr, "graphrun run: --logdir: %s\n", err.msg);
  return st == GR_ERR_INVALID_ARGUMENT ? GR_EXIT_USAGE : GR_EXIT_FAILURE;
}

gr_step_trace *cli_epochs_trace_for(cli_epochs *ep, long st) {
  if (!ep || !ep->trace || st % ep->spe) return NULL;
  gr_step_trace_clear(ep->trace);
  return ep->trace;
}

/* ---- an epoch's end -------------------------------------------------------------- */

typedef struct metric {
  const char *tag;
  double value;
  bool shown; /* on the epoch's line */
} metric;

typedef struct epoch_values {
  metric m[MAX_METRICS];
  int n;
  double seconds;
} epoch_values;

static void add(epoch_values *v, const char *tag, double value, bool shown) {
  if (v->n < MAX_METRICS) v->m[v->n++] = (metric){tag, value, shown};
}

static bool lookup(const epoch_values *v, const char *tag, double *value) {
  for (int i = 0; i < v->n; i++)
    if (!strcmp(v->m[i].tag, tag)) return *value = v->m[i].value, true;
  return false;
}

/* --validate's values (and the learning rate) into v. */
static int validate(cli_run_state *r, long epoch, epoch_values *v) {
  cli_epochs *ep = r->ep;
  int n = ep->nval + ep->has_lr;
  if (!n) return GR_EXIT_OK;
  gr_tensor out[CLI_MAX_NAMES + 1];
  gr_error err;
  if (gr_session_run(r->s, r->feeds, r->o.nfeed, ep->val, n, out, NULL, 0, &err) != GR_OK) {
    char when[64];
    snprintf(when, sizeof when, "--validate after epoch %ld", epoch);
    cli_print_run_error("run", when, &err);
    return GR_EXIT_FAILURE;
  }
  for (int i = 0; i < n; i++) {
    bool scalar = gr_tensor_num_elements(&out[i]) == 1;
    if (i < ep->nval && !scalar)
      fprintf(stderr,
              "graphrun run: note: --validate %s is not a scalar (%lld elements): not "
              "reported\n",
              r->o.validate_names[i], (long long)gr_tensor_num_elements(&out[i]));
    else if (scalar)
      add(v, i < ep->nval ? ep->val_tags[i] : "lr", gr_tensor_get_f64(&out[i], 0), i < ep->nval);
    gr_tensor_release(&out[i]);
  }
  return GR_EXIT_OK;
}

/* The epoch's rows: scalars, histograms of the trained variables, the trace. */
static gr_status record(cli_run_state *r, long epoch, long st, const epoch_values *v,
                        gr_error *err) {
  cli_epochs *ep = r->ep;
  gr_tensor vals[MAX_HIST_VARS];
  int nv = ep->nvars;
  if (nv && gr_session_run(r->s, NULL, 0, ep->vars, nv, vals, NULL, 0, err) != GR_OK) nv = 0;
  char *trace = NULL;
  size_t tlen = 0;
  /* the last step's is --trace's when given (cmd_run.c) */
  const gr_step_trace *t = st == r->o.steps && r->trace ? r->trace : ep->trace;
  FILE *f = t && gr_step_trace_count(t) ? open_memstream(&trace, &tlen) : NULL;
  if (f && (cli_write_trace_to(f, t) | fclose(f)) != 0) {
    free(trace);
    trace = NULL;
  }
  gr_status s = cli_rundb_begin(ep->db, err);
  for (int i = 0; s == GR_OK && i < v->n; i++)
    s = cli_rundb_scalar(ep->db, ep->run, epoch, st, v->m[i].tag, v->m[i].value, err);
  for (int i = 0; s == GR_OK && i < nv; i++)
    s = cli_rundb_histogram(ep->db, ep->run, epoch, st, ep->var_names[i], &vals[i], err);
  if (s == GR_OK && trace) s = cli_rundb_trace(ep->db, ep->run, epoch, st, trace, err);
  if (s == GR_OK) s = cli_rundb_set_status(ep->db, ep->run, "running", epoch, err);
  if (s == GR_OK)
    s = cli_rundb_commit(ep->db, err);
  else
    cli_rundb_commit(ep->db, &(gr_error){0}); /* what was written stays */
  for (int i = 0; i < nv; i++) gr_tensor_release(&vals[i]);
  free(trace);
  return s;
}

/* Whether value improves on w's best (the first value always does). */
static bool improves(const watch *w, double value) {
  if (!isfinite(value)) return false;
  if (!w->have) return true;
  return w->sign > 0 ? value > w->best + w->min_delta : value < w->best - w->min_delta;
}

/* --keep-best: after epoch's checkpoint (saved at its last step), marks it
 * best when it is, and unmarks the previous best (retention may then
 * drop it). */
static int keep_best(cli_run_state *r, long epoch, long st, const epoch_values *v) {
  cli_epochs *ep = r->ep;
  watch *w = &ep->best;
  double value;
  gr_error err;
  int64_t ckpt_step;
  if (!lookup(v, w->name, &value) || !improves(w, value)) return GR_EXIT_OK;
  if (cli_run_wait_saves(&r->rec, r->s) != GR_EXIT_OK)
    return GR_EXIT_FAILURE; /* the epoch's, written */
  if (gr_ckpt_latest_step(r->ck, &ckpt_step, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --keep-best: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  json_t *doc = json_pack("{s:I, s:s, s:f, s:b}", "epoch", (json_int_t)epoch, "best", w->name,
                          "value", value, "keep", 1);
  char *meta = doc ? json_dumps(doc, JSON_REAL_PRECISION(17)) : NULL;
  json_decref(doc);
  gr_status s =
      meta ? gr_ckpt_patch_metadata(r->ck, ckpt_step, meta, &err) : gr_error_set_oom(&err);
  free(meta);
  if (s == GR_OK && w->have && w->best_ckpt_step != ckpt_step &&
      gr_ckpt_patch_metadata(r->ck, w->best_ckpt_step,
                             "{\"epoch\": null, \"best\": null, \"value\": null, \"keep\": null}",
                             &err) != GR_OK &&
      err.code != GR_ERR_NOT_FOUND) /* gone: fine */
    s = err.code;
  if (s == GR_OK && ep->db) s = cli_rundb_best(ep->db, ep->run, w->name, value, epoch, st, &err);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun run: --keep-best: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  w->have = true, w->best = value, w->best_epoch = epoch, w->best_ckpt_step = ckpt_step;
  return GR_EXIT_OK;
}

/* --early-stop: true when the run stops after this epoch (said). */
static bool early_stop(cli_run_state *r, long epoch, const epoch_values *v) {
  watch *w = &r->ep->stop;
  double value;
  if (!lookup(v, w->name, &value)) return false;
  if (improves(w, value)) {
    w->have = true, w->best = value, w->best_epoch = epoch, w->waited = 0;
    return false;
  }
  if (++w->waited <= w->patience) return false;
  if (!r->o.quiet)
    fprintf(stderr,
            "graphrun run: early stop after epoch %ld: %s has not improved on %.6g (epoch %ld) "
            "for %ld epoch%s\n",
            epoch, w->name, w->best, w->best_epoch, w->waited, w->waited > 1 ? "s" : "");
  return true;
}

static void print_line(const cli_run_state *r, long epoch, const epoch_values *v) {
  if (r->o.quiet) return;
  char line[4096];
  size_t n = (size_t)snprintf(line, sizeof line, "epoch %ld/%ld", epoch, r->ep->epochs);
  for (int i = 0; i < v->n && n < sizeof line; i++)
    if (v->m[i].shown)
      n += (size_t)snprintf(line + n, sizeof line - n, "  %s %.4g", v->m[i].tag, v->m[i].value);
  if (n < sizeof line) snprintf(line + n, sizeof line - n, "  %.1f s", v->seconds);
  fprintf(stderr, "%s\n", line);
}

/* The epoch that ends with step st is over: everything an epoch does. */
static int end_epoch(cli_run_state *r, long st) {
  cli_epochs *ep = r->ep;
  long epoch = st / ep->spe, ran = st - ep->epoch_first;
  epoch_values v = {.seconds = cli_now() - ep->epoch_start};
  for (int i = 0; i < r->o.nfetch; i++)
    if (ep->count[i]) add(&v, r->o.fetch_names[i], ep->sum[i] / (double)ep->count[i], true);
  if (v.seconds > 0 && ran > 0) { /* the training steps' rates, before validation */
    add(&v, "steps_per_sec", (double)ran / v.seconds, false);
    if (ep->batch > 0) add(&v, "examples_per_sec", (double)(ran * ep->batch) / v.seconds, false);
  }
  int rc = validate(r, epoch, &v);
  if (rc != GR_EXIT_OK) return rc;
  v.seconds = cli_now() - ep->epoch_start;
  add(&v, "epoch_seconds", v.seconds, false);
  print_line(r, epoch, &v);
  gr_error err;
  if (ep->db && record(r, epoch, st, &v, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --logdir: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  if (ep->keeping && r->ck && (rc = keep_best(r, epoch, st, &v)) != GR_EXIT_OK) return rc;
  ep->epochs_done = epoch;
  if (ep->stopping && early_stop(r, epoch, &v)) return GR_EXIT_OK;
  return CLI_RUN_GO;
}

/* The sums start again after step `from`. */
static void restart_sums(cli_epochs *ep, long from) {
  memset(ep->sum, 0, sizeof ep->sum);
  memset(ep->count, 0, sizeof ep->count);
  ep->epoch_first = from;
}

int cli_epochs_after_step(cli_run_state *r, long st) {
  cli_epochs *ep = r->ep;
  if (st != ep->last_step + 1) restart_sums(ep, st - 1); /* resumed after a recovery */
  ep->last_step = st;
  for (int i = 0; i < r->o.nfetch; i++)
    if (gr_tensor_num_elements(&r->results[i]) == 1) {
      ep->sum[i] += gr_tensor_get_f64(&r->results[i], 0);
      ep->count[i]++;
    }
  if (st % ep->spe) return CLI_RUN_GO;
  int rc = end_epoch(r, st);
  restart_sums(ep, st);
  ep->epoch_start = cli_now();
  if (rc == GR_EXIT_OK) r->o.steps = st; /* stopped early: the last step's results are printed */
  if (rc != GR_EXIT_OK && rc != CLI_RUN_GO)
    for (int i = 0; i < r->o.nfetch; i++) gr_tensor_release(&r->results[i]);
  return rc;
}

void cli_epochs_end(cli_run_state *r, int rc) {
  cli_epochs *ep = r->ep;
  if (!ep->db) return;
  bool stopped = rc == GR_EXIT_OK && ep->epochs_done < ep->epochs;
  gr_error err;
  if (cli_rundb_set_status(ep->db, ep->run,
                           rc != GR_EXIT_OK ? "failed"
                           : stopped        ? "stopped"
                                            : "done",
                           ep->epochs_done, &err) != GR_OK)
    fprintf(stderr, "graphrun run: --logdir: %s\n", err.msg);
}

void cli_epochs_free(cli_epochs *ep) {
  if (!ep) return;
  cli_rundb_close(ep->db);
  gr_step_trace_free(ep->trace);
  free(ep);
}

int64_t cli_epochs_best_step(gr_ckpt *ck, long *steps_done) {
  gr_ckpt_info *infos = NULL;
  int n = 0;
  int64_t step = -1;
  gr_error err;
  if (gr_ckpt_list(ck, &infos, &n, &err) != GR_OK) {
    fprintf(stderr, "graphrun run: --restore-best: %s\n", err.msg);
    return -1;
  }
  for (int i = n - 1; i >= 0 && step < 0; i--) {
    if (!cli_meta_has(infos[i].metadata, "best")) continue;
    step = infos[i].step;
    *steps_done = cli_meta_long(infos[i].metadata, "steps_done");
  }
  gr_ckpt_infos_free(infos, n);
  if (step < 0)
    fprintf(stderr,
            "graphrun run: --restore-best: %s has no checkpoint marked best (train with --epochs "
            "and --keep-best METRIC)\n",
            gr_ckpt_path(ck));
  return step;
}
