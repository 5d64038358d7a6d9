/* Tensor transfers between server tasks in separate processes, against raw
 * TCP between two processes, measured in the same run.
 *
 * The parent forks two children, each a server task (/job:worker/task:0 and
 * task:1, gr_server_new on 127.0.0.1:0, one inter-op thread; the port comes
 * back through a pipe), and a third child that is the raw-socket peer. The
 * parent is the master. Every child is killed and reaped at exit, also when
 * the benchmark fails; a child whose parent is gone exits by itself (it
 * waits on a pipe whose writing end only the parent holds).
 *
 * pct_of_raw: a 64 MiB f32 variable on task 0 read by a slice on task 1
 * (the whole tensor crosses: one TENSOR frame, task 0 -> task 1), minus the
 * same step with the slice on task 0; best of N each. Both steps run one
 * trivial node on task 1 as well, so both have two tasks. Anchor: the parent
 * write()s 64 MiB into a TCP socket, the peer read()s it into one buffer and
 * answers one byte, in three forms (blocking calls on the whole rest of the
 * buffer, blocking calls of 256 KiB, non-blocking calls with poll()); the
 * fastest form's best of N is the anchor (the forms differ by up to 1.5x
 * from run to run on the shared machine). Rounds of the anchor and of the
 * two steps alternate. pct_of_raw = 100 * raw_time / graphrun_time. Once:
 * the sum of the received tensor equals the sum on task 0, bit for bit.
 *
 * tls_pct_of_raw, mac_pct_of_raw: the same transfer, best of N, between
 * two more server tasks whose loopback peers count as on another host
 * (docs/security.md, "Connections across hosts"): over TLS 1.3 (a
 * certificate of a CA made for the run with the openssl commands of
 * tests/unit/tls_certs.sh), and with a MAC on every frame (no TLS); each
 * against the same raw anchor. Once each: the received tensor's sum equals
 * the sum on task 0, bit for bit.
 *
 * rtt_ratio: a chain of 2M+1 negations of an 8-byte f32[2] alternating
 * between the tasks (op i on task i % 2): 2M transfers, M round trips per
 * step, each transfer one TENSOR frame with nothing else on the wire; minus
 * the same chain on task 0 (best of N steps each) per round trip. Anchor: an
 * 8-byte ping-pong between the parent and the peer (TCP_NODELAY, blocking
 * write and read), mean of a batch of M, best of N batches. rtt_ratio =
 * graphrun_rtt / raw_rtt. M = 100 and N = 90: a batch takes ~5-10 ms, so
 * the best batch is one that other work on the machine left alone. Also
 * reported: a while loop whose body bounces the value task 0 -> task 1 ->
 * task 0, per iteration, with the frames each iteration sends (the loop's
 * predicate crosses too).
 *
 * rtt_floor: the design's floor for the round trip, against the same raw
 * anchor: the same 8-byte ping-pong, but each end reads on a libevent loop
 * thread and answers from a pool thread, as a task must (docs/distributed.md: no
 * kernel work on the loop thread): one wake-up in epoll and one hand-off
 * per hop, nothing else. rtt_ratio / rtt_floor is graphrun's own cost.
 *
 * step_us: a step whose graph is one trivial node on each task (the sum of
 * two constants, fetched from each), median over many steps (the best too).
 *
 * No BLAS runs here (OPENBLAS_CORETYPE and the BLAS threads do not matter).
 *
 * Last line: transfer: pct_of_raw=P tls_pct_of_raw=T mac_pct_of_raw=M rtt_ratio=R
 * rtt_floor=F step_us=S (targets P >= 85, R <= 1.5). --smoke: 1 MiB, a short
 * chain, few steps. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <graphrun.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "bench_util.h"

enum { TASKS = 2 };

/* CPU seconds that the threads of process pid have run (from Linux's
 * /proc/PID/task/TID/schedstat, nanoseconds); 0 when unavailable. Threads
 * that ended are not counted (the servers' threads live as long as they). */
static double cpu_seconds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  double sum = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char f[128];
    snprintf(f, sizeof f, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
    FILE *fp = fopen(f, "r");
    unsigned long long ns = 0;
    if (fp && fscanf(fp, "%llu", &ns) == 1) sum += (double)ns * 1e-9;
    if (fp) fclose(fp);
  }
  closedir(d);
  return sum;
}

