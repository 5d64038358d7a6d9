/* Allocation-failure injection, as SQLite's malloc tests do (docs/internals.md,
 * "Out-of-memory tests"). Scenarios: graph building with the C API (shape
 * inference, gradients, an optimizer); the DSL from a file, from inline text
 * (def, scope, while, cond, minimize) and with an import; session creation
 * and two training steps on one device, on a control-flow program, on two
 * devices (partitioning, send/recv) and with a while loop split over two
 * devices (partitioned control loops); checkpoint save and restore into a
 * file in a temporary directory; and the loop frames of a graph nested 12
 * deep, by both rules (core/frames.h). Each runs again and again with its Nth
 * allocation failing, N = 1, 2, ... until a run sees no injected failure,
 * twice: failing only the Nth allocation (a transient failure), then every
 * allocation from the Nth on (memory stays short). At every N the calls
 * under test must return GR_ERR_RESOURCE_EXHAUSTED, or succeed with the
 * result of the run without failures (some paths fall back when memory is
 * short), and never crash, assert or hang (a 60 s alarm per run); and the
 * count of live allocations must return to where it was before the run.
 * In the sanitizer build LeakSanitizer checks the same at exit, with the
 * allocating stack of anything left.
 *
 * How: this program is linked with -Wl,--wrap=malloc,calloc,... (see
 * tests/unit/CMakeLists.txt), so every allocation of the engine's code (the
 * static library graphrun) and of this file goes through the __wrap_
 * functions below, which count calls and fail the Nth when armed. The real
 * allocator behind __real_malloc is libc's, or ASan's interceptor in the
 * sanitizer build. Not covered: allocations made inside shared libraries
 * (SQLite, libc's own such as realpath and stdio, OpenBLAS, msgpack,
 * libevent, jansson), and big arena chunks and graph pages, which come from
 * mmap (core/arena.c). Setup and teardown of each scenario run unarmed.
 * With two devices the allocations of two threads interleave, so which
 * allocation is the Nth varies a little from run to run.
 *
 * Every N is tried (no stride): the scenarios make 24 to about 950 counted
 * allocations each, and the whole program takes about 5 s in the release
 * build and 15 s under ASan on a shared 2-core machine.
 *
 * Knobs: GR_TEST_CASE=test_session_run runs one scenario; GR_ALLOC_FAIL_AT=N
 * runs only N (to reproduce one report); GR_ALLOC_FAIL_STRIDE=K tries every
 * Kth N only; GR_ALLOC_FAIL_TRAP=1 raises SIGTRAP at the first failing
 * allocation (run under gdb to see who made it). A crash prints the scenario
 * and N before the signal ends the process. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

/* ---- the allocator wrappers -------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

static atomic_long alloc_calls; /* allocation calls since arming */
static atomic_long fail_at;     /* 0: no failure; N: the Nth call fails */
static atomic_int persistent;   /* 1: every call from the Nth on fails */
static atomic_long injected;    /* failures injected since arming */
static atomic_long live;        /* successful allocations minus frees of non-NULL pointers */
static int trap_on_failure;     /* GR_ALLOC_FAIL_TRAP set: SIGTRAP at the first injected failure */

/* True when this allocation is the one to fail. */
static int should_fail(void) {
  long at = atomic_load(&fail_at);
  if (!at) return 0;
  long n = atomic_fetch_add(&alloc_calls, 1) + 1;
  if (n < at || (n > at && !atomic_load(&persistent))) return 0;
  if (atomic_fetch_add(&injected, 1) == 0 && trap_on_failure) raise(SIGTRAP); /* for gdb */
  return 1;
}

static void *counted(void *p) {
  if (p) atomic_fetch_add(&live, 1);
  return p;
}

void *__wrap_malloc(size_t n) {
  if (should_fail()) return errno = ENOMEM, NULL;
  return counted(__real_malloc(n));
}

