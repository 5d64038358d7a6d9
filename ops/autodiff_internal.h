/* Internals of the autodiff transform shared by autodiff.c (the walk) and
 * while_grad.c (the reverse loop of a while loop). Internal to ops/. */
#ifndef GR_AUTODIFF_INTERNAL_H
#define GR_AUTODIFF_INTERNAL_H

#include "core/core_engine.h"
#include "ops/gr_ops.h"

/* Loop frames of the graph's nodes 0..total-1 (order: topological),
 * by the deepest-input rule (core/frames.h). The caller frees f with
 * gr_frames_free, also on an error (GR_ERR_RESOURCE_EXHAUSTED). */
gr_status ad_frames_compute(const gr_graph *g, const int *order, int total, gr_frames *f);

/* One while loop as gr_while_loop builds it. */
typedef struct ad_loop {
  int frame;
  int n; /* loop variables */
  gr_node **enter, **merge, **swtch, **exit, **body, **next;
  int m; /* loop invariants (constant enters) */
  gr_node **invariant;
} ad_loop;

/* Finds the loop structure of frame `frame`; an error names what is missing. */
gr_status ad_loop_find(gr_graph *g, const gr_frames *f, int frame, int total, ad_loop *loop);
void ad_loop_free(ad_loop *loop);

/* The stack_push nodes among ids [0, total), to find a pop's push
 * (autodiff_stacks.c). */
typedef struct ad_pushes {
  gr_node **v; /* sorted by stack attr */
  int n;
} ad_pushes;

gr_status ad_pushes_collect(const gr_graph *g, int total, ad_pushes *p);
void ad_pushes_free(ad_pushes *p);
/* The push of pop's stack, or NULL (pop is not a stack_pop, or no push). */
const gr_node *ad_pushes_match(const ad_pushes *p, const gr_node *pop);
/* An error when a stack_pop in frame base (or nested in it) is on a path
 * from the xs to the ys (from_x and to_y per node id; to_y does not go
 * back through an op without a gradient, such as stop_gradient): its value
 * is a loop's forward value read back by that loop's gradient, and a
 * gradient of it would be lost (second order through a loop). */
gr_status ad_refuse_loop_gradients(gr_graph *g, const gr_frames *f, const ad_pushes *p,
                                   const char *from_x, const char *to_y, int base);

/* A gradient built inside the reverse loop of a while loop (while_grad.c):
 * forward values are read through remap (stack pops in the reverse loop's
 * iteration), and scope names the forward loop iteration that this reverse
 * iteration undoes (a u8 loop_instance value), which keys the stacks of the
 * loops nested in that iteration. */
typedef struct ad_reverse {
  gr_output (*remap)(void *arg, gr_output forward);
  void *arg;
  gr_output scope;
} ad_reverse;

/* Builds the reverse loop: from the gradients of the exits (null: none) to
 * the gradients of the loop variables' initial values (d_init[i]) and of
 * the invariants' outside values (d_inv[j]; only where want_inv[j]). outer:
 * the reverse loop of an enclosing loop that this one is built in, or NULL
 * (the reverse loop runs where the forward one ran). */
gr_status ad_while_gradient(gr_graph *g, const gr_frames *f, const ad_loop *loop,
                            const gr_output *d_exits, const bool *want_inv, gr_output *d_init,
                            gr_output *d_inv, const ad_reverse *outer);

/* gr_gradients for the nodes of the frame named `base` ("": the top level;
 * NULL: the frame of the ys), inside the reverse loop rv (NULL: none).
 * Loops directly inside base are differentiated as units
 * (ad_while_gradient). */
gr_status ad_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs,
                       const char *base, const ad_reverse *rv);

#endif
