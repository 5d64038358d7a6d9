/* graphrun launch: a local cluster of `graphrun server` processes on free
 * loopback ports, a generated secret and cluster id (a random nonce of this
 * launch), each task's output prefixed with its name, a graph or command
 * run against it (GRAPHRUN_CLUSTER, TF_CONFIG, GRAPHRUN_SECRET_FILE,
 * GRAPHRUN_CLUSTER_ID), tasks that die restarted (bounded, with backoff),
 * and every process stopped at exit or Ctrl-C.
 *
 * What launch leaves when it is killed with SIGKILL (it can run no code
 * then): nothing.
 * - The tasks die with it (PR_SET_PDEATHSIG, SIGKILL).
 * - The commands and every process they start are in one process group of
 *   their own, which a guardian process kills (SIGTERM, SIGKILL after 3 s):
 *   the guardian, forked first, in a group of its own and deaf to the
 *   terminal's signals, reads a pipe whose writing end only launch holds;
 *   the pipe's end without launch's "done" means launch died. A process
 *   that leaves the group (setsid) leaves this care too.
 * - The secret is in no file: a memfd (mode 0600) that launch holds, which
 *   the tasks and commands open as /proc/LAUNCH_PID/fd/N (the kernel lets
 *   only the user's processes); it is gone with launch. Where memfd_create
 *   fails, a 0600 file in TMPDIR, which the guardian removes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "cli_cluster.h"
#include "cli_launch.h"
#include "cli_options.h"
#include "cli_resolve.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_TASKS 64

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun launch [options] [--] FILE.gr [run options]\n"
          "       graphrun launch [options] -- COMMAND [ARGS...]\n\n"
          "Starts a local cluster (one `graphrun server` process per task on free loopback\n"
          "ports, with a generated shared secret and cluster id), waits until every task\n"
          "answers, then runs `graphrun run FILE.gr --cluster ...` or any command with the\n"
          "cluster in GRAPHRUN_CLUSTER and TF_CONFIG, the secret in GRAPHRUN_SECRET_FILE and the\n"
          "cluster id in GRAPHRUN_CLUSTER_ID (another launch's servers refuse it). Each task's\n"
          "output is prefixed with its name. A task that dies is restarted on its port; every\n"
          "process stops when the command ends or on Ctrl-C.\n\n"
          "  --ps N             parameter server tasks /job:ps/task:K (default 1)\n"
          "  --workers M        worker tasks /job:worker/task:K (default 2)\n"
          "  --cluster C        the tasks of a cluster spec instead (its loopback ports)\n"
          "  --slurm            inside a Slurm job (an sbatch script, an salloc shell): the tasks\n"
          "                     as a job step (srun --ntasks=N graphrun server --cluster\n"
          "                     slurm:ps:P,worker), on free or reserved ports, met at a\n"
          "                     rendezvous of this launch's own in $SLURM_SUBMIT_DIR/.graphrun\n"
          "                     (with the secret); N = --ps + --workers, else SLURM_NTASKS (one\n"
          "                     ps, the others workers); the step is stopped at the end\n"
          "  --restarts K       restarts per task before giving up (default 3; 0: none); the\n"
          "                     delay doubles from 0.1 s while a task keeps dying within 10 s;\n"
          "                     with --slurm each task restarts itself in place\n"
          "  --threads T        executor threads per task (default 1: the tasks share the cores;\n"
          "                     with --slurm the CPUs each task may use)\n"
          "  --cpu-bind         each task on its own share of the CPUs launch may use (task k\n"
          "                     of n: CPUs / n of them, graphrun server --cpus), as mpirun\n"
          "                     --bind-to core: faster data parallelism when the tasks fill\n"
          "                     the machine, slower for a pipeline whose stages take turns\n"
          "  --between-graph    run the command once per chief and worker task, as that task's\n"
          "                     own client (adds --job J --task K; TF_CONFIG names its task):\n"
          "                     asynchronous data parallelism. The chief (the `chief` job's task,\n"
          "                     else worker 0) initialises, restores and saves the variables and\n"
          "                     trains its share; the others wait for it and run with --quiet;\n"
          "                     the clients share their variables\n"
          "                     (GRAPHRUN_CONTAINER=between-graph)\n"
          "  --quiet            no task output but errors\n"
          "%s"
          "                     Given here (before FILE.gr), the servers and the command get\n"
          "                     them (with --slurm as server flags, else in GRAPHRUN_TLS_*)\n\n"
          "Exit code: the command's (with --between-graph: the first client's that failed, else\n"
          "0); 1 if the cluster could not start or a task died too often.\n",
          cli_tls_usage);
}

typedef struct task {
  char job[32];
  char addr[300]; /* where the clients reach it, once it listens */
  int index, port, restarts;
  bool ready; /* it said where it listens */
  pid_t pid;
  int out; /* read end of its stdout+stderr */
  char line[1024];
  size_t len;
  double restart_at; /* > 0: to restart then */
  double started_at; /* when it was last started */
  int streak;        /* restarts in quick succession (the backoff grows with it) */
  char cpus[256];    /* --cpu-bind: its share of the CPUs ("" unbound) */
} task;

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) {
  got_signal = sig;
}

