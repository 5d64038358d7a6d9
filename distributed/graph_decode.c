/* Decoding a serialized graph (format in gr_distributed.h): the bytes are
 * checked (gr_wire_check_msgpack), unpacked by msgpack-c, and each node is
 * rebuilt in id order through gr_graph_copy_node, so ops, attrs and shapes
 * are checked as when the graph was built. Inputs and control inputs from
 * later nodes (a loop's back edge, a value rerouted through an enter) get a
 * stand-in first and their real source once every node exists. */
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/gr_checkpoints.h"
#include "distributed/gr_distributed.h"
#include "distributed/wire_internal.h"
#include "ops/gr_ops.h"

enum { MAX_DEPTH = 8 };

typedef struct patch {
  int node, input; /* input -1: a control input */
  int src, index;
} patch;

typedef struct dec {
  gr_graph *g;
  gr_error *err;
  int num_nodes;
  int at;           /* the node being decoded, -1 outside nodes */
  const char *name; /* its name once known */
  const char *what; /* the field being decoded */
  patch *patches;
  int num_patches, cap_patches;
} dec;

__attribute__((format(printf, 2, 3))) static gr_status fail(dec *d, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (d->at < 0)
    return gr_error_set(d->err, GR_ERR_INVALID_ARGUMENT, "serialized graph: %s%s%s", d->what,
                        d->what[0] ? ": " : "", msg);
  return gr_error_set(d->err, GR_ERR_INVALID_ARGUMENT, "serialized graph: node %d%s%s%s: %s: %s",
                      d->at, d->name ? " '" : "", d->name ? d->name : "", d->name ? "'" : "",
                      d->what, msg);
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
  size_t n = strlen(key);
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
        memcmp(k->via.str.ptr, key, n) == 0)
      return &m->via.map.ptr[i].val;
  }
  return NULL;
}

/* A field of a map, of msgpack type t (NULL fails; nil_ok: nil gives *out NULL). */
static gr_status field(dec *d, const msgpack_object *m, const char *key, msgpack_object_type t,
                       bool nil_ok, const msgpack_object **out) {
  d->what = key;
  *out = map_get(m, key);
  if (!*out) return fail(d, "missing");
  if (nil_ok && (*out)->type == MSGPACK_OBJECT_NIL) {
    *out = NULL;
    return GR_OK;
  }
  if ((*out)->type != t) {
    msgpack_object want = {.type = t};
    return fail(d, "%s, want %s", gr_msg_kind_name(*out), gr_msg_kind_name(&want));
  }
  return GR_OK;
}

/* A NUL-terminated copy of a msgpack string in the graph's memory. */
static gr_status str_copy(dec *d, const msgpack_object *o, const char **out) {
  if (o->type != MSGPACK_OBJECT_STR) return fail(d, "%s, want a string", gr_msg_kind_name(o));
  size_t n = o->via.str.size; /* msgpack-c gives "" a NULL pointer */
  if (n && memchr(o->via.str.ptr, '\0', n)) return fail(d, "a string holds a NUL byte");
  char *s = gr_graph_alloc(d->g, n + 1);
  if (!s) return gr_error_set_oom(d->err);
  if (n) memcpy(s, o->via.str.ptr, n);
  s[o->via.str.size] = '\0';
  *out = s;
  return GR_OK;
}

static gr_status opt_str(dec *d, const msgpack_object *m, const char *key, const char **out) {
  const msgpack_object *o;
  GR_TRY(field(d, m, key, MSGPACK_OBJECT_STR, true, &o));
  *out = NULL;
  return o ? str_copy(d, o, out) : GR_OK;
}

static gr_status int_in(dec *d, const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
    *out = (int64_t)o->via.u64;
  else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    *out = o->via.i64;
  else
    return fail(d, "%s, want an integer", gr_msg_kind_name(o));
  if (*out < lo || *out > hi)
    return fail(d, "%lld is out of range [%lld, %lld]", (long long)*out, (long long)lo,
                (long long)hi);
  return GR_OK;
}

static gr_status dtype_of(dec *d, const msgpack_object *o, gr_dtype *out) {
  const char *s = NULL;
  GR_TRY(str_copy(d, o, &s));
  if (!gr_dtype_from_name(s, out)) return fail(d, "unknown dtype '%s'", s);
  return GR_OK;
}

