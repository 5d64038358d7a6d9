/* The server (worker service), shared between its files: server.c (setup,
 * dispatch), server_register.c (registration, dialing peers),
 * server_step.c (steps and the push rendezvous), server_containers.c and
 * server_lease.c. Which thread runs what, which lock guards which field
 * and the lock order: docs/internals.md, "Threads and locks".
 * Internal to distributed/. */
#ifndef GR_SERVER_INTERNAL_H
#define GR_SERVER_INTERNAL_H

#include <pthread.h>

#include "core/core_engine.h"
#include "distributed/gr_distributed.h"
#include "distributed/loglimit_internal.h"
#include "distributed/msg_internal.h"
#include "distributed/tls_internal.h"
#include "distributed/transport_internal.h"

#define GR_SERVER_MAX_STEPS 4096  /* step states (running or parked) at once */
#define GR_SERVER_ID_WINDOW 65536 /* request ids a connection remembers */
/* a RUN frame up to this size is checked and started on the network thread */
#define GR_SERVER_INLINE_RUN_BYTES (64 * 1024)

typedef struct reg_wait reg_wait;

typedef struct peer { /* another task, as a registration named it */
  char name[GR_TASK_NAME_MAX];
  char address[128];
  uint64_t incarnation;
  gr_conn *conn;      /* outgoing, for pushes; NULL until dialed */
  gr_conn *in_conn;   /* the latest its pushes came over (a reference; NULL: none yet): a
                         multi-step RUN's DONEs go back over it when conn is not up */
  bool dialing;       /* a dial thread connects to it (server_register.c) */
  reg_wait **waiters; /* registrations that wait for that dial */
  int num_waiters, cap_waiters;
} peer;

/* A container (server_containers.c): the variables, queues and
 * accumulators of the graphs registered with it. */
typedef struct container {
  char name[GR_CONTAINER_NAME_MAX + 1];
  bool is_private;      /* a master's own: dropped when its connection closes */
  bool dropped;         /* out of the server's map (reset, or its owner gone; under s->mu) */
  const gr_conn *owner; /* private: the connection that made it (identity only) */
  gr_resource_mgr *rm;
  int refs; /* the server's map's and each registered graph's (atomic) */
} container;

/* A task a registration exchanges tensors with, for the flow control of
 * its multi-step RUNs (server_links.c): the first (send device, receive
 * device) pair of the transfers between the two, in strcmp order. */
typedef struct step_link {
  char task[GR_TASK_NAME_MAX];
  char send_dev[GR_DEVICE_NAME_MAX], recv_dev[GR_DEVICE_NAME_MAX];
} step_link;

typedef struct registered { /* the partitions a master registered */
  uint64_t handle;
  gr_device_plan *plan;
  int num_feeds; /* caller feeds the plan reads (largest feed_index + 1) */
  bool uses_stacks;
  int refs;             /* the server's map's and each running step's (atomic) */
  const gr_conn *owner; /* the client connection that registered it (identity only) */
  container *box;       /* where its steps' variables live (a reference) */
  step_link *to;        /* tasks its partitions push to: their DONEs are awaited */
  step_link *from;      /* tasks that push to its partitions: told DONE */
  int num_to, num_from;
} registered;

typedef struct step_state step_state;

#define GR_SERVER_MAX_LEASES 64 /* lease names a task keeps (server_lease.c) */
typedef struct gr_lease gr_lease;

struct gr_server {
  gr_server_options o;
  char task[GR_TASK_NAME_MAX]; /* "/job:worker/replica:0/task:1" */
  char **devices;
  int num_devices;
  uint64_t incarnation;
  int port;
  char *secret;                        /* NULL: insecure */
  char cluster[GR_CLUSTER_ID_MAX + 1]; /* its cluster id ("": none) */
  gr_tls *tls;                         /* with peers on other hosts (NULL: none) */
  gr_loop *loop;
  gr_listener *listener;
  gr_loglimit *logs;            /* gr_server_log's lines, rate-limited per call site (format) */
  gr_threadpool *register_pool; /* registrations (decoding, building executors) */
  gr_threadpool *work_pool;     /* steps' starts, pushed tensors and aborts (no waits) */
  gr_threadpool *exec_pool;     /* the executors' inter-op threads */
  int exec_threads;             /* how many (get_status says, for the placer) */
  pthread_mutex_t mu;           /* everything below */
  gr_map containers;            /* name -> container */
  gr_map graphs;                /* handle -> registered */
  uint64_t next_handle;
  peer *peers;
  int num_peers, cap_peers;
  gr_map steps;           /* run id -> step_state */
  gr_map runs;            /* run id -> the multi-step RUN of that first id (server_step.c) */
  bool work_closed;       /* multi-step RUNs start no more iterations (the server stops) */
  uint64_t finished[256]; /* recently finished run ids: late pushes are dropped */
  uint32_t finished_pos;  /* the next slot, mod 256 (unsigned: wraps, as 256 divides 2^32) */
  uint64_t step_seq;      /* creation order of step states (the oldest parked is evicted) */
  size_t parked_bytes, parked_max;
  int64_t sessions;
  int steps_running;      /* RUNs started and not yet answered */
  pthread_cond_t stopped; /* steps_running or dials fell to 0 */
  int dials;              /* dial threads running (server_register.c) */
  gr_lease *leases;       /* network thread only (server_lease.c) */
  int num_leases;
  /* its clients (gr_server_client_state), under mu: connections that sent
   * a request and are open; whether one registered a graph; when the last
   * closed (gr_wire_now_ms; 0: none yet) */
  int clients_open;
  bool served;
  int64_t clients_gone_at;
};

