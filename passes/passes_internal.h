/* Inside passes/: the state the graph passes share (passes.c drives them and
 * copies the result; pass_prune.c, pass_cse.c and pass_fold.c fill it in).
 * Every array is indexed by node id of the input graph and owned by the
 * driver. */
#ifndef GR_PASSES_INTERNAL_H
#define GR_PASSES_INTERNAL_H

#include <stdint.h>

#include "ops/gr_ops.h"
#include "passes/gr_passes.h"

typedef struct gr_passes_ctx {
  const gr_graph *g;
  int n;      /* nodes of g */
  int *order; /* the n node ids, inputs first (loop back edges ignored) */
  const gr_output *feeds, *fetches, *targets;
  int num_feeds, num_fetches, num_targets;
  bool keep_all;    /* every node is a root (no pruning) */
  uint8_t *fed;     /* some output of the node is fed */
  uint8_t *protect; /* fetched, a target or a colocation target: keeps its name */
  uint8_t *mark;    /* GR_PRUNE_* from gr_passes_mark */
  int *rep;         /* CSE: the node that replaces this one (itself when none) */
  uint8_t *folded;  /* replaced by a constant */
  gr_tensor *value; /* the folded value (one reference) while a consumer may need it */
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
  int *order, *rep;
  uint8_t *fed, *protect, *mark, *folded;
  gr_tensor *value;
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
/* Copies the kept nodes (marked, and their own rep) into a new graph *out
 * in c->order: a fed node by its stand-in, a folded one by a const of its
 * name holding c->value, one marked c->identity by an identity, the others
 * with their inputs through c->rep;
 * loop back edges are patched last. Errors name the node. */
gr_status gr_passes_copy(gr_passes_ctx *c, gr_graph **out);

#endif
