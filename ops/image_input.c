/* The image_input op and its builder (gr_images.h): the input of an
 * inference graph, a placeholder for a batch of images that says how to
 * prepare them: its shape [?, h, w, c] (the size every picture is resized
 * to, and its channels), its color mode and the class names of the
 * training folder. `graphrun export --inference` puts one where the model
 * read its images; `graphrun predict` finds it and feeds it pictures
 * decoded and resized as image_folder did while training
 * (gr_image_read_resized). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const char *const color_modes[] = {"grayscale", NULL, "rgb", "rgba"};

/* The channels of a shape [?, h, w, c] or [?, h, w] (gray); 0 when it is
 * neither, with h and w known and positive and c 1, 3 or 4. */
static int image_channels(const gr_shape *s) {
  if (s->rank != 3 && s->rank != 4) return 0;
  if (s->dims[1] < 1 || s->dims[2] < 1) return 0;
  int64_t c = s->rank == 3 ? 1 : s->dims[3];
  return c == 1 || c == 3 || c == 4 ? (int)c : 0;
}

bool gr_image_input_geometry(const gr_node *n, int64_t *height, int64_t *width, int *channels) {
  *height = *width = *channels = 0;
  if (!n || n->num_outputs != 1) return false;
  bool input =
      n->op == &gr_op_image_input || ((n->op->flags & GR_OP_PLACEHOLDER) &&
                                      (n->out_dtypes[0] == GR_F32 || n->out_dtypes[0] == GR_U8));
  const gr_shape *s = &n->out_shapes[0];
  int c = input ? image_channels(s) : 0;
  if (!c) return false;
  *height = s->dims[1];
  *width = s->dims[2];
  *channels = c;
  return true;
}

gr_status gr_image_read_resized(const char *path, int64_t height, int64_t width, int channels,
                                gr_dtype dtype, int64_t max_pixels, void *dst, gr_error *err) {
  if (height < 1 || width < 1 || (dtype != GR_F32 && dtype != GR_U8) ||
      (channels != 1 && channels != 3 && channels != 4))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s: cannot make a %lld x %lld picture of %d channels in %s", path,
                        (long long)height, (long long)width, channels, gr_dtype_name(dtype));
  gr_image img;
  GR_TRY(gr_image_read(path, channels, max_pixels, &img, err));
  int64_t n = height * width * channels;
  float *px = dtype == GR_F32 ? dst : gr_alloc_array((size_t)n, sizeof *px);
  if (!px) {
    gr_image_free(&img);
    return gr_error_set_oom(err);
  }
  gr_image_resize_bilinear(&img, height, width, px);
  gr_image_free(&img);
  if (dtype == GR_U8) {
    uint8_t *u = dst;
    for (int64_t i = 0; i < n; i++)
      u[i] = (uint8_t)lrintf(px[i] < 0 ? 0 : px[i] > 255 ? 255 : px[i]);
    free(px);
  }
  return GR_OK;
}

static gr_status image_input_shape(gr_shape_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  const gr_shape *s = &gr_node_attr(ctx->node, "shape")->shape;
  const char *mode = gr_node_attr_string(ctx->node, "color_mode", "");
  if (dt != GR_F32 && dt != GR_U8)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "image_input: dtype %s: want f32 or u8",
                          gr_dtype_name(dt));
  int c = image_channels(s);
  if (!c) {
    char b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "image_input: shape %s: want [?, height, width, channels] with a known "
                          "height and width and 1, 3 or 4 channels (or [?, height, width]: gray)",
                          gr_shape_str(s, b));
  }
  if (mode[0] && strcmp(mode, color_modes[c - 1]) != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "image_input: color_mode \"%s\" but %d channel%s (\"%s\")", mode, c,
                          c == 1 ? "" : "s", color_modes[c - 1]);
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = *s;
  return GR_OK;
}

static gr_status image_input_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                         "image_input must be fed: a batch of images, pixel values 0..255 "
                         "(graphrun predict MODEL FILE...)");
}

static const gr_attr_spec image_input_attrs[] = {
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_F32}},
    {"shape", GR_ATTR_SHAPE, true, {0}},
    {"color_mode", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"class_names", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}}};

const gr_op_def gr_op_image_input = {
    .name = "image_input",
    .doc = "a batch of images fed at run time, pixel values 0..255 (attrs dtype f32 or u8; shape "
           "[?, h, w, c]: the size pictures are resized to and their channels; color_mode; "
           "class_names, one a line): the input of an inference graph (graphrun export "
           "--inference, graphrun predict)",
    .num_outputs = 1,
    .attrs = image_input_attrs,
    .num_attrs = sizeof image_input_attrs / sizeof image_input_attrs[0],
    .shape_fn = image_input_shape,
    .cost_fn = gr_cost_fn_free,
    .kernel = image_input_kernel,
    .flags = GR_OP_PLACEHOLDER};

gr_output gr_image_input(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape,
                         const char *class_names) {
  int c = image_channels(&shape);
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_string("color_mode", c ? color_modes[c - 1] : ""),
                 gr_attr_string("class_names", class_names ? class_names : "")};
  return gr_ops_build(g, "image_input", name, NULL, 0, a, 4);
}
