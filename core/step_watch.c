/* The step watch and the session's watchdog thread (step_watch_internal.h). */
#include "core/step_watch_internal.h"

#include "core/gr_cancel.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The most waiting nodes a timeout error names. */
enum { WATCH_MAX_NAMED = 10 };

struct gr_step_watch {
  gr_step_watch *prev, *next; /* the watchdog's running steps (its mu) */
  int64_t progress;           /* kernels finished (atomic) */
  int running;                /* synchronous kernels running now (atomic) */
  int64_t seen;               /* the watchdog thread's last look (its mu) */
  double since;               /* when progress was last seen */
  pthread_mutex_t mu;         /* guards what follows */
  pthread_cond_t cv;          /* firing dropped to 0 */
  gr_watch_wait *waits, *waits_tail;
  gr_watch_run *runs;
  gr_rendezvous *rv;
  bool fired;
  int firing;   /* the watchdog is cancelling the step outside mu */
  gr_error err; /* the stall */
  gr_error own; /* a run's own earlier error (code GR_OK: none) */
};

struct gr_watchdog {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int64_t timeout_ms;
  bool stop;
  gr_step_watch *steps;
  gr_step_watch *spare; /* ended steps' watches, reused (a steady loop allocates none) */
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the message ---------------------------------------------------------------------- */

static const char *device_of(const gr_node *n) {
  if (n->assigned_device && n->assigned_device[0]) return n->assigned_device;
  return n->requested_device[0] ? n->requested_device : "its device";
}

/* One waiting node: "'x' on DEV in loop 'f' iteration 3 (waiting for ...)". */
static int describe_wait(const gr_watch_wait *wt, char *buf, size_t cap) {
  const gr_node *n = wt->node;
  char loop[160] = "";
  if (wt->frame && wt->frame[0])
    snprintf(loop, sizeof loop, " in loop '%s' iteration %lld", wt->frame,
             (long long)wt->iteration);
  if (n->op->flags & GR_OP_TRANSFER)
    return snprintf(buf, cap, "'%s' on %s%s (waiting for '%s' from %s)", n->name, device_of(n),
                    loop, gr_node_attr_string(n, "tensor_name", "?"),
                    gr_node_attr_string(n, "send_device", "?"));
  return snprintf(buf, cap, "'%s' (op %s) on %s%s (its asynchronous kernel has not completed)",
                  n->name, n->op->name, device_of(n), loop);
}

/* Fills w->err. w->mu held. */
static void describe(gr_step_watch *w, int64_t timeout_ms) {
  gr_error *e = &w->err;
  e->code = GR_ERR_DEADLINE_EXCEEDED;
  size_t cap = sizeof e->msg, tail = 24; /* room for " ... and N more" */
  int n = snprintf(e->msg, cap,
                   "no progress for %g s (the step timeout): no kernel is running and none "
                   "finished; ",
                   (double)timeout_ms / 1000.0);
  size_t len = (size_t)n;
  if (!w->waits) {
    snprintf(e->msg + len, cap - len, "no node is waiting either (an executor bug)");
    return;
  }
  len += (size_t)snprintf(e->msg + len, cap - len, "still pending: ");
  /* one wait per device first (a cycle between devices shows both ends), then the rest */
  const gr_watch_wait *pick[WATCH_MAX_NAMED];
  int npick = 0, total = 0;
  for (const gr_watch_wait *wt = w->waits; wt; wt = wt->next) {
    total++;
    bool seen = false;
    for (int k = 0; k < npick && !seen; k++)
      seen = strcmp(device_of(pick[k]->node), device_of(wt->node)) == 0;
    if (!seen && npick < WATCH_MAX_NAMED) pick[npick++] = wt;
  }
  for (const gr_watch_wait *wt = w->waits; wt && npick < WATCH_MAX_NAMED; wt = wt->next) {
    bool seen = false;
    for (int k = 0; k < npick && !seen; k++) seen = pick[k] == wt;
    if (!seen) pick[npick++] = wt;
  }
  int named = 0;
  for (; named < npick; named++) {
    char one[600];
    int k = describe_wait(pick[named], one, sizeof one);
    size_t sep = named ? 2 : 0;
    if (k < 0 || len + sep + (size_t)k + tail >= cap) break;
    len += (size_t)snprintf(e->msg + len, cap - len, "%s%s", named ? ", " : "", one);
  }
  if (named < total) snprintf(e->msg + len, cap - len, " ... and %d more", total - named);
}

/* ---- the watchdog thread ---------------------------------------------------------------- */

/* Cancels step w with why: its runs, its rendezvous rv, the kept cancel
 * callbacks of its waiting kernels. The caller set w->fired and counted
 * itself in w->firing under w->mu; this ends the firing. */
static void cancel_fired(gr_step_watch *w, const gr_error *whyp, gr_rendezvous *rv) {
  gr_error why = *whyp;
  /* no run joins or leaves while firing: the list is stable */
  /* the runs first, so that what they had failed with before is told apart
   * from the receives that the abort fails */
  gr_error own = {GR_OK, ""};
  gr_watch_run *cancelled = NULL;
  for (gr_watch_run *r = w->runs; r; r = r->next) {
    gr_error e = {GR_OK, ""};
    bool held = r->cancel(r->arg, &why, &e);
    if (own.code == GR_OK && e.code != GR_OK && e.code != GR_ERR_CANCELLED) own = e;
    if (held) {
      r->fired_next = cancelled;
      cancelled = r;
    }
  }
  if (rv) gr_rendezvous_abort(rv, why.code, why.msg);
  /* kernels still waiting get their kept cancel callbacks, a batch at a time */
  for (;;) {
    enum { BATCH = 16 };
    void (*fns[BATCH])(void *);
    void *args[BATCH];
    int k = 0;
    pthread_mutex_lock(&w->mu);
    for (gr_watch_wait *wt = w->waits; wt && k < BATCH; wt = wt->next)
      if (wt->cancel_fn) {
        fns[k] = wt->cancel_fn;
        args[k++] = wt->cancel_arg;
        wt->cancel_fn = NULL;
      }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < k; i++) fns[i](args[i]);
    if (k < BATCH) break;
  }
  pthread_mutex_lock(&w->mu);
  w->own = own;
  w->firing--;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  /* the runs held themselves open while it fired: a release may finish one
   * (which leaves the watch, and may end the step: w is not touched after) */
  while (cancelled) {
    gr_watch_run *r = cancelled;
    cancelled = r->fired_next;
    r->release(r->arg);
  }
}

