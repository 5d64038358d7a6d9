/* graphrun run FILE.gr: builds the graph of a .gr file and runs it for N
 * steps with feeds read from files, printing the fetched tensors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

#define MAX_ITEMS 64

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun run FILE.gr [options]\n\n"
          "Builds the graph of FILE.gr, runs it and prints the fetched tensors.\n\n"
          "  --feed NAME=PATH   feed placeholder NAME from a file: IDX (also .gz), .npy or CSV,\n"
          "                     or a number (repeatable)\n"
          "  --fetch A,B        names to fetch (default: the file's `fetch` names, else its last\n"
          "                     binding)\n"
          "  --target T,U       nodes to run for their effect each step, e.g. a train op\n"
          "                     (default: the file's `target` names)\n"
          "  --steps N          run N steps (default 1); shows progress on stderr\n"
          "  --seed S           graph-level random seed (default 0)\n"
          "  --threads T        inter-op threads (default: number of cores)\n"
          "  --eval A,B         after the last step, run once more fetching A,B only (no\n"
          "                     targets), e.g. a test accuracy\n"
          "  --json             print the fetches of the last step as one JSON object\n"
          "  --quiet            no progress display\n\n"
          "Exit codes: 0 ok, 1 runtime failure, 2 usage or input error.\n");
}

static bool parse_long(const char *s, long lo, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo) return false;
  *out = v;
  return true;
}

/* Splits "a,b" into names (pointers into a strdup'd copy appended to *bufs). */
static int split_names(char *s, const char **names, int n) {
  for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < MAX_ITEMS;
       t = strtok_r(NULL, ",", &save))
    if (*t) names[n++] = t;
  return n;
}

static void print_results(const char *const *names, gr_tensor *results, int n, bool json,
                          bool first) {
  for (int i = 0; i < n; i++) {
    if (json) {
      printf("%s\"%s\": ", first && i == 0 ? "" : ", ", names[i]);
      cli_print_tensor_json(stdout, &results[i]);
      continue;
    }
    if (results[i].shape.rank == 0) {
      printf("%s = ", names[i]);
    } else {
      char sh[GR_SHAPE_STR_MAX];
      printf("%s = %s%s\n", names[i], gr_dtype_name(results[i].dtype),
             gr_shape_str(&results[i].shape, sh));
    }
    cli_print_tensor(stdout, &results[i]);
    printf("\n");
  }
}