/* ---- children ---------------------------------------------------------------- */

/* read() or write() until n bytes, at most chunk (0: any) per call; a
 * non-blocking fd waits in poll(). */
static void read_chunks(int fd, void *p, size_t n, size_t chunk) {
  for (size_t got = 0; got < n;) {
    size_t want = chunk && n - got > chunk ? chunk : n - got;
    ssize_t r = read(fd, (char *)p + got, want);
    if (r < 0 && errno == EAGAIN) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      poll(&pf, 1, -1);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) bench_die("raw read", r == 0 ? "the peer closed the connection" : NULL);
    got += (size_t)r;
  }
}

static void write_chunks(int fd, const void *p, size_t n, size_t chunk) {
  for (size_t done = 0; done < n;) {
    size_t want = chunk && n - done > chunk ? chunk : n - done;
    ssize_t w = write(fd, (const char *)p + done, want);
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      poll(&pf, 1, -1);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) bench_die("raw write", NULL);
    done += (size_t)w;
  }
}

static void read_all(int fd, void *p, size_t n) {
  read_chunks(fd, p, n, 0);
}
static void write_all(int fd, const void *p, size_t n) {
  write_chunks(fd, p, n, 0);
}

/* The raw peer: for each connection a command {op, bytes, count, chunk}:
 * op 1 reads `bytes` into one buffer (at most chunk per read(), 0: all that
 * is left) and answers 1 byte, count times (op 3: the same with O_NONBLOCK
 * and poll()); op 2 echoes `bytes`-byte messages count times. */
typedef struct raw_cmd {
  uint64_t op, bytes, count, chunk;
} raw_cmd;

/* ---- the design's floor for a round trip ------------------------------------
 * A task reads frames on its event-loop thread (libevent, epoll) and runs
 * what they carry on a pool thread: no kernel work on the loop thread
 * (docs/distributed.md). Any runtime built that way pays, per hop, the loop
 * thread's wake-up in epoll, the hand-off to a pool thread (a
 * gr_threadpool, as a server's work pool) and that thread's write. The
 * hand-off ping-pong does only that, on both ends, with 8-byte messages. */
typedef struct handoff {
  int fd;
  bool initiator; /* sends first; else echoes */
  uint64_t left;  /* messages still to receive in this run */
  uint64_t v;     /* the last one (written by the loop thread before the hand-off) */
  gr_threadpool *pool;
  struct event_base *base;
  struct event *ev;
} handoff;

static void handoff_send(void *arg) { /* on the pool thread */
  handoff *h = arg;
  uint64_t v = h->v + 1;
  write_all(h->fd, &v, 8);
}

static void handoff_on_read(evutil_socket_t fd, short what, void *arg) { /* loop thread */
  (void)what;
  handoff *h = arg;
  read_all(fd, &h->v, 8);
  bool last = --h->left == 0;
  if (!h->initiator || !last) gr_threadpool_schedule(h->pool, handoff_send, h);
  if (last) event_base_loopbreak(h->base);
}

static handoff *handoff_new(int fd, bool initiator) {
  handoff *h = calloc(1, sizeof *h);
  if (!h) bench_die("hand-off", "out of memory");
  h->fd = fd;
  h->initiator = initiator;
  h->pool = gr_threadpool_new(1);
  h->base = event_base_new();
  h->ev = h->base ? event_new(h->base, fd, EV_READ | EV_PERSIST, handoff_on_read, h) : NULL;
  if (!h->pool || !h->ev || event_add(h->ev, NULL) != 0)
    bench_die("hand-off", "libevent setup failed");
  return h;
}

/* Receives n messages (the initiator sends the first). */
static void handoff_run(handoff *h, uint64_t n) {
  h->left = n;
  if (h->initiator) gr_threadpool_schedule(h->pool, handoff_send, h);
  event_base_dispatch(h->base);
}

static void handoff_free(handoff *h) {
  gr_threadpool_free(h->pool); /* sends what is queued (the echo's last answer) */
  event_free(h->ev);
  event_base_free(h->base);
  free(h);
}

