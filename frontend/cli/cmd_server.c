/* graphrun server: one task of a cluster, serving until SIGINT or SIGTERM
 * (or, with --exit-with-client, until its clients are gone); with
 * --restarts K, restarted in place when it dies (cli_supervise.c). Which
 * task, where it listens and its cluster: cli_server_setup.c. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "cli_cluster.h"
#include "cli_options.h"
#include "cli_server.h"
#include "cli_supervise.h"
#include "commands.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun server --job J --task N [options]\n"
          "       graphrun server --cluster slurm[:JOBS][@PORT] [options]   (a task of srun)\n"
          "       graphrun server --cluster mpi[:JOBS][@PORT] [options]     (a rank of mpirun)\n\n"
          "Serves one task of a cluster (/job:J/replica:0/task:N): masters (graphrun run\n"
          "--cluster) register graph partitions with it and run steps on it. Prints\n"
          "\"listening on HOST:PORT\" once ready; stops on SIGINT or SIGTERM. Each client's\n"
          "variables live in a container of its own, dropped when the client disconnects;\n"
          "shared ones (graphrun run --container NAME) stay until graphrun reset.\n\n"
          "  --job J            the task's job (ps, worker, chief, ...)\n"
          "  --task N           its index in the job (default 0)\n"
          "  --cluster C        a cluster spec (file, JSON text, 'env' for TF_CONFIG): the\n"
          "                     task's address there is where it listens; with 'env' the\n"
          "                     task is TF_CONFIG's own (--job and --task may be left out).\n"
          "                     slurm[:JOBS][@PORT], mpi[:JOBS][@PORT]: the task of this\n"
          "                     Slurm task or MPI rank (JOBS as ps:1,worker, in rank order;\n"
          "                     default all workers), listening on every interface at\n"
          "                     Slurm's reserved port, else PORT + its local index, else a\n"
          "                     free port, and telling the rendezvous where\n"
          "  --bind HOST:PORT   where to listen (default: the cluster's address, else\n"
          "                     127.0.0.1:0, a free port)\n"
          "  --advertise HOST[:PORT]  where the other hosts reach it (default: its node's name;\n"
          "                     what the rendezvous tells the clients)\n"
          "  --interface IFACE  listen on (and be reached at) that interface's address\n"
          "  --rendezvous DIR   where a launcher's servers and clients meet (default:\n"
          "                     GRAPHRUN_RENDEZVOUS, else $SLURM_SUBMIT_DIR/.graphrun/slurm-JOB)\n"
          "  --secret-file F    the cluster's shared secret, 16 to 256 bytes, mode 0600\n"
          "                     (default: GRAPHRUN_SECRET_FILE, else the rendezvous's);\n"
          "                     required: peers prove they know it (HMAC-SHA256) first\n"
          "  --cluster-id ID    the cluster this task belongs to: a peer of another cluster\n"
          "                     is refused (default: GRAPHRUN_CLUSTER_ID, else Slurm's job\n"
          "                     id, else the rendezvous's, else derived from --cluster's tasks)\n"
          "  --insecure         no secret needed (no authentication: any local user can run\n"
          "                     any graph as you); loopback only, warns at every start\n");
  fputs(cli_tls_usage, f);
  fprintf(f, "  --exit-with-client[=S]  stop (exit 0) once a client has run graphs here and no\n"
             "                     client has been connected for S seconds (default 60)\n"
             "  --restarts K       restart the task in place (same port) when it dies, at most K\n"
             "                     times, the delay doubling from 0.1 s (default 0)\n"
             "  --devices N        CPU devices (default 1)\n"
             "  --threads T        executor threads (default: the CPUs this process may use:\n"
             "                     affinity, cgroup quota, SLURM_CPUS_PER_TASK)\n"
             "  --cpus LIST        run on these CPUs only (0-3,6; as taskset): tasks sharing a\n"
             "                     machine then keep off each other's cores (graphrun launch\n"
             "                     --cpu-bind gives each its share)\n"
             "  --blas-threads N   threads of one matrix product (default 1: a task computes\n"
             "                     what one process computes, bit for bit)\n"
             "  --max-connections N  accepted connections open at once (default: from the\n"
             "                     descriptor limit, ulimit -n, less a quarter for files)\n"
             "  --quiet            no line per connection\n\n"
             "Exit codes: 0 stopped by a signal or with its client, 1 runtime failure, 2 usage\n"
             "error.\n");
}

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) {
  stop_signal = sig;
}

enum {
  F_JOB = 256,
  F_TASK,
  F_DEVICES,
  F_THREADS,
  F_BLAS_THREADS,
  F_BIND,
  F_ADVERTISE,
  F_INTERFACE,
  F_RENDEZVOUS,
  F_CLUSTER,
  F_SECRET,
  F_CLUSTER_ID,
  F_INSECURE,
  F_QUIET,
  F_MAX_CONNS,
  F_EXIT_WITH_CLIENT,
  F_RESTARTS,
  F_CPUS,
  F_TLS /* and F_TLS + 1, + 2 */
};

