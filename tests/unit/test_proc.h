/* Processes for tests of the graphrun command (clusters, launch): start a
 * command with its output captured, wait for a line or its end with a
 * deadline, and always end and reap it.
 *
 *   gt_proc p;
 *   gt_proc_start(&p, (char *[]){"graphrun", "launch", "--workers", "1", "x.gr", NULL});
 *   if (gt_proc_wait_line(&p, "tasks ready", 30)) ...;   // p.buf: the output so far
 *   gt_proc_finish(&p);                                  // SIGKILL to its group if running
 *   int code = gt_proc_exit_code(&p);
 */
#ifndef GT_TEST_PROC_H
#define GT_TEST_PROC_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct gt_proc {
  pid_t pid;
  int out;         /* its stdout + stderr */
  char buf[65536]; /* the output (its tail when longer), NUL-terminated */
  size_t len;
  int status; /* once reaped */
  bool done;
} gt_proc;

/* The built graphrun executable (build/graphrun, found from the test's own path). */
const char *gt_graphrun_exe(void);
/* Starts argv in a process group of its own; argv[0] "graphrun": the built one.
 * It is killed when the test process ends, however it ends (call from the
 * main thread: the signal follows the thread that started it). */
void gt_proc_start(gt_proc *p, char *const argv[]);
/* Reads its output until `want` appears (NULL: until it exits) or seconds pass. */
bool gt_proc_wait(gt_proc *p, const char *want, double seconds);
/* Until a whole line containing `want` has arrived. */
bool gt_proc_wait_line(gt_proc *p, const char *want, double seconds);
/* Ends it (SIGKILL to its group if still running) and reaps it. */
void gt_proc_finish(gt_proc *p);
/* Its exit code, or 128 + the signal that ended it. */
int gt_proc_exit_code(const gt_proc *p);
/* Starts argv as p, waits at most `seconds` for its end and finishes it:
 * its exit code (p->buf: its output), or -1 when it had not ended (killed
 * then, and a line on stderr saying so, with its output). */
int gt_run(gt_proc *p, char *const argv[], double seconds);
/* The values a run printed as "NAME = V" lines in out, at most cap of them
 * into v; how many. */
int gt_output_values(const char *out, const char *name, double *v, int cap);
double gt_now(void);
/* Starts `graphrun launch` argv as p, waits (30 s at most) until its tasks
 * are ready, lets the steps run for `settle` seconds, kills `task` (as
 * launch names it: "worker:1") with SIGKILL and waits at most `seconds` for
 * the launch to end; p is finished either way. The seconds from the kill to
 * the end, or -1 (a check has failed: no task ready, no pid, no end). */
double gt_launch_kill(gt_proc *p, char *const argv[], const char *task, double settle,
                      double seconds);
/* n (at most 8) free loopback ports: bound at once, then released for a
 * cluster to bind (another process may take one meanwhile: retry then). */
bool gt_free_ports(int *ports, int n);
/* For a test of graphrun processes, at its start: SIGPIPE ignored (a write
 * to a process that died is an error, not the test's end), and no
 * GRAPHRUN_CLUSTER, GRAPHRUN_SECRET_FILE, GRAPHRUN_CLUSTER_ID,
 * GRAPHRUN_RENDEZVOUS, GRAPHRUN_TLS_* or Slurm job ids of the caller's
 * environment passed on to the processes it starts. */
void gt_proc_isolate(void);

#endif
