/* Helpers shared by the op family files. Internal to ops/. */
#ifndef GR_OPS_INTERNAL_H
#define GR_OPS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"
#include "ops/gr_ops.h"
#include "ops/op_list.h"

/* Every op of the op list, for tests of what a node is (n->op ==
 * &gr_op_variable): ops are identified by their definition, never by name. */
#define GR_X_DECL(name) extern const gr_op_def gr_op_##name;
GR_OP_LIST(GR_X_DECL)
#undef GR_X_DECL

/* Looks the op up (registering all ops on first use) and adds a node; an
 * unknown op is recorded as the graph's error. name NULL: the op's name. */
/* Loops and variables (loop_state.c). Does [lo, hi) update the variable
 * that `read` reads? */
bool gr_loop_writes_var(gr_graph *g, int lo, int hi, const gr_node *read);
/* Makes the next_iteration nodes next_iters[0..n) wait for the updates of
 * the loop body [lo, hi) (those of nested loops through their exits). */
gr_status gr_loop_order_updates(gr_graph *g, int lo, int hi, const gr_output *next_iters, int n);
/* The loop nesting depth of every node of [lo, hi) relative to the frame of
 * the nodes at lo (0: that frame, 1: a loop nested in it, ...), in a
 * malloc'd array indexed by id - lo; NULL when out of memory. */
int *gr_loop_depths(gr_graph *g, int lo, int hi);

/* A read_value of the variable that read node vn reads, tied to `tie` (vn's
 * value, or an enter of it). */
gr_output gr_ops_read_value_via(gr_graph *g, const gr_node *vn, gr_output tie);

/* gr_variable with attr mirror_of (NULL: none): the variable it is a
 * replica's copy of (parallel.c). */
gr_output gr_ops_variable_mirror(gr_graph *g, const char *name, gr_output initial_value,
                                 const char *mirror_of);
/* gr_variable with extra attrs of the variable op (mirror_of, partition_of,
 * partition_offset, full_shape; at most 4), copied. */
gr_output gr_ops_variable_with(gr_graph *g, const char *name, gr_output initial_value,
                               const gr_attr *extra, int num_extra);

/* The attrs of a collective_all_reduce node, the same for every member:
 * algorithm "ring" or "tree" (the flat one, or the leaders'); hierarchy
 * "auto", "flat" or "hosts"; the ring's piece in bytes (0: the default);
 * hosts NULL/"" or one name per member, comma-separated. */
typedef struct gr_ops_collective_cfg {
  const char *algorithm, *hierarchy;
  int64_t piece_bytes;
  const char *hosts;
} gr_ops_collective_cfg;
/* One collective_all_reduce node (collective.c) for member `rank` of the
 * group group_key of group_size members: out[i] is the sum (or mean) of
 * values[i] over the members, the same bits on each. Returns the graph's
 * error status. */
gr_status gr_ops_collective_all_reduce(gr_graph *g, const gr_output *values, int num_values,
                                       const char *group_key, int group_size, int rank,
                                       gr_reduction op, const gr_ops_collective_cfg *cfg,
                                       gr_output *out);

/* The all-reduce as collective nodes (parallel_collective.c). The
 * settings: gr_all_reduce_options, each overridden by the environment
 * (GRAPHRUN_ALL_REDUCE: "collective", the default: ring or tree by bucket
 * size, hierarchical across hosts; "ring", "tree", "hier"; "graph": the
 * graph ring; GRAPHRUN_ALL_REDUCE_BUCKET and GRAPHRUN_ALL_REDUCE_PIECE in
 * bytes); errors name the option or the variable. hosts: "" or the
 * option's names joined with commas (graph-owned). */
typedef enum gr_all_reduce_mode {
  GR_ALL_REDUCE_GRAPH,
  GR_ALL_REDUCE_AUTO,
  GR_ALL_REDUCE_RING,
  GR_ALL_REDUCE_TREE,
  GR_ALL_REDUCE_HIER,
} gr_all_reduce_mode;
typedef struct gr_ops_all_reduce_setting {
  gr_all_reduce_mode mode;
  int64_t bucket_bytes, piece_bytes; /* piece 0: GR_COLLECTIVE_PIECE_BYTES */
  const char *hosts;
} gr_ops_all_reduce_setting;
/* Buckets smaller than this (on more than 2 devices) take the tree. */
#define GR_ALL_REDUCE_TREE_BYTES (64 * 1024)
gr_status gr_ops_all_reduce_settings(gr_graph *g, const gr_all_reduce_options *o, int n,
                                     gr_ops_all_reduce_setting *out);
