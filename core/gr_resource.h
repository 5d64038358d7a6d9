/* Resource containers: the variables (by name) that sessions read and
 * update. A session makes its own unless its options name one; a container
 * given to several sessions is shared, so two clients that name the same
 * variable see one value, and it outlives them (a server task keeps one per
 * client and one per shared name, as TensorFlow 1's containers).
 *
 *   gr_resource_mgr *vars = gr_resource_mgr_new();
 *   gr_session_options o = {.resources = vars};
 *   gr_session *a = gr_session_new(g1, &o, &err), *b = gr_session_new(g2, &o, &err);
 *   ... a assigns "w"; b reads it ...
 *   gr_session_free(a), gr_session_free(b);
 *   gr_resource_mgr_free(vars);   // the last reference frees the variables
 *
 * Ownership: reference counted; gr_resource_mgr_new returns one reference,
 * each session holds one while it lives. Thread-safe. Kernels reach the
 * variables through gr_resource_mgr_get_var and gr_var_* (core/gr_op.h). */
#ifndef GR_RESOURCE_H
#define GR_RESOURCE_H

#include "core/gr_op.h"

/* An empty container; NULL when out of memory. */
gr_resource_mgr *gr_resource_mgr_new(void);
/* Another reference to m (returns m). */
gr_resource_mgr *gr_resource_mgr_ref(gr_resource_mgr *m);
/* Drops a reference; the last one frees every variable. NULL is ignored. */
void gr_resource_mgr_free(gr_resource_mgr *m);
/* The variable of that name, NULL when none exists yet (does not create). */
gr_var *gr_resource_mgr_find_var(gr_resource_mgr *m, const char *name);
/* How many variables the container holds. */
int gr_resource_mgr_num_vars(gr_resource_mgr *m);

/* Other resources (queues, accumulators): one object per name and kind,
 * kept until the container is freed, which calls kind->free(obj). */
typedef struct gr_resource_kind {
  const char *name;        /* "queue", "accumulator": for error messages */
  void (*free)(void *obj); /* drops the container's hold on obj */
} gr_resource_kind;
/* Makes a new object for gr_resource_mgr_lookup_or_create (called with the
 * container locked: it must not use the container). */
typedef gr_status (*gr_resource_make_fn)(void *arg, void **obj, gr_error *err);
/* *out: the resource `name` of `kind`, made by make(arg) when there is none
 * yet. Borrowed: valid while the container lives. GR_ERR_INVALID_ARGUMENT
 * when a resource of another kind has that name. */
gr_status gr_resource_mgr_lookup_or_create(gr_resource_mgr *m, const char *name,
                                           const gr_resource_kind *kind, gr_resource_make_fn make,
                                           void *arg, void **out, gr_error *err);
/* The resource `name` of `kind`, NULL when none (does not create). */
void *gr_resource_mgr_find(gr_resource_mgr *m, const char *name, const gr_resource_kind *kind);

#endif
