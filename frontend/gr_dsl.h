/* The graph DSL: `.gr` files that lower to builder calls (docs/dsl.md).
 *
 *   gr_graph *g = gr_graph_new();
 *   gr_dsl_program *p = NULL;
 *   gr_error err;
 *   if (gr_dsl_load_string("basics.gr", "x = 2; y = x + 300", g, NULL, &p, &err) != GR_OK) {
 *     fprintf(stderr, "%s\n", err.msg); // "basics.gr:1:9: error: ...\n  <line>\n  ^"
 *   } else {
 *     gr_output y;
 *     gr_dsl_lookup(p, "y", &y);       // the node bound to `y`
 *   }
 *   gr_dsl_program_free(p);
 *   gr_graph_free(g);
 *
 * Errors: every message starts with "file:line:col: error: ", then the
 * offending source line and a caret under the column; an unclosed block also
 * names the line where it opened. Build errors of the graph (shape, dtype,
 * attrs) are reported at the position of the call that added the node.
 *
 * Ownership: the program owns its bindings and sources (gr_dsl_program_free,
 * NULL is fine); the graph stays the caller's and must outlive the program's
 * gr_output values. On failure *program may still be set (holding what was
 * bound before the error) and must be freed. */
#ifndef GR_DSL_H
#define GR_DSL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/gr_core.h"

typedef struct gr_dsl_program gr_dsl_program;

struct gr_cluster; /* placer/gr_placer.h */

typedef struct gr_dsl_options {
  bool no_imports; /* `import` is an error (fuzzing, untrusted text) */
  int max_errors;  /* reserved; the first error stops loading */
  /* the cluster the program will run on, for num_tasks("worker") (borrowed,
   * read while loading); NULL: the one GRAPHRUN_CLUSTER names (which
   * graphrun launch sets), else none */
  const struct gr_cluster *cluster;
  /* this client's task when each worker runs its own client (between-graph
   * training: graphrun run --job worker --task I), for task_index() and
   * replica_index(); job NULL and 0 when not given */
  const char *job;
  int task_index;
  /* record every `name = expr` binding of a tensor (gr_dsl_layer_at), for
   * graphrun check --layers; off: nothing is recorded, nothing costs */
  bool record_layers;
} gr_dsl_options;

/* Reads, parses and lowers a file into g. opts may be NULL. A serialized
 * graph (`graphrun export`, distributed/gr_distributed.h) loads too: its
 * graph, named outputs, fetches and targets, as the .gr file gave them. */
gr_status gr_dsl_load_file(const char *path, gr_graph *g, const gr_dsl_options *opts,
                           gr_dsl_program **program, gr_error *err);
/* Same for text in memory (len bytes, need not be NUL-terminated); name is
 * used in messages; imports resolve relative to the current directory. */
gr_status gr_dsl_load_buffer(const char *name, const char *text, size_t len, gr_graph *g,
                             const gr_dsl_options *opts, gr_dsl_program **program, gr_error *err);
/* NUL-terminated text. */
gr_status gr_dsl_load_string(const char *name, const char *text, gr_graph *g,
                             const gr_dsl_options *opts, gr_dsl_program **program, gr_error *err);
void gr_dsl_program_free(gr_dsl_program *p);

/* The tensor bound to a top-level name (`h1 = ...`); false when unbound or
 * not a tensor. Falls back to a graph node name ("layer1/w", "split:1"). */
bool gr_dsl_lookup(const gr_dsl_program *p, const char *name, gr_output *out);
/* The graph the program was lowered into. */
gr_graph *gr_dsl_graph(const gr_dsl_program *p);
/* Prints the table of the DSL's built-in functions (not ops) as Markdown,
 * as docs/dsl.md shows it (the suite checks that it does). */
void gr_dsl_print_builtins(FILE *out);
/* The edit distance (insertions, deletions, substitutions) between a and b,
 * for "did you mean" hints: of op names here, of flags in the graphrun
 * tool; 99 when either is longer than 40 characters. */
int gr_dsl_edit_distance(const char *a, const char *b);

/* Default fetches (`fetch a, b`) and targets (`target train`) declared in the
 * file, in order; when no `fetch` is declared the last top-level binding is
 * the default fetch. Names stay valid until the program is freed. */
int gr_dsl_num_fetches(const gr_dsl_program *p);
const char *gr_dsl_fetch_name(const gr_dsl_program *p, int i);
int gr_dsl_num_targets(const gr_dsl_program *p);
const char *gr_dsl_target_name(const gr_dsl_program *p, int i);

/* A binding recorded with gr_dsl_options.record_layers: one per name of a
 * `name = expr` statement whose value is a tensor, in the order lowered;
 * statements inside defs once per call. Strings live in the program. */
typedef struct gr_dsl_layer {
  const char *path; /* the defs called on the way and the name: "logits", "cnn/h1" */
  const char *file; /* the statement, as its source is named */
  int line;
  const char *call_file; /* inside a def: the top-level call that led here; else the */
  int call_line;         /* statement itself */
  gr_output value;
  /* elements of the variables the statement made, not counting those of
   * the bindings nested in it (a def's), nor optimizer slots, mirrored
   * copies or the global step (gr_variable_roles); on the first name of a
   * statement */
  int64_t params;
  /* the layer built-in that made value ("dense", "conv2d", ...: Keras'
   * layer type), NULL when an op or a def did */
  const char *layer;
} gr_dsl_layer;
int gr_dsl_num_layers(const gr_dsl_program *p);
const gr_dsl_layer *gr_dsl_layer_at(const gr_dsl_program *p, int i);

/* Serializes the program's graph with its top-level tensor names, fetches
 * and targets into *data (malloc'd, the caller frees), *size bytes: what
 * `graphrun export` writes and gr_dsl_load_file reads back. */
gr_status gr_dsl_export(const gr_dsl_program *p, void **data, size_t *size, gr_error *err);

#endif
