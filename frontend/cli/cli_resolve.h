/* Where the tasks of a cluster are, when a launcher started them: the
 * resolver of the command line (docs/clusters.md). Internal to
 * frontend/cli/.
 *
 * - Launchers (cli_launcher.c): "slurm[:JOBS][@PORT]" and
 *   "mpi[:JOBS][@PORT]" as --cluster. A server is one task of the launcher
 *   (its rank, job and index, its local index on its node, the port it
 *   binds: Slurm's reserved port, else PORT + its local index, else any
 *   free port); a client reads the whole cluster from the step's layout or
 *   from the rendezvous.
 * - The rendezvous (cli_rendezvous.c): a private directory every host sees
 *   (under Slurm, $SLURM_SUBMIT_DIR/.graphrun/slurm-JOB by default), where
 *   each server writes where it listens (JOB-INDEX.task, replaced
 *   atomically) and a client waits until every task has; the cluster's
 *   secret and id are made there by whoever comes first, when none is
 *   given.
 * - Addresses (cli_address.c): loopback names, interfaces, and the checks
 *   that keep a cluster spanning hosts from naming, or listening on, an
 *   address the other hosts cannot reach.
 *
 * Threads: the rendezvous directory in use is process state, set while the
 * command parses its flags and loads its cluster (the main thread). */
#ifndef GR_CLI_RESOLVE_H
#define GR_CLI_RESOLVE_H

#include <graphrun.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- launchers ------------------------------------------------------------- */

typedef enum cli_launcher_kind { CLI_SLURM = 1, CLI_MPI } cli_launcher_kind;

typedef struct cli_launcher {
  cli_launcher_kind kind;
  char jobs[256]; /* "ps:1,worker" ("": every task a worker) */
  int port;       /* @PORT (0: not given) */
} cli_launcher;

/* 1 when spec is "slurm[:JOBS][@PORT]" or "mpi[:JOBS][@PORT]" (*l filled),
 * 0 when it is another form of spec, -1 when it is one of these, malformed
 * (err says how). */
int cli_launcher_parse(const char *spec, cli_launcher *l, gr_error *err);

/* This process as a task of the launcher. */
typedef struct cli_launch_task {
  int rank, ntasks, local; /* local: its index among its node's tasks */
  char job[64];
  int index;
  char node[256];  /* its host's name: SLURMD_NODENAME, else the host name */
  int port;        /* to listen on: Slurm's reserved port or PORT + local (0: any) */
  bool multi_node; /* its tasks span several hosts (as far as the launcher says) */
  char launch[64]; /* the launch it belongs to ("slurm-4242.0", "mpi-841482241") */
} cli_launch_task;

/* Errors name the variables (SLURM_PROCID, OMPI_COMM_WORLD_RANK, ...) and
 * how to start the task. */
gr_status cli_launcher_task(const cli_launcher *l, cli_launch_task *t, gr_error *err);

/* The cluster a client of the launcher runs on: under Slurm, a task of a
 * step whose ports are known (PORT, or reserved ports) or, with
 * layout_only (hosts, no addresses: graphrun place), anywhere in the job,
 * from the layout; else from the rendezvous, waiting (bounded) until every
 * task has written its address. *from: where it came from, for messages
 * (static storage). */
gr_status cli_launcher_cluster(const cli_launcher *l, bool layout_only, gr_cluster **out,
                               const char **from, gr_error *err);

/* ---- the rendezvous ---------------------------------------------------------- */

/* --rendezvous DIR of this process (NULL: GRAPHRUN_RENDEZVOUS, else the
 * launcher's default). */
void cli_set_rendezvous(const char *dir);
/* How long a client waits at the rendezvous (seconds; 0: 120). */
void cli_set_rendezvous_wait(double seconds);
double cli_rendezvous_wait_s(void);
/* The rendezvous directory for launcher l into dir[cap], made (mode 0700)
 * when missing; refused when others may write it (they could change the
 * addresses and read the secret). MPI has no default: an error says to give
 * one. */
gr_status cli_rendezvous_dir(const cli_launcher *l, char *dir, size_t cap, gr_error *err);
/* The rendezvous this process's cluster came from (NULL: none): when no
 * secret or cluster id is given, cli_read_secret and cli_cluster_id take
 * the rendezvous's (made by whoever comes first). */
void cli_rendezvous_use(const char *dir);
const char *cli_rendezvous_in_use(void);

/* Where one task listens, as the rendezvous holds it. */
typedef struct cli_rdv_entry {
  char job[64];
  int index, rank, ntasks, devices;
  char address[300]; /* "node01:41234" */
  char launch[64];   /* cli_launch_task.launch */
  long pid;          /* the serving process, on its host */
  char host[256];    /* that host's name (for a reader that kills it: tests) */
} cli_rdv_entry;

/* Writes e as DIR/JOB-INDEX.task, replacing any earlier one at once. */
gr_status cli_rendezvous_publish(const char *dir, const cli_rdv_entry *e, gr_error *err);
/* Removes the entry of e's task if it is still e's (its pid): the task
 * stopped cleanly. */
void cli_rendezvous_withdraw(const char *dir, const cli_rdv_entry *e);
/* The entry of task job:index of the same launch (NULL: any), if there is
 * one (a task restarted in place takes its port again). */
bool cli_rendezvous_lookup(const char *dir, const char *job, int index, const char *launch,
                           cli_rdv_entry *out);
/* The cluster of the newest launch in dir, once every one of its tasks has
 * written its entry (waiting up to `seconds`, polling), in rank order. */
gr_status cli_rendezvous_wait(const char *dir, double seconds, gr_cluster **out, gr_error *err);
/* The rendezvous's secret file (DIR/secret, 64 random hex digits, 0600)
 * and cluster id (DIR/cluster-id, "rdv-" and 16 hex digits), made by the
 * first that asks. */
gr_status cli_rendezvous_secret_file(const char *dir, char *path, size_t cap, gr_error *err);
gr_status cli_rendezvous_cluster_id(const char *dir, char *id, size_t cap, gr_error *err);
/* n random bytes as 2n hex digits into hex (2n + 1 bytes); false when the
 * kernel gave none. */
bool cli_random_hex(char *hex, size_t n);

/* ---- addresses ----------------------------------------------------------------- */

/* "localhost", "*.localhost", 127.0.0.0/8, "::1": loopback wherever it is read. */
bool cli_host_literal_loopback(const char *host);
enum { CLI_HOST_UNRESOLVED, CLI_HOST_LOOPBACK, CLI_HOST_REMOTE };
/* How this host resolves host: to loopback addresses only, or to others
 * (shown[cap]: the first address, numeric; may be NULL). */
int cli_host_resolve_kind(const char *host, char *shown, size_t cap);
/* The first IPv4 address of interface ifname (else its first global IPv6
 * one), numeric. */
gr_status cli_interface_address(const char *ifname, char *out, size_t cap, gr_error *err);
/* A client's check of a cluster that spans hosts (a task's host resolves
 * here to an address other than loopback): no task may be named by a
 * literal loopback name, which each host reads as itself. */
gr_status cli_cluster_check_hosts(const gr_cluster *c, const char *from, gr_error *err);
/* A server's check before it listens on bind as task self of c: on a
 * cluster that spans hosts, an address that is loopback here (Debian maps
 * the host's own name to 127.0.1.1) is refused, saying why and what to
 * give instead. */
gr_status cli_check_bind(const gr_cluster *c, int self, const char *bind, gr_error *err);

#endif