static const struct option server_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"job", required_argument, NULL, F_JOB},
    {"task", required_argument, NULL, F_TASK},
    {"devices", required_argument, NULL, F_DEVICES},
    {"threads", required_argument, NULL, F_THREADS},
    {"blas-threads", required_argument, NULL, F_BLAS_THREADS},
    {"bind", required_argument, NULL, F_BIND},
    {"advertise", required_argument, NULL, F_ADVERTISE},
    {"interface", required_argument, NULL, F_INTERFACE},
    {"rendezvous", required_argument, NULL, F_RENDEZVOUS},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"secret-file", required_argument, NULL, F_SECRET},
    {"cluster-id", required_argument, NULL, F_CLUSTER_ID},
    {"insecure", no_argument, NULL, F_INSECURE},
    {"quiet", no_argument, NULL, F_QUIET},
    {"max-connections", required_argument, NULL, F_MAX_CONNS},
    {"exit-with-client", optional_argument, NULL, F_EXIT_WITH_CLIENT},
    {"restarts", required_argument, NULL, F_RESTARTS},
    {"cpus", required_argument, NULL, F_CPUS},
    CLI_TLS_FLAGS(F_TLS),
    {0},
};

typedef struct server_run {
  server_setup s;
  cli_tls tls; /* --tls-cert, --tls-key, --tls-ca */
  long devices, threads, blas_threads, max_conns, restarts;
  const char *cpus;        /* --cpus: NULL, the CPUs it may use */
  double exit_with_client; /* seconds; < 0: off */
  bool quiet;
  pid_t launcher; /* a launcher's task ends with it (srun's slurmstepd, mpirun; 0: none) */
} server_run;

/* Until a signal, or its clients are gone (--exit-with-client). */
static void serve_until_done(gr_server *srv, const server_run *r) {
  gr_server_clients st;
  for (;;) {
    if (stop_signal) {
      if (!r->quiet)
        fprintf(stderr, "graphrun server: %s stopping (signal %d)\n", gr_server_task_name(srv),
                (int)stop_signal);
      return;
    }
    if (r->launcher > 1 && kill(r->launcher, 0) != 0 && errno == ESRCH) {
      fprintf(stderr, "graphrun server: %s stopping: its launcher (pid %d) ended\n",
              gr_server_task_name(srv), (int)r->launcher);
      return;
    }
    if (r->exit_with_client >= 0) {
      gr_server_client_state(srv, &st);
      if (st.served && st.open == 0 && st.idle_ms >= r->exit_with_client * 1000) {
        fprintf(stderr,
                "graphrun server: %s stopping: no client for %.0f s since its run "
                "(--exit-with-client)\n",
                gr_server_task_name(srv), st.idle_ms / 1000.0);
        return;
      }
    }
    struct timespec ts = {0, 100 * 1000000L}; /* a signal ends it early */
    nanosleep(&ts, NULL);
  }
}

