#include "core/gr_buffer.h"
#include "core/buffer_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/gr_status.h"

/* Size classes are powers of two from 64 B (class 6) to 2^GR_MAX_CLASS bytes.
 * The buffer header sits in the first GR_BUFFER_ALIGN bytes of the allocation,
 * so a pooled buffer is one malloc. */
#define GR_MIN_CLASS 6
#define GR_MAX_CLASS 31
#define GR_HEADER    GR_BUFFER_ALIGN

typedef struct free_node {
  struct free_node *next;
} free_node;

typedef struct size_class {
  pthread_mutex_t mu;
  gr_buffer *head; /* linked through data pointer slot reuse: see push/pop */
} size_class;

static size_class classes[GR_MAX_CLASS + 1] = {
    [0 ... GR_MAX_CLASS] = {PTHREAD_MUTEX_INITIALIZER, NULL}};
/* Under AddressSanitizer the pool is off by default, so ASan sees every free
 * (use-after-free and leak reports then point at the real culprit). */
#if defined(__SANITIZE_ADDRESS__)
static size_t pool_limit = 0;
#else
static size_t pool_limit = (size_t)1 << 30;
#endif
static size_t idle_bytes, live_bytes;
static uint64_t system_allocs, pool_hits;

_Static_assert(sizeof(gr_buffer) <= GR_HEADER, "buffer header must fit its slot");

static int class_of(size_t bytes) {
  int c = GR_MIN_CLASS;
  while (c <= GR_MAX_CLASS && ((size_t)1 << c) < bytes) c++;
  return c;
}

/* Free-list link: the first word of the data area of an idle buffer. */
static gr_buffer **link_of(gr_buffer *b) {
  return (gr_buffer **)b->data;
}

gr_buffer *gr_buffer_alloc_idle(size_t bytes) {
  int c = class_of(bytes);
  if (c > GR_MAX_CLASS) return NULL;
  size_class *sc = &classes[c];
  pthread_mutex_lock(&sc->mu);
  gr_buffer *b = sc->head;
  if (b) {
    sc->head = *link_of(b);
    __atomic_fetch_sub(&idle_bytes, b->capacity, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&sc->mu);
  if (!b) return NULL;
  __atomic_fetch_add(&pool_hits, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&live_bytes, b->capacity, __ATOMIC_RELAXED);
  b->refcount = 1;
  return b;
}

gr_buffer *gr_buffer_alloc(size_t bytes) {
  gr_buffer *idle = gr_buffer_alloc_idle(bytes);
  if (idle) return idle;
  int c = class_of(bytes);
  size_t cap = c <= GR_MAX_CLASS ? (size_t)1 << c : (bytes + GR_BUFFER_ALIGN - 1) & ~(size_t)63;
  char *mem = aligned_alloc(GR_BUFFER_ALIGN, GR_HEADER + cap);
  if (!mem) return NULL;
  __atomic_fetch_add(&system_allocs, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&live_bytes, cap, __ATOMIC_RELAXED);
  gr_buffer *b = (gr_buffer *)mem;
  b->refcount = 1;
  b->size_class = c <= GR_MAX_CLASS ? c : -1;
  b->capacity = cap;
  b->data = mem + GR_HEADER;
  b->deleter = NULL;
  b->deleter_arg = NULL;
  return b;
}

gr_buffer *gr_buffer_wrap(void *data, size_t bytes, void (*deleter)(void *, void *), void *arg) {
  gr_buffer *b = aligned_alloc(GR_BUFFER_ALIGN, GR_HEADER);
  if (!b) return NULL;
  b->refcount = 1;
  b->size_class = -1;
  b->capacity = bytes;
  b->data = data;
  b->deleter = deleter;
  b->deleter_arg = arg;
  return b;
}

void gr_buffer_retain(gr_buffer *b) {
  __atomic_fetch_add(&b->refcount, 1, __ATOMIC_RELAXED);
}

bool gr_buffer_is_unique(const gr_buffer *b) {
  return __atomic_load_n(&b->refcount, __ATOMIC_ACQUIRE) == 1;
}

void gr_buffer_release(gr_buffer *b) {
  if (!b) return;
  int left = __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL);
  GR_ASSERT(left >= 0);
  if (left > 0) return;
  if (b->deleter || (b->size_class < 0 && b->data != (char *)b + GR_HEADER)) {
    if (b->deleter) b->deleter(b->data, b->deleter_arg);
    free(b);
    return;
  }
  __atomic_fetch_sub(&live_bytes, b->capacity, __ATOMIC_RELAXED);
  if (b->size_class >= 0 &&
      __atomic_load_n(&idle_bytes, __ATOMIC_RELAXED) + b->capacity <= pool_limit) {
    size_class *sc = &classes[b->size_class];
    pthread_mutex_lock(&sc->mu);
    *link_of(b) = sc->head;
    sc->head = b;
    __atomic_fetch_add(&idle_bytes, b->capacity, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&sc->mu);
    return;
  }
  free(b);
}

void gr_buffer_pool_get_stats(gr_buffer_pool_stats *out) {
  out->system_allocs = __atomic_load_n(&system_allocs, __ATOMIC_RELAXED);
  out->pool_hits = __atomic_load_n(&pool_hits, __ATOMIC_RELAXED);
  out->idle_bytes = __atomic_load_n(&idle_bytes, __ATOMIC_RELAXED);
  out->live_bytes = __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
}

void gr_buffer_pool_set_limit(size_t bytes) {
  __atomic_store_n(&pool_limit, bytes, __ATOMIC_RELAXED);
}

void gr_buffer_pool_trim(void) {
  for (int c = 0; c <= GR_MAX_CLASS; c++) {
    size_class *sc = &classes[c];
    pthread_mutex_lock(&sc->mu);
    gr_buffer *b = sc->head;
    sc->head = NULL;
    pthread_mutex_unlock(&sc->mu);
    while (b) {
      gr_buffer *next = *link_of(b);
      __atomic_fetch_sub(&idle_bytes, b->capacity, __ATOMIC_RELAXED);
      free(b);
      b = next;
    }
  }
}
