/* FIFO queues in a resource container (queue_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_resource.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/queue_internal.h"
#include "ops/wait_internal.h"

/* A parked enqueue or dequeue. */
typedef struct qwaiter {
  struct qwaiter *next;
  uint64_t id;
  gr_kernel_ctx *ctx;
  gr_status status;
  int64_t n; /* dequeue: elements wanted */
  bool many;
  gr_tensor *items; /* enqueue: nitems * ncomp tensors, one reference each */
  int64_t nitems, done_items;
} qwaiter;

typedef struct wlist {
  qwaiter *head, *tail;
} wlist;

struct gr_queue {
  gr_wait_owner owner;
  gr_queue_spec spec;
  gr_tensor *ring; /* cap_slots elements of ncomp tensors */
  int64_t cap_slots, head, count;
  wlist deq, enq;
  int64_t pending_items; /* not yet inserted items of parked enqueues */
  bool closed;
};

static void wl_push(wlist *l, qwaiter *w) {
  w->next = NULL;
  if (l->tail)
    l->tail->next = w;
  else
    l->head = w;
  l->tail = w;
}

static qwaiter *wl_pop(wlist *l) {
  qwaiter *w = l->head;
  if (w && !(l->head = w->next)) l->tail = NULL;
  return w;
}

static qwaiter *wl_take(wlist *l, uint64_t id) {
  for (qwaiter **p = &l->head, *prev = NULL; *p; prev = *p, p = &(*p)->next)
    if ((*p)->id == id) {
      qwaiter *w = *p;
      *p = w->next;
      if (l->tail == w) l->tail = prev;
      return w;
    }
  return NULL;
}

static void waiter_free(gr_queue *q, qwaiter *w) {
  for (int64_t k = w->done_items * q->spec.ncomp; k < w->nitems * q->spec.ncomp; k++)
    gr_tensor_release(&w->items[k]);
  free(w->items);
  free(w);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static void queue_destroy(gr_wait_owner *o) {
  gr_queue *q = (gr_queue *)o;
  for (int64_t e = 0; e < q->count; e++) {
    gr_tensor *el = q->ring + ((q->head + e) % q->cap_slots) * q->spec.ncomp;
    for (int c = 0; c < q->spec.ncomp; c++) gr_tensor_release(&el[c]);
  }
  free(q->ring);
  pthread_mutex_destroy(&q->owner.mu);
  free(q);
}

static gr_kernel_ctx *take_waiter(gr_wait_owner *o, uint64_t id) {
  gr_queue *q = (gr_queue *)o;
  qwaiter *w = wl_take(&q->deq, id);
  if (!w && (w = wl_take(&q->enq, id))) q->pending_items -= w->nitems - w->done_items;
  if (!w) return NULL;
  gr_kernel_ctx *ctx = w->ctx;
  waiter_free(q, w);
  return ctx;
}

/* The container drops its queue: waiters still parked (a step that runs
 * while its session's container goes away) fail. */
static void queue_release(void *obj) {
  gr_queue *q = obj;
  qwaiter *done = NULL;
  pthread_mutex_lock(&q->owner.mu);
  for (wlist *l = &q->deq; l; l = l == &q->deq ? &q->enq : NULL)
    for (qwaiter *w; (w = wl_pop(l));) {
      gr_wait_unregister(w->id);
      w->status = gr_kernel_error(w->ctx, GR_ERR_CANCELLED, "%s was destroyed", q->owner.what);
      w->next = done;
      done = w;
    }
  pthread_mutex_unlock(&q->owner.mu);
  while (done) {
    qwaiter *w = done;
    done = w->next;
    gr_kernel_done(w->ctx, w->status);
    waiter_free(q, w);
  }
  gr_wait_owner_unref(&q->owner);
}

static const gr_resource_kind queue_kind = {"queue", queue_release};

typedef struct make_arg {
  const char *name;
  const gr_queue_spec *spec;
} make_arg;

static gr_status queue_make(void *arg, void **obj, gr_error *err) {
  make_arg *a = arg;
  gr_queue *q = calloc(1, sizeof *q);
  if (!q) return gr_error_set_oom(err);
  char what[160];
  snprintf(what, sizeof what, "queue '%s'", a->name);
  gr_wait_owner_init(&q->owner, queue_destroy, take_waiter, what);
  q->spec = *a->spec;
  *obj = q;
  return GR_OK;
}

static void spec_str(const gr_queue_spec *s, char *buf, size_t cap) {
  size_t m = (size_t)snprintf(buf, cap, "dtypes [");
  for (int c = 0; c < s->ncomp && m < cap; c++) {
    char sh[GR_SHAPE_STR_MAX];
    m += (size_t)snprintf(buf + m, cap - m, "%s%s %s", c ? ", " : "", gr_dtype_name(s->dtypes[c]),
                          s->shapes[c].rank < 0 ? "any shape" : gr_shape_str(&s->shapes[c], sh));
  }
  if (m < cap) snprintf(buf + m, cap - m, "], capacity %lld", (long long)s->capacity);
}

static bool spec_equal(const gr_queue_spec *a, const gr_queue_spec *b) {
  if (a->ncomp != b->ncomp || a->capacity != b->capacity) return false;
  for (int c = 0; c < a->ncomp; c++)
    if (a->dtypes[c] != b->dtypes[c] || a->shapes[c].rank != b->shapes[c].rank ||
        (a->shapes[c].rank >= 0 && !gr_shape_equal(&a->shapes[c], &b->shapes[c])))
      return false;
  return true;
}

gr_status gr_queue_lookup_or_create(gr_resource_mgr *m, const char *name, const gr_queue_spec *spec,
                                    gr_queue **out, gr_error *err) {
  make_arg a = {name, spec};
  void *obj;
  GR_TRY(gr_resource_mgr_lookup_or_create(m, name, &queue_kind, queue_make, &a, &obj, err));
  gr_queue *q = obj;
  if (!spec_equal(&q->spec, spec)) {
    char have[512], want[512];
    spec_str(&q->spec, have, sizeof have);
    spec_str(spec, want, sizeof want);
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "queue '%s' exists with %s; this node makes it with %s", name, have, want);
  }
  *out = q;
  return GR_OK;
}

