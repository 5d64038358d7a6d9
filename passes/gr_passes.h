/* passes/: the face header. Graph passes that make a new, smaller graph
 * for one request before placement (docs/passes.md): pruning to what the
 * fetches and targets need, common-subexpression elimination, constant
 * folding, fusion of chains of nodes into one; and freezing a trained
 * graph into an inference graph. They sit above ops/ (folding runs the ops' kernels) and below
 * placer/, as TensorFlow's Grappler sits beside its graph, not in its placer.
 *
 *   gr_passes_options po = gr_passes_options_default();  // all passes, 1 MiB fold cap
 *   gr_passes_stats st;
 *   gr_graph *opt = NULL;
 *   if (gr_passes_optimize_graph(g, NULL, 0, &loss, 1, &train, 1, &po, &opt, &st, &err) != GR_OK)
 *     puts(err.msg);
 *   // run `opt` with the same feeds, fetching and targeting nodes by name
 *   gr_graph_free(opt);
 *
 * Ownership: the new graph is the caller's (gr_graph_free); the input graph
 * is not changed. */
#ifndef GR_PASSES_H
#define GR_PASSES_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gr_core.h"

/* Default largest output (bytes) that constant folding replaces by a constant. */
#define GR_PASSES_FOLD_MAX_BYTES ((size_t)1 << 20)

typedef struct gr_passes_options {
  bool no_prune;         /* keep every node, not only those the fetches and targets need */
  bool no_cse;           /* no common-subexpression elimination */
  bool no_fold;          /* no constant folding */
  bool no_fuse;          /* no fusion of chains of nodes into one */
  size_t fold_max_bytes; /* a node is folded only if its output has at most this many bytes */
} gr_passes_options;

/* Every pass on, fold_max_bytes = GR_PASSES_FOLD_MAX_BYTES. Start from this
 * rather than {0}: fold_max_bytes 0 folds only empty tensors. */
gr_passes_options gr_passes_options_default(void);

/* What the passes did. nodes_out = nodes_in - nodes_pruned - nodes_merged -
 * nodes_unused_after_folding - nodes_fused. */
typedef struct gr_passes_stats {
  int nodes_in;                   /* nodes of the input graph */
  int nodes_pruned;               /* not needed by the fetches and targets */
  int nodes_merged;               /* CSE: duplicates whose consumers now use an equal node */
  int nodes_folded;               /* evaluated once by the passes (not counting constants) */
  int nodes_unused_after_folding; /* folded nodes and constants that only folded nodes used */
  int nodes_fused;                /* absorbed into the node before them (fusion) */
  int nodes_out;                  /* nodes of the new graph */
} gr_passes_stats;

/* Builds a new graph that gives the same results as g for runs with these
 * feeds, fetches and targets (endpoints of g; a target's index is ignored),
 * and stores it in *out. g is not changed.
 *
 * - Pruning keeps the nodes the fetches and targets need through data and
 *   control inputs, stopping at fed endpoints, plus what a run needs besides:
 *   the variables that kept nodes use with their initialisers, and colocation
 *   targets. A fed node that nothing else needs becomes a placeholder of the
 *   same name, dtype and shape. With no fetches and no targets, or with
 *   no_prune, every node is kept.
 * - CSE replaces a node by an earlier one with the same op, inputs (after
 *   CSE), attrs, control inputs, devices and colocation. Never for stateful,
 *   random, variable, placeholder, control-flow, async or transfer ops, nor
 *   for fed nodes; fetched and target nodes keep their names.
 * - Constant folding runs each single-output node whose inputs and control
 *   inputs are all constants (transitively; so never inside a loop or a
 *   branch) and whose op is pure (not stateful, random, control flow, async
 *   or transfer) once, with its own kernel, and replaces it by a `const` of
 *   the same name holding the bit-identical value, unless the output is over
 *   fold_max_bytes or the node is fed. A node whose kernel fails is left to
 *   fail at run time. Constants only folded nodes used are then dropped.
 *
 * - Fusion (after the others) makes one node of a chain that reads and
 *   writes one large tensor after another, computing what the chain
 *   computes, bit for bit: conv2d followed by bias_add (or add of an
 *   [out_c] vector) or batch_norm at inference, and/or relu, becomes one
 *   _fused_conv2d; batch_norm followed by relu (also behind the
 *   identity_n of its updates), batch_norm with relu; relu_grad feeding
 *   batch_norm_grad, batch_norm_grad with input relu_y; a chain of 2 to 8
 *   f32/f64 elementwise ops (add, sub, mul, div, maximum, minimum,
 *   relu_grad, neg, square, relu) of one known shape, scalars aside, one
 *   _fused_elementwise; such a chain feeding only an apply_sgd,
 *   apply_momentum or apply_adam, the update with attr grad_program. Only
 *   where the chain alone reads each value: an absorbed node is not fetched, fed,
 *   a target, a control input, or in a colocation group (a hint on it
 *   moves to the host), and runs where the host runs. The host keeps its
 *   name; the absorbed nodes are gone.
 *
 * Copies keep names, attrs, devices, colocation and source positions, and
 * the graph seed; random ops keep their streams (keyed by node name). Nodes
 * merged by CSE or dropped are gone from the new graph, so look nodes up by
 * the names of fetches, targets and feeds. o NULL: defaults; stats may be
 * NULL. Errors (a graph with a build error, endpoints of another graph) name
 * the node. Ownership: *out is a new graph for the caller (gr_graph_free),
 * independent of g; NULL on failure. */
