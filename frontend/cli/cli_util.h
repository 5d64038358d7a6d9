/* Helpers shared by the DSL subcommands of the graphrun tool (run, check,
 * dot): loading a .gr file, reading feed files, printing tensors and a
 * progress display. Internal to frontend/cli/. */
#ifndef GR_CLI_UTIL_H
#define GR_CLI_UTIL_H

#include <graphrun.h>
#include <stdbool.h>
#include <stdio.h>

#include "gr_dsl.h"

/* Loads a .gr file into a new graph. On failure prints the error to stderr
 * and returns GR_EXIT_USAGE (input error); on success the caller frees both
 * (gr_dsl_program_free, then gr_graph_free). */
int cli_load_graph(const char *cmd, const char *path, uint64_t seed, gr_graph **g,
                   gr_dsl_program **p);
/* The same for a program that runs on cluster (borrowed; NULL: as above,
 * GRAPHRUN_CLUSTER's if set): what num_tasks("worker") counts. device (NULL:
 * none): a device scope around the whole program, for the worker that runs
 * it (between-graph training); job (NULL: none) and task_index: this
 * client's task, what task_index() and replica_index() give. */
int cli_load_graph_on(const char *cmd, const char *path, uint64_t seed, const gr_cluster *cluster,
                      const char *device, const char *job, int task_index, gr_graph **g,
                      gr_dsl_program **p);
/* The same with DSL options o (borrowed; e.g. record_layers), seed 0. */
int cli_load_graph_with(const char *cmd, const char *path, const gr_dsl_options *o, gr_graph **g,
                        gr_dsl_program **p);

/* Most names one --fetch, --target, ... list holds. */
#define CLI_MAX_NAMES 64

/* Splits "a,b" in place into names[n..] (pointers into s; empty names are
 * skipped); returns the new count, at most CLI_MAX_NAMES. */
int cli_split_names(char *s, const char **names, int n);
/* What the options leave unset (a count of 0) from the file: its `target`
 * names, and its `fetch` names, else its last binding. A default fetch
 * without outputs (a train op bound last, as in a file with `target train`
 * and no `fetch`) is not fetched: it runs as a target, unless the targets
 * came from the options. */
void cli_default_names(const gr_dsl_program *p, const char **fetch, int *nfetch,
                       const char **target, int *ntarget);
/* Looks up names as fetches (an output) or targets (any node). On an unknown
 * name prints "graphrun CMD: ..." and returns GR_EXIT_USAGE, else GR_EXIT_OK. */
int cli_lookup_names(const char *cmd, const gr_dsl_program *p, const char *const *names, int n,
                     bool fetch, gr_output *out);

/* *path = dir/NAME.EXT (ext with its dot), a new string (free), making
 * subdirectories for '/' in name; a name that would leave dir ("..", empty
 * components, absolute) is refused. On failure prints "graphrun CMD: ..."
 * and returns GR_EXIT_FAILURE. */
int cli_out_path(const char *cmd, const char *dir, const char *name, const char *ext, char **path);

/* Prints a failed run's error to stderr: "FILE:LINE:COL: WHEN: node ..."
 * when the error names a node built from a .gr file (the position moved to
 * the front), else "graphrun CMD: WHEN: ..."; when may be NULL. */
void cli_print_run_error(const char *cmd, const char *when, const gr_error *err);

/* Reads a tensor from an IDX file (also .gz), a .npy file or a CSV file
 * (chosen by content and extension), converted to dtype (GR_DTYPE_INVALID:
 * keep the file's). Unless a file of that name exists, a number is a scalar
 * ("5") and numbers separated by commas a vector ("1,2,3"). The result holds
 * one reference (gr_tensor_release). */
gr_status cli_read_tensor(const char *path, gr_dtype dtype, gr_tensor *out, gr_error *err);
/* Whether cli_read_tensor reads s as numbers rather than a file. */
bool cli_is_inline_value(const char *s);

/* NumPy-like text: "238.0", "[1. 2. 3.]", rows on lines, big tensors shortened
 * with "..." (at most edge items per axis at each end when over threshold). */
void cli_print_tensor(FILE *f, const gr_tensor *t);
/* {"dtype": "f32", "shape": [2], "data": [1, 2.5]} (all elements): floats
 * in the shortest form that reads back exactly (f64 to the last bit), NaN
 * and infinities as the strings "NaN", "Infinity", "-Infinity" (JSON has no
 * such numbers), integers exact, bools as true/false. */
void cli_print_tensor_json(FILE *f, const gr_tensor *t);

/* Progress of a step loop: a bar with rate, ETA and the last scalar on a
 * terminal, plain lines every ~10% (at most every 2 s) otherwise. */
typedef struct cli_progress {
  long total;
  double start, last_print;
  bool tty;
  long last_line_step;
  FILE *out;
} cli_progress;
void cli_progress_start(cli_progress *pr, long total, FILE *out);
/* has_scalar: value is the last fetched scalar (shown as name=value). */
void cli_progress_update(cli_progress *pr, long step, const char *name, bool has_scalar,
                         double value);
void cli_progress_finish(cli_progress *pr, long steps);

double cli_now(void);

/* Writes a step trace as Chrome trace JSON; 0, or -1 (errno set). */
int cli_write_trace(const char *path, const gr_step_trace *t);
/* The same into f (0, or -1 when a write failed). */
int cli_write_trace_to(FILE *f, const gr_step_trace *t);
/* The graph in Graphviz DOT (graphrun dot): clusters by name scope, a fill
 * colour per device (assigned, else requested) with a legend, data edges
 * labelled with dtype and shape (shapes), control edges dashed. An exit
 * code (GR_EXIT_FAILURE when out of memory, reported). */
int cli_write_dot(FILE *f, gr_graph *g, bool shapes);
/* What crossed each link between two devices in a traced step: the values
 * received on `to` from `from` and their bytes (names borrowed from the
 * graph). At most cap links; returns how many. */
typedef struct cli_link {
  const char *from, *to;
  long long values, bytes;
} cli_link;
int cli_trace_links(const gr_step_trace *t, cli_link *links, int cap);

#endif