/* Fails and cancels step w. d->mu held on entry and exit, released inside:
 * w stays valid because gr_watchdog_end_step waits while firing. */
static void fire(gr_watchdog *d, gr_step_watch *w) {
  pthread_mutex_lock(&w->mu);
  w->fired = true;
  w->firing++;
  describe(w, d->timeout_ms);
  gr_error why = w->err;
  gr_rendezvous *rv = w->rv;
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&d->mu);
  cancel_fired(w, &why, rv);
  pthread_mutex_lock(&d->mu);
}

/* ---- cancelling from outside (gr_cancel.h) -------------------------------------------- */

gr_step_watch *gr_step_watch_new(void) {
  gr_step_watch *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->since = now_s();
  return w;
}

void gr_step_cancel(gr_step_watch *w, gr_status code, const char *msg) {
  pthread_mutex_lock(&w->mu);
  if (w->fired) {
    pthread_mutex_unlock(&w->mu);
    return;
  }
  w->fired = true;
  w->firing++;
  gr_error_set(&w->err, code, "%s", msg);
  gr_error why = w->err;
  gr_rendezvous *rv = w->rv;
  pthread_mutex_unlock(&w->mu);
  cancel_fired(w, &why, rv);
}

void gr_step_watch_free(gr_step_watch *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  while (w->firing) pthread_cond_wait(&w->cv, &w->mu);
  GR_ASSERT(w->waits == NULL && w->runs == NULL);
  pthread_mutex_unlock(&w->mu);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* How long step w may go without progress. With nodes waiting, the
 * timeout. With none waiting and no kernel running, the step is between
 * kernels: its next ones are queued for threads that a loaded machine has
 * not scheduled yet (seen at load 8 on 2 cores with a 0.02 s timeout), or
 * the executor lost a node; a longer bound keeps the first from failing a
 * step and still ends the second. d->mu held. */
static double stall_limit(gr_step_watch *w, double timeout) {
  pthread_mutex_lock(&w->mu);
  bool waiting = w->waits != NULL;
  pthread_mutex_unlock(&w->mu);
  return waiting ? timeout : (10 * timeout > 1.0 ? 10 * timeout : 1.0);
}

static void *watch_loop(void *arg) {
  gr_watchdog *d = arg;
  pthread_setname_np(pthread_self(), "gr-watchdog");
  double timeout = (double)d->timeout_ms / 1000.0;
  /* look often enough that a stall is noticed within ~1/8 of the timeout */
  int64_t tick_ms = d->timeout_ms / 8;
  if (tick_ms < 5) tick_ms = 5;
  if (tick_ms > 500) tick_ms = 500;
  pthread_mutex_lock(&d->mu);
  while (!d->stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)(tick_ms % 1000) * 1000000L;
    until.tv_sec += tick_ms / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&d->cv, &d->mu, &until);
    double now = now_s();
  rescan:
    for (gr_step_watch *w = d->steps; w && !d->stop; w = w->next) {
      if (w->fired) continue;
      int64_t p = __atomic_load_n(&w->progress, __ATOMIC_ACQUIRE);
      if (__atomic_load_n(&w->running, __ATOMIC_ACQUIRE) > 0 || p != w->seen) {
        w->seen = p;
        w->since = now;
      } else if (now - w->since >= stall_limit(w, timeout)) {
        fire(d, w); /* releases d->mu: the list may have changed */
        goto rescan;
      }
    }
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

gr_watchdog *gr_watchdog_new(int64_t timeout_ms) {
  if (timeout_ms <= 0) return NULL;
  gr_watchdog *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->timeout_ms = timeout_ms;
  pthread_mutex_init(&d->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&d->thread, NULL, watch_loop, d) != 0) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
    return NULL;
  }
  return d;
}

