/* Window geometry shared by the convolution and pooling ops (NHWC): attrs
 * (strides, padding, explicit_paddings, dilations, ksize), output sizes,
 * the im2col copy used by conv2d and both its gradients, and a strided
 * gemm; data formats (attr data_format, NHWC or NCHW) and the copies that
 * let the NHWC kernels serve NCHW nodes (conv_layout.c). Internal to ops/. */
#ifndef GR_CONV_INTERNAL_H
#define GR_CONV_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"

/* The layout of an image batch: [n, h, w, c] or [n, c, h, w]. */
typedef enum gr_data_format { GR_FORMAT_NHWC, GR_FORMAT_NCHW } gr_data_format;

typedef enum gr_conv_padding {
  GR_CONV_PAD_VALID,
  GR_CONV_PAD_SAME,
  GR_CONV_PAD_EXPLICIT
} gr_conv_padding;

/* The window attrs of a node: kernel size (pools: attr ksize; conv: from the
 * filter, set by the caller), strides, dilations, padding. */
typedef struct gr_conv_attrs {
  int64_t kh, kw, sh, sw, dh, dw;
  gr_conv_padding padding;
  int64_t pads[4]; /* explicit: top, bottom, left, right */
  int64_t groups;
  gr_data_format format;
} gr_conv_attrs;

/* One window op on an NHWC input: sizes, output sizes and the padding
 * before the first row / column. */
typedef struct gr_conv_geom {
  int64_t n, h, w, c; /* input */
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t oh, ow;     /* output rows and columns */
  int64_t pt, pl;     /* padding at the top and the left */
  int64_t groups, oc; /* conv: groups, output channels */
} gr_conv_geom;

/* Reads attrs strides, dilations, padding, explicit_paddings, groups,
 * data_format and (pool) ksize of node n (4-value strides / ksize /
 * dilations in the format's order: [1, h, w, 1] or [1, 1, h, w]). Errors: a message in msg, a
 * status returned. */
gr_status gr_conv_read_attrs(const gr_node *n, bool pool, gr_conv_attrs *a, char *msg, size_t cap);

/* The output size of one spatial axis of `in` elements (-1: unknown, gives
 * -1) and the padding before it; an error (message in msg) when the
 * dilated kernel is larger than the padded input. axis: "height"/"width". */
gr_status gr_conv_out_dim(const gr_conv_attrs *a, int axis, int64_t in, int64_t *out,
                          int64_t *pad_before, char *msg, size_t cap);

/* Fills g for input [n, h, w, c] (all known) and attrs a. */
gr_status gr_conv_geom_make(const gr_conv_attrs *a, const int64_t nhwc[4], gr_conv_geom *g,
                            char *msg, size_t cap);

/* The input size of one axis that a window op with these attrs maps to an
 * output of `out` elements (conv2d_transpose); -1 stays -1. */
int64_t gr_conv_in_dim(const gr_conv_attrs *a, int axis, int64_t out);

/* im2col for output positions [p0, p1) (flattened n, oh, ow) and input
 * channels [c0, c0 + cg): row p - p0 of col (kh * kw * cg values, ordered
 * (i, j, c) as a filter [kh, kw, cg, ...]) gets the window of position p,
 * zeros where it reaches into padding. With scatter, the reverse: col is
 * added into x (col2im; padding ignored). x and col are f32 or f64. */
void gr_conv_cols(const gr_conv_geom *g, gr_dtype dt, void *x, void *col, int64_t p0, int64_t p1,
                  int64_t c0, int64_t cg, bool scatter);

/* Is the conv a plain product (1x1 kernel, stride 1, no padding)? Then x
 * itself is the im2col matrix. */
bool gr_conv_is_pointwise(const gr_conv_geom *g);

/* Output positions per im2col tile so that the buffer of k values per row
 * stays within a fixed budget (at least 1). */
int64_t gr_conv_tile_rows(int64_t k, gr_dtype dt);

/* C = alpha op(A) op(B) + beta C on row-major matrices with leading
 * dimensions; f32 (sgemm) or f64 (dgemm). */