void *__wrap_calloc(size_t n, size_t size) {
  if (should_fail()) return errno = ENOMEM, NULL;
  return counted(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t n) {
  if (should_fail()) return errno = ENOMEM, NULL;
  void *q = __real_realloc(p, n);
  if (!p) counted(q);
  return q;
}

void __wrap_free(void *p) {
  if (p) atomic_fetch_sub(&live, 1);
  __real_free(p);
}

char *__wrap_strdup(const char *s) {
  if (should_fail()) return errno = ENOMEM, NULL;
  return counted(__real_strdup(s));
}

char *__wrap_strndup(const char *s, size_t n) {
  if (should_fail()) return errno = ENOMEM, NULL;
  return counted(__real_strndup(s, n));
}

int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  if (should_fail()) return ENOMEM;
  int r = __real_posix_memalign(p, align, n);
  if (r == 0) counted(*p);
  return r;
}

void *__wrap_aligned_alloc(size_t align, size_t n) {
  if (should_fail()) return errno = ENOMEM, NULL;
  return counted(__real_aligned_alloc(align, n));
}

static void arm(long n) {
  atomic_store(&alloc_calls, 0);
  atomic_store(&injected, 0);
  atomic_store(&fail_at, n ? n : LONG_MAX);
}

static void disarm(void) {
  atomic_store(&fail_at, 0);
}

/* ---- the driver ------------------------------------------------------------------ */

/* A scenario: setup and teardown run unarmed around body, which runs armed
 * and returns the status of the API calls under test; check (unarmed) looks
 * at the result of a body that returned GR_OK. */
typedef struct scenario {
  const char *name;
  void (*setup)(void *ctx);
  gr_status (*body)(void *ctx, gr_error *err);
  int (*check)(void *ctx); /* 1: the result is right */
  void (*teardown)(void *ctx);
} scenario;

/* A status besides GR_ERR_RESOURCE_EXHAUSTED that an injected failure may
 * give in the scenario running (GR_OK: none). */
static gr_status also_ok;

static const char *volatile current_name = "";
static volatile long current_n;

static void on_crash(int sig) {
  char buf[160];
  int len = snprintf(buf, sizeof buf,
                     "\ntest_alloc_failures: signal %d in scenario %s, allocation %ld failing\n",
                     sig, current_name, current_n);
  if (len > 0) (void)!write(2, buf, (size_t)len);
  signal(sig, SIG_DFL);
  raise(sig);
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? atol(v) : dflt;
}

/* What one scenario's runs came to. */
typedef struct tally {
  long tried, recovered, failed; /* recovered: succeeded (rightly) despite a failure */
} tally;

static const char *mode_name(void) {
  return atomic_load(&persistent) ? "from allocation" : "allocation";
}

/* One run with allocation n failing (0: none); returns how many allocations
 * the body made, or -1 after reporting a failed check. */
static long run_once(const scenario *sc, void *ctx, long n, tally *t) {
  gr_error err;
  gr_error_clear(&err);
  long before = atomic_load(&live);
  current_n = n;
  alarm(60); /* a run that hangs (a lost wake-up) fails the test, naming n */
  sc->setup(ctx);
  arm(n);
  gr_status st = sc->body(ctx, &err);
  disarm();
  long calls = atomic_load(&alloc_calls), hit = atomic_load(&injected);
  const char *mode = mode_name();
  int ok = 1;
  if (st == GR_OK) {
    if (!sc->check(ctx)) {
      fprintf(stderr, "%s: %s %ld failing: success with a wrong result\n", sc->name, mode, n);
      ok = 0;
    } else if (hit) {
      t->recovered++;
    }
  } else if (!hit) {
    fprintf(stderr, "%s: %s %ld failing (not reached): %s: %s\n", sc->name, mode, n,
            gr_status_name(st), err.msg);
    ok = 0;
  } else if (st != GR_ERR_RESOURCE_EXHAUSTED && (also_ok == GR_OK || st != also_ok)) {
    fprintf(stderr, "%s: %s %ld failing: %s (not resource exhausted): %s\n", sc->name, mode, n,
            gr_status_name(st), err.msg);
    ok = 0;
  }
  sc->teardown(ctx);
  alarm(0);
  long after = atomic_load(&live);
  if (after != before) {
    fprintf(stderr, "%s: %s %ld failing: %ld allocations leaked (%s)\n", sc->name, mode, n,
            after - before, st == GR_OK ? "ok" : err.msg);
    ok = 0;
  }
  if (!ok) t->failed++;
  return ok ? calls : -1;
}

