/* The transport's bounds (transport_internal.h, "Bounds"): the accepted
 * connections' limit and making room at it, the handshake and idle
 * deadlines and the dialed side's keepalives, the receive-memory budget
 * with its back-pressure, and the rate-limited log of what peers cause.
 * Everything here runs on the loop thread, but for the settings and the
 * statistics, which are atomic. */
#include <event2/event.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "distributed/transport_conn_internal.h"

#define DEFAULT_HANDSHAKE_MS 10000
#define DEFAULT_IDLE_MS      60000
#define DEFAULT_KEEPALIVE_MS 15000
#define DEFAULT_BUDGET       ((size_t)1 << 30)

static int handshake_ms = DEFAULT_HANDSHAKE_MS, idle_ms = DEFAULT_IDLE_MS,
           keepalive_ms = DEFAULT_KEEPALIVE_MS;
static size_t rx_budget = DEFAULT_BUDGET;
static struct {
  _Atomic int64_t rx_held, rx_paused, refused, evicted, fd_pauses, deadlines, keepalives;
} stats; /* gr_transport_stats' fields, counted on the loop thread, read on any */

#define STAT_ADD(field, n)                                                                         \
  atomic_fetch_add_explicit(&stats.field, (int64_t)(n), memory_order_relaxed)

void gr_transport_set_deadlines(int handshake, int idle, int keepalive) {
  __atomic_store_n(&handshake_ms, handshake > 0 ? handshake : DEFAULT_HANDSHAKE_MS,
                   __ATOMIC_RELAXED);
  __atomic_store_n(&idle_ms, idle ? idle : DEFAULT_IDLE_MS, __ATOMIC_RELAXED);
  __atomic_store_n(&keepalive_ms, keepalive > 0 ? keepalive : DEFAULT_KEEPALIVE_MS,
                   __ATOMIC_RELAXED);
}
int gr_handshake_ms(void) {
  return __atomic_load_n(&handshake_ms, __ATOMIC_RELAXED);
}
int gr_idle_ms(void) {
  return __atomic_load_n(&idle_ms, __ATOMIC_RELAXED);
}
int gr_keepalive_ms(void) {
  return __atomic_load_n(&keepalive_ms, __ATOMIC_RELAXED);
}

void gr_transport_set_budget(size_t bytes) {
  __atomic_store_n(&rx_budget, bytes ? bytes : DEFAULT_BUDGET, __ATOMIC_RELAXED);
}

void gr_transport_get_stats(gr_transport_stats *out) {
  out->rx_held = atomic_load_explicit(&stats.rx_held, memory_order_relaxed);
  out->rx_paused = atomic_load_explicit(&stats.rx_paused, memory_order_relaxed);
  out->refused = atomic_load_explicit(&stats.refused, memory_order_relaxed);
  out->evicted = atomic_load_explicit(&stats.evicted, memory_order_relaxed);
  out->fd_pauses = atomic_load_explicit(&stats.fd_pauses, memory_order_relaxed);
  out->deadlines = atomic_load_explicit(&stats.deadlines, memory_order_relaxed);
  out->keepalives = atomic_load_explicit(&stats.keepalives, memory_order_relaxed);
}

/* ---- the log ------------------------------------------------------------------- */

void gr_transport_note_fd_pause(void) {
  STAT_ADD(fd_pauses, 1);
}

static void write_line(void *arg, const char *line) {
  gr_loop *l = arg;
  pthread_mutex_lock(&l->mu);
  gr_conn_handler to = l->log_to;
  pthread_mutex_unlock(&l->mu);
  gr_conn_log(&to, line);
}

