/* graphrun predict MODEL IMAGE...: classifies picture files with an
 * inference graph (graphrun export --inference). Each file is decoded and
 * resized as the model's image_folder prepared its images in training
 * (gr_image_read_resized), a batch at a time goes through the model, and
 * each file's top classes are printed with their probabilities, named by
 * the class names the model recorded. A file that cannot be read (not an
 * image, truncated, corrupt, too large) is named with the reason and
 * skipped; the others are still classified. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

#define CMD "predict"

static void usage(FILE *f) {
  fprintf(f, "usage: graphrun predict MODEL.grb IMAGE... [--top K] [--output NAME] [--batch N]\n"
             "                        [--threads T]\n\n"
             "Classifies PNG and JPEG files with an inference graph written by `graphrun export\n"
             "--inference`: each picture is converted to the model's channels and resized to its\n"
             "input size as its image folder was while training, and one line per file gives\n"
             "the top classes and their probabilities:\n"
             "  cat.png: cat 0.9731, dog 0.0269\n"
             "The model's input is its image_input (or its one image-shaped placeholder); its\n"
             "output the file's first fetch: probabilities (a softmax or sigmoid), or logits,\n"
             "which get one. One unit is binary: P(class 1). Class names come from the\n"
             "training folder's sub-folders (else class 0, class 1, ...).\n"
             "  --top K        the K most likely classes (default 5)\n"
             "  --output NAME  the output to read (default: the file's first fetch)\n"
             "  --batch N      pictures per run (default 32)\n"
             "  --threads T    inter-op threads (default: the number of cores)\n"
             "A file that is not a readable PNG or JPEG is named with the reason and skipped.\n"
             "Exit codes: 0 ok, 1 runtime failure, 2 error in the flags or model, or a file\n"
             "that could not be classified.\n");
}

enum { F_TOP = 256, F_OUTPUT, F_BATCH, F_THREADS };

static const struct option predict_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"top", required_argument, NULL, F_TOP},
    {"output", required_argument, NULL, F_OUTPUT},
    {"batch", required_argument, NULL, F_BATCH},
    {"threads", required_argument, NULL, F_THREADS},
    {0},
};

/* The model: its input (geometry and dtype), output and class names. */
typedef struct model {
  const char *path;
  gr_graph *g;
  gr_dsl_program *p;
  gr_output input, output;
  int64_t height, width, batch; /* batch: the input's first dim, -1 unknown */
  int channels;
  gr_dtype dtype;
  bool probabilities; /* the output is a softmax or a sigmoid */
  char **classes;     /* NULL: none recorded */
  int num_classes;
} model;

/* The one image_input node of g, else its one image-shaped placeholder. */
static int find_input(model *m) {
  const gr_node *pick = NULL;
  int found = 0;
  for (int pass = 0; pass < 2 && !found; pass++)
    for (int v = 0; v < gr_graph_num_nodes(m->g); v++) {
      const gr_node *n = gr_graph_node(m->g, v);
      bool image_input = strcmp(n->op->name, "image_input") == 0;
      if ((pass == 0) != image_input ||
          !gr_image_input_geometry(n, &m->height, &m->width, &m->channels))
        continue;
      if (found++ == 0) pick = n;
    }
  if (found > 1) {
    fprintf(stderr, "graphrun " CMD ": %s has %d image inputs: predict takes a model of one\n",
            m->path, found);
    return GR_EXIT_USAGE;
  }
  if (!found) {
    fprintf(stderr,
            "graphrun " CMD ": %s has no image input (an image_input, or a placeholder [?, "
            "height, width, channels] of f32 or u8): write the model with graphrun export "
            "--inference\n",
            m->path);
    return GR_EXIT_USAGE;
  }
  gr_image_input_geometry(pick, &m->height, &m->width, &m->channels);
  m->input = (gr_output){(gr_node *)pick, 0};
  m->dtype = pick->out_dtypes[0];
  m->batch = pick->out_shapes[0].dims[0];
  m->classes = gr_image_folder_class_names(m->input, &m->num_classes);
  return GR_EXIT_OK;
}

