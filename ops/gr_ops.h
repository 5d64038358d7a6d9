/* ops/: the face header. Builder functions for every op, one per op, plus
 * generic building by op name. Each function adds a node to g and returns
 * its first output; on error it returns a null output ({NULL, 0}) and the
 * graph records the first error (gr_graph_error). Inputs that are null
 * outputs make the result null too, so a whole model can be built and
 * checked once at the end.
 *
 *   gr_graph *g = gr_graph_new();
 *   gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {-1, 784}});
 *   gr_output w = gr_variable(g, "w", gr_glorot_uniform(g, GR_F32, (gr_shape){2, {784, 10}}, 1));
 *   gr_output y = gr_softmax(g, gr_matmul(g, x, w, false, false));
 *   if (gr_graph_error(g)) fprintf(stderr, "%s\n", gr_graph_error(g)->msg);
 *
 * Ownership: tensors passed in (gr_const) are referenced, not copied; arrays
 * (axes, perms, shapes) are copied. Nothing returned needs freeing: the
 * graph owns all nodes. */
#ifndef GR_OPS_H
#define GR_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"

/* ---- registry and generic building ---------------------------------------- */

/* Registers every op (idempotent, thread-safe; builder functions call it). */
void gr_ops_register_all(void);
/* An op by name, NULL when unknown. */
const gr_op_def *gr_ops_find(const char *name);
/* Adds a node of op `op`, named `name` (NULL: the op name). "batch_norm"
 * comes with the updates of its moving statistics (gr_batch_norm). */
gr_output gr_op(gr_graph *g, const char *op, const char *name, const gr_output *inputs,
                int num_inputs, const gr_attr *attrs, int num_attrs);
/* Renames the node behind o (scope kept); duplicate names are an error. */
gr_output gr_name(gr_graph *g, gr_output o, const char *name);
/* Threads used inside one op (OpenBLAS). Sessions call it from their options. */
void gr_ops_set_intra_op_threads(int threads);
/* The kernel set OpenBLAS chose at load time ("SkylakeX", "Haswell",
 * "Prescott", ...; a static string). */
const char *gr_ops_blas_core(void);
/* When OpenBLAS runs narrower kernels than this CPU has (an OpenBLAS older
 * than the CPU model falls back to its generic "Prescott" kernels) and
 * OPENBLAS_CORETYPE is not set: the value of OPENBLAS_CORETYPE that uses the
 * CPU's widest vectors ("SkylakeX" for AVX-512, "Haswell" for AVX2).
 * NULL otherwise. OpenBLAS reads the variable when it is loaded, so it must
 * be set before the program starts. */
const char *gr_ops_blas_suggested_core(void);

/* ---- basic (basic.c) ------------------------------------------------------- */

gr_output gr_const(gr_graph *g, const gr_tensor *value); /* references value */
gr_output gr_const_f32(gr_graph *g, float v);
gr_output gr_const_f64(gr_graph *g, double v);
gr_output gr_const_i32(gr_graph *g, int32_t v);
gr_output gr_const_i64(gr_graph *g, int64_t v);
/* A constant of any shape; data (num_elements * dtype size bytes) is copied. */
gr_output gr_const_data(gr_graph *g, gr_dtype dtype, gr_shape shape, const void *data);
/* shape may have unknown dims (-1) or unknown rank. */
gr_output gr_placeholder(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape);
gr_output gr_identity(gr_graph *g, gr_output x);
/* xs[0..n) unchanged as outputs 0..n-1 of one node (gr_output_at): with
 * control dependencies around it, values that wait for other nodes. */
gr_output gr_identity_n(gr_graph *g, const gr_output *xs, int n);
gr_output gr_no_op(gr_graph *g, const char *name);
/* A no_op with control inputs on every dep: run it to run them all. */
gr_output gr_group(gr_graph *g, const char *name, const gr_output *deps, int n);

/* ---- elementwise binary, NumPy broadcasting (binary.c) --------------------- */

gr_output gr_add(gr_graph *g, gr_output a, gr_output b);
gr_output gr_sub(gr_graph *g, gr_output a, gr_output b);
gr_output gr_mul(gr_graph *g, gr_output a, gr_output b);
gr_output gr_div(gr_graph *g, gr_output a, gr_output b); /* integer division by 0 is an error */
gr_output gr_pow(gr_graph *g, gr_output a, gr_output b);
gr_output gr_maximum(gr_graph *g, gr_output a, gr_output b);
gr_output gr_minimum(gr_graph *g, gr_output a, gr_output b);
gr_output gr_equal(gr_graph *g, gr_output a, gr_output b); /* comparisons give bool */
gr_output gr_not_equal(gr_graph *g, gr_output a, gr_output b);
gr_output gr_less(gr_graph *g, gr_output a, gr_output b);
gr_output gr_less_equal(gr_graph *g, gr_output a, gr_output b);
gr_output gr_greater(gr_graph *g, gr_output a, gr_output b);
gr_output gr_greater_equal(gr_graph *g, gr_output a, gr_output b);
gr_output gr_logical_and(gr_graph *g, gr_output a, gr_output b);
gr_output gr_logical_or(gr_graph *g, gr_output a, gr_output b);

