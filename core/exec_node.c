/* The executor's node core (exec_node.h): node start and node finish for
 * both run paths, and async completions dispatched to the path's
 * propagator. It calls no run path but through the propagator. */
#include "core/exec_node.h"
#include "core/gr_trace.h"

#include <stdio.h>

void gr_kernel_done(gr_kernel_ctx *ctx, gr_status status) {
  exec_async *a = ctx->exec_private;
  GR_ASSERT(a != NULL);
  gr_watch_end_wait(a->run->step->watch, &a->wait);
  a->run->prop->done(a, status);
}

void gr_kernel_on_cancel(gr_kernel_ctx *ctx, void (*fn)(void *), void *arg) {
  exec_async *a = ctx->exec_private;
  GR_ASSERT(a != NULL);
  a->run->prop->on_cancel(a, fn, arg);
}

/* ---- node start ---------------------------------------------------------- */

bool gr_exec_feed(exec_run *run, exec_call *c) {
  int f = run->e->nodes[c->node].feed_index;
  if (f < 0) return false;
  gr_tensor_ref(&c->outs[0], &run->feeds[f]);
  return true;
}

static gr_kernel_ctx kernel_ctx(exec_run *run, const exec_call *c, bool dead, gr_error *err,
                                void *exec_private) {
  gr_executor *e = run->e;
  const exec_node *en = &e->nodes[c->node];
  return (gr_kernel_ctx){.node = en->node,
                         .dead = dead,
                         .num_inputs = en->num_inputs,
                         .inputs = c->ins,
                         .num_outputs = en->num_outputs,
                         .outputs = c->outs,
                         .step = run->step,
                         .state = &e->states[c->node],
                         .err = err,
                         .frame_name = c->frame_name,
                         .frame_parent_len = c->frame_parent_len,
                         .iteration = c->iteration,
                         .pool = e->pool,
                         .exec_private = exec_private};
}

gr_status gr_exec_run_kernel(exec_run *run, exec_call *c, bool dead, gr_error *kerr,
                             gr_kernel_ctx *ctx) {
  *ctx = kernel_ctx(run, c, dead, kerr, NULL);
  if (run->step->trace) c->start_ns = gr_trace_now_ns();
  gr_watch_begin_kernel(run->step->watch);
  gr_status s = run->e->nodes[c->node].kernel(ctx);
  gr_watch_end_kernel(run->step->watch);
  return s;
}

void gr_exec_start_async(exec_async *a, bool dead) {
  exec_run *run = a->run;
  exec_call *c = &a->call;
  const exec_node *en = &run->e->nodes[c->node];
  a->ctx = kernel_ctx(run, c, dead, &a->err, a);
  if (run->step->trace) c->start_ns = gr_trace_now_ns();
  gr_watch_begin_wait(run->step->watch, &a->wait, en->node, c->frame_name ? c->frame_name : "",
                      c->iteration);
  gr_status s = en->kernel(&a->ctx);
  if (s != GR_OK) gr_kernel_done(&a->ctx, s); /* failed to start: callback not fired */
}

/* ---- node finish --------------------------------------------------------- */

static gr_status check_outputs(const exec_node *en, const gr_tensor *outs, uint64_t dead_mask,
                               gr_error *kerr) {
  for (int k = 0; k < en->num_outputs; k++) {
    if (!((dead_mask >> (k & 63)) & 1) && !outs[k].buf)
      return gr_error_set(kerr, GR_ERR_INTERNAL, "kernel produced no output %d", k);
    if (outs[k].buf && outs[k].dtype != en->node->out_dtypes[k])
      return gr_error_set(kerr, GR_ERR_INTERNAL, "kernel produced %s for output %d, declared %s",
                          gr_dtype_name(outs[k].dtype), k, gr_dtype_name(en->node->out_dtypes[k]));
  }
  return GR_OK;
}

/* The run's error for node c failing with code (kerr's message): the
 * node's source position, name and op, and its loop and iteration. */
static void node_error(gr_error *why, const exec_node *en, const exec_call *c, gr_status code,
                       const gr_error *kerr) {
  const gr_node *n = en->node;
  const char *msg = kerr && kerr->msg[0] ? kerr->msg : gr_status_name(code);
  why->code = code;
  if (!n) {
    snprintf(why->msg, sizeof why->msg, "%s", msg);
    return;
  }
  char loop[sizeof why->msg] = "";
  if (c->loop)
    snprintf(loop, sizeof loop, " in loop '%s' iteration %lld", c->loop, (long long)c->iteration);
  snprintf(why->msg, sizeof why->msg, "%s%snode '%s' (op %s)%s: %s",
           n->source_loc ? n->source_loc : "", n->source_loc ? ": " : "", n->name, n->op->name,
           loop, msg);
}

void gr_exec_finish(exec_run *run, exec_call *c, gr_status s, gr_error *kerr, uint64_t dead_mask,
                    bool dead, void *sched) {
  const exec_node *en = &run->e->nodes[c->node];
  if (s == GR_OK && !dead && en->node && !__atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE))
    s = check_outputs(en, c->outs, dead_mask, kerr);
  if (s == GR_OK && c->start_ns >= 0 && run->step->trace &&
      !__atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE))
    gr_exec_trace(run->step, en->node, c->iteration, c->start_ns, c->outs,
                  dead ? 0 : en->num_outputs);
  if (s != GR_OK) {
    gr_error why;
    node_error(&why, en, c, s, kerr);
    run->prop->fail(run, &why);
    if (c->outs)
      for (int k = 0; k < en->num_outputs; k++) gr_tensor_release(&c->outs[k]);
    dead = true;
  }
  run->prop->deliver(run, c, dead_mask, dead);
  if (c->outs)
    for (int k = 0; k < en->num_outputs; k++)
      if (c->outs[k].buf) gr_tensor_release(&c->outs[k]);
  if (c->ins)
    for (int k = 0; k < en->num_inputs; k++)
      if (c->ins[k].buf) gr_tensor_release(&c->ins[k]);
  run->prop->advance(run, c, sched);
}

gr_exec_where gr_exec_completion_where(const exec_run *run, bool may_run_here) {
  if (may_run_here && gr_exec_done_depth < GR_DONE_INLINE_DEPTH) return GR_EXEC_HERE;
  if (run->e->pool_size > 0 || run->waiting) return GR_EXEC_HELPERS;
  return GR_EXEC_DEFER;
}
