#include "core/gr_graph.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena_internal.h"
#include "core/map.h"

#define GR_SCOPE_MAX 64

typedef struct ctrl_frame {
  int n;
  gr_node **deps;
  bool reset; /* hides the frames below */
} ctrl_frame;

/* Single-output shapes stored once per graph: most nodes have the shape of
 * an input or of many other nodes. Bounded, so a graph of a million distinct
 * shapes stores the rest per node. */
#define GR_SHAPE_SET_MAX (1 << 16)
typedef struct shape_set {
  gr_idmap index; /* shape -> position in list */
  gr_shape **list;
  int count, cap;
} shape_set;

struct gr_graph {
  gr_arena arena;
  gr_node **nodes;
  int num_nodes, cap_nodes;
  gr_idmap by_name;   /* full name -> node id */
  gr_map next_suffix; /* base name -> (void*)(intptr_t)next suffix */
  shape_set shapes;
  gr_dtype dtypes[GR_DTYPE_COUNT]; /* out_dtypes of single-output nodes point here */
  const char *name_scopes[GR_SCOPE_MAX];
  int num_name_scopes;
  /* device scopes: each a spec (merged with the enclosing ones unless it
   * resets them) or a device function */
  gr_device_spec device_scopes[GR_SCOPE_MAX]; /* merged; meaningless above a function */
  gr_device_spec device_raw[GR_SCOPE_MAX];    /* as pushed */
  const char *device_strs[GR_SCOPE_MAX];      /* requested_device of nodes in each scope */
  gr_device_fn device_fns[GR_SCOPE_MAX];      /* NULL: a spec */
  void *device_fn_args[GR_SCOPE_MAX];
  bool device_reset[GR_SCOPE_MAX];  /* hides the scopes below */
  bool device_has_fn[GR_SCOPE_MAX]; /* a function between the last reset and here */
  int num_device_scopes;
  ctrl_frame ctrl[GR_SCOPE_MAX];
  int num_ctrl;
  const char *source_loc;
  /* the strings copied last, shared by the next node that wants an equal one */
  const char *last_loc, *last_requested, *last_assigned, *last_colocate;
  uint64_t seed;
  /* a topological order of the nodes (loop back edges aside) while
   * topo_valid: every edge u -> v has topo[u] < topo[v]. A new node comes
   * last; an edge that points back makes it stale, and the next cycle check
   * computes it again (once, O(nodes + edges)), so a control input that
   * agrees with it is added in O(1) (graph building stays linear). */
  int64_t *topo;
  int64_t topo_next;
  bool topo_valid;
  bool has_error;
  gr_error error;
};

gr_graph *gr_graph_new(void) {
  gr_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  gr_arena_init(&g->arena);
  gr_idmap_init(&g->by_name);
  gr_idmap_init(&g->shapes.index);
  gr_map_init(&g->next_suffix, GR_MAP_STR);
  for (int d = 0; d < GR_DTYPE_COUNT; d++) g->dtypes[d] = (gr_dtype)d;
  g->topo_valid = true;
  return g;
}

void gr_graph_free(gr_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->num_nodes; i++) {
    gr_node *n = g->nodes[i];
    for (int a = 0; a < n->num_attrs; a++)
      if (n->attrs[a].value.type == GR_ATTR_TENSOR) gr_tensor_release(&n->attrs[a].value.tensor);
  }
  free(g->nodes);
  free(g->topo);
  gr_idmap_free(&g->shapes.index);
  free(g->shapes.list);
  gr_idmap_free(&g->by_name);
  gr_map_free(&g->next_suffix);
  gr_arena_free(&g->arena);
  free(g);
}

const gr_error *gr_graph_error(const gr_graph *g) {
  return g->has_error ? &g->error : NULL;
}

gr_status gr_graph_set_error(gr_graph *g, const gr_error *err) {
  if (!g->has_error) {
    g->has_error = true;
    g->error = *err;
  }
  return err->code;
}

void gr_graph_clear_error(gr_graph *g) {
  g->has_error = false;
  gr_error_clear(&g->error);
}

void *gr_graph_alloc(gr_graph *g, size_t bytes) {
  return gr_arena_alloc(&g->arena, bytes);
}
char *gr_graph_strdup(gr_graph *g, const char *s) {
  return gr_arena_strdup(&g->arena, s);
}
void gr_graph_set_seed(gr_graph *g, uint64_t seed) {
  g->seed = seed;
}
uint64_t gr_graph_seed(const gr_graph *g) {
  return g->seed;
}
int gr_graph_num_nodes(const gr_graph *g) {
  return g->num_nodes;
}
gr_node *gr_graph_node(const gr_graph *g, int id) {
  return id >= 0 && id < g->num_nodes ? g->nodes[id] : NULL;
}
static bool node_named(const void *g, uint32_t id, const void *name) {
  return strcmp(((const gr_graph *)g)->nodes[id]->name, name) == 0;
}
static gr_node *find_hashed(const gr_graph *g, uint64_t hash, const char *name) {
  int64_t id = gr_idmap_find(&g->by_name, hash, name, node_named, g);
  return id < 0 ? NULL : g->nodes[id];
}
gr_node *gr_graph_find_node(const gr_graph *g, const char *name) {
  return name ? find_hashed(g, gr_map_hash_str(name), name) : NULL;
}
const char *gr_graph_resolve_device(const gr_graph *g, const gr_node *n) {
  for (int hop = 0; hop < 16; hop++) {
    const gr_node *t = NULL;
    { /* an op naming a variable (reads, assign, updates) uses it where it lives */
      const char *v = gr_node_attr_string(n, "var", "");
      if (v[0] && strcmp(v, n->name) != 0 && (t = gr_graph_find_node(g, v)) &&
          !(t->op->flags & GR_OP_VARIABLE))
        t = NULL;
    }
    if (!t && !n->requested_device[0] && n->colocate_with)
      t = gr_graph_find_node(g, n->colocate_with);
    if (!t) break;
    n = t;
  }
  return n->requested_device;
}
/* s as a graph string: the copy *last when equal (consecutive nodes share
 * source lines and devices), else a new copy that becomes *last. */
