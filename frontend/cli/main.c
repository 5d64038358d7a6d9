/* graphrun: the command-line tool. Dispatches to one subcommand per file
 * (frontend/cli/cmd_*.c, listed in commands.h). */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const struct {
  const char *name, *summary;
  int (*fn)(int, char **);
} commands[] = {
#define GR_X_CMD_ENTRY(name, summary) {#name, summary, gr_cmd_##name},
    GR_COMMAND_LIST(GR_X_CMD_ENTRY)
#undef GR_X_CMD_ENTRY
};

static void usage(FILE *out) {
  fprintf(out, "usage: graphrun COMMAND [ARGS...]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n`graphrun COMMAND --help` describes a command. Exit codes: 0 ok, 1 runtime "
               "failure, 2 usage or input error.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return GR_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("graphrun 0.1.0\n");
    return GR_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "graphrun: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return GR_EXIT_USAGE;
}
