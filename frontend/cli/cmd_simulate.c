/* graphrun simulate FILE.gr --workers 8,64,256 --link 10,25,100: the
 * scaling model (placer/scale.c, docs/scaling.md) of a .gr file trained
 * with synchronous data parallelism: its compute per step measured here on
 * one worker, its gradient the bytes of its trainable variables, the
 * transport's and the master's constants from a cluster file (`graphrun
 * calibrate`) or the defaults; the step and the efficiency printed per
 * number of workers and link speed. --grad-bytes B --compute-ms T model a
 * step of those figures instead of a file's; --per-host G the hierarchical
 * all-reduce of G workers per host. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_place.h"
#include "cli_util.h"
#include "commands.h"
#include "placer/gr_placer.h"

#define MAX_LIST 16

static void usage(FILE *f) {
  fprintf(f, "usage: graphrun simulate FILE.gr [--workers N,N...] [--link G,G...] [--cluster C]\n"
             "                                 [--steps N] [--compute-ms T] [--grad-bytes B]\n"
             "                                 [--bucket-mb M] [--backward F] [--latency-us L]\n"
             "                                 [--per-host G] [--loopback CORES]\n"
             "       graphrun simulate --grad-bytes B --compute-ms T [FLAGS...]\n\n"
             "Predicts the step time and scaling efficiency of synchronous data parallelism\n"
             "(each worker a copy of the model on its own batch, the gradients summed by a ring\n"
             "all-reduce in buckets overlapped with the backward pass, one master driving the\n"
             "steps) on N workers over links of G Gb/s (see docs/scaling.md). The efficiency is\n"
             "one worker's step over N workers' step (each keeps its batch).\n"
             "  --workers N,...    worker counts, 1 to 4096 (default 8,64,256)\n"
             "  --link G,...       link speeds in Gb/s (default 10,25,100)\n"
             "  --cluster C        a cluster file (`graphrun calibrate`): the per-message cost,\n"
             "                     the transport's bandwidth and the master's step costs measured\n"
             "                     between its tasks (default: the built-in defaults)\n"
             "  --steps N          steps of FILE.gr timed here on one worker (default 20)\n"
             "  --compute-ms T     one worker's step of compute, instead of timing FILE.gr\n"
             "  --grad-bytes B     the gradient all-reduced per step (e.g. 100e6), instead of\n"
             "                     FILE.gr's trainable variables\n"
             "  --bucket-mb M      all-reduce bucket in MB (default 25, as PyTorch DDP; 0: one)\n"
             "  --backward F       the backward pass's fraction of compute (default 0.667)\n"
             "  --latency-us L     network latency per message in us (default 25)\n"
             "  --per-host G       G workers per host (default 1): the hierarchical all-reduce,\n"
             "                     as the collective runs it across hosts (a tree inside each\n"
             "                     host, the ring among one leader per host)\n"
             "  --loopback CORES   the tasks on this host of CORES cores instead of over links\n"
             "                     (no network latency; more tasks than cores take turns), to\n"
             "                     check the model against `graphrun launch --workers N`\n"
             "Exit codes: 0 ok, 1 a step of FILE.gr failed, 2 error in the input files or flags\n"
             "(also a placeholder FILE.gr's step needs: --compute-ms T then).\n");
}

enum {
  F_WORKERS = 256,
  F_LINK,
  F_CLUSTER,
  F_STEPS,
  F_COMPUTE,
  F_GRAD,
  F_BUCKET,
  F_BACKWARD,
  F_LATENCY,
  F_LOOPBACK,
  F_PER_HOST
};

static const struct option sim_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"workers", required_argument, NULL, F_WORKERS},
    {"link", required_argument, NULL, F_LINK},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {"steps", required_argument, NULL, F_STEPS},
    {"compute-ms", required_argument, NULL, F_COMPUTE},
    {"grad-bytes", required_argument, NULL, F_GRAD},
    {"bucket-mb", required_argument, NULL, F_BUCKET},
    {"backward", required_argument, NULL, F_BACKWARD},
    {"latency-us", required_argument, NULL, F_LATENCY},
    {"loopback", required_argument, NULL, F_LOOPBACK},
    {"per-host", required_argument, NULL, F_PER_HOST},
    {0},
};

typedef struct sim_opts {
  const char *file, *cluster;
  long workers[MAX_LIST];
  double links[MAX_LIST];
  int nw, nl;
  long steps;
  long loopback; /* > 0: the tasks share one host of this many cores */
  long per_host; /* workers per host (1: each its own) */
  bool link_given, latency_given;
  double compute_ms, grad_bytes, bucket_mb, backward, latency_us; /* < 0: not given */
} sim_opts;

