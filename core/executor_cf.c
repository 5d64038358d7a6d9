/* The executor's control-flow run path: frames and iterations as in the
 * TensorFlow whitepaper and "Dynamic Control Flow in Large-Scale Machine
 * Learning" (EuroSys 2018). Used only for graphs that contain control-flow
 * primitives; other graphs take the static path in executor.c.
 *
 * Every value is a tagged token: (node, frame instance, iteration). A frame
 * instance is one execution of a loop (a child frame per iteration of its
 * parent); each of its live iterations has its own input slots and pending
 * counts, and at most parallel_iterations of them are live at once.
 * Iteration state is recycled as iterations finish, so a loop of any length
 * runs in constant memory. Deadness: a switch makes its untaken output dead;
 * a node with a dead input is dead without running its kernel; merge
 * forwards its first live input (dead when all expected inputs are dead);
 * a dead next_iteration ends the loop; exits that never saw a live value
 * send a dead value to the parent when the frame finishes.
 *
 * Nodes start and finish in the node core (exec_node.h); this file is its
 * propagator for control flow (values and pending counts per frame
 * instance and iteration, deadness, loop invariants) and the run's queue.
 * One mutex per run guards frames, iterations and the ready queue; kernels
 * run outside it. As on the static path (executor.c), every run is
 * asynchronous: the threads and pool tasks working on it hold it (tasks),
 * and the one that drops the last hold after the last token finished
 * calls the run's done callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exec_node.h"
#include "core/executor_cf_internal.h"

/* ---- run state ---------------------------------------------------------------------- */

typedef struct iter_state {
  gr_tensor *slots;
  int *pending;
  unsigned char *dead, *fired;
  int *dead_in; /* merges: dead inputs so far */
  int outstanding;
  struct iter_state *next_free;
} iter_state;

typedef struct const_val {
  int node;
  gr_tensor value[1]; /* enter has one output */
  int dead;
} const_val;

typedef struct deferred {
  int node, slot;
  int64_t iter; /* the iteration the value is for */
  gr_tensor value;
} deferred;

typedef struct frame_inst {
  int def;
  char *path;     /* names this instance in rendezvous keys: "outer:3/inner" */
  int parent_len; /* the "outer:3" part of path (0 at the top level) */
  struct frame_inst *parent;
  int64_t parent_iter;
  iter_state **ring;
  int64_t first_live, next_iter;
  int pending_enters;
  const_val *consts;
  int nconsts, capconsts;
  deferred *defer; /* next_iteration values waiting for the window */
  int ndefer, capdefer;
  unsigned char *exit_live; /* per local node */
  struct frame_inst *next;  /* live instances list */
} frame_inst;

typedef struct token {
  int node;
  frame_inst *f;
  int64_t iter;
} token;

typedef struct cf_run {
  exec_run run; /* first: the executor, step, feeds, fetches, cancelled, waiting */
  struct cf_plan *p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  token *q;
  int64_t qhead, qcount, qcap;
  int64_t outstanding;     /* tokens queued or running */
  int tasks;               /* pool tasks holding the run */
  iter_state **free_iters; /* per frame def */
  frame_inst *frames;
  frame_inst *root;
  bool single;          /* one thread and no async kernels: nothing to lock against */
  bool finished;        /* the last hold was dropped */
  bool stopped_devices; /* the step's rendezvous was aborted after a failure */
  gr_executor_done_fn done;
  void *done_arg;
  gr_status status;
  gr_error err;
  gr_watch_run watch_run; /* a step with a timeout (core/step_watch_internal.h) */
} cf_run;

static inline void cf_lock(cf_run *r) {
  if (!r->single) pthread_mutex_lock(&r->mu);
}
static inline void cf_unlock(cf_run *r) {
  if (!r->single) pthread_mutex_unlock(&r->mu);
}

/* Lock held (or a single-threaded run). */
static bool oom(cf_run *r) {
  if (r->status == GR_OK) {
    r->status = GR_ERR_RESOURCE_EXHAUSTED;
    snprintf(r->err.msg, sizeof r->err.msg, "out of memory in a loop");
    r->err.code = r->status;
    pthread_cond_broadcast(&r->cv); /* the run's thread stops the other devices */
  }
  r->run.cancelled = 1;
  return false;
}

