/* Hostile peers against real servers (docs/distributed.md, "Limits";
 * docs/security.md, "Resource limits"): what one attacker on loopback did
 * to a server before the transport had bounds, and after each attack a
 * well-behaved client that must be served.
 *
 * Against `graphrun server` processes (started here, their output in a
 * file, the descriptor limit set in the child before exec), each scenario
 * measures the server from outside, in /proc: its RSS (and VmSize for the
 * huge headers) may grow by at most 16 MiB, its log by at most 64 KiB, and
 * while it is out of descriptors its CPU time stays under 5%:
 *   - out of descriptors (ulimit -n 128, 200 connections silent, then 200
 *     that sent a frame, --max-connections above what the descriptors allow);
 *   - 500 idle connections (closed at the handshake deadline);
 *   - slowloris: a frame sent a byte a second (closed at the deadline);
 *   - 300 headers announcing 4 GiB bodies;
 *   - 10,000 short connections sending garbage.
 * In this process: the rate limiter and the growth of a body's memory
 * alone; then in-process servers with short deadlines (the idle deadline
 * closes a silent connection, while a lease's connection, which sends
 * nothing itself, lives on its keepalives), the connection limit, and the
 * receive budget's back-pressure (a second large frame waits, and both
 * arrive whole; an 8 MiB feed and fetch pass through a 1 MiB budget).
 *
 * Every wait is bounded and generous; no wall-clock threshold is tight
 * (the CPU bound is 5% over 3 s, where spinning took 40-60%). Every server
 * process is killed and reaped, also on failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <graphrun.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "distributed/loglimit_internal.h"
#include "distributed/transport_conn_internal.h"
#include "distributed/wire_internal.h"
#include "gr_test.h"
#include "test_proc.h"

#define MIB        (1024 * 1024)
#define GROWTH_MAX (16 * MIB) /* what a scenario may add to the server's memory */
#define LOG_MAX    (64 * 1024)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- raw connections -------------------------------------------------------- */

/* A loopback connection to port, not blocking: -1 when it is not made
 * within ms (a full backlog drops the SYN). */
static int dial_raw(int port, int ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
  int so = 0;
  socklen_t sl = sizeof so;
  struct pollfd p = {fd, POLLOUT, 0};
  if (errno != EINPROGRESS || poll(&p, 1, ms) != 1 ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0 || so != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Closes with a reset (no TIME_WAIT left behind). */
static void close_reset(int fd) {
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

/* Sends up to n bytes within ms; how many went. */
static size_t send_some(int fd, const void *p, size_t n, int ms) {
  size_t done = 0;
  int64_t deadline = gr_wire_now_ms() + ms;
  while (done < n) {
    ssize_t w = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += (size_t)w;
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) break;
    int64_t left = deadline - gr_wire_now_ms();
    struct pollfd pf = {fd, POLLOUT, 0};
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0) break;
  }
  return done;
}

static bool send_all(int fd, const void *p, size_t n) {
  return send_some(fd, p, n, 10000) == n;
}

/* Reads exactly n bytes within ms. */
static bool read_exact(int fd, void *buf, size_t n, int ms) {
  size_t got = 0;
  int64_t deadline = gr_wire_now_ms() + ms;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    int64_t left = deadline - gr_wire_now_ms();
    struct pollfd pf = {fd, POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0) return false;
  }
  return true;
}

/* Reads one frame within ms: its type and the map's id (0 when none). */
static bool read_frame(int fd, int ms, int *type, uint64_t *id) {
  uint8_t hb[GR_WIRE_HEADER_SIZE];
  gr_frame_header h;
  gr_error e;
  if (!read_exact(fd, hb, sizeof hb, ms) || gr_wire_parse_frame_header(hb, 0, &h, &e) != GR_OK)
    return false;
  uint8_t *map = malloc(h.header_len);
  gr_msg m;
  bool ok = map && read_exact(fd, map, h.header_len, ms) &&
            gr_msg_parse(&m, map, h.header_len, &e) == GR_OK;
  free(map);
  if (!ok) return false;
  *type = h.type;
  *id = 0;
  gr_msg_u64(&m.root, "id", id, NULL);
  gr_msg_free(&m);
  return true;
}

/* Waits until the server closes fd (end of file or a reset), at most ms;
 * what arrives meanwhile is read and dropped. */
static bool wait_closed(int fd, int ms) {
  int64_t deadline = gr_wire_now_ms() + ms;
  char buf[4096];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return true;
    if (r > 0) continue;
    int64_t left = deadline - gr_wire_now_ms();
    struct pollfd pf = {fd, POLLIN, 0};
    if (left <= 0) return false;
    poll(&pf, 1, (int)left);
  }
}

/* The bytes of a frame of type t whose map is {"id": id}, its header
 * announcing body_len body bytes (none are in out). */
static size_t frame_bytes(gr_msg_type t, uint64_t id, uint32_t body_len, uint8_t *out, size_t cap) {
  gr_outmsg *m = gr_outmsg_new(t, 1);
  struct iovec *iov;
  int n;
  size_t total, len = 0;
  if (!m) return 0;
  gr_outmsg_u64(m, "id", id);
  if (gr_outmsg_finish(m, &iov, &n, &total, NULL) == GR_OK && iov[0].iov_len <= cap) {
    len = iov[0].iov_len;
    memcpy(out, iov[0].iov_base, len);
    for (int i = 0; i < 4; i++) out[12 + i] = (uint8_t)(body_len >> (8 * i));
  }
  gr_outmsg_free(m);
  return len;
}