static gr_status shape_of(dec *d, const msgpack_object *o, gr_shape *out) {
  if (o->type == MSGPACK_OBJECT_NIL) {
    *out = gr_shape_unknown();
    return GR_OK;
  }
  if (o->type != MSGPACK_OBJECT_ARRAY) return fail(d, "%s, want a shape", gr_msg_kind_name(o));
  if (o->via.array.size > GR_MAX_RANK)
    return fail(d, "rank %u is over the most, %d", o->via.array.size, GR_MAX_RANK);
  out->rank = (int)o->via.array.size;
  for (int i = 0; i < out->rank; i++)
    GR_TRY(int_in(d, &o->via.array.ptr[i], -1, INT64_MAX, &out->dims[i]));
  return GR_OK;
}

static gr_status tensor_of(dec *d, const msgpack_object *o, gr_tensor *out) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
      o->via.array.ptr[2].type != MSGPACK_OBJECT_BIN)
    return fail(d, "%s, want [dtype, shape, bytes]", gr_msg_kind_name(o));
  gr_dtype dt;
  gr_shape s;
  GR_TRY(dtype_of(d, &o->via.array.ptr[0], &dt));
  GR_TRY(shape_of(d, &o->via.array.ptr[1], &s));
  const msgpack_object_bin *b = &o->via.array.ptr[2].via.bin;
  int64_t count = s.rank < 0 ? -1 : 1;
  for (int i = 0; i < s.rank && count >= 0; i++)
    count = s.dims[i] < 0 || (s.dims[i] && count > INT64_MAX / s.dims[i]) ? -1 : count * s.dims[i];
  if (count < 0 || (uint64_t)count > b->size / gr_dtype_size(dt) ||
      (uint64_t)count * gr_dtype_size(dt) != b->size)
    return fail(d, "a tensor of %u bytes does not hold its shape's elements of %s", b->size,
                gr_dtype_name(dt));
  if (dt == GR_BOOL)
    for (uint32_t i = 0; i < b->size; i++)
      if ((unsigned char)b->ptr[i] > 1) return fail(d, "bool element %u is not 0 or 1", i);
  gr_error e;
  if (gr_tensor_from_data(out, dt, &s, b->ptr, &e) != GR_OK) return fail(d, "%s", e.msg);
  return GR_OK;
}

static gr_status list_of(dec *d, const msgpack_object *o, bool floats, gr_attr_value *v) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return fail(d, "%s, want a list", gr_msg_kind_name(o));
  int n = (int)o->via.array.size;
  void *mem = gr_graph_alloc(d->g, sizeof(double) * ((size_t)n + 1));
  if (!mem) return gr_error_set_oom(d->err);
  for (int i = 0; i < n; i++) {
    const msgpack_object *e = &o->via.array.ptr[i];
    if (floats && e->type != MSGPACK_OBJECT_FLOAT64 && e->type != MSGPACK_OBJECT_FLOAT32)
      return fail(d, "element %d is %s, want a float", i, gr_msg_kind_name(e));
    if (floats)
      ((double *)mem)[i] = e->via.f64;
    else
      GR_TRY(int_in(d, e, INT64_MIN, INT64_MAX, &((int64_t *)mem)[i]));
  }
  if (floats) {
    v->floats.n = n;
    v->floats.v = mem;
  } else {
    v->ints.n = n;
    v->ints.v = mem;
  }
  return GR_OK;
}

/* One attr [name, type, value]; a tensor attr holds a reference the caller releases. */
static gr_status attr_of(dec *d, const msgpack_object *o, gr_attr *a) {
  d->what = "attrs";
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
    return fail(d, "%s, want [name, type, value]", gr_msg_kind_name(o));
  const msgpack_object *x = o->via.array.ptr;
  const char *type;
  GR_TRY(str_copy(d, &x[0], &a->name));
  GR_TRY(str_copy(d, &x[1], &type));
  gr_attr_value *v = &a->value;
  for (v->type = 0; v->type < GR_ATTR_TYPE_COUNT; v->type++)
    if (strcmp(gr_attr_type_name(v->type), type) == 0) break;
  const msgpack_object *val = &x[2];
  switch (v->type) {
    case GR_ATTR_INT:
      return int_in(d, val, INT64_MIN, INT64_MAX, &v->i);
    case GR_ATTR_FLOAT:
      if (val->type != MSGPACK_OBJECT_FLOAT64 && val->type != MSGPACK_OBJECT_FLOAT32)
        return fail(d, "attr '%s': %s, want a float", a->name, gr_msg_kind_name(val));
      v->f = val->via.f64;
      return GR_OK;
    case GR_ATTR_BOOL:
      if (val->type != MSGPACK_OBJECT_BOOLEAN)
        return fail(d, "attr '%s': %s, want a bool", a->name, gr_msg_kind_name(val));
      v->b = val->via.boolean;
      return GR_OK;
    case GR_ATTR_STRING:
      v->s = NULL;
      return val->type == MSGPACK_OBJECT_NIL ? GR_OK : str_copy(d, val, &v->s);
    case GR_ATTR_DTYPE:
      return dtype_of(d, val, &v->dtype);
    case GR_ATTR_SHAPE:
      return shape_of(d, val, &v->shape);
    case GR_ATTR_TENSOR:
      return tensor_of(d, val, &v->tensor);
    case GR_ATTR_INTS:
      return list_of(d, val, false, v);
    case GR_ATTR_FLOATS:
      return list_of(d, val, true, v);
    default:
      return fail(d, "attr '%s' has an unknown type '%s'", a->name, type);
  }
}

