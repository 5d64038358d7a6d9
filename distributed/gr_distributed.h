/* distributed/: the face header. What tasks in separate processes share:
 * today the serialized graph (the format `graphrun export` writes and the
 * wire will carry); the cluster, wire, transport, server and master follow
 * (DESIGN.md §5).
 *
 *   void *data;
 *   size_t size;
 *   if (gr_wire_encode_graph(g, NULL, &data, &size, &err) != GR_OK) ...
 *   gr_graph *copy = gr_graph_new();
 *   gr_status st = gr_wire_decode_graph(data, size, copy, NULL, &err);
 *   free(data);
 *
 * The format (version 1) is one msgpack map, documented in docs/distributed.md:
 * every node in id order with its op, inputs, control inputs, attrs (tensor
 * attrs with their bytes), devices, colocation and source position, plus
 * the graph's seed and optional names (a DSL program's bindings, fetches and
 * targets). Decoding rebuilds through the builder calls, so a decoded graph
 * is checked exactly like a built one (op, attrs, shapes), and it is
 * bit-for-bit the same graph: encoding it again gives the same bytes.
 * Untrusted input: every count is checked against the bytes present before
 * anything is allocated, and every error names the node and the field. */
#ifndef GR_DISTRIBUTED_H
#define GR_DISTRIBUTED_H

#include <stddef.h>

#include "core/gr_core.h"

#define GR_WIRE_GRAPH_VERSION 1
#define GR_WIRE_GRAPH_FORMAT  "graphrun.graph"
/* The most nodes, and bytes of a serialized graph, a decoder accepts. */
#define GR_WIRE_GRAPH_MAX_NODES (1 << 24)
#define GR_WIRE_GRAPH_MAX_BYTES ((size_t)1 << 32)

/* Named outputs and the default fetches and targets of a program (a .gr
 * file's bindings, `fetch` and `target`), carried beside the graph. */
typedef struct gr_graph_names {
  int num_names;
  const char **names; /* num_names names ... */
  gr_output *outputs; /* ... and the outputs they name */
  int num_fetches;
  const char **fetches;
  int num_targets;
  const char **targets;
} gr_graph_names;

/* Encodes g (and names, which may be NULL) into *data (malloc'd, the caller
 * frees) of *size bytes. Fails on a graph with a build error. */
gr_status gr_wire_encode_graph(const gr_graph *g, const gr_graph_names *names, void **data,
                               size_t *size, gr_error *err);

/* Adds the nodes of a serialized graph to g, which must be empty, and sets
 * its seed. names (may be NULL) receives the names: the arrays are malloc'd
 * (gr_graph_names_free), the strings live in g. On failure g holds a partial
 * graph the caller frees, err names what is wrong ("node 12 'dense/w':
 * attr 'value': ..."). */
gr_status gr_wire_decode_graph(const void *data, size_t size, gr_graph *g, gr_graph_names *names,
                               gr_error *err);
/* Frees the arrays of a decoded gr_graph_names (not the strings); zeroes it. */
void gr_graph_names_free(gr_graph_names *names);

/* Is data the start of a serialized graph (its first bytes)? For loaders
 * that take .gr text and serialized graphs alike. */
bool gr_wire_is_graph(const void *data, size_t size);

/* Checks that data holds exactly one msgpack object, nested at most
 * max_depth deep, whose every array, map, string and binary length fits in
 * the bytes that follow (an array of n needs at least n more bytes), so an
 * unpacker allocates at most a few times size. Ext types are refused. */
gr_status gr_wire_check_msgpack(const void *data, size_t size, int max_depth, gr_error *err);

#endif