/* Fails allocation 1, 2, ... (only the Nth, or every one from the Nth on)
 * until a run makes fewer than N allocations. */
static void sweep(const scenario *sc, void *ctx, int from_n_on, long total) {
  atomic_store(&persistent, from_n_on);
  long only = env_long("GR_ALLOC_FAIL_AT", 0), stride = env_long("GR_ALLOC_FAIL_STRIDE", 1);
  if (stride < 1) stride = 1;
  tally t = {0};
  for (long n = only ? only : 1; t.failed < 10; n += stride) {
    run_once(sc, ctx, n, &t);
    t.tried++;
    if (atomic_load(&injected) == 0 || only) break; /* the run made fewer than n allocations */
  }
  atomic_store(&persistent, 0);
  printf("%s: %ld allocations; failing %s N: %ld runs, %ld errors, %ld recovered, %ld bad\n",
         sc->name, total, from_n_on ? "every one from" : "the", t.tried,
         t.tried - t.recovered - t.failed - 1, t.recovered, t.failed);
  GR_CHECK_MSG(t.failed == 0, "%s: %ld bad runs", sc->name, t.failed);
}

static void run_scenario(const scenario *sc, void *ctx) {
  current_name = sc->name;
  tally t = {0};
  /* unarmed first: warms up lazily made globals (op registry, thread pools) */
  long total = run_once(sc, ctx, 0, &t);
  GR_CHECK_MSG(total >= 0, "%s fails without injected failures", sc->name);
  if (total < 0) return;
  sweep(sc, ctx, 0, total);
  sweep(sc, ctx, 1, total);
}

static void nop(void *ctx) {
  (void)ctx;
}

/* ---- the model every scenario builds or runs ------------------------------------- */

/* loss = mean(relu(x @ w + b) * scale)^2 with momentum; w and b on device
 * `vars_device` when not NULL. */
typedef struct model {
  gr_graph *g;
  gr_output scale, w, b, loss, train;
} model;

static gr_status build_model(model *m, const char *vars_device, gr_error *err) {
  m->g = gr_graph_new();
  if (!m->g) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_graph *g = m->g;
  gr_output x = gr_random_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){8, 3}), -1, 1, 7);
  m->scale = gr_placeholder(g, "scale", GR_F32, gr_shape_make(0, NULL));
  if (vars_device) gr_graph_push_device_scope(g, vars_device);
  gr_graph_push_name_scope(g, "layer");
  gr_output w0 = gr_random_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){3, 2}), -1, 1, 1);
  m->w = gr_variable(g, "w", w0);
  m->b = gr_variable(g, "b", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){2})));
  gr_graph_pop_name_scope(g);
  if (vars_device) gr_graph_pop_device_scope(g);
  gr_output h = gr_relu(g, gr_add(g, gr_matmul(g, x, m->w, false, false), m->b));
  m->loss = gr_reduce_mean(g, gr_square(g, gr_mul(g, h, m->scale)), NULL, 0, false);
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.1, .momentum = 0.9};
  m->train = gr_minimize(g, &opt, m->loss, NULL, 0);
  const gr_error *ge = gr_graph_error(g);
  if (ge) return gr_error_set(err, ge->code, "%s", ge->msg);
  return GR_OK;
}

/* ---- graph building with the C API --------------------------------------------- */

typedef struct build_ctx {
  model m;
  int want_nodes; /* 0 until the unarmed run */
} build_ctx;

static gr_status build_body(void *c, gr_error *err) {
  build_ctx *b = c;
  return build_model(&b->m, NULL, err);
}

static int build_check(void *c) {
  build_ctx *b = c;
  int n = gr_graph_num_nodes(b->m.g);
  if (!b->want_nodes) b->want_nodes = n;
  return n == b->want_nodes && b->m.train.node;
}

static void build_teardown(void *c) {
  build_ctx *b = c;
  gr_graph_free(b->m.g);
  b->m.g = NULL;
}

static void test_graph_build(void) {
  build_ctx ctx = {0};
  run_scenario(&(scenario){"graph_build", nop, build_body, build_check, build_teardown}, &ctx);
}

/* ---- the DSL ----------------------------------------------------------------------- */

