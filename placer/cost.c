/* The static cost model: each op's cost function (or the default) on the
 * inferred shapes, unknown dims counted as GR_COST_DEFAULT_DIM. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "placer/gr_placer.h"

/* Elements of a shape with unknown dims as the default; unknown rank: one dim. */
static double elements(const gr_shape *s) {
  if (s->rank < 0) return GR_COST_DEFAULT_DIM;
  double e = 1;
  for (int i = 0; i < s->rank && i < GR_MAX_RANK; i++)
    e *= s->dims[i] < 0 ? (double)GR_COST_DEFAULT_DIM : (double)s->dims[i];
  return e;
}

/* How many dims of s are unknown (unknown rank counts as one). */
static int unknown_dims(const gr_shape *s) {
  if (s->rank < 0) return 1;
  int k = 0;
  for (int i = 0; i < s->rank && i < GR_MAX_RANK; i++) k += s->dims[i] < 0;
  return k;
}

double gr_cost_output_bytes(const gr_node *n, int i) {
  if (i < 0 || i >= n->num_outputs) return 0;
  return elements(&n->out_shapes[i]) * (double)gr_dtype_size(n->out_dtypes[i]);
}

static double sane(double x) {
  return isfinite(x) && x > 0 ? x : 0;
}

gr_cost gr_cost_of_node(const gr_node *n) {
  gr_cost c = {0, 0};
  if (n->op->cost_fn) {
    /* Op cost functions count an unknown dim as 1: scale by the default per
     * unknown dim of the first output (the batch dim, usually). */
    n->op->cost_fn(n, &c);
    if (n->num_outputs > 0) {
      double scale = pow(GR_COST_DEFAULT_DIM, unknown_dims(&n->out_shapes[0]));
      c.flops *= scale;
      c.bytes *= scale;
    }
  } else {
    for (int i = 0; i < n->num_outputs; i++) {
      double e = elements(&n->out_shapes[i]);
      c.flops += e;
      c.bytes += e * (double)gr_dtype_size(n->out_dtypes[i]);
    }
    for (int i = 0; i < n->num_inputs; i++)
      if (n->inputs[i].node) c.bytes += gr_cost_output_bytes(n->inputs[i].node, n->inputs[i].index);
  }
  c.flops = sane(c.flops);
  c.bytes = sane(c.bytes);
  return c;
}

void gr_cost_profile_key(const gr_node *n, char *buf, size_t cap) {
  size_t m = (size_t)snprintf(buf, cap, "%s(", n->op->name);
  for (int i = 0; i < n->num_inputs && m < cap; i++) {
    const gr_node *p = n->inputs[i].node;
    int k = n->inputs[i].index;
    char sh[GR_SHAPE_STR_MAX];
    if (!p || k < 0 || k >= p->num_outputs) continue;
    m += (size_t)snprintf(buf + m, cap - m, "%s%s%s", i ? "," : "", gr_dtype_name(p->out_dtypes[k]),
                          gr_shape_str(&p->out_shapes[k], sh));
  }
  if (m < cap) snprintf(buf + m, cap - m, ")");
}

/* FNV-1a, 64 bits, over a byte string (and its terminating zero). */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
  return fnv(h, s, strlen(s) + 1);
}

uint64_t gr_cost_graph_fingerprint(const gr_graph *g) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    const gr_node *n = gr_graph_node(g, i);
    h = fnv_str(fnv_str(h, n->name), n->op->name);
    for (int k = 0; k < n->num_outputs; k++) {
      char sh[GR_SHAPE_STR_MAX];
      h = fnv_str(fnv_str(h, gr_dtype_name(n->out_dtypes[k])), gr_shape_str(&n->out_shapes[k], sh));
    }
    for (int k = 0; k < n->num_inputs; k++)
      h = fnv(fnv_str(h, n->inputs[k].node->name), &n->inputs[k].index, sizeof(int));
    for (int k = 0; k < n->num_control_inputs; k++) h = fnv_str(h, n->control_inputs[k]->name);
  }
  return h;
}

void gr_cost_node_key(uint64_t fingerprint, const gr_node *n, bool runs, char *buf, size_t cap) {
  snprintf(buf, cap, "%s:%016llx:%s", runs ? "runs" : "node", (unsigned long long)fingerprint,
           n->name);
}
