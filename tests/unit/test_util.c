#include "core/core_engine.h"
#include "test_util.h"

#include <limits.h>
#include "gr_dsl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

uint64_t gt_next(gt_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double gt_uniform(gt_rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(gt_next(r) >> 11) * (1.0 / 9007199254740992.0));
}

int64_t gt_int(gt_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(gt_next(r) % (uint64_t)(hi - lo + 1));
}

gr_shape gt_random_shape(gt_rng *r, int rank, int max_dim) {
  gr_shape s = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) s.dims[i] = gt_int(r, 1, max_dim);
  return s;
}

gr_tensor gt_random(gt_rng *r, gr_dtype dtype, gr_shape shape, double lo, double hi) {
  gr_tensor t;
  gr_error err;
  if (gr_tensor_alloc(&t, dtype, &shape, &err) != GR_OK) return gr_tensor_empty();
  int64_t n = gr_tensor_num_elements(&t);
  for (int64_t i = 0; i < n; i++) {
    double v = gt_uniform(r, lo, hi);
    if (dtype == GR_BOOL)
      v = gt_next(r) & 1;
    else if (gr_dtype_is_integer(dtype))
      v = floor(v + 0.5);
    gr_tensor_set_f64(&t, i, v);
  }
  return t;
}

gr_tensor gt_make(gr_dtype dtype, gr_shape shape, const double *values) {
  gr_tensor t;
  gr_error err;
  if (gr_tensor_alloc(&t, dtype, &shape, &err) != GR_OK) return gr_tensor_empty();
  int64_t n = gr_tensor_num_elements(&t);
  for (int64_t i = 0; i < n; i++) gr_tensor_set_f64(&t, i, values[i]);
  return t;
}

gr_tensor gt_zeros(gr_dtype dtype, gr_shape shape) {
  gr_tensor t;
  gr_error err;
  if (gr_tensor_alloc_zeros(&t, dtype, &shape, &err) != GR_OK) return gr_tensor_empty();
  return t;
}

/* Placeholders in0, in1, ... for the inputs (of shape ph[i], or the
 * input's own when ph is NULL), each fed its input. */
static void feed_placeholders(gr_graph *g, const gr_tensor *in, int n, const gr_shape *ph,
                              gr_output *p, gr_feed *feeds) {
  for (int i = 0; i < n && i < 16; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    p[i] = gr_placeholder(g, name, in[i].dtype, ph ? ph[i] : in[i].shape);
    feeds[i] = (gr_feed){p[i], &in[i]};
  }
}

gr_status gt_run_op(const char *op, const gr_tensor *inputs, int n, const gr_attr *attrs, int na,
                    gr_tensor *outs, int nout, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output in[16];
  gr_feed feeds[16];
  feed_placeholders(g, inputs, n, NULL, in, feeds);
  gr_output o = gr_op(g, op, NULL, in, n, attrs, na);
  gr_status s;
  if (gr_graph_error(g)) {
    if (err) *err = *gr_graph_error(g);
    s = gr_graph_error(g)->code;
    gr_graph_free(g);
    return s;
  }
  gr_output fetches[16];
  for (int i = 0; i < nout && i < 16; i++) fetches[i] = gr_output_at(o, i);
  gr_session_options opts = {.inter_op_threads = 1};
  gr_session *sess = gr_session_new(g, &opts, err);
  if (!sess) {
    gr_graph_free(g);
    return err ? err->code : GR_ERR_INTERNAL;
  }
  s = gr_session_run(sess, feeds, n, fetches, nout, outs, nout ? NULL : &o, nout ? 0 : 1, err);
  gr_session_free(sess);
  gr_graph_free(g);
  return s;
}

int64_t gt_get_int(const gr_tensor *t, int64_t i) {
  if (t->dtype == GR_I64) return ((const int64_t *)gr_tensor_data(t))[i];
  return gr_dtype_is_float(t->dtype) ? 0 : (int64_t)gr_tensor_get_f64(t, i);
}

