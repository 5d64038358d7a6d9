/* The local rendezvous: a hash table of keys under one mutex. An entry holds
 * either a sent value waiting for its Recv or a Recv waiting for its value;
 * it is removed when the two meet. */
#include "core/gr_rendezvous.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap_internal.h"

typedef struct rv_entry {
  struct rv_entry *next;
  uint64_t hash;
  bool has_value, dead;
  gr_tensor value;
  gr_rendezvous_done_fn done; /* set while a Recv waits */
  void *arg;
  char key[];
} rv_entry;

struct gr_rendezvous {
  pthread_mutex_t mu;
  rv_entry **buckets;
  size_t nbuckets, count;
  bool aborted;
  gr_error abort_err;
  gr_transfer_stats stats;
};

enum { RV_INITIAL_BUCKETS = 64 };

gr_rendezvous *gr_rendezvous_new(void) {
  gr_rendezvous *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->buckets = calloc(RV_INITIAL_BUCKETS, sizeof *r->buckets);
  if (!r->buckets) {
    free(r);
    return NULL;
  }
  r->nbuckets = RV_INITIAL_BUCKETS;
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

static void drop_all(gr_rendezvous *r) {
  for (size_t b = 0; b < r->nbuckets; b++) {
    rv_entry *e = r->buckets[b];
    while (e) {
      rv_entry *next = e->next;
      GR_ASSERT(!e->done); /* a waiting Recv would never complete */
      if (e->has_value) gr_tensor_release(&e->value);
      free(e);
      e = next;
    }
    r->buckets[b] = NULL;
  }
  r->count = 0;
}

void gr_rendezvous_free(gr_rendezvous *r) {
  if (!r) return;
  drop_all(r);
  free(r->buckets);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static rv_entry **find_slot(gr_rendezvous *r, const char *key, uint64_t h) {
  rv_entry **p = &r->buckets[h & (r->nbuckets - 1)];
  while (*p && ((*p)->hash != h || strcmp((*p)->key, key) != 0)) p = &(*p)->next;
  return p;
}

static void grow(gr_rendezvous *r) {
  size_t n = r->nbuckets * 2;
  rv_entry **b = calloc(n, sizeof *b);
  if (!b) return; /* longer chains, still correct */
  for (size_t i = 0; i < r->nbuckets; i++)
    for (rv_entry *e = r->buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  free(r->buckets);
  r->buckets = b;
  r->nbuckets = n;
}

/* A new entry for key, linked into its bucket; NULL when out of memory. */
static rv_entry *insert(gr_rendezvous *r, const char *key, uint64_t h) {
  size_t len = strlen(key);
  rv_entry *e = calloc(1, sizeof *e + len + 1);
  if (!e) return NULL;
  memcpy(e->key, key, len + 1);
  e->hash = h;
  if (r->count + 1 > r->nbuckets * 2) grow(r);
  rv_entry **slot = &r->buckets[h & (r->nbuckets - 1)];
  e->next = *slot;
  *slot = e;
  r->count++;
  return e;
}

gr_status gr_rendezvous_send(gr_rendezvous *r, const char *key, const gr_tensor *value, bool dead,
                             gr_error *err) {
  uint64_t h = gr_strhash(key);
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    pthread_mutex_unlock(&r->mu);
    return GR_OK; /* the step is over: the value is not wanted */
  }
  rv_entry **slot = find_slot(r, key, h);
  rv_entry *e = *slot;
  if (e && !e->done) {
    pthread_mutex_unlock(&r->mu);
    return gr_error_set(err, GR_ERR_ALREADY_EXISTS, "rendezvous key '%s' was sent twice", key);
  }
  r->stats.sends++;
  if (!dead && value && value->buf) r->stats.bytes += (int64_t)gr_tensor_num_bytes(value);
  if (e) { /* a Recv waits: hand the value over outside the lock */
    *slot = e->next;
    r->count--;
    pthread_mutex_unlock(&r->mu);
    gr_tensor v = gr_tensor_empty();
    if (!dead && value) gr_tensor_ref(&v, value);
    e->done(e->arg, GR_OK, NULL, &v, dead);
    free(e);
    return GR_OK;
  }
  e = insert(r, key, h);
  if (!e) {
    pthread_mutex_unlock(&r->mu);
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory in the rendezvous");
  }
  e->has_value = true;
  e->dead = dead;
  e->value = gr_tensor_empty();
  if (!dead && value) gr_tensor_ref(&e->value, value);
  pthread_mutex_unlock(&r->mu);
  return GR_OK;
}

void gr_rendezvous_recv(gr_rendezvous *r, const char *key, gr_rendezvous_done_fn done, void *arg) {
  uint64_t h = gr_strhash(key);
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    gr_error e = r->abort_err;
    pthread_mutex_unlock(&r->mu);
    done(arg, e.code, &e, NULL, false);
    return;
  }
  rv_entry **slot = find_slot(r, key, h);
  rv_entry *e = *slot;
  if (e && e->has_value) {
    *slot = e->next;
    r->count--;
    pthread_mutex_unlock(&r->mu);
    done(arg, GR_OK, NULL, &e->value, e->dead); /* the stored reference moves on */
    free(e);
    return;
  }
  gr_error fail;
  if (e) {
    gr_error_set(&fail, GR_ERR_ALREADY_EXISTS, "rendezvous key '%s' was received twice", key);
  } else if ((e = insert(r, key, h)) != NULL) {
    e->done = done;
    e->arg = arg;
    pthread_mutex_unlock(&r->mu);
    return;
  } else {
    gr_error_set(&fail, GR_ERR_RESOURCE_EXHAUSTED, "out of memory in the rendezvous");
  }
  pthread_mutex_unlock(&r->mu);
  done(arg, fail.code, &fail, NULL, false);
}

void gr_rendezvous_abort(gr_rendezvous *r, gr_status code, const char *msg) {
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  r->aborted = true;
  gr_error_set(&r->abort_err, code, "%s", msg);
  /* unlink the waiters, then call them outside the lock */
  rv_entry *waiters = NULL;
  for (size_t b = 0; b < r->nbuckets; b++)
    for (rv_entry **p = &r->buckets[b]; *p;) {
      rv_entry *e = *p;
      if (e->done) {
        *p = e->next;
        r->count--;
        e->next = waiters;
        waiters = e;
      } else {
        p = &e->next;
      }
    }
  gr_error err = r->abort_err;
  pthread_mutex_unlock(&r->mu);
  while (waiters) {
    rv_entry *next = waiters->next;
    waiters->done(waiters->arg, err.code, &err, NULL, false);
    free(waiters);
    waiters = next;
  }
}

int gr_rendezvous_num_pending(gr_rendezvous *r) {
  pthread_mutex_lock(&r->mu);
  int n = (int)r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

gr_transfer_stats gr_rendezvous_stats(gr_rendezvous *r) {
  pthread_mutex_lock(&r->mu);
  gr_transfer_stats s = r->stats;
  pthread_mutex_unlock(&r->mu);
  return s;
}
