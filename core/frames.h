/* Loop frames: which while-loop frame each node of a node set runs in. The
 * one analysis the partitioner, the control-flow executor's plan and
 * autodiff share, each over its own numbering of nodes (positions, executor
 * indices, node ids) and with its own rule for which input decides.
 *
 * Frame 0 is the top level. An enter opens the child frame named by its
 * attr frame_name inside the frame its input lives in; the nodes after it
 * are in that frame; an exit's output lives in its frame's parent.
 *
 *   static const gr_node *node_of(const void *ctx, int i) { ... }
 *   static void inputs_of(const void *ctx, int i, gr_frames_emit_fn emit, void *acc) {
 *     for (each data input j of node i) emit(acc, producer index, false);
 *     for (each control input j of node i) emit(acc, producer index, true);
 *   }
 *   gr_frames fr;
 *   if (gr_frames_init(&fr, GR_FRAMES_FIRST_INPUT, n) != GR_OK ||
 *       gr_frames_assign_nodes(&fr, order, node_of, inputs_of, ctx) != GR_OK) {
 *     gr_frames_free(&fr);
 *     return out_of_memory();
 *   }
 *   int f = fr.of_node[i];                   // node i runs in frame f
 *   printf("%s\n", fr.frames[f].name);       // "" for the top level
 *   int g = gr_frames_output_frame(&fr, i);  // its outputs live in frame g
 *   gr_frames_free(&fr);
 *
 * Callers keep what else they know of a frame (parallel_iterations, the
 * nodes of its control loop, ...) in their own arrays indexed by frame. */
#ifndef GR_FRAMES_H
#define GR_FRAMES_H

#include <stdbool.h>

#include "core/gr_op.h"
#include "core/gr_status.h"

/* Which input of a node decides its frame. */
typedef enum gr_frames_rule {
  /* Running a graph (the partitioner, the executor's plan): the frame of its
   * first data input, else of its first control input, else the top level.
   * An enter whose frame came from a data input opens its child frame there.
   * A frame is one per (parent, name), and parents come before children. */
  GR_FRAMES_FIRST_INPUT,
  /* Building one (autodiff): the deepest frame among all its inputs, the
   * first of them on a tie, since while a loop body is being built its
   * nodes may still read outside values directly; an enter nests in its
   * first input's frame. A frame is one per name: a loop nested in a body
   * being built has enters from the body and from outside it, so the frame
   * is moved inside the deepest frame one of its enters comes from. */
  GR_FRAMES_DEEPEST_INPUT,
} gr_frames_rule;

typedef struct gr_frame {
  int parent;       /* -1 for frame 0, the top level */
  const char *name; /* borrowed from the enter's attrs; "" for the top level */
  int enter;        /* the node that opened it (the first enter into it), -1 for the top level */
} gr_frame;

typedef struct gr_frames {
  gr_frames_rule rule;
  gr_frame *frames; /* frames[0] is the top level */
  int num_frames, cap_frames;
  int num_nodes;
  int *of_node;           /* per node: its frame, -1 until assigned */
  unsigned char *kind;    /* per node: its gr_cf_kind */
  unsigned char *entered; /* per node: 1 for an enter that went into a child frame */
} gr_frames;

/* A predecessor that is not a node of the set but a value at the top level
 * (a feed), for gr_frames_emit_fn. */
enum { GR_FRAMES_TOP_LEVEL = -1 };

/* Reports one input of a node: src is the producer's index (its output's
 * frame counts; a producer not assigned yet counts as the top level) or
 * GR_FRAMES_TOP_LEVEL; control tells a control input from a data input. */
typedef void (*gr_frames_emit_fn)(void *acc, int src, bool control);
/* The graph node at index i (borrowed), or NULL for a pseudo-node without
 * one (an executor's feed), which is no control-flow node. */
typedef const gr_node *(*gr_frames_node_fn)(const void *ctx, int i);
/* Calls emit(acc, src, control) for each input of node i that counts, its
 * data inputs in order, then its control inputs; inputs left out (a loop's
 * back edge, a producer outside the set) do not place the node. */
typedef void (*gr_frames_inputs_fn)(const void *ctx, int i, gr_frames_emit_fn emit, void *acc);

/* Sets fr up for nodes 0..num_nodes-1 with frame 0 only and no node
 * assigned. GR_ERR_RESOURCE_EXHAUSTED when out of memory. Either way the
 * caller frees fr with gr_frames_free. */
gr_status gr_frames_init(gr_frames *fr, gr_frames_rule rule, int num_nodes);
/* Frees what fr holds (the names stay the enters'); fr may be half made. */
void gr_frames_free(gr_frames *fr);
/* The child frame `name` of frame parent (name borrowed: it must outlive
 * fr), made if there is none yet with `enter` as the node that opened it;
 * with GR_FRAMES_DEEPEST_INPUT found by name alone and moved inside parent
 * when parent is deeper than its parent and not inside it. -1 when out of
 * memory. */
int gr_frames_get_child(gr_frames *fr, int parent, const char *name, int enter);
/* Assigns every node a frame by fr's rule, walking order (num_nodes
 * indices, every node after the inputs inputs() reports for it). node()
 * and inputs() get ctx. GR_ERR_RESOURCE_EXHAUSTED when out of memory. */
gr_status gr_frames_assign_nodes(gr_frames *fr, const int *order, gr_frames_node_fn node,
                                 gr_frames_inputs_fn inputs, const void *ctx);
/* gr_frames_assign_nodes over the nodes of graph g by id, every data and
 * control input counting: fr made for all of them (gr_graph_num_nodes),
 * order as gr_graph_topo_order gives it. */
gr_status gr_frames_assign_graph(gr_frames *fr, const gr_graph *g, const int *order);
/* How many frames frame f is nested in (0 for the top level). */
int gr_frames_get_depth(const gr_frames *fr, int f);
/* The frame the outputs of node i live in: its own, its parent for an exit
 * (an exit at the top level: the top level); the top level for a node not
 * assigned yet. */
int gr_frames_output_frame(const gr_frames *fr, int i);
/* The frame node i takes its inputs in: its own, its parent for an enter
 * inside a loop. */
int gr_frames_input_frame(const gr_frames *fr, int i);
/* A value stays in its frame: may node dst use an output of node src? Only
 * if it lives where dst takes its inputs (it moves only through an enter
 * into a child frame, or an exit out to the parent). */
bool gr_frames_check_edge(const gr_frames *fr, int src, int dst);

#endif
