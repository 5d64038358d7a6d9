/* graphrun run: what it prints and writes: the fetched tensors (text, JSON,
 * --out's .npy files), --trace's file and what crossed devices. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "commands.h"

/* Prints the results (text, or JSON members) and with --out writes each as
 * OUT_DIR/NAME.npy. Returns a GR_EXIT_ code. */
static int output_results(const char *const *names, const gr_tensor *results, int n, bool json,
                          bool first, const char *out_dir) {
  for (int i = 0; i < n; i++) {
    if (json) {
      printf("%s\"%s\": ", first && i == 0 ? "" : ", ", names[i]);
      cli_print_tensor_json(stdout, &results[i]);
    } else {
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
    if (!out_dir) continue;
    char *path;
    gr_error err;
    if (cli_out_path("run --out", out_dir, names[i], ".npy", &path) != GR_EXIT_OK)
      return GR_EXIT_FAILURE;
    gr_status st = gr_data_write_npy(&results[i], path, &err);
    free(path);
    if (st != GR_OK) {
      fprintf(stderr, "graphrun run: --out: %s\n", err.msg);
      return GR_EXIT_FAILURE;
    }
  }
  return GR_EXIT_OK;
}

/* --out DIR: made now if missing, so a bad path fails before the run. */
static int make_out_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return GR_EXIT_OK;
  if (mkdir(dir, 0755) != 0) {
    fprintf(stderr, "graphrun run: --out %s: %s\n", dir, strerror(errno));
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

int cli_run_prepare_outputs(const cli_run_options *o, gr_step_trace **trace) {
  int rc;
  if (o->out_dir && (rc = make_out_dir(o->out_dir)) != GR_EXIT_OK) return rc;
  if (!o->trace_path) return GR_EXIT_OK;
  /* a path that cannot be written fails now, not after the run */
  bool existed = access(o->trace_path, F_OK) == 0;
  FILE *tf = fopen(o->trace_path, "a"); /* neither truncates nor leaves an empty file behind */
  if (!tf) {
    fprintf(stderr, "graphrun run: --trace %s: %s\n", o->trace_path, strerror(errno));
    return GR_EXIT_USAGE;
  }
  fclose(tf);
  if (!existed) remove(o->trace_path);
  if (!(*trace = gr_step_trace_new())) {
    fprintf(stderr, "graphrun run: out of memory\n");
    return GR_EXIT_FAILURE;
  }
  return GR_EXIT_OK;
}

int cli_run_report_step(const cli_run_state *r) {
  const cli_run_options *o = &r->o;
  if (r->done_steps >= o->steps) return GR_EXIT_OK; /* no step ran */
  if (r->trace) {
    if (cli_write_trace(o->trace_path, r->trace) != 0) {
      fprintf(stderr, "graphrun run: --trace %s: %s\n", o->trace_path, strerror(errno));
      return GR_EXIT_FAILURE;
    }
    if (!o->quiet) {
      fprintf(stderr, "graphrun run: wrote the last step's trace (%d node runs) to %s\n",
              gr_step_trace_count(r->trace), o->trace_path);
      cli_link links[64];
      int nl = cli_trace_links(r->trace, links, 64);
      for (int k = 0; k < nl; k++)
        fprintf(stderr, "graphrun run:   %s -> %s: %lld values, %lld bytes\n", links[k].from,
                links[k].to, links[k].values, links[k].bytes);
    }
  }
  if ((o->devices > 1 || r->master) && !o->quiet)
    fprintf(stderr, "graphrun run: the last step sent %lld values between devices (%lld bytes)\n",
            (long long)r->moved.sends, (long long)r->moved.bytes);
  return GR_EXIT_OK;
}

/* The notes after the results: the files written, or that nothing was fetched. */
static void print_notes(const cli_run_state *r) {
  const cli_run_options *o = &r->o;
  int n = o->nfetch + o->neval;
  if (!o->quiet && o->out_dir && n > 0)
    fprintf(stderr, "graphrun run: wrote %d .npy file%s to %s\n", n, n > 1 ? "s" : "", o->out_dir);
  if (!o->quiet && !r->show && !o->json && n == 0)
    fprintf(stderr, "graphrun run: %ld step%s run, nothing fetched (--fetch NAME prints a value)\n",
            o->steps, o->steps > 1 ? "s" : "");
}

int cli_run_print_results(cli_run_state *r) {
  const cli_run_options *o = &r->o;
  gr_error err;
  if (r->done_steps >= o->steps && /* everything was done before: fetch once more to print */
      gr_session_run(r->s, r->feeds, o->nfeed, r->fetches, o->nfetch, r->results, NULL, 0, &err) !=
          GR_OK) {
    cli_print_run_error("run", NULL, &err);
    return GR_EXIT_FAILURE;
  }
  if (o->json) printf("{");
  int orc = output_results(o->fetch_names, r->results, o->nfetch, o->json, true, o->out_dir);
  for (int i = 0; i < o->nfetch; i++) gr_tensor_release(&r->results[i]);
  if (orc != GR_EXIT_OK) return orc;
  if (o->neval) {
    if (gr_session_run(r->s, r->feeds, o->nfeed, r->evals, o->neval, r->results, NULL, 0, &err) !=
        GR_OK) {
      cli_print_run_error("run", "--eval", &err);
      return GR_EXIT_FAILURE;
    }
    orc = output_results(o->eval_names, r->results, o->neval, o->json, o->nfetch == 0, o->out_dir);
    for (int i = 0; i < o->neval; i++) gr_tensor_release(&r->results[i]);
    if (orc != GR_EXIT_OK) return orc;
  }
  if (o->json) printf("}\n");
  print_notes(r);
  return GR_EXIT_OK;
}