/* ---- elementwise unary and friends (unary.c) -------------------------------- */

gr_output gr_neg(gr_graph *g, gr_output x);
gr_output gr_abs(gr_graph *g, gr_output x);
gr_output gr_exp(gr_graph *g, gr_output x);
gr_output gr_log(gr_graph *g, gr_output x);
gr_output gr_sqrt(gr_graph *g, gr_output x);
gr_output gr_square(gr_graph *g, gr_output x);
gr_output gr_logical_not(gr_graph *g, gr_output x);
gr_output gr_cast(gr_graph *g, gr_output x, gr_dtype dtype);
/* cond ? a : b elementwise, all three broadcast together; cond is bool. */
gr_output gr_select(gr_graph *g, gr_output cond, gr_output a, gr_output b);
/* Sum of n tensors of one dtype and shape. */
gr_output gr_add_n(gr_graph *g, const gr_output *xs, int n);

/* ---- matmul (matmul.c) ------------------------------------------------------ */

/* Rank-2 product op(a) @ op(b), on cblas_sgemm / cblas_dgemm (f32, f64). */
gr_output gr_matmul(gr_graph *g, gr_output a, gr_output b, bool transpose_a, bool transpose_b);
/* c + op(a) @ op(b), one gemm adding into c's buffer when the node holds
 * its only reference (a copy of c otherwise). */
gr_output gr_matmul_add(gr_graph *g, gr_output c, gr_output a, gr_output b, bool transpose_a,
                        bool transpose_b);

/* ---- reductions (reduce.c) -------------------------------------------------- */

/* axes NULL / n 0: every axis. Negative axes count from the end. */
gr_output gr_reduce_sum(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims);
gr_output gr_reduce_mean(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims);
gr_output gr_reduce_max(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims);
gr_output gr_reduce_min(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims);
gr_output gr_reduce_prod(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims);
/* Index (i64) of the largest / smallest element along axis; first on ties. */
gr_output gr_argmax(gr_graph *g, gr_output x, int64_t axis);
gr_output gr_argmin(gr_graph *g, gr_output x, int64_t axis);

/* ---- shapes (array_shape.c) ------------------------------------------------- */

/* One dim may be -1 (inferred). Free: the output is a view of the input. */
gr_output gr_reshape(gr_graph *g, gr_output x, gr_shape shape);
/* perm NULL / n 0: reverse the axes. */
gr_output gr_transpose(gr_graph *g, gr_output x, const int64_t *perm, int n);
gr_output gr_expand_dims(gr_graph *g, gr_output x, int64_t axis);
/* axes NULL / n 0: every dim of size 1. */
gr_output gr_squeeze(gr_graph *g, gr_output x, const int64_t *axes, int n);
/* The shape of x as an i64 vector (op "shape"). */
gr_output gr_shape_of(gr_graph *g, gr_output x);
/* The number of elements of x at run time, a scalar of dtype i64 or i32 (tf.size). */
gr_output gr_size(gr_graph *g, gr_output x, gr_dtype dtype);
gr_output gr_fill(gr_graph *g, gr_dtype dtype, gr_shape shape, double value);
gr_output gr_zeros(gr_graph *g, gr_dtype dtype, gr_shape shape);
gr_output gr_ones(gr_graph *g, gr_dtype dtype, gr_shape shape);
gr_output gr_zeros_like(gr_graph *g, gr_output x);
gr_output gr_ones_like(gr_graph *g, gr_output x);

/* ---- indexing and combining (array_index.c) -------------------------------- */

gr_output gr_concat(gr_graph *g, const gr_output *xs, int n, int64_t axis);
/* pieces[0..n) (1-D, one dtype) joined in order, each copied into the
 * result by its own node as soon as it is there (assemble.c): a concat that
 * does not wait for the last piece to start copying. Its nodes must run on
 * one device: build it under a device scope that names one. */
gr_output gr_assemble(gr_graph *g, const gr_output *pieces, int n);
/* num_split equal parts along axis: outputs 0..num_split-1 (gr_output_at). */
gr_output gr_split(gr_graph *g, gr_output x, int num_split, int64_t axis);
/* size[i] -1: to the end of dim i. */
gr_output gr_slice(gr_graph *g, gr_output x, const int64_t *begin, const int64_t *size, int n);
/* params gathered along axis at integer indices (i32/i64, out of range is an error). */
gr_output gr_gather(gr_graph *g, gr_output params, gr_output indices, int64_t axis);
/* A new last axis of size depth: 1 at the index, 0 elsewhere; indices out of
 * [0, depth) give an all-zero row (as in TensorFlow). */