/* ---- the guardian: cleanup that outlives launch ---------------------------------- */

static pid_t guard_pid;      /* the guardian (0: none) */
static int guard_fd = -1;    /* launch's end of its pipe */
static pid_t cmd_pgid;       /* the commands' process group (0: none yet) */
static bool terminal_handed; /* the commands' group has the terminal */

/* Until the pipe ends: messages are int32, a process group to kill or 0 for
 * "done" (launch stopped everything itself). */
static void guardian_main(int rfd, const char *secret_file) {
  signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN), signal(SIGTSTP, SIG_IGN);
  setpgid(0, 0); /* not killed with launch's group */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3 && null >= 0; fd++) dup2(null, fd); /* holds no one's output open */
  pid_t pg = 0;
  bool done = false;
  for (;;) {
    int32_t msg;
    ssize_t r = read(rfd, &msg, sizeof msg);
    if (r == (ssize_t)sizeof msg) {
      if (msg == 0)
        done = true;
      else
        pg = msg;
    } else if (!(r < 0 && errno == EINTR)) {
      break;
    }
  }
  if (!done && pg > 0 && kill(-pg, SIGTERM) == 0) {
    for (int i = 0; i < 150 && kill(-pg, 0) == 0; i++) usleep(20000);
    kill(-pg, SIGKILL);
  }
  if (!done && secret_file) unlink(secret_file);
  _exit(0);
}

/* Forks the guardian; false when it cannot start (reported). */
static bool start_guardian(const char *secret_file, int secret_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return false;
  }
  if (pid == 0) {
    close(fds[1]);
    if (secret_fd >= 0) close(secret_fd);
    guardian_main(fds[0], secret_file);
  }
  close(fds[0]);
  guard_pid = pid;
  guard_fd = fds[1];
  return true;
}

static void tell_guardian(int32_t msg) {
  if (guard_fd >= 0 && write(guard_fd, &msg, sizeof msg) != (ssize_t)sizeof msg) {
    /* the guardian is gone: nothing to tell */
  }
}

/* Everything is stopped: the guardian stands down and is reaped. */
static void stop_guardian(void) {
  if (guard_pid <= 0) return;
  tell_guardian(0);
  close(guard_fd);
  guard_fd = -1;
  waitpid(guard_pid, NULL, 0);
  guard_pid = 0;
}

static char self_exe[4096];
/* This launch's cluster id: "launch-" and 16 random hex digits (--slurm:
 * "slurm-JOB-" and 16) */
static char cluster_id[GR_CLUSTER_ID_MAX + 1];
static cli_slurm_step slurm_step; /* --slurm's servers */

/* Starts task t's server (port 0: a free one). */
static bool spawn(task *t, const char *secret_file, int threads) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  char idx[16], bind[64], th[16];
  snprintf(idx, sizeof idx, "%d", t->index);
  snprintf(bind, sizeof bind, "127.0.0.1:%d", t->port);
  snprintf(th, sizeof th, "%d", threads);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return false;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphans, even if launch is killed */
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    char *args[] = {"graphrun",
                    "server",
                    "--job",
                    t->job,
                    "--task",
                    idx,
                    "--bind",
                    bind,
                    "--secret-file",
                    (char *)secret_file,
                    "--cluster-id",
                    cluster_id,
                    "--threads",
                    th,
                    t->cpus[0] ? "--cpus" : NULL,
                    t->cpus,
                    NULL};
    execv(self_exe, args);
    _exit(127);
  }
  close(fds[1]);
  t->pid = pid;
  t->out = fds[0];
  t->len = 0;
  t->ready = false;
  t->started_at = cli_now();
  return true;
}

