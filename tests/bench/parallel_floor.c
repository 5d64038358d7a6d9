/* The sync_floor pair (parallel_floor.h): two forked processes, a raw
 * Unix socket between them, commands and answers over pipes. */
#include "parallel_floor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"
#include "distributed/transport_internal.h" /* gr_local_tune */

typedef struct command {
  int steps, exchange, variant;
} command;

typedef struct child_args {
  int rank, fd, peer_fd, cmd_r, reply_w; /* fd: its end of the pair's socket */
  int others[2]; /* the first child's pipe ends, inherited by the second: closed */
  size_t floats;
  void *(*setup)(void);
  void (*step)(void *ctx, int variant);
} child_args;

struct floor_pair {
  int cmd_w[2], reply_r[2];
};

/* Sends send_len bytes and receives recv_len bytes on the non-blocking fd
 * at once (both ranks send before they read: neither may wait for the
 * other's socket buffer). */
static void duplex(int fd, const char *out, size_t out_len, char *in, size_t in_len) {
  size_t sent = 0, got = 0;
  while (sent < out_len || got < in_len) {
    struct pollfd p = {
        .fd = fd, .events = (short)((sent < out_len ? POLLOUT : 0) | (got < in_len ? POLLIN : 0))};
    if (poll(&p, 1, 30000) <= 0) bench_die("floor pair", "the peer stopped exchanging");
    if (p.revents & (POLLERR | POLLHUP) && !(p.revents & POLLIN))
      bench_die("floor pair", "peer gone");
    if (sent < out_len && (p.revents & POLLOUT)) {
      ssize_t w = send(fd, out + sent, out_len - sent, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) bench_die("floor pair: send", NULL);
      if (w > 0) sent += (size_t)w;
    }
    if (got < in_len && (p.revents & POLLIN)) {
      ssize_t r = recv(fd, in + got, in_len - got, 0);
      if (r == 0) bench_die("floor pair", "peer closed");
      if (r < 0 && errno != EAGAIN && errno != EINTR) bench_die("floor pair: recv", NULL);
      if (r > 0) got += (size_t)r;
    }
  }
}

/* Ring all-reduce (sum) of buf[n] between the two ranks: rank r reduces
 * segment r (the peer sends it), then sends it back reduced. */
static void ring_sum(int fd, int rank, float *buf, size_t n, float *tmp) {
  size_t half = n / 2, off[2] = {0, half}, len[2] = {half, n - half};
  int mine = rank, theirs = 1 - rank;
  duplex(fd, (const char *)(buf + off[theirs]), len[theirs] * sizeof(float), (char *)tmp,
         len[mine] * sizeof(float));
  for (size_t i = 0; i < len[mine]; i++) buf[off[mine] + i] += tmp[i];
  duplex(fd, (const char *)(buf + off[mine]), len[mine] * sizeof(float),
         (char *)(buf + off[theirs]), len[theirs] * sizeof(float));
}

/* Its end of the pair's Unix socket, set up as the runtime sets up a
 * connection between tasks of one host (gr_local_tune's buffers),
 * non-blocking. */
static int own_end(const child_args *a) {
  close(a->peer_fd);
  gr_local_tune(a->fd);
  fcntl(a->fd, F_SETFL, fcntl(a->fd, F_GETFL) | O_NONBLOCK);
  return a->fd;
}

static void child_main(void *arg, int life) {
  (void)life;
  const child_args *a = arg;
  for (int k = 0; k < 2; k++)
    if (a->others[k] >= 0) close(a->others[k]);
  int fd = own_end(a);
  float *buf = calloc(a->floats + 1, sizeof(float)),
        *tmp = calloc(a->floats / 2 + 1, sizeof(float));
  if (!buf || !tmp) bench_die("floor pair", "out of memory");
  for (size_t i = 0; i < a->floats; i++) buf[i] = 1e-3f * (float)(i % 1000);
  void *ctx = NULL;
  command c;
  while (read(a->cmd_r, &c, sizeof c) == (ssize_t)sizeof c) {
    if (!ctx) ctx = a->setup();
    char b = 0;
    duplex(fd, &b, 1, &b, 1); /* both start together */
    double t0 = bench_now();
    for (int k = 0; k < c.steps; k++) {
      a->step(ctx, c.variant);
      if (c.exchange) ring_sum(fd, a->rank, buf, a->floats, tmp);
    }
    double s = bench_now() - t0;
    if (write(a->reply_w, &s, sizeof s) != (ssize_t)sizeof s) break;
  }
  _exit(0);
}

floor_pair *floor_pair_spawn(int life_r, int life_w, size_t floats, void *(*setup)(void),
                             void (*step)(void *ctx, int variant)) {
  floor_pair *fp = calloc(1, sizeof *fp);
  int sv[2];
  if (!fp || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    bench_die("floor pair: socketpair", NULL);
  for (int r = 0; r < 2; r++) {
    int cmd[2], reply[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(reply, O_CLOEXEC) != 0) bench_die("pipe", NULL);
    child_args a = {r, sv[r], sv[1 - r], cmd[0], reply[1], {-1, -1}, floats, setup, step};
    if (r == 1) a.others[0] = fp->cmd_w[0], a.others[1] = fp->reply_r[0];
    bench_spawn(life_r, life_w, child_main, &a);
    close(cmd[0]);
    close(reply[1]);
    fp->cmd_w[r] = cmd[1];
    fp->reply_r[r] = reply[0];
  }
  close(sv[0]), close(sv[1]);
  return fp;
}

double floor_pair_run(floor_pair *fp, int steps, bool exchange, int variant) {
  command c = {steps, exchange, variant};
  double worst = 0;
  for (int r = 0; r < 2; r++)
    if (write(fp->cmd_w[r], &c, sizeof c) != (ssize_t)sizeof c) bench_die("floor pair", "gone");
  for (int r = 0; r < 2; r++) {
    double s;
    struct pollfd p = {.fd = fp->reply_r[r], .events = POLLIN};
    if (poll(&p, 1, 150000) != 1 || read(fp->reply_r[r], &s, sizeof s) != (ssize_t)sizeof s)
      bench_die("floor pair", "no answer within 150 s");
    if (s > worst) worst = s;
  }
  return worst / steps;
}

void floor_pair_free(floor_pair *fp) {
  for (int r = 0; r < 2; r++) close(fp->cmd_w[r]), close(fp->reply_r[r]);
  free(fp);
}