gr_output gr_one_hot(gr_graph *g, gr_output indices, int64_t depth, gr_dtype dtype);
gr_output gr_tile(gr_graph *g, gr_output x, const int64_t *multiples, int n);
/* paddings: n pairs (before, after), n = rank of x. */
gr_output gr_pad(gr_graph *g, gr_output x, const int64_t *paddings, int n, double value);

/* ---- neural-network ops (nn.c) --------------------------------------------- */

gr_output gr_relu(gr_graph *g, gr_output x);
gr_output gr_sigmoid(gr_graph *g, gr_output x);
gr_output gr_tanh(gr_graph *g, gr_output x);
/* Over the last axis, numerically stable. */
gr_output gr_softmax(gr_graph *g, gr_output x);
gr_output gr_log_softmax(gr_graph *g, gr_output x);
/* x [..., c] + bias [c]. */
gr_output gr_bias_add(gr_graph *g, gr_output x, gr_output bias);
/* Per-example loss [...] from logits [..., classes] and a probability
 * distribution labels [..., classes] (any rank >= 1). Keras' losses:
 * ops/gr_losses.h. */
gr_output gr_softmax_cross_entropy(gr_graph *g, gr_output logits, gr_output labels);
/* Per-example loss [...] from logits [..., classes] and class indices
 * labels [...] (i32/i64; out of range is an error naming the row). */
gr_output gr_sparse_softmax_cross_entropy(gr_graph *g, gr_output logits, gr_output labels);

/* ---- convolutional networks, NHWC or NCHW (conv.c, pool.c, batch_norm.c,
 * dropout.c, image_augment.c) ------------------------------------------------- */

/* Convolution options; zeros mean the defaults: strides and dilations 1,
 * padding "VALID" ("SAME", or "EXPLICIT" with explicit_paddings = top,
 * bottom, left, right), groups 1 (groups = channels: depthwise),
 * data_format "NHWC" (or "NCHW": images [n, c, h, w]; filters stay
 * [kh, kw, in, out]). */
typedef struct gr_conv_options {
  int64_t strides[2], dilations[2];
  const char *padding;
  int64_t explicit_paddings[4];
  int64_t groups;
  const char *data_format;
} gr_conv_options;
/* x [n, h, w, c] conv filter [kh, kw, c / groups, out_c] -> [n, oh, ow, out_c]
 * (im2col + gemm on OpenBLAS). opt NULL: the defaults. */
gr_output gr_conv2d(gr_graph *g, gr_output x, gr_output filter, const gr_conv_options *opt);
/* The gradient of conv2d as a layer: x [n, h, w, in_c], filter [kh, kw,
 * out_c / groups, in_c] -> [n, h', w', out_c] (SAME: h' = h * stride). */
gr_output gr_conv2d_transpose(gr_graph *g, gr_output x, gr_output filter,
                              const gr_conv_options *opt);
/* Max / mean over ksize windows of x [n, h, w, c]; strides NULL (or 0):
 * ksize; padding "VALID" (NULL) or "SAME" (padding not counted in means);
 * data_format "NHWC" (NULL) or "NCHW" (x [n, c, h, w]). */
gr_output gr_max_pool(gr_graph *g, gr_output x, const int64_t ksize[2], const int64_t strides[2],
                      const char *padding, const char *data_format);
gr_output gr_avg_pool(gr_graph *g, gr_output x, const int64_t ksize[2], const int64_t strides[2],
                      const char *padding, const char *data_format);
/* Mean over h and w: [n, h, w, c] -> [n, c]; data_format as for the pools. */
gr_output gr_global_avg_pool(gr_graph *g, gr_output x, const char *data_format);
/* [n, ...] -> [n, product of the rest], a view. */
gr_output gr_flatten(gr_graph *g, gr_output x);
/* Batch normalization over the last axis (data_format "NCHW": axis 1;
 * NULL: "NHWC"): outputs y, mean, rstd, the variance (batch: with Bessel's
 * correction), and that mean and variance in f64 (gr_output_at).
 * moving_mean and moving_variance are reads of variables of shape [c];
 * inference uses them. Training uses the batch statistics, computed where
 * the batch norm runs, and updates those variables in the step (moving =
 * momentum moving + (1 - momentum) batch, in double) by one
 * moving_average_update each, which runs where its variable lives (another
 * device, a ps task): the result is then output 0 of an identity_n of the
 * batch_norm node's outputs that waits for both updates (named as the
 * batch norm; the batch_norm node is NAME/batch_norm), so computing
 * anything from it updates them. Keras defaults: momentum 0.99, epsilon
 * 1e-3. In gr_replicate's replicas the replicas' statistics are averaged
 * into one update (gr_replicate). gr_op(g, "batch_norm", ...) builds the
 * same (attr update_moving false: no updates). */
