/* Helpers for op tests: random tensors, running one op on given inputs, and
 * comparing with a plain double-precision reference. */
#ifndef GR_TEST_UTIL_H
#define GR_TEST_UTIL_H

#include <graphrun.h>
#include <stdbool.h>
#include <stdint.h>

/* Deterministic test RNG (splitmix64). */
typedef struct gt_rng {
  uint64_t s;
} gt_rng;
uint64_t gt_next(gt_rng *r);
double gt_uniform(gt_rng *r, double lo, double hi);
int64_t gt_int(gt_rng *r, int64_t lo, int64_t hi); /* inclusive */
/* A random shape of the given rank with dims in [1, max_dim]. */
gr_shape gt_random_shape(gt_rng *r, int rank, int max_dim);

/* A tensor with uniform values in [lo, hi] (integers rounded; bool: random). */
gr_tensor gt_random(gt_rng *r, gr_dtype dtype, gr_shape shape, double lo, double hi);
/* A tensor from doubles (converted to dtype). */
gr_tensor gt_make(gr_dtype dtype, gr_shape shape, const double *values);
/* A tensor of the given shape and dtype, values uninitialised→zero. */
gr_tensor gt_zeros(gr_dtype dtype, gr_shape shape);

/* Builds a graph with one placeholder per input (fed with inputs[i]) and one
 * node of op `op` with the attrs, runs it and returns its outputs (each holds
 * a reference). Returns the build or run status; err gets the message. */
gr_status gt_run_op(const char *op, const gr_tensor *inputs, int n, const gr_attr *attrs, int na,
                    gr_tensor *outs, int nout, gr_error *err);

/* |a - b| <= atol + rtol * |b| elementwise, same dtype and shape. On
 * mismatch prints where and returns false. */
bool gt_near(const gr_tensor *got, const gr_tensor *want, double rtol, double atol);
/* Same shape, every element equal (as doubles). */
bool gt_equal(const gr_tensor *got, const gr_tensor *want);

/* Integer element i of t, exact for i64 (bool, u8, i32 through
 * gr_tensor_get_f64; 0 for float dtypes). */
int64_t gt_get_int(const gr_tensor *t, int64_t i);
/* Stores v truncated to t's integer dtype (two's complement wrap; bool: the
 * low bit); float dtypes are left alone. */
void gt_set_wrapped(gr_tensor *t, int64_t i, uint64_t v);

/* gt_run_op with one input and one output: *out is cleared (then holds the
 * result when GR_OK) and err cleared first. */
gr_status gt_run1(const char *op, const gr_tensor *x, const gr_attr *a, int na, gr_tensor *out,
                  gr_error *err);
/* Like gt_run1, but the placeholder has unknown dims (rank_known) or unknown
 * rank, so only the kernel sees the shape. */
gr_status gt_run1_unknown(const char *op, const gr_tensor *x, bool rank_known, const gr_attr *a,
                          int na, gr_tensor *out, gr_error *err);
/* Runs op on n (<= 16) inputs fed through placeholders of shapes ph (NULL:
 * the inputs' own shapes); the first `fresh` inputs are first copied in the
 * graph (x + 0, or x or false for bool), so the op receives a buffer it
 * holds alone and may run in place. *out receives output 0 (release it);
 * *inferred (if not NULL) the shape inference result. Returns the build or
 * run status. */
gr_status gt_run_op_fresh(const char *op, const gr_tensor *in, int n, const gr_shape *ph,
                          const gr_attr *at, int na, int fresh, gr_tensor *out, gr_shape *inferred,
                          gr_error *err);
/* Runs the fetches of g on a plain session (gr_session_new with no
 * options) and frees it; outs: one per fetch (each holds a reference). */
gr_status gt_run_graph(gr_graph *g, const gr_output *fetches, int n, gr_tensor *outs,
                       gr_error *err);
/* Whether gt_run_op_fresh (no fresh copies) fails with code and a message
 * naming the node (and containing sub, if not NULL); prints why not. */
bool gt_op_fails(const char *op, const gr_tensor *in, int n, const gr_shape *ph, const gr_attr *at,
                 int na, gr_status code, const char *sub);

/* A test-only op definition of one input and one output of the input's
 * shape: static const gr_op_def op = GT_UNARY_OP_DEF("test_x", kernel,
 * attrs, num_attrs, flags); (attrs may be NULL with 0). */
