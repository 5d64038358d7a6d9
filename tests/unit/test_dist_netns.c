/* A cut network link between real network stacks: each task of a 2 ps + 2
 * worker cluster and the client run in network namespaces of their own,
 * joined by veth links to a bridge in a "switch" namespace; the test takes
 * one task's link down (ip link set down: its packets vanish, no reset,
 * no end of file), expects the client's heartbeats to find the task
 * silent and fail the step naming it, brings the link up again, and
 * expects the run to recover and end with the weights of an uncut run, bit
 * for bit.
 *
 * Needs root and `ip netns`; without them it says why and exits 77, which
 * ctest reports as skipped (SKIP_RETURN_CODE), never as passed. The
 * namespaces are named after this process (grt<pid>...) and removed at the
 * end, also when a check fails; namespaces left by a run that was killed
 * are removed by the next run. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_harness.h"
#include "gr_test.h"

#define NT         4 /* tasks */
#define STEPS      300
#define SAVE_EVERY 50
#define IP         "/usr/sbin/ip"

static int pid;
static char sw[32], client[32], task_ns[NT][32], host[NT][32];
static bool made;

/* Runs an ip command (quietly); its exit code. */
static int ip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ip(const char *fmt, ...) {
  char cmd[512];
  int n = snprintf(cmd, sizeof cmd, "%s ", IP);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  strncat(cmd, " >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
  int rc = system(cmd);
  return rc == -1 ? -1 : WEXITSTATUS(rc);
}

static void remove_namespaces(int owner) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "grt%d", owner);
  DIR *d = opendir("/run/netns");
  if (!d) return;
  struct dirent *e;
  char names[64][64];
  int n = 0;
  while ((e = readdir(d)) && n < 64)
    if (!strncmp(e->d_name, prefix, strlen(prefix)) && strlen(e->d_name) < 64)
      snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  closedir(d);
  for (int i = 0; i < n; i++) ip("netns del %s", names[i]);
}

/* Namespaces of earlier runs whose process is gone (killed by a timeout). */
static void remove_stale(void) {
  DIR *d = opendir("/run/netns");
  if (!d) return;
  struct dirent *e;
  int owners[64], n = 0;
  while ((e = readdir(d)) && n < 64) {
    int owner;
    char rest[32];
    if (sscanf(e->d_name, "grt%d%31s", &owner, rest) == 2 && owner != pid && kill(owner, 0) != 0 &&
        errno == ESRCH)
      owners[n++] = owner;
  }
  closedir(d);
  for (int i = 0; i < n; i++) remove_namespaces(owners[i]);
}

static void cleanup(void) {
  if (made) remove_namespaces(pid);
  made = false;
}