void gr_watchdog_free(gr_watchdog *d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  GR_ASSERT(d->steps == NULL);
  while (d->spare) {
    gr_step_watch *w = d->spare;
    d->spare = w->next;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
  }
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

gr_step_watch *gr_watchdog_begin_step(gr_watchdog *d) {
  pthread_mutex_lock(&d->mu);
  gr_step_watch *w = d->spare;
  if (w) d->spare = w->next;
  pthread_mutex_unlock(&d->mu);
  if (w) { /* mu and cv stay initialised; the rest starts over */
    w->prev = w->next = NULL;
    w->progress = w->seen = 0;
    w->running = w->firing = 0;
    w->waits = w->waits_tail = NULL;
    w->runs = NULL;
    w->rv = NULL;
    w->fired = false;
    w->err = w->own = (gr_error){GR_OK, ""};
  } else {
    if (!(w = calloc(1, sizeof *w))) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
  }
  w->since = now_s();
  pthread_mutex_lock(&d->mu);
  w->next = d->steps;
  if (d->steps) d->steps->prev = w;
  d->steps = w;
  pthread_mutex_unlock(&d->mu);
  return w;
}

gr_status gr_watchdog_end_step(gr_watchdog *d, gr_step_watch *w, gr_status st, gr_error *err) {
  /* unlinked under d->mu: the watchdog cannot start firing w after this */
  pthread_mutex_lock(&d->mu);
  if (w->prev)
    w->prev->next = w->next;
  else
    d->steps = w->next;
  if (w->next) w->next->prev = w->prev;
  pthread_mutex_unlock(&d->mu);
  pthread_mutex_lock(&w->mu);
  while (w->firing) pthread_cond_wait(&w->cv, &w->mu);
  GR_ASSERT(w->waits == NULL && w->runs == NULL);
  /* a failure the watchdog caused (runs it cancelled, receives it aborted) is
   * replaced by the cause; a run's own error is kept */
  if (w->fired && (st == GR_ERR_DEADLINE_EXCEEDED || st == GR_ERR_CANCELLED)) {
    const gr_error *cause = w->own.code != GR_OK ? &w->own : &w->err;
    st = cause->code;
    if (err) *err = *cause;
  }
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&d->mu); /* kept for the next step */
  w->next = d->spare;
  d->spare = w;
  pthread_mutex_unlock(&d->mu);
  return st;
}

