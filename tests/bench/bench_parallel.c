/* make bench-parallel: training on two tasks (separate processes on
 * loopback) against PyTorch with the Gloo backend, measured in the same run,
 * one BLAS thread per process.
 *
 * The bench forks two server tasks (/job:worker/task:0 and task:1,
 * gr_server_new on 127.0.0.1:0, one inter-op thread each as under graphrun
 * launch) and is their master; the sync and pipeline parts run on two
 * more, each bound to its share of the CPUs as graphrun launch --cpu-bind
 * binds them.
 * PyTorch runs as two processes of tests/bench/parallel_torch.py joined by
 * a file:// rendezvous in a temporary directory. Rounds alternate:
 * PyTorch, then graphrun; each figure is the median over the rounds,
 * printed with its range.
 *
 *   allreduce_vs_gloo  ring all-reduce (gr_all_reduce, sum) of an f32
 *       variable of 4 MiB and of 64 MiB held by each task vs
 *       torch.distributed.all_reduce (Gloo) of the same sizes; GB/s = bytes
 *       / time of one reduce (median of a round's reduces); the smaller of
 *       the two sizes' ratios ours / theirs.
 *   sync_vs_ddp  the MLP 784-256-256-10, SGD 0.1, batch 128 per worker,
 *       synchronous on 2 bound workers: examples/allreduce.gr with
 *       batch_size=128 * workers (in-graph replicas, mirrored variables,
 *       ring all-reduce of the gradients; the file's mirror check is not
 *       run) vs PyTorch DDP (Gloo) on two processes; examples/s.
 *   sync_scaling  the same file in one process (one worker, batch 128,
 *       a session with one inter-op thread): 2-worker examples/s / 1-worker.
 *   sync_floor, sync_nocomm  what two cores allow (parallel_floor.h): two
 *       forked processes each run that one-worker step, with a raw-socket
 *       ring all-reduce of the MLP's gradient bytes after every step
 *       (sync_floor) or without (sync_nocomm); 2 x one-worker step time /
 *       the pair's step time. sync_floor's step keeps the update unfused
 *       (GRAPHRUN_FUSE_UPDATE=0), as a replica's must be;
 *       sync_floor_fused is the same pair with the one-worker step's fused
 *       update, which no data-parallel step can have. The two-worker
 *       steps and sync_floor's pair alternate in a round (half the steps
 *       each, twice), so the VM's swing falls on both alike.
 *   async_eps  graphrun launch --ps 1 --workers 2 --between-graph
 *       examples/ps_async.gr:
 *       worker 0's "N steps in S s" x 128 x 2.
 *   pipeline_speedup  examples/model_parallel.gr (layer 1 on task 0,
 *       layers 2-3 on task 1) with micro_batches(1, ...) vs its own
 *       micro_batches(4, ...): time per global batch of 128, M=1 / M=4.
 *   pipeline_bound  M=1's time / the busier task's kernel time in an M=4
 *       step (from step traces: the last step of runs of 8, traced in
 *       the tasks' loop as the timed steps run): the speedup if the M=4
 *       step took no longer than its busier stage's kernels.
 *
 * Every child (servers, Python, launch) is killed and reaped on every
 * path; every wait has a deadline.
 *
 *   bench_parallel [--smoke] [--only PART,...] [--rounds N] [--breakdown]
 *                  [--single-step-runs]
 *
 * --smoke: small sizes, few steps, no PyTorch (its figures print as nan).
 * --only: some of the parts allreduce, sync, pipeline, async (the others
 * print as nan). --rounds: 1-5 (default 5). --breakdown: after each round,
 * where a step of the sync and model-parallel programs goes (step traces).
 * The sync and pipeline programs run their timed steps as one multi-step
 * run (gr_session_run_steps, graphrun run --steps-per-run: the tasks loop
 * without the client between steps); --single-step-runs: one run per step,
 * the client between them (the figures before multi-step runs).
 *
 * Last line: parallel: allreduce_vs_gloo=A sync_vs_ddp=B sync_scaling=C
 *            async_eps=D pipeline_speedup=E sync_floor=F sync_nocomm=G
 *            pipeline_bound=H sync_floor_fused=I of_floor=J of_bound=K
 * (J: the median over rounds of the round's C / F, K of E / H). */

#include <errno.h>
#include <fcntl.h>
#include <graphrun.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "parallel_floor.h"

#define BATCH 128
/* the MLP 784-256-256-10's parameters: the floats a sync step all-reduces */
#define MLP_PARAMS (784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10)
#define MAX_ROUNDS 5

/* ---- children: servers (forked) and commands (fork + exec) ----------------------------- */

static char tmp_dir[64];

/* after the children are stopped (bench_start) */
static void cleanup(void) {
  if (tmp_dir[0]) {
    char p[128];
    snprintf(p, sizeof p, "%s/init", tmp_dir);
    unlink(p);
    rmdir(tmp_dir);
  }
}

/* Runs n commands at once, each with stdout and stderr into out[i] (cap
 * bytes, NUL-terminated), until all have ended or timeout_s has passed;
 * then SIGTERM (graphrun launch stops its tasks on it), 3 s, SIGKILL, and
 * every one is reaped. Returns 0 when all exited with status 0. */
