/* passes' engine face: what the engine's upper folders (frontend) use of
 * passes/ beyond its public API (passes/gr_passes.h). Not installed. */
#ifndef GR_PASSES_ENGINE_H
#define GR_PASSES_ENGINE_H

#include "core/core_engine.h"
#include "passes/gr_passes.h"

/* The fusion pass alone (with pruning) for one step's request: what a
 * session runs (gr_init sets it as the sessions' rewrite hook,
 * core/session_rewrite.h). *out: the new graph, or NULL when nothing fuses
 * (then nothing is copied). A gr_session_rewrite_fn. */
gr_status gr_passes_fuse_for_step(const gr_graph *g, const gr_output *feeds, int num_feeds,
                                  const gr_output *fetches, int num_fetches,
                                  const gr_output *targets, int num_targets, gr_graph **out,
                                  gr_error *err);

#endif
