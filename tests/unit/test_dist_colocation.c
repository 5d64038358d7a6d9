/* The colocation rule across processes: programs whose resources (a
 * variable and its initialiser and updates, a loop gradient's stacks) used
 * to be split over tasks by round-robin or cost placement, or refused
 * because a variable and its update were pinned by different scopes, run on
 * a `graphrun launch` cluster of real server processes and print exactly
 * what one process prints (--json: floats exact). Every process is bounded
 * in time and reaped. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <graphrun.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[] = "/tmp/gr_coloc_XXXXXX";

/* Runs graphrun with argv (after "graphrun"); the JSON line it printed into
 * json (empty when none); returns the exit code. */
static int run_json(char *const *args, int nargs, char *json, size_t cap) {
  char *argv[32] = {"graphrun"};
  for (int i = 0; i < nargs && i < 30; i++) argv[i + 1] = args[i];
  argv[nargs + 1] = NULL;
  gt_proc p;
  gt_proc_start(&p, argv);
  bool ended = gt_proc_wait(&p, NULL, 120);
  gt_proc_finish(&p);
  json[0] = '\0';
  for (const char *line = p.buf; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (*line == '{') {
      size_t n = strcspn(line, "\n");
      snprintf(json, cap, "%.*s", (int)n, line);
    }
  int code = ended ? gt_proc_exit_code(&p) : -1;
  if (code != 0 || !json[0]) /* the output's tail */
    fprintf(stderr, "  graphrun %s ... exit %d:\n%s\n", args[0], code,
            p.buf + (p.len > 2000 ? p.len - 2000 : 0));
  return code;
}

/* The program in file `name` (text) run in one process and then on a
 * launch cluster of ps + workers tasks under each placement mode: the same
 * JSON every time. extra: more run flags (NULL-terminated). */
static void same_everywhere(const char *name, const char *text, int ps, int workers,
                            const char *const *modes, char *const *extra) {
  gt_write_file(dir, name, text);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *args[24];
  int n = 0;
  args[n++] = "run";
  args[n++] = path;
  args[n++] = "--json";
  args[n++] = "--quiet";
  for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
  char want[4096], got[4096];
  GR_CHECK_EQ_INT(run_json(args, n, want, sizeof want), 0);
  GR_CHECK_MSG(want[0] == '{', "%s: no JSON from one process", name);
  char nps[8], nw[8];
  snprintf(nps, sizeof nps, "%d", ps);
  snprintf(nw, sizeof nw, "%d", workers);
  for (int m = 0; modes[m]; m++) {
    char *largs[32];
    int k = 0;
    largs[k++] = "launch";
    largs[k++] = "--quiet";
    largs[k++] = "--ps";
    largs[k++] = nps;
    largs[k++] = "--workers";
    largs[k++] = nw;
    largs[k++] = path;
    largs[k++] = "--json";
    largs[k++] = "--placement";
    largs[k++] = (char *)modes[m];
    for (int i = 0; extra && extra[i]; i++) largs[k++] = extra[i];
    int code = run_json(largs, k, got, sizeof got);
    GR_CHECK_MSG(code == 0 && strcmp(got, want) == 0,
                 "%s, --ps %d --workers %d --placement %s: exit %d, '%s', want '%s'", name, ps,
                 workers, modes[m], code, got, want);
  }
}

static const char *const all_modes[] = {"pins", "round-robin", "cost", NULL};

/* A variable split from its initialiser by round-robin: "variable 'a' is
 * not initialised" on another task before. */
static void test_variable_with_its_initialiser(void) {
  const char *text = "a = variable(const(3.0))\n"
                     "v = const(2.0)\n"
                     "r = while (x = v; x < 100.0) { x = x * a }\n"
                     "g = gradients(r, a)\n"
                     "fetch g\n";
  same_everywhere("var_init.gr", text, 1, 2, all_modes, NULL);
  same_everywhere("var_init.gr", text, 1, 3, all_modes, NULL);
}

/* A loop gradient's stacks: pushed on one task and popped on another's
 * empty stack before ("stack ... is empty" on two workers, and silently
 * ga = 0, gv = 1 on three). */
static void test_loop_gradient_stacks(void) {
  const char *text = "a = const(3.0)\n"
                     "v = const(2.0)\n"
                     "r = while (x = v; x < 100.0) { x = x * a }\n"
                     "ga, gv = gradients(r, [a, v])\n"
                     "fetch ga, gv\n";
  same_everywhere("stacks.gr", text, 1, 2, all_modes, NULL);
  same_everywhere("stacks.gr", text, 1, 3, all_modes, NULL);
  /* two loops side by side, a gather and a stop_gradient inside one */
  const char *two =
      "p = const([1.0, 2.0, 3.0])\n"
      "s = const(1.5)\n"
      "r1 = while (x = s; x < 40.0) { x = x * reduce_sum(gather(p, const([0, 2], i32))) }\n"
      "r2 = while (y = s; y < 30.0) { y = y * 2.0 + stop_gradient(y) * s }\n"
      "gp, gs = gradients(r1 + r2, [p, s])\n"
      "fetch gp, gs\n";
  same_everywhere("two_loops.gr", two, 1, 3, all_modes, NULL);
}

/* The parameter-server pattern with device scopes on a cluster: variables
 * under one task, loss and minimize under another. The update follows its
 * variable ("colocation conflict: node 'w/init' ... and node 'apply_sgd'"
 * with cost placement before). */
static void test_updates_follow_their_variables(void) {
  const char *text = "x = const([[1.0, 2.0], [3.0, 4.0]])\n"
                     "y = const([[1.0], [0.0]])\n"
                     "device \"/job:worker/task:1\" {\n"
                     "  w = variable(const([[0.1], [0.2]]))\n"
                     "  b = variable(const([0.05]))\n"
                     "}\n"
                     "device \"/job:worker/task:0\" {\n"
                     "  loss = reduce_mean(square(matmul(x, w) + b - y))\n"
                     "  train = minimize(loss, momentum(0.05, momentum=0.9, nesterov=true))\n"
                     "}\n"
                     "fetch loss\n"
                     "target train\n";
  /* one process needs devices that exist: the same pins as local devices */
  char *extra[] = {"--steps", "5", "--soft-placement", NULL};
  same_everywhere("ps_pattern.gr", text, 1, 2, all_modes, extra);
}

/* Momentum (Nesterov) training that the cost placer spreads over ps + 3
 * workers: four towers, each with its variable and slot. */
static void test_momentum_cost_placement(void) {
  char text[2048];
  size_t n = (size_t)snprintf(text, sizeof text, "x = random_normal([64, 128], seed=1)\n");
  for (int k = 0; k < 4; k++)
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "w%d = variable(random_normal([128, 128], seed=%d) * 0.05)\n"
                          "h%d = reduce_mean(square(tanh(matmul(x, w%d))))\n",
                          k, k + 2, k, k);
  snprintf(text + n, sizeof text - n,
           "loss = h0 + h1 + h2 + h3\n"
           "train = minimize(loss, momentum(0.1, momentum=0.9, nesterov=true))\n"
           "s0 = reduce_sum(w0 * w0)\n"
           "s3 = reduce_sum(w3 * w3)\n"
           "fetch loss, s0, s3\n"
           "target train\n");
  char *extra[] = {"--steps", "5", NULL};
  same_everywhere("momentum.gr", text, 1, 3, all_modes, extra);
}

int main(void) {
  gt_proc_isolate();
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  GR_RUN(test_variable_with_its_initialiser);
  GR_RUN(test_loop_gradient_stacks);
  GR_RUN(test_updates_follow_their_variables);
  GR_RUN(test_momentum_cost_placement);
  gt_remove_tree(dir);
  return gr_test_finish();
}