static gr_status add_patch(dec *d, int input, int src, int index) {
  if (d->num_patches == d->cap_patches) {
    int cap = d->cap_patches ? 2 * d->cap_patches : 16;
    patch *p = gr_realloc_array(d->patches, (size_t)cap, sizeof *p);
    if (!p) return gr_error_set_oom(d->err);
    d->patches = p;
    d->cap_patches = cap;
  }
  d->patches[d->num_patches++] = (patch){d->at, input, src, index};
  return GR_OK;
}

/* Scratch of one node: inputs, control inputs, attrs (with tensor references). */
typedef struct node_scratch {
  gr_output *in;
  gr_node **ctrl;
  gr_attr *attrs;
  int num_attrs;
} node_scratch;

static void scratch_free(node_scratch *s) {
  for (int i = 0; s->attrs && i < s->num_attrs; i++)
    if (s->attrs[i].value.type == GR_ATTR_TENSOR) gr_tensor_release(&s->attrs[i].value.tensor);
  free(s->in), free(s->ctrl), free(s->attrs);
}

static gr_status node_inputs(dec *d, const msgpack_object *m, gr_node *fake, node_scratch *s) {
  const msgpack_object *in, *ctrl;
  GR_TRY(field(d, m, "in", MSGPACK_OBJECT_ARRAY, false, &in));
  fake->num_inputs = (int)in->via.array.size;
  s->in = calloc((size_t)fake->num_inputs + 1, sizeof *s->in);
  if (!s->in) return gr_error_set_oom(d->err);
  int first_before = -1;
  for (int j = 0; j < fake->num_inputs; j++) {
    const msgpack_object *e = &in->via.array.ptr[j];
    int64_t src = 0, index = 0;
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
      return fail(d, "input %d is %s, want [node, output]", j, gr_msg_kind_name(e));
    GR_TRY(int_in(d, &e->via.array.ptr[0], 0, d->num_nodes - 1, &src));
    GR_TRY(int_in(d, &e->via.array.ptr[1], 0, INT32_MAX, &index));
    if (src == d->at) return fail(d, "input %d is the node itself", j);
    if (src > d->at) {
      GR_TRY(add_patch(d, j, (int)src, (int)index));
      continue;
    }
    gr_node *p = gr_graph_node(d->g, (int)src);
    if (index >= p->num_outputs)
      return fail(d, "input %d: node %lld '%s' has %d outputs, not %lld", j, (long long)src,
                  p->name, p->num_outputs, (long long)index + 1);
    s->in[j] = (gr_output){p, (int)index};
    if (first_before < 0) first_before = j;
  }
  for (int j = 0; j < fake->num_inputs; j++) /* stand-ins until the patches */
    if (!s->in[j].node) {
      if (first_before < 0)
        return fail(d, "every input comes from a later node (a cycle, or not a loop's back edge)");
      s->in[j] = s->in[first_before];
    }
  GR_TRY(field(d, m, "ctrl", MSGPACK_OBJECT_ARRAY, false, &ctrl));
  s->ctrl = gr_alloc_array((size_t)ctrl->via.array.size + 1, sizeof *s->ctrl);
  if (!s->ctrl) return gr_error_set_oom(d->err);
  fake->num_control_inputs = 0;
  for (uint32_t j = 0; j < ctrl->via.array.size; j++) {
    int64_t src = 0;
    GR_TRY(int_in(d, &ctrl->via.array.ptr[j], 0, d->num_nodes - 1, &src));
    if (src == d->at) return fail(d, "control input %u is the node itself", j);
    if (src > d->at)
      GR_TRY(add_patch(d, -1, (int)src, 0));
    else
      s->ctrl[fake->num_control_inputs++] = gr_graph_node(d->g, (int)src);
  }
  return GR_OK;
}