void gr_conv_gemm(gr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* The runtime rows [begin, end) of a window clipped to the input: for output
 * index o of an axis with stride s and padding before pb, kernel k. */
static inline void gr_conv_window(int64_t o, int64_t s, int64_t pb, int64_t k, int64_t in,
                                  int64_t *begin, int64_t *end) {
  int64_t b = o * s - pb, e = b + k;
  *begin = b < 0 ? 0 : b;
  *end = e > in ? in : e;
}

/* The output shape of a window op node for input shapes in (dims may be
 * unknown); errors into msg. */
typedef gr_status (*gr_window_shapes_fn)(const gr_node *n, const gr_shape *in, gr_shape *out,
                                         char *msg, size_t cap);
/* The shape function of a window op: inputs of one float dtype, the output
 * from shapes. */
gr_status gr_window_shape_fn(gr_shape_ctx *ctx, gr_window_shapes_fn shapes);
/* For its kernel: the same checks on the runtime inputs; their shapes into
 * in_shapes (ctx->num_inputs of them) and the output shape into *out. */
gr_status gr_window_kernel_shapes(gr_kernel_ctx *ctx, gr_window_shapes_fn shapes,
                                  gr_shape *in_shapes, gr_shape *out);

/* Input 0 is a float image batch of rank 4 in format f (or of unknown
 * rank): for shape functions, and for kernels against the runtime tensor. */
gr_status gr_ops_check_images(gr_shape_ctx *ctx, gr_data_format f);
gr_status gr_ops_kernel_check_images(gr_kernel_ctx *ctx, gr_data_format f);

/* Defines const gr_op_def gr_op_NAME for a window op whose inputs are named
 * by the last arguments ("x", "filter"). GR_WINDOW_OP_EX: the first
 * MIN_IN of them are needed, and it has NOUT outputs. */
#define GR_WINDOW_OP_EX(NAME, DOC, ATTRS, SHAPE, COST, KERNEL, GRAD, MIN_IN, NOUT, ...)            \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = MIN_IN,                                            \
                                  .max_inputs = GR_WINDOW_NUM_INPUTS(__VA_ARGS__),                 \
                                  .input_names = (const char *const[]){__VA_ARGS__},               \
                                  .num_outputs = NOUT,                                             \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = sizeof ATTRS / sizeof ATTRS[0],                     \
                                  .shape_fn = SHAPE,                                               \
                                  .cost_fn = COST,                                                 \
                                  .kernel = KERNEL,                                                \
                                  .grad_fn = GRAD,                                                 \
                                  .flags = GR_OP_EXPENSIVE};
#define GR_WINDOW_OP(NAME, DOC, ATTRS, SHAPE, COST, KERNEL, GRAD, ...)                             \
  GR_WINDOW_OP_EX(NAME, DOC, ATTRS, SHAPE, COST, KERNEL, GRAD, GR_WINDOW_NUM_INPUTS(__VA_ARGS__),  \
                  1, __VA_ARGS__)
