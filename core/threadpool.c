#include "core/threadpool.h"
#include "core/gr_alloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct task {
  void (*fn)(void *);
  void *arg;
} task;

struct gr_threadpool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  task *q;
  size_t cap, head, count;
  bool stop;
  int n;
  int sleepers; /* workers waiting on cv (under mu) */
  pthread_t *threads;
};

static _Thread_local gr_threadpool *current;

gr_threadpool *gr_threadpool_current(void) {
  return current;
}

static void *worker(void *arg) {
  gr_threadpool *p = arg;
  current = p;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->count && !p->stop) {
      p->sleepers++;
      pthread_cond_wait(&p->cv, &p->mu);
      p->sleepers--;
    }
    if (!p->count && p->stop) break;
    task t = p->q[p->head];
    p->head = (p->head + 1) % p->cap;
    __atomic_store_n(&p->count, p->count - 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->mu);
    t.fn(t.arg);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void gr_threadpool_set_name(gr_threadpool *p, const char *name) {
  char cut[16];
  snprintf(cut, sizeof cut, "%s", name);
  for (int i = 0; p && i < p->n; i++) pthread_setname_np(p->threads[i], cut);
}

gr_threadpool *gr_threadpool_new(int num_threads) {
  gr_threadpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->cap = 256;
  p->q = gr_alloc_array(p->cap, sizeof(task));
  p->threads = calloc((size_t)(num_threads > 0 ? num_threads : 1), sizeof(pthread_t));
  if (!p->q || !p->threads) {
    free(p->q);
    free(p->threads);
    free(p);
    return NULL;
  }
  for (int i = 0; i < num_threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p) != 0) break;
    p->n++;
  }
  return p;
}

void gr_threadpool_free(gr_threadpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  __atomic_store_n(&p->stop, true, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
  /* a pool without workers may still hold closures: run them */
  while (p->count) {
    task t = p->q[p->head];
    p->head = (p->head + 1) % p->cap;
    p->count--;
    t.fn(t.arg);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->q);
  free(p->threads);
  free(p);
}

int gr_threadpool_size(const gr_threadpool *p) {
  return p ? p->n : 0;
}

/* Queues fn(arg) at the back, or at the front when first. */
static void enqueue(gr_threadpool *p, void (*fn)(void *), void *arg, bool first) {
  if (!p || p->n == 0) {
    fn(arg);
    return;
  }
  pthread_mutex_lock(&p->mu);
  if (p->count == p->cap) {
    size_t cap = p->cap * 2;
    task *q = gr_alloc_array(cap, sizeof(task));
    if (!q) {
      pthread_mutex_unlock(&p->mu);
      fn(arg);
      return;
    }
    for (size_t i = 0; i < p->count; i++) q[i] = p->q[(p->head + i) % p->cap];
    free(p->q);
    p->q = q;
    p->cap = cap;
    p->head = 0;
  }
  if (first) {
    p->head = (p->head + p->cap - 1) % p->cap;
    p->q[p->head] = (task){fn, arg};
  } else {
    p->q[(p->head + p->count) % p->cap] = (task){fn, arg};
  }
  __atomic_store_n(&p->count, p->count + 1, __ATOMIC_RELAXED);
  if (p->sleepers > 0) pthread_cond_signal(&p->cv); /* a busy worker finds it anyway */
  pthread_mutex_unlock(&p->mu);
}

void gr_threadpool_schedule(gr_threadpool *p, void (*fn)(void *), void *arg) {
  enqueue(p, fn, arg, false);
}

void gr_threadpool_schedule_first(gr_threadpool *p, void (*fn)(void *), void *arg) {
  enqueue(p, fn, arg, true);
}
