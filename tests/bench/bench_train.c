/* The whole training loop, not the bare step: 5 epochs (2345 steps) of the
 * Fashion-MNIST MLP 784-256-256-10, SGD 0.1, batch 128, timed over the
 * training loop only (the clock starts after the first step, which reads
 * the data files), in the same run:
 *
 *   - graphrun on examples/fashion_mlp.gr through the library calls that
 *     `graphrun run` makes (gr_dsl_load_file, gr_session_new with the CLI's
 *     options, gr_session_check_feeds, gr_session_run_traced fetching the
 *     loss every step and reading it as the progress display does), with 1
 *     inter-op thread and with the defaults (one per core);
 *   - graphrun's C example (examples/fashion_mlp.c, its own "train loop"
 *     line) with 1 thread and the defaults;
 *   - PyTorch (tests/bench/train_torch.py, Debian python3-torch) with 1
 *     thread and with all cores.
 *
 * For the .gr runs it also prints where a step's time goes, from step
 * traces of the last 64 steps: the kernels by kind, the step's span (first
 * kernel start to last kernel end) and what the loop spends outside it
 * (session entry and exit, fetching, the loop itself).
 *
 *   bench_train [--smoke] [--steps N] [--no-torch-all]
 *
 * Last line: train: ratio_1t=R1 ratio_best=R2 acc=A
 *   R1: graphrun .gr 1 thread / PyTorch 1 thread (loop seconds)
 *   R2: graphrun's best .gr configuration (1 thread or defaults) / PyTorch's
 *       best (1 thread or all cores); the C example is printed for reference
 *   A: graphrun's test accuracy (.gr, 1 thread; every graphrun run is checked
 *      to reach the same loss and accuracy bit for bit at equal thread count) */
#include <graphrun.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "bench_util.h"

#define DATA_DIR       "/usr/share/datasets/fashion-mnist"
#define TRACED_STEPS   64
#define GR_SPLIT_MFLOP 8.0 /* GR_OPS_GEMM_SPLIT_FLOPS (ops/ops_internal.h), shown */

typedef struct result {
  double seconds, loss, acc; /* seconds < 0: not measured */
} result;

/* Time spent per step, by kind of kernel, over the traced steps. */
enum { K_PRODUCT, K_INPUT, K_OPTIMIZER, K_OTHER, K_COUNT };
static const char *const kind_names[K_COUNT] = {"products (+ fused SGD update)",
                                                "input (batch, cast, scale)",
                                                "optimizer (apply, step)", "everything else"};

typedef struct breakdown {
  double kernel[K_COUNT]; /* summed kernel seconds */
  double span;            /* summed step spans */
  int steps;
} breakdown;

static int kind_of(const gr_node *n) {
  const char *op = n->op->name;
  if (strstr(op, "matmul")) return K_PRODUCT;
  if (strcmp(op, "batch") == 0 || strncmp(n->name, "pixels/", 7) == 0 ||
      strcmp(op, "read_idx") == 0 ||
      (strcmp(op, "cast") == 0 && n->num_inputs == 1 &&
       strcmp(n->inputs[0].node->op->name, "batch") == 0))
    return K_INPUT;
  if (strncmp(op, "apply_", 6) == 0 || strcmp(op, "assign_add") == 0) return K_OPTIMIZER;
  return K_OTHER;
}

static void add_trace(breakdown *b, const gr_step_trace *t) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    b->kernel[kind_of(e->node)] += 1e-9 * (double)(e->end_ns - e->start_ns);
    if (e->start_ns < lo) lo = e->start_ns;
    if (e->end_ns > hi) hi = e->end_ns;
  }
  if (hi > lo) b->span += 1e-9 * (double)(hi - lo);
  b->steps++;
}

static void die(const char *what, const gr_error *err) {
  fprintf(stderr, "bench_train: %s: %s\n", what, err->msg);
  exit(1);
}

/* examples/fashion_mlp.gr as `graphrun run FILE --steps N --eval accuracy
 * --seed 1 --threads T` runs it, a slice of steps at a time. */