typedef struct dsl_ctx {
  const char *path, *text; /* a file, or text in memory */
  const char *bound;       /* a name the program binds */
  gr_graph *g;
  gr_dsl_program *p;
  int want_nodes;
} dsl_ctx;

static const char dsl_text[] = "def dense(x, n) {\n"
                               "  w = variable(ones([dim(x, 1), n]) / 16)\n"
                               "  b = variable(zeros([n]))\n"
                               "  return relu(x @ w + b)\n"
                               "}\n"
                               "x = ones([4, 16]) * 2\n"
                               "scope \"net\" { h = dense(dense(x, 8), 4) }\n"
                               "i, total = while (i = 0, total = 0; i < 5) {\n"
                               "  i = i + 1\n"
                               "  total = total + i\n"
                               "}\n"
                               "y = cond(total > 10) { reduce_sum(h) } else { -reduce_sum(h) }\n"
                               "loss = reduce_mean(square(h))\n"
                               "train = minimize(loss, adam(0.01))\n"
                               "fetch loss, y\n"
                               "target train\n";

static gr_status dsl_body(void *c, gr_error *err) {
  dsl_ctx *d = c;
  d->g = gr_graph_new();
  if (!d->g) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (d->path) return gr_dsl_load_file(d->path, d->g, NULL, &d->p, err);
  return gr_dsl_load_string("inline.gr", d->text, d->g, NULL, &d->p, err);
}

static int dsl_check(void *c) {
  dsl_ctx *d = c;
  int n = gr_graph_num_nodes(d->g);
  if (!d->want_nodes) d->want_nodes = n;
  gr_output o;
  return n == d->want_nodes && gr_dsl_lookup(d->p, d->bound, &o) && gr_dsl_num_fetches(d->p) > 0;
}

static void dsl_teardown(void *c) {
  dsl_ctx *d = c;
  gr_dsl_program_free(d->p);
  gr_graph_free(d->g);
  d->p = NULL, d->g = NULL;
}

static void test_dsl_file(void) {
  dsl_ctx ctx = {.path = GR_SOURCE_DIR "/examples/linear_regression.gr", .bound = "train"};
  run_scenario(&(scenario){"dsl_file", nop, dsl_body, dsl_check, dsl_teardown}, &ctx);
}

static void test_dsl_inline(void) {
  dsl_ctx ctx = {.text = dsl_text, .bound = "train"};
  run_scenario(&(scenario){"dsl_inline", nop, dsl_body, dsl_check, dsl_teardown}, &ctx);
}

/* defs.gr imports layers.gr. */
static void test_dsl_import(void) {
  dsl_ctx ctx = {.path = GR_SOURCE_DIR "/examples/defs.gr", .bound = "logits"};
  run_scenario(&(scenario){"dsl_import", nop, dsl_body, dsl_check, dsl_teardown}, &ctx);
}

/* ---- session creation and run, on one device or partitioned over two --------------- */

/* Two training steps in a new session, fetching the loss of each; what both
 * session scenarios share. */
typedef struct two_steps {
  gr_session *s;
  gr_tensor out[2];
  double want[2]; /* the losses of the unfailed run */
  int have_want;
} two_steps;

static gr_status two_steps_run(two_steps *t, gr_graph *g, int devices, const gr_feed *feeds,
                               int nfeeds, gr_output loss, gr_output train, gr_error *err) {
  gr_session_options o = {.inter_op_threads = 1, .num_devices = devices};
  memset(t->out, 0, sizeof t->out);
  t->s = gr_session_new(g, &o, err);
  if (!t->s) return err->code;
  for (int step = 0; step < 2; step++)
    GR_TRY(gr_session_run(t->s, feeds, nfeeds, &loss, 1, &t->out[step], &train, 1, err));
  return GR_OK;
}

/* The losses equal those of the unfailed run (the first one checked). */
static int two_steps_check(two_steps *t) {
  double got[2] = {gr_tensor_get_f64(&t->out[0], 0), gr_tensor_get_f64(&t->out[1], 0)};
  if (!t->have_want) memcpy(t->want, got, sizeof got), t->have_want = 1;
  return got[0] == t->want[0] && got[1] == t->want[1];
}

