/* Launchers as --cluster forms: "slurm[:JOBS][@PORT]" inside a Slurm job,
 * "mpi[:JOBS][@PORT]" under mpirun (Open MPI, MPICH, Intel MPI, PMIx). A
 * server is the task its launcher made it; a client reads the cluster from
 * the step's layout when the ports are known, else from the rendezvous. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_resolve.h"

int cli_launcher_parse(const char *spec, cli_launcher *l, gr_error *err) {
  size_t kl = !strncmp(spec, "slurm", 5) ? 5 : !strncmp(spec, "mpi", 3) ? 3 : 0;
  if (!kl || (spec[kl] && spec[kl] != ':' && spec[kl] != '@')) return 0;
  memset(l, 0, sizeof *l);
  l->kind = kl == 5 ? CLI_SLURM : CLI_MPI;
  const char *at = strrchr(spec, '@');
  size_t jl = at ? (size_t)(at - spec) : strlen(spec);
  if (jl > kl) {
    if (jl - kl - 1 >= sizeof l->jobs) {
      gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "--cluster %.80s...: the jobs are too long", spec);
      return -1;
    }
    memcpy(l->jobs, spec + kl + 1, jl - kl - 1);
    l->jobs[jl - kl - 1] = '\0';
  }
  if (at) {
    char *end;
    long port = strtol(at + 1, &end, 10);
    if (*end || end == at + 1 || port < 1 || port > 65535) {
      gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                   "--cluster '%s': the port must be 1 to 65535 (%s:ps:1,worker@2222), or left "
                   "out: the servers then take free ports and meet the clients at a rendezvous",
                   spec, l->kind == CLI_SLURM ? "slurm" : "mpi");
      return -1;
    }
    l->port = (int)port;
  }
  return 1;
}

/* An environment variable as an integer >= 0 (-1: not set, or not one). */
static int env_int(const char *var) {
  const char *v = getenv(var);
  char *end;
  long x = v ? strtol(v, &end, 10) : -1;
  return v && *v && !*end && x >= 0 && x <= 1000000000L ? (int)x : -1;
}

/* Its node's name as Slurm's node list says it, unless that name does not
 * resolve (NodeName is not always a host name): the host's name then. */
static void host_name(char *out, size_t cap) {
  const char *node = getenv("SLURMD_NODENAME");
  if (node && *node && cli_host_resolve_kind(node, NULL, 0) != CLI_HOST_UNRESOLVED)
    snprintf(out, cap, "%s", node);
  else if (gethostname(out, cap) != 0)
    snprintf(out, cap, "localhost");
  out[cap - 1] = '\0';
}

/* Letters, digits, '.', '-' and '_' of s, into out (a launch id's part). */
static void id_part(const char *s, char *out, size_t cap) {
  size_t n = 0;
  for (; s && *s && n + 1 < cap; s++)
    if (isalnum((unsigned char)*s) || *s == '.' || *s == '-' || *s == '_') out[n++] = *s;
  out[n] = '\0';
}