static int run_commands(int n, char *const *argv[], char **out, size_t cap, double timeout_s) {
  pid_t pid[4];
  int fd[4], status[4];
  size_t len[4];
  bool done[4];
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) bench_die("pipe", NULL);
    pid[i] = fork();
    if (pid[i] < 0) bench_die("fork", NULL);
    if (pid[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(p[1], 1);
      dup2(p[1], 2);
      execv(argv[i][0], argv[i]);
      _exit(127);
    }
    bench_add_child(pid[i]);
    close(p[1]);
    fd[i] = p[0];
    len[i] = 0;
    out[i][0] = '\0';
    done[i] = false;
    status[i] = -1;
  }
  double deadline = bench_now() + timeout_s, term_at = 0;
  int open_fds = n, alive = n;
  while (open_fds > 0 || alive > 0) {
    double now = bench_now();
    if (!term_at && now > deadline) {
      fprintf(stderr, "bench_parallel: %s did not end within %.0f s: stopped\n", argv[0][0],
              timeout_s);
      for (int i = 0; i < n; i++)
        if (!done[i]) kill(pid[i], SIGTERM);
      term_at = now;
    }
    if (term_at && now > term_at + 3)
      for (int i = 0; i < n; i++)
        if (!done[i]) kill(pid[i], SIGKILL);
    struct pollfd pf[4];
    int map[4], np = 0;
    for (int i = 0; i < n; i++)
      if (fd[i] >= 0) pf[np] = (struct pollfd){.fd = fd[i], .events = POLLIN}, map[np++] = i;
    if (np)
      poll(pf, (nfds_t)np, 100);
    else
      usleep(20000);
    for (int k = 0; k < np; k++) {
      if (!pf[k].revents) continue;
      int i = map[k];
      char tmp[4096];
      ssize_t r = read(fd[i], tmp, sizeof tmp);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        close(fd[i]);
        fd[i] = -1;
        open_fds--;
        continue;
      }
      size_t take = (size_t)r < cap - 1 - len[i] ? (size_t)r : cap - 1 - len[i];
      memcpy(out[i] + len[i], tmp, take);
      len[i] += take;
      out[i][len[i]] = '\0';
    }
    for (int i = 0; i < n; i++)
      if (!done[i] && waitpid(pid[i], &status[i], WNOHANG) == pid[i]) {
        done[i] = true;
        alive--;
        bench_forget_child(pid[i]);
      }
    if (term_at && bench_now() > term_at + 10) break; /* pipes held open by grandchildren */
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (fd[i] >= 0) close(fd[i]);
    if (!done[i]) {
      kill(pid[i], SIGKILL);
      waitpid(pid[i], &status[i], 0);
      bench_forget_child(pid[i]);
    }
    if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) rc = -1;
  }
  return rc;
}

/* ---- graphrun on the two tasks -------------------------------------------------------- */

static const char *const specs[2] = {"/job:worker/task:0", "/job:worker/task:1"};

static gr_session *master_session(gr_master *m, gr_graph *g) {
  gr_error err;
  gr_session_options o = {.intra_op_threads = 1, .step_timeout_ms = 120000};
  gr_session *s = gr_master_session_new(m, g, &o, &err);
  if (!s) bench_die("session", err.msg);
  return s;
}

static void run_steps(gr_session *s, const gr_output *targets, int nt, int steps) {
  gr_error err;
  for (int k = 0; k < steps; k++)
    if (gr_session_run(s, NULL, 0, NULL, 0, NULL, targets, nt, &err) != GR_OK)
      bench_die("step", err.msg);
}

/* one reduce per step; the median seconds of `steps` steps */
static double median_step(gr_session *s, const gr_output *targets, int nt, int steps) {
  double t[64];
  if (steps > 64) steps = 64;
  for (int k = 0; k < steps; k++) {
    double t0 = bench_now();
    run_steps(s, targets, nt, 1);
    t[k] = bench_now() - t0;
  }
  return bench_median(t, steps);
}

/* a variable of `elems` f32 on each task, all-reduced (sum) by the ring */
static gr_graph *allreduce_graph(int64_t elems, gr_output out[2]) {
  gr_graph *g = gr_graph_new();
  gr_output v[2];
  for (int k = 0; k < 2; k++) {
    char name[48]; /* names differ by size: variables are shared by name on a task */
    snprintf(name, sizeof name, "v%d_%lld", k, (long long)elems);
    gr_graph_push_device_scope(g, specs[k]);
    v[k] = gr_variable(g, name, gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){elems})));
    gr_graph_pop_device_scope(g);
  }
  if (gr_all_reduce(g, v, 2, specs, GR_REDUCE_SUM, out) != GR_OK || gr_graph_error(g))
    bench_die("all_reduce graph", gr_graph_error(g) ? gr_graph_error(g)->msg : "failed");
  return g;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) bench_die(path, NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) bench_die(path, "short read");
  s[n] = '\0';
  fclose(f);
  return s;
}

