/* Helpers of the benchmarks (bench_util.h): child processes, removing a tree. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <graphrun.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/threadpool.h"                /* gr_cpus_bind */
#include "distributed/transport_internal.h" /* gr_transport_set_loopback_remote */

pid_t bench_children[BENCH_MAX_CHILDREN];
int bench_num_children;
static const char *bench_name = "bench";
static void (*bench_hook)(void);

void bench_stop_children(void) {
  for (int i = 0; i < bench_num_children; i++)
    if (bench_children[i] > 0) kill(bench_children[i], SIGKILL);
  for (int i = 0; i < bench_num_children; i++)
    if (bench_children[i] > 0) waitpid(bench_children[i], NULL, 0);
  bench_num_children = 0;
}

void bench_add_child(pid_t pid) {
  if (bench_num_children == BENCH_MAX_CHILDREN) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    bench_die("fork", "too many children");
  }
  bench_children[bench_num_children++] = pid;
}

void bench_forget_child(pid_t pid) {
  for (int i = 0; i < bench_num_children; i++)
    if (bench_children[i] == pid) bench_children[i] = bench_children[--bench_num_children];
}

static void bench_cleanup(void) {
  bench_stop_children();
  if (bench_hook) bench_hook();
}

static void bench_on_signal(int sig) {
  bench_cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

void bench_remove_tree(const char *who, const char *path) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", path);
  if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", who, path);
}

void bench_start(const char *name, void (*cleanup)(void)) {
  bench_name = name;
  bench_hook = cleanup;
  atexit(bench_cleanup);
  signal(SIGINT, bench_on_signal);
  signal(SIGTERM, bench_on_signal);
  signal(SIGPIPE, SIG_IGN);
}

void bench_die(const char *what, const char *msg) {
  fprintf(stderr, "%s: %s: %s\n", bench_name, what, msg ? msg : strerror(errno));
  exit(1); /* the cleanup runs at exit */
}

pid_t bench_spawn(int life_r, int life_w, void (*fn)(void *arg, int life), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) bench_die("fork", NULL);
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    close(life_w);
    bench_num_children = 0; /* the parent's to stop, not this one's */
    bench_hook = NULL;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    fn(arg, life_r);
    _exit(0);
  }
  bench_add_child(pid);
  return pid;
}

typedef struct server_child {
  const char *job;
  int task, port_w;
  bool remote; /* loopback counts as another host: TLS (tls) or frame MACs */
  bench_tls tls;
  int shares; /* > 0: bound to share `task` of that many of the CPUs */
} server_child;

static void server_main(void *arg, int life) {
  server_child *sc = arg;
  char cpus[256];
  gr_error err;
  if (sc->shares > 0 && /* as graphrun launch --cpu-bind, before any thread starts */
      (!gr_cpus_share(sc->task, sc->shares, cpus, sizeof cpus) ||
       gr_cpus_bind(cpus, &err) != GR_OK)) {
    fprintf(stderr, "%s: task %d: cannot bind it to its share of the CPUs\n", bench_name, sc->task);
    _exit(1);
  }
  gr_server_options o = {.job = sc->job,
                         .task = sc->task,
                         .secret = BENCH_SECRET,
                         .inter_op_threads = 1,
                         .quiet = true,
                         .tls_cert = sc->tls.cert,
                         .tls_key = sc->tls.key,
                         .tls_ca = sc->tls.ca};
  if (sc->remote) gr_transport_set_loopback_remote(true);
  gr_server *srv;
  int port = -1;
  if (gr_server_new(&o, &srv, &err) != GR_OK)
    fprintf(stderr, "%s: task %d: %s\n", bench_name, sc->task, err.msg);
  else
    port = gr_server_port(srv);
  if (write(sc->port_w, &port, sizeof port) != sizeof port || port < 0) _exit(1);
  char c;
  while (read(life, &c, 1) < 0 && errno == EINTR) {}
  _exit(0); /* no teardown: the process ends */
}

static pid_t spawn_server(const char *job, int task, int life_r, int life_w, int *port,
                          const bench_tls *tls, int shares) {
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) != 0) bench_die("pipe", NULL);
  server_child sc = {job, task, pp[1], tls != NULL, tls ? *tls : (bench_tls){0}, shares};
  pid_t pid = bench_spawn(life_r, life_w, server_main, &sc);
  close(pp[1]);
  if (read(pp[0], port, sizeof *port) != sizeof *port || *port <= 0)
    bench_die("server task", "did not start");
  close(pp[0]);
  return pid;
}

pid_t bench_spawn_server(int task, int life_r, int life_w, int *port) {
  return spawn_server("worker", task, life_r, life_w, port, NULL, 0);
}

pid_t bench_spawn_server_bound(int task, int shares, int life_r, int life_w, int *port) {
  return spawn_server("worker", task, life_r, life_w, port, NULL, shares);
}

pid_t bench_spawn_server_job(const char *job, int task, int life_r, int life_w, int *port) {
  return spawn_server(job, task, life_r, life_w, port, NULL, 0);
}

pid_t bench_spawn_server_remote(int task, int life_r, int life_w, int *port, const bench_tls *tls) {
  return spawn_server("worker", task, life_r, life_w, port, tls, 0);
}

bool bench_serve_start(bench_server *c, char *const argv[], int threads) {
  int to[2], from[2];
  *c = (bench_server){-1, NULL, NULL};
  /* close-on-exec: another child started later must not hold this one's
   * ends (its stdin would never see the end of input) */
  if (pipe2(to, O_CLOEXEC) != 0) return false;
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]), close(to[1]);
    return false;
  }
  char th[16];
  snprintf(th, sizeof th, "%d", threads);
  fflush(NULL);
  c->pid = fork();
  if (c->pid < 0) {
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    return false;
  }
  if (c->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    setenv("OMP_NUM_THREADS", th, 1);
    execv(argv[0], argv);
    _exit(127);
  }
  bench_add_child(c->pid);
  close(to[0]), close(from[1]);
  c->in = fdopen(to[1], "w");
  c->out = fdopen(from[0], "r");
  return true; /* a failed fdopen shows as a failed run */
}

double bench_serve_run(bench_server *c, long n) {
  char line[256];
  long got;
  double sec;
  if (!c->in || !c->out || fprintf(c->in, "%ld\n", n) < 0 || fflush(c->in) != 0) return -1;
  while (fgets(line, sizeof line, c->out))
    if (sscanf(line, "ran %ld %lf", &got, &sec) == 2) return sec;
  return -1;
}

bool bench_serve_finish(bench_server *c, void (*line)(const char *text, void *arg), void *arg) {
  if (c->in) fclose(c->in); /* end of input: the child prints its results */
  char text[512];
  while (c->out && fgets(text, sizeof text, c->out))
    if (line) line(text, arg);
  if (c->out) fclose(c->out);
  int status = 0;
  if (c->pid > 0) {
    waitpid(c->pid, &status, 0);
    bench_forget_child(c->pid);
  }
  *c = (bench_server){-1, NULL, NULL};
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
