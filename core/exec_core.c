/* The executor's core, under both run paths (the static one, executor.c,
 * and the control-flow one, executor_cf.c), besides node start and finish
 * (exec_node.h, exec_node.c): deferred completions, trace events and the kernel-context
 * helpers. The own-thread rule is gr_exec_own_thread (executor_internal.h).
 * Nothing here knows either run path. */
#include "core/executor_internal.h"
#include "core/executor.h"
#include "core/gr_trace.h"

#include <stdarg.h>
#include <stdlib.h>

_Thread_local int gr_exec_done_depth;

void gr_exec_trace(const gr_step_info *step, const gr_node *n, int64_t iteration, int64_t start_ns,
                   const gr_tensor *outs, int nout) {
  gr_trace_event ev = {n, iteration, start_ns, gr_trace_now_ns(), 0};
  for (int k = 0; k < nout; k++)
    if (outs[k].buf) ev.out_bytes += (int64_t)gr_tensor_num_bytes(&outs[k]);
  gr_step_trace_add(step->trace, &ev);
}

/* ---- deferred completions ------------------------------------------------------------ */

typedef struct deferred_work {
  void (*fn)(void *);
  void *arg;
  struct deferred_work *next;
} deferred_work;

static _Thread_local deferred_work *deferred_head, *deferred_tail;

void gr_exec_defer(void (*fn)(void *), void *arg) {
  deferred_work *w = malloc(sizeof *w);
  GR_ASSERT(w != NULL);
  *w = (deferred_work){fn, arg, NULL};
  if (deferred_tail)
    deferred_tail->next = w;
  else
    deferred_head = w;
  deferred_tail = w;
}

void gr_exec_run_deferred(void) {
  GR_ASSERT(gr_exec_done_depth == 0);
  while (deferred_head) {
    deferred_work *w = deferred_head;
    deferred_head = w->next;
    if (!deferred_head) deferred_tail = NULL;
    gr_exec_done_depth = 1; /* as inside a completion: deeper ones defer again */
    w->fn(w->arg);
    gr_exec_done_depth = 0;
    free(w);
  }
}

/* ---- kernel context helpers ---------------------------------------------- */

gr_status gr_kernel_alloc_output(gr_kernel_ctx *ctx, int i, gr_dtype dtype, const gr_shape *shape,
                                 gr_tensor **out) {
  GR_ASSERT(i >= 0 && i < ctx->num_outputs);
  gr_tensor *t = &ctx->outputs[i];
  gr_tensor_release(t);
  gr_status s = gr_tensor_alloc(t, dtype, shape, ctx->err);
  *out = t;
  return s;
}

gr_status gr_kernel_forward_or_alloc(gr_kernel_ctx *ctx, int in, int i, gr_dtype dtype,
                                     const gr_shape *shape, gr_tensor **out) {
  GR_ASSERT(in >= 0 && in < ctx->num_inputs && i >= 0 && i < ctx->num_outputs);
  gr_tensor *src = &ctx->inputs[in];
  int64_t n = gr_shape_num_elements(shape);
  if (gr_tensor_is_unique(src) && n >= 0 &&
      (size_t)n * gr_dtype_size(dtype) <= src->buf->capacity &&
      gr_dtype_size(dtype) == gr_dtype_size(src->dtype)) {
    gr_tensor *t = &ctx->outputs[i];
    gr_tensor_release(t);
    gr_tensor_ref(t, src); /* the slot's reference is dropped after the kernel */
    t->dtype = dtype;
    t->shape = *shape;
    *out = t;
    return GR_OK;
  }
  return gr_kernel_alloc_output(ctx, i, dtype, shape, out);
}

void gr_kernel_set_output(gr_kernel_ctx *ctx, int i, const gr_tensor *t) {
  GR_ASSERT(i >= 0 && i < ctx->num_outputs);
  gr_tensor_release(&ctx->outputs[i]);
  gr_tensor_ref(&ctx->outputs[i], t);
}

gr_status gr_kernel_error(gr_kernel_ctx *ctx, gr_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gr_error_setv(ctx->err, code, fmt, ap);
  va_end(ap);
  return code;
}
