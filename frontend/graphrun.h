/* graphrun: a dataflow-graph engine in C. The one header a program includes.
 *
 *   #include <graphrun.h>
 *   #include <stdio.h>
 *
 *   int main(void) {
 *     gr_graph *g = gr_graph_new();
 *     gr_output x = gr_const_f32(g, 2);
 *     gr_output y = gr_add(g, gr_add(g, x, gr_const_f32(g, 300)),
 *                          gr_sub(g, x, gr_const_f32(g, 66)));
 *     gr_error err;
 *     gr_session *s = gr_session_new(g, NULL, &err);
 *     gr_tensor out;
 *     if (!s || gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err) != GR_OK) {
 *       fprintf(stderr, "error: %s\n", err.msg);
 *       return 1;
 *     }
 *     printf("%g\n", gr_tensor_get_f64(&out, 0));   // 238
 *     gr_tensor_release(&out);
 *     gr_session_free(s);
 *     gr_graph_free(g);
 *   }
 *
 * Build with `cc prog.c $(pkg-config --cflags --libs graphrun)`.
 * Modules: core/gr_core.h (graphs, tensors, sessions), ops/gr_ops.h (the
 * builder functions of every op, gradients, optimizers, control flow),
 * placer/gr_placer.h (cluster model and placement), passes/gr_passes.h
 * (graph rewrites before a run), checkpoints/gr_checkpoints.h (SQLite
 * checkpoints), distributed/gr_distributed.h (servers, the master that
 * drives a cluster) and frontend/gr_dsl.h (.gr files). */
#ifndef GRAPHRUN_H
#define GRAPHRUN_H

#include "checkpoints/gr_checkpoints.h"
#include "core/gr_core.h"
#include "distributed/gr_distributed.h"
#include "frontend/gr_dsl.h"
#include "ops/gr_ops.h"
#include "passes/gr_passes.h"
#include "placer/gr_placer.h"

/* Registers every op of the engine: core's own (transfers, const, identity,
 * control flow), the op list of ops/ with their gradients, and the
 * checkpoint ops. Idempotent and thread-safe. Builders, the DSL and
 * sessions register what they use by themselves; call it before looking ops
 * up by name (gr_op_registry_find) or listing them (gr_op_registry_at). */
void gr_init(void);

#endif
