/* The seam between a session and the graph passes: a hook that gives a
 * step a rewritten graph to run (the fusion pass; gr_init sets it). Part of
 * core's engine face (core/core_engine.h), not of the installed API. */
#ifndef GR_SESSION_REWRITE_H
#define GR_SESSION_REWRITE_H

#include "core/gr_session.h"

/* Given the session's graph and a step's endpoints, a new graph for the
 * step to run in its place (*out, which the session owns and frees), or
 * *out NULL to run the graph as it is. The new graph has nodes of the same
 * names for every endpoint, and the step's results must be the same bits.
 * Called once per prepared signature, on the step's thread, unless the
 * session's option no_fusion is set. */
typedef gr_status (*gr_session_rewrite_fn)(const gr_graph *g, const gr_output *feeds, int nf,
                                           const gr_output *fetches, int nx,
                                           const gr_output *targets, int nt, gr_graph **out,
                                           gr_error *err);
/* Sets the hook of every session of the process (NULL: none); set once,
 * before sessions run (gr_init). */
void gr_session_set_rewrite_hook(gr_session_rewrite_fn fn);

#endif