static iter_state *iter_new(cf_run *r, int def) {
  frame_def *fd = &r->p->frames[def];
  iter_state *it = r->free_iters[def];
  if (it) {
    r->free_iters[def] = it->next_free;
  } else {
    it = calloc(1, sizeof *it);
    if (!it) return NULL;
    it->slots = calloc((size_t)fd->num_slots + 1, sizeof(gr_tensor));
    it->pending = gr_alloc_array((size_t)fd->num_nodes + 1, sizeof(int));
    it->dead = malloc((size_t)fd->num_nodes + 1);
    it->fired = malloc((size_t)fd->num_nodes + 1);
    it->dead_in = gr_alloc_array((size_t)fd->num_nodes + 1, sizeof(int));
    if (!it->slots || !it->pending || !it->dead || !it->fired || !it->dead_in) {
      free(it->slots), free(it->pending), free(it->dead), free(it->fired), free(it->dead_in);
      free(it);
      return NULL;
    }
  }
  memcpy(it->pending, r->p->frame_pending[def], sizeof(int) * (size_t)fd->num_nodes);
  memset(it->dead, 0, (size_t)fd->num_nodes);
  memset(it->fired, 0, (size_t)fd->num_nodes);
  memset(it->dead_in, 0, sizeof(int) * (size_t)fd->num_nodes);
  it->outstanding = 0;
  return it;
}

static void iter_free(cf_run *r, int def, iter_state *it) {
  frame_def *fd = &r->p->frames[def];
  for (int s = 0; s < fd->num_slots; s++) gr_tensor_release(&it->slots[s]);
  it->next_free = r->free_iters[def];
  r->free_iters[def] = it;
}

static iter_state *iter_of(frame_inst *f, int64_t t, int par) {
  return f->ring[t % par];
}

static void push_token(cf_run *r, int node, frame_inst *f, int64_t t) {
  if (r->qcount == r->qcap) {
    int64_t cap = r->qcap * 2;
    token *q = gr_alloc_array((size_t)cap, sizeof(token));
    if (!q) {
      oom(r);
      return;
    }
    for (int64_t k = 0; k < r->qcount; k++) q[k] = r->q[(r->qhead + k) % r->qcap];
    free(r->q);
    r->q = q;
    r->qcap = cap;
    r->qhead = 0;
  }
  r->q[(r->qhead + r->qcount) % r->qcap] = (token){node, f, t};
  r->qcount++;
  r->outstanding++;
  iter_of(f, t, r->p->frames[f->def].par_iters)->outstanding++;
}

static bool start_iteration(cf_run *r, frame_inst *f, int64_t t);
static void check_iteration(cf_run *r, frame_inst *f, int64_t t);

/* Delivers a value (or deadness) to input slot `slot` of node d in (f, t). */
static void deliver(cf_run *r, frame_inst *f, int64_t t, int d, int slot, gr_tensor *v, bool dead,
                    bool is_ctrl) {
  struct cf_plan *p = r->p;
  iter_state *it = iter_of(f, t, p->frames[f->def].par_iters);
  if (!it) { /* its start ran out of memory, which cancelled the run */
    GR_ASSERT(r->run.cancelled);
    if (v) gr_tensor_release(v);
    return;
  }
  int l = p->node_local[d];
  if (r->run.e->nodes[d].cf_kind == GR_CF_MERGE && !is_ctrl) {
    if (it->fired[l]) { /* a late input after the merge fired */
      if (v) gr_tensor_release(v);
      return;
    }
    if (!dead) {
      it->slots[p->slot_local[slot]] = *v;
      v->buf = NULL;
      it->fired[l] = 1;
      push_token(r, d, f, t);
    } else if (++it->dead_in[l] ==
               (t == 0 || !p->merge_back[d] ? p->merge_fwd[d] : p->merge_back[d])) {
      /* every input it waits for this iteration is dead (a cond's merge has
       * only forward inputs, in every iteration of its loop) */
      it->fired[l] = 1;
      it->dead[l] = 1;
      push_token(r, d, f, t);
    }
    return;
  }
  if (dead)
    it->dead[l] = 1;
  else if (!is_ctrl) {
    it->slots[p->slot_local[slot]] = *v;
    v->buf = NULL;
  }
  if (--it->pending[l] == 0) push_token(r, d, f, t);
}