static void peer_main(void *arg, int life) {
  int ls = *(int *)arg;
  char *buf = NULL;
  size_t cap = 0;
  for (;;) {
    struct pollfd p[2] = {{.fd = ls, .events = POLLIN}, {.fd = life, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) continue;
    if (p[1].revents) _exit(0);
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    raw_cmd c;
    read_all(fd, &c, sizeof c);
    if (c.op == 4) { /* the hand-off floor: echo through a loop and a pool thread */
      handoff *h = handoff_new(fd, false);
      handoff_run(h, c.count);
      handoff_free(h);
      close(fd);
      continue;
    }
    if (c.op == 3) fcntl(fd, F_SETFL, O_NONBLOCK);
    if (c.bytes > cap) {
      free(buf);
      cap = c.bytes;
      buf = malloc(cap);
      if (!buf) _exit(1);
      memset(buf, 0, cap); /* touched, as a pooled receive buffer is */
    }
    for (uint64_t i = 0; i < c.count; i++) {
      read_chunks(fd, buf, c.bytes, c.chunk);
      if (c.op != 2)
        write_all(fd, "k", 1);
      else
        write_all(fd, buf, c.bytes);
    }
    close(fd);
  }
}

static int raw_listen(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) != 0)
    bench_die("raw listen", NULL);
  *port = ntohs(a.sin_port);
  return fd;
}

static int raw_connect(int port, const raw_cmd *c) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) bench_die("raw connect", NULL);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  write_all(fd, c, sizeof *c);
  return fd;
}

/* Seconds to write `bytes` and get the peer's byte back, reps times after
 * one warm-up, into t[]. Both ends call write() / read() with at most chunk
 * bytes (0: all that is left); nonblocking: both use O_NONBLOCK and poll()
 * (as an event loop does), else blocking calls. */
static void raw_bulk(int port, size_t bytes, size_t chunk, bool nonblocking, int reps, double *t,
                     double *cpu) {
  char *buf = malloc(bytes);
  if (!buf) bench_die("raw buffer", "out of memory");
  memset(buf, 1, bytes);
  raw_cmd c = {nonblocking ? 3 : 1, bytes, (uint64_t)reps + 1, chunk};
  int fd = raw_connect(port, &c);
  if (nonblocking) fcntl(fd, F_SETFL, O_NONBLOCK);
  double cpu0 = 0;
  for (int i = -1; i < reps; i++) {
    if (i == 0) cpu0 = cpu_seconds(getpid()) + cpu_seconds(bench_children[TASKS]);
    double t0 = bench_now();
    write_chunks(fd, buf, bytes, chunk);
    char k;
    read_all(fd, &k, 1);
    double dt = bench_now() - t0;
    if (i >= 0) t[i] = dt;
  }
  *cpu += cpu_seconds(getpid()) + cpu_seconds(bench_children[TASKS]) - cpu0;
  close(fd);
  free(buf);
}

/* Best mean round trip of an 8-byte ping-pong, batches of n; *cpu gets
 * the CPU seconds of both ends over the timed batches. */
static double raw_pingpong(int port, int n, int batches, double *cpu) {
  raw_cmd c = {2, 8, (uint64_t)n * (uint64_t)(batches + 1), 0};
  int fd = raw_connect(port, &c);
  double best = 1e30;
  uint64_t v = 0;
  double cpu0 = 0;
  for (int b = -1; b < batches; b++) {
    if (b == 0) cpu0 = cpu_seconds(getpid()) + cpu_seconds(bench_children[TASKS]);
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
      write_all(fd, &v, 8);
      read_all(fd, &v, 8);
      v++;
    }
    double dt = (bench_now() - t0) / n;
    if (b >= 0 && dt < best) best = dt;
  }
  *cpu += cpu_seconds(getpid()) + cpu_seconds(bench_children[TASKS]) - cpu0;
  close(fd);
  return best;
}

/* Best mean round trip of the hand-off ping-pong (the parent is the
 * initiator, the raw peer echoes), batches of n. */
static double handoff_pingpong(int port, int n, int batches) {
  raw_cmd c = {4, 8, (uint64_t)n * (uint64_t)(batches + 1), 0};
  int fd = raw_connect(port, &c);
  handoff *h = handoff_new(fd, true);
  double best = 1e30;
  for (int b = -1; b < batches; b++) {
    double t0 = bench_now();
    handoff_run(h, (uint64_t)n);
    double dt = (bench_now() - t0) / n;
    if (b >= 0 && dt < best) best = dt;
  }
  handoff_free(h);
  close(fd);
  return best;
}

