/* TLS and per-frame MACs on real connections in this process
 * (distributed/transport_tls.c, frame_mac_internal.h): a listener and a
 * dialer whose loopback connections count as across hosts
 * (gr_transport_set_loopback_remote), with the certificates the openssl
 * commands of docs/security.md make (tls_certs.h). Frames of every size,
 * from two threads at once, arrive intact over TLS and with MACs; loopback
 * stays plaintext; certificates and keys that cannot work are refused at
 * start, naming the file; a peer with a certificate of another CA, a
 * plaintext peer and a TLS client of a server without TLS are refused with
 * errors naming the address (and the server's log the peer); and a byte
 * altered on the way by a proxy (fault_proxy.h, TAMPER) closes the
 * connection before the frame is delivered, in both directions; a write to
 * a peer that has closed fails with EPIPE, without SIGPIPE. A body the
 * receiver asked for in a buffer of its own (gr_conn_handler.body_into)
 * arrives there, intact, in every mode. Between
 * processes in network namespaces: test_dist_netns_tls. */
#include <errno.h>
#include <fcntl.h>
#include <graphrun.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "distributed/tls_internal.h"
#include "distributed/transport_internal.h"
#include "fault_proxy.h"
#include "gr_test.h"
#include "wire_frames.h"
#include "test_proc.h" /* gt_now */
#include "tls_certs.h"

#define SECRET  "tls-test-secret-of-16+"
#define CLUSTER "tls-test"
#define WAIT_MS 30000 /* generous: a busy machine */

static gt_certs K;

/* One end: its loop, what it received and how its connections ended. */
typedef struct end {
  gr_loop *loop;
  gr_listener *ls;
  int port;
  bool echo; /* a server: answers every frame with the same */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int got, bad, mode, closed;
  bool silent;                /* the last closed connection's peer sent nothing */
  char why[GR_ERROR_MSG_MAX]; /* the last close's */
  char log[16384];
  size_t log_len;
  /* frames of odd sequence numbers read into this buffer while it has room
   * (gr_conn_handler.body_into); how many were, how many arrived so */
  gr_buffer *into;
  size_t into_at;
  int into_given, into_seen;
} end;

/* The test's frames (others: the dialer's keepalives, not counted). */
static void on_message(void *arg, gr_conn *c, gr_inmsg *in) {
  end *e = arg;
  uint64_t seq = 0;
  if (in->h.type != GR_MSG_TENSOR) return gr_inmsg_free(in);
  bool ok = gt_frame_intact(in, &seq);
  uint64_t n = 0;
  gr_msg_u64(&in->msg.root, "n", &n, NULL);
  bool read_into = in->body && in->body == e->into;
  gr_inmsg_free(in);
  pthread_mutex_lock(&e->mu);
  e->into_seen += read_into;
  e->got++;
  e->bad += !ok;
  e->mode = gr_conn_mode(c);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  if (e->echo) gr_conn_send(c, gt_frame(seq, n), NULL);
}