void gt_set_wrapped(gr_tensor *t, int64_t i, uint64_t v) {
  switch (t->dtype) {
    case GR_I64:
      ((int64_t *)gr_tensor_data(t))[i] = (int64_t)v;
      break;
    case GR_I32:
      gr_tensor_set_f64(t, i, (int32_t)(uint32_t)v);
      break;
    case GR_U8:
      gr_tensor_set_f64(t, i, (uint8_t)v);
      break;
    case GR_BOOL:
      gr_tensor_set_f64(t, i, (double)(v & 1));
      break;
    default:
      break;
  }
}

gr_status gt_run1(const char *op, const gr_tensor *x, const gr_attr *a, int na, gr_tensor *out,
                  gr_error *err) {
  *out = gr_tensor_empty();
  gr_error_clear(err);
  return gt_run_op(op, x, 1, a, na, out, 1, err);
}

gr_status gt_run1_unknown(const char *op, const gr_tensor *x, bool rank_known, const gr_attr *a,
                          int na, gr_tensor *out, gr_error *err) {
  gr_shape s = gr_shape_unknown();
  if (rank_known) {
    s = x->shape;
    for (int i = 0; i < s.rank; i++) s.dims[i] = -1;
  }
  *out = gr_tensor_empty();
  gr_error_clear(err);
  return gt_run_op_fresh(op, x, 1, &s, a, na, 0, out, NULL, err);
}

/* A copy of x made inside the graph (x + 0, or x or false). */
static gr_output gt_fresh_copy(gr_graph *g, gr_output x, gr_dtype dt) {
  static const uint64_t zero = 0;
  gr_output z = gr_const_data(g, dt, gr_shape_scalar(), &zero);
  return dt == GR_BOOL ? gr_logical_or(g, x, z) : gr_add(g, x, z);
}

