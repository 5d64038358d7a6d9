/* How many CPUs this process may use: the online cores, fewer when its
 * affinity mask (taskset, Slurm's task/affinity), its cgroup's CPU quota
 * (a container's --cpus, Slurm's task/cgroup) or SLURM_CPUS_PER_TASK
 * allow fewer. Found once (the first call), as the threads it sizes are. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
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
