/* Data formats of the image ops (conv_internal.h): attr data_format, the
 * axes of each format, and the NCHW <-> NHWC copies through which the NHWC
 * kernels of conv2d, the pools and batch_norm serve NCHW nodes. */
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_status gr_layout_read_format(const gr_node *n, gr_data_format *f, char *msg, size_t cap) {
  const char *s = gr_node_attr_string(n, "data_format", "NHWC");
  if (strcmp(s, "NHWC") == 0) {
    *f = GR_FORMAT_NHWC;
  } else if (strcmp(s, "NCHW") == 0) {
    *f = GR_FORMAT_NCHW;
  } else {
    snprintf(msg, cap, "unknown data_format '%s' (expected NHWC or NCHW)", s);
    return GR_ERR_INVALID_ARGUMENT;
  }
  return GR_OK;
}

const char *gr_layout_format_name(gr_data_format f) {
  return f == GR_FORMAT_NCHW ? "NCHW" : "NHWC";
}

gr_image_axes gr_layout_axes(gr_data_format f) {
  return f == GR_FORMAT_NCHW ? (gr_image_axes){2, 3, 1} : (gr_image_axes){1, 2, 3};
}

int gr_layout_channel_axis(gr_data_format f, int rank) {
  return f == GR_FORMAT_NCHW ? 1 : rank - 1;
}

/* Moves axis `from` of s to position `to` (the others keep their order). */
static gr_shape move_axis(const gr_shape *s, int from, int to) {
  gr_shape r = *s;
  if (s->rank < 2) return r;
  int64_t d = s->dims[from];
  if (from < to)
    memmove(&r.dims[from], &r.dims[from + 1], sizeof(int64_t) * (size_t)(to - from));
  else
    memmove(&r.dims[to + 1], &r.dims[to], sizeof(int64_t) * (size_t)(from - to));
  r.dims[to] = d;
  return r;
}

gr_shape gr_layout_shape_to_nhwc(const gr_shape *s, gr_data_format f) {
  return f == GR_FORMAT_NCHW && s->rank >= 2 ? move_axis(s, 1, s->rank - 1) : *s;
}

gr_shape gr_layout_shape_from_nhwc(const gr_shape *s, gr_data_format f) {
  return f == GR_FORMAT_NCHW && s->rank >= 2 ? move_axis(s, s->rank - 1, 1) : *s;
}

/* dst [outer, b, a] = src [outer, a, b] transposed in each of the outer
 * blocks, element size es; tiled so both sides stay in cache. */
static void swap_inner(const char *src, char *dst, int64_t outer, int64_t a, int64_t b, size_t es) {
  enum { T = 32 };
  for (int64_t o = 0; o < outer; o++) {
    const char *s = src + (size_t)(o * a * b) * es;
    char *d = dst + (size_t)(o * a * b) * es;
    for (int64_t i0 = 0; i0 < a; i0 += T)
      for (int64_t j0 = 0; j0 < b; j0 += T) {
        int64_t i1 = i0 + T < a ? i0 + T : a, j1 = j0 + T < b ? j0 + T : b;
        for (int64_t i = i0; i < i1; i++)
          for (int64_t j = j0; j < j1; j++)
            memcpy(d + (size_t)(j * a + i) * es, s + (size_t)(i * b + j) * es, es);
      }
  }
}

/* Copies src [n, c, rest] into dst as [n, rest, c] (to_nhwc), or src [n,
 * rest, c] into dst as [n, c, rest]. */
static void relayout(const gr_tensor *src, bool to_nhwc, gr_tensor *dst) {
  const gr_shape *s = &src->shape;
  int64_t n = s->dims[0], c = to_nhwc ? s->dims[1] : s->dims[s->rank - 1];
  int64_t rest = n > 0 && c > 0 ? gr_tensor_num_elements(src) / (n * c) : 0;
  swap_inner(gr_tensor_data(src), gr_tensor_data(dst), n, to_nhwc ? c : rest, to_nhwc ? rest : c,
             gr_dtype_size(src->dtype));
}

gr_status gr_layout_begin(gr_kernel_ctx *ctx, gr_data_format f, unsigned images,
                          gr_layout_kernel *k) {
  memset(k, 0, sizeof *k);
  k->nchw = f == GR_FORMAT_NCHW;
  k->num_inputs = ctx->num_inputs < GR_LAYOUT_MAX_IO ? ctx->num_inputs : GR_LAYOUT_MAX_IO;
  for (int i = 0; i < k->num_inputs; i++) {
    const gr_tensor *t = &ctx->inputs[i];
    k->owned[i] = k->nchw && (images >> i & 1) && t->shape.rank >= 2;
    if (!k->owned[i]) {
      k->in[i] = *t; /* a view: no reference taken */
      continue;
    }
    gr_shape s = gr_layout_shape_to_nhwc(&t->shape, GR_FORMAT_NCHW);
    if (gr_tensor_alloc(&k->in[i], t->dtype, &s, ctx->err) != GR_OK) {
      k->owned[i] = false;
      return gr_layout_end(k, ctx->err->code);
    }
    relayout(t, true, &k->in[i]);
  }
  return GR_OK;
}

gr_status gr_layout_alloc_output(gr_kernel_ctx *ctx, gr_layout_kernel *k, int i, gr_dtype dt,
                                 const gr_shape *shape, bool image, gr_tensor **out) {
  GR_TRY(gr_kernel_alloc_output(ctx, i, dt, shape, out));
  if (!k->nchw || !image || shape->rank < 2 || i >= GR_LAYOUT_MAX_IO) return GR_OK;
  gr_shape s = gr_layout_shape_to_nhwc(shape, GR_FORMAT_NCHW);
  GR_TRY(gr_tensor_alloc(&k->scratch[i], dt, &s, ctx->err));
  k->dest[i] = *out;
  *out = &k->scratch[i];
  return GR_OK;
}

gr_status gr_layout_end(gr_layout_kernel *k, gr_status s) {
  for (int i = 0; i < GR_LAYOUT_MAX_IO; i++) {
    if (s == GR_OK && k->dest[i]) relayout(&k->scratch[i], false, k->dest[i]);
    gr_tensor_release(&k->scratch[i]);
    if (k->owned[i]) gr_tensor_release(&k->in[i]);
  }
  return s;
}

void gr_layout_add_cost(const gr_node *n, unsigned images, gr_cost *c) {
  gr_data_format f;
  char msg[128];
  if (gr_layout_read_format(n, &f, msg, sizeof msg) != GR_OK || f == GR_FORMAT_NHWC) return;
  double e = 0;
  for (int i = 0; i < n->num_inputs && i < GR_LAYOUT_MAX_IO; i++)
    if (images >> i & 1) {
      const gr_shape *s = &n->inputs[i].node->out_shapes[n->inputs[i].index];
      e += gr_shape_num_elements(s) > 0 ? (double)gr_shape_num_elements(s) : 0;
    }
  int64_t y = gr_shape_num_elements(&n->out_shapes[0]);
  if (images & GR_LAYOUT_OUTPUT) e += y > 0 ? (double)y : 0;
  c->bytes += 2 * e * (double)gr_dtype_size(n->out_dtypes[0]); /* read and write each copy */
}