/* the text of examples/NAME with `from` replaced by `to` (once; it must be there) */
static char *variant(const char *name, const char *from, const char *to) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", GR_SOURCE_DIR, name);
  char *s = read_text(path), *at = strstr(s, from);
  if (!at) bench_die(name, "the text the benchmark changes is not in the file");
  size_t a = (size_t)(at - s), fl = strlen(from), tl = strlen(to), sl = strlen(s);
  char *r = malloc(sl - fl + tl + 1);
  memcpy(r, s, a);
  memcpy(r + a, to, tl);
  memcpy(r + a + tl, at + fl, sl - a - fl + 1);
  free(s);
  return r;
}

static void quiet_note(void *arg, const char *msg) {
  (void)arg, (void)msg;
}

typedef struct program {
  gr_graph *g;
  gr_dsl_program *p;
  gr_session *s;
  gr_output train;
} program;

/* loads text (num_tasks("worker") from GRAPHRUN_CLUSTER when set) and makes
 * a session on the master m, or in this process when m is NULL */
static void program_load(program *pr, const char *name, const char *text, gr_master *m) {
  gr_error err;
  pr->g = gr_graph_new();
  pr->p = NULL;
  if (gr_dsl_load_string(name, text, pr->g, NULL, &pr->p, &err) != GR_OK) bench_die(name, err.msg);
  if (!gr_dsl_lookup(pr->p, "train", &pr->train)) bench_die(name, "no `train`");
  if (m) {
    pr->s = master_session(m, pr->g);
  } else {
    gr_session_options o = {.inter_op_threads = 1,
                            .intra_op_threads = 1,
                            .soft_placement = true, /* the file's pins to worker 0 */
                            .log_fn = quiet_note};
    pr->s = gr_session_new(pr->g, &o, &err);
    if (!pr->s) bench_die(name, err.msg);
  }
}

static void program_free(program *pr) {
  gr_session_free(pr->s);
  gr_dsl_program_free(pr->p);
  gr_graph_free(pr->g);
}

static bool single_step_runs; /* --single-step-runs */

/* seconds per step over `steps` steps, run as one multi-step run (on a
 * cluster the tasks loop: graphrun run --steps-per-run), or one run each */
static double time_train(program *pr, int steps) {
  gr_error err;
  double t0 = bench_now();
  if (single_step_runs)
    run_steps(pr->s, &pr->train, 1, steps);
  else if (gr_session_run_steps(pr->s, NULL, 0, NULL, 0, NULL, &pr->train, 1, steps, NULL, &err) !=
           GR_OK)
    bench_die("steps", err.msg);
  return (bench_now() - t0) / steps;
}

/* A multi-step run traces its last step (gr_session_run_steps): the traced
 * steps below are the last of runs of this many, steps in the tasks' loop
 * as the timed ones are (--single-step-runs: one step a run, as timed). */
enum { TRACE_RUN_STEPS = 8 };

/* Seconds a step of one traced run takes, its last step's events in t. */
static double traced_run(program *pr, gr_step_trace *t) {
  gr_error err;
  int n = single_step_runs ? 1 : TRACE_RUN_STEPS;
  gr_step_trace_clear(t);
  double t0 = bench_now();
  if (gr_session_run_steps(pr->s, NULL, 0, NULL, 0, NULL, &pr->train, 1, n, t, &err) != GR_OK)
    bench_die("traced steps", err.msg);
  return (bench_now() - t0) / n;
}

/* Seconds of kernels each task ran in traced step t (receives wait, so
 * they do not count); compute (if not NULL): without the collectives,
 * which wait for the other member too; span: from its first node's start
 * to its last's end. */
static void trace_busy(const gr_step_trace *t, double busy[2], double *compute, double *span) {
  int64_t first = INT64_MAX, last = INT64_MIN;
  busy[0] = busy[1] = 0;
  if (compute) compute[0] = compute[1] = 0;
  for (int i = 0; i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    const char *dev = e->node->assigned_device;
    if (e->start_ns < first) first = e->start_ns;
    if (e->end_ns > last) last = e->end_ns;
    if (!strcmp(e->node->op->name, "_recv")) continue;
    double d = 1e-9 * (double)(e->end_ns - e->start_ns);
    int k = dev && strstr(dev, "task:1");
    busy[k] += d;
    if (compute && strncmp(e->node->op->name, "collective_", 11) != 0) compute[k] += d;
  }
  if (span) *span = last > first ? 1e-9 * (double)(last - first) : 0;
}

/* Seconds of kernels the busier task runs in a step (median over `steps`
 * traced steps): a split step cannot end before its busier task has run
 * its kernels. */
static double busier_task_s(program *pr, int steps) {
  gr_step_trace *t = gr_step_trace_new();
  double v[64], busy[2];
  if (!t) bench_die("trace", "out of memory");
  if (steps > 64) steps = 64;
  for (int k = 0; k < steps; k++) {
    traced_run(pr, t);
    trace_busy(t, busy, NULL, NULL);
    v[k] = fmax(busy[0], busy[1]);
  }
  gr_step_trace_free(t);
  return bench_median(v, steps);
}

/* the floor pair's steps (parallel_floor.h): the one-worker program,
 * loaded twice in each forked process: variant FLOOR_FUSED as it is (SGD
 * fused into the weight gradients' products), FLOOR_DP built with
 * GRAPHRUN_FUSE_UPDATE=0 (the products stored, then apply_sgd: the
 * arithmetic of a data-parallel replica, whose update must wait for the
 * summed gradient) */
