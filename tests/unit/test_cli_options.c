/* The graphrun subcommands' flags (frontend/cli/cli_options.c): for run,
 * check, place, ckpt and launch, --flag=value does what --flag value does
 * (same exit code, same output), and an unknown flag, a flag written in part,
 * a missing value, a value given to a flag that takes none and a bad number
 * exit 2 with a message naming the flag (with a "did you mean" hint when a
 * flag is close). Each case runs the graphrun binary of this build in a
 * temporary directory. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

#define PLACE_ARGS   "place " GR_SOURCE_DIR "/examples/placement.gr"
#define CLUSTER_JSON GR_SOURCE_DIR "/examples/cluster.json"

static char dir[64], out[32768], out2[32768];

/* `graphrun A` and `graphrun B` both exit with want and print the same. */
static void check_same(const char *a, const char *b, int want) {
  int ra = gt_cli_run(dir, a, out, sizeof out);
  int rb = gt_cli_run(dir, b, out2, sizeof out2);
  GR_CHECK_MSG(ra == want && rb == want, "'%s' exits %d, '%s' exits %d, want %d:\n%s\n---\n%s", a,
               ra, b, rb, want, out, out2);
  GR_CHECK_MSG(strcmp(out, out2) == 0, "'%s' printed:\n%s\n'%s' printed:\n%s", a, out, b, out2);
}

/* `graphrun ARGS` exits 2 and its message holds want and, unless NULL, also. */
static void check_usage_error(const char *args, const char *want, const char *also) {
  int rc = gt_cli_run(dir, args, out, sizeof out);
  GR_CHECK_MSG(rc == 2, "'%s' exits %d, want 2:\n%s", args, rc, out);
  GR_CHECK_STR_CONTAINS(out, want);
  if (also) GR_CHECK_STR_CONTAINS(out, also);
}

static void setup_files(void) {
  gt_write_file(dir, "t.gr", "x = placeholder(f32, [])\ny = x * 2.0\n");
  char npy[128];
  snprintf(npy, sizeof npy, "%s/npy", dir);
  GR_CHECK(mkdir(npy, 0755) == 0);
  /* a checkpoint with two steps, for ckpt */
  int rc = gt_cli_run(dir,
                      "run " GR_SOURCE_DIR "/examples/linear_regression.gr --steps 2 --ckpt c.db "
                      "--save-every 1 --quiet",
                      out, sizeof out);
  GR_CHECK_MSG(rc == 0, "making a checkpoint: exit %d:\n%s", rc, out);
}

static void test_equals_form(void) {
  check_same(
      "run t.gr --feed=x=1.5 --steps=3 --fetch=y --seed=4 --threads=1 --timeout=30 --json --quiet",
      "run t.gr --feed x=1.5 --steps 3 --fetch y --seed 4 --threads 1 --timeout 30 --json --quiet",
      0);
  GR_CHECK_STR_CONTAINS(out, "{\"y\": {\"dtype\": \"f32\", \"shape\": [], \"data\": 3}}");
  check_same("check t.gr --stats --fetch=y --fold-max-bytes=64",
             "check t.gr --stats --fetch y --fold-max-bytes 64", 0);
  GR_CHECK_STR_CONTAINS(out, "nodes out");
  check_same(PLACE_ARGS " --cluster=" CLUSTER_JSON " --min-samples=2",
             PLACE_ARGS " --cluster " CLUSTER_JSON " --min-samples 2", 0);
  GR_CHECK_STR_CONTAINS(out, "predicted step time: ");
  check_same("ckpt ls c.db --step=-1", "ckpt ls c.db --step -1", 0);
  GR_CHECK_STR_CONTAINS(out, "checksum");
  check_same("ckpt export c.db --step=2 --out=npy w", "ckpt export c.db --step 2 --out npy w", 0);
  char path[128];
  snprintf(path, sizeof path, "%s/npy/w.npy", dir);
  GR_CHECK_MSG(access(path, F_OK) == 0, "no %s", path);
  /* launch: its own flags before the command; the command's exit code comes back */
  check_same("launch --ps=0 --workers=1 --restarts=0 --quiet -- sh -c 'exit 3'",
             "launch --ps 0 --workers 1 --restarts 0 --quiet -- sh -c 'exit 3'", 3);
  /* launch's flags end at the command (no "--" needed): the flags after it are the command's */
  check_same("launch --ps=0 --workers=1 --quiet sh -c 'echo \"got $0\"' --steps=2",
             "launch --ps 0 --workers 1 --quiet sh -c 'echo \"got $0\"' --steps=2", 0);
  GR_CHECK_STR_CONTAINS(out, "got --steps=2");
}

