/* distributed/: the face header. Tasks in separate processes
 * (docs/distributed.md): the server (one task: a worker service on a TCP
 * port), the master (a client's view of a cluster, which a session runs its
 * steps through) and the serialized graph they exchange.
 *
 *   // a task: graphrun server --job worker --task 1 --secret-file F --cluster-id exp1
 *   gr_server_options so = {.job = "worker", .task = 1, .bind = "127.0.0.1:0",
 *                           .secret = secret, .cluster_id = "exp1"};
 *   gr_server *srv;
 *   gr_server_new(&so, &srv, &err);             // serving; gr_server_port(srv)
 *
 *   // a client: a session over the cluster's devices
 *   const char *tasks[] = {"127.0.0.1:2222", "127.0.0.1:2223"};
 *   gr_master_options mo = {.num_tasks = 2, .addresses = tasks, .secret = secret,
 *                           .cluster_id = "exp1"};
 *   gr_master *m;
 *   gr_master_new(&mo, &m, &err);               // connects, asks each task its devices
 *   gr_session *s = gr_master_session_new(m, g, NULL, &err);
 *   gr_session_run(s, ...);                     // partitions run on the tasks
 *   gr_session_free(s); gr_master_free(m); gr_server_free(srv);
 *
 * Serialized graphs:
 *
 *   void *data;
 *   size_t size;
 *   if (gr_wire_encode_graph(g, NULL, &data, &size, &err) != GR_OK) ...
 *   gr_graph *copy = gr_graph_new();
 *   gr_status st = gr_wire_decode_graph(data, size, copy, NULL, &err);
 *   free(data);
 *
 * The format (version 1) is one msgpack map, documented in docs/distributed.md:
 * every node in id order with its op, inputs, control inputs, attrs (tensor
 * attrs with their bytes), devices, colocation and source position, plus
 * the graph's seed and optional names (a DSL program's bindings, fetches and
 * targets). Decoding rebuilds through the builder calls, so a decoded graph
 * is checked exactly like a built one (op, attrs, shapes), and it is
 * bit-for-bit the same graph: encoding it again gives the same bytes.
 * Untrusted input: every count is checked against the bytes present before
 * anything is allocated, and every error names the node and the field. */
#ifndef GR_DISTRIBUTED_H
#define GR_DISTRIBUTED_H

#include <stddef.h>

#include "core/gr_core.h"
#include "placer/gr_placer.h"

#define GR_WIRE_GRAPH_VERSION 1
#define GR_WIRE_GRAPH_FORMAT  "graphrun.graph"
/* The most nodes, and bytes of a serialized graph, a decoder accepts. */
#define GR_WIRE_GRAPH_MAX_NODES (1 << 24)
#define GR_WIRE_GRAPH_MAX_BYTES ((size_t)1 << 32)

/* Named outputs and the default fetches and targets of a program (a .gr
 * file's bindings, `fetch` and `target`), carried beside the graph. */
typedef struct gr_graph_names {
  int num_names;
  const char **names; /* num_names names ... */
  gr_output *outputs; /* ... and the outputs they name */
  int num_fetches;
  const char **fetches;
  int num_targets;
  const char **targets;
} gr_graph_names;

/* Encodes g (and names, which may be NULL) into *data (malloc'd, the caller
 * frees) of *size bytes. Fails on a graph with a build error. */
gr_status gr_wire_encode_graph(const gr_graph *g, const gr_graph_names *names, void **data,
                               size_t *size, gr_error *err);

/* Adds the nodes of a serialized graph to g, which must be empty, and sets
 * its seed. names (may be NULL) receives the names: the arrays are malloc'd
 * (gr_graph_names_free), the strings live in g. On failure g holds a partial
 * graph the caller frees, err names what is wrong ("node 12 'dense/w':
 * attr 'value': ..."). */
gr_status gr_wire_decode_graph(const void *data, size_t size, gr_graph *g, gr_graph_names *names,
                               gr_error *err);