void gr_loop_log(gr_loop *l, const char *kind, const char *fmt, ...) {
  char line[GR_ERROR_MSG_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  gr_loglimit_emit(&l->logs, kind, line, write_line, l);
}

void gr_conn_log_peer(gr_conn *c, const char *kind, const char *line) {
  gr_loglimit_emit(&c->loop->logs, kind, line, write_line, c->loop);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
  gr_loop *l = arg;
  gr_loglimit_flush(&l->logs, write_line, l);
}

gr_status gr_loop_limits_init(gr_loop *l, gr_error *err) {
  gr_loglimit_init(&l->logs);
  l->rx_budget = __atomic_load_n(&rx_budget, __ATOMIC_RELAXED);
  struct timeval second = {1, 0};
  l->tick = event_new(l->base, -1, EV_PERSIST, on_tick, l);
  if (!l->tick || event_add(l->tick, &second) != 0) {
    if (l->tick) event_free(l->tick);
    l->tick = NULL;
    gr_loglimit_destroy(&l->logs);
    return gr_error_set(err, GR_ERR_INTERNAL, "cannot add a timer to the network thread");
  }
  return GR_OK;
}

void gr_loop_limits_free(gr_loop *l) {
  if (l->tick) event_free(l->tick);
  l->tick = NULL;
  gr_loglimit_flush(&l->logs, write_line, l);
  gr_loglimit_destroy(&l->logs);
}

/* ---- connections ------------------------------------------------------------- */

int gr_default_max_conns(void) {
  struct rlimit rl;
  long long n = 1024;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    n = rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : (long long)rl.rlim_cur;
  long long keep = n / 4 > 64 ? n / 4 : 64;
  long long max = n - keep;
  return (int)(max < 16 ? 16 : max > 16384 ? 16384 : max);
}

/* The oldest accepted connection still in its handshake after a second (a
 * quarter of the handshake deadline when that is shorter), or NULL: one
 * just accepted, whose first bytes may be waiting to be read, is not
 * taken, nor are the connections of a burst taken for each other. */
static gr_conn *oldest_unready(gr_loop *l) {
  gr_conn *old = NULL;
  int64_t min_age = gr_handshake_ms() / 4 < 1000 ? gr_handshake_ms() / 4 : 1000;
  int64_t born_by = gr_wire_now_ms() - min_age;
  pthread_mutex_lock(&l->mu);
  for (gr_conn *c = l->conns; c; c = c->next)
    if (c->is_server && !c->ready && c->born_ms <= born_by && (!old || c->born_ms <= old->born_ms))
      old = c;
  if (old) gr_conn_ref(old);
  pthread_mutex_unlock(&l->mu);
  return old;
}

bool gr_make_room(gr_loop *l, const char *because) {
  gr_conn *old = oldest_unready(l);
  if (!old) return false;
  char why[300];
  snprintf(why, sizeof why,
           "closed to make room for a new connection (%s): it had not finished its handshake "
           "after %lld ms",
           because, (long long)(gr_wire_now_ms() - old->born_ms));
  gr_loop_log(l, "evicted", "the connection from %s was %s", old->peer, why);
  STAT_ADD(evicted, 1);
  gr_conn_close_now(old, GR_ERR_RESOURCE_EXHAUSTED, why);
  gr_conn_unref(old);
  return true;
}

bool gr_conn_admit(gr_loop *l, int max, const char *peer) {
  pthread_mutex_lock(&l->mu);
  int open = l->accepted;
  pthread_mutex_unlock(&l->mu);
  if (open < max) return true;
  char because[96];
  snprintf(because, sizeof because, "%d connections open, the limit", open);
  if (gr_make_room(l, because)) return true;
  STAT_ADD(refused, 1);
  gr_loop_log(l, "refused",
              "refused a connection from %s: %d connections are open, the limit (every one has "
              "finished its handshake)",
              peer, open);
  return false;
}

/* ---- deadlines and keepalives -------------------------------------------------- */

static void arm(gr_conn *c, int64_t ms) {
  if (ms < 0) ms = 0;
  struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
  event_add(c->timer, &tv);
}

void gr_conn_limits_start(gr_conn *c) {
  arm(c, c->is_server ? gr_handshake_ms() : 0); /* a dialed one: its first keepalive at once */
}

void gr_conn_set_ready(gr_conn *c) {
  if (c->ready) return;
  c->ready = true;
  int idle = gr_idle_ms();
  if (idle > 0)
    arm(c, idle);
  else
    event_del(c->timer);
}

/* A dialed connection silent for the keepalive period (or not used yet)
 * sends a HEARTBEAT: the server's idle deadline does not close it. The
 * answer is a RESPONSE with id 0, which no request waits for. */
static void keepalive(gr_conn *c, int64_t now) {
  int period = gr_keepalive_ms();
  int64_t tx = __atomic_load_n(&c->last_tx_ms, __ATOMIC_RELAXED);
  if (tx == 0 || now - tx >= period) {
    gr_outmsg *m = gr_outmsg_new(GR_MSG_HEARTBEAT, 1);
    if (m) {
      gr_outmsg_u64(m, "id", 0);
      if (gr_conn_send(c, m, NULL) == GR_OK) STAT_ADD(keepalives, 1);
    }
    tx = now;
  }
  arm(c, period - (now - tx));
}

static void deadline(gr_conn *c, const char *why) {
  STAT_ADD(deadlines, 1);
  gr_conn_close_now(c, GR_ERR_DEADLINE_EXCEEDED, why);
}

void gr_conn_on_timer(gr_conn *c) {
  int64_t now = gr_wire_now_ms();
  char why[200];
  if (!c->is_server) {
    keepalive(c, now);
  } else if (!c->ready) {
    snprintf(why, sizeof why, "%s did not %s within %d ms (the handshake deadline)", c->peer,
             c->secret ? "authenticate" : "send a frame", gr_handshake_ms());
    deadline(c, why);
  } else if (gr_idle_ms() > 0) {
    int64_t idle = now - gr_conn_last_rx_ms(c), limit = gr_idle_ms();
    /* bytes waiting unread, or a pause for the budget: the wait is ours */
    if (idle < limit || c->rx_paused || gr_conn_has_unread(c)) {
      arm(c, idle < limit ? limit - idle : limit);
      return;
    }
    snprintf(why, sizeof why, "nothing from %s for %lld ms (the idle deadline)", c->peer,
             (long long)idle);
    deadline(c, why);
  }
}

/* ---- receive memory ------------------------------------------------------------ */

void gr_rx_charge(gr_conn *c, size_t n) {
  c->rx_held += n;
  c->loop->rx_held += n;
  STAT_ADD(rx_held, n);
}

bool gr_rx_reserve(gr_conn *c, size_t n) {
  gr_loop *l = c->loop;
  bool fits = l->rx_held + n <= l->rx_budget;
  if (fits || !l->rx_over || l->rx_over == c) {
    if (!fits) l->rx_over = c; /* the one past the budget: it finishes its frame */
    gr_rx_charge(c, n);
    return true;
  }
  if (!c->rx_paused) { /* wait, not reading, until memory is freed */
    c->rx_paused = true;
    STAT_ADD(rx_paused, 1);
    event_del(c->rev);
    gr_conn **p = &l->rx_wait;
    while (*p) p = &(*p)->rx_wait_next;
    *p = c;
    c->rx_wait_next = NULL;
  }
  return false;
}

/* Every waiting connection tries again (in order; those that still do not
 * fit wait again). */
static void wake(gr_loop *l) {
  gr_conn *w = l->rx_wait;
  l->rx_wait = NULL;
  while (w) {
    gr_conn *next = w->rx_wait_next;
    w->rx_wait_next = NULL;
    w->rx_paused = false;
    STAT_ADD(rx_paused, -1);
    event_add(w->rev, NULL);
    event_active(w->rev, EV_READ, 0); /* what it staged goes on at once */
    w = next;
  }
}

void gr_rx_release(gr_conn *c, size_t n) {
  gr_loop *l = c->loop;
  c->rx_held -= n;
  l->rx_held -= n;
  STAT_ADD(rx_held, -(int64_t)n);
  if (l->rx_over == c) l->rx_over = NULL;
  if (l->rx_wait) wake(l);
}

void gr_rx_drop(gr_conn *c) {
  gr_loop *l = c->loop;
  if (c->rx_paused) {
    gr_conn **p = &l->rx_wait;
    while (*p && *p != c) p = &(*p)->rx_wait_next;
    if (*p) *p = c->rx_wait_next;
    c->rx_paused = false;
    STAT_ADD(rx_paused, -1);
  }
  gr_rx_release(c, c->rx_held);
}
