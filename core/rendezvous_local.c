/* The local rendezvous (gr_rendezvous_new): a hash map of keys under one
 * mutex. An entry holds either a sent value waiting for its Recv or a Recv
 * waiting for its value; it is removed when the two meet. */
#include "core/gr_rendezvous.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/map.h"

typedef struct rv_entry {
  struct rv_entry *next; /* in the list of waiters an abort calls */
  bool has_value, dead;
  gr_tensor value;
  gr_rendezvous_done_fn done; /* set while a Recv waits */
  void *arg;
  char key[]; /* the map's key */
} rv_entry;

typedef struct local_rv {
  pthread_mutex_t mu;
  gr_map entries; /* key -> rv_entry (owned) */
  bool aborted;
  gr_error abort_err;
  gr_transfer_stats stats;
} local_rv;

static void *local_new(void) {
  local_rv *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  gr_map_init(&r->entries, GR_MAP_STR);
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

static void local_free(void *self) {
  local_rv *r = self;
  void *v;
  for (size_t pos = 0; gr_map_next(&r->entries, &pos, NULL, &v);) {
    rv_entry *e = v;
    GR_ASSERT(!e->done); /* a waiting Recv would never complete */
    if (e->has_value) gr_tensor_release(&e->value);
    free(e);
  }
  gr_map_free(&r->entries);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* A new entry for key in the map; NULL when out of memory. */
static rv_entry *insert(local_rv *r, const char *key) {
  size_t len = strlen(key);
  rv_entry *e = calloc(1, sizeof *e + len + 1);
  if (!e) return NULL;
  memcpy(e->key, key, len + 1);
  if (!gr_map_put_str(&r->entries, e->key, e)) {
    free(e);
    return NULL;
  }
  return e;
}

static gr_status local_send(void *self, const char *key, const gr_tensor *value, bool dead,
                            gr_error *err) {
  local_rv *r = self;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    pthread_mutex_unlock(&r->mu);
    return GR_OK; /* the step is over: the value is not wanted */
  }
  rv_entry *e = gr_map_get_str(&r->entries, key);
  if (e && !e->done) {
    pthread_mutex_unlock(&r->mu);
    return gr_error_set(err, GR_ERR_ALREADY_EXISTS, "rendezvous key '%s' was sent twice", key);
  }
  r->stats.sends++;
  if (!dead && value && value->buf) r->stats.bytes += (int64_t)gr_tensor_num_bytes(value);
  if (e) { /* a Recv waits: hand the value over outside the lock */
    gr_map_remove_str(&r->entries, e->key);
    pthread_mutex_unlock(&r->mu);
    gr_tensor v = gr_tensor_empty();
    if (!dead && value) gr_tensor_ref(&v, value);
    e->done(e->arg, GR_OK, NULL, &v, dead);
    free(e);
    return GR_OK;
  }
  e = insert(r, key);
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

static void local_recv(void *self, const char *key, gr_rendezvous_done_fn done, void *arg) {
  local_rv *r = self;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    gr_error e = r->abort_err;
    pthread_mutex_unlock(&r->mu);
    done(arg, e.code, &e, NULL, false);
    return;
  }
  rv_entry *e = gr_map_get_str(&r->entries, key);
  if (e && e->has_value) {
    gr_map_remove_str(&r->entries, e->key);
    pthread_mutex_unlock(&r->mu);
    done(arg, GR_OK, NULL, &e->value, e->dead); /* the stored reference moves on */
    free(e);
    return;
  }
  gr_error fail;
  if (e) {
    gr_error_set(&fail, GR_ERR_ALREADY_EXISTS, "rendezvous key '%s' was received twice", key);
  } else if ((e = insert(r, key)) != NULL) {
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

static void local_abort(void *self, gr_status code, const char *msg) {
  local_rv *r = self;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  r->aborted = true;
  gr_error_set(&r->abort_err, code, "%s", msg);
  /* unlink the waiters (a walk, then removals), then call them outside the lock */
  rv_entry *waiters = NULL;
  void *v;
  for (size_t pos = 0; gr_map_next(&r->entries, &pos, NULL, &v);) {
    rv_entry *e = v;
    if (e->done) {
      e->next = waiters;
      waiters = e;
    }
  }
  for (rv_entry *e = waiters; e; e = e->next) gr_map_remove_str(&r->entries, e->key);
  gr_error err = r->abort_err;
  pthread_mutex_unlock(&r->mu);
  while (waiters) {
    rv_entry *next = waiters->next;
    waiters->done(waiters->arg, err.code, &err, NULL, false);
    free(waiters);
    waiters = next;
  }
}

static int local_num_pending(void *self) {
  local_rv *r = self;
  pthread_mutex_lock(&r->mu);
  int n = (int)gr_map_count(&r->entries);
  pthread_mutex_unlock(&r->mu);
  return n;
}

static gr_transfer_stats local_stats(void *self) {
  local_rv *r = self;
  pthread_mutex_lock(&r->mu);
  gr_transfer_stats s = r->stats;
  pthread_mutex_unlock(&r->mu);
  return s;
}

static const gr_rendezvous_ops local_ops = {
    .send = local_send,
    .recv = local_recv,
    .abort = local_abort,
    .num_pending = local_num_pending,
    .stats = local_stats,
    .free = local_free,
};

gr_rendezvous *gr_rendezvous_new(void) {
  void *self = local_new();
  gr_rendezvous *r = self ? gr_rendezvous_new_with(&local_ops, self) : NULL;
  if (self && !r) local_free(self);
  return r;
}
