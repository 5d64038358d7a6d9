/* The executor's node core (core/exec_node.h, core/exec_node.c) on both
 * run paths: a kernel that leaves an output out, one that produces the
 * wrong dtype (run synchronously, or async and completed at once), and one
 * that fails without a message give the same error on the static path and
 * inside a loop, where it also names the loop and the iteration; and the
 * kernel context the core fills in (set field by field) holds the node,
 * its inputs, its loop's frame and iteration, and nothing left over; with
 * 1 and with 2 inter-op threads. */
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

/* What a probe kernel saw of its context, one record per call. */
typedef struct probe_call {
  bool named, one_in_one_out, input_set, output_empty, step, state, err, dead_outputs, dead;
  bool in_frame; /* frame_name non-empty */
  int frame_parent_len;
  int64_t iteration;
  float input;
  bool exec_private;
} probe_call;

static probe_call probe_calls[8];
static int probe_ncalls;

static gr_status probe_kernel(gr_kernel_ctx *ctx) {
  if (probe_ncalls < 8) {
    probe_calls[probe_ncalls++] = (probe_call){
        .named = ctx->node && strstr(ctx->node->name, "probe") != NULL,
        .one_in_one_out = ctx->num_inputs == 1 && ctx->num_outputs == 1,
        .input_set = ctx->inputs[0].buf != NULL && ctx->inputs[0].dtype == GR_F32,
        .output_empty = ctx->outputs[0].buf == NULL,
        .step = ctx->step != NULL,
        .state = ctx->state != NULL,
        .err = ctx->err != NULL,
        .dead_outputs = ctx->dead_outputs != 0,
        .dead = ctx->dead,
        .in_frame = ctx->frame_name && ctx->frame_name[0],
        .frame_parent_len = ctx->frame_parent_len,
        .iteration = ctx->iteration,
        .input = ctx->inputs[0].buf ? (float)gr_tensor_get_f64(&ctx->inputs[0], 0) : -1,
        .exec_private = ctx->exec_private != NULL};
  }
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

static gr_status probe_async_kernel(gr_kernel_ctx *ctx) {
  probe_kernel(ctx);
  gr_kernel_done(ctx, GR_OK);
  return GR_OK;
}

static const gr_op_def ops[] = {
    GT_UNARY_OP_DEF("test_probe", probe_kernel, NULL, 0, 0),
    GT_UNARY_OP_DEF("test_probe_async", probe_async_kernel, NULL, 0, GR_OP_ASYNC),
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
static const char *body_name = "bad";

static gr_output loop_cond(gr_graph *g, void *arg, const gr_output *v) {
  (void)arg;
  return gr_less(g, v[1], gr_const_f32(g, 3));
}
static void loop_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, gr_op(g, body_op, body_name, &v[0], 1, NULL, 0), gr_const_f32(g, 1));
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

/* Runs x -> probe -> +1 (in_loop: in a while loop's body, 3 iterations)
 * with x = 2 fed; returns the output (-1 on an error). */
static float run_probe(const char *op, bool in_loop, int threads) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y;
  if (in_loop) {
    body_op = op;
    body_name = "probe";
    gr_output vars[2] = {x, gr_const_f32(g, 0)};
    gr_while_loop(g, loop_cond, loop_body, NULL, 2, vars, 0);
    body_name = "bad";
    y = vars[0];
  } else {
    y = gr_add(g, gr_op(g, op, "probe", &x, 1, NULL, 0), gr_const_f32(g, 1));
  }
  gr_error err;
  gr_session_options opts = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &opts, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  float got = -1;
  if (s) {
    gr_tensor v = gr_tensor_scalar_f32(2), out = gr_tensor_empty();
    gr_feed feed = {x, &v};
    gr_status st = gr_session_run(s, &feed, 1, &y, 1, &out, NULL, 0, &err);
    GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
    if (st == GR_OK) got = (float)gr_tensor_get_f64(&out, 0);
    gr_tensor_release(&out);
    gr_tensor_release(&v);
    gr_session_free(s);
  }
  gr_graph_free(g);
  return got;
}

/* The kernel context on both paths, for a kernel run on this thread and an
 * async one: every field the core sets, per call. */
static void test_kernel_ctx_on_both_paths(void) {
  static const char *probe_ops[] = {"test_probe", "test_probe_async"};
  for (int async = 0; async <= 1; async++)
    for (int threads = 1; threads <= 2; threads++)
      for (int in_loop = 0; in_loop <= 1; in_loop++) {
        probe_ncalls = 0;
        float got = run_probe(probe_ops[async], in_loop, threads);
        int calls = in_loop ? 3 : 1;
        GR_CHECK_MSG(got == (in_loop ? 5 : 3), "%s (loop %d, %d threads): %g", probe_ops[async],
                     in_loop, threads, got);
        GR_CHECK_MSG(probe_ncalls == calls, "%s (loop %d, %d threads): %d calls", probe_ops[async],
                     in_loop, threads, probe_ncalls);
        for (int k = 0; k < probe_ncalls && k < calls; k++) {
          const probe_call *p = &probe_calls[k];
          GR_CHECK(p->named && p->one_in_one_out && p->input_set && p->output_empty);
          GR_CHECK(p->step && p->state && p->err);
          GR_CHECK(!p->dead_outputs && !p->dead);
          GR_CHECK(p->exec_private == (async == 1));
          GR_CHECK(p->frame_parent_len == 0);
          GR_CHECK(p->in_frame == (in_loop == 1));
          GR_CHECK_MSG(p->iteration == k, "call %d: iteration %lld", k, (long long)p->iteration);
          GR_CHECK_MSG(p->input == 2 + k, "call %d: input %g", k, p->input);
        }
      }
}

int main(void) {
  gr_error err;
  gr_ops_register_all();
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    GR_CHECK_OK(gr_op_registry_add(&ops[k], &err), err);
  GR_RUN(test_same_errors_on_both_paths);
  GR_RUN(test_kernel_ctx_on_both_paths);
  return gr_test_finish();
}
