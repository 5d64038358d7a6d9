/* graphrun CLI: reporting a failed step. A kernel error names the node and,
 * for a graph built from a .gr file, the node's source position
 * (gr_node.source_loc, set during DSL lowering); the position goes first, as
 * a compiler's would, so editors jump to it. */
#include <regex.h>
#include <string.h>

#include "cli_util.h"

void cli_print_run_error(const char *cmd, const char *when, const gr_error *err) {
  const char *msg = err->msg;
  regex_t re;
  regmatch_t m[2];
  /* "...FILE:LINE:COL: node 'NAME' (op OP)...": the executor's form (core/executor*.c) */
  bool ok = regcomp(&re, "([^ :][^ ]*:[0-9]+:[0-9]+): node '", REG_EXTENDED) == 0;
  bool found = ok && regexec(&re, msg, 2, m, 0) == 0;
  if (ok) regfree(&re);
  if (found) {
    int s = (int)m[1].rm_so, e = (int)m[1].rm_eo;
    fprintf(stderr, "%.*s: %s%s%.*s%s\n", e - s, msg + s, when ? when : "", when ? ": " : "", s,
            msg, msg + e + 2);
  } else {
    fprintf(stderr, "graphrun %s: %s%s%s\n", cmd, when ? when : "", when ? ": " : "", msg);
  }
}
