/* Recorded bindings (gr_dsl_options.record_layers, graphrun check
 * --layers): each `name = expr` statement that binds a tensor, with its def
 * path, source positions and the size of the variables it made. */
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

void dsl_layers_enter_def(gr_dsl_program *p, const char *def, dsl_pos call, size_t *saved) {
  *saved = p->def_path_len;
  if (!p->opts.record_layers) return;
  if (p->call_depth == 0) p->layer_call = call;
  size_t n = strlen(def), at = p->def_path_len;
  if (at + n + 2 > sizeof p->def_path) return; /* too deep to show: the path stops growing */
  memcpy(p->def_path + at, def, n);
  p->def_path[at + n] = '/';
  p->def_path_len = at + n + 1;
}

void dsl_layers_leave_def(gr_dsl_program *p, size_t saved) {
  p->def_path_len = saved;
}

/* Elements of the model's variables among nodes [n0, n1): not optimizer
 * slots, mirrored copies or the global step. -1 when out of memory. */
static int64_t variable_elements(const gr_graph *g, int n0, int n1) {
  unsigned char *roles = malloc((size_t)(n1 - n0) + 1);
  if (!roles) return -1;
  gr_variable_roles(g, n0, n1, roles);
  int64_t e = 0;
  for (int i = n0; i < n1; i++)
    if (roles[i - n0] == GR_VAR_TRAINABLE || roles[i - n0] == GR_VAR_NON_TRAINABLE)
      e += gr_shape_num_elements(&gr_graph_node(g, i)->out_shapes[0]);
  free(roles);
  return e;
}

static gr_status push_layer(gr_dsl_program *p, const gr_dsl_layer *l) {
  if (p->nlayers == p->caplayers) {
    int cap = p->caplayers ? 2 * p->caplayers : 64;
    gr_dsl_layer *a = dsl_alloc(&p->persist, sizeof *a * (size_t)cap);
    if (!a) return gr_error_set_oom(p->err);
    if (p->nlayers) memcpy(a, p->layers, sizeof *a * (size_t)p->nlayers);
    p->layers = a, p->caplayers = cap;
  }
  p->layers[p->nlayers++] = *l;
  return GR_OK;
}

gr_status dsl_layers_record(gr_dsl_program *p, const dsl_stmt *s, int n0, int l0) {
  int64_t params = variable_elements(p->g, n0, gr_graph_num_nodes(p->g));
  if (params < 0) return gr_error_set_oom(p->err);
  for (int i = l0; i < p->nlayers; i++) params -= p->layers[i].params; /* nested statements' */
  bool in_def = p->call_depth > 0;
  for (int i = 0; i < s->nnames; i++) {
    const dsl_binding *b = dsl_frame_find_local(p->frame, s->names[i]);
    if (!b || !b->v.has_t || !b->v.t.node) continue;
    size_t n = strlen(s->names[i]);
    char *path = dsl_alloc(&p->persist, p->def_path_len + n + 1);
    if (!path) return gr_error_set_oom(p->err);
    memcpy(path, p->def_path, p->def_path_len);
    memcpy(path + p->def_path_len, s->names[i], n);
    dsl_pos call = in_def ? p->layer_call : s->pos;
    const char *kind = b->v.t.node == p->layer_node ? p->layer_kind : NULL;
    gr_dsl_layer l = {path,      s->pos.src->name, s->pos.line, call.src->name,
                      call.line, b->v.t,           params,      kind};
    GR_TRY(push_layer(p, &l));
    params = 0;
  }
  return GR_OK;
}

int gr_dsl_num_layers(const gr_dsl_program *p) {
  return p ? p->nlayers : 0;
}

const gr_dsl_layer *gr_dsl_layer_at(const gr_dsl_program *p, int i) {
  return p && i >= 0 && i < p->nlayers ? &p->layers[i] : NULL;
}