#define GR_WINDOW_NUM_INPUTS(...)                                                                  \
  (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* Attr specs shared by the window ops (conv_geom.c). */
extern const gr_attr_spec gr_conv_attr_specs[6];
extern const gr_attr_spec gr_pool_attr_specs[5];
/* _fused_conv2d's: the conv attrs, fused_ops (string, required) and
 * epsilon (float, 1e-3). */
extern const gr_attr_spec gr_fused_conv_attr_specs[8];
/* max_pool_grad's: the pool attrs and relu (bool, default false). */
extern const gr_attr_spec gr_pool_grad_attr_specs[6];
/* The data_format attr ("NHWC" default, or "NCHW"), for the other image
 * ops' attr lists. */
#define GR_DATA_FORMAT_ATTR                                                                        \
  {                                                                                                \
    "data_format", GR_ATTR_STRING, false, {                                                        \
      .type = GR_ATTR_STRING, .s = "NHWC"                                                          \
    }                                                                                              \
  }

/* ---- oneDNN (conv_dnnl.c) ------------------------------------------------------ */

/* Does conv_dnnl run conv g (f32 assumed): one group, more than 4 input
 * channels, not pointwise (gr_conv_is_pointwise: one sgemm is faster), or
 * depthwise with depth multiplier 1 and no dilation (NHWC images only:
 * the caller transposes NCHW); padding that oneDNN takes (none negative),
 * and oneDNN's engine could be made? */
bool gr_conv_dnnl_applies(const gr_conv_geom *g);
/* mode 0: out = y = conv2d(a = x, b = f), then ep (when not NULL) on
 * each block of images; 1: out = dx for a = dy, b = f; 2: out = df for a
 * = x, b = dy. Images in format fmt (g in NHWC terms), filters HWIO.
 * Errors: ctx's, a status returned. */
typedef struct gr_conv_epilogue gr_conv_epilogue;
gr_status gr_conv_dnnl(gr_kernel_ctx *ctx, const gr_conv_geom *g, gr_data_format fmt, int mode,
                       const float *a, const float *b, float *out, const gr_conv_epilogue *ep);

/* ---- conv2d's forward with an epilogue (conv.c, conv_fused.c) ------------------ */

/* What _fused_conv2d does to the convolution's output, element by
 * element, with the arithmetic of the ops it stands for, so the same
 * bits: y + bias[channel] (bias_add), or a (y - ctr) + b (batch_norm at
 * inference: a and ctr from gr_ops_bn_affine_f32, b its beta; NULL a:
 * none), then max(y, 0) when relu (relu). */
struct gr_conv_epilogue {
  const float *bias;
  const float *a, *ctr, *b;
  bool relu;
  int64_t c, hw; /* set by gr_conv_forward_kernel: channels, positions per image */
};
/* e on images [0, n) at y: channels last, or planes (nchw). */
void gr_conv_epilogue_apply(const gr_conv_epilogue *e, bool nchw, float *y, int64_t n);
/* The same split over ctx's threads by images. */
void gr_conv_epilogue_run(gr_kernel_ctx *ctx, const gr_conv_epilogue *e, bool nchw, float *y,
                          int64_t n);
/* conv2d's kernel on ctx (inputs x, filter, then any others, ignored),
 * with ep (NULL: none) applied to each block of images as it is done. */
gr_status gr_conv_forward_kernel(gr_kernel_ctx *ctx, gr_conv_epilogue *ep);
/* conv2d's shape and cost functions (inputs past the filter: of the same
 * dtype; counted as bytes read). */
gr_status gr_conv_shape_fn(gr_shape_ctx *ctx);
void gr_conv_cost(const gr_node *n, gr_cost *c);

/* batch_norm's arithmetic (batch_norm.c), shared with the fused epilogue:
 * the inference statistics from the moving mean and variance tensors
 * (rstd = 1 / sqrt(var + eps), in double), and the f32 affine y = a (x -
 * ctr) + beta with a = gamma rstd and ctr = mean, rounded to f32. */
void gr_ops_bn_moving_stats(const gr_tensor *mm, const gr_tensor *mv, double eps, int64_t c,
                            double *mean, double *var, double *rstd);
void gr_ops_bn_affine_f32(const double *mean, const double *rstd, const float *gamma, int64_t c,
                          float *a, float *ctr);

/* ---- data formats (conv_layout.c) ---------------------------------------------- */

/* The axes of height, width and channels in a rank-4 image of a format. */
typedef struct gr_image_axes {
  int h, w, c;
} gr_image_axes;

/* Reads attr data_format of n; anything but "NHWC" and "NCHW" is an error
 * (message in msg). */
gr_status gr_layout_read_format(const gr_node *n, gr_data_format *f, char *msg, size_t cap);
const char *gr_layout_format_name(gr_data_format f);
gr_image_axes gr_layout_axes(gr_data_format f);
/* The channel axis of a rank-`rank` tensor (rank >= 2): NHWC the last, NCHW 1. */
int gr_layout_channel_axis(gr_data_format f, int rank);
/* A shape of format f as channels-last (NCHW: axis 1 moved to the end), and
 * back; NHWC shapes and ranks below 2 are returned as they are. */
gr_shape gr_layout_shape_to_nhwc(const gr_shape *s, gr_data_format f);
gr_shape gr_layout_shape_from_nhwc(const gr_shape *s, gr_data_format f);

/* A kernel of an NCHW node run by NHWC code: gr_layout_begin gives in[i]
 * as channels-last (for the inputs whose bit is set in `images`, a
 * transposed copy; else a view of ctx->inputs[i]); gr_layout_alloc_output
 * allocates output i in the node's format and, for an image of an NCHW
 * node, returns a channels-last scratch to compute into instead;
 * gr_layout_end copies the scratches into the outputs (when s is GR_OK)
 * and frees the copies. For an NHWC node all of it is free. */
#define GR_LAYOUT_MAX_IO 6
#define GR_LAYOUT_OUTPUT (1u << 31) /* in `images` of gr_layout_add_cost: output 0 */
typedef struct gr_layout_kernel {
  bool nchw;
  int num_inputs;
  gr_tensor in[GR_LAYOUT_MAX_IO];
  bool owned[GR_LAYOUT_MAX_IO];        /* in[i] is a copy */
  gr_tensor scratch[GR_LAYOUT_MAX_IO]; /* channels-last outputs */
  gr_tensor *dest[GR_LAYOUT_MAX_IO];   /* where they go */
} gr_layout_kernel;
/* Errors: the status (ctx->err set); nothing to release then. */
gr_status gr_layout_begin(gr_kernel_ctx *ctx, gr_data_format f, unsigned images,
                          gr_layout_kernel *k);
gr_status gr_layout_alloc_output(gr_kernel_ctx *ctx, gr_layout_kernel *k, int i, gr_dtype dt,
                                 const gr_shape *shape, bool image, gr_tensor **out);
/* Returns s. */
gr_status gr_layout_end(gr_layout_kernel *k, gr_status s);
/* Adds the bytes of the NCHW copies (inputs in `images`, output 0 with
 * GR_LAYOUT_OUTPUT) to an NCHW node's cost; nothing for NHWC. */
void gr_layout_add_cost(const gr_node *n, unsigned images, gr_cost *c);

#endif