gr_output gr_batch_norm(gr_graph *g, gr_output x, gr_output gamma, gr_output beta,
                        gr_output moving_mean, gr_output moving_variance, bool training,
                        double momentum, double epsilon, const char *data_format);
/* For a graph read back (a .grb file, made by another version or by
 * hand): an error naming the first batch_norm in training with
 * update_moving whose statistics no moving_average_update reads (nothing
 * would update its moving statistics); GR_OK when there is none. */
gr_status gr_check_batch_norm_updates(const gr_graph *g, gr_error *err);
/* var (a variable read) = momentum var + (1 - momentum) mean(stats[0..n)),
 * in double, the stats added in order, run where var lives; no outputs
 * ({node, -1}). What gr_batch_norm builds for each moving statistic (stats:
 * its f64 statistic), and gr_replicate for the replicas' batch norms. */
gr_output gr_moving_average_update(gr_graph *g, gr_output var, const gr_output *stats, int n,
                                   double momentum);
/* Training: x times a mask of 1 / (1 - rate) (kept) or 0, counter-based per
 * (seed, node, step, element); else x. Output 1: the mask. */
gr_output gr_dropout(gr_graph *g, gr_output x, double rate, int64_t seed, bool training);
/* Augmentation of image batches [n, h, w, c], per image, deterministic for
 * (graph seed ^ seed, node, step); no gradient. */
gr_output gr_random_flip_left_right(gr_graph *g, gr_output x, int64_t seed);
/* Zero-pad by padding on each side, crop back at a random offset. */
gr_output gr_random_crop(gr_graph *g, gr_output x, int64_t padding, int64_t seed);
gr_output gr_random_brightness(gr_graph *g, gr_output x, double max_delta, int64_t seed);
gr_output gr_random_contrast(gr_graph *g, gr_output x, double lower, double upper, int64_t seed);

/* ---- variables (state.c) --------------------------------------------------- */

/* A variable named `name` (scoped) with the dtype and shape of initial_value,
 * and its initialiser node `name/init`. The output reads the current value. */
gr_output gr_variable(gr_graph *g, const char *name, gr_output initial_value);
/* The value of variable var (a gr_variable or gr_read_value output) when
 * this read runs: after the control dependencies in force where it is built
 * (TF's read_value). Gradients flow to var. */
gr_output gr_read_value(gr_graph *g, gr_output var);
/* Is n a read of a variable (gr_variable or gr_read_value)? */
bool gr_ops_is_variable_read(const gr_node *n);
/* Is n a variable itself (a gr_variable node)? */
bool gr_ops_is_variable(const gr_node *n);
/* var: a gr_variable output. Each returns the new value. assign_add and
 * assign_sub refuse global_step and its copies once mirrored replicas read
 * their step from copies (docs/strategies.md, input sharding): gr_minimize
 * advances them all. */
gr_output gr_assign(gr_graph *g, gr_output var, gr_output value);
gr_output gr_assign_add(gr_graph *g, gr_output var, gr_output delta);
gr_output gr_assign_sub(gr_graph *g, gr_output var, gr_output delta);

/* ---- random (random.c): counter-based, keyed by (graph seed ^ op seed, node, step) */

gr_output gr_random_uniform(gr_graph *g, gr_dtype dtype, gr_shape shape, double minval,
                            double maxval, int64_t seed);
gr_output gr_random_normal(gr_graph *g, gr_dtype dtype, gr_shape shape, double mean, double stddev,
                           int64_t seed);
/* Normal, re-drawn where more than two stddevs from the mean. */
gr_output gr_truncated_normal(gr_graph *g, gr_dtype dtype, gr_shape shape, double mean,
                              double stddev, int64_t seed);
/* Uniform in +-sqrt(6 / (fan_in + fan_out)), fans from the shape. */
gr_output gr_glorot_uniform(gr_graph *g, gr_dtype dtype, gr_shape shape, int64_t seed);

/* ---- data files (data_files.c) and data input ops (data.c) ----------------------- */

/* Reads a whole IDX file (MNIST format; raw or gzip) into *out (u8, i32, f32
 * or f64; i8/i16 widen to i32). Errors name the file. */
gr_status gr_data_load_idx(const char *path, gr_tensor *out, gr_error *err);
/* dtype and shape from an IDX header only. */
gr_status gr_data_idx_info(const char *path, gr_dtype *dtype, gr_shape *shape, gr_error *err);
/* Reads a .npy file, raw or gzip (little-endian f4 f8 i4 i8 u1 b1, C order). */
gr_status gr_data_load_npy(const char *path, gr_tensor *out, gr_error *err);
gr_status gr_data_npy_info(const char *path, gr_dtype *dtype, gr_shape *shape, gr_error *err);
/* Writes t as a .npy file (format 1.0, little-endian, C order; the dtypes
 * above). Errors name the file. */