static void on_close(void *arg, gr_conn *c, const gr_error *why) {
  end *e = arg;
  pthread_mutex_lock(&e->mu);
  e->closed++;
  e->silent = gr_conn_sent_nothing(c);
  snprintf(e->why, sizeof e->why, "%s", why->msg);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void on_log(void *arg, const char *line) {
  end *e = arg;
  pthread_mutex_lock(&e->mu);
  e->log_len += (size_t)snprintf(e->log + e->log_len, sizeof e->log - e->log_len, "%s\n", line);
  if (e->log_len >= sizeof e->log) e->log_len = sizeof e->log - 1;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void on_log_quiet(void *arg, const char *line) {}

/* Odd frames into e->into, each at the next multiple of 64, while they fit. */
static bool body_into(void *arg, gr_conn *c, const gr_inmsg *m, gr_buffer **buf, size_t *off) {
  end *e = arg;
  uint64_t seq = 0;
  if (!e->into || gr_msg_u64(&m->msg.root, "seq", &seq, NULL) != GR_OK || seq % 2 == 0 ||
      e->into_at + m->h.body_len > e->into->capacity)
    return false;
  *buf = e->into;
  gr_buffer_retain(e->into);
  *off = e->into_at;
  e->into_at += (m->h.body_len + 63) / 64 * 64;
  pthread_mutex_lock(&e->mu);
  e->into_given++;
  pthread_mutex_unlock(&e->mu);
  return true;
}

static gr_conn_handler handler(end *e) {
  return (gr_conn_handler){on_message, on_close, e, on_log, NULL, body_into};
}

static bool end_start(end *e, bool server, const gr_conn_auth *auth) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->echo = server;
  gr_error err;
  gr_conn_handler h = handler(e);
  bool ok = gr_loop_new(&e->loop, &err) == GR_OK &&
            (!server ||
             gr_listener_new(e->loop, "127.0.0.1", 0, auth, &h, &e->ls, &e->port, &err) == GR_OK);
  GR_CHECK_MSG(ok, "%s", err.msg);
  return ok;
}

static void end_stop(end *e) {
  gr_listener_free(e->ls);
  gr_loop_free(e->loop);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
}

/* Waits until cond(e) holds (under e->mu), at most WAIT_MS. */
static bool wait_for(end *e, bool (*cond)(end *, const void *), const void *arg) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&e->mu);
  bool ok;
  while (!(ok = cond(e, arg)) && pthread_cond_timedwait(&e->cv, &e->mu, &until) != ETIMEDOUT) {}
  ok = cond(e, arg);
  pthread_mutex_unlock(&e->mu);
  return ok;
}
static bool got_at_least(end *e, const void *n) {
  return e->got >= *(const int *)n;
}
static bool closed(end *e, const void *unused) {
  return e->closed > 0;
}
static bool logged(end *e, const void *want) {
  return strstr(e->log, want) != NULL;
}

static gr_tls *tls_of(const char *cert, const char *key, const char *ca) {
  gr_tls *t = NULL;
  gr_error err;
  GR_CHECK_OK(gr_tls_new(cert, key, ca, &t, &err), err);
  return t;
}

static gr_status dial(end *cl, int port, const gr_conn_auth *auth, gr_conn **c, gr_error *err) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  gr_conn_handler h = handler(cl);
  return gr_conn_dial(cl->loop, addr, auth, WAIT_MS, &h, c, err);
}

/* ---- frames arrive intact --------------------------------------------------------- */

typedef struct sender {
  gr_conn *c;
  int first, count;
} sender;

static const size_t sizes[] = {0, 100, 20000, (3u << 20) + 5};

static void *send_main(void *arg) {
  sender *s = arg;
  for (int i = s->first; i < s->first + s->count; i++)
    if (gr_conn_send(s->c, gt_frame((uint64_t)i, sizes[i % 4]), NULL) != GR_OK) break;
  return NULL;
}

/* 2 x 40 frames of every size from two threads, echoed: all intact, the
 * connection in the mode want on both ends. */