static void on_signal(int sig) {
  cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* The switch (a bridge), the client's and each task's namespace, a veth
 * link from each to the bridge: 10.213.0.1-4 the tasks, .100 the client. */
static bool make_network(void) {
  snprintf(sw, sizeof sw, "grt%dsw", pid);
  snprintf(client, sizeof client, "grt%dc", pid);
  made = true;
  bool ok = ip("netns add %s", sw) == 0 && ip("-n %s link add br0 type bridge", sw) == 0 &&
            ip("-n %s link set br0 up", sw) == 0;
  for (int k = 0; k <= NT && ok; k++) {
    char ns[32], addr[32];
    if (k < NT) {
      snprintf(task_ns[k], sizeof task_ns[k], "grt%dt%d", pid, k);
      snprintf(host[k], sizeof host[k], "10.213.0.%d", k + 1);
    }
    snprintf(ns, sizeof ns, "%s", k < NT ? task_ns[k] : client);
    snprintf(addr, sizeof addr, "10.213.0.%d/24", k < NT ? k + 1 : 100);
    /* the link: "e" in ns, "b<k>" on the switch's bridge */
    ok = ip("netns add %s", ns) == 0 && ip("-n %s link set lo up", ns) == 0 &&
         ip("-n %s link add e type veth peer name b%d netns %s", ns, k, sw) == 0 &&
         ip("-n %s addr add %s dev e", ns, addr) == 0 && ip("-n %s link set e up", ns) == 0 &&
         ip("-n %s link set b%d master br0", sw, k) == 0 && ip("-n %s link set b%d up", sw, k) == 0;
  }
  return ok;
}

static bool start(gt_cluster *c) {
  gt_cluster_options o = {.ps = 2, .workers = 2, .client_netns = client};
  for (int k = 0; k < NT; k++) o.netns[k] = task_ns[k], o.host[k] = host[k];
  return gt_cluster_start(c, &o);
}

static void test_cut_link(void) {
  char ref[PATH_MAX];
  snprintf(ref, sizeof ref, "/tmp/gr_netns_ref_%d", pid);
  mkdir(ref, 0700);
  gt_cluster c;
  bool ok = start(&c);
  GR_CHECK_MSG(ok, "no cluster in the namespaces");
  gt_proc run;
  if (ok) { /* the uncut run */
    gt_cluster_run_mlp(&c, &run, ref, STEPS, SAVE_EVERY, NULL);
    ok = gt_proc_wait(&run, NULL, 120);
    gt_proc_finish(&run);
    ok = ok && gt_proc_exit_code(&run) == 0;
    GR_CHECK_MSG(ok, "the uncut run failed:\n%s", run.buf);
  }
  gt_cluster_stop(&c);
  int victim = 1; /* ps:1 */
  ok = ok && start(&c);
  if (ok) {
    gt_cluster_run_mlp(&c, &run, "cut", STEPS, SAVE_EVERY, NULL);
    ok = gt_proc_wait_line(&run, "saved a checkpoint after step 100 ", 60);
    GR_CHECK_MSG(ok, "no training:\n%s", run.buf);
    size_t mark = run.len;
    double t_cut = gt_now();
    ok = ok && ip("-n %s link set b%d down", sw, victim) == 0;
    char want[160];
    snprintf(want, sizeof want, " failed: lost %s (%s): no answer for ", c.name[victim],
             c.addr[victim]);
    /* found by the heartbeats ("no answer for"), not by the step timeout
     * (30 s): the bound holds on a busy machine; idle, it is ~0.5 s */
    double detect = ok ? gt_wait_line_after(&run, mark, want, t_cut, 20) : -1;
    GR_CHECK_MSG(detect >= 0, "not detected by the heartbeats within 20 s: '%s'\n%s", want,
                 run.buf + mark);
    usleep(300000);
    double t_up = gt_now();
    GR_CHECK(ip("-n %s link set b%d up", sw, victim) == 0);
    double rec = detect >= 0 ? gt_wait_line_after(&run, mark, "recovered in ", t_up, 60) : -1;
    GR_CHECK_MSG(rec >= 0, "no recovery:\n%s", run.buf + mark);
    GR_CHECK_MSG(gt_proc_wait(&run, NULL, 120), "no end:\n%s", run.buf);
    gt_proc_finish(&run);
    GR_CHECK_MSG(gt_proc_exit_code(&run) == 0, "exit %d:\n%s", gt_proc_exit_code(&run), run.buf);
    char out[PATH_MAX];
    gt_cluster_path(&c, "cut", out, sizeof out);
    GR_CHECK(gt_same_weights(ref, out));
    printf("link of %s cut: detected in %.0f ms, recovered %.0f ms after the link came up\n",
           c.task[victim], detect * 1000, rec * 1000);
  }
  gt_cluster_stop(&c);
  gt_remove_tree(ref);
}

int main(void) {
  pid = (int)getpid();
  gt_proc_isolate();
  char probe[32];
  snprintf(probe, sizeof probe, "grt%dprobe", pid);
  if (geteuid() != 0 || access(IP, X_OK) != 0 || ip("netns add %s", probe) != 0) {
    printf("SKIP: network namespaces are not available here (needs root and %s netns); "
           "the cut-link test did not run\n",
           IP);
    return 77;
  }
  ip("netns del %s", probe);
  remove_stale();
  atexit(cleanup);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  double t0 = gt_now();
  bool net = make_network();
  if (!net) {
    cleanup();
    fprintf(stderr, "cannot build the namespaces' network (bridge, veth)\n");
    return 1;
  }
  GR_RUN(test_cut_link);
  cleanup();
  printf("netns test: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}