gr_status gr_data_write_npy(const gr_tensor *t, const char *path, gr_error *err);

/* The contents of an IDX (.gz or raw) or .npy file, read once per session. */
gr_output gr_read_idx(gr_graph *g, const char *path);
gr_output gr_read_npy(gr_graph *g, const char *path);
/* Batch number `step` (an i64 scalar, e.g. gr_global_step) of the examples
 * (rows) of xs[0..n): the same rows of every x. Shuffled per epoch by a
 * permutation that is a pure function of (seed, epoch); with num_shards > 1
 * only the rows i with i % num_shards == shard_index are used. A batch is
 * always full (the remainder of an epoch is dropped). Outputs 0..n-1. */
gr_output gr_batch(gr_graph *g, gr_output step, const gr_output *xs, int n, int64_t batch_size,
                   int64_t seed, bool shuffle, int64_t num_shards, int64_t shard_index);

/* ---- control flow (control_flow.c) ------------------------------------------------- */

/* Builds one branch of a cond: writes the branch's outputs to outs. */
typedef void (*gr_branch_fn)(gr_graph *g, void *arg, gr_output *outs);
/* pred ? then : else, both branches built now, one run per step: the untaken
 * branch's nodes are dead and do not run (side effects included). Values
 * from outside a branch may be used directly. outputs[i] merge the branches'
 * output i (same dtype). Returns the graph's error status. */
gr_status gr_cond(gr_graph *g, gr_output pred, gr_branch_fn then_fn, gr_branch_fn else_fn,
                  void *arg, int num_outputs, gr_output *outputs);

#define GR_COND_MAX_OUTPUTS 64
/* A branch that decides how many outputs it gives (a tuple, as tf.cond
 * returns a branch's structure): writes up to max_outputs to outs and
 * returns how many (0 after an error it set on the graph). */
typedef int (*gr_branch_tuple_fn)(gr_graph *g, void *arg, gr_output *outs, int max_outputs);
/* gr_cond where the branches say how many outputs there are: both must give
 * the same number (1 to GR_COND_MAX_OUTPUTS), else it is an error naming
 * both counts. outputs holds GR_COND_MAX_OUTPUTS; *num_outputs gets the
 * number of merges made (0 on an error). The then branch is built first. */
gr_status gr_cond_tuple(gr_graph *g, gr_output pred, gr_branch_tuple_fn then_fn,
                        gr_branch_tuple_fn else_fn, void *arg, int *num_outputs,
                        gr_output *outputs);

/* The loop condition from the current loop variables (a bool scalar). */
typedef gr_output (*gr_loop_cond_fn)(gr_graph *g, void *arg, const gr_output *vars);
/* The body: the next values of the loop variables from the current ones. */
typedef void (*gr_loop_body_fn)(gr_graph *g, void *arg, const gr_output *vars, gr_output *next);
/* while cond(vars): vars = body(vars), inside the graph. loop_vars (n of
 * them) are replaced by the loop's results. Up to parallel_iterations (0:
 * 10) iterations run at once. Values from outside used in the body are loop
 * invariants. A body that changes a variable's dtype or shape is an error. */
gr_status gr_while_loop(gr_graph *g, gr_loop_cond_fn cond_fn, gr_loop_body_fn body_fn, void *arg,
                        int n, gr_output *loop_vars, int parallel_iterations);

/* ---- automatic differentiation (autodiff.c) ----------------------------------- */

/* Adds nodes computing d(sum of ys)/d(xs[i]) into dxs[i], walking back from
 * ys through each op's gradient function and summing the contributions of
 * several consumers. grad_ys: NULL, or one seed gradient per y (default: ones).
 * An x that the ys do not depend on gets zeros, or a null output when
 * null_for_unconnected. Only float edges carry gradients, so an integer or
 * bool y contributes nothing (as in TensorFlow), and an integer x is
 * unconnected. Gradient nodes are colocated with their forward node
 * and named "gradients/...". Returns the graph's error status. */
gr_status gr_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs);

/* What an op's gradient function gets and fills (gr_op_def.grad_fn): the
 * forward node, the gradient flowing into each of its outputs (a null output
 * where none flows; at least one is set), and it sets dinputs[i] to the
 * gradient for input i (leave null for none). It builds nodes with the
 * builder functions on ctx->graph; errors are the graph's sticky errors. */