/* Prints complete lines of t's output, prefixed; learns its port. */
static void drain(task *t, bool quiet) {
  ssize_t r = read(t->out, t->line + t->len, sizeof t->line - 1 - t->len);
  if (r <= 0) {
    close(t->out);
    t->out = -1;
    return;
  }
  t->len += (size_t)r;
  char *start = t->line, *nl;
  while ((nl = memchr(start, '\n', t->len - (size_t)(start - t->line)))) {
    *nl = '\0';
    const char *on = strstr(start, " listening on ");
    if (on) { /* "listening on HOST:PORT (..." */
      char where[300];
      snprintf(where, sizeof where, "%.*s", (int)strcspn(on + 14, " ,"), on + 14);
      const char *colon = strrchr(where, ':');
      if (colon) {
        t->port = atoi(colon + 1);
        snprintf(t->addr, sizeof t->addr, "127.0.0.1:%d", t->port);
        t->ready = true;
      }
    }
    if (!quiet || strstr(start, "error") || strstr(start, "bad frame"))
      fprintf(stderr, "[%s:%d] %s\n", t->job, t->index, start);
    start = nl + 1;
  }
  t->len -= (size_t)(start - t->line);
  memmove(t->line, start, t->len);
  if (t->len == sizeof t->line - 1) t->len = 0; /* an overlong line: dropped */
}

static void stop_all(task *ts, int n, pid_t *cmds, int ncmds) {
  if (terminal_handed) { /* the terminal back to launch's group */
    signal(SIGTTOU, SIG_IGN);
    tcsetpgrp(0, getpgrp());
    terminal_handed = false;
  }
  if (cmd_pgid > 0) kill(-cmd_pgid, SIGTERM); /* the commands and what they started */
  for (int c = 0; c < ncmds; c++)
    if (cmds[c] > 0) kill(cmds[c], SIGTERM);
  for (int i = 0; i < n; i++)
    if (ts[i].pid > 0) kill(ts[i].pid, SIGTERM);
  double give_up = cli_now() + 3;
  for (;;) {
    bool alive = cmd_pgid > 0 && kill(-cmd_pgid, 0) == 0;
    for (int i = 0; i < n; i++)
      if (ts[i].pid > 0 && waitpid(ts[i].pid, NULL, WNOHANG) == ts[i].pid)
        ts[i].pid = 0;
      else if (ts[i].pid > 0)
        alive = true;
    for (int c = 0; c < ncmds; c++) {
      if (cmds[c] > 0 && waitpid(cmds[c], NULL, WNOHANG) == cmds[c]) cmds[c] = 0;
      if (cmds[c] > 0) alive = true;
    }
    if (!alive) break;
    if (cli_now() > give_up) {
      if (cmd_pgid > 0) kill(-cmd_pgid, SIGKILL);
      for (int i = 0; i < n; i++)
        if (ts[i].pid > 0) kill(ts[i].pid, SIGKILL), waitpid(ts[i].pid, NULL, 0), ts[i].pid = 0;
      for (int c = 0; c < ncmds; c++)
        if (cmds[c] > 0) kill(cmds[c], SIGKILL), waitpid(cmds[c], NULL, 0), cmds[c] = 0;
      break;
    }
    usleep(10000);
  }
  for (int i = 0; i < n; i++)
    if (ts[i].out >= 0) close(ts[i].out), ts[i].out = -1;
}

/* The tasks of --ps/--workers or of a cluster spec. */
static int plan_tasks(const char *spec, long ps, long workers, task *ts, int *n) {
  *n = 0;
  if (spec) {
    gr_cluster *c;
    const char *from;
    gr_error err;
    cli_launcher l;
    if (cli_launcher_parse(spec, &l, &err) != 0) {
      fprintf(stderr,
              "graphrun launch: --cluster %s: launch starts the tasks itself; inside a "
              "Slurm job give --slurm\n",
              spec);
      return GR_EXIT_USAGE;
    }
    if (cli_load_cluster(spec, &c, &from, &err) != GR_OK || !c) {
      fprintf(stderr, "graphrun launch: --cluster: %s\n", c ? "" : err.msg);
      return GR_EXIT_USAGE;
    }
    for (int k = 0; k < gr_cluster_num_tasks(c) && *n < MAX_TASKS; k++) {
      const gr_cluster_task *t = gr_cluster_task_at(c, k);
      task *d = &ts[(*n)++];
      memset(d, 0, sizeof *d);
      snprintf(d->job, sizeof d->job, "%s", t->job);
      d->index = t->index;
      const char *colon = t->address ? strrchr(t->address, ':') : NULL;
      d->port = colon ? atoi(colon + 1) : 0;
    }
    gr_cluster_free(c);
    return GR_EXIT_OK;
  }
  for (long i = 0; i < ps + workers && *n < MAX_TASKS; i++) {
    task *d = &ts[(*n)++];
    memset(d, 0, sizeof *d);
    snprintf(d->job, sizeof d->job, "%s", i < ps ? "ps" : "worker");
    d->index = (int)(i < ps ? i : i - ps);
  }
  return GR_EXIT_OK;
}

/* The between-graph chief: the "chief" job's task, else worker 0. */
static bool is_chief(const task *ts, int n, const task *t) {
  bool has_chief = false;
  for (int i = 0; i < n; i++) has_chief |= !strcmp(ts[i].job, "chief");
  return t->index == 0 && !strcmp(t->job, has_chief ? "chief" : "worker");
}