/* ---- graphrun ---------------------------------------------------------------- */

static void pin(gr_graph *g, int task) {
  char spec[32];
  snprintf(spec, sizeof spec, "/job:worker/task:%d", task);
  gr_graph_push_device_scope(g, spec);
}

/* A trivial node on task 1 (so that a step runs on both tasks). */
static gr_output trivial_on(gr_graph *g, int task) {
  pin(g, task);
  gr_output t = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, 2));
  gr_graph_pop_device_scope(g);
  return t;
}

/* Runs the fetches reps times after two warm-ups, step seconds into t[]
 * (may be NULL). The first fetch's value of the last step goes to *first
 * (may be NULL), the last step's transfers to *moved (may be NULL). */
/* CPU seconds of the pair of tasks whose first child is bench_children[first]. */
static double tasks_cpu(int first) {
  double sum = 0;
  for (int k = 0; k < TASKS; k++) sum += cpu_seconds(bench_children[first + k]);
  return sum;
}

/* The children: the tasks, the raw peer, the TLS pair, the MAC pair. */
enum { PEER = TASKS, TLS_TASKS = TASKS + 1, MAC_TASKS = TASKS + 1 + TASKS };

/* *cpu (may be NULL) gets the CPU seconds of the pair of tasks starting at
 * child cpu_first over the timed steps. */
static void time_steps(gr_master *m, gr_graph *g, gr_output *fetch, int nf, int reps, double *t,
                       gr_tensor *first, gr_transfer_stats *moved, double *cpu, int cpu_first) {
  if (gr_graph_error(g)) bench_die("graph", gr_graph_error(g)->msg);
  gr_error err;
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  if (!s) bench_die("session", err.msg);
  gr_tensor out[4];
  double cpu0 = 0;
  for (int i = -2; i < reps; i++) {
    if (i == 0 && cpu) cpu0 = tasks_cpu(cpu_first);
    double t0 = bench_now();
    if (gr_session_run(s, NULL, 0, fetch, nf, out, NULL, 0, &err) != GR_OK)
      bench_die("step", err.msg);
    double dt = bench_now() - t0;
    if (i >= 0 && t) t[i] = dt;
    for (int k = 0; k < nf; k++) {
      if (k == 0 && first && i == reps - 1)
        *first = out[0];
      else
        gr_tensor_release(&out[k]);
    }
  }
  if (cpu) *cpu += tasks_cpu(cpu_first) - cpu0;
  if (moved) *moved = gr_session_last_transfers(s);
  gr_session_free(s);
}

static double best_of(const double *t, int n) {
  double b = t[0];
  for (int i = 1; i < n; i++) b = t[i] < b ? t[i] : b;
  return b;
}

/* The big variable on task 0, read on task `reader` (a slice of 2 values,
 * or the sum when sum). */
static gr_graph *bulk_graph(int64_t elems, int reader, bool sum, gr_output *fetch) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 3);
  pin(g, 0);
  gr_output v =
      gr_variable(g, "bench/big", gr_random_uniform(g, GR_F32, (gr_shape){1, {elems}}, -1, 1, 1));
  gr_graph_pop_device_scope(g);
  pin(g, reader);
  fetch[0] = sum ? gr_reduce_sum(g, v, NULL, 0, false)
                 : gr_slice(g, v, (int64_t[]){elems / 2}, (int64_t[]){2}, 1);
  gr_graph_pop_device_scope(g);
  fetch[1] = trivial_on(g, 1);
  return g;
}

/* A chain of hops negations of f32[2], op i on task i % 2 (split) or 0. */
static gr_graph *chain_graph(int hops, bool split, gr_output *fetch) {
  gr_graph *g = gr_graph_new();
  pin(g, 0);
  gr_output h = gr_const_data(g, GR_F32, (gr_shape){1, {2}}, (float[]){1.5f, -2.5f});
  gr_graph_pop_device_scope(g);
  for (int i = 0; i < hops; i++) {
    pin(g, split ? i % 2 : 0);
    h = gr_neg(g, h);
    gr_graph_pop_device_scope(g);
  }
  fetch[0] = h;
  fetch[1] = trivial_on(g, 1);
  return g;
}