static void test_unknown_flag(void) {
  check_usage_error("run t.gr --stpes 3", "graphrun run: unknown option '--stpes'",
                    "did you mean --steps?");
  check_usage_error("check t.gr --stat", "graphrun check: unknown option '--stat'",
                    "did you mean --stats?");
  check_usage_error(PLACE_ARGS " --clustr=" CLUSTER_JSON,
                    "graphrun place: unknown option '--clustr'", "did you mean --cluster?");
  check_usage_error("ckpt ls c.db --stepp 1", "graphrun ckpt: unknown option '--stepp'",
                    "did you mean --step?");
  check_usage_error("launch --worker 2 t.gr", "graphrun launch: unknown option '--worker'",
                    "did you mean --workers?");
  /* no flag is near: no hint */
  check_usage_error("run t.gr --zzzzzzzz", "unknown option '--zzzzzzzz' (try --help)", NULL);
  GR_CHECK_MSG(!strstr(out, "did you mean"), "a hint for --zzzzzzzz:\n%s", out);
  /* a flag written in part is not taken for the whole one */
  check_usage_error("run t.gr --feed x=1 --step 3", "unknown option '--step'",
                    "did you mean --steps?");
  check_usage_error("launch --work=2 t.gr", "unknown option '--work'", NULL);
}

static void test_missing_value(void) {
  check_usage_error("run t.gr --feed x=1 --steps", "graphrun run: --steps needs a value", NULL);
  check_usage_error("check t.gr --stats --fetch", "graphrun check: --fetch needs a value", NULL);
  check_usage_error(PLACE_ARGS " --cluster", "graphrun place: --cluster needs a value", NULL);
  check_usage_error("ckpt ls c.db --step", "graphrun ckpt: --step needs a value", NULL);
  check_usage_error("launch --workers", "graphrun launch: --workers needs a value", NULL);
  /* a flag that takes no value given one */
  check_usage_error("run t.gr --json=yes", "graphrun run: --json takes no value", "'--json=yes'");
}

static void test_bad_number(void) {
  check_usage_error("run t.gr --steps=abc", "graphrun run: --steps wants a positive integer",
                    "got 'abc'");
  check_usage_error("run t.gr --devices 65", "--devices wants an integer in [1, 64], got '65'",
                    NULL);
  check_usage_error("run t.gr --timeout=-1", "--timeout wants seconds in [0, ", "got '-1'");
  check_usage_error("check t.gr --stats --fold-max-bytes=-1",
                    "graphrun check: --fold-max-bytes wants a byte count, got '-1'", NULL);
  check_usage_error(PLACE_ARGS " --cluster " CLUSTER_JSON " --min-samples 0",
                    "graphrun place: --min-samples wants an integer in [1, 1000000], got '0'",
                    NULL);
  check_usage_error("ckpt ls c.db --step=x", "graphrun ckpt: --step wants a step number",
                    "got 'x'");
  check_usage_error("launch --workers=99 t.gr",
                    "graphrun launch: --workers wants an integer in [1, 32], got '99'", NULL);
}

/* --help (and -h) print the command's usage on stdout and exit 0; after
 * the file too, for the commands that take one. */
static void test_help(void) {
  const struct {
    const char *cmd;
    bool file;
  } cmds[] = {{"run", true},     {"check", true},   {"export", true},     {"dot", true},
              {"place", true},   {"ckpt", false},   {"calibrate", false}, {"ops", false},
              {"server", false}, {"launch", false}, {"board", false},     {"predict", true}};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char args[64], want[64];
    snprintf(want, sizeof want, "usage: graphrun %s ", cmds[i].cmd);
    for (int form = 0; form < (cmds[i].file ? 3 : 2); form++) {
      snprintf(args, sizeof args,
               form == 0   ? "%s --help"
               : form == 1 ? "%s -h"
                           : "%s t.gr --help",
               cmds[i].cmd);
      int rc = gt_cli_run(dir, args, out, sizeof out);
      GR_CHECK_MSG(rc == 0, "'%s' exits %d:\n%s", args, rc, out);
      GR_CHECK_MSG(strncmp(out, want, strlen(want)) == 0, "'%s' prints:\n%s", args, out);
    }
  }
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_cli_options_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  setup_files();
  GR_RUN(test_help);
  GR_RUN(test_equals_form);
  GR_RUN(test_unknown_flag);
  GR_RUN(test_missing_value);
  GR_RUN(test_bad_number);
  gt_remove_tree(dir);
  return gr_test_finish();
}
