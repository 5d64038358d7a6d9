/* Connections between processes of one host over Unix domain sockets
 * instead of loopback TCP: the kernel copies a frame's bytes once each way
 * without TCP's stack (a 2 x 538 KB ring all-reduce between two processes:
 * 190-200 us against 230-400 us over loopback TCP, on the development VM).
 *
 * A server listening on a loopback address also listens on the abstract
 * Unix socket "graphrun-tcp:IP:PORT" ("[IP6]" for IPv6) named after it (no file; gone with the
 * process; one per network namespace, as the TCP port is); a client dialing
 * a loopback address tries that name first and falls back to TCP. What
 * runs over the connection is unchanged: the same frames, the same HELLO
 * with the cluster's secret (a local peer, as on loopback: no MACs or TLS).
 * A client uses the socket only when the process listening there runs as
 * its own user (SO_PEERCRED): another user who took the name first, a
 * port the server has not bound yet, gets nothing, the client dials TCP.
 * Off with GRAPHRUN_LOCAL_SOCKETS=0, and when loopback counts as another
 * host (gr_transport_set_loopback_remote: tests of TLS and MACs). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "distributed/transport_conn_internal.h"

#define LOCAL_BUFFER_BYTES (4 << 20) /* asked; the kernel caps it (net.core.wmem_max) */

/* A Unix socket (-1: none) and, in *un, the abstract name of TCP address
 * sa: only for a loopback address (which loopback counting as another
 * host also rules out) with local sockets on. */
static int local_socket(const struct sockaddr *sa, struct sockaddr_un *un, socklen_t *len) {
  const char *v = getenv("GRAPHRUN_LOCAL_SOCKETS");
  if ((v && !strcmp(v, "0")) || gr_peer_is_remote(sa) ||
      (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
    return -1;
  char name[80];
  gr_sockaddr_name(sa, name, sizeof name);
  *un = (struct sockaddr_un){.sun_family = AF_UNIX};
  /* sun_path[0] = '\0': the abstract namespace */
  int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "graphrun-tcp:%s", name);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
  return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
}

void gr_local_tune(int fd) {
  int bytes = LOCAL_BUFFER_BYTES;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int gr_local_listen(const struct sockaddr *bound) {
  struct sockaddr_un un;
  socklen_t len;
  int fd = local_socket(bound, &un, &len);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&un, len) != 0 || listen(fd, 128) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int gr_local_connect(const struct sockaddr *to) {
  struct sockaddr_un un;
  socklen_t len;
  int fd = local_socket(to, &un, &len);
  if (fd < 0) return -1;
  struct ucred cred;
  socklen_t cl = sizeof cred;
  if (connect(fd, (struct sockaddr *)&un, len) != 0 || /* nothing there: TCP */
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid()) {
    close(fd);
    return -1;
  }
  return fd;
}

void gr_local_peer_name(int fd, char *out, size_t cap) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    snprintf(out, cap, "local process %d", (int)cred.pid);
  else
    snprintf(out, cap, "a local process");
}
