/* Keras-style layers that own their variables (layers.c): one call adds a
 * layer's nodes and, the first time, its variables, with Keras' names and
 * default initialisers:
 *
 *   dense             PATH/kernel [in, units] glorot_uniform, PATH/bias [units] zeros
 *   conv2d            PATH/kernel [kh, kw, in, filters] glorot_uniform, PATH/bias zeros
 *   separable_conv2d  PATH/depthwise_kernel [kh, kw, in, depth_multiplier] and
 *                     PATH/pointwise_kernel [1, 1, in * depth_multiplier, filters]
 *                     glorot_uniform, PATH/bias [filters] zeros
 *   batch_norm        PATH/gamma ones, PATH/beta zeros (trained), PATH/moving_mean
 *                     zeros, PATH/moving_variance ones (updated in training, not
 *                     trained), all [channels]
 *
 * Part of the ops face (included by ops/gr_ops.h).
 *
 *   gr_layer_options o = gr_layer_options_default();
 *   o.name = "block1/conv2d", o.padding = "same", o.activation = GR_ACT_RELU;
 *   gr_output h = gr_conv2d_layer(g, x, 32, 3, 3, &o);    // block1/conv2d/kernel, .../bias
 *   o.name = "block1/batch_norm", o.training = true;
 *   h = gr_batch_norm_layer(g, h, &o);
 *
 * PATH (o->name) is absolute: the name scope in force names the layer's
 * other nodes, not its variables. A call whose PATH/kernel (or gamma, ...)
 * exists reuses those variables (o->reuse GR_LAYER_AUTO, the default): the
 * same layer applied again (a test pass with training false, another
 * replica). The existing variable must be a variable of the dtype and
 * shape this call wants, else it is an error naming both. GR_LAYER_NEW
 * refuses an existing variable, GR_LAYER_REUSE a missing one.
 *
 * A new variable is made as gr_variable makes one, under the device
 * scopes and functions in force (a device scope, gr_graph_push_ps_placement)
 * but outside any control dependencies, in the absolute name scope PATH.
 * Inside a gr_replicate body that puts it outside the replicas: it is
 * placed where the scopes outside the replicas put it (ps tasks; replica
 * 0's device with mirrored variables, whose copies the other replicas
 * read), and every replica reuses it. A loop cannot make variables: build
 * a layer before a gr_while_loop whose body applies it. Weights take x's dtype (f32 or
 * f64); the initialisers' random values are keyed by the variable's name
 * and o->seed (docs/training.md#layers). Errors name the layer and are the
 * graph's (the null output is returned). */
#ifndef GR_OPS_LAYERS_H
#define GR_OPS_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"

typedef enum gr_activation {
  GR_ACT_LINEAR, /* none (Keras' default, "linear") */
  GR_ACT_RELU,
  GR_ACT_SIGMOID,
  GR_ACT_TANH,
  GR_ACT_SOFTMAX, /* over the last axis */
} gr_activation;

/* The activation named s ("linear", "relu", ...); false when unknown. */
bool gr_activation_parse(const char *s, gr_activation *out);
/* y = activation(x) (x itself for GR_ACT_LINEAR). */
gr_output gr_activation_apply(gr_graph *g, gr_output x, gr_activation a);

typedef enum gr_layer_reuse {
  GR_LAYER_AUTO,  /* make the variables when missing, else reuse them */
  GR_LAYER_NEW,   /* make them; an existing one is an error */
  GR_LAYER_REUSE, /* reuse them; a missing one is an error */
} gr_layer_reuse;

typedef struct gr_layer_options {
  const char *name; /* PATH, the layer's variables' prefix (required for layers with variables) */
  gr_layer_reuse reuse;
  gr_activation activation; /* dense, conv2d, separable_conv2d */
  bool use_bias;            /* true */
  int64_t strides[2];       /* conv2d, separable_conv2d: [1, 1] */
  const char *padding;      /* "valid" or "same" (either case) */
  int64_t depth_multiplier; /* separable_conv2d: 1 */
  bool training;            /* batch_norm: batch statistics, moving ones updated (true) */
  double momentum, epsilon; /* batch_norm: Keras' 0.99, 0.001 */
  int64_t seed;             /* op seed of the kernels' initialisers: 0 */
} gr_layer_options;

