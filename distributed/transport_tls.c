/* The transport's TLS (docs/security.md, "TLS"): which peers a connection
 * protects, a connection's reads and writes through its SSL, and the
 * server's side of the TLS handshake, which starts once HELLO is out and
 * the client's first TLS bytes arrive (one that closes before sending any,
 * a port probe, is closed as quietly as without TLS). Contexts and
 * certificates are tls.c's. Every call on a connection's SSL is made under
 * its mu: the loop thread reads, any thread writes. */
#include <errno.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distributed/transport_conn_internal.h"

static bool loopback_remote; /* tests and benchmarks: loopback counts as another host */

void gr_transport_set_loopback_remote(bool on) {
  __atomic_store_n(&loopback_remote, on, __ATOMIC_RELAXED);
}

bool gr_peer_is_remote(const struct sockaddr *sa) {
  if (__atomic_load_n(&loopback_remote, __ATOMIC_RELAXED)) return true;
  if (sa->sa_family == AF_UNIX) return false; /* transport_local.c: this host */
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) != 127;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a)) return false;
    return !(IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return true;
}

int gr_conn_mode(const gr_conn *c) {
  return c->tls_state != TLS_OFF ? GR_AUTH_MODE_TLS : c->rx_mac ? GR_AUTH_MODE_MACS : 0;
}

/* What a failed SSL call (its return ret) means for the transport: -1
 * with errno EAGAIN (it waits: for a writable socket when it says so),
 * EPIPE or 0 (the peer closed: 0 for a read), the socket's errno, or
 * EPROTO (c->tls_why says why). Under c->mu. */
static ssize_t io_failed(gr_conn *c, int ret, bool reading) {
  switch (gr_tls_result(c->ssl, ret, c->tls_why, sizeof c->tls_why)) {
    case GR_TLS_WANT_WRITE:
      if (reading) gr_conn_want_write_locked(c);
      /* fall through */
    case GR_TLS_WANT_READ: /* a write that wants to read: TLS 1.3 has no renegotiation */
      errno = EAGAIN;
      return -1;
    case GR_TLS_CLOSED:
      if (reading) return 0;
      errno = EPIPE;
      return -1;
    case GR_TLS_SYSCALL:
      return -1;
    default:
      errno = EPROTO;
      return -1;
  }
}

ssize_t gr_conn_tls_write(gr_conn *c, const struct iovec *v, int n) {
  GR_ASSERT_HELD(&c->mu);
  const void *p = v[0].iov_base;
  size_t len = v[0].iov_len;
  if (len < GR_TLS_GATHER) { /* small pieces: one record, one write */
    len = 0;
    for (int i = 0; i < n && len < GR_TLS_GATHER; i++) {
      size_t take = v[i].iov_len < GR_TLS_GATHER - len ? v[i].iov_len : GR_TLS_GATHER - len;
      memcpy(c->gather + len, v[i].iov_base, take);
      len += take;
    }
    p = c->gather;
  }
  size_t w = 0;
  int ret = SSL_write_ex(c->ssl, p, len, &w);
  return ret == 1 ? (ssize_t)w : io_failed(c, ret, false);
}

ssize_t gr_conn_read(gr_conn *c, void *buf, size_t n) {
  if (c->tls_state != TLS_ON) return read(c->fd, buf, n);
  pthread_mutex_lock(&c->mu);
  size_t got = 0;
  ssize_t r;
  if (!c->ssl) {
    errno = EBADF;
    r = -1;
  } else {
    int ret = SSL_read_ex(c->ssl, buf, n, &got);
    r = ret == 1 ? (ssize_t)got : io_failed(c, ret, true);
  }
  pthread_mutex_unlock(&c->mu);
  return r;
}

size_t gr_conn_tls_pending(gr_conn *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->ssl && SSL_has_pending(c->ssl) ? (size_t)SSL_pending(c->ssl) + 1 : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

bool gr_conn_tls_accept(gr_conn *c) {
  gr_error e;
  pthread_mutex_lock(&c->mu);
  if (!c->ssl && !(c->ssl = gr_tls_ssl(c->tls, c->fd, true, &e))) {
    pthread_mutex_unlock(&c->mu);
    gr_conn_close_now(c, e.code, e.msg);
    return false;
  }
  int ret = SSL_do_handshake(c->ssl);
  if (BIO_number_read(SSL_get_rbio(c->ssl)) > 0) c->tls_heard = true;
  gr_tls_io io = GR_TLS_FAILED;
  if (ret == 1)
    c->tls_state = TLS_ON;
  else if ((io = gr_tls_result(c->ssl, ret, c->tls_why, sizeof c->tls_why)) == GR_TLS_WANT_WRITE)
    gr_conn_want_write_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (ret == 1) {
    gr_tls_unref(c->tls);
    c->tls = NULL;
    if ((c->gather = malloc(GR_TLS_GATHER))) return true;
    gr_conn_close_now(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory for a TLS connection");
    return false;
  }
  if (io == GR_TLS_WANT_READ || io == GR_TLS_WANT_WRITE) return false;
  /* gone before a byte of TLS (a port probe; a reset: it left HELLO unread)
   * ends as without TLS, unlogged */
  if (!c->tls_heard && (io == GR_TLS_CLOSED || io == GR_TLS_SYSCALL)) {
    char why[sizeof c->tls_why + 160];
    if (io == GR_TLS_CLOSED)
      snprintf(why, sizeof why, "%s closed the connection", c->peer);
    else
      snprintf(why, sizeof why, "connection reset by %s (%s)", c->peer, c->tls_why);
    gr_conn_close_now(c, io == GR_TLS_CLOSED ? GR_OK : GR_ERR_UNAVAILABLE, why);
    return false;
  }
  char why[sizeof c->tls_why + 160];
  if (io == GR_TLS_CLOSED)
    snprintf(why, sizeof why, "it closed the connection in the TLS handshake");
  else if (io == GR_TLS_SYSCALL)
    snprintf(why, sizeof why, "the TLS handshake failed: %s", c->tls_why);
  else
    snprintf(why, sizeof why, "the TLS handshake failed: %s (this server trusts the CA %s)",
             c->tls_why, gr_tls_ca_file(c->tls));
  gr_conn_refuse(c, GR_ERR_UNAUTHENTICATED, why);
  return false;
}