static frame_inst *find_child(cf_run *r, frame_inst *parent, int64_t t, int def) {
  for (frame_inst *f = r->frames; f; f = f->next)
    if (f->parent == parent && f->parent_iter == t && f->def == def) return f;
  frame_def *fd = &r->p->frames[def];
  frame_inst *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->ring = calloc((size_t)fd->par_iters, sizeof(iter_state *));
  f->exit_live = calloc((size_t)fd->num_nodes + 1, 1);
  if (!f->ring || !f->exit_live) {
    free(f->ring);
    free(f->exit_live);
    free(f);
    return NULL;
  }
  const char *name = r->p->fr.frames[def].name;
  if (parent->path) {
    size_t len = strlen(parent->path) + strlen(name) + 24;
    f->path = malloc(len);
    if (f->path)
      f->parent_len = snprintf(f->path, len, "%s:%lld/%s", parent->path, (long long)t, name) -
                      (int)strlen(name) - 1;
  } else {
    f->path = strdup(name);
  }
  if (!f->path) {
    free(f->ring);
    free(f->exit_live);
    free(f);
    return NULL;
  }
  f->def = def;
  f->parent = parent;
  f->parent_iter = t;
  f->pending_enters = fd->num_enters;
  f->next = r->frames;
  r->frames = f;
  if (parent) iter_of(parent, t, r->p->frames[parent->def].par_iters)->outstanding++;
  start_iteration(r, f, 0);
  return f;
}

/* Moves value v (or deadness; v NULL for a control edge) along an edge of
 * mode `mode` from node src in (f, t) to input slot `slot` of node d.
 * final: frame f is done and its exit src never carried a live value, so
 * the dead value goes to the parent now. */
static void route(cf_run *r, frame_inst *f, int64_t t, int src, unsigned char mode, int d, int slot,
                  gr_tensor *v, bool dead, bool is_ctrl, bool final) {
  struct cf_plan *p = r->p;
  if (mode & MODE_EXIT) {
    if (dead && !final) { /* sent dead at the end of the frame if never live */
      if (v) gr_tensor_release(v);
      return;
    }
    if (!dead) f->exit_live[p->node_local[src]] = 1;
    t = f->parent_iter;
    f = f->parent;
  }
  if (mode & MODE_ENTER) {
    frame_inst *c = find_child(r, f, t, p->fr.of_node[d]);
    if (!c) {
      if (v) gr_tensor_release(v);
      oom(r);
      return;
    }
    c->pending_enters--;
    deliver(r, c, 0, d, slot, v, dead, is_ctrl);
    check_iteration(r, c, 0);
    return;
  }
  if (!(mode & MODE_NEXT)) {
    deliver(r, f, t, d, slot, v, dead, is_ctrl);
    return;
  }
  if (dead) return; /* the loop ends */
  frame_def *fd = &p->frames[f->def];
  if (t + 1 < f->next_iter) {
    deliver(r, f, t + 1, d, slot, v, false, false);
  } else if (t + 1 < f->first_live + fd->par_iters && f->ndefer == 0) {
    if (start_iteration(r, f, t + 1))
      deliver(r, f, t + 1, d, slot, v, false, false);
    else
      gr_tensor_release(v);
  } else { /* too many live iterations: wait */
    if (f->ndefer == f->capdefer) {
      int cap = f->capdefer ? f->capdefer * 2 : 4;
      deferred *dq = gr_realloc_array(f->defer, (size_t)cap, sizeof *dq);
      if (!dq) {
        gr_tensor_release(v);
        oom(r);
        return;
      }
      f->defer = dq;
      f->capdefer = cap;
    }
    f->defer[f->ndefer++] = (deferred){d, slot, t + 1, *v};
    v->buf = NULL;
  }
}

/* Propagates output values of node i in (f, t) along its edges. outs[k] is
 * moved or referenced; dead_mask marks dead outputs. replay: a constant
 * enter's value into a later iteration (references only). */
