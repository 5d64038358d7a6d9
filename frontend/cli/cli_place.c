/* The step of a program (cli_place.h): what graphrun place predicts and
 * graphrun calibrate times. */
#include <string.h>

#include "cli_place.h"
#include "commands.h"

int cli_step_of(const char *cmd, const gr_dsl_program *p, cli_step *st) {
  const char *fetch[CLI_MAX_NAMES], *target[CLI_MAX_NAMES];
  memset(st, 0, sizeof *st);
  cli_default_names(p, fetch, &st->nf, target, &st->nt);
  if (cli_lookup_names(cmd, p, fetch, st->nf, true, st->fetch) != GR_EXIT_OK ||
      cli_lookup_names(cmd, p, target, st->nt, false, st->target) != GR_EXIT_OK)
    return GR_EXIT_USAGE;
  return GR_EXIT_OK;
}

void cli_step_options(const cli_step *st, gr_placer_options *o) {
  o->fetches = st->fetch, o->num_fetches = st->nf;
  o->targets = st->target, o->num_targets = st->nt;
}
