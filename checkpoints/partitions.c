/* Partitioned variables in checkpoints (ops/gr_ops_partitioned.h): a
 * variable split into parts NAME/part_K is saved whole, under NAME with its
 * full shape (the parts concatenated along axis 0), so a checkpoint does
 * not depend on how many parts (ps tasks) wrote it: `graphrun ckpt
 * ls/show/export` see NAME, and a restore slices NAME into the parts of the
 * graph it restores into, however many. A task's shard, which holds only
 * its parts, writes each as a slice of NAME (slices.c; the save node's
 * attr `slices`, by ckpt_slice_spec), and readers of the sharded
 * checkpoint see NAME whole. A part saved under its own name alone (a
 * shard written before slices existed) restores by that name. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

const char *ckpt_part_of(const gr_graph *g, const char *name, int64_t *offset, gr_shape *full) {
  const gr_node *n = g ? gr_graph_find_node(g, name) : NULL;
  const char *of =
      n && (n->op->flags & GR_OP_VARIABLE) ? gr_node_attr_string(n, "partition_of", "") : "";
  const gr_attr_value *fs = of[0] ? gr_node_attr(n, "full_shape") : NULL;
  if (!fs || fs->type != GR_ATTR_SHAPE || fs->shape.rank < 1) return "";
  *offset = gr_node_attr_int(n, "partition_offset", 0);
  *full = fs->shape;
  return of;
}

bool ckpt_slice_spec(const gr_graph *g, const char *name, char *buf, size_t cap, size_t *len) {
  int64_t off = 0;
  gr_shape full = {0};
  const char *of = ckpt_part_of(g, name, &off, &full);
  char shape[GR_MAX_RANK * 21 + 4];
  ckpt_shape_to_text(&full, shape, sizeof shape);
  size_t n = *len;
  int w = of[0] ? snprintf(buf + n, n < cap ? cap - n : 0, "%" PRId64 " %s %s", off, shape, of)
                : snprintf(buf + n, n < cap ? cap - n : 0, "%s", "");
  if (w < 0 || n + (size_t)w >= cap) return false;
  *len = n + (size_t)w;
  return true;
}

bool ckpt_parse_slice_spec(char *line, size_t len, gr_ckpt_slice *out) {
  *out = (gr_ckpt_slice){0};
  if (len == 0) return true; /* not a slice */
  char *end;
  errno = 0;
  long long first = strtoll(line, &end, 10);
  if (end == line || errno || first < 0 || *end != ' ' || end[1] != '[') return false;
  char *shape = end + 1, *close = memchr(shape, ']', len - (size_t)(shape - line));
  if (!close || close[1] != ' ' || close + 2 >= line + len) return false;
  char text[GR_MAX_RANK * 21 + 4];
  size_t sl = (size_t)(close + 1 - shape);
  if (sl >= sizeof text) return false;
  memcpy(text, shape, sl);
  text[sl] = '\0';
  if (!ckpt_shape_from_text(text, &out->full_shape) || out->full_shape.rank < 1) return false;
  out->first_row = first;
  out->whole = close + 2;
  line[len] = '\0';
  return true;
}

static size_t row_bytes(gr_dtype dt, const gr_shape *s) {
  size_t b = gr_dtype_size(dt);
  for (int d = 1; d < s->rank; d++) b *= (size_t)s->dims[d];
  return b;
}

gr_status ckpt_join_parts(const gr_graph *g, const gr_ckpt_var *vars, const gr_tensor *vals, int n,
                          gr_ckpt_tensor *out, int *nout, gr_tensor *wholes, int *nwholes,
                          gr_error *err) {
  *nout = *nwholes = 0;
  char *done = calloc((size_t)n + 1, 1);
  if (!done) return gr_error_set_oom(err);
  gr_status s = GR_OK;
  for (int i = 0; s == GR_OK && i < n; i++) {
    if (done[i]) continue;
    int64_t off = 0;
    gr_shape full = {0};
    const char *of = ckpt_part_of(g, vars[i].name, &off, &full);
    /* the parts of `of` among vars, each row of the whole covered once */
    int64_t rows = 0;
    bool whole = of[0] && vals[i].dtype == vars[i].dtype;
    for (int j = i; whole && j < n; j++) {
      int64_t o2 = 0;
      gr_shape f2 = {0};
      if (strcmp(ckpt_part_of(g, vars[j].name, &o2, &f2), of) != 0) continue;
      whole = gr_shape_equal(&f2, &full) && vals[j].dtype == vals[i].dtype &&
              ckpt_slice_fits(&vals[j].shape, &full, o2);
      rows += vals[j].shape.dims[0];
    }
    if (!whole || rows != full.dims[0]) {
      out[(*nout)++] = (gr_ckpt_tensor){vars[i].name, &vals[i]};
      continue;
    }
    gr_tensor *t = &wholes[*nwholes];
    if ((s = gr_tensor_alloc(t, vals[i].dtype, &full, err)) != GR_OK) break;
    ++*nwholes;
    size_t rb = row_bytes(t->dtype, &full);
    for (int j = i; j < n; j++) {
      int64_t o2 = 0;
      gr_shape f2 = {0};
      if (strcmp(ckpt_part_of(g, vars[j].name, &o2, &f2), of) != 0) continue;
      done[j] = 1;
      if (gr_tensor_num_bytes(&vals[j]))
        memcpy((char *)gr_tensor_data(t) + (size_t)o2 * rb, gr_tensor_data(&vals[j]),
               gr_tensor_num_bytes(&vals[j]));
    }
    out[(*nout)++] = (gr_ckpt_tensor){of, t};
  }
  free(done);
  return s;
}

