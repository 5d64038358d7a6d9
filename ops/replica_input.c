/* Per-replica input shards for gr_replicate (shard_inputs,
 * docs/strategies.md#input-sharding): instead of slicing a global batch
 * read in one place, each replica gets its own batch node, made in the
 * replica's device scope, that reads its slice of the same global batch
 * (batch's num_slices, slice_index: the same rows, the same bits), from
 * its own copies of the files the batch reads (read_idx, read_npy: each
 * task loads the file itself), or an image_folder node's copy that
 * decodes only its slice's images. So no task sends another's batch. With
 * mirrored variables the step, when it is global_step, is read from the
 * replica's own copy of it (gr_ops_step_copy), so nothing crosses tasks
 * before a replica starts. Builds graph nodes only, on the calling
 * thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

#define CLONES_MAX 64 /* nodes copied per replica: a batch's data chains are short */
#define ATTRS_MAX  32 /* batch has 7, image_folder 20 */

typedef struct clones {
  const gr_node *src[CLONES_MAX];
  gr_node *dst[CLONES_MAX];
  int n;
} clones;

static gr_node *cloned(const clones *c, const gr_node *src) {
  for (int i = 0; i < c->n; i++)
    if (c->src[i] == src) return c->dst[i];
  return NULL;
}

static gr_status remember(gr_graph *g, clones *c, const gr_node *src, gr_node *dst) {
  if (!dst) return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
  if (c->n == CLONES_MAX)
    return gr_graph_set_errorf(g, GR_ERR_OUT_OF_RANGE,
                               "replicate: shard_input: the batches' data is made by more than %d "
                               "nodes (each replica copies them to read its own rows)",
                               CLONES_MAX);
  c->src[c->n] = src;
  c->dst[c->n++] = dst;
  return GR_OK;
}

/* The name without its scopes: data_train_x of a/b/data_train_x. */
static const char *base_name(const gr_node *n) {
  const char *slash = strrchr(n->name, '/');
  return slash ? slash + 1 : n->name;
}

static bool reads_file(const gr_node *n) {
  return n->op == &gr_op_read_idx || n->op == &gr_op_read_npy;
}

/* src (an ancestor of batch's data inputs) on this replica's device: a
 * file read or a stateless op copied (its inputs first), a constant as it
 * is (constants are copied to every task that uses them). */
static gr_status clone_data(gr_graph *g, const gr_node *batch, const gr_node *src, int depth,
                            clones *c, gr_output *out) {
  gr_node *have = cloned(c, src);
  if (have) return *out = (gr_output){have, out->index}, GR_OK;
  if ((src->op->flags & GR_OP_CONSTANT) && src->num_inputs == 0 && !src->num_control_inputs)
    return *out = (gr_output){(gr_node *)src, out->index}, GR_OK;
  unsigned bad = GR_OP_VARIABLE | GR_OP_PLACEHOLDER | (reads_file(src) ? 0u : GR_OP_STATEFUL);
  if ((src->op->flags & bad) || src->num_control_inputs || depth > 16)
    return gr_graph_set_errorf(
        g, GR_ERR_INVALID_ARGUMENT,
        "replicate: shard_input: batch '%s' reads '%s' (%s), which its replicas cannot each "
        "make for themselves: the batch's tensors must come from files (read_idx, read_npy) or "
        "constants through a few stateless ops; without shard_input the batch is read in one "
        "place and sliced",
        batch->name, src->name, src->op->name);
  gr_output *ins = gr_alloc_array((size_t)src->num_inputs + 1, sizeof *ins);
  if (!ins) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_status st = GR_OK;
  for (int j = 0; j < src->num_inputs && st == GR_OK; j++) {
    ins[j].index = src->inputs[j].index;
    st = clone_data(g, batch, src->inputs[j].node, depth + 1, c, &ins[j]);
  }
  gr_output o = {NULL, 0};
  if (st == GR_OK)
    o = gr_graph_add_node(g, src->op, base_name(src), ins, src->num_inputs, src->attrs,
                          src->num_attrs);
  free(ins);
  GR_TRY(st);
  GR_TRY(remember(g, c, src, o.node));
  *out = (gr_output){o.node, out->index};
  return GR_OK;
}

/* The batch node b read as slice k of n, from data copied for this replica. */
static gr_status slice_batch(gr_graph *g, const gr_node *b, int n, int k, const char *step_dev,
                             clones *c, gr_node **out) {
  if (gr_node_attr_int(b, "num_slices", 1) != 1)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "replicate: shard_input: batch '%s' is already a slice of a batch",
                               b->name);
  if (b->num_attrs > ATTRS_MAX)
    return gr_graph_set_errorf(g, GR_ERR_INTERNAL, "replicate: batch '%s' has %d attrs", b->name,
                               b->num_attrs);
  gr_output *ins = gr_alloc_array((size_t)b->num_inputs + 1, sizeof *ins);
  if (!ins) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  ins[0] = b->inputs[0]; /* the step: a scalar, from wherever it is, */
  gr_status st = GR_OK;  /* or global_step's copy on a mirrored replica's device */
  if (step_dev && gr_ops_is_global_step(ins[0].node)) {
    ins[0] = gr_ops_step_copy(g, ins[0].node, k, step_dev);
    if (!ins[0].node) st = gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
  }
  for (int j = 1; j < b->num_inputs && st == GR_OK; j++) {
    ins[j].index = b->inputs[j].index;
    st = clone_data(g, b, b->inputs[j].node, 0, c, &ins[j]);
  }
  gr_attr attrs[ATTRS_MAX];
  for (int i = 0; i < b->num_attrs; i++) {
    attrs[i] = b->attrs[i];
    if (!strcmp(attrs[i].name, "num_slices")) attrs[i] = gr_attr_int("num_slices", n);
    if (!strcmp(attrs[i].name, "slice_index")) attrs[i] = gr_attr_int("slice_index", k);
  }
  *out =
      st == GR_OK
          ? gr_graph_add_node(g, b->op, base_name(b), ins, b->num_inputs, attrs, b->num_attrs).node
          : NULL;
  free(ins);
  GR_TRY(st);
  return *out ? GR_OK : gr_graph_error(g)->code;
}

gr_status gr_ops_replica_inputs(gr_graph *g, const gr_output *inputs, int num_inputs, int n, int k,
                                const char *step_dev, gr_output *slices) {
  for (int i = 0; i < num_inputs; i++)
    if (inputs[i].node->op != &gr_op_batch && inputs[i].node->op != &gr_op_image_folder)
      return gr_graph_set_errorf(
          g, GR_ERR_INVALID_ARGUMENT,
          "replicate: shard_input: input '%s' is not made by batch(...) or image_folder(...) "
          "(a %s): with "
          "shard_input each replica reads its own rows with a copy of the batch",
          inputs[i].node->name, inputs[i].node->op->name);
  GR_TRY(gr_graph_push_name_scope(g, "input"));
  clones c = {.n = 0};
  gr_status st = GR_OK;
  for (int i = 0; i < num_inputs && st == GR_OK; i++) {
    gr_node *b = cloned(&c, inputs[i].node);
    if (!b && (st = slice_batch(g, inputs[i].node, n, k, step_dev, &c, &b)) == GR_OK)
      st = remember(g, &c, inputs[i].node, b);
    if (st == GR_OK) slices[i] = (gr_output){b, inputs[i].index};
  }
  gr_graph_pop_name_scope(g);
  return st;
}
