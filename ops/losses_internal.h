/* What the loss and metric builders share (losses.c, metrics.c). Internal
 * to ops/. */
#ifndef GR_LOSSES_INTERNAL_H
#define GR_LOSSES_INTERNAL_H

#include "core/gr_core.h"

/* Keras' squeeze_or_expand_to_same_rank on *a and *b: when their ranks
 * differ by one and the larger ends in a dim of 1, the smaller gains that
 * dim if it has rank 1, else the larger loses it. */
void gr_ops_keras_same_rank(gr_graph *g, gr_output *a, gr_output *b);
/* Class indices for the sparse losses and metrics of fn: labels [..., 1]
 * of y_pred's rank lose the last dim; integers kept (u8 and bool widened
 * to i32), floats refused naming fn. A null output after an error. */
gr_output gr_ops_sparse_labels(gr_graph *g, const char *fn, gr_output labels, gr_output y_pred);

#endif
