/* The command line against a cluster (cli_cluster.c): the cluster spec and
 * secret from options or the environment, a master connected to every task,
 * and checkpoints of variables that live on the tasks. Internal to
 * frontend/cli/. */
#ifndef GR_CLI_CLUSTER_H
#define GR_CLI_CLUSTER_H

#include <graphrun.h>
#include <stdbool.h>

/* The shared secret from path, else the file GRAPHRUN_SECRET_FILE names,
 * else (not insecure) the secret file of the rendezvous in use (made by the
 * first that asks), as a new string. Refused, naming the file and the fix: no file at all
 * unless insecure (then *out is NULL: no authentication); a file that
 * other users may read or write (mode & 077) unless insecure (then a
 * warning on stderr); fewer than GR_SECRET_MIN or more than GR_SECRET_MAX
 * bytes (a final newline not counted). */
gr_status cli_read_secret(const char *path, bool insecure, char **out, gr_error *err);

/* The cluster id of this process (docs/distributed.md#cluster-identity):
 * flag (--cluster-id; NULL: not given), else GRAPHRUN_CLUSTER_ID (set by
 * graphrun launch), else Slurm's job id ("slurm-JOB": the same in the job's
 * steps and its batch script), else the rendezvous's in use (made by the
 * first that asks), else derived from the cluster c (gr_cluster_spec_id; c
 * NULL: an error saying how to name one). */
gr_status cli_cluster_id(const char *flag, const gr_cluster *c, char out[GR_CLUSTER_ID_MAX + 1],
                         gr_error *err);
/* --cluster-id's value (po->arg) checked into *out: GR_EXIT_OK, else the
 * usage error (printed). */
struct cli_opts;
int cli_opt_cluster_id(const struct cli_opts *po, const char **out);
/* --cluster-id (NULL: not given) and --insecure of the masters this process
 * makes from now on (cli_connect, cli_chief_hold). */
void cli_set_identity(const char *cluster_id, bool insecure);
/* --tls-cert, --tls-key and --tls-ca (cli_tls.c; docs/security.md, "TLS
 * between hosts"): PEM files for connections across hosts. A command's
 * flags: CLI_TLS_FLAGS(F) in its option table (values F, F + 1, F + 2),
 * cli_tls_flag in its loop, cli_tls_usage in its help. */
typedef struct cli_tls {
  const char *cert, *key, *ca; /* NULL: not given */
} cli_tls;
#define CLI_TLS_FLAGS(first)                                                                       \
  {"tls-cert", required_argument, NULL, (first)},                                                  \
      {"tls-key", required_argument, NULL, (first) + 1}, {                                         \
    "tls-ca", required_argument, NULL, (first) + 2                                                 \
  }
extern const char cli_tls_usage[];
/* Option c one of the three (first..first + 2): its value into t, true. */
bool cli_tls_flag(int c, int first, const char *arg, cli_tls *t);
/* What t lacks from GRAPHRUN_TLS_CERT, GRAPHRUN_TLS_KEY, GRAPHRUN_TLS_CA. */
void cli_tls_env(cli_tls *t);
/* The TLS files (and their defaults) of the masters this process makes
 * from now on; cli_master_identity gives them. */
void cli_set_tls(const cli_tls *t);
void cli_master_tls(gr_master_options *mo);
/* Fills mo's secret, insecure, cluster_id (into id) and TLS files for
 * cluster c. */
gr_status cli_master_identity(const gr_cluster *c, const char *secret, gr_master_options *mo,
                              char id[GR_CLUSTER_ID_MAX + 1], gr_error *err);

/* The cluster of --cluster SPEC: a JSON file in any form the cluster parser
 * reads, JSON text ("{...}"), "env" for TensorFlow's TF_CONFIG, or a
 * launcher's "slurm[:JOBS][@PORT]" or "mpi[:JOBS][@PORT]" (cli_resolve.h:
 * the step's layout, or the rendezvous). spec NULL: the GRAPHRUN_CLUSTER
 * variable (set by `graphrun launch`), else no cluster (*out NULL, GR_OK).
 * *from: where it came from, for messages. A cluster that spans hosts and
 * names a task by a loopback name is refused (cli_cluster_check_hosts). */
gr_status cli_load_cluster(const char *spec, gr_cluster **out, const char **from, gr_error *err);
/* The same, and for TF_CONFIG (*has_self) which task this process is. */
gr_status cli_load_cluster_self(const char *spec, gr_cluster **out, gr_cluster_self *self,
                                bool *has_self, const char **from, gr_error *err);
/* The same; layout_only: the tasks and their hosts are enough (graphrun
 * place): a launcher's cluster comes from its layout, without waiting at
 * a rendezvous, and without the addresses' checks. */
gr_status cli_load_cluster_for(const char *spec, bool layout_only, gr_cluster **out,
                               gr_cluster_self *self, bool *has_self, const char **from,
                               gr_error *err);

/* The heartbeats of the masters cli_connect makes from now on: a task
 * silent for ms is pinged, and lost after `missed` silent periods (0: the
 * defaults, 100 ms and 5). */
void cli_set_heartbeat(int ms, int missed);
/* The container of the masters cli_connect makes from now on (NULL: each
 * its own private one; else a name, kept, shared by every client naming
 * it). */
void cli_set_container(const char *name);
/* The bound of the next cli_connect's connecting (ms; 0: the default, at most
 * 10 s), for a run's first connect to tasks that start later. */
void cli_set_connect_timeout(int ms);
/* The options of a master of every task of c (each needs an address), with
 * the secret and this process's cluster id for c (cli_set_identity), in
 * conf->mo; conf owns the arrays mo points to (cli_master_conf_free; on an
 * error nothing is left to free). conf must not move while mo is used. */