static const char *shared_str(gr_graph *g, const char **last, const char *s) {
  if (!s) return NULL;
  if (*last && strcmp(*last, s) == 0) return *last;
  char *c = gr_arena_strdup(&g->arena, s);
  if (c) *last = c;
  return c;
}
void gr_graph_set_source_loc(gr_graph *g, const char *loc) {
  g->source_loc = shared_str(g, &g->last_loc, loc);
}
const char *gr_graph_name_scope(const gr_graph *g) {
  return g->num_name_scopes ? g->name_scopes[g->num_name_scopes - 1] : "";
}

static gr_output null_output(void) {
  return (gr_output){NULL, 0};
}

gr_status gr_graph_set_errorf(gr_graph *g, gr_status code, const char *fmt, ...) {
  gr_error e;
  va_list ap;
  va_start(ap, fmt);
  gr_error_setv(&e, code, fmt, ap);
  va_end(ap);
  if (g->source_loc) gr_error_prefix(&e, "%s", g->source_loc);
  return gr_graph_set_error(g, &e);
}
#define fail gr_graph_set_errorf

/* Node names: [A-Za-z0-9_.][A-Za-z0-9_.\-]* components joined by '/'. */
static bool valid_node_name(const char *s) {
  if (!*s) return false;
  bool start = true;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '/') {
      if (start) return false;
      start = true;
      continue;
    }
    if (!(isalnum(c) || c == '_' || c == '.' || (c == '-' && !start))) return false;
    start = false;
  }
  return !start;
}

/* scope/name (or name at the top level) into buf of at least
 * strlen(scope) + strlen(name) + 2 bytes; returns its length. */
static size_t join_scope(char *buf, const char *scope, size_t ls, const char *name, size_t ln) {
  if (ls) {
    memcpy(buf, scope, ls);
    buf[ls++] = '/';
  }
  memcpy(buf + ls, name, ln + 1);
  return ls + ln;
}

static char *arena_strndup(gr_graph *g, const char *s, size_t n) {
  char *c = gr_arena_alloc_aligned(&g->arena, n + 1, 1);
  if (c) memcpy(c, s, n + 1);
  return c;
}

/* The name of a new node, copied into the arena once: scope/base itself, or
 * with a suffix _K for the smallest unused K tracked per name, so adding n
 * nodes of one op costs O(n). *hash gets the name's gr_strhash. */
static char *new_node_name(gr_graph *g, const char *base, uint64_t *hash) {
  const char *scope = gr_graph_name_scope(g);
  size_t ls = strlen(scope), lb = strlen(base), cap = ls + lb + 24;
  char small[256];
  char *buf = cap <= sizeof small ? small : gr_arena_alloc_aligned(&g->arena, cap, 1);
  if (!buf) return NULL;
  size_t len = join_scope(buf, scope, ls, base, lb);
  *hash = gr_map_hash_str(buf);
  intptr_t k = (intptr_t)gr_map_get_str(&g->next_suffix, buf);
  bool known = k != 0;
  if (!known) {
    if (!find_hashed(g, *hash, buf)) return buf == small ? arena_strndup(g, buf, len) : buf;
    k = 1;
  }
  /* taken: the first free suffix; the map needs its own copy of a new key */
  char *key = known ? buf : arena_strndup(g, buf, len);
  if (!key) return NULL;
  for (;; k++) {
    snprintf(buf + len, 24, "_%ld", (long)k);
    *hash = gr_map_hash_str(buf);
    if (!find_hashed(g, *hash, buf)) break;
  }
  char *name = arena_strndup(g, buf, strlen(buf));
  buf[len] = '\0'; /* key == buf: the map has the key and only its value changes */
  if (!name || !gr_map_put_str(&g->next_suffix, key, (void *)(k + 1))) return NULL;
  return name;
}

