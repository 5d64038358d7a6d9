/* graphrun calibrate: measures this machine and writes a cluster file for the
 * placer: a matmul op for flop/s, memcpy for memory and same-task bandwidth,
 * a chain of tiny ops for the per-op overhead, a loopback TCP socket pair for
 * same-host latency and bandwidth. Cross-host figures cannot be measured on
 * one machine: defaults are written (and said so on stderr). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "placer/gr_placer.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* flop/s of the matmul op (n x n, f32, one intra-op thread). */
static double measure_flops(int n, int reps, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_shape sh = {2, {n, n}};
  gr_output a = gr_placeholder(g, "a", GR_F32, sh), b = gr_placeholder(g, "b", GR_F32, sh);
  gr_output y = gr_matmul(g, a, b, false, false);
  gr_tensor ta, tb;
  double result = -1;
  if (gr_tensor_alloc(&ta, GR_F32, &sh, err) != GR_OK) goto out_graph;
  if (gr_tensor_alloc(&tb, GR_F32, &sh, err) != GR_OK) goto out_a;
  float *pa = gr_tensor_data(&ta), *pb = gr_tensor_data(&tb);
  for (int64_t i = 0; i < (int64_t)n * n; i++) pa[i] = (float)(i % 7) * 0.25f, pb[i] = 1.0f;
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1, .num_devices = 1};
  gr_session *s = gr_session_new(g, &o, err);
  if (!s) goto out_b;
  gr_feed feeds[2] = {{a, &ta}, {b, &tb}};
  double *t = gr_alloc_array((size_t)reps, sizeof(double));
  if (!t) goto out_s;
  int k;
  for (k = 0; k < reps; k++) {
    gr_tensor out;
    double t0 = cli_now();
    if (gr_session_run(s, feeds, 2, &y, 1, &out, NULL, 0, err) != GR_OK) break;
    t[k] = cli_now() - t0;
    gr_tensor_release(&out);
  }
  if (k == reps) result = 2.0 * n * n * (double)n / median(t, reps);
  free(t);
out_s:
  gr_session_free(s);
out_b:
  gr_tensor_release(&tb);
out_a:
  gr_tensor_release(&ta);
out_graph:
  gr_graph_free(g);
  return result;
}

/* Seconds per tiny op: a chain of neg on a scalar. */
static double measure_overhead(gr_error *err) {
  enum { N = 2000, REPS = 15 };
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_f32(g, 1);
  for (int i = 0; i < N; i++) x = gr_neg(g, x);
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1, .num_devices = 1};
  gr_session *s = gr_session_new(g, &o, err);
  double t[REPS], result = -1;
  int k = 0;
  if (s)
    for (k = 0; k < REPS; k++) {
      gr_tensor out;
      double t0 = cli_now();
      if (gr_session_run(s, NULL, 0, &x, 1, &out, NULL, 0, err) != GR_OK) break;
      t[k] = (cli_now() - t0) / N;
      gr_tensor_release(&out);
    }
  if (s && k == REPS) result = median(t, REPS);
  gr_session_free(s);
  gr_graph_free(g);
  return result;
}

/* Bytes per second of memcpy (read + written counts once: a tensor copy). */
static double measure_memcpy(size_t bytes, int reps, double *small_latency) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return -1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int k = 0; k < reps; k++) {
    double t0 = cli_now();
    memcpy(b, a, bytes);
    double t = cli_now() - t0;
    if (t < best) best = t;
    a[k % bytes] = b[(k * 7) % bytes]; /* keep the copies observable */
  }
  double t0 = cli_now();
  for (int k = 0; k < 10000; k++) memcpy(b + (k % 64) * 64, a + (k % 61) * 64, 64);
  *small_latency = (cli_now() - t0) / 10000;
  free(a);
  free(b);
  return (double)bytes / best;
}

typedef struct sender {
  int fd;
  size_t bytes;
  int ok;
} sender;

