/* graphrun launch --slurm: the cluster as a job step of the Slurm job this
 * runs in (a batch script, an salloc shell). srun starts one `graphrun
 * server --cluster slurm:JOBS` per task, each restarted in place when it
 * dies (--restarts), each on a free port (or Slurm's reserved one) that it
 * writes into a rendezvous of this launch's own (a fresh directory under
 * $SLURM_SUBMIT_DIR/.graphrun, with the generated secret), where launch
 * reads the cluster; at the end the step is stopped with SIGTERM (scancel
 * --signal=TERM JOB.STEP: the servers stop cleanly), and the rendezvous is
 * removed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_launch.h"
#include "cli_util.h"
#include "commands.h"

gr_status cli_slurm_prepare(cli_slurm_step *s, gr_error *err) {
  memset(s, 0, sizeof *s);
  const char *job = getenv("SLURM_JOB_ID"), *submit = getenv("SLURM_SUBMIT_DIR");
  if (!job || !*job)
    return gr_error_set(
        err, GR_ERR_INVALID_ARGUMENT,
        "--slurm: SLURM_JOB_ID is not set: run launch inside a Slurm job (an sbatch "
        "script, or an salloc shell)");
  char base[4096], cwd[2048], hex[17];
  if (!submit || !*submit) submit = getcwd(cwd, sizeof cwd) ? cwd : ".";
  snprintf(base, sizeof base, "%s/.graphrun", submit);
  if (mkdir(base, 0700) != 0 && errno != EEXIST)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "--slurm: cannot make %s: %s", base,
                        strerror(errno));
  snprintf(s->dir, sizeof s->dir, "%s/launch-%s-XXXXXX", base, job);
  if (!mkdtemp(s->dir)) /* mode 0700: the secret's too */
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "--slurm: cannot make a rendezvous in %s: %s",
                        base, strerror(errno));
  if (!cli_random_hex(hex, 8))
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "no random bytes for the cluster id");
  snprintf(s->id, sizeof s->id, "slurm-%.24s-%s", job, hex);
  GR_TRY(cli_rendezvous_secret_file(s->dir, s->secret, sizeof s->secret, err));
  return GR_OK;
}

bool cli_slurm_start(cli_slurm_step *s, const char *exe, const char *jobs, int ntasks,
                     const cli_slurm_options *o) {
  char n[32], cluster[300], restarts[32], threads[32];
  snprintf(n, sizeof n, "--ntasks=%d", ntasks);
  snprintf(cluster, sizeof cluster, "slurm:%s", jobs);
  snprintf(restarts, sizeof restarts, "%ld", o->restarts);
  snprintf(threads, sizeof threads, "%ld", o->threads);
  char *args[32];
  int k = 0;
  args[k++] = "srun", args[k++] = n, args[k++] = "--kill-on-bad-exit=0";
  args[k++] = (char *)exe, args[k++] = "server", args[k++] = "--cluster", args[k++] = cluster;
  args[k++] = "--rendezvous", args[k++] = s->dir, args[k++] = "--secret-file";
  args[k++] = s->secret, args[k++] = "--cluster-id", args[k++] = s->id;
  args[k++] = "--exit-with-client", args[k++] = "--restarts", args[k++] = restarts;
  if (o->threads > 0) args[k++] = "--threads", args[k++] = threads;
  if (o->quiet) args[k++] = "--quiet";
  if (o->tls.cert) args[k++] = "--tls-cert", args[k++] = (char *)o->tls.cert;
  if (o->tls.key) args[k++] = "--tls-key", args[k++] = (char *)o->tls.key;
  if (o->tls.ca) args[k++] = "--tls-ca", args[k++] = (char *)o->tls.ca;
  args[k] = NULL;
  s->ntasks = ntasks;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* launch killed: srun ends the step */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) dup2(null, 0);
    if (null >= 0 && o->quiet) dup2(null, 1);
    execvp("srun", args);
    fprintf(stderr, "graphrun launch: cannot run srun: %s\n", strerror(errno));
    _exit(127);
  }
  s->srun = pid;
  return true;
}

bool cli_slurm_alive(cli_slurm_step *s, int *status) {
  if (s->srun <= 0) return false;
  if (waitpid(s->srun, status, WNOHANG) != s->srun) return true;
  s->srun = 0;
  return false;
}

gr_status cli_slurm_wait(cli_slurm_step *s, double seconds, volatile sig_atomic_t *stop,
                         gr_cluster **out, gr_error *err) {
  double start = cli_now(), deadline = start + seconds;
  int status;
  bool told = false;
  for (;;) {
    if (!told && cli_now() - start > 5) { /* srun may wait for the job's resources */
      fprintf(stderr,
              "graphrun launch: waiting for the servers' step to start (srun; rendezvous %s)\n",
              s->dir);
      told = true;
    }
    gr_status st = cli_rendezvous_wait(s->dir, 0.2, out, err);
    if (st == GR_OK) break;
    if (st != GR_ERR_DEADLINE_EXCEEDED) return st;
    if (!cli_slurm_alive(s, &status))
      return gr_error_set(err, GR_ERR_UNAVAILABLE,
                          "--slurm: srun ended (%s %d) before every server said where it listens",
                          WIFEXITED(status) ? "exit code" : "signal",
                          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    if (*stop) return gr_error_set(err, GR_ERR_CANCELLED, "--slurm: stopped by a signal");
    if (cli_now() > deadline) {
      gr_error_prefix(err, "--slurm: the servers did not start within %.0f s", seconds);
      return err ? err->code : GR_ERR_DEADLINE_EXCEEDED;
    }
  }
  cli_rdv_entry e;
  const gr_cluster_task *t0 = gr_cluster_task_at(*out, 0);
  const char *dot =
      cli_rendezvous_lookup(s->dir, t0->job, t0->index, NULL, &e) ? strchr(e.launch, '.') : NULL;
  if (dot && !strncmp(e.launch, "slurm-", 6))
    snprintf(s->step, sizeof s->step, "%s", e.launch + 6); /* JOB.STEP, for scancel */
  return GR_OK;
}

/* Runs scancel --signal=TERM JOB.STEP (bounded). */
static void signal_step(const char *step) {
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) dup2(null, 1), dup2(null, 2);
    execlp("scancel", "scancel", "--signal=TERM", step, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; pid > 0 && i < 500 && waitpid(pid, NULL, WNOHANG) == 0; i++) usleep(20000);
  if (pid > 0 && kill(pid, 0) == 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
}

/* Waits up to ms for srun to end; whether it did. */
static bool wait_srun(cli_slurm_step *s, int ms) {
  int status;
  for (int i = 0; i < ms / 20 && cli_slurm_alive(s, &status); i++) usleep(20000);
  return !cli_slurm_alive(s, &status);
}

void cli_slurm_stop(cli_slurm_step *s) {
  if (s->srun > 0 && s->step[0]) signal_step(s->step); /* the servers stop cleanly */
  if (s->srun > 0 && !wait_srun(s, 10000)) {
    kill(s->srun, SIGTERM); /* srun cancels the step */
    if (!wait_srun(s, 5000)) kill(s->srun, SIGKILL), waitpid(s->srun, NULL, 0), s->srun = 0;
  }
  if (!s->dir[0]) return;
  DIR *d = opendir(s->dir); /* launch's own rendezvous: its entries, id and secret */
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[4400];
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(s->dir);
}