static uint64_t shape_hash(const gr_shape *s) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(uint32_t)s->rank;
  for (int i = 0; i < GR_MAX_RANK; i++) h = (h ^ (uint64_t)s->dims[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static bool shape_is(const void *set, uint32_t id, const void *shape) {
  const gr_shape *a = ((const shape_set *)set)->list[id], *b = shape;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < GR_MAX_RANK; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* The graph's copy of shape s (every field equal), stored once while the set
 * has room; NULL when out of memory. */
static gr_shape *shared_shape(gr_graph *g, const gr_shape *s) {
  shape_set *set = &g->shapes;
  uint64_t h = shape_hash(s);
  int64_t id = gr_idmap_find(&set->index, h, s, shape_is, set);
  if (id >= 0) return set->list[id];
  gr_shape *c = gr_arena_alloc_aligned(&g->arena, sizeof *c, 8);
  if (!c) return NULL;
  *c = *s;
  if (set->count == GR_SHAPE_SET_MAX) return c;
  if (set->count == set->cap) {
    int cap = set->cap ? set->cap * 2 : 64;
    gr_shape **list = gr_realloc_array(set->list, (size_t)cap, sizeof *list);
    if (!list) return c;
    set->list = list;
    set->cap = cap;
  }
  if (gr_idmap_insert(&set->index, h, (uint32_t)set->count)) set->list[set->count++] = c;
  return c;
}

static const gr_attr_spec *find_spec(const gr_op_def *op, const char *name) {
  for (int i = 0; i < op->num_attrs; i++)
    if (strcmp(op->attrs[i].name, name) == 0) return &op->attrs[i];
  return NULL;
}

static void list_attr_names(const gr_op_def *op, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < op->num_attrs && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", op->attrs[i].name);
  if (!op->num_attrs) snprintf(buf, cap, "none");
}

/* Copies v into the arena (strings, lists) or takes a reference (tensor). */
static bool copy_attr_value(gr_graph *g, gr_attr_value *dst, const gr_attr_value *v) {
  *dst = *v;
  switch (v->type) {
    case GR_ATTR_STRING:
      dst->s = gr_arena_strdup(&g->arena, v->s ? v->s : "");
      return dst->s != NULL;
    case GR_ATTR_INTS:
      dst->ints.v = gr_arena_memdup(&g->arena, v->ints.v, sizeof(int64_t) * (size_t)v->ints.n);
      return dst->ints.v != NULL;
    case GR_ATTR_FLOATS:
      dst->floats.v = gr_arena_memdup(&g->arena, v->floats.v, sizeof(double) * (size_t)v->floats.n);
      return dst->floats.v != NULL;
    case GR_ATTR_TENSOR:
      gr_tensor_ref(&dst->tensor, &v->tensor);
      return true;
    default:
      return true;
  }
}

static gr_status build_attrs(gr_graph *g, gr_node *n, const gr_attr *attrs, int num_attrs) {
  const gr_op_def *op = n->op;
  if (op->num_attrs == 0 && num_attrs == 0) return GR_OK; /* most ops: nothing to store */
  n->attrs = gr_arena_alloc(&g->arena, sizeof(gr_attr) * (size_t)(op->num_attrs + 1));
  if (!n->attrs) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < num_attrs; i++) {
    const gr_attr *a = &attrs[i];
    const gr_attr_spec *spec = a->name ? find_spec(op, a->name) : NULL;
    if (!spec) {
      char names[400];
      list_attr_names(op, names, sizeof names);
      return fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): unknown attr '%s' (valid: %s)",
                  n->name, op->name, a->name ? a->name : "(null)", names);
    }
    for (int j = 0; j < i; j++)
      if (strcmp(attrs[j].name, a->name) == 0)
        return fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): attr '%s' given twice", n->name,
                    op->name, a->name);
    gr_attr_value v = a->value;
    if (v.type == GR_ATTR_INT && spec->type == GR_ATTR_FLOAT) {
      double f = (double)v.i;
      v.type = GR_ATTR_FLOAT;
      v.f = f;
    }
    if (v.type != spec->type)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): attr '%s' must be %s, got %s",
                  n->name, op->name, a->name, gr_attr_type_name(spec->type),
                  gr_attr_type_name(v.type));
    if (v.type == GR_ATTR_DTYPE && !gr_dtype_is_valid(v.dtype))
      return fail(g, GR_ERR_DTYPE, "node '%s' (op %s): attr '%s' is not a valid dtype", n->name,
                  op->name, a->name);
    if (v.type == GR_ATTR_TENSOR && !v.tensor.buf)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): attr '%s' is an empty tensor",
                  n->name, op->name, a->name);
    if (v.type == GR_ATTR_SHAPE && (v.shape.rank < -1 || v.shape.rank > GR_MAX_RANK))
      return fail(g, GR_ERR_SHAPE, "node '%s' (op %s): attr '%s' has rank %d (max %d)", n->name,
                  op->name, a->name, v.shape.rank, GR_MAX_RANK);
    gr_attr *dst = &n->attrs[n->num_attrs];
    dst->name = spec->name;
    if (!copy_attr_value(g, &dst->value, &v)) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "oom");
    n->num_attrs++;
  }
  for (int s = 0; s < op->num_attrs; s++) {
    const gr_attr_spec *spec = &op->attrs[s];
    bool given = false;
    for (int i = 0; i < n->num_attrs; i++)
      if (n->attrs[i].name == spec->name) given = true;
    if (given) continue;
    if (spec->required)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): missing required attr '%s' (%s)",
                  n->name, op->name, spec->name, gr_attr_type_name(spec->type));
    gr_attr *dst = &n->attrs[n->num_attrs++];
    dst->name = spec->name;
    gr_attr_value dv = spec->default_value;
    dv.type = spec->type;
    if (!copy_attr_value(g, &dst->value, &dv)) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  }
  return GR_OK;
}

/* The requested device of n (op and attrs set) from the device scopes:
 * the innermost scope's merged spec, or, with device functions below it
 * (since the last reset), the scopes applied from the outside in: a spec
 * merges over what the scopes outside it gave, a function gets that and
 * returns the spec to go on with. NULL after an error (recorded). */
static const char *scoped_device(gr_graph *g, const gr_node *n) {
  int top = g->num_device_scopes;
  if (!g->device_has_fn[top - 1]) return g->device_strs[top - 1];
  int from = top - 1;
  while (from > 0 && !g->device_reset[from]) from--;
  gr_device_spec cur = gr_device_spec_any();
  char buf[GR_DEVICE_NAME_MAX];
  for (int i = from; i < top; i++) {
    if (!g->device_fns[i]) {
      cur = gr_device_spec_merge(&cur, &g->device_raw[i]);
      continue;
    }
    const char *r = g->device_fns[i](g, n, gr_device_spec_str(&cur, buf), g->device_fn_args[i]);
    if (!r) {
      if (!g->has_error) fail(g, GR_ERR_INTERNAL, "node '%s': its device function failed", n->name);
      return NULL;
    }
    gr_error e;
    if (gr_device_spec_parse(r, &cur, &e) != GR_OK) {
      fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s': its device function gave %s", n->name, e.msg);
      return NULL;
    }
  }
  const char *s = shared_str(g, &g->last_requested, gr_device_spec_str(&cur, buf));
  if (!s) fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  return s;
}

/* Scratch arrays of shape inference live on the stack up to this count. */
enum { SMALL_IO = 8 };

/* What can be refused before anything is allocated: the op, null inputs, the
 * name, and for a copy a name already taken (*hash: that name's hash). */
static bool check_request(gr_graph *g, const gr_op_def *op, const char *name,
                          const gr_output *inputs, int num_inputs, const gr_node *copy_of,
                          uint64_t *hash) {
  if (!op) {
    fail(g, GR_ERR_NOT_FOUND, "unknown op for node '%s'", name ? name : "?");
    return false;
  }
  const char *base = name ? name : op->name;
  for (int i = 0; i < num_inputs; i++)
    if (!inputs[i].node) {
      if (!g->has_error)
        fail(g, GR_ERR_INVALID_ARGUMENT, "input %d of '%s' (op %s) is a null output", i, base,
             op->name);
      return false;
    }
  if (!valid_node_name(base)) {
    fail(g, GR_ERR_INVALID_ARGUMENT,
         "invalid node name '%s' (op %s): use letters, digits, '_', '.', '-' and '/'", base,
         op->name);
    return false;
  }
  *hash = copy_of ? gr_map_hash_str(copy_of->name) : 0;
  if (copy_of && find_hashed(g, *hash, copy_of->name)) {
    fail(g, GR_ERR_ALREADY_EXISTS, "duplicate node name '%s' (op %s)", copy_of->name, op->name);
    return false;
  }
  return true;
}

