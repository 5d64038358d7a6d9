/* gt_net: hosts made of network namespaces (netns_harness.h). */
#include "netns_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define IP "/usr/sbin/ip"

static int pid;
static bool made;

int gt_ip(const char *fmt, ...) {
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
  for (int i = 0; i < n; i++) gt_ip("netns del %s", names[i]);
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

void gt_net_remove(void) {
  if (made) remove_namespaces(pid);
  made = false;
}

static void on_signal(int sig) {
  gt_net_remove();
  signal(sig, SIG_DFL);
  raise(sig);
}

int gt_netns_setup(void) {
  pid = (int)getpid();
  char probe[32];
  snprintf(probe, sizeof probe, "grt%dprobe", pid);
  if (geteuid() != 0 || access(IP, X_OK) != 0 || gt_ip("netns add %s", probe) != 0) {
    printf("SKIP: network namespaces are not available here (needs root and %s netns)\n", IP);
    return 77;
  }
  gt_ip("netns del %s", probe);
  remove_stale();
  atexit(gt_net_remove);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  return 0;
}

/* Namespace ns with a veth link "e" at addr/24 to port b<k> of the bridge. */
static bool join(const gt_net *n, const char *ns, const char *addr, int k) {
  return gt_ip("netns add %s", ns) == 0 && gt_ip("-n %s link set lo up", ns) == 0 &&
         gt_ip("-n %s link add e type veth peer name b%d netns %s", ns, k, n->sw) == 0 &&
         gt_ip("-n %s addr add %s/24 dev e", ns, addr) == 0 &&
         gt_ip("-n %s link set e up", ns) == 0 &&
         gt_ip("-n %s link set b%d master br0", n->sw, k) == 0 &&
         gt_ip("-n %s link set b%d up", n->sw, k) == 0;
}

bool gt_net_make(gt_net *n, int tasks) {
  memset(n, 0, sizeof *n);
  if (tasks > GT_NET_MAX_TASKS) return false;
  n->tasks = tasks;
  snprintf(n->sw, sizeof n->sw, "grt%dsw", pid);
  snprintf(n->client, sizeof n->client, "grt%dc", pid);
  snprintf(n->spare, sizeof n->spare, "grt%dx", pid);
  made = true;
  bool ok = gt_ip("netns add %s", n->sw) == 0 &&
            gt_ip("-n %s link add br0 type bridge", n->sw) == 0 &&
            gt_ip("-n %s link set br0 up", n->sw) == 0;
  for (int k = 0; k < tasks && ok; k++) {
    snprintf(n->task_ns[k], sizeof n->task_ns[k], "grt%dt%d", pid, k);
    snprintf(n->host[k], sizeof n->host[k], "10.213.0.%d", k + 1);
    ok = join(n, n->task_ns[k], n->host[k], k);
  }
  ok =
      ok && join(n, n->client, "10.213.0.100", tasks) && join(n, n->spare, GT_NET_SPARE, tasks + 1);
  if (!ok) fprintf(stderr, "cannot build the namespaces' network (bridge, veth)\n");
  return ok;
}

int gt_netns_enter(const char *ns) {
  char path[96];
  snprintf(path, sizeof path, "/run/netns/%s", ns);
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int to = open(path, O_RDONLY | O_CLOEXEC);
  bool ok = self >= 0 && to >= 0 && setns(to, CLONE_NEWNET) == 0;
  if (to >= 0) close(to);
  if (!ok && self >= 0) close(self);
  return ok ? self : -1;
}

void gt_netns_leave(int fd) {
  if (fd < 0) return;
  if (setns(fd, CLONE_NEWNET) != 0) abort(); /* the test would go on in the wrong network */
  close(fd);
}
