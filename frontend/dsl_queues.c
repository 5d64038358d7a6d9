/* DSL built-ins for queues (ops/gr_ops_sync.h), lowered to the builders so
 * that every op of a queue runs where the queue lives:
 *
 *   q = fifo_queue([f32, i32], shapes=[[784], []], capacity=64)   # queue "q"
 *   queue_enqueue(q, x, y)               queue_enqueue_many(q, xs, ys)
 *   x, y = queue_dequeue(q)              xs, ys = queue_dequeue_many(q, 32)
 *   queue_close(q, cancel_pending_enqueues=false)
 *   n = queue_size(q)
 *
 * A queue is named by the name it is bound to (or name="..."), in the
 * current name scope; graphs that name the same queue on the same task
 * share it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

static gr_status bad(const dsl_bargs *a, int i, const char *what) {
  return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos, "%s: %s", a->fn,
                   what);
}

/* ---- fifo_queue(dtypes, shapes=[...], capacity=-1, name="...") --------------------------- */

static gr_status fifo_queue(const dsl_bargs *a, const char *bound, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"shapes", "capacity", "name", NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  if (a->npos != 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "fifo_queue takes the components' dtypes: q = fifo_queue([f32, i32])");
  gr_dtype dt[GR_QUEUE_COMPONENTS_MAX];
  const dsl_value *d = &a->v[0];
  int nc = d->kind == V_LIST ? d->list.n : 1;
  if ((d->kind != V_LIST && d->kind != V_DTYPE) || nc < 1 || nc > GR_QUEUE_COMPONENTS_MAX)
    return bad(a, 0, "want a dtype or a list of 1 to 16 dtypes");
  for (int c = 0; c < nc; c++) {
    const dsl_value *x = d->kind == V_LIST ? &d->list.items[c] : d;
    if (x->kind != V_DTYPE) return bad(a, 0, "want a dtype or a list of 1 to 16 dtypes");
    dt[c] = x->dtype;
  }
  gr_shape sh[GR_QUEUE_COMPONENTS_MAX];
  gr_shape *shapes = NULL;
  int si = dsl_bargs_kw(a, "shapes");
  if (si >= 0) {
    const dsl_value *s = &a->v[si];
    if (s->kind != V_LIST || s->list.n != nc)
      return bad(a, si, "shapes: want one shape (a list of dims) per component");
    for (int c = 0; c < nc; c++) {
      const dsl_value *x = &s->list.items[c];
      if (x->kind != V_LIST || x->list.n > GR_MAX_RANK)
        return bad(a, si, "shapes: want one shape (a list of at most 8 dims) per component");
      sh[c].rank = x->list.n;
      for (int k = 0; k < x->list.n; k++) {
        const dsl_value *dim = &x->list.items[k];
        if (dim->kind == V_UNKNOWN_DIM)
          sh[c].dims[k] = GR_DIM_UNKNOWN;
        else if (dim->kind == V_NUM && dim->num.is_int && dim->num.i >= 0)
          sh[c].dims[k] = dim->num.i;
        else
          return bad(a, si, "shapes: a dim is a size >= 0 or ?");
      }
    }
    shapes = sh;
  }
  int64_t capacity = -1;
  int ci = dsl_bargs_kw(a, "capacity");
  if (ci >= 0) GR_TRY(dsl_bargs_int(a, ci, "capacity", -1, INT64_MAX, &capacity));
  const char *qname = bound;
  int ni = dsl_bargs_kw(a, "name");
  if (ni >= 0) GR_TRY(dsl_bargs_string(a, ni, "name", &qname));
  if (!qname || !*qname)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "fifo_queue needs a name: bind it (q = fifo_queue(...)) or give name=\"...\"");
  dsl_set_loc(p, a->e->pos);
  gr_output q = gr_fifo_queue(p->g, qname, nc, dt, shapes, capacity);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  dsl_tensor_value(out, q);
  return GR_OK;
}

/* ---- the ops on a queue -----------------------------------------------------------------------
 */

static gr_status queue_of(const dsl_bargs *a, gr_output *q) {
  if (a->npos < 1 || a->v[0].kind != V_TENSOR)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s takes a queue first (q = fifo_queue(...))", a->fn);
  *q = a->v[0].t;
  return GR_OK;
}

static gr_status enqueue(const dsl_bargs *a, bool many, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const none[] = {NULL};
  GR_TRY(dsl_bargs_only_keywords(a, none));
  gr_output q, xs[GR_QUEUE_COMPONENTS_MAX];
  GR_TRY(queue_of(a, &q));
  int n = a->npos - 1;
  if (n < 1 || n > GR_QUEUE_COMPONENTS_MAX)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s takes the queue and one tensor per component", a->fn);
  /* constants take the queue's dtypes */
  const gr_attr_value *dt = q.node ? gr_node_attr(q.node, "dtypes") : NULL;
  for (int i = 0; i < n; i++) {
    gr_dtype hint = dt && dt->type == GR_ATTR_INTS && i < dt->ints.n ? (gr_dtype)dt->ints.v[i]
                                                                     : GR_DTYPE_INVALID;
    GR_TRY(dsl_to_tensor(p, &a->v[1 + i], a->e->call.args[1 + i].pos, hint, &xs[i]));
  }
  dsl_set_loc(p, a->e->pos);
  gr_output o = many ? gr_queue_enqueue_many(p->g, q, xs, n) : gr_queue_enqueue(p->g, q, xs, n);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  dsl_tensor_value(out, o);
  return GR_OK;
}