static void two_steps_free(two_steps *t) {
  gr_tensor_release(&t->out[0]), gr_tensor_release(&t->out[1]);
  gr_session_free(t->s);
  t->s = NULL;
}

typedef struct run_ctx {
  const char *vars_device; /* NULL: one device */
  int devices;
  model m;
  gr_tensor scale;
  two_steps steps;
} run_ctx;

static void run_setup(void *c) {
  run_ctx *r = c;
  gr_error err;
  GR_CHECK_OK(build_model(&r->m, r->vars_device, &err), err);
  r->scale = gr_tensor_scalar_f32(2);
}

/* x is new each step (random ops are functions of the step). */
static gr_status run_body(void *c, gr_error *err) {
  run_ctx *r = c;
  gr_feed feed = {r->m.scale, &r->scale};
  return two_steps_run(&r->steps, r->m.g, r->devices, &feed, 1, r->m.loss, r->m.train, err);
}

static int run_check(void *c) {
  return two_steps_check(&((run_ctx *)c)->steps);
}

static void run_teardown(void *c) {
  run_ctx *r = c;
  two_steps_free(&r->steps);
  gr_tensor_release(&r->scale);
  gr_graph_free(r->m.g);
  r->m.g = NULL;
}

static void test_session_run(void) {
  run_ctx ctx = {.devices = 1};
  run_scenario(&(scenario){"session_run", run_setup, run_body, run_check, run_teardown}, &ctx);
}

static void test_partitioned_run(void) {
  run_ctx ctx = {.devices = 2, .vars_device = "/device:CPU:1"};
  run_scenario(&(scenario){"partitioned_run", run_setup, run_body, run_check, run_teardown}, &ctx);
}

/* ---- running DSL programs: control flow, and a loop partitioned over two devices ----- */

static const char dsl_loop_text[] = "device \"/device:CPU:1\" { w = variable(ones([4, 4]) / 8) }\n"
                                    "x = ones([4, 4]) @ w\n"
                                    "i, acc = while (i = 0, acc = x; i < 3) {\n"
                                    "  i = i + 1\n"
                                    "  device \"/device:CPU:1\" { acc = acc * 0.5 + 1 }\n"
                                    "}\n"
                                    "loss = reduce_mean(square(acc))\n"
                                    "train = minimize(loss, sgd(0.01))\n"
                                    "fetch loss\n"
                                    "target train\n";

typedef struct dsl_run_ctx {
  const char *text;
  int devices;
  gr_graph *g;
  gr_dsl_program *p;
  gr_output loss, train;
  two_steps steps;
} dsl_run_ctx;

static void dsl_run_setup(void *c) {
  dsl_run_ctx *r = c;
  gr_error err;
  r->g = gr_graph_new();
  GR_CHECK_OK(gr_dsl_load_string("run.gr", r->text, r->g, NULL, &r->p, &err), err);
  GR_CHECK(gr_dsl_lookup(r->p, "loss", &r->loss) && gr_dsl_lookup(r->p, "train", &r->train));
}

static gr_status dsl_run_body(void *c, gr_error *err) {
  dsl_run_ctx *r = c;
  return two_steps_run(&r->steps, r->g, r->devices, NULL, 0, r->loss, r->train, err);
}

/* These programs' inputs are constant: the loss also decreases. */
static int dsl_run_check(void *c) {
  dsl_run_ctx *r = c;
  return two_steps_check(&r->steps) && r->steps.want[1] < r->steps.want[0];
}

static void dsl_run_teardown(void *c) {
  dsl_run_ctx *r = c;
  two_steps_free(&r->steps);
  gr_dsl_program_free(r->p);
  gr_graph_free(r->g);
  r->p = NULL, r->g = NULL;
}

static void test_control_flow_run(void) {
  dsl_run_ctx ctx = {.text = dsl_text, .devices = 1};
  run_scenario(
      &(scenario){"control_flow_run", dsl_run_setup, dsl_run_body, dsl_run_check, dsl_run_teardown},
      &ctx);
}

static void test_partitioned_loop_run(void) {
  dsl_run_ctx ctx = {.text = dsl_loop_text, .devices = 2};
  run_scenario(&(scenario){"partitioned_loop_run", dsl_run_setup, dsl_run_body, dsl_run_check,
                           dsl_run_teardown},
               &ctx);
}

