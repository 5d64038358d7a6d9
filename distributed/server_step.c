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

/* A RUN in flight: started on a worker thread, answered from the step's
 * completion on whichever thread finishes it (gr_conn_send is thread-safe). */
typedef struct server_run {
  gr_server *s;
  gr_conn *c; /* a reference */
  gr_inmsg *m;
  int64_t t0;
  gr_run_req q;  /* its feed_items point into m */
  registered *r; /* a reference */
  step_state *t; /* a reference */
  bool mine;     /* this RUN started the step (not a repeated one) */
  gr_tensor *feeds, *fetches;
  int nf, nx;
  gr_rendezvous *rv;
  gr_step_trace *trace;
  gr_step_info step;
  gr_transfer_stats moved;
} server_run;

/* The step ended (or never started): forget it, answer, free. */
static void run_end(server_run *x, gr_status st, const gr_error *e) {
  gr_server *s = x->s;
  gr_step_stacks_free(x->step.stacks);
  gr_rendezvous_free(x->rv);
  if (x->t) {
    if (x->mine) state_finish(s, x->t); /* a repeated RUN leaves the running one's state alone */
    state_unref(s, x->t);
  }
  for (int i = 0; x->feeds && i < x->nf; i++) gr_tensor_release(&x->feeds[i]);
  free(x->feeds);
  gr_inmsg_free(x->m);
  gr_run_resp rr = {.fetches = x->fetches,
                    .num_fetches = x->nx,
                    .sends = x->moved.sends,
                    .bytes = x->moved.bytes,
                    .trace = x->trace,
                    .trace_t0 = x->t0};
  gr_outmsg *resp = st != GR_OK ? gr_response_pack(x->q.id, e) : gr_run_resp_pack(x->q.id, &rr);
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

static void run_done(void *arg, gr_status st, const gr_error *err) {
  run_end(arg, st, err);
}

/* Checks a RUN and starts its step; errors are answered at once. */
static void run_start(server_run *x, gr_error *e) {
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
  no_state why = STATE_DONE;
  step_state *t = x->t = st == GR_OK ? state_get(s, a->run, &why) : NULL;
  if (st == GR_OK && !t && why == STATE_FULL)
    st = gr_error_set(e, GR_ERR_RESOURCE_EXHAUSTED,
                      "%s has %d steps open already (running, or holding values pushed for them)",
                      s->task, GR_SERVER_MAX_STEPS);
  else if (st == GR_OK && !t && why == STATE_OOM)
    st = gr_error_set(e, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", s->task);
  else if (st == GR_OK && !t)
    st = gr_error_set(e, GR_ERR_ALREADY_EXISTS, "step %016llx ran here already (a repeated RUN)",
                      (unsigned long long)a->run);
  push_rv *prv = NULL;
  if (st == GR_OK) {
    pthread_mutex_lock(&s->mu);
    bool again = t->started;
    x->mine = !again;
    t->started = true;
    if (!again) t->owner = x->c;
    s->parked_bytes -= t->parked;
    t->parked = 0;
    pthread_mutex_unlock(&s->mu);
    if (again)
      st = gr_error_set(e, GR_ERR_ALREADY_EXISTS, "step %016llx is running here already",
                        (unsigned long long)a->run);
    else if (!gr_conn_is_open(x->c)) /* closed before the owner was set: nobody waits for it */
      state_abort(s, t, GR_ERR_CANCELLED, "the connection that ran the step closed");
  }
  if (st == GR_OK &&
      (!(prv = malloc(sizeof *prv)) || !(x->rv = gr_rendezvous_new_with(&push_ops, prv)))) {
    free(prv);
    st = gr_error_set_oom(e);
  }
  x->trace = st == GR_OK && a->trace ? gr_step_trace_new() : NULL;
  if (st == GR_OK) {
    *prv = (push_rv){s, t};
    x->step = (gr_step_info){.step_id = (int64_t)a->step,
                             .seed = a->seed,
                             .resources = r->box->rm,
                             .stacks = r->uses_stacks ? gr_step_stacks_new() : NULL,
                             .rendezvous = x->rv,
                             .trace = x->trace,
                             .watch = t->cancel};
    if (r->uses_stacks && !x->step.stacks) st = gr_error_set_oom(e);
  }
  if (st != GR_OK) {
    run_end(x, st, e);
    return;
  }
  /* no thread waits for the step: its completion answers */
  gr_device_plan_run_async(r->plan, x->feeds, x->fetches, &x->step, &x->moved, run_done, x);
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
  run_start(x, &e);
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
  pthread_mutex_unlock(&s->mu);
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

void gr_server_abort(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  gr_abort_msg a;
  if (gr_abort_msg_unpack(m, &a, &e) == GR_OK) {
    step_state *t = state_get(s, a.run, NULL);
    if (t) {
      state_abort(s, t, a.code, a.msg);
      state_unref(s, t);
    }
  } else {
    gr_server_log(s, "a bad abort from %s: %s", gr_conn_peer(c), e.msg);
  }
  gr_inmsg_free(m);
}
