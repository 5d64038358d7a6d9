/* Running against a cluster from the command line: reading the cluster
 * (--cluster FILE or JSON, GRAPHRUN_CLUSTER, TF_CONFIG), the shared secret
 * (--secret-file, GRAPHRUN_SECRET_FILE), connecting a master, and saving and
 * restoring variables that live on the tasks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli_util.h"

#include "cli_cluster.h"
#include "commands.h"
#include "placer/gr_placer.h"

gr_status cli_read_secret(const char *path, char **out, gr_error *err) {
  *out = NULL;
  if (!path) path = getenv("GRAPHRUN_SECRET_FILE");
  if (!path || !*path) return GR_OK;
  FILE *f = fopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "secret file %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077))
    fprintf(stderr, "graphrun: warning: secret file %s is readable by other users (chmod 600)\n",
            path);
  char buf[GR_CLI_SECRET_MAX + 2];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
  if (n == 0 || n > GR_CLI_SECRET_MAX || memchr(buf, '\0', n))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "secret file %s: want 1 to %d bytes of text (no NUL)", path,
                        GR_CLI_SECRET_MAX);
  buf[n] = '\0';
  if (!(*out = strdup(buf))) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  return GR_OK;
}

/* "slurm[:JOBS][@PORT]": the cluster of this Slurm job step. */
static gr_status slurm_cluster(const char *spec, gr_cluster **out, gr_cluster_self *self,
                               gr_error *err) {
  char jobs[256] = "";
  long port = 2222;
  const char *at = strrchr(spec, '@');
  size_t jl = at ? (size_t)(at - spec) : strlen(spec);
  if (jl > 5 && spec[5] == ':') {
    if (jl - 6 >= sizeof jobs)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "--cluster %s: jobs too long", spec);
    memcpy(jobs, spec + 6, jl - 6);
    jobs[jl - 6] = '\0';
  } else if (jl != 5) {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "--cluster '%s': want slurm[:JOBS][@PORT], e.g. slurm:ps:1,worker@2222",
                        spec);
  }
  if (at) {
    char *end;
    port = strtol(at + 1, &end, 10);
    if (*end || end == at + 1 || port < 1 || port > 65535)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "--cluster '%s': the port must be 1 to 65535", spec);
  }
  return gr_cluster_from_slurm_env(jobs[0] ? jobs : NULL, (int)port, out, self, err);
}

gr_status cli_load_cluster_self(const char *spec, gr_cluster **out, gr_cluster_self *self,
                                bool *has_self, const char **from, gr_error *err) {
  *out = NULL;
  *from = spec;
  *has_self = false;
  if (!spec) {
    spec = getenv("GRAPHRUN_CLUSTER");
    *from = "GRAPHRUN_CLUSTER";
    if (!spec || !*spec) return GR_OK; /* no cluster: a local run */
  }
  if (!strcmp(spec, "env")) { /* TensorFlow's variable */
    *from = "TF_CONFIG";
    *has_self = true;
    return gr_cluster_from_tf_config_env(out, self, err);
  }
  if (!strncmp(spec, "slurm", 5) && (!spec[5] || spec[5] == ':' || spec[5] == '@')) {
    *from = "Slurm";
    *has_self = true;
    return slurm_cluster(spec, out, self, err);
  }
  const char *p = spec;
  while (*p == ' ' || *p == '\n' || *p == '\t') p++;
  if (*p == '{') /* JSON text */
    return gr_cluster_parse_json(spec, strlen(spec), *from == spec ? "--cluster" : *from, out, err);
  return gr_cluster_load_json(spec, out, err);
}

gr_status cli_load_cluster(const char *spec, gr_cluster **out, const char **from, gr_error *err) {
  gr_cluster_self self;
  bool has_self;
  return cli_load_cluster_self(spec, out, &self, &has_self, from, err);
}

gr_status cli_connect(const gr_cluster *c, const char *from, const char *secret, int timeout_ms,
                      gr_master **out, gr_error *err) {
  *out = NULL;
  int n = gr_cluster_num_tasks(c);
  const char **addrs = calloc((size_t)n + 1, sizeof *addrs);
  if (!addrs) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0; k < n; k++) {
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    if (!t->address) {
      free(addrs);
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "%s: task /job:%s/task:%d has no address (host:port) to connect to", from,
                          t->job, t->index);
    }
    addrs[k] = t->address;
  }
  gr_master_options mo = {.num_tasks = n,
                          .addresses = addrs,
                          .secret = secret,
                          /* a short --timeout also bounds connecting */
                          .connect_timeout_ms =
                              timeout_ms > 0 && timeout_ms < 10000 ? timeout_ms : 10000,
                          .step_timeout_ms = timeout_ms};
  gr_status st = gr_master_new(&mo, out, err);
  free(addrs);
  return st;
}

/* ---- variables on the tasks ---------------------------------------------------- */

