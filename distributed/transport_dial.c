/* Making connections: listening and accepting (with the server side of the
 * handshake, within the connection limit, pausing when out of descriptors),
 * dialing with retries, and the client side of the handshake (blocking,
 * with a deadline, before the loop takes the socket). The handshake's
 * messages and checks are handshake.c's. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "distributed/transport_conn_internal.h"

gr_status gr_parse_address(const char *address, char *host, size_t host_cap, int *port,
                           gr_error *err) {
  const char *colon = NULL, *h = address;
  size_t hl;
  if (!address || !*address)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "empty address (want host:port)");
  if (address[0] == '[') { /* [v6]:port */
    const char *close = strchr(address, ']');
    if (!close || close[1] != ':')
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "address '%s': want [v6-address]:port",
                          address);
    h = address + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(address, ':');
    if (!colon)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "address '%s' has no port (want host:port)",
                          address);
    hl = (size_t)(colon - address);
  }
  if (hl == 0 || hl >= host_cap)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "address '%s': bad host", address);
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || *end || end == colon + 1 || p < 0 || p > 65535)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "address '%s': port must be 0 to 65535",
                        address);
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return GR_OK;
}

void gr_sockaddr_name(const struct sockaddr *sa, char *out, size_t cap) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    port = ntohs(in->sin_port);
    snprintf(out, cap, "%s:%d", ip, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip);
    port = ntohs(in->sin6_port);
    snprintf(out, cap, "[%s]:%d", ip, port);
  } else {
    snprintf(out, cap, "?");
  }
}

/* ---- the server side ----------------------------------------------------------- */

#define ACCEPT_PAUSE_MS 250 /* accept() out of descriptors: the listener rests this long */

struct gr_listener {
  gr_loop *loop;
  struct evconnlistener *ev;
  struct evconnlistener *ev_local; /* the Unix socket of a loopback address; NULL: none */
  gr_conn_handler h;
  char *secret;
  char cluster[GR_CLUSTER_ID_MAX + 1];
  gr_tls *tls;          /* a reference (NULL: no TLS) */
  int max_conns;        /* accepted connections open at once (loop thread reads it) */
  int spare;            /* a descriptor kept to accept and close with when out of them */
  struct event *resume; /* ends a pause */
  gr_listener *next;
};

static gr_status send_hello(gr_conn *c, gr_error *err) {
  gr_outmsg *m = gr_hello_new(c->secret, c->cluster, c->mode, c->nonce, err);
  return m ? gr_conn_send(c, m, err) : err->code;
}

/* What the server requires of a peer (HELLO's mode): nothing on loopback;
 * from another host TLS when it has it, else per-frame MACs. */
static uint8_t required_mode(const gr_listener *ls, const struct sockaddr *sa) {
  if (!gr_peer_is_remote(sa)) return 0;
  return ls->tls ? GR_AUTH_MODE_TLS : ls->secret ? GR_AUTH_MODE_MACS : 0;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg) {
  gr_listener *ls = arg;
  char peer[80];
  if (sa->sa_family == AF_UNIX)
    gr_local_peer_name(fd, peer, sizeof peer);
  else
    gr_sockaddr_name(sa, peer, sizeof peer);
  if (!gr_conn_admit(ls->loop, __atomic_load_n(&ls->max_conns, __ATOMIC_RELAXED), peer)) {
    close(fd);
    return;
  }
  gr_conn *c;
  gr_error e;
  if (gr_conn_attach(ls->loop, fd, peer, true, ls->secret, NULL, NULL, &ls->h, &c, &e) != GR_OK) {
    gr_loop_log(ls->loop, "accept", "accepting %s: %s", peer, e.msg);
    return;
  }
  snprintf(c->cluster, sizeof c->cluster, "%s", ls->cluster);
  c->mode = required_mode(ls, sa);
  if (send_hello(c, &e) != GR_OK) {
    gr_conn_close_now(c, e.code, e.msg);
    return;
  }
  if (c->mode & GR_AUTH_MODE_TLS) { /* the client's TLS handshake comes next (on_read) */
    gr_tls_ref(ls->tls);
    c->tls = ls->tls;
    pthread_mutex_lock(&c->mu);
    c->tls_state = TLS_ACCEPTING;
    pthread_mutex_unlock(&c->mu);
  }
}

/* accept() failed (not for a reason worth retrying at once: EMFILE, ENFILE,
 * ENOBUFS ...). Out of descriptors, room is made by closing a connection
 * still in its handshake; with none, the pending connection is accepted
 * with the spare descriptor and closed, so that the backlog does not keep
 * the listener readable, and the listener rests ACCEPT_PAUSE_MS: not a busy
 * loop (libevent's own handling logs a line per attempt). */