struct gr_grad_ctx {
  gr_graph *graph;
  const gr_node *node;
  const gr_output *grads; /* node->num_outputs entries */
  gr_output *dinputs;     /* node->num_inputs entries, preset to null */
  /* Inside the reverse loop of a while loop's gradient, forward values are
   * read through this (stack pops); NULL elsewhere. Grad functions reach
   * forward values only through gr_grad_x / gr_grad_y, which apply it. */
  gr_output (*remap)(void *arg, gr_output forward);
  void *remap_arg;
  /* True when the graph differentiated has no control flow: a gradient may
   * then take a shape known when the graph is built instead of waiting for
   * a forward value for its runtime shape (gr_grad_sum_like). */
  bool static_shapes;
};
typedef struct gr_grad_ctx gr_grad_ctx;

/* Helper ops used by gradients (grad_ops.c). */
/* grad summed down to the runtime shape of `like` (undoes broadcasting). */
gr_output gr_sum_like(gr_graph *g, gr_output grad, gr_output like);
/* The same in a gradient function: grad itself when c->static_shapes and
 * both shapes are known and equal, so the gradient does not wait for
 * like's value (a micro-batch's backward pass does not wait for the other
 * micro-batches' forward passes). */
gr_output gr_grad_sum_like(const gr_grad_ctx *c, gr_output grad, gr_output like);
/* y (the result of reducing `like` over axes, with or without keepdims)
 * broadcast back to like's runtime shape; divided by the number of reduced
 * elements when mean. */
gr_output gr_broadcast_like(gr_graph *g, gr_output y, gr_output like, const int64_t *axes, int n,
                            bool keepdims, bool mean);
/* x broadcast (NumPy rules) to like's runtime shape: the inverse of sum_like. */
gr_output gr_broadcast_to_like(gr_graph *g, gr_output x, gr_output like);
/* For each element of x, the product of the other elements of its group
 * (those a reduction over axes combines; n == 0: all): the gradient of
 * reduce_prod, exact where x has zeros. With m direction tensors t (x's
 * shape), the coefficient of e1...em in prod_{k != j} (x_k + sum_r e_r t_r[k])
 * (e_r^2 = 0), for its higher derivatives; m <= GR_PROD_OTHERS_MAX_DIRECTIONS. */
#define GR_PROD_OTHERS_MAX_DIRECTIONS 6
gr_output gr_prod_others(gr_graph *g, gr_output x, const gr_output *t, int m, const int64_t *axes,
                         int n);
/* x reshaped to like's runtime shape. */
gr_output gr_reshape_like(gr_graph *g, gr_output x, gr_output like);
/* The identity whose gradient is zero. */
gr_output gr_stop_gradient(gr_graph *g, gr_output x);

/* ---- optimizers (optimizers.c) --------------------------------------------------- */

typedef enum gr_optimizer_kind { GR_OPT_SGD, GR_OPT_MOMENTUM, GR_OPT_ADAM } gr_optimizer_kind;

typedef struct gr_optimizer {
  gr_optimizer_kind kind;
  double learning_rate;
  double momentum;              /* momentum */
  bool nesterov;                /* momentum */
  double beta1, beta2, epsilon; /* adam; 0 means the defaults 0.9, 0.999, 1e-8 */
} gr_optimizer;

/* Gradients of loss with respect to var_list (NULL/0: every variable loss
 * depends on) and one update op per variable, grouped into the returned
 * train op (run it as a target). Slot variables (momentum, Adam moments) are
 * created next to their variable as "VAR/SLOT". */
gr_output gr_minimize(gr_graph *g, const gr_optimizer *opt, gr_output loss,
                      const gr_output *var_list, int n);
/* The i64 scalar variable "global_step" (created at 0 on first call).
 * gr_minimize increments it with every training step when it exists. */
gr_output gr_global_step(gr_graph *g);

/* ---- parallel training (parallel.c): docs/strategies.md ------------------------ */

typedef enum gr_ps_strategy {
  GR_PS_ROUND_ROBIN,  /* variable i on ps task i mod num_ps */
  GR_PS_GREEDY_BYTES, /* each variable on the ps task holding the fewest bytes so far */
} gr_ps_strategy;
#define GR_PS_MAX_TASKS 4096
/* TensorFlow's replica_device_setter: until gr_graph_pop_device_scope,
 * every variable added goes to /job:ps/task:K (the other fields of the
 * enclosing device scope kept), chosen by strategy among num_ps tasks;
 * other nodes stay where the enclosing scopes put them (the worker). An
 * explicit device scope inside wins. Everything that names a variable
 * (reads, updates, initialisers) runs where it lives, and optimizer slots
 * are made with their variable, so they follow. The state is graph-owned. */
gr_status gr_graph_push_ps_placement(gr_graph *g, int num_ps, gr_ps_strategy strategy);

typedef enum gr_reduction { GR_REDUCE_SUM, GR_REDUCE_MEAN } gr_reduction;
/* Small tensors at most this big are fused into one buffer by gr_minimize's
 * all-reduce of mirrored variables' gradients. */
