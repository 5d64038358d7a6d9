/* Slurm job steps as their tasks see them (placer/cluster_slurm.c): the
 * step's node list and tasks per node, Slurm's block, cyclic and plane
 * distributions, reserved ports by local index, the jobs of each rank, the
 * variables of a task of a step and of a batch script (which is no task:
 * no SLURM_PROCID needed), and malformed input, each refused naming the
 * variable. The layouts are Slurm's as its documentation gives them (and
 * as srun showed them on one node: test_slurm.c runs the real one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

/* Task i is job:index on host at address (NULL: none). */
static void check_task(const gr_cluster *c, int i, const char *job, int index, const char *host,
                       const char *address) {
  const gr_cluster_task *t = gr_cluster_task_at(c, i);
  GR_CHECK_MSG(t != NULL, "no task %d", i);
  if (!t) return;
  GR_CHECK_MSG(!strcmp(t->job, job) && t->index == index && !strcmp(t->host, host),
               "task %d is /job:%s/task:%d on %s, want /job:%s/task:%d on %s", i, t->job, t->index,
               t->host, job, index, host);
  if (address)
    GR_CHECK_MSG(t->address && !strcmp(t->address, address), "task %d: address %s, want %s", i,
                 t->address ? t->address : "(none)", address);
  else
    GR_CHECK_MSG(!t->address, "task %d: address %s, want none", i, t->address);
}

/* The hosts of the tasks in rank order, as "a a b ..." */
static void hosts_of(const gr_cluster *c, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < gr_cluster_num_tasks(c) && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", gr_cluster_task_at(c, i)->host);
}

static gr_cluster *layout(const gr_slurm_layout *l, int procid, gr_cluster_self *me) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_from_slurm_layout(l, procid, &c, me, &err), err);
  return c;
}

