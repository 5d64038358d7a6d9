/* Steps on a server task: RUN requests, the push rendezvous, pushed tensors
 * and aborts.
 *
 * A step's values for this task's devices meet in a local rendezvous kept
 * per run id. A _send whose receiver is a device of another task pushes the
 * tensor to that task at once (one TENSOR frame, no request); the receiving
 * task stores it in its local rendezvous under the same key, also when its
 * own RUN for that step has not started yet (parked, bounded in bytes). */
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

struct step_state {
  uint64_t run_id, seq;
  gr_rendezvous *local;
  gr_step_watch *cancel; /* the step's cancellation: an abort ends it however it waits */
  gr_conn *owner;        /* the connection its RUN came over (not a reference; under s->mu) */
  int refs;              /* under s->mu */
  bool started, aborted;
  size_t parked;                  /* bytes that arrived before the step started */
  _Atomic int64_t sends, bytes;   /* pushed to other tasks */
  _Atomic int64_t got, got_bytes; /* pushed here: counted by their sender */
  /* values expected straight into a buffer (under s->mu): key and view */
  struct into {
    char *key;
    gr_tensor view;
  } * into;
  int num_into, cap_into;
};

/* Drops expectation i of t (under s->mu): its buffer reference moves to
 * *buf when buf, else is released. */
static void into_drop_locked(gr_server *s, step_state *t, int i, gr_buffer **buf) {
  GR_ASSERT_HELD(&s->mu);
  free(t->into[i].key);
  if (buf)
    *buf = t->into[i].view.buf;
  else
    gr_tensor_release(&t->into[i].view);
  t->into[i] = t->into[--t->num_into];
}

static int into_find_locked(gr_server *s, step_state *t, const char *key) {
  GR_ASSERT_HELD(&s->mu);
  for (int i = 0; i < t->num_into; i++)
    if (!strcmp(t->into[i].key, key)) return i;
  return -1;
}

static void state_unref_locked(gr_server *s, step_state *t) {
  GR_ASSERT_HELD(&s->mu);
  if (--t->refs > 0) return;
  s->parked_bytes -= t->parked;
  while (t->num_into > 0) into_drop_locked(s, t, 0, NULL);
  free(t->into);
  gr_rendezvous_free(t->local);
  gr_step_watch_free(t->cancel);
  free(t);
}

static void state_unref(gr_server *s, step_state *t) {
  pthread_mutex_lock(&s->mu);
  state_unref_locked(s, t);
  pthread_mutex_unlock(&s->mu);
}

/* Makes room for a new step state when GR_SERVER_MAX_STEPS are open (under
 * s->mu): forgets the oldest one that never started and nobody else holds
 * (values pushed or an abort for a step whose RUN never came: a master that
 * died, or a peer's mistake), as if it had finished. */
static bool evict_parked_locked(gr_server *s) {
  GR_ASSERT_HELD(&s->mu);
  step_state *old = NULL;
  void *v;
  for (size_t pos = 0; gr_map_next(&s->steps, &pos, NULL, &v);) {
    step_state *t = v;
    if (!t->started && t->refs == 1 && (!old || t->seq < old->seq)) old = t;
  }
  if (!old) return false;
  gr_map_remove_u64(&s->steps, old->run_id);
  s->finished[s->finished_pos++ % 256] = old->run_id;
  state_unref_locked(s, old);
  return true;
}

/* Why state_get found no state. */
typedef enum { STATE_DONE, STATE_FULL, STATE_OOM } no_state;

/* The state of run_id with a reference for the caller; NULL when the step
 * finished here already (late values are dropped), too many are open or
 * memory is short (*why says which). */
static step_state *state_get(gr_server *s, uint64_t run_id, no_state *why) {
  pthread_mutex_lock(&s->mu);
  step_state *t = gr_map_get_u64(&s->steps, run_id);
  bool done = false, room = true;
  for (int i = 0; i < 256 && !t && !done; i++) done = s->finished[i] == run_id && run_id;
  if (!t && !done && s->steps.count >= GR_SERVER_MAX_STEPS) room = evict_parked_locked(s);
  if (why) *why = done ? STATE_DONE : !room ? STATE_FULL : STATE_OOM;
  if (!t && !done && room && (t = calloc(1, sizeof *t))) {
    t->run_id = run_id;
    t->seq = ++s->step_seq;
    t->refs = 1; /* the map's */
    if (!(t->local = gr_rendezvous_new()) || !(t->cancel = gr_step_watch_new()) ||
        !gr_map_put_u64(&s->steps, run_id, t)) {
      gr_rendezvous_free(t->local);
      gr_step_watch_free(t->cancel);
      free(t);
      t = NULL;
    }
  }
  if (t) t->refs++;
  pthread_mutex_unlock(&s->mu);
  return t;
}