enum { FLOOR_FUSED, FLOOR_DP };

static void *floor_setup(void) {
  program *pr = calloc(2, sizeof *pr);
  char *text = variant("allreduce.gr", "batch_size=64 * workers", "batch_size=128 * workers");
  if (!pr) bench_die("floor pair", "out of memory");
  program_load(&pr[FLOOR_FUSED], "allreduce.gr (one worker, floor pair)", text, NULL);
  setenv("GRAPHRUN_FUSE_UPDATE", "0", 1); /* in the forked child only */
  program_load(&pr[FLOOR_DP], "allreduce.gr (one worker, unfused, floor pair)", text, NULL);
  unsetenv("GRAPHRUN_FUSE_UPDATE");
  free(text);
  return pr;
}

static void floor_step(void *ctx, int which) {
  program *pr = ctx;
  run_steps(pr[which].s, &pr[which].train, 1, 1);
}

/* ---- PyTorch ------------------------------------------------------------------------ */

typedef struct torch_figures {
  double ar_s[2], ddp_s; /* median seconds: all-reduce of 4 and 64 MiB, DDP step */
} torch_figures;

static bool run_torch(int iters_small, int iters_large, int ddp_steps, torch_figures *tf) {
  char script[512], init[128], a[3][16];
  snprintf(script, sizeof script, "%s/parallel_torch.py", GR_BENCH_DIR);
  snprintf(init, sizeof init, "%s/init", tmp_dir);
  unlink(init);
  snprintf(a[0], sizeof a[0], "%d", iters_small);
  snprintf(a[1], sizeof a[1], "%d", iters_large);
  snprintf(a[2], sizeof a[2], "%d", ddp_steps);
  char *argv0[] = {"/usr/bin/python3", script, "0", init, a[0], a[1], a[2], NULL};
  char *argv1[] = {"/usr/bin/python3", script, "1", init, a[0], a[1], a[2], NULL};
  char *const *argv[2] = {argv0, argv1};
  static char o0[65536], o1[65536];
  char *out[2] = {o0, o1};
  int rc = run_commands(2, argv, out, sizeof o0, 150);
  unlink(init);
  *tf = (torch_figures){{NAN, NAN}, NAN};
  for (char *l = o0; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    long long bytes;
    double med;
    if (sscanf(l, "allreduce %lld %lf", &bytes, &med) == 2) tf->ar_s[bytes > (8 << 20)] = med;
    if (sscanf(l, "ddp %lld %lf", &bytes, &med) == 2) tf->ddp_s = med;
  }
  if (rc != 0 || isnan(tf->ar_s[0]) || isnan(tf->ar_s[1]) || isnan(tf->ddp_s)) {
    fprintf(stderr, "bench_parallel: the PyTorch run failed:\n%s%s", o0, o1);
    return false;
  }
  return true;
}

/* ---- async: graphrun launch --between-graph ------------------------------------------------ */

static double run_async(const char *graphrun, const char *file, int steps) {
  char st[16], buf[1 << 16];
  snprintf(st, sizeof st, "%d", steps);
  char *argv0[] = {(char *)graphrun,  "launch",     "--ps",    "1", "--workers", "2",
                   "--between-graph", (char *)file, "--steps", st,  NULL};
  char *const *argv[1] = {argv0};
  char *out[1] = {buf};
  int rc = run_commands(1, argv, out, sizeof buf, 150);
  double secs = NAN;
  long n;
  char *l = strstr(buf, " steps in ");
  while (l && l > buf && l[-1] >= '0' && l[-1] <= '9') l--;
  if (l && sscanf(l, "%ld steps in %lf s", &n, &secs) == 2 && n == steps && rc == 0 && secs > 0)
    return (double)steps * BATCH * 2 / secs;
  fprintf(stderr, "bench_parallel: graphrun launch (async) failed:\n%s", buf);
  exit(1);
}

/* ---- where a step goes ------------------------------------------------------------------ */

/* From `steps` traced steps (median of each figure): per task, the seconds
 * of kernels it ran (receives wait, so they do not count; sends do), and
 * the step's span (first kernel start to last kernel end over both tasks)
 * against the wall time of the whole run call, traced and not. */
/* The delivery times of a step's transfers between tasks (a receive's end
 * - its send's end, both CLOCK_MONOTONIC on one machine), appended to d
 * (at most cap); returns the new count. */