/* while i < n: x = neg(neg(x) on task 1) on task 0; i += 1 (on task 0). */
typedef struct loop_arg {
  gr_output n;
} loop_arg;

static gr_output loop_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], ((loop_arg *)a)->n);
}

static void loop_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  pin(g, 1);
  gr_output y = gr_neg(g, v[1]);
  gr_graph_pop_device_scope(g);
  pin(g, 0);
  next[1] = gr_neg(g, y);
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  gr_graph_pop_device_scope(g);
}

static gr_graph *loop_graph(int64_t iters, gr_output *fetch) {
  gr_graph *g = gr_graph_new();
  pin(g, 0);
  loop_arg a = {gr_const_i64(g, iters)};
  gr_output vars[2] = {gr_const_i64(g, 0),
                       gr_const_data(g, GR_F32, (gr_shape){1, {2}}, (float[]){1.5f, -2.5f})};
  gr_while_loop(g, loop_cond, loop_body, &a, 2, vars, 1);
  gr_graph_pop_device_scope(g);
  fetch[0] = vars[1];
  fetch[1] = trivial_on(g, 1);
  return g;
}

static double gbps(size_t bytes, double s) {
  return (double)bytes / s / 1e9;
}

/* The CPU time per MiB moved, both tasks, all threads: the transfer's
 * steps (cpu_x over n) minus the steps without it (cpu_b over n). Other
 * work on the machine disturbs it much less than elapsed time. */
static void print_cpu_per_mib(const char *what, double cpu_x, double cpu_b, int n, size_t bytes) {
  double ms = (cpu_x - cpu_b) / n / ((double)bytes / (1 << 20)) * 1e3;
  printf("CPU per MiB moved %s (user + system, all threads, both tasks, the transfer's steps "
         "minus the steps without it): %.3f ms\n",
         what, ms);
}

/* ---- across hosts: TLS and frame MACs ------------------------------------------ */

static char cert_dir[64]; /* the run's CA and certificate (removed at exit) */

static void remove_certs(void) {
  if (cert_dir[0]) bench_remove_tree("bench_transfer", cert_dir);
}

/* A CA and a certificate it signs (tests/unit/tls_certs.sh), into
 * cert_dir: node.crt, node.key, ca.crt. */
static bench_tls make_certs(void) {
  snprintf(cert_dir, sizeof cert_dir, "/tmp/gr_bench_certs_XXXXXX");
  if (!mkdtemp(cert_dir)) bench_die("certificates", NULL);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "sh %s/tests/unit/tls_certs.sh %s", GR_SOURCE_DIR, cert_dir);
  if (system(cmd) != 0) bench_die("certificates", "tests/unit/tls_certs.sh failed (openssl?)");
  static char cert[128], key[128], ca[128];
  snprintf(cert, sizeof cert, "%s/node.crt", cert_dir);
  snprintf(key, sizeof key, "%s/node.key", cert_dir);
  snprintf(ca, sizeof ca, "%s/ca.crt", cert_dir);
  return (bench_tls){cert, key, ca};
}

/* The bulk transfer between the tasks at addrs (protected as across
 * hosts; tls: its files, NULL: frame MACs): checks the tensor arrives
 * intact (its sum is sum0's), then rounds x reps of the transfer step and
 * the step without it, alternating; the transfer's best seconds. */