static void exchange(gr_tls *s_tls, gr_tls *c_tls, int want) {
  end srv, cl;
  gr_conn_auth sa = {SECRET, CLUSTER, s_tls}, ca = {SECRET, CLUSTER, c_tls};
  if (!end_start(&srv, true, &sa) || !end_start(&cl, false, NULL)) return;
  srv.into = gr_buffer_alloc(8u << 20); /* room for a few of the 3 MiB frames, then none */
  gr_conn *c = NULL;
  gr_error err;
  GR_CHECK_OK(dial(&cl, srv.port, &ca, &c, &err), err);
  if (c) {
    GR_CHECK_EQ_INT(gr_conn_mode(c), want);
    sender s[2] = {{c, 0, 40}, {c, 40, 40}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, send_main, &s[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    int n = 80;
    GR_CHECK_MSG(wait_for(&cl, got_at_least, &n), "%d of %d echoes arrived (%s)", cl.got, n,
                 cl.why);
    GR_CHECK_EQ_INT(srv.got, 80);
    GR_CHECK_EQ_INT(srv.bad + cl.bad, 0);
    GR_CHECK_EQ_INT(srv.mode, want);
    GR_CHECK_EQ_INT(cl.closed + srv.closed, 0);
    /* some frames were read into the server's buffer, as many as it gave */
    GR_CHECK_MSG(srv.into_given >= 20 && srv.into_seen == srv.into_given,
                 "%d frames given a buffer, %d arrived in it", srv.into_given, srv.into_seen);
    gr_conn_close(c);
    gr_conn_unref(c);
  }
  end_stop(&cl);
  end_stop(&srv);
  GR_CHECK_EQ_INT(srv.into->refcount, 1); /* every message's reference let go */
  gr_buffer_release(srv.into);
}

/* ---- no SIGPIPE from a peer that closed ------------------------------------------- */

/* An SSL call that failed (ret) on ssl: that it failed as want, and, for a
 * GR_TLS_SYSCALL, with errno want_errno; else says how it did, on stderr. */
static bool failed_as(SSL *ssl, int ret, gr_tls_io want, int want_errno, const char *what) {
  char why[256] = "";
  gr_tls_io io = ret == 1 ? (gr_tls_io)-1 : gr_tls_result(ssl, ret, why, sizeof why);
  int e = errno;
  if (io == want && (want != GR_TLS_SYSCALL || e == want_errno)) return true;
  fprintf(stderr, "%s: returned %d, gr_tls_result %d (want %d), errno %d (want %d) %s\n", what, ret,
          (int)io, (int)want, e, want_errno, why);
  return false;
}

/* Both ends of a TLS connection over the non-blocking socketpair sv, in
 * this thread: the handshake, a read that waits, a record each way. */
static bool handshake_pair(gr_tls *t, int sv[2], SSL **cl, SSL **sv_ssl) {
  gr_error err;
  *cl = gr_tls_ssl(t, sv[0], false, &err);
  *sv_ssl = gr_tls_ssl(t, sv[1], true, &err);
  if (!*cl || !*sv_ssl) return false;
  bool cdone = false, sdone = false;
  for (int i = 0; i < 1000 && !(cdone && sdone); i++) {
    int rc = cdone ? 1 : SSL_do_handshake(*cl), rs = sdone ? 1 : SSL_do_handshake(*sv_ssl);
    cdone = rc == 1, sdone = rs == 1;
    if ((!cdone && !failed_as(*cl, rc, GR_TLS_WANT_READ, 0, "the client's handshake")) ||
        (!sdone && !failed_as(*sv_ssl, rs, GR_TLS_WANT_READ, 0, "the server's handshake")))
      return false;
  }
  char buf[8];
  size_t n = 0;
  if (!cdone || !sdone ||
      !failed_as(*cl, SSL_read_ex(*cl, buf, sizeof buf, &n), GR_TLS_WANT_READ, 0,
                 "a read before anything was sent") ||
      SSL_write_ex(*sv_ssl, "ping", 4, &n) != 1 || SSL_read_ex(*cl, buf, sizeof buf, &n) != 1 ||
      n != 4 || memcmp(buf, "ping", 4) != 0)
    return false;
  return true;
}

/* In a child process, as a program embedding graphrun: SIGPIPE at its
 * default disposition (ends the process) and unblocked. A ClientHello
 * written to a peer that has closed, and a record after the handshake,
 * fail with EPIPE; a read then sees the end of the stream. 0 when all
 * did; a SIGPIPE ends the child. */
static int closed_peer_child(gr_tls *t) {
  signal(SIGPIPE, SIG_DFL);
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_UNBLOCK, &pipe, NULL);
  alarm(60); /* whatever happens, it ends */
  int sv[2];
  gr_error err;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
  close(sv[1]);
  SSL *ssl = gr_tls_ssl(t, sv[0], false, &err);
  if (!ssl) return 3;
  if (!failed_as(ssl, SSL_connect(ssl), GR_TLS_SYSCALL, EPIPE, "a handshake to a closed peer"))
    return 4;
  SSL_free(ssl);
  close(sv[0]);
  SSL *cl = NULL, *srv = NULL;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 2;
  if (!handshake_pair(t, sv, &cl, &srv)) return 5;
  SSL_free(srv);
  close(sv[1]);
  size_t n;
  char buf[8];
  if (!failed_as(cl, SSL_write_ex(cl, "x", 1, &n), GR_TLS_SYSCALL, EPIPE,
                 "a write to a closed peer"))
    return 6;
  if (!failed_as(cl, SSL_read_ex(cl, buf, sizeof buf, &n), GR_TLS_CLOSED, 0,
                 "a read from a closed peer"))
    return 7;
  SSL_free(cl);
  close(sv[0]);
  return 0;
}

/* gr_tls_ssl's BIO sends with MSG_NOSIGNAL: OpenSSL's own socket BIO
 * (SSL_set_fd) writes with write(2), which raises SIGPIPE on a socket whose
 * peer closed and would end the child here. */
static void test_closed_peer_no_sigpipe(void) {
  gr_tls *t = tls_of(K.cert, K.key, K.ca);
  if (!t) return;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork(); /* the first test: no other threads yet */
  GR_CHECK(pid >= 0);
  if (pid == 0) _exit(closed_peer_child(t));
  if (pid < 0) return gr_tls_unref(t);
  int status = 0;
  pid_t w;
  while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
  GR_CHECK(w == pid);
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  GR_CHECK_MSG(sig == 0, "the child was killed by signal %d (%s)%s", sig, strsignal(sig),
               sig == SIGPIPE ? ": a write to the closed peer raised SIGPIPE" : "");
  GR_CHECK_MSG(!WIFEXITED(status) || WEXITSTATUS(status) == 0,
               "the child exited with %d (the lines above say why)", WEXITSTATUS(status));
  gr_tls_unref(t);
}

static void test_tls_frames(void) {
  gr_transport_set_loopback_remote(true);
  gr_tls *t = tls_of(K.cert, K.key, K.ca);
  if (t) exchange(t, t, GR_AUTH_MODE_TLS);
  gr_tls_unref(t);
}

static void test_mac_frames(void) {
  gr_transport_set_loopback_remote(true);
  exchange(NULL, NULL, GR_AUTH_MODE_MACS);
}

static void test_loopback_plaintext(void) {
  gr_transport_set_loopback_remote(false);
  gr_tls *t = tls_of(K.cert, K.key, K.ca);
  if (t) exchange(t, t, 0);
  gr_tls_unref(t);
}

/* ---- what cannot work is refused at start ---------------------------------------- */

static void refused_at_start(const char *cert, const char *key, const char *ca, const char *want1,
                             const char *want2) {
  gr_tls *t = NULL;
  gr_error err;
  gr_status st = gr_tls_new(cert, key, ca, &t, &err);
  GR_CHECK_MSG(st != GR_OK && !t, "accepted %s %s %s", cert, key, ca);
  if (st == GR_OK) return gr_tls_unref(t);
  GR_CHECK_STR_CONTAINS(err.msg, want1);
  GR_CHECK_STR_CONTAINS(err.msg, want2);
}

static void test_bad_files(void) {
  refused_at_start("/nonexistent/node.crt", K.key, K.ca,
                   "TLS certificate file /nonexistent/node.crt", "No such file");
  refused_at_start(K.key, K.key, K.ca, "TLS certificate file", "want PEM");
  refused_at_start(K.cert, K.rogue_key, K.ca, "is not the key of the certificate", K.rogue_key);
  refused_at_start(K.cert, K.key, K.key, "TLS CA file", K.key);
  /* signed by another CA than the one given */
  refused_at_start(K.rogue_cert, K.rogue_key, K.ca, "does not verify against the CA", K.rogue_cert);
  /* a certificate for TLS servers only: a task is a TLS client too */
  refused_at_start(K.server_cert, K.server_key, K.ca, "as a TLS client", "clientAuth");
  /* a key others may read */
  char loose[PATH_MAX];
  snprintf(loose, sizeof loose, "%s/loose.key", K.dir);
  char cmd[2 * PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "cp %s %s && chmod 644 %s", K.key, loose, loose);
  GR_CHECK(system(cmd) == 0);
  refused_at_start(K.cert, loose, K.ca, "has mode 0644", "chmod 600");
  /* all three or none, from the options */
  gr_server_options so = {.job = "worker", .secret = SECRET, .tls_cert = K.cert};
  gr_server *s = NULL;
  gr_error err;
  GR_CHECK_EQ_INT(gr_server_new(&so, &s, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "missing: the key, the CA");
  gr_server_free(s);
  const char *addrs[] = {"127.0.0.1:1"};
  gr_master_options mo = {
      .num_tasks = 1, .addresses = addrs, .secret = SECRET, .tls_key = K.key, .tls_ca = K.ca};
  gr_master *m = NULL;
  GR_CHECK_EQ_INT(gr_master_new(&mo, &m, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "master: TLS needs");
  GR_CHECK_STR_CONTAINS(err.msg, "missing: the certificate");
  gr_master_free(m);
}

/* ---- peers that are refused ------------------------------------------------------ */

/* A dial from a client with c_tls (secret: c_secret) to a server with
 * s_tls must fail with GR_ERR_UNAUTHENTICATED, its error holding want;
 * the server's log must hold s_want (NULL: nothing to wait for). */
static void refused(gr_tls *s_tls, gr_tls *c_tls, const char *want, const char *s_want) {
  gr_transport_set_loopback_remote(true);
  end srv, cl;
  gr_conn_auth sa = {SECRET, CLUSTER, s_tls}, ca = {SECRET, CLUSTER, c_tls};
  if (!end_start(&srv, true, &sa) || !end_start(&cl, false, NULL)) return;
  gr_conn *c = NULL;
  gr_error err;
  gr_status st = dial(&cl, srv.port, &ca, &c, &err);
  GR_CHECK_MSG(st == GR_ERR_UNAUTHENTICATED, "%s: %s", gr_status_name(st), err.msg);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", srv.port);
  if (st != GR_OK) {
    GR_CHECK_STR_CONTAINS(err.msg, addr);
    GR_CHECK_STR_CONTAINS(err.msg, want);
    printf("client: %s\n", err.msg);
  }
  if (s_want) {
    GR_CHECK_MSG(wait_for(&srv, logged, s_want), "the server's log lacks '%s':\n%s", s_want,
                 srv.log);
    GR_CHECK_STR_CONTAINS(srv.log, "refused 127.0.0.1:");
    printf("server: %s", srv.log);
  }
  GR_CHECK_EQ_INT(srv.got, 0);
  if (c) gr_conn_close(c), gr_conn_unref(c);
  end_stop(&cl);
  end_stop(&srv);
}

static void test_wrong_ca(void) {
  gr_tls *good = tls_of(K.cert, K.key, K.ca);
  /* the client trusts another CA: the server's certificate is not one */
  gr_tls *other = tls_of(K.rogue_cert, K.rogue_key, K.other_ca);
  /* the client trusts both, but its certificate is of the other CA */
  char both[PATH_MAX], cmd[3 * PATH_MAX + 16];
  snprintf(both, sizeof both, "%s/both-cas.crt", K.dir);
  snprintf(cmd, sizeof cmd, "cat %s %s > %s", K.ca, K.other_ca, both);
  GR_CHECK(system(cmd) == 0);
  gr_tls *rogue = tls_of(K.rogue_cert, K.rogue_key, both);
  if (good && other && rogue) {
    refused(good, other, "certificate verify failed", "the TLS handshake failed");
    refused(good, rogue, "refused this process's TLS certificate", "certificate verify failed");
  }
  gr_tls_unref(good), gr_tls_unref(other), gr_tls_unref(rogue);
}

static void test_plaintext_refused(void) {
  gr_tls *good = tls_of(K.cert, K.key, K.ca);
  if (!good) return;
  /* a client without TLS, a server that requires it */
  refused(good, NULL, "requires TLS", NULL);
  /* a TLS client across hosts, a server without it */
  refused(NULL, good, "does not offer TLS", NULL);
  /* a client that ignores HELLO's mode and sends its AUTH in plaintext */
  end srv;
  gr_conn_auth sa = {SECRET, CLUSTER, good};
  gr_transport_set_loopback_remote(true);
  if (end_start(&srv, true, &sa)) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)srv.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    GR_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    uint8_t buf[512];
    GR_CHECK(read(fd, buf, sizeof buf) > 0); /* HELLO */
    gr_outmsg *m = gr_outmsg_new(GR_MSG_AUTH, 1);
    gr_outmsg_str(m, "cluster", CLUSTER);
    struct iovec *iov;
    int n;
    size_t total;
    gr_error err;
    GR_CHECK_OK(gr_outmsg_finish(m, &iov, &n, &total, &err), err);
    GR_CHECK(write(fd, iov[0].iov_base, total) == (ssize_t)total);
    gr_outmsg_free(m);
    GR_CHECK_MSG(wait_for(&srv, logged, "does not speak TLS"), "the server's log:\n%s", srv.log);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    GR_CHECK(poll(&p, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) <= 0); /* closed */
    close(fd);
    GR_CHECK_EQ_INT(srv.got, 0);
    end_stop(&srv);
  }
  gr_tls_unref(good);
}

/* ---- port probes ------------------------------------------------------------------ */

/* A peer on another host connects to a server and closes, sending `say`
 * (NULL: nothing); reset: once the server's HELLO has arrived, unread (the
 * close resets the connection). Nothing sent: a port probe (a readiness
 * check), which the server's log does not mention and its handler sees as
 * one that sent nothing; anything sent: refused, and logged. */
static void probe(gr_tls *tls, const char *say, bool reset) {
  gr_transport_set_loopback_remote(true);
  end srv;
  gr_conn_auth sa = {SECRET, CLUSTER, tls};
  if (!end_start(&srv, true, &sa)) return;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)srv.port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  GR_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  if (say) GR_CHECK(write(fd, say, strlen(say)) == (ssize_t)strlen(say));
  struct pollfd hello = {.fd = fd, .events = POLLIN};
  if (reset) GR_CHECK(poll(&hello, 1, WAIT_MS) == 1);
  close(fd);
  GR_CHECK_MSG(wait_for(&srv, closed, NULL), "the server did not see the probe end");
  end_stop(&srv);
  GR_CHECK_MSG(srv.silent == !say, "%s: the peer %s", tls ? "TLS" : "MACs",
               srv.silent ? "sent nothing" : "sent something");
  if (!say)
    GR_CHECK_MSG(!strstr(srv.log, "refused"), "%s: the probe was logged:\n%s", tls ? "TLS" : "MACs",
                 srv.log);
  else
    GR_CHECK_MSG(strstr(srv.log, "refused"), "%s: not logged: %s", tls ? "TLS" : "MACs", srv.why);
}