static int deliveries(const gr_step_trace *t, double *d, int n, int cap) {
  int count = gr_step_trace_count(t);
  for (int i = 0; i < count && n < cap; i++) {
    const gr_trace_event *r = gr_step_trace_event(t, i);
    if (strcmp(r->node->op->name, "_recv") != 0) continue;
    const char *tn = gr_node_attr_string(r->node, "tensor_name", "");
    const char *sd = gr_node_attr_string(r->node, "send_device", "");
    for (int j = 0; j < count; j++) {
      const gr_trace_event *s = gr_step_trace_event(t, j);
      if (strcmp(s->node->op->name, "_send") != 0 || s->iteration != r->iteration ||
          strcmp(gr_node_attr_string(s->node, "tensor_name", ""), tn) != 0 ||
          strcmp(gr_node_attr_string(s->node, "send_device", ""), sd) != 0)
        continue;
      d[n++] = 1e-9 * (double)(r->end_ns - s->end_ns);
      break;
    }
  }
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void step_breakdown(const char *what, program *pr, int steps) {
  gr_step_trace *t = gr_step_trace_new();
  enum { MAX_DELIVERIES = 4096 };
  double busy[2][64], comp[2][64], span[64], wall[64],
      *deliv = malloc(MAX_DELIVERIES * sizeof *deliv);
  int nd = 0;
  if (!deliv || !t) bench_die("trace", "out of memory");
  if (steps > 64) steps = 64;
  for (int k = 0; k < steps; k++) {
    double bt[2], ct[2];
    wall[k] = traced_run(pr, t);
    trace_busy(t, bt, ct, &span[k]);
    busy[0][k] = bt[0];
    busy[1][k] = bt[1];
    comp[0][k] = ct[0];
    comp[1][k] = ct[1];
    nd = deliveries(t, deliv, nd, MAX_DELIVERIES);
  }
  gr_step_trace_free(t);
  double b0 = bench_median(busy[0], steps), b1 = bench_median(busy[1], steps);
  double sp = bench_median(span, steps), wl = bench_median(wall, steps);
  double plain[64];
  for (int k = 0; k < steps; k++) plain[k] = time_train(pr, single_step_runs ? 1 : TRACE_RUN_STEPS);
  double mean = 0;
  for (int k = 0; k < steps; k++) mean += plain[k] / steps;
  qsort(plain, (size_t)steps, sizeof *plain, cmp_double);
  printf("  %s, a step of a %d-step run (median of %d): %.2f ms untraced (mean %.2f, p90 %.2f, max "
         "%.2f); traced "
         "%.2f ms, span %.2f ms, kernels task 0 %.2f ms, task 1 %.2f ms\n",
         what, single_step_runs ? 1 : TRACE_RUN_STEPS, steps, plain[steps / 2] * 1e3, mean * 1e3,
         plain[steps * 9 / 10] * 1e3, plain[steps - 1] * 1e3, wl * 1e3, sp * 1e3, b0 * 1e3,
         b1 * 1e3);
  double c0 = bench_median(comp[0], steps), c1 = bench_median(comp[1], steps);
  if (c0 < b0 || c1 < b1) /* collectives: each member's own work, then the wait for the other */
    printf("    without the collectives: task 0 %.2f ms, task 1 %.2f ms (collectives %.2f and %.2f "
           "ms)\n",
           c0 * 1e3, c1 * 1e3, (b0 - c0) * 1e3, (b1 - c1) * 1e3);
  if (nd > 0) {
    qsort(deliv, (size_t)nd, sizeof *deliv, cmp_double);
    printf("    %d transfers between the tasks: delivered (receive end - send end) median %.0f us, "
           "p90 %.0f us, max %.0f us\n",
           nd, deliv[nd / 2] * 1e6, deliv[nd * 9 / 10] * 1e6, deliv[nd - 1] * 1e6);
  }
  free(deliv);
}

/* ---- main ------------------------------------------------------------------------------ */

static void range(const char *what, double *v, int n, const char *unit) {
  double lo = v[0], hi = v[0], c[MAX_ROUNDS];
  for (int i = 0; i < n; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]), c[i] = v[i];
  printf("  %-30s median %9.4g  range %9.4g - %9.4g %s\n", what, bench_median(c, n), lo, hi, unit);
}

static double med(const double *v, int n) {
  double c[MAX_ROUNDS];
  memcpy(c, v, sizeof(double) * (size_t)n);
  return bench_median(c, n);
}

/* The parts of the benchmark (--only takes a comma-separated list). */
enum { P_ALLREDUCE, P_SYNC, P_PIPELINE, P_ASYNC, P_COUNT };
static const char *const part_names[P_COUNT] = {"allreduce", "sync", "pipeline", "async"};

typedef struct config {
  bool smoke, part[P_COUNT], breakdown;
  int rounds;
  int64_t sizes[2]; /* all-reduce bytes */
  int ar_steps[2], mlp_steps, pipe_steps, async_steps;
} config;

static void usage(void) {
  fprintf(stderr, "usage: bench_parallel [--smoke] [--only PART,...] [--rounds N] [--breakdown]\n"
                  "                      [--single-step-runs]\n"
                  "  PART: allreduce, sync, pipeline, async (default: all)\n");
  exit(2);
}

static config parse_args(int argc, char **argv) {
  config c = {.rounds = 5};
  for (int p = 0; p < P_COUNT; p++) c.part[p] = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--smoke")) {
      c.smoke = true;
    } else if (!strcmp(argv[i], "--breakdown")) {
      c.breakdown = true;
    } else if (!strcmp(argv[i], "--single-step-runs")) {
      single_step_runs = true;
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      c.rounds = atoi(argv[++i]);
      if (c.rounds < 1 || c.rounds > MAX_ROUNDS) usage();
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      for (int p = 0; p < P_COUNT; p++) c.part[p] = false;
      char list[256];
      snprintf(list, sizeof list, "%s", argv[++i]);
      for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int p = 0;
        while (p < P_COUNT && strcmp(tok, part_names[p])) p++;
        if (p == P_COUNT) {
          fprintf(stderr, "bench_parallel: unknown part '%s'\n", tok);
          usage();
        }
        c.part[p] = true;
      }
    } else {
      usage();
    }
  }
  if (c.smoke) c.rounds = 1;
  c.sizes[0] = c.smoke ? (64 << 10) : (4 << 20);
  c.sizes[1] = c.smoke ? (1 << 20) : (64 << 20);
  c.ar_steps[0] = c.smoke ? 3 : 20;
  c.ar_steps[1] = c.smoke ? 3 : 8;
  c.mlp_steps = c.smoke ? 3 : 150;
  c.pipe_steps = c.smoke ? 3 : 100;
  c.async_steps = c.smoke ? 5 : 300;
  return c;
}