typedef struct cli_master_conf {
  gr_master_options mo;
  const char **addrs, **name_of;
  char (*names)[GR_DEVICE_NAME_MAX];
  char id[GR_CLUSTER_ID_MAX + 1];
} cli_master_conf;
gr_status cli_master_options(const gr_cluster *c, const char *from, const char *secret,
                             int timeout_ms, cli_master_conf *conf, gr_error *err);
void cli_master_conf_free(cli_master_conf *conf);
/* A master connected to every task of c (each needs an address), with the
 * secret and this process's cluster id for c (cli_set_identity). */
gr_status cli_connect(const gr_cluster *c, const char *from, const char *secret, int timeout_ms,
                      gr_master **out, gr_error *err);

/* Checkpoints of a session over a cluster into a sharded checkpoint
 * directory: each task that holds variables saves its shard with a `save`
 * node placed on it (one run feeding the step), then the manifest row
 * commits them. Restore reads the newest complete checkpoint by name and
 * adds an assign from a placeholder next to each variable (as TensorFlow's
 * Saver), so each task receives its variables wherever they live now. The
 * nodes are added to g once and found again after a recovery. */
/* *vars_ready: the caller's note that every variable of s has a value;
 * while false (a new session) the save first initialises the variables
 * that have none, which costs a request per variable and task, and sets it. */
/* pending: NULL or !pending->async, a synchronous save (committed before
 * it returns); else an asynchronous one (--save-async): the save first
 * commits the pending one (cli_commit_remote), then starts the tasks'
 * background writes of this step and notes it in *pending, committed by
 * the next save or cli_commit_remote: a checkpoint becomes visible one save
 * later, once every shard is durable. */
typedef struct cli_pending_save {
  bool async;
  int64_t step; /* the save whose shards are being written (-1: none) */
  char *meta;   /* its metadata (malloc'd) */
} cli_pending_save;
gr_status cli_save_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, const char *meta,
                          bool *vars_ready, cli_pending_save *pending, gr_error *err);
/* Waits for the pending save's shards on their tasks (a failed write is
 * reported naming the task and the file) and commits it. Forgets it either
 * way. GR_OK when there is none. */
gr_status cli_commit_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, cli_pending_save *pending,
                            gr_error *err);
/* Forgets the pending save, uncommitted (a recovery: its tasks may be gone). */
void cli_pending_forget(cli_pending_save *p);
gr_status cli_restore_remote(gr_ckpt *ck, gr_session *s, gr_graph *g, int64_t *step_out,
                             gr_error *err);
/* The same for the checkpoint of step *step_out (-1: the newest). */
gr_status cli_restore_remote_at(gr_ckpt *ck, gr_session *s, gr_graph *g, int64_t *step_out,
                                gr_error *err);

/* After a task was lost: frees *s and *master, connects again (retrying
 * until recovery_ms: graphrun launch or a supervisor restarts the task), makes
 * a new session with opts and restores the newest checkpoint of ck into it
 * (*step: its step; -1 when ck has none yet: the run starts over; ck NULL:
 * no restore, for a worker whose chief restores). */
gr_status cli_recover(const gr_cluster *c, const char *from, const char *secret, int timeout_ms,
                      int recovery_ms, gr_graph *g, const gr_session_options *opts, gr_ckpt *ck,
                      gr_master **master, gr_session **s, int64_t *step, gr_error *err);

/* This process as one client of between-graph training (cli_worker.c). */
typedef struct cli_worker {
  bool on;    /* --job and --task given */
  bool chief; /* the "chief" job's task, else /job:worker/task:0 */
  char job[64];
  int task;
  char device[GR_DEVICE_NAME_MAX]; /* "/job:worker/task:1": the program's default device */
  /* the chief's task, "/job:chief/replica:0/task:0" (else worker 0's): the
   * chief holds its lease there while its process lives */
  char chief_task[GR_DEVICE_NAME_MAX];
  char chief_job[64];
  double started;   /* cli_now() at setup: a chief that ended before is not this run's */
  gr_master *lease; /* the chief's: a connection to its own task holding the lease */
  /* the lease the chief holds on its own task: "chief/CONTAINER", so that
   * clients of other shared containers on the same servers have their own */
  char lease_name[96];
} cli_worker;

/* From --job and --task (job NULL and task -1: not given): checks them
 * against the cluster c. An exit
 * code (messages printed). */
int cli_worker_setup(cli_worker *w, const char *job, long task, const gr_cluster *c);
/* The shared container the between-graph clients use (names the lease). */
void cli_worker_set_container(cli_worker *w, const char *container);
/* The chief (else nothing): takes its lease on its own task of c through
 * a connection of its own (without heartbeats, so that only the end of
 * this process, or of that task, ends it), or, holding one already, takes
 * it again (after a recovery: a restarted task forgot it). */
gr_status cli_chief_hold(cli_worker *w, const gr_cluster *c, const char *secret, gr_error *err);
/* Closes the chief's lease connection (its lease ends). */
void cli_worker_free(cli_worker *w);
/* A worker that is not the chief: waits (polling every 50 ms, at most
 * timeout_s) until every variable that does not live on its own task has a
 * value, i.e. the chief has initialised or restored the shared ones. Fails
 * as soon as the chief's lease on its task (looked at through m) shows that
 * the chief's process ended after this one started, naming it. */
gr_status cli_wait_for_chief(gr_session *s, gr_master *m, const cli_worker *w, double timeout_s,
                             bool quiet, gr_error *err);

#endif