/* Frees the arrays of a decoded gr_graph_names (not the strings); zeroes it. */
void gr_graph_names_free(gr_graph_names *names);

/* Is data the start of a serialized graph (its first bytes)? For loaders
 * that take .gr text and serialized graphs alike. */
bool gr_wire_is_graph(const void *data, size_t size);

/* Checks that data holds exactly one msgpack object, nested at most
 * max_depth deep, whose every array, map, string and binary length fits in
 * the bytes that follow (an array of n needs at least n more bytes), so an
 * unpacker allocates at most a few times size. Ext types are refused. */
gr_status gr_wire_check_msgpack(const void *data, size_t size, int max_depth, gr_error *err);

/* ---- who may talk to a task: the secret and the cluster id ------------------- */

/* Every connection starts with a handshake (docs/distributed.md "Security"):
 * both sides prove they know the cluster's shared secret (HMAC-SHA256
 * challenge-response) and name their cluster id, which the MACs cover; a
 * peer of another cluster is refused, naming both ids. Between hosts the
 * connection then runs over TLS (with certificates: the options' tls_*)
 * or carries a MAC on every frame (docs/security.md). A secret is
 * GR_SECRET_MIN to GR_SECRET_MAX bytes (no NUL); without one a server or
 * master must say `insecure` (loopback only, no authentication). */
#define GR_SECRET_MIN 16
#define GR_SECRET_MAX 256

/* A cluster id: 1 to GR_CLUSTER_ID_MAX letters, digits, '_', '-' and '.'
 * (graphrun launch: "launch-" and 16 random hex digits; Slurm:
 * "slurm-JOB.STEP"; by hand: any name, or gr_cluster_spec_id). NULL or ""
 * in the options: none, which matches only none. */
#define GR_CLUSTER_ID_MAX 64
/* GR_OK when id is a cluster id; else an error saying what is wrong. */
gr_status gr_cluster_id_check(const char *id, gr_error *err);
/* The cluster id derived from a cluster's tasks: "spec-" and 32 hex digits
 * of SHA-256 over each task's job, index and address (compared without
 * case), in sorted order. Two specs of the same tasks at the same
 * addresses give the same id whatever their form (cluster file,
 * ClusterSpec, TF_CONFIG) or order; any other difference gives another. */
gr_status gr_cluster_spec_id(const gr_cluster *c, char out[GR_CLUSTER_ID_MAX + 1], gr_error *err);

/* ---- the server: one task --------------------------------------------------- */

typedef struct gr_server gr_server;

typedef struct gr_server_options {
  const char *job;        /* the task's job ("worker", "ps"); required */
  int task;               /* its index in the job */
  const char *bind;       /* "host:port" to listen on; port 0: a free port; NULL:
                             "127.0.0.1:0" */
  const char *secret;     /* the cluster's shared secret (GR_SECRET_MIN to GR_SECRET_MAX
                             bytes): every peer must prove it knows it. NULL is refused
                             unless insecure */
  bool insecure;          /* allow no secret: no authentication (any local user can run any
                             graph in this process), a warning logged at start; the bind
                             must then be loopback (with or without a secret) */
  const char *cluster_id; /* the cluster this task belongs to (gr_cluster_id_check; NULL:
                           none): a peer of another cluster is refused at the handshake,
                           and the log line names both ids and the peer */
  /* TLS with peers on other hosts (docs/security.md, "TLS"): PEM files of
   * this task's certificate, its private key (not readable by others) and
   * the cluster's CA, which must sign every task's and client's
   * certificate; all three or none (errors name the file). With them a
   * peer that is not on loopback must use TLS 1.3 with a certificate the CA
   * signed (mutual authentication; a plaintext peer is refused); without
   * them every frame from or to such a peer carries a MAC (authenticated,
   * not encrypted). Loopback peers stay plaintext. */
  const char *tls_cert, *tls_key, *tls_ca;
  int num_devices;      /* CPU devices /job:J/replica:0/task:T/device:CPU:K; 0: 1 */
  int inter_op_threads; /* executor threads; 0: number of cores */
  int intra_op_threads; /* threads inside one op (BLAS); 0: 1, as a session's default, so
                           a task computes what one process computes, bit for bit */
  bool quiet;           /* no log line per connection */
  /* Where the server's log lines go (a refused frame or request, naming the
   * peer; a connection that ended; a registration): log_fn(log_arg, line)
   * with one line without "graphrun: " or a newline, from any of the
   * server's threads (possibly at once). NULL: "graphrun: LINE\n" on stderr. */
  void (*log_fn)(void *arg, const char *line);
  void *log_arg;
  /* Accepted connections open at once (docs/distributed.md, "Limits"); past
   * it a new one takes the place of the oldest still in its handshake, or
   * is refused. 0: from the descriptor limit (RLIMIT_NOFILE less a quarter,
   * at least 64, kept for the server's own files), at most 16384. */
  int max_connections;
} gr_server_options;

