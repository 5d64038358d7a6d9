/* The executor's node core (core/exec_node.c) on both run paths: a kernel
 * that leaves an output out, one that produces the wrong dtype (run
 * synchronously, or async and completed at once), and one that fails
 * without a message give the same error on the static path and inside a
 * loop, where it also names the loop and the iteration; with 1 and with 2
 * inter-op threads. */
#include <graphrun.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static gr_status no_output_kernel(gr_kernel_ctx *ctx) {
  (void)ctx;
  return GR_OK;
}

static gr_status wrong_dtype_kernel(gr_kernel_ctx *ctx) {
  gr_tensor t = gr_tensor_scalar_i32(7);
  gr_kernel_set_output(ctx, 0, &t);
  gr_tensor_release(&t);
  return GR_OK;
}

static gr_status wrong_dtype_async_kernel(gr_kernel_ctx *ctx) {
  wrong_dtype_kernel(ctx);
  gr_kernel_done(ctx, GR_OK);
  return GR_OK;
}

static gr_status silent_kernel(gr_kernel_ctx *ctx) {
  (void)ctx;
  return GR_ERR_ABORTED; /* no message */
}

static const gr_op_def ops[] = {
    GT_UNARY_OP_DEF("test_no_output", no_output_kernel, NULL, 0, 0),
    GT_UNARY_OP_DEF("test_wrong_dtype", wrong_dtype_kernel, NULL, 0, 0),
    GT_UNARY_OP_DEF("test_wrong_dtype_async", wrong_dtype_async_kernel, NULL, 0, GR_OP_ASYNC),
    GT_UNARY_OP_DEF("test_silent", silent_kernel, NULL, 0, 0),
};

typedef struct bad_op {
  const char *op;
  gr_status code;
  const char *says; /* after "(op NAME)[ in loop 'L' iteration 0]: " */
} bad_op;

static const bad_op bad_ops[] = {
    {"test_no_output", GR_ERR_INTERNAL, "kernel produced no output 0"},
    {"test_wrong_dtype", GR_ERR_INTERNAL, "kernel produced i32 for output 0, declared f32"},
    {"test_wrong_dtype_async", GR_ERR_INTERNAL, "kernel produced i32 for output 0, declared f32"},
    {"test_silent", GR_ERR_ABORTED, NULL /* the status's name */},
};

static const char *body_op;

static gr_output loop_cond(gr_graph *g, void *arg, const gr_output *v) {
  (void)arg;
  return gr_less(g, v[1], gr_const_f32(g, 3));
}
static void loop_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, gr_op(g, body_op, "bad", &v[0], 1, NULL, 0), gr_const_f32(g, 1));
  next[1] = gr_add(g, v[1], gr_const_f32(g, 1));
}

/* Runs x -> op -> +1 (in_loop: the same in a while loop's body) with x fed;
 * returns the status and the error. */
static gr_status run_once(const char *op, bool in_loop, int threads, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y;
  if (in_loop) {
    body_op = op;
    gr_output vars[2] = {x, gr_const_f32(g, 0)};
    gr_while_loop(g, loop_cond, loop_body, NULL, 2, vars, 0);
    y = vars[0];
  } else {
    y = gr_add(g, gr_op(g, op, "bad", &x, 1, NULL, 0), gr_const_f32(g, 1));
  }
  gr_session_options opts = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &opts, err);
  GR_CHECK(s != NULL);
  gr_status st = err->code;
  if (s) {
    gr_tensor v = gr_tensor_scalar_f32(2), out = gr_tensor_empty();
    gr_feed feed = {x, &v};
    st = gr_session_run(s, &feed, 1, &y, 1, &out, NULL, 0, err);
    GR_CHECK(out.buf == NULL);
    gr_tensor_release(&out);
    gr_tensor_release(&v);
    gr_session_free(s);
  }
  gr_graph_free(g);
  return st;
}

static void test_same_errors_on_both_paths(void) {
  for (size_t k = 0; k < sizeof bad_ops / sizeof bad_ops[0]; k++)
    for (int threads = 1; threads <= 2; threads++)
      for (int in_loop = 0; in_loop <= 1; in_loop++) {
        const bad_op *b = &bad_ops[k];
        gr_error err = {GR_OK, ""};
        gr_status st = run_once(b->op, in_loop, threads, &err);
        GR_CHECK_MSG(st == b->code, "%s (loop %d, %d threads): %s: %s", b->op, in_loop, threads,
                     gr_status_name(st), err.msg);
        char head[128], tail[256];
        snprintf(head, sizeof head, "(op %s)%s", b->op, in_loop ? " in loop '" : ": ");
        snprintf(tail, sizeof tail, "%s%s", in_loop ? "' iteration 0: " : "",
                 b->says ? b->says : gr_status_name(b->code));
        GR_CHECK_STR_CONTAINS(err.msg, "bad' ");
        GR_CHECK_STR_CONTAINS(err.msg, head);
        GR_CHECK_STR_CONTAINS(err.msg, tail);
      }
}

int main(void) {
  gr_error err;
  gr_ops_register_all();
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    GR_CHECK_OK(gr_op_registry_add(&ops[k], &err), err);
  GR_RUN(test_same_errors_on_both_paths);
  return gr_test_finish();
}
