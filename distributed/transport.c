/* The transport's loop thread and connections: reading frames (bodies
 * straight into buffers that grow as their bytes arrive), writing with
 * sendmsg from the caller's thread or the loop, through TLS when the
 * connection has it and checking or adding each frame's MAC when it has
 * those, the server side of the handshake, closing. */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "distributed/transport_conn_internal.h"

static size_t max_queued = (size_t)1 << 30;
static size_t max_body = 0xffffffffu;
static int read_rounds = 64;

void gr_transport_set_limits(size_t queued, size_t body) {
  max_queued = queued;
  max_body = body;
}

void gr_transport_set_read_rounds(int rounds) {
  read_rounds = rounds > 0 ? rounds : 64;
}

void gr_inmsg_free(gr_inmsg *m) {
  if (!m) return;
  gr_msg_free(&m->msg);
  gr_buffer_release(m->body);
  free(m);
}

typedef struct timer {
  struct event *ev;
  void (*fn)(void *);
  void *arg;
  struct timer *next;
} timer;

/* ---- the loop ---------------------------------------------------------------- */

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static void use_threads(void) {
  evthread_use_pthreads();
}

static void *loop_main(void *arg) {
  gr_loop *l = arg;
  pthread_setname_np(pthread_self(), "gr-net");
  gr_thread_request_slice(l->slice_us); /* woken by every frame: latency-bound */
  while (!atomic_load(&l->stop)) event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

/* The stop event: activated by gr_loop_free. An event_base_loopbreak() made
 * before the thread entered event_base_loop would be lost (the loop clears
 * the flag on entry); an active event stays queued until the loop runs it. */
static void on_stop(evutil_socket_t fd, short what, void *arg) {
  gr_loop *l = arg;
  event_base_loopbreak(l->base);
}

gr_status gr_loop_new(gr_loop **out, gr_error *err) {
  *out = NULL;
  pthread_once(&threads_once, use_threads);
  int slice_us;
  if (gr_net_slice_us(&slice_us, err) != GR_OK) return err->code;
  gr_loop *l = calloc(1, sizeof *l);
  if (!l) return gr_error_set_oom(err);
  l->slice_us = slice_us;
  pthread_mutex_init(&l->mu, NULL);
  atomic_init(&l->stop, 0);
  l->base = event_base_new();
  l->stop_ev = l->base ? event_new(l->base, -1, 0, on_stop, l) : NULL;
  bool limits = l->stop_ev && gr_loop_limits_init(l, NULL) == GR_OK;
  if (!limits || pthread_create(&l->thread, NULL, loop_main, l) != 0) {
    if (limits) gr_loop_limits_free(l);
    if (l->stop_ev) event_free(l->stop_ev);
    if (l->base) event_base_free(l->base);
    pthread_mutex_destroy(&l->mu);
    free(l);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cannot start the network thread");
  }
  *out = l;
  return GR_OK;
}

void gr_loop_free(gr_loop *l) {
  if (!l) return;
  atomic_store(&l->stop, 1);
  event_active(l->stop_ev, EV_READ, 0);
  pthread_join(l->thread, NULL);
  /* the loop is stopped: this thread now does what the loop thread did */
  for (;;) {
    pthread_mutex_lock(&l->mu);
    gr_conn *c = l->conns;
    if (c) gr_conn_ref(c);
    pthread_mutex_unlock(&l->mu);
    if (!c) break;
    gr_conn_close_now(c, GR_ERR_CANCELLED, "the process is shutting down");
    gr_conn_unref(c);
  }
  gr_listeners_free_all(l);
  gr_loop_limits_free(l);
  event_free(l->stop_ev);
  while (l->timers) {
    timer *t = l->timers;
    l->timers = t->next;
    event_free(t->ev);
    free(t);
  }
  event_base_free(l->base);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

typedef struct call {
  void (*fn)(void *);
  void *arg;
} call;

static void run_call(evutil_socket_t fd, short what, void *arg) {
  call c = *(call *)arg;
  free(arg);
  c.fn(c.arg);
}

gr_status gr_loop_call(gr_loop *l, void (*fn)(void *arg), void *arg, gr_error *err) {
  call *c = malloc(sizeof *c);
  if (!c) return gr_error_set_oom(err);
  *c = (call){fn, arg};
  struct timeval now = {0, 0};
  if (event_base_once(l->base, -1, EV_TIMEOUT, run_call, c, &now) != 0) {
    free(c);
    return gr_error_set(err, GR_ERR_INTERNAL, "cannot schedule on the network thread");
  }
  return GR_OK;
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  timer *t = arg;
  t->fn(t->arg);
}

gr_status gr_loop_every(gr_loop *l, int period_ms, void (*fn)(void *arg), void *arg,
                        gr_error *err) {
  timer *t = calloc(1, sizeof *t);
  if (!t) return gr_error_set_oom(err);
  t->fn = fn;
  t->arg = arg;
  t->ev = event_new(l->base, -1, EV_PERSIST, on_timer, t);
  struct timeval tv = {period_ms / 1000, (period_ms % 1000) * 1000};
  if (!t->ev || event_add(t->ev, &tv) != 0) {
    if (t->ev) event_free(t->ev);
    free(t);
    return gr_error_set(err, GR_ERR_INTERNAL, "cannot add a timer to the network thread");
  }
  pthread_mutex_lock(&l->mu);
  t->next = l->timers;
  l->timers = t;
  pthread_mutex_unlock(&l->mu);
  return GR_OK;
}

/* ---- connections --------------------------------------------------------------- */

void gr_conn_ref(gr_conn *c) {
  atomic_fetch_add(&c->refs, 1);
}

void gr_conn_unref(gr_conn *c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  pthread_mutex_destroy(&c->mu);
  free(c->stage);
  gr_inmsg_free(c->in); /* a frame cut short by the peer */
  gr_rxbody_free(&c->body);
  gr_buffer_release(c->into);
  free(c->secret);
  gr_tls_unref(c->tls);
  free(c->gather);
  gr_fmac_free(c->tx_mac);
  gr_fmac_free(c->rx_mac);
  free(c);
}

bool gr_conn_is_open(gr_conn *c) {
  pthread_mutex_lock(&c->mu);
  bool open = !c->closed;
  pthread_mutex_unlock(&c->mu);
  return open;
}

const char *gr_conn_peer(const gr_conn *c) {
  return c->peer;
}
void gr_conn_set_user(gr_conn *c, void *user) {
  c->user = user;
}
void *gr_conn_user(const gr_conn *c) {
  return c->user;
}

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void on_conn_timer(evutil_socket_t fd, short what, void *arg);

gr_status gr_conn_start_macs(gr_conn *c, const uint8_t keys[GR_AUTH_FRAME_KEYS], gr_error *err) {
  /* the first key is the client's to the server */
  gr_fmac *tx = gr_fmac_new(c->is_server ? keys + GR_FMAC_KEY : keys);
  gr_fmac *rx = gr_fmac_new(c->is_server ? keys : keys + GR_FMAC_KEY);
  if (!tx || !rx) {
    gr_fmac_free(tx);
    gr_fmac_free(rx);
    return gr_error_set_oom(err);
  }
  pthread_mutex_lock(&c->mu);
  c->tx_mac = tx;
  pthread_mutex_unlock(&c->mu);
  c->rx_mac = rx;
  return GR_OK;
}

gr_status gr_conn_attach(gr_loop *l, int fd, const char *peer, bool is_server, const char *secret,
                         SSL *ssl, const uint8_t *keys, const gr_conn_handler *h, gr_conn **out,
                         gr_error *err) {
  *out = NULL;
  gr_conn *c = calloc(1, sizeof *c);
  if (!c) {
    SSL_free(ssl);
    close(fd);
    return gr_error_set_oom(err);
  }
  atomic_init(&c->refs, is_server ? 1 : 2); /* the loop's (and a dialer's) */
  pthread_mutex_init(&c->mu, NULL);
  c->loop = l;
  c->fd = fd;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  c->h = *h;
  c->is_server = is_server;
  c->authed = !is_server; /* a server's peer authenticates first (with or without a secret) */
  c->ready = !is_server;
  c->stage_cap = GR_STAGE_MIN; /* grown with traffic, and for a large map as its bytes arrive */
  c->last_rx_ms = c->born_ms = gr_wire_now_ms();
  c->stage = malloc(c->stage_cap);
  c->secret = secret ? strdup(secret) : NULL;
  c->ssl = ssl;
  c->tls_state = ssl ? TLS_ON : TLS_OFF;
  if (ssl) c->gather = malloc(GR_TLS_GATHER);
  bool macs_ok = !keys || gr_conn_start_macs(c, keys, NULL) == GR_OK;
  evutil_make_socket_nonblocking(fd);
  int one = 1;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX)
    gr_local_tune(fd);
  else
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->rev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_read, c);
  c->wev = event_new(l->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
  c->timer = event_new(l->base, -1, 0, on_conn_timer, c);
  if (!c->stage || (secret && !c->secret) || (ssl && !c->gather) || !macs_ok || !c->rev ||
      !c->wev || !c->timer) {
    if (c->rev) event_free(c->rev);
    if (c->wev) event_free(c->wev);
    if (c->timer) event_free(c->timer);
    SSL_free(ssl);
    close(fd);
    gr_conn_unref(c);
    return gr_error_set_oom(err);
  }
  /* the handshake's reads may have left records in TLS's buffer (asked
   * before the loop reads through it) */
  bool pending = ssl && SSL_has_pending(ssl);
  pthread_mutex_lock(&l->mu);
  c->next = l->conns;
  if (l->conns) l->conns->prev = c;
  l->conns = c;
  if (is_server) l->accepted++;
  pthread_mutex_unlock(&l->mu);
  event_add(c->rev, NULL);
  if (pending) event_active(c->rev, EV_READ, 0);
  gr_conn_limits_start(c);
  *out = c;
  return GR_OK;
}

/* Releases what is queued for writing (under c->mu). */
static void drop_queue(gr_conn *c) {
  while (c->qhead) {
    wq_item *it = c->qhead;
    c->qhead = it->next;
    gr_outmsg_free(it->msg);
    free(it);
  }
  c->qtail = NULL;
  c->queued = 0;
}

void gr_conn_close_now(gr_conn *c, gr_status code, const char *why) {
  GR_ASSERT_ON_LOOP(c->loop);
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->closed = true;
  drop_queue(c);
  SSL_free(c->ssl); /* no close_notify: the end of the stream says as much */
  c->ssl = NULL;
  pthread_mutex_unlock(&c->mu);
  event_free(c->rev);
  event_free(c->wev);
  event_free(c->timer);
  close(c->fd);
  gr_loop *l = c->loop;
  pthread_mutex_lock(&l->mu);
  if (c->prev) c->prev->next = c->next;
  if (c->next) c->next->prev = c->prev;
  if (l->conns == c) l->conns = c->next;
  if (c->is_server) l->accepted--;
  pthread_mutex_unlock(&l->mu);
  gr_rx_drop(c);
  gr_error e;
  gr_error_set(&e, code, "%s", why);
  if (c->h.on_close) c->h.on_close(c->h.arg, c, &e);
  gr_conn_unref(c); /* the loop's */
}

static void close_call(void *arg) {
  gr_conn *c = arg;
  gr_conn_close_now(c, GR_ERR_CANCELLED, "closed");
  gr_conn_unref(c);
}

void gr_conn_close(gr_conn *c) {
  if (!c) return;
  gr_conn_ref(c);
  if (gr_loop_call(c->loop, close_call, c, NULL) != GR_OK) gr_conn_unref(c);
}

static void fail_later(gr_conn *c, gr_status code, const char *why);

/* A failure seen off the loop thread: close from the loop. */
typedef struct fail_call {
  gr_conn *c;
  gr_status code;
  char why[512];
} fail_call;

static void fail_now(void *arg) {
  fail_call *f = arg;
  gr_conn_close_now(f->c, f->code, f->why);
  gr_conn_unref(f->c);
  free(f);
}

void gr_conn_fail(gr_conn *c, gr_status code, const char *why) {
  fail_later(c, code, why);
}

int64_t gr_conn_idle_ms(const gr_conn *c) {
  return gr_wire_now_ms() - gr_conn_last_rx_ms(c);
}

bool gr_conn_sent_nothing(const gr_conn *c) {
  return !c->authed && c->pre_auth == 0 && !c->tls_heard;
}

int64_t gr_conn_last_rx_ms(const gr_conn *c) {
  return __atomic_load_n(&c->last_rx_ms, __ATOMIC_RELAXED);
}

bool gr_conn_has_unread(gr_conn *c) {
  int n = 0;
  return gr_conn_tls_pending(c) > 0 || (ioctl(c->fd, FIONREAD, &n) == 0 && n > 0);
}

/* Out of memory to close it from the loop: shuts the socket down, which
 * the loop sees as the peer's end (no allocation; under c->mu, so the fd
 * is not closed and reused meanwhile). The peer learns of it either way. */
static void fail_without_memory(gr_conn *c) {
  pthread_mutex_lock(&c->mu);
  if (!c->closed) shutdown(c->fd, SHUT_RDWR);
  pthread_mutex_unlock(&c->mu);
}

static void fail_later(gr_conn *c, gr_status code, const char *why) {
  fail_call *f = malloc(sizeof *f);
  if (!f) {
    fail_without_memory(c);
    return;
  }
  gr_conn_ref(c);
  f->c = c;
  f->code = code;
  snprintf(f->why, sizeof f->why, "%s", why);
  if (gr_loop_call(c->loop, fail_now, f, NULL) != GR_OK) {
    gr_conn_unref(c);
    free(f);
    fail_without_memory(c);
  }
}

/* ---- writing --------------------------------------------------------------------- */

/* Writes what is queued until done or the socket is full (under c->mu).
 * 0: ok; otherwise errno. */
static int flush_locked(gr_conn *c) {
  GR_ASSERT_HELD(&c->mu);
  while (c->qhead) {
    wq_item *it = c->qhead;
    if (it->macs && !it->mac_begun) { /* the frame's first bytes go out now */
      gr_fmac_begin(c->tx_mac);
      it->mac_begun = true;
    }
    if (it->macs && !it->mac_done && it->i >= it->n - 1) { /* all but its tag went out */
      gr_fmac_end(c->tx_mac, it->tag);
      it->mac_done = true;
    }
    int end = it->macs && !it->mac_done ? it->n - 1 : it->n; /* not a tag not yet computed */
    struct iovec v[64];
    int n = 0;
    for (int i = it->i; i < end && n < 64; i++) v[n++] = it->iov[i];
    v[0].iov_base = (char *)v[0].iov_base + it->off;
    v[0].iov_len -= it->off;
    ssize_t w;
    if (c->tls_state == TLS_ON) {
      w = gr_conn_tls_write(c, v, n);
    } else if (c->ssl) { /* its TLS handshake goes on: the frames wait for it */
      return 0;
    } else {
      struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)n};
      w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (!c->write_errno) c->write_errno = errno;
      return errno;
    }
    c->queued -= (size_t)w;
    size_t left = (size_t)w;
    while (left > 0 && it->i < it->n) {
      size_t in_this = it->iov[it->i].iov_len - it->off, take = left < in_this ? left : in_this;
      if (it->macs && it->i < it->n - 1) /* the bytes the tag covers, as they go (still cached) */
        gr_fmac_update(c->tx_mac, (const char *)it->iov[it->i].iov_base + it->off, take);
      left -= take;
      if (take == in_this) {
        it->i++;
        it->off = 0;
      } else {
        it->off += take;
      }
    }
    while (it->i < it->n && it->iov[it->i].iov_len == 0) it->i++;
    /* more of it: its tag, not written for not being computed yet (else the
     * socket is full, or a TLS write took one record: on_write goes on) */
    if (it->i < it->n && it->macs && !it->mac_done && it->i == it->n - 1) continue;
    if (it->i < it->n) return 0;
    c->qhead = it->next;
    if (!c->qhead) c->qtail = NULL;
    gr_outmsg_free(it->msg);
    free(it);
  }
  return 0;
}

