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
#include "cli_options.h"
#include "cli_resolve.h"
#include "commands.h"
#include "placer/gr_placer.h"

gr_status cli_read_secret(const char *path, bool insecure, char **out, gr_error *err) {
  *out = NULL;
  if (!path) path = getenv("GRAPHRUN_SECRET_FILE");
  if ((!path || !*path) && insecure) return GR_OK;
  char made[4200];
  if ((!path || !*path) && cli_rendezvous_in_use()) { /* the cluster's, made by the first */
    GR_TRY(cli_rendezvous_secret_file(cli_rendezvous_in_use(), made, sizeof made, err));
    path = made;
  }
  if (!path || !*path)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "no secret: a cluster's servers and clients share a secret file "
                        "(--secret-file FILE, or GRAPHRUN_SECRET_FILE; make one with: head -c 32 "
                        "/dev/urandom | xxd -p > FILE; chmod 600 FILE); --insecure goes without, "
                        "on loopback only (any local user could then run code as you)");
  FILE *f = fopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "secret file %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077)) {
    if (!insecure) {
      fclose(f);
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "secret file %s has mode %04o: other users can read or change it; "
                          "run chmod 600 %s (or give --insecure to use it anyway)",
                          path, (unsigned)(sb.st_mode & 07777), path);
    }
    fprintf(stderr,
            "graphrun: warning: secret file %s has mode %04o: other users can read it "
            "(chmod 600 %s); used because of --insecure\n",
            path, (unsigned)(sb.st_mode & 07777), path);
  }
  char buf[GR_SECRET_MAX + 2];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
  if (n < GR_SECRET_MIN || n > GR_SECRET_MAX || memchr(buf, '\0', n))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "secret file %s: %s; want %d to %d bytes of text (no NUL; head -c 32 "
                        "/dev/urandom | xxd -p > %s makes one)",
                        path,
                        n < GR_SECRET_MIN   ? "too short"
                        : n > GR_SECRET_MAX ? "too long"
                                            : "it holds a NUL byte",
                        GR_SECRET_MIN, GR_SECRET_MAX, path);
  buf[n] = '\0';
  if (!(*out = strdup(buf))) return gr_error_set_oom(err);
  return GR_OK;
}

int cli_opt_cluster_id(const cli_opts *po, const char **out) {
  if (gr_cluster_id_check(po->arg, NULL) != GR_OK)
    return cli_opt_bad(po, "a cluster id: 1 to %d letters, digits, '_', '-' or '.'",
                       GR_CLUSTER_ID_MAX);
  *out = po->arg;
  return GR_EXIT_OK;
}

gr_status cli_cluster_id(const char *flag, const gr_cluster *c, char out[GR_CLUSTER_ID_MAX + 1],
                         gr_error *err) {
  const char *from, *env = getenv("GRAPHRUN_CLUSTER_ID"), *job = getenv("SLURM_JOB_ID");
  char slurm[2 * GR_CLUSTER_ID_MAX];
  const char *id;
  if (flag) {
    from = "--cluster-id", id = flag;
  } else if (env && *env) {
    from = "GRAPHRUN_CLUSTER_ID", id = env;
  } else if (job && *job) { /* a Slurm job: its id, the same in its steps and its batch script */
    from = "SLURM_JOB_ID";
    snprintf(slurm, sizeof slurm, "slurm-%.*s", GR_CLUSTER_ID_MAX, job);
    id = slurm;
  } else if (cli_rendezvous_in_use()) { /* the cluster's, made by the first */
    from = "the rendezvous";
    GR_TRY(cli_rendezvous_cluster_id(cli_rendezvous_in_use(), slurm, sizeof slurm, err));
    id = slurm;
  } else if (c) {
    from = "the cluster spec";
    return gr_cluster_spec_id(c, out, err);
  } else {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "which cluster? give --cluster SPEC (the cluster id is derived from its "
                        "tasks) or --cluster-id ID (or GRAPHRUN_CLUSTER_ID); the clients need the "
                        "same");
  }
  if (gr_cluster_id_check(id, err) != GR_OK) {
    gr_error_prefix(err, "%s", from);
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  snprintf(out, GR_CLUSTER_ID_MAX + 1, "%s", id);
  return GR_OK;
}