/* Sets environment variable name to doc's JSON text; takes doc (NULL: out of memory). */
static bool setenv_json(const char *name, json_t *doc) {
  char *text = doc ? json_dumps(doc, 0) : NULL;
  bool ok = text && setenv(name, text, 1) == 0;
  free(text);
  json_decref(doc);
  return ok;
}

/* TF_CONFIG: the cluster of GRAPHRUN_CLUSTER and this process as task job:index. */
static bool set_tf_config(const char *job, int index) {
  const char *spec = getenv("GRAPHRUN_CLUSTER");
  json_t *cluster = spec ? json_loads(spec, 0, NULL) : json_object();
  return cluster && setenv_json("TF_CONFIG", json_pack("{s:o, s:{s:s, s:i}}", "cluster", cluster,
                                                       "task", "type", job, "index", index));
}

/* GRAPHRUN_CLUSTER as a ClusterSpec, TF_CONFIG with the client as the chief
 * (chief 0 when the cluster has one, else worker 0). */
static bool export_cluster(const task *ts, int n) {
  json_t *spec = json_object();
  for (int i = 0; spec && i < n; i++) {
    json_t *job = json_object_get(spec, ts[i].job);
    if (!job && json_object_set_new(spec, ts[i].job, job = json_array()) != 0) job = NULL;
    if (!job || json_array_append_new(job, json_string(ts[i].addr)) != 0) {
      json_decref(spec);
      return false;
    }
  }
  if (!setenv_json("GRAPHRUN_CLUSTER", spec)) return false;
  for (int i = 0; i < n; i++)
    if (is_chief(ts, n, &ts[i])) return set_tf_config(ts[i].job, ts[i].index);
  return set_tf_config("worker", 0);
}

/* A fresh secret: in a memfd that this process keeps open (*fd), named
 * /proc/PID/fd/N in path (*file false), or else in a 0600 file of TMPDIR
 * (*file true, *fd -1). */
static bool write_secret(char *path, size_t cap, int *fd, bool *file) {
  *file = false;
  *fd = memfd_create("graphrun-secret", MFD_CLOEXEC);
  if (*fd >= 0 && fchmod(*fd, 0600) == 0) {
    snprintf(path, cap, "/proc/%d/fd/%d", (int)getpid(), *fd);
  } else {
    if (*fd >= 0) close(*fd);
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/graphrun-secret-XXXXXX", dir && *dir ? dir : "/tmp");
    if ((*fd = mkstemp(path)) < 0) return false; /* mode 0600 */
    *file = true;
  }
  char hex[65];
  bool ok = cli_random_hex(hex, 32) && write(*fd, hex, 64) == 64;
  if (*file || !ok) close(*fd), *fd = -1;
  if (!ok && *file) unlink(path);
  return ok;
}

/* Runs the command; client not NULL: as that task's own client (between-
 * graph: --job J --task K added, and --quiet unless it is the chief;
 * TF_CONFIG names its task). */