/* Why a write failed (errno e), naming the peer. */
static void write_failed(const gr_conn *c, int e, char *why, size_t cap) {
  if (e == EPROTO && c->tls_why[0])
    snprintf(why, cap, "writing to %s: TLS: %s", c->peer, c->tls_why);
  else
    snprintf(why, cap, "writing to %s: %s", c->peer, strerror(e));
}

/* Room for the frame's MAC after its bytes: flush_locked computes it as it
 * writes them (frames are written in the order they are queued: the
 * sequence numbers are theirs). Under c->mu. */
static void add_mac(wq_item *it) {
  memcpy(it->own, it->iov, (size_t)it->n * sizeof *it->iov);
  it->own[it->n++] = (struct iovec){it->tag, GR_FMAC_TAG};
  it->iov = it->own;
  it->macs = true;
  it->mac_begun = it->mac_done = false;
}

gr_status gr_conn_send(gr_conn *c, gr_outmsg *msg, gr_error *err) {
  struct iovec *iov;
  int n;
  size_t total;
  gr_status st = gr_outmsg_finish(msg, &iov, &n, &total, err);
  /* room for the iovecs and a MAC, should the connection have MACs */
  wq_item *it = st == GR_OK ? malloc(sizeof *it + ((size_t)n + 1) * sizeof *iov) : NULL;
  if (st == GR_OK && !it) st = gr_error_set_oom(err);
  if (st != GR_OK) {
    gr_outmsg_free(msg);
    return st;
  }
  *it = (wq_item){.msg = msg, .iov = iov, .n = n};
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    pthread_mutex_unlock(&c->mu);
    gr_outmsg_free(msg);
    free(it);
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "the connection to %s is closed", c->peer);
  }
  if (c->queued > 0 && c->queued + total > max_queued) {
    pthread_mutex_unlock(&c->mu);
    gr_outmsg_free(msg);
    free(it);
    char why[160];
    snprintf(why, sizeof why, "%s does not read: %zu bytes are waiting to be sent to it", c->peer,
             c->queued);
    fail_later(c, GR_ERR_UNAVAILABLE, why);
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s", why);
  }
  if (c->tx_mac) {
    add_mac(it);
    total += GR_FMAC_TAG;
  }
  bool was_empty = !c->qhead;
  if (c->qtail)
    c->qtail->next = it;
  else
    c->qhead = it;
  c->qtail = it;
  c->queued += total;
  __atomic_store_n(&c->last_tx_ms, gr_wire_now_ms(), __ATOMIC_RELAXED);
  int e = was_empty ? flush_locked(c) : 0;
  if (!e && c->qhead && !c->wev_armed) {
    c->wev_armed = true;
    event_add(c->wev, NULL);
  }
  char why[sizeof c->tls_why + 96];
  if (e) write_failed(c, e, why, sizeof why);
  pthread_mutex_unlock(&c->mu);
  if (e) {
    fail_later(c, GR_ERR_UNAVAILABLE, why);
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s", why);
  }
  return GR_OK;
}

