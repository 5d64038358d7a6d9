/* Programs as serialized graphs: gr_dsl_export writes the graph with the
 * program's top-level tensor names, fetches and targets; loading such a
 * file (dsl_load_serialized, called by gr_dsl_load_*) binds them again, so
 * `graphrun run model.grb` takes the same --fetch names as model.gr. */
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

gr_status gr_dsl_export(const gr_dsl_program *p, void **data, size_t *size, gr_error *err) {
  *data = NULL;
  *size = 0;
  const dsl_frame *f = &p->globals;
  gr_graph_names nm = {.fetches = (const char **)p->fetches,
                       .num_fetches = p->nfetch,
                       .targets = (const char **)p->targets,
                       .num_targets = p->ntarget};
  nm.names = gr_alloc_array(f->count + 1, sizeof *nm.names);
  nm.outputs = gr_alloc_array(f->count + 1, sizeof *nm.outputs);
  if (!nm.names || !nm.outputs) {
    free(nm.names), free(nm.outputs);
    return gr_error_set_oom(err);
  }
  for (size_t i = 0; i < f->count; i++) { /* in the order they were bound */
    const dsl_binding *b = f->list[i];
    if (b->def || !b->v.has_t || !b->v.t.node) continue;
    nm.names[nm.num_names] = b->name;
    nm.outputs[nm.num_names++] = b->v.t;
  }
  gr_status st = gr_wire_encode_graph(p->g, &nm, data, size, err);
  free(nm.names), free(nm.outputs);
  return st;
}

gr_status dsl_load_serialized(gr_dsl_program *p, const char *name, const void *data, size_t len) {
  gr_graph_names nm;
  gr_error e;
  if (gr_wire_decode_graph(data, len, p->g, &nm, &e) != GR_OK)
    return gr_error_set(p->err, e.code, "%s: %s", name, e.msg);
  gr_status st = GR_OK;
  if (gr_check_batch_norm_updates(p->g, &e) != GR_OK)
    st = gr_error_set(p->err, e.code, "%s: serialized graph: %s", name, e.msg);
  for (int i = 0; i < nm.num_names && st == GR_OK; i++) {
    if (dsl_frame_find_local(&p->globals, nm.names[i])) {
      st = gr_error_set(p->err, GR_ERR_INVALID_ARGUMENT, "%s: serialized graph: name '%s' twice",
                        name, nm.names[i]);
      break;
    }
    const char *key = dsl_strndup(&p->persist, nm.names[i], strlen(nm.names[i]));
    dsl_binding *b = key ? dsl_frame_insert(&p->globals, key) : NULL;
    if (!b) {
      st = gr_error_set_oom(p->err);
      break;
    }
    dsl_tensor_value(&b->v, nm.outputs[i]);
    b->pos = (dsl_pos){0};
    b->def = NULL;
  }
  for (int i = 0; i < nm.num_fetches && st == GR_OK; i++)
    st = dsl_add_name(p, &p->fetches, &p->nfetch, &p->capfetch, nm.fetches[i]);
  for (int i = 0; i < nm.num_targets && st == GR_OK; i++)
    st = dsl_add_name(p, &p->targets, &p->ntarget, &p->captarget, nm.targets[i]);
  gr_graph_names_free(&nm);
  return st;
}
