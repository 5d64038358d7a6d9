/* The step of a program, as graphrun place and graphrun calibrate predict
 * and try it. Internal to frontend/cli/.
 *
 *   cli_step st;
 *   if (cli_step_of("place", program, &st) != GR_EXIT_OK) return GR_EXIT_USAGE;
 *   o.fetches = st.fetch, o.num_fetches = st.nf, o.targets = st.target, o.num_targets = st.nt;
 *
 * Ownership: a cli_step's outputs point into the program's graph (valid
 * while it lives). */
#ifndef GR_CLI_PLACE_H
#define GR_CLI_PLACE_H

#include <graphrun.h>

#include "cli_util.h"

/* The step a run of the program executes by default: its `target`s and
 * its `fetch`es (a fetch without outputs runs as a target), as graphrun
 * run takes them (cli_default_names). */
typedef struct cli_step {
  gr_output fetch[CLI_MAX_NAMES], target[CLI_MAX_NAMES];
  int nf, nt;
} cli_step;
/* GR_EXIT_OK, or GR_EXIT_USAGE (printed) for a name that does not resolve. */
int cli_step_of(const char *cmd, const gr_dsl_program *p, cli_step *st);
/* The step in placer options. */
void cli_step_options(const cli_step *st, gr_placer_options *o);

#endif