static void *send_all(void *arg) {
  sender *s = arg;
  char *buf = calloc(1, 1 << 20);
  size_t left = s->bytes;
  s->ok = buf != NULL;
  while (buf && left > 0) {
    ssize_t w = write(s->fd, buf, left < (1u << 20) ? left : (1u << 20));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s->ok = 0;
      break;
    }
    left -= (size_t)w;
  }
  free(buf);
  return NULL;
}

static bool full_io(int fd, char *buf, size_t n, bool rd) {
  while (n > 0) {
    ssize_t r = rd ? read(fd, buf, n) : write(fd, buf, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    buf += r;
    n -= (size_t)r;
  }
  return true;
}

/* One-way latency (half a 1-byte round trip) and bandwidth over loopback TCP. */
static bool measure_loopback(double *latency, double *bandwidth, size_t bulk) {
  int ls = socket(AF_INET, SOCK_STREAM, 0), a = -1, b = -1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  bool ok = false;
  if (ls < 0 || bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr *)&addr, &len) != 0)
    goto out;
  a = socket(AF_INET, SOCK_STREAM, 0);
  if (a < 0 || connect(a, (struct sockaddr *)&addr, sizeof addr) != 0) goto out;
  b = accept(ls, NULL, NULL);
  if (b < 0) goto out;
  int one = 1;
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  enum { PINGS = 2000 };
  char c = 'x';
  double t0 = cli_now();
  for (int i = 0; i < PINGS; i++)
    if (!full_io(a, &c, 1, false) || !full_io(b, &c, 1, true) || !full_io(b, &c, 1, false) ||
        !full_io(a, &c, 1, true))
      goto out;
  *latency = (cli_now() - t0) / PINGS / 2;
  sender s = {a, bulk, 0};
  pthread_t th;
  char *buf = malloc(1 << 20);
  if (!buf) goto out;
  t0 = cli_now();
  if (pthread_create(&th, NULL, send_all, &s) != 0) {
    free(buf);
    goto out;
  }
  size_t got = 0;
  while (got < bulk) {
    ssize_t r = read(b, buf, 1 << 20);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  double t = cli_now() - t0;
  pthread_join(th, NULL);
  free(buf);
  *bandwidth = (double)got / t;
  ok = s.ok && got == bulk;
out:
  if (a >= 0) close(a);
  if (b >= 0) close(b);
  if (ls >= 0) close(ls);
  return ok;
}

enum { F_QUICK = 256, F_OUT, F_DEVICES, F_JOB };

static const struct option calibrate_flags[] = {
    {"help", no_argument, NULL, 'h'},        {"quick", no_argument, NULL, F_QUICK},
    {"out", required_argument, NULL, F_OUT}, {"devices", required_argument, NULL, F_DEVICES},
    {"job", required_argument, NULL, F_JOB}, {0},
};

/* Which OpenBLAS kernels measured the flop/s, and a hint when they are
 * narrower than the CPU's vectors. */
static void blas_note(void) {
  const char *better = gr_ops_blas_suggested_core();
  fprintf(stderr, "calibrate: OpenBLAS runs its %s kernels\n", gr_ops_blas_core());
  if (better)
    fprintf(stderr,
            "calibrate: note: this CPU has wider vectors than those kernels use (this OpenBLAS\n"
            "  does not know the CPU model and fell back to generic kernels): start graphrun,\n"
            "  and every program that uses OpenBLAS, with OPENBLAS_CORETYPE=%s in the\n"
            "  environment for faster matrix products (docs/training.md)\n",
            better);
}