#define GR_ALL_REDUCE_FUSE_BYTES (256 * 1024)
/* The default bucket of the collective all-reduce (gr_all_reduce_n with
 * fuse_bytes > 0): gradients are fused up to this many bytes per bucket
 * (GRAPHRUN_ALL_REDUCE_BUCKET overrides it; docs/strategies.md). */
#define GR_ALL_REDUCE_BUCKET_BYTES (25 * 1024 * 1024)
/* The graph ring's chunks travel in pieces of at most this many bytes, each
 * its own send, so that adding one piece overlaps sending the next
 * (gr_all_reduce_options' piece_bytes and GRAPHRUN_ALL_REDUCE_PIECE set
 * it, for the graph ring and the collective alike, when the graph is
 * built). */
#define GR_ALL_REDUCE_PIECE_BYTES (2 * 1024 * 1024)
/* The collective's default piece (collective.c): smaller than the graph
 * ring's, whose pieces are nodes. Two tasks on loopback, idle, 2026-11-29:
 * a 4 MiB all-reduce at 0.96-1.18 GB/s with 256 KiB pieces against
 * 0.59-0.67 with 2 MiB (docs/benchmarks.md). */
#define GR_COLLECTIVE_PIECE_BYTES (256 * 1024)
/* With the default piece, a ring chunk of at most this many pieces (1 MiB)
 * goes as one message: two tasks on the AMD VM, the MLP's 1.07 MB bucket
 * (chunks of 0.54 MB), 2026-11-30: the collective from the later member's
 * arrival to its end, median 454-537 us whole, 588-593 in 3 pieces,
 * 674-766 in 5 (docs/benchmarks.md). */
#define GR_COLLECTIVE_WHOLE_PIECES 4
/* Options of an all-reduce, kept in the graph (the collective's node
 * attrs), so that every member agrees by construction. Zero: the
 * defaults. The environment of the process that builds the graph
 * overrides each: GRAPHRUN_ALL_REDUCE, GRAPHRUN_ALL_REDUCE_BUCKET,
 * GRAPHRUN_ALL_REDUCE_PIECE (docs/strategies.md). */
typedef struct gr_all_reduce_options {
  /* NULL or "collective": ring or tree by bucket size, hierarchical when
   * the members span several hosts and some host has several; "ring",
   * "tree", "hier" (that one for every bucket); "graph": the graph ring */
  const char *algorithm;
  int64_t bucket_bytes; /* 0: GR_ALL_REDUCE_BUCKET_BYTES (with fuse_bytes > 0) */
  /* 0: GR_COLLECTIVE_PIECE_BYTES (the graph ring: GR_ALL_REDUCE_PIECE_BYTES) */
  int64_t piece_bytes;
  /* NULL, or hosts[d]: the name of device d's host, the grouping of the
   * hierarchical all-reduce; NULL: on a cluster the hosts of the tasks'
   * addresses (the master fills them in), in one process each task */
  const char *const *hosts;
} gr_all_reduce_options;
/* Ring all-reduce: values[d] (one per device, same dtype and fully known
 * shape) on devices[d] (NULL, or a NULL entry: the device of values[d]);
 * out[d], on devices[d], gets the sum (or mean) of all, the same bits on
 * every device. Each value is cut into n chunks; chunk c is added around
 * the ring (n - 1 rounds of adds, each on the receiving device:
 * reduce-scatter), its total passed around once more (n - 1 rounds of
 * copies: all-gather), so each device sends 2(n - 1)/n of the tensor to
 * the next. Returns the graph's error status. */
gr_status gr_all_reduce(gr_graph *g, const gr_output *values, int n, const char *const *devices,
                        gr_reduction op, gr_output *out);
/* num_tensors all-reduces over the same n devices at once: values[t * n + d]
 * is tensor t on device d (devices NULL: those of tensor 0), out likewise.
 * On n >= 2 distinct pinned devices (and unless GRAPHRUN_ALL_REDUCE=graph)
 * each bucket is one collective_all_reduce node per device that runs the
 * ring at run time; buckets are filled in the order the values were built
 * (the backward pass's), one dtype each, up to GR_ALL_REDUCE_BUCKET_BYTES
 * (GRAPHRUN_ALL_REDUCE_BUCKET) when fuse_bytes > 0, one tensor each when it
 * is 0. Otherwise the graph ring: tensors smaller than fuse_bytes are fused
 * (flattened and concatenated on each device, in order, up to fuse_bytes
 * per buffer, one dtype each), reduced as one, and cut back; 0: no fusion.
 * Both give every device the same bits, in the same order of additions. */
gr_status gr_all_reduce_n(gr_graph *g, const gr_output *values, int num_tensors, int n,
                          const char *const *devices, gr_reduction op, int64_t fuse_bytes,
                          gr_output *out);