/* The step ended here: forget it (late values for it are dropped). */
static void state_finish(gr_server *s, step_state *t) {
  pthread_mutex_lock(&s->mu);
  if (gr_map_get_u64(&s->steps, t->run_id) == t) {
    gr_map_remove_u64(&s->steps, t->run_id);
    s->finished[s->finished_pos++ % 256] = t->run_id;
    state_unref_locked(s, t); /* the map's */
  }
  pthread_mutex_unlock(&s->mu);
}

/* Ends the step however it waits: its receives fail (the rendezvous), and
 * its runs and parked kernels (a dequeue) are cancelled (its watch). */
static void state_abort(gr_server *s, step_state *t, gr_status code, const char *msg) {
  pthread_mutex_lock(&s->mu);
  t->aborted = true;
  pthread_mutex_unlock(&s->mu);
  gr_rendezvous_abort(t->local, code, msg);
  gr_step_cancel(t->cancel, code, msg);
}

void gr_server_steps_abort_all(gr_server *s) {
  gr_server_steps_abort_open(s, GR_ERR_CANCELLED, "the server is shutting down");
}

void gr_server_steps_abort_open(gr_server *s, gr_status code, const char *msg) {
  for (;;) { /* one at a time, without s->mu: an aborted step may end (and answer) inline */
    pthread_mutex_lock(&s->mu);
    step_state *t = NULL;
    void *v;
    for (size_t pos = 0; !t && gr_map_next(&s->steps, &pos, NULL, &v);)
      if (!((step_state *)v)->aborted) t = v;
    if (t) t->refs++;
    pthread_mutex_unlock(&s->mu);
    if (!t) return;
    state_abort(s, t, code, msg);
    state_unref(s, t);
  }
}

void gr_server_steps_abort_of(gr_server *s, gr_conn *c, const gr_error *why) {
  for (;;) { /* one at a time: the abort runs without s->mu (its callbacks may push) */
    pthread_mutex_lock(&s->mu);
    step_state *t = NULL;
    void *v;
    for (size_t pos = 0; !t && gr_map_next(&s->steps, &pos, NULL, &v);)
      if (((step_state *)v)->owner == c) t = v;
    if (t) {
      t->owner = NULL;
      t->refs++;
    }
    pthread_mutex_unlock(&s->mu);
    if (!t) return;
    char msg[GR_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s: the connection that ran step %016llx closed (%s)", s->task,
             (unsigned long long)t->run_id, why->msg);
    state_abort(s, t, GR_ERR_CANCELLED, msg);
    state_unref(s, t);
  }
}

void gr_server_steps_free(gr_server *s) {
  void *v;
  pthread_mutex_lock(&s->mu); /* no other thread is left: for the lock checks */
  for (size_t pos = 0; gr_map_next(&s->steps, &pos, NULL, &v);) state_unref_locked(s, v);
  pthread_mutex_unlock(&s->mu);
}

/* ---- the push rendezvous ----------------------------------------------------------- */

typedef struct push_rv {
  gr_server *s;
  step_state *t;
} push_rv;

/* The receiving device's task of a key (its third part). */
static bool key_dst_task(const char *key, char *task, size_t cap) {
  const char *a = strchr(key, ';');
  const char *b = a ? strchr(a + 1, ';') : NULL;
  const char *c = b ? strchr(b + 1, ';') : NULL;
  if (!c || (size_t)(c - b) >= 256) return false;
  char dst[256];
  memcpy(dst, b + 1, (size_t)(c - b - 1));
  dst[c - b - 1] = '\0';
  gr_task_of_device(dst, task, cap);
  return true;
}

static gr_status rv_send(void *self, const char *key, const gr_tensor *value, bool dead,
                         gr_error *err) {
  push_rv *r = self;
  gr_server *s = r->s;
  char task[GR_TASK_NAME_MAX];
  if (!key_dst_task(key, task, sizeof task))
    return gr_error_set(err, GR_ERR_INTERNAL, "malformed rendezvous key '%s'", key);
  if (!strcmp(task, s->task)) return gr_rendezvous_send(r->t->local, key, value, dead, err);
  pthread_mutex_lock(&s->mu);
  peer *p = gr_server_find_peer(s, task);
  gr_conn *c = p ? p->conn : NULL;
  if (c) gr_conn_ref(c);
  pthread_mutex_unlock(&s->mu);
  if (!c) return gr_error_set(err, GR_ERR_UNAVAILABLE, "%s has no connection to %s", s->task, task);
  gr_tensor_msg tm = {r->t->run_id, key, s->task, s->incarnation, dead, value, NULL};
  gr_outmsg *m = gr_tensor_msg_pack(&tm);
  gr_status st = m ? GR_OK : gr_error_set_oom(err); /* only memory can fail it */
  if (st == GR_OK) {
    atomic_fetch_add_explicit(&r->t->sends, 1, memory_order_relaxed);
    if (!dead && value)
      atomic_fetch_add_explicit(&r->t->bytes, (int64_t)gr_tensor_num_bytes(value),
                                memory_order_relaxed);
    st = gr_conn_send(c, m, err); /* takes m */
    if (st != GR_OK) gr_error_prefix(err, "%s pushing '%s' to %s", s->task, key, task);
  }
  gr_conn_unref(c);
  return st;
}