gr_status gr_passes_optimize_graph(const gr_graph *g, const gr_output *feeds, int num_feeds,
                                   const gr_output *fetches, int num_fetches,
                                   const gr_output *targets, int num_targets,
                                   const gr_passes_options *o, gr_graph **out,
                                   gr_passes_stats *stats, gr_error *err);

/* ---- freezing: an inference graph ------------------------------------------------ */

/* An input of an inference graph: the endpoint `at` of g (a placeholder,
 * or the images of an image_folder node) becomes a new node of op `op`
 * with attrs (its name is at's node's), whose output 0 every kept consumer
 * of `at` reads. */
typedef struct gr_freeze_input {
  gr_output at;
  const char *op; /* "placeholder", "image_input", ... */
  const gr_attr *attrs;
  int num_attrs;
} gr_freeze_input;

/* Called once with the names of the variables the outputs read (sorted,
 * each once; they point into g): fills values[0..n) with one new
 * reference each (the caller's checkpoint), or returns an error (then
 * every value it set is released by the caller of freeze). */
typedef gr_status (*gr_freeze_values_fn)(void *arg, const char *const *names, int n,
                                         gr_tensor *values, gr_error *err);

typedef struct gr_freeze_stats {
  int nodes_in;  /* of g */
  int nodes_out; /* of the frozen graph */
  int variables; /* frozen into constants */
} gr_freeze_stats;

/* Builds the inference graph of outputs: the nodes of g they need, walking
 * back from them and stopping at the inputs, copied into a new graph *out
 * (names, attrs and source positions kept; devices and colocation
 * dropped: it runs anywhere) with
 * - each read of a variable (`variable`, `read_value`) replaced by a
 *   `const` of its name holding the value `values` gives (nothing behind
 *   a read is kept: its initialiser, the updates it waits for);
 * - each input replaced by its new node;
 * - each dropout built with training=false (it passes its input through)
 *   replaced by an identity.
 * What is left must be a pure function of the inputs: a kept node that is
 * stateful (an update of a variable, a batch norm's moving statistics
 * being updated, dropout and augmentation in training mode, a random op,
 * a data reader such as image_folder or read_idx, a queue) or a
 * placeholder other than an input is an error naming it, its source
 * position and what to do (build the outputs with training=false), and so
 * is a kept node that reads another output of an input's node (an
 * image_folder's labels). g is not changed. stats may be NULL.
 * Ownership: *out is the caller's (gr_graph_free); NULL on failure. */
gr_status gr_passes_freeze_graph(const gr_graph *g, const gr_freeze_input *inputs, int num_inputs,
                                 const gr_output *outputs, int num_outputs,
                                 gr_freeze_values_fn values, void *arg, gr_graph **out,
                                 gr_freeze_stats *stats, gr_error *err);

#endif