gr_status gt_run_op_fresh(const char *op, const gr_tensor *in, int n, const gr_shape *ph,
                          const gr_attr *at, int na, int fresh, gr_tensor *out, gr_shape *inferred,
                          gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output xs[16];
  gr_feed feeds[16];
  feed_placeholders(g, in, n, ph, xs, feeds);
  for (int i = 0; i < n && i < fresh && i < 16; i++) xs[i] = gt_fresh_copy(g, xs[i], in[i].dtype);
  gr_output o = gr_op(g, op, NULL, xs, n, at, na);
  gr_status s;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    s = err->code;
  } else {
    if (inferred) *inferred = o.node->out_shapes[o.index];
    gr_session *sess = gr_session_new(g, NULL, err);
    s = sess ? gr_session_run(sess, feeds, n, &o, 1, out, NULL, 0, err) : err->code;
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

gr_status gt_run_graph(gr_graph *g, const gr_output *fetches, int n, gr_tensor *outs,
                       gr_error *err) {
  gr_session *s = gr_session_new(g, NULL, err);
  if (!s) return err->code;
  gr_status st = gr_session_run(s, NULL, 0, fetches, n, outs, NULL, 0, err);
  gr_session_free(s);
  return st;
}

bool gt_op_fails(const char *op, const gr_tensor *in, int n, const gr_shape *ph, const gr_attr *at,
                 int na, gr_status code, const char *sub) {
  gr_error err = {0};
  gr_tensor out = gr_tensor_empty();
  gr_status s = gt_run_op_fresh(op, in, n, ph, at, na, 0, &out, NULL, &err);
  gr_tensor_release(&out);
  bool ok = true;
  if (s != code) {
    fprintf(stderr, "  %s: got %s (%s), want %s\n", op, gr_status_name(s), err.msg,
            gr_status_name(code));
    ok = false;
  }
  if (!strstr(err.msg, "node '") || (sub && !strstr(err.msg, sub))) {
    fprintf(stderr, "  %s: '%s' does not name the node or contain '%s'\n", op, err.msg,
            sub ? sub : "");
    ok = false;
  }
  return ok;
}

static int gt_blocked;
static void gt_cancel_block(void *arg) {
  gr_kernel_done(arg, GR_ERR_CANCELLED);
}
gr_status gt_block_kernel(gr_kernel_ctx *ctx) {
  __atomic_fetch_add(&gt_blocked, 1, __ATOMIC_SEQ_CST);
  gr_kernel_on_cancel(ctx, gt_cancel_block, ctx);
  return GR_OK;
}
int gt_block_started(void) {
  return __atomic_load_n(&gt_blocked, __ATOMIC_SEQ_CST);
}
void gt_block_reset(void) {
  __atomic_store_n(&gt_blocked, 0, __ATOMIC_SEQ_CST);
}

bool gt_build_failed(gr_output o, gr_graph *g, gr_status code, const char *text) {
  const gr_error *e = gr_graph_error(g);
  bool ok = o.node == NULL && e != NULL;
  if (!ok) fprintf(stderr, "  the build %s\n", e ? "made a node" : "did not fail");
  if (!e) return false;
  if (e->code != code || !strstr(e->msg, "node '") || !strstr(e->msg, text)) {
    fprintf(stderr, "  got %s: %s (want %s, naming the node and '%s')\n", gr_status_name(e->code),
            e->msg, gr_status_name(code), text);
    ok = false;
  }
  gr_graph_clear_error(g);
  return ok;
}

bool gt_inferred(gr_output o, gr_dtype dt, gr_shape want) {
  if (!o.node) {
    fprintf(stderr, "  no node\n");
    return false;
  }
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  const gr_shape *got = &o.node->out_shapes[o.index];
  gr_dtype got_dt = o.node->out_dtypes[o.index];
  bool ok = gr_shape_equal(got, &want) && got_dt == dt;
  if (!ok)
    fprintf(stderr, "  %s: %s %s vs %s %s\n", o.node->name, gr_dtype_name(got_dt),
            gr_shape_str(got, a), gr_dtype_name(dt), gr_shape_str(&want, b));
  return ok;
}

gr_shape gt_shape_in(gt_rng *r, int rank, int64_t lo, int64_t hi) {
  gr_shape s = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) s.dims[i] = gt_int(r, lo, hi);
  return s;
}

const char *gt_path_in(const char *dir, const char *name) {
  static char buf[8][128];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

static bool same_shape(const gr_tensor *got, const gr_tensor *want) {
  if (got->dtype != want->dtype) {
    fprintf(stderr, "  dtype %s, want %s\n", gr_dtype_name(got->dtype), gr_dtype_name(want->dtype));
    return false;
  }
  if (!gr_shape_equal(&got->shape, &want->shape)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    fprintf(stderr, "  shape %s, want %s\n", gr_shape_str(&got->shape, a),
            gr_shape_str(&want->shape, b));
    return false;
  }
  return true;
}

bool gt_near(const gr_tensor *got, const gr_tensor *want, double rtol, double atol) {
  if (!got->buf || !want->buf) {
    fprintf(stderr, "  empty tensor\n");
    return false;
  }
  if (!same_shape(got, want)) return false;
  int64_t n = gr_tensor_num_elements(got);
  for (int64_t i = 0; i < n; i++) {
    double a = gr_tensor_get_f64(got, i), b = gr_tensor_get_f64(want, i);
    if (isnan(a) && isnan(b)) continue;
    if (isinf(a) && isinf(b) && (a > 0) == (b > 0)) continue;
    if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
      fprintf(stderr, "  element %lld: got %.9g, want %.9g\n", (long long)i, a, b);
      return false;
    }
  }
  return true;
}

bool gt_equal(const gr_tensor *got, const gr_tensor *want) {
  return gt_near(got, want, 0, 0);
}

void gt_strides(const gr_shape *s, int64_t *strides) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    strides[i] = st;
    st *= s->dims[i];
  }
}

