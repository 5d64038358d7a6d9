/* gr_kernel_parallel: a kernel's chunks spread over the executor's inter-op
 * threads (gr_op.h). The calling thread runs chunks too and takes back every
 * chunk no other thread has started, so it waits only for chunks already
 * running elsewhere: a busy pool costs nothing but the split. Jobs are
 * recycled through a free list, so a steady loop allocates nothing. */
#include <pthread.h>
#include <stdlib.h>

#include "core/gr_op.h"
#include "core/threadpool.h"

typedef struct par_job {
  void (*fn)(void *arg, int chunk);
  void *arg;
  int n;
  int next;     /* atomic: the next chunk to claim */
  int finished; /* atomic: chunks done */
  int refs;     /* atomic: the caller and each scheduled task */
  int waiting;  /* under mu: the caller sleeps on cv */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct par_job *next_free;
} par_job;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static pthread_mutex_t free_mu = PTHREAD_MUTEX_INITIALIZER;
static par_job *free_jobs;

static par_job *job_get(void) {
  pthread_mutex_lock(&free_mu);
  par_job *j = free_jobs;
  if (j) free_jobs = j->next_free;
  pthread_mutex_unlock(&free_mu);
  if (j) return j;
  j = calloc(1, sizeof *j);
  if (!j) return NULL;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  return j;
}

static void job_unref(par_job *j) {
  if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&free_mu);
  j->next_free = free_jobs;
  free_jobs = j;
  pthread_mutex_unlock(&free_mu);
}

/* Claims and runs chunks until none is left. */
static void run_chunks(par_job *j) {
  for (;;) {
    int i = __atomic_fetch_add(&j->next, 1, __ATOMIC_ACQ_REL);
    if (i >= j->n) return;
    j->fn(j->arg, i);
    if (__atomic_add_fetch(&j->finished, 1, __ATOMIC_ACQ_REL) == j->n) {
      pthread_mutex_lock(&j->mu);
      if (j->waiting) pthread_cond_signal(&j->cv);
      pthread_mutex_unlock(&j->mu);
    }
  }
}

static void task(void *arg) {
  par_job *j = arg;
  run_chunks(j);
  job_unref(j);
}

int gr_kernel_parallel_threads(const gr_kernel_ctx *ctx) {
  return 1 + (ctx->pool ? gr_threadpool_size(ctx->pool) : 0);
}

void gr_kernel_parallel(gr_kernel_ctx *ctx, int n, void (*fn)(void *arg, int chunk), void *arg) {
  int helpers = gr_kernel_parallel_threads(ctx) - 1;
  if (helpers > n - 1) helpers = n - 1;
  par_job *j = helpers > 0 ? job_get() : NULL;
  if (!j) { /* one thread, or out of memory: in order on this thread */
    for (int i = 0; i < n; i++) fn(arg, i);
    return;
  }
  j->fn = fn;
  j->arg = arg;
  j->n = n;
  j->waiting = 0;
  __atomic_store_n(&j->next, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&j->finished, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&j->refs, 1 + helpers, __ATOMIC_RELEASE);
  for (int k = 0; k < helpers; k++) gr_threadpool_schedule_first(ctx->pool, task, j);
  run_chunks(j);
  /* only chunks other threads have started remain: they are short, so spin
   * a little before sleeping */
  for (int spin = 0; spin < 1000 && __atomic_load_n(&j->finished, __ATOMIC_ACQUIRE) < n; spin++)
    cpu_relax();
  if (__atomic_load_n(&j->finished, __ATOMIC_ACQUIRE) < n) {
    pthread_mutex_lock(&j->mu);
    j->waiting = 1;
    while (__atomic_load_n(&j->finished, __ATOMIC_ACQUIRE) < n) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
  }
  job_unref(j);
}
