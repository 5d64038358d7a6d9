/* A cluster across hosts for real: three tasks and the client in network
 * namespaces of their own (netns_harness.h), each with its own address and
 * its own /etc/hosts, where (as Debian writes it) the host's own name maps
 * to 127.0.1.1 and the others' names to their addresses.
 *
 * - From TF_CONFIG: a server that would listen on its own name (127.0.1.1,
 *   which no other host reaches) is refused, saying why; with --bind
 *   0.0.0.0:2222 the tasks serve, and a client in a fourth namespace gets
 *   238 from cluster_basics.gr and trains Fashion-MNIST for 50 steps to the
 *   loss of a one-process run, bit for bit. A spec naming a task "localhost"
 *   in that cluster is refused by the client, saying why.
 * - From Slurm's variables (as srun sets them on three nodes): each server
 *   takes a free port and tells the rendezvous where it is reached: by its
 *   node's name (listening on every interface), by --interface's address, by
 *   --advertise; the client, like a batch script, reads the rendezvous: 238
 *   and the same training. A task advertised as "localhost" is refused.
 *
 * Needs root and `ip netns`; without them it says why and exits 77. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "netns_harness.h"
#include "test_proc.h"
#include "test_util.h"

#define NT    3
#define STEPS "50"

static gt_netns net;
static char dir[PATH_MAX], secret[PATH_MAX + 16], basics[PATH_MAX], fashion[PATH_MAX];
static double one_loss; /* the one-process run's */

/* Each namespace's /etc/hosts: its own name on 127.0.1.1 (k < 0: the client's, none). */
static bool write_hosts(void) {
  bool ok = true;
  for (int k = -1; k < NT && ok; k++) {
    char text[512];
    size_t n = (size_t)snprintf(text, sizeof text, "127.0.0.1 localhost\n");
    for (int j = 0; j < NT; j++)
      n += (size_t)snprintf(text + n, sizeof text - n, "%s node%d\n",
                            j == k ? "127.0.1.1" : net.host[j], j);
    ok = gt_netns_hosts(&net, k < 0 ? net.client : net.ns[k], text);
  }
  return ok;
}

/* Starts `graphrun ARGS` in namespace ns with environment entries env (NULL-ended). */
static void start_in(gt_proc *p, const char *ns, char *const *env, char *const *args) {
  char *argv[48] = {GT_IP, "netns", "exec", (char *)ns, "/usr/bin/env"};
  int n = 5;
  for (int i = 0; env && env[i] && n < 30; i++) argv[n++] = env[i];
  argv[n++] = (char *)gt_graphrun_exe();
  for (int i = 0; args[i] && n < 47; i++) argv[n++] = args[i];
  argv[n] = NULL;
  gt_proc_start(p, argv);
}

/* Runs it to its end (bounded): its exit code. */
static int run_in(gt_proc *p, const char *ns, char *const *env, char *const *args) {
  start_in(p, ns, env, args);
  bool ended = gt_proc_wait(p, NULL, 300);
  gt_proc_finish(p);
  return ended ? gt_proc_exit_code(p) : -1;
}

/* SIGTERM, a clean stop (exit 0), reaped. */
static void stop(gt_proc *srv, int n) {
  for (int k = 0; k < n; k++) {
    if (!srv[k].done) kill(srv[k].pid, SIGTERM);
    bool ended = gt_proc_wait(&srv[k], NULL, 20);
    gt_proc_finish(&srv[k]);
    GR_CHECK_MSG(ended && gt_proc_exit_code(&srv[k]) == 0, "task %d did not stop cleanly:\n%s", k,
                 srv[k].buf);
  }
}

/* The client: 238, then the training's loss equal to one process's. */
static void check_client(char *const *env, const char *spec) {
  gt_proc cl;
  char *basics_args[] = {"run", basics, "--cluster", (char *)spec, NULL};
  int rc = run_in(&cl, net.client, env, basics_args);
  GR_CHECK_MSG(rc == 0 && strstr(cl.buf, "y = 238.0\n"), "%s: exit %d:\n%s", spec, rc, cl.buf);
  char *train_args[] = {"run", fashion, "--cluster", (char *)spec, "--steps", STEPS, NULL};
  rc = run_in(&cl, net.client, env, train_args);
  double loss[2];
  GR_CHECK_MSG(rc == 0 && gt_output_values(cl.buf, "loss", loss, 2) == 1 && loss[0] == one_loss,
               "%s: exit %d, want loss %.9g:\n%s", spec, rc, one_loss, cl.buf);
}