gr_status gr_queue_find(gr_resource_mgr *m, const char *name, gr_queue **out, gr_error *err) {
  *out = gr_resource_mgr_find(m, name, &queue_kind);
  if (!*out)
    return gr_error_set(err, GR_ERR_NOT_FOUND,
                        "queue '%s' does not exist (run its fifo_queue first)", name);
  return GR_OK;
}

const gr_queue_spec *gr_queue_get_spec(const gr_queue *q) {
  return &q->spec;
}

/* ---- the elements ---------------------------------------------------------------------------- */

static bool has_space(const gr_queue *q) {
  return q->spec.capacity < 0 || q->count < q->spec.capacity;
}

/* Moves the ncomp references of item into the ring; false when out of memory. */
static bool push_item(gr_queue *q, gr_tensor *item) {
  int nc = q->spec.ncomp;
  if (q->count == q->cap_slots) {
    int64_t cap = q->cap_slots ? q->cap_slots * 2 : 16;
    gr_tensor *r = gr_alloc_array((size_t)(cap * nc), sizeof *r);
    if (!r) return false;
    for (int64_t e = 0; e < q->count; e++)
      memcpy(r + e * nc, q->ring + ((q->head + e) % q->cap_slots) * nc, sizeof *r * (size_t)nc);
    free(q->ring);
    q->ring = r;
    q->cap_slots = cap;
    q->head = 0;
  }
  memcpy(q->ring + ((q->head + q->count) % q->cap_slots) * nc, item, sizeof *item * (size_t)nc);
  q->count++;
  return true;
}

static gr_tensor *elem(gr_queue *q, int64_t e) {
  return q->ring + ((q->head + e) % q->cap_slots) * q->spec.ncomp;
}

static void drop_front(gr_queue *q, int64_t n) {
  q->head = (q->head + n) % (q->cap_slots ? q->cap_slots : 1);
  q->count -= n;
}

