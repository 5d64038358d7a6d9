/* Keras-style layers that own their variables (gr_ops_layers.h): dense,
 * conv2d, separable_conv2d, batch_norm, rescaling, and the activations.
 * A layer's variables are PATH/NAME, found by name when they exist (the
 * layer applied again) and otherwise made in the absolute name scope PATH
 * outside any control dependencies, so a layer first called inside a
 * cond branch, a loop body or a replica's body makes them outside it. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_layer_options gr_layer_options_default(void) {
  return (gr_layer_options){.use_bias = true,
                            .strides = {1, 1},
                            .padding = "valid",
                            .depth_multiplier = 1,
                            .training = true,
                            .momentum = 0.99,
                            .epsilon = 1e-3};
}

static const char *const activation_names[] = {"linear", "relu", "sigmoid", "tanh", "softmax"};

bool gr_activation_parse(const char *s, gr_activation *out) {
  for (int i = 0; i < (int)(sizeof activation_names / sizeof activation_names[0]); i++)
    if (s && strcmp(s, activation_names[i]) == 0) {
      *out = (gr_activation)i;
      return true;
    }
  return false;
}

gr_output gr_activation_apply(gr_graph *g, gr_output x, gr_activation a) {
  switch (a) {
    case GR_ACT_RELU:
      return gr_relu(g, x);
    case GR_ACT_SIGMOID:
      return gr_sigmoid(g, x);
    case GR_ACT_TANH:
      return gr_tanh(g, x);
    case GR_ACT_SOFTMAX:
      return gr_softmax(g, x);
    case GR_ACT_LINEAR:
      return x;
  }
  return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "unknown activation %d", (int)a);
}

typedef enum init_kind { INIT_GLOROT, INIT_ZEROS, INIT_ONES } init_kind;

/* The layer being built, for its variables and messages. */
typedef struct layer {
  gr_graph *g;
  const char *kind; /* "dense", ... */
  const gr_layer_options *o;
  gr_dtype dtype;
} layer;

/* A new variable `var` of the layer: in the absolute scope PATH, its
 * initial value in PATH/var, no control dependencies. */
static gr_output new_variable(const layer *l, const char *var, gr_shape shape, init_kind init) {
  gr_graph *g = l->g;
  char scope[600];
  gr_output x0 = {NULL, 0}, v = {NULL, 0};
  if (gr_graph_push_no_control_deps(g) != GR_OK) return v;
  snprintf(scope, sizeof scope, "/%s/%s", l->o->name, var);
  if (gr_graph_push_name_scope(g, scope) == GR_OK) {
    x0 = init == INIT_GLOROT ? gr_glorot_uniform(g, l->dtype, shape, l->o->seed)
                             : gr_fill(g, l->dtype, shape, init == INIT_ONES ? 1 : 0);
    gr_graph_pop_name_scope(g);
  }
  snprintf(scope, sizeof scope, "/%s", l->o->name);
  if (x0.node && gr_graph_push_name_scope(g, scope) == GR_OK) {
    v = gr_variable(g, var, x0);
    gr_graph_pop_name_scope(g);
  }
  gr_graph_pop_control_deps(g);
  return v;
}

/* PATH/var: the existing variable (of this dtype and shape), or a new one. */
static gr_output layer_variable(const layer *l, const char *var, gr_shape shape, init_kind init) {
  gr_graph *g = l->g;
  const gr_layer_options *o = l->o;
  char full[600], a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if ((size_t)snprintf(full, sizeof full, "%s/%s", o->name, var) >= sizeof full - 8)
    return gr_ops_fail(g, GR_ERR_OUT_OF_RANGE, "%s '%s': the layer's name is too long", l->kind,
                       o->name);
  gr_node *old = gr_graph_find_node(g, full);
  if (!old && o->reuse == GR_LAYER_REUSE)
    return gr_ops_fail(g, GR_ERR_NOT_FOUND, "%s '%s': no variable '%s' to reuse", l->kind, o->name,
                       full);
  if (!old) return new_variable(l, var, shape, init);
  if (o->reuse == GR_LAYER_NEW)
    return gr_ops_fail(g, GR_ERR_ALREADY_EXISTS, "%s '%s': variable '%s' exists already%s%s",
                       l->kind, o->name, full, old->source_loc ? ", made at " : "",
                       old->source_loc ? old->source_loc : "");
  if (!gr_ops_is_variable(old))
    return gr_ops_fail(g, GR_ERR_ALREADY_EXISTS,
                       "%s '%s': node '%s' (op %s) exists and is not the layer's variable", l->kind,
                       o->name, full, old->op->name);
  if (old->out_dtypes[0] != l->dtype || !gr_shape_equal(&old->out_shapes[0], &shape))
    return gr_ops_fail(g, GR_ERR_SHAPE,
                       "%s '%s': variable '%s' is %s %s%s%s, but this call needs %s %s (the same "
                       "layer applied to an input of another size, or with other units, "
                       "filters or kernel size?)",
                       l->kind, o->name, full, gr_dtype_name(old->out_dtypes[0]),
                       gr_shape_str(&old->out_shapes[0], a), old->source_loc ? ", made at " : "",
                       old->source_loc ? old->source_loc : "", gr_dtype_name(l->dtype),
                       gr_shape_str(&shape, b));
  return (gr_output){old, 0};
}