static void propagate(cf_run *r, int i, frame_inst *f, int64_t t, gr_tensor *outs,
                      uint64_t dead_mask, bool node_dead, bool replay) {
  gr_executor *e = r->run.e;
  struct cf_plan *p = r->p;
  exec_node *en = &e->nodes[i];
  for (int k = en->edge_begin; k < en->edge_end; k++) {
    const exec_edge *ed = &e->edges[k];
    int so = ed->src_output;
    bool dead = node_dead || ((dead_mask >> (so & 63)) & 1) || !outs[so].buf;
    gr_tensor v = gr_tensor_empty();
    if (!dead) {
      if (ed->move && !replay) {
        v = outs[so];
        outs[so].buf = NULL;
      } else {
        gr_tensor_ref(&v, &outs[so]);
      }
    }
    if (ed->dst < 0) { /* fetch (top level only) */
      if (p->edge_mode[k] & MODE_EXIT) {
        if (dead) continue; /* only the last iteration's exit is live */
        f->exit_live[p->node_local[i]] = 1;
      }
      if (dead) {
        if (r->status == GR_OK) {
          r->status = GR_ERR_INVALID_ARGUMENT;
          snprintf(r->err.msg, sizeof r->err.msg,
                   "fetch %d ('%s') is dead: it is on the branch of a cond that was not taken",
                   ed->dst_slot, en->node ? en->node->name : "feed");
          r->err.code = r->status;
        }
      } else {
        r->run.fetch_out[ed->dst_slot] = v;
      }
      continue;
    }
    route(r, f, t, i, p->edge_mode[k], ed->dst, ed->dst_slot, &v, dead, false, false);
  }
  for (int k = en->ctrl_begin; k < en->ctrl_end; k++)
    route(r, f, t, i, p->ctrl_mode[k], e->ctrl_dsts[k], 0, NULL, node_dead, true, false);
}

/* False when out of memory (the run is cancelled then). */
static bool start_iteration(cf_run *r, frame_inst *f, int64_t t) {
  int par = r->p->frames[f->def].par_iters;
  iter_state *it = iter_new(r, f->def);
  if (!it) return oom(r);
  f->ring[t % par] = it;
  f->next_iter = t + 1;
  /* loop invariants reach every iteration */
  it->outstanding++; /* hold the iteration open while replaying */
  for (int c = 0; c < f->nconsts; c++)
    propagate(r, f->consts[c].node, f, t, f->consts[c].value, 0, f->consts[c].dead, true);
  it->outstanding--;
  return true;
}

static void frame_done(cf_run *r, frame_inst *f) {
  struct cf_plan *p = r->p;
  gr_executor *e = r->run.e;
  /* exits that never carried a live value send a dead one */
  for (int i = 0; i < e->num_nodes; i++)
    if (p->fr.of_node[i] == f->def && e->nodes[i].cf_kind == GR_CF_EXIT &&
        !f->exit_live[p->node_local[i]]) {
      for (int k = e->nodes[i].ctrl_begin; k < e->nodes[i].ctrl_end; k++)
        route(r, f, 0, i, p->ctrl_mode[k], e->ctrl_dsts[k], 0, NULL, true, true, true);
      for (int k = e->nodes[i].edge_begin; k < e->nodes[i].edge_end; k++) {
        if (e->edges[k].dst >= 0) {
          route(r, f, 0, i, p->edge_mode[k], e->edges[k].dst, e->edges[k].dst_slot, NULL, true,
                false, true);
        } else if (r->status == GR_OK) {
          r->status = GR_ERR_INVALID_ARGUMENT;
          snprintf(r->err.msg, sizeof r->err.msg,
                   "fetch %d ('%s') is dead: its loop ran in a branch that was not taken",
                   e->edges[k].dst_slot, e->nodes[i].node->name);
          r->err.code = r->status;
        }
      }
    }
  for (int c = 0; c < f->nconsts; c++) gr_tensor_release(&f->consts[c].value[0]);
  frame_inst **pp = &r->frames;
  while (*pp != f) pp = &(*pp)->next;
  *pp = f->next;
  frame_inst *parent = f->parent;
  int64_t pt = f->parent_iter;
  free(f->consts);
  free(f->defer);
  free(f->ring);
  free(f->exit_live);
  free(f->path);
  free(f);
  iter_of(parent, pt, p->frames[parent->def].par_iters)->outstanding--;
  check_iteration(r, parent, pt);
}

/* After a change in frame f: retire finished iterations in order, start
 * deferred ones, and finish the frame when nothing is left. An iteration is
 * finished when nothing of it is queued or running and the iteration before
 * it is retired (only that one can still send it values; for iteration 0,
 * when every enter value has arrived). */
static void check_iteration(cf_run *r, frame_inst *f, int64_t t) {
  (void)t;
  if (f == r->root) return;
  frame_def *fd = &r->p->frames[f->def];
  for (;;) {
    while (f->first_live < f->next_iter) {
      iter_state *o = iter_of(f, f->first_live, fd->par_iters);
      if (o->outstanding > 0 || (f->first_live == 0 && f->pending_enters > 0)) break;
      iter_free(r, f->def, o);
      f->ring[f->first_live % fd->par_iters] = NULL;
      f->first_live++;
    }
    if (f->ndefer == 0) break;
    deferred d = f->defer[0];
    if (d.iter >= f->next_iter) { /* its iteration has yet to start: is there room? */
      if (f->next_iter >= f->first_live + fd->par_iters) break;
      if (!start_iteration(r, f, d.iter)) break; /* cancelled; the value is freed with f */
    }
    memmove(f->defer, f->defer + 1, sizeof(deferred) * (size_t)(f->ndefer - 1));
    f->ndefer--;
    deliver(r, f, d.iter, d.node, d.slot, &d.value, false, false);
  }
  if (f->first_live == f->next_iter && f->ndefer == 0 && f->pending_enters == 0) frame_done(r, f);
}