/* The variable nodes of g (each once, by its variable name). */
static gr_status var_nodes(gr_graph *g, gr_output **out, const char ***names, int *n,
                           gr_error *err) {
  gr_ckpt_var *vars;
  int nv;
  GR_TRY(gr_ckpt_graph_vars(g, &vars, &nv, err));
  *out = calloc((size_t)nv + 1, sizeof **out);
  *names = calloc((size_t)nv + 1, sizeof **names);
  if (!*out || !*names) {
    free(vars);
    free(*out), free(*names);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  *n = 0;
  for (int i = 0; i < nv; i++) {
    gr_node *node = gr_graph_find_node(g, vars[i].name);
    if (!node || !(node->op->flags & GR_OP_VARIABLE) || node->num_outputs < 1) continue;
    (*names)[*n] = node->name;
    (*out)[(*n)++] = (gr_output){node, 0};
  }
  free(vars);
  return GR_OK;
}

gr_status cli_save_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, const char *meta,
                          gr_error *err) {
  gr_output *vars;
  const char **names;
  int n;
  GR_TRY(var_nodes(g, &vars, &names, &n, err));
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  gr_ckpt_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
  gr_status st = vals && ts ? GR_OK : gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  /* one step reads every variable where it lives; the step counter is kept */
  int64_t step = gr_session_step(s);
  if (st == GR_OK) st = gr_session_run(s, NULL, 0, vars, n, vals, NULL, 0, err);
  gr_session_set_step(s, step);
  for (int i = 0; st == GR_OK && i < n; i++) ts[i] = (gr_ckpt_tensor){names[i], &vals[i]};
  if (st == GR_OK) st = gr_ckpt_save_tensors(ck, step, ts, n, meta, err);
  for (int i = 0; vals && st == GR_OK && i < n; i++) gr_tensor_release(&vals[i]);
  free(vals);
  free(ts);
  free(vars);
  free(names);
  return st;
}

gr_status cli_restore_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, int64_t *step_out,
                             gr_error *err) {
  int64_t step;
  GR_TRY(gr_ckpt_latest_step(ck, &step, err));
  gr_output *vars;
  const char **names;
  int n;
  GR_TRY(var_nodes(g, &vars, &names, &n, err));
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  gr_feed *feeds = calloc((size_t)n + 1, sizeof *feeds);
  gr_output *assigns = calloc((size_t)n + 1, sizeof *assigns);
  gr_status st =
      vals && feeds && assigns ? GR_OK : gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  int loaded = 0;
  /* restore ops, as TensorFlow's Saver adds: assign(v, placeholder) next to v */
  for (int i = 0; st == GR_OK && i < n; i++) {
    st = gr_ckpt_read_tensor(ck, step, names[i], &vals[i], err);
    if (st != GR_OK) break;
    loaded++;
    char pname[512];
    snprintf(pname, sizeof pname, "_restore/%s", names[i]);
    gr_output p = gr_placeholder(g, pname, vals[i].dtype, vals[i].shape);
    assigns[i] = gr_assign(g, vars[i], p);
    feeds[i] = (gr_feed){p, &vals[i]};
    if (!assigns[i].node) {
      const gr_error *ge = gr_graph_error(g);
      st = gr_error_set(err, ge ? ge->code : GR_ERR_INTERNAL, "restoring '%s': %s", names[i],
                        ge ? ge->msg : "cannot build the assignment");
    }
  }
  if (st == GR_OK) st = gr_session_run(s, feeds, n, NULL, 0, NULL, assigns, n, err);
  if (st == GR_OK) {
    gr_session_set_step(s, step);
    *step_out = step;
  }
  for (int i = 0; i < loaded; i++) gr_tensor_release(&vals[i]);
  free(vals);
  free(feeds);
  free(assigns);
  free(vars);
  free(names);
  return st;
}

gr_status cli_recover(const gr_cluster *c, const char *from, const char *secret, int timeout_ms,
                      int recovery_ms, gr_graph *g, const gr_session_options *opts, gr_ckpt *ck,
                      gr_master **master, gr_session **s, int64_t *step, gr_error *err) {
  gr_session_free(*s);
  *s = NULL;
  gr_master_free(*master); /* its connections close: the tasks drop its graphs */
  *master = NULL;
  double deadline = cli_now() + recovery_ms / 1000.0;
  gr_status st;
  for (;;) { /* the lost task comes back (graphrun launch restarts it) */
    st = cli_connect(c, from, secret, timeout_ms, master, err);
    if (st == GR_OK) break;
    if (cli_now() >= deadline) {
      gr_error_prefix(err, "gave up recovering after %.0f s", recovery_ms / 1000.0);
      return st;
    }
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (!(*s = gr_master_session_new(*master, g, opts, err)))
    return err ? err->code : GR_ERR_INTERNAL;
  int64_t latest;
  if (gr_ckpt_latest_step(ck, &latest, err) == GR_ERR_NOT_FOUND) {
    /* lost before the first checkpoint: nothing trained yet, so the tasks
     * that lived hold their initial values and the others initialise anew */
    *step = -1;
    return GR_OK;
  }
  return cli_restore_remote(ck, *s, g, step, err);
}