/* Whether the op takes num_inputs inputs (else an error naming n). */
static bool check_input_count(gr_graph *g, const gr_node *n, const gr_op_def *op, int num_inputs) {
  if (num_inputs >= op->min_inputs && (op->max_inputs < 0 || num_inputs <= op->max_inputs))
    return true;
  if (op->max_inputs == op->min_inputs)
    fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): expects %d input%s, got %d", n->name,
         op->name, op->min_inputs, op->min_inputs == 1 ? "" : "s", num_inputs);
  else if (op->max_inputs < 0)
    fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): expects at least %d inputs, got %d",
         n->name, op->name, op->min_inputs, num_inputs);
  else
    fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): expects %d to %d inputs, got %d", n->name,
         op->name, op->min_inputs, op->max_inputs, num_inputs);
  return false;
}

/* The dtypes, shapes and constant values (NULL: not a constant) of n's
 * inputs; false (error recorded) for an input from another graph or an
 * output its node does not have. */
static bool read_inputs(gr_graph *g, const gr_node *n, gr_dtype *in_dtypes, gr_shape *in_shapes,
                        const gr_tensor **in_values) {
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_output *in = &n->inputs[i];
    gr_node *src = in->node;
    if (src->graph != g) {
      fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s' (op %s): input %d ('%s') is from another graph",
           n->name, n->op->name, i, src->name);
      return false;
    }
    if (in->index < 0 || in->index >= src->num_outputs) {
      fail(g, GR_ERR_OUT_OF_RANGE,
           "node '%s' (op %s): input %d refers to output %d of '%s', "
           "which has %d output%s",
           n->name, n->op->name, i, in->index, src->name, src->num_outputs,
           src->num_outputs == 1 ? "" : "s");
      return false;
    }
    in_dtypes[i] = src->out_dtypes[in->index];
    in_shapes[i] = src->out_shapes[in->index];
    in_values[i] = NULL;
    if (src->op->flags & GR_OP_CONSTANT) {
      const gr_attr_value *v = gr_node_attr(src, "value");
      if (v && v->type == GR_ATTR_TENSOR) in_values[i] = &v->tensor;
    }
  }
  return true;
}

/* n's requested device and control inputs: copy_of's and ctrl for a copy,
 * else from the device scopes and the control-dependency scopes. */
static bool apply_scopes(gr_graph *g, gr_node *n, const gr_node *copy_of, gr_node *const *ctrl,
                         int num_ctrl) {
  if (copy_of) {
    n->requested_device = shared_str(g, &g->last_requested, copy_of->requested_device);
  } else if (g->num_device_scopes) {
    n->requested_device = scoped_device(g, n);
    if (!n->requested_device) return false;
  } else {
    n->requested_device = "";
  }
  int nctrl = 0, from = 0;
  for (int f = 0; f < g->num_ctrl; f++)
    if (g->ctrl[f].reset) from = f + 1;
  for (int f = from; f < g->num_ctrl; f++) nctrl += g->ctrl[f].n;
  if (copy_of) {
    for (int j = 0; j < num_ctrl; j++)
      if (ctrl[j]->graph != g) {
        fail(g, GR_ERR_INVALID_ARGUMENT, "node '%s': control input '%s' is from another graph",
             n->name, ctrl[j]->name);
        return false;
      }
    n->control_inputs = gr_arena_memdup(&g->arena, ctrl, sizeof(gr_node *) * (size_t)num_ctrl);
    n->num_control_inputs = num_ctrl;
  } else if (nctrl) {
    n->control_inputs = gr_arena_alloc(&g->arena, sizeof(gr_node *) * (size_t)nctrl);
    for (int f = from; f < g->num_ctrl; f++)
      for (int j = 0; j < g->ctrl[f].n; j++)
        n->control_inputs[n->num_control_inputs++] = g->ctrl[f].deps[j];
  }
  return true;
}

/* Runs the op's shape function on the inputs' dtypes, shapes and values and
 * stores n's outputs (a single output's dtype and shape in the graph's shared
 * tables); false with the error recorded, prefixed by the source position. */
static bool infer_outputs(gr_graph *g, gr_node *n, const gr_dtype *in_dtypes,
                          const gr_shape *in_shapes, const gr_tensor **in_values) {
  const gr_op_def *op = n->op;
  gr_dtype out_dtypes_small[SMALL_IO];
  gr_shape out_shapes_small[SMALL_IO];
  gr_dtype *out_dtypes = NULL;
  gr_shape *out_shapes = NULL;
  bool ok = false;
  int max_out = op->num_outputs >= 0 ? op->num_outputs : GR_MAX_OUTPUTS;
  if (max_out < SMALL_IO) {
    memset(out_dtypes_small, 0, sizeof(gr_dtype) * (size_t)(max_out + 1));
    memset(out_shapes_small, 0, sizeof(gr_shape) * (size_t)(max_out + 1));
    out_dtypes = out_dtypes_small;
    out_shapes = out_shapes_small;
  } else {
    out_dtypes = calloc((size_t)max_out + 1, sizeof *out_dtypes);
    out_shapes = calloc((size_t)max_out + 1, sizeof *out_shapes);
  }
  if (!out_dtypes || !out_shapes) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  gr_error err;
  gr_error_clear(&err);
  gr_shape_ctx sc = {.node = n,
                     .num_inputs = n->num_inputs,
                     .in_dtypes = in_dtypes,
                     .in_shapes = in_shapes,
                     .in_values = in_values,
                     .num_outputs = op->num_outputs >= 0 ? op->num_outputs : 1,
                     .out_dtypes = out_dtypes,
                     .out_shapes = out_shapes,
                     .err = &err};
  if (op->shape_fn && op->shape_fn(&sc) != GR_OK) {
    if (err.code == GR_OK)
      gr_error_set(&err, GR_ERR_INTERNAL, "node '%s': shape function failed", n->name);
    if (g->source_loc) gr_error_prefix(&err, "%s", g->source_loc);
    gr_graph_set_error(g, &err);
    goto done;
  }
  GR_ASSERT(sc.num_outputs >= 0 && sc.num_outputs <= max_out);
  n->num_outputs = sc.num_outputs;
  if (sc.num_outputs == 1 && out_dtypes[0] >= 0 && out_dtypes[0] < GR_DTYPE_COUNT) {
    n->out_dtypes = &g->dtypes[out_dtypes[0]];
    n->out_shapes = shared_shape(g, &out_shapes[0]);
  } else {
    n->out_dtypes =
        gr_arena_memdup(&g->arena, out_dtypes, sizeof(gr_dtype) * (size_t)sc.num_outputs);
    n->out_shapes =
        gr_arena_memdup(&g->arena, out_shapes, sizeof(gr_shape) * (size_t)sc.num_outputs);
  }
  if (!n->out_dtypes || !n->out_shapes) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  ok = true;
done:
  if (out_dtypes != out_dtypes_small) free(out_dtypes);
  if (out_shapes != out_shapes_small) free(out_shapes);
  return ok;
}