/* Everything the rounds use: the master of the two server tasks, the
 * floor pair, and the programs, loaded once. */
typedef struct bench {
  config c;
  char graphrun[600], async_file[600];
  gr_master *m;       /* the two servers of the all-reduce part */
  gr_master *m_bound; /* sync's and pipeline's, each on its own CPUs (launch --cpu-bind) */
  floor_pair *fp;
  gr_graph *ar_g[2];
  gr_session *ar_s[2];
  gr_output ar_out[2][2];
  char *sync_text, *mp1_text, *mp4_text;
  program sync2, sync1, mp1, mp4;
} bench;

/* Figures of every round (NAN where a part did not run). */
typedef struct figures {
  double ar_gbps[2][MAX_ROUNDS], gloo_gbps[2][MAX_ROUNDS], ar_ratio[2][MAX_ROUNDS];
  double sync_eps[MAX_ROUNDS], one_eps[MAX_ROUNDS], ddp_eps[MAX_ROUNDS], ddp_ratio[MAX_ROUNDS];
  double scaling[MAX_ROUNDS], async_eps[MAX_ROUNDS], mp_s[2][MAX_ROUNDS], speedup[MAX_ROUNDS];
  double floor_sc[MAX_ROUNDS], fused_sc[MAX_ROUNDS], nocomm_sc[MAX_ROUNDS], pipe_bound[MAX_ROUNDS];
  double of_floor[MAX_ROUNDS], of_bound[MAX_ROUNDS]; /* sync_scaling / sync_floor, pipeline's */
} figures;

static void find_graphrun(bench *b) {
  ssize_t len = readlink("/proc/self/exe", b->graphrun, sizeof b->graphrun - 32);
  if (len <= 0) bench_die("/proc/self/exe", NULL);
  b->graphrun[len] = '\0';
  strcpy(strrchr(b->graphrun, '/') + 1, "../../graphrun"); /* build/tests/bench -> build */
  if (access(b->graphrun, X_OK) != 0) bench_die(b->graphrun, NULL);
  snprintf(b->async_file, sizeof b->async_file, "%s/examples/ps_async.gr", GR_SOURCE_DIR);
}

/* The servers and the floor pair first, while this process has no threads
 * of its own; then the master and the programs, and a warm-up. */
static void bench_setup(bench *b) {
  int life[2], port[2], bport[2];
  if (pipe2(life, O_CLOEXEC) != 0) bench_die("pipe", NULL);
  char addr[2][64], baddr[2][64], cluster[256];
  const char *addrs[2], *baddrs[2];
  for (int k = 0; k < 2; k++) {
    bench_spawn_server(k, life[0], life[1], &port[k]);
    snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", port[k]);
    addrs[k] = addr[k];
    if (!b->c.part[P_SYNC] && !b->c.part[P_PIPELINE]) continue;
    bench_spawn_server_bound(k, 2, life[0], life[1], &bport[k]); /* launch --cpu-bind's */
    snprintf(baddr[k], sizeof baddr[k], "127.0.0.1:%d", bport[k]);
    baddrs[k] = baddr[k];
  }
  if (b->c.part[P_SYNC])
    b->fp = floor_pair_spawn(life[0], life[1], MLP_PARAMS, floor_setup, floor_step);
  close(life[0]);
  gr_error err;
  /* no recovery here: a task starved by a loaded machine is slow, not lost */
  gr_master_options mo = {.num_tasks = 2,
                          .addresses = addrs,
                          .secret = BENCH_SECRET,
                          .step_timeout_ms = 120000,
                          .heartbeat_ms = 250,
                          .heartbeat_missed = 40};
  if (gr_master_new(&mo, &b->m, &err) != GR_OK) bench_die("master", err.msg);
  mo.addresses = baddrs;
  if ((b->c.part[P_SYNC] || b->c.part[P_PIPELINE]) &&
      gr_master_new(&mo, &b->m_bound, &err) != GR_OK)
    bench_die("master", err.msg);
  for (int i = 0; i < 2 && b->c.part[P_ALLREDUCE]; i++) {
    b->ar_g[i] = allreduce_graph(b->c.sizes[i] / 4, b->ar_out[i]);
    b->ar_s[i] = master_session(b->m, b->ar_g[i]);
    run_steps(b->ar_s[i], b->ar_out[i], 2, 2); /* warm-up: registration */
  }
  b->sync_text = variant("allreduce.gr", "batch_size=64 * workers", "batch_size=128 * workers");
  b->mp4_text = read_text(GR_SOURCE_DIR "/examples/model_parallel.gr");
  b->mp1_text = variant("model_parallel.gr", "micro_batches(4,", "micro_batches(1,");
  if (!strstr(b->mp4_text, "micro_batches(4,"))
    bench_die("model_parallel.gr", "no micro_batches(4, ...)");
  if (b->c.part[P_SYNC] || b->c.part[P_PIPELINE]) {
    snprintf(cluster, sizeof cluster, "{\"worker\": [\"%s\", \"%s\"]}", baddr[0], baddr[1]);
    setenv("GRAPHRUN_CLUSTER", cluster, 1); /* num_tasks("worker") = 2 */
  }
  if (b->c.part[P_PIPELINE]) {
    program_load(&b->mp1, "model_parallel.gr (M=1)", b->mp1_text, b->m_bound);
    program_load(&b->mp4, "model_parallel.gr", b->mp4_text, b->m_bound);
  }
  if (b->c.part[P_SYNC])
    program_load(&b->sync2, "allreduce.gr (batch 128 per worker)", b->sync_text, b->m_bound);
  unsetenv("GRAPHRUN_CLUSTER"); /* one worker, in this process */
  if (b->c.part[P_SYNC]) {
    program_load(&b->sync1, "allreduce.gr (one worker)", b->sync_text, NULL);
    time_train(&b->sync2, 5), time_train(&b->sync1, 5); /* warm-up */
    floor_pair_run(b->fp, 5, true, FLOOR_FUSED); /* warm-up: the children load the programs */
    floor_pair_run(b->fp, 5, true, FLOOR_DP);
  }
  if (b->c.part[P_PIPELINE]) time_train(&b->mp1, 5), time_train(&b->mp4, 5);
}