static gr_status dequeue(const dsl_bargs *a, bool many, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const none[] = {NULL};
  GR_TRY(dsl_bargs_only_keywords(a, none));
  gr_output q, o[GR_QUEUE_COMPONENTS_MAX];
  GR_TRY(queue_of(a, &q));
  if (a->npos != (many ? 2 : 1))
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     many ? "queue_dequeue_many takes the queue and a count: "
                            "queue_dequeue_many(q, 32)"
                          : "queue_dequeue takes the queue only");
  int64_t n = 1;
  if (many) GR_TRY(dsl_bargs_int(a, 1, "the count", 0, INT32_MAX, &n));
  dsl_set_loc(p, a->e->pos);
  if (many)
    gr_queue_dequeue_many(p->g, q, n, o);
  else
    gr_queue_dequeue(p->g, q, o);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  return dsl_tensors_value(p, o, o[0].node->num_outputs, out);
}

static gr_status close_or_size(const dsl_bargs *a, bool close, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"cancel_pending_enqueues", NULL};
  static const char *const none[] = {NULL};
  GR_TRY(dsl_bargs_only_keywords(a, close ? allowed : none));
  gr_output q;
  GR_TRY(queue_of(a, &q));
  if (a->npos != 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos, "%s takes the queue only", a->fn);
  bool cancel = false;
  int ki = dsl_bargs_kw(a, "cancel_pending_enqueues");
  if (ki >= 0) GR_TRY(dsl_bargs_bool(a, ki, "cancel_pending_enqueues", &cancel));
  dsl_set_loc(p, a->e->pos);
  gr_output o = close ? gr_queue_close(p->g, q, cancel) : gr_queue_size(p->g, q);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  dsl_tensor_value(out, o);
  return GR_OK;
}

/* ---- train, update, dropped = sync_replicas(loss, opt, replicas_to_aggregate=R, ...) ------- */

static gr_status sync_replicas(const dsl_bargs *a, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"replicas_to_aggregate", "total_num_replicas",
                                        "worker_index", "init_tokens", NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  if (a->npos != 2 || a->v[1].kind != V_OPTIMIZER)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "sync_replicas takes a loss and an optimizer: train, update, dropped = "
                     "sync_replicas(loss, sgd(0.1), replicas_to_aggregate=2)");
  gr_output loss;
  GR_TRY(dsl_to_tensor(p, &a->v[0], a->e->call.args[0].pos, GR_DTYPE_INVALID, &loss));
  gr_sync_replicas_options o = {.optimizer = *a->v[1].opt};
  int64_t v;
  static const char *const names[] = {"replicas_to_aggregate", "total_num_replicas", "worker_index",
                                      "init_tokens"};
  for (int k = 0; k < 4; k++) {
    int i = dsl_bargs_kw(a, names[k]);
    if (i < 0) {
      if (k == 0)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                         "sync_replicas needs replicas_to_aggregate=N");
      continue;
    }
    GR_TRY(dsl_bargs_int(a, i, names[k], k == 0 ? 1 : 0, GR_REPLICATE_MAX, &v));
    if (k == 0) o.replicas_to_aggregate = (int)v;
    if (k == 1) o.total_num_replicas = (int)v;
    if (k == 2) o.worker_index = (int)v;
    if (k == 3) o.init_tokens = v;
  }
  dsl_set_loc(p, a->e->pos);
  gr_sync_replicas r;
  gr_sync_replicas_minimize(p->g, &o, loss, NULL, 0, &r);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  return dsl_tensors_value(p, (gr_output[]){r.train, r.chief_update, r.num_dropped}, 3, out);
}

/* ---- the handlers of the built-in table (dsl_call.c) ------------------------------------- */

DSL_BUILTIN(fifo_queue, fifo_queue(&a, name, out))

DSL_BUILTIN(queue_enqueue, enqueue(&a, false, out))

DSL_BUILTIN(queue_enqueue_many, enqueue(&a, true, out))

DSL_BUILTIN(queue_dequeue, dequeue(&a, false, out))

DSL_BUILTIN(queue_dequeue_many, dequeue(&a, true, out))

DSL_BUILTIN(queue_close, close_or_size(&a, true, out))

DSL_BUILTIN(queue_size, close_or_size(&a, false, out))

DSL_BUILTIN(sync_replicas, sync_replicas(&a, out))
