/* Graph pass: common-subexpression elimination. In topological order, a
 * needed node equal to an earlier one (same op, same inputs after CSE, same
 * attrs, same control inputs, same devices and colocation) is replaced by
 * it. Opaque ops (gr_passes_op_is_opaque) and fed nodes never take part;
 * fetched and target nodes may replace others but are never replaced. */
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "passes_internal.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xFF51AFD7ED558CCDull;
}

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t x = 0xCBF29CE484222325ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) x = (x ^ b[i]) * 0x100000001B3ull;
  return mix(h, x ^ n);
}

static uint64_t mix_str(uint64_t h, const char *s) {
  return s ? mix_bytes(h, s, strlen(s)) : mix(h, 0x5A5A);
}

static bool same_str(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static uint64_t hash_attr(uint64_t h, const gr_attr_value *v) {
  h = mix(h, (uint64_t)v->type);
  switch (v->type) {
    case GR_ATTR_INT:
      return mix(h, (uint64_t)v->i);
    case GR_ATTR_FLOAT:
      return mix_bytes(h, &v->f, sizeof v->f);
    case GR_ATTR_BOOL:
      return mix(h, v->b);
    case GR_ATTR_STRING:
      return mix_str(h, v->s);
    case GR_ATTR_DTYPE:
      return mix(h, (uint64_t)v->dtype);
    case GR_ATTR_SHAPE: {
      size_t rank = v->shape.rank > 0 ? (size_t)v->shape.rank : 0;
      return mix_bytes(mix(h, (uint64_t)v->shape.rank), v->shape.dims, sizeof(int64_t) * rank);
    }
    case GR_ATTR_TENSOR:
      return mix_bytes(mix(h, (uint64_t)v->tensor.dtype), gr_tensor_data(&v->tensor),
                       gr_tensor_num_bytes(&v->tensor));
    case GR_ATTR_INTS:
      return mix_bytes(h, v->ints.v, sizeof(int64_t) * (size_t)v->ints.n);
    case GR_ATTR_FLOATS:
      return mix_bytes(h, v->floats.v, sizeof(double) * (size_t)v->floats.n);
    default:
      return h;
  }
}

/* Bitwise equality (so 0.0 and -0.0 differ, and equal NaNs are equal). */
static bool same_attr(const gr_attr_value *a, const gr_attr_value *b) {
  if (a->type != b->type) return false;
  switch (a->type) {
    case GR_ATTR_INT:
      return a->i == b->i;
    case GR_ATTR_FLOAT:
      return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case GR_ATTR_BOOL:
      return a->b == b->b;
    case GR_ATTR_STRING:
      return same_str(a->s, b->s);
    case GR_ATTR_DTYPE:
      return a->dtype == b->dtype;
    case GR_ATTR_SHAPE:
      return gr_shape_equal(&a->shape, &b->shape);
    case GR_ATTR_TENSOR:
      return a->tensor.dtype == b->tensor.dtype &&
             gr_shape_equal(&a->tensor.shape, &b->tensor.shape) &&
             memcmp(gr_tensor_data(&a->tensor), gr_tensor_data(&b->tensor),
                    gr_tensor_num_bytes(&a->tensor)) == 0;
    case GR_ATTR_INTS:
      return a->ints.n == b->ints.n &&
             (a->ints.n == 0 ||
              memcmp(a->ints.v, b->ints.v, sizeof(int64_t) * (size_t)a->ints.n) == 0);
    case GR_ATTR_FLOATS:
      return a->floats.n == b->floats.n &&
             (a->floats.n == 0 ||
              memcmp(a->floats.v, b->floats.v, sizeof(double) * (size_t)a->floats.n) == 0);
    default:
      return false;
  }
}

/* Attr arrays hold one entry per attr of the op (defaults filled in) but
 * maybe in another order: match by name (the op's spec strings). */
static const gr_attr_value *find_attr(const gr_node *n, const char *name) {
  for (int i = 0; i < n->num_attrs; i++)
    if (n->attrs[i].name == name || strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i].value;
  return NULL;
}

typedef struct cse {
  gr_passes_ctx *c;
  int *ctrl;       /* scratch: sorted distinct control input reps of the node */
  int *ctrl_other; /* the same for the candidate */
  gr_idmap table;  /* node ids by their signature */
} cse;

static int sorted_ctrl(const gr_passes_ctx *c, const gr_node *n, int *out) {
  int k = 0;
  for (int i = 0; i < n->num_control_inputs; i++) {
    int r = c->rep[n->control_inputs[i]->id], j = k;
    while (j > 0 && out[j - 1] > r) j--;
    if (j > 0 && out[j - 1] == r) continue;
    memmove(out + j + 1, out + j, sizeof(int) * (size_t)(k - j));
    out[j] = r;
    k++;
  }
  return k;
}

static uint64_t hash_node(cse *s, const gr_node *n) {
  const gr_passes_ctx *c = s->c;
  uint64_t h = mix_str(0, n->op->name);
  for (int i = 0; i < n->num_inputs; i++)
    h = mix(mix(h, (uint64_t)c->rep[n->inputs[i].node->id]), (uint64_t)n->inputs[i].index);
  int k = sorted_ctrl(c, n, s->ctrl);
  for (int i = 0; i < k; i++) h = mix(h, (uint64_t)s->ctrl[i] + 1);
  /* attrs in the op's order, whatever order the node holds them in */
  for (int a = 0; a < n->op->num_attrs; a++) {
    const gr_attr_value *v = find_attr(n, n->op->attrs[a].name);
    if (v) h = hash_attr(h, v);
  }
  h = mix_str(h, n->requested_device);
  h = mix_str(h, n->assigned_device);
  return mix_str(h, n->colocate_with) ^ (uint64_t)n->colocate_hint;
}

static bool same_node(cse *s, const gr_node *a, const gr_node *b) {
  const gr_passes_ctx *c = s->c;
  if (a->op != b->op || a->num_inputs != b->num_inputs || a->num_attrs != b->num_attrs ||
      !same_str(a->requested_device, b->requested_device) ||
      !same_str(a->assigned_device, b->assigned_device) ||
      !same_str(a->colocate_with, b->colocate_with) || a->colocate_hint != b->colocate_hint)
    return false;
  for (int i = 0; i < a->num_inputs; i++)
    if (c->rep[a->inputs[i].node->id] != c->rep[b->inputs[i].node->id] ||
        a->inputs[i].index != b->inputs[i].index)
      return false;
  int ka = sorted_ctrl(c, a, s->ctrl), kb = sorted_ctrl(c, b, s->ctrl_other);
  if (ka != kb || (ka && memcmp(s->ctrl, s->ctrl_other, sizeof(int) * (size_t)ka) != 0))
    return false;
  for (int i = 0; i < a->num_attrs; i++) {
    const gr_attr_value *v = find_attr(b, a->attrs[i].name);
    if (!v || !same_attr(&a->attrs[i].value, v)) return false;
  }
  return true;
}

/* gr_idmap_eq_fn: does node id compute the same as node key? */
static bool same_as(const void *ctx, uint32_t id, const void *key) {
  cse *s = (cse *)ctx;
  return same_node(s, key, gr_graph_node(s->c->g, (int)id));
}

static bool takes_part(const gr_passes_ctx *c, const gr_node *n) {
  return c->mark[n->id] >= GR_PRUNE_NEEDED && !c->fed[n->id] && !gr_passes_op_is_opaque(n->op);
}

gr_status gr_passes_cse(gr_passes_ctx *c, int *merged) {
  *merged = 0;
  int max_ctrl = 1;
  for (int i = 0; i < c->n; i++)
    if (gr_graph_node(c->g, i)->num_control_inputs > max_ctrl)
      max_ctrl = gr_graph_node(c->g, i)->num_control_inputs;
  cse s = {.c = c,
           .ctrl = gr_alloc_array((size_t)max_ctrl, sizeof(int)),
           .ctrl_other = gr_alloc_array((size_t)max_ctrl, sizeof(int))};
  gr_idmap_init(&s.table);
  gr_status st = GR_OK;
  if (!s.ctrl || !s.ctrl_other) {
    st = gr_error_set_oom(c->err);
    goto done;
  }
  for (int k = 0; k < c->n; k++) {
    const gr_node *n = gr_graph_node(c->g, c->order[k]);
    if (!takes_part(c, n)) continue;
    uint64_t h = hash_node(&s, n);
    int64_t found = gr_idmap_find(&s.table, h, n, same_as, &s);
    if (found < 0) {
      if (!gr_idmap_insert(&s.table, h, (uint32_t)n->id)) {
        st = gr_error_set_oom(c->err);
        goto done;
      }
    } else if (!c->protect[n->id]) {
      c->rep[n->id] = (int)found;
      (*merged)++;
    }
  }
done:
  free(s.ctrl);
  free(s.ctrl_other);
  gr_idmap_free(&s.table);
  return st;
}
