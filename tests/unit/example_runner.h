/* Running an example .gr file's fetches and targets the same way on several
 * graphs (the file's own, an optimised copy, a decoded copy) to compare them
 * bit for bit. Nodes are found by name in each graph.
 *
 *   gt_example ex;
 *   if (gt_example_load(path, &ex, &err)) {
 *     gr_tensor want[2][GT_EX_MAX];
 *     gr_status st = gt_example_run(&ex, ex.g, 2, want, &err);
 *     ...
 *     gt_example_free(&ex);
 *   }
 */
#ifndef GT_EXAMPLE_RUNNER_H
#define GT_EXAMPLE_RUNNER_H

#include <graphrun.h>
#include <stdbool.h>

#include "test_util.h"

#define GT_EX_MAX 16

typedef struct gt_example {
  gr_graph *g;
  gr_dsl_program *p;
  gr_output fetch[GT_EX_MAX], target[GT_EX_MAX]; /* the file's (outputs without values left out) */
  int nx, nt;
  gr_feed feeds[GT_EX_MAX]; /* every placeholder, a deterministic random value */
  gr_tensor values[GT_EX_MAX];
  int nf;
} gt_example;

/* Loads path (a .gr file or a serialized graph); false with err set when it
 * does not load. */
bool gt_example_load(const char *path, gt_example *ex, gr_error *err);
void gt_example_free(gt_example *ex);

/* Runs `steps` steps of g (ex->g or a copy with the same node names) on one
 * device and one thread, feeding ex's feeds that g has, fetching ex's
 * fetches and running its targets; results[step][k] (each a reference). */
gr_status gt_example_run(const gt_example *ex, gr_graph *g, int steps,
                         gr_tensor results[][GT_EX_MAX], gr_error *err);

/* Runs 2 steps of ex on ex->g and on g (NULL: a graph that could not be
 * made, which fails) and compares them: both fail with the same code and
 * message, or both give the same bits for every fetch at every step. false,
 * with the difference printed (naming file, and g as `what`), when they
 * differ. *st: the status of the run on ex->g. */
bool gt_example_agree(const gt_example *ex, gr_graph *g, const char *file, const char *what,
                      gr_status *st);

/* Calls fn(ex, file name) for every examples/NAME.gr of the source tree,
 * loaded (and freed afterwards); returns how many, or -1 when the folder
 * cannot be read or an example does not load (its error printed). */
int gt_for_each_example(void (*fn)(const gt_example *ex, const char *file));

/* A deterministic value for placeholder n, drawn from r (unknown dims: 5;
 * integers: 0..9; floats in [-1, 1]). */
gr_tensor gt_placeholder_value(const gr_node *n, gt_rng *r);

/* The endpoint of g with o's node name and index. */
gr_output gt_same_in(const gr_graph *g, gr_output o);
/* Same dtype, shape and bytes. */
bool gt_same_bits(const gr_tensor *a, const gr_tensor *b);

#endif
