/* A cluster of `graphrun server` processes for the fault tests, started by
 * the test itself (not by `graphrun launch`) so that it can put a
 * fault-injecting proxy (fault_proxy.h) in front of every task or run each
 * task in a network namespace of its own; and the recovery-test training
 * (tests/data/recovery_mlp.gr) run against it, its final weights written as
 * .npy files to compare bit for bit.
 *
 *   gt_cluster c;
 *   if (gt_cluster_start(&c, &(gt_cluster_options){.ps = 2, .workers = 2, .proxies = true})) {
 *     gt_proc run;
 *     gt_cluster_run_mlp(&c, &run, "out", 300, NULL);   // graphrun run ... --cluster c.spec
 *     ... gt_proxy_fault(c.px[1], ...) ...
 *   }
 *   gt_cluster_stop(&c);   // always: kills and reaps every process, removes c.dir
 */
#ifndef GT_CLUSTER_HARNESS_H
#define GT_CLUSTER_HARNESS_H

#include <limits.h>
#include <stdbool.h>

#include "fault_proxy.h"
#include "test_proc.h"
#include "test_util.h" /* gt_remove_tree */

#define GT_MAX_TASKS 8

typedef struct gt_cluster_options {
  int ps, workers;
  bool proxies;                    /* a gt_proxy in front of every task */
  const char *netns[GT_MAX_TASKS]; /* task k runs in this namespace (ip netns exec) */
  const char *host[GT_MAX_TASKS];  /* and listens there (default 127.0.0.1) */
  const char *client_netns;        /* where gt_cluster_run_mlp runs the client (ip netns exec) */
  int threads;                     /* each server's --threads (0: 1) */
  int devices[GT_MAX_TASKS];       /* task k's --devices (0: 1) */
  bool quiet;                      /* servers log no line per connection (--quiet) */
  const char *const *server_args;  /* more arguments of every server (NULL-terminated; at most
                                      8), e.g. --tls-cert F --tls-key F --tls-ca F */
} gt_cluster_options;

typedef struct gt_cluster {
  int n, ps;             /* tasks: the ps first, then the workers */
  char dir[64];          /* a fresh temporary directory: the secret, checkpoints, outputs */
  char secret[PATH_MAX]; /* the shared secret's file (0600) */
  char cluster_id[48];   /* the servers' --cluster-id (their spec is known only once they
                            listen): a client gives the same */
  gt_proc srv[GT_MAX_TASKS];
  bool started[GT_MAX_TASKS];
  char task[GT_MAX_TASKS][16];  /* "ps:0" */
  char name[GT_MAX_TASKS][64];  /* "/job:ps/replica:0/task:0" */
  char addr[GT_MAX_TASKS][64];  /* where the task listens */
  char given[GT_MAX_TASKS][64]; /* its address in the spec: its proxy's, when there is one */
  gt_proxy *px[GT_MAX_TASKS];
  char spec[2048]; /* a ClusterSpec with the given addresses */
  char client_netns[64];
} gt_cluster;

/* Starts the tasks (and proxies) and waits until each listens; false (with
 * a line on stderr) on failure, after which gt_cluster_stop still cleans up. */
bool gt_cluster_start(gt_cluster *c, const gt_cluster_options *o);
/* Kills (SIGKILL) and reaps every server, stops the proxies, removes c->dir. */
void gt_cluster_stop(gt_cluster *c);
/* Clients reach task k at addr from now on (a proxy of the test's): the
 * spec gives it. */
void gt_cluster_route(gt_cluster *c, int k, const char *addr);
/* c->dir/name */
void gt_cluster_path(const gt_cluster *c, const char *name, char *buf, size_t cap);

/* Starts `graphrun run tests/data/recovery_mlp.gr` for `steps` steps on c
 * (--cluster c->spec --secret-file c->secret --cluster-id c->cluster_id)
 * (checkpoints in c->dir/ckpt_NAME every save_every steps, the final weights as
 * .npy files into the directory NAME, in c->dir unless absolute),
 * recovering from lost tasks; `extra`: more arguments (NULL-terminated) or
 * NULL. */
void gt_cluster_run_mlp(const gt_cluster *c, gt_proc *p, const char *name, int steps,
                        int save_every, const char *const *extra);
/* The same training under `graphrun launch LAUNCH_FLAGS... FILE RUN_FLAGS...`
 * (both lists NULL-terminated or NULL) instead of against a gt_cluster:
 * launch starts and restarts the tasks; checkpoints and weights go into
 * dir as above, no --cluster, and no --max-failures unless extra gives it. */
void gt_launch_run_mlp(gt_proc *p, const char *dir, const char *name, int steps, int save_every,
                       const char *const *launch_flags, const char *const *extra);
/* The weights written into directories a and b are equal byte for byte;
 * prints what differs. */
bool gt_same_weights(const char *a, const char *b);
/* Seconds from `since` until a whole line holding `want` has arrived after
 * offset `from` of p's output (waiting at most `seconds`), or -1. */
double gt_wait_line_after(gt_proc *p, size_t from, const char *want, double since, double seconds);
/* Where line `want` (after offset from) appears in p's output, or NULL. */
const char *gt_find_after(const gt_proc *p, size_t from, const char *want);

/* The loss of a `graphrun run --json` output (its "{\"loss\": ..." up to
 * the first '}') into buf; false when there is none. */
bool gt_json_loss(const char *out, char *buf, size_t cap);

/* A uniform random integer in [lo, hi] from the test's seeded stream. */
int gt_rand_between(unsigned long long *state, int lo, int hi);

#endif