static void test_tf_config(void) {
  char tf[NT][512], env_tf[NT][560], env_secret[PATH_MAX + 40];
  const char *cluster = "{\"ps\": [\"node0:2222\"], \"worker\": [\"node1:2222\", \"node2:2222\"]}";
  snprintf(env_secret, sizeof env_secret, "GRAPHRUN_SECRET_FILE=%s", secret);
  for (int k = 0; k < NT; k++) {
    snprintf(tf[k], sizeof tf[k], "{\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}",
             cluster, k ? "worker" : "ps", k ? k - 1 : 0);
    snprintf(env_tf[k], sizeof env_tf[k], "TF_CONFIG=%s", tf[k]);
  }
  /* its own name is 127.0.1.1 here: refused, with the reason and the fix */
  gt_proc srv[NT];
  char *refused_env[] = {env_tf[0], env_secret, NULL};
  int rc = run_in(&srv[0], net.ns[0], refused_env, (char *[]){"server", "--cluster", "env", NULL});
  GR_CHECK_MSG(rc == 2, "exit %d:\n%s", rc, srv[0].buf);
  GR_CHECK_STR_CONTAINS(srv[0].buf, "/job:ps/task:0 would listen on node0:2222, which is 127.0.1.1 "
                                    "here, a loopback address");
  GR_CHECK_STR_CONTAINS(srv[0].buf, "the other hosts could not reach it. Listen on every interface "
                                    "with --bind 0.0.0.0:2222");
  /* nothing listens yet: refused, naming the task and its address; a host
   * whose link is down: nothing answers */
  gt_proc cl;
  char *client_env[] = {env_tf[1], env_secret, NULL};
  char *early[] = {"run", basics, "--cluster", "env", "--timeout", "2", NULL};
  rc = run_in(&cl, net.client, client_env, early);
  GR_CHECK_MSG(rc == 1, "exit %d:\n%s", rc, cl.buf);
  GR_CHECK_STR_CONTAINS(cl.buf, "graphrun run: /job:ps/task:0: cannot connect to node0:2222 "
                                "within 2000 ms: nothing listens there (connection refused");
  GR_CHECK(gt_ip("-n %s link set b0 down", net.sw) == 0);
  rc = run_in(&cl, net.client, client_env, early);
  GR_CHECK(gt_ip("-n %s link set b0 up", net.sw) == 0);
  GR_CHECK_STR_CONTAINS(cl.buf, "graphrun run: /job:ps/task:0: cannot connect to node0:2222 "
                                "within 2000 ms: nothing answered (connection timed out");
  /* on every interface, as TensorFlow's servers */
  for (int k = 0; k < NT; k++) {
    char *env[] = {env_tf[k], env_secret, NULL};
    start_in(&srv[k], net.ns[k], env,
             (char *[]){"server", "--cluster", "env", "--bind", "0.0.0.0:2222", "--quiet", NULL});
  }
  bool up = true;
  for (int k = 0; k < NT; k++)
    up = gt_proc_wait_line(&srv[k], "listening on 0.0.0.0:2222", 30) && up;
  GR_CHECK_MSG(up, "the servers did not start:\n%s\n%s\n%s", srv[0].buf, srv[1].buf, srv[2].buf);
  if (up) check_client(client_env, "env");
  /* "localhost" in a cluster spanning hosts: each host would read it as itself */
  char *local_args[] = {
      "run", basics, "--cluster",
      "{\"ps\": [\"localhost:2222\"], \"worker\": [\"node1:2222\", \"node2:2222\"]}", NULL};
  rc = run_in(&cl, net.client, client_env, local_args);
  GR_CHECK_MSG(rc == 2, "exit %d:\n%s", rc, cl.buf);
  GR_CHECK_STR_CONTAINS(cl.buf, "/job:ps/task:0 is at localhost:2222, a loopback address, but the "
                                "cluster spans hosts (/job:worker/task:0 is on node1, 10.213.0.2)");
  stop(srv, NT);
}

