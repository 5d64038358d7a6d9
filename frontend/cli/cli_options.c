/* The graphrun subcommands' option parsing on getopt_long, and the numbers
 * their flags take (cli_options.h). */
#include "cli_options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gr_dsl.h"

void cli_opts_start(cli_opts *o, const char *cmd, int argc, char **argv, const struct option *flags,
                    const char *shorts, cli_opts_mode mode) {
  *o = (cli_opts){.cmd = cmd, .argc = argc, .argv = argv, .flags = flags, .mode = mode};
  /* '-': positional arguments returned in order (as 1); '+': stop at the
   * first; ':': a missing value returns ':', not '?' */
  snprintf(o->shorts, sizeof o->shorts, "%s:%s", mode == CLI_OPTS_STOP_AT_ARG ? "+" : "-", shorts);
  optind = 0; /* glibc: start afresh */
  opterr = 0; /* the messages are ours */
}

/* The flag of the table nearest to name (at most 2 edits, and fewer edits
 * than it has letters), or NULL. */
static const char *nearest_flag(const struct option *flags, const char *name) {
  const char *best = NULL;
  int bd = 3;
  for (const struct option *f = flags; f->name; f++) {
    int d = gr_dsl_edit_distance(name, f->name);
    if (d < bd && d < (int)strlen(f->name)) bd = d, best = f->name;
  }
  return best;
}

/* elem: the argument as written ("--stpes=3", "-x"). */
static int unknown_flag(const cli_opts *o, const char *elem) {
  int len = (int)strcspn(elem, "=");
  const char *hint = NULL;
  if (len > 2 && elem[0] == '-' && elem[1] == '-') {
    char name[64];
    snprintf(name, sizeof name, "%.*s", len - 2, elem + 2);
    hint = nearest_flag(o->flags, name);
  }
  fprintf(stderr, "graphrun %s: unknown option '%.*s'%s%s%s (try --help)\n", o->cmd, len, elem,
          hint ? "; did you mean --" : "", hint ? hint : "", hint ? "?" : "");
  return CLI_OPTS_ERROR;
}

/* "-1", "-0.5": a number, not a flag. */
static bool negative_number(const char *s) {
  return s[0] == '-' && (isdigit((unsigned char)s[1]) || s[1] == '.');
}

/* What getopt_long returned for the argument elem. */
static int take(cli_opts *o, int c, int li, const char *elem) {
  int len = (int)strcspn(elem, "=");
  if (c == '?') {
    if (optopt && elem[0] == '-' && elem[1] == '-') {
      fprintf(stderr, "graphrun %s: %.*s takes no value, got '%s' (try --help)\n", o->cmd, len,
              elem, elem);
      return CLI_OPTS_ERROR;
    }
    return unknown_flag(o, elem);
  }
  if (c == ':') {
    fprintf(stderr, "graphrun %s: %.*s needs a value (try --help)\n", o->cmd, len, elem);
    return CLI_OPTS_ERROR;
  }
  if (li >= 0) { /* getopt_long takes a unique prefix: the flags here are whole */
    const char *name = o->flags[li].name;
    if (elem[0] != '-' || elem[1] != '-' || len - 2 != (int)strlen(name) ||
        strncmp(elem + 2, name, (size_t)len - 2) != 0)
      return unknown_flag(o, elem);
    snprintf(o->flag, sizeof o->flag, "--%s", name);
  } else {
    snprintf(o->flag, sizeof o->flag, "-%c", c);
  }
  o->arg = optarg;
  return c;
}

int cli_opts_next(cli_opts *o) {
  o->arg = NULL;
  o->flag[0] = '\0';
  if (o->after_dashes) { /* after "--": the rest are positional */
    if (optind >= o->argc) return CLI_OPTS_END;
    o->arg = o->argv[optind++];
    return CLI_OPTS_ARG;
  }
  int at = o->started ? optind : 1;
  if (o->started && o->mode == CLI_OPTS_NUMBERS && at < o->argc && negative_number(o->argv[at])) {
    o->arg = o->argv[optind++];
    return CLI_OPTS_ARG;
  }
  o->started = true;
  int li = -1;
  int c = getopt_long(o->argc, o->argv, o->shorts, o->flags, &li);
  if (c == -1) {
    o->rest = optind;
    if (o->mode == CLI_OPTS_STOP_AT_ARG || optind >= o->argc) return CLI_OPTS_END;
    o->after_dashes = true;
    return cli_opts_next(o);
  }
  if (c == 1) {
    o->arg = optarg;
    return CLI_OPTS_ARG;
  }
  return take(o, c, li, at < o->argc ? o->argv[at] : "");
}

/* ---- the numbers flags take ----------------------------------------------------------- */

bool cli_parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (!isdigit((unsigned char)s[0])) return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = (uint64_t)v;
  return true;
}

bool cli_parse_seconds(const char *s, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0 && v <= hi)) return false;
  *out = v;
  return true;
}

int cli_opt_bad(const cli_opts *o, const char *what_fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(what, sizeof what, what_fmt, ap);
  va_end(ap);
  fprintf(stderr, "graphrun %s: %s wants %s, got '%s'\n", o->cmd, o->flag, what,
          o->arg ? o->arg : "");
  return GR_EXIT_USAGE;
}

bool cli_opt_long(const cli_opts *o, long lo, long hi, long *out) {
  if (cli_parse_long(o->arg, lo, hi, out)) return true;
  cli_opt_bad(o, "an integer in [%ld, %ld]", lo, hi);
  return false;
}

bool cli_opt_u64(const cli_opts *o, uint64_t *out) {
  if (cli_parse_u64(o->arg, out)) return true;
  cli_opt_bad(o, "a non-negative integer");
  return false;
}

bool cli_opt_seconds(const cli_opts *o, double hi, double *out) {
  if (cli_parse_seconds(o->arg, hi, out)) return true;
  cli_opt_bad(o, "seconds in [0, %.0f]", hi);
  return false;
}