/* Serves once; port_fd >= 0: told the port once listening. */
static int serve(void *arg, int port_fd) {
  server_run *r = arg;
  server_setup *o = &r->s;
  gr_error err;
  gr_server_options so = {.job = o->job,
                          .task = (int)o->task,
                          .bind = o->bind,
                          .secret = o->secret,
                          .insecure = o->insecure,
                          .cluster_id = o->id,
                          .tls_cert = r->tls.cert,
                          .tls_key = r->tls.key,
                          .tls_ca = r->tls.ca,
                          .num_devices = (int)r->devices,
                          .inter_op_threads = (int)r->threads,
                          .intra_op_threads = (int)r->blas_threads,
                          .quiet = r->quiet,
                          .max_connections = (int)r->max_conns};
  gr_server *srv;
  if (gr_server_new(&so, &srv, &err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
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
  int port = gr_server_port(srv);
  if (port_fd >= 0) { /* the supervisor knows it before anyone sees it listening */
    if (write(port_fd, &port, sizeof port) != (ssize_t)sizeof port) {
      /* the supervisor is gone: it dies with it */
    }
    close(port_fd);
  }
  cli_server_entry(o, port, (int)r->devices);
  char reached[340] = "";
  if (o->reach[0]) snprintf(reached, sizeof reached, ", reached at %s", o->entry.address);
  printf("graphrun server: %s listening on %s:%d%s (incarnation %016llx, cluster %s, %s%s)\n",
         gr_server_task_name(srv), host, port, reached,
         (unsigned long long)gr_server_incarnation(srv), o->id,
         o->secret ? "authenticated" : "INSECURE: no authentication",
         so.tls_cert && *so.tls_cert ? ", TLS across hosts" : "");
  fflush(stdout);
  int rc = GR_EXIT_OK;
  if (o->publish && cli_rendezvous_publish(o->rdv, &o->entry, &err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
  }
  if (rc == GR_EXIT_OK) serve_until_done(srv, r);
  if (o->publish) cli_rendezvous_withdraw(o->rdv, &o->entry); /* a clean stop */
  gr_server_free(srv);
  return rc;
}

static void set_port(void *arg, int port) {
  cli_server_set_port(&((server_run *)arg)->s, port);
}

/* One flag into r; false: a usage error (reported). */
static bool take_flag(server_run *r, int c, const cli_opts *po) {
  server_setup *o = &r->s;
  switch (c) {
    case F_JOB:
      o->job = *po->arg ? po->arg : NULL;
      return true;
    case F_TASK:
      return cli_opt_long(po, 0, 65535, &o->task);
    case F_DEVICES:
      return cli_opt_long(po, 1, 64, &r->devices);
    case F_THREADS:
      return cli_opt_long(po, 0, 1024, &r->threads);
    case F_BLAS_THREADS:
      return cli_opt_long(po, 1, 1024, &r->blas_threads);
    case F_BIND:
      o->bind = po->arg;
      return true;
    case F_ADVERTISE:
      o->advertise = po->arg;
      return true;
    case F_INTERFACE:
      o->iface = po->arg;
      return true;
    case F_RENDEZVOUS:
      cli_set_rendezvous(po->arg);
      return true;
    case F_CLUSTER:
      o->spec = po->arg;
      return true;
    case F_SECRET:
      o->secret_file = po->arg;
      return true;
    case F_CLUSTER_ID:
      return cli_opt_cluster_id(po, &o->cluster_id) == GR_EXIT_OK;
    case F_INSECURE:
      o->insecure = true;
      return true;
    case F_QUIET:
      r->quiet = true;
      return true;
    case F_MAX_CONNS:
      return cli_opt_long(po, 1, 1 << 20, &r->max_conns);
    case F_EXIT_WITH_CLIENT:
      r->exit_with_client = 60;
      return !po->arg || cli_opt_seconds(po, 1e6, &r->exit_with_client);
    case F_RESTARTS:
      return cli_opt_long(po, 0, 1000000, &r->restarts);
    case F_CPUS:
      r->cpus = po->arg;
      return true;
    default:
      return cli_tls_flag(c, F_TLS, po->arg, &r->tls);
  }
}

int gr_cmd_server(int argc, char **argv) {
  server_run r = {.devices = 1, .exit_with_client = -1};
  cli_opts po;
  cli_opts_start(&po, "server", argc, argv, server_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    }
    if (c == CLI_OPTS_ARG)
      fprintf(stderr, "graphrun server: unexpected argument '%s' (try --help)\n", po.arg);
    if (c < 0 || !take_flag(&r, c, &po)) return GR_EXIT_USAGE;
  }
  gr_error err;
  if (r.cpus && gr_cpus_bind(r.cpus, &err) != GR_OK) { /* before any thread starts */
    fprintf(stderr, "graphrun server: --cpus: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  cli_tls_env(&r.tls);
  int rc = cli_server_setup(&r.s);
  if (r.s.publish) r.launcher = getppid(); /* slurmstepd, mpirun or orted */
  if (rc == GR_EXIT_OK && r.restarts > 0) {
    char what[GR_DEVICE_NAME_MAX];
    snprintf(what, sizeof what, "/job:%s/replica:0/task:%ld", r.s.job, r.s.task);
    cli_supervise_ops ops = {serve, set_port, &r, what};
    rc = cli_supervise(&ops, r.restarts);
  } else if (rc == GR_EXIT_OK) {
    rc = serve(&r, -1);
  }
  free(r.s.secret);
  return rc;
}
