/* Checkpoints of a session's variables: the variables of a graph, their
 * fingerprint, saving them with the session step and restoring named ones
 * (restore.c restores a graph's). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

static int cmp_var(const void *a, const void *b) {
  return strcmp(((const gr_ckpt_var *)a)->name, ((const gr_ckpt_var *)b)->name);
}

gr_status gr_ckpt_graph_vars(const gr_graph *g, gr_ckpt_var **out, int *n, gr_error *err) {
  *out = NULL;
  *n = 0;
  int total = gr_graph_num_nodes(g);
  gr_ckpt_var *v = gr_alloc_array((size_t)total + 1, sizeof *v);
  if (!v) return gr_error_set_oom(err);
  int cnt = 0;
  for (int i = 0; i < total; i++) {
    const gr_node *node = gr_graph_node(g, i);
    if (!(node->op->flags & GR_OP_VARIABLE)) continue;
    const gr_attr_value *dt = gr_node_attr(node, "dtype"), *sh = gr_node_attr(node, "shape");
    const char *name = gr_node_attr_string(node, "var", NULL);
    if (!name || !dt || !sh || dt->type != GR_ATTR_DTYPE || sh->type != GR_ATTR_SHAPE) continue;
    v[cnt++] = (gr_ckpt_var){name, dt->dtype, sh->shape};
  }
  qsort(v, (size_t)cnt, sizeof *v, cmp_var);
  int m = 0;
  for (int i = 0; i < cnt; i++) {
    if (m > 0 && strcmp(v[m - 1].name, v[i].name) == 0) {
      if (v[m - 1].dtype != v[i].dtype || !gr_shape_equal(&v[m - 1].shape, &v[i].shape)) {
        char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
        gr_status e =
            gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                         "variable '%s' is declared as %s %s and as %s %s in the graph", v[i].name,
                         gr_dtype_name(v[m - 1].dtype), gr_shape_str(&v[m - 1].shape, a),
                         gr_dtype_name(v[i].dtype), gr_shape_str(&v[i].shape, b));
        free(v);
        return e;
      }
      continue;
    }
    v[m++] = v[i];
  }
  *out = v;
  *n = m;
  return GR_OK;
}

gr_status ckpt_collect_values(gr_resource_mgr *mgr, const gr_ckpt_var *vars, int n, gr_tensor *out,
                              gr_error *err) {
  for (int i = 0; i < n; i++) out[i] = gr_tensor_empty();
  for (int i = 0; i < n; i++) {
    gr_var *v = gr_resource_mgr_get_var(mgr, vars[i].name);
    if (!v) return gr_error_set_oom(err);
    gr_var_lock(v);
    gr_tensor *t = gr_var_value(v);
    if (t->buf) gr_tensor_ref(&out[i], t);
    gr_var_unlock(v);
    if (!out[i].buf)
      return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                          "cannot save variable '%s': it is not initialised", vars[i].name);
  }
  return GR_OK;
}

/* Builds the metadata object: the caller's keys plus graph_seed. */
static char *merge_meta(const char *user, uint64_t seed) {
  size_t len = user ? strlen(user) : 0;
  char *m = malloc(len + 64);
  if (!m) return NULL;
  const char *p = user;
  while (p && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
  if (p && *p == '{') { /* insert our key first; validity is checked when saving */
    const char *q = p + 1;
    while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r') q++;
    snprintf(m, len + 64, "{\"graph_seed\":%" PRIu64 "%s%s", seed, *q == '}' ? "" : ",", p + 1);
  } else if (p && *p) {
    snprintf(m, len + 64, "%s", user); /* not an object: rejected when saving */
  } else {
    snprintf(m, len + 64, "{\"graph_seed\":%" PRIu64 "}", seed);
  }
  return m;
}

void ckpt_save_job_free(ckpt_save_job *job) {
  for (int i = 0; job->vals && i < job->nvals; i++) gr_tensor_release(&job->vals[i]);
  for (int i = 0; i < job->nwholes; i++) gr_tensor_release(&job->wholes[i]);
  for (int i = 0; job->names && i < job->nt; i++) free(job->names[i]);
  free(job->names);
  free(job->wholes);
  free(job->vals);
  free(job->ts);
  free(job->meta);
  free(job->vars);
  *job = (ckpt_save_job){0};
}

/* Makes job's tensors its own (ckpt_save_job_make's own): values copied
 * into new buffers, names copied, so the write needs neither the session
 * nor the graph. (The engine's variable updates copy on write a value
 * someone else holds, so a reference would stay one step's value too; the
 * copy does not rely on every writer doing so.) */
static gr_status own_job(ckpt_save_job *job, gr_error *err) {
  for (int i = 0; i < job->nvals; i++) {
    gr_tensor c;
    GR_TRY(gr_tensor_copy(&job->vals[i], &c, err));
    gr_tensor_release(&job->vals[i]);
    job->vals[i] = c;
  }
  if (!(job->names = calloc((size_t)job->nt + 1, sizeof *job->names))) return gr_error_set_oom(err);
  for (int i = 0; i < job->nt; i++) {
    if (!(job->names[i] = strdup(job->ts[i].name))) return gr_error_set_oom(err);
    job->ts[i].name = job->names[i];
  }
  return GR_OK;
}

gr_status ckpt_save_job_make(gr_session *s, const gr_graph *g, const char *metadata_json, bool own,
                             ckpt_save_job *job, gr_error *err) {
  *job = (ckpt_save_job){.step = gr_session_step(s)};
  int n;
  GR_TRY(gr_ckpt_graph_vars(g, &job->vars, &n, err));
  job->vals = calloc((size_t)n + 1, sizeof *job->vals);
  job->ts = calloc((size_t)n + 1, sizeof *job->ts);
  job->meta = merge_meta(metadata_json, gr_graph_seed(g));
  gr_status st = GR_OK;
  if (!job->vals || !job->ts || !job->meta) st = gr_error_set_oom(err);
  if (st == GR_OK) st = ckpt_collect_values(gr_session_resources(s), job->vars, n, job->vals, err);
  if (job->vals) job->nvals = n;
  if (st == GR_OK) st = ckpt_drop_mirror_copies(g, job->vars, job->vals, &job->nvals, err);
  if (st == GR_OK && !(job->wholes = calloc((size_t)job->nvals + 1, sizeof *job->wholes)))
    st = gr_error_set_oom(err);
  if (st == GR_OK)
    st = ckpt_join_parts(g, job->vars, job->vals, job->nvals, job->ts, &job->nt, job->wholes,
                         &job->nwholes, err);
  if (st == GR_OK && own) st = own_job(job, err);
  if (st != GR_OK) ckpt_save_job_free(job);
  return st;
}

gr_status gr_ckpt_save_session(gr_ckpt *ck, gr_session *s, const gr_graph *g,
                               const char *metadata_json, gr_error *err) {
  ckpt_save_job job;
  GR_TRY(ckpt_save_job_make(s, g, metadata_json, false, &job, err));
  gr_status st = gr_ckpt_save_tensors(ck, job.step, job.ts, job.nt, job.meta, err);
  ckpt_save_job_free(&job);
  return st;
}

/* The variables of g named names[0..n) (*pick, malloc'd; their names
 * point into the graph). */
static gr_status pick_vars(const gr_graph *g, const char *const *names, int n, gr_ckpt_var **pick,
                           gr_error *err) {
  gr_ckpt_var *all;
  int na;
  *pick = NULL;
  GR_TRY(gr_ckpt_graph_vars(g, &all, &na, err));
  gr_ckpt_var *v = gr_alloc_array((size_t)n + 1, sizeof *v);
  gr_status st = v ? GR_OK : gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++) {
    gr_ckpt_var key = {names[i], GR_F32, {0}};
    const gr_ckpt_var *f = names[i] ? bsearch(&key, all, (size_t)na, sizeof *all, cmp_var) : NULL;
    if (!f)
      st = gr_error_set(err, GR_ERR_NOT_FOUND, "restore: the graph has no variable named '%s'",
                        names[i] ? names[i] : "(null)");
    else
      v[i] = *f;
  }
  free(all);
  if (st != GR_OK) {
    free(v);
    return st;
  }
  *pick = v;
  return GR_OK;
}

gr_status gr_ckpt_restore_vars(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t step,
                               const char *const *names, int n, gr_error *err) {
  gr_ckpt_var *pick;
  GR_TRY(pick_vars(g, names, n, &pick, err));
  gr_status st =
      ckpt_restore_graph(ck, gr_session_resources(s), g, pick, n, step, false, NULL, err);
  free(pick);
  return st;
}

gr_status gr_ckpt_read_vars(gr_ckpt *ck, int64_t step, const gr_graph *g, const char *const *names,
                            int n, gr_tensor *out, int64_t *step_out, gr_error *err) {
  for (int i = 0; i < n; i++) out[i] = gr_tensor_empty();
  gr_ckpt_var *pick;
  GR_TRY(pick_vars(g, names, n, &pick, err));
  gr_status st = ckpt_read_graph_vars(ck, g, pick, n, step, false, out, step_out, err);
  free(pick);
  return st;
}