/* ---- hooks ------------------------------------------------------------------------------ */

void gr_watch_count_kernel(gr_step_watch *w, int delta) {
  __atomic_add_fetch(&w->running, delta, __ATOMIC_RELEASE);
  if (delta < 0) __atomic_add_fetch(&w->progress, 1, __ATOMIC_RELEASE);
}

void gr_watch_begin_wait(gr_step_watch *w, gr_watch_wait *wt, const gr_node *n, const char *frame,
                         int64_t iteration) {
  if (!w) return;
  *wt = (gr_watch_wait){.node = n, .frame = frame, .iteration = iteration};
  pthread_mutex_lock(&w->mu);
  wt->prev = w->waits_tail;
  if (w->waits_tail)
    w->waits_tail->next = wt;
  else
    w->waits = wt;
  w->waits_tail = wt;
  pthread_mutex_unlock(&w->mu);
}

void gr_watch_end_wait(gr_step_watch *w, gr_watch_wait *wt) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  if (wt->prev)
    wt->prev->next = wt->next;
  else
    w->waits = wt->next;
  if (wt->next)
    wt->next->prev = wt->prev;
  else
    w->waits_tail = wt->prev;
  wt->prev = wt->next = NULL;
  pthread_mutex_unlock(&w->mu);
  __atomic_add_fetch(&w->progress, 1, __ATOMIC_RELEASE);
}

bool gr_watch_keep_cancel(gr_step_watch *w, gr_watch_wait *wt, void (*fn)(void *), void *arg) {
  if (!w) return false;
  pthread_mutex_lock(&w->mu);
  bool now = w->fired;
  if (!now) {
    wt->cancel_fn = fn;
    wt->cancel_arg = arg;
  }
  pthread_mutex_unlock(&w->mu);
  return now;
}

void gr_watch_attach_run(gr_step_watch *w, gr_watch_run *r) {
  if (!w) return;
  r->prev = r->next = NULL;
  pthread_mutex_lock(&w->mu);
  while (w->firing) pthread_cond_wait(&w->cv, &w->mu);
  bool fired = w->fired;
  if (!fired) { /* linked only while the step may still be stopped */
    r->next = w->runs;
    if (w->runs) w->runs->prev = r;
    w->runs = r;
  }
  gr_error why = w->err;
  pthread_mutex_unlock(&w->mu);
  gr_error own;
  if (fired) { /* it has just started: no error of its own */
    if (r->cancel(r->arg, &why, &own)) r->release(r->arg);
  }
}

void gr_watch_detach_run(gr_step_watch *w, gr_watch_run *r) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  while (w->firing) pthread_cond_wait(&w->cv, &w->mu);
  if (r->prev || w->runs == r) {
    if (r->prev)
      r->prev->next = r->next;
    else
      w->runs = r->next;
    if (r->next) r->next->prev = r->prev;
  }
  r->prev = r->next = NULL;
  pthread_mutex_unlock(&w->mu);
}

void gr_watch_set_rendezvous(gr_step_watch *w, gr_rendezvous *r) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  while (w->firing) pthread_cond_wait(&w->cv, &w->mu);
  w->rv = r;
  bool fired = w->fired;
  gr_error why = w->err;
  pthread_mutex_unlock(&w->mu);
  if (r && fired) gr_rendezvous_abort(r, why.code, why.msg);
}