static gr_status node_of(dec *d, const msgpack_object *m) {
  if (m->type != MSGPACK_OBJECT_MAP) return fail(d, "%s, want a map", gr_msg_kind_name(m));
  gr_node fake = {0};
  const msgpack_object *o;
  GR_TRY(field(d, m, "name", MSGPACK_OBJECT_STR, false, &o));
  GR_TRY(str_copy(d, o, &fake.name));
  d->name = fake.name;
  const char *op;
  GR_TRY(field(d, m, "op", MSGPACK_OBJECT_STR, false, &o));
  GR_TRY(str_copy(d, o, &op));
  fake.op = gr_op_registry_find(op);
  if (!fake.op) return fail(d, "unknown op '%s'", op);
  GR_TRY(field(d, m, "device", MSGPACK_OBJECT_STR, false, &o));
  GR_TRY(str_copy(d, o, &fake.requested_device));
  GR_TRY(opt_str(d, m, "assigned", &fake.assigned_device));
  GR_TRY(opt_str(d, m, "colocate", &fake.colocate_with));
  if (map_get(m, "hint")) {
    GR_TRY(field(d, m, "hint", MSGPACK_OBJECT_BOOLEAN, false, &o));
    fake.colocate_hint = o->via.boolean && fake.colocate_with;
  }
  GR_TRY(opt_str(d, m, "loc", &fake.source_loc));
  node_scratch s = {0};
  gr_status st = node_inputs(d, m, &fake, &s);
  if (st == GR_OK) st = field(d, m, "attrs", MSGPACK_OBJECT_ARRAY, false, &o);
  if (st == GR_OK) {
    s.attrs = calloc((size_t)o->via.array.size + 1, sizeof *s.attrs);
    if (!s.attrs) st = gr_error_set_oom(d->err);
  }
  for (uint32_t i = 0; st == GR_OK && i < o->via.array.size; i++) {
    st = attr_of(d, &o->via.array.ptr[i], &s.attrs[i]);
    if (st == GR_OK) s.num_attrs++;
  }
  if (st == GR_OK) {
    fake.attrs = s.attrs;
    fake.num_attrs = s.num_attrs;
    gr_output r = gr_graph_copy_node(d->g, &fake, s.in, s.ctrl, fake.num_control_inputs);
    if (!r.node || r.node->id != d->at) {
      d->what = "rebuilding";
      const gr_error *ge = gr_graph_error(d->g);
      st = fail(d, "%s", ge ? ge->msg : "the node got another id");
    }
  }
  scratch_free(&s);
  return st;
}

static gr_status apply_patches(dec *d) {
  d->what = "inputs from later nodes";
  for (int k = 0; k < d->num_patches; k++) {
    const patch *p = &d->patches[k];
    gr_node *n = gr_graph_node(d->g, p->node), *src = gr_graph_node(d->g, p->src);
    d->at = p->node;
    d->name = n->name;
    gr_status st;
    if (p->input < 0) {
      st = gr_graph_add_control_input(d->g, n, src);
    } else if (p->index >= src->num_outputs) {
      return fail(d, "input %d: node %d '%s' has %d outputs, not %d", p->input, p->src, src->name,
                  src->num_outputs, p->index + 1);
    } else {
      st = gr_graph_set_input(d->g, n, p->input, (gr_output){src, p->index});
    }
    if (st != GR_OK) return fail(d, "%s", gr_graph_error(d->g)->msg);
  }
  d->at = -1;
  int *order = gr_alloc_array((size_t)d->num_nodes + 1, sizeof(int));
  if (!order) return gr_error_set_oom(d->err);
  int got = gr_graph_topo_order_stable(d->g, order);
  free(order);
  if (got == -1) return gr_error_set_oom(d->err);
  d->what = "nodes";
  if (got != d->num_nodes) return fail(d, "the inputs form a cycle that is not a loop");
  return GR_OK;
}

static gr_status strs_of(dec *d, const msgpack_object *m, const char *key, const char ***out,
                         int *n) {
  const msgpack_object *o;
  GR_TRY(field(d, m, key, MSGPACK_OBJECT_ARRAY, false, &o));
  *out = calloc((size_t)o->via.array.size + 1, sizeof **out);
  if (!*out) return gr_error_set_oom(d->err);
  for (*n = 0; *n < (int)o->via.array.size; (*n)++)
    GR_TRY(str_copy(d, &o->via.array.ptr[*n], &(*out)[*n]));
  return GR_OK;
}