/* The servers here are insecure (loopback, no secret: the attacks are on
 * the transport, and a peer without a secret gets no further than the
 * handshake anyway) and of this cluster. */
#define CLUSTER "hostile"

/* The bytes of the AUTH frame a client of CLUSTER answers an insecure
 * server's HELLO with (it needs nothing from the HELLO: it can be sent at
 * once, ahead of the frames after it). */
static size_t auth_bytes(uint8_t *out, size_t cap) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_AUTH, 1);
  struct iovec *iov;
  int n;
  size_t total, len = 0;
  if (!m) return 0;
  gr_outmsg_str(m, "cluster", CLUSTER);
  if (gr_outmsg_finish(m, &iov, &n, &total, NULL) == GR_OK && iov[0].iov_len <= cap) {
    len = iov[0].iov_len;
    memcpy(out, iov[0].iov_base, len);
  }
  gr_outmsg_free(m);
  return len;
}

/* Reads HELLO, answers AUTH, reads AUTH_OK, then sends GET_STATUS and
 * reads its answer: the connection has finished its handshake. */
static bool handshake_raw(int fd) {
  uint8_t a[256], f[64];
  size_t na = auth_bytes(a, sizeof a), n = frame_bytes(GR_MSG_GET_STATUS, 1, 0, f, sizeof f);
  int type;
  uint64_t id;
  return read_frame(fd, 10000, &type, &id) && type == GR_MSG_HELLO && send_all(fd, a, na) &&
         read_frame(fd, 10000, &type, &id) && type == GR_MSG_AUTH_OK && send_all(fd, f, n) &&
         read_frame(fd, 10000, &type, &id) && type == GR_MSG_RESPONSE && id == 1;
}

/* A well-behaved client: a master connects and asks the task's status
 * (connect_timeout 8 s). */
static bool real_client(int port, double *secs, gr_error *err) {
  char a[64];
  snprintf(a, sizeof a, "127.0.0.1:%d", port);
  const char *addr = a;
  gr_master_options mo = {.num_tasks = 1,
                          .addresses = &addr,
                          .insecure = true,
                          .cluster_id = CLUSTER,
                          .connect_timeout_ms = 8000,
                          .heartbeat_ms = -1};
  gr_master *m = NULL;
  double t0 = gt_now();
  gr_status st = gr_master_new(&mo, &m, err);
  *secs = gt_now() - t0;
  gr_master_free(m);
  return st == GR_OK;
}

#define CHECK_REAL_CLIENT(port)                                                                    \
  do {                                                                                             \
    double secs_;                                                                                  \
    gr_error err_;                                                                                 \
    bool ok_ = real_client((port), &secs_, &err_);                                                 \
    GR_CHECK_MSG(ok_, "the real client was not served: %s", err_.msg);                             \
    if (ok_) printf("  a real client was served in %.2f s\n", secs_);                              \
  } while (0)

/* ---- server processes --------------------------------------------------------- */

typedef struct server {
  pid_t pid;
  int port;
  char log[64]; /* its stdout and stderr */
} server;

typedef struct usage {
  long rss_kb, vm_kb;
  double cpu_s;
  long log_bytes;
} usage;

/* Starts `graphrun server` with at most nofile descriptors (0: as this
 * process) and extra arguments (NULL-terminated or NULL); waits until it
 * listens. */
