/* The raw fan-out floor of bench_scale (fanout_floor.h). */
#include "fanout_floor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"

enum { MSG = 64 };

struct fanout {
  int n;
  int *fd;
};

static bool full_io(int fd, char *buf, bool out) {
  for (size_t done = 0; done < MSG;) {
    ssize_t k =
        out ? send(fd, buf + done, MSG - done, MSG_NOSIGNAL) : read(fd, buf + done, MSG - done);
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* a child: connect, then answer every request until the connection ends */
static void answer_main(void *arg, int life) {
  (void)life;
  struct sockaddr_in *to = arg;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)to, sizeof *to) != 0) _exit(1);
  nodelay(fd);
  char buf[MSG];
  while (full_io(fd, buf, false) && full_io(fd, buf, true)) {}
  _exit(0);
}

fanout *fanout_spawn(int n, int life_r, int life_w) {
  fanout *f = calloc(1, sizeof *f);
  if (!f || !(f->fd = calloc((size_t)n, sizeof *f->fd))) bench_die("fanout", "out of memory");
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, n) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &len) != 0)
    bench_die("fanout", "no loopback listening socket");
  for (int k = 0; k < n; k++) {
    bench_spawn(life_r, life_w, answer_main, &a);
    struct pollfd p = {.fd = ls, .events = POLLIN};
    if (poll(&p, 1, 60000) != 1 || (f->fd[k] = accept(ls, NULL, NULL)) < 0)
      bench_die("fanout", "a child did not connect within 60 s");
    nodelay(f->fd[k]);
    f->n = k + 1;
  }
  close(ls);
  return f;
}

double fanout_step_ms(fanout *f, int n, int steps) {
  if (n > f->n) n = f->n;
  double *t = calloc((size_t)steps, sizeof *t);
  if (!t) bench_die("fanout", "out of memory");
  char buf[MSG] = "step";
  for (int i = 0; i < steps; i++) {
    double a = bench_now();
    for (int k = 0; k < n; k++)
      if (!full_io(f->fd[k], buf, true)) bench_die("fanout", "a child went away");
    for (int k = 0; k < n; k++)
      if (!full_io(f->fd[k], buf, false)) bench_die("fanout", "a child went away");
    t[i] = bench_now() - a;
  }
  double ms = 1e3 * bench_median(t, steps);
  free(t);
  return ms;
}

void fanout_free(fanout *f) {
  for (int k = 0; k < f->n; k++) close(f->fd[k]);
  free(f->fd);
  free(f);
}