static void on_write(evutil_socket_t fd, short what, void *arg) {
  gr_conn *c = arg;
  pthread_mutex_lock(&c->mu);
  int e = flush_locked(c);
  /* a TLS read or handshake waited for this: it goes on */
  bool wake_read = c->tls_want_write;
  c->tls_want_write = false;
  if (!e && !c->qhead && c->wev_armed) {
    c->wev_armed = false;
    event_del(c->wev);
  }
  char why[sizeof c->tls_why + 96];
  if (e) write_failed(c, e, why, sizeof why);
  pthread_mutex_unlock(&c->mu);
  if (e) {
    gr_conn_close_now(c, GR_ERR_UNAVAILABLE, why);
    return;
  }
  if (wake_read) event_active(c->rev, EV_READ, 0);
}

void gr_conn_want_write_locked(gr_conn *c) {
  GR_ASSERT_HELD(&c->mu);
  c->tls_want_write = true;
  if (!c->wev_armed) {
    c->wev_armed = true;
    event_add(c->wev, NULL);
  }
}

/* ---- reading --------------------------------------------------------------------- */

void gr_conn_log(const gr_conn_handler *h, const char *line) {
  if (h->log)
    h->log(h->arg, line);
  else
    fprintf(stderr, "graphrun: %s\n", line);
}