static void bench_teardown(bench *b) {
  if (b->c.part[P_SYNC]) program_free(&b->sync1), program_free(&b->sync2);
  if (b->c.part[P_PIPELINE]) program_free(&b->mp1), program_free(&b->mp4);
  for (int i = 0; i < 2 && b->c.part[P_ALLREDUCE]; i++) {
    gr_session_free(b->ar_s[i]);
    gr_graph_free(b->ar_g[i]);
  }
  gr_master_free(b->m);
  if (b->m_bound) gr_master_free(b->m_bound);
  if (b->fp) floor_pair_free(b->fp);
  free(b->sync_text), free(b->mp1_text), free(b->mp4_text);
}

/* One round: PyTorch first, then graphrun, part by part. */
static void bench_round(bench *b, int r, bool *torch_ok, figures *f) {
  const config *c = &b->c;
  torch_figures tf = {{NAN, NAN}, NAN};
  if (*torch_ok && !run_torch(c->ar_steps[0], c->ar_steps[1], c->mlp_steps, &tf)) *torch_ok = false;
  for (int i = 0; i < 2; i++) {
    f->ar_gbps[i][r] =
        !c->part[P_ALLREDUCE]
            ? NAN
            : (double)c->sizes[i] / median_step(b->ar_s[i], b->ar_out[i], 2, c->ar_steps[i]) / 1e9;
    f->gloo_gbps[i][r] = (double)c->sizes[i] / tf.ar_s[i] / 1e9;
    f->ar_ratio[i][r] = f->ar_gbps[i][r] / f->gloo_gbps[i][r];
  }
  f->one_eps[r] = f->sync_eps[r] = f->nocomm_sc[r] = f->floor_sc[r] = f->fused_sc[r] = NAN;
  if (c->part[P_SYNC]) {
    double one_s = time_train(&b->sync1, c->mlp_steps), two_s = 0, floor_s = 0;
    f->one_eps[r] = BATCH / one_s;
    for (int k = 0; k < 2; k++) { /* the pair and its floor alternate: ours, floor, ours, floor */
      two_s += time_train(&b->sync2, c->mlp_steps / 2) / 2;
      floor_s += floor_pair_run(b->fp, c->mlp_steps / 2, true, FLOOR_DP) / 2;
    }
    f->sync_eps[r] = 2 * BATCH / two_s;
    f->floor_sc[r] = 2 * one_s / floor_s;
    f->nocomm_sc[r] = 2 * one_s / floor_pair_run(b->fp, c->mlp_steps, false, FLOOR_FUSED);
    f->fused_sc[r] = 2 * one_s / floor_pair_run(b->fp, c->mlp_steps, true, FLOOR_FUSED);
    if (c->breakdown) step_breakdown("sync MLP x2", &b->sync2, 20);
  }
  f->ddp_eps[r] = 2 * BATCH / tf.ddp_s;
  f->ddp_ratio[r] = f->sync_eps[r] / f->ddp_eps[r];
  f->scaling[r] = f->sync_eps[r] / f->one_eps[r];
  f->mp_s[0][r] = f->mp_s[1][r] = f->pipe_bound[r] = NAN;
  if (c->part[P_PIPELINE]) {
    for (int k = 0; k < 2; k++) { /* M=1, M=4, M=1, M=4 */
      f->mp_s[0][r] = (k ? f->mp_s[0][r] : 0) + time_train(&b->mp1, c->pipe_steps) / 2;
      f->mp_s[1][r] = (k ? f->mp_s[1][r] : 0) + time_train(&b->mp4, c->pipe_steps) / 2;
    }
    f->pipe_bound[r] = f->mp_s[0][r] / busier_task_s(&b->mp4, c->smoke ? 3 : 20);
    if (c->breakdown) {
      step_breakdown("model parallel M=1", &b->mp1, 20);
      step_breakdown("model parallel M=4", &b->mp4, 20);
    }
  }
  f->speedup[r] = f->mp_s[0][r] / f->mp_s[1][r];
  f->of_floor[r] = f->scaling[r] / f->floor_sc[r];
  f->of_bound[r] = f->speedup[r] / f->pipe_bound[r];
  f->async_eps[r] = c->part[P_ASYNC] ? run_async(b->graphrun, b->async_file, c->async_steps) : NAN;
  printf("round %d: all-reduce %.2f / %.2f GB/s (Gloo %.2f / %.2f); sync x2 %.0f examples/s "
         "(DDP %.0f, one worker %.0f; floor pair x%.2f, fused x%.2f, without exchange x%.2f); "
         "async %.0f; "
         "pipeline M=1 %.2f ms, M=4 %.2f ms (bound x%.2f)\n",
         r, f->ar_gbps[0][r], f->ar_gbps[1][r], f->gloo_gbps[0][r], f->gloo_gbps[1][r],
         f->sync_eps[r], f->ddp_eps[r], f->one_eps[r], f->floor_sc[r], f->fused_sc[r],
         f->nocomm_sc[r], f->async_eps[r], f->mp_s[0][r] * 1e3, f->mp_s[1][r] * 1e3,
         f->pipe_bound[r]);
  fflush(stdout);
}