static bool server_start(server *s, long nofile, const char *const *extra) {
  const char *exe = gt_graphrun_exe();
  memset(s, 0, sizeof *s);
  snprintf(s->log, sizeof s->log, "/tmp/gr_hostile_XXXXXX");
  int fd = mkstemp(s->log);
  if (fd < 0) return false;
  const char *argv[16] = {"graphrun",    "server",     "--job",        "worker", "--bind",
                          "127.0.0.1:0", "--insecure", "--cluster-id", CLUSTER};
  int argc = 9;
  for (int i = 0; extra && extra[i] && argc < 15; i++) argv[argc++] = extra[i];
  argv[argc] = NULL;
#if defined(__SANITIZE_ADDRESS__)
  /* a sanitizer build's server: freed memory is reused soon, as without
   * it (ASan keeps up to 256 MiB of it in quarantine by default) */
  char asan[512];
  const char *given = getenv("ASAN_OPTIONS");
  snprintf(asan, sizeof asan, "%s%squarantine_size_mb=1", given ? given : "",
           given && *given ? ":" : "");
  if (!given || !strstr(given, "quarantine_size_mb")) setenv("ASAN_OPTIONS", asan, 1);
#endif
  s->pid = fork();
  if (s->pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    for (int i = 3; i < (int)(rl.rlim_cur < 65536 ? rl.rlim_cur : 65536); i++) close(i);
    if (nofile > 0) {
      rl.rlim_cur = (rlim_t)nofile;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  close(fd);
  if (s->pid < 0) return false;
  for (int i = 0; i < 3000; i++) { /* 30 s */
    FILE *f = fopen(s->log, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
      const char *p = strstr(line, "listening on 127.0.0.1:");
      if (p) s->port = atoi(p + strlen("listening on 127.0.0.1:"));
    }
    if (f) fclose(f);
    if (s->port > 0) return true;
    if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
      s->pid = 0;
      break;
    }
    sleep_ms(10);
  }
  fprintf(stderr, "the server did not start (log %s)\n", s->log);
  return false;
}

static bool server_alive(const server *s) {
  return s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0;
}

static void server_stop(server *s) {
  if (s->pid > 0) {
    kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  s->pid = 0;
  if (s->log[0] && !getenv("KEEP_LOG")) unlink(s->log);
}

static usage usage_of(const server *s) {
  usage u = {0};
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
  FILE *f = fopen(path, "r");
  while (f && fgets(buf, sizeof buf, f)) {
    sscanf(buf, "VmRSS: %ld", &u.rss_kb);
    sscanf(buf, "VmSize: %ld", &u.vm_kb);
  }
  if (f) fclose(f);
  snprintf(path, sizeof path, "/proc/%d/stat", (int)s->pid);
  f = fopen(path, "r");
  if (f && fgets(buf, sizeof buf, f)) {
    const char *p = strrchr(buf, ')'); /* after the command's name */
    unsigned long ut = 0, st = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
      u.cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
  }
  if (f) fclose(f);
  struct stat sb;
  if (stat(s->log, &sb) == 0) u.log_bytes = (long)sb.st_size;
  return u;
}

/* The server's log (malloc'd; "" when unreadable). */
static char *log_text(const server *s) {
  FILE *f = fopen(s->log, "r");
  char *t = NULL;
  size_t n = 0;
  if (f) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    t = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (t) n = fread(t, 1, (size_t)(len > 0 ? len : 0), f);
    fclose(f);
  }
  if (!t) t = calloc(1, 1);
  if (t) t[n] = '\0';
  return t;
}

/* How many times sub appears in the server's log. */
static int log_count(const server *s, const char *sub) {
  char *t = log_text(s);
  int n = 0;
  for (const char *p = t; p && (p = strstr(p, sub)); p += strlen(sub)) n++;
  free(t);
  return n;
}

static bool log_has(const server *s, const char *sub) {
  return log_count(s, sub) > 0;
}

/* Waits (at most ms) until the log holds sub. */
static bool log_wait(const server *s, const char *sub, int ms) {
  int64_t deadline = gr_wire_now_ms() + ms;
  while (!log_has(s, sub)) {
    if (gr_wire_now_ms() > deadline) return false;
    sleep_ms(100);
  }
  return true;
}

/* The scenario's bounds against the server's state before it. */
static void check_bounds(const server *s, const usage *before, bool vm_too, const char *what) {
  usage now = usage_of(s);
  long rss = (now.rss_kb - before->rss_kb) * 1024, vm = (now.vm_kb - before->vm_kb) * 1024,
       logb = now.log_bytes - before->log_bytes;
  printf("  %s: RSS %+.1f MiB, VmSize %+.1f MiB, log %+ld bytes\n", what, rss / (double)MIB,
         vm / (double)MIB, logb);
  GR_CHECK_MSG(server_alive(s), "%s: the server died", what);
  GR_CHECK_MSG(rss <= GROWTH_MAX, "%s: RSS grew by %ld bytes", what, rss);
  if (vm_too) GR_CHECK_MSG(vm <= GROWTH_MAX, "%s: VmSize grew by %ld bytes", what, vm);
  GR_CHECK_MSG(logb <= LOG_MAX, "%s: the log grew by %ld bytes", what, logb);
  GR_CHECK_MSG(!log_has(s, "Error from accept"), "%s: libevent's accept warning", what);
}

/* Starts a server and serves a first client (its network thread's memory
 * is then in place): the baseline. On failure, a failed check and the
 * server stopped. */
static bool warm_server(server *s, long nofile, const char *const *extra, usage *base) {
  double secs;
  gr_error err = {.msg = "it did not start"};
  bool ok = server_start(s, nofile, extra) && real_client(s->port, &secs, &err);
  GR_CHECK_MSG(ok, "the first client: %s", err.msg);
  if (!ok) {
    server_stop(s);
    return false;
  }
  sleep_ms(200);
  *base = usage_of(s);
  return true;
}

/* After the attack: a real client is served, the bounds held; the server
 * is stopped. */
static void scenario_end(server *s, const usage *base, bool vm_too, const char *what) {
  CHECK_REAL_CLIENT(s->port);
  check_bounds(s, base, vm_too, what);
  server_stop(s);
}

static void close_all(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close_reset(fds[i]);
}

/* ---- the scenarios, against processes -------------------------------------------- */

/* ulimit -n 128, and a connection limit above what the descriptors allow:
 * accept() fails with EMFILE. Silent connections are closed to make room
 * (a real client is served during the attack); connections that finished
 * their handshake cannot be, and the listener pauses instead of spinning. */
static void test_out_of_descriptors(void) {
  server s;
  usage base;
  const char *extra[] = {"--max-connections", "100000", NULL};
  if (!warm_server(&s, 128, extra, &base)) return;
  enum { N = 200 };
  int fds[N];
  int made = 0;
  for (int i = 0; i < N; i++)
    if ((fds[i] = dial_raw(s.port, 2000)) >= 0) made++;
  printf("  %d silent connections made\n", made);
  sleep_ms(1500);            /* old enough to make room */
  CHECK_REAL_CLIENT(s.port); /* a silent one made room for it */
  GR_CHECK(log_has(&s, "closed to make room for a new connection (Too many open files)"));
  close_all(fds, N);
  /* connections that finish their handshake at once: not to be closed for room */
  made = 0;
  uint8_t f[256];
  size_t fn = auth_bytes(f, sizeof f);
  for (int i = 0; i < N; i++) {
    fds[i] = dial_raw(s.port, 200); /* a full backlog drops the SYN: give up soon */
    if (fds[i] >= 0 && send_some(fds[i], f, fn, 1000) == fn) made++;
  }
  printf("  %d connections sent a frame\n", made);
  sleep_ms(1000);
  usage u0 = usage_of(&s);
  double t0 = gt_now();
  sleep_ms(3000);
  usage u1 = usage_of(&s);
  double wall = gt_now() - t0, cpu = u1.cpu_s - u0.cpu_s;
  printf("  out of descriptors: %.2f s of CPU in %.2f s\n", cpu, wall);
  GR_CHECK_MSG(cpu < 0.05 * wall, "%.2f s of CPU in %.2f s while out of descriptors", cpu, wall);
  GR_CHECK(log_has(&s, "cannot accept connections: Too many open files"));
  close_all(fds, N);
  scenario_end(&s, &base, false, "out of descriptors");
}

/* 500 connections that send nothing: a real client is served meanwhile,
 * and the handshake deadline (10 s) closes them. */
static void test_idle_connections(void) {
  server s;
  usage base;
  if (!warm_server(&s, 0, NULL, &base)) return;
  enum { N = 500 };
  int fds[N], made = 0;
  for (int i = 0; i < N; i++)
    if ((fds[i] = dial_raw(s.port, 2000)) >= 0) made++;
  GR_CHECK_EQ_INT(made, N);
  sleep_ms(500);
  CHECK_REAL_CLIENT(s.port);
  int closed = 0;
  for (int i = 0; i < N; i++) /* all within 30 s (the deadline is 10 s) */
    if (fds[i] >= 0 && wait_closed(fds[i], 30000)) closed++;
  GR_CHECK_EQ_INT(closed, made);
  /* 500 closed, a line each at most 10 times in 10 s */
  int lines = log_count(&s, "did not send a frame within 10000 ms (the handshake deadline)");
  GR_CHECK_MSG(lines >= 1 && lines <= 30, "%d lines about the deadline", lines);
  close_all(fds, N);
  scenario_end(&s, &base, false, "500 idle connections");
}

/* Slowloris: 20 connections each sending a frame a byte a second; the
 * handshake deadline closes them (they were still open after 25 s). */
static void test_slowloris(void) {
  server s;
  usage base;
  if (!warm_server(&s, 0, NULL, &base)) return;
  enum { N = 20 };
  int fds[N];
  bool open[N];
  uint8_t f[64];
  size_t fn = frame_bytes(GR_MSG_GET_STATUS, 1, 0, f, sizeof f);
  for (int i = 0; i < N; i++) open[i] = (fds[i] = dial_raw(s.port, 2000)) >= 0;
  double t0 = gt_now();
  int still = N;
  for (size_t b = 0; still > 0 && gt_now() - t0 < 25; b++) {
    still = 0;
    for (int i = 0; i < N; i++) {
      if (!open[i]) continue;
      char junk[256];
      ssize_t r = read(fds[i], junk, sizeof junk); /* its HELLO, or the end */
      if (r == 0 || (r < 0 && errno != EAGAIN) ||
          send(fds[i], f + b % (fn - 1), 1, MSG_NOSIGNAL) != 1)
        open[i] = false;
      else
        still++;
    }
    if (b == 3) CHECK_REAL_CLIENT(s.port);
    sleep_ms(1000);
  }
  printf("  slowloris: %d of %d connections open after %.1f s\n", still, N, gt_now() - t0);
  GR_CHECK_EQ_INT(still, 0);
  close_all(fds, N);
  scenario_end(&s, &base, false, "slowloris");
}

/* 300 connections that finish their handshake, then send a RUN header
 * announcing a 4 GiB body and 100 of its bytes: nothing is reserved for
 * the announcement (it took 1.26 TB of address space). */
static void test_huge_body_headers(void) {
  server s;
  usage base;
  if (!warm_server(&s, 0, NULL, &base)) return;
  enum { N = 300 };
  int fds[N], made = 0;
  uint8_t f[256] = {0};
  size_t n1 = auth_bytes(f, sizeof f);
  size_t n2 = frame_bytes(GR_MSG_RUN, 2, 0xffffffffu, f + n1, sizeof f - n1);
  size_t total = n1 + n2 + 100; /* and 100 body bytes (zeros) */
  for (int i = 0; i < N; i++)
    if ((fds[i] = dial_raw(s.port, 2000)) >= 0 && send_all(fds[i], f, total)) made++;
  GR_CHECK_EQ_INT(made, N);
  sleep_ms(1500);
  scenario_end(&s, &base, true, "300 headers of 4 GiB bodies");
  close_all(fds, N);
}

/* 10,000 short connections sending garbage: the log stays small. */
static void test_garbage_connections(void) {
  server s;
  usage base;
  if (!warm_server(&s, 0, NULL, &base)) return;
  enum { N = 10000, AT_ONCE = 32 };
  static const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  int made = 0;
  for (int i = 0; i < N; i += AT_ONCE) {
    int fds[AT_ONCE];
    for (int k = 0; k < AT_ONCE; k++) {
      fds[k] = dial_raw(s.port, 2000);
      if (fds[k] >= 0 && send_all(fds[k], junk, sizeof junk - 1)) made++;
    }
    for (int k = 0; k < AT_ONCE; k++)
      if (fds[k] >= 0) wait_closed(fds[k], 2000), close_reset(fds[k]);
  }
  printf("  %d garbage connections\n", made);
  GR_CHECK(made > N / 2);
  GR_CHECK(log_has(&s, "not a graphrun frame"));
  GR_CHECK(log_wait(&s, "more lines like this were suppressed in the last", 20000));
  scenario_end(&s, &base, false, "10,000 garbage connections");
}

/* ---- units ------------------------------------------------------------------- */

typedef struct lines {
  char text[16384];
  int n;
} lines;

static void collect(void *arg, const char *line) {
  lines *l = arg;
  size_t used = strlen(l->text);
  snprintf(l->text + used, sizeof l->text - used, "%s\n", line);
  l->n++;
}

static void test_rate_limiter(void) {
  gr_loglimit_set_rate(3, 1500);
  gr_loglimit ll;
  gr_loglimit_init(&ll);
  lines out = {.n = 0};
  static const char kind_a[] = "a", kind_b[] = "b";
  for (int i = 0; i < 100; i++) {
    char line[32];
    snprintf(line, sizeof line, "line a%d", i);
    gr_loglimit_emit(&ll, kind_a, line, collect, &out);
  }
  gr_loglimit_emit(&ll, kind_b, "line b0", collect, &out); /* kinds are apart */
  GR_CHECK_EQ_INT(out.n, 4);
  GR_CHECK(strstr(out.text, "line a2\n") && !strstr(out.text, "line a3\n"));
  gr_loglimit_flush(&ll, collect, &out); /* the window goes on: nothing yet */
  GR_CHECK_EQ_INT(out.n, 4);
  sleep_ms(1600);
  gr_loglimit_flush(&ll, collect, &out);
  GR_CHECK_EQ_INT(out.n, 5);
  GR_CHECK_STR_CONTAINS(out.text, "97 more lines like this were suppressed in the last ");
  GR_CHECK_STR_CONTAINS(out.text, " s: line a99\n");
  gr_loglimit_flush(&ll, collect, &out); /* said once */
  GR_CHECK_EQ_INT(out.n, 5);
  /* a new window: 3 lines, then the next line after it brings the summary */
  out = (lines){.n = 0};
  for (int i = 0; i < 5; i++) gr_loglimit_emit(&ll, kind_a, "again", collect, &out);
  GR_CHECK_EQ_INT(out.n, 3);
  sleep_ms(1600);
  gr_loglimit_emit(&ll, kind_a, "later", collect, &out);
  GR_CHECK_EQ_INT(out.n, 5);
  GR_CHECK_STR_CONTAINS(out.text, "2 more lines like this were suppressed");
  GR_CHECK(strstr(out.text, "suppressed") < strstr(out.text, "later"));
  /* all kinds together: 3 bursts a window, then a summary per kind */
  gr_loglimit_destroy(&ll);
  gr_loglimit_init(&ll);
  static const char kinds[20];
  out = (lines){.n = 0};
  for (int i = 0; i < 20; i++) gr_loglimit_emit(&ll, &kinds[i], "many kinds", collect, &out);
  GR_CHECK_EQ_INT(out.n, 9);
  sleep_ms(1600);
  gr_loglimit_flush(&ll, collect, &out);
  GR_CHECK_EQ_INT(out.n, 9 + 11);
  /* no limit */
  gr_loglimit_set_rate(-1, 0);
  out = (lines){.n = 0};
  for (int i = 0; i < 200; i++) gr_loglimit_emit(&ll, kind_b, "x", collect, &out);
  GR_CHECK_EQ_INT(out.n, 200);
  gr_loglimit_set_rate(0, 0);
  gr_loglimit_destroy(&ll);
}

/* A body's memory follows the bytes that arrived: doubling from 4 KiB,
 * never the announced size ahead of them; small bodies in the pool, large
 * ones in a mapping; the finished buffer is 64-byte aligned and whole. */
static void test_body_growth(void) {
  GR_CHECK_EQ_INT(gr_rxbody_next_cap(0, 1, 0xffffffffu), 4096); /* 4 GiB announced */
  GR_CHECK_EQ_INT(gr_rxbody_next_cap(0, 100, 64), 64);
  GR_CHECK_EQ_INT(gr_rxbody_next_cap(4096, 4097, 1 << 30), 8192);
  GR_CHECK_EQ_INT(gr_rxbody_next_cap(8192, 300000, 1 << 30), 300000);
  GR_CHECK(gr_rxbody_next_cap(1 << 20, (1 << 20) + 1, 1 << 30) == (size_t)2 << 20);
  const size_t len = 3 * MIB + 123, chunk = 10000;
  gr_rxbody b = {0};
  size_t got = 0, most = 0;
  bool ok = true;
  while (got < len && ok) {
    size_t take = len - got < chunk ? len - got : chunk;
    if (got + take > b.cap) {
      size_t cap = gr_rxbody_next_cap(b.cap, got + take, len);
      ok = gr_rxbody_grow(&b, cap, got, len, NULL) == GR_OK && b.cap == cap;
    }
    for (size_t i = 0; ok && i < take; i++) gr_rxbody_data(&b)[got + i] = (uint8_t)((got + i) * 7);
    got += take;
    /* never more than twice what arrived, and the first 4 KiB */
    if (b.cap > 2 * got + chunk + 4096) most = b.cap;
  }
  GR_CHECK(ok);
  GR_CHECK_MSG(most == 0, "%zu bytes held for %zu arrived", most, got);
  GR_CHECK(b.map != NULL); /* a large body: a mapping */
  gr_buffer *buf = gr_rxbody_finish(&b, len);
  GR_CHECK(buf && b.cap == 0 && b.map == NULL);
  if (!buf) return;
  GR_CHECK((uintptr_t)buf->data % 64 == 0);
  bool same = true;
  for (size_t i = 0; i < len; i++) same = same && ((uint8_t *)buf->data)[i] == (uint8_t)(i * 7);
  GR_CHECK(same);
  gr_buffer_release(buf);
  /* a small body stays in the pool */
  gr_rxbody s = {0};
  GR_CHECK(gr_rxbody_grow(&s, 100, 0, 100, NULL) == GR_OK && s.buf && !s.map);
  memset(gr_rxbody_data(&s), 5, 100);
  gr_buffer *sb = gr_rxbody_finish(&s, 100);
  GR_CHECK(sb && (uintptr_t)sb->data % 64 == 0 && ((uint8_t *)sb->data)[99] == 5);
  gr_buffer_release(sb);
}

/* Receives a body of len bytes as the transport does (growing as 64 KiB
 * pieces arrive, each written once), the bytes a function of seed; the
 * finished buffer, NULL on failure. *moves (may be NULL): how many times
 * the bytes that had arrived moved to other memory as it grew. */
static gr_buffer *receive_body_moves(size_t len, uint8_t seed, int *moves) {
  const size_t chunk = 65536;
  gr_rxbody b = {0};
  if (moves) *moves = 0;
  for (size_t got = 0; got < len;) {
    size_t take = len - got < chunk ? len - got : chunk;
    uint8_t *was = gr_rxbody_data(&b);
    if (got + take > b.cap &&
        gr_rxbody_grow(&b, gr_rxbody_next_cap(b.cap, got + take, len), got, len, NULL) != GR_OK) {
      gr_rxbody_free(&b);
      return NULL;
    }
    if (moves && got > 0 && gr_rxbody_data(&b) != was) ++*moves;
    memset(gr_rxbody_data(&b) + got, (uint8_t)(seed + got / chunk), take);
    got += take;
  }
  gr_buffer *buf = gr_rxbody_finish(&b, len);
  if (!buf) gr_rxbody_free(&b);
  return buf;
}

static gr_buffer *receive_body(size_t len, uint8_t seed) {
  return receive_body_moves(len, seed, NULL);
}

static bool body_is(const gr_buffer *buf, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; i += 4096)
    if (((const uint8_t *)buf->data)[i] != (uint8_t)(seed + i / 65536)) return false;
  return ((const uint8_t *)buf->data)[len - 1] == (uint8_t)(seed + (len - 1) / 65536);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* A large body's mapping is kept when its buffer is freed, and the next
 * large body is received into it: its pages are there, so receiving it
 * takes no page faults (a fresh mapping takes one per page, each page
 * zeroed by the kernel first). A much larger kept mapping is left for a
 * larger body; the kept bytes are bounded. */
static void test_body_mapping_reused(void) {
  const size_t len = 8 * MIB + 4321, pages = len / 4096;
  gr_rxbody_set_keep((size_t)64 << 20);
  gr_buffer *first = receive_body(len, 1);
  GR_CHECK(first && body_is(first, len, 1));
  if (!first) return;
  void *where = first->data;
  size_t kept0 = gr_rxbody_kept_bytes();
  gr_buffer_release(first);
  GR_CHECK(gr_rxbody_kept_bytes() >= kept0 + len);
  long f0 = minor_faults();
  gr_buffer *again = receive_body(len, 2);
  long faults = minor_faults() - f0;
  GR_CHECK(again && body_is(again, len, 2));
  GR_CHECK_MSG(again && again->data == where, "the kept mapping was not reused");
  GR_CHECK_MSG(faults < (long)pages / 4, "%ld page faults receiving %zu pages into a kept mapping",
               faults, pages);
  /* a 2 MiB body leaves the 8 MiB mapping for a larger body */
  gr_buffer_release(again);
  size_t kept1 = gr_rxbody_kept_bytes();
  gr_buffer *small = receive_body(2 * MIB, 3);
  GR_CHECK(small && body_is(small, 2 * MIB, 3));
  GR_CHECK(small && small->data != where);
  GR_CHECK(gr_rxbody_kept_bytes() == kept1);
  gr_buffer_release(small);
  /* bounded: nothing over the limit is kept */
  gr_rxbody_set_keep(4 * MIB);
  GR_CHECK(gr_rxbody_kept_bytes() <= 4 * MIB);
  gr_buffer *big = receive_body(len, 4);
  GR_CHECK(big && body_is(big, len, 4));
  gr_buffer_release(big);
  GR_CHECK(gr_rxbody_kept_bytes() <= 4 * MIB);
  gr_rxbody_set_keep(0);
  GR_CHECK_EQ_INT(gr_rxbody_kept_bytes(), 0);
  gr_rxbody_set_keep(GR_RXMAP_KEEP_BYTES);
}

/* A small body starts in an idle pooled buffer of its whole size class
 * when the pool has one, and grows in it without copying what arrived; with
 * none idle it grows by doubling as before (and takes nothing from the
 * system ahead of its bytes). */
static void test_body_idle_pool(void) {
  gr_buffer_pool_set_limit((size_t)1 << 30); /* off by default under ASan */
  const size_t len = 800000;
  int moves = -1;
  gr_buffer_pool_trim();
  gr_buffer *cold = receive_body_moves(len, 5, &moves);
  GR_CHECK(cold && body_is(cold, len, 5));
  GR_CHECK_MSG(moves > 0, "%d moves with nothing idle", moves);
  gr_buffer_release(cold); /* idle now, in the class of 1 MiB */
  gr_buffer *warm = receive_body_moves(len, 6, &moves);
  GR_CHECK(warm && body_is(warm, len, 6));
  GR_CHECK_MSG(moves == 0, "the bytes moved %d times as the body grew", moves);
  gr_buffer_release(warm);
  gr_buffer_pool_trim();
#if defined(__SANITIZE_ADDRESS__)
  gr_buffer_pool_set_limit(0);
#endif
}

/* ---- in-process servers --------------------------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char srv_log[1 << 16];

static void log_hook(void *arg, const char *line) {
  pthread_mutex_lock(&log_mu);
  size_t used = strlen(srv_log);
  if (used + strlen(line) + 2 >= sizeof srv_log) used = 0, srv_log[0] = '\0'; /* the newest */
  snprintf(srv_log + used, sizeof srv_log - used, "%s\n", line);
  pthread_mutex_unlock(&log_mu);
}