/* A byte count from environment variable var into *bytes (unset or empty:
 * *bytes unchanged); a bad one is the graph's error, naming var. */
gr_status gr_ops_env_bytes(gr_graph *g, const char *var, int64_t *bytes);
/* Can the n devices run a collective (n >= 2, each pinned, all distinct)? */
bool gr_ops_all_reduce_collective_fits(const char *const *dev, int n);
/* gr_all_reduce_n's values (checked) as one collective node per device per
 * bucket of at most bucket_bytes (0: one tensor per bucket). */
gr_status gr_ops_all_reduce_collective(gr_graph *g, const gr_output *values, int num_tensors, int n,
                                       const char *const *dev, gr_reduction op,
                                       const gr_ops_all_reduce_setting *set, int64_t bucket_bytes,
                                       gr_output *out);

/* Mirrored variables (parallel.c), for gr_minimize: appends to vars[0..n)
 * (room for cap) the mirrors of its variables that it lacks; returns the
 * new count. Then replaces the gradients of each variable and its mirrors
 * by their all-reduced sum, on each copy's device. */
int gr_ops_add_mirrors(const gr_graph *g, gr_output *vars, int n, int cap);
gr_status gr_ops_all_reduce_mirrors(gr_graph *g, const gr_output *vars, int n, gr_output *grads);
/* The step counter of mirrored replicas (parallel.c): is n the variable
 * global_step (i64, not itself a copy)? Replica k's copy of it,
 * global_step/replica_K on dev (attr mirror_of, as a mirrored variable's:
 * checkpoints keep it once; gr_minimize advances every copy with the
 * counter), so that a replica's input shard reads its step where it runs. */
bool gr_ops_is_global_step(const gr_node *n);
/* Is n a copy of global_step (a variable with attr mirror_of "global_step")? */
bool gr_ops_is_step_copy(const gr_node *n);
gr_output gr_ops_step_copy(gr_graph *g, const gr_node *step, int k, const char *dev);
/* How many copies of global_step g has (variables with mirror_of
 * "global_step"). gr_assign_add and gr_assign_sub refuse global_step and
 * its copies while there are any; gr_minimize advances them all through
 * gr_ops_advance_variable (state.c: op on var, unchecked). */
int gr_ops_step_copies(const gr_graph *g);
gr_output gr_ops_advance_variable(gr_graph *g, const char *op, gr_output var, gr_output value);
/* SGD fused into the collective all-reduce (parallel_collective.c), for
 * gr_minimize: each collective_all_reduce node among grads[0..n) (after
 * gr_ops_all_reduce_mirrors) whose outputs are all gradients of vars (on
 * its device) is rebuilt as a collective_all_reduce_sgd node that also
 * updates them, lr each step, part by part as the totals become final;
 * by[i] is the node that updates vars[i], NULL when not fused. Returns the
 * graph's error status. */
gr_status gr_ops_fuse_sgd(gr_graph *g, const gr_output *vars, int n, const gr_output *grads,
                          double lr, gr_node **by);

/* SGD's step on elements [at, at + n) of var (f32 or f64, held under its
 * lock): var -= lr * grad[0..n), grad of var's dtype; the arithmetic of
 * apply_sgd (optimizers.c), for the update fused into the collective
 * all-reduce (collective.c). */
void gr_ops_sgd_range(gr_tensor *var, int64_t at, const void *grad, int64_t n, double lr);

/* Batch norm's moving statistics (moving_average.c). Sets the variable var
 * (on this kernel's device) to momentum var + (1 - momentum) batch[0..c)
 * (copy on write, under the variable's lock). */
gr_status gr_ops_update_moving(gr_kernel_ctx *ctx, const char *var, double momentum,
                               const double *batch, int64_t c);
/* A batch_norm node (gr_op's, gr_batch_norm's, the .gr call's) and, in
 * training with update_moving, the moving_average_update of each moving
 * statistic, where its variable lives, from the node's f64 statistics; then
 * its 6 outputs come through an identity_n that waits for both updates,
 * named as the batch norm would be (which becomes NAME/batch_norm). In
 * gr_replicate's replicas the batch norm alone (the replicas' updates are
 * gr_ops_replicas_moving_stats'). */
gr_output gr_ops_batch_norm_build(gr_graph *g, const char *name, const gr_output *inputs,
                                  int num_inputs, const gr_attr *attrs, int num_attrs);
