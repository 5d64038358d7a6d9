/* A cluster from Slurm's environment: inside a task of a job step the
 * step's own variables (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
 * SLURM_STEP_NUM_TASKS, SLURM_DISTRIBUTION, SLURM_STEP_RESV_PORTS), else (a
 * batch script, an salloc shell) the job's; this task (SLURM_PROCID) only
 * when asked, checked against the node and local index Slurm gave it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "placer_internal.h"

/* A non-negative integer environment variable. */
static gr_status env_int(const char *var, int *out, gr_error *err) {
  const char *v = getenv(var);
  if (!v)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s is not set (not inside a Slurm job?)",
                        var);
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < 0 || x > 1000000000L)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=\"%.40s\" is not a non-negative integer",
                        var, v);
  *out = (int)x;
  return GR_OK;
}

/* The task Slurm says this process is runs where the layout puts it: on
 * SLURMD_NODENAME (else node SLURM_NODEID) with index SLURM_LOCALID. */
static gr_status check_self(const gr_cluster *c, int procid, const gr_slurm_layout *l,
                            gr_error *err) {
  const gr_cluster_task *t = gr_cluster_task_at(c, procid);
  const char *node = getenv("SLURMD_NODENAME"), *dist = l->distribution;
  const char *tpn = l->job_level ? "SLURM_TASKS_PER_NODE" : "SLURM_STEP_TASKS_PER_NODE";
  char how[320];
  snprintf(how, sizeof how, "SLURM_DISTRIBUTION=%.40s over %s (%s=%.60s)", dist ? dist : "block",
           l->job_level ? "the job's nodes" : "the step's nodes", tpn,
           l->tasks_per_node ? l->tasks_per_node : "(not set)");
  if (node && *node && !l->job_level && strcasecmp(node, t->host) != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "SLURMD_NODENAME=%.100s: Slurm runs task %d on %s, but %s puts it on %s",
                        node, procid, node, how, t->host);
  int local = 0, nodeid = 0;
  for (int k = 0; k < procid; k++) local += gr_cluster_task_at(c, k)->host_id == t->host_id;
  if ((!node || l->job_level) && getenv("SLURM_NODEID")) {
    GR_TRY(env_int("SLURM_NODEID", &nodeid, err));
    /* every node runs a task, and the first tasks reach the nodes in list
     * order: a task's host_id is its node's index in the list */
    if (nodeid != t->host_id)
      return gr_error_set(
          err, GR_ERR_INVALID_ARGUMENT,
          "SLURM_NODEID=%d: task %d runs on node %d, but %s puts it on node %d (%s)", nodeid,
          procid, nodeid, how, t->host_id, t->host);
  }
  int localid = 0;
  if (!l->job_level && getenv("SLURM_LOCALID")) {
    GR_TRY(env_int("SLURM_LOCALID", &localid, err));
    if (localid != local)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_LOCALID=%d: task %d is task %d of its node, but %s makes it "
                          "task %d there",
                          localid, procid, localid, how, local);
  }
  return GR_OK;
}

gr_status gr_cluster_from_slurm_env(const char *jobs, int base_port, gr_cluster **out,
                                    gr_cluster_self *self, gr_error *err) {
  *out = NULL;
  bool step = getenv("SLURM_STEP_NUM_TASKS") != NULL;
  gr_slurm_layout l = {.jobs = jobs, .base_port = base_port, .job_level = !step};
  const char *nodelist_var = step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const char *ntasks_var = step ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  if (!(l.nodelist = getenv(nodelist_var)))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s is not set (not inside a Slurm job?)",
                        nodelist_var);
  l.tasks_per_node = getenv(step ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE");
  if (getenv(ntasks_var) || !l.tasks_per_node) GR_TRY(env_int(ntasks_var, &l.ntasks, err));
  l.distribution = getenv("SLURM_DISTRIBUTION");
  if (getenv("SLURM_DIST_PLANESIZE")) GR_TRY(env_int("SLURM_DIST_PLANESIZE", &l.plane_size, err));
  if (step) l.resv_ports = getenv("SLURM_STEP_RESV_PORTS");
  int procid = -1;
  if (self) {
    if (!getenv("SLURM_PROCID"))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "SLURM_PROCID is not set: this process is no task of a Slurm job "
                          "(start it with srun)");
    GR_TRY(env_int("SLURM_PROCID", &procid, err));
  }
  gr_cluster_self me;
  GR_TRY(gr_cluster_from_slurm_layout(&l, procid, out, &me, err));
  if (self) {
    gr_status s = check_self(*out, procid, &l, err);
    if (s != GR_OK) {
      gr_cluster_free(*out);
      *out = NULL;
      return s;
    }
    *self = me;
  }
  return GR_OK;
}