static bool srv_log_wait(const char *sub, int ms) {
  int64_t deadline = gr_wire_now_ms() + ms;
  for (;;) {
    pthread_mutex_lock(&log_mu);
    bool has = strstr(srv_log, sub) != NULL;
    pthread_mutex_unlock(&log_mu);
    if (has) return true;
    if (gr_wire_now_ms() > deadline) return false;
    sleep_ms(5);
  }
}

static gr_server *start_inproc(int max_conns) {
  pthread_mutex_lock(&log_mu);
  srv_log[0] = '\0';
  pthread_mutex_unlock(&log_mu);
  gr_server_options so = {.job = "worker",
                          .bind = "127.0.0.1:0",
                          .insecure = true,
                          .cluster_id = CLUSTER,
                          .inter_op_threads = 2,
                          .log_fn = log_hook,
                          .max_connections = max_conns};
  gr_server *srv = NULL;
  gr_error err;
  GR_CHECK_OK(gr_server_new(&so, &srv, &err), err);
  return srv;
}

static gr_master *master_of(int port, int heartbeat_ms) {
  char a[64];
  snprintf(a, sizeof a, "127.0.0.1:%d", port);
  const char *addr = a;
  gr_master_options mo = {.num_tasks = 1,
                          .addresses = &addr,
                          .insecure = true,
                          .cluster_id = CLUSTER,
                          .connect_timeout_ms = 10000,
                          .heartbeat_ms = heartbeat_ms};
  gr_master *m = NULL;
  gr_error err;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  return m;
}