static pid_t run_command(char **cmd, int ncmd, const task *client, bool chief) {
  pid_t pid = fork();
  if (pid > 0) { /* the commands' group: the first command's (set on both sides: no race) */
    /* fails (EACCES) when the child has exec'd already: it had set it itself */
    setpgid(pid, cmd_pgid ? cmd_pgid : pid);
    if (!cmd_pgid) {
      cmd_pgid = pid;
      tell_guardian((int32_t)pid);
      /* at a terminal, the commands read it as launch would */
      if (isatty(0) && tcgetpgrp(0) == getpgrp()) {
        signal(SIGTTOU, SIG_IGN);
        terminal_handed = tcsetpgrp(0, pid) == 0;
        signal(SIGTTOU, SIG_DFL);
      }
    }
    return pid;
  }
  if (pid < 0) return pid;
  setpgid(0, cmd_pgid ? cmd_pgid : 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (client) set_tf_config(client->job, client->index);
  char **args = calloc((size_t)ncmd + 8, sizeof *args);
  char task[16];
  if (!args) _exit(127);
  const char *last = strrchr(cmd[0], '.');
  bool graph = last && (!strcmp(last, ".gr") || !strcmp(last, ".grb"));
  int n = 0;
  if (graph) { /* a graph file: graphrun run */
    args[n++] = "graphrun";
    args[n++] = "run";
  }
  for (int i = 0; i < ncmd; i++) args[n++] = cmd[i];
  if (client) {
    setenv("GRAPHRUN_CONTAINER", "between-graph", 0); /* the clients share their variables */
    snprintf(task, sizeof task, "%d", client->index);
    args[n++] = "--job";
    args[n++] = (char *)client->job;
    args[n++] = "--task";
    args[n++] = task;
    if (!chief) args[n++] = "--quiet";
  }
  if (graph || !strcmp(cmd[0], "graphrun"))
    execv(self_exe, args);
  else
    execvp(cmd[0], args);
  fprintf(stderr, "graphrun launch: cannot run '%s': %s\n", cmd[0], strerror(errno));
  _exit(127);
}

/* Starts the tasks and waits for each to say where it listens. */
static bool start_tasks(task *ts, int n, const char *secret_file, int threads, bool quiet) {
  for (int i = 0; i < n; i++)
    if (!spawn(&ts[i], secret_file, threads)) {
      fprintf(stderr, "graphrun launch: cannot start %s:%d: %s\n", ts[i].job, ts[i].index,
              strerror(errno));
      return false;
    }
  double deadline = cli_now() + 30;
  for (;;) {
    struct pollfd pf[MAX_TASKS];
    bool all = true;
    for (int i = 0; i < n; i++) {
      pf[i] = (struct pollfd){.fd = ts[i].out, .events = POLLIN};
      all = all && ts[i].ready;
    }
    if (all) return true;
    for (int i = 0; i < n; i++)
      if (ts[i].out < 0) {
        fprintf(stderr, "graphrun launch: %s:%d exited while starting\n", ts[i].job, ts[i].index);
        return false;
      }
    if (cli_now() > deadline || got_signal) {
      fprintf(stderr, "graphrun launch: the tasks did not start within 30 s\n");
      return false;
    }
    if (poll(pf, (nfds_t)n, 100) > 0)
      for (int i = 0; i < n; i++)
        if (pf[i].revents) drain(&ts[i], quiet);
  }
}

/* Restarts dead tasks on their ports (bounded, with backoff). false: a task
 * died more often than allowed. */
static bool supervise(task *ts, int n, const char *secret_file, int threads, long max_restarts) {
  for (int i = 0; i < n; i++) {
    int status;
    task *t = &ts[i];
    if (t->pid > 0 && waitpid(t->pid, &status, WNOHANG) == t->pid) {
      t->pid = 0;
      char how[64];
      if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
      else
        snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(status));
      if (t->restarts >= max_restarts) {
        fprintf(stderr, "graphrun launch: %s:%d %s; %ld restarts used up, stopping\n", t->job,
                t->index, how, max_restarts);
        return false;
      }
      if (cli_now() - t->started_at > 10) t->streak = 0; /* it had been up a while */
      double delay = 0.1 * (1 << (t->streak < 5 ? t->streak : 5));
      t->streak++;
      t->restarts++;
      t->restart_at = cli_now() + delay;
      fprintf(stderr, "graphrun launch: %s:%d %s; restarting it on port %d in %.1f s (%d of %ld)\n",
              t->job, t->index, how, t->port, delay, t->restarts, max_restarts);
    }
    if (t->pid == 0 && t->restart_at > 0 && cli_now() >= t->restart_at) {
      if (t->out >= 0) close(t->out), t->out = -1;
      t->restart_at = 0;
      if (!spawn(t, secret_file, threads)) return false;
      fprintf(stderr, "graphrun launch: %s:%d restarted (pid %d)\n", t->job, t->index, (int)t->pid);
    }
  }
  return true;
}

typedef struct launch_options {
  long ps, workers, restarts, threads;
  const char *spec;
  cli_tls tls; /* the servers' and the command's TLS files */
  bool quiet, sized, between, slurm, threads_given, cpu_bind;
  int cmd; /* argv[cmd..]: what to run */
} launch_options;

enum {
  F_PS = 256,
  F_WORKERS,
  F_RESTARTS,
  F_THREADS,
  F_CLUSTER,
  F_QUIET,
  F_BETWEEN,
  F_SLURM,
  F_CPU_BIND,
  F_TLS /* three values */
};

static const struct option launch_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"ps", required_argument, NULL, F_PS},
    {"workers", required_argument, NULL, F_WORKERS},
    {"restarts", required_argument, NULL, F_RESTARTS},
    {"threads", required_argument, NULL, F_THREADS},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"quiet", no_argument, NULL, F_QUIET},
    {"between-graph", no_argument, NULL, F_BETWEEN},
    {"slurm", no_argument, NULL, F_SLURM},
    {"cpu-bind", no_argument, NULL, F_CPU_BIND},
    CLI_TLS_FLAGS(F_TLS),
    {0},
};

/* Returned by parse_options when the launch goes on. */
#define LAUNCH_GO (-1)

/* launch's own flags, up to the first argument or "--". LAUNCH_GO, or the
 * exit code after --help or an error (printed). */