/* The output: [?, k] or [?] scores; whether they are probabilities. */
static int find_output(model *m, const char *name) {
  if (!name && gr_dsl_num_fetches(m->p) > 0) name = gr_dsl_fetch_name(m->p, 0);
  if (!name) {
    fprintf(stderr, "graphrun " CMD ": %s names no output: give --output NAME\n", m->path);
    return GR_EXIT_USAGE;
  }
  int rc = cli_lookup_names(CMD, m->p, &name, 1, true, &m->output);
  if (rc != GR_EXIT_OK) return rc;
  const gr_shape *s = &m->output.node->out_shapes[m->output.index];
  if (s->rank != 1 && s->rank != 2) {
    char b[GR_SHAPE_STR_MAX];
    fprintf(stderr,
            "graphrun " CMD ": output '%s' is %s: want [batch, classes] or [batch] scores\n", name,
            gr_shape_str(s, b));
    return GR_EXIT_USAGE;
  }
  int64_t k = s->rank == 2 ? s->dims[1] : 1; /* one unit: two classes */
  if (m->num_classes > 0 && k >= 0 && (k < 2 ? 2 : k) != m->num_classes)
    fprintf(stderr,
            "graphrun " CMD ": note: the model names %d classes, output '%s' gives %lld: they "
            "are numbered\n",
            m->num_classes, name, (long long)(k < 2 ? 2 : k));
  const gr_node *n = m->output.node;
  while (n->op == &gr_op_identity && n->num_inputs == 1) n = n->inputs[0].node;
  m->probabilities = strcmp(n->op->name, "softmax") == 0 || strcmp(n->op->name, "sigmoid") == 0;
  return GR_EXIT_OK;
}

/* Row r of scores (k values; k == 1: binary) as probabilities in p
 * (2 for binary, else k). */
static int probabilities(const model *m, const gr_tensor *out, int64_t r, double *p) {
  int64_t k = out->shape.rank == 2 ? out->shape.dims[1] : 1;
  double v[2];
  if (k == 1) {
    double x = gr_tensor_get_f64(out, r);
    v[1] = m->probabilities ? x : 1 / (1 + exp(-x));
    p[0] = 1 - v[1], p[1] = v[1];
    return 2;
  }
  double top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < k; j++) {
    p[j] = gr_tensor_get_f64(out, r * k + j);
    if (p[j] > top) top = p[j];
  }
  if (m->probabilities) return (int)k;
  for (int64_t j = 0; j < k; j++) sum += p[j] = exp(p[j] - top);
  for (int64_t j = 0; j < k; j++) p[j] /= sum;
  return (int)k;
}

static void print_row(const model *m, const char *file, const double *p, int k, int top) {
  printf("%s:", file);
  bool *shown = calloc((size_t)k, 1);
  for (int t = 0; shown && t < top && t < k; t++) {
    int best = -1;
    for (int j = 0; j < k; j++)
      if (!shown[j] && (best < 0 || p[j] > p[best])) best = j;
    shown[best] = true;
    if (m->classes && k == m->num_classes)
      printf("%s %s %.4f", t ? "," : "", m->classes[best], p[best]);
    else
      printf("%s class %d %.4f", t ? "," : "", best, p[best]);
  }
  printf("\n");
  free(shown);
}

/* Runs one batch of n pictures (already in x, rows beyond n padding) and
 * prints their lines. */
static int run_batch(const model *m, gr_session *s, gr_tensor *x, const char *const *files, int n,
                     int top) {
  gr_feed f = {m->input, x};
  gr_tensor out = gr_tensor_empty();
  gr_error err;
  if (gr_session_run(s, &f, 1, &m->output, 1, &out, NULL, 0, &err) != GR_OK) {
    cli_print_run_error(CMD, NULL, &err);
    return GR_EXIT_FAILURE;
  }
  int64_t k = out.shape.rank == 2 ? out.shape.dims[1] : 1;
  double *p = gr_alloc_array((size_t)(k < 2 ? 2 : k), sizeof *p);
  int rc = p ? GR_EXIT_OK : GR_EXIT_FAILURE;
  if (rc == GR_EXIT_OK && (out.shape.rank < 1 || out.shape.dims[0] < n)) {
    fprintf(stderr, "graphrun " CMD ": the output has %lld rows for %d pictures\n",
            (long long)(out.shape.rank ? out.shape.dims[0] : 0), n);
    rc = GR_EXIT_FAILURE;
  }
  for (int i = 0; rc == GR_EXIT_OK && i < n; i++)
    print_row(m, files[i], p, probabilities(m, &out, i, p), top);
  free(p);
  gr_tensor_release(&out);
  return rc;
}

/* Decodes the files into batches and classifies them. *bad: the files
 * that could not be read (reported). */