/* Checks x and the options; *ch gets x's last (channel) dim. */
static bool layer_start(layer *l, gr_graph *g, const char *kind, gr_output x, int rank,
                        const gr_layer_options *o, int64_t *ch) {
  l->g = g, l->kind = kind, l->o = o;
  if (!x.node) return false;
  if (!o || !o->name || !o->name[0]) {
    gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "%s: a layer with variables needs a name",
                        kind);
    return false;
  }
  char s[GR_SHAPE_STR_MAX];
  const gr_shape *sh = &x.node->out_shapes[x.index];
  l->dtype = x.node->out_dtypes[x.index];
  if (l->dtype != GR_F32 && l->dtype != GR_F64) {
    gr_graph_set_errorf(g, GR_ERR_DTYPE, "%s '%s': the input '%s' is %s; a layer takes f32 or f64",
                        kind, o->name, x.node->name, gr_dtype_name(l->dtype));
    return false;
  }
  if (rank && sh->rank != rank) {
    gr_graph_set_errorf(g, GR_ERR_SHAPE, "%s '%s': the input '%s' is %s; it takes rank %d%s", kind,
                        o->name, x.node->name, gr_shape_str(sh, s), rank,
                        rank == 2 ? " ([batch, features]: flatten images first)"
                                  : " ([batch, height, width, channels])");
    return false;
  }
  if (sh->rank < 1 || sh->dims[sh->rank - 1] < 0) {
    gr_graph_set_errorf(g, GR_ERR_SHAPE,
                        "%s '%s': the input '%s' is %s; the layer needs its last dimension to "
                        "size its variables",
                        kind, o->name, x.node->name, gr_shape_str(sh, s));
    return false;
  }
  *ch = sh->dims[sh->rank - 1];
  return true;
}

static bool positive(gr_graph *g, const layer *l, const char *what, int64_t v) {
  if (v >= 1) return true;
  gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "%s '%s': %s must be >= 1, got %lld", l->kind,
                      l->o->name, what, (long long)v);
  return false;
}

/* + bias (when the layer has one), then the activation. */
static gr_output finish(const layer *l, gr_output y, int64_t units) {
  if (l->o->use_bias) {
    gr_output b = layer_variable(l, "bias", gr_shape_make(1, (int64_t[]){units}), INIT_ZEROS);
    y = gr_bias_add(l->g, y, b);
  }
  return gr_activation_apply(l->g, y, l->o->activation);
}

gr_output gr_dense_layer(gr_graph *g, gr_output x, int64_t units, const gr_layer_options *o) {
  layer l;
  int64_t in;
  if (!layer_start(&l, g, "dense", x, 2, o, &in) || !positive(g, &l, "units", units))
    return (gr_output){NULL, 0};
  gr_output k = layer_variable(&l, "kernel", gr_shape_make(2, (int64_t[]){in, units}), INIT_GLOROT);
  return finish(&l, gr_matmul(g, x, k, false, false), units);
}

/* The conv options of a layer: strides, padding in the op's spelling. */
static bool conv_options(gr_graph *g, const layer *l, gr_conv_options *c) {
  memset(c, 0, sizeof *c);
  const char *p = l->o->padding ? l->o->padding : "valid";
  if (strcasecmp(p, "valid") != 0 && strcasecmp(p, "same") != 0) {
    gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                        "%s '%s': padding must be \"valid\" or \"same\", got \"%s\"", l->kind,
                        l->o->name, p);
    return false;
  }
  c->padding = strcasecmp(p, "same") == 0 ? "SAME" : "VALID";
  for (int i = 0; i < 2; i++) {
    c->strides[i] = l->o->strides[i] ? l->o->strides[i] : 1;
    if (!positive(g, l, "strides", c->strides[i])) return false;
  }
  return true;
}

gr_output gr_conv2d_layer(gr_graph *g, gr_output x, int64_t filters, int64_t kh, int64_t kw,
                          const gr_layer_options *o) {
  layer l;
  int64_t in;
  gr_conv_options c;
  if (!layer_start(&l, g, "conv2d", x, 4, o, &in) || !positive(g, &l, "filters", filters) ||
      !positive(g, &l, "the kernel size", kh) || !positive(g, &l, "the kernel size", kw) ||
      !conv_options(g, &l, &c))
    return (gr_output){NULL, 0};
  gr_output k =
      layer_variable(&l, "kernel", gr_shape_make(4, (int64_t[]){kh, kw, in, filters}), INIT_GLOROT);
  return finish(&l, gr_conv2d(g, x, k, &c), filters);
}