static void on_accept_error(struct evconnlistener *ev, void *arg) {
  int err = EVUTIL_SOCKET_ERROR();
  gr_listener *ls = arg;
  bool no_fds = err == EMFILE || err == ENFILE;
  if (no_fds && gr_make_room(ls->loop, strerror(err))) return; /* accepts again at once */
  if (no_fds && ls->spare >= 0) {
    close(ls->spare);
    int fd = accept(evconnlistener_get_fd(ev), NULL, NULL);
    if (fd >= 0) close(fd);
    ls->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  gr_transport_note_fd_pause();
  pthread_mutex_lock(&ls->loop->mu);
  int open_conns = ls->loop->accepted;
  pthread_mutex_unlock(&ls->loop->mu);
  gr_loop_log(ls->loop, "accept",
              "cannot accept connections: %s (%d accepted connections open): refusing new "
              "ones for %d ms",
              strerror(err), open_conns, ACCEPT_PAUSE_MS);
  evconnlistener_disable(ev);
  struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
  event_add(ls->resume, &tv);
}

static void on_resume(evutil_socket_t fd, short what, void *arg) {
  gr_listener *ls = arg;
  if (ls->spare < 0) ls->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  evconnlistener_enable(ls->ev);
  if (ls->ev_local) evconnlistener_enable(ls->ev_local);
}

void gr_listener_set_max_conns(gr_listener *ls, int max) {
  __atomic_store_n(&ls->max_conns, max > 0 ? max : gr_default_max_conns(), __ATOMIC_RELAXED);
}

gr_status gr_listener_new(gr_loop *l, const char *host, int port, const gr_conn_auth *auth,
                          const gr_conn_handler *handler, gr_listener **out, int *port_out,
                          gr_error *err) {
  const char *secret = auth->secret, *cluster = auth->cluster;
  *out = NULL;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cannot resolve '%s': %s", host,
                        gai_strerror(rc));
  gr_listener *ls = calloc(1, sizeof *ls);
  if (!ls || (secret && !(ls->secret = strdup(secret)))) {
    freeaddrinfo(ai);
    free(ls);
    return gr_error_set_oom(err);
  }
  ls->loop = l;
  ls->h = *handler;
  if ((ls->tls = auth->tls)) gr_tls_ref(ls->tls);
  snprintf(ls->cluster, sizeof ls->cluster, "%s", cluster ? cluster : "");
  ls->max_conns = gr_default_max_conns();
  ls->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ls->resume = event_new(l->base, -1, 0, on_resume, ls);
  ls->ev = !ls->resume ? NULL
                       : evconnlistener_new_bind(l->base, on_accept, ls,
                                                 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                                     LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_THREADSAFE,
                                                 128, ai->ai_addr, (int)ai->ai_addrlen);
  int e = errno;
  freeaddrinfo(ai);
  if (!ls->ev) {
    if (ls->resume) event_free(ls->resume);
    if (ls->spare >= 0) close(ls->spare);
    gr_tls_unref(ls->tls);
    free(ls->secret);
    free(ls);
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "cannot listen on %s:%d: %s", host, port,
                        strerror(e));
  }
  evconnlistener_set_error_cb(ls->ev, on_accept_error);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(evconnlistener_get_fd(ls->ev), (struct sockaddr *)&ss, &sl);
  *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
  int lfd = gr_local_listen((struct sockaddr *)&ss);
  if (lfd >= 0 &&
      !(ls->ev_local = evconnlistener_new(
            l->base, on_accept, ls,
            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_THREADSAFE, 0, lfd)))
    close(lfd);
  if (ls->ev_local) evconnlistener_set_error_cb(ls->ev_local, on_accept_error);
  pthread_mutex_lock(&l->mu);
  ls->next = l->listeners;
  l->listeners = ls;
  l->log_to = ls->h; /* the transport's lines about its connections */
  pthread_mutex_unlock(&l->mu);
  *out = ls;
  return GR_OK;
}

static void listener_free_now(gr_listener *ls) {
  evconnlistener_free(ls->ev);
  if (ls->ev_local) evconnlistener_free(ls->ev_local);
  event_free(ls->resume);
  if (ls->spare >= 0) close(ls->spare);
  gr_tls_unref(ls->tls);
  free(ls->secret);
  free(ls);
}