gr_status cli_load_cluster_for(const char *spec, bool layout_only, gr_cluster **out,
                               gr_cluster_self *self, bool *has_self, const char **from,
                               gr_error *err) {
  *out = NULL;
  *from = spec;
  *has_self = false;
  if (!spec) {
    spec = getenv("GRAPHRUN_CLUSTER");
    *from = "GRAPHRUN_CLUSTER";
    if (!spec || !*spec) return GR_OK; /* no cluster: a local run */
  }
  cli_launcher l;
  int launcher = cli_launcher_parse(spec, &l, err);
  gr_status st;
  if (launcher < 0) return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  if (launcher > 0) {
    st = cli_launcher_cluster(&l, layout_only, out, from, err);
  } else if (!strcmp(spec, "env")) { /* TensorFlow's variable */
    *from = "TF_CONFIG";
    *has_self = true;
    st = gr_cluster_from_tf_config_env(out, self, err);
  } else {
    const char *p = spec;
    while (*p == ' ' || *p == '\n' || *p == '\t') p++;
    if (*p == '{') /* JSON text */
      st = gr_cluster_parse_json(spec, strlen(spec), *from == spec ? "--cluster" : *from, out, err);
    else
      st = gr_cluster_load_json(spec, out, err);
  }
  if (st == GR_OK && !layout_only && (st = cli_cluster_check_hosts(*out, *from, err)) != GR_OK) {
    gr_cluster_free(*out);
    *out = NULL;
  }
  return st;
}

gr_status cli_load_cluster_self(const char *spec, gr_cluster **out, gr_cluster_self *self,
                                bool *has_self, const char **from, gr_error *err) {
  return cli_load_cluster_for(spec, false, out, self, has_self, from, err);
}

gr_status cli_load_cluster(const char *spec, gr_cluster **out, const char **from, gr_error *err) {
  gr_cluster_self self;
  bool has_self;
  return cli_load_cluster_self(spec, out, &self, &has_self, from, err);
}

/* --heartbeat: this process's setting for every master it connects */
static int heartbeat_ms, heartbeat_missed;

void cli_set_heartbeat(int ms, int missed) {
  heartbeat_ms = ms;
  heartbeat_missed = missed;
}

/* --container: this process's, for every master it connects (a recovery's too) */
static const char *container;

void cli_set_container(const char *name) {
  container = name;
}

/* --connect-timeout: the next cli_connect's bound (0: the default) */
static int connect_ms;

void cli_set_connect_timeout(int ms) {
  connect_ms = ms;
}

/* --cluster-id and --insecure: this process's, for every master it connects */
static const char *cluster_id_flag;
static bool insecure;

void cli_set_identity(const char *cluster_id, bool insecure_ok) {
  cluster_id_flag = cluster_id;
  insecure = insecure_ok;
}

gr_status cli_master_identity(const gr_cluster *c, const char *secret, gr_master_options *mo,
                              char id[GR_CLUSTER_ID_MAX + 1], gr_error *err) {
  GR_TRY(cli_cluster_id(cluster_id_flag, c, id, err));
  mo->secret = secret;
  mo->insecure = insecure;
  mo->cluster_id = id;
  cli_master_tls(mo);
  return GR_OK;
}

gr_status cli_master_options(const gr_cluster *c, const char *from, const char *secret,
                             int timeout_ms, cli_master_conf *conf, gr_error *err) {
  int n = gr_cluster_num_tasks(c);
  *conf = (cli_master_conf){.addrs = calloc((size_t)n + 1, sizeof *conf->addrs),
                            .names = calloc((size_t)n + 1, sizeof *conf->names),
                            .name_of = calloc((size_t)n + 1, sizeof *conf->name_of)};
  if (!conf->addrs || !conf->names || !conf->name_of) {
    cli_master_conf_free(conf);
    return gr_error_set_oom(err);
  }
  for (int k = 0; k < n; k++) {
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    if (!t->address) {
      cli_master_conf_free(conf);
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "%s: task /job:%s/task:%d has no address (host:port) to connect to", from,
                          t->job, t->index);
    }
    conf->addrs[k] = t->address;
    snprintf(conf->names[k], sizeof conf->names[k], "/job:%s/task:%d", t->job, t->index);
    conf->name_of[k] = conf->names[k];
  }
  conf->mo =
      (gr_master_options){.num_tasks = n,
                          .addresses = conf->addrs,
                          .task_names = conf->name_of,
                          /* a short --timeout also bounds connecting */
                          .connect_timeout_ms = connect_ms > 0                         ? connect_ms
                                                : timeout_ms > 0 && timeout_ms < 10000 ? timeout_ms
                                                                                       : 10000,
                          .step_timeout_ms = timeout_ms,
                          .heartbeat_ms = heartbeat_ms,
                          .heartbeat_missed = heartbeat_missed,
                          .container = container};
  gr_status st = cli_master_identity(c, secret, &conf->mo, conf->id, err);
  if (st != GR_OK) cli_master_conf_free(conf);
  return st;
}