/* gr_replicate builds its replicas between these two calls, on one thread:
 * the batch norms built on that thread in g then make no updates of their
 * own. enter returns the graph marked before, for leave to restore
 * (nesting). */
const gr_graph *gr_ops_replicas_enter(const gr_graph *g);
void gr_ops_replicas_leave(const gr_graph *prev);
/* For gr_replicate: the training batch norms among nodes [first, last) (the
 * replicas' bodies) leave their moving statistics to new
 * moving_average_update nodes, which average the replicas' statistics per
 * moving variable (and per copy of a mirrored one) where it lives.
 * *updates (malloc'd, the caller frees; NULL when none): those nodes, for the
 * replicas' outputs to wait on. */
gr_status gr_ops_replicas_moving_stats(gr_graph *g, int first, int last, gr_output **updates,
                                       int *num_updates);

/* gr_replicate's shard_inputs (replica_input.c): slices[0..num_inputs) of
 * replica k of n, each input's batch node copied as slice k of n, with the
 * files it reads, in the current device scope (the replica's), under name
 * scope input/. step_dev (NULL: none): a batch whose step is global_step
 * reads replica k's copy of it on that device (gr_ops_step_copy). */
gr_status gr_ops_replica_inputs(gr_graph *g, const gr_output *inputs, int num_inputs, int n, int k,
                                const char *step_dev, gr_output *slices);

/* A Fisher-Yates permutation of 0..n-1 into perm, keyed by (seed, stream,
 * counter) with the counter-based generator: the same for the same keys on
 * any thread (batch's epochs, image_folder's split and epochs). */
void gr_ops_permute(int64_t *perm, int64_t n, uint64_t seed, uint64_t stream, uint64_t counter);

gr_output gr_ops_build(gr_graph *g, const char *op, const char *name, const gr_output *inputs,
                       int num_inputs, const gr_attr *attrs, int num_attrs);

/* gr_ops_build for an op that uses the resource (a queue, an accumulator,
 * a variable) that node `with` makes: the node runs where `with` runs
 * (its device, colocated), whatever the enclosing device scopes
 * (colocated.c). */
gr_output gr_ops_build_colocated(gr_graph *g, const gr_node *with, const char *op, const char *name,
                                 const gr_output *inputs, int num_inputs, const gr_attr *attrs,
                                 int num_attrs);

/* Records a printf-style error in the graph and evaluates to the null output. */
#define gr_ops_fail(g, ...) (gr_graph_set_errorf((g), __VA_ARGS__), (gr_output){NULL, 0})

/* Reads an int-list attr of axes for a tensor of `rank` into a mask (axes
 * normalised, duplicates rejected). An empty list selects every axis when
 * empty_means_all. Errors name the node. */
gr_status gr_ops_axes_mask(gr_shape_ctx *ctx, const char *attr, int rank, bool empty_means_all,
                           bool mask[GR_MAX_RANK]);

/* The same for a kernel, against the runtime rank (the shape fn may not have
 * known it); an empty list selects every axis. */
gr_status gr_ops_kernel_axes_mask(gr_kernel_ctx *ctx, const char *attr, int rank,
                                  bool mask[GR_MAX_RANK]);

/* NumPy broadcasting of two operands onto an output shape. */
typedef struct gr_bcast {
  int rank;
  int64_t dims[GR_MAX_RANK];
  int64_t sa[GR_MAX_RANK], sb[GR_MAX_RANK]; /* element strides, 0 where broadcast */
  int64_t n;
  bool same;     /* a, b and out all have the same shape */
  bool a_scalar; /* a has one element */
  bool b_scalar;
} gr_bcast;

/* false when the shapes do not broadcast; *out receives the result shape. */
bool gr_bcast_init(gr_bcast *bc, const gr_shape *a, const gr_shape *b, gr_shape *out);

/* Runs the body (the variadic argument) for every output element io with the matching input element
 * indices ia and ib (int64_t variables declared by the macro). */