static double protected_bulk(const char *const *addrs, const bench_tls *tls, int64_t elems,
                             const gr_tensor *sum0, int rounds, int reps, const char *what,
                             int first) {
  gr_master_options mo = {.num_tasks = TASKS,
                          .addresses = addrs,
                          .secret = BENCH_SECRET,
                          .step_timeout_ms = 120000,
                          .tls_cert = tls ? tls->cert : NULL,
                          .tls_key = tls ? tls->key : NULL,
                          .tls_ca = tls ? tls->ca : NULL};
  gr_master *m;
  gr_error err;
  if (gr_master_new(&mo, &m, &err) != GR_OK) bench_die(what, err.msg);
  gr_output fx[2], fb[2], fs[2];
  gr_graph *gx = bulk_graph(elems, 1, false, fx), *gb = bulk_graph(elems, 0, false, fb);
  gr_graph *gs = bulk_graph(elems, 1, true, fs);
  gr_tensor sum;
  gr_transfer_stats moved;
  time_steps(m, gs, fs, 2, 1, NULL, &sum, &moved, NULL, 0);
  if (moved.sends != 1 || gr_tensor_get_f64(&sum, 0) != gr_tensor_get_f64(sum0, 0))
    bench_die(what, "the received tensor's sum differs from the sender's");
  gr_tensor_release(&sum);
  int n = rounds * reps;
  double *tx = calloc((size_t)n, sizeof *tx), *tb = calloc((size_t)n, sizeof *tb);
  double cpu_x = 0, cpu_b = 0;
  for (int r = 0; r < rounds; r++) {
    time_steps(m, gx, fx, 2, reps, tx + r * reps, NULL, NULL, &cpu_x, first);
    time_steps(m, gb, fb, 2, reps, tb + r * reps, NULL, NULL, &cpu_b, first);
  }
  print_cpu_per_mib(what, cpu_x, cpu_b, n, (size_t)elems * 4);
  double x = best_of(tx, n), b = best_of(tb, n), xfer = x - b;
  printf("%.0f MiB f32 task 0 -> task 1 %s, best of %d: step %.3f ms, without the transfer %.3f "
         "ms: %.3f ms, %.2f GB/s (median step %.3f ms)\n",
         (double)elems * 4 / (1 << 20), what, n, x * 1e3, b * 1e3, xfer * 1e3,
         gbps((size_t)elems * 4, xfer), bench_median(tx, n) * 1e3);
  free(tx), free(tb);
  gr_graph_free(gx), gr_graph_free(gb), gr_graph_free(gs);
  gr_master_free(m);
  return xfer;
}