/* The peer sent something wrong: log it (naming the peer; a server's side
 * only, rate-limited) and close. */
static void bad_peer(gr_conn *c, const gr_error *e) {
  char why[GR_ERROR_MSG_MAX + 96];
  snprintf(why, sizeof why, "bad frame from %s: %s", c->peer, e->msg);
  if (c->is_server)
    gr_loop_log(c->loop, c->authed ? "bad frame" : "bad frame before auth",
                "%s; closing that connection", why);
  gr_conn_close_now(c, e->code == GR_OK ? GR_ERR_INVALID_ARGUMENT : e->code, why);
}

/* Where the body's next byte goes. */
static uint8_t *body_at(gr_conn *c) {
  return (c->into ? (uint8_t *)c->into->data + c->into_off : gr_rxbody_data(&c->body)) +
         c->body_got;
}

/* Makes room in the body for need bytes in all (at most its length), as
 * they arrive: false when c waits for the receive budget or closed. */
static bool body_fit(gr_conn *c, size_t need) {
  if (c->into) return true; /* all of it is there */
  size_t len = c->in->h.body_len, had = c->body.cap;
  if (need > len) need = len;
  if (had >= need) return true;
  size_t cap = gr_rxbody_next_cap(had, need, len);
  if (!gr_rx_reserve(c, cap - had)) return false;
  gr_error e;
  if (gr_rxbody_grow(&c->body, cap, c->body_got, len, &e) != GR_OK) {
    gr_rx_release(c, cap - had);
    gr_conn_close_now(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory for a frame body");
    return false;
  }
  return true;
}

/* Makes room in the staging buffer before a read: doubled (up to
 * GR_STAGE_MAX) when reads fill it, and for a map larger than it as the
 * map's bytes arrive. False when c waits for the receive budget or closed. */
static bool stage_fit(gr_conn *c, size_t want) {
  size_t cap = c->stage_cap, to = cap;
  if (c->stage_len == cap && want > cap) /* the map so far fills it */
    to = 2 * cap < want ? 2 * cap : want;
  else if (c->stage_hot && cap < GR_STAGE_MAX && c->loop->rx_held + cap <= c->loop->rx_budget)
    to = 2 * cap;
  c->stage_hot = false;
  if (to == cap) return true;
  if (!gr_rx_reserve(c, to - cap)) return false;
  uint8_t *more = realloc(c->stage, to);
  if (!more) {
    gr_rx_release(c, to - cap);
    gr_conn_close_now(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return false;
  }
  c->stage = more;
  c->stage_cap = to;
  return true;
}

/* The staging buffer is empty: one grown past GR_STAGE_MAX for a large map
 * goes back to that. */
static void stage_trim(gr_conn *c) {
  if (c->stage_cap <= GR_STAGE_MAX || c->stage_pos != c->stage_len) return;
  uint8_t *less = realloc(c->stage, GR_STAGE_MAX);
  if (!less) return;
  gr_rx_release(c, c->stage_cap - GR_STAGE_MAX);
  c->stage = less;
  c->stage_cap = GR_STAGE_MAX;
  c->stage_len = c->stage_pos = 0;
}

static void deliver(gr_conn *c);

/* The frame's bytes are all in: delivered, or on a connection with MACs
 * its tag is read and checked first. */
static void frame_done(gr_conn *c) {
  if (!c->rx_mac) {
    c->rstate = READ_HEADER;
    deliver(c);
    return;
  }
  c->rstate = READ_TAG; /* the body is in the MAC already (as it arrived) */
}

/* The frame's tag (at p) against its bytes: delivered, or the peer is
 * refused. False when c closed. */
static bool check_tag(gr_conn *c, const uint8_t *p) {
  uint64_t seq = gr_fmac_seq(c->rx_mac);
  if (!gr_fmac_check(c->rx_mac, p)) {
    if (c->h.on_refused) c->h.on_refused(c->h.arg, c, c->in);
    gr_error e;
    gr_error_set(&e, GR_ERR_UNAUTHENTICATED,
                 "frame %llu after the handshake (%s) fails its MAC: altered, replayed, "
                 "reordered or injected on the way",
                 (unsigned long long)seq, gr_msg_type_name(c->in->h.type));
    bad_peer(c, &e);
    return false;
  }
  c->rstate = READ_HEADER;
  deliver(c);
  return gr_conn_is_open(c);
}

static _Atomic uint64_t bodies_into;

uint64_t gr_transport_bodies_into(void) {
  return atomic_load_explicit(&bodies_into, memory_order_relaxed);
}

static void deliver(gr_conn *c) {
  gr_inmsg *m = c->in;
  c->in = NULL;
  size_t held = c->body.cap;
  if (c->into) { /* the buffer it was read into (body_into) */
    atomic_fetch_add_explicit(&bodies_into, 1, memory_order_relaxed);
    m->body = c->into;
    m->body_off = c->into_off;
    c->into = NULL;
  } else if (m->h.body_len > 0 && !(m->body = gr_rxbody_finish(&c->body, m->h.body_len))) {
    gr_inmsg_free(m);
    gr_conn_close_now(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory for a frame body");
    return;
  }
  if (held) gr_rx_release(c, held); /* the body is the message's now */
  if (!c->authed) {                 /* the peer's AUTH (transport_dial.c): refused, it closes c */
    gr_conn_server_auth(c, m);
    return;
  }
  c->h.on_message(c->h.arg, c, m);
}

/* Handles the bytes staged so far; false when the connection closed or
 * waits for the receive budget (its reading stops). */
static bool parse_staged(gr_conn *c) {
  gr_error e;
  for (;;) {
    size_t avail = c->stage_len - c->stage_pos;
    if (c->rstate == READ_BODY) {
      size_t need = c->in->h.body_len - c->body_got, take = avail < need ? avail : need;
      if (take == 0) return true;
      if (!body_fit(c, c->body_got + take)) return false;
      memcpy(body_at(c), c->stage + c->stage_pos, take);
      if (c->rx_mac) gr_fmac_update(c->rx_mac, c->stage + c->stage_pos, take);
      c->stage_pos += take;
      c->body_got += take;
      if (c->body_got < c->in->h.body_len) return true;
      frame_done(c);
      if (!gr_conn_is_open(c)) return false;
      continue;
    }
    size_t want = c->rstate == READ_HEADER ? GR_WIRE_HEADER_SIZE
                  : c->rstate == READ_TAG  ? GR_FMAC_TAG
                                           : c->in->h.header_len;
    if (avail < want) return true;
    const uint8_t *p = c->stage + c->stage_pos;
    if (c->rstate == READ_TAG) {
      c->stage_pos += want;
      if (!check_tag(c, p)) return false;
      continue;
    }
    if (c->rstate == READ_HEADER) {
      gr_frame_header h;
      if (gr_wire_parse_frame_header(p, max_body, &h, &e) != GR_OK) {
        bad_peer(c, &e);
        return false;
      }
      if (!c->authed && h.type != GR_MSG_AUTH) {
        gr_error_set(&e, GR_ERR_FAILED_PRECONDITION, "a %s frame before authentication",
                     gr_msg_type_name(h.type));
        bad_peer(c, &e);
        return false;
      }
      c->in = calloc(1, sizeof *c->in);
      if (!c->in) {
        gr_conn_close_now(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
        return false;
      }
      c->in->h = h;
      c->rstate = READ_MAP;
      c->stage_pos += want;
      if (c->rx_mac) {
        gr_fmac_begin(c->rx_mac);
        gr_fmac_update(c->rx_mac, p, want);
      }
      continue;
    }
    if (c->rx_mac) gr_fmac_update(c->rx_mac, p, want);
    gr_status st = gr_msg_parse(&c->in->msg, p, want, &e);
    c->stage_pos += want;
    if (st != GR_OK) {
      gr_error_prefix(&e, "%s frame", gr_msg_type_name(c->in->h.type));
      free(c->in);
      c->in = NULL;
      bad_peer(c, &e);
      return false;
    }
    if (c->authed) gr_conn_set_ready(c); /* without a secret: its first frame's map came */
    c->body_got = 0;                     /* memory for the body comes as its bytes do */
    c->rstate = READ_BODY;
    if (c->authed && c->in->h.body_len > 0 && c->h.body_into &&
        !c->h.body_into(c->h.arg, c, c->in, &c->into, &c->into_off))
      c->into = NULL;
    if (c->in->h.body_len == 0) {
      frame_done(c);
      if (!gr_conn_is_open(c)) return false;
    }
  }
}

/* Reads what the socket has, at most read_rounds read() calls per wake-up
 * (then the loop serves other connections; the event fires again). What a
 * read brings is parsed at once: a frame completed by the last read of a
 * wake-up must not wait for more bytes that may never come. A connection
 * woken after waiting for the receive budget first goes on with what it
 * had staged. */
static void on_read(evutil_socket_t fd, short what, void *arg) {
  gr_conn *c = arg;
  if (c->tls_state == TLS_ACCEPTING && !gr_conn_tls_accept(c)) return; /* waits, or closed */
  gr_conn_ref(c);
  bool go = c->stage_pos == c->stage_len || parse_staged(c);
  for (int round = 0; go && round < read_rounds; round++) {
    ssize_t r;
    if (c->rstate == READ_BODY) {                   /* bulk: straight into the body */
      if (!c->into && c->body_got == c->body.cap) { /* grown by what has arrived (doubled) */
        int unread = 0;
        ioctl(fd, FIONREAD, &unread);
        if (!body_fit(c, c->body_got + (unread > 0 ? (size_t)unread : 1))) break;
      }
      size_t room = (c->into ? c->in->h.body_len : c->body.cap) - c->body_got;
      r = gr_conn_read(c, body_at(c), room);
      if (r > 0 && c->rx_mac) /* while the bytes are in the cache */
        gr_fmac_update(c->rx_mac, body_at(c), (size_t)r);
      if (r > 0) {
        __atomic_store_n(&c->last_rx_ms, gr_wire_now_ms(), __ATOMIC_RELAXED);
        c->body_got += (size_t)r;
        if (c->body_got == c->in->h.body_len) {
          frame_done(c);
          if (!gr_conn_is_open(c)) break;
        }
        continue;
      }
    } else {
      if (c->stage_pos > 0) {
        memmove(c->stage, c->stage + c->stage_pos, c->stage_len - c->stage_pos);
        c->stage_len -= c->stage_pos;
        c->stage_pos = 0;
      }
      size_t want = c->rstate == READ_MAP   ? c->in->h.header_len
                    : c->rstate == READ_TAG ? GR_FMAC_TAG
                                            : GR_WIRE_HEADER_SIZE;
      if (!stage_fit(c, want)) break;
      size_t room = c->stage_cap - c->stage_len;
      if (!c->authed) { /* at most GR_AUTH_READ_MAX bytes before authentication */
        size_t left = GR_AUTH_READ_MAX - c->pre_auth;
        if (left == 0) {
          gr_error e;
          gr_error_set(&e, GR_ERR_UNAUTHENTICATED, "%d bytes without authenticating",
                       GR_AUTH_READ_MAX);
          bad_peer(c, &e);
          break;
        }
        if (room > left) room = left;
      }
      r = gr_conn_read(c, c->stage + c->stage_len, room);
      if (r > 0) {
        __atomic_store_n(&c->last_rx_ms, gr_wire_now_ms(), __ATOMIC_RELAXED);
        c->stage_len += (size_t)r;
        if (!c->authed) c->pre_auth += (size_t)r;
        c->stage_hot = (size_t)r == room;
        if (!parse_staged(c)) break;
        stage_trim(c);
        /* less than there was room for: the socket is empty (for now), and
         * another read() would only say EAGAIN; the event fires again when
         * more arrives */
        if ((size_t)r < room) break;
        continue;
      }
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    char why[sizeof c->tls_why + 160];
    bool between = c->rstate == READ_HEADER && c->stage_len == c->stage_pos;
    int e = r < 0 ? errno : 0;
    /* a reset that a send met first (under mu: a send in flight has stored
     * it); a peer that closed cleanly gives a send EPIPE instead */
    if (r == 0) {
      pthread_mutex_lock(&c->mu);
      if (c->write_errno == ECONNRESET) r = -1, e = ECONNRESET;
      pthread_mutex_unlock(&c->mu);
    }
    /* a TLS record refused (altered on the way): as a frame refused */
    bool refused = r < 0 && e == EPROTO && c->tls_state == TLS_ON;
    if (r == 0)
      snprintf(why, sizeof why, "%s closed the connection%s", c->peer,
               between ? "" : " in the middle of a frame");
    else if (refused)
      snprintf(why, sizeof why, "TLS with %s failed: %s", c->peer, c->tls_why);
    else
      snprintf(why, sizeof why, "connection reset by %s (%s)", c->peer, strerror(e));
    if (refused && c->is_server)
      gr_loop_log(c->loop, "bad frame", "%s; closing that connection", why);
    /* GR_OK: the peer closed cleanly, between frames */
    gr_status code = r == 0 && between ? GR_OK
                     : refused         ? GR_ERR_UNAUTHENTICATED
                                       : GR_ERR_UNAVAILABLE;
    gr_conn_close_now(c, code, why);
    break;
  }
  /* TLS may hold decrypted bytes that the socket no longer signals */
  if (c->tls_state == TLS_ON && !c->rx_paused && gr_conn_is_open(c) && gr_conn_tls_pending(c))
    event_active(c->rev, EV_READ, 0);
  gr_conn_unref(c);
}

/* The connection's deadline or keepalive (transport_limits.c). */
static void on_conn_timer(evutil_socket_t fd, short what, void *arg) {
  gr_conn_on_timer(arg);
}