static int classify(const model *m, gr_session *s, char **files, int nfiles, long batch, int top,
                    int *bad) {
  int64_t per = m->height * m->width * m->channels;
  size_t esize = gr_dtype_size(m->dtype);
  gr_shape shape = m->input.node->out_shapes[0];
  shape.dims[0] = batch;
  gr_tensor x = gr_tensor_empty();
  gr_error aerr;
  const char **ok = gr_alloc_array((size_t)batch, sizeof *ok);
  int rc = gr_tensor_alloc_zeros(&x, m->dtype, &shape, &aerr) == GR_OK && ok ? GR_EXIT_OK
                                                                             : GR_EXIT_FAILURE;
  int n = 0;
  for (int i = 0; rc == GR_EXIT_OK && i < nfiles; i++) {
    gr_error err;
    unsigned char *dst = (unsigned char *)gr_tensor_data(&x) + (size_t)n * per * esize;
    if (gr_image_read_resized(files[i], m->height, m->width, m->channels, m->dtype, 0, dst, &err) !=
        GR_OK) {
      fprintf(stderr, "graphrun " CMD ": %s\n", err.msg);
      ++*bad;
      continue;
    }
    ok[n++] = files[i];
    if (n < batch && i + 1 < nfiles) continue;
    if (m->batch < 0) x.shape.dims[0] = n; /* else the model's size: the rest is padding */
    rc = run_batch(m, s, &x, ok, n, top);
    x.shape.dims[0] = batch;
    n = 0;
  }
  if (rc == GR_EXIT_OK && n > 0) { /* the last files were unreadable */
    if (m->batch < 0) x.shape.dims[0] = n;
    rc = run_batch(m, s, &x, ok, n, top);
  }
  if (!x.buf || !ok) fprintf(stderr, "graphrun " CMD ": out of memory\n");
  gr_tensor_release(&x);
  free(ok);
  return rc;
}

int gr_cmd_predict(int argc, char **argv) {
  long top = 5, batch = 32, threads = 0;
  const char *output = NULL;
  char **files = calloc((size_t)argc + 1, sizeof *files);
  int nfiles = 0;
  model m = {.path = NULL};
  if (!files) return GR_EXIT_FAILURE;
  cli_opts po;
  cli_opts_start(&po, CMD, argc, argv, predict_flags, "h", CLI_OPTS_ANY_ORDER);
  int rc = GR_EXIT_OK;
  for (int c; rc == GR_EXIT_OK && (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage(stdout);
      free(files);
      return GR_EXIT_OK;
    } else if (c == F_TOP) {
      rc = cli_opt_long(&po, 1, 1000000, &top) ? GR_EXIT_OK : GR_EXIT_USAGE;
    } else if (c == F_OUTPUT) {
      output = po.arg;
    } else if (c == F_BATCH) {
      rc = cli_opt_long(&po, 1, 65536, &batch) ? GR_EXIT_OK : GR_EXIT_USAGE;
    } else if (c == F_THREADS) {
      rc = cli_opt_long(&po, 1, 1024, &threads) ? GR_EXIT_OK : GR_EXIT_USAGE;
    } else if (c == CLI_OPTS_ARG && !m.path) {
      m.path = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      files[nfiles++] = po.arg;
    } else {
      usage(stderr);
      rc = GR_EXIT_USAGE;
    }
  }
  if (rc == GR_EXIT_OK && (!m.path || nfiles == 0)) {
    fprintf(stderr, "graphrun " CMD ": %s\n", !m.path ? "no model file" : "no image files");
    usage(stderr);
    rc = GR_EXIT_USAGE;
  }
  if (rc == GR_EXIT_OK) rc = cli_load_graph(CMD, m.path, 0, &m.g, &m.p);
  if (rc == GR_EXIT_OK) rc = find_input(&m);
  if (rc == GR_EXIT_OK) rc = find_output(&m, output);
  if (rc == GR_EXIT_OK && m.batch > 0) batch = m.batch; /* a model of a fixed batch size */
  gr_session_options so = {.inter_op_threads = (int)threads};
  gr_error err;
  gr_session *s = rc == GR_EXIT_OK ? gr_session_new(m.g, &so, &err) : NULL;
  if (rc == GR_EXIT_OK && !s) {
    fprintf(stderr, "graphrun " CMD ": %s: %s\n", m.path, err.msg);
    rc = GR_EXIT_USAGE;
  }
  int bad = 0;
  if (rc == GR_EXIT_OK) rc = classify(&m, s, files, nfiles, batch, (int)top, &bad);
  if (rc == GR_EXIT_OK && bad) {
    fprintf(stderr, "graphrun " CMD ": %d of %d file%s could not be classified\n", bad, nfiles,
            nfiles == 1 ? "" : "s");
    rc = GR_EXIT_USAGE;
  }
  gr_session_free(s);
  free(m.classes);
  gr_dsl_program_free(m.p);
  gr_graph_free(m.g);
  free(files);
  return rc;
}
