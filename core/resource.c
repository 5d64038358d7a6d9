/* Resource containers (gr_resource.h): one gr_var per variable name. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_op.h"
#include "core/gr_resource.h"
#include "core/map.h"

struct gr_var {
  pthread_mutex_t mu;
  gr_tensor value;
  char *name;
};

/* A resource other than a variable. */
typedef struct other {
  char *name;
  const gr_resource_kind *kind;
  void *obj;
} other;

struct gr_resource_mgr {
  pthread_mutex_t mu;
  gr_map vars;
  gr_map others; /* name -> other */
  int refs;      /* atomic */
};

gr_resource_mgr *gr_resource_mgr_new(void) {
  gr_resource_mgr *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->mu, NULL);
  gr_map_init(&m->vars, GR_MAP_STR);
  gr_map_init(&m->others, GR_MAP_STR);
  m->refs = 1;
  return m;
}

gr_resource_mgr *gr_resource_mgr_ref(gr_resource_mgr *m) {
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
  return m;
}

void gr_resource_mgr_free(gr_resource_mgr *m) {
  if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  void *value;
  for (size_t pos = 0; gr_map_next(&m->vars, &pos, NULL, &value);) {
    gr_var *v = value;
    gr_tensor_release(&v->value);
    pthread_mutex_destroy(&v->mu);
    free(v->name);
    free(v);
  }
  gr_map_free(&m->vars);
  for (size_t pos = 0; gr_map_next(&m->others, &pos, NULL, &value);) {
    other *o = value;
    o->kind->free(o->obj);
    free(o->name);
    free(o);
  }
  gr_map_free(&m->others);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

gr_var *gr_resource_mgr_get_var(gr_resource_mgr *m, const char *name) {
  pthread_mutex_lock(&m->mu);
  gr_var *v = gr_map_get_str(&m->vars, name);
  if (!v) {
    v = calloc(1, sizeof *v);
    if (v) v->name = strdup(name);
    if (v && v->name && gr_map_put_str(&m->vars, v->name, v)) {
      pthread_mutex_init(&v->mu, NULL);
      v->value = gr_tensor_empty();
    } else {
      if (v) free(v->name);
      free(v);
      v = NULL;
    }
  }
  pthread_mutex_unlock(&m->mu);
  return v;
}

int gr_resource_mgr_num_vars(gr_resource_mgr *m) {
  pthread_mutex_lock(&m->mu);
  int n = (int)gr_map_count(&m->vars);
  pthread_mutex_unlock(&m->mu);
  return n;
}

gr_var *gr_resource_mgr_find_var(gr_resource_mgr *m, const char *name) {
  pthread_mutex_lock(&m->mu);
  gr_var *v = gr_map_get_str(&m->vars, name);
  pthread_mutex_unlock(&m->mu);
  return v;
}

void gr_var_lock(gr_var *v) {
  pthread_mutex_lock(&v->mu);
}
void gr_var_unlock(gr_var *v) {
  pthread_mutex_unlock(&v->mu);
}
gr_tensor *gr_var_value(gr_var *v) {
  return &v->value;
}
bool gr_var_is_initialized(gr_var *v) {
  pthread_mutex_lock(&v->mu);
  bool init = v->value.buf != NULL;
  pthread_mutex_unlock(&v->mu);
  return init;
}
const char *gr_var_name(const gr_var *v) {
  return v->name;
}

gr_status gr_resource_mgr_lookup_or_create(gr_resource_mgr *m, const char *name,
                                           const gr_resource_kind *kind, gr_resource_make_fn make,
                                           void *arg, void **out, gr_error *err) {
  gr_status st = GR_OK;
  pthread_mutex_lock(&m->mu);
  other *o = gr_map_get_str(&m->others, name);
  if (o && o->kind != kind) {
    st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "resource '%s' is a %s, not a %s", name,
                      o->kind->name, kind->name);
  } else if (!o) {
    void *obj = NULL;
    st = make(arg, &obj, err);
    if (st == GR_OK) {
      o = calloc(1, sizeof *o);
      if (o) o->name = strdup(name);
      if (o && o->name && gr_map_put_str(&m->others, o->name, o)) {
        o->kind = kind;
        o->obj = obj;
      } else {
        if (o) free(o->name);
        free(o);
        o = NULL;
        kind->free(obj);
        st = gr_error_set_oom(err);
      }
    }
  }
  *out = st == GR_OK ? o->obj : NULL;
  pthread_mutex_unlock(&m->mu);
  return st;
}

void *gr_resource_mgr_find(gr_resource_mgr *m, const char *name, const gr_resource_kind *kind) {
  pthread_mutex_lock(&m->mu);
  other *o = gr_map_get_str(&m->others, name);
  void *obj = o && o->kind == kind ? o->obj : NULL;
  pthread_mutex_unlock(&m->mu);
  return obj;
}
