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

static void peer_name(const struct sockaddr *sa, char *out, size_t cap) {
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
  gr_conn_handler h;
  char *secret;
  char cluster[GR_CLUSTER_ID_MAX + 1];
  int max_conns;        /* accepted connections open at once (loop thread reads it) */
  int spare;            /* a descriptor kept to accept and close with when out of them */
  struct event *resume; /* ends a pause */
  gr_listener *next;
};

static gr_status send_hello(gr_conn *c, gr_error *err) {
  gr_outmsg *m = gr_hello_new(c->secret, c->cluster, c->nonce, err);
  return m ? gr_conn_send(c, m, err) : err->code;
}

static void on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg) {
  gr_listener *ls = arg;
  char peer[80];
  peer_name(sa, peer, sizeof peer);
  if (!gr_conn_admit(ls->loop, __atomic_load_n(&ls->max_conns, __ATOMIC_RELAXED), peer)) {
    close(fd);
    return;
  }
  gr_conn *c;
  gr_error e;
  if (gr_conn_attach(ls->loop, fd, peer, true, ls->secret, &ls->h, &c, &e) != GR_OK) {
    gr_loop_log(ls->loop, "accept", "accepting %s: %s", peer, e.msg);
    return;
  }
  snprintf(c->cluster, sizeof c->cluster, "%s", ls->cluster);
  if (send_hello(c, &e) != GR_OK) gr_conn_close_now(c, e.code, e.msg);
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
}

void gr_listener_set_max_conns(gr_listener *ls, int max) {
  __atomic_store_n(&ls->max_conns, max > 0 ? max : gr_default_max_conns(), __ATOMIC_RELAXED);
}

gr_status gr_listener_new(gr_loop *l, const char *host, int port, const char *secret,
                          const char *cluster, const gr_conn_handler *handler, gr_listener **out,
                          int *port_out, gr_error *err) {
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
  event_free(ls->resume);
  if (ls->spare >= 0) close(ls->spare);
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

void gr_conn_server_auth(gr_conn *c, gr_inmsg *m) {
  gr_outmsg *ok;
  gr_error e;
  gr_status st = gr_hs_server_check(c->secret, c->cluster, c->nonce, &m->msg, &ok, &e);
  gr_inmsg_free(m);
  if (st == GR_OK) {
    c->authed = true;
    gr_conn_set_ready(c);
    gr_conn_send(c, ok, NULL); /* a failed write closes c */
    return;
  }
  char line[GR_ERROR_MSG_MAX + 160];
  snprintf(line, sizeof line, "refused %s: %s; closing that connection", c->peer, e.msg);
  gr_conn_log_peer(c, "refused", line);
  gr_conn_close_now(c, e.code, e.msg);
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

/* Reads exactly n bytes by the deadline: GR_OK, or an error naming address. */
static gr_status read_exact(int fd, void *buf, size_t n, int64_t deadline, const char *address,
                            gr_error *err) {
  size_t got = 0;
  while (got < n) {
    if (wait_fd(fd, POLLIN, deadline) != 0)
      return gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED, "%s did not answer in time", address);
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r == 0) return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s closed the connection", address);
    if (r < 0 && errno != EINTR && errno != EAGAIN)
      return gr_error_set(err, GR_ERR_UNAVAILABLE, "reading from %s: %s", address, strerror(errno));
    if (r > 0) got += (size_t)r;
  }
  return GR_OK;
}

static gr_status read_frame(int fd, gr_msg_type want, int64_t deadline, const char *address,
                            gr_msg *m, gr_error *err) {
  uint8_t hb[GR_WIRE_HEADER_SIZE], map[256];
  gr_frame_header h;
  GR_TRY(read_exact(fd, hb, sizeof hb, deadline, address, err));
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
  GR_TRY(read_exact(fd, map, h.header_len, deadline, address, err));
  return gr_msg_parse(m, map, h.header_len, err);
}

static gr_status write_all(int fd, gr_outmsg *m, int64_t deadline, const char *address,
                           gr_error *err) {
  struct iovec *iov;
  int n;
  size_t total;
  gr_status st = gr_outmsg_finish(m, &iov, &n, &total, err);
  const char *p = st == GR_OK ? iov[0].iov_base : NULL; /* handshake frames: no body */
  for (size_t done = 0; st == GR_OK && done < total;) {
    if (wait_fd(fd, POLLOUT, deadline) != 0) {
      st = gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED, "writing to %s timed out", address);
      break;
    }
    ssize_t w = send(fd, p + done, total - done, MSG_NOSIGNAL);
    if (w < 0 && errno != EINTR && errno != EAGAIN)
      st = gr_error_set(err, GR_ERR_UNAVAILABLE, "writing to %s: %s", address, strerror(errno));
    if (w > 0) done += (size_t)w;
  }
  gr_outmsg_free(m);
  return st;
}

static gr_status client_handshake(int fd, const char *address, const char *secret,
                                  const char *cluster, int64_t deadline, gr_error *err) {
  gr_hs_client hs = {.secret = secret, .cluster = cluster, .address = address};
  gr_msg hello, ok;
  gr_outmsg *auth;
  GR_TRY(read_frame(fd, GR_MSG_HELLO, deadline, address, &hello, err));
  gr_status st = gr_hs_client_answer(&hs, &hello, &auth, err);
  gr_msg_free(&hello);
  if (st != GR_OK) return st;
  GR_TRY(write_all(fd, auth, deadline, address, err));
  gr_error e;
  if (read_frame(fd, GR_MSG_AUTH_OK, deadline, address, &ok, &e) != GR_OK) {
    if (!hs.auth) return gr_error_set(err, e.code, "%s", e.msg);
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s refused this process's secret (a different secret?): %s", address,
                        e.msg);
  }
  st = gr_hs_client_check(&hs, &ok, err);
  gr_msg_free(&ok);
  return st;
}

/* One connection attempt; -1 with errno on failure. */
static int connect_once(const struct addrinfo *ai, int64_t deadline) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) goto fail;
  if (wait_fd(fd, POLLOUT, deadline) != 0) {
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

gr_status gr_conn_dial(gr_loop *l, const char *address, const char *secret, const char *cluster,
                       int timeout_ms, const gr_conn_handler *handler, gr_conn **out,
                       gr_error *err) {
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
  int backoff = 10, fd = -1, last = 0;
  for (int tries = 0; fd < 0 && tries < 100000; tries++) {
    if ((fd = connect_once(ai, deadline)) >= 0) break;
    last = errno;
    int64_t left = deadline - gr_wire_now_ms();
    if (left <= 0) break;
    struct timespec ts = {0, (long)(backoff < left ? backoff : left) * 1000000L};
    nanosleep(&ts, NULL);
    backoff = backoff * 2 > 500 ? 500 : backoff * 2;
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "cannot connect to %s within %d ms: %s", address,
                        timeout_ms, strerror(last ? last : ETIMEDOUT));
  gr_status st = client_handshake(fd, address, secret, cluster, deadline, err);
  if (st != GR_OK) {
    close(fd);
    return st;
  }
  gr_conn *c;
  GR_TRY(gr_conn_attach(l, fd, address, false, NULL, handler, &c, err)); /* with our ref */
  *out = c;
  return GR_OK;
}
