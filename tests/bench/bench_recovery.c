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
 *   floor_ms   the same kill -> end of file on a socket for a plain process
 *              holding as much memory as the victim did (its resident size
 *              read just before the kill): Linux frees a killed process's
 *              memory before it closes its sockets, so no peer can learn of
 *              the death sooner; the floor of detect_ms on this machine
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

/* Resident memory of pid in KiB (0 when unknown). */
static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

/* ms from SIGKILL of a process holding kib KiB of touched memory to end of
 * file on its socket; -1 on failure. */
static double death_seen_ms(long kib) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    size_t n = (size_t)kib * 1024;
    char *mem = malloc(n ? n : 1);
    if (mem) memset(mem, 1, n); /* resident, as the victim's was */
    if (write(sv[1], "r", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(sv[1]);
  char c;
  double ms = -1;
  struct pollfd pf = {.fd = sv[0], .events = POLLIN};
  if (child > 0 && poll(&pf, 1, 30000) > 0 && read(sv[0], &c, 1) == 1) {
    double t0 = bench_now();
    kill(child, SIGKILL);
    if (poll(&pf, 1, 30000) > 0 && read(sv[0], &c, 1) == 0) ms = (bench_now() - t0) * 1000;
  }
  if (child > 0) kill(child, SIGKILL), waitpid(child, NULL, 0);
  close(sv[0]);
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
  long rss[MAX_KILLS];
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
    rss[done] = victim > 0 ? rss_kib(victim) : 0;
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
out:
  kill(launch, SIGINT);
  double end = bench_now() + 10;
  int status;
  while (waitpid(launch, &status, WNOHANG) == 0 && bench_now() < end) usleep(20000);
  kill(-launch, SIGKILL);
  waitpid(launch, &status, 0);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", ckpt);
  if (system(rm) != 0) fprintf(stderr, "bench_recovery: could not remove %s\n", ckpt);
  if (done < kills) return 1;
  /* the floor: the same kills of plain processes holding the same memory */
  for (int k = 0; k < done; k++) {
    floor_ms[k] = death_seen_ms(rss[k]);
    printf("floor %2d: a process of %ld MiB: its socket ends %.1f ms after SIGKILL\n", k + 1,
           rss[k] / 1024, floor_ms[k]);
    if (floor_ms[k] < 0) return 1;
  }
  qsort(detect, (size_t)done, sizeof *detect, cmp);
  qsort(floor_ms, (size_t)done, sizeof *floor_ms, cmp);
  int i99 = (done * 99 + 99) / 100 - 1;
  printf("recovery: detect_ms_p50=%.1f detect_ms_p99=%.1f resume_ms=%.0f lost_steps=%d "
         "floor_ms_p50=%.1f floor_ms_p99=%.1f\n",
         detect[done / 2], detect[i99], bench_median(resume, done), lost_max, floor_ms[done / 2],
         floor_ms[i99]);
  return 0;
}
