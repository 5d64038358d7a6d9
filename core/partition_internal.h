/* The partitioner's working state, shared by its main pass (partition.c)
 * and the control loops of loops that span devices (partition_loops.c).
 * Internal to core. */
#ifndef GR_PARTITION_INTERNAL_H
#define GR_PARTITION_INTERNAL_H

#include "core/frames.h"
#include "core/map.h"
#include "core/partition.h"

/* What the partitioner knows of a loop frame besides its place in the tree
 * (pctx.fr; parents come before children). */
typedef struct frame_info {
  int loop_cond;       /* position of the frame's loop_cond node, -1 if none */
  int parallel;        /* parallel_iterations of its enters */
  int num_devs;        /* devices the frame spans (its nested frames included) */
  gr_node **ctl_merge; /* per device: merge of the frame's control loop there, or NULL */
  gr_node **ctl_pivot; /* per device: identity of its switch's true side (made on demand) */
} frame_info;

typedef struct pctx {
  gr_node *const *nodes;
  int n;
  const gr_output *feeds;
  int nf;
  const gr_partition_options *o;
  gr_error *err;
  int *pos_of; /* node id -> position in nodes, -1 when not in the set */
  int max_id;
  int *order;         /* topological, loop back edges ignored */
  gr_frames fr;       /* the frame of each position (gr_frames_output_frame: of its outputs) */
  frame_info *frames; /* per frame of fr */
  int *dev;           /* per position: partition index */
  const char **devs;  /* partition index -> device name (borrowed from the nodes) */
  int num_devs;
  unsigned char *span; /* [frame * num_devs + device]: the frame has nodes there */
  gr_node **copy;      /* per position: the copy in its partition */
  /* per position: a top-level no_op nothing in the set reads (a step's
   * target such as minimize's group): it waits only for the control inputs
   * of its own device, since a step ends when every partition has (no
   * control transfers from other devices at the end of a step) */
  unsigned char *sink;
  gr_map recvs;    /* (src position, output + 1 or 0 for control, part) -> recv node */
  gr_map dups;     /* (src position, part) -> copied constant or enter */
  gr_map standins; /* (feed index, part) -> feed stand-in */
  gr_map recv_src; /* top-level _recv node -> its source's position + 1 */
  gr_map groups;   /* hash of (part, source part, positions) -> ctl_group chain (partition.c) */
  bool has_cf;     /* control flow: receives may carry dead values */
  gr_partitions *ps;
} pctx;

gr_status gr_part_oom(pctx *c);
gr_status gr_part_graph_error(pctx *c, gr_graph *g);
/* Position of n in the node set, -1 if not in it. */
int gr_part_pos(const pctx *c, const gr_node *n);
/* Is input j of n the back edge of a loop (merge <- next_iteration)? */
bool gr_part_back_edge(const gr_node *n, int j);
/* The _recv on partition d of output `index` (-1: the control edge) of the
 * node at position s, with its _send; NULL when out of memory. */
gr_node *gr_part_recv_of(pctx *c, int s, int index, int d);

/* Loops that span devices (partition_loops.c). Before copying: moves each
 * loop's exits to their input's device, next_iterations to their merge's and
 * enters to a device that uses them, and works out the devices every frame
 * spans. */
gr_status gr_part_settle_loops(pctx *c);
/* Before copying: the head (enter, merge) of a control loop on every device
 * of a frame that spans several. */
gr_status gr_part_add_loop_heads(pctx *c);
/* If the node at position s is the pivot of its loop's body (an identity of
 * the true side of a switch on the loop predicate: live exactly while the
 * loop goes on), the same pivot from the control loop on partition d, so a
 * body node there without inputs needs no transfer per iteration to hang
 * off it. Else NULL (also when out of memory: c->err tells). */
gr_node *gr_part_loop_pivot(pctx *c, int s, int d, gr_status *st);
/* After copying: each control loop's switch (on the loop predicate, received
 * from the device of the loop's loop_cond) and next_iteration. */
gr_status gr_part_add_loop_tails(pctx *c);

/* After copying: every collective member's copy gets its group's devices
 * (partition_collective.c). */
gr_status gr_part_collectives(pctx *c);

/* Recv scheduling (partition_sched.c), after everything else: a control
 * input for each top-level _recv from the node that finishes last before it
 * must start. */
gr_status gr_part_schedule_recvs(pctx *c);

#endif