void gt_unravel(const gr_shape *s, int64_t flat, int64_t *idx) {
  for (int i = s->rank - 1; i >= 0; i--) {
    idx[i] = s->dims[i] ? flat % s->dims[i] : 0;
    flat = s->dims[i] ? flat / s->dims[i] : 0;
  }
}

gr_tensor gt_move_channels(const gr_tensor *t, bool to_nchw) {
  int r = t->shape.rank, from = to_nchw ? r - 1 : 1, to = to_nchw ? 1 : r - 1;
  gr_shape s = t->shape;
  int64_t perm[GR_MAX_RANK]; /* axis i of the result is axis perm[i] of t */
  for (int i = 0, j = 0; i < r; i++) perm[i] = i == to ? from : (j += j == from, j++);
  for (int i = 0; i < r; i++) s.dims[i] = t->shape.dims[perm[i]];
  gr_tensor out = gt_zeros(t->dtype, s);
  int64_t idx[GR_MAX_RANK], st[GR_MAX_RANK];
  gt_strides(&t->shape, st);
  size_t es = gr_dtype_size(t->dtype);
  for (int64_t e = 0; e < gr_tensor_num_elements(&out); e++) {
    gt_unravel(&s, e, idx);
    int64_t src = 0;
    for (int i = 0; i < r; i++) src += idx[i] * st[perm[i]];
    memcpy((char *)gr_tensor_data(&out) + (size_t)e * es,
           (const char *)gr_tensor_data(t) + (size_t)src * es, es);
  }
  return out;
}

long gt_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int gauge_now, gauge_max;
void gt_gauge_reset(void) {
  __atomic_store_n(&gauge_max, 0, __ATOMIC_SEQ_CST);
}
void gt_gauge_enter(void) {
  int now = __atomic_add_fetch(&gauge_now, 1, __ATOMIC_SEQ_CST);
  int m = __atomic_load_n(&gauge_max, __ATOMIC_SEQ_CST);
  while (now > m && !__atomic_compare_exchange_n(&gauge_max, &m, now, false, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {}
}
void gt_gauge_leave(void) {
  __atomic_sub_fetch(&gauge_now, 1, __ATOMIC_SEQ_CST);
}
int gt_gauge_max(void) {
  return __atomic_load_n(&gauge_max, __ATOMIC_SEQ_CST);
}

static gr_status busy_kernel(gr_kernel_ctx *ctx) {
  gt_gauge_enter();
  usleep(20000);
  gt_gauge_leave();
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
const gr_op_def gt_busy_op = GT_UNARY_OP_DEF("test_busy", busy_kernel, NULL, 0, GR_OP_EXPENSIVE);

static const char *pin_format = "/device:CPU:%d";
void gt_set_pin_format(const char *fmt) {
  pin_format = fmt ? fmt : "/device:CPU:%d";
}

void gt_pin(gr_graph *g, int k) {
  char spec[96];
  snprintf(spec, sizeof spec, pin_format, k);
  gr_graph_push_device_scope(g, spec);
}

const char *gt_device_name(int k) {
  static char names[8][GR_DEVICE_NAME_MAX];
  snprintf(names[k], sizeof names[k], "/job:localhost/replica:0/task:0/device:CPU:%d", k);
  return names[k];
}

void gt_spread(gr_graph *g, int devices) {
  int n = gr_graph_num_nodes(g);
  for (int i = 0; i < n; i++) {
    gr_node *nd = gr_graph_node(g, i);
    if (!nd->requested_device[0])
      nd->assigned_device = gr_graph_strdup(g, gt_device_name(i % devices));
  }
}

bool gt_run_on(gr_graph *g, int devices, const gr_feed *feeds, int nf, const gr_output *fetches,
               int n, gr_tensor *outs, int64_t *sends) {
  gr_error err;
  if (devices > 1) gt_spread(g, devices);
  gr_session *s = gt_session(g, devices, 2);
  bool ok = gr_session_run(s, feeds, nf, fetches, n, outs, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "run on %d device(s) failed: %s\n", devices, err.msg);
  if (sends) *sends = gr_session_last_transfers(s).sends;
  gr_session_free(s);
  return ok;
}

bool gt_bit_equal(const gr_tensor *got, const gr_tensor *want) {
  if (!got->buf || !want->buf) {
    fprintf(stderr, "  empty tensor\n");
    return false;
  }
  if (!same_shape(got, want)) return false;
  size_t size = gr_dtype_size(got->dtype);
  const unsigned char *a = gr_tensor_data(got), *b = gr_tensor_data(want);
  for (int64_t i = 0; i < gr_tensor_num_elements(got); i++)
    if (memcmp(a + (size_t)i * size, b + (size_t)i * size, size) != 0) {
      fprintf(stderr, "  element %lld: %.17g, want %.17g (bits differ)\n", (long long)i,
              gr_tensor_get_f64(got, i), gr_tensor_get_f64(want, i));
      return false;
    }
  return true;
}

gr_session *gt_session(gr_graph *g, int devices, int threads) {
  gr_error err;
  /* a step that deadlocks fails (naming what it waits for) instead of hanging the suite */
  gr_session_options o = {
      .num_devices = devices, .inter_op_threads = threads, .step_timeout_ms = 60000};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) {
    fprintf(stderr, "gt_session: %s\n", err.msg);
    abort();
  }
  return s;
}

int gt_cli_run(const char *dir, const char *args, char *out, size_t cap) {
  static char exe[PATH_MAX];
  if (!exe[0]) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (!slash) return -1;
    strcpy(slash, "/../../graphrun"); /* build/tests/unit/ -> build/graphrun */
  }
  size_t len = strlen(dir) + strlen(exe) + strlen(args) + 32;
  char *cmd = malloc(len);
  if (!cmd) return -1;
  snprintf(cmd, len, "cd '%s' && '%s' %s 2>&1", dir, exe, args);
  FILE *f = popen(cmd, "r");
  free(cmd);
  size_t n = 0;
  if (f)
    for (size_t k; n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, f)) > 0;) n += k;
  if (cap) out[n] = '\0';
  int st = f ? pclose(f) : -1;
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path); /* best effort: go on with the rest */
  return 0;
}