static bool is_expensive(cf_run *r, int node) {
  return r->run.e->nodes[node].expensive;
}

static void run_token(cf_run *r, token tok);
static void cf_finish(cf_run *r);

static void drain(cf_run *r) {
  while (r->qcount > 0) {
    token tok = r->q[r->qhead];
    r->qhead = (r->qhead + 1) % r->qcap;
    r->qcount--;
    run_token(r, tok);
  }
}

/* Drops a hold on the run (lock held on entry, released on return); the
 * last one finishes it. A failed run first aborts the step's rendezvous:
 * receives still waiting would wait for ever for devices this one no
 * longer feeds. */
static void cf_put(cf_run *r) {
  if (r->run.cancelled && r->run.step->rendezvous && !r->stopped_devices) {
    r->stopped_devices = true;
    cf_unlock(r);
    gr_rendezvous_abort(r->run.step->rendezvous, GR_ERR_CANCELLED,
                        "the step was cancelled on another device");
    cf_lock(r);
  }
  r->tasks--;
  if (r->run.waiting && (r->qcount > 0 || (r->outstanding == 0 && r->tasks == 1)))
    pthread_cond_broadcast(&r->cv);
  bool finish = r->tasks == 0 && r->outstanding == 0 && !r->finished;
  if (finish) r->finished = true;
  cf_unlock(r);
  if (finish) cf_finish(r);
}

static void pool_task(void *arg) {
  cf_run *r = arg;
  cf_lock(r);
  drain(r);
  cf_put(r);
}

typedef struct cf_async {
  exec_async a; /* first; a.run is the cf_run's */
  gr_tensor ins[16], outs[16];
} cf_async;

/* The propagator's fail (lock held): the first error wins; the run's thread
 * stops the other devices. */
static void cf_fail(exec_run *run, const gr_error *why) {
  cf_run *r = (cf_run *)run;
  if (r->status == GR_OK) {
    r->status = why->code;
    r->err = *why;
    pthread_cond_broadcast(&r->cv); /* the run's thread stops the other devices */
  }
  r->run.cancelled = 1;
}

/* The propagator's deliver (lock held): a loop invariant is kept for every
 * iteration of its frame; the values (or deadness) go along the edges to
 * their frames and iterations, counting down the successors there. */
static void cf_deliver(exec_run *run, exec_call *c, uint64_t dead_mask, bool dead) {
  cf_run *r = (cf_run *)run;
  struct cf_plan *p = r->p;
  frame_inst *f = c->frame;
  if (r->run.e->nodes[c->node].cf_kind == GR_CF_ENTER && p->constant[c->node] && !dead) {
    /* a loop invariant: every iteration of the frame sees it */
    if (f->nconsts == f->capconsts) {
      int cap = f->capconsts ? f->capconsts * 2 : 4;
      const_val *cv = gr_realloc_array(f->consts, (size_t)cap, sizeof *cv);
      if (cv) {
        f->consts = cv;
        f->capconsts = cap;
      }
    }
    if (f->nconsts < f->capconsts) {
      const_val *cv = &f->consts[f->nconsts++];
      cv->node = c->node;
      cv->dead = 0;
      gr_tensor_ref(&cv->value[0], &c->outs[0]);
      for (int64_t t = f->first_live; t < f->next_iter; t++)
        if (t != c->iteration) propagate(r, c->node, f, t, cv->value, 0, false, true);
    } else {
      oom(r);
    }
  }
  propagate(r, c->node, f, c->iteration, c->outs, dead_mask, dead, false);
}

/* The propagator's advance (lock held): the token is gone from its
 * iteration, which may retire. */