/* Short deadlines (handshake 1.5 s, idle 2 s, keepalive 0.4 s): a silent
 * connection is closed at each; a lease held through a master without
 * heartbeats (as the between-graph chief's) lives through four idle
 * periods on its keepalives, and its master still runs steps. */
static void test_deadlines_and_keepalive(void) {
  gr_transport_set_deadlines(1500, 2000, 400);
  gr_server *srv = start_inproc(0);
  if (!srv) {
    gr_transport_set_deadlines(0, 0, 0);
    return;
  }
  int port = gr_server_port(srv);
  gr_transport_stats st0;
  gr_transport_get_stats(&st0);
  gr_master *holder = master_of(port, -1);
  gr_lease_state ls;
  gr_error err;
  if (holder) GR_CHECK_OK(gr_master_lease(holder, 0, "chief", "the chief", &ls, &err), err);
  int silent = dial_raw(port, 2000), quiet = dial_raw(port, 2000);
  GR_CHECK(silent >= 0 && quiet >= 0 && handshake_raw(quiet));
  GR_CHECK(wait_closed(silent, 15000));
  GR_CHECK(srv_log_wait("did not send a frame within 1500 ms (the handshake deadline)", 10000));
  GR_CHECK(wait_closed(quiet, 20000));
  GR_CHECK(srv_log_wait("(the idle deadline)", 10000));
  sleep_ms(8000); /* four idle periods */
  gr_master *watcher = master_of(port, -1);
  if (watcher) {
    GR_CHECK_OK(gr_master_lease(watcher, 0, "chief", NULL, &ls, &err), err);
    GR_CHECK_MSG(ls.held, "the lease ended: its connection was closed");
  }
  if (holder) { /* its connection works */
    gr_graph *g = gr_graph_new();
    gr_output y = gr_add(g, gr_const_f32(g, 2), gr_const_f32(g, 3));
    gr_session *s = gr_master_session_new(holder, g, NULL, &err);
    gr_tensor out;
    gr_status st = s ? gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err) : GR_ERR_INTERNAL;
    GR_CHECK_OK(st, err);
    if (st == GR_OK) {
      GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 5, 0);
      gr_tensor_release(&out);
    }
    gr_session_free(s);
    gr_graph_free(g);
  }
  gr_transport_stats st1;
  gr_transport_get_stats(&st1);
  GR_CHECK(st1.keepalives - st0.keepalives >= 4);
  GR_CHECK(st1.deadlines - st0.deadlines >= 2);
  gr_master_free(watcher);
  gr_master_free(holder);
  if (silent >= 0) close(silent);
  if (quiet >= 0) close(quiet);
  gr_server_free(srv);
  gr_transport_set_deadlines(0, 0, 0);
}