int gr_cmd_run(int argc, char **argv) {
  const char *file = NULL, *feed_names[MAX_ITEMS], *feed_paths[MAX_ITEMS];
  const char *fetch_names[MAX_ITEMS], *target_names[MAX_ITEMS], *eval_names[MAX_ITEMS];
  int nfeed = 0, nfetch = 0, ntarget = 0, neval = 0;
  long steps = 1, seed = 0, threads = 0;
  bool json = false, quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = true;
    } else if (strcmp(a, "--feed") == 0 && has_val) {
      char *eq = strchr(argv[++i], '=');
      if (!eq || eq == argv[i] || !eq[1] || nfeed == MAX_ITEMS) {
        fprintf(stderr, "graphrun run: --feed wants NAME=PATH, got '%s'\n", argv[i]);
        return GR_EXIT_USAGE;
      }
      *eq = '\0';
      feed_names[nfeed] = argv[i];
      feed_paths[nfeed++] = eq + 1;
    } else if (strcmp(a, "--fetch") == 0 && has_val) {
      nfetch = split_names(argv[++i], fetch_names, nfetch);
    } else if (strcmp(a, "--eval") == 0 && has_val) {
      neval = split_names(argv[++i], eval_names, neval);
    } else if (strcmp(a, "--target") == 0 && has_val) {
      ntarget = split_names(argv[++i], target_names, ntarget);
    } else if ((strcmp(a, "--steps") == 0 || strcmp(a, "--seed") == 0 ||
                strcmp(a, "--threads") == 0) &&
               has_val) {
      long *dst = a[2] == 's' && a[3] == 't' ? &steps : a[2] == 's' ? &seed : &threads;
      if (!parse_long(argv[++i], dst == &steps ? 1 : 0, dst) || (dst == &threads && *dst > 1024)) {
        fprintf(stderr, "graphrun run: %s wants a %s integer, got '%s'\n", a,
                dst == &steps ? "positive" : "non-negative", argv[i]);
        return GR_EXIT_USAGE;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "graphrun run: unknown option or missing value: '%s' (try --help)\n", a);
      return GR_EXIT_USAGE;
    } else if (!file) {
      file = a;
    } else {
      fprintf(stderr, "graphrun run: more than one file given ('%s', '%s')\n", file, a);
      return GR_EXIT_USAGE;
    }
  }
  if (!file) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  gr_graph *g;
  gr_dsl_program *p;
  int rc = cli_load_graph("run", file, (uint64_t)seed, &g, &p);
  if (rc != GR_EXIT_OK) return rc;
  if (nfetch == 0)
    for (int i = 0; i < gr_dsl_num_fetches(p) && nfetch < MAX_ITEMS; i++)
      fetch_names[nfetch++] = gr_dsl_fetch_name(p, i);
  if (ntarget == 0)
    for (int i = 0; i < gr_dsl_num_targets(p) && ntarget < MAX_ITEMS; i++)
      target_names[ntarget++] = gr_dsl_target_name(p, i);
  gr_output fetches[MAX_ITEMS], targets[MAX_ITEMS];
  gr_feed feeds[MAX_ITEMS];
  gr_tensor feed_vals[MAX_ITEMS], results[MAX_ITEMS];
  int nloaded = 0;
  gr_session *s = NULL;
  gr_error err;
  rc = GR_EXIT_USAGE;
  for (int i = 0; i < nfetch; i++)
    if (!gr_dsl_lookup(p, fetch_names[i], &fetches[i]) || fetches[i].index < 0) {
      fprintf(stderr, "graphrun run: cannot fetch '%s': %s\n", fetch_names[i],
              gr_dsl_lookup(p, fetch_names[i], &fetches[i]) ? "it has no outputs (use --target)"
                                                            : "no such name or node");
      goto done;
    }
  for (int i = 0; i < ntarget; i++)
    if (!gr_dsl_lookup(p, target_names[i], &targets[i])) {
      fprintf(stderr, "graphrun run: unknown target '%s'\n", target_names[i]);
      goto done;
    }
  if (nfetch == 0 && ntarget == 0 && neval == 0) {
    fprintf(stderr, "graphrun run: nothing to run: the file binds no names; use --fetch or "
                    "--target\n");
    goto done;
  }
  for (int i = 0; i < nfeed; i++) {
    gr_output o;
    if (!gr_dsl_lookup(p, feed_names[i], &o) || o.index < 0) {
      fprintf(stderr, "graphrun run: cannot feed '%s': no such name or node\n", feed_names[i]);
      goto done;
    }
    const gr_shape *want = &o.node->out_shapes[o.index];
    if (cli_read_tensor(feed_paths[i], o.node->out_dtypes[o.index], &feed_vals[i], &err) != GR_OK) {
      fprintf(stderr, "graphrun run: --feed %s: %s\n", feed_names[i], err.msg);
      goto done;
    }
    nloaded++;
    if (!gr_shape_compatible(&feed_vals[i].shape, want)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      fprintf(stderr, "graphrun run: --feed %s: the file holds shape %s, '%s' wants %s\n",
              feed_names[i], gr_shape_str(&feed_vals[i].shape, a), o.node->name,
              gr_shape_str(want, b));
      goto done;
    }
    feeds[i] = (gr_feed){o, &feed_vals[i]};
  }
  rc = GR_EXIT_FAILURE;
  gr_session_options opts = {.inter_op_threads = (int)threads};
  if (!(s = gr_session_new(g, &opts, &err))) {
    fprintf(stderr, "graphrun run: %s\n", err.msg);
    goto done;
  }
  cli_progress pr;
  bool show = steps > 1 && !quiet;
  if (show) cli_progress_start(&pr, steps, stderr);
  for (long st = 1; st <= steps; st++) {
    if (gr_session_run(s, feeds, nfeed, fetches, nfetch, results, targets, ntarget, &err) !=
        GR_OK) {
      if (show && pr.tty) fputc('\n', stderr);
      fprintf(stderr, "graphrun run: step %ld: %s\n", st, err.msg);
      goto done;
    }
    if (show) {
      int k = 0;
      while (k < nfetch && gr_tensor_num_elements(&results[k]) != 1) k++;
      cli_progress_update(&pr, st, k < nfetch ? fetch_names[k] : "", k < nfetch,
                          k < nfetch ? gr_tensor_get_f64(&results[k], 0) : 0);
    }
    if (st < steps)
      for (int i = 0; i < nfetch; i++) gr_tensor_release(&results[i]);
  }
  if (show) cli_progress_finish(&pr, steps);
  if (json) printf("{");
  print_results(fetch_names, results, nfetch, json, true);
  for (int i = 0; i < nfetch; i++) gr_tensor_release(&results[i]);
  if (neval) {
    gr_output ev[MAX_ITEMS];
    for (int i = 0; i < neval; i++)
      if (!gr_dsl_lookup(p, eval_names[i], &ev[i]) || ev[i].index < 0) {
        fprintf(stderr, "graphrun run: cannot evaluate '%s': no such name or node\n",
                eval_names[i]);
        rc = GR_EXIT_USAGE;
        goto done;
      }
    if (gr_session_run(s, feeds, nfeed, ev, neval, results, NULL, 0, &err) != GR_OK) {
      fprintf(stderr, "graphrun run: --eval: %s\n", err.msg);
      goto done;
    }
    print_results(eval_names, results, neval, json, nfetch == 0);
    for (int i = 0; i < neval; i++) gr_tensor_release(&results[i]);
  }
  if (json) printf("}\n");
  rc = GR_EXIT_OK;
done:
  for (int i = 0; i < nloaded; i++) gr_tensor_release(&feed_vals[i]);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
