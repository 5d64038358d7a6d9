/* Server tasks of this machine for a measurement (graphrun calibrate): n
 * forked children, /job:worker/task:0 .. n-1, each a gr_server on
 * 127.0.0.1:0 with one inter-op thread (as `graphrun launch` starts its
 * tasks) and a random secret of this process. Fork them before this
 * process starts threads. A child ends when this process closes its end of
 * a pipe or dies (PR_SET_PDEATHSIG); cli_tasks_stop kills and reaps them. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_local_tasks.h"

static void child(int task, const char *secret, int port_w, int life_r) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  gr_server_options o = {
      .job = "worker", .task = task, .secret = secret, .inter_op_threads = 1, .quiet = true};
  gr_server *s;
  gr_error err;
  int port = -1;
  if (gr_server_new(&o, &s, &err) == GR_OK)
    port = gr_server_port(s);
  else
    fprintf(stderr, "graphrun calibrate: task %d: %s\n", task, err.msg);
  if (write(port_w, &port, sizeof port) != sizeof port || port < 0) _exit(1);
  char c;
  while (read(life_r, &c, 1) < 0 && errno == EINTR) {}
  _exit(0); /* no teardown: the process ends */
}

gr_status cli_tasks_start(cli_tasks *t, int n, const char *secret, gr_error *err) {
  memset(t, 0, sizeof *t);
  t->life_w = -1;
  if (n < 1 || n > CLI_TASKS_MAX)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "local tasks: %d (1 to %d)", n,
                        CLI_TASKS_MAX);
  int life[2];
  if (pipe2(life, O_CLOEXEC) != 0)
    return gr_error_set(err, GR_ERR_IO, "local tasks: pipe: %s", strerror(errno));
  t->life_w = life[1];
  gr_status st = GR_OK;
  for (int k = 0; k < n && st == GR_OK; k++) {
    int pp[2];
    if (pipe2(pp, O_CLOEXEC) != 0) {
      st = gr_error_set(err, GR_ERR_IO, "local tasks: pipe: %s", strerror(errno));
      break;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      close(pp[0]);
      close(life[1]);
      child(k, secret, pp[1], life[0]);
    }
    close(pp[1]);
    int port = -1;
    if (pid < 0) {
      st = gr_error_set(err, GR_ERR_IO, "local tasks: fork: %s", strerror(errno));
    } else {
      t->pid[t->n++] = pid;
      ssize_t r;
      while ((r = read(pp[0], &port, sizeof port)) < 0 && errno == EINTR) {}
      if (r != sizeof port || port <= 0)
        st = gr_error_set(err, GR_ERR_UNAVAILABLE, "local tasks: task %d did not start", k);
      snprintf(t->addr[k], sizeof t->addr[k], "127.0.0.1:%d", port);
      t->addrs[k] = t->addr[k];
    }
    close(pp[0]);
  }
  close(life[0]);
  if (st != GR_OK) cli_tasks_stop(t);
  return st;
}

void cli_tasks_stop(cli_tasks *t) {
  if (t->life_w >= 0) close(t->life_w);
  t->life_w = -1;
  for (int k = 0; k < t->n; k++) kill(t->pid[k], SIGKILL);
  for (int k = 0; k < t->n; k++)
    while (waitpid(t->pid[k], NULL, 0) < 0 && errno == EINTR) {}
  t->n = 0;
}