/* Starts serving (a network thread and worker threads). The server picks a
 * random non-zero incarnation. Its variables (and queues, accumulators)
 * live in containers, as TensorFlow 1's: each master names the container
 * its graphs use when it registers them. A master's private container (the
 * default) is dropped when the master's connection closes; a shared one
 * (gr_master_options.container) lives until a reset (gr_master_reset) or
 * the server stops. */
gr_status gr_server_new(const gr_server_options *o, gr_server **out, gr_error *err);
/* Stops serving: closes connections (running steps fail) and frees. */
void gr_server_free(gr_server *s);
int gr_server_port(const gr_server *s);
const char *gr_server_task_name(const gr_server *s); /* "/job:worker/replica:0/task:1" */
uint64_t gr_server_incarnation(const gr_server *s);
/* The container of that name (a master's private one: gr_master_container),
 * a new reference (gr_resource_mgr_free), or NULL when the task has none. */
gr_resource_mgr *gr_server_container(gr_server *s, const char *name);
/* How many containers the task holds (private and shared). */
int gr_server_num_containers(gr_server *s);

/* The server's clients: connections that sent a request (a master's, a
 * reset's; not a peer task's pushes, not a connection that only connected,
 * such as a readiness probe's), for a server that ends with its run
 * (graphrun server --exit-with-client). */
typedef struct gr_server_clients {
  int open;        /* client connections open now */
  bool served;     /* a client has registered a graph since the server started */
  int64_t idle_ms; /* since the last client connection closed; 0 while one is open, or
                      before any */
} gr_server_clients;
void gr_server_client_state(gr_server *s, gr_server_clients *out);

/* Container names: 1 to GR_CONTAINER_NAME_MAX letters, digits, '_', '-' and
 * '.'. A name a user gives starts with a letter or a digit: a leading '_'
 * is kept for the masters' private containers ("_run.<16 hex digits>"). */
#define GR_CONTAINER_NAME_MAX 64
/* GR_OK when name is a container name a user may give; else an error
 * saying what is wrong with it. */
gr_status gr_container_check_name(const char *name, gr_error *err);

/* ---- the master: a client's view of a cluster ------------------------------ */

typedef struct gr_master gr_master;

