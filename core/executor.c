/* Running an executor (the static path; graphs with control flow run in
 * executor_cf.c): per-run state recycled across runs, ready nodes run inline
 * or through the shared queue, async kernels, cancellation, fetches. Nodes
 * start and finish in the node core (exec_node.h); this file is its
 * propagator for a flat graph (one pending count per node, atomic) and the
 * scheduling of ready nodes. executor_run.c starts its runs
 * (gr_exec_static_start).
 *
 * Every run is asynchronous: whoever works on a run holds it (st->tasks: the
 * thread that started it, each queued pool task, each async completion in
 * progress, a firing watchdog); the thread that drops the last hold after
 * the last node finished calls the run's done callback. A run started with
 * wait keeps the calling thread's hold: it helps drain the shared queue and
 * finishes the run itself (gr_executor_run). */
#include "core/exec_node.h"
#include "core/executor.h"
#include "core/invariants.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cancel_entry {
  void (*fn)(void *);
  void *arg;
  int active;
} cancel_entry;

typedef struct run_state run_state;

/* A FIFO of ready nodes (a ring that grows). */
typedef struct node_fifo {
  int *v;
  int head, count, cap;
} node_fifo;

typedef struct async_ctx {
  exec_async a; /* first; a.run is the run_state's */
  cancel_entry cancel;
} async_ctx;

struct run_state {
  exec_run run; /* first: the executor, step, feeds, fetches, cancelled (atomic), waiting */
  run_state *next_free;
  gr_tensor *slots;   /* input slots */
  gr_tensor *outputs; /* output scratch */
  int *pending;
  int *pending0; /* each node's initial pending count: pending at the start of a run */
  int *stack;    /* the calling thread's ready stack */
  /* the shared queue of ready nodes for the pool and the caller: urgent
   * ones (exec_node.urgent) in q[0], go before the others in q[1];
   * nurgent mirrors q[0].count for a look without the lock (atomic) */
  node_fifo q[2];
  int nurgent;
  int remaining; /* nodes not yet finished (atomic) */
  int tasks;     /* threads and pool tasks that still hold st (under mu) */
  bool finished; /* the last hold was dropped (under mu) */
  gr_executor_done_fn done;
  void *done_arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  gr_status status;
  gr_error err;
  async_ctx **asyncs; /* live async invocations (under mu), for cancellation */
  int num_asyncs, cap_asyncs;
  gr_watch_run watch_run; /* a step with a timeout: how its watchdog cancels this run */
};

static void run_state_free(run_state *st) {
  if (!st) return;
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
  free(st->slots);
  free(st->outputs);
  free(st->pending);
  free(st->pending0);
  free(st->stack);
  free(st->q[0].v);
  free(st->q[1].v);
  free(st->asyncs);
  free(st);
}

void gr_exec_static_free(gr_executor *e) {
  run_state *st = e->free_states;
  while (st) {
    run_state *n = st->next_free;
    run_state_free(st);
    st = n;
  }
}

/* ---- run ----------------------------------------------------------------- */

static run_state *acquire_state(gr_executor *e) {
  pthread_mutex_lock(&e->mu);
  run_state *st = e->free_states;
  if (st) e->free_states = st->next_free;
  pthread_mutex_unlock(&e->mu);
  if (st) return st;
  st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->run.e = e;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  st->slots = calloc((size_t)e->num_slots + 1, sizeof(gr_tensor));
  st->outputs = calloc((size_t)e->num_out_slots + 1, sizeof(gr_tensor));
  st->pending = gr_alloc_array((size_t)e->num_nodes + 1, sizeof(int));
  st->pending0 = gr_alloc_array((size_t)e->num_nodes + 1, sizeof(int));
  st->stack = gr_alloc_array((size_t)e->num_nodes + 1, sizeof(int));
  for (int k = 0; k < 2; k++) {
    st->q[k].cap = e->num_nodes + 1;
    st->q[k].v = gr_alloc_array((size_t)st->q[k].cap, sizeof(int));
  }
  if (!st->slots || !st->outputs || !st->pending || !st->pending0 || !st->stack || !st->q[0].v ||
      !st->q[1].v) {
    run_state_free(st);
    return NULL;
  }
  for (int i = 0; i < e->num_nodes; i++) st->pending0[i] = e->nodes[i].initial_pending;
  return st;
}

