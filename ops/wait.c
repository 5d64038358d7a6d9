/* Parked kernels and step cancellation (wait_internal.h). */
#include <stdlib.h>

#include "core/core_engine.h"
#include <stdio.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/wait_internal.h"

typedef struct entry {
  gr_wait_owner *owner;
  bool cancelled;
} entry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static gr_map reg = {.kind = GR_MAP_U64};
static uint64_t next_id = 1;

void gr_wait_owner_init(gr_wait_owner *o, void (*destroy)(gr_wait_owner *),
                        gr_kernel_ctx *(*take_waiter)(gr_wait_owner *, uint64_t),
                        const char *what) {
  pthread_mutex_init(&o->mu, NULL);
  o->refs = 1;
  o->destroy = destroy;
  o->take_waiter = take_waiter;
  snprintf(o->what, sizeof o->what, "%s", what);
}

void gr_wait_owner_ref(gr_wait_owner *o) {
  __atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
}

void gr_wait_owner_unref(gr_wait_owner *o) {
  if (o && __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) == 0) o->destroy(o);
}

uint64_t gr_wait_register(gr_wait_owner *o) {
  entry *e = malloc(sizeof *e);
  if (!e) return 0;
  *e = (entry){o, false};
  pthread_mutex_lock(&reg_mu);
  uint64_t id = next_id++;
  if (!gr_map_put_u64(&reg, id, e)) {
    free(e);
    id = 0;
  }
  pthread_mutex_unlock(&reg_mu);
  return id;
}

static void cancel_fn(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  pthread_mutex_lock(&reg_mu);
  entry *e = gr_map_get_u64(&reg, id);
  gr_wait_owner *o = e ? e->owner : NULL;
  if (e) {
    e->cancelled = true;
    gr_wait_owner_ref(o);
  }
  pthread_mutex_unlock(&reg_mu);
  if (!o) return;
  pthread_mutex_lock(&o->mu);
  gr_kernel_ctx *ctx = o->take_waiter(o, id);
  if (ctx) gr_wait_unregister(id);
  pthread_mutex_unlock(&o->mu);
  if (ctx) {
    gr_status st = gr_kernel_error(ctx, GR_ERR_CANCELLED,
                                   "the step was cancelled while it waited on %s", o->what);
    gr_kernel_done(ctx, st);
  }
  gr_wait_owner_unref(o);
}

void gr_wait_arm(gr_kernel_ctx *ctx, uint64_t id) {
  gr_kernel_on_cancel(ctx, cancel_fn, (void *)(uintptr_t)id);
}

bool gr_wait_cancelled_locked(uint64_t id) {
  pthread_mutex_lock(&reg_mu);
  entry *e = gr_map_get_u64(&reg, id);
  if (e) GR_ASSERT_HELD(&e->owner->mu);
  bool c = e && e->cancelled;
  pthread_mutex_unlock(&reg_mu);
  return c;
}

void gr_wait_unregister(uint64_t id) {
  pthread_mutex_lock(&reg_mu);
  entry *e = gr_map_get_u64(&reg, id);
  if (e) GR_ASSERT_HELD(&e->owner->mu);
  if (e) gr_map_remove_u64(&reg, id);
  pthread_mutex_unlock(&reg_mu);
  free(e);
}
