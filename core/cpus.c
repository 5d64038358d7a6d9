/* How many CPUs this process may use: the online cores, fewer when its
 * affinity mask (taskset, Slurm's task/affinity), its cgroup's CPU quota
 * (a container's --cpus, Slurm's task/cgroup) or SLURM_CPUS_PER_TASK
 * allow fewer. Found once (the first call), as the threads it sizes are.
 * And binding a process to a list of CPUs, or to its share of them
 * (graphrun server --cpus, graphrun launch --cpu-bind). */
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"

/* The cgroup's quota in CPUs, rounded up (0: none): cgroup v2's cpu.max
 * ("max 100000" or "150000 100000"), else v1's cfs quota and period. */
static int cgroup_cpus(void) {
  long long quota = -1, period = 0;
  FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
  if (f) {
    char q[32];
    if (fscanf(f, "%31s %lld", q, &period) == 2 && q[0] != 'm') quota = atoll(q);
    fclose(f);
  } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
    if (fscanf(f, "%lld", &quota) != 1) quota = -1;
    fclose(f);
    if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
      if (fscanf(f, "%lld", &period) != 1) period = 0;
      fclose(f);
    }
  }
  if (quota <= 0 || period <= 0) return 0;
  long long n = (quota + period - 1) / period;
  return n > 4096 ? 4096 : (int)n;
}

static int cpus;

static void count_cpus(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n = online > 0 ? (int)online : 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n)
    n = CPU_COUNT(&set);
  int quota = cgroup_cpus();
  if (quota > 0 && quota < n) n = quota;
  const char *slurm = getenv("SLURM_CPUS_PER_TASK");
  int per_task = slurm ? atoi(slurm) : 0;
  if (per_task > 0 && per_task < n) n = per_task;
  cpus = n;
}

int gr_num_cores(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, count_cpus);
  return cpus;
}

/* Parses list ("0-3,6": CPU numbers and ranges, comma-separated) into set. */
static gr_status parse_cpus(const char *list, cpu_set_t *set, gr_error *err) {
  CPU_ZERO(set);
  const char *p = list;
  for (;;) {
    char *end;
    if (!isdigit((unsigned char)*p)) break;
    long a = strtol(p, &end, 10), b = a;
    p = end;
    if (*p == '-') {
      if (!isdigit((unsigned char)p[1])) break;
      b = strtol(p + 1, &end, 10);
      p = end;
    }
    if (a > b || b >= CPU_SETSIZE)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "CPU list '%s': %ld-%ld is not a range of CPUs 0-%d", list, a, b,
                          CPU_SETSIZE - 1);
    for (long c = a; c <= b; c++) CPU_SET((int)c, set);
    if (*p == '\0') return GR_OK;
    if (*p != ',') break;
    p++;
  }
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "CPU list '%s': want CPU numbers and ranges such as 0-3,6 (at '%s')", list,
                      p);
}

/* The CPUs this process may run on, listed ("0-1,4") into out. */
static void format_cpus(const cpu_set_t *set, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
    int w = e > c ? snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", c, e)
                  : snprintf(out + n, cap - n, "%s%d", n ? "," : "", c);
    if (w < 0 || (size_t)w >= cap - n) return; /* cut: still a valid prefix */
    n += (size_t)w;
    c = e;
  }
}

gr_status gr_cpus_bind(const char *list, gr_error *err) {
  cpu_set_t want, may;
  GR_TRY(parse_cpus(list, &want, err));
  if (sched_getaffinity(0, sizeof may, &may) != 0)
    return gr_error_set(err, GR_ERR_INTERNAL, "CPU list '%s': cannot read this process's CPUs",
                        list);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &want) && !CPU_ISSET(c, &may)) {
      char mine[256];
      format_cpus(&may, mine, sizeof mine);
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "CPU list '%s': CPU %d is not one this process may use (%s)", list, c,
                          mine);
    }
  if (sched_setaffinity(0, sizeof want, &want) != 0)
    return gr_error_set(err, GR_ERR_INTERNAL, "CPU list '%s': the kernel refused the binding",
                        list);
  return GR_OK;
}

bool gr_cpus_share(int k, int n, char *out, size_t cap) {
  cpu_set_t may, share;
  if (n < 1 || k < 0 || k >= n || cap == 0 || sched_getaffinity(0, sizeof may, &may) != 0)
    return false;
  int count = CPU_COUNT(&may), per = count / n > 0 ? count / n : 1;
  int first = count >= n ? k * per : k % count; /* fewer CPUs than tasks: round robin */
  CPU_ZERO(&share);
  for (int c = 0, i = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &may)) continue;
    if (i >= first && i < first + per) CPU_SET(c, &share);
    i++;
  }
  format_cpus(&share, out, cap);
  return out[0] != '\0';
}
