/* graphrun server's task: from a spec (a cluster file, TF_CONFIG: the
 * task's address there is where it listens) or a launcher (Slurm, MPI: the
 * task of this rank, on every interface at its known port or a free one,
 * reached at its node's name and found through the rendezvous); the
 * address it is reached at (--advertise, --interface), its cluster id and
 * secret. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_cluster.h"
#include "cli_server.h"
#include "commands.h"

/* host:port, with brackets for an IPv6 host. */
static void join_address(char *out, size_t cap, const char *host, int port) {
  snprintf(out, cap, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* "host:port" or "[v6]:port", port 0..65535 (a bind's "0.0.0.0:0" too). */
static bool split_host_port(const char *a, char *host, size_t cap, int *port) {
  const char *colon = strrchr(a, ':');
  if (!colon) return false;
  const char *h = a, *he = colon;
  if (a[0] == '[') {
    const char *close = strchr(a, ']');
    if (!close || close + 1 != colon) return false;
    h = a + 1, he = close;
  }
  if ((size_t)(he - h) >= cap) return false;
  memcpy(host, h, (size_t)(he - h));
  host[he - h] = '\0';
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (*end || end == colon + 1 || p < 0 || p > 65535) return false;
  *port = (int)p;
  return true;
}

/* --advertise HOST[:PORT] into o->reach and o->reach_port. */
static bool parse_advertise(server_setup *o, gr_error *err) {
  const char *a = o->advertise;
  int port = 0;
  size_t n = strlen(a);
  if (a[0] == '[' && a[n - 1] == ']') { /* "[v6]" */
    snprintf(o->reach, sizeof o->reach, "%.*s", (int)(n - 2), a + 1);
  } else if (a[0] == '[' || (strchr(a, ':') && strchr(a, ':') == strrchr(a, ':'))) {
    char host[GR_CLUSTER_HOST_MAX];
    if (gr_cluster_split_address(a, host, sizeof host, &port, err) != GR_OK) return false;
    snprintf(o->reach, sizeof o->reach, "%s", host);
  } else {
    snprintf(o->reach, sizeof o->reach, "%s", a); /* a name, an IPv4 or a bare IPv6 address */
  }
  o->reach_port = port;
  return true;
}

/* With a spec: the task's address there (job and task from TF_CONFIG when
 * not given) is where it listens, unless --bind or --interface say. */
static int from_spec(server_setup *o, gr_error *err) {
  gr_cluster *c = NULL;
  gr_cluster_self self;
  bool has_self = false;
  const char *from = NULL;
  if (cli_load_cluster_self(o->spec, &c, &self, &has_self, &from, err) != GR_OK) {
    fprintf(stderr, "graphrun server: --cluster: %s\n", err->msg);
    return GR_EXIT_USAGE;
  }
  static char jobbuf[64];
  if (has_self && !o->job) {
    snprintf(jobbuf, sizeof jobbuf, "%s", self.job);
    o->job = jobbuf;
    o->task = self.index;
  }
  int k = o->job ? gr_cluster_find_task(c, o->job, (int)o->task) : -1;
  const char *addr = k >= 0 ? gr_cluster_task_at(c, k)->address : NULL;
  int rc = GR_EXIT_OK;
  if (k < 0) {
    fprintf(stderr, "graphrun server: --cluster: %s has no task /job:%s/task:%ld\n", from,
            o->job ? o->job : "?", o->task);
    rc = GR_EXIT_USAGE;
  } else if (!o->bind && addr) {
    char host[GR_CLUSTER_HOST_MAX], ifaddr[256];
    int port = 0;
    gr_cluster_split_address(addr, host, sizeof host, &port, NULL);
    if (o->iface && cli_interface_address(o->iface, ifaddr, sizeof ifaddr, err) != GR_OK)
      rc = GR_EXIT_USAGE;
    else if (o->iface)
      join_address(o->bind_buf, sizeof o->bind_buf, ifaddr, port);
    else
      snprintf(o->bind_buf, sizeof o->bind_buf, "%s", addr);
    if (rc == GR_EXIT_OK) o->bind = o->bind_buf;
    if (rc != GR_EXIT_OK) fprintf(stderr, "graphrun server: %s\n", err->msg);
  }
  if (rc == GR_EXIT_OK && o->bind && cli_check_bind(c, k, o->bind, err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err->msg);
    rc = GR_EXIT_USAGE;
  }
  if (rc == GR_EXIT_OK && (cli_read_secret(o->secret_file, o->insecure, &o->secret, err) != GR_OK ||
                           cli_cluster_id(o->cluster_id, c, o->id, err) != GR_OK)) {
    fprintf(stderr, "graphrun server: %s\n", err->msg);
    rc = GR_EXIT_USAGE;
  }
  gr_cluster_free(c);
  return rc;
}

/* A launcher's task: where it listens and is reached; its rendezvous. */
static int from_launcher(server_setup *o, const cli_launcher *l, gr_error *err) {
  cli_launch_task t;
  if (cli_launcher_task(l, &t, err) != GR_OK ||
      cli_rendezvous_dir(l, o->rdv, sizeof o->rdv, err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err->msg);
    return GR_EXIT_USAGE;
  }
  if (o->job && (strcmp(o->job, t.job) != 0 || o->task != t.index)) {
    fprintf(stderr,
            "graphrun server: --job %s --task %ld: the launcher made this process /job:%s/task:%d "
            "(rank %d of %d); leave --job and --task out\n",
            o->job, o->task, t.job, t.index, t.rank, t.ntasks);
    return GR_EXIT_USAGE;
  }
  static char jobbuf[64];
  snprintf(jobbuf, sizeof jobbuf, "%s", t.job);
  o->job = jobbuf;
  o->task = t.index;
  cli_rendezvous_use(o->rdv);
  o->publish = true;
  cli_rdv_entry *e = &o->entry;
  snprintf(e->job, sizeof e->job, "%s", t.job);
  e->index = t.index, e->rank = t.rank, e->ntasks = t.ntasks;
  snprintf(e->launch, sizeof e->launch, "%s", t.launch);
  snprintf(e->host, sizeof e->host, "%s", t.node);
  int port = t.port;
  cli_rdv_entry before;
  char host[GR_CLUSTER_HOST_MAX];
  if (!port && cli_rendezvous_lookup(o->rdv, t.job, t.index, t.launch, &before) &&
      !split_host_port(before.address, host, sizeof host, &port))
    port = 0; /* restarted in place: its port again */
  char ifaddr[256] = "";
  if (o->iface && cli_interface_address(o->iface, ifaddr, sizeof ifaddr, err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err->msg);
    return GR_EXIT_USAGE;
  }
  if (!o->bind) { /* every interface, as TensorFlow's servers (or the one named) */
    join_address(o->bind_buf, sizeof o->bind_buf, ifaddr[0] ? ifaddr : "0.0.0.0", port);
    o->bind = o->bind_buf;
  }
  if (o->advertise && !parse_advertise(o, err)) {
    fprintf(stderr, "graphrun server: --advertise: %s\n", err->msg);
    return GR_EXIT_USAGE;
  }
  if (!o->advertise) snprintf(o->reach, sizeof o->reach, "%s", ifaddr[0] ? ifaddr : t.node);
  if (t.multi_node && cli_host_literal_loopback(o->reach)) {
    fprintf(stderr,
            "graphrun server: this task would be reached at %s, a loopback address, but its "
            "launch spans hosts: the others would reach their own loopback; give --advertise "
            "HOST (a name or address the other hosts reach this one at) or --interface IFACE\n",
            o->reach);
    return GR_EXIT_USAGE;
  }
  if (cli_read_secret(o->secret_file, o->insecure, &o->secret, err) != GR_OK ||
      cli_cluster_id(o->cluster_id, NULL, o->id, err) != GR_OK) {
    fprintf(stderr, "graphrun server: %s\n", err->msg);
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

int cli_server_setup(server_setup *o) {
  gr_error err;
  cli_launcher l;
  int launcher = o->spec ? cli_launcher_parse(o->spec, &l, &err) : 0;
  if (launcher < 0) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  if (launcher) return from_launcher(o, &l, &err);
  if (o->advertise && !parse_advertise(o, &err)) {
    fprintf(stderr, "graphrun server: --advertise: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  if (o->spec) {
    int rc = from_spec(o, &err);
    if (rc != GR_EXIT_OK) return rc;
  } else if (o->iface) { /* no spec: a free port on that interface, unless --bind */
    char ifaddr[256];
    if (cli_interface_address(o->iface, ifaddr, sizeof ifaddr, &err) != GR_OK) {
      fprintf(stderr, "graphrun server: %s\n", err.msg);
      return GR_EXIT_USAGE;
    }
    if (!o->bind) join_address(o->bind_buf, sizeof o->bind_buf, ifaddr, 0), o->bind = o->bind_buf;
  }
  if (!o->job) {
    fprintf(stderr, "graphrun server: --job is required (try --help)\n");
    return GR_EXIT_USAGE;
  }
  if (!o->spec && (cli_read_secret(o->secret_file, o->insecure, &o->secret, &err) != GR_OK ||
                   cli_cluster_id(o->cluster_id, NULL, o->id, &err) != GR_OK)) {
    fprintf(stderr, "graphrun server: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

void cli_server_entry(server_setup *o, int port, int devices) {
  char host[GR_CLUSTER_HOST_MAX] = "127.0.0.1";
  int bound;
  if (!o->reach[0] && o->bind) split_host_port(o->bind, host, sizeof host, &bound);
  join_address(o->entry.address, sizeof o->entry.address, o->reach[0] ? o->reach : host,
               o->reach_port ? o->reach_port : port);
  o->entry.devices = devices;
  o->entry.pid = (long)getpid();
}

void cli_server_set_port(server_setup *o, int port) {
  char host[GR_CLUSTER_HOST_MAX] = "127.0.0.1"; /* the default bind's */
  int old;
  if (o->bind && !split_host_port(o->bind, host, sizeof host, &old)) return;
  join_address(o->bind_buf, sizeof o->bind_buf, host, port);
  o->bind = o->bind_buf;
}