static void test_probe_unlogged(void) {
  gr_tls *t = tls_of(K.cert, K.key, K.ca);
  if (!t) return;
  for (int reset = 0; reset < 2; reset++) {
    probe(t, NULL, reset);
    probe(NULL, NULL, reset);
  }
  probe(t, "GET / HTTP/1.0\r\n\r\n", false);
  gr_tls_unref(t);
}

/* ---- a frame altered on the way --------------------------------------------------- */

/* Through a proxy: a first frame passes; then a byte 4000 bytes ahead in
 * direction dir is altered, inside the next 64 KiB frame's body (or its
 * TLS record); its receiver must refuse it, not deliver it, and close: the
 * receiver's close names want. */
static void tampered(gr_tls *tls, gt_dir dir, const char *want) {
  gr_transport_set_loopback_remote(true);
  end srv, cl;
  gr_conn_auth auth = {SECRET, CLUSTER, tls};
  if (!end_start(&srv, true, &auth) || !end_start(&cl, false, NULL)) return;
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", srv.port);
  gt_proxy *px = gt_proxy_start(target);
  GR_CHECK(px != NULL);
  gr_conn *c = NULL;
  gr_error err;
  if (px) GR_CHECK_OK(dial(&cl, gt_proxy_port(px), &auth, &c, &err), err);
  if (c) {
    int one = 1;
    GR_CHECK_OK(gr_conn_send(c, gt_frame(1, 65536), &err), err);
    GR_CHECK_MSG(wait_for(&cl, got_at_least, &one), "the first frame's echo did not arrive");
    gt_proxy_fault(px, (gt_fault){.kind = GT_FAULT_TAMPER, .dir = dir, .bytes = 4000});
    for (int i = 0; i < WAIT_MS && gt_proxy_get_stats(px).faults == 0; i++) usleep(1000);
    GR_CHECK_OK(gr_conn_send(c, gt_frame(2, 65536), &err), err);
    end *receiver = dir == GT_DIR_TO_TARGET ? &srv : &cl;
    GR_CHECK_MSG(wait_for(receiver, closed, NULL), "the altered frame did not close it");
    GR_CHECK_EQ_INT(gt_proxy_get_stats(px).tampered, 1);
    GR_CHECK_STR_CONTAINS(receiver->why, want);
    printf("%s: %s\n", receiver == &srv ? "server" : "client", receiver->why);
    GR_CHECK_EQ_INT(srv.bad + cl.bad, 0);
    /* the altered frame was not delivered: the server got 1 (to it) or 2
     * frames (to the client: its echo was altered), the client 1 */
    GR_CHECK_EQ_INT(srv.got, dir == GT_DIR_TO_TARGET ? 1 : 2);
    GR_CHECK_EQ_INT(cl.got, 1);
    if (dir == GT_DIR_TO_TARGET) GR_CHECK_STR_CONTAINS(srv.log, want);
    gr_conn_close(c);
    gr_conn_unref(c);
  }
  gt_proxy_stop(px);
  end_stop(&cl);
  end_stop(&srv);
}