typedef struct gr_master_options {
  int num_tasks;
  const char *const *addresses;  /* "host:port" of each task's server */
  const char *const *task_names; /* optional: the task each address should be
                                    ("/job:worker/task:1"), named in its errors */
  const char *secret;            /* the cluster's shared secret (as the servers'); NULL is
                                    refused unless insecure */
  bool insecure;                 /* no secret: talks only to servers started insecure */
  const char *cluster_id;        /* the cluster's id (NULL: none): a task of another cluster
                                    is refused ("127.0.0.1:2223 belongs to cluster 'a',
                                    this client's is 'b': ...") */
  const char *tls_cert, *tls_key, *tls_ca; /* TLS with tasks on other hosts, as a server's
                                              (gr_server_options): a task that requires it
                                              needs them, and with them a task on another
                                              host that does not offer TLS is refused */
  int connect_timeout_ms;                  /* per task, with retries; 0: 10000 */
  int step_timeout_ms;                     /* a step's deadline; 0: none */
  int heartbeat_ms;      /* a task silent this long is pinged; 0: 100; < 0: never */
  int heartbeat_missed;  /* silent for this many intervals: the task is lost (its
                            requests fail at once, naming it); 0: 5 */
  const char *container; /* NULL: the variables (queues, accumulators) of this master's
                            graphs live in a private container on each task, its own,
                            dropped when the master disconnects (gr_master_free, or
                            a lost connection): every master starts from initial
                            values. A name (gr_container_check_name): the shared
                            container of that name, which every master naming it
                            uses, kept on the tasks until gr_master_reset */
} gr_master_options;

/* Connects to every task at once (up to 16 dials in flight) and asks for
 * its name, devices and incarnation. Errors name the task's address (the
 * lowest of those that failed). */
gr_status gr_master_new(const gr_master_options *o, gr_master **out, gr_error *err);
void gr_master_free(gr_master *m);
/* Every device of the cluster (borrowed; num via *n): the chief's first,
 * then the workers', other jobs', the ps' last; a session's unpinned nodes
 * run on the first. */
const char *const *gr_master_devices(const gr_master *m, int *n);
/* A session over the cluster's devices whose steps run on the tasks: base
 * (may be NULL) gives the other options. The master must outlive it. */
gr_session *gr_master_session_new(gr_master *m, gr_graph *g, const gr_session_options *base,
                                  gr_error *err);
/* Gives the nodes of g that no pin decides a device of the master's tasks,
 * before gr_master_session_new (which runs them on the first device
 * otherwise): GR_PLACE_COST places them with the cost model over a cluster
 * model of the tasks (their jobs, hosts and devices; default device speeds
 * and links, as a cluster file without figures gets), GR_PLACE_ROUND_ROBIN
 * spreads them, GR_PLACE_PINS leaves them. soft: a pin to a device the
 * cluster lacks goes to a device it has instead of failing. The step's
 * other preparation (pruning, partitioning, registering) is the session's.
 *
 *   gr_master_place_graph(m, g, GR_PLACE_COST, false, &err);
 *   gr_session *s = gr_master_session_new(m, g, NULL, &err); */
gr_status gr_master_place_graph(gr_master *m, gr_graph *g, gr_place_mode mode, bool soft,
                                gr_error *err);
/* Sessions for trying placements (gr_placement_try), each on a master of
 * its own made with mo (a private container each, unless mo names one):
 * op->o is the opener. mo and what it points to are borrowed while op is in
 * use; each session is closed (with its master) by whoever opened it. */
typedef struct gr_master_opener {
  gr_place_opener o;
  gr_master_options mo;
  gr_master *m[GR_PLACE_CAND_COUNT];
  gr_session *s[GR_PLACE_CAND_COUNT];
} gr_master_opener;
void gr_master_opener_init(gr_master_opener *op, const gr_master_options *mo);

/* A lease: a named mark one task's server keeps for the client that took
 * it while that client's connection lives. Taking it again through
 * another connection replaces the holder; when the holder's connection
 * closes (its process ended, killed or not) the lease ends. Any client
 * may look at it. The between-graph chief holds one on its own task, so
 * the workers that wait for it learn at once that it has ended. */
typedef struct gr_lease_state {
  bool held;            /* a live connection holds it */
  uint64_t taken;       /* times taken since that server started (0: never) */
  int64_t ended_ms_ago; /* not held, taken > 0: ms since the last holder's connection closed */
  char holder[257];     /* the description of the holder (the last one when not held) */
} gr_lease_state;

