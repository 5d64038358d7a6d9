/* make bench-recovery: how fast a cluster run notices a killed task and
 * goes on. `graphrun launch --ps 1 --workers 2` trains the Fashion-MNIST
 * MLP of examples/fashion_mlp_cluster.gr with a checkpoint every 50 steps;
 * this program kills a random task with SIGKILL 20 times (each after the
 * previous recovery, at a random moment) and reads the run's lines as they
 * come, timestamped here:
 *
 *   detect_ms  the kill -> "step N failed: lost ..." (the abort sent to
 *              every task and the client told; the client awaits the other
 *              tasks' ends of the step before its next request)
 *   resume_ms  the restarted task listening again -> "recovered" (sessions
 *              re-created, graphs registered, checkpoint restored)
 *   lost_steps the steps redone ("(k steps lost)"), at most the interval
 *
 *   floor_ms   a kill -> end of file on a plain TCP connection this program
 *              holds to the victim's own port: when the kernel has torn the
 *              killed process down far enough to close its sockets, which
 *              no peer can learn of sooner (worker 0, holding the data set,
 *              takes several ms); 20 more kills of the same tasks in the
 *              same order, after the timed ones
 *
 * Last line: recovery: detect_ms_p50=A detect_ms_p99=B resume_ms=C lost_steps=D
 * floor_ms_p50=E floor_ms_p99=F (resume_ms: the median; lost_steps: the most).
 * --smoke: 2 kills. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

#define MAX_KILLS 100

static char out[1 << 20];
static size_t out_len;

/* Reads what the run printed until a line holding `want` arrives after
 * position from (or the deadline); *at: that line's arrival time. */
static const char *wait_line(int fd, const char *want, size_t from, double seconds, double *at) {
  double end = bench_now() + seconds;
  while (bench_now() < end) {
    const char *hit = out_len > from ? strstr(out + from, want) : NULL;
    if (hit && strchr(hit, '\n')) return hit;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 20) > 0) {
      ssize_t r = read(fd, out + out_len, sizeof out - 1 - out_len);
      if (r <= 0) return NULL;
      out_len += (size_t)r;
      out[out_len] = '\0';
      *at = bench_now();
    }
  }
  return NULL;
}

/* The task's current pid: launch names it when ready and at each restart. */
static pid_t pid_of(const char *task) {
  char ready[64], restarted[64];
  snprintf(ready, sizeof ready, "%s=127.0.0.1:", task);
  snprintf(restarted, sizeof restarted, "%s restarted (pid ", task);
  const char *at = strstr(out, ready), *p = at ? strstr(at, "(pid ") : NULL;
  pid_t pid = p ? (pid_t)atoi(p + 5) : 0;
  for (const char *r = strstr(out, restarted); r; r = strstr(r + 1, restarted))
    pid = (pid_t)atoi(r + strlen(restarted));
  return pid;
}

/* The task's port, from launch's lines, or 0. */
static int port_of(const char *task) {
  char ready[64];
  snprintf(ready, sizeof ready, "%s=127.0.0.1:", task);
  const char *at = strstr(out, ready);
  return at ? atoi(at + strlen(ready)) : 0;
}

/* ms from SIGKILL of pid to end of file on a connection of our own to its
 * port (what it sent first read away); -1 on failure. */