void gt_remove_tree(const char *path) {
  nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

bool gt_cli_expect(const char *dir, const char *args, int code, const char *want, char *out,
                   size_t cap) {
  int rc = gt_cli_run(dir, args, out, cap);
  bool ok = rc == code && (!want || strstr(out, want));
  if (!ok)
    fprintf(stderr, "  graphrun %s: exit %d (want %d)%s%s%s, output:\n%s\n", args, rc, code,
            want ? ", want '" : "", want ? want : "", want ? "'" : "", out);
  return ok;
}

void gt_write_file(const char *dir, const char *name, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "gt_write_file: cannot write %s\n", path);
    abort();
  }
}

bool gt_dsl_run(const char *src, const char *names, int devices, gr_tensor *outs) {
  return gt_dsl_run_on(src, names, devices, outs, NULL);
}

/* Looks up the comma-separated names of p into out (at most 16); false,
 * with the message printed, when one is missing. */
static bool lookup_names(gr_dsl_program *p, const char *names, gr_output *out, int *n) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", names);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && *n < 16;
       tok = strtok_r(NULL, ",", &save))
    if (!gr_dsl_lookup(p, tok, &out[(*n)++])) {
      fprintf(stderr, "no name %s\n", tok);
      return false;
    }
  return true;
}

bool gt_dsl_run_on(const char *src, const char *names, int devices, gr_tensor *outs,
                   int64_t *sends) {
  return gt_dsl_run_fed(src, names, devices, NULL, NULL, NULL, NULL, outs, sends);
}

