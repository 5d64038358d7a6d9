/* Encoding a gr_graph as msgpack (format in gr_distributed.h and
 * docs/distributed.md). Attrs are written in the node's order with their
 * type, so decoding gives the same node and encoding it again the same bytes. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"

static void pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

/* A string or nil. */
static void pack_opt_str(msgpack_packer *pk, const char *s) {
  if (s)
    pack_str(pk, s);
  else
    msgpack_pack_nil(pk);
}

static void pack_dims(msgpack_packer *pk, const gr_shape *s) {
  if (s->rank < 0) {
    msgpack_pack_nil(pk);
    return;
  }
  msgpack_pack_array(pk, (size_t)s->rank);
  for (int d = 0; d < s->rank; d++) msgpack_pack_int64(pk, s->dims[d]);
}

static void pack_attr(msgpack_packer *pk, const gr_attr *a) {
  const gr_attr_value *v = &a->value;
  msgpack_pack_array(pk, 3);
  pack_str(pk, a->name);
  pack_str(pk, gr_attr_type_name(v->type));
  switch (v->type) {
    case GR_ATTR_INT:
      msgpack_pack_int64(pk, v->i);
      break;
    case GR_ATTR_FLOAT:
      msgpack_pack_double(pk, v->f);
      break;
    case GR_ATTR_BOOL:
      v->b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
      break;
    case GR_ATTR_STRING:
      pack_opt_str(pk, v->s);
      break;
    case GR_ATTR_DTYPE:
      pack_str(pk, gr_dtype_name(v->dtype));
      break;
    case GR_ATTR_SHAPE:
      pack_dims(pk, &v->shape);
      break;
    case GR_ATTR_TENSOR:
      msgpack_pack_array(pk, 3);
      pack_str(pk, gr_dtype_name(v->tensor.dtype));
      pack_dims(pk, &v->tensor.shape);
      msgpack_pack_bin_with_body(pk, gr_tensor_data(&v->tensor), gr_tensor_num_bytes(&v->tensor));
      break;
    case GR_ATTR_INTS:
      msgpack_pack_array(pk, (size_t)v->ints.n);
      for (int i = 0; i < v->ints.n; i++) msgpack_pack_int64(pk, v->ints.v[i]);
      break;
    case GR_ATTR_FLOATS:
      msgpack_pack_array(pk, (size_t)v->floats.n);
      for (int i = 0; i < v->floats.n; i++) msgpack_pack_double(pk, v->floats.v[i]);
      break;
    default:
      GR_ASSERT(!"attr type without an encoding");
  }
}

static void pack_node(msgpack_packer *pk, const gr_node *n, const int *pos) {
  msgpack_pack_map(pk, n->colocate_hint ? 10 : 9);
  pack_str(pk, "name");
  pack_str(pk, n->name);
  pack_str(pk, "op");
  pack_str(pk, n->op->name);
  pack_str(pk, "in");
  msgpack_pack_array(pk, (size_t)n->num_inputs);
  for (int i = 0; i < n->num_inputs; i++) {
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, pos[n->inputs[i].node->id]);
    msgpack_pack_int(pk, n->inputs[i].index);
  }
  pack_str(pk, "ctrl");
  msgpack_pack_array(pk, (size_t)n->num_control_inputs);
  for (int i = 0; i < n->num_control_inputs; i++)
    msgpack_pack_int(pk, pos[n->control_inputs[i]->id]);
  pack_str(pk, "attrs");
  msgpack_pack_array(pk, (size_t)n->num_attrs);
  for (int i = 0; i < n->num_attrs; i++) pack_attr(pk, &n->attrs[i]);
  pack_str(pk, "device");
  pack_str(pk, n->requested_device ? n->requested_device : "");
  pack_str(pk, "assigned");
  pack_opt_str(pk, n->assigned_device);
  pack_str(pk, "colocate");
  pack_opt_str(pk, n->colocate_with);
  if (n->colocate_hint) { /* colocate is a preference: no group (written only when set) */
    pack_str(pk, "hint");
    msgpack_pack_true(pk);
  }
  pack_str(pk, "loc");
  pack_opt_str(pk, n->source_loc);
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *s, int n) {
  pack_str(pk, key);
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) pack_str(pk, s[i]);
}