/* Keras' defaults, as listed above; name NULL. */
gr_layer_options gr_layer_options_default(void);

/* Dense: activation(x @ kernel + bias), x [batch, in] (in known). */
gr_output gr_dense_layer(gr_graph *g, gr_output x, int64_t units, const gr_layer_options *o);
/* Conv2D: activation(conv2d(x, kernel) + bias), x [n, h, w, in] (in known),
 * a kh x kw kernel, o->strides and o->padding. */
gr_output gr_conv2d_layer(gr_graph *g, gr_output x, int64_t filters, int64_t kh, int64_t kw,
                          const gr_layer_options *o);
/* SeparableConv2D: a depthwise kh x kw convolution (each input channel by
 * its own depth_multiplier filters; o->strides, o->padding), then a 1x1
 * convolution to `filters` channels, + bias, activation. */
gr_output gr_separable_conv2d_layer(gr_graph *g, gr_output x, int64_t filters, int64_t kh,
                                    int64_t kw, const gr_layer_options *o);
/* BatchNormalization over the last axis (gr_batch_norm: in training, batch
 * statistics and updates of the moving ones; else the moving ones). */
gr_output gr_batch_norm_layer(gr_graph *g, gr_output x, const gr_layer_options *o);
/* Rescaling: x * scale + offset (x's dtype). */
gr_output gr_rescaling(gr_graph *g, gr_output x, double scale, double offset);

/* How rotation and zoom fill and sample (image_transform.c); zeros: Keras'
 * defaults fill_mode "reflect", interpolation "bilinear", fill_value 0. */
typedef struct gr_image_fill {
  const char *fill_mode;     /* "reflect", "wrap", "constant", "nearest" */
  const char *interpolation; /* "bilinear", "nearest" */
  double fill_value;         /* "constant": what outside points read */
} gr_image_fill;
/* Augmentation ops of image batches x [n, h, w, c] (docs/ops.md): each
 * image's draws a pure function of (graph seed ^ seed, node, step, image);
 * no gradient. Keras' RandomFlip (mode "horizontal", "vertical" or NULL:
 * both), RandomRotation (an angle uniform in [lower, upper] * 2 pi; output
 * 1: the angles) and RandomZoom (the image shows 1 + d times its height, d
 * uniform in height[0..1]; width NULL: the same zoom; output 1: the zooms
 * [n, 2]). In inference (training false) a Keras augmentation layer is the
 * identity: do not add the op. */
gr_output gr_random_flip(gr_graph *g, gr_output x, const char *mode, int64_t seed);
gr_output gr_random_rotation(gr_graph *g, gr_output x, double lower, double upper,
                             const gr_image_fill *fill, int64_t seed);
gr_output gr_random_zoom(gr_graph *g, gr_output x, const double height[2], const double *width,
                         const gr_image_fill *fill, int64_t seed);

/* What a variable is for, as Keras' model.summary() counts parameters
 * (graphrun check --layers). */
typedef enum gr_variable_role {
  GR_VAR_NONE,          /* not a variable */
  GR_VAR_TRAINABLE,     /* a float variable gradients may train (a kernel, a bias, gamma) */
  GR_VAR_NON_TRAINABLE, /* a model's state: a batch norm's moving statistics, an integer */
  GR_VAR_SLOT,          /* an optimizer's slot (momentum, Adam's m, v and step) */
  GR_VAR_COPY,          /* a mirrored copy of another variable (VAR/replica_i) */
  GR_VAR_STEP,          /* the global step (gr_global_step) */
} gr_variable_role;
/* roles[id - first] for the nodes [first, last) of g, judged from the
 * nodes in that range (slots by the optimizer updates that name them,
 * moving statistics by the batch norms and updates that read them). */
void gr_variable_roles(const gr_graph *g, int first, int last, unsigned char *roles);

#endif