/* A limit of 6: silent connections make room for a real client; 6 that
 * finished their handshake do not, and a seventh is refused; once they
 * close, clients are served again. */
static void test_connection_limit(void) {
  enum { MAX = 6 };
  gr_server *srv = start_inproc(MAX);
  if (!srv) return;
  int port = gr_server_port(srv);
  int fds[MAX];
  for (int i = 0; i < MAX; i++) { /* accepted: each got its HELLO */
    int type;
    uint64_t id;
    fds[i] = dial_raw(port, 2000);
    GR_CHECK(fds[i] >= 0 && read_frame(fds[i], 10000, &type, &id) && type == GR_MSG_HELLO);
  }
  sleep_ms(1200); /* a second old: they may make room (not one just accepted) */
  gr_master *m = master_of(port, -1);
  GR_CHECK(m != NULL);
  GR_CHECK(srv_log_wait("closed to make room for a new connection (6 connections open", 10000));
  gr_master_free(m);
  close_all(fds, MAX);
  for (int i = 0; i < MAX; i++) {
    fds[i] = -1;
    for (int t = 0; t < 100 && fds[i] < 0; t++) { /* until the closes above are seen */
      int fd = dial_raw(port, 2000);
      if (fd >= 0 && handshake_raw(fd))
        fds[i] = fd;
      else if (fd >= 0)
        close(fd), sleep_ms(50);
    }
    GR_CHECK(fds[i] >= 0);
  }
  int extra = dial_raw(port, 2000), type;
  uint64_t id;
  GR_CHECK(extra >= 0 && !read_frame(extra, 10000, &type, &id)); /* closed, no HELLO */
  GR_CHECK(srv_log_wait("refused a connection from 127.0.0.1:", 10000));
  if (extra >= 0) close(extra);
  close_all(fds, MAX);
  bool served = false;
  for (int t = 0; t < 100 && !served; t++) {
    double secs;
    gr_error err;
    served = real_client(port, &secs, &err);
    if (!served) sleep_ms(100);
  }
  GR_CHECK(served);
  gr_server_free(srv);
}

