/* Network namespaces as hosts for cluster tests (netns_harness.h). */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h" /* gt_remove_tree */

int gt_ip(const char *fmt, ...) {
  char cmd[512];
  int n = snprintf(cmd, sizeof cmd, "%s ", GT_IP);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  strncat(cmd, " >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
  int rc = system(cmd);
  return rc == -1 ? -1 : WEXITSTATUS(rc);
}

bool gt_netns_available(void) {
  char probe[32];
  snprintf(probe, sizeof probe, "grt%dprobe", (int)getpid());
  if (geteuid() != 0 || access(GT_IP, X_OK) != 0 || gt_ip("netns add %s", probe) != 0) {
    printf("SKIP: network namespaces are not available here (needs root and %s netns)\n", GT_IP);
    return false;
  }
  gt_ip("netns del %s", probe);
  return true;
}

/* The namespaces (and their /etc/netns entries) named grt<owner>... */
static void remove_of(int owner) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "grt%d", owner);
  size_t pl = strlen(prefix);
  const char *dirs[] = {"/run/netns", "/etc/netns"};
  for (int k = 0; k < 2; k++) {
    DIR *d = opendir(dirs[k]);
    if (!d) continue;
    struct dirent *e;
    char names[64][64];
    int n = 0;
    while ((e = readdir(d)) && n < 64) /* the owner's own, not grt<owner>N's */
      if (!strncmp(e->d_name, prefix, pl) && !(e->d_name[pl] >= '0' && e->d_name[pl] <= '9') &&
          strlen(e->d_name) < 64)
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++) {
      char path[160];
      snprintf(path, sizeof path, "/etc/netns/%s", names[i]);
      if (k == 0)
        gt_ip("netns del %s", names[i]);
      else
        gt_remove_tree(path);
    }
  }
}

void gt_netns_remove_stale(void) {
  DIR *d = opendir("/run/netns");
  if (!d) return;
  struct dirent *e;
  int owners[64], n = 0;
  while ((e = readdir(d)) && n < 64) {
    int owner;
    char rest[32];
    if (sscanf(e->d_name, "grt%d%31s", &owner, rest) == 2 && owner != (int)getpid() &&
        kill(owner, 0) != 0 && errno == ESRCH)
      owners[n++] = owner;
  }
  closedir(d);
  for (int i = 0; i < n; i++) remove_of(owners[i]);
}

bool gt_netns_make(gt_netns *nn, int n) {
  int pid = (int)getpid();
  memset(nn, 0, sizeof *nn);
  nn->n = n;
  nn->client_host = "10.213.0.100";
  snprintf(nn->sw, sizeof nn->sw, "grt%dsw", pid);
  snprintf(nn->client, sizeof nn->client, "grt%dc", pid);
  snprintf(nn->spare, sizeof nn->spare, "grt%dx", pid);
  nn->made = true;
  bool ok = n <= GT_NETNS_MAX && gt_ip("netns add %s", nn->sw) == 0 &&
            gt_ip("-n %s link add br0 type bridge", nn->sw) == 0 &&
            gt_ip("-n %s link set br0 up", nn->sw) == 0;
  for (int k = 0; k <= n + 1 && ok; k++) { /* the tasks, the client, the spare */
    char ns[32], addr[32];
    if (k < n) {
      snprintf(nn->ns[k], sizeof nn->ns[k], "grt%dt%d", pid, k);
      snprintf(nn->host[k], sizeof nn->host[k], "10.213.0.%d", k + 1);
    }
    snprintf(ns, sizeof ns, "%s", k < n ? nn->ns[k] : k == n ? nn->client : nn->spare);
    if (k <= n)
      snprintf(addr, sizeof addr, "10.213.0.%d/24", k < n ? k + 1 : 100);
    else
      snprintf(addr, sizeof addr, "%s/24", GT_NETNS_SPARE);
    /* the link: "e" in ns, "b<k>" on the switch's bridge */
    ok = gt_ip("netns add %s", ns) == 0 && gt_ip("-n %s link set lo up", ns) == 0 &&
         gt_ip("-n %s link add e type veth peer name b%d netns %s", ns, k, nn->sw) == 0 &&
         gt_ip("-n %s addr add %s dev e", ns, addr) == 0 && gt_ip("-n %s link set e up", ns) == 0 &&
         gt_ip("-n %s link set b%d master br0", nn->sw, k) == 0 &&
         gt_ip("-n %s link set b%d up", nn->sw, k) == 0;
  }
  return ok;
}

bool gt_netns_hosts(const gt_netns *nn, const char *ns, const char *text) {
  char path[160];
  (void)nn;
  mkdir("/etc/netns", 0755);
  snprintf(path, sizeof path, "/etc/netns/%s", ns);
  mkdir(path, 0755);
  strncat(path, "/hosts", sizeof path - strlen(path) - 1);
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(text, f) >= 0;
  if (f) ok = fclose(f) == 0 && ok;
  return ok;
}

void gt_netns_remove(gt_netns *nn) {
  if (nn->made) remove_of((int)getpid());
  nn->made = false;
}

static gt_netns *current; /* removed at exit or on a signal */

static void remove_current(void) {
  if (current) gt_netns_remove(current);
}

static void on_signal(int sig) {
  remove_current();
  signal(sig, SIG_DFL);
  raise(sig);
}

int gt_netns_start(gt_netns *nn, int n, const char *what) {
  if (!gt_netns_available()) {
    printf("SKIP: %s did not run\n", what);
    return 77;
  }
  gt_netns_remove_stale();
  current = nn;
  atexit(remove_current);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  if (gt_netns_make(nn, n)) return 0;
  gt_netns_remove(nn);
  fprintf(stderr, "cannot build the namespaces' network (bridge, veth)\n");
  return 1;
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