typedef struct trainer {
  gr_graph *g;
  gr_dsl_program *p;
  gr_session *s;
  gr_output loss, train, accuracy;
  gr_step_trace *trace;
  long done, steps; /* steps run, steps in all (the last TRACED_STEPS are traced) */
  double seconds;   /* of the steps after the first */
  result r;
} trainer;

static void trainer_start(trainer *t, int threads, long steps) {
  memset(t, 0, sizeof *t);
  t->steps = steps;
  t->g = gr_graph_new();
  gr_graph_set_seed(t->g, 1);
  gr_error err;
  if (gr_dsl_load_file(GR_SOURCE_DIR "/examples/fashion_mlp.gr", t->g, NULL, &t->p, &err) != GR_OK)
    die("loading examples/fashion_mlp.gr", &err);
  if (!gr_dsl_lookup(t->p, "loss", &t->loss) || !gr_dsl_lookup(t->p, "train", &t->train) ||
      !gr_dsl_lookup(t->p, "accuracy", &t->accuracy)) {
    fprintf(stderr, "bench_train: fashion_mlp.gr binds no loss, train or accuracy\n");
    exit(1);
  }
  gr_session_options o = {.inter_op_threads = threads, .num_devices = 1, .step_timeout_ms = 300000};
  if (!(t->s = gr_session_new(t->g, &o, &err))) die("gr_session_new", &err);
  if (gr_session_check_feeds(t->s, NULL, 0, &t->loss, 1, &t->train, 1, &err) != GR_OK)
    die("checking the step", &err);
  if (!(t->trace = gr_step_trace_new())) die("trace", &(gr_error){GR_ERR_RESOURCE_EXHAUSTED, ""});
}

/* Runs n more steps (the first step of all is not timed); returns their seconds. */
static double trainer_run(trainer *t, long n, breakdown *bd) {
  gr_error err;
  double t0 = 0, shown = 0, last_show = 0;
  for (long k = 0; k < n && t->done < t->steps; k++) {
    long st = ++t->done;
    if (st == 2 || (k == 0 && st > 2)) t0 = bench_now();
    bool traced = bd && st >= 2 && t->steps - st < TRACED_STEPS;
    gr_tensor lv;
    if (traced) gr_step_trace_clear(t->trace);
    if (gr_session_run_traced(t->s, NULL, 0, &t->loss, 1, &lv, &t->train, 1,
                              traced ? t->trace : NULL, &err) != GR_OK)
      die("step", &err);
    if (traced) add_trace(bd, t->trace);
    /* what the progress display does every step: read the scalar and the clock */
    double now = bench_now();
    t->r.loss = gr_tensor_get_f64(&lv, 0);
    if (now - last_show >= 0.1) last_show = now, shown = t->r.loss;
    gr_tensor_release(&lv);
  }
  (void)shown;
  double sec = t0 > 0 ? bench_now() - t0 : 0;
  t->seconds += sec;
  return sec;
}

static result trainer_finish(trainer *t) {
  gr_error err;
  gr_tensor acc;
  if (gr_session_run(t->s, NULL, 0, &t->accuracy, 1, &acc, NULL, 0, &err) != GR_OK)
    die("evaluating", &err);
  t->r.acc = gr_tensor_get_f64(&acc, 0);
  t->r.seconds = t->steps > 1 ? t->seconds : 0;
  gr_tensor_release(&acc);
  gr_step_trace_free(t->trace);
  gr_session_free(t->s);
  gr_dsl_program_free(t->p);
  gr_graph_free(t->g);
  return t->r;
}

static result run_gr(int threads, long steps, breakdown *bd) {
  trainer t;
  trainer_start(&t, threads, steps);
  trainer_run(&t, steps, bd);
  return trainer_finish(&t);
}

/* The products of the MLP's step at batch 128 and 32 {m, n, k, transpose_a}. */
static const int products[][4] = {{128, 256, 784, 0}, {784, 256, 128, 1}, {128, 256, 256, 0},
                                  {256, 256, 128, 1}, {32, 256, 784, 0},  {784, 256, 32, 1},
                                  {32, 256, 256, 0},  {256, 256, 32, 1},  {128, 10, 256, 0}};
enum { NUM_PRODUCTS = sizeof products / sizeof products[0] };

/* --products (run as a child, with GRAPHRUN_SPLIT_FLOPS set by the parent):
 * the median microseconds of each product as a matmul node in a session of
 * `threads` inter-op threads, one per line. */
