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
  /* gr_threadpool_schedule_idle's closures: taken only when q is empty */
  task *iq;
  size_t icap, ihead, icount;
  bool stop;
  int n;
  int sleepers; /* workers waiting on cv (under mu) */
  pthread_t *threads;
};

static _Thread_local gr_threadpool *current;

gr_threadpool *gr_threadpool_current(void) {
  return current;
}

/* The next closure (p->mu held, one queued): the oldest of q, else of iq. */
static task take(gr_threadpool *p) {
  task t;
  if (p->count) {
    t = p->q[p->head];
    p->head = (p->head + 1) % p->cap;
    __atomic_store_n(&p->count, p->count - 1, __ATOMIC_RELAXED);
  } else {
    t = p->iq[p->ihead];
    p->ihead = (p->ihead + 1) % p->icap;
    p->icount--;
  }
  return t;
}

static void *worker(void *arg) {
  gr_threadpool *p = arg;
  current = p;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->count && !p->icount && !p->stop) {
      p->sleepers++;
      pthread_cond_wait(&p->cv, &p->mu);
      p->sleepers--;
    }
    if (!p->count && !p->icount && p->stop) break;
    task t = take(p);
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
  p->cap = p->icap = 256;
  p->q = gr_alloc_array(p->cap, sizeof(task));
  p->iq = gr_alloc_array(p->icap, sizeof(task));
  p->threads = calloc((size_t)(num_threads > 0 ? num_threads : 1), sizeof(pthread_t));
  if (!p->q || !p->iq || !p->threads) {
    free(p->q);
    free(p->iq);
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
  while (p->count || p->icount) {
    task t = take(p);
    t.fn(t.arg);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->q);
  free(p->iq);
  free(p->threads);
  free(p);
}

int gr_threadpool_size(const gr_threadpool *p) {
  return p ? p->n : 0;
}

/* Makes room for one more closure in the ring *q (p->mu held); false when
 * out of memory. */
static bool ring_room(task **q, size_t *cap, size_t *head, size_t count) {
  if (count < *cap) return true;
  task *nq = gr_alloc_array(*cap * 2, sizeof(task));
  if (!nq) return false;
  for (size_t i = 0; i < count; i++) nq[i] = (*q)[(*head + i) % *cap];
  free(*q);
  *q = nq;
  *cap *= 2;
  *head = 0;
  return true;
}

typedef enum where { BACK, FRONT, IDLE } where;

/* Queues fn(arg) at the back of q, at its front, or in iq. */
static void enqueue(gr_threadpool *p, void (*fn)(void *), void *arg, where w) {
  if (!p || p->n == 0) {
    fn(arg);
    return;
  }
  pthread_mutex_lock(&p->mu);
  if (w == IDLE ? !ring_room(&p->iq, &p->icap, &p->ihead, p->icount)
                : !ring_room(&p->q, &p->cap, &p->head, p->count)) {
    pthread_mutex_unlock(&p->mu);
    fn(arg);
    return;
  }
  if (w == IDLE) {
    p->iq[(p->ihead + p->icount++) % p->icap] = (task){fn, arg};
  } else if (w == FRONT) {
    p->head = (p->head + p->cap - 1) % p->cap;
    p->q[p->head] = (task){fn, arg};
  } else {
    p->q[(p->head + p->count) % p->cap] = (task){fn, arg};
  }
  if (w != IDLE) __atomic_store_n(&p->count, p->count + 1, __ATOMIC_RELAXED);
  if (p->sleepers > 0) pthread_cond_signal(&p->cv); /* a busy worker finds it anyway */
  pthread_mutex_unlock(&p->mu);
}

void gr_threadpool_schedule(gr_threadpool *p, void (*fn)(void *), void *arg) {
  enqueue(p, fn, arg, BACK);
}

void gr_threadpool_schedule_first(gr_threadpool *p, void (*fn)(void *), void *arg) {
  enqueue(p, fn, arg, FRONT);
}

void gr_threadpool_schedule_idle(gr_threadpool *p, void (*fn)(void *), void *arg) {
  enqueue(p, fn, arg, IDLE);
}
