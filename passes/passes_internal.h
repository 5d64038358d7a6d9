/* Inside passes/: the state the graph passes share (passes.c drives them and
 * copies the result; pass_prune.c, pass_cse.c, pass_fold.c and pass_fuse.c
 * fill it in).
 * Every array is indexed by node id of the input graph and owned by the
 * driver. */
#ifndef GR_PASSES_INTERNAL_H
#define GR_PASSES_INTERNAL_H

#include <stdint.h>

#include "ops/gr_ops.h"
#include "passes/gr_passes.h"

/* How the fusion pass changes a node it keeps (the host): it is copied
 * as op `op` with inputs in[] (endpoints of g, resolved at the copy) and
 * attrs[], and also takes the control inputs of the nodes it absorbs. */
#define GR_FUSE_MAX_INPUTS   (GR_FUSED_ELEMENTWISE_MAX_INPUTS + 1) /* an update's lr too */
#define GR_FUSE_MAX_ATTRS    16
#define GR_FUSE_MAX_ABSORBED GR_FUSED_ELEMENTWISE_MAX_STEPS
typedef struct gr_passes_fusion {
  const gr_op_def *op;
  gr_output in[GR_FUSE_MAX_INPUTS];
  int num_inputs;
  gr_attr attrs[GR_FUSE_MAX_ATTRS];
  int num_attrs;
  const gr_node *absorbed[GR_FUSE_MAX_ABSORBED];
  int num_absorbed;
  char text[256]; /* the text of a string attr the pass made (_fused_elementwise's program) */
  const gr_node *copy_at; /* copied where this absorbed node was (it takes inputs that may come
                             after its own place), or NULL: at its own place */
} gr_passes_fusion;

typedef struct gr_passes_ctx {
  const gr_graph *g;
  int n;      /* nodes of g */
  int *order; /* the n node ids, inputs first (loop back edges ignored) */
  const gr_output *feeds, *fetches, *targets;
  int num_feeds, num_fetches, num_targets;
  bool keep_all;             /* every node is a root (no pruning) */
  uint8_t *fed;              /* some output of the node is fed */
  uint8_t *protect;          /* fetched, a target or a colocation target: keeps its name */
  uint8_t *mark;             /* GR_PRUNE_* from gr_passes_mark */
  int *rep;                  /* CSE: the node that replaces this one (itself when none) */
  uint8_t *folded;           /* replaced by a constant */
  gr_tensor *value;          /* the folded value (one reference) while a consumer may need it */
  gr_passes_fusion **fusion; /* fusion: the change of a host (NULL: none; owned) */
  int *host;                 /* fusion: the host that absorbed this node, or -1 */
  gr_output *redirect;       /* fusion: for an absorbed node, the endpoint of g with its value */
  gr_error *err;
  /* The copy (gr_passes_copy): the node standing in for a fed node n
   * (marked GR_PRUNE_FED; consumers read its output 0), made in out under
   * n's name; NULL: a placeholder of n's dtype and shape. */
  gr_output (*stand_in)(void *arg, gr_graph *out, const gr_node *n);
  void *stand_in_arg;
  bool no_devices; /* copies without requested or assigned devices, nor colocation */
  /* NULL, or per node: copied as an `identity` of its input 0 (a node that
   * passes its input through, as a dropout in inference mode) */
  const uint8_t *identity;
} gr_passes_ctx;

/* The per-node arrays of a gr_passes_ctx, n + 1 entries each (value
 * zeroed); alloc is false when out of memory (free what was made with
 * gr_passes_arrays_free, which also releases the values). */
typedef struct gr_passes_arrays {
  int *order, *rep, *host;
  uint8_t *fed, *protect, *mark, *folded;
  gr_tensor *value;
  gr_passes_fusion **fusion;
  gr_output *redirect;
} gr_passes_arrays;
bool gr_passes_arrays_alloc(gr_passes_arrays *a, int n);
void gr_passes_arrays_free(gr_passes_arrays *a, int n);
/* A context of g's n nodes on a's arrays (no feeds, fetches or targets). */
gr_passes_ctx gr_passes_ctx_of(const gr_graph *g, int n, gr_passes_arrays *a, gr_error *err);

/* Checks that eps[0..n) are endpoints of g (need_output: of an existing
 * output); errors name what ("feed", "fetch", ...) and the index. */
gr_status gr_passes_check_endpoints(const gr_graph *g, const char *what, const gr_output *eps,
                                    int n, bool need_output, gr_error *err);
/* True when endpoint o is fed. */
bool gr_passes_is_fed(const gr_passes_ctx *c, gr_output o);
/* True for ops no pass may merge or evaluate: stateful, random, variable,
 * placeholder, control flow, async, transfer, step stacks. */
bool gr_passes_op_is_opaque(const gr_op_def *op);

/* Fills c->mark from the fetches and targets (or every node when keep_all),
 * following inputs through c->rep and not walking past folded nodes. */
gr_status gr_passes_mark(gr_passes_ctx *c);
/* Sets c->rep for needed nodes; *merged gets the number of nodes replaced. */
gr_status gr_passes_cse(gr_passes_ctx *c, int *merged);
/* Sets c->folded and c->value for needed nodes; *folded gets their number. */
gr_status gr_passes_fold(gr_passes_ctx *c, size_t max_bytes, int *folded);
/* Sets c->fusion, c->host and c->redirect for needed nodes and unmarks
 * the absorbed ones; *fused gets their number. */
gr_status gr_passes_fuse(gr_passes_ctx *c, int *fused);
/* Has g a node that could host a fusion (conv2d, batch_norm,
 * batch_norm_grad, an elementwise op _fused_elementwise runs)? Else the
 * pass has nothing to do. */
bool gr_passes_may_fuse(const gr_graph *g);
/* The endpoint of the copy standing for o (an endpoint of g): through CSE's
 * replacements and the fusion's redirects. */
gr_output gr_passes_resolve(const gr_passes_ctx *c, gr_output o);
/* Copies the kept nodes (marked, and their own rep) into a new graph *out
 * in c->order: a fed node by its stand-in, a folded one by a const of its
 * name holding c->value, one marked c->identity by an identity, a fusion's
 * host as c->fusion makes it, the others with their inputs through c->rep
 * and c->redirect (gr_passes_resolve);
 * loop back edges are patched last. Errors name the node. */
gr_status gr_passes_copy(gr_passes_ctx *c, gr_graph **out);

#endif