gr_output gr_separable_conv2d_layer(gr_graph *g, gr_output x, int64_t filters, int64_t kh,
                                    int64_t kw, const gr_layer_options *o) {
  layer l;
  int64_t in;
  gr_conv_options c;
  if (!layer_start(&l, g, "separable_conv2d", x, 4, o, &in) ||
      !positive(g, &l, "filters", filters) || !positive(g, &l, "the kernel size", kh) ||
      !positive(g, &l, "the kernel size", kw) ||
      !positive(g, &l, "depth_multiplier", o->depth_multiplier) || !conv_options(g, &l, &c))
    return (gr_output){NULL, 0};
  int64_t dm = o->depth_multiplier;
  gr_output dk = layer_variable(&l, "depthwise_kernel",
                                gr_shape_make(4, (int64_t[]){kh, kw, in, dm}), INIT_GLOROT);
  gr_output pk = layer_variable(&l, "pointwise_kernel",
                                gr_shape_make(4, (int64_t[]){1, 1, in * dm, filters}), INIT_GLOROT);
  /* [kh, kw, in, dm] is [kh, kw, 1, in * dm] for a conv with `in` groups:
   * output channel c * dm + m is input channel c by filter m */
  c.groups = in;
  gr_output d =
      gr_conv2d(g, x, gr_reshape(g, dk, gr_shape_make(4, (int64_t[]){kh, kw, 1, in * dm})), &c);
  return finish(&l, gr_conv2d(g, d, pk, NULL), filters);
}

gr_output gr_batch_norm_layer(gr_graph *g, gr_output x, const gr_layer_options *o) {
  layer l;
  int64_t ch;
  if (!layer_start(&l, g, "batch_norm", x, 0, o, &ch)) return (gr_output){NULL, 0};
  gr_shape s = gr_shape_make(1, (int64_t[]){ch});
  gr_output gamma = layer_variable(&l, "gamma", s, INIT_ONES);
  gr_output beta = layer_variable(&l, "beta", s, INIT_ZEROS);
  gr_output mean = layer_variable(&l, "moving_mean", s, INIT_ZEROS);
  gr_output var = layer_variable(&l, "moving_variance", s, INIT_ONES);
  return gr_batch_norm(g, x, gamma, beta, mean, var, o->training, o->momentum, o->epsilon, NULL);
}

gr_output gr_rescaling(gr_graph *g, gr_output x, double scale, double offset) {
  if (!x.node) return x;
  gr_dtype dt = x.node->out_dtypes[x.index];
  gr_output y = gr_mul(g, x, gr_ops_const_scalar(g, dt, scale));
  return offset != 0 ? gr_add(g, y, gr_ops_const_scalar(g, dt, offset)) : y;
}

/* The variable node a read (variable or read_value, attr var) reads. */
static const gr_node *read_variable(const gr_graph *g, const gr_node *read) {
  if (gr_ops_is_variable(read)) return read;
  if (!gr_ops_is_variable_read(read)) return NULL;
  const gr_node *v = gr_graph_find_node(g, gr_node_attr_string(read, "var", ""));
  return v && gr_ops_is_variable(v) ? v : NULL;
}

static void mark(unsigned char *roles, int first, int last, const gr_node *v, gr_variable_role r) {
  if (v && v->id >= first && v->id < last && roles[v->id - first] == GR_VAR_TRAINABLE)
    roles[v->id - first] = (unsigned char)r;
}

void gr_variable_roles(const gr_graph *g, int first, int last, unsigned char *roles) {
  for (int id = first; id < last; id++) {
    const gr_node *n = gr_graph_node(g, id);
    gr_variable_role r = GR_VAR_NONE;
    if (gr_ops_is_variable(n))
      r = gr_node_attr_string(n, "mirror_of", "")[0] ? GR_VAR_COPY
          : strcmp(n->name, "global_step") == 0      ? GR_VAR_STEP
          : gr_dtype_is_float(n->out_dtypes[0])      ? GR_VAR_TRAINABLE
                                                     : GR_VAR_NON_TRAINABLE;
    roles[id - first] = (unsigned char)r;
  }
  for (int id = first; id < last; id++) {
    const gr_node *n = gr_graph_node(g, id);
    for (int a = 0; a < n->num_attrs; a++)
      if (!strncmp(n->attrs[a].name, "slot", 4) && n->attrs[a].value.type == GR_ATTR_STRING)
        mark(roles, first, last, gr_graph_find_node(g, n->attrs[a].value.s), GR_VAR_SLOT);
    if (n->op == &gr_op_batch_norm)
      for (int i = 3; i < 5 && i < n->num_inputs; i++)
        mark(roles, first, last, read_variable(g, n->inputs[i].node), GR_VAR_NON_TRAINABLE);
    if (n->op == &gr_op_moving_average_update && n->num_inputs > 0)
      mark(roles, first, last, read_variable(g, n->inputs[0].node), GR_VAR_NON_TRAINABLE);
  }
}
