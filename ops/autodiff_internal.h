/* Internals of the autodiff transform shared by autodiff.c (the walk) and
 * while_grad.c (the reverse loop of a while loop). Internal to ops/. */
#ifndef GR_AUTODIFF_INTERNAL_H
#define GR_AUTODIFF_INTERNAL_H

#include "ops/gr_ops.h"

/* Loop frames of a graph's nodes, from the frame_name of enter nodes. */
typedef struct ad_frames {
  int n, cap;
  const char **name; /* per frame; frame 0 is the top level ("") */
  int *parent;       /* per frame; -1 for frame 0 */
  int *of_node;      /* per node id */
} ad_frames;

gr_status ad_frames_compute(const gr_graph *g, const int *order, int total, ad_frames *f);
void ad_frames_free(ad_frames *f);

/* One while loop as gr_while_loop builds it. */
typedef struct ad_loop {
  int frame;
  int n; /* loop variables */
  gr_node **enter, **merge, **swtch, **exit, **body, **next;
  int m; /* loop invariants (constant enters) */
  gr_node **invariant;
} ad_loop;

/* Finds the loop structure of frame `frame`; an error names what is missing. */
gr_status ad_loop_find(gr_graph *g, const ad_frames *f, int frame, int total, ad_loop *loop);
void ad_loop_free(ad_loop *loop);

/* Builds the reverse loop: from the gradients of the exits (null: none) to
 * the gradients of the loop variables' initial values (d_init[i]) and of
 * the invariants' outside values (d_inv[j]; only where want_inv[j]). */
gr_status ad_while_gradient(gr_graph *g, const ad_frames *f, const ad_loop *loop,
                            const gr_output *d_exits, const bool *want_inv, gr_output *d_init,
                            gr_output *d_inv);

/* gr_gradients for the nodes of the frame named `base` ("": the top level;
 * NULL: the frame of the ys),
 * reading forward values through remap (may be NULL). Loops directly inside
 * base are differentiated as units (ad_while_gradient). */
gr_status ad_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs,
                       const char *base, gr_output (*remap)(void *, gr_output), void *remap_arg);

#endif