#define GT_UNARY_OP_DEF(op_name, op_kernel, op_attrs, op_num_attrs, op_flags)                      \
  {                                                                                                \
    .name = (op_name), .min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .attrs = (op_attrs),    \
    .num_attrs = (op_num_attrs), .shape_fn = gr_shape_fn_unchanged, .kernel = (op_kernel),         \
    .flags = (op_flags)                                                                            \
  }
/* An async kernel that never completes on its own: only cancellation ends
 * it (with GR_ERR_CANCELLED). gt_block_started counts the calls since
 * gt_block_reset. */
gr_status gt_block_kernel(gr_kernel_ctx *ctx);
int gt_block_started(void);
void gt_block_reset(void);

/* Whether building o failed with code and a message naming the node and
 * containing text (prints why not); clears the graph's error. */
bool gt_build_failed(gr_output o, gr_graph *g, gr_status code, const char *text);
/* Whether node output o exists with dtype dt and inferred shape want
 * (prints the difference). */
bool gt_inferred(gr_output o, gr_dtype dt, gr_shape want);
/* A random shape of the given rank with dims in [lo, hi]. */
gr_shape gt_shape_in(gt_rng *r, int rank, int64_t lo, int64_t hi);
/* "dir/name" in one of 8 static buffers used in turn (valid until 8 more calls). */
const char *gt_path_in(const char *dir, const char *name);

/* Resident memory of this process in KiB (from /proc/self/statm; 0 if unknown). */
long gt_rss_kib(void);

/* A gauge of how many test kernels run at once: call enter/leave around the
 * work; gt_gauge_max gives the most seen since gt_gauge_reset. */
void gt_gauge_reset(void);
void gt_gauge_enter(void);
void gt_gauge_leave(void);
int gt_gauge_max(void);
/* "test_busy": an expensive unary op whose kernel sleeps 20 ms inside the
 * gauge and passes its input on (register it with gr_op_registry_add). */
extern const gr_op_def gt_busy_op;

/* The spec gt_pin pushes for device k: a printf format of one int (NULL:
 * "/device:CPU:%d"; a cluster test: "/job:worker/task:%d"). */
void gt_set_pin_format(const char *fmt);
/* Multi-device tests: nodes built until gr_graph_pop_device_scope go to
 * /device:CPU:k; a session with that many local devices and threads and a
 * 60 s step timeout, so a deadlock fails the test instead of hanging it (the
 * test fails if the session cannot be made). */
void gt_pin(gr_graph *g, int k);
/* The full name of local device k (k < 8): /job:localhost/replica:0/task:0/device:CPU:k. */
const char *gt_device_name(int k);
gr_session *gt_session(gr_graph *g, int devices, int threads);
/* Assigns node i without a device request to local device i mod devices
 * (round robin, so loops and conds cross devices everywhere). */
void gt_spread(gr_graph *g, int devices);
/* Runs the fetches of g on a session of `devices` local devices (gt_session,
 * 2 threads), the nodes spread round robin first when devices > 1. outs:
 * one per fetch (each holds a reference). *sends (if not NULL): the tensors,
 * dead values and tokens the step sent between devices, so a test can tell
 * that its run really crossed devices. false, with the message printed,
 * when the run fails. */
bool gt_run_on(gr_graph *g, int devices, const gr_feed *feeds, int nf, const gr_output *fetches,
               int n, gr_tensor *outs, int64_t *sends);
/* Same dtype, shape and bytes (a NaN equals only a NaN of the same bits);
 * on a difference prints the first one and returns false. */
bool gt_bit_equal(const gr_tensor *got, const gr_tensor *want);

/* CLI tests: runs `graphrun ARGS` (the binary of this build: build/graphrun)
 * in dir, its stdout and stderr into out (at most cap - 1 bytes, NUL
 * terminated); returns its exit code, -1 when it did not exit. */
int gt_cli_run(const char *dir, const char *args, char *out, size_t cap);
/* gt_cli_run, then whether `graphrun ARGS` exited with code and (want not
 * NULL) its output holds want; prints what differs. */
bool gt_cli_expect(const char *dir, const char *args, int code, const char *want, char *out,
                   size_t cap);
