/* graphrun launch --slurm's job step (cli_launch_slurm.c): the servers
 * started by srun in the job launch runs in, their rendezvous, and their
 * end. Internal to frontend/cli/.
 *
 * Processes: launch forks srun (which dies with launch: PR_SET_PDEATHSIG)
 * and, at the end, scancel. */
#ifndef GR_CLI_LAUNCH_H
#define GR_CLI_LAUNCH_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cli_cluster.h"
#include "cli_resolve.h"

typedef struct cli_slurm_step {
  pid_t srun;        /* the servers' srun (0: none, or reaped) */
  char dir[4096];    /* this launch's rendezvous, removed at the end */
  char secret[4200]; /* its secret file, DIR/secret */
  char id[64];       /* the cluster id, "slurm-JOB-" and 16 hex digits */
  char step[64];     /* "JOB.STEP" of the servers' step, once known */
  int ntasks;
} cli_slurm_step;

typedef struct cli_slurm_options {
  long restarts; /* per task, in place (graphrun server --restarts) */
  long threads;  /* each server's --threads (0: its default) */
  bool quiet;
  cli_tls tls; /* each server's --tls-* (NULL: not passed) */
} cli_slurm_options;

/* The rendezvous (a fresh directory under $SLURM_SUBMIT_DIR/.graphrun),
 * the secret in it and the cluster id; an error outside a Slurm job. */
gr_status cli_slurm_prepare(cli_slurm_step *s, gr_error *err);
/* srun --ntasks=N graphrun server --cluster slurm:JOBS ... (exe: this
 * graphrun, which every node must have at that path). */
bool cli_slurm_start(cli_slurm_step *s, const char *exe, const char *jobs, int ntasks,
                     const cli_slurm_options *o);
/* Until every server has written where it listens (at most seconds; srun
 * ending or *stop set ends it early): the cluster. */
gr_status cli_slurm_wait(cli_slurm_step *s, double seconds, volatile sig_atomic_t *stop,
                         gr_cluster **out, gr_error *err);
/* Whether srun still runs (reaped when not; *status its status then). */
bool cli_slurm_alive(cli_slurm_step *s, int *status);
/* Stops the step (SIGTERM to its tasks; srun signalled after 10 s, killed
 * after 15) and removes the rendezvous. */
void cli_slurm_stop(cli_slurm_step *s);

#endif
