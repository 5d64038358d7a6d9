/* Hosts made of Linux network namespaces, for tests that need real network
 * stacks between processes (test_dist_netns, test_dist_netns_tls): a
 * "switch" namespace with a bridge, and a namespace per task, one for the
 * client and one spare (a proxy's), each joined to the bridge by a veth
 * link: 10.213.0.1.. the tasks, .100 the client, .50 the spare.
 *
 *   int rc = gt_netns_setup();          // 77 (skip, with a line): not available
 *   if (rc) return rc;
 *   gt_net n;
 *   if (!gt_net_make(&n, 4)) ...;
 *   ... ip netns exec n.task_ns[k] graphrun server --bind n.host[k]:0 ...
 *   gt_net_remove();                     // also at exit and on SIGINT/SIGTERM
 *
 * Needs root and `ip netns`. The namespaces are named after this process
 * (grt<pid>...), removed at the end, also when a check fails; those left
 * by a run that was killed are removed by the next run's setup. */
#ifndef GT_NETNS_HARNESS_H
#define GT_NETNS_HARNESS_H

#include <stdbool.h>

#define GT_NET_MAX_TASKS 8
#define GT_NET_SPARE     "10.213.0.50"

typedef struct gt_net {
  int tasks;
  char sw[32];                        /* the switch's namespace */
  char client[32];                    /* the client's */
  char spare[32];                     /* a spare one, at GT_NET_SPARE */
  char task_ns[GT_NET_MAX_TASKS][32]; /* each task's */
  char host[GT_NET_MAX_TASKS][32];    /* and its address there */
} gt_net;

/* 0 when namespaces can be made (stale ones of killed runs are removed,
 * and the cleanup is installed); else 77 after a line saying why. */
int gt_netns_setup(void);
/* The switch and the namespaces of `tasks` tasks, the client and the spare
 * one; false (with a line on stderr) on failure. */
bool gt_net_make(gt_net *n, int tasks);
/* Removes every namespace of this process. */
void gt_net_remove(void);
/* Runs `ip ARGS` (quietly): its exit code. */
int gt_ip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This thread enters namespace ns (sockets and threads it makes from then
 * on are there): the descriptor to return with, or -1. */
int gt_netns_enter(const char *ns);
/* ... and returns (closes fd). */
void gt_netns_leave(int fd);

#endif