/* Writes text to dir/name (aborts the test when it cannot). */
void gt_write_file(const char *dir, const char *name, const char *text);
/* The whole file at path, NUL-terminated (free() it); NULL when it cannot be
 * read. */
char *gt_read_file(const char *path);
/* Removes path and, for a directory, everything in it (like rm -rf). */
void gt_remove_tree(const char *path);
/* Loads DSL text (as file "t.gr"), runs the names (comma-separated, e.g.
 * "a,b") on a session of `devices` local devices and puts their values in
 * outs (each holds a reference). With devices > 1 the nodes not pinned by a
 * device block are spread round robin first (gt_spread): without that they
 * would all run on device 0. false, with the message printed, when loading
 * or running fails. */
bool gt_dsl_run(const char *src, const char *names, int devices, gr_tensor *outs);
/* As gt_dsl_run; *sends (if not NULL) as for gt_run_on. */
bool gt_dsl_run_on(const char *src, const char *names, int devices, gr_tensor *outs,
                   int64_t *sends);
/* Something done to a loaded graph before it runs. */
typedef void gt_graph_fn(gr_graph *g, void *arg);
/* As gt_dsl_run_on, feeding the names `feeds` (comma-separated; NULL: none)
 * with values[0..), and calling prepare(g, arg) (prepare may be NULL) on the
 * loaded graph before it is spread and run. At most 16 names and feeds. */
bool gt_dsl_run_fed(const char *src, const char *names, int devices, const char *feeds,
                    const gr_tensor *values, gt_graph_fn *prepare, void *arg, gr_tensor *outs,
                    int64_t *sends);
/* The first element of one name's value, NAN on failure. */
double gt_dsl_value(const char *src, const char *name);
/* Loads DSL text that must fail; the message into err (false if it loaded). */
bool gt_dsl_error(const char *src, gr_error *err);
/* Whether DSL text fails to load with a message containing text (prints
 * what it got otherwise). */
bool gt_dsl_fails_with(const char *src, const char *text);
/* Runs s with the feeds f[0..n) and returns element 0 of o's value as f64;
 * NAN, with the message printed, when the run fails. */
double gt_run_scalar(gr_session *s, const gr_feed *f, int n, gr_output o);

/* Gradient checks by central differences. build makes y from the
 * placeholders x[0..n) (fed with inputs; only f64 ones are differentiated);
 * the loss is sum(y * R) for a fixed random R, and, for order 2, then
 * sum_i sum(d loss / d x_i * R_i), so its gradient holds second
 * derivatives. d loss / d x_i from gr_gradients is compared with
 * (loss(x + eps) - loss(x - eps)) / 2 eps at up to max_elems elements of
 * each input (spread over it). false, with the first mismatch printed,
 * when they differ by more than tol (absolute and relative). */
typedef gr_output (*gt_build_fn)(gr_graph *g, const gr_output *x, void *arg);
bool gt_check_gradient(const char *what, gt_build_fn build, void *arg, const gr_tensor *inputs,
                       int n, int order, int max_elems, double tol);
/* The same on a session of `devices` local devices, the nodes (the
 * gradients' too) spread round robin when devices > 1: the analytic
 * gradient and every loss of the differences run spread, and at order 1
 * the loss must send something between devices (else false). */
bool gt_check_gradient_on(const char *what, gt_build_fn build, void *arg, const gr_tensor *inputs,
                          int n, int order, int max_elems, double tol, int devices);

/* Window ops (conv2d, pools), computed independently of ops/: the output
 * size of an axis of `in` elements for kernel k, stride s, dilation d and
 * padding pad ("SAME", "VALID", or "EXPLICIT" with before/after), and the
 * padding before it. */
void gt_window_dim(int64_t in, int64_t k, int64_t s, int64_t d, const char *pad, int64_t before,
                   int64_t after, int64_t *out, int64_t *pad_before);

/* Row-major strides of a shape (elements). */
void gt_strides(const gr_shape *s, int64_t *strides);
/* Flat index -> multi-index for a shape. */
void gt_unravel(const gr_shape *s, int64_t flat, int64_t *idx);
/* A copy of t (rank >= 2) with its last axis moved to axis 1 (to_nchw:
 * NHWC -> NCHW), or axis 1 moved last (NCHW -> NHWC); written
 * independently of ops/. */
gr_tensor gt_move_channels(const gr_tensor *t, bool to_nchw);

#endif