static int time_products(int threads) {
  for (int p = 0; p < NUM_PRODUCTS; p++) {
    int m = products[p][0], n = products[p][1], k = products[p][2], ta = products[p][3];
    gr_graph *g = gr_graph_new();
    gr_output a = gr_zeros(g, GR_F32, (gr_shape){2, {ta ? k : m, ta ? m : k}});
    gr_output b = gr_zeros(g, GR_F32, (gr_shape){2, {k, n}});
    gr_output y = gr_reduce_sum(g, gr_matmul(g, a, b, ta, false), NULL, 0, false);
    gr_error err;
    gr_session_options o = {.inter_op_threads = threads};
    gr_session *s = gr_session_new(g, &o, &err);
    double t[201];
    for (int i = -20; i < 201; i++) {
      gr_tensor out;
      double t0 = bench_now();
      if (!s || gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err) != GR_OK)
        die("product", &err);
      if (i >= 0) t[i] = bench_now() - t0;
      gr_tensor_release(&out);
    }
    printf("%.2f\n", 1e6 * bench_median(t, 201));
    gr_session_free(s);
    gr_graph_free(g);
  }
  return 0;
}

/* Times the products in children: 1 thread, and 2 threads unsplit and split. */
static void compare_products(const char *self) {
  double us[3][NUM_PRODUCTS];
  const char *how[3] = {"1e18 %s --products 1", "1e18 %s --products 2", "0 %s --products 2"};
  for (int c = 0; c < 3; c++) {
    char cmd[1200], fmt[64];
    snprintf(fmt, sizeof fmt, "GRAPHRUN_SPLIT_FLOPS=%s", how[c]);
    snprintf(cmd, sizeof cmd, fmt, self);
    FILE *f = popen(cmd, "r");
    for (int p = 0; p < NUM_PRODUCTS; p++)
      if (!f || fscanf(f, "%lf", &us[c][p]) != 1) us[c][p] = -1;
    if (f) pclose(f);
  }
  printf("  the step's products as matmul nodes (median us; a product is split from %.0f MFLOP):\n",
         GR_SPLIT_MFLOP);
  for (int p = 0; p < NUM_PRODUCTS; p++) {
    const int *d = products[p];
    printf("    %4dx%4dx%4d%s %5.1f MFLOP: 1 thread %7.1f, 2 threads whole %7.1f, halves %7.1f "
           "(x%.2f)\n",
           d[0], d[1], d[2], d[3] ? "^T" : "  ", 2e-6 * d[0] * d[1] * d[2], us[0][p], us[1][p],
           us[2][p], us[2][p] > 0 ? us[1][p] / us[2][p] : 0);
  }
}

/* Runs cmd and parses its output with fn; r.seconds = -1 when it fails. */
static result run_child(const char *cmd, int (*fn)(const char *line, result *r)) {
  result r = {-1, 0, 0};
  FILE *p = popen(cmd, "r");
  if (!p) return r;
  char line[512];
  int got = 0;
  while (fgets(line, sizeof line, p)) got |= fn(line, &r);
  if (pclose(p) != 0 || got != 3) r.seconds = -1;
  return r;
}

static int parse_c_example(const char *line, result *r) {
  if (sscanf(line, "train loop: %lf s", &r->seconds) == 1) return 1;
  if (sscanf(line, "test accuracy: %lf", &r->acc) == 1) return 2;
  return 0;
}

static int parse_torch(const char *line, result *r) {
  long n;
  if (sscanf(line, "seconds=%lf steps=%ld loss=%lf acc=%lf", &r->seconds, &n, &r->loss, &r->acc) ==
      4)
    return 3;
  fputs(line, stderr);
  return 0;
}

static result run_c_example(int threads, long steps) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s --epochs 6 --steps %ld --threads %d --seed 1", GR_FASHION_MLP,
           steps, threads);
  return run_child(cmd, parse_c_example);
}

static result run_torch(int threads, long steps) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d /usr/bin/python3 %s/train_torch.py %s %d %ld 1 2>&1", threads,
           GR_BENCH_DIR, DATA_DIR, threads, steps);
  return run_child(cmd, parse_torch);
}