static void test_slurm_variables(void) {
  char job[32], submit[PATH_MAX + 32], rank[NT][32], node[NT][48];
  snprintf(job, sizeof job, "SLURM_JOB_ID=%d", (int)getpid());
  snprintf(submit, sizeof submit, "SLURM_SUBMIT_DIR=%s", dir);
  char *step[] = {job,
                  submit,
                  "SLURM_STEP_ID=0",
                  "SLURM_STEP_NUM_TASKS=3",
                  "SLURM_STEP_NUM_NODES=3",
                  "SLURM_STEP_NODELIST=node[0-2]",
                  "SLURM_STEP_TASKS_PER_NODE=1(x3)",
                  "SLURM_DISTRIBUTION=block",
                  "SLURM_LOCALID=0",
                  NULL,
                  NULL,
                  NULL};
  gt_proc srv[NT];
  for (int k = 0; k < NT; k++) {
    snprintf(rank[k], sizeof rank[k], "SLURM_PROCID=%d", k);
    snprintf(node[k], sizeof node[k], "SLURMD_NODENAME=node%d", k);
  }
  step[9] = rank[0], step[10] = node[0];
  /* advertised as localhost on a step of three nodes: refused */
  int rc = run_in(
      &srv[0], net.ns[0], step,
      (char *[]){"server", "--cluster", "slurm:ps:1,worker", "--advertise", "localhost", NULL});
  GR_CHECK_MSG(rc == 2, "exit %d:\n%s", rc, srv[0].buf);
  GR_CHECK_STR_CONTAINS(srv[0].buf, "this task would be reached at localhost, a loopback address, "
                                    "but its launch spans hosts");
  /* by its node's name (on every interface), by an interface, by --advertise */
  char *const extra[NT][8] = {{NULL},
                              {"--interface", "e", NULL},
                              {"--bind", "0.0.0.0:0", "--advertise", net.host[2], NULL}};
  for (int k = 0; k < NT; k++) {
    char *args[16] = {"server", "--cluster", "slurm:ps:1,worker", "--quiet"};
    int n = 4;
    for (int i = 0; extra[k][i]; i++) args[n++] = extra[k][i];
    args[n] = NULL;
    step[9] = rank[k], step[10] = node[k];
    start_in(&srv[k], net.ns[k], step, args);
  }
  const char *want[NT] = {
      "listening on 0.0.0.0:", "listening on 10.213.0.2:", "listening on 0.0.0.0:"};
  const char *reached[NT] = {
      ", reached at node0:", ", reached at 10.213.0.2:", ", reached at 10.213.0.3:"};
  bool up = true;
  for (int k = 0; k < NT; k++) {
    up = gt_proc_wait_line(&srv[k], want[k], 30) && up;
    GR_CHECK_STR_CONTAINS(srv[k].buf, reached[k]);
  }
  GR_CHECK_MSG(up, "the servers did not start:\n%s\n%s\n%s", srv[0].buf, srv[1].buf, srv[2].buf);
  /* the client as a batch script sees the job: no step, no SLURM_PROCID */
  char *batch[] = {job, submit, "SLURM_JOB_NODELIST=node[0-2]", "SLURM_NTASKS=3", NULL};
  if (up) check_client(batch, "slurm:ps:1,worker");
  stop(srv, NT);
}

int main(void) {
  gt_proc_isolate();
  double t0 = gt_now();
  int rc = gt_netns_start(&net, NT, "the cross-host test");
  if (rc) return rc;
  snprintf(dir, sizeof dir, "/tmp/gr_hosts_%d", (int)getpid());
  gt_remove_tree(dir);
  mkdir(dir, 0700);
  snprintf(secret, sizeof secret, "%s/secret", dir);
  gt_write_file(dir, "secret", "0123456789abcdef0123456789abcdef\n");
  chmod(secret, 0600);
  snprintf(basics, sizeof basics, "%s/examples/cluster_basics.gr", GR_SOURCE_DIR);
  snprintf(fashion, sizeof fashion, "%s/examples/fashion_mlp_cluster.gr", GR_SOURCE_DIR);
  if (!write_hosts()) {
    gt_netns_remove(&net);
    fprintf(stderr, "cannot write the namespaces' /etc/netns/NS/hosts\n");
    return 1;
  }
  gt_proc one; /* the loss the cluster runs must give */
  gt_proc_start(&one,
                (char *[]){"graphrun", "run", fashion, "--soft-placement", "--steps", STEPS, NULL});
  bool ended = gt_proc_wait(&one, NULL, 300);
  gt_proc_finish(&one);
  GR_CHECK_MSG(ended && gt_output_values(one.buf, "loss", &one_loss, 1) == 1, "one process:\n%s",
               one.buf);
  GR_RUN(test_tf_config);
  GR_RUN(test_slurm_variables);
  gt_netns_remove(&net);
  gt_remove_tree(dir);
  printf("cross-host test: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}