static void release_state(gr_executor *e, run_state *st) {
  pthread_mutex_lock(&e->mu);
  st->next_free = e->free_states;
  e->free_states = st;
  pthread_mutex_unlock(&e->mu);
}

/* Fails the run with why (unless it failed already, or why is NULL: the
 * error is set) and cancels it: every pending async kernel gets its cancel
 * callback. st->mu held on entry, released on return. */
static void cancel_run_locked(run_state *st, const gr_error *why) {
  GR_ASSERT_HELD(&st->mu);
  if (why && st->status == GR_OK) {
    st->status = why->code;
    st->err = *why;
  }
  __atomic_store_n(&st->run.cancelled, 1, __ATOMIC_RELEASE);
  /* cancel every pending async kernel, a batch at a time, outside the lock
   * (their callbacks may call done, which changes the list) */
  for (;;) {
    cancel_entry todo[16];
    int ntodo = 0;
    for (int k = 0; k < st->num_asyncs && ntodo < 16; k++)
      if (st->asyncs[k]->cancel.active) {
        todo[ntodo++] = st->asyncs[k]->cancel;
        st->asyncs[k]->cancel.active = 0;
      }
    pthread_mutex_unlock(&st->mu);
    for (int k = 0; k < ntodo; k++) todo[k].fn(todo[k].arg);
    if (ntodo < 16) break;
    pthread_mutex_lock(&st->mu);
  }
}

/* The propagator's fail: the first error wins; the run is cancelled. */
static void static_fail(exec_run *run, const gr_error *why) {
  run_state *st = (run_state *)run;
  pthread_mutex_lock(&st->mu);
  cancel_run_locked(st, why);
}

static void task_done(run_state *st);

/* The step's watchdog found the step stalled (gr_watch_run.cancel). It
 * fails the run and holds it until watchdog_release, so that the run never
 * finishes (and leaves the watch) on the watchdog's thread while it fires.
 * The async kernels' cancel callbacks wait for the release too: one may
 * abort the step's rendezvous, which can finish another run of the step on
 * this thread, whose leaving the watch would wait for this firing to end. A
 * run whose nodes have all finished is not failed: it is done but for its
 * last holds. */
static bool watchdog_cancel(void *arg, const gr_error *why, gr_error *own) {
  run_state *st = arg;
  pthread_mutex_lock(&st->mu);
  if (st->status != GR_OK) *own = st->err;
  if (st->finished || __atomic_load_n(&st->remaining, __ATOMIC_ACQUIRE) == 0) {
    pthread_mutex_unlock(&st->mu);
    return false;
  }
  st->tasks++;
  if (st->status == GR_OK) {
    st->status = why->code;
    st->err = *why;
  }
  __atomic_store_n(&st->run.cancelled, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&st->mu);
  return true;
}

static void watchdog_release(void *arg) {
  run_state *st = arg;
  pthread_mutex_lock(&st->mu);
  cancel_run_locked(st, NULL); /* the kernels' cancel callbacks; unlocks */
  task_done(st);
}

static void fifo_push(node_fifo *f, int i) {
  if (f->count == f->cap) {
    int cap = f->cap * 2;
    int *q = gr_alloc_array((size_t)cap, sizeof(int));
    GR_ASSERT(q != NULL);
    for (int k = 0; k < f->count; k++) q[k] = f->v[(f->head + k) % f->cap];
    free(f->v);
    f->v = q;
    f->cap = cap;
    f->head = 0;
  }
  f->v[(f->head + f->count) % f->cap] = i;
  f->count++;
}

