/* Losses and metrics as Keras has them (losses.c, metrics.c): each builder
 * adds the nodes of one Keras loss or metric function and returns its
 * result; errors are the graph's sticky errors, naming the function (a null
 * output, as every builder of gr_ops.h). The argument order is Keras':
 * y_true (the labels), then y_pred (the model's output).
 *
 *   gr_output loss = gr_binary_crossentropy(g, labels, logits, true, GR_LOSS_SUM_OVER_BATCH_SIZE);
 *   gr_output acc = gr_binary_accuracy(g, labels, gr_sigmoid(g, logits), 0.5);
 *
 * Shapes (docs/training.md#losses-and-metrics): y_true and y_pred have one
 * shape [..., d] (the sparse forms: labels [...], or [..., 1]); as Keras
 * does, a y_true or y_pred of rank one less, or one more with a last dim of
 * 1, is expanded or squeezed to match ([n] against [n, 1]), and any other
 * difference is an error rather than a broadcast. The per-example loss is
 * the mean over the last axis (binary cross-entropy, mean squared error,
 * Huber) or the cross-entropy over the classes (categorical), of shape
 * [...]; a reduction then gives its mean (Keras' default,
 * "sum_over_batch_size"), its sum, or the per-example losses themselves.
 * Losses have y_pred's dtype (f32 or f64; y_true is cast to it) and are
 * built from differentiable ops, so gradients of any order exist. Metrics
 * are f32 scalars over the batch (the mean of the per-example hits); labels
 * may be any integer dtype (or bool). Nothing is owned by the caller. */
#ifndef GR_LOSSES_H
#define GR_LOSSES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_core.h"

/* Keras' losses.Reduction. */
typedef enum gr_loss_reduction {
  GR_LOSS_SUM_OVER_BATCH_SIZE = 0, /* the mean of the per-example losses (the default) */
  GR_LOSS_SUM,                     /* their sum */
  GR_LOSS_NONE,                    /* the per-example losses, shape [...] */
} gr_loss_reduction;
/* The reduction named as Keras names it ("sum_over_batch_size" or "mean",
 * "sum", "none"); false when unknown. */
bool gr_loss_reduction_parse(const char *s, gr_loss_reduction *out);

/* Keras' epsilon: the probability forms clip y_pred to [1e-7, 1 - 1e-7]. */
#define GR_LOSS_EPSILON 1e-7

/* ---- the fused primitive (losses.c) ----------------------------------------------- */

/* Elementwise max(z, 0) - z y + log(1 + e^-|z|), computed in double, for
 * logits z and labels y of one float dtype and shape: the cross-entropy of
 * sigmoid(z) against y without overflow for any |z|
 * (tf.nn.sigmoid_cross_entropy_with_logits). Gradient (sigmoid(z) - y) dy
 * for z, -z dy for y. */
gr_output gr_sigmoid_cross_entropy(gr_graph *g, gr_output logits, gr_output labels);

/* ---- losses (losses.c) -------------------------------------------------------------- */

/* -(y log p + (1 - y) log(1 - p)), mean over the last axis. from_logits:
 * y_pred holds logits z and the loss is gr_sigmoid_cross_entropy. Else
 * y_pred holds probabilities, clipped to [eps, 1 - eps] first, except that
 * a y_pred made by a sigmoid node is taken as that node's logits (as Keras
 * does on TensorFlow: the same value, without the clipping). */
gr_output gr_binary_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred, bool from_logits,
                                 gr_loss_reduction reduction);
/* -sum(y log p) over the classes (the last axis), y_true a distribution per
 * example. from_logits: softmax_cross_entropy of the logits. Else y_pred is
 * normalised to sum 1 and clipped to [eps, 1 - eps] (a y_pred made by a
 * softmax node: that node's logits, as Keras on TensorFlow). */
gr_output gr_categorical_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                      bool from_logits, gr_loss_reduction reduction);
/* The same with y_true the class indices [...] (or [..., 1]), of any
 * integer dtype; an index outside [0, classes) is an error at run time
 * naming the example. Probabilities: sparse_softmax_cross_entropy of
 * log(clip(p)), as Keras. */
