/* Option parsing of the graphrun subcommands, on glibc's getopt_long: both
 * "--flag value" and "--flag=value" work; a flag must be written in full (no
 * prefixes). An unknown flag (with a "did you mean --X?" hint when one is
 * close), a missing value, a value given to a flag that takes none and a
 * bad number are reported as "graphrun CMD: ..." naming the flag, and the
 * command exits 2 (GR_EXIT_USAGE). Internal to frontend/cli/.
 *
 *   static const struct option flags[] = {
 *       {"steps", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
 *       {"help", no_argument, NULL, 'h'}, {0}};
 *   cli_opts o;
 *   cli_opts_start(&o, "run", argc, argv, flags, "h", CLI_OPTS_ANY_ORDER);
 *   for (int c; (c = cli_opts_next(&o)) != CLI_OPTS_END;)
 *     switch (c) {
 *       case 's': if (!cli_opt_long(&o, 1, 1000, &steps)) return GR_EXIT_USAGE; break;
 *       case 'j': json = true; break;
 *       case 'h': usage(stdout); return GR_EXIT_OK;
 *       case CLI_OPTS_ARG: file = o.arg; break;      // a positional argument
 *       default: return GR_EXIT_USAGE;               // CLI_OPTS_ERROR: reported
 *     }
 *
 * The parser uses getopt's global state: one parse at a time. */
#ifndef GR_CLI_OPTIONS_H
#define GR_CLI_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

enum {
  CLI_OPTS_END = -1,   /* no more arguments */
  CLI_OPTS_ARG = -2,   /* a positional argument, in o->arg */
  CLI_OPTS_ERROR = -3, /* reported on stderr: exit GR_EXIT_USAGE */
};

typedef enum cli_opts_mode {
  CLI_OPTS_ANY_ORDER,   /* flags and positional arguments mixed, in order */
  CLI_OPTS_NUMBERS,     /* the same, and "-1" is a positional argument, not a flag */
  CLI_OPTS_STOP_AT_ARG, /* stop at the first positional argument (or "--"): o->rest */
} cli_opts_mode;

typedef struct cli_opts {
  const char *cmd; /* "run": messages start "graphrun run: " */
  int argc;
  char **argv; /* argv[0] is the subcommand's name */
  const struct option *flags;
  char shorts[32]; /* getopt's optstring: the mode's prefix, ':', the short options */
  cli_opts_mode mode;
  bool started, after_dashes;
  char flag[48]; /* the flag just returned, as "--steps" or "-o" */
  char *arg;     /* its value (NULL: none), or the positional argument (argv's) */
  int rest;      /* CLI_OPTS_STOP_AT_ARG: the index of the first argument not parsed */
} cli_opts;

/* flags: getopt_long's table, ending with a zeroed entry; each flag's val
 * is what cli_opts_next returns for it. shorts: the short options in
 * getopt's form ("h", "ho:"; each returns its letter). cmd, flags and
 * shorts are borrowed. */
void cli_opts_start(cli_opts *o, const char *cmd, int argc, char **argv, const struct option *flags,
                    const char *shorts, cli_opts_mode mode);
/* The next flag's val (o->flag, o->arg set), CLI_OPTS_ARG, CLI_OPTS_END or
 * CLI_OPTS_ERROR (already reported). */
int cli_opts_next(cli_opts *o);

/* o->arg as a number in [lo, hi]; otherwise prints "graphrun CMD: --FLAG
 * wants an integer in [lo, hi], got 'V'" and returns false. */
bool cli_opt_long(const cli_opts *o, long lo, long hi, long *out);
/* o->arg as a non-negative integer of 64 bits ("a non-negative integer"). */
bool cli_opt_u64(const cli_opts *o, uint64_t *out);
/* o->arg as seconds in [0, hi] ("seconds in [0, hi]"). */
bool cli_opt_seconds(const cli_opts *o, double hi, double *out);
/* Prints "graphrun CMD: --FLAG wants WHAT, got 'V'" (WHAT from a printf
 * format) and returns GR_EXIT_USAGE, for values that need their own words. */
int cli_opt_bad(const cli_opts *o, const char *what_fmt, ...) __attribute__((format(printf, 2, 3)));

/* The numbers of the flags, without messages: whole strings only, in
 * range. */
bool cli_parse_long(const char *s, long lo, long hi, long *out);
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_seconds(const char *s, double hi, double *out);

#endif
