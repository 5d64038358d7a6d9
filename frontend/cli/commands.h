/* The subcommands of the `graphrun` tool: one file cmd_NAME.c each in
 * frontend/cli/, each a `int gr_cmd_NAME(int argc, char **argv)` returning
 * the process exit code (0 ok, 1 runtime failure, 2 usage or input error),
 * listed once in GR_COMMAND_LIST. argv[0] is the subcommand's name. */
#ifndef GR_CLI_COMMANDS_H
#define GR_CLI_COMMANDS_H

#define GR_EXIT_OK      0
#define GR_EXIT_FAILURE 1
#define GR_EXIT_USAGE   2

/* X(name, one-line summary) */
#define GR_COMMAND_LIST(X)                                                                         \
  X(run, "build a .gr graph file and run it: feeds, fetches, training steps")                      \
  X(check, "parse, build and shape-check a .gr file; print node and op counts")                    \
  X(export, "write a .gr file's graph serialized (.grb), which every command reads like .gr")      \
  X(predict, "classify PNG and JPEG files with an exported inference graph: top classes")          \
  X(dot, "print the graph of a .gr file in Graphviz DOT (clusters by scope, colours by device)")   \
  X(ckpt, "inspect checkpoint files: ls, show, diff, verify, export as .npy")                      \
  X(place, "place a .gr graph on a cluster file's devices; --explain says why")                    \
  X(calibrate, "measure this machine and write a cluster file for the placer")                     \
  X(simulate, "predict step time and scaling efficiency of data parallelism on many workers")      \
  X(ops, "list the registered ops with their inputs and attrs")                                    \
  X(server, "serve one task of a cluster (a worker or parameter server process)")                  \
  X(launch, "start a local cluster of server processes and run a graph or command on it")          \
  X(reset, "clear the shared variable containers of a cluster's server tasks")                     \
  X(board, "serve a web page with a log directory's runs: curves, graph, placement, timeline")

#define GR_X_CMD_DECL(name, summary) int gr_cmd_##name(int argc, char **argv);
GR_COMMAND_LIST(GR_X_CMD_DECL)
#undef GR_X_CMD_DECL

#endif
