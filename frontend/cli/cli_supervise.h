/* A task restarted in place when it dies (cli_supervise.c): graphrun
 * server --restarts K. Internal to frontend/cli/.
 *
 * Processes: the caller becomes the supervisor (it must have no threads:
 * it forks); the serving child dies with it (PR_SET_PDEATHSIG). */
#ifndef GR_CLI_SUPERVISE_H
#define GR_CLI_SUPERVISE_H

typedef struct cli_supervise_ops {
  /* In the child: serves until done and returns its exit code; writes the
   * port it listens on (an int) to port_fd once it listens. */
  int (*serve)(void *arg, int port_fd);
  /* In the supervisor, once the child said its port: the next start
   * listens on it again. */
  void (*set_port)(void *arg, int port);
  void *arg;
  const char *what; /* "/job:worker/replica:0/task:1", for messages */
} cli_supervise_ops;

/* Serves in a child, restarted (at most restarts times) when it dies by a
 * signal or exits with 1; returns the exit code. */
int cli_supervise(const cli_supervise_ops *ops, long restarts);

#endif