static void cf_advance(exec_run *run, exec_call *c, void *sched) {
  (void)sched; /* the ready tokens are in the run's queue */
  cf_run *r = (cf_run *)run;
  frame_inst *f = c->frame;
  iter_state *it = iter_of(f, c->iteration, r->p->frames[f->def].par_iters);
  it->outstanding--;
  r->outstanding--;
  check_iteration(r, f, c->iteration);
  if (r->outstanding == 0) pthread_cond_broadcast(&r->cv);
}

static const exec_propagator cf_prop;

/* Node finish (lock held): the core's (exec_node.h), with this path's
 * propagator, whose deliver and advance it then calls directly. */
static void cf_finish_node(cf_run *r, exec_call *c, gr_status s, gr_error *kerr, uint64_t dead_mask,
                           bool dead) {
  gr_exec_finish(&cf_prop, &r->run, c, s, kerr, dead_mask, dead, NULL);
}

static void cf_done(exec_async *a, gr_status s) {
  cf_run *r = (cf_run *)a->run;
  gr_threadpool *pool = NULL; /* where the queue goes after the unlock */
  cf_lock(r);
  r->tasks++;
  cf_finish_node(r, &a->call, s, &a->err, a->ctx.dead_outputs, a->ctx.dead);
  free(a); /* the cf_async */
  /* inline a few levels deep (executor.c's static_done says why), then hand
   * the queue to the pool, the waiting caller, or this thread's outermost
   * completion. A thread that is neither the pool's nor the waiting
   * caller (a network thread delivering a tensor) runs no kernels: a task
   * runs them on its inter-op threads only. */
  bool may_run_here = r->run.e->pool_size == 0 || gr_exec_run_own_thread(&r->run);
  switch (gr_exec_completion_where(&r->run, may_run_here)) {
    case GR_EXEC_HERE:
      gr_exec_done_depth++;
      drain(r);
      gr_exec_done_depth--;
      break;
    case GR_EXEC_HELPERS: /* the pool, or the waiting caller (woken by cf_put) */
      if (r->qcount > 0 && r->run.e->pool_size > 0) {
        r->tasks++; /* scheduled after the unlock: out of memory, the pool runs it inline */
        pool = r->run.e->pool;
      }
      break;
    case GR_EXEC_DEFER:
      if (r->qcount > 0) {
        r->tasks++;
        gr_exec_defer(pool_task, r);
      }
      break;
  }
  cf_put(r);
  if (pool) gr_threadpool_schedule(pool, pool_task, r);
  if (gr_exec_done_depth == 0) gr_exec_run_deferred();
}

static void cf_on_cancel(exec_async *a, void (*fn)(void *), void *arg) {
  cf_run *r = (cf_run *)a->run;
  cf_lock(r);
  bool now = r->run.cancelled;
  cf_unlock(r);
  /* cancelled already; otherwise the kernel completes on its own (or the step watch cancels it) */
  if (now || gr_watch_keep_cancel(r->run.step->watch, &a->wait, fn, arg)) fn(arg);
}

static const exec_propagator cf_prop = {cf_fail, cf_deliver, cf_advance, cf_done, cf_on_cancel};

/* Moves node en's inputs out of iteration it's slots into ins. */
static void take_inputs(cf_run *r, iter_state *it, const exec_node *en, gr_tensor *ins) {
  for (int k = 0; k < en->num_inputs; k++) {
    ins[k] = it->slots[r->p->slot_local[en->input_base + k]];
    it->slots[r->p->slot_local[en->input_base + k]].buf = NULL;
  }
}