typedef struct free_call {
  gr_listener *ls;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
} free_call;

static void free_on_loop(void *arg) {
  free_call *f = arg;
  listener_free_now(f->ls);
  pthread_mutex_lock(&f->mu);
  f->done = true;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Freed on the loop thread, where its callbacks (accepting, resuming after
 * a pause) run: none of them runs during or after. */
void gr_listener_free(gr_listener *ls) {
  if (!ls) return;
  gr_loop *l = ls->loop;
  pthread_mutex_lock(&l->mu);
  gr_listener **p = &l->listeners;
  while (*p && *p != ls) p = &(*p)->next;
  if (*p) *p = ls->next;
  pthread_mutex_unlock(&l->mu);
  free_call f = {.ls = ls};
  pthread_mutex_init(&f.mu, NULL);
  pthread_cond_init(&f.cv, NULL);
  if (pthread_equal(pthread_self(), l->thread) ||
      gr_loop_call(l, free_on_loop, &f, NULL) != GR_OK) {
    listener_free_now(ls);
  } else {
    pthread_mutex_lock(&f.mu);
    while (!f.done) pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
  }
  pthread_mutex_destroy(&f.mu);
  pthread_cond_destroy(&f.cv);
}

void gr_listeners_free_all(gr_loop *l) {
  while (l->listeners) {
    gr_listener *ls = l->listeners;
    l->listeners = ls->next;
    listener_free_now(ls);
  }
}

void gr_conn_refuse(gr_conn *c, gr_status code, const char *why) {
  char line[GR_ERROR_MSG_MAX + 160];
  snprintf(line, sizeof line, "refused %s: %s; closing that connection", c->peer, why);
  gr_conn_log_peer(c, "refused", line);
  gr_conn_close_now(c, code, why);
}

void gr_conn_server_auth(gr_conn *c, gr_inmsg *m) {
  gr_outmsg *ok;
  gr_error e;
  gr_hs_result res;
  gr_status st =
      gr_hs_server_check(c->secret, c->cluster, c->mode, c->nonce, &m->msg, &ok, &res, &e);
  gr_inmsg_free(m);
  if (st != GR_OK) {
    gr_conn_refuse(c, e.code, e.msg);
    return;
  }
  c->authed = true;
  gr_conn_set_ready(c);
  gr_conn_send(c, ok, NULL); /* the last frame without a MAC; a failed write closes c */
  if (res.mode & GR_AUTH_MODE_MACS) {
    st = gr_conn_start_macs(c, res.keys, &e);
    OPENSSL_cleanse(res.keys, sizeof res.keys);
    if (st != GR_OK) gr_conn_close_now(c, e.code, e.msg);
  }
}

/* ---- the client side ----------------------------------------------------------- */

/* Waits for fd to be ready for events until deadline; 0 ready, -1 timeout. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - gr_wire_now_ms();
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return 0; /* let the read or write report it */
  }
}

/* The client's side of one handshake's connection: plaintext, then through
 * TLS once ssl is set (blocking calls on a non-blocking socket, each
 * waiting in poll() until the deadline). */
typedef struct hs_io {
  int fd;
  SSL *ssl;
  const char *address;
  int64_t deadline;
  bool tls_failed; /* the last error was TLS's: */
  char why[400];   /* what it said */
} hs_io;

/* A failed SSL call (its return ret) on io: GR_OK when it only waits (and
 * it waited), else the error, naming the address. */
static gr_status tls_wait(hs_io *io, int ret, const char *doing, gr_error *err) {
  char *why = io->why;
  gr_tls_io r = gr_tls_result(io->ssl, ret, why, sizeof io->why);
  if (r == GR_TLS_WANT_READ || r == GR_TLS_WANT_WRITE) {
    if (wait_fd(io->fd, r == GR_TLS_WANT_READ ? POLLIN : POLLOUT, io->deadline) == 0) return GR_OK;
    return gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED, "%s did not answer in time (%s)",
                        io->address, doing);
  }
  if (r == GR_TLS_CLOSED)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s closed the connection (%s)", io->address,
                        doing);
  io->tls_failed = r == GR_TLS_FAILED;
  return gr_error_set(err, r == GR_TLS_FAILED ? GR_ERR_UNAUTHENTICATED : GR_ERR_UNAVAILABLE,
                      "%s: %s: %s", io->address, doing, why);
}