static gr_status names_of(dec *d, const msgpack_object *top, gr_graph_names *nm) {
  const msgpack_object *o;
  GR_TRY(field(d, top, "names", MSGPACK_OBJECT_ARRAY, false, &o));
  uint32_t n = o->via.array.size;
  nm->names = calloc((size_t)n + 1, sizeof *nm->names);
  nm->outputs = calloc((size_t)n + 1, sizeof *nm->outputs);
  if (!nm->names || !nm->outputs) return gr_error_set_oom(d->err);
  for (nm->num_names = 0; nm->num_names < (int)n; nm->num_names++) {
    const msgpack_object *e = &o->via.array.ptr[nm->num_names];
    int64_t id = 0, index = 0;
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 3)
      return fail(d, "%s, want [name, node, output]", gr_msg_kind_name(e));
    GR_TRY(str_copy(d, &e->via.array.ptr[0], &nm->names[nm->num_names]));
    GR_TRY(int_in(d, &e->via.array.ptr[1], 0, d->num_nodes - 1, &id));
    gr_node *node = gr_graph_node(d->g, (int)id);
    /* -1: a node without outputs (a train op bound to a name) */
    GR_TRY(
        int_in(d, &e->via.array.ptr[2], node->num_outputs ? 0 : -1, node->num_outputs - 1, &index));
    nm->outputs[nm->num_names] = (gr_output){node, (int)index};
  }
  GR_TRY(strs_of(d, top, "fetch", &nm->fetches, &nm->num_fetches));
  return strs_of(d, top, "target", &nm->targets, &nm->num_targets);
}

static gr_status decode(dec *d, const msgpack_object *top, gr_graph_names *names) {
  const msgpack_object *o;
  d->what = "the message";
  if (top->type != MSGPACK_OBJECT_MAP) return fail(d, "%s, want a map", gr_msg_kind_name(top));
  GR_TRY(field(d, top, "format", MSGPACK_OBJECT_STR, false, &o));
  size_t fl = strlen(GR_WIRE_GRAPH_FORMAT);
  if (o->via.str.size != fl || memcmp(o->via.str.ptr, GR_WIRE_GRAPH_FORMAT, fl) != 0)
    return fail(d, "not a graphrun graph");
  int64_t version = 0;
  GR_TRY(field(d, top, "version", MSGPACK_OBJECT_POSITIVE_INTEGER, false, &o));
  GR_TRY(int_in(d, o, 0, INT32_MAX, &version));
  if (version != GR_WIRE_GRAPH_VERSION)
    return fail(d, "version %lld; this graphrun reads version %d", (long long)version,
                GR_WIRE_GRAPH_VERSION);
  GR_TRY(field(d, top, "seed", MSGPACK_OBJECT_POSITIVE_INTEGER, false, &o));
  gr_graph_set_seed(d->g, o->via.u64);
  GR_TRY(field(d, top, "nodes", MSGPACK_OBJECT_ARRAY, false, &o));
  if (o->via.array.size > GR_WIRE_GRAPH_MAX_NODES)
    return fail(d, "%u nodes, over the most (%d)", o->via.array.size, GR_WIRE_GRAPH_MAX_NODES);
  d->num_nodes = (int)o->via.array.size;
  for (d->at = 0; d->at < d->num_nodes; d->at++) {
    d->name = NULL;
    GR_TRY(node_of(d, &o->via.array.ptr[d->at]));
  }
  d->at = -1;
  GR_TRY(apply_patches(d));
  if (!names) return GR_OK;
  if (!map_get(top, "names")) return GR_OK; /* a graph without names */
  return names_of(d, top, names);
}

gr_status gr_wire_decode_graph(const void *data, size_t size, gr_graph *g, gr_graph_names *names,
                               gr_error *err) {
  if (names) memset(names, 0, sizeof *names);
  if (gr_graph_num_nodes(g) != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "decoding a graph: the graph is not empty");
  if (size > GR_WIRE_GRAPH_MAX_BYTES)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "serialized graph: %zu bytes, over the most",
                        size);
  gr_ops_register_all();
  gr_ckpt_register_ops();
  gr_status st = gr_wire_check_msgpack(data, size, MAX_DEPTH, err);
  if (st != GR_OK) return st;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  if (msgpack_unpack_next(&u, data, size, &off) != MSGPACK_UNPACK_SUCCESS) {
    msgpack_unpacked_destroy(&u);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "serialized graph: cannot unpack");
  }
  dec d = {.g = g, .err = err, .at = -1, .what = ""};
  st = decode(&d, &u.data, names);
  free(d.patches);
  msgpack_unpacked_destroy(&u);
  if (st != GR_OK && names) gr_graph_names_free(names);
  return st;
}

void gr_graph_names_free(gr_graph_names *names) {
  if (!names) return;
  free(names->names), free(names->outputs), free(names->fetches), free(names->targets);
  memset(names, 0, sizeof *names);
}