/* Runs one token with the lock held on entry and exit (released around the kernel). */
static void run_token(cf_run *r, token tok) {
  gr_executor *e = r->run.e;
  struct cf_plan *p = r->p;
  exec_node *en = &e->nodes[tok.node];
  int par = p->frames[tok.f->def].par_iters;
  iter_state *it = iter_of(tok.f, tok.iter, par);
  int l = p->node_local[tok.node];
  bool dead = it->dead[l] || r->run.cancelled;
  /* transfer ops run while dead (not once cancelled): deadness crosses devices;
   * so do ops that record deadness (a gradient's stack push) */
  bool run_dead = dead && !r->run.cancelled && en->node &&
                  (en->node->op->flags & (GR_OP_TRANSFER | GR_OP_RUNS_DEAD));
  exec_call c = {.node = tok.node,
                 .frame = tok.f,
                 .iteration = tok.iter,
                 .frame_name = tok.f->path ? tok.f->path : "",
                 .frame_parent_len = tok.f->parent_len,
                 .loop = tok.f->def != 0 ? p->fr.frames[tok.f->def].name : NULL,
                 .start_ns = -1};
  if (en->num_inputs > 16 || en->num_outputs > 16 || en->async) {
    cf_async *a = calloc(1, sizeof *a);
    if (!a || en->num_inputs > 16 || en->num_outputs > 16) {
      bool no_memory = !a;
      free(a);
      gr_error ke;
      if (no_memory)
        gr_error_set_oom(&ke);
      else
        gr_error_set(&ke, GR_ERR_UNIMPLEMENTED,
                     "nodes with more than 16 inputs or outputs are not "
                     "supported inside control flow yet");
      cf_finish_node(r, &c, ke.code, &ke, 0, true); /* inputs stay in the slots */
      return;
    }
    take_inputs(r, it, en, a->ins);
    c.ins = a->ins;
    c.outs = a->outs;
    a->a.run = &r->run;
    a->a.call = c;
    if (dead && !run_dead) {
      cf_finish_node(r, &a->a.call, GR_OK, &a->a.err, 0, true);
      free(a);
      return;
    }
    cf_unlock(r);
    gr_exec_start_async(&a->a, dead);
    cf_lock(r);
    return;
  }
  gr_tensor ins[16], outs[16];
  take_inputs(r, it, en, ins);
  for (int k = 0; k < en->num_outputs; k++) outs[k] = gr_tensor_empty();
  c.ins = ins;
  c.outs = outs;
  gr_status s = GR_OK;
  gr_error kerr;
  kerr.msg[0] = '\0';
  uint64_t dead_mask = 0;
  if (gr_exec_feed(&r->run, &c)) {
    /* its value is in outs[0] */
  } else if (!dead || run_dead) {
    gr_kernel_ctx ctx;
    cf_unlock(r);
    s = gr_exec_run_kernel(&r->run, &c, dead, &kerr, &ctx);
    cf_lock(r);
    dead_mask = ctx.dead_outputs;
    dead = ctx.dead;
  }
  cf_finish_node(r, &c, s, &kerr, dead_mask, dead);
}

/* The step's watchdog found the step stalled: stop it as a kernel error
 * would. It holds the run until cf_watchdog_release (gr_watch_run). */
static bool cf_watchdog_cancel(void *arg, const gr_error *why, gr_error *own) {
  cf_run *r = arg;
  cf_lock(r);
  if (r->status != GR_OK) *own = r->err;
  if (r->finished || r->outstanding == 0) { /* done but for its last holds */
    cf_unlock(r);
    return false;
  }
  if (r->status == GR_OK) r->status = why->code, r->err = *why;
  r->run.cancelled = 1;
  r->tasks++;
  pthread_cond_broadcast(&r->cv);
  cf_unlock(r);
  return true;
}

static void cf_watchdog_release(void *arg) {
  cf_run *r = arg;
  cf_lock(r);
  cf_put(r);
}

/* Frees r (and what a cancelled step left of its frames) and calls its done. */
static void cf_free_run(cf_run *r, gr_status status, gr_error *err) {
  struct cf_plan *p = r->p;
  gr_executor *e = r->run.e;
  frame_inst *root = r->root;
  while (r->frames) { /* frames left by a cancelled step */
    frame_inst *f = r->frames;
    r->frames = f->next;
    for (int64_t t = f->first_live; t < f->next_iter; t++)
      if (f->ring[t % p->frames[f->def].par_iters])
        iter_free(r, f->def, f->ring[t % p->frames[f->def].par_iters]);
    for (int c = 0; c < f->nconsts; c++) gr_tensor_release(&f->consts[c].value[0]);
    for (int d = 0; d < f->ndefer; d++) gr_tensor_release(&f->defer[d].value);
    free(f->consts), free(f->defer), free(f->ring), free(f->exit_live), free(f->path), free(f);
  }
  if (root && root->ring && root->ring[0]) iter_free(r, 0, root->ring[0]);
  for (int k = 0; k < e->num_fetches && status == GR_OK; k++)
    if (!r->run.fetch_out[k].buf)
      status = gr_error_set(err, GR_ERR_INTERNAL, "fetch %d produced no value", k);
  if (status != GR_OK) /* also the fetches filled before the missing one */
    for (int k = 0; k < e->num_fetches; k++) gr_tensor_release(&r->run.fetch_out[k]);
  if (r->free_iters)
    for (int d = 0; d < p->fr.num_frames; d++)
      while (r->free_iters[d]) {
        iter_state *it = r->free_iters[d];
        r->free_iters[d] = it->next_free;
        free(it->slots), free(it->pending), free(it->dead), free(it->fired), free(it->dead_in);
        free(it);
      }
  free(r->free_iters);
  if (root) free(root->ring), free(root->exit_live), free(root);
  free(r->q);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  gr_executor_done_fn done = r->done;
  void *arg = r->done_arg;
  free(r);
  done(arg, status, err);
}