/* Reads exactly n bytes by the deadline: GR_OK, or an error naming address. */
static gr_status read_exact(hs_io *io, void *buf, size_t n, gr_error *err) {
  size_t got = 0;
  while (got < n) {
    if (io->ssl) {
      size_t r = 0;
      int ret = SSL_read_ex(io->ssl, (char *)buf + got, n - got, &r);
      if (ret == 1)
        got += r;
      else
        GR_TRY(tls_wait(io, ret, "reading through TLS", err));
      continue;
    }
    if (wait_fd(io->fd, POLLIN, io->deadline) != 0)
      return gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED, "%s did not answer in time", io->address);
    ssize_t r = read(io->fd, (char *)buf + got, n - got);
    if (r == 0)
      return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s closed the connection", io->address);
    if (r < 0 && errno != EINTR && errno != EAGAIN)
      return gr_error_set(err, GR_ERR_UNAVAILABLE, "reading from %s: %s", io->address,
                          strerror(errno));
    if (r > 0) got += (size_t)r;
  }
  return GR_OK;
}

static gr_status read_frame(hs_io *io, gr_msg_type want, gr_msg *m, gr_error *err) {
  uint8_t hb[GR_WIRE_HEADER_SIZE], map[256];
  gr_frame_header h;
  const char *address = io->address;
  GR_TRY(read_exact(io, hb, sizeof hb, err));
  if (gr_wire_parse_frame_header(hb, 0, &h, err) != GR_OK) {
    if (err && err->code == GR_ERR_UNIMPLEMENTED) /* another version of graphrun */
      gr_error_set(err, GR_ERR_UNIMPLEMENTED,
                   "%s speaks wire version %u, this graphrun speaks version %d: run the same "
                   "graphrun version on every task and client",
                   address, hb[4], GR_WIRE_VERSION);
    else
      gr_error_prefix(err, "%s", address);
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  if (h.type != want || h.header_len > sizeof map)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s sent a %s frame, want %s", address,
                        gr_msg_type_name(h.type), gr_msg_type_name(want));
  GR_TRY(read_exact(io, map, h.header_len, err));
  return gr_msg_parse(m, map, h.header_len, err);
}

static gr_status write_all(hs_io *io, gr_outmsg *m, gr_error *err) {
  struct iovec *iov;
  int n;
  size_t total;
  gr_status st = gr_outmsg_finish(m, &iov, &n, &total, err);
  const char *p = st == GR_OK ? iov[0].iov_base : NULL; /* handshake frames: no body */
  for (size_t done = 0; st == GR_OK && done < total;) {
    if (io->ssl) {
      size_t w = 0;
      int ret = SSL_write_ex(io->ssl, p + done, total - done, &w);
      if (ret == 1)
        done += w;
      else
        st = tls_wait(io, ret, "writing through TLS", err);
      continue;
    }
    if (wait_fd(io->fd, POLLOUT, io->deadline) != 0) {
      st = gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED, "writing to %s timed out", io->address);
      break;
    }
    ssize_t w = send(io->fd, p + done, total - done, MSG_NOSIGNAL);
    if (w < 0 && errno != EINTR && errno != EAGAIN)
      st = gr_error_set(err, GR_ERR_UNAVAILABLE, "writing to %s: %s", io->address, strerror(errno));
    if (w > 0) done += (size_t)w;
  }
  gr_outmsg_free(m);
  return st;
}

/* The client's TLS handshake after HELLO, as the server asked. */
static gr_status tls_connect(hs_io *io, gr_tls *tls, gr_error *err) {
  if (!(io->ssl = gr_tls_ssl(tls, io->fd, false, err))) return err ? err->code : GR_ERR_INTERNAL;
  for (;;) {
    int ret = SSL_connect(io->ssl);
    if (ret == 1) return GR_OK;
    if (tls_wait(io, ret, "the TLS handshake", err) != GR_OK) {
      if (io->tls_failed && err) {
        char why[GR_ERROR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        gr_error_set(err, GR_ERR_UNAUTHENTICATED, "%s (this process trusts the CA %s)", why,
                     gr_tls_ca_file(tls));
      }
      return err ? err->code : GR_ERR_UNAUTHENTICATED;
    }
  }
}

static gr_status client_handshake(hs_io *io, gr_hs_client *hs, const gr_conn_auth *auth,
                                  gr_error *err) {
  gr_msg hello, ok;
  gr_outmsg *m;
  GR_TRY(read_frame(io, GR_MSG_HELLO, &hello, err));
  gr_status st = gr_hs_client_answer(hs, &hello, &m, err);
  gr_msg_free(&hello);
  if (st != GR_OK) return st;
  if ((hs->mode & GR_AUTH_MODE_TLS) && (st = tls_connect(io, auth->tls, err)) != GR_OK) {
    gr_outmsg_free(m);
    return st;
  }
  st = write_all(io, m, err);
  gr_error e;
  if (st != GR_OK && io->ssl) { /* a server that refused this end's certificate and closed: its
                                   alert may wait unread */
    if (read_frame(io, GR_MSG_AUTH_OK, &ok, &e) == GR_OK) gr_msg_free(&ok);
    if (io->tls_failed)
      return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                          "%s refused this process's TLS certificate: %s", io->address, io->why);
  }
  if (st != GR_OK) return st;
  if (read_frame(io, GR_MSG_AUTH_OK, &ok, &e) != GR_OK) {
    if (io->tls_failed) /* TLS 1.3: the server's verdict on this end's certificate comes here */
      return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                          "%s refused this process's TLS certificate: %s", io->address, io->why);
    if (!hs->auth) return gr_error_set(err, e.code, "%s", e.msg);
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s refused this process's secret (a different secret?): %s", io->address,
                        e.msg);
  }
  st = gr_hs_client_check(hs, &ok, err);
  gr_msg_free(&ok);
  return st;
}