int main(int argc, char **argv) {
  bool smoke = bench_is_smoke(argc, argv);
  int64_t elems = smoke ? (1 << 18) : (16 << 20); /* 1 MiB or 64 MiB of f32 */
  size_t bytes = (size_t)elems * 4;
  int bulk_reps = smoke ? 2 : 15, hops_rt = smoke ? 20 : 100, rtt_reps = smoke ? 2 : 30;
  int step_reps = smoke ? 5 : 500;
  int64_t loop_iters = smoke ? 20 : 500;

  bench_start("bench_transfer", remove_certs);
  bench_tls tls = make_certs();

  /* the children first, while this process has no threads of its own */
  int life[2];
  if (pipe2(life, O_CLOEXEC) != 0) bench_die("pipe", NULL);
  char addr[TASKS][64];
  const char *addrs[TASKS];
  for (int k = 0; k < TASKS; k++) {
    int port = -1;
    bench_spawn_server(k, life[0], life[1], &port);
    snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", port);
    addrs[k] = addr[k];
  }
  int raw_port, ls = raw_listen(&raw_port);
  bench_spawn(life[0], life[1], peer_main, &ls);
  close(ls);
  /* two more pairs of tasks, as across hosts: over TLS, and with frame MACs */
  char paddr[2][TASKS][64];
  const char *paddrs[2][TASKS];
  for (int p = 0; p < 2; p++)
    for (int k = 0; k < TASKS; k++) {
      int port = -1;
      bench_spawn_server_remote(k, life[0], life[1], &port, p == 0 ? &tls : &(bench_tls){0});
      snprintf(paddr[p][k], sizeof paddr[p][k], "127.0.0.1:%d", port);
      paddrs[p][k] = paddr[p][k];
    }
  close(life[0]); /* life[1] stays open until this process ends */

  gr_error err;
  gr_master_options mo = {
      .num_tasks = TASKS, .addresses = addrs, .secret = BENCH_SECRET, .step_timeout_ms = 120000};
  gr_master *m;
  if (gr_master_new(&mo, &m, &err) != GR_OK) bench_die("master", err.msg);

  /* 1. bulk: the variable read on task 1 vs on task 0, alternating rounds
   * with the raw anchor's two forms */
  gr_output fx[2], fb[2], fs1[2], fs0[2];
  gr_graph *gx = bulk_graph(elems, 1, false, fx), *gb = bulk_graph(elems, 0, false, fb);
  gr_graph *gs1 = bulk_graph(elems, 1, true, fs1), *gs0 = bulk_graph(elems, 0, true, fs0);
  gr_tensor sum1, sum0;
  gr_transfer_stats moved;
  time_steps(m, gs0, fs0, 2, 1, NULL, &sum0, NULL, NULL,
             0); /* initialises the variable on task 0 */
  time_steps(m, gs1, fs1, 2, 1, NULL, &sum1, &moved, NULL, 0);
  if (moved.sends != 1 || (size_t)moved.bytes != bytes)
    bench_die("bulk", "the step did not move the tensor in one transfer");
  if (gr_tensor_get_f64(&sum1, 0) != gr_tensor_get_f64(&sum0, 0))
    bench_die("bulk", "the received tensor's sum differs from the sender's");
  int rounds = smoke ? 1 : 3, nb = rounds * bulk_reps;
  double *tx = calloc((size_t)nb, sizeof *tx), *tb = calloc((size_t)nb, sizeof *tb);
  /* the raw anchor in three forms; the fastest is the anchor */
  static const struct {
    const char *what;
    size_t chunk;
    bool nonblocking;
  } raw_forms[3] = {{"blocking, whole buffer per call", 0, false},
                    {"blocking, 256 KiB per call", 256 << 10, false},
                    {"non-blocking + poll(), whole buffer per call", 0, true}};
  double *rt[3], cpu_raw[3] = {0}, cpu_x = 0, cpu_b = 0;
  for (int f = 0; f < 3; f++) rt[f] = calloc((size_t)nb, sizeof(double));
  for (int r = 0; r < rounds; r++) {
    for (int f = 0; f < 3; f++) {
      raw_bulk(raw_port, bytes, raw_forms[f].chunk, raw_forms[f].nonblocking, bulk_reps,
               rt[f] + r * bulk_reps, &cpu_raw[f]);
      if (f == 0) time_steps(m, gx, fx, 2, bulk_reps, tx + r * bulk_reps, NULL, NULL, &cpu_x, 0);
      if (f == 1) time_steps(m, gb, fb, 2, bulk_reps, tb + r * bulk_reps, NULL, NULL, &cpu_b, 0);
    }
  }
  double x_best = best_of(tx, nb), b_best = best_of(tb, nb), xfer = x_best - b_best;
  printf("%.0f MiB f32 task 0 -> task 1, best of %d: step %.3f ms, the same step without the "
         "transfer %.3f ms: %.3f ms, %.2f GB/s (median step %.3f ms)\n",
         (double)bytes / (1 << 20), nb, x_best * 1e3, b_best * 1e3, xfer * 1e3, gbps(bytes, xfer),
         bench_median(tx, nb) * 1e3);
  double raw_best = 1e30;
  for (int f = 0; f < 3; f++) {
    double b = best_of(rt[f], nb);
    raw_best = b < raw_best ? b : raw_best;
    printf("raw TCP process to process, write() / read() loops, %s: best of %d %.3f ms, %.2f "
           "GB/s (median %.3f ms; CPU per MiB, both ends %.3f ms)\n",
           raw_forms[f].what, nb, b * 1e3, gbps(bytes, b), bench_median(rt[f], nb) * 1e3,
           cpu_raw[f] / nb / ((double)bytes / (1 << 20)) * 1e3);
    free(rt[f]);
  }
  print_cpu_per_mib("task to task", cpu_x, cpu_b, nb, bytes);
  double pct = 100 * raw_best / xfer;
  free(tx), free(tb);
  double tls_xfer =
      protected_bulk(paddrs[0], &tls, elems, &sum0, rounds, bulk_reps, "over TLS 1.3", TLS_TASKS);
  double mac_xfer = protected_bulk(paddrs[1], NULL, elems, &sum0, rounds, bulk_reps,
                                   "with frame MACs", MAC_TASKS);

  /* 2. small round trips: the alternating chain vs one task; raw ping-pong */
  gr_output fc[2], f1[2];
  int hops = 2 * hops_rt + 1, nr = rounds * rtt_reps;
  gr_graph *gc = chain_graph(hops, true, fc), *g1 = chain_graph(hops, false, f1);
  double *tc = calloc((size_t)nr, sizeof *tc), *t1 = calloc((size_t)nr, sizeof *t1);
  double pp_best = 1e30, ho_best = 1e30, cpu_pp = 0, cpu_c = 0, cpu_1 = 0;
  for (int r = 0; r < rounds; r++) {
    double t = raw_pingpong(raw_port, hops_rt, rtt_reps, &cpu_pp);
    pp_best = t < pp_best ? t : pp_best;
    t = handoff_pingpong(raw_port, hops_rt, rtt_reps);
    ho_best = t < ho_best ? t : ho_best;
    time_steps(m, gc, fc, 2, rtt_reps, tc + r * rtt_reps, NULL, &moved, &cpu_c, 0);
    if (moved.sends != 2 * hops_rt) bench_die("chain", "unexpected number of transfers");
    time_steps(m, g1, f1, 2, rtt_reps, t1 + r * rtt_reps, NULL, NULL, &cpu_1, 0);
  }
  double c_best = best_of(tc, nr), one_best = best_of(t1, nr);
  double rtt = (c_best - one_best) / hops_rt;
  printf("8-byte round trip: a chain of %d negations alternating tasks (%d transfers, one frame "
         "each), best of %d: step %.3f ms, on one task %.3f ms: %.1f us per round trip (median "
         "step %.3f ms)\n",
         hops, 2 * hops_rt, nr, c_best * 1e3, one_best * 1e3, rtt * 1e6,
         bench_median(tc, nr) * 1e3);
  printf("raw 8-byte ping-pong process to process: %.1f us per round trip (best batch of %d)\n",
         pp_best * 1e6, hops_rt);
  printf("the design's floor, 8-byte ping-pong read on a libevent loop thread and answered from "
         "a pool thread at both ends: %.1f us per round trip (best batch of %d)\n",
         ho_best * 1e6, hops_rt);
  /* CPU time is less at the mercy of other work than elapsed time */
  if (cpu_pp > 0 && cpu_c > 0)
    printf("CPU per round trip (user + system, all threads, both ends): graphrun %.1f us (the "
           "chain's tasks minus the one-task chain's), raw %.1f us\n",
           (cpu_c - cpu_1) / nr / hops_rt * 1e6, cpu_pp / nr / hops_rt * 1e6);
  free(tc), free(t1);
  gr_output fl[2];
  gr_graph *gl = loop_graph(loop_iters, fl);
  int nl = smoke ? 1 : 10;
  double tl[10];
  time_steps(m, gl, fl, 2, nl, tl, NULL, &moved, NULL, 0);
  printf("while loop bouncing the value task 0 -> task 1 -> task 0: %.1f us per iteration, best "
         "of %d (%.2f transfers per iteration: the value each way and the loop predicate)\n",
         best_of(tl, nl) / (double)loop_iters * 1e6, nl, (double)moved.sends / (double)loop_iters);

  /* 3. an empty step over two tasks */
  gr_graph *ge = gr_graph_new();
  gr_output fe[2] = {trivial_on(ge, 0), trivial_on(ge, 1)};
  double *te = calloc((size_t)step_reps, sizeof *te);
  time_steps(m, ge, fe, 2, step_reps, te, NULL, NULL, NULL, 0);
  double step_best = best_of(te, step_reps), step_med = bench_median(te, step_reps);
  free(te);
  printf("a step of one trivial node on each of 2 tasks: %.1f us median of %d, %.1f us best\n",
         step_med * 1e6, step_reps, step_best * 1e6);

  printf("transfer: pct_of_raw=%.1f tls_pct_of_raw=%.1f mac_pct_of_raw=%.1f rtt_ratio=%.2f "
         "rtt_floor=%.2f step_us=%.1f\n",
         pct, 100 * raw_best / tls_xfer, 100 * raw_best / mac_xfer, rtt / pp_best,
         ho_best / pp_best, step_med * 1e6);
  gr_tensor_release(&sum0);
  gr_tensor_release(&sum1);
  gr_graph *gs[] = {gx, gb, gs1, gs0, gc, g1, gl, ge};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) gr_graph_free(gs[i]);
  gr_master_free(m);
  bench_stop_children();
  return 0;
}