bool gt_dsl_run_fed(const char *src, const char *names, int devices, const char *feeds,
                    const gr_tensor *values, gt_graph_fn *prepare, void *arg, gr_tensor *outs,
                    int64_t *sends) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  gr_output fetch[16], fed[16];
  gr_feed fd[16];
  int n = 0, nf = 0;
  bool ok = false;
  if (gr_dsl_load_string("t.gr", src, g, NULL, &p, &err) != GR_OK) {
    fprintf(stderr, "load failed: %s\n", err.msg);
    goto done;
  }
  if (!lookup_names(p, names, fetch, &n) || (feeds && !lookup_names(p, feeds, fed, &nf))) goto done;
  for (int i = 0; i < nf; i++) fd[i] = (gr_feed){fed[i], &values[i]};
  if (prepare) prepare(g, arg);
  ok = gt_run_on(g, devices, fd, nf, fetch, n, outs, sends);
done:
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return ok;
}

double gt_dsl_value(const char *src, const char *name) {
  gr_tensor t;
  if (!gt_dsl_run(src, name, 1, &t)) return NAN;
  double r = gr_tensor_get_f64(&t, 0);
  gr_tensor_release(&t);
  return r;
}

bool gt_dsl_error(const char *src, gr_error *err) {
  gr_graph *g = gr_graph_new();
  bool failed = gr_dsl_load_string("t.gr", src, g, NULL, NULL, err) != GR_OK;
  gr_graph_free(g);
  return failed;
}

bool gt_dsl_fails_with(const char *src, const char *text) {
  gr_error err = {0};
  if (gt_dsl_error(src, &err) && strstr(err.msg, text)) return true;
  fprintf(stderr, "'%s': want an error with '%s', got '%s'\n", src, text, err.msg);
  return false;
}

/* ---- gradient checks -------------------------------------------------------------- */

#define GT_GRAD_MAX_INPUTS 8

static gr_output gt_weighted_sum(gr_graph *g, gr_output y, gt_rng *r) {
  gr_tensor w = gt_random(r, y.node->out_dtypes[y.index], y.node->out_shapes[y.index], -1, 1);
  gr_output s = gr_reduce_sum(g, gr_mul(g, y, gr_const(g, &w)), NULL, 0, false);
  gr_tensor_release(&w);
  return s;
}

double gt_run_scalar(gr_session *s, const gr_feed *f, int n, gr_output o) {
  gr_tensor t;
  gr_error err;
  if (gr_session_run(s, f, n, &o, 1, &t, NULL, 0, &err) != GR_OK) {
    fprintf(stderr, "run: %s\n", err.msg);
    return NAN;
  }
  double v = gr_tensor_get_f64(&t, 0);
  gr_tensor_release(&t);
  return v;
}

bool gt_check_gradient(const char *what, gt_build_fn build, void *arg, const gr_tensor *inputs,
                       int n, int order, int max_elems, double tol) {
  return gt_check_gradient_on(what, build, arg, inputs, n, order, max_elems, tol, 1);
}