/* Serves dequeue w from the front of the queue (count >= w->n). */
static gr_status take(gr_queue *q, qwaiter *w) {
  gr_kernel_ctx *ctx = w->ctx;
  int nc = q->spec.ncomp;
  if (!w->many) {
    gr_tensor *el = elem(q, 0);
    for (int c = 0; c < nc; c++) ctx->outputs[c] = el[c]; /* the references move */
    drop_front(q, 1);
    return GR_OK;
  }
  for (int c = 0; c < nc; c++) {
    const gr_tensor *first = w->n ? &elem(q, 0)[c] : NULL;
    for (int64_t e = 1; e < w->n; e++)
      if (!gr_shape_equal(&elem(q, e)[c].shape, &first->shape)) {
        char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
        return gr_kernel_error(ctx, GR_ERR_SHAPE,
                               "dequeue_many(%lld) of %s: component %d of element %lld has shape "
                               "%s, of element 0 %s: they cannot be stacked",
                               (long long)w->n, q->owner.what, c, (long long)e,
                               gr_shape_str(&elem(q, e)[c].shape, a),
                               gr_shape_str(&first->shape, b));
      }
  }
  for (int c = 0; c < nc; c++) {
    gr_shape sh = {.rank = 1, .dims = {w->n}};
    if (w->n) {
      const gr_shape *es = &elem(q, 0)[c].shape;
      sh.rank = es->rank + 1;
      memcpy(sh.dims + 1, es->dims, sizeof(int64_t) * (size_t)es->rank);
    } else if (q->spec.shapes[c].rank >= 0) {
      sh.rank = q->spec.shapes[c].rank + 1;
      memcpy(sh.dims + 1, q->spec.shapes[c].dims, sizeof(int64_t) * (size_t)q->spec.shapes[c].rank);
    }
    if (sh.rank > GR_MAX_RANK)
      return gr_kernel_error(ctx, GR_ERR_SHAPE,
                             "dequeue_many: elements of rank %d cannot be stacked", sh.rank - 1);
    gr_tensor *o;
    GR_TRY(gr_kernel_alloc_output(ctx, c, q->spec.dtypes[c], &sh, &o));
    char *dst = gr_tensor_data(o);
    for (int64_t e = 0; e < w->n; e++) {
      const gr_tensor *t = &elem(q, e)[c];
      size_t b = gr_tensor_num_bytes(t);
      if (b) memcpy(dst, gr_tensor_data(t), b);
      dst += b;
    }
  }
  for (int64_t e = 0; e < w->n; e++)
    for (int c = 0; c < nc; c++) gr_tensor_release(&elem(q, e)[c]);
  drop_front(q, w->n);
  return GR_OK;
}

/* Completes what the queue's state allows, appending finished waiters to
 * *done (mu held). */