static void rv_recv(void *self, const char *key, gr_rendezvous_done_fn done, void *arg) {
  push_rv *r = self;
  gr_rendezvous_recv(r->t->local, key, done, arg);
}
static void rv_abort(void *self, gr_status code, const char *msg) {
  push_rv *r = self;
  state_abort(r->s, r->t, code, msg);
}
static int rv_num_pending(void *self) {
  push_rv *r = self;
  return gr_rendezvous_num_pending(r->t->local);
}
static gr_transfer_stats rv_stats(void *self) {
  push_rv *r = self;
  gr_transfer_stats st = gr_rendezvous_stats(r->t->local);
  st.sends += atomic_load_explicit(&r->t->sends, memory_order_relaxed) -
              atomic_load_explicit(&r->t->got, memory_order_relaxed);
  st.bytes += atomic_load_explicit(&r->t->bytes, memory_order_relaxed) -
              atomic_load_explicit(&r->t->got_bytes, memory_order_relaxed);
  return st;
}
static void rv_free(void *self) {
  free(self);
}

/* Kept for gr_server_push_into; nothing when out of memory (the value then
 * comes as any other). */
static void rv_expect_into(void *self, const char *key, const gr_tensor *into) {
  push_rv *r = self;
  gr_server *s = r->s;
  step_state *t = r->t;
  if (!into->buf || gr_tensor_num_bytes(into) == 0) return;
  char *k = strdup(key);
  pthread_mutex_lock(&s->mu);
  if (k && t->num_into == t->cap_into) {
    int cap = t->cap_into ? 2 * t->cap_into : 8;
    struct into *v = realloc(t->into, (size_t)cap * sizeof *v);
    if (v) t->into = v, t->cap_into = cap;
  }
  if (k && t->num_into < t->cap_into && into_find_locked(s, t, key) < 0) {
    t->into[t->num_into] = (struct into){k, *into};
    gr_buffer_retain(into->buf);
    t->num_into++;
    k = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  free(k);
}

static const gr_rendezvous_ops push_ops = {rv_send,  rv_recv, rv_abort,      rv_num_pending,
                                           rv_stats, rv_free, rv_expect_into};

/* ---- RUN -------------------------------------------------------------------------- */

/* A RUN in flight: started on a worker thread, answered from its last
 * step's completion on whichever thread finishes it (gr_conn_send is
 * thread-safe). A multi-step RUN runs its iterations one after another,
 * each a step of its own (run id q.run + i, step q.step + i): the next
 * starts on an executor thread once the previous one ended (iter_continue). */
typedef struct server_run {
  gr_server *s;
  gr_conn *c; /* a reference */
  gr_inmsg *m;
  int64_t t0;
  gr_run_req q;  /* its feed_items point into m */
  registered *r; /* a reference */
  step_state *t; /* the iteration's: a reference (set and cleared under s->mu) */
  bool mine;     /* this RUN started the step (not a repeated one) */
  gr_tensor *feeds, *fetches;
  int nf, nx;
  gr_rendezvous *rv;
  gr_step_trace *trace;
  gr_step_info step;
  gr_transfer_stats moved; /* the iteration's transfers */
  uint64_t iter;           /* the iteration (0 to q.steps - 1) */
  bool listed;             /* in s->runs: a multi-step RUN an abort finds */
  /* under s->mu: iter_loop is starting an iteration; it ended meanwhile;
   * an abort came for the iterations from stop_from on (its code and
   * message end the RUN when it reaches them; the ones before end first) */
  bool starting, ended;
  gr_status stop;
  uint64_t stop_from;
  char stop_msg[GR_ERROR_MSG_MAX];
  gr_status done_st; /* how the iteration ended */
  gr_error done_err;
  _Atomic int waiting; /* DONEs the iteration still awaits, plus one while they are asked */
  _Atomic int wait_failed;
  gr_error wait_err;
} server_run;

/* Forgets the iteration's step here (its state, rendezvous and stacks). */
static void iter_forget(server_run *x) {
  gr_server *s = x->s;
  gr_step_stacks_free(x->step.stacks);
  x->step.stacks = NULL;
  gr_rendezvous_free(x->rv);
  x->rv = NULL;
  pthread_mutex_lock(&s->mu);
  step_state *t = x->t;
  x->t = NULL;
  pthread_mutex_unlock(&s->mu);
  if (t) {
    if (x->mine) state_finish(s, t); /* a repeated RUN leaves the running one's state alone */
    state_unref(s, t);
  }
}

/* The RUN ended (or never started): forget it, answer, free. A multi-step
 * RUN that stopped early also forgets its next two steps (and step
 * x->iter when it stopped before beginning it: an abort between steps),
 * which senders one step ahead and DONEs may have parked here (late values
 * are dropped). */
static void run_end(server_run *x, gr_status st, const gr_error *e) {
  gr_server *s = x->s;
  uint64_t first = x->t ? x->iter + 1 : x->iter; /* x->t: step x->iter began here */
  iter_forget(x);
  if (x->listed) {
    pthread_mutex_lock(&s->mu);
    gr_map_remove_u64(&s->runs, x->q.run);
    for (uint64_t i = first; i <= x->iter + 2 && i < x->q.steps; i++) {
      uint64_t id = x->q.run + i;
      step_state *t = gr_map_get_u64(&s->steps, id);
      if (t && t->started) continue; /* another RUN's (a repeated one) */
      if (t) gr_map_remove_u64(&s->steps, id);
      s->finished[s->finished_pos++ % 256] = id;
      if (t) state_unref_locked(s, t);
    }
    pthread_mutex_unlock(&s->mu);
  }
  for (int i = 0; x->feeds && i < x->nf; i++) gr_tensor_release(&x->feeds[i]);
  free(x->feeds);
  gr_inmsg_free(x->m);
  gr_run_resp rr = {.fetches = x->fetches,
                    .num_fetches = x->nx,
                    .sends = x->moved.sends, /* the last step's */
                    .bytes = x->moved.bytes,
                    .trace = x->trace,
                    .trace_t0 = x->t0};
  gr_error pe;
  if (st != GR_OK && x->listed) { /* which of the RUN's steps failed */
    pe = *e;
    gr_error_prefix(&pe, "step %llu of %llu", (unsigned long long)x->iter + 1,
                    (unsigned long long)x->q.steps);
    e = &pe;
  }
  gr_outmsg *resp = st == GR_OK ? gr_run_resp_pack(x->q.id, &rr)
                    : x->listed ? gr_response_pack_failed_at(x->q.id, e, x->iter)
                                : gr_response_pack(x->q.id, e);
  gr_step_trace_free(x->trace); /* its events point at the plan's nodes: packed already */
  for (int i = 0; x->fetches && i < x->nx; i++) gr_tensor_release(&x->fetches[i]);
  free(x->fetches);
  gr_server_registered_unref(x->r);
  /* answered whatever happens: a response that cannot be packed or sent (out
   * of memory, over the wire's limits) becomes an error naming why */
  gr_server_answer(x->c, x->q.id, resp, st != GR_OK ? e : NULL);
  gr_conn_unref(x->c);
  free(x);
  gr_server_step_ended(s);
}

/* Checks a RUN before its first iteration (errors are answered at once). */
static gr_status run_check(server_run *x, gr_error *e) {
  gr_server *s = x->s;
  gr_inmsg *m = x->m;
  gr_run_req *a = &x->q;
  gr_status st = gr_run_req_unpack(m, a, e);
  if (st == GR_OK && a->inc != s->incarnation)
    st = gr_error_set(e, GR_ERR_ABORTED,
                      "%s restarted (incarnation %016llx, the master knew %016llx): register "
                      "the graph again",
                      s->task, (unsigned long long)s->incarnation, (unsigned long long)a->inc);
  if (st == GR_OK) {
    pthread_mutex_lock(&s->mu);
    x->r = gr_map_get_u64(&s->graphs, a->handle);
    if (x->r) __atomic_add_fetch(&x->r->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&s->mu);
    if (!x->r)
      st = gr_error_set(e, GR_ERR_NOT_FOUND,
                        "%s has no graph %llu (registered by another "
                        "master, or deregistered)",
                        s->task, (unsigned long long)a->handle);
  }
  if (st == GR_OK) {
    pthread_mutex_lock(&s->mu);
    bool dropped = x->r->box->dropped;
    pthread_mutex_unlock(&s->mu);
    if (dropped) /* a recovery registers again, into a new container */
      st = gr_error_set(e, GR_ERR_ABORTED,
                        "%s: container '%s' was reset (graphrun reset, or a client's "
                        "--no-restore): its variables are gone",
                        s->task, x->r->box->name);
  }
  registered *r = x->r;
  x->nf = r ? r->num_feeds : 0;
  x->nx = r ? gr_device_plan_num_fetches(r->plan) : 0;
  x->feeds = calloc((size_t)x->nf + 1, sizeof *x->feeds);
  x->fetches = calloc((size_t)x->nx + 1, sizeof *x->fetches);
  if (st == GR_OK && (!x->feeds || !x->fetches)) st = gr_error_set_oom(e);
  if (st == GR_OK) st = gr_run_req_feeds(m, a, x->feeds, x->nf, e);
  if (st == GR_OK && a->steps > 1 && a->run > UINT64_MAX - a->steps)
    st = gr_error_set(e, GR_ERR_INVALID_ARGUMENT, "run id %016llx leaves no room for %llu steps",
                      (unsigned long long)a->run, (unsigned long long)a->steps);
  if (st == GR_OK && a->steps > 1) { /* an abort of the RUN finds it */
    pthread_mutex_lock(&s->mu);
    if (gr_map_get_u64(&s->runs, a->run))
      st = gr_error_set(e, GR_ERR_ALREADY_EXISTS, "run %016llx is running here already",
                        (unsigned long long)a->run);
    else if (!(x->listed = gr_map_put_u64(&s->runs, a->run, x)))
      st = gr_error_set_oom(e);
    pthread_mutex_unlock(&s->mu);
  }
  return st;
}

/* Sets up the iteration's step: its state (run id q.run + iter) and rendezvous. */
static gr_status iter_begin(server_run *x, gr_error *e) {
  gr_server *s = x->s;
  registered *r = x->r;
  gr_run_req *a = &x->q;
  uint64_t run = a->run + x->iter;
  no_state why = STATE_DONE;
  step_state *t = state_get(s, run, &why);
  char stop_msg[GR_ERROR_MSG_MAX];
  pthread_mutex_lock(&s->mu);
  x->t = t;
  gr_status stop = x->iter >= x->stop_from ? x->stop : GR_OK; /* an abort that found no state */
  if (stop != GR_OK) snprintf(stop_msg, sizeof stop_msg, "%s", x->stop_msg);
  pthread_mutex_unlock(&s->mu);
  if (!t && why == STATE_FULL)
    return gr_error_set(e, GR_ERR_RESOURCE_EXHAUSTED,
                        "%s has %d steps open already (running, or holding values pushed for them)",
                        s->task, GR_SERVER_MAX_STEPS);
  if (!t && why == STATE_OOM)
    return gr_error_set(e, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", s->task);
  if (!t)
    return gr_error_set(e, GR_ERR_ALREADY_EXISTS, "step %016llx ran here already (a repeated RUN)",
                        (unsigned long long)run);
  pthread_mutex_lock(&s->mu);
  bool again = t->started;
  x->mine = !again;
  t->started = true;
  if (!again) t->owner = x->c;
  s->parked_bytes -= t->parked;
  t->parked = 0;
  pthread_mutex_unlock(&s->mu);
  if (again)
    return gr_error_set(e, GR_ERR_ALREADY_EXISTS, "step %016llx is running here already",
                        (unsigned long long)run);
  if (!gr_conn_is_open(x->c)) /* closed before the owner was set: nobody waits for it */
    state_abort(s, t, GR_ERR_CANCELLED, "the connection that ran the step closed");
  else if (stop != GR_OK)
    state_abort(s, t, stop, stop_msg);
  push_rv *prv = malloc(sizeof *prv);
  if (!prv || !(x->rv = gr_rendezvous_new_with(&push_ops, prv))) {
    free(prv);
    return gr_error_set_oom(e);
  }
  *prv = (push_rv){s, t};
  /* a traced RUN traces its last step (the steady state of a loop) */
  x->trace = a->trace && x->iter + 1 == a->steps ? gr_step_trace_new() : NULL;
  x->step = (gr_step_info){.step_id = (int64_t)(a->step + x->iter),
                           .seed = a->seed,
                           .resources = r->box->rm,
                           .stacks = r->uses_stacks ? gr_step_stacks_new() : NULL,
                           .rendezvous = x->rv,
                           .trace = x->trace,
                           .watch = t->cancel};
  if (r->uses_stacks && !x->step.stacks) return gr_error_set_oom(e);
  return GR_OK;
}

static void iter_loop(server_run *x);

/* The iteration's end, however it came: the RUN's end, or (true) the next
 * iteration is to start, its DONEs told. */
static bool iter_after(server_run *x) {
  if (x->done_st != GR_OK || x->iter + 1 >= x->q.steps) {
    run_end(x, x->done_st, &x->done_err);
    return false;
  }
  iter_forget(x);
  for (int i = 0; i < x->nx; i++) gr_tensor_release(&x->fetches[i]); /* the last one's are kept */
  registered *r = x->r;
  for (int i = 0; i < r->num_from && x->iter + 2 < x->q.steps; i++) {
    gr_server *s = x->s;
    char key[GR_LINK_KEY_MAX];
    gr_step_link_key(&r->from[i], key, sizeof key);
    pthread_mutex_lock(&s->mu);
    peer *p = gr_server_find_peer(s, r->from[i].task);
    gr_conn *c = !p                                          ? NULL
                 : p->conn && gr_conn_is_open(p->conn)       ? p->conn
                 : p->in_conn && gr_conn_is_open(p->in_conn) ? p->in_conn /* its pushes' */
                                                             : p->conn;
    if (c) gr_conn_ref(c);
    pthread_mutex_unlock(&s->mu);
    /* awaited two iterations on: one that cannot go fails the RUN here
     * (the master then aborts it on the peer, which would wait for it) */
    gr_tensor_msg tm = {x->q.run + x->iter + 2, key, s->task, s->incarnation, false, NULL, NULL};
    gr_outmsg *m = c ? gr_tensor_msg_pack(&tm) : NULL;
    gr_error e;
    gr_status st = !c ? gr_error_set(&e, GR_ERR_UNAVAILABLE, "%s has no connection to %s", s->task,
                                     r->from[i].task)
                   : !m ? gr_error_set_oom(&e)
                        : gr_conn_send(c, m, &e);
    gr_conn_unref(c);
    if (st != GR_OK) { /* the step ended here: the next one is the RUN's failure */
      gr_error_prefix(&e, "telling %s that step %llu ended", r->from[i].task,
                      (unsigned long long)(x->q.step + x->iter));
      pthread_mutex_lock(&s->mu);
      x->iter++;
      pthread_mutex_unlock(&s->mu);
      run_end(x, st, &e);
      return false;
    }
  }
  pthread_mutex_lock(&x->s->mu);
  x->iter++; /* an abort reads it */
  pthread_mutex_unlock(&x->s->mu);
  return true;
}

/* The next iteration, on the server's work pool. */
static void iter_next(void *arg) {
  server_run *x = arg;
  if (iter_after(x)) iter_loop(x);
}

/* The iteration ended (how: x->done_st) outside iter_loop's start: the
 * RUN ends here, or its next iteration starts on an executor thread, where
 * its first nodes then run without another thread to wake (a wakeup is
 * 20-40 us a step on a VM): here when this is one that finished the step;
 * else (the network thread, which K steps of a partition that never waits
 * would hold, or a step that ended inside iter_loop's start: K of them
 * would nest) queued to one. The executors' pool outlives every RUN
 * (gr_server_free waits for them first). */
static void iter_continue(server_run *x, bool may_inline) {
  gr_server *s = x->s;
  pthread_mutex_lock(&s->mu);
  bool more = x->done_st == GR_OK && x->iter + 1 < x->q.steps;
  bool go = more && !s->work_closed;
  pthread_mutex_unlock(&s->mu);
  if (go && may_inline && gr_threadpool_current() == s->exec_pool) {
    iter_next(x);
  } else if (go) {
    gr_threadpool_schedule(s->exec_pool, iter_next, x);
  } else {
    if (more) /* the server stops */
      x->done_st = gr_error_set(&x->done_err, GR_ERR_CANCELLED, "%s is shutting down", s->task);
    iter_after(x); /* ends the RUN */
  }
}

/* An iteration ended: inside iter_loop's start, that goes on from there. */
static void iter_done(void *arg, gr_status st, const gr_error *err) {
  server_run *x = arg;
  gr_server *s = x->s;
  x->done_st = st;
  if (st != GR_OK) x->done_err = *err;
  pthread_mutex_lock(&s->mu);
  bool inside = x->starting;
  if (inside) x->ended = true;
  pthread_mutex_unlock(&s->mu);
  if (!inside) iter_continue(x, true);
}

static void iter_run(server_run *x) {
  gr_device_plan_run_async(x->r->plan, x->feeds, x->fetches, &x->step, &x->moved, iter_done, x);
}

/* A DONE the iteration awaited arrived (or its step was aborted). */
static void link_arrived(void *arg, gr_status st, const gr_error *err, gr_tensor *value,
                         bool dead) {
  server_run *x = arg;
  (void)dead;
  if (st == GR_OK && value) gr_tensor_release(value);
  if (st != GR_OK && !atomic_exchange(&x->wait_failed, 1)) x->wait_err = *err;
  if (atomic_fetch_sub(&x->waiting, 1) != 1) return;
  if (atomic_load(&x->wait_failed))
    iter_done(x, x->wait_err.code, &x->wait_err);
  else
    iter_run(x);
}

/* Starts the iteration's step once the tasks it pushes to have ended the
 * iteration two before. */
static void iter_start(server_run *x) {
  registered *r = x->r;
  if (x->iter < 2 || r->num_to == 0) {
    iter_run(x);
    return;
  }
  atomic_store(&x->waiting, r->num_to + 1);
  atomic_store(&x->wait_failed, 0);
  for (int i = 0; i < r->num_to; i++) {
    char key[GR_LINK_KEY_MAX];
    gr_step_link_key(&r->to[i], key, sizeof key);
    gr_rendezvous_recv(x->t->local, key, link_arrived, x);
  }
  link_arrived(x, GR_OK, NULL, NULL, false); /* the asking's own count */
}

/* Starts iteration x->iter (or ends the RUN, aborted from there). */
static void iter_loop(server_run *x) {
  gr_server *s = x->s;
  gr_error e;
  pthread_mutex_lock(&s->mu);
  x->starting = true;
  gr_status stop = x->iter >= x->stop_from ? x->stop : GR_OK;
  if (stop != GR_OK)
    gr_error_set(&e, stop, "%s", x->stop_msg); /* under s->mu: an abort writes it */
  pthread_mutex_unlock(&s->mu);
  gr_status st = stop != GR_OK ? stop : iter_begin(x, &e);
  if (st != GR_OK) {
    run_end(x, st, &e);
    return;
  }
  iter_start(x); /* no thread waits for the step: its completion goes on */
  pthread_mutex_lock(&s->mu);
  x->starting = false;
  bool ended = x->ended; /* inside iter_start: its iter_done left it to here */
  x->ended = false;
  pthread_mutex_unlock(&s->mu);
  if (ended) iter_continue(x, false);
}

void gr_server_run(gr_server *s, gr_conn *c, gr_inmsg *m) {
  server_run *x = calloc(1, sizeof *x);
  gr_error e;
  if (!x) {
    uint64_t id;
    if (gr_request_id(m, &id, NULL) == GR_OK) {
      gr_error_set(&e, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", s->task);
      gr_server_respond_error(c, id, &e);
    }
    gr_inmsg_free(m);
    return;
  }
  gr_conn_ref(c);
  *x = (server_run){.s = s, .c = c, .m = m, .t0 = gr_trace_now_ns()};
  gr_server_step_began(s);
  if (run_check(x, &e) != GR_OK)
    run_end(x, e.code, &e);
  else
    iter_loop(x);
}

/* ---- pushed tensors and aborts -------------------------------------------------------- */

static bool own_device(const gr_server *s, const gr_device_spec *d) {
  char buf[GR_DEVICE_NAME_MAX];
  gr_device_spec_str(d, buf);
  for (int k = 0; k < s->num_devices; k++)
    if (!strcmp(buf, s->devices[k])) return true;
  return false;
}

/* Checks a push and hands its value to the step; errors abort the step. */
static gr_status push(gr_server *s, gr_conn *c, gr_inmsg *m, uint64_t *run_id, gr_error *err) {
  gr_tensor_msg q;
  gr_status st = gr_tensor_msg_unpack(m, &q, err);
  *run_id = q.run; /* a bad push aborts its step */
  GR_TRY(st);
  const char *key = q.key, *from = q.from;
  uint64_t inc = q.inc;
  bool dead = q.dead;
  gr_rendezvous_key k;
  GR_TRY(gr_rendezvous_parse_key(key, &k, err));
  char src_task[GR_TASK_NAME_MAX], buf[GR_DEVICE_NAME_MAX];
  gr_task_of_device(gr_device_spec_str(&k.src, buf), src_task, sizeof src_task);
  if (strcmp(src_task, from) != 0 || !own_device(s, &k.dst))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s refuses a tensor from %s (%s) for key '%s': the key names devices of "
                        "other tasks",
                        s->task, from, gr_conn_peer(c), key);
  pthread_mutex_lock(&s->mu);
  peer *p = gr_server_find_peer(s, from);
  uint64_t known = p ? p->incarnation : 0;
  gr_conn *old_in = NULL;
  if (p && known == inc && p->in_conn != c) { /* where a DONE for it can go back */
    old_in = p->in_conn;
    gr_conn_ref(c);
    p->in_conn = c;
  }
  pthread_mutex_unlock(&s->mu);
  gr_conn_unref(old_in);
  if (!p)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "%s refuses a tensor from %s (%s): no registered graph names that task",
                        s->task, from, gr_conn_peer(c));
  if (known != inc)
    return gr_error_set(err, GR_ERR_ABORTED,
                        "%s refuses a tensor from %s: stale incarnation %016llx (the live one is "
                        "%016llx: %s restarted)",
                        s->task, from, (unsigned long long)inc, (unsigned long long)known, from);
  gr_tensor v = gr_tensor_empty();
  GR_TRY(gr_tensor_msg_value(m, &q, &v, err));
  step_state *t = state_get(s, *run_id, NULL);
  if (!t) { /* the step finished here, or too many are open: drop it */
    gr_tensor_release(&v);
    return GR_OK;
  }
  size_t bytes = gr_tensor_is_empty(&v) ? 0 : gr_tensor_num_bytes(&v);
  pthread_mutex_lock(&s->mu);
  int into = into_find_locked(s, t, key); /* expected in a buffer, came elsewhere */
  if (into >= 0) into_drop_locked(s, t, into, NULL);
  bool over = !t->started && s->parked_bytes + bytes > s->parked_max;
  if (!t->started && !over) {
    t->parked += bytes;
    s->parked_bytes += bytes;
  }
  pthread_mutex_unlock(&s->mu);
  if (over) {
    st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED,
                      "%s: tensors from %s for a step that has not started here exceed %zu bytes",
                      s->task, from, s->parked_max);
  } else {
    /* counted off the local rendezvous's sends (a DONE too: no transfer of this task's) */
    atomic_fetch_add_explicit(&t->got, 1, memory_order_relaxed);
    if (!dead) atomic_fetch_add_explicit(&t->got_bytes, (int64_t)bytes, memory_order_relaxed);
    st = gr_rendezvous_send(t->local, key, gr_tensor_is_empty(&v) ? NULL : &v, dead, err);
    if (st != GR_OK) gr_error_prefix(err, "%s: a tensor from %s", s->task, from);
  }
  if (st != GR_OK) state_abort(s, t, st, err->msg);
  gr_tensor_release(&v);
  state_unref(s, t);
  return GR_OK; /* the step carries the error */
}

