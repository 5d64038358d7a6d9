/* Colocation groups: which nodes of a graph must run on one device, and
 * which device request decides each group. A property of the graph,
 * computed here once and obeyed by every placement mode (the placer's cost
 * and round-robin modes, a session's pins and soft placement) and checked
 * again by the partitioner.
 *
 * Nodes that use one resource form a group: a variable (string attrs "var"
 * and "slot*": the variable, its initialiser, reads, assignments, optimizer
 * slots and updates, moving-average updates), a step stack (attr "stack":
 * a loop gradient's pushes, pops and sizes), a queue (attr "queue") or an
 * accumulator (attr "accumulator"). A node colocated with another
 * (colocate_with, not a hint) joins that node's group. A colocation hint
 * (node->colocate_hint: a gradient with its forward op) forms no group.
 *
 * The group's device request is the merge of its deciding members' pins
 * (node->requested_device). Every member decides except one that uses a
 * resource another member of the graph makes (the node named like the
 * resource: a variable's reads, initialiser, assignments and updates, a
 * queue's ops): it follows the resource whatever device scope it was
 * written in. Builders that mean "with this node, whatever the scope"
 * (optimizer slots and updates, queue ops, the DSL's colocate_with block)
 * build with a reset device scope, so a pin left on a colocated node was
 * written inside the block: two deciding pins that cannot both hold are an
 * error naming both nodes, or (soft placement) the first one wins.
 *
 *   gr_colocation c;
 *   if (gr_colocation_compute(g, false, &c, &err) != GR_OK) return err.code;
 *   int r = c.group[node->id];                  // the group's first member
 *   gr_device_spec want = gr_colocation_spec(&c, node->id);
 *   gr_colocation_free(&c);
 *
 * Ownership: gr_colocation_compute fills arrays that gr_colocation_free
 * frees; the graph is only read. Not thread-safe with graph changes. */
#ifndef GR_COLOCATION_H
#define GR_COLOCATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gr_device.h"
#include "core/gr_graph.h"

typedef struct gr_colocation {
  int num_nodes;    /* of the graph when computed */
  int *group;       /* per node id: the id of its group's first member */
  int *size;        /* per node id: members of its group (1: alone) */
  int *decider;     /* per group (first member's id): the first member whose pin decides, -1 */
  uint8_t *follows; /* per node id: it uses a resource another member makes (pin ignored) */
  uint8_t *dropped; /* per node id: soft placement dropped its contradicting pin */
  int *spec_index;  /* per group: index into specs, -1 when no member decides by a pin */
  gr_device_spec *specs;
  int num_specs;
} gr_colocation;

/* Computes the groups of every node of g and each group's request. A node
 * whose pin does not parse, or (soft false) two deciding pins of a group that
 * no device can satisfy together, are errors naming the nodes, their specs
 * and why they share a group. */
gr_status gr_colocation_compute(const gr_graph *g, bool soft, gr_colocation *c, gr_error *err);
void gr_colocation_free(gr_colocation *c);
/* The spec that decides node id: its group's merged request (the all-any
 * spec when no member is pinned). For a node alone in its group: its own
 * pin, else that of the node its colocation hint names (followed up to 16
 * hops). */
gr_device_spec gr_colocation_spec(const gr_colocation *c, const gr_graph *g, int id);
/* Why node n belongs to its group, for messages: "uses variable 'w'",
 * "uses stack 's'", "colocate_with 'x'", "" when alone. */
const char *gr_colocation_why(const gr_node *n, char *buf, size_t cap);

/* The union-find the groups are made with, over indices 0..n-1 of a parent
 * array (parent[i] == i: a root); a root is its group's smallest index, so
 * c->group is a valid parent array that code joining more groups (the
 * placer's hints and loops) can go on from. */
int gr_colocation_find(int *parent, int x);
void gr_colocation_union(int *parent, int a, int b);

/* The partitioner's check: the nodes of one group (among these) run on
 * one device. An error names two nodes, their devices and the resource they
 * share: a resource used away from where it lives is refused before a step
 * can read an empty stack or an uninitialised variable on another task. */
gr_status gr_colocation_check(gr_node *const *nodes, int n, gr_error *err);

#endif
