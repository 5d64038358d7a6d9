/* A fixed-size pool of worker threads running closures in FIFO order
 * (those queued for idle time only when no other one waits).
 *
 *   gr_threadpool *p = gr_threadpool_new(2);   // NULL on failure
 *   gr_threadpool_schedule(p, fn, arg);          // fn(arg) on a worker
 *   gr_threadpool_free(p);                        // runs what is queued, joins
 */
#ifndef GR_THREADPOOL_H
#define GR_THREADPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gr_status.h"

typedef struct gr_threadpool gr_threadpool;

gr_threadpool *gr_threadpool_new(int num_threads);
/* Finishes every queued closure, then joins the workers. */
void gr_threadpool_free(gr_threadpool *p);
/* Queues fn(arg). With a pool of 0 threads, runs it inline. Never fails
 * (grows the queue; runs inline if out of memory). */
void gr_threadpool_schedule(gr_threadpool *p, void (*fn)(void *), void *arg);
/* As schedule, but ahead of everything queued: for work someone waits on
 * now (the other half of a product), not for work that can wait (a batch
 * made ahead). */
void gr_threadpool_schedule_first(gr_threadpool *p, void (*fn)(void *), void *arg);
/* As schedule, but run only when nothing that schedule or schedule_first
 * queued is waiting: for work that fills a pool's idle time (a batch made
 * ahead for the next step) rather than delay the work queued after it.
 * It may wait long on a busy pool: whoever queues it must not wait for it
 * to start. */
void gr_threadpool_schedule_idle(gr_threadpool *p, void (*fn)(void *), void *arg);
int gr_threadpool_size(const gr_threadpool *p);
/* Names the pool's threads (at most 15 characters; longer is cut) for
 * top -H, perf and gdb. */
void gr_threadpool_set_name(gr_threadpool *p, const char *name);
/* The pool whose worker calls it, NULL on any other thread. */
gr_threadpool *gr_threadpool_current(void);
/* The CPUs this process may use (at least 1): the online cores, fewer when
 * the affinity mask, the cgroup's CPU quota or SLURM_CPUS_PER_TASK allow
 * fewer (core/cpus.c); found at the first call. The default number of
 * threads of sessions and servers. */
int gr_num_cores(void);
/* Binds this process to the CPUs of list ("0-3,6"), each one it may use
 * now (else an error naming it): the calling thread and every thread it
 * starts afterwards, as taskset does. Call it first, before the process
 * starts threads or asks gr_num_cores. */
gr_status gr_cpus_bind(const char *list, gr_error *err);
/* Share k of n (0 <= k < n) of the CPUs this process may use, listed into
 * out: CPU_COUNT / n consecutive ones each (the rest unused), or with
 * fewer CPUs than shares CPU k modulo their count. false: none. */
bool gr_cpus_share(int k, int n, char *out, size_t cap);

/* A latency-bound thread (a network loop) asks the scheduler for a short
 * slice (core/thread_slice.c): it runs soon after it wakes where tasks
 * share cores, with the same share of the CPU. Best effort: false when the
 * kernel refused or us is 0 (a thread under another policy than the
 * normal one is left alone). Affects the calling thread only. */
#define GR_NET_SLICE_US_DEFAULT 100
bool gr_thread_request_slice(int us);
/* The slice for network threads: GRAPHRUN_NET_SLICE_US (microseconds,
 * 100-100000, or 0 for the kernel's default), else the default above; an
 * error naming the variable when it is malformed. */
gr_status gr_net_slice_us(int *us, gr_error *err);

#endif
