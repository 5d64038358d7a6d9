/* graphrun server: one task of a cluster, serving until SIGINT or SIGTERM. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_cluster.h"
#include "cli_options.h"
#include "commands.h"

static void usage(FILE *f) {
  fprintf(f, "usage: graphrun server --job J --task N [options]\n\n"
             "Serves one task of a cluster (/job:J/replica:0/task:N): masters (graphrun run\n"
             "--cluster) register graph partitions with it and run steps on it. Prints\n"
             "\"listening on HOST:PORT\" once ready; stops on SIGINT or SIGTERM. Each client's\n"
             "variables live in a container of its own, dropped when the client disconnects;\n"
             "shared ones (graphrun run --container NAME) stay until graphrun reset.\n\n"
             "  --job J            the task's job (ps, worker, chief, ...)\n"
             "  --task N           its index in the job (default 0)\n"
             "  --cluster C        a cluster spec (file, JSON text, 'env' for TF_CONFIG): the\n"
             "                     task's address there is where it listens; with 'env' the\n"
             "                     task is TF_CONFIG's own (--job and --task may be left out)\n"
             "  --bind HOST:PORT   where to listen (default: the cluster's address, else\n"
             "                     127.0.0.1:0, a free port)\n"
             "  --secret-file F    the cluster's shared secret, 16 to 256 bytes, mode 0600\n"
             "                     (default: GRAPHRUN_SECRET_FILE); required: peers prove they\n"
             "                     know it (HMAC-SHA256) before anything else\n"
             "  --cluster-id ID    the cluster this task belongs to: a peer of another cluster\n"
             "                     is refused (default: GRAPHRUN_CLUSTER_ID, else Slurm's job\n"
             "                     and step ids, else derived from --cluster's tasks)\n"
             "  --insecure         no secret needed (no authentication: any local user can run\n"
             "                     any graph as you); loopback only, warns at every start\n"
             "  --devices N        CPU devices (default 1)\n"
             "  --threads T        executor threads (default: number of cores)\n"
             "  --max-connections N  accepted connections open at once (default: from the\n"
             "                     descriptor limit, ulimit -n, less a quarter for files)\n"
             "  --quiet            no line per connection\n\n"
             "Exit codes: 0 stopped by a signal, 1 runtime failure, 2 usage error.\n");
}

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) {
  stop_signal = sig;
}

/* The task's address in the cluster spec c, or NULL; with TF_CONFIG or
 * Slurm (has_self) the spec also says which task this is (when --job is
 * not given). */
static const char *cluster_address(const gr_cluster *c, const char *from, bool has_self,
                                   const gr_cluster_self *self, const char **job, long *task,
                                   char *buf, size_t cap, gr_error *err, bool *failed) {
  static char jobbuf[64];
  if (has_self && !*job) {
    snprintf(jobbuf, sizeof jobbuf, "%s", self->job);
    *job = jobbuf;
    *task = self->index;
  }
  int k = *job ? gr_cluster_find_task(c, *job, (int)*task) : -1;
  if (k < 0) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s has no task /job:%s/task:%ld", from,
                 *job ? *job : "?", *task);
    *failed = true;
    return NULL;
  }
  if (!gr_cluster_task_at(c, k)->address) return NULL;
  snprintf(buf, cap, "%s", gr_cluster_task_at(c, k)->address);
  return buf;
}

enum {
  F_JOB = 256,
  F_TASK,
  F_DEVICES,
  F_THREADS,
  F_BIND,
  F_CLUSTER,
  F_SECRET,
  F_CLUSTER_ID,
  F_INSECURE,
  F_QUIET,
  F_MAX_CONNS
};

static const struct option server_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"job", required_argument, NULL, F_JOB},
    {"task", required_argument, NULL, F_TASK},
    {"devices", required_argument, NULL, F_DEVICES},
    {"threads", required_argument, NULL, F_THREADS},
    {"bind", required_argument, NULL, F_BIND},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"insecure", no_argument, NULL, F_INSECURE},
    {"quiet", no_argument, NULL, F_QUIET},
    {"max-connections", required_argument, NULL, F_MAX_CONNS},
    {0},
};

/* Where the task listens, which cluster it belongs to and its secret, from
 * the flags (and the spec): an exit code, GR_EXIT_OK when it goes on. */
typedef struct server_setup {
  const char *job, *bind, *spec, *secret_file, *cluster_id;
  long task;
  bool insecure;
  char addr[300], id[GR_CLUSTER_ID_MAX + 1];
  char *secret;
} server_setup;