/* A 1 MiB receive budget: of two 4 MiB frames arriving at once, one goes
 * past the budget and the other waits (not read), and both arrive whole;
 * an 8 MiB feed and its 8 MiB fetch pass through a master's and a server's
 * budget. */
static void test_receive_budget(void) {
  gr_transport_set_budget(MIB); /* the loops made from here on */
  gr_server *srv = start_inproc(0);
  if (!srv) {
    gr_transport_set_budget(0);
    return;
  }
  int port = gr_server_port(srv);
  enum { BODY = 4 * MIB, FIRST = 3 * MIB };
  uint8_t *bytes = calloc(1, BODY);
  uint8_t f[64];
  size_t fn = frame_bytes(GR_MSG_RUN, 2, BODY, f, sizeof f);
  int a = dial_raw(port, 2000), b = dial_raw(port, 2000);
  GR_CHECK(bytes && a >= 0 && b >= 0 && handshake_raw(a) && handshake_raw(b));
  if (!bytes || a < 0 || b < 0) goto out;
  GR_CHECK(send_all(a, f, fn) && send_all(a, bytes, FIRST));
  gr_transport_stats st;
  for (int i = 0; i < 1000; i++) { /* a holds more than the budget: the one past it */
    gr_transport_get_stats(&st);
    if (st.rx_held > 2 * MIB) break;
    sleep_ms(10);
  }
  GR_CHECK(send_all(b, f, fn));
  size_t b_sent = send_some(b, bytes, FIRST, 3000); /* the server stops reading it */
  bool paused = false;
  for (int i = 0; i < 1000 && !paused; i++) {
    gr_transport_get_stats(&st);
    paused = st.rx_paused >= 1;
    if (!paused) sleep_ms(10);
  }
  GR_CHECK_MSG(paused, "no connection waited for the budget (%lld bytes held)",
               (long long)st.rx_held);
  GR_CHECK_MSG(st.rx_held <= MIB + BODY + MIB, "%lld bytes held", (long long)st.rx_held);
  GR_CHECK(send_all(a, bytes + FIRST, BODY - FIRST));
  int type;
  uint64_t id;
  GR_CHECK(read_frame(a, 10000, &type, &id) && type == GR_MSG_RESPONSE && id == 2);
  GR_CHECK(send_all(b, bytes + b_sent, BODY - b_sent));
  GR_CHECK(read_frame(b, 10000, &type, &id) && type == GR_MSG_RESPONSE && id == 2);
  gr_transport_get_stats(&st);
  GR_CHECK_EQ_INT(st.rx_paused, 0);
  { /* a healthy large transfer both ways */
    gr_master *m = master_of(port, 100);
    gr_graph *g = gr_graph_new();
    enum { N = 2 * MIB };
    gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {N}});
    gr_output y = gr_mul(g, x, gr_const_f32(g, 2));
    gr_error err;
    gr_tensor xv, out;
    gr_session *s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
    GR_CHECK(s != NULL);
    if (s && gr_tensor_alloc(&xv, GR_F32, &(gr_shape){1, {N}}, &err) == GR_OK) {
      float *p = gr_tensor_data(&xv);
      for (int i = 0; i < N; i++) p[i] = (float)(i % 1000);
      gr_feed feed = {x, &xv};
      gr_status rs = gr_session_run(s, &feed, 1, &y, 1, &out, NULL, 0, &err);
      GR_CHECK_OK(rs, err);
      if (rs == GR_OK) {
        const float *q = gr_tensor_data(&out);
        bool same = true;
        for (int i = 0; i < N; i++) same = same && q[i] == 2.0f * (float)(i % 1000);
        GR_CHECK(same);
        gr_tensor_release(&out);
      }
      gr_tensor_release(&xv);
    }
    gr_session_free(s);
    gr_graph_free(g);
    gr_master_free(m);
  }
out:
  if (a >= 0) close(a);
  if (b >= 0) close(b);
  free(bytes);
  gr_server_free(srv);
  gr_transport_set_budget(0);
}

int main(void) {
  gt_proc_isolate();
  struct rlimit rl; /* room for the attackers' connections */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  GR_RUN(test_rate_limiter);
  GR_RUN(test_body_growth);
  GR_RUN(test_body_mapping_reused);
  GR_RUN(test_body_idle_pool);
  GR_RUN(test_deadlines_and_keepalive);
  GR_RUN(test_connection_limit);
  GR_RUN(test_receive_budget);
  GR_RUN(test_out_of_descriptors);
  GR_RUN(test_idle_connections);
  GR_RUN(test_slowloris);
  GR_RUN(test_huge_body_headers);
  GR_RUN(test_garbage_connections);
  return gr_test_finish();
}