/* Appends n to the graph's nodes and its name (hash hash) to the index. */
static bool commit_node(gr_graph *g, gr_node *n, uint64_t hash) {
  if (g->num_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
    gr_node **nodes = gr_realloc_array(g->nodes, (size_t)cap, sizeof(gr_node *));
    if (!nodes) {
      fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      return false;
    }
    g->nodes = nodes;
    int64_t *topo = gr_realloc_array(g->topo, (size_t)cap, sizeof *topo);
    if (!topo) {
      fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      return false;
    }
    g->topo = topo;
    g->cap_nodes = cap;
  }
  if (!gr_idmap_insert(&g->by_name, hash, (uint32_t)g->num_nodes)) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return false;
  }
  n->id = g->num_nodes;
  g->topo[n->id] = g->topo_next++; /* after every node: its inputs are older */
  g->nodes[g->num_nodes++] = n;
  return true;
}

/* Adds a node: checks the request, names it, reads its inputs, takes its
 * attrs, device and control inputs, infers its outputs and appends it.
 * copy_of NULL: named and placed from the scope stacks. Else an exact copy
 * of copy_of (its name, devices, colocation and source position) with the
 * control inputs ctrl. */
static gr_output add_node(gr_graph *g, const gr_op_def *op, const char *name,
                          const gr_output *inputs, int num_inputs, const gr_attr *attrs,
                          int num_attrs, const gr_node *copy_of, gr_node *const *ctrl,
                          int num_ctrl) {
  uint64_t hash;
  if (!check_request(g, op, name, inputs, num_inputs, copy_of, &hash)) return null_output();
  /* the node and its input array in one block */
  gr_node *n = gr_arena_alloc_aligned(
      &g->arena, sizeof *n + sizeof(gr_output) * (size_t)(num_inputs > 0 ? num_inputs : 0), 8);
  const char *uname = !n        ? NULL
                      : copy_of ? gr_arena_strdup(&g->arena, copy_of->name)
                                : new_node_name(g, name ? name : op->name, &hash);
  if (!uname) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return null_output();
  }
  n->name = uname;
  n->op = op;
  n->graph = g;
  n->source_loc = g->source_loc;
  const char *saved_loc = g->source_loc;
  if (copy_of) {
    n->source_loc = g->source_loc = shared_str(g, &g->last_loc, copy_of->source_loc);
    n->assigned_device = shared_str(g, &g->last_assigned, copy_of->assigned_device);
    n->colocate_with = shared_str(g, &g->last_colocate, copy_of->colocate_with);
    n->colocate_hint = copy_of->colocate_hint && copy_of->colocate_with;
  }
  if (!check_input_count(g, n, op, num_inputs)) {
    g->source_loc = saved_loc;
    return null_output();
  }
  n->num_inputs = num_inputs;
  n->inputs = (gr_output *)(n + 1);
  if (num_inputs) memcpy(n->inputs, inputs, sizeof(gr_output) * (size_t)num_inputs);
  /* scratch for shape inference: on the stack for the usual small counts */
  gr_shape in_shapes_small[SMALL_IO];
  const gr_tensor *in_values_small[SMALL_IO];
  gr_dtype in_dtypes_small[SMALL_IO];
  gr_dtype *in_dtypes = num_inputs < SMALL_IO
                            ? in_dtypes_small
                            : gr_alloc_array((size_t)(num_inputs + 1), sizeof(gr_dtype));
  gr_shape *in_shapes = num_inputs < SMALL_IO
                            ? in_shapes_small
                            : gr_alloc_array((size_t)(num_inputs + 1), sizeof(gr_shape));
  const gr_tensor **in_values = num_inputs < SMALL_IO
                                    ? in_values_small
                                    : gr_alloc_array((size_t)(num_inputs + 1), sizeof(gr_tensor *));
  gr_output result = null_output();
  if (!in_dtypes || !in_shapes || !in_values) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } else if (read_inputs(g, n, in_dtypes, in_shapes, in_values) &&
             build_attrs(g, n, attrs, num_attrs) == GR_OK &&
             apply_scopes(g, n, copy_of, ctrl, num_ctrl) &&
             infer_outputs(g, n, in_dtypes, in_shapes, in_values) && commit_node(g, n, hash)) {
    result = (gr_output){n, n->num_outputs ? 0 : -1};
  }
  if (!result.node && n->attrs)
    for (int a = 0; a < n->num_attrs; a++)
      if (n->attrs[a].value.type == GR_ATTR_TENSOR) gr_tensor_release(&n->attrs[a].value.tensor);
  g->source_loc = saved_loc;
  if (in_dtypes != in_dtypes_small) free(in_dtypes);
  if (in_shapes != in_shapes_small) free(in_shapes);
  if (in_values != in_values_small) free(in_values);
  return result;
}

gr_output gr_graph_add_node(gr_graph *g, const gr_op_def *op, const char *name,
                            const gr_output *inputs, int num_inputs, const gr_attr *attrs,
                            int num_attrs) {
  return add_node(g, op, name, inputs, num_inputs, attrs, num_attrs, NULL, NULL, 0);
}