void gr_server_step_abort_id(gr_server *s, uint64_t run_id, gr_status code, const char *msg) {
  step_state *t = run_id ? state_get(s, run_id, NULL) : NULL;
  if (t) {
    state_abort(s, t, code, msg);
    state_unref(s, t);
  }
}

/* The value item describes exactly the body, a tensor like v. */
static bool value_fits(const msgpack_object *o, size_t body_len, const gr_tensor *v) {
  gr_msg_tensor_info t;
  gr_error e;
  return gr_msg_tensor_desc(o, body_len, &t, &e) == GR_OK && !t.dead && t.offset == 0 &&
         (size_t)t.bytes == body_len && t.dtype == v->dtype &&
         gr_shape_num_elements(&t.shape) == gr_tensor_num_elements(v);
}

bool gr_server_push_into(gr_server *s, const gr_inmsg *m, gr_buffer **buf, size_t *off) {
  gr_tensor_msg q;
  gr_error e;
  if (gr_tensor_msg_unpack((gr_inmsg *)m, &q, &e) != GR_OK || q.dead) return false;
  bool got = false;
  pthread_mutex_lock(&s->mu);
  step_state *t = gr_map_get_u64(&s->steps, q.run);
  int i = t ? into_find_locked(s, t, q.key) : -1;
  if (i >= 0 && value_fits(q.value_item, m->h.body_len, &t->into[i].view)) {
    *off = t->into[i].view.offset;
    into_drop_locked(s, t, i, buf);
    got = true;
  }
  pthread_mutex_unlock(&s->mu);
  return got;
}

