/* The control-flow executor's plan (executor_cf_plan.c), built once per
 * executor, and what its run path (executor_cf.c) reads of it: each node's
 * frame and local index, how each edge crosses frames, pending counts.
 * Internal to core. */
#ifndef GR_EXECUTOR_CF_INTERNAL_H
#define GR_EXECUTOR_CF_INTERNAL_H

#include "core/executor_internal.h"
#include "core/frames.h"

/* How an edge (data or control) moves a value between frames: bits, since
 * an exit may feed another loop's enter (out of one frame, into a sibling).
 * 0: the same frame and iteration. */
enum { MODE_SAME = 0, MODE_EXIT = 1, MODE_ENTER = 2, MODE_NEXT = 4 };

/* The mode of an edge from a node of kind src_kind to one of kind dst_kind
 * (a fetch: GR_CF_NONE). */
static inline unsigned char gr_cf_edge_mode(int src_kind, int dst_kind) {
  if (src_kind == GR_CF_NEXT_ITERATION) return MODE_NEXT;
  return (unsigned char)((src_kind == GR_CF_EXIT ? MODE_EXIT : 0) |
                         (dst_kind == GR_CF_ENTER ? MODE_ENTER : 0));
}

/* What the executor knows of a loop frame besides its place in the tree
 * (cf_plan.fr). */
typedef struct frame_def {
  int par_iters;
  int num_nodes, num_slots;
  int num_enters; /* edges into its enters (data and control): a frame
                     instance is complete only when all have arrived */
} frame_def;

struct cf_plan {
  gr_frames fr;      /* the frame tree and each exec node's frame (fr.of_node) */
  frame_def *frames; /* per frame of fr */
  int *node_local;   /* per exec node */
  int *slot_local;   /* per absolute input slot */
  unsigned char *edge_mode, *ctrl_mode;
  int *merge_fwd, *merge_back; /* per exec node: inputs from outside / from next_iteration */
  int *local_pending;          /* per exec node: data + control inputs */
  int **frame_pending;         /* per frame: initial pending counts by local index */
  unsigned char *constant;     /* per exec node: enter with is_constant */
};

#endif