/* What a failed connect means, for its message: whether anything
 * listened (refused) or anything answered (timed out). */
static const char *why_no_connection(int e) {
  switch (e) {
    case ECONNREFUSED:
      return "nothing listens there (connection refused: the task is not up yet, has died, or "
             "listens on another port or address)";
    case ETIMEDOUT:
      return "nothing answered (connection timed out: the host is down or unreachable, or a "
             "firewall drops the packets)";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return "no route to that host (host or network unreachable)";
    default:
      return strerror(e);
  }
}

/* One connection attempt; -1 with errno on failure (*cut: the deadline
 * ended it before the connection answered either way). */
static int connect_once(const struct addrinfo *ai, int64_t deadline, bool *cut) {
  *cut = false;
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) goto fail;
  if (wait_fd(fd, POLLOUT, deadline) != 0) {
    *cut = true;
    errno = ETIMEDOUT;
    goto fail;
  }
  int so = 0;
  socklen_t sl = sizeof so;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
  if (so == 0) return fd;
  errno = so;
fail:;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

gr_status gr_conn_dial(gr_loop *l, const char *address, const gr_conn_auth *auth, int timeout_ms,
                       const gr_conn_handler *handler, gr_conn **out, gr_error *err) {
  *out = NULL;
  char host[256];
  int port;
  GR_TRY(gr_parse_address(address, host, sizeof host, &port, err));
  if (port == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "address '%s': port 0", address);
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc != 0)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "cannot resolve '%s': %s", host, gai_strerror(rc));
  int64_t deadline = gr_wire_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
  int backoff = 10, fd = gr_local_connect(ai->ai_addr), last = 0;
  for (int tries = 0; fd < 0 && tries < 100000; tries++) {
    bool cut;
    if ((fd = connect_once(ai, deadline, &cut)) >= 0) break;
    if (!cut || !last) last = errno; /* an attempt the deadline cut says less than the one before */
    int64_t left = deadline - gr_wire_now_ms();
    if (left <= 0) break;
    struct timespec ts = {0, (long)(backoff < left ? backoff : left) * 1000000L};
    nanosleep(&ts, NULL);
    backoff = backoff * 2 > 500 ? 500 : backoff * 2;
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "cannot connect to %s within %d ms: %s", address,
                        timeout_ms, why_no_connection(last ? last : ETIMEDOUT));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  bool remote = getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
                gr_peer_is_remote((struct sockaddr *)&ss);
  gr_hs_client hs = {.secret = auth->secret,
                     .cluster = auth->cluster,
                     .address = address,
                     .remote = remote,
                     .tls = auth->tls != NULL};
  hs_io io = {.fd = fd, .address = address, .deadline = deadline};
  gr_status st = client_handshake(&io, &hs, auth, err);
  if (st != GR_OK) {
    SSL_free(io.ssl);
    close(fd);
    OPENSSL_cleanse(hs.keys, sizeof hs.keys);
    return st;
  }
  gr_conn *c; /* with our ref */
  st = gr_conn_attach(l, fd, address, false, NULL, io.ssl,
                      hs.mode & GR_AUTH_MODE_MACS ? hs.keys : NULL, handler, &c, err);
  OPENSSL_cleanse(hs.keys, sizeof hs.keys);
  if (st != GR_OK) return st;
  *out = c;
  return GR_OK;
}