gr_output gr_graph_copy_node(gr_graph *g, const gr_node *src, const gr_output *inputs,
                             gr_node *const *ctrl, int num_ctrl) {
  if (!src) {
    fail(g, GR_ERR_INVALID_ARGUMENT, "copy_node: null node");
    return null_output();
  }
  if (num_ctrl < 0 || (num_ctrl && !ctrl)) {
    fail(g, GR_ERR_INVALID_ARGUMENT, "copy_node '%s': bad control inputs", src->name);
    return null_output();
  }
  return add_node(g, src->op, src->name, inputs, src->num_inputs, src->attrs, src->num_attrs, src,
                  ctrl, num_ctrl);
}

gr_output gr_graph_rename(gr_graph *g, gr_output o, const char *name) {
  if (!o.node) return o;
  gr_node *n = o.node;
  if (!name || !valid_node_name(name)) {
    fail(g, GR_ERR_INVALID_ARGUMENT, "invalid node name '%s' for node '%s'", name ? name : "",
         n->name);
    return null_output();
  }
  /* the node's scope with the new last component, built once */
  const char *slash = strrchr(n->name, '/');
  size_t ls = slash ? (size_t)(slash - n->name) : 0, ln = strlen(name);
  if (strcmp(n->name + (slash ? ls + 1 : 0), name) == 0) return o;
  char *full = gr_arena_alloc_aligned(&g->arena, ls + ln + 2, 1);
  if (!full) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return null_output();
  }
  join_scope(full, n->name, ls, name, ln);
  uint64_t hash = gr_map_hash_str(full);
  gr_node *other = find_hashed(g, hash, full);
  if (other) {
    fail(g, GR_ERR_ALREADY_EXISTS, "duplicate node name '%s' (already used by a %s node)", full,
         other->op->name);
    return null_output();
  }
  gr_idmap_remove(&g->by_name, gr_map_hash_str(n->name), (uint32_t)n->id);
  n->name = full;
  if (!gr_idmap_insert(&g->by_name, hash, (uint32_t)n->id)) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return null_output();
  }
  return o;
}

/* The j-th predecessor of v that counts for cycles (a loop's back edge,
 * merge <- next_iteration, does not), or NULL. */
static const gr_node *dag_pred(const gr_node *v, int j) {
  const gr_node *u = gr_node_predecessor(v, j);
  return j < v->num_inputs && u->op->cf_kind == GR_CF_NEXT_ITERATION ? NULL : u;
}

/* Computes g->topo again: nodes numbered in a depth-first post-order over
 * their predecessors (each after all of them). False when out of memory or
 * when the graph holds a cycle (then topo stays stale). */
static bool topo_compute(gr_graph *g) {
  int n = g->num_nodes;
  int *stack = gr_alloc_array((size_t)n + 1, sizeof *stack),
      *next = calloc((size_t)n + 1, sizeof *next);
  char *state = calloc((size_t)n + 1, 1); /* 0 new, 1 on the stack, 2 numbered */
  bool ok = stack && next && state;
  int64_t order = 0;
  for (int r = 0; ok && r < n; r++) {
    if (state[r]) continue;
    int sp = 0;
    stack[sp++] = r;
    state[r] = 1;
    while (ok && sp > 0) {
      const gr_node *v = g->nodes[stack[sp - 1]];
      int deg = v->num_inputs + v->num_control_inputs;
      const gr_node *u = NULL;
      while (next[v->id] < deg && !(u = dag_pred(v, next[v->id]++))) {}
      if (u && state[u->id] == 1) ok = false; /* a cycle */
      if (u && state[u->id] == 0) {
        state[u->id] = 1;
        stack[sp++] = u->id;
      } else if (!u) {
        state[v->id] = 2;
        g->topo[v->id] = order++;
        sp--;
      }
    }
  }
  free(stack), free(next), free(state);
  if (ok) g->topo_next = order, g->topo_valid = true;
  return ok;
}

/* Notes the edge from -> to: one that points back in the order makes it stale. */
static void note_edge(gr_graph *g, const gr_node *from, const gr_node *to) {
  if (g->topo[from->id] >= g->topo[to->id]) g->topo_valid = false;
}

gr_status gr_graph_set_input(gr_graph *g, gr_node *n, int i, gr_output value) {
  if (!n || !value.node) return fail(g, GR_ERR_INVALID_ARGUMENT, "set_input: null node or value");
  if (i < 0 || i >= n->num_inputs)
    return fail(g, GR_ERR_OUT_OF_RANGE, "set_input: node '%s' has no input %d", n->name, i);
  if (value.node->graph != g || value.index < 0 || value.index >= value.node->num_outputs)
    return fail(g, GR_ERR_INVALID_ARGUMENT, "set_input: bad value for input %d of '%s'", i,
                n->name);
  gr_output old = n->inputs[i];
  gr_dtype a = old.node->out_dtypes[old.index], b = value.node->out_dtypes[value.index];
  const gr_shape *sa = &old.node->out_shapes[old.index], *sb = &value.node->out_shapes[value.index];
  if (a != b || !gr_shape_compatible(sa, sb)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return fail(g, GR_ERR_SHAPE, "node '%s': input %d was %s %s, '%s' gives %s %s", n->name, i,
                gr_dtype_name(a), gr_shape_str(sa, x), value.node->name, gr_dtype_name(b),
                gr_shape_str(sb, y));
  }
  if (value.node->op->cf_kind != GR_CF_NEXT_ITERATION) note_edge(g, value.node, n);
  n->inputs[i] = value;
  return GR_OK;
}

void gr_graph_replace_control_input(gr_graph *g, gr_node *n, int j, gr_node *dep) {
  GR_ASSERT(j >= 0 && j < n->num_control_inputs && dep->graph == g);
  note_edge(g, dep, n);
  n->control_inputs[j] = dep;
}

/* Does `from` depend on `target` (through inputs and control inputs, loop
 * back edges aside)? With a valid order, not when from comes first; else
 * only nodes between the two are walked. */
