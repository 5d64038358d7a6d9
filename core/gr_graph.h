/* Graphs: nodes with unique hierarchical names, data inputs as endpoints
 * (node, output index), control inputs, typed attrs, a requested device and,
 * after placement, an assigned device. Shape inference runs as each node is
 * added, so a shape error is reported at the call (or DSL line) that caused it.
 *
 *   gr_graph *g = gr_graph_new();
 *   gr_graph_push_name_scope(g, "layer1");
 *   gr_output x = gr_graph_add_node(g, gr_op_registry_find("placeholder"), "x", NULL, 0,
 *                                   (gr_attr[]){gr_attr_dtype("dtype", GR_F32)}, 1);
 *   gr_graph_pop_name_scope(g);                 // x is named "layer1/x"
 *   if (gr_graph_error(g)) puts(gr_graph_error(g)->msg);
 *   gr_graph_free(g);
 *
 * Errors are sticky: a failing add records the first error in the graph and
 * returns a null output (node == NULL); adds that receive a null input return
 * a null output without a new error. Check gr_graph_error once after building.
 * Nodes are never removed or changed once added (renaming aside), so pointers
 * to them stay valid until gr_graph_free. */
#ifndef GR_GRAPH_H
#define GR_GRAPH_H

#include <stdbool.h>

#include "core/gr_attr.h"
#include "core/gr_device.h"
#include "core/gr_op.h"
#include "core/gr_status.h"

typedef struct gr_output {
  gr_node *node; /* NULL: the null output of a failed build step */
  int index;
} gr_output;

/* Read-only for users; the graph owns every pointer inside. The arrays of
 * one node may be shared with other nodes (equal single-output shapes are
 * stored once), so they are never written after the node is added. */
struct gr_node {
  int id; /* index in the graph, in order of addition (a topological order) */
  int num_inputs;
  int num_control_inputs;
  int num_outputs;
  int num_attrs;
  const char *name;
  const gr_op_def *op;
  gr_output *inputs;
  gr_node **control_inputs;
  gr_dtype *out_dtypes;
  gr_shape *out_shapes;
  gr_attr *attrs;
  const char *requested_device; /* "" when none; merged from device scopes */
  const char *assigned_device;  /* NULL until placed */
  const char *colocate_with;    /* node name or NULL */
  bool colocate_hint;           /* colocate_with is a preference, not a group (a gradient with
                                   its forward op: a pin wins; core/gr_colocation.h) */
  const char *source_loc;       /* "file:line:col" when built from DSL, else NULL */
  gr_graph *graph;
};

gr_graph *gr_graph_new(void); /* NULL only when out of memory */
void gr_graph_free(gr_graph *g);

/* The first error of a build step, or NULL. */
const gr_error *gr_graph_error(const gr_graph *g);
/* Records err as the graph's error if it has none yet; returns err->code. */
gr_status gr_graph_set_error(gr_graph *g, const gr_error *err);
void gr_graph_clear_error(gr_graph *g);
/* Records a printf-style error (prefixed with the current source position,
 * if any) unless the graph has one already; returns code. */