/* Does the checkpoint at step hold a tensor named `name`? */
static bool has_tensor(const gr_ckpt_tensor_info *infos, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(infos[i].name, name) == 0) return true;
  return false;
}

/* vals[i] from the values read, cvals[src[i]]: the value itself, or
 * (offs[i] >= 0) its rows from offs[i] on, as many as vars[i] has. */
static gr_status slice_values(const gr_ckpt_var *vars, int n, const gr_tensor *cvals,
                              const int *src, const int64_t *offs, gr_tensor *vals, gr_error *err) {
  for (int i = 0; i < n; i++) {
    const gr_tensor *t = &cvals[src[i]];
    if (offs[i] < 0) {
      gr_tensor_ref(&vals[i], t);
      continue;
    }
    if (!ckpt_slice_fits(&vars[i].shape, &t->shape, offs[i]))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "restore: variable '%s' does not fit the whole it is a part of (its "
                          "attrs partition_offset and full_shape)",
                          vars[i].name);
    GR_TRY(gr_tensor_alloc(&vals[i], vars[i].dtype, &vars[i].shape, err));
    size_t rb = row_bytes(t->dtype, &t->shape);
    if (gr_tensor_num_bytes(&vals[i]))
      memcpy(gr_tensor_data(&vals[i]), (const char *)gr_tensor_data(t) + (size_t)offs[i] * rb,
             gr_tensor_num_bytes(&vals[i]));
  }
  return GR_OK;
}

gr_status ckpt_read_graph_vars(gr_ckpt *ck, const gr_graph *g, const gr_ckpt_var *vars, int n,
                               int64_t step, bool strict, gr_tensor *vals, int64_t *step_out,
                               gr_error *err) {
  bool any = false;
  for (int i = 0; i < n && !any; i++) {
    int64_t off;
    gr_shape full;
    any = ckpt_part_of(g, vars[i].name, &off, &full)[0] != '\0' ||
          gr_ckpt_mirror_source(g, vars[i].name) != NULL;
  }
  if (!any) return ckpt_read_vars(ck, vars, n, step, strict, vals, step_out, err);
  for (int i = 0; i < n; i++) vals[i] = gr_tensor_empty();
  gr_ckpt_tensor_info *infos;
  int ni;
  GR_TRY(gr_ckpt_list_tensors(ck, step, &infos, &ni, err));
  /* cvars: what to read (vars, with the parts to take from their whole
   * replaced by it, and the copies of mirrored variables the checkpoint has
   * no tensor for by the variable they mirror: mirrors.c); src[i]: vars[i]'s
   * value or whole in cvars; offs[i]: its first row in the whole, or -1 */
  gr_ckpt_var *cvars = gr_alloc_array((size_t)n + 1, sizeof *cvars);
  int *src = gr_alloc_array((size_t)n + 1, sizeof *src);
  int64_t *offs = gr_alloc_array((size_t)n + 1, sizeof *offs);
  gr_tensor *cvals = calloc((size_t)n + 1, sizeof *cvals);
  gr_status s = cvars && src && offs && cvals ? GR_OK : gr_error_set_oom(err);
  int nc = 0;
  for (int i = 0; s == GR_OK && i < n; i++) {
    int64_t off;
    gr_shape full;
    const char *of = ckpt_part_of(g, vars[i].name, &off, &full);
    const char *mirrors = gr_ckpt_mirror_source(g, vars[i].name);
    offs[i] = -1;
    if (!of[0] && mirrors && !has_tensor(infos, ni, vars[i].name)) {
      of = mirrors; /* a copy saved once, as the variable it mirrors */
      full = vars[i].shape;
      off = -1;
    } else if (!of[0] || (has_tensor(infos, ni, vars[i].name) && !has_tensor(infos, ni, of))) {
      src[i] = nc;
      cvars[nc++] = vars[i];
      continue;
    }
    src[i] = -1;
    for (int c = 0; c < nc && src[i] < 0; c++)
      if (strcmp(cvars[c].name, of) == 0) src[i] = c;
    if (src[i] < 0) {
      src[i] = nc;
      cvars[nc++] = (gr_ckpt_var){of, vars[i].dtype, full};
    }
    offs[i] = off;
  }
  if (s == GR_OK) s = ckpt_read_vars(ck, cvars, nc, step, strict, cvals, step_out, err);
  if (s == GR_OK) s = slice_values(vars, n, cvals, src, offs, vals, err);
  if (s != GR_OK)
    for (int i = 0; i < n; i++) gr_tensor_release(&vals[i]);
  for (int c = 0; c < nc; c++) gr_tensor_release(&cvals[c]);
  free(cvals);
  free(cvars);
  free(src);
  free(offs);
  gr_ckpt_tensor_infos_free(infos, ni);
  return s;
}

gr_status ckpt_restore_graph(gr_ckpt *ck, gr_resource_mgr *mgr, const gr_graph *g,
                             const gr_ckpt_var *vars, int n, int64_t step, bool strict,
                             int64_t *step_out, gr_error *err) {
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  if (!vals) return gr_error_set_oom(err);
  gr_status s = ckpt_read_graph_vars(ck, g, vars, n, step, strict, vals, step_out, err);
  if (s == GR_OK) s = ckpt_set_values(mgr, vars, vals, n, err);
  for (int i = 0; i < n; i++) gr_tensor_release(&vals[i]);
  free(vals);
  return s;
}
