/* Random graphs for property tests: a DAG over [4,4] f32 values (matmuls,
 * elementwise ops, reductions, random ops, a variable, control edges), with
 * a cond and a while loop (nested in every third case, a cond in the body in
 * every fourth) when with_cf; each op pinned to a random one of `devices`
 * (0: no pins). The structure depends on seed only, the pins on dev_seed.
 *
 *   gt_rgraph rg = gt_random_graph(seed, 0, 0, true);
 *   gr_tensor out[6];
 *   gt_random_graph_run(&rg, 1, 1, false, out); // rg.nf values, release each
 *   gr_graph_free(rg.g);
 */
#ifndef GT_RANDOM_GRAPH_H
#define GT_RANDOM_GRAPH_H

#include <graphrun.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gt_rgraph {
  gr_graph *g;
  gr_output x;
  gr_output fetches[6];
  int nf;
} gt_rgraph;

typedef struct gt_branch_arg {
  gr_output a, b;
  int dev_then, dev_else; /* -1: no pin */
} gt_branch_arg;

/* The branches of the random graphs' conds (pinned when dev_then/else >= 0). */
void gt_then_fn(gr_graph *g, void *p, gr_output *outs);
void gt_else_fn(gr_graph *g, void *p, gr_output *outs);

gt_rgraph gt_random_graph(uint64_t seed, int devices, uint64_t dev_seed, bool with_cf);
/* Runs rg on a session of `devices` local devices for two steps (feeding x
 * the same random value); writes the fetched values of the second into out
 * (rg->nf of them, each holding a reference). */
void gt_random_graph_run(gt_rgraph *rg, int devices, int threads, bool schedule_recvs,
                         gr_tensor *out);

/* The same two steps on a session of the caller's (e.g. over a cluster). */
void gt_random_graph_run_session(gt_rgraph *rg, gr_session *s, gr_tensor *out);

#endif