static int parse_options(int argc, char **argv, launch_options *o) {
  *o = (launch_options){.ps = 1, .workers = 2, .restarts = 3, .threads = 1};
  cli_opts po;
  cli_opts_start(&po, "launch", argc, argv, launch_flags, "h", CLI_OPTS_STOP_AT_ARG);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    bool ok = true;
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == F_PS) {
      ok = cli_opt_long(&po, 0, 32, &o->ps), o->sized = true;
    } else if (c == F_WORKERS) {
      ok = cli_opt_long(&po, 1, 32, &o->workers), o->sized = true;
    } else if (c == F_RESTARTS) {
      ok = cli_opt_long(&po, 0, 1000000, &o->restarts);
    } else if (c == F_THREADS) {
      ok = cli_opt_long(&po, 0, 1024, &o->threads), o->threads_given = true;
    } else if (c == F_CLUSTER) {
      o->spec = po.arg;
    } else if (c == F_QUIET) {
      o->quiet = true;
    } else if (c == F_BETWEEN) {
      o->between = true;
    } else if (c == F_SLURM) {
      o->slurm = true;
    } else if (c == F_CPU_BIND) {
      o->cpu_bind = true;
    } else if (cli_tls_flag(c, F_TLS, po.arg, &o->tls)) {
      continue;
    } else {
      return GR_EXIT_USAGE;
    }
    if (!ok) return GR_EXIT_USAGE;
  }
  o->cmd = po.rest;
  if (o->cmd >= argc) {
    fprintf(stderr, "graphrun launch: what to run? a FILE.gr or -- COMMAND (try --help)\n");
    return GR_EXIT_USAGE;
  }
  if (o->spec && (o->sized || o->slurm)) {
    fprintf(stderr, "graphrun launch: --cluster or %s, not both\n",
            o->slurm ? "--slurm" : "--ps/--workers");
    return GR_EXIT_USAGE;
  }
  if (o->slurm && o->cpu_bind) {
    fprintf(stderr, "graphrun launch: --cpu-bind starts local tasks; under --slurm, srun binds "
                    "them (SLURM_CPU_BIND, srun --cpu-bind)\n");
    return GR_EXIT_USAGE;
  }
  if (o->slurm && !o->threads_given) o->threads = 0; /* each task's CPUs */
  return LAUNCH_GO;
}

/* The TLS files given to launch, for the command (and the local servers,
 * which use them only towards other hosts): GRAPHRUN_TLS_*. */
static bool export_tls(const cli_tls *t) {
  const char *names[3] = {"GRAPHRUN_TLS_CERT", "GRAPHRUN_TLS_KEY", "GRAPHRUN_TLS_CA"};
  const char *vals[3] = {t->cert, t->key, t->ca};
  for (int i = 0; i < 3; i++)
    if (vals[i] && setenv(names[i], vals[i], 1) != 0) {
      fprintf(stderr, "graphrun launch: cannot set %s: %s\n", names[i], strerror(errno));
      return false;
    }
  return true;
}

/* A between-graph client that failed: which, and how. */
static void say_failed(const task *client, pid_t pid, int status, bool chief) {
  char how[64];
  if (WIFSIGNALED(status))
    snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
  else
    snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(status));
  fprintf(stderr, "graphrun launch: the client of %s:%d (pid %d%s) %s; stopping the others\n",
          client->job, client->index, (int)pid, chief ? ", the chief" : "", how);
}

/* Until the command (each, with --between-graph) ends, a signal comes or a
 * task dies too often: prints the tasks' output and restarts dead tasks.
 * clients[c]: the task whose client cmds[c] is (between-graph), else NULL;
 * the chief's comes first. The exit code: the command's (the first that
 * failed, in that order among those found ended together: a worker that
 * fails because the chief ended reports after it, and a chief still running
 * when a worker fails has up to 1 s to be found ended with it), else 128 +
 * the signal, else GR_EXIT_FAILURE. */