/* The soft placement notes: one worker's pins run here by design. */
static void quiet(void *arg, const char *msg) {
  (void)arg, (void)msg;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* A finite number in [lo, hi], the whole string. */
static bool parse_number(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* "a,b,c" into at most MAX_LIST numbers in [lo, hi] (integers when ints). */
static bool parse_list(const char *s, double lo, double hi, bool ints, double *out, int *n) {
  char buf[256];
  if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf) return false;
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == MAX_LIST || !parse_number(tok, lo, hi, &out[*n]) ||
        (ints && out[*n] != floor(out[*n])))
      return false;
    (*n)++;
  }
  return *n > 0;
}

static int parse(int argc, char **argv, sim_opts *a) {
  *a = (sim_opts){.workers = {8, 64, 256},
                  .nw = 3,
                  .links = {10, 25, 100},
                  .nl = 3,
                  .steps = 20,
                  .per_host = 1,
                  .compute_ms = -1,
                  .grad_bytes = -1,
                  .bucket_mb = 25,
                  .backward = 2.0 / 3,
                  .latency_us = 1e6 * GR_SCALE_NET_LATENCY};
  cli_opts po;
  cli_opts_start(&po, "simulate", argc, argv, sim_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    double list[MAX_LIST];
    if (c == 'h') {
      usage(stdout);
      return -1;
    } else if (c == F_WORKERS) {
      if (!parse_list(po.arg, 1, GR_CLUSTER_MAX_TASKS, true, list, &a->nw))
        return cli_opt_bad(&po, "a list of up to %d worker counts in [1, %d] (8,64,256)", MAX_LIST,
                           GR_CLUSTER_MAX_TASKS);
      for (int i = 0; i < a->nw; i++) a->workers[i] = (long)list[i];
    } else if (c == F_LINK) {
      if (!parse_list(po.arg, 1e-3, 1e6, false, a->links, &a->nl))
        return cli_opt_bad(&po, "a list of up to %d link speeds in Gb/s (10,25,100)", MAX_LIST);
      a->link_given = true;
    } else if (c == F_CLUSTER) {
      a->cluster = po.arg;
    } else if (c == F_STEPS) {
      if (!cli_opt_long(&po, 1, 100000, &a->steps)) return GR_EXIT_USAGE;
    } else if (c == F_COMPUTE) {
      if (!parse_number(po.arg, 1e-6, 1e9, &a->compute_ms) || a->compute_ms <= 0)
        return cli_opt_bad(&po, "milliseconds > 0");
    } else if (c == F_GRAD) {
      if (!parse_number(po.arg, 0, 1e15, &a->grad_bytes))
        return cli_opt_bad(&po, "bytes in [0, 1e15] (100e6 for 100 MB)");
    } else if (c == F_BUCKET) {
      if (!parse_number(po.arg, 0, 1e6, &a->bucket_mb))
        return cli_opt_bad(&po, "megabytes in [0, 1e6] (0: one bucket)");
    } else if (c == F_BACKWARD) {
      if (!parse_number(po.arg, 0, 1, &a->backward) || a->backward <= 0)
        return cli_opt_bad(&po, "a fraction in (0, 1]");
    } else if (c == F_LATENCY) {
      if (!parse_number(po.arg, 0, 1e7, &a->latency_us))
        return cli_opt_bad(&po, "microseconds in [0, 1e7]");
      a->latency_given = true;
    } else if (c == F_LOOPBACK) {
      if (!cli_opt_long(&po, 1, 4096, &a->loopback)) return GR_EXIT_USAGE;
    } else if (c == F_PER_HOST) {
      if (!cli_opt_long(&po, 1, GR_CLUSTER_MAX_TASKS, &a->per_host)) return GR_EXIT_USAGE;
    } else if (c == CLI_OPTS_ARG && !a->file) {
      a->file = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun simulate: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  if (a->loopback && a->link_given) {
    fprintf(stderr, "graphrun simulate: --loopback models tasks on one host: no --link\n");
    return GR_EXIT_USAGE;
  }
  if (a->loopback && a->per_host > 1) {
    fprintf(stderr, "graphrun simulate: --loopback models tasks on one host: no --per-host\n");
    return GR_EXIT_USAGE;
  }
  if (a->loopback) { /* no network: no link, no latency beyond the transport's own */
    a->nl = 1;
    if (!a->latency_given) a->latency_us = 0;
  }
  if (!a->file && (a->compute_ms < 0 || a->grad_bytes < 0)) {
    fprintf(stderr, "graphrun simulate: missing FILE.gr, or --grad-bytes B with --compute-ms T "
                    "(try --help)\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

/* One worker's graph of the file (num_tasks("worker") is 1, its pins run
 * here): its gradient bytes (trainable variables) and, unless given, the
 * median of a.steps steps (after 3 not timed). */
static int measure_file(const sim_opts *a, double *compute, double *grad, int64_t *params) {
  gr_error err;
  gr_cluster *one = gr_cluster_new();
  int t;
  if (!one || gr_cluster_add_task(one, "worker", NULL, &t, &err) != GR_OK ||
      gr_cluster_add_device(one, t, GR_CLUSTER_DEFAULT_FLOPS, GR_CLUSTER_DEFAULT_MEM_BANDWIDTH,
                            GR_CLUSTER_DEFAULT_OVERHEAD, &err) != GR_OK) {
    gr_cluster_free(one);
    fprintf(stderr, "graphrun simulate: out of memory\n");
    return GR_EXIT_FAILURE;
  }
  gr_graph *g = NULL;
  gr_dsl_program *p = NULL;
  cli_step st = {0};
  int rc = cli_load_graph_on("simulate", a->file, 0, one, NULL, NULL, 0, &g, &p);
  gr_cluster_free(one);
  if (rc == GR_EXIT_OK) rc = cli_step_of("simulate", p, &st);
  if (rc == GR_EXIT_OK) {
    int n = gr_graph_num_nodes(g);
    unsigned char *roles = malloc((size_t)n + 1);
    *grad = 0, *params = 0;
    if (roles) gr_variable_roles(g, 0, n, roles);
    for (int i = 0; roles && i < n; i++) {
      const gr_node *v = gr_graph_node(g, i);
      if (roles[i] != GR_VAR_TRAINABLE) continue;
      int64_t e = gr_shape_num_elements(&v->out_shapes[0]);
      *params += e;
      *grad += (double)e * (double)gr_dtype_size(v->out_dtypes[0]);
    }
    free(roles);
  }
  if (rc == GR_EXIT_OK && a->compute_ms < 0) {
    gr_session_options so = {
        .soft_placement = true, .inter_op_threads = 1, .intra_op_threads = 1, .log_fn = quiet};
    gr_session *s = gr_session_new(g, &so, &err);
    double *t_s = calloc((size_t)a->steps, sizeof *t_s);
    gr_tensor out[CLI_MAX_NAMES];
    gr_status stt = s && t_s ? gr_session_init_variables(s, &err) : GR_ERR_RESOURCE_EXHAUSTED;
    for (long i = -3; stt == GR_OK && i < a->steps; i++) {
      double t0 = cli_now();
      stt = gr_session_run(s, NULL, 0, st.fetch, st.nf, out, st.target, st.nt, &err);
      if (i >= 0) t_s[i] = cli_now() - t0;
      for (int k = 0; stt == GR_OK && k < st.nf; k++) gr_tensor_release(&out[k]);
    }
    if (stt != GR_OK) {
      fprintf(stderr,
              "graphrun simulate: %s: a step on one worker failed: %s (--compute-ms T models "
              "it without running it)\n",
              a->file, s ? err.msg : "out of memory");
      rc = stt == GR_ERR_INVALID_ARGUMENT ? GR_EXIT_USAGE : GR_EXIT_FAILURE;
    } else {
      qsort(t_s, (size_t)a->steps, sizeof *t_s, cmp_double);
      *compute = t_s[a->steps / 2];
    }
    free(t_s);
    gr_session_free(s);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}

int gr_cmd_simulate(int argc, char **argv) {
  sim_opts a;
  int rc = parse(argc, argv, &a);
  if (rc != GR_EXIT_OK) return rc < 0 ? GR_EXIT_OK : rc;
  gr_error err;
  gr_cluster *c = NULL;
  if (a.cluster ? gr_cluster_load_json(a.cluster, &c, &err) != GR_OK
                : !(c = gr_cluster_new()) && gr_error_set_oom(&err) != GR_OK) {
    fprintf(stderr, "graphrun simulate: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  gr_scale_params p = {
      .backward = a.backward, .bucket_bytes = a.bucket_mb * 1e6, .per_host = (int)a.per_host};
  gr_scale_params_from_cluster(&p, c, a.latency_us * 1e-6);
  gr_cluster_free(c);
  double compute = a.compute_ms * 1e-3, grad = a.grad_bytes;
  int64_t params = -1;
  if (a.file && (rc = measure_file(&a, &compute, &grad, &params)) != GR_EXIT_OK) return rc;
  if (a.grad_bytes >= 0) grad = a.grad_bytes;
  if (a.compute_ms > 0) compute = a.compute_ms * 1e-3;
  p.compute = compute, p.grad_bytes = grad;
  printf("model: %s\n", a.file ? a.file : "the step given");
  printf("  compute %.3f ms per step on one worker (%s), backward pass %.0f%% of it\n",
         1e3 * compute, a.compute_ms > 0 ? "given" : "measured here, median of the steps timed",
         100 * a.backward);
  if (params >= 0 && a.grad_bytes < 0)
    printf("  gradient %.3f MB per step (%lld trainable parameters)\n", grad / 1e6,
           (long long)params);
  else
    printf("  gradient %.3f MB per step (given)\n", grad / 1e6);
  printf("  per message %.1f us + %.1f us network, transport %.2f GB/s, master %.1f us per step "
         "+ %.1f us per task (%s)\n",
         1e6 * p.hop_latency - a.latency_us, a.latency_us, p.host_bw / 1e9, 1e6 * p.step_fixed,
         1e6 * p.step_task, a.cluster ? a.cluster : "defaults; --cluster C: measured ones");
  printf("  all-reduce in buckets of %g MB overlapped with the backward pass", a.bucket_mb);
  if (a.per_host > 1)
    printf("; %ld workers per host: a tree inside each host (%.1f us per message there), the "
           "ring among the hosts' leaders",
           a.per_host, 1e6 * p.host_hop);
  printf("\n\n");
  printf("%8s %10s %12s %14s %12s %12s %11s\n", "workers", "link Gb/s", "step ms", "allreduce ms",
         "exposed ms", "master ms", "efficiency");
  for (int l = 0; l < a.nl; l++)
    for (int w = 0; w < a.nw; w++) {
      p.link_bw = a.loopback ? 1e18 : a.links[l] * 1e9 / 8; /* loopback: the transport only */
      gr_scale_result r;
      if (gr_scale_predict(&p, (int)a.workers[w], &r, &err) != GR_OK) {
        fprintf(stderr, "graphrun simulate: %s\n", err.msg);
        return GR_EXIT_USAGE;
      }
      /* on one host every part of the step is CPU work: more tasks than
       * cores take turns */
      double turns =
          a.loopback && a.workers[w] > a.loopback ? (double)a.workers[w] / (double)a.loopback : 1;
      char link[16];
      snprintf(link, sizeof link, "%g", a.links[l]);
      printf("%8ld %10s %12.3f %14.3f %12.3f %12.3f %10.1f%%\n", a.workers[w],
             a.loopback ? "loopback" : link, 1e3 * r.step * turns, 1e3 * r.allreduce * turns,
             1e3 * r.exposed * turns, 1e3 * r.control, 100 * r.efficiency / turns);
    }
  return GR_EXIT_OK;
}