void gr_server_push(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  uint64_t run_id = 0;
  if (push(s, c, m, &run_id, &e) != GR_OK) {
    gr_server_log(s, "%s", e.msg);
    gr_server_step_abort_id(s, run_id, e.code, e.msg);
  }
  gr_inmsg_free(m);
}

/* The multi-step RUN with a step of run id `run` (under s->mu), or NULL. */
static server_run *run_of_locked(gr_server *s, uint64_t run) {
  GR_ASSERT_HELD(&s->mu);
  void *v;
  for (size_t pos = 0; gr_map_next(&s->runs, &pos, NULL, &v);) {
    server_run *y = v;
    if (run >= y->q.run && run - y->q.run < y->q.steps) return y;
  }
  return NULL;
}

/* Aborts a multi-step RUN from a's step on (the steps before end first);
 * false when no RUN here has that step. */
static bool abort_run(gr_server *s, const gr_abort_msg *a) {
  pthread_mutex_lock(&s->mu);
  server_run *x = run_of_locked(s, a->run);
  uint64_t from = x ? a->run - x->q.run : 0;
  if (x && (x->stop == GR_OK || from < x->stop_from)) {
    snprintf(x->stop_msg, sizeof x->stop_msg, "%s", a->msg);
    x->stop = a->code != GR_OK ? a->code : GR_ERR_CANCELLED;
    x->stop_from = from;
  }
  step_state *cur = x && x->iter >= from ? x->t : NULL;
  if (cur) cur->refs++;
  pthread_mutex_unlock(&s->mu);
  if (cur) state_abort(s, cur, a->code, a->msg), state_unref(s, cur);
  return x != NULL;
}

void gr_server_abort(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  gr_abort_msg a;
  if (gr_abort_msg_unpack(m, &a, &e) != GR_OK) {
    gr_server_log(s, "a bad abort from %s: %s", gr_conn_peer(c), e.msg);
  } else if (!abort_run(s, &a)) { /* a step's state, open or not yet */
    step_state *t = state_get(s, a.run, NULL);
    if (t) {
      state_abort(s, t, a.code, a.msg);
      state_unref(s, t);
    } else { /* the step ended here: maybe a multi-step RUN's, listed meanwhile */
      abort_run(s, &a);
    }
  }
  gr_inmsg_free(m);
}