static int supervise_until_done(task *ts, int n, pid_t *cmds, const task *const *clients, int ncmds,
                                const char *secret_file, const launch_options *o) {
  int rc = GR_EXIT_FAILURE;
  for (int running = ncmds;;) {
    int st[MAX_TASKS];
    bool ended[MAX_TASKS] = {false}, any_failed = false;
    for (int c = 0; c < ncmds && c < MAX_TASKS; c++)
      if (cmds[c] > 0 && waitpid(cmds[c], &st[c], WNOHANG) == cmds[c]) {
        ended[c] = true;
        any_failed |= !WIFEXITED(st[c]) || WEXITSTATUS(st[c]) != 0;
      }
    /* a worker that failed because the chief ended may be found first: a
     * chief still running gets a moment (at most 1 s) to be found ended */
    bool chief_first = ncmds > 0 && clients[0] && is_chief(ts, n, clients[0]);
    for (int i = 0; any_failed && chief_first && cmds[0] > 0 && !ended[0] && i < 100; i++) {
      usleep(10000);
      ended[0] = waitpid(cmds[0], &st[0], WNOHANG) == cmds[0];
    }
    bool failed = false;
    for (int c = 0; c < ncmds && c < MAX_TASKS; c++)
      if (ended[c]) {
        int status = st[c];
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && !failed && clients[c])
          say_failed(clients[c], cmds[c], status, is_chief(ts, n, clients[c]));
        cmds[c] = 0;
        running--;
        if ((code != 0 && !failed) || (running == 0 && !failed)) rc = code;
        failed |= code != 0;
      }
    if (failed || running == 0) return rc; /* the first failure ends the others */
    if (got_signal) {
      fprintf(stderr, "graphrun launch: signal %d: stopping the cluster\n", (int)got_signal);
      return 128 + got_signal;
    }
    if (!supervise(ts, n, secret_file, (int)o->threads, o->restarts)) return rc;
    int status;
    if (o->slurm && slurm_step.srun > 0 && !cli_slurm_alive(&slurm_step, &status))
      fprintf(stderr, "graphrun launch: the servers' srun ended (%s %d)\n",
              WIFEXITED(status) ? "exit code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    struct pollfd pf[MAX_TASKS];
    int np = 0, who[MAX_TASKS];
    for (int k = 0; k < n; k++)
      if (ts[k].out >= 0)
        pf[np] = (struct pollfd){.fd = ts[k].out, .events = POLLIN}, who[np++] = k;
    if (poll(pf, (nfds_t)np, 50) > 0)
      for (int k = 0; k < np; k++)
        if (pf[k].revents) drain(&ts[who[k]], o->quiet);
  }
}

/* --slurm: the tasks as a step of this Slurm job, until each listens. */
static bool start_slurm_tasks(task *ts, int n, const launch_options *o) {
  char jobs[64];
  int ps = 0;
  for (int k = 0; k < n; k++) ps += !strcmp(ts[k].job, "ps");
  snprintf(jobs, sizeof jobs, ps ? "ps:%d,worker" : "worker", ps);
  cli_slurm_options so = {o->restarts, o->threads, o->quiet, o->tls};
  gr_cluster *c;
  gr_error err;
  if (!cli_slurm_start(&slurm_step, self_exe, jobs, n, &so)) {
    fprintf(stderr, "graphrun launch: cannot start srun: %s\n", strerror(errno));
    return false;
  }
  if (cli_slurm_wait(&slurm_step, 120, &got_signal, &c, &err) != GR_OK) {
    fprintf(stderr, "graphrun launch: %s\n", err.msg);
    return false;
  }
  for (int k = 0; k < n && k < gr_cluster_num_tasks(c); k++) {
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    snprintf(ts[k].addr, sizeof ts[k].addr, "%s", t->address);
    const char *colon = strrchr(t->address, ':');
    ts[k].port = colon ? atoi(colon + 1) : 0;
    ts[k].ready = true;
  }
  gr_cluster_free(c);
  return true;
}

/* Starts the tasks, exports the cluster and secret, and starts the command
 * (with --between-graph one per chief and worker task, the chief's first):
 * *ncmds of them in cmds, clients[c] the task of cmds[c] (NULL: not
 * between-graph). false: the cluster could not start (reported). */
static bool start_cluster(task *ts, int n, const char *secret_file, const launch_options *o,
                          char **cmd, int ncmd, pid_t *cmds, const task **clients, int *ncmds) {
  for (int k = 0; k < n && o->cpu_bind; k++)
    if (!gr_cpus_share(k, n, ts[k].cpus, sizeof ts[k].cpus)) {
      fprintf(stderr, "graphrun launch: --cpu-bind: cannot read the CPUs this process may use\n");
      return false;
    }
  bool started = o->slurm ? start_slurm_tasks(ts, n, o)
                          : start_tasks(ts, n, secret_file, (int)o->threads, o->quiet);
  if (!started || !export_cluster(ts, n) || setenv("GRAPHRUN_SECRET_FILE", secret_file, 1) != 0 ||
      setenv("GRAPHRUN_CLUSTER_ID", cluster_id, 1) != 0)
    return false;
  if (!o->quiet) {
    fprintf(stderr, "graphrun launch: %d tasks ready (cluster %s):", n, cluster_id);
    for (int k = 0; k < n; k++)
      if (ts[k].pid)
        fprintf(stderr, " %s:%d=%s(pid %d%s%s)", ts[k].job, ts[k].index, ts[k].addr, (int)ts[k].pid,
                ts[k].cpus[0] ? ", CPUs " : "", ts[k].cpus);
      else
        fprintf(stderr, " %s:%d=%s", ts[k].job, ts[k].index, ts[k].addr);
    fprintf(stderr, "\n");
  }
  if (!o->between) {
    clients[0] = NULL;
    return (cmds[(*ncmds)++] = run_command(cmd, ncmd, NULL, false)) > 0;
  }
  static const char *const jobs[] = {"chief", "worker"}; /* the chief's client first */
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < n; k++) {
      if (strcmp(ts[k].job, jobs[j]) != 0) continue;
      clients[*ncmds] = &ts[k];
      if ((cmds[*ncmds] = run_command(cmd, ncmd, &ts[k], is_chief(ts, n, &ts[k]))) < 0)
        return false;
      (*ncmds)++;
    }
  if (*ncmds == 0) {
    fprintf(stderr, "graphrun launch: --between-graph: the cluster has no chief or worker task "
                    "to run a client for\n");
    return false;
  }
  if (!o->quiet) {
    fprintf(stderr, "graphrun launch: %d clients:", *ncmds);
    for (int c = 0; c < *ncmds; c++)
      fprintf(stderr, " %s:%d(pid %d)%s", clients[c]->job, clients[c]->index, (int)cmds[c],
              is_chief(ts, n, clients[c]) ? "(chief)" : "");
    fprintf(stderr, "\n");
  }
  return true;
}

