/* A task restarted in place: graphrun server --restarts K runs the server
 * in a child process and starts it again, on the port it listened on, when
 * it dies (a signal, or exit code 1), at most K times, the delay doubling
 * from 0.1 s while it keeps dying within 10 s. SIGTERM and SIGINT are passed
 * on to the child, which stops cleanly; its exit code then is the
 * supervisor's, as is any other exit code 0 or 2 (it ended with its client,
 * or was misused: a restart would not help). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_supervise.h"
#include "cli_util.h"
#include "commands.h"

static volatile sig_atomic_t stop_sig;
static volatile pid_t child_pid;

static void on_stop(int sig) {
  stop_sig = sig;
  if (child_pid > 0) kill(child_pid, sig);
}

/* Starts the child: it serves, telling the port through the pipe. */
static pid_t start_child(const cli_supervise_ops *ops, int *port_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* it goes with its supervisor */
    signal(SIGTERM, SIG_DFL), signal(SIGINT, SIG_DFL);
    _exit(ops->serve(ops->arg, fds[1]));
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  *port_fd = fds[0];
  return pid;
}

/* The port the child says it listens on (0: it did not say; its pipe ended). */
static int read_port(int fd) {
  int port = 0;
  ssize_t r;
  while ((r = read(fd, &port, sizeof port)) < 0 && errno == EINTR) {}
  return r == (ssize_t)sizeof port ? port : 0;
}

int cli_supervise(const cli_supervise_ops *ops, long restarts) {
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int streak = 0, port = 0;
  for (long used = 0;; used++) {
    double started = cli_now();
    int port_fd;
    pid_t pid = start_child(ops, &port_fd);
    if (pid < 0) {
      fprintf(stderr, "graphrun server: cannot start %s: %s\n", ops->what, strerror(errno));
      return GR_EXIT_FAILURE;
    }
    child_pid = pid;
    if (stop_sig) kill(pid, stop_sig); /* a signal came while it started */
    int said = read_port(port_fd);     /* until it listens, or dies */
    close(port_fd);
    if (said > 0 && said != port) ops->set_port(ops->arg, port = said);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    child_pid = 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (stop_sig) return code >= 0 ? code : GR_EXIT_OK; /* stopped, as asked */
    if (code == GR_EXIT_OK || code == GR_EXIT_USAGE) return code;
    char how[64];
    if (code < 0)
      snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else
      snprintf(how, sizeof how, "exited with code %d", code);
    if (used >= restarts) {
      fprintf(stderr, "graphrun server: %s (pid %d) %s; %ld restarts used up, stopping\n",
              ops->what, (int)pid, how, restarts);
      return GR_EXIT_FAILURE;
    }
    if (cli_now() - started > 10) streak = 0; /* it had been up a while */
    double delay = 0.1 * (1 << (streak < 5 ? streak : 5));
    streak++;
    fprintf(stderr,
            "graphrun server: %s (pid %d) %s; restarting it on port %d in %.1f s (%ld of %ld)\n",
            ops->what, (int)pid, how, port, delay, used + 1, restarts);
    struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_sig) {}
    if (stop_sig) return GR_EXIT_OK;
  }
}