gr_output gr_sparse_categorical_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                             bool from_logits, gr_loss_reduction reduction);
/* (y_true - y_pred)^2, mean over the last axis. */
gr_output gr_mean_squared_error(gr_graph *g, gr_output y_true, gr_output y_pred,
                                gr_loss_reduction reduction);
/* With e = y_pred - y_true: e^2 / 2 where |e| <= delta, else delta |e| -
 * delta^2 / 2; mean over the last axis. delta > 0 (Keras' default 1). */
gr_output gr_huber(gr_graph *g, gr_output y_true, gr_output y_pred, double delta,
                   gr_loss_reduction reduction);

/* ---- metrics (metrics.c): f32 scalars, the mean over every example ---------------- */

/* y_true == y_pred elementwise (compared exactly: in f64 when either is a
 * float, else as integers). */
gr_output gr_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred);
/* y_true == (y_pred > threshold) elementwise (Keras: 0.5), the comparison
 * cast to y_true's dtype (so a float label 0.7 never matches). */
gr_output gr_binary_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred, double threshold);
/* argmax(y_true) == argmax(y_pred) over the last axis (first on ties). */
gr_output gr_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred);
/* y_true (class indices [...] or [..., 1]) == argmax(y_pred); an index out
 * of range never matches. */
gr_output gr_sparse_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred);
/* Whether the prediction for the true class (argmax(y_true) / the index)
 * is among the k largest of its example (gr_in_top_k; Keras' k is 5). */
gr_output gr_top_k_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred, int64_t k);
gr_output gr_sparse_top_k_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                               int64_t k);
/* bool [...]: for predictions [..., classes] and targets [...] (any
 * integer dtype), whether fewer than k classes score higher than the
 * target (ties with it count for it), as tf.math.in_top_k; false when the
 * target is out of range or a score of the example is not finite. */
gr_output gr_in_top_k(gr_graph *g, gr_output predictions, gr_output targets, int64_t k);

/* AUC as Keras' AUC() computes it: num_thresholds (Keras: 200) thresholds
 * -1e-7, 1/(T-1), ..., (T-2)/(T-1), 1 + 1e-7; an example with prediction p
 * counts as positive at threshold t when p > t; the ROC curve (recall
 * against the false-positive rate) summed by trapezoids. Predictions must
 * lie in [0, 1], else the step fails naming the element (as tf.keras 2
 * asserts; Keras 3 clips them); from_logits: the sigmoid is taken first. A
 * label that is not 0 is a positive (any dtype; Keras casts to bool). The
 * examples of y_true and y_pred (the same number of elements) are
 * flattened, as Keras' multi_label=false. */
/* f64 [4, T]: the counts of true positives, false positives, true
 * negatives and false negatives at each threshold. */
gr_output gr_auc_confusion(gr_graph *g, gr_output y_true, gr_output y_pred, int64_t num_thresholds);
/* The AUC (f32 scalar) of counts [4, T] (gr_auc_confusion's, or their sum
 * over batches); 0 without positives or negatives (Keras' divide_no_nan). */
gr_output gr_auc_from_confusion(gr_graph *g, gr_output confusion);
/* The AUC of this batch alone. */
gr_output gr_auc(gr_graph *g, gr_output y_true, gr_output y_pred, int64_t num_thresholds,
                 bool from_logits);
/* A streaming AUC over many batches, in a variable `name` (scoped) of f64
 * counts [4, T] starting at zeros: out[0] the AUC of the counts so far
 * (read when it runs), out[1] adds this batch's counts (assign_add, where
 * the variable lives) and gives the AUC including them (tf.metrics.auc's
 * update_op), out[2] sets the counts back to zeros. Run out[1] once per
 * batch; fetching out[0] in the same step may read the counts before or
 * after the update. Returns the graph's error status. */
gr_status gr_streaming_auc(gr_graph *g, const char *name, gr_output y_true, gr_output y_pred,
                           int64_t num_thresholds, bool from_logits, gr_output out[3]);

#endif