void cli_master_conf_free(cli_master_conf *conf) {
  free(conf->addrs), free(conf->names), free(conf->name_of);
  conf->addrs = conf->name_of = NULL;
  conf->names = NULL;
}

gr_status cli_connect(const gr_cluster *c, const char *from, const char *secret, int timeout_ms,
                      gr_master **out, gr_error *err) {
  *out = NULL;
  cli_master_conf conf;
  GR_TRY(cli_master_options(c, from, secret, timeout_ms, &conf, err));
  gr_status st = gr_master_new(&conf.mo, out, err);
  cli_master_conf_free(&conf);
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
    return gr_error_set_oom(err);
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

/* The save node of one task's shard ("_save/JOB-TASK"; with async
 * "_save/JOB-TASK/async", the shard written in the background, and its
 * "_save/JOB-TASK/status"), made on first use: every variable on the task
 * but the copies of mirrored variables (saved once, as the variable they
 * mirror), the step fed to "_save/JOB-TASK/step", the file
 * DIR/JOB-TASK.ckpt, placed on the task; and its checksums of the copies
 * and the variables they mirror ("_save/JOB-TASK/checksums"), compared
 * before the commit. */
typedef struct shard_save {
  char file[96], task[GR_DEVICE_NAME_MAX];
  const char *device;
  gr_output save, step, sums, status;
  gr_output *vars, *check;
  int n, ncheck;
} shard_save;

static gr_status add_checksums_node(gr_graph *g, shard_save *sh, gr_error *err) {
  char name[200];
  snprintf(name, sizeof name, "_save/%.*s/checksums", (int)(strlen(sh->file) - 5), sh->file);
  gr_node *have = gr_graph_find_node(g, name);
  sh->sums = have ? (gr_output){have, 0} : gr_ckpt_checksums(g, sh->check, sh->ncheck);
  if (!have && sh->sums.node) sh->sums = gr_graph_rename(g, sh->sums, name);
  if (!sh->sums.node) {
    const gr_error *ge = gr_graph_error(g);
    return gr_error_set(err, ge ? ge->code : GR_ERR_INTERNAL, "checking the copies on %s: %s",
                        sh->task, ge ? ge->msg : "cannot build the checksums node");
  }
  sh->sums.node->assigned_device = gr_graph_strdup(g, sh->device);
  return GR_OK;
}

/* The node of g named base + suffix, made by make(path) (renamed, placed
 * on the shard's task) on first use. */
static gr_output shard_node(gr_graph *g, const shard_save *sh, const char *base, const char *suffix,
                            const char *path, bool async, bool status) {
  char name[240];
  snprintf(name, sizeof name, "%s%s", base, suffix);
  gr_node *have = gr_graph_find_node(g, name);
  if (have) return (gr_output){have, 0};
  gr_output o = status ? gr_shard_status(g, path, sh->step)
                       : gr_save_shard(g, path, sh->vars, sh->n, sh->step, async);
  if (o.node) o = gr_graph_rename(g, o, name);
  if (o.node) o.node->assigned_device = gr_graph_strdup(g, sh->device);
  return o;
}

static gr_status add_save_node(gr_ckpt *ck, gr_graph *g, shard_save *sh, bool async,
                               gr_error *err) {
  if (sh->ncheck > 0) GR_TRY(add_checksums_node(g, sh, err));
  if (sh->n == 0) return GR_OK; /* only copies: no shard */
  char base[160], path[4096], step_name[200];
  snprintf(base, sizeof base, "_save/%.*s", (int)(strlen(sh->file) - 5), sh->file);
  if (!gr_ckpt_shard_path(ck, sh->file, path, sizeof path))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
  snprintf(step_name, sizeof step_name, "%s/step", base);
  gr_node *have = gr_graph_find_node(g, step_name);
  sh->step = have ? (gr_output){have, 0} : gr_placeholder(g, step_name, GR_I64, gr_shape_scalar());
  if (!have && sh->step.node) sh->step.node->assigned_device = gr_graph_strdup(g, sh->device);
  if (sh->step.node) sh->save = shard_node(g, sh, base, async ? "/async" : "", path, async, false);
  if (sh->step.node && async) sh->status = shard_node(g, sh, base, "/status", path, true, true);
  if (!sh->save.node || !sh->step.node || (async && !sh->status.node)) {
    const gr_error *ge = gr_graph_error(g);
    return gr_error_set(err, ge ? ge->code : GR_ERR_INTERNAL, "saving the shard of %s: %s",
                        sh->task, ge ? ge->msg : "cannot build the save node");
  }
  return GR_OK;
}

/* Groups the variables of g by the task they live on. */
static gr_status plan_shards(gr_session *s, gr_graph *g, shard_save **out, int *nshards,
                             gr_error *err) {
  *out = NULL;
  *nshards = 0;
  gr_output *vars;
  const char **names;
  int n;
  GR_TRY(var_nodes(g, &vars, &names, &n, err));
  shard_save *sh = calloc((size_t)n + 1, sizeof *sh);
  int ns = 0;
  gr_status st = sh ? GR_OK : gr_error_set_oom(err);
  /* where the session runs each variable (a run would decide the same) */
  gr_node **nodes = gr_alloc_array((size_t)n + 1, sizeof *nodes);
  if (st == GR_OK && !nodes) st = gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++) nodes[i] = vars[i].node;
  if (st == GR_OK) st = gr_session_place_nodes(s, nodes, n, err);
  free(nodes);
  /* copies of mirrored variables and the variables they mirror: checked */
  char *role = calloc((size_t)n + 1, 1); /* 1 a copy, 2 mirrored */
  if (st == GR_OK && !role) st = gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++) {
    const char *src = gr_ckpt_mirror_source(g, names[i]);
    for (int j = 0; src && j < n; j++)
      if (strcmp(names[j], src) == 0) role[i] = 1, role[j] |= 2;
  }
  for (int i = 0; st == GR_OK && i < n; i++) {
    const char *dev = vars[i].node->assigned_device;
    gr_device_spec d;
    if (gr_device_spec_parse(dev, &d, err) != GR_OK || !d.job[0] || d.task == GR_DEVICE_ANY) {
      st = gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "variable '%s' is on no task of the cluster yet (device '%s')", names[i],
                        dev);
      break;
    }
    char file[96];
    gr_ckpt_shard_name(d.job, d.task, file, sizeof file);
    int k = 0;
    while (k < ns && strcmp(sh[k].file, file) != 0) k++;
    if (k == ns) {
      snprintf(sh[k].file, sizeof sh[k].file, "%s", file);
      snprintf(sh[k].task, sizeof sh[k].task, "/job:%s/task:%d", d.job, d.task);
      sh[k].device = dev;
      sh[k].vars = calloc((size_t)n, sizeof *sh[k].vars);
      sh[k].check = calloc((size_t)n, sizeof *sh[k].check);
      ns++;
      if (!sh[k].vars || !sh[k].check) {
        st = gr_error_set_oom(err);
        break;
      }
    }
    if (role[i] != 1) sh[k].vars[sh[k].n++] = vars[i];
    if (role[i]) sh[k].check[sh[k].ncheck++] = vars[i];
  }
  free(role);
  free(vars);
  free(names);
  *out = sh;
  *nshards = ns;
  return st;
}