#define GR_BCAST_FOR(bc, ia, ib, io, ...)                                                          \
  do {                                                                                             \
    const gr_bcast *bc_ = (bc);                                                                    \
    if (bc_->same) {                                                                               \
      for (int64_t io = 0; io < bc_->n; io++) {                                                    \
        const int64_t ia = io, ib = io;                                                            \
        (void)ia;                                                                                  \
        (void)ib;                                                                                  \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    } else if (bc_->a_scalar) {                                                                    \
      for (int64_t io = 0; io < bc_->n; io++) {                                                    \
        const int64_t ia = 0, ib = bc_->b_scalar ? 0 : io;                                         \
        (void)ia;                                                                                  \
        (void)ib;                                                                                  \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    } else if (bc_->b_scalar) {                                                                    \
      for (int64_t io = 0; io < bc_->n; io++) {                                                    \
        const int64_t ia = io, ib = 0;                                                             \
        (void)ia;                                                                                  \
        (void)ib;                                                                                  \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    } else {                                                                                       \
      int r_ = bc_->rank;                                                                          \
      int64_t idx_[GR_MAX_RANK] = {0};                                                             \
      int64_t inner_ = bc_->dims[r_ - 1], sai_ = bc_->sa[r_ - 1], sbi_ = bc_->sb[r_ - 1];          \
      int64_t a0_ = 0, b0_ = 0, io = 0;                                                            \
      while (io < bc_->n) {                                                                        \
        for (int64_t k_ = 0; k_ < inner_; k_++, io++) {                                            \
          const int64_t ia = a0_ + k_ * sai_, ib = b0_ + k_ * sbi_;                                \
          (void)ia;                                                                                \
          (void)ib;                                                                                \
          __VA_ARGS__;                                                                             \
        }                                                                                          \
        for (int d_ = r_ - 2; d_ >= 0; d_--) {                                                     \
          idx_[d_]++;                                                                              \
          a0_ += bc_->sa[d_];                                                                      \
          b0_ += bc_->sb[d_];                                                                      \
          if (idx_[d_] < bc_->dims[d_]) break;                                                     \
          a0_ -= bc_->sa[d_] * bc_->dims[d_];                                                      \
          b0_ -= bc_->sb[d_] * bc_->dims[d_];                                                      \
          idx_[d_] = 0;                                                                            \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* out[i] = EXPR(x) over n elements of type T (out may alias in). */
#define GR_UNARY_LOOP(T, EXPR)                                                                     \
  do {                                                                                             \
    const T *a_ = pin;                                                                             \
    T *r_ = pout;                                                                                  \
    for (int64_t i_ = 0; i_ < n; i_++) {                                                           \
      T x = a_[i_];                                                                                \
      r_[i_] = (T)(EXPR);                                                                          \
    }                                                                                              \
  } while (0)

/* Shape fn, kernel (in place when it can), op def and builder of a
 * one-input elementwise op that keeps dtype and shape, for the dtypes in
 * MASK (unary.c, nn.c); the per-dtype expressions of x of the dtypes outside
 * MASK are never run. Needs the file's x_names, {"x"}. */
#define GR_DEFINE_UNARY_OP(NAME, MASK, DOC, EF, ED, EI32, EI64, EU8, EB, GRAD_FN, FLAGS)           \
  static gr_status NAME##_shape(gr_shape_ctx *ctx) {                                               \
    GR_TRY(gr_shape_check_dtype(ctx, 0, MASK));                                                    \
    return gr_shape_fn_unchanged(ctx);                                                             \
  }                                                                                                \
  static gr_status NAME##_kernel(gr_kernel_ctx *ctx) {                                             \
    const gr_tensor *X = &ctx->inputs[0];                                                          \
    if (!((MASK)&GR_DT_BIT(X->dtype)))                                                             \
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(X->dtype));  \
    gr_tensor *o;                                                                                  \
    GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, X->dtype, &X->shape, &o));                        \
    int64_t n = gr_tensor_num_elements(X);                                                         \
    const void *pin = gr_tensor_data(X);                                                           \
    void *pout = gr_tensor_data(o);                                                                \
    switch (X->dtype) {                                                                            \
      case GR_F32:                                                                                 \
        GR_UNARY_LOOP(float, EF);                                                                  \
        break;                                                                                     \
      case GR_F64:                                                                                 \
        GR_UNARY_LOOP(double, ED);                                                                 \
        break;                                                                                     \
      case GR_I32:                                                                                 \
        GR_UNARY_LOOP(int32_t, EI32);                                                              \
        break;                                                                                     \
      case GR_I64:                                                                                 \
        GR_UNARY_LOOP(int64_t, EI64);                                                              \
        break;                                                                                     \
      case GR_U8:                                                                                  \
        GR_UNARY_LOOP(uint8_t, EU8);                                                               \
        break;                                                                                     \
      case GR_BOOL:                                                                                \
        GR_UNARY_LOOP(bool, EB);                                                                   \
        break;                                                                                     \
      default:                                                                                     \
        break;                                                                                     \
    }                                                                                              \
    return GR_OK;                                                                                  \
  }                                                                                                \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = x_names,                                          \
                                  .num_outputs = 1,                                                \
                                  .shape_fn = NAME##_shape,                                        \
                                  .kernel = NAME##_kernel,                                         \
                                  .grad_fn = GRAD_FN,                                              \
                                  .flags = FLAGS};                                                 \
  gr_output gr_##NAME(gr_graph *g, gr_output x) {                                                  \
    return gr_ops_build(g, #NAME, NULL, &x, 1, NULL, 0);                                           \
  }
/* Matrix products (matmul.c). gr_ops_gemm_shape checks, at build time, that
 * inputs first and first + 1 are float matrices (or of unknown rank) of one
 * dtype whose op(A) op(B) exists (attrs transpose_a, transpose_b) and writes
 * the product's shape. gr_ops_gemm_dims checks A and B are matrices
 * whose op(A) op(B) exists and fits BLAS, and writes its m, n, k (errors
 * through ctx). gr_ops_gemm computes C = alpha op(A) op(B) + beta C into the
 * row-major m x n buffer c (f32 or f64 as A). A product of at least
 * gr_ops_gemm_split_flops() is two BLAS calls, on two halves of the rows or
 * columns of C (the larger side; the first half a multiple of 16), run by
 * gr_kernel_parallel: on two threads when the executor has them, else in
 * turn. The split depends on the sizes only, never on the thread count or
 * the schedule, so results are the same bits with any number of threads.
 * With BLAS threads of its own (intra_op_threads > 1) a product is one
 * call. */
gr_status gr_ops_gemm_shape(gr_shape_ctx *ctx, int first, gr_shape *out);
gr_status gr_ops_gemm_dims(gr_kernel_ctx *ctx, const gr_tensor *A, const gr_tensor *B, bool ta,
                           bool tb, int64_t mnk[3]);
void gr_ops_gemm(gr_kernel_ctx *ctx, const gr_tensor *A, const gr_tensor *B, bool ta, bool tb,
                 const int64_t mnk[3], double alpha, double beta, void *c);
/* The BLAS calls a product of m x n x k is split into: 1 or 2. */
int gr_ops_gemm_chunks(int64_t m, int64_t n, int64_t k);
/* The smallest product (2 m n k flops) that is split: GR_OPS_GEMM_SPLIT_FLOPS,
 * or the environment's GRAPHRUN_SPLIT_FLOPS (read once). */
double gr_ops_gemm_split_flops(void);
/* From measurements on the 2-core machine, under load (docs/benchmarks.md,
 * bench-train): two halves on two threads ran the step's products from 12.8
 * MFLOP up 1.45-1.96 times faster than one call, and waking a pool thread
 * (~10-30 us) is paid back from a few MFLOP; two halves in turn on one
 * thread cost 0-4% more than one call. make bench-train prints the per
 * product table that confirms or moves it on an idle machine. */
#define GR_OPS_GEMM_SPLIT_FLOPS 8e6
/* The cost of op(A) op(B) for a node whose A and B are inputs first and
 * first + 1 (attrs transpose_a, transpose_b; unknown dims count as 1). */
void gr_ops_gemm_cost(const gr_node *n, int first, gr_cost *c);

/* The random stream of the node a kernel runs for, in this step: keyed by
 * (session seed ^ attr seed, node name, step), so values never depend on
 * scheduling (random.c; used by the random ops, dropout, augmentation). */
gr_rng gr_ops_node_rng(const gr_kernel_ctx *ctx);

/* Row-major strides (in elements) of a shape. */
void gr_ops_strides(const gr_shape *s, int64_t strides[GR_MAX_RANK]);

/* Tensor attr helpers for builder functions */
gr_output gr_ops_const_scalar(gr_graph *g, gr_dtype dtype, double v);

/* ---- elementwise programs (fused_elementwise.c) ------------------------------------ */

/* A _fused_elementwise program ("mul 0 1;add 2 3": steps of ops over the
 * inputs 0..n-1 and the earlier steps' results n + k, the last step the
 * result) over kernel inputs first..num_inputs-1 (of one float dtype; each
 * of the result's shape or a scalar). _fused_elementwise runs one; the
 * apply_* updates run one as their gradient (attr grad_program). */
#define GR_EW_BLOCK 256
typedef struct gr_ew_step {
  int op, a, b; /* b: -1 for a unary op */
} gr_ew_step;
typedef struct gr_ew {
  gr_ew_step step[GR_FUSED_ELEMENTWISE_MAX_STEPS];
  int num_steps, n;
  const void *in[GR_FUSED_ELEMENTWISE_MAX_INPUTS];
  bool scalar[GR_FUSED_ELEMENTWISE_MAX_INPUTS];
  gr_dtype dtype;
  gr_shape shape; /* the result's */
  int unique;     /* an input of the result's shape that only the kernel holds (first + i), or -1 */
} gr_ew;
/* One thread's blocks: the scalars spread, the steps' results. */
typedef union gr_ew_scratch {
  float f[GR_FUSED_ELEMENTWISE_MAX_INPUTS + GR_FUSED_ELEMENTWISE_MAX_STEPS][GR_EW_BLOCK];
  double d[GR_FUSED_ELEMENTWISE_MAX_INPUTS + GR_FUSED_ELEMENTWISE_MAX_STEPS][GR_EW_BLOCK];
} gr_ew_scratch;
/* Checks program against input dtypes and shapes at build time: *dtype and
 * *shape get the result's. Errors name the node and the program. */
gr_status gr_ew_shape(gr_shape_ctx *ctx, const char *program, int first, gr_dtype *dtype,
                      gr_shape *shape);
/* Parses program over ctx's inputs from first into *e (errors as kernel errors). */
gr_status gr_ew_prepare(gr_kernel_ctx *ctx, const char *program, int first, gr_ew *e);
/* Spreads the scalars into s (once per thread, before its blocks). */
void gr_ew_scratch_init(const gr_ew *e, gr_ew_scratch *s);
/* The result's elements [off, off + len) (len <= GR_EW_BLOCK) into out,
 * with the element arithmetic of the ops the program names (the unfused
 * bits); out may be an input's own elements at off. */
void gr_ew_block(const gr_ew *e, gr_ew_scratch *s, int64_t off, int len, void *out);

/* ---- for gradient functions ---------------------------------------------------- */

/* Forward input i and output i of the node being differentiated. */
static inline gr_output gr_grad_x(const gr_grad_ctx *c, int i) {
  return c->remap ? c->remap(c->remap_arg, c->node->inputs[i]) : c->node->inputs[i];
}
static inline gr_output gr_grad_y(const gr_grad_ctx *c, int i) {
  gr_output y = {(gr_node *)c->node, i};
  return c->remap ? c->remap(c->remap_arg, y) : y;
}
/* The gradient of y = softmax(x) over the last axis: y (dy - sum(dy y)). */
gr_output gr_ops_softmax_backprop(gr_graph *g, gr_output y, gr_output dy);
/* Fused gradient ops (nn_grad.c). */
gr_output gr_relu_grad(gr_graph *g, gr_output dy, gr_output y);
/* The gradient of relu's input for dy, the gradient of its output y: when
 * dy is a max_pool_grad of y (y pooled, nothing else using y), one
 * max_pool_grad with attr relu; else relu_grad (pool.c). */
gr_output gr_ops_fuse_relu_grad(gr_graph *g, gr_output dy, gr_output y);
gr_output gr_sparse_softmax_cross_entropy_grad(gr_graph *g, gr_output logits, gr_output labels,
                                               gr_output dloss);

/* Gradients of the indexing ops (array_index_grad.c). */
gr_status gr_ops_concat_grad(gr_grad_ctx *c);
gr_status gr_ops_split_grad(gr_grad_ctx *c);
gr_status gr_ops_slice_grad(gr_grad_ctx *c);
gr_status gr_ops_gather_grad(gr_grad_ctx *c);
gr_status gr_ops_tile_grad(gr_grad_ctx *c);
gr_status gr_ops_pad_grad(gr_grad_ctx *c);

/* A scalar constant with the dtype of `like`. */
static inline gr_output gr_grad_scalar(gr_grad_ctx *c, gr_output like, double v) {
  return gr_ops_const_scalar(c->graph, like.node->out_dtypes[like.index], v);
}

/* Every float variable node y depends on, in id order (at most cap in out);
 * -1 when out of memory. What minimize and sync_replicas train by default. */
int gr_ops_float_vars(const gr_graph *g, gr_output y, gr_output *out, int cap);
/* An error (GR_ERR_DTYPE) naming fn and the loss unless loss is f32/f64:
 * gradients() takes an integer y as contributing nothing, so minimizing
 * one would silently train nothing (TensorFlow's optimizers refuse it too). */
gr_status gr_ops_check_loss(gr_graph *g, const char *fn, gr_output loss);

#endif