static void test_node_lists(void) {
  char names[16][GR_CLUSTER_HOST_MAX];
  int n;
  gr_error err;
  GR_CHECK_OK(
      gr_slurm_nodelist_expand("SLURM_STEP_NODELIST", "node[01-04,7],gpu5", names, 16, &n, &err),
      err);
  GR_CHECK_EQ_INT(n, 6);
  const char *want[] = {"node01", "node02", "node03", "node04", "node7", "gpu5"};
  for (int i = 0; i < n && i < 6; i++)
    GR_CHECK_MSG(!strcmp(names[i], want[i]), "name %d: %s, want %s", i, names[i], want[i]);
  GR_CHECK(gr_slurm_nodelist_expand("SLURM_STEP_NODELIST", "n[2-1]", names, 16, &n, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_STEP_NODELIST:1:3: descending range 2-1");
}

/* 8 tasks on 5 nodes, 2 2 2 1 1, each distribution. */
static void test_distributions(void) {
  gr_slurm_layout l = {.nodelist = "node[01-04,7]",
                       .tasks_per_node = "2(x3),1,1",
                       .ntasks = 8,
                       .jobs = "ps:1,worker",
                       .base_port = 2222};
  char hosts[256];
  gr_cluster_self me;
  gr_cluster *c = layout(&l, 7, &me); /* block: Slurm's default */
  if (c) {
    hosts_of(c, hosts, sizeof hosts);
    GR_CHECK_MSG(!strcmp(hosts, "node01 node01 node02 node02 node03 node03 node04 node7"), "%s",
                 hosts);
    check_task(c, 0, "ps", 0, "node01", "node01:2222");
    check_task(c, 1, "worker", 0, "node01", "node01:2223"); /* local index 1: base + 1 */
    check_task(c, 5, "worker", 4, "node03", "node03:2223");
    check_task(c, 7, "worker", 6, "node7", "node7:2222");
    GR_CHECK(!strcmp(me.job, "worker") && me.index == 6 && me.task == 7);
  }
  gr_cluster_free(c);
  l.distribution = "cyclic:block"; /* the nodes' part counts */
  if ((c = layout(&l, -1, NULL))) {
    hosts_of(c, hosts, sizeof hosts);
    GR_CHECK_MSG(!strcmp(hosts, "node01 node02 node03 node04 node7 node01 node02 node03"), "%s",
                 hosts);
    check_task(c, 5, "worker", 4, "node01", "node01:2223");
  }
  gr_cluster_free(c);
  /* plane: 2 at a time, a full node skipped */
  gr_slurm_layout p = {.nodelist = "a,b",
                       .tasks_per_node = "3,4",
                       .ntasks = 7,
                       .distribution = "plane",
                       .plane_size = 2,
                       .base_port = 9000};
  if ((c = layout(&p, -1, NULL))) {
    hosts_of(c, hosts, sizeof hosts);
    GR_CHECK_MSG(!strcmp(hosts, "a a b b a b b"), "%s", hosts);
    check_task(c, 4, "worker", 4, "a", "a:9002");
    check_task(c, 6, "worker", 6, "b", "b:9003");
  }
  gr_cluster_free(c);
  p.distribution = "plane=3";
  if ((c = layout(&p, -1, NULL))) {
    hosts_of(c, hosts, sizeof hosts);
    GR_CHECK_MSG(!strcmp(hosts, "a a a b b b b"), "%s", hosts);
  }
  gr_cluster_free(c);
  /* no counts: spread as Slurm does, the first nodes one more */
  gr_slurm_layout e = {.nodelist = "n[1-3]", .ntasks = 7, .base_port = 1000};
  if ((c = layout(&e, -1, NULL))) {
    hosts_of(c, hosts, sizeof hosts);
    GR_CHECK_MSG(!strcmp(hosts, "n1 n1 n1 n2 n2 n3 n3"), "%s", hosts);
  }
  gr_cluster_free(c);
  /* no port: tasks without addresses (where the placer only needs the shape) */
  e.base_port = 0;
  if ((c = layout(&e, -1, NULL))) check_task(c, 6, "worker", 6, "n3", NULL);
  gr_cluster_free(c);
}

static void test_reserved_ports(void) {
  gr_slurm_layout l = {.nodelist = "x[1-2]",
                       .tasks_per_node = "3(x2)",
                       .ntasks = 6,
                       .jobs = "chief:1,ps:2,worker",
                       .resv_ports = "23000-23001,23005",
                       .base_port = 2222}; /* reserved ports win */
  gr_cluster *c = layout(&l, -1, NULL);
  if (c) {
    check_task(c, 0, "chief", 0, "x1", "x1:23000");
    check_task(c, 2, "ps", 1, "x1", "x1:23005");
    check_task(c, 3, "worker", 0, "x2", "x2:23000");
    check_task(c, 5, "worker", 2, "x2", "x2:23005");
  }
  gr_cluster_free(c);
}

static void bad_layout(const gr_slurm_layout *l, const char *what) {
  gr_cluster *c = (gr_cluster *)1;
  gr_error err;
  gr_status s = gr_cluster_from_slurm_layout(l, -1, &c, NULL, &err);
  GR_CHECK_MSG(s == GR_ERR_INVALID_ARGUMENT && c == NULL, "accepted (%s)", what);
  if (s != GR_OK) GR_CHECK_STR_CONTAINS(err.msg, what);
  if (s == GR_OK) gr_cluster_free(c);
}

static void test_layout_errors(void) {
  gr_slurm_layout l = {.nodelist = "a,b", .tasks_per_node = "2(x2", .ntasks = 4, .base_port = 1};
  bad_layout(&l, "SLURM_STEP_TASKS_PER_NODE:1:2: expected a repeat \"(xN)\" (in \"2(x2\")");
  l.tasks_per_node = "2,0";
  bad_layout(&l, "SLURM_STEP_TASKS_PER_NODE:1:3: expected a task count of 1..4096");
  l.tasks_per_node = "2;2";
  bad_layout(&l, "SLURM_STEP_TASKS_PER_NODE:1:2: expected ',' between counts");
  l.tasks_per_node = "2(x3)";
  bad_layout(&l,
             "SLURM_STEP_TASKS_PER_NODE=\"2(x3)\" gives more nodes than the 2 of the node list");
  l.tasks_per_node = "4";
  bad_layout(&l, "SLURM_STEP_TASKS_PER_NODE=\"4\" gives 1 nodes, the node list has 2");
  l.tasks_per_node = "2,3";
  bad_layout(&l, "SLURM_STEP_TASKS_PER_NODE=\"2,3\" gives 5 tasks, SLURM_STEP_NUM_TASKS=4");
  l.tasks_per_node = "2(x2)";
  l.distribution = "arbitrary";
  bad_layout(&l, "SLURM_DISTRIBUTION=arbitrary: the tasks' nodes come from SLURM_HOSTFILE");
  l.distribution = "zigzag";
  bad_layout(&l, "SLURM_DISTRIBUTION=zigzag: unknown distribution");
  l.distribution = "plane";
  bad_layout(&l, "the plane size (SLURM_DIST_PLANESIZE) must be 1 or more");
  l.distribution = NULL;
  l.resv_ports = "23000";
  bad_layout(&l, "SLURM_STEP_RESV_PORTS=23000 reserves 1 ports, but node a runs 2 tasks: give srun "
                 "--resv-ports=2");
  l.resv_ports = "23000-22000";
  bad_layout(&l, "SLURM_STEP_RESV_PORTS:1:7: expected a port of 23000..65535");
  l.resv_ports = "0";
  bad_layout(&l, "SLURM_STEP_RESV_PORTS:1:1: expected a port of 1..65535");
  l.resv_ports = NULL;
  l.base_port = 65535;
  bad_layout(&l, "slurm: 4 tasks on 2 nodes need ports 65535..65536, above 65535");
  l.base_port = 1;
  l.jobs = "ps:1,worker:1";
  bad_layout(&l, "slurm jobs \"ps:1,worker:1\":1:1: the jobs have 2 tasks, SLURM_STEP_NUM_TASKS=4");
  l.jobs = NULL;
  l.job_level = true;
  l.tasks_per_node = "1";
  bad_layout(&l, "SLURM_TASKS_PER_NODE=\"1\" gives 1 nodes, the node list has 2");
  l.nodelist = "a[";
  bad_layout(&l, "SLURM_JOB_NODELIST:1:2: '[' is not closed");
}

static void test_task_of_rank(void) {
  char job[GR_DEVICE_JOB_MAX];
  int index = -1;
  gr_error err;
  GR_CHECK_OK(gr_cluster_task_of_rank("ps:2,worker", 5, 3, "mpi", "OMPI_COMM_WORLD_SIZE", job,
                                      &index, &err),
              err);
  GR_CHECK(!strcmp(job, "worker") && index == 1);
  GR_CHECK_OK(gr_cluster_task_of_rank(NULL, 5, 4, "mpi", "PMI_SIZE", job, &index, &err), err);
  GR_CHECK(!strcmp(job, "worker") && index == 4);
  GR_CHECK(gr_cluster_task_of_rank("ps:1,worker:3", 5, 0, "mpi", "OMPI_COMM_WORLD_SIZE", job,
                                   &index, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "mpi jobs \"ps:1,worker:3\":1:1: the jobs have 4 tasks, "
                                 "OMPI_COMM_WORLD_SIZE=5");
  GR_CHECK(gr_cluster_task_of_rank(NULL, 2, 2, "mpi", "PMI_SIZE", job, &index, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "rank 2: must be in 0..1 (PMI_SIZE=2)");
}

static const char *const slurm_vars[] = {"SLURM_STEP_NUM_TASKS",
                                         "SLURM_STEP_NODELIST",
                                         "SLURM_STEP_TASKS_PER_NODE",
                                         "SLURM_STEP_RESV_PORTS",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_TASKS_PER_NODE",
                                         "SLURM_NTASKS",
                                         "SLURM_PROCID",
                                         "SLURM_LOCALID",
                                         "SLURM_NODEID",
                                         "SLURMD_NODENAME",
                                         "SLURM_DISTRIBUTION",
                                         "SLURM_DIST_PLANESIZE",
                                         NULL};

static void clear_slurm(void) {
  for (int i = 0; slurm_vars[i]; i++) unsetenv(slurm_vars[i]);
}

/* A task of `srun -n5` in an `sbatch -n8` job on 3 nodes: the step's own
 * variables, not the job's. */
static void test_step_env(void) {
  clear_slurm();
  setenv("SLURM_JOB_NODELIST", "cn[1-4]", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x4)", 1);
  setenv("SLURM_STEP_NODELIST", "cn[1-3]", 1);
  setenv("SLURM_STEP_NUM_TASKS", "5", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2),1", 1);
  setenv("SLURM_DISTRIBUTION", "block", 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURMD_NODENAME", "cn2", 1);
  gr_cluster *c = NULL;
  gr_cluster_self me;
  gr_error err;
  GR_CHECK_OK(gr_cluster_from_slurm_env("ps:1,worker", 2222, &c, &me, &err), err);
  if (c) {
    GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 5);
    check_task(c, 3, "worker", 2, "cn2", "cn2:2223");
    check_task(c, 4, "worker", 3, "cn3", "cn3:2222");
    GR_CHECK(!strcmp(me.job, "worker") && me.index == 2 && me.task == 3);
  }
  gr_cluster_free(c);
  /* reserved ports: the task's by its local index */
  setenv("SLURM_STEP_RESV_PORTS", "30000-30001", 1);
  GR_CHECK_OK(gr_cluster_from_slurm_env("ps:1,worker", 0, &c, &me, &err), err);
  if (c) check_task(c, 3, "worker", 2, "cn2", "cn2:30001");
  gr_cluster_free(c);
  unsetenv("SLURM_STEP_RESV_PORTS");
  /* Slurm ran it elsewhere than the layout says: refused, naming both */
  setenv("SLURMD_NODENAME", "cn1", 1);
  c = (gr_cluster *)1;
  GR_CHECK(gr_cluster_from_slurm_env("ps:1,worker", 2222, &c, &me, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(c == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURMD_NODENAME=cn1: Slurm runs task 3 on cn1, but "
                                 "SLURM_DISTRIBUTION=block over the step's nodes "
                                 "(SLURM_STEP_TASKS_PER_NODE=2(x2),1) puts it on cn2");
  setenv("SLURMD_NODENAME", "cn2", 1);
  setenv("SLURM_LOCALID", "0", 1);
  GR_CHECK(gr_cluster_from_slurm_env("ps:1,worker", 2222, &c, &me, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_LOCALID=0: task 3 is task 0 of its node, but "
                                 "SLURM_DISTRIBUTION=block");
  /* cyclic puts rank 3 first on cn1... */
  setenv("SLURM_DISTRIBUTION", "cyclic", 1);
  setenv("SLURMD_NODENAME", "cn1", 1);
  setenv("SLURM_LOCALID", "1", 1);
  GR_CHECK_OK(gr_cluster_from_slurm_env("ps:1,worker", 2222, &c, &me, &err), err);
  if (c) check_task(c, 3, "worker", 2, "cn1", "cn1:2223");
  gr_cluster_free(c);
  clear_slurm();
}

/* A batch script (or salloc shell) runs the client: no step, and no
 * SLURM_PROCID is needed when no task is asked for. */
static void test_batch_env(void) {
  clear_slurm();
  setenv("SLURM_JOB_NODELIST", "cn[1-2]", 1);
  setenv("SLURM_TASKS_PER_NODE", "2,1", 1); /* no SLURM_NTASKS (sbatch -N2 ...) */
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_from_slurm_env("ps:1,worker", 0, &c, NULL, &err), err);
  if (c) {
    GR_CHECK_EQ_INT(gr_cluster_num_tasks(c), 3);
    check_task(c, 2, "worker", 1, "cn2", NULL);
  }
  gr_cluster_free(c);
  gr_cluster_self me;
  c = (gr_cluster *)1;
  GR_CHECK(gr_cluster_from_slurm_env("ps:1,worker", 0, &c, &me, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "SLURM_PROCID is not set: this process is no task of a Slurm job");
  clear_slurm();
}

int main(void) {
  GR_RUN(test_node_lists);
  GR_RUN(test_distributions);
  GR_RUN(test_reserved_ports);
  GR_RUN(test_layout_errors);
  GR_RUN(test_task_of_rank);
  GR_RUN(test_step_env);
  GR_RUN(test_batch_env);
  return gr_test_finish();
}