/* PyTorch at 1 thread as a child serving slices of steps (train_torch.py
 * ... serve), so that its slices interleave with graphrun's. */
typedef struct torch_child {
  pid_t pid;
  FILE *in, *out;
} torch_child;

static bool torch_start(torch_child *c, int threads, long steps) {
  int to[2], from[2];
  *c = (torch_child){-1, NULL, NULL};
  if (pipe(to) != 0 || pipe(from) != 0) return false;
  char th[16], st[32], script[600];
  snprintf(th, sizeof th, "%d", threads);
  snprintf(st, sizeof st, "%ld", steps);
  snprintf(script, sizeof script, "%s/train_torch.py", GR_BENCH_DIR);
  fflush(NULL);
  c->pid = fork();
  if (c->pid < 0) {
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    return false;
  }
  if (c->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    setenv("OMP_NUM_THREADS", th, 1);
    execl("/usr/bin/python3", "python3", script, DATA_DIR, th, st, "1", "serve", (char *)NULL);
    _exit(127);
  }
  bench_add_child(c->pid);
  close(to[0]), close(from[1]);
  c->in = fdopen(to[1], "w");
  c->out = fdopen(from[0], "r");
  return true; /* a failed fdopen shows as a failed run */
}

/* Runs n more steps; their seconds, or -1 when the child failed. */
static double torch_run(torch_child *c, long n) {
  char line[256];
  long got;
  double sec;
  if (!c->in || !c->out || fprintf(c->in, "%ld\n", n) < 0 || fflush(c->in) != 0) return -1;
  while (fgets(line, sizeof line, c->out))
    if (sscanf(line, "ran %ld %lf", &got, &sec) == 2) return sec;
  return -1;
}

static result torch_finish(torch_child *c) {
  result r = {-1, 0, 0};
  if (c->in) fclose(c->in); /* end of input: the child evaluates and prints its result */
  char line[512];
  int got = 0;
  while (c->out && fgets(line, sizeof line, c->out)) got |= parse_torch(line, &r);
  if (c->out) fclose(c->out);
  int status = 0;
  if (c->pid > 0) {
    waitpid(c->pid, &status, 0);
    bench_forget_child(c->pid);
  }
  if (got != 3 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) r.seconds = -1;
  return r;
}

static void print_result(const char *what, long steps, result r) {
  if (r.seconds < 0) {
    printf("  %-34s not measured\n", what);
    return;
  }
  printf("  %-34s %7.3f s  %6.3f ms/step  accuracy %.4f\n", what, r.seconds,
         1e3 * r.seconds / (double)(steps - 1), r.acc);
  fflush(stdout);
}

