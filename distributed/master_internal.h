/* The master's internals shared by master.c (connections, requests),
 * master_dial.c (connecting), master_run.c (the session's remote runner),
 * master_lease.c,
 * master_place.c and master_reset.c. Which thread runs what, which lock
 * guards which field and the lock order (the master's mu before a group's):
 * docs/internals.md, "Threads and locks". Internal to distributed/. */
#ifndef GR_MASTER_INTERNAL_H
#define GR_MASTER_INTERNAL_H

#include <pthread.h>

#include "distributed/server_internal.h"

typedef struct rpc_group {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC, as every deadline (gr_wire_now_ms) */
  int outstanding;
  int losses; /* tasks lost while the group was waited for (gr_master_wait_all) */
  /* in the master's list of groups being waited for (under its mu) */
  struct rpc_group *wprev, *wnext;
} rpc_group;

typedef struct rpc { /* one request in flight */
  rpc_group *g;
  uint64_t id;
  int task;
  bool done;
  gr_status code; /* of the response, or of the transport */
  gr_error err;
  gr_inmsg *resp;    /* on success; the waiter frees it */
  bool lost;         /* failed because the task's connection was lost */
  int64_t failed_at; /* a multi-step RUN's failure: its iteration (else -1) */
} rpc;

typedef struct task {
  char address[128];
  char name[GR_TASK_NAME_MAX];
  uint64_t incarnation;
  char **devices;
  int num_devices;
  int threads, cores; /* its inter-op threads and its host's cores (0: not said) */
  gr_conn *conn;
  gr_map pending;   /* id -> rpc (under the master's mu) */
  gr_map abandoned; /* ids of step requests left unanswered -> the master (under its mu) */
  bool lost;
  char lost_why[GR_ERROR_MSG_MAX];
  /* heartbeats (network thread): pings sent since bytes last arrived, at
   * rx_ms */
  int pings;
  int64_t rx_ms;
} task;

struct gr_master {
  gr_master_options o;
  char *secret;                              /* NULL: insecure */
  char cluster[GR_CLUSTER_ID_MAX + 1];       /* its cluster id ("": none) */
  gr_tls *tls;                               /* with tasks on other hosts (NULL: none) */
  char container[GR_CONTAINER_NAME_MAX + 1]; /* its graphs' container on the tasks */
  bool private_container;                    /* its own (no name in the options) */
  gr_loop *loop;
  task *tasks;
  int num_tasks;
  const char **device_names;
  int num_devices;
  pthread_mutex_t mu;
  uint64_t next_id;
  gr_remote_runner runner;
  /* step requests the master stopped waiting for when a task of their step
   * was lost (under mu): their answers are awaited before anything else is
   * sent to the tasks, so a step never overlaps the previous one */
  int abandoned;
  int64_t abandoned_deadline_ms;
  pthread_cond_t abandoned_cv; /* on CLOCK_MONOTONIC */
  /* the groups being waited for (under mu), however many: a lost task wakes
   * them all, as a step whose part on that task has already answered must
   * still end */
  rpc_group *waiting;
};

/* Dials every task of ms (addresses set, connections NULL) at once and
 * attaches each connection to its task; the error is the lowest failing
 * task's (its address, prefixed by task_names[k] when given). The tasks not
 * dialled keep a NULL connection (master_dial.c). */
gr_status gr_master_dial_all(gr_master *ms, const char *const *task_names, const gr_conn_handler *h,
                             gr_error *err);
/* A new request id. */
uint64_t gr_master_new_id(gr_master *ms);
/* Sends msg (taken) to task k as request r (r->id set by the caller). */
void gr_master_start(gr_master *ms, int k, gr_outmsg *msg, rpc *r, rpc_group *g);
/* Waits for the n requests rs of g until deadline_ms (0: none); on_done(arg,
 * r) runs once per request as it completes (without locks held; a failure
 * at once, successes when the waiter next wakes: at the latest with the
 * group's last answer). Requests
 * not done by the deadline fail with GR_ERR_DEADLINE_EXCEEDED. When on_done
 * returns true, the wait ends at once: the requests not done yet fail with
 * GR_ERR_CANCELLED and are abandoned (gr_master_drain awaits their answers
 * until deadline_ms, or 60 s when it is 0). When a task is lost while the
 * wait goes on, on_done(arg, NULL) runs (the step may have used it even if
 * its own request is answered). */
void gr_master_wait_all(gr_master *ms, rpc_group *g, rpc *rs, int n, int64_t deadline_ms,
                        bool (*on_done)(void *, rpc *), void *arg);
/* Waits (bounded) until every abandoned request has been answered or its
 * task lost; called before the master sends anything new. */
void gr_master_drain(gr_master *ms);
void gr_rpc_group_init(rpc_group *g);
/* Initialises cv to time its waits on CLOCK_MONOTONIC (the clock of
 * gr_wire_now_ms): a step of the wall clock neither fires nor stalls them. */
void gr_master_cond_init(pthread_cond_t *cv);
/* Waits on cv (made by gr_master_cond_init) at most until deadline_ms of
 * gr_wire_now_ms. */
void gr_master_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms);
void gr_rpc_group_destroy(rpc_group *g);
/* The task index of a full device name, -1 when none. */
int gr_master_task_of(const gr_master *ms, const char *device);
/* Fills in the attr hosts of the partitions' collective nodes that have
 * none: each member's task's host, from its address
 * (master_collective.c). */
gr_status gr_master_collective_hosts(const gr_master *ms, gr_partitions *parts, gr_error *err);
/* The container a REGISTER or VARS names (borrowed from ms). */
gr_container_ref gr_master_container_ref(const gr_master *ms);

#endif