static void free_shards(shard_save *sh, int n) {
  for (int i = 0; sh && i < n; i++) free(sh[i].vars), free(sh[i].check);
  free(sh);
}

/* Compares the checksums the tasks gave (got: one vector per shard with
 * variables to check, in order). */
static gr_status check_copies(const gr_graph *g, const shard_save *sh, int n, gr_tensor *got,
                              gr_error *err) {
  int total = 0, k = 0;
  for (int i = 0; i < n; i++) total += sh[i].ncheck;
  const char **names = calloc((size_t)total + 1, sizeof *names),
             **where = calloc((size_t)total + 1, sizeof *where);
  uint64_t *sums = calloc((size_t)total + 1, sizeof *sums);
  gr_status st = names && where && sums ? GR_OK : gr_error_set_oom(err);
  for (int i = 0, t = 0; st == GR_OK && i < n; i++) {
    if (!sh[i].ncheck) continue;
    gr_tensor *v = &got[t++];
    if (v->dtype != GR_I64 || gr_tensor_num_elements(v) != sh[i].ncheck) {
      st = gr_error_set(err, GR_ERR_INTERNAL, "%s gave %lld checksums for %d variables", sh[i].task,
                        (long long)gr_tensor_num_elements(v), sh[i].ncheck);
      break;
    }
    for (int j = 0; j < sh[i].ncheck; j++, k++) {
      names[k] = gr_node_attr_string(sh[i].check[j].node, "var", sh[i].check[j].node->name);
      where[k] = sh[i].task;
      sums[k] = (uint64_t)((const int64_t *)gr_tensor_data(v))[j];
    }
  }
  if (st == GR_OK) st = gr_ckpt_check_mirrors(g, names, where, sums, k, err);
  free(names), free(where), free(sums);
  return st;
}