static gr_status slurm_task(const cli_launcher *l, cli_launch_task *t, gr_error *err) {
  if (!getenv("SLURM_STEP_NUM_TASKS") || env_int("SLURM_PROCID") < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "slurm: %s is not set: a server is a task of a job step; start the "
                        "servers with srun (srun graphrun server --cluster slurm:...)",
                        getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_PROCID" : "SLURM_STEP_NUM_TASKS");
  t->rank = env_int("SLURM_PROCID");
  t->ntasks = env_int("SLURM_STEP_NUM_TASKS");
  t->local = env_int("SLURM_LOCALID") < 0 ? 0 : env_int("SLURM_LOCALID");
  t->multi_node = env_int("SLURM_STEP_NUM_NODES") > 1;
  char job[32], step[32];
  id_part(getenv("SLURM_JOB_ID"), job, sizeof job);
  id_part(getenv("SLURM_STEP_ID"), step, sizeof step);
  snprintf(t->launch, sizeof t->launch, "slurm-%s.%s", job, step);
  if (l->port || getenv("SLURM_STEP_RESV_PORTS")) {
    /* known ports: the step's layout says where each task listens, so the
     * clients inside the step can compute it; this task must be where it
     * puts it */
    gr_cluster *c;
    gr_cluster_self me;
    GR_TRY(gr_cluster_from_slurm_env(l->jobs, l->port, &c, &me, err));
    char host[GR_CLUSTER_HOST_MAX];
    gr_status s = gr_cluster_split_address(gr_cluster_task_at(c, me.task)->address, host,
                                           sizeof host, &t->port, err);
    gr_cluster_free(c);
    GR_TRY(s);
  }
  return gr_cluster_task_of_rank(l->jobs, t->ntasks, t->rank, "slurm", "SLURM_STEP_NUM_TASKS",
                                 t->job, &t->index, err);
}

/* The first of the variables that is set (NULL: none); *which its name. */
static int first_int(const char *const *vars, const char **which) {
  for (int i = 0; vars[i]; i++)
    if (getenv(vars[i])) {
      *which = vars[i];
      return env_int(vars[i]);
    }
  *which = NULL;
  return -1;
}

static gr_status mpi_task(const cli_launcher *l, cli_launch_task *t, gr_error *err) {
  static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL};
  static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
  static const char *const locals[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", NULL};
  static const char *const local_sizes[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", NULL};
  static const char *const ids[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME",
                                    NULL};
  const char *rank_var, *size_var, *local_var, *ls_var;
  t->rank = first_int(ranks, &rank_var);
  t->ntasks = first_int(sizes, &size_var);
  if (!rank_var)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "mpi: no rank: none of OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH, "
                        "Intel MPI) and PMIX_RANK (PMIx) is set; start the servers with mpirun "
                        "(mpirun -n 3 graphrun server --cluster mpi:...)");
  if (t->rank < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "mpi: %s=\"%.40s\" is not a rank", rank_var,
                        getenv(rank_var));
  if (t->ntasks < 1 && size_var)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "mpi: %s=\"%.40s\" is not a number of ranks",
                        size_var, getenv(size_var));
  if (t->ntasks < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "mpi: %s is set, but no number of ranks (OMPI_COMM_WORLD_SIZE or PMI_SIZE)",
                        rank_var);
  t->local = first_int(locals, &local_var);
  int local_size = first_int(local_sizes, &ls_var);
  t->multi_node = local_size > 0 && local_size < t->ntasks;
  if (l->port && t->local < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "mpi: @%d: the ranks of one host need ports of their own, but no local "
                        "rank is set (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID): leave the port "
                        "out (free ports, met at the rendezvous)",
                        l->port);
  if (t->local < 0) t->local = 0;
  if (l->port && l->port + t->local > 65535)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "mpi: port %d + local rank %d is above 65535",
                        l->port, t->local);
  t->port = l->port ? l->port + t->local : 0;
  const char *id_var;
  first_int(ids, &id_var);
  char id[48];
  id_part(id_var ? getenv(id_var) : "", id, sizeof id);
  snprintf(t->launch, sizeof t->launch, "mpi-%s", id);
  return gr_cluster_task_of_rank(l->jobs, t->ntasks, t->rank, "mpi", size_var, t->job, &t->index,
                                 err);
}

gr_status cli_launcher_task(const cli_launcher *l, cli_launch_task *t, gr_error *err) {
  memset(t, 0, sizeof *t);
  host_name(t->node, sizeof t->node);
  return l->kind == CLI_SLURM ? slurm_task(l, t, err) : mpi_task(l, t, err);
}

/* The tasks of the rendezvous must split into jobs as l says. */
static gr_status check_jobs(const cli_launcher *l, const gr_cluster *c, const char *dir,
                            gr_error *err) {
  int n = gr_cluster_num_tasks(c);
  for (int r = 0; r < n; r++) {
    char job[GR_DEVICE_JOB_MAX];
    int index;
    const gr_cluster_task *t = gr_cluster_task_at(c, r);
    GR_TRY(gr_cluster_task_of_rank(l->jobs, n, r, l->kind == CLI_SLURM ? "slurm" : "mpi",
                                   "the rendezvous's tasks", job, &index, err));
    if (strcmp(job, t->job) != 0 || index != t->index)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "rendezvous %s: rank %d is /job:%s/task:%d, but this client's jobs "
                          "\"%s\" make it /job:%s/task:%d: give the client the servers' jobs",
                          dir, r, t->job, t->index, l->jobs[0] ? l->jobs : "worker", job, index);
  }
  return GR_OK;
}

gr_status cli_launcher_cluster(const cli_launcher *l, bool layout_only, gr_cluster **out,
                               const char **from, gr_error *err) {
  static char from_buf[4200];
  *out = NULL;
  bool in_step = getenv("SLURM_STEP_NUM_TASKS") != NULL;
  if (l->kind == CLI_SLURM &&
      (layout_only || (in_step && (l->port || getenv("SLURM_STEP_RESV_PORTS"))))) {
    *from = in_step ? "Slurm (the step's layout)" : "Slurm (the job's layout)";
    return gr_cluster_from_slurm_env(l->jobs, layout_only ? 0 : l->port, out, NULL, err);
  }
  char dir[4096];
  GR_TRY(cli_rendezvous_dir(l, dir, sizeof dir, err));
  cli_rendezvous_use(dir);
  snprintf(from_buf, sizeof from_buf, "the rendezvous %s", dir);
  *from = from_buf;
  GR_TRY(cli_rendezvous_wait(dir, cli_rendezvous_wait_s(), out, err));
  gr_status s = check_jobs(l, *out, dir, err);
  if (s != GR_OK) {
    gr_cluster_free(*out);
    *out = NULL;
  }
  return s;
}