static int fifo_pop(node_fifo *f) {
  if (!f->count) return -1;
  int i = f->v[f->head];
  f->head = (f->head + 1) % f->cap;
  f->count--;
  return i;
}

static void push_shared(run_state *st, int i) {
  pthread_mutex_lock(&st->mu);
  bool urgent = st->run.e->nodes[i].urgent;
  fifo_push(&st->q[!urgent], i);
  if (urgent) __atomic_store_n(&st->nurgent, st->q[0].count, __ATOMIC_RELAXED);
  bool to_pool = st->run.e->pool_size > 0;
  if (to_pool) st->tasks++;
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

/* The next node of the shared queue, -1 when it is empty: urgent first. */
static int pop_shared_locked(run_state *st) {
  GR_ASSERT_HELD(&st->mu);
  int i = fifo_pop(&st->q[0]);
  if (i >= 0) {
    __atomic_store_n(&st->nurgent, st->q[0].count, __ATOMIC_RELAXED);
    return i;
  }
  return fifo_pop(&st->q[1]);
}

/* A small per-thread ready stack; overflow spills into the shared queue.
 * Urgent nodes (on a path to a send or a collective: another device waits
 * for them) run before the others, and of each kind the cheap ones before
 * the expensive ones this thread keeps (a replica's loss gradient queued
 * behind this replica's whole backward pass; a pipeline stage's
 * apply_sgd and its control send ahead of the gradient the previous stage
 * waits for). v[0..n) holds the cheap ones, v[cap - nx..cap) the expensive
 * ones, nxu of them urgent; each is a stack. */
typedef struct ready_stack {
  int *v;
  int n, nx, cap, nxu;
} ready_stack;

static void schedule_shared(run_state *st, int i);

static inline void rs_push(run_state *st, ready_stack *rs, int i) {
  if (rs->n + rs->nx >= rs->cap) {
    schedule_shared(st, i);
  } else if (st->run.e->nodes[i].expensive) {
    rs->nx++;
    rs->v[rs->cap - rs->nx] = i;
    rs->nxu += st->run.e->nodes[i].urgent;
  } else {
    rs->v[rs->n++] = i;
  }
}

/* The next node to run, -1 when none: the last cheap one unless it is not
 * urgent and an expensive one is, else the last urgent expensive one, else
 * the last expensive one. */
static int rs_pop(const run_state *st, ready_stack *rs) {
  const exec_node *nodes = st->run.e->nodes;
  if (rs->n > 0 && (rs->nxu == 0 || nodes[rs->v[rs->n - 1]].urgent)) return rs->v[--rs->n];
  if (rs->nx == 0) return -1;
  int *top = &rs->v[rs->cap - rs->nx];
  for (int k = 0; rs->nxu > 0 && k < rs->nx; k++)
    if (nodes[top[k]].urgent) {
      int i = top[k];
      top[k] = top[0];
      top[0] = i;
      rs->nxu--;
      break;
    }
  rs->nx--;
  return top[0];
}

/* The next node this thread runs, -1 when none: its stack's (rs_pop), but
 * an urgent node waiting in the shared queue goes before one that is not
 * urgent (the thread's stack does not hide the work another device waits
 * for). */
static int next_ready(run_state *st, ready_stack *rs) {
  int i = rs_pop(st, rs);
  if (i < 0 || st->run.e->nodes[i].urgent || !__atomic_load_n(&st->nurgent, __ATOMIC_RELAXED))
    return i;
  pthread_mutex_lock(&st->mu);
  int j = fifo_pop(&st->q[0]);
  __atomic_store_n(&st->nurgent, st->q[0].count, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&st->mu);
  if (j < 0) return i;
  /* i waits: for this thread (it cannot spill, it was just taken), or
   * for whichever pool thread is free first */
  if (st->run.e->pool_size > 1)
    schedule_shared(st, i);
  else
    rs_push(st, rs, i);
  return j;
}

static void process(run_state *st, int first, ready_stack *rs);
static void run_cheap_here(run_state *st, ready_stack *rs);
static const exec_propagator static_prop;

/* The last hold is gone and every node finished: leaves the watch, settles
 * the status and fetches, recycles st and calls done (st is gone then). */
static void finish_run(run_state *st) {
  gr_executor *e = st->run.e;
  gr_watch_detach_run(st->run.step->watch, &st->watch_run);
  gr_status s = st->status;
  gr_error err = {GR_OK, ""};
  if (s != GR_OK) {
    err = st->err;
  } else {
    for (int k = 0; k < e->num_fetches; k++)
      if (!st->run.fetch_out[k].buf) {
        s = gr_error_set(&err, GR_ERR_INTERNAL, "fetch %d produced no value", k);
        break;
      }
  }
  if (s != GR_OK) /* also the fetches filled before the missing one */
    for (int k = 0; k < e->num_fetches; k++) gr_tensor_release(&st->run.fetch_out[k]);
  gr_executor_done_fn done = st->done;
  void *arg = st->done_arg;
  release_state(e, st);
  done(arg, s, &err);
}

/* A thread or pool task is done with st; the last one finishes the run. Only
 * the end of the run needs to wake a waiting caller (new shared work wakes
 * it when pushed): waking it for every completion cost a futex round trip
 * per transfer. */
static void task_done(run_state *st) {
  pthread_mutex_lock(&st->mu);
  int left = --st->tasks;
  bool all_ran = __atomic_load_n(&st->remaining, __ATOMIC_ACQUIRE) == 0;
  bool finish = left == 0 && all_ran && !st->finished;
  if (finish) st->finished = true;
  if (left == 1 && all_ran && st->run.waiting) pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  if (finish) finish_run(st);
}

/* Runs what is in the shared queue on this thread until it is empty. */
static void drain_shared(run_state *st) {
  int local[256];
  ready_stack rs = {local, 0, 0, 256, 0};
  for (;;) {
    pthread_mutex_lock(&st->mu);
    int i = pop_shared_locked(st);
    pthread_mutex_unlock(&st->mu);
    if (i < 0) return;
    process(st, i, &rs);
  }
}

/* A completion's deferred share of a run without threads (gr_exec_defer). */
static void drain_deferred(void *arg) {
  run_state *st = arg;
  drain_shared(st);
  task_done(st);
}

static void drain_task(void *arg) {
  run_state *st = arg;
  pthread_mutex_lock(&st->mu);
  int i = pop_shared_locked(st);
  pthread_mutex_unlock(&st->mu);
  if (i >= 0) {
    int local[256];
    ready_stack rs = {local, 0, 0, 256, 0};
    process(st, i, &rs);
  }
  task_done(st);
}

static void schedule_shared(run_state *st, int i) {
  push_shared(st, i);
  if (st->run.e->pool_size > 0) gr_threadpool_schedule(st->run.e->pool, drain_task, st);
}

static void make_ready(run_state *st, int i, ready_stack *rs, int *inline_expensive) {
  exec_node *en = &st->run.e->nodes[i];
  if (en->expensive && st->run.e->pool_size > 0) {
    /* keep one expensive node for this thread (an urgent one if any:
     * another device waits for what it leads to), hand the others out */
    if (*inline_expensive < 0) {
      *inline_expensive = i;
      return;
    }
    if (en->urgent && !st->run.e->nodes[*inline_expensive].urgent) {
      int kept = *inline_expensive;
      *inline_expensive = i;
      i = kept;
    }
    schedule_shared(st, i);
    return;
  }
  rs_push(st, rs, i);
}

/* Adds ac to the live async invocations; false when out of memory. */
static bool track_async(run_state *st, async_ctx *ac) {
  pthread_mutex_lock(&st->mu);
  if (st->num_asyncs == st->cap_asyncs) {
    int cap = st->cap_asyncs ? st->cap_asyncs * 2 : 16;
    async_ctx **a = gr_realloc_array(st->asyncs, (size_t)cap, sizeof *a);
    if (!a) {
      pthread_mutex_unlock(&st->mu);
      return false;
    }
    st->asyncs = a;
    st->cap_asyncs = cap;
  }
  st->asyncs[st->num_asyncs++] = ac;
  pthread_mutex_unlock(&st->mu);
  return true;
}

/* Node finish: the core's (exec_node.h), with this path's propagator, whose
 * deliver and advance it then calls directly. */
static void finish_node(run_state *st, exec_call *c, gr_status s, gr_error *kerr, ready_stack *rs) {
  gr_exec_finish(&static_prop, &st->run, c, s, kerr, 0, false, rs);
}

static void finish_node_oom(run_state *st, exec_call *c, ready_stack *rs) {
  gr_error oom;
  gr_error_set_oom(&oom);
  finish_node(st, c, oom.code, &oom, rs);
}

static void start_node(run_state *st, int i, ready_stack *rs) {
  exec_node *en = &st->run.e->nodes[i];
  exec_call c = {.node = i,
                 .ins = st->slots + en->input_base,
                 .outs = st->outputs + en->output_base,
                 .start_ns = -1};
  if (gr_exec_feed(&st->run, &c) || __atomic_load_n(&st->run.cancelled, __ATOMIC_ACQUIRE)) {
    finish_node(st, &c, GR_OK, NULL, rs);
    return;
  }
  if (en->async) {
    async_ctx *ac = calloc(1, sizeof *ac);
    if (!ac) {
      finish_node_oom(st, &c, rs);
      return;
    }
    ac->a.run = &st->run;
    ac->a.call = c;
    if (!track_async(st, ac)) {
      free(ac);
      finish_node_oom(st, &c, rs);
      return;
    }
    gr_exec_start_async(&ac->a, false);
    return;
  }
  gr_error kerr;
  kerr.msg[0] = '\0';
  gr_kernel_ctx ctx;
  gr_status s = gr_exec_run_kernel(&st->run, &c, false, &kerr, &ctx);
  finish_node(st, &c, s, &kerr, rs);
}

static void static_done(exec_async *a, gr_status status) {
  run_state *st = (run_state *)a->run;
  pthread_mutex_lock(&st->mu);
  for (int k = 0; k < st->num_asyncs; k++)
    if (&st->asyncs[k]->a == a) {
      st->asyncs[k] = st->asyncs[--st->num_asyncs];
      break;
    }
  st->tasks++; /* keeps the run alive until this thread is done with it */
  pthread_mutex_unlock(&st->mu);
  int local[256];
  ready_stack rs = {local, 0, 0, 256, 0};
  exec_call c = a->call;
  gr_error err = a->err;
  if (status == GR_OK && a->ctx.dead) /* only the control-flow path carries deadness */
    status = gr_error_set(&err, GR_ERR_INTERNAL, "received a dead value outside control flow");
  free(a); /* the async_ctx */
  finish_node(st, &c, status, &err, &rs);
  /* A completion may arrive inside another executor's work on this thread (a
   * Send handing its value to a waiting Recv): run the ready nodes inline a
   * few levels deep, then hand them to this run's pool or waiting caller (or,
   * with neither, to this thread's outermost completion), so that a chain of
   * transfers cannot grow the stack without bound. Only cheap ones run here
   * when the run has threads of its own: this thread (a server's network
   * work, another device's executor) is not one of them, and a product run
   * on it would compete with them for the cores. */
  bool helpers = st->run.e->pool_size > 0 || st->run.waiting;
  switch (gr_exec_completion_where(&st->run, true)) {
    case GR_EXEC_HERE:
      gr_exec_done_depth++;
      if (helpers) run_cheap_here(st, &rs);
      for (int i; (i = rs_pop(st, &rs)) >= 0;) process(st, i, &rs);
      if (!helpers) drain_shared(st); /* what overflowed rs */
      gr_exec_done_depth--;
      break;
    case GR_EXEC_HELPERS:
      for (int i; (i = rs_pop(st, &rs)) >= 0;) schedule_shared(st, i);
      break;
    case GR_EXEC_DEFER:
      for (int i; (i = rs_pop(st, &rs)) >= 0;) push_shared(st, i);
      pthread_mutex_lock(&st->mu);
      st->tasks++;
      pthread_mutex_unlock(&st->mu);
      gr_exec_defer(drain_deferred, st);
      break;
  }
  task_done(st);
  if (gr_exec_done_depth == 0) gr_exec_run_deferred();
}

static void static_on_cancel(exec_async *a, void (*fn)(void *), void *arg) {
  async_ctx *ac = (async_ctx *)a;
  run_state *st = (run_state *)a->run;
  bool now = false;
  pthread_mutex_lock(&st->mu);
  if (__atomic_load_n(&st->run.cancelled, __ATOMIC_ACQUIRE))
    now = true;
  else
    ac->cancel = (cancel_entry){fn, arg, 1};
  pthread_mutex_unlock(&st->mu);
  if (now) fn(arg);
}

/* The propagator's deliver: each edge hands its output to a slot or a
 * fetch, the last one the reference itself. */
static inline void static_deliver(exec_run *run, exec_call *c, uint64_t dead_mask, bool dead) {
  (void)dead_mask, (void)dead; /* no deadness here: a failed node's outputs are empty */
  run_state *st = (run_state *)run;
  gr_executor *e = run->e;
  exec_node *en = &e->nodes[c->node];
  for (int k = en->edge_begin; k < en->edge_end; k++) {
    const exec_edge *ed = &e->edges[k];
    gr_tensor *o = &c->outs[ed->src_output];
    gr_tensor *dst = ed->dst >= 0 ? &st->slots[ed->dst_slot] : &run->fetch_out[ed->dst_slot];
    if (ed->move) {
      *dst = *o;
      o->buf = NULL;
    } else {
      gr_tensor_ref(dst, o);
    }
  }
}

/* The propagator's advance: counts down the successors (after the node's
 * slots are released: a successor at zero may end the run) and makes the
 * ready ones ready on this thread's stack (sched). */
static inline void static_advance(exec_run *run, exec_call *c, void *sched) {
  run_state *st = (run_state *)run;
  ready_stack *rs = sched;
  gr_executor *e = run->e;
  exec_node *en = &e->nodes[c->node];
  int inline_expensive = -1;
  for (int k = en->edge_begin; k < en->edge_end; k++) {
    int d = e->edges[k].dst;
    if (d >= 0 && __atomic_sub_fetch(&st->pending[d], 1, __ATOMIC_ACQ_REL) == 0)
      make_ready(st, d, rs, &inline_expensive);
  }
  for (int k = en->ctrl_begin; k < en->ctrl_end; k++) {
    int d = e->ctrl_dsts[k];
    if (__atomic_sub_fetch(&st->pending[d], 1, __ATOMIC_ACQ_REL) == 0)
      make_ready(st, d, rs, &inline_expensive);
  }
  if (inline_expensive >= 0) rs_push(st, rs, inline_expensive);
  if (__atomic_sub_fetch(&st->remaining, 1, __ATOMIC_ACQ_REL) == 0) {
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
  }
}

static const exec_propagator static_prop = {static_fail, static_deliver, static_advance,
                                            static_done, static_on_cancel};

static void process(run_state *st, int first, ready_stack *rs) {
  start_node(st, first, rs);
  for (int i; (i = next_ready(st, rs)) >= 0;) start_node(st, i, rs);
}

/* From a completion or the caller of an asynchronous run: the ready cheap
 * nodes run here, and the expensive ones go to the run's pool (or its
 * waiting caller). A product run here would compete with the run's
 * inter-op threads for the cores: a server task with one inter-op thread
 * ran two products at once, one on a thread that had only delivered a
 * tensor. On a thread that is not the run's own (a server's network
 * thread), only light nodes run: a copy of unknown or large size (a ring's
 * piece put in place, a concatenation) would hold up every connection. */
static void run_cheap_here(run_state *st, ready_stack *rs) {
  bool own = gr_exec_run_own_thread(&st->run);
  while (rs->n > 0) {
    int i = rs->v[--rs->n];
    if (own || st->run.e->nodes[i].light)
      start_node(st, i, rs);
    else
      schedule_shared(st, i);
  }
  for (int i; (i = rs_pop(st, rs)) >= 0;) schedule_shared(st, i);
}

/* The static path's run: the calling thread holds the run, starts the roots
 * and drains the shared queue; then it lets go (wait false) or goes on
 * helping until only its own hold is left and finishes the run (wait true). */
void gr_exec_static_start(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                          const gr_step_info *step, gr_executor_done_fn done, void *arg,
                          bool wait) {
  run_state *st = acquire_state(e);
  if (!st) {
    gr_error oom;
    done(arg, gr_error_set_oom(&oom), &oom);
    return;
  }
  memcpy(st->pending, st->pending0, sizeof(int) * (size_t)e->num_nodes);
  st->run.prop = &static_prop;
  st->run.feeds = feed_values;
  st->run.fetch_out = fetch_out;
  st->run.step = step;
  st->remaining = e->num_nodes;
  st->run.cancelled = 0;
  st->status = GR_OK;
  st->tasks = 1; /* this thread's hold */
  st->run.waiting = wait;
  st->run.caller = pthread_self();
  st->finished = false;
  st->done = done;
  st->done_arg = arg;
  st->q[0].head = st->q[0].count = st->q[1].head = st->q[1].count = st->nurgent = 0;
  st->num_asyncs = 0;
  st->watch_run = (gr_watch_run){.cancel = watchdog_cancel, .release = watchdog_release, .arg = st};
  gr_watch_attach_run(step->watch, &st->watch_run);

  ready_stack rs = {st->stack, 0, 0, e->num_nodes + 1, 0};
  if (e->num_nodes > 0) {
    for (int r = e->num_roots - 1; r >= 0; r--) {
      int i = e->roots[r];
      if (e->nodes[i].async) continue;
      if (e->nodes[i].expensive && e->pool_size > 0 && r > 0)
        schedule_shared(st, i);
      else
        rs_push(st, &rs, i);
    }
    /* async roots (receives) on top: they start at once and wait without a
     * thread, so their values can arrive while the rest runs */
    for (int r = e->num_roots - 1; r >= 0; r--)
      if (e->nodes[e->roots[r]].async) rs_push(st, &rs, e->roots[r]);
    bool foreign = !wait && e->pool_size > 0; /* the pool runs the step */
    if (foreign) run_cheap_here(st, &rs);
    for (int i; (i = next_ready(st, &rs)) >= 0;) start_node(st, i, &rs);
    /* help drain the shared queue; a waiting caller then waits for pool
     * tasks and async kernels (and drains what they queue) */
    pthread_mutex_lock(&st->mu);
    for (; !foreign;) {
      int i = pop_shared_locked(st);
      if (i >= 0) {
        pthread_mutex_unlock(&st->mu);
        process(st, i, &rs);
        pthread_mutex_lock(&st->mu);
        continue;
      }
      if (!wait || (__atomic_load_n(&st->remaining, __ATOMIC_ACQUIRE) == 0 && st->tasks == 1))
        break;
      pthread_cond_wait(&st->cv, &st->mu);
    }
    pthread_mutex_unlock(&st->mu);
  }
  task_done(st); /* with wait, the last hold: the run finishes here */
}