static void report(figures *f, int n) {
  printf("over %d rounds (PyTorch, then graphrun, in each):\n", n);
  range("all-reduce 4 MiB, graphrun", f->ar_gbps[0], n, "GB/s");
  range("all-reduce 4 MiB, Gloo", f->gloo_gbps[0], n, "GB/s");
  range("all-reduce 64 MiB, graphrun", f->ar_gbps[1], n, "GB/s");
  range("all-reduce 64 MiB, Gloo", f->gloo_gbps[1], n, "GB/s");
  range("sync MLP x2 (ring), graphrun", f->sync_eps, n, "examples/s");
  range("sync MLP x2, PyTorch DDP", f->ddp_eps, n, "examples/s");
  range("MLP one worker, graphrun", f->one_eps, n, "examples/s");
  range("async ps, 2 workers", f->async_eps, n, "examples/s");
  for (int r = 0; r < n; r++) f->mp_s[0][r] *= 1e3, f->mp_s[1][r] *= 1e3;
  range("model parallel M=1", f->mp_s[0], n, "ms/batch");
  range("model parallel M=4", f->mp_s[1], n, "ms/batch");
  range("allreduce_vs_gloo 4 MiB", f->ar_ratio[0], n, "");
  range("allreduce_vs_gloo 64 MiB", f->ar_ratio[1], n, "");
  range("sync_vs_ddp", f->ddp_ratio, n, "");
  range("sync_scaling", f->scaling, n, "");
  range("sync_floor (raw-socket pair)", f->floor_sc, n, "");
  range("sync_floor_fused (pair, fused update)", f->fused_sc, n, "");
  range("sync_nocomm (pair, no exchange)", f->nocomm_sc, n, "");
  range("pipeline_speedup", f->speedup, n, "");
  range("pipeline_bound (busier stage)", f->pipe_bound, n, "");
  range("sync_scaling / sync_floor", f->of_floor, n, "");
  range("pipeline_speedup / bound", f->of_bound, n, "");
  double avg = fmin(med(f->ar_ratio[0], n), med(f->ar_ratio[1], n));
  printf("parallel: allreduce_vs_gloo=%.2f sync_vs_ddp=%.2f sync_scaling=%.2f async_eps=%.0f "
         "pipeline_speedup=%.2f sync_floor=%.2f sync_nocomm=%.2f pipeline_bound=%.2f "
         "sync_floor_fused=%.2f of_floor=%.3f of_bound=%.3f\n",
         avg, med(f->ddp_ratio, n), med(f->scaling, n), med(f->async_eps, n), med(f->speedup, n),
         med(f->floor_sc, n), med(f->nocomm_sc, n), med(f->pipe_bound, n), med(f->fused_sc, n),
         med(f->of_floor, n), med(f->of_bound, n));
}

int main(int argc, char **argv) {
  static bench b;
  static figures f;
  b.c = parse_args(argc, argv);
  bench_start("bench_parallel", cleanup);
  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* for the commands this starts */
  setenv("OMP_NUM_THREADS", "1", 1);
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/bench_parallel.XXXXXX");
  if (!mkdtemp(tmp_dir)) bench_die("mkdtemp", NULL);
  find_graphrun(&b);
  bench_setup(&b);
  bool torch_ok = !b.c.smoke && (b.c.part[P_ALLREDUCE] || b.c.part[P_SYNC]);
  if (b.c.smoke) printf("smoke run: PyTorch (Gloo, DDP) not run; its figures print as nan\n");
  for (int r = 0; r < b.c.rounds; r++) bench_round(&b, r, &torch_ok, &f);
  report(&f, b.c.rounds);
  bench_teardown(&b);
  return 0;
}