static void pack_names(msgpack_packer *pk, const gr_graph_names *nm, const int *pos) {
  pack_str(pk, "names");
  msgpack_pack_array(pk, (size_t)nm->num_names);
  for (int i = 0; i < nm->num_names; i++) {
    msgpack_pack_array(pk, 3);
    pack_str(pk, nm->names[i]);
    msgpack_pack_int(pk, pos[nm->outputs[i].node->id]);
    msgpack_pack_int(pk, nm->outputs[i].index);
  }
  pack_strs(pk, "fetch", nm->fetches, nm->num_fetches);
  pack_strs(pk, "target", nm->targets, nm->num_targets);
}

/* An sbuffer that remembers a failed write (realloc), so that no later,
 * smaller write can leave a corrupt encoding looking whole. */
typedef struct out_buffer {
  msgpack_sbuffer sb;
  bool failed;
} out_buffer;

static int out_write(void *data, const char *buf, size_t len) {
  out_buffer *o = data;
  if (!o->failed && msgpack_sbuffer_write(&o->sb, buf, len) != 0) o->failed = true;
  return o->failed ? -1 : 0;
}

gr_status gr_wire_encode_graph(const gr_graph *g, const gr_graph_names *names, void **data,
                               size_t *size, gr_error *err) {
  *data = NULL;
  *size = 0;
  const gr_error *ge = gr_graph_error(g);
  if (ge)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "encoding a graph: it has a build error: %s", ge->msg);
  for (int i = 0; names && i < names->num_names; i++)
    if (!names->outputs[i].node || names->outputs[i].node->graph != g)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "encoding a graph: name '%s' is not an output of the graph",
                          names->names[i]);
  /* nodes in a stable topological order: a value rerouted after its
   * consumer was built (through a switch or an enter) comes before it */
  int n = gr_graph_num_nodes(g);
  int *order = gr_alloc_array((size_t)n + 1, sizeof(int)),
      *pos = gr_alloc_array((size_t)n + 1, sizeof(int));
  int got = order && pos ? gr_graph_topo_order_stable(g, order) : -1;
  if (got != n) {
    free(order), free(pos);
    return gr_error_set(err, got == -2 ? GR_ERR_FAILED_PRECONDITION : GR_ERR_RESOURCE_EXHAUSTED,
                        got == -2 ? "encoding a graph: its inputs form a cycle that is not a loop"
                                  : "encoding a graph: out of memory");
  }
  for (int i = 0; i < n; i++) pos[order[i]] = i;
  out_buffer out = {.failed = false};
  msgpack_sbuffer_init(&out.sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &out, out_write);
  msgpack_pack_map(&pk, names ? 7 : 4);
  pack_str(&pk, "format"); /* first, so gr_wire_is_graph can tell by the prefix */
  pack_str(&pk, GR_WIRE_GRAPH_FORMAT);
  pack_str(&pk, "version");
  msgpack_pack_int(&pk, GR_WIRE_GRAPH_VERSION);
  pack_str(&pk, "seed");
  msgpack_pack_uint64(&pk, gr_graph_seed(g));
  pack_str(&pk, "nodes");
  msgpack_pack_array(&pk, (size_t)n);
  for (int i = 0; i < n; i++) pack_node(&pk, gr_graph_node(g, order[i]), pos);
  if (names) pack_names(&pk, names, pos);
  free(order), free(pos);
  if (out.failed) {
    msgpack_sbuffer_destroy(&out.sb);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "encoding a graph: out of memory");
  }
  *data = out.sb.data;
  *size = out.sb.size;
  return GR_OK;
}

bool gr_wire_is_graph(const void *data, size_t size) {
  static const char prefix[] = "\xa6"
                               "format"
                               "\xae" GR_WIRE_GRAPH_FORMAT;
  const unsigned char *p = data;
  return size > sizeof prefix && (p[0] & 0xf0) == 0x80 &&
         memcmp(p + 1, prefix, sizeof prefix - 1) == 0;
}