/* Takes the lease `name` (1 to 128 bytes) on task k of m, describing its
 * holder as `holder` (at most 256 bytes; NULL: only look at it), and gives
 * its state then. Bounded by the master's connect timeout. */
gr_status gr_master_lease(gr_master *m, int task, const char *name, const char *holder,
                          gr_lease_state *out, gr_error *err);

/* The tasks (in the options' order): how many, each one's address
 * (borrowed), the inter-op threads its executors have and the cores of its
 * host, as the task said (0: a task that does not say). */
int gr_master_num_tasks(const gr_master *m);
const char *gr_master_task_address(const gr_master *m, int task);
int gr_master_task_threads(const gr_master *m, int task);
int gr_master_task_cores(const gr_master *m, int task);
/* The task names (borrowed) and incarnations, for tests and logs. */
const char *gr_master_task_name(const gr_master *m, int task);
uint64_t gr_master_task_incarnation(const gr_master *m, int task);
/* The container the master's graphs use on the tasks: the name its options
 * gave, else its private one's ("_run.1f0c..."). Borrowed. */
const char *gr_master_container(const gr_master *m);
/* Drops the shared container `container` (NULL: every shared container) on
 * every task, as TensorFlow's Session.reset: its variables, queues and
 * accumulators are gone, and a master whose graphs use it finds its next
 * step failing with GR_ERR_ABORTED ("... was reset"). Private containers
 * are left alone (they go with their masters). *dropped (may be NULL): how
 * many containers the tasks dropped, summed. */
gr_status gr_master_reset(gr_master *m, const char *container, int *dropped, gr_error *err);

/* ---- calibrating the runtime for the placer -------------------------------------
 * What a transfer and a task cost a step, measured with real steps between
 * the master's server tasks (and between two devices of this process), for
 * the cluster model the cost placer predicts with (docs/placement.md, "How
 * the model is calibrated"; `graphrun calibrate`). */

typedef struct gr_calibrate_options {
  int steps;         /* steps per measurement and round; 0: 60 */
  int rounds;        /* rounds, the measurements alternating; 0: 3 */
  size_t bulk_bytes; /* the tensor the bandwidth is measured with; 0: 4 MiB */
} gr_calibrate_options;

typedef struct gr_calibration_link {
  bool measured;             /* the cluster has two ends of this kind */
  double latency;            /* seconds per transfer (8 bytes) */
  double bandwidth;          /* bytes per second (0: too fast to tell, left as it was) */
  double step;               /* seconds the second task adds to a step */
  double base;               /* the one-task step less one task's step */
  double step_one, step_two; /* median steps of a trivial node on one task, on two */
  double heavy;              /* median step of about a millisecond's work on one end */
  double parallelism;        /* that work on both ends at once against one end: 1..2 */
} gr_calibration_link;

typedef struct gr_calibration {
  gr_calibration_link link[GR_LINK_COUNT];
  double client_step; /* the client's own cost per step (kept as same_task's step) */
  double time_scale;  /* a task's step against the same in this process (kept as the time
                         scale of every device of a task with an address) */
} gr_calibration;

/* Measures the links and step costs of cluster c through master m, whose
 * tasks are c's in c's order (as a master made from c's addresses), and
 * writes them into c's links: same_task (two devices of this process),
 * same_host (the task of the session's first device and another task on
 * its host) and cross_host (it and a task on another host) when the cluster
 * has such a pair; same_task's step gets the client's own cost per step.
 * *out (required) gets what was measured. The client is taken to run on
 * the host of the session's first device. Every device of a task with an
 * address gets the time scale measured (gr_cluster_device.time_scale); the
 * client's host gets one core when its two tasks' work does not overlap
 * (parallelism < 1.5: a loaded machine).
 * Runs a few hundred steps. */
gr_status gr_calibrate_runtime(gr_master *m, gr_cluster *c, const gr_calibrate_options *o,
                               gr_calibration *out, gr_error *err);

#endif