static bool reaches(gr_graph *g, const gr_node *from, const gr_node *target) {
  if (from == target) return true;
  if (!g->topo_valid) topo_compute(g);
  int64_t floor = g->topo_valid ? g->topo[target->id] : INT64_MIN;
  if (g->topo_valid && g->topo[from->id] < floor) return false;
  char *seen = calloc((size_t)g->num_nodes + 1, 1);
  int *stack = gr_alloc_array((size_t)g->num_nodes + 1, sizeof(int));
  bool found = false;
  if (!seen || !stack) {
    free(seen);
    free(stack);
    return true; /* out of memory: refuse rather than risk a cycle */
  }
  int sp = 0;
  stack[sp++] = from->id;
  seen[from->id] = 1;
  while (sp > 0 && !found) {
    const gr_node *v = g->nodes[stack[--sp]];
    for (int j = 0; j < v->num_inputs + v->num_control_inputs && !found; j++) {
      const gr_node *u = gr_node_predecessor(v, j);
      if (j < v->num_inputs && u->op->cf_kind == GR_CF_NEXT_ITERATION) continue;
      if (u == target) found = true;
      if (!seen[u->id] && g->topo[u->id] >= floor) {
        seen[u->id] = 1;
        stack[sp++] = u->id;
      }
    }
  }
  free(seen);
  free(stack);
  return found;
}

gr_status gr_graph_add_control_input(gr_graph *g, gr_node *n, gr_node *dep) {
  if (!n || !dep) return fail(g, GR_ERR_INVALID_ARGUMENT, "null node in control dependency");
  if (dep->graph != g || n->graph != g)
    return fail(g, GR_ERR_INVALID_ARGUMENT, "control input '%s' of '%s' is from another graph",
                dep->name, n->name);
  if (reaches(g, dep, n))
    return fail(g, GR_ERR_INVALID_ARGUMENT,
                "control input '%s' of '%s' would make a cycle ('%s' depends on '%s')", dep->name,
                n->name, dep->name, n->name);
  return gr_graph_add_control_input_unchecked(g, n, dep);
}

gr_status gr_graph_add_control_input_unchecked(gr_graph *g, gr_node *n, gr_node *dep) {
  gr_node **c = gr_arena_alloc(&g->arena, sizeof(gr_node *) * (size_t)(n->num_control_inputs + 1));
  if (!c) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  note_edge(g, dep, n);
  if (n->num_control_inputs)
    memcpy(c, n->control_inputs, sizeof(gr_node *) * (size_t)n->num_control_inputs);
  c[n->num_control_inputs++] = dep;
  n->control_inputs = c;
  return GR_OK;
}

void gr_graph_remove_control_input(gr_node *n, const gr_node *dep) {
  int k = 0;
  for (int j = 0; j < n->num_control_inputs; j++)
    if (n->control_inputs[j] != dep) n->control_inputs[k++] = n->control_inputs[j];
  n->num_control_inputs = k;
}

gr_status gr_graph_set_attr(gr_graph *g, gr_node *n, const gr_attr *a) {
  if (!n || !a || !a->name) return fail(g, GR_ERR_INVALID_ARGUMENT, "set_attr: null node or attr");
  gr_attr_type t = a->value.type;
  if (t != GR_ATTR_BOOL && t != GR_ATTR_INT && t != GR_ATTR_FLOAT)
    return fail(g, GR_ERR_INVALID_ARGUMENT,
                "set_attr: node '%s': attr '%s' is %s; only bool, int "
                "and float attrs can be set after a node is built",
                n->name, a->name, gr_attr_type_name(t));
  for (int i = 0; i < n->num_attrs; i++) {
    if (strcmp(n->attrs[i].name, a->name) != 0) continue;
    if (n->attrs[i].value.type != t)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "set_attr: node '%s': attr '%s' is %s, not %s",
                  n->name, a->name, gr_attr_type_name(n->attrs[i].value.type),
                  gr_attr_type_name(t));
    n->attrs[i].value = a->value;
    return GR_OK;
  }
  return fail(g, GR_ERR_INVALID_ARGUMENT, "set_attr: node '%s' (op %s) has no attr '%s'", n->name,
              n->op->name, a->name);
}

gr_status gr_graph_set_colocation(gr_graph *g, gr_node *n, const char *other) {
  if (!gr_graph_find_node(g, other))
    return fail(g, GR_ERR_NOT_FOUND, "node '%s': colocate_with names unknown node '%s'", n->name,
                other);
  n->colocate_with = gr_arena_strdup(&g->arena, other);
  n->colocate_hint = false;
  return GR_OK;
}

gr_status gr_graph_set_colocation_hint(gr_graph *g, gr_node *n, const char *other) {
  GR_TRY(gr_graph_set_colocation(g, n, other));
  n->colocate_hint = true;
  return GR_OK;
}

gr_status gr_graph_push_name_scope(gr_graph *g, const char *scope) {
  if (g->num_name_scopes == GR_SCOPE_MAX)
    return fail(g, GR_ERR_OUT_OF_RANGE, "name scopes nested deeper than %d", GR_SCOPE_MAX);
  /* "/" is the root scope and "/a/b" an absolute one */
  bool absolute = scope && scope[0] == '/';
  const char *rel = absolute ? scope + 1 : scope;
  if (!rel || (!valid_node_name(rel) && !(absolute && !*rel)))
    return fail(g, GR_ERR_INVALID_ARGUMENT, "invalid name scope '%s'", scope ? scope : "");
  const char *outer = absolute ? "" : gr_graph_name_scope(g);
  size_t lo = strlen(outer), lr = strlen(rel);
  char *s = gr_arena_alloc_aligned(&g->arena, lo + lr + 2, 1);
  if (s) join_scope(s, outer, lo, rel, lr);
  if (!s) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  g->name_scopes[g->num_name_scopes++] = s;
  return GR_OK;
}

void gr_graph_pop_name_scope(gr_graph *g) {
  if (!g->num_name_scopes && g->has_error) return; /* after a failed push: see gr_graph.h */
  GR_ASSERT(g->num_name_scopes > 0);
  g->num_name_scopes--;
}