static void test_tampered_macs(void) {
  tampered(NULL, GT_DIR_TO_TARGET, "fails its MAC");
  tampered(NULL, GT_DIR_TO_CLIENT, "fails its MAC");
}

static void test_tampered_tls(void) {
  gr_tls *t = tls_of(K.cert, K.key, K.ca);
  if (!t) return;
  tampered(t, GT_DIR_TO_TARGET, "bad record mac");
  tampered(t, GT_DIR_TO_CLIENT, "bad record mac");
  gr_tls_unref(t);
}

/* A tensor one task pushes to another, altered on the way (frame MACs):
 * the receiving task refuses the frame, and the step that waited for it
 * fails at once, ABORTED (its master recovers), naming the refusal; not
 * at the master's step deadline. Tasks: worker 0 holds the data, worker 1
 * sums it, behind a proxy that alters only its second connection (the
 * first is the master's; the second worker 0's, which pushes the tensor). */
static void test_tampered_tensor_aborts_step(void) {
  gr_transport_set_loopback_remote(true);
  gr_server *srv[2] = {NULL, NULL};
  gr_error err;
  char addr[2][64];
  gt_proxy *px = NULL;
  for (int k = 0; k < 2; k++) {
    gr_server_options so = {.job = "worker",
                            .task = k,
                            .secret = SECRET,
                            .cluster_id = CLUSTER,
                            .inter_op_threads = 1,
                            .quiet = true,
                            .log_fn = on_log_quiet};
    GR_CHECK_OK(gr_server_new(&so, &srv[k], &err), err);
    if (!srv[k]) goto out;
    snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", gr_server_port(srv[k]));
  }
  if (!(px = gt_proxy_start(addr[1]))) goto out;
  snprintf(addr[1], sizeof addr[1], "127.0.0.1:%d", gt_proxy_port(px));
  const char *addrs[] = {addr[0], addr[1]};
  gr_master_options mo = {.num_tasks = 2,
                          .addresses = addrs,
                          .secret = SECRET,
                          .cluster_id = CLUSTER,
                          .step_timeout_ms = 120000};
  gr_master *m = NULL;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  if (!m) goto out;
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output data = gr_random_uniform(g, GR_F32, (gr_shape){1, {16384}}, -1, 1, 7);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output sum = gr_reduce_sum(g, data, NULL, 0, false);
  gr_graph_pop_device_scope(g);
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  GR_CHECK(s != NULL);
  gr_tensor out;
  if (s) GR_CHECK_OK(gr_session_run(s, NULL, 0, &sum, 1, &out, NULL, 0, &err), err);
  if (s) gr_tensor_release(&out);
  GR_CHECK_EQ_INT(gt_proxy_get_stats(px).accepted, 2);
  gt_proxy_fault(
      px, (gt_fault){.kind = GT_FAULT_TAMPER, .dir = GT_DIR_TO_TARGET, .bytes = 4000, .conn = 2});
  for (int i = 0; i < WAIT_MS && gt_proxy_get_stats(px).faults == 0; i++) usleep(1000);
  double t0 = gt_now();
  gr_status st = s ? gr_session_run(s, NULL, 0, &sum, 1, &out, NULL, 0, &err) : GR_OK;
  double took = gt_now() - t0;
  GR_CHECK_MSG(st == GR_ERR_ABORTED, "%s: %s", gr_status_name(st), err.msg);
  if (st == GR_OK) gr_tensor_release(&out);
  GR_CHECK_EQ_INT(gt_proxy_get_stats(px).tampered, 1);
  if (st != GR_OK) {
    GR_CHECK_STR_CONTAINS(err.msg, "a tensor for this step from 127.0.0.1:");
    GR_CHECK_STR_CONTAINS(err.msg, "failed its MAC (altered on the way) and was refused");
    printf("the step: %s (after %.2f s)\n", err.msg, took);
  }
  GR_CHECK_MSG(took < 60, "the step failed only after %.1f s (the deadline is 120 s)", took);
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
out:
  gt_proxy_stop(px);
  for (int k = 0; k < 2; k++) gr_server_free(srv[k]);
}

int main(void) {
  if (!gt_certs_make(&K)) {
    gt_certs_remove(&K);
    return 1;
  }
  GR_RUN(test_closed_peer_no_sigpipe);
  GR_RUN(test_tls_frames);
  GR_RUN(test_mac_frames);
  GR_RUN(test_loopback_plaintext);
  GR_RUN(test_bad_files);
  GR_RUN(test_wrong_ca);
  GR_RUN(test_plaintext_refused);
  GR_RUN(test_probe_unlogged);
  GR_RUN(test_tampered_macs);
  GR_RUN(test_tampered_tls);
  GR_RUN(test_tampered_tensor_aborts_step);
  gt_certs_remove(&K);
  return gr_test_finish();
}
