/* Graph pass: pruning. Marks what a request (fetches and targets) needs with
 * the session's walk (gr_graph_mark_needed), keeping besides what a run
 * needs beyond its inputs: the producers of fed endpoints (a placeholder
 * stands in for a single-output one), the variables named by kept variable
 * ops with their initialisers (which the session runs without feeds), and
 * colocation targets. Unlike a step, a control input on a fed node is kept. */
#include "passes_internal.h"

gr_status gr_passes_mark(gr_passes_ctx *c) {
  gr_prune_request r = {.feeds = c->feeds,
                        .fetches = c->fetches,
                        .targets = c->targets,
                        .num_feeds = c->num_feeds,
                        .num_fetches = c->num_fetches,
                        .num_targets = c->num_targets,
                        .all_roots = c->keep_all || (c->num_fetches == 0 && c->num_targets == 0),
                        .keep_fed_producers = true,
                        .keep_variables = true,
                        .keep_colocated = true,
                        .rep = c->rep,
                        .no_inputs = c->folded};
  return gr_graph_mark_needed(c->g, &r, c->mark, NULL, c->err);
}