bool gt_check_gradient_on(const char *what, gt_build_fn build, void *arg, const gr_tensor *inputs,
                          int n, int order, int max_elems, double tol, int devices) {
  gt_rng r = {77};
  gr_graph *g = gr_graph_new();
  gr_output x[GT_GRAD_MAX_INPUTS], xs[GT_GRAD_MAX_INPUTS], dx[GT_GRAD_MAX_INPUTS];
  gr_tensor v[GT_GRAD_MAX_INPUTS];
  gr_feed f[GT_GRAD_MAX_INPUTS];
  int which[GT_GRAD_MAX_INPUTS], nx = 0;
  bool ok = false;
  gr_session *sess = NULL;
  gr_tensor grads[GT_GRAD_MAX_INPUTS];
  int ngrads = 0;
  for (int i = 0; i < n; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", i);
    x[i] = gr_placeholder(g, nm, inputs[i].dtype, inputs[i].shape);
    gr_error e;
    gr_tensor_copy(&inputs[i], &v[i], &e);
    f[i] = (gr_feed){x[i], &v[i]};
    if (inputs[i].dtype == GR_F64) which[nx] = i, xs[nx++] = x[i];
  }
  gr_output loss = gr_graph_error(g) ? (gr_output){0} : build(g, x, arg);
  if (loss.node) loss = gt_weighted_sum(g, loss, &r);
  for (int k = 1; k < order && loss.node; k++) {
    if (gr_gradients(g, &loss, 1, xs, nx, NULL, false, dx) != GR_OK) break;
    gr_output terms[GT_GRAD_MAX_INPUTS];
    for (int i = 0; i < nx; i++) terms[i] = gt_weighted_sum(g, dx[i], &r);
    loss = gr_add_n(g, terms, nx);
  }
  if (loss.node) gr_gradients(g, &loss, 1, xs, nx, NULL, false, dx);
  if (gr_graph_error(g)) {
    fprintf(stderr, "%s: build: %s\n", what, gr_graph_error(g)->msg);
    goto out;
  }
  gr_error err;
  if (devices > 1) gt_spread(g, devices);
  /* on several devices a deadlock fails the check (naming what it waits for), not hangs */
  gr_session_options o = {
      .num_devices = devices, .inter_op_threads = 1, .step_timeout_ms = devices > 1 ? 60000 : 0};
  sess = gr_session_new(g, &o, &err);
  if (!sess || gr_session_run(sess, f, n, dx, nx, grads, NULL, 0, &err) != GR_OK) {
    fprintf(stderr, "%s: run on %d device(s): %s\n", what, devices, err.msg);
    goto out;
  }
  ngrads = nx;
  ok = true;
  const double eps = 1e-6;
  for (int k = 0; k < nx && ok; k++) {
    gr_tensor *t = &v[which[k]];
    int64_t ne = gr_tensor_num_elements(t);
    int64_t step = max_elems > 0 && ne > max_elems ? (ne + max_elems - 1) / max_elems : 1;
    for (int64_t e = (int64_t)(gt_next(&r) % (uint64_t)step); e < ne && ok; e += step) {
      double x0 = gr_tensor_get_f64(t, e);
      gr_tensor_set_f64(t, e, x0 + eps);
      double lp = gt_run_scalar(sess, f, n, loss);
      gr_tensor_set_f64(t, e, x0 - eps);
      double lm = gt_run_scalar(sess, f, n, loss);
      gr_tensor_set_f64(t, e, x0);
      double num = (lp - lm) / (2 * eps), ana = gr_tensor_get_f64(&grads[k], e);
      if (!(fabs(num - ana) <= tol + tol * fabs(num))) {
        fprintf(stderr,
                "%s: order %d, %d device(s): d/d x%d[%lld]: analytic %.10g, numeric %.10g\n", what,
                order, devices, which[k], (long long)e, ana, num);
        ok = false;
      }
      /* spread, the first-order loss (fed inputs -> ops -> sum) must cross devices */
      if (ok && devices > 1 && order == 1 && gr_session_last_transfers(sess).sends == 0) {
        fprintf(stderr, "%s: order 1, %d devices: the loss crossed no device\n", what, devices);
        ok = false;
      }
    }
  }
out:
  for (int k = 0; k < ngrads; k++) gr_tensor_release(&grads[k]);
  gr_session_free(sess);
  for (int i = 0; i < n; i++) gr_tensor_release(&v[i]);
  gr_graph_free(g);
  return ok;
}

void gt_window_dim(int64_t in, int64_t k, int64_t s, int64_t d, const char *pad, int64_t before,
                   int64_t after, int64_t *out, int64_t *pad_before) {
  int64_t ek = (k - 1) * d + 1;
  if (strcmp(pad, "SAME") == 0) {
    *out = (in + s - 1) / s;
    int64_t t = (*out - 1) * s + ek - in;
    *pad_before = t > 0 ? t / 2 : 0;
  } else if (strcmp(pad, "VALID") == 0) {
    *out = (in - ek) / s + 1;
    *pad_before = 0;
  } else {
    *out = (in + before + after - ek) / s + 1;
    *pad_before = before;
  }
}
