/* Step-scoped stacks of tensors (gr_step_stack_*): a while loop's forward
 * pass pushes the values its gradient needs, the reverse loop pops them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_op.h"
#include "core/map.h"

typedef struct stack {
  char *name;
  gr_tensor *v;
  int64_t n, cap;
} stack;

struct gr_step_stacks {
  pthread_mutex_t mu;
  gr_map by_name;
};

gr_step_stacks *gr_step_stacks_new(void) {
  gr_step_stacks *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  gr_map_init(&s->by_name, GR_MAP_STR);
  return s;
}

void gr_step_stacks_free(gr_step_stacks *s) {
  if (!s) return;
  void *value; /* the walk reads no key: freeing each name as we go is fine */
  for (size_t pos = 0; gr_map_next(&s->by_name, &pos, NULL, &value);) {
    stack *st = value;
    for (int64_t k = 0; k < st->n; k++) gr_tensor_release(&st->v[k]);
    free(st->v);
    free(st->name);
    free(st);
  }
  gr_map_free(&s->by_name);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static stack *get(gr_step_stacks *s, const char *name, bool create) {
  stack *st = gr_map_get_str(&s->by_name, name);
  if (st || !create) return st;
  st = calloc(1, sizeof *st);
  if (st) st->name = strdup(name);
  if (!st || !st->name || !gr_map_put_str(&s->by_name, st->name, st)) {
    if (st) free(st->name);
    free(st);
    return NULL;
  }
  return st;
}

gr_status gr_step_stack_push(gr_step_stacks *s, const char *name, const gr_tensor *t,
                             gr_error *err) {
  pthread_mutex_lock(&s->mu);
  stack *st = get(s, name, true);
  gr_status r = GR_OK;
  if (st && st->n == st->cap) {
    int64_t cap = st->cap ? st->cap * 2 : 16;
    gr_tensor *v = gr_realloc_array(st->v, (size_t)cap, sizeof *v);
    if (v) {
      st->v = v;
      st->cap = cap;
    }
  }
  if (!st || st->n == st->cap)
    r = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "stack '%s': out of memory", name);
  else
    gr_tensor_ref(&st->v[st->n++], t);
  pthread_mutex_unlock(&s->mu);
  return r;
}

gr_status gr_step_stack_pop(gr_step_stacks *s, const char *name, gr_tensor *out, gr_error *err) {
  pthread_mutex_lock(&s->mu);
  stack *st = get(s, name, false);
  gr_status r = GR_OK;
  if (!st || st->n == 0)
    r = gr_error_set(err, GR_ERR_OUT_OF_RANGE, "stack '%s' is empty", name);
  else
    *out = st->v[--st->n];
  pthread_mutex_unlock(&s->mu);
  return r;
}

int64_t gr_step_stack_size(gr_step_stacks *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  stack *st = get(s, name, false);
  int64_t n = st ? st->n : 0;
  pthread_mutex_unlock(&s->mu);
  return n;
}