/* gr_all_reduce_n with options (o NULL: the defaults). */
gr_status gr_all_reduce_with(gr_graph *g, const gr_output *values, int num_tensors, int n,
                             const char *const *devices, gr_reduction op, int64_t fuse_bytes,
                             const gr_all_reduce_options *o, gr_output *out);

#define GR_REPLICATE_MAX         1024
#define GR_REPLICATE_MAX_OUTPUTS 64
/* Builds replica `replica` of a model: its inputs are the replica's slices
 * of the batch; writes the replica's outputs (f32/f64, e.g. its loss).
 * Errors: return them or record them in g. */
typedef gr_status (*gr_replica_fn)(gr_graph *g, void *arg, int replica, const gr_output *inputs,
                                   gr_output *outputs);
typedef struct gr_replicate_options {
  int num_replicas;
  /* replica i is built in device scope devices[i] (explicit scopes inside
   * the body still win); NULL: no scope (micro-batches, whose stages the
   * body pins itself) */
  const char *const *devices;
  /* replica i >= 1 reads its own copy of every variable the body reads,
   * VAR/replica_i on devices[i], initialised from VAR's initial value;
   * gr_minimize all-reduces the copies' gradients (sum over the ring), so
   * they stay equal bit for bit. Replica 0 reads the variables themselves. */
  bool mirror_variables;
  /* every input is an output of a batch node (gr_batch) or an
   * image_folder (gr_image_folder); replica i reads its slice of that batch
   * itself, in its device scope, with its own copy of the node reading its
   * own copies of the files the batch reads (read_idx, read_npy; constants
   * and stateless ops between are copied too; image_folder reads its
   * folder): the same rows, bit for bit, as the split of the global batch,
   * but no task sends another's rows (docs/strategies.md#input-sharding) */
  bool shard_inputs;
  const char *scope; /* name scope of replica i: SCOPE_i; NULL: "replica" */
  /* with mirror_variables: the options of gr_minimize's all-reduce of the
   * copies' gradients (algorithm, bucket_bytes, piece_bytes; not hosts),
   * kept as attrs of the copies */
  gr_all_reduce_options all_reduce;
  gr_output *per_replica; /* NULL, or num_replicas * num_outputs: each replica's outputs */
} gr_replicate_options;
/* In-graph replication (synchronous data parallelism, or micro-batches):
 * splits every input along axis 0 into num_replicas equal slices, builds
 * the body once per replica on its slices, and sets outputs[j] to the mean
 * over the replicas of output j. With the loss as output, gr_minimize on it
 * gives one update per step from the gradient of the whole batch: each
 * replica's backward pass runs with its forward pass, and the replicas'
 * contributions to a variable are added where it lives (a parameter
 * server), or all-reduced for mirrored variables. The body must not make
 * variables in its name scope; one made under an absolute name scope (a
 * layer's: gr_ops_layers.h) counts as made before the replicas: it goes
 * where the device scopes outside the replicas put it (with
 * mirror_variables, on devices[0]), and replicas after the one that made
 * it read their copies. Batch norms in training normalise each replica's slice with
 * its own statistics; their moving statistics are updated once per step,
 * where each variable (and each mirrored copy) lives, with the mean of the
 * replicas' statistics (moving_average_update), and the outputs wait for
 * those updates (the body's batch norms, built by fn on the calling
 * thread, make none of their own). */
gr_status gr_replicate(gr_graph *g, const gr_replicate_options *o, const gr_output *inputs,
                       int num_inputs, gr_replica_fn fn, void *arg, int num_outputs,
                       gr_output *outputs);
/* The largest |copy - variable| over every mirrored variable and replica
 * (f64 scalar; 0 when there are none), read when it runs: built inside
 * control dependencies on a train op, after its updates. Each copy and
 * variable is fingerprinted where it lives (op fingerprint); the copies
 * move and are compared only in a step where a fingerprint differs (a
 * cond), so agreeing copies cost 8 bytes each. */
gr_output gr_mirror_spread(gr_graph *g);

/* _fused_elementwise (ops/fused_elementwise.c), which the fusion pass makes:
 * at most this many inputs and steps; the index of an op in its set (add,
 * sub, mul, div, maximum, minimum, relu_grad: binary; neg, square, relu:
 * unary), or -1 when it is not in the set. */
#define GR_FUSED_ELEMENTWISE_MAX_INPUTS 8
#define GR_FUSED_ELEMENTWISE_MAX_STEPS  8
int gr_fused_elementwise_op_index(const char *op_name);

#include "ops/gr_images.h"
#include "ops/gr_losses.h"
#include "ops/gr_ops_layers.h"
#include "ops/gr_ops_partitioned.h"
#include "ops/gr_ops_sync.h"

#endif