static int setup(server_setup *o) {
  gr_error err;
  gr_cluster *c = NULL;
  gr_cluster_self self;
  bool has_self = false, failed = false;
  const char *from = NULL, *from_cluster = NULL;
  if (o->spec && cli_load_cluster_self(o->spec, &c, &self, &has_self, &from, &err) != GR_OK) {
    fprintf(stderr, "graphrun server: --cluster: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  if (c)
    from_cluster = cluster_address(c, from, has_self, &self, &o->job, &o->task, o->addr,
                                   sizeof o->addr, &err, &failed);
  if (failed) {
    fprintf(stderr, "graphrun server: --cluster: %s\n", err.msg);
  } else if (!o->job) {
    fprintf(stderr, "graphrun server: --job is required (try --help)\n");
    failed = true;
  } else if (cli_read_secret(o->secret_file, o->insecure, &o->secret, &err) != GR_OK ||
             cli_cluster_id(o->cluster_id, c, o->id, &err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
    failed = true;
  }
  gr_cluster_free(c);
  if (!o->bind) o->bind = from_cluster;
  return failed ? GR_EXIT_USAGE : GR_EXIT_OK;
}

int gr_cmd_server(int argc, char **argv) {
  server_setup o = {.job = NULL};
  long devices = 1, threads = 0, max_conns = 0;
  bool quiet = false;
  cli_opts po;
  cli_opts_start(&po, "server", argc, argv, server_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    bool ok = true;
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == F_JOB) {
      o.job = *po.arg ? po.arg : NULL;
    } else if (c == F_TASK) {
      ok = cli_opt_long(&po, 0, 65535, &o.task);
    } else if (c == F_DEVICES) {
      ok = cli_opt_long(&po, 1, 64, &devices);
    } else if (c == F_THREADS) {
      ok = cli_opt_long(&po, 0, 1024, &threads);
    } else if (c == F_BIND) {
      o.bind = po.arg;
    } else if (c == F_CLUSTER) {
      o.spec = po.arg;
    } else if (c == F_SECRET) {
      o.secret_file = po.arg;
    } else if (c == F_CLUSTER_ID) {
      ok = cli_opt_cluster_id(&po, &o.cluster_id) == GR_EXIT_OK;
    } else if (c == F_INSECURE) {
      o.insecure = true;
    } else if (c == F_QUIET) {
      quiet = true;
    } else if (c == F_MAX_CONNS) {
      ok = cli_opt_long(&po, 1, 1 << 20, &max_conns);
    } else {
      if (c == CLI_OPTS_ARG)
        fprintf(stderr, "graphrun server: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    }
    if (!ok) return GR_EXIT_USAGE;
  }
  int rc = setup(&o);
  if (rc != GR_EXIT_OK) {
    free(o.secret);
    return rc;
  }
  gr_error err;
  gr_server_options so = {.job = o.job,
                          .task = (int)o.task,
                          .bind = o.bind,
                          .secret = o.secret,
                          .insecure = o.insecure,
                          .cluster_id = o.id,
                          .num_devices = (int)devices,
                          .inter_op_threads = (int)threads,
                          .quiet = quiet,
                          .max_connections = (int)max_conns};
  gr_server *srv;
  if (gr_server_new(&so, &srv, &err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
    free(o.secret);
    return err.code == GR_ERR_INVALID_ARGUMENT ? GR_EXIT_USAGE : GR_EXIT_FAILURE;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  char host[300];
  snprintf(host, sizeof host, "%s", so.bind ? so.bind : "127.0.0.1:0");
  char *colon = strrchr(host, ':');
  if (colon) *colon = '\0'; /* the host part, as given ("[::1]" keeps its brackets) */
  printf("graphrun server: %s listening on %s:%d (incarnation %016llx, cluster %s, %s)\n",
         gr_server_task_name(srv), host, gr_server_port(srv),
         (unsigned long long)gr_server_incarnation(srv), o.id,
         o.secret ? "authenticated" : "INSECURE: no authentication");
  fflush(stdout);
  while (!stop_signal) pause();
  if (!quiet)
    fprintf(stderr, "graphrun server: %s stopping (signal %d)\n", gr_server_task_name(srv),
            (int)stop_signal);
  gr_server_free(srv);
  free(o.secret);
  return GR_EXIT_OK;
}