/* ---- loop frames (core/frames.h), by both rules ------------------------------- */

enum { FRAMES_DEEP = 12 }; /* past the tree's first capacity (8 frames) */

typedef struct frames_ctx {
  gr_graph *g;
  int *order, n, deepest; /* deepest: a node in the innermost frame */
  gr_frames fr[2];
} frames_ctx;

/* FRAMES_DEEP nested loops (an enter each, an exit each on the way out) and
 * a node inside the innermost placed by a control input only. */
static void frames_setup(void *c) {
  frames_ctx *f = c;
  f->g = gr_graph_new();
  gr_output v = gr_const_i64(f->g, 1);
  char name[16];
  for (int k = 0; k < FRAMES_DEEP; k++) {
    snprintf(name, sizeof name, "f%d", k);
    gr_attr a = gr_attr_string("frame_name", name);
    v = gr_graph_add_node(f->g, &gr_op_enter, NULL, &v, 1, &a, 1);
  }
  gr_output inner = gr_const_i64(f->g, 2);
  GR_CHECK(gr_graph_add_control_input(f->g, inner.node, v.node) == GR_OK);
  f->deepest = inner.node->id;
  for (int k = 0; k < FRAMES_DEEP; k++)
    v = gr_graph_add_node(f->g, &gr_op_exit, NULL, &v, 1, NULL, 0);
  gr_identity(f->g, v);
  GR_CHECK(gr_graph_error(f->g) == NULL);
  f->n = gr_graph_num_nodes(f->g);
  f->order = gr_alloc_array((size_t)f->n, sizeof *f->order);
  GR_CHECK(f->order && gr_graph_topo_order(f->g, f->order) == f->n);
}

static gr_status frames_body(void *c, gr_error *err) {
  frames_ctx *f = c;
  for (int r = 0; r < 2; r++) {
    gr_status st =
        gr_frames_init(&f->fr[r], r ? GR_FRAMES_DEEPEST_INPUT : GR_FRAMES_FIRST_INPUT, f->n);
    if (st == GR_OK) st = gr_frames_assign_graph(&f->fr[r], f->g, f->order);
    if (st != GR_OK) return gr_error_set(err, st, "out of memory");
  }
  return GR_OK;
}

static int frames_check(void *c) {
  frames_ctx *f = c;
  int ok = 1;
  for (int r = 0; r < 2; r++) {
    const gr_frames *fr = &f->fr[r];
    ok &= fr->num_frames == FRAMES_DEEP + 1 &&
          gr_frames_get_depth(fr, fr->of_node[f->deepest]) == FRAMES_DEEP &&
          fr->of_node[f->n - 1] == 0;
  }
  return ok;
}

static void frames_teardown(void *c) {
  frames_ctx *f = c;
  gr_frames_free(&f->fr[0]), gr_frames_free(&f->fr[1]);
  free(f->order);
  gr_graph_free(f->g);
  f->order = NULL, f->g = NULL;
}

static void test_frames(void) {
  frames_ctx ctx = {0};
  run_scenario(&(scenario){"frames", frames_setup, frames_body, frames_check, frames_teardown},
               &ctx);
}

/* ---- checkpoint save and restore ------------------------------------------------- */

typedef struct ckpt_ctx {
  char path[256];
  model m;
  gr_session *trained, *fresh;
  int64_t step;
} ckpt_ctx;

static void ckpt_setup(void *c) {
  ckpt_ctx *k = c;
  gr_error err;
  GR_CHECK_OK(build_model(&k->m, NULL, &err), err);
  gr_session_options o = {.inter_op_threads = 1};
  k->trained = gr_session_new(k->m.g, &o, &err);
  k->fresh = gr_session_new(k->m.g, &o, &err);
  GR_CHECK(k->trained && k->fresh);
  gr_tensor scale = gr_tensor_scalar_f32(1);
  gr_feed feed = {k->m.scale, &scale};
  GR_CHECK_OK(gr_session_run(k->trained, &feed, 1, NULL, 0, NULL, &k->m.train, 1, &err), err);
  gr_tensor_release(&scale);
  GR_CHECK_OK(gr_session_init_variables(k->fresh, &err), err);
  k->step = -1;
}

