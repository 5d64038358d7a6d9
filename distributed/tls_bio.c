/* The socket BIO under a connection's SSL (tls_internal.h,
 * gr_tls_socket_bio): OpenSSL's own socket BIO writes with write(2), which
 * raises SIGPIPE on a socket whose peer has closed and ends a process that
 * does not ignore it (a program embedding graphrun). This one writes with
 * send(2) and MSG_NOSIGNAL (EPIPE instead) and reads with recv(2); it is
 * otherwise OpenSSL's: non-blocking (EAGAIN is a retry), the end of the
 * stream kept for BIO_eof (SSL_OP_IGNORE_UNEXPECTED_EOF needs it), errno
 * left as the call set it and nothing on OpenSSL's error queue.
 *
 * The method is made once per process and never freed (every BIO holds
 * it); a BIO has no memory of its own: the fd is its data pointer. A BIO
 * is used under its SSL's caller's serialization (transport_tls.c). */
#include <errno.h>
#include <openssl/bio.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "distributed/tls_internal.h"

static int fd_of(BIO *b) {
  return (int)(intptr_t)BIO_get_data(b);
}

/* After a failed call: EAGAIN and the like are a retry (the caller polls). */
static bool retry_errno(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS || e == EALREADY;
}

static int bio_write(BIO *b, const char *in, int n) {
  BIO_clear_retry_flags(b);
  if (!BIO_get_init(b) || n < 0) return -1;
  ssize_t w;
  errno = 0;
  do { w = send(fd_of(b), in, (size_t)n, MSG_NOSIGNAL); } while (w < 0 && errno == EINTR);
  if (w < 0 && retry_errno(errno)) BIO_set_retry_write(b);
  return (int)w;
}

static int bio_read(BIO *b, char *out, int n) {
  BIO_clear_retry_flags(b);
  if (!BIO_get_init(b) || !out || n < 0) return -1;
  ssize_t r;
  errno = 0;
  do { r = recv(fd_of(b), out, (size_t)n, 0); } while (r < 0 && errno == EINTR);
  if (r < 0 && retry_errno(errno)) BIO_set_retry_read(b);
  if (r == 0 && n > 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
  return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  switch (cmd) {
    case BIO_C_SET_FD: { /* BIO_set_fd(b, fd, BIO_NOCLOSE or BIO_CLOSE) */
      int fd = *(const int *)ptr;
      BIO_set_data(b, (void *)(intptr_t)fd);
      BIO_set_shutdown(b, (int)num);
      BIO_set_init(b, 1);
      return 1;
    }
    case BIO_C_GET_FD: /* BIO_get_fd, SSL_get_fd */
      if (!BIO_get_init(b)) return -1;
      if (ptr) *(int *)ptr = fd_of(b);
      return fd_of(b);
    case BIO_CTRL_GET_CLOSE:
      return BIO_get_shutdown(b);
    case BIO_CTRL_SET_CLOSE:
      BIO_set_shutdown(b, (int)num);
      return 1;
    case BIO_CTRL_EOF:
      return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_CTRL_FLUSH: /* nothing buffered: every write went to the socket */
    case BIO_CTRL_DUP:
      return 1;
    case BIO_CTRL_PUSH: /* another BIO put on or taken off this one: nothing to do */
    case BIO_CTRL_POP:
    case BIO_CTRL_PENDING: /* nothing held for reading or writing */
    case BIO_CTRL_WPENDING:
    default: /* kTLS and the rest: not supported */
      return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_data(b, NULL);
  BIO_set_init(b, 0);
  BIO_set_shutdown(b, BIO_NOCLOSE);
  return 1;
}

static int bio_destroy(BIO *b) {
  if (!b) return 0;
  if (BIO_get_init(b) && BIO_get_shutdown(b) == BIO_CLOSE) close(fd_of(b));
  BIO_set_init(b, 0);
  BIO_set_data(b, NULL);
  return 1;
}

static BIO_METHOD *method;

static void make_method(void) {
  int index = BIO_get_new_index();
  if (index < 0) return;
  BIO_METHOD *m =
      BIO_meth_new(index | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "graphrun socket");
  if (!m) return;
  if (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
      !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create) ||
      !BIO_meth_set_destroy(m, bio_destroy)) {
    BIO_meth_free(m);
    return;
  }
  method = m;
}

BIO *gr_tls_socket_bio(int fd) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_method);
  BIO *b = method ? BIO_new(method) : NULL;
  if (b) BIO_set_fd(b, fd, BIO_NOCLOSE);
  return b;
}
