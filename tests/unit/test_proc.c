/* gt_proc: processes for tests of the graphrun command (test_proc.h). */
#include "test_proc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double gt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double gt_launch_kill(gt_proc *p, char *const argv[], const char *task, double settle,
                      double seconds) {
  char want[64];
  snprintf(want, sizeof want, "%s=", task);
  gt_proc_start(p, argv);
  bool ready = gt_proc_wait(p, "tasks ready", 30);
  const char *pid = NULL;
  for (int i = 0; ready && i < 500 && !pid; i++) { /* the pid ends the line: wait for all of it */
    const char *at = strstr(p->buf, want);
    pid = at ? strstr(at, "(pid ") : NULL;
    if (pid && !strchr(pid, ')')) pid = NULL;
    if (!pid) gt_proc_wait(p, "\x01", 0.02);
  }
  if (!pid) {
    fprintf(stderr, "no pid of %s:\n%s\n", task, p->buf);
    gt_proc_finish(p);
    return -1;
  }
  usleep((useconds_t)(settle * 1e6)); /* steps are running */
  double t0 = gt_now();
  kill((pid_t)atoi(pid + 5), SIGKILL);
  bool ended = gt_proc_wait(p, NULL, seconds);
  double took = gt_now() - t0;
  gt_proc_finish(p);
  if (!ended) fprintf(stderr, "no end after the kill of %s:\n%s\n", task, p->buf);
  return ended ? took : -1;
}

int gt_run(gt_proc *p, char *const argv[], double seconds) {
  gt_proc_start(p, argv);
  bool ended = gt_proc_wait(p, NULL, seconds);
  gt_proc_finish(p);
  if (ended) return gt_proc_exit_code(p);
  fprintf(stderr, "%s %s did not end within %g s:\n%s\n", argv[0], argv[1] ? argv[1] : "", seconds,
          p->buf);
  return -1;
}

int gt_output_values(const char *out, const char *name, double *v, int cap) {
  char key[128];
  snprintf(key, sizeof key, "\n%s = ", name);
  int n = 0;
  for (const char *at = strstr(out, key); at && n < cap; at = strstr(at + 1, key))
    v[n++] = atof(at + strlen(key));
  return n;
}

void gt_proc_isolate(void) {
  signal(SIGPIPE, SIG_IGN);
  unsetenv("GRAPHRUN_CLUSTER");
  unsetenv("GRAPHRUN_SECRET_FILE");
  unsetenv("GRAPHRUN_CLUSTER_ID"); /* and the other sources of a cluster id than the spec */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_ID");
  unsetenv("GRAPHRUN_TLS_CERT");
  unsetenv("GRAPHRUN_TLS_KEY");
  unsetenv("GRAPHRUN_TLS_CA");
  unsetenv("GRAPHRUN_RENDEZVOUS");
}

const char *gt_graphrun_exe(void) {
  static char exe[PATH_MAX];
  if (!exe[0]) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (!slash) abort();
    strcpy(slash, "/../../graphrun"); /* build/tests/unit/ -> build/graphrun */
  }
  return exe;
}

void gt_proc_start(gt_proc *p, char *const argv[]) {
  memset(p, 0, sizeof *p);
  const char *exe = gt_graphrun_exe();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) abort();
  pid_t parent = getpid();
  p->pid = fork();
  if (p->pid == 0) {
    setpgid(0, 0); /* its own group: the test can kill everything it started */
    /* and it ends with the test, even when the test is killed (a ctest timeout) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execv(strcmp(argv[0], "graphrun") ? argv[0] : exe, argv);
    _exit(127);
  }
  close(fds[1]);
  p->out = fds[0];
}

bool gt_proc_wait(gt_proc *p, const char *want, double seconds) {
  double end = gt_now() + seconds;
  while (gt_now() < end) {
    if (want && strstr(p->buf, want)) return true;
    struct pollfd pf = {.fd = p->out, .events = POLLIN};
    if (p->out >= 0 && poll(&pf, 1, 50) > 0) {
      if (p->len + 1 >= sizeof p->buf) { /* keep the tail */
        memmove(p->buf, p->buf + sizeof p->buf / 2, sizeof p->buf / 2);
        p->len -= sizeof p->buf / 2;
      }
      ssize_t r = read(p->out, p->buf + p->len, sizeof p->buf - 1 - p->len);
      if (r > 0) {
        p->len += (size_t)r;
        p->buf[p->len] = '\0';
        continue;
      }
      close(p->out);
      p->out = -1;
    }
    if (!p->done && waitpid(p->pid, &p->status, WNOHANG) == p->pid) p->done = true;
    if (p->done && p->out < 0) return want ? strstr(p->buf, want) != NULL : true;
    if (p->out < 0) usleep(20000);
  }
  return false;
}

bool gt_proc_wait_line(gt_proc *p, const char *want, double seconds) {
  double end = gt_now() + seconds;
  while (gt_now() < end) {
    const char *at = strstr(p->buf, want);
    if (at && strchr(at, '\n')) return true;
    if (!gt_proc_wait(p, "\x01", 0.02) && p->done && p->out < 0) return false;
  }
  return false;
}

void gt_proc_finish(gt_proc *p) {
  if (!p->done) {
    kill(-p->pid, SIGKILL);
    waitpid(p->pid, &p->status, 0);
    p->done = true;
  }
  if (p->out >= 0) close(p->out);
  p->out = -1;
}

int gt_proc_exit_code(const gt_proc *p) {
  return WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128 + WTERMSIG(p->status);
}

bool gt_free_ports(int *ports, int n) {
  int fds[8];
  bool ok = n <= 8;
  for (int i = 0; i < n && ok; i++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    ok = fds[i] >= 0 && bind(fds[i], (struct sockaddr *)&a, sizeof a) == 0 &&
         getsockname(fds[i], (struct sockaddr *)&a, &len) == 0;
    ports[i] = ntohs(a.sin_port);
    if (!ok && fds[i] >= 0) close(fds[i]);
    if (!ok) n = i;
  }
  for (int i = 0; i < n; i++) close(fds[i]);
  return ok;
}
