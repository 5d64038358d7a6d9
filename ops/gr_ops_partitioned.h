/* Partitioned variables (TensorFlow's fixed_size_partitioner): a large
 * variable split along axis 0 into parts NAME/part_0 .. NAME/part_{K-1},
 * each an ordinary variable placed by the device scopes in force (inside
 * gr_graph_push_ps_placement: one part per ps task, round-robin or by
 * bytes), read as the concatenation of its parts: docs/strategies.md.
 * Part of the ops face (included by ops/gr_ops.h).
 *
 *   gr_graph_push_ps_placement(g, 2, GR_PS_ROUND_ROBIN);
 *   gr_output w = gr_partitioned_variable(g, "w", gr_glorot_uniform(g, GR_F32, shape, 0), 2,
 *                                         NULL);          // w/part_0 on ps 0, w/part_1 on ps 1
 *   gr_graph_pop_device_scope(g);
 *   gr_output y = gr_matmul(g, x, w, false, false);     // w: the whole [1000, 64] value
 *   gr_output train = gr_minimize(g, &opt, loss, NULL, 0); // updates each part on its ps
 *
 * Each part carries attrs partition_of (the whole's scoped name),
 * partition_offset (its first row) and full_shape (the whole's shape), by
 * which checkpoints see the whole (checkpoints/partitions.c). */
#ifndef GR_OPS_PARTITIONED_H
#define GR_OPS_PARTITIONED_H

#include "core/gr_core.h"

#define GR_PARTITIONS_MAX 4096

/* The rows [*offset, *offset + *size) of part k when `rows` rows are split
 * into num_parts parts as evenly as possible, the first rows % num_parts
 * parts one row longer (TensorFlow's fixed_size_partitioner). */
void gr_partition_rows(int64_t rows, int num_parts, int k, int64_t *offset, int64_t *size);

/* A variable `name` (scoped) split along axis 0 into num_parts variables
 * NAME/part_K, each initialised with its rows of initial_value (an f32 or
 * f64 tensor of fully known shape and rank >= 1, computed once and sliced:
 * the parts hold exactly the bits a gr_variable of it would). Returns the
 * whole value, the concatenation of the parts along axis 0 (a node named
 * NAME; gradients flow through it to each part, so gr_minimize updates
 * each part where it lives, with its slots). parts (may be NULL; room for
 * num_parts) gets the part variables. Errors (num_parts < 1, more parts
 * than rows, a non-float or scalar value) name the variable, return the
 * null output and are recorded as the graph's error. */
gr_output gr_partitioned_variable(gr_graph *g, const char *name, gr_output initial_value,
                                  int num_parts, gr_output *parts);

/* The parts of the partitioned variable whose scoped name is full_name, in
 * order, into parts[0..cap); returns their number (0: no such variable). */
int gr_partitioned_parts(const gr_graph *g, const char *full_name, gr_output *parts, int cap);

#endif