/* The last hold is gone and every token finished. */
static void cf_finish(cf_run *r) {
  if (!r->single) gr_watch_detach_run(r->run.step->watch, &r->watch_run);
  gr_error err = {GR_OK, ""};
  if (r->status != GR_OK) err = r->err;
  cf_free_run(r, r->status, &err);
}

void gr_cf_run_start(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                     const gr_step_info *step, gr_executor_done_fn done, void *arg, bool wait) {
  struct cf_plan *p = e->cf;
  cf_run *r = calloc(1, sizeof *r);
  if (!r) {
    gr_error oom;
    done(arg, gr_error_set_oom(&oom), &oom);
    return;
  }
  r->run.prop = &cf_prop;
  r->run.e = e;
  r->p = p;
  r->run.feeds = feed_values;
  r->run.fetch_out = fetch_out;
  r->run.step = step;
  r->done = done;
  r->done_arg = arg;
  r->run.waiting = wait;
  r->run.caller = pthread_self();
  r->tasks = 1; /* this thread's hold */
  r->single = e->pool_size == 0;
  for (int i = 0; i < e->num_nodes && r->single; i++)
    if (e->nodes[i].async) r->single = false;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->qcap = 64;
  r->q = gr_alloc_array((size_t)r->qcap, sizeof(token));
  r->free_iters = calloc((size_t)p->fr.num_frames, sizeof(iter_state *));
  frame_inst *root = r->root = calloc(1, sizeof *root);
  if (root) {
    root->ring = calloc(1, sizeof(iter_state *));
    root->exit_live = calloc((size_t)p->frames[0].num_nodes + 1, 1);
  }
  if (r->q && r->free_iters && root && root->ring && root->exit_live)
    root->ring[0] = iter_new(r, 0);
  if (!root || !root->ring || !root->ring[0]) {
    gr_error oom;
    cf_free_run(r, gr_error_set_oom(&oom), &oom);
    return;
  }
  root->next_iter = 1;
  r->watch_run =
      (gr_watch_run){.cancel = cf_watchdog_cancel, .release = cf_watchdog_release, .arg = r};
  /* a single-threaded run without async kernels cannot stall */
  if (!r->single) gr_watch_attach_run(step->watch, &r->watch_run);
  cf_lock(r);
  for (int k = 0; k < e->num_roots; k++) push_token(r, e->roots[k], root, 0);
  /* a caller that does not wait and is not the pool's (a task's RUN)
   * runs no kernels: the pool takes the queue */
  bool hand_over = !wait && e->pool_size > 0 && gr_threadpool_current() != e->pool;
  if (hand_over && r->qcount > 0) {
    r->tasks++;
    cf_unlock(r); /* out of memory, the pool runs pool_task inline */
    gr_threadpool_schedule(e->pool, pool_task, r);
    cf_lock(r);
  }
  for (; !hand_over;) {
    if (r->qcount > 0) {
      token tok = r->q[r->qhead];
      r->qhead = (r->qhead + 1) % r->qcap;
      r->qcount--;
      if (e->pool_size > 0 && is_expensive(r, tok.node) && r->qcount > 0) {
        r->tasks++;   /* let a pool thread help with what is queued behind */
        cf_unlock(r); /* out of memory, the pool runs pool_task inline */
        gr_threadpool_schedule(e->pool, pool_task, r);
        cf_lock(r);
      }
      run_token(r, tok);
      continue;
    }
    if (!wait || (r->outstanding == 0 && r->tasks == 1)) break;
    if (r->run.cancelled && step->rendezvous && !r->stopped_devices) {
      /* receives still waiting would wait for ever for devices this one no longer feeds */
      r->stopped_devices = true;
      cf_unlock(r);
      gr_rendezvous_abort(step->rendezvous, GR_ERR_CANCELLED,
                          "the step was cancelled on another device");
      cf_lock(r);
      continue;
    }
    GR_ASSERT(!r->single); /* single: nothing queued, nothing running, nobody else */
    pthread_cond_wait(&r->cv, &r->mu);
  }
  cf_put(r); /* with wait, the last hold: the run finishes here */
}