void cli_pending_forget(cli_pending_save *p) {
  free(p->meta);
  p->meta = NULL;
  p->step = -1;
}

/* The pending asynchronous save p (if any): every shard's write is waited
 * for on its task (the status nodes, one run), then the manifest row
 * commits them; p is forgotten either way. shards: room for n. */
static gr_status commit_pending(gr_ckpt *ck, gr_session *s, const shard_save *sh, int n,
                                gr_ckpt_shard *shards, cli_pending_save *p, gr_error *err) {
  if (p->step < 0) return GR_OK;
  gr_feed *feeds = calloc((size_t)n + 1, sizeof *feeds);
  gr_output *status = calloc((size_t)n + 1, sizeof *status);
  gr_tensor at = gr_tensor_scalar_i64(p->step);
  gr_status st = feeds && status ? GR_OK : gr_error_set_oom(err);
  int k = 0;
  for (int i = 0; st == GR_OK && i < n; i++) {
    if (!sh[i].n) continue;
    feeds[k] = (gr_feed){sh[i].step, &at};
    status[k] = sh[i].status;
    shards[k++] = (gr_ckpt_shard){sh[i].file, sh[i].task};
  }
  int64_t step = gr_session_step(s);
  if (st == GR_OK) st = gr_session_run(s, feeds, k, NULL, 0, NULL, status, k, err);
  gr_session_set_step(s, step);
  /* every shard durable: the manifest row makes the checkpoint */
  if (st == GR_OK) st = gr_ckpt_commit_shards(ck, p->step, shards, k, p->meta, err);
  gr_tensor_release(&at);
  free(feeds);
  free(status);
  cli_pending_forget(p);
  return st;
}

/* Each task writes its shard at the session's step (one run; the step
 * counter is kept), committed now, or (async) noted in *p. */
static gr_status save_shards(gr_ckpt *ck, gr_session *s, gr_graph *g, const shard_save *sh, int n,
                             const char *meta, bool *vars_ready, cli_pending_save *p,
                             gr_error *err) {
  bool async = p && p->async;
  /* the save nodes read the tasks' containers, so variables no run has
   * used yet are initialised first, as a run using them would (once a
   * session: then they all have values) */
  int64_t step = gr_session_step(s);
  gr_status st = GR_OK;
  if (!*vars_ready && (st = gr_session_init_variables(s, err)) == GR_OK) *vars_ready = true;
  gr_tensor at = gr_tensor_scalar_i64(step);
  int nsave = 0, nsum = 0;
  gr_feed *feeds = calloc((size_t)n + 1, sizeof *feeds);
  gr_output *saves = calloc((size_t)n + 1, sizeof *saves);
  gr_ckpt_shard *shards = calloc((size_t)n + 1, sizeof *shards);
  gr_output *sums = calloc((size_t)n + 1, sizeof *sums);
  gr_tensor *got = calloc((size_t)n + 1, sizeof *got);
  if (st == GR_OK && (!feeds || !saves || !shards || !sums || !got)) st = gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++) {
    if (sh[i].ncheck) sums[nsum++] = sh[i].sums;
    if (!sh[i].n) continue;
    feeds[nsave] = (gr_feed){sh[i].step, &at};
    saves[nsave] = sh[i].save;
    shards[nsave++] = (gr_ckpt_shard){sh[i].file, sh[i].task};
  }
  if (st == GR_OK) st = gr_session_run(s, feeds, nsave, sums, nsum, got, saves, nsave, err);
  gr_session_set_step(s, step);
  /* the copies equal the variables they mirror (so one copy is saved) */
  if (st == GR_OK && nsum) st = check_copies(g, sh, n, got, err);
  for (int i = 0; got && i < nsum; i++) gr_tensor_release(&got[i]);
  if (st == GR_OK && async) { /* committed by the next save, or the end */
    p->step = step;
    if (!(p->meta = strdup(meta))) st = gr_error_set_oom(err), p->step = -1;
  } else if (st == GR_OK) { /* every shard committed: the manifest row makes the checkpoint */
    st = gr_ckpt_commit_shards(ck, step, shards, nsave, meta, err);
  }
  gr_tensor_release(&at);
  free(sums), free(got), free(feeds), free(saves), free(shards);
  return st;
}

