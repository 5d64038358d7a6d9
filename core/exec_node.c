/* The executor's node core (exec_node.h), its out-of-line parts: async
 * kernels started and their completions dispatched to the path's
 * propagator, a failed node's error, where a completion runs what it made
 * ready. Node start and finish themselves are inline in exec_node.h. It
 * calls no run path but through the propagator. */
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

/* ---- node start and finish: the cold parts ------------------------------- */

void gr_exec_start_async(exec_async *a, bool dead) {
  exec_run *run = a->run;
  exec_call *c = &a->call;
  const exec_node *en = &run->e->nodes[c->node];
  gr_exec_kernel_ctx(&a->ctx, run, c, dead, &a->err, a);
  if (run->step->trace) c->start_ns = gr_trace_now_ns();
  gr_watch_begin_wait(run->step->watch, &a->wait, en->node, c->frame_name ? c->frame_name : "",
                      c->iteration);
  gr_status s = en->kernel(&a->ctx);
  if (s != GR_OK) gr_kernel_done(&a->ctx, s); /* failed to start: callback not fired */
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

void gr_exec_node_failed(exec_run *run, exec_call *c, gr_status code, const gr_error *kerr) {
  const exec_node *en = &run->e->nodes[c->node];
  gr_error why;
  node_error(&why, en, c, code, kerr);
  run->prop->fail(run, &why);
  if (c->outs)
    for (int k = 0; k < en->num_outputs; k++) gr_tensor_release(&c->outs[k]);
}

gr_exec_where gr_exec_completion_where(const exec_run *run, bool may_run_here) {
  if (may_run_here && gr_exec_done_depth < GR_DONE_INLINE_DEPTH) return GR_EXEC_HERE;
  if (run->e->pool_size > 0 || run->waiting) return GR_EXEC_HELPERS;
  return GR_EXEC_DEFER;
}
