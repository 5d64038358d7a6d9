/* Hosts of their own for cluster tests: network namespaces (one per task,
 * one for the client and a spare one, a proxy's) joined by veth links to a
 * bridge in a "switch" namespace, each with an address of its own
 * (10.213.0.K for task K - 1, 10.213.0.100 for the client, GT_NETNS_SPARE
 * for the spare), and optionally an /etc/hosts of its own
 * (/etc/netns/NS/hosts, which `ip netns exec` mounts). Used by
 * test_dist_netns.c, test_dist_hosts.c and test_dist_netns_tls.c.
 *
 *   static gt_netns nn;
 *   int rc = gt_netns_start(&nn, 3, "the cut-link test");  // 77: skipped (root, ip netns)
 *   if (rc) return rc;                        // nn.ns[k], nn.host[k], nn.client
 *   ...                                       // ip netns exec nn.ns[k] graphrun server ...
 *   gt_netns_remove(&nn);                     // also at exit and on SIGINT/SIGTERM
 *
 * The namespaces are named after the test's pid (grt<pid>...); those of
 * runs that were killed are removed by gt_netns_remove_stale. */
#ifndef GT_NETNS_HARNESS_H
#define GT_NETNS_HARNESS_H

#include <stdbool.h>

#define GT_NETNS_MAX   8
#define GT_IP          "/usr/sbin/ip"
#define GT_NETNS_SPARE "10.213.0.50"

typedef struct gt_netns {
  int n;                       /* task namespaces */
  char sw[32], client[32];     /* the switch's and the client's */
  char spare[32];              /* a spare one, at GT_NETNS_SPARE */
  char ns[GT_NETNS_MAX][32];   /* task k's */
  char host[GT_NETNS_MAX][32]; /* its address, 10.213.0.(k+1) */
  const char *client_host;     /* 10.213.0.100 */
  bool made;
} gt_netns;

/* Runs `ip ARGS` quietly: its exit code. */
int gt_ip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Root and ip netns here? false (the reason printed, as a SKIP line) when not. */
bool gt_netns_available(void);
/* Removes the namespaces (and hosts files) of earlier runs whose process is gone. */
void gt_netns_remove_stale(void);
/* n (at most GT_NETNS_MAX) task namespaces, the client's, the spare and the switch. */
bool gt_netns_make(gt_netns *nn, int n);
/* ns's own /etc/hosts (text), read by the processes `ip netns exec ns` runs. */
bool gt_netns_hosts(const gt_netns *nn, const char *ns, const char *text);
void gt_netns_remove(gt_netns *nn);
/* All of it for a test's main: available (else a SKIP line naming `what`:
 * 77), stale ones removed, nn's removal at exit and on SIGINT and SIGTERM,
 * then made (1 when that fails, said). 0: ready. */
int gt_netns_start(gt_netns *nn, int n, const char *what);
/* The calling thread enters namespace ns (the sockets and threads it makes
 * from then on are there): the descriptor to come back with, or -1. */
int gt_netns_enter(const char *ns);
/* ... and comes back (closes fd; fd < 0: nothing to do). */
void gt_netns_leave(int fd);

#endif