int gr_cmd_launch(int argc, char **argv) {
  launch_options o;
  int rc = parse_options(argc, argv, &o);
  if (rc != LAUNCH_GO) return rc;
  if (!export_tls(&o.tls)) return GR_EXIT_FAILURE;
  ssize_t sl = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (sl <= 0) {
    fprintf(stderr, "graphrun launch: cannot find the graphrun executable\n");
    return GR_EXIT_FAILURE;
  }
  self_exe[sl] = '\0';
  task ts[MAX_TASKS];
  int n;
  if (o.slurm && !o.sized) { /* the job's tasks: one ps, the others workers */
    const char *nt = getenv("SLURM_NTASKS");
    long all = 0;
    if (!nt || !cli_parse_long(nt, 1, MAX_TASKS, &all)) {
      fprintf(stderr, "graphrun launch: --slurm: SLURM_NTASKS is %s: give --ps N --workers M\n",
              nt ? "not 1 to 64" : "not set");
      return GR_EXIT_USAGE;
    }
    o.ps = all > 1 ? 1 : 0, o.workers = all - o.ps;
  }
  if ((rc = plan_tasks(o.spec, o.ps, o.workers, ts, &n)) != GR_EXIT_OK) return rc;
  char secret_file[4096], nonce[17];
  int secret_fd = -1;
  bool secret_is_file = true;
  if (!cli_random_hex(nonce, 8)) {
    fprintf(stderr, "graphrun launch: no random bytes for the cluster id: %s\n", strerror(errno));
    return GR_EXIT_FAILURE;
  }
  snprintf(cluster_id, sizeof cluster_id, "launch-%s", nonce);
  gr_error err;
  if (o.slurm) { /* the secret in the rendezvous, which every node reads */
    if (cli_slurm_prepare(&slurm_step, &err) != GR_OK) {
      fprintf(stderr, "graphrun launch: %s\n", err.msg);
      cli_slurm_stop(&slurm_step);
      return GR_EXIT_USAGE;
    }
    snprintf(secret_file, sizeof secret_file, "%s", slurm_step.secret);
    snprintf(cluster_id, sizeof cluster_id, "%s", slurm_step.id);
  } else if (!write_secret(secret_file, sizeof secret_file, &secret_fd, &secret_is_file)) {
    fprintf(stderr, "graphrun launch: cannot write a secret file: %s\n", strerror(errno));
    return GR_EXIT_FAILURE;
  }
  if (!start_guardian(secret_is_file ? secret_file : NULL, secret_fd)) {
    fprintf(stderr, "graphrun launch: cannot start its guardian process: %s\n", strerror(errno));
    if (secret_is_file) unlink(secret_file);
    return GR_EXIT_FAILURE;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  pid_t cmds[MAX_TASKS] = {0};
  const task *clients[MAX_TASKS] = {0};
  int ncmds = 0;
  rc = GR_EXIT_FAILURE;
  if (start_cluster(ts, n, secret_file, &o, argv + o.cmd, argc - o.cmd, cmds, clients, &ncmds))
    rc = supervise_until_done(ts, n, cmds, clients, ncmds, secret_file, &o);
  stop_all(ts, n, cmds, ncmds);
  if (o.slurm) cli_slurm_stop(&slurm_step);
  if (secret_is_file) unlink(secret_file);
  if (secret_fd >= 0) close(secret_fd);
  stop_guardian();
  return rc;
}