static void service(gr_queue *q, qwaiter **done) {
  for (;;) {
    bool progress = false;
    while (q->enq.head && has_space(q)) {
      qwaiter *w = q->enq.head;
      if (!push_item(q, w->items + w->done_items * q->spec.ncomp)) {
        wl_pop(&q->enq);
        q->pending_items -= w->nitems - w->done_items;
        w->status = gr_kernel_error(w->ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      } else {
        w->done_items++;
        q->pending_items--;
        progress = true;
        if (w->done_items < w->nitems) continue;
        wl_pop(&q->enq);
        w->status = GR_OK;
      }
      gr_wait_unregister(w->id);
      w->next = *done;
      *done = w;
    }
    while (q->deq.head && q->count >= q->deq.head->n) {
      qwaiter *w = wl_pop(&q->deq);
      w->status = take(q, w);
      gr_wait_unregister(w->id);
      w->next = *done;
      *done = w;
      progress = true;
    }
    /* closed: the front dequeue fails when what is there and what parked
     * enqueues still bring is not enough */
    if (!progress && q->closed && q->deq.head && q->count + q->pending_items < q->deq.head->n) {
      qwaiter *w = wl_pop(&q->deq);
      w->status = gr_kernel_error(
          w->ctx, GR_ERR_OUT_OF_RANGE,
          "%s is closed and has too few elements (requested %lld, current size %lld)",
          q->owner.what, (long long)w->n, (long long)q->count);
      gr_wait_unregister(w->id);
      w->next = *done;
      *done = w;
      progress = true;
    }
    if (!progress) break;
  }
}

static void run_done(gr_queue *q, qwaiter *done) {
  /* finished first: the list is newest first, complete the oldest first */
  qwaiter *rev = NULL;
  while (done) {
    qwaiter *w = done;
    done = w->next;
    w->next = rev;
    rev = w;
  }
  while (rev) {
    qwaiter *w = rev;
    rev = w->next;
    gr_kernel_ctx *ctx = w->ctx;
    gr_status st = w->status;
    waiter_free(q, w);
    gr_kernel_done(ctx, st);
  }
}

/* Queues w behind the others and serves what can be served (mu held). */
static void park(gr_queue *q, qwaiter *w, bool is_enq, qwaiter **done) {
  if (is_enq) {
    wl_push(&q->enq, w);
    q->pending_items += w->nitems;
  } else {
    wl_push(&q->deq, w);
  }
  service(q, done);
}

/* Parks w (its fields set but id) or completes it at once; see the header. */
static gr_status submit(gr_queue *q, qwaiter *w) {
  qwaiter *done = NULL;
  pthread_mutex_lock(&q->owner.mu);
  bool is_enq = w->items != NULL || w->nitems > 0;
  if (is_enq && q->closed) {
    pthread_mutex_unlock(&q->owner.mu);
    gr_status st = gr_kernel_error(w->ctx, GR_ERR_CANCELLED, "%s is closed", q->owner.what);
    waiter_free(q, w);
    return st;
  }
  /* served at once when nothing waits ahead of it: no registration */
  bool now =
      is_enq
          ? !q->enq.head && (q->spec.capacity < 0 || q->count + w->nitems <= q->spec.capacity)
          : !q->deq.head && (q->count >= w->n || (q->closed && q->count + q->pending_items < w->n));
  if (now) {
    w->id = 0;
    park(q, w, is_enq, &done);
    pthread_mutex_unlock(&q->owner.mu);
    run_done(q, done);
    return GR_OK;
  }
  pthread_mutex_unlock(&q->owner.mu);
  uint64_t id = gr_wait_register(&q->owner);
  if (!id) {
    gr_status st = gr_kernel_error(w->ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    waiter_free(q, w);
    return st;
  }
  w->id = id;
  gr_wait_arm(w->ctx, id);
  pthread_mutex_lock(&q->owner.mu);
  bool cancelled = gr_wait_cancelled_locked(id);
  if (cancelled || (is_enq && q->closed)) {
    gr_wait_unregister(id);
    w->status = cancelled
                    ? gr_kernel_error(w->ctx, GR_ERR_CANCELLED,
                                      "the step was cancelled while it waited on %s", q->owner.what)
                    : gr_kernel_error(w->ctx, GR_ERR_CANCELLED, "%s is closed", q->owner.what);
    w->next = NULL;
    done = w;
  } else {
    park(q, w, is_enq, &done);
  }
  pthread_mutex_unlock(&q->owner.mu);
  run_done(q, done);
  return GR_OK;
}

gr_status gr_queue_do_enqueue(gr_queue *q, gr_kernel_ctx *ctx, const gr_tensor *comps, bool many) {
  const gr_queue_spec *s = &q->spec;
  int nc = s->ncomp;
  int64_t n = 1;
  for (int c = 0; c < nc; c++) {
    const gr_tensor *t = &comps[c];
    if (t->dtype != s->dtypes[c])
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "component %d is %s, %s holds %s", c,
                             gr_dtype_name(t->dtype), q->owner.what, gr_dtype_name(s->dtypes[c]));
    gr_shape es = t->shape;
    if (many) {
      if (t->shape.rank < 1)
        return gr_kernel_error(ctx, GR_ERR_SHAPE,
                               "enqueue_many: component %d is a scalar: it needs an axis 0 of "
                               "elements",
                               c);
      if (c == 0) n = t->shape.dims[0];
      if (t->shape.dims[0] != n)
        return gr_kernel_error(ctx, GR_ERR_SHAPE,
                               "enqueue_many: component %d has %lld elements along axis 0, "
                               "component 0 %lld",
                               c, (long long)t->shape.dims[0], (long long)n);
      es.rank--;
      memmove(es.dims, es.dims + 1, sizeof(int64_t) * (size_t)es.rank);
    }
    if (s->shapes[c].rank >= 0 && !gr_shape_compatible(&es, &s->shapes[c])) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "component %d has element shape %s, %s holds %s", c,
                             gr_shape_str(&es, a), q->owner.what, gr_shape_str(&s->shapes[c], b));
    }
  }
  qwaiter *w = calloc(1, sizeof *w);
  gr_tensor *items = n ? calloc((size_t)(n * nc), sizeof *items) : NULL;
  if (!w || (n && !items)) {
    free(w);
    free(items);
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int c = 0; c < nc; c++) {
    const gr_tensor *t = &comps[c];
    if (!many) {
      gr_tensor_ref(&items[c], t);
      continue;
    }
    /* element e of a component: a view of row e (no copy) */
    size_t row = n ? gr_tensor_num_bytes(t) / (size_t)n : 0;
    for (int64_t e = 0; e < n; e++) {
      gr_tensor *it = &items[e * nc + c];
      gr_tensor_ref(it, t);
      it->shape.rank--;
      memmove(it->shape.dims, it->shape.dims + 1, sizeof(int64_t) * (size_t)it->shape.rank);
      it->offset += row * (size_t)e;
    }
  }
  w->ctx = ctx;
  w->items = items;
  w->nitems = n;
  if (n == 0) { /* nothing to add */
    free(w);
    gr_kernel_done(ctx, GR_OK);
    return GR_OK;
  }
  return submit(q, w);
}