static gr_status push_device(gr_graph *g, const char *spec, bool reset, gr_device_fn fn,
                             void *arg) {
  if (g->num_device_scopes == GR_SCOPE_MAX)
    return fail(g, GR_ERR_OUT_OF_RANGE, "device scopes nested deeper than %d", GR_SCOPE_MAX);
  gr_device_spec s = gr_device_spec_any();
  gr_error e;
  if (!fn && gr_device_spec_parse(spec ? spec : "", &s, &e) != GR_OK) {
    if (g->source_loc) gr_error_prefix(&e, "%s", g->source_loc);
    return gr_graph_set_error(g, &e);
  }
  int k = g->num_device_scopes;
  bool below = k && !reset;
  gr_device_spec outer = below ? g->device_scopes[k - 1] : gr_device_spec_any();
  gr_device_spec merged = fn ? outer : gr_device_spec_merge(&outer, &s);
  char buf[GR_DEVICE_NAME_MAX];
  const char *str = gr_arena_strdup(&g->arena, gr_device_spec_str(&merged, buf));
  if (!str) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  g->device_scopes[k] = merged;
  g->device_raw[k] = s;
  g->device_strs[k] = str;
  g->device_fns[k] = fn;
  g->device_fn_args[k] = arg;
  g->device_reset[k] = reset;
  g->device_has_fn[k] = fn || (below && g->device_has_fn[k - 1]);
  g->num_device_scopes++;
  return GR_OK;
}

gr_status gr_graph_push_device_scope(gr_graph *g, const char *spec) {
  return push_device(g, spec, false, NULL, NULL);
}

gr_status gr_graph_push_device_scope_reset(gr_graph *g, const char *spec) {
  return push_device(g, spec, true, NULL, NULL);
}

gr_status gr_graph_push_device_fn(gr_graph *g, gr_device_fn fn, void *arg) {
  if (!fn) return fail(g, GR_ERR_INVALID_ARGUMENT, "gr_graph_push_device_fn: no function");
  return push_device(g, NULL, false, fn, arg);
}

void gr_graph_pop_device_scope(gr_graph *g) {
  if (!g->num_device_scopes && g->has_error) return; /* after a failed push: see gr_graph.h */
  GR_ASSERT(g->num_device_scopes > 0);
  g->num_device_scopes--;
}

gr_status gr_graph_push_control_deps(gr_graph *g, const gr_output *deps, int n) {
  if (g->num_ctrl == GR_SCOPE_MAX)
    return fail(g, GR_ERR_OUT_OF_RANGE, "control scopes nested deeper than %d", GR_SCOPE_MAX);
  ctrl_frame *f = &g->ctrl[g->num_ctrl];
  f->deps = gr_arena_alloc(&g->arena, sizeof(gr_node *) * (size_t)(n + 1));
  if (!f->deps) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  f->n = 0;
  f->reset = false;
  for (int i = 0; i < n; i++) {
    if (!deps[i].node) {
      if (!g->has_error) fail(g, GR_ERR_INVALID_ARGUMENT, "null output in control dependencies");
      return GR_ERR_INVALID_ARGUMENT;
    }
    f->deps[f->n++] = deps[i].node;
  }
  g->num_ctrl++;
  return GR_OK;
}

gr_status gr_graph_push_no_control_deps(gr_graph *g) {
  GR_TRY(gr_graph_push_control_deps(g, NULL, 0));
  g->ctrl[g->num_ctrl - 1].reset = true;
  return GR_OK;
}

/* A graph's ordering edges: data inputs but a loop's back edge, and control inputs. */
static void graph_edges(const void *ctx, gr_topo_emit_fn emit, void *acc) {
  const gr_graph *g = ctx;
  for (int i = 0; i < g->num_nodes; i++) {
    const gr_node *d = g->nodes[i];
    for (int j = 0; j < d->num_inputs; j++)
      if (d->inputs[j].node->op->cf_kind != GR_CF_NEXT_ITERATION)
        emit(acc, d->inputs[j].node->id, i);
    for (int j = 0; j < d->num_control_inputs; j++) emit(acc, d->control_inputs[j]->id, i);
  }
}

int gr_graph_topo_order(const gr_graph *g, int *order) {
  return gr_topo_sort(g->num_nodes, graph_edges, g, NULL, order); /* < n only for a cycle,
                                                                      which builders cannot make */
}

/* Depth first: each node after its predecessors, roots taken in id order
 * and predecessors in input order; a node's state is 0 new, 1 on the stack,
 * 2 emitted. stack holds (node, next predecessor to visit). */
int gr_graph_topo_order_stable(const gr_graph *g, int *order) {
  int n = g->num_nodes, k = 0;
  char *state = calloc((size_t)n + 1, 1);
  int(*stack)[2] = gr_alloc_array((size_t)n + 1, sizeof *stack);
  if (!state || !stack) {
    free(state), free(stack);
    return -1;
  }
  for (int root = 0; root < n && k >= 0; root++) {
    if (state[root]) continue;
    int sp = 0;
    stack[sp][0] = root, stack[sp++][1] = 0;
    state[root] = 1;
    while (sp > 0) {
      const gr_node *v = g->nodes[stack[sp - 1][0]];
      int j = stack[sp - 1][1]++;
      if (j == v->num_inputs + v->num_control_inputs) {
        state[v->id] = 2;
        order[k++] = v->id;
        sp--;
        continue;
      }
      const gr_node *u = gr_node_predecessor(v, j);
      if (j < v->num_inputs && u->op->cf_kind == GR_CF_NEXT_ITERATION) continue; /* back edge */
      if (state[u->id] == 1) {                                                   /* a cycle */
        k = -2;
        break;
      }
      if (state[u->id] == 0) {
        state[u->id] = 1;
        stack[sp][0] = u->id, stack[sp++][1] = 0;
      }
    }
  }
  free(state), free(stack);
  return k;
}

void gr_graph_pop_control_deps(gr_graph *g) {
  if (!g->num_ctrl && g->has_error) return; /* after a failed push: see gr_graph.h */
  GR_ASSERT(g->num_ctrl > 0);
  g->num_ctrl--;
}
