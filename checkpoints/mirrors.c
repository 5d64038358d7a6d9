/* Mirrored variables in checkpoints (ops/gr_ops_parallel.h, replicas with
 * all_reduce=true): replica K's copy VAR/replica_K of VAR (attr mirror_of),
 * and every variable made under it (its optimizer slots,
 * VAR/replica_K/adam_m), are equal to VAR (VAR/adam_m) bit for bit by
 * construction. A cluster's checkpoint holds VAR once (graphrun run saves no
 * copy), after checking, in the run that saves, that every copy's checksum
 * is VAR's (the `checksums` op on each task, gr_ckpt_check_mirrors); so does
 * a save in one process (gr_ckpt_save_session: ckpt_drop_mirror_copies,
 * checksums of the values it holds); a restore sets every copy from VAR
 * when the checkpoint has no tensor of its own (partitions.c, restore.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

/* The dtype and shape of variable node n; false when it has none. */
static bool var_type(const gr_node *n, gr_dtype *dt, gr_shape *sh) {
  if (!n || !(n->op->flags & GR_OP_VARIABLE)) return false;
  const gr_attr_value *d = gr_node_attr(n, "dtype"), *s = gr_node_attr(n, "shape");
  if (!d || !s || d->type != GR_ATTR_DTYPE || s->type != GR_ATTR_SHAPE) return false;
  *dt = d->dtype;
  *sh = s->shape;
  return true;
}

const char *gr_ckpt_mirror_source(const gr_graph *g, const char *name) {
  gr_dtype dt, sdt;
  gr_shape sh, ssh;
  char buf[1024];
  size_t len = name ? strlen(name) : 0;
  if (!g || len >= sizeof buf || !var_type(gr_graph_find_node(g, name), &dt, &sh)) return NULL;
  memcpy(buf, name, len + 1);
  for (size_t l = len; l > 0; l--) { /* the longest prefix that is a copy */
    if (name[l] != '\0' && name[l] != '/') continue;
    buf[l] = '\0';
    const gr_node *c = gr_graph_find_node(g, buf);
    const char *of =
        c && (c->op->flags & GR_OP_VARIABLE) ? gr_node_attr_string(c, "mirror_of", "") : "";
    if (!of[0]) continue;
    char src[1024];
    if ((size_t)snprintf(src, sizeof src, "%s%s", of, name + l) >= sizeof src) return NULL;
    const gr_node *s = gr_graph_find_node(g, src);
    if (!var_type(s, &sdt, &ssh) || sdt != dt || !gr_shape_equal(&ssh, &sh)) return NULL;
    return gr_node_attr_string(s, "var", s->name);
  }
  return NULL;
}

gr_status gr_ckpt_check_mirrors(const gr_graph *g, const char *const *names,
                                const char *const *where, const uint64_t *sums, int n,
                                gr_error *err) {
  for (int i = 0; i < n; i++) {
    const char *src = gr_ckpt_mirror_source(g, names[i]);
    for (int j = 0; src && j < n; j++) {
      if (strcmp(names[j], src) != 0 || sums[j] == sums[i]) continue;
      return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                          "mirrored variable '%s': the copy '%s' on %s differs from '%s' on %s "
                          "(checksums %016" PRIx64 " and %016" PRIx64
                          "): the replicas' copies must be equal bit for bit; nothing saved",
                          src, names[i], where[i], src, where[j], sums[i], sums[j]);
    }
  }
  return GR_OK;
}

/* Where variable `name` runs in g's session, for the error of a copy that
 * differs. */
static const char *var_where(const gr_graph *g, const char *name) {
  const gr_node *v = gr_graph_find_node(g, name);
  const char *dev = v ? (v->assigned_device ? v->assigned_device : v->requested_device) : "";
  return dev && dev[0] ? dev : "this process";
}

gr_status ckpt_drop_mirror_copies(const gr_graph *g, gr_ckpt_var *vars, gr_tensor *vals, int *n,
                                  gr_error *err) {
  int m = *n;
  const char **src = calloc((size_t)m + 1, sizeof *src), **names = NULL, **where = NULL;
  uint64_t *sums = NULL;
  gr_status st = src ? GR_OK : gr_error_set_oom(err);
  int ncopies = 0;
  for (int i = 0; st == GR_OK && i < m; i++) {
    const char *of = gr_ckpt_mirror_source(g, vars[i].name);
    for (int j = 0; of && j < m && !src[i]; j++)
      if (strcmp(vars[j].name, of) == 0) src[i] = vars[j].name, ncopies++;
  }
  if (st != GR_OK || ncopies == 0) {
    free(src);
    return st;
  }
  /* the copies and what they mirror, by checksum (as a cluster's save) */
  names = calloc((size_t)m, sizeof *names);
  where = calloc((size_t)m, sizeof *where);
  sums = calloc((size_t)m, sizeof *sums);
  if (!names || !where || !sums) st = gr_error_set_oom(err);
  int k = 0;
  for (int i = 0; st == GR_OK && i < m; i++) {
    bool mirrored = src[i] != NULL;
    for (int j = 0; j < m && !mirrored; j++) mirrored = src[j] && !strcmp(src[j], vars[i].name);
    if (!mirrored) continue;
    names[k] = vars[i].name;
    where[k] = var_where(g, vars[i].name);
    sums[k++] = gr_ckpt_hash64(gr_tensor_data(&vals[i]), gr_tensor_num_bytes(&vals[i]));
  }
  if (st == GR_OK) st = gr_ckpt_check_mirrors(g, names, where, sums, k, err);
  int kept = 0;
  for (int i = 0; st == GR_OK && i < m; i++) {
    if (src[i]) {
      gr_tensor_release(&vals[i]);
      continue;
    }
    vars[kept] = vars[i];
    vals[kept++] = vals[i];
  }
  if (st == GR_OK) *n = kept;
  free(src), free(names), free(where), free(sums);
  return st;
}