static double socket_end_ms(pid_t pid, int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    if (s >= 0) close(s);
    return -1;
  }
  char buf[4096];
  struct pollfd pf = {.fd = s, .events = POLLIN};
  while (poll(&pf, 1, 100) > 0 && read(s, buf, sizeof buf) > 0) { /* its greeting */
  }
  double t0 = bench_now(), ms = -1;
  if (kill(pid, SIGKILL) == 0)
    while (poll(&pf, 1, 5000) > 0) {
      ssize_t r = read(s, buf, sizeof buf);
      if (r <= 0) {
        ms = (bench_now() - t0) * 1000;
        break;
      }
    }
  close(s);
  return ms;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int kills = bench_is_smoke(argc, argv) ? 2 : 20;
  char exe[PATH_MAX], file[PATH_MAX], ckpt[] = "/tmp/gr_bench_recovery_XXXXXX";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (!slash) return 1;
  strcpy(slash, "/../../graphrun");
  snprintf(file, sizeof file, "%s/examples/fashion_mlp_cluster.gr", GR_SOURCE_DIR);
  if (!mkdtemp(ckpt)) return 1; /* the sharded checkpoint directory */
  signal(SIGPIPE, SIG_IGN);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return 1;
  pid_t launch = fork();
  if (launch == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execl(exe, "graphrun", "launch", "--ps", "1", "--workers", "2", "--restarts", "100", file,
          "--steps", "1000000", "--ckpt", ckpt, "--save-every", "50", "--max-failures", "1000",
          "--timeout", "60", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  int fd = fds[0];
  double t, detect[MAX_KILLS], resume[MAX_KILLS], floor_ms[MAX_KILLS];
  const char *victims[MAX_KILLS];
  int nfloor = 0;
  int lost_max = 0, done = 0;
  const char *tasks[] = {"ps:0", "worker:0", "worker:1"};
  srand(7);
  if (!wait_line(fd, "tasks ready", 0, 60, &t) ||
      !wait_line(fd, "saved a checkpoint after step 100 ", 0, 120, &t)) {
    fprintf(stderr, "bench-recovery: the cluster run did not start:\n%s\n", out);
    goto out;
  }
  for (; done < kills; done++) {
    const char *task = tasks[rand() % 3];
    pid_t victim = pid_of(task);
    usleep((useconds_t)(100000 + rand() % 300000));
    double t_idle;
    wait_line(fd, "\x01", out_len, 0.05, &t_idle); /* take in what arrived meanwhile */
    size_t mark = out_len;
    victims[done] = task;
    double t_kill = bench_now(), t_fail, t_up, t_rec;
    if (victim <= 0 || kill(victim, SIGKILL) != 0) {
      fprintf(stderr, "bench-recovery: cannot kill %s (pid %d)\n", task, (int)victim);
      break;
    }
    const char *fail = wait_line(fd, " failed: ", mark, 30, &t_fail);
    const char *up = wait_line(fd, "listening on", mark, 30, &t_up);
    const char *rec = wait_line(fd, "recovered in", mark, 60, &t_rec);
    if (!fail || !up || !rec) {
      fprintf(stderr, "bench-recovery: kill %d of %s: no recovery seen:\n%s\n", done + 1, task,
              out + mark);
      break;
    }
    detect[done] = (t_fail - t_kill) * 1000;
    resume[done] = (t_rec - t_up) * 1000;
    const char *l = strstr(rec, "(");
    int lost = l ? atoi(l + 1) : 0;
    if (lost > lost_max) lost_max = lost;
    printf("kill %2d: %-8s detected %6.1f ms, resumed %6.1f ms after it listened, %d steps lost\n",
           done + 1, task, detect[done], resume[done], lost);
    fflush(stdout);
    wait_line(fd, "restarted (pid", mark, 10, &t); /* its new pid, for a later kill */
  }
  /* the floor: the same tasks killed again, timed on a socket of our own */
  for (int k = 0; done == kills && k < done; k++) {
    usleep((useconds_t)(100000 + rand() % 300000));
    double t_idle;
    wait_line(fd, "\x01", out_len, 0.05, &t_idle);
    size_t mark = out_len;
    floor_ms[nfloor] = socket_end_ms(pid_of(victims[k]), port_of(victims[k]));
    if (floor_ms[nfloor] < 0 || !wait_line(fd, "recovered in", mark, 60, &t_idle)) {
      fprintf(stderr, "bench-recovery: floor kill %d of %s failed:\n%s\n", k + 1, victims[k],
              out + mark);
      break;
    }
    printf("floor %2d: %-8s its own socket ended %5.1f ms after SIGKILL\n", k + 1, victims[k],
           floor_ms[nfloor]);
    fflush(stdout);
    nfloor++;
    wait_line(fd, "restarted (pid", mark, 10, &t_idle);
  }
out:
  kill(launch, SIGINT);
  double end = bench_now() + 10;
  int status;
  while (waitpid(launch, &status, WNOHANG) == 0 && bench_now() < end) usleep(20000);
  kill(-launch, SIGKILL);
  waitpid(launch, &status, 0);
  bench_remove_tree("bench_recovery", ckpt);
  if (done < kills) return 1;
  qsort(detect, (size_t)done, sizeof *detect, cmp);
  qsort(floor_ms, (size_t)nfloor, sizeof *floor_ms, cmp);
  if (nfloor < done) return 1;
  int i99 = (done * 99 + 99) / 100 - 1, f99 = (nfloor * 99 + 99) / 100 - 1;
  printf("recovery: detect_ms_p50=%.1f detect_ms_p99=%.1f resume_ms=%.0f lost_steps=%d "
         "floor_ms_p50=%.1f floor_ms_p99=%.1f\n",
         detect[done / 2], detect[i99], bench_median(resume, done), lost_max, floor_ms[nfloor / 2],
         floor_ms[f99]);
  return 0;
}