static void print_breakdown(const char *what, const breakdown *b, const result *r, long steps) {
  double n = b->steps ? b->steps : 1, loop = r->seconds / (double)(steps - 1), sum = 0;
  printf("  where a step goes, %s (mean of the last %d steps, from step traces):\n", what,
         b->steps);
  for (int k = 0; k < K_COUNT; k++) {
    printf("    %-30s %7.1f us\n", kind_names[k], 1e6 * b->kernel[k] / n);
    sum += b->kernel[k];
  }
  printf("    %-30s %7.1f us (kernels of one step, summed over threads: %.1f us)\n",
         "step span, first to last kernel", 1e6 * b->span / n, 1e6 * sum / n);
  printf("    %-30s %7.1f us (loop time per step %.1f us minus the span)\n",
         "outside the step's kernels", 1e6 * (loop - b->span / n), 1e6 * loop);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--products") == 0) return time_products(atoi(argv[2]));
  bool smoke = bench_is_smoke(argc, argv), torch_all = true;
  long steps = smoke ? 20 : 2345;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atol(argv[++i]);
    else if (strcmp(argv[i], "--no-torch-all") == 0)
      torch_all = false;
  }
  if (steps < 2) steps = 2;
  int cores = gr_num_cores();
  printf("Fashion-MNIST MLP 784-256-256-10, SGD 0.1, batch 128: %ld steps, %d cores; seconds of "
         "the training loop after its first step\n",
         steps, cores);
  breakdown b1 = {0}, bd = {0};
  /* graphrun at 1 thread, PyTorch at 1 thread and graphrun with its
   * defaults train side by side, a slice of steps each in turn, so that a
   * change of the machine's speed (a shared host's neighbours) hits all
   * three; each figure is the sum of its slices */
  enum { SLICES = 5 };
  trainer tg1, tgd;
  torch_child tc = {-1, NULL, NULL};
  trainer_start(&tg1, 1, steps);
  trainer_start(&tgd, 0, steps);
  bool torch_started = !smoke && torch_start(&tc, 1, steps), torch_ok = torch_started;
  double slice_ratio[SLICES];
  int nslices = 0;
  for (int k = 0; k < SLICES; k++) {
    long n = steps / SLICES + (k == SLICES - 1 ? steps % SLICES : 0);
    double sg = trainer_run(&tg1, n, &b1);
    double st = torch_ok ? torch_run(&tc, n) : -1;
    trainer_run(&tgd, n, &bd);
    if (torch_ok && st <= 0) torch_ok = false;
    if (torch_ok) slice_ratio[nslices++] = sg / st;
  }
  result g1 = trainer_finish(&tg1), gd = trainer_finish(&tgd);
  result t1 = torch_started ? torch_finish(&tc) : (result){-1, 0, 0};
  if (!torch_ok) t1.seconds = -1;
  print_result("graphrun .gr, 1 thread", steps, g1);
  print_result("PyTorch, 1 thread", steps, t1);
  print_result("graphrun .gr, defaults", steps, gd);
  if (nslices > 0) {
    double lo = slice_ratio[0], hi = slice_ratio[0];
    for (int k = 1; k < nslices; k++)
      lo = slice_ratio[k] < lo ? slice_ratio[k] : lo,
      hi = slice_ratio[k] > hi ? slice_ratio[k] : hi;
    printf("  (the three ran in %d interleaved slices; graphrun 1 thread / PyTorch 1 thread per "
           "slice: %.2f-%.2f)\n",
           nslices, lo, hi);
  }
  result ta = smoke || !torch_all ? (result){-1, 0, 0} : run_torch(cores, steps);
  char what[64];
  snprintf(what, sizeof what, "PyTorch, %d threads", cores);
  print_result(what, steps, ta);
  result c1 = run_c_example(1, steps);
  print_result("graphrun C example, 1 thread", steps, c1);
  result cd = run_c_example(0, steps);
  print_result("graphrun C example, defaults", steps, cd);
  /* the same seed gives the same bits, per thread count and across them */
  long short_steps = steps < 200 ? steps : 200;
  result r1a = run_gr(1, short_steps, NULL), r1b = run_gr(1, short_steps, NULL);
  result rda = run_gr(0, short_steps, NULL), rdb = run_gr(0, short_steps, NULL);
  bool same = r1a.loss == r1b.loss && rda.loss == rdb.loss;
  printf("  reruns, loss after %ld steps: 1 thread %.9g and %.9g, defaults %.9g and %.9g (%s); "
         "after %ld steps 1 thread and defaults %s\n",
         short_steps, r1a.loss, r1b.loss, rda.loss, rdb.loss, same ? "equal" : "DIFFER", steps,
         g1.loss == gd.loss && g1.acc == gd.acc ? "equal" : "differ");
  if (!smoke) compare_products(argv[0]);
  print_breakdown("graphrun .gr, 1 thread", &b1, &g1, steps);
  print_breakdown("graphrun .gr, defaults", &bd, &gd, steps);
  /* the best of each: graphrun's two .gr configurations, PyTorch's two */
  double best_g = gd.seconds > 0 && gd.seconds < g1.seconds ? gd.seconds : g1.seconds;
  double best_t = t1.seconds;
  if (ta.seconds > 0 && (best_t <= 0 || ta.seconds < best_t)) best_t = ta.seconds;
  double r1 = t1.seconds > 0 ? g1.seconds / t1.seconds : 0, r2 = best_t > 0 ? best_g / best_t : 0;
  if (!same) {
    fprintf(stderr, "bench_train: two runs with the same seed and thread count differ\n");
    return 1;
  }
  printf("train: ratio_1t=%.2f ratio_best=%.2f acc=%.4f\n", r1, r2, g1.acc);
  return 0;
}