gr_status gr_queue_do_dequeue(gr_queue *q, gr_kernel_ctx *ctx, int64_t n, bool many) {
  const gr_queue_spec *s = &q->spec;
  if (ctx->num_outputs != s->ncomp)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "the node has %d outputs, %s holds %d",
                           ctx->num_outputs, q->owner.what, s->ncomp);
  for (int c = 0; c < s->ncomp; c++)
    if (ctx->node->out_dtypes[c] != s->dtypes[c])
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "output %d is %s, %s holds %s", c,
                             gr_dtype_name(ctx->node->out_dtypes[c]), q->owner.what,
                             gr_dtype_name(s->dtypes[c]));
  if (n < 0)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "cannot dequeue %lld elements",
                           (long long)n);
  qwaiter *w = calloc(1, sizeof *w);
  if (!w) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  w->ctx = ctx;
  w->n = many ? n : 1;
  w->many = many;
  return submit(q, w);
}

void gr_queue_do_close(gr_queue *q, bool cancel_pending) {
  qwaiter *done = NULL;
  pthread_mutex_lock(&q->owner.mu);
  q->closed = true;
  if (cancel_pending)
    for (qwaiter *w; (w = wl_pop(&q->enq));) {
      q->pending_items -= w->nitems - w->done_items;
      gr_wait_unregister(w->id);
      w->status =
          gr_kernel_error(w->ctx, GR_ERR_CANCELLED, "%s was closed while it waited", q->owner.what);
      w->next = done;
      done = w;
    }
  service(q, &done);
  pthread_mutex_unlock(&q->owner.mu);
  run_done(q, done);
}

int64_t gr_queue_count(gr_queue *q) {
  pthread_mutex_lock(&q->owner.mu);
  int64_t n = q->count;
  pthread_mutex_unlock(&q->owner.mu);
  return n;
}

bool gr_queue_is_closed(gr_queue *q) {
  pthread_mutex_lock(&q->owner.mu);
  bool c = q->closed;
  pthread_mutex_unlock(&q->owner.mu);
  return c;
}