/* Answers request id on c with the error e (gr_server_answer). */
void gr_server_respond_error(gr_conn *c, uint64_t id, const gr_error *e);
/* Answers request id on c, always: sends resp (taken; from
 * a gr_*_resp_pack or gr_response_pack), or an error answer when resp is NULL (e; NULL: it
 * could not be built, out of memory) or cannot be sent (over the wire's
 * limits, out of memory); when not even that can be sent, fails c, so that
 * the peer's requests on it fail rather than wait forever. */
void gr_server_answer(gr_conn *c, uint64_t id, gr_outmsg *resp, const gr_error *e);

/* A log line "TASK: ..." through the options' log_fn (stderr when NULL),
 * rate-limited per format (a peer can cause most of them): at most 10
 * lines of one format per 10 s, then a count of those left out. */
void gr_server_log(const gr_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The task part of a full device name ("/job:w/replica:0/task:1"). */
void gr_task_of_device(const char *device, char *out, size_t cap);

/* A RUN began / was answered: gr_server_free waits until none is left. */
void gr_server_step_began(gr_server *s);
void gr_server_step_ended(gr_server *s);

/* Handlers on the server's pools; each takes m and a reference to c.
 * gr_server_run only starts the step; its completion answers, on the
 * thread that finishes it. */
void gr_server_run(gr_server *s, gr_conn *c, gr_inmsg *m);
void gr_server_push(gr_server *s, gr_conn *c, gr_inmsg *m);
/* A TENSOR frame's map has arrived (network thread): true when its step
 * expects that key's value in a buffer of its own (gr_rendezvous_expect_into)
 * and the frame's value is exactly such a body; *buf (a reference, taken
 * from the expectation, which is used up) and *off say where its bytes go. */
bool gr_server_push_into(gr_server *s, const gr_inmsg *m, gr_buffer **buf, size_t *off);
void gr_server_abort(gr_server *s, gr_conn *c, gr_inmsg *m);
void gr_server_register(gr_server *s, gr_conn *c, gr_inmsg *m);
/* Waits until no dial thread runs (no registration starts one any more). */
void gr_server_dials_wait(gr_server *s);
/* Drops the graphs a client registered through c (it disconnected). */
void gr_server_drop_graphs_of(gr_server *s, const gr_conn *c);
void gr_server_deregister(gr_server *s, gr_conn *c, gr_inmsg *m);
/* Drops a reference; the last frees (NULL is ignored). */
void gr_server_registered_unref(registered *r);
/* Aborts the steps whose RUN came over c, which closed (why). */
void gr_server_steps_abort_of(gr_server *s, gr_conn *c, const gr_error *why);
/* Aborts every step (the server stops): running steps return. */
void gr_server_steps_abort_all(gr_server *s);
/* Aborts every step open now with code and msg (a peer's tensor for one of
 * them may be lost). */
void gr_server_steps_abort_open(gr_server *s, gr_status code, const char *msg);
/* Aborts step run_id with code and msg, open or not yet (its RUN, arriving
 * later, fails at once). */
void gr_server_step_abort_id(gr_server *s, uint64_t run_id, gr_status code, const char *msg);
void gr_server_steps_free(gr_server *s);
/* LEASE request id on c (network thread): takes or looks at a lease and
 * answers with its state. */
void gr_server_lease(gr_server *s, gr_conn *c, gr_inmsg *in, uint64_t id);
/* The leases c holds end (network thread; c closed). */
void gr_server_leases_drop_of(gr_server *s, const gr_conn *c);
/* The peer of that task name (under s->mu), NULL when unknown. */
peer *gr_server_find_peer(gr_server *s, const char *task);

/* ---- multi-step flow control (server_links.c) ---- */

/* Fills r's links from the partitions ps of its registration. */
gr_status gr_server_links_of(const gr_server *s, const gr_partitions *ps, registered *r,
                             gr_error *err);
/* The rendezvous key of a DONE over link l (at least GR_LINK_KEY_MAX bytes). */
#define GR_LINK_KEY_MAX (2 * GR_DEVICE_NAME_MAX + 40)
void gr_step_link_key(const step_link *l, char *out, size_t cap);

/* ---- containers (server_containers.c) ---- */

/* Is [p, p + n) a container name (user: one a user may give, which starts
 * with a letter or digit)? */
bool gr_container_name_ok(const char *p, size_t n, bool user);
/* A name from a user or a peer (a container's, a cluster id), fit to print:
 * at most 64 bytes ("..." after), anything but printable ASCII as '?'. */
const char *gr_printable_name(const char *p, size_t n, char out[GR_CONTAINER_NAME_MAX + 4]);
/* The container a request in from c names (gr_container_ref_unpack), with a reference for the
 * caller (gr_server_container_unref). create: made when missing, a private one owned by c (refused
 * once c has closed); else *out is NULL when there is none. Errors name the field; a private
 * container is c's alone. */
gr_status gr_server_container_get(gr_server *s, gr_conn *c, gr_inmsg *in, bool create,
                                  container **out, gr_error *err);
void gr_server_container_unref(container *k);
/* Drops the private containers c owned (it closed). */
void gr_server_containers_drop_of(gr_server *s, const gr_conn *c);
/* RESET (a worker thread): drops one shared container, or all; answers with
 * how many. Takes m. */
void gr_server_reset(gr_server *s, gr_conn *c, gr_inmsg *m);
void gr_server_containers_free(gr_server *s);

#endif