static gr_status ckpt_body(void *c, gr_error *err) {
  ckpt_ctx *k = c;
  gr_ckpt *ck = NULL;
  GR_TRY(gr_ckpt_open(k->path, NULL, &ck, err));
  gr_status st = gr_ckpt_save_session(ck, k->trained, k->m.g, NULL, err);
  if (st == GR_OK) st = gr_ckpt_restore_latest(ck, k->fresh, k->m.g, &k->step, err);
  gr_ckpt_close(ck);
  return st;
}

/* The restored variables equal the trained ones bit for bit. */
static int ckpt_check(void *c) {
  ckpt_ctx *k = c;
  gr_error err;
  gr_tensor a[2] = {0}, b[2] = {0};
  gr_output vars[2] = {k->m.w, k->m.b};
  int ok = k->step == gr_session_step(k->trained) &&
           gr_session_run(k->trained, NULL, 0, vars, 2, a, NULL, 0, &err) == GR_OK &&
           gr_session_run(k->fresh, NULL, 0, vars, 2, b, NULL, 0, &err) == GR_OK &&
           gt_equal(&a[0], &b[0]) && gt_equal(&a[1], &b[1]);
  for (int i = 0; i < 2; i++) gr_tensor_release(&a[i]), gr_tensor_release(&b[i]);
  return ok;
}

static void ckpt_teardown(void *c) {
  ckpt_ctx *k = c;
  gr_session_free(k->trained), gr_session_free(k->fresh);
  gr_graph_free(k->m.g);
  k->trained = k->fresh = NULL, k->m.g = NULL;
  char journal[300];
  snprintf(journal, sizeof journal, "%s-journal", k->path);
  unlink(k->path), unlink(journal);
}

static void test_checkpoint(void) {
  ckpt_ctx ctx = {0};
  char dir[] = "/tmp/gr_alloc_failures_XXXXXX";
  GR_CHECK(mkdtemp(dir));
  snprintf(ctx.path, sizeof ctx.path, "%s/model.ckpt", dir);
  run_scenario(&(scenario){"checkpoint", ckpt_setup, ckpt_body, ckpt_check, ckpt_teardown}, &ctx);
  rmdir(dir);
}

/* ---- a step on a server task ------------------------------------------------------ */

/* A server and a master in this process, a graph registered by an unarmed
 * first run (x * x + 1 on the task, x fed); the body is one more step,
 * so the failures land in the RUN's path: the server's taking of the
 * request, the step, its answer, and the master's side. The master has no
 * step timeout: a request the server never answers would hang the run
 * (the alarm then fails the test). The server answers every request, with
 * an error when memory is short, or, when not even that can be sent,
 * closes the connection, which the master reports as the task lost
 * (GR_ERR_UNAVAILABLE). */
typedef struct server_ctx {
  gr_server *srv;
  gr_master *m;
  gr_graph *g;
  gr_session *s;
  gr_output x, y;
  gr_tensor xv, out;
} server_ctx;

