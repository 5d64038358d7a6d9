/* Addresses across hosts: loopback names (literal, or names this host
 * resolves to loopback, as Debian's /etc/hosts maps the host's own name to
 * 127.0.1.1), an interface's address, and the checks that keep a cluster
 * spanning hosts from naming, or a server of one from listening on, an
 * address the other hosts cannot reach. */
#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli_resolve.h"

bool cli_host_literal_loopback(const char *host) {
  size_t n = strlen(host);
  if (!strcasecmp(host, "localhost") || !strcasecmp(host, "localhost.localdomain") ||
      (n > 10 && !strcasecmp(host + n - 10, ".localhost")) || !strcmp(host, "::1"))
    return true;
  struct in_addr a;
  return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static bool addr_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

int cli_host_resolve_kind(const char *host, char *shown, size_t cap) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (shown && cap) shown[0] = '\0';
  if (getaddrinfo(host, NULL, &hints, &ai) != 0 || !ai) return CLI_HOST_UNRESOLVED;
  bool lo = true;
  for (struct addrinfo *p = ai; p; p = p->ai_next) lo = lo && addr_loopback(p->ai_addr);
  if (shown && cap)
    getnameinfo(ai->ai_addr, ai->ai_addrlen, shown, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
  freeaddrinfo(ai);
  return lo ? CLI_HOST_LOOPBACK : CLI_HOST_REMOTE;
}

gr_status cli_interface_address(const char *ifname, char *out, size_t cap, gr_error *err) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "--interface %s: cannot list the interfaces",
                        ifname);
  bool found = false, named = false;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_name || strcmp(i->ifa_name, ifname) != 0) continue;
    named = true;
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
      found = getnameinfo(i->ifa_addr, sizeof(struct sockaddr_in), out, (socklen_t)cap, NULL, 0,
                          NI_NUMERICHOST) == 0;
  }
  if (!found) /* an IPv6-only interface: its first global address */
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
      if (i->ifa_name && !strcmp(i->ifa_name, ifname) && i->ifa_addr &&
          i->ifa_addr->sa_family == AF_INET6 &&
          !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
        found = getnameinfo(i->ifa_addr, sizeof(struct sockaddr_in6), out, (socklen_t)cap, NULL, 0,
                            NI_NUMERICHOST) == 0;
  freeifaddrs(ifs);
  if (found) return GR_OK;
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      named ? "--interface %s: the interface has no address"
                            : "--interface %s: no such network interface (ip -brief address lists "
                              "them)",
                      ifname);
}

/* A task of c whose host this host resolves to something other than
 * loopback, or -1: the cluster spans hosts when there is one. */
static int remote_task(const gr_cluster *c, char *shown, size_t cap) {
  for (int k = 0; k < gr_cluster_num_tasks(c); k++) {
    const char *h = gr_cluster_task_at(c, k)->host;
    if (!cli_host_literal_loopback(h) && cli_host_resolve_kind(h, shown, cap) == CLI_HOST_REMOTE)
      return k;
  }
  return -1;
}

gr_status cli_cluster_check_hosts(const gr_cluster *c, const char *from, gr_error *err) {
  int lo = -1;
  for (int k = 0; k < gr_cluster_num_tasks(c) && lo < 0; k++)
    if (gr_cluster_task_at(c, k)->address &&
        cli_host_literal_loopback(gr_cluster_task_at(c, k)->host))
      lo = k;
  if (lo < 0) return GR_OK;
  char shown[64];
  int far = remote_task(c, shown, sizeof shown);
  if (far < 0) return GR_OK; /* every task on this host */
  const gr_cluster_task *t = gr_cluster_task_at(c, lo), *r = gr_cluster_task_at(c, far);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "%s: /job:%s/task:%d is at %s, a loopback address, but the cluster spans "
                      "hosts (/job:%s/task:%d is on %s, %s): the other hosts' tasks would reach "
                      "their own loopback there, not that task; name its host by a name or "
                      "address the others can reach",
                      from, t->job, t->index, t->address, r->job, r->index, r->host, shown);
}

gr_status cli_check_bind(const gr_cluster *c, int self, const char *bind, gr_error *err) {
  char host[GR_CLUSTER_HOST_MAX], shown[64], far_shown[64];
  int port;
  if (!c || gr_cluster_split_address(bind, host, sizeof host, &port, NULL) != GR_OK) return GR_OK;
  bool literal = cli_host_literal_loopback(host);
  if (!literal && cli_host_resolve_kind(host, shown, sizeof shown) != CLI_HOST_LOOPBACK)
    return GR_OK;
  if (literal) snprintf(shown, sizeof shown, "%s", host);
  int far = remote_task(c, far_shown, sizeof far_shown);
  if (far < 0) return GR_OK; /* the whole cluster is on this host */
  const gr_cluster_task *t = gr_cluster_task_at(c, self), *r = gr_cluster_task_at(c, far);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "/job:%s/task:%d would listen on %s, which is %s here, a loopback address "
                      "(Debian's /etc/hosts maps a host's own name to 127.0.1.1), but the cluster "
                      "spans hosts (/job:%s/task:%d is on %s, %s): the other hosts could not "
                      "reach it. Listen on every interface with --bind 0.0.0.0:%d (as TensorFlow "
                      "does; the spec keeps naming %s for the others), or on one with --interface "
                      "IFACE",
                      t->job, t->index, bind, shown, r->job, r->index, r->host, far_shown, port,
                      host);
}