/* cli_save_remote (meta not NULL) or cli_commit_remote (meta NULL). */
static gr_status save_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, const char *meta,
                             bool *vars_ready, cli_pending_save *p, gr_error *err) {
  bool async = p && p->async;
  shard_save *sh;
  int n;
  gr_status st = plan_shards(s, g, &sh, &n, err);
  for (int i = 0; st == GR_OK && i < n; i++) st = add_save_node(ck, g, &sh[i], async, err);
  gr_ckpt_shard *shards = calloc((size_t)n + 1, sizeof *shards);
  if (st == GR_OK && !shards) st = gr_error_set_oom(err);
  /* the save in flight first: committed when all its shards are durable */
  if (st == GR_OK && async) st = commit_pending(ck, s, sh, n, shards, p, err);
  if (st == GR_OK && meta) st = save_shards(ck, s, g, sh, n, meta, vars_ready, p, err);
  free(shards);
  free_shards(sh, n);
  return st;
}

gr_status cli_save_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, const char *meta,
                          bool *vars_ready, cli_pending_save *pending, gr_error *err) {
  return save_remote(ck, s, g, meta, vars_ready, pending, err);
}

gr_status cli_commit_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, cli_pending_save *pending,
                            gr_error *err) {
  if (pending->step < 0) return GR_OK;
  return save_remote(ck, s, g, NULL, NULL, pending, err);
}

gr_status cli_restore_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, int64_t *step_out,
                             gr_error *err) {
  *step_out = -1;
  return cli_restore_remote_at(ck, s, g, step_out, err);
}

gr_status cli_restore_remote_at(gr_ckpt *ck, gr_session *s, gr_graph *g, int64_t *step_out,
                                gr_error *err) {
  int64_t step = *step_out;
  if (step < 0) GR_TRY(gr_ckpt_latest_step(ck, &step, err));
  gr_output *vars;
  const char **names;
  int n;
  GR_TRY(var_nodes(g, &vars, &names, &n, err));
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  gr_feed *feeds = calloc((size_t)n + 1, sizeof *feeds);
  gr_output *assigns = calloc((size_t)n + 1, sizeof *assigns);
  gr_status st =
      vals && feeds && assigns ? GR_OK : gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  /* each variable's value, a part of a partitioned variable sliced from its whole */
  int loaded = 0;
  if (st == GR_OK && (st = gr_ckpt_read_vars(ck, step, g, names, n, vals, NULL, err)) == GR_OK)
    loaded = n;
  /* restore ops, as TensorFlow's Saver adds: assign(v, placeholder) next to v */
  for (int i = 0; st == GR_OK && i < n; i++) {
    /* made once; a later recovery finds them */
    char pname[512], aname[520];
    snprintf(pname, sizeof pname, "_restore/%s", names[i]);
    snprintf(aname, sizeof aname, "%s/assign", pname);
    gr_node *pn = gr_graph_find_node(g, pname), *an = gr_graph_find_node(g, aname);
    gr_output p = pn ? (gr_output){pn, 0} : gr_placeholder(g, pname, vals[i].dtype, vals[i].shape);
    assigns[i] = an ? (gr_output){an, 0} : gr_assign(g, vars[i], p);
    if (!an && assigns[i].node) assigns[i] = gr_graph_rename(g, assigns[i], aname);
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
  *step = -1;
  if (!ck) return GR_OK; /* a worker that is not the chief: the chief restores */
  int64_t latest;
  if (gr_ckpt_latest_step(ck, &latest, err) == GR_ERR_NOT_FOUND) {
    /* lost before the first checkpoint: nothing trained yet, so the
     * variables initialise anew (the new master's private container) or
     * hold their initial values (a named one that lived) */
    *step = -1;
    return GR_OK;
  }
  return cli_restore_remote(ck, *s, g, step, err);
}