static void server_setup(void *c) {
  server_ctx *k = c;
  gr_error err;
  static const char *const secret = "alloc-failures-secret-0123456789", *const cluster = "alloc";
  gr_server_options so = {.job = "worker",
                          .task = 0,
                          .secret = secret,
                          .cluster_id = cluster,
                          .inter_op_threads = 1,
                          .quiet = true};
  GR_CHECK_OK(gr_server_new(&so, &k->srv, &err), err);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", k->srv ? gr_server_port(k->srv) : 1);
  const char *addrs[] = {addr};
  gr_master_options mo = {
      .num_tasks = 1, .addresses = addrs, .secret = secret, .cluster_id = cluster};
  GR_CHECK_OK(gr_master_new(&mo, &k->m, &err), err);
  k->g = gr_graph_new();
  gr_graph_push_device_scope(k->g, "/job:worker/task:0");
  k->x = gr_placeholder(k->g, "x", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  k->y = gr_add(k->g, gr_mul(k->g, k->x, k->x), gr_const_f32(k->g, 1));
  gr_graph_pop_device_scope(k->g);
  k->s = k->m ? gr_master_session_new(k->m, k->g, NULL, &err) : NULL;
  GR_CHECK_MSG(k->s != NULL, "%s", err.msg);
  GR_CHECK_OK(gr_tensor_from_data(&k->xv, GR_F32, &(gr_shape){1, {3}}, (float[]){1, 2, 3}, &err),
              err);
  gr_feed f = {k->x, &k->xv};
  if (k->s) GR_CHECK_OK(gr_session_run(k->s, &f, 1, &k->y, 1, &k->out, NULL, 0, &err), err);
  gr_tensor_release(&k->out);
}

static gr_status server_body(void *c, gr_error *err) {
  server_ctx *k = c;
  gr_feed f = {k->x, &k->xv};
  return gr_session_run(k->s, &f, 1, &k->y, 1, &k->out, NULL, 0, err);
}

static int server_check(void *c) {
  server_ctx *k = c;
  return gr_tensor_get_f64(&k->out, 0) == 2 && gr_tensor_get_f64(&k->out, 1) == 5 &&
         gr_tensor_get_f64(&k->out, 2) == 10;
}

static void server_teardown(void *c) {
  server_ctx *k = c;
  gr_tensor_release(&k->out);
  gr_tensor_release(&k->xv);
  gr_session_free(k->s);
  gr_graph_free(k->g);
  gr_master_free(k->m);
  gr_server_free(k->srv);
  *k = (server_ctx){0};
}

static void test_server_run(void) {
  server_ctx ctx = {0};
  also_ok = GR_ERR_UNAVAILABLE; /* the connection closed */
  run_scenario(&(scenario){"server_run", server_setup, server_body, server_check, server_teardown},
               &ctx);
  also_ok = GR_OK;
}

/* gr_alloc_array and gr_realloc_array: a count times a size that does not
 * fit in a size_t is refused without calling the allocator (and leaves a
 * reallocated block as it was); otherwise they call malloc and realloc,
 * whose injected failures they return. */
static void test_array_overflow(void) {
  int *p = gr_alloc_array(4, sizeof *p);
  GR_CHECK(p != NULL);
  if (!p) return;
  p[3] = 7;
  arm(0);
  GR_CHECK(gr_alloc_array(SIZE_MAX / 2 + 1, 2) == NULL);
  GR_CHECK(gr_alloc_array(2, SIZE_MAX) == NULL);
  GR_CHECK(gr_realloc_array(p, SIZE_MAX / sizeof *p + 1, sizeof *p) == NULL);
  GR_CHECK_EQ_INT(atomic_load(&alloc_calls), 0);
  GR_CHECK_EQ_INT(p[3], 7);
  arm(1);
  GR_CHECK(gr_realloc_array(p, 8, sizeof *p) == NULL); /* the injected failure */
  void *r = gr_alloc_array(4, 4);
  GR_CHECK(r != NULL);
  GR_CHECK_EQ_INT(atomic_load(&alloc_calls), 2);
  GR_CHECK_EQ_INT(atomic_load(&injected), 1);
  disarm();
  free(r);
  int *q = gr_realloc_array(p, 8, sizeof *p);
  GR_CHECK(q != NULL);
  if (q) GR_CHECK_EQ_INT(q[3], 7);
  free(q ? q : p);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  trap_on_failure = getenv("GR_ALLOC_FAIL_TRAP") != NULL;
  signal(SIGSEGV, on_crash), signal(SIGABRT, on_crash), signal(SIGBUS, on_crash);
  signal(SIGALRM, on_crash);
  gr_init();
  gr_buffer_pool_set_limit(
      0); /* every released buffer goes back to libc: the live count is exact */
  GR_RUN(test_array_overflow);
  GR_RUN(test_graph_build);
  GR_RUN(test_dsl_file);
  GR_RUN(test_dsl_inline);
  GR_RUN(test_dsl_import);
  GR_RUN(test_session_run);
  GR_RUN(test_control_flow_run);
  GR_RUN(test_partitioned_run);
  GR_RUN(test_partitioned_loop_run);
  GR_RUN(test_frames);
  GR_RUN(test_checkpoint);
  GR_RUN(test_server_run);
  return gr_test_finish();
}
