/* Step traces (gr_trace.h): a growing array of events under a mutex. */
#include "core/gr_trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct gr_step_trace {
  pthread_mutex_t mu;
  gr_trace_event *ev;
  int n, cap;
};

gr_step_trace *gr_step_trace_new(void) {
  gr_step_trace *t = calloc(1, sizeof *t);
  if (t) pthread_mutex_init(&t->mu, NULL);
  return t;
}

void gr_step_trace_free(gr_step_trace *t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  free(t->ev);
  free(t);
}

void gr_step_trace_add(gr_step_trace *t, const gr_trace_event *e) {
  pthread_mutex_lock(&t->mu);
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 256;
    gr_trace_event *more = gr_realloc_array(t->ev, (size_t)cap, sizeof *more);
    if (!more) {
      pthread_mutex_unlock(&t->mu);
      return;
    }
    t->ev = more;
    t->cap = cap;
  }
  t->ev[t->n++] = *e;
  pthread_mutex_unlock(&t->mu);
}

int gr_step_trace_count(const gr_step_trace *t) {
  return t->n;
}

const gr_trace_event *gr_step_trace_event(const gr_step_trace *t, int i) {
  return i >= 0 && i < t->n ? &t->ev[i] : NULL;
}

void gr_step_trace_clear(gr_step_trace *t) {
  pthread_mutex_lock(&t->mu);
  t->n = 0;
  pthread_mutex_unlock(&t->mu);
}

int64_t gr_trace_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