gr_status gr_graph_set_errorf(gr_graph *g, gr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Adds a node. name: NULL for the op's name; the current name scope is
 * prepended and a suffix _1, _2, ... added when the name is taken. Copies
 * attrs (taking a reference on tensor attrs) and fills defaults. Control
 * dependencies of the current scope are added. Returns output 0 (or, for an
 * op without outputs, {node, -1}). */
gr_output gr_graph_add_node(gr_graph *g, const gr_op_def *op, const char *name,
                            const gr_output *inputs, int num_inputs, const gr_attr *attrs,
                            int num_attrs);
/* Adds an exact copy of src (from any graph) under src's own name, ignoring
 * this graph's scopes: op, attrs, requested and assigned device, colocation
 * and source position, with inputs[0..src->num_inputs) and the control inputs
 * ctrl from this graph. Shapes are inferred again. Sticky errors as above
 * (GR_ERR_ALREADY_EXISTS when the name is taken). Used by graph transforms
 * that build a new graph from an old one (partitioning, passes). */
gr_output gr_graph_copy_node(gr_graph *g, const gr_node *src, const gr_output *inputs,
                             gr_node *const *ctrl, int num_ctrl);
/* Predecessor j of n: its data inputs' nodes first, then its control inputs
 * (j < num_inputs + num_control_inputs). */
static inline gr_node *gr_node_predecessor(const gr_node *n, int j) {
  return j < n->num_inputs ? n->inputs[j].node : n->control_inputs[j - n->num_inputs];
}
/* Output i of the node behind o. */
static inline gr_output gr_output_at(gr_output o, int i) {
  return (gr_output){o.node, i};
}

/* Renames a node to scope/name exactly; GR_ERR_ALREADY_EXISTS if taken. Sticky. */
gr_output gr_graph_rename(gr_graph *g, gr_output o, const char *name);
/* Replaces input i of n (same dtype, compatible shape). Used for the back
 * edge of a loop (merge <- next_iteration) and to route values captured by a
 * loop or branch through enter/switch. Only before a session uses the node. */
gr_status gr_graph_set_input(gr_graph *g, gr_node *n, int i, gr_output value);
/* Adds control inputs to an existing node (before any session uses the graph). */
gr_status gr_graph_add_control_input(gr_graph *g, gr_node *n, gr_node *dep);
/* The same without the cycle check (which walks n's ancestors), for graph
 * transforms that know dep cannot depend on n (e.g. n is new). */
gr_status gr_graph_add_control_input_unchecked(gr_graph *g, gr_node *n, gr_node *dep);
/* Makes dep n's control input j instead of the one there (a transform that
 * knows dep cannot depend on n; before any session uses the graph). */
void gr_graph_replace_control_input(gr_graph *g, gr_node *n, int j, gr_node *dep);
/* Removes dep from n's control inputs (before any session uses the graph). */
void gr_graph_remove_control_input(gr_node *n, const gr_node *dep);
/* Sets n's bool, int or float attr a->name (one its op declares) to a->value,
 * of the attr's type. For graph transforms that change how a node already
 * built behaves (gr_replicate turns off batch_norm's update_moving). Only
 * before a session uses the node; shapes are not inferred again. Sticky. */
gr_status gr_graph_set_attr(gr_graph *g, gr_node *n, const gr_attr *a);
/* Sets the colocation constraint of n (the name of another node): n joins
 * other's colocation group (core/gr_colocation.h). */
gr_status gr_graph_set_colocation(gr_graph *g, gr_node *n, const char *other);
/* A colocation hint instead: n runs where other runs unless a pin of its own
 * (or a placement mode) says otherwise; it joins no group. For the gradient
 * nodes autodiff builds for a forward op. */
gr_status gr_graph_set_colocation_hint(gr_graph *g, gr_node *n, const char *other);
/* Source position for nodes added from now on ("file:line:col", NULL to clear).
 * Shape errors are prefixed with it. */
void gr_graph_set_source_loc(gr_graph *g, const char *loc);

gr_node *gr_graph_find_node(const gr_graph *g, const char *name);
/* The device spec that decides n: for an op whose attr "var" names a
 * variable node (reads, assign, optimizer updates, initialisers) the variable's,
 * whatever n's own, since it uses the variable where it lives (a task's
 * container in a cluster; TensorFlow colocates them the same way); else its
 * own, else (none) that of the node it is colocated with (a gradient with
 * its forward op), followed up to 16 hops. Graph-owned; "" when none. */
const char *gr_graph_resolve_device(const gr_graph *g, const gr_node *n);
/* Fills order[0..n) with node ids, every node after its inputs and control
 * inputs; the back edge of a loop (merge <- next_iteration) is not an
 * ordering constraint. Ids are a topological order only for graphs without
 * rerouted inputs (gr_graph_set_input). Returns n, or -1 if out of memory. */
int gr_graph_topo_order(const gr_graph *g, int *order);
/* A topological order of nodes 0..n-1 whose edges the caller lists, for
 * node sets other than a whole graph (a partition, an executor's nodes,
 * autodiff's groups). edges(ctx, emit, acc) calls emit(acc, src, dst) for
 * every edge that orders src before dst; it is called twice and must list
 * the same edges in the same order. Kahn's algorithm: first the nodes
 * without predecessors in index order (leaving out those with skip[i] set;
 * skip may be NULL), then, as each node is taken, its successors that became
 * free, in the order their edges were listed. Fills order[0..) and returns
 * the count placed (fewer than the nodes not skipped: a cycle), or -1 when
 * out of memory. */
typedef void (*gr_topo_emit_fn)(void *acc, int src, int dst);
typedef void (*gr_topo_edges_fn)(const void *ctx, gr_topo_emit_fn emit, void *acc);
int gr_topo_sort(int n, gr_topo_edges_fn edges, const void *ctx, const unsigned char *skip,
                 int *order);
/* What a request needs (gr_graph_mark_needed): the one pruning walk, which
 * the session (the nodes a step runs) and the graph passes (the nodes a
 * smaller graph keeps) share with different options. Marks, in increasing
 * order: */
enum {
  GR_PRUNE_UNUSED = 0,
  GR_PRUNE_FED = 1,    /* only its fed output is used: a placeholder may stand in */
  GR_PRUNE_NEEDED = 2, /* needed; its fed inputs come from the feeds */
  GR_PRUNE_FULL = 3,   /* needed by a variable initialiser, which runs without feeds */
};
typedef struct gr_prune_request {
  const gr_output *feeds, *fetches, *targets; /* endpoints; a target's index is ignored */
  int num_feeds, num_fetches, num_targets;
  bool all_roots; /* every node (through rep) is a root instead of the fetches and targets */
  /* A control input on a node with a fed output is satisfied by the feed and
   * not walked (the session); else it is needed like any input. */
  bool feeds_cut_control;
  /* The producer of a fed endpoint (a fed fetch or input) is marked
   * GR_PRUNE_FED when it has one output and is not a placeholder, else
   * GR_PRUNE_NEEDED (it must stay whole), instead of being left unmarked. */
  bool keep_fed_producers;
  /* A GR_OP_VARIABLE node keeps the variables it names
   * (gr_attr_names_variable; GR_PRUNE_NEEDED) and their initialisers with
   * what they need (GR_PRUNE_FULL: feeds are not used, as the session runs
   * initialisers without them). */
  bool keep_variables;
  bool keep_colocated;            /* a kept node keeps its colocation target (NEEDED) */
  const int *rep;                 /* NULL, or per node id the node standing for it (CSE) */
  const unsigned char *no_inputs; /* NULL, or per node id: its inputs are not walked (folded) */
} gr_prune_request;
/* Fills mark[0..n) (n nodes of g) with GR_PRUNE_* for request r, walking back
 * from the roots (the unfed fetches and the targets; with keep_fed_producers
 * also the fed fetches) through data and control inputs, and stopping at fed
 * endpoints in a GR_PRUNE_NEEDED walk. parent may be NULL, or room for n:
 * for each marked node the node whose walk first marked it, -1 for a root;
 * entries of unmarked nodes are left as they were. The walk is depth first
 * on a stack: a node taken pushes its colocation target, its inputs in
 * order, its control inputs, then its variables. Returns GR_OK, or
 * GR_ERR_RESOURCE_EXHAUSTED "out of memory" (mark is then unspecified). */
gr_status gr_graph_mark_needed(const gr_graph *g, const gr_prune_request *r, unsigned char *mark,
                               int *parent, gr_error *err);
/* The same order, stable: for a graph whose ids are already such an order
 * it is the identity, so an order taken twice is the same (serialization
 * writes nodes in it). Returns n; -1 if out of memory; -2 when the inputs
 * form a cycle other than a loop's back edge. */
int gr_graph_topo_order_stable(const gr_graph *g, int *order);
int gr_graph_num_nodes(const gr_graph *g);
gr_node *gr_graph_node(const gr_graph *g, int id);

/* Scopes. Pushes return GR_OK or an error (also recorded in the graph).
 * A failed push pushes nothing; code that builds on and checks the graph's
 * error once (as the builders do) may still pop it: once the graph holds
 * an error, a pop with nothing left to pop does nothing, so pops may
 * outnumber the pushes that succeeded (scopes do not matter any more then:
 * the graph is not runnable).
 * A name scope nests inside the current one; one starting with '/' is
 * absolute ("/" is the top level). */
gr_status gr_graph_push_name_scope(gr_graph *g, const char *scope);
void gr_graph_pop_name_scope(gr_graph *g);
/* Device scopes nest: inner fields override outer ones. */
gr_status gr_graph_push_device_scope(gr_graph *g, const char *spec);
/* A device scope that hides the enclosing scopes and device functions:
 * nodes inside get spec ("" : none), merged with the scopes pushed inside
 * it (as TensorFlow's colocate_with clears the device stack: an optimizer
 * slot is made with its variable's device, whatever scope minimize runs in). */
gr_status gr_graph_push_device_scope_reset(gr_graph *g, const char *spec);
/* A device function (TensorFlow's, e.g. replica_device_setter): for each
 * node added while it is pushed, called with the node (op, name and attrs
 * set; not yet in the graph) and the spec the scopes outside it give ("" :
 * none); returns the spec to use instead (a string that lives until the
 * call returns; `spec` itself keeps it), or NULL after recording an error
 * in g. Scopes pushed inside it merge over its result, so an explicit
 * device scope inside wins, as in TensorFlow. arg is borrowed: it must live
 * until the function is popped. */
typedef const char *(*gr_device_fn)(gr_graph *g, const gr_node *n, const char *spec, void *arg);
gr_status gr_graph_push_device_fn(gr_graph *g, gr_device_fn fn, void *arg);
/* Pops the innermost device scope or function. */
void gr_graph_pop_device_scope(gr_graph *g);
/* Every node added inside gets these control inputs. */
gr_status gr_graph_push_control_deps(gr_graph *g, const gr_output *deps, int n);
/* Nodes added inside get none of the enclosing control dependencies (until a
 * new push). Pop with gr_graph_pop_control_deps. */
gr_status gr_graph_push_no_control_deps(gr_graph *g);
void gr_graph_pop_control_deps(gr_graph *g);
/* The current name scope ("" at top level). */
const char *gr_graph_name_scope(const gr_graph *g);

/* Memory for graph-lifetime data (freed by gr_graph_free). */
void *gr_graph_alloc(gr_graph *g, size_t bytes);
char *gr_graph_strdup(gr_graph *g, const char *s);

/* Seed for random ops (default 0); the session combines it with node and step. */
void gr_graph_set_seed(gr_graph *g, uint64_t seed);
uint64_t gr_graph_seed(const gr_graph *g);

#endif