int gr_cmd_calibrate(int argc, char **argv) {
  const char *out_path = NULL, *job = "localhost";
  long devices = sysconf(_SC_NPROCESSORS_ONLN);
  bool quick = false;
  cli_opts po;
  cli_opts_start(&po, "calibrate", argc, argv, calibrate_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      printf("usage: graphrun calibrate [--out FILE] [--devices N] [--job NAME] [--quick]\n\n"
             "Measures this machine (matmul flop/s on one thread, memcpy bandwidth, per-op\n"
             "overhead, loopback TCP latency and bandwidth) and writes a cluster file for\n"
             "`graphrun place --cluster` (format: docs/placement.md): one task of job NAME\n"
             "(default localhost) with N CPU devices (default: the number of cores).\n"
             "Cross-host links cannot be measured here: defaults are written.\n"
             "  --out FILE   write the file there (default: stdout)\n"
             "  --quick      smaller measurements (less accurate, for tests)\n");
      return GR_EXIT_OK;
    } else if (c == F_QUICK) {
      quick = true;
    } else if (c == F_OUT) {
      out_path = po.arg;
    } else if (c == F_JOB) {
      job = po.arg;
    } else if (c == F_DEVICES) {
      if (!cli_opt_long(&po, 1, 4096, &devices)) return GR_EXIT_USAGE;
    } else {
      if (c == CLI_OPTS_ARG)
        fprintf(stderr, "graphrun calibrate: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    }
  }
  if (devices < 1) devices = 1;
  gr_error err;
  gr_cluster *c = gr_cluster_new();
  int task;
  if (!c || gr_cluster_add_task(c, job, "localhost", &task, &err) != GR_OK) {
    fprintf(stderr, "graphrun calibrate: %s\n", c ? err.msg : "out of memory");
    gr_cluster_free(c);
    return GR_EXIT_USAGE;
  }
  double flops = measure_flops(quick ? 128 : 512, quick ? 5 : 15, &err);
  if (flops <= 0) {
    fprintf(stderr, "graphrun calibrate: matmul measurement failed: %s\n", err.msg);
    gr_cluster_free(c);
    return GR_EXIT_FAILURE;
  }
  double overhead = measure_overhead(&err);
  if (overhead < 0) {
    fprintf(stderr, "graphrun calibrate: overhead measurement failed: %s\n", err.msg);
    gr_cluster_free(c);
    return GR_EXIT_FAILURE;
  }
  double small, copy_bw = measure_memcpy(quick ? (4u << 20) : (64u << 20), 5, &small);
  double lat = 0, net_bw = 0;
  if (copy_bw <= 0 || !measure_loopback(&lat, &net_bw, quick ? (16u << 20) : (256u << 20))) {
    fprintf(stderr, "graphrun calibrate: memcpy or loopback measurement failed\n");
    gr_cluster_free(c);
    return GR_EXIT_FAILURE;
  }
  for (long d = 0; d < devices; d++)
    if (gr_cluster_add_device(c, task, flops, 2 * copy_bw, overhead, &err) != GR_OK) {
      fprintf(stderr, "graphrun calibrate: %s\n", err.msg);
      gr_cluster_free(c);
      return GR_EXIT_FAILURE;
    }
  gr_cluster_set_link(c, GR_LINK_SAME_TASK, (gr_link){small > 1e-7 ? small : 1e-7, copy_bw});
  gr_cluster_set_link(c, GR_LINK_SAME_HOST, (gr_link){lat, net_bw});
  fprintf(stderr,
          "calibrate: matmul %.3g Gflop/s per device, op overhead %.3g us, memcpy %.3g GB/s, "
          "loopback %.3g us / %.3g GB/s; cross-host link left at its default (%.3g us, "
          "%.3g GB/s)\n",
          flops / 1e9, overhead * 1e6, copy_bw / 1e9, lat * 1e6, net_bw / 1e9,
          gr_cluster_get_link(c, GR_LINK_CROSS_HOST).latency * 1e6,
          gr_cluster_get_link(c, GR_LINK_CROSS_HOST).bandwidth / 1e9);
  blas_note();
  FILE *f = out_path ? fopen(out_path, "w") : stdout;
  if (!f) {
    fprintf(stderr, "graphrun calibrate: cannot write '%s': %s\n", out_path, strerror(errno));
    gr_cluster_free(c);
    return GR_EXIT_USAGE;
  }
  gr_status s = gr_cluster_write_json(c, f, &err);
  if (out_path && fclose(f) != 0 && s == GR_OK)
    s = gr_error_set(&err, GR_ERR_IO, "%s: write error", out_path);
  gr_cluster_free(c);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun calibrate: %s\n", err.msg);
    return GR_EXIT_FAILURE;
  }
  return GR_EXIT_OK;
}
