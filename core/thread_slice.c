/* A short scheduler slice for a latency-bound thread (Linux 6.12 and
 * later, EEVDF's custom slices; older kernels ignore the request).
 *
 * Where tasks share cores (two tasks on a 2-core machine, a loaded host),
 * a network thread woken for a frame waits for a compute thread's whole
 * slice (0.75-3 ms) before it runs, and every send, receive and RUN of the
 * step waits with it: a synchronous 2-task step took 0.7-1 ms more for it.
 * With a short slice the thread gets an earlier virtual deadline: it runs
 * soon after it wakes and gives the core back soon. Its share of the CPU
 * does not change (no priority, no privilege): only its latency.
 *
 * Only a thread under the normal policy is touched, and its nice value is
 * kept (a `nice graphrun server` stays nice). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/gr_status.h"
#include "core/threadpool.h"

#ifdef SYS_sched_setattr
/* The kernel's struct sched_attr (include/uapi/linux/sched/types.h), the
 * fields up to sched_period (SCHED_ATTR_SIZE_VER0). */
typedef struct kernel_sched_attr {
  uint32_t size, sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
} kernel_sched_attr;
#endif

gr_status gr_net_slice_us(int *us, gr_error *err) {
  const char *v = getenv("GRAPHRUN_NET_SLICE_US");
  *us = GR_NET_SLICE_US_DEFAULT;
  if (!v || !*v) return GR_OK;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || end == v || (n != 0 && (n < 100 || n > 100000)))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "GRAPHRUN_NET_SLICE_US='%s': give microseconds from 100 to 100000, or 0 "
                        "for the kernel's default slice",
                        v);
  *us = (int)n;
  return GR_OK;
}

bool gr_thread_request_slice(int us) {
#ifdef SYS_sched_setattr
  if (us <= 0) return false;
  kernel_sched_attr a;
  memset(&a, 0, sizeof a);
  if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) != 0) return false;
  if (a.sched_policy != SCHED_OTHER) return false; /* batch, idle, real time: the user's choice */
  a.size = (uint32_t)sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = (uint64_t)us * 1000;
  return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
#else
  (void)us;
  return false;
#endif
}
