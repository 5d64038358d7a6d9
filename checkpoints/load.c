/* Reading checkpoints: listing them and their tensors, reading a tensor
 * straight into a tensor buffer (incremental blob I/O, chunk by chunk, its
 * checksum computed as it arrives). Everything read is checked: a damaged
 * file gives GR_ERR_DATA_LOSS naming the tensor, never a crash. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

static gr_status info_row(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                          gr_error *err) {
  gr_ckpt_info *info = elem;
  info->id = sqlite3_column_int64(st, 0);
  info->step = sqlite3_column_int64(st, 1);
  info->time = sqlite3_column_double(st, 2);
  const char *fp = (const char *)sqlite3_column_text(st, 3);
  snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp ? fp : "");
  info->num_tensors = sqlite3_column_int(st, 4);
  info->total_bytes = sqlite3_column_int64(st, 5);
  const char *m = (const char *)sqlite3_column_text(st, 6);
  info->metadata = strdup(m ? m : "{}");
  return info->metadata ? GR_OK : gr_error_set_oom(err);
}

gr_status gr_ckpt_list(gr_ckpt *ck, gr_ckpt_info **out, int *n, gr_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "SELECT id, step, time, fingerprint, num_tensors, total_bytes, metadata "
                      "FROM checkpoints ORDER BY id",
                      &st, err));
  void *v;
  int cnt;
  gr_status s =
      ckpt_collect_rows(ck, st, "listing checkpoints", sizeof **out, info_row, NULL, &v, &cnt, err);
  if (s != GR_OK) {
    gr_ckpt_infos_free(v, cnt);
    return s;
  }
  *out = v;
  *n = cnt;
  return GR_OK;
}

void gr_ckpt_infos_free(gr_ckpt_info *infos, int n) {
  for (int i = 0; infos && i < n; i++) free(infos[i].metadata);
  free(infos);
}

gr_status gr_ckpt_latest_step(gr_ckpt *ck, int64_t *step, gr_error *err) {
  int64_t id;
  return ckpt_find(ck, -1, &id, step, err);
}

gr_status gr_ckpt_list_tensors(gr_ckpt *ck, int64_t step, gr_ckpt_tensor_info **out, int *n,
                               gr_error *err) {
  return ckpt_tensors_at(ck, step, out, NULL, n, NULL, err);
}

/* Binary search of v (sorted by name); *idx its index. */
static const gr_ckpt_tensor_info *find_info(const gr_ckpt_tensor_info *v, int n, const char *name,
                                            int *idx);

/* A tensor of a directory: found in the merged listing, read from its shard. */
static gr_status read_sharded(gr_ckpt *ck, int64_t step, const char *name, gr_tensor *out,
                              gr_error *err) {
  gr_ckpt_tensor_info *infos;
  ckpt_loc *locs;
  int n, k;
  int64_t actual;
  GR_TRY(ckpt_tensors_at(ck, step, &infos, &locs, &n, &actual, err));
  const gr_ckpt_tensor_info *t = find_info(infos, n, name, &k);
  gr_status s = t ? ckpt_read_loc(&locs[k], t, actual, out, err)
                  : gr_error_set(err, GR_ERR_NOT_FOUND,
                                 "checkpoint directory '%s': the checkpoint at step %" PRId64
                                 " has no tensor named '%s'",
                                 ck->path, actual, name);
  gr_ckpt_tensor_infos_free(infos, n);
  ckpt_locs_free(locs, n);
  return s;
}

gr_status gr_ckpt_read_tensor(gr_ckpt *ck, int64_t step, const char *name, gr_tensor *out,
                              gr_error *err) {
  *out = gr_tensor_empty();
  if (ck->sharded) return read_sharded(ck, step, name, out, err);
  int64_t id, actual;
  GR_TRY(ckpt_find(ck, step, &id, &actual, err));
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "SELECT id, dtype, shape, nbytes, checksum FROM tensors "
                      "WHERE checkpoint_id = ?1 AND name = ?2",
                      &st, err));
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  gr_status s = GR_OK;
  gr_ckpt_tensor_info info = {0};
  int64_t tid = 0;
  if (rc == SQLITE_ROW) {
    tid = sqlite3_column_int64(st, 0);
    s = ckpt_parse_tensor_row(ck, name, (const char *)sqlite3_column_text(st, 1),
                              (const char *)sqlite3_column_text(st, 2), sqlite3_column_int64(st, 3),
                              (const char *)sqlite3_column_text(st, 4), &info, err);
  } else if (rc == SQLITE_DONE) {
    s = gr_error_set(err, GR_ERR_NOT_FOUND,
                     "checkpoint file '%s': the checkpoint at step %" PRId64
                     " has no tensor named '%s'",
                     ck->path, actual, name);
  } else {
    s = ckpt_sql_error(ck, rc, err, "reading tensors");
  }
  sqlite3_finalize(st);
  if (s != GR_OK) return s;
  info.name = (char *)name;
  return ckpt_read_tensor_id(ck, tid, &info, actual, out, err);
}

/* ---- restoring into variables ------------------------------------------------ */

static const gr_ckpt_tensor_info *find_info(const gr_ckpt_tensor_info *v, int n, const char *name,
                                            int *idx) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) { /* v is sorted by name (ORDER BY name: binary collation = strcmp) */
    int mid = (lo + hi) / 2, c = strcmp(v[mid].name, name);
    if (c == 0) {
      *idx = mid;
      return &v[mid];
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return NULL;
}

static void append(char *buf, size_t cap, int *count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, int *count, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (++*count > 8 || len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

static void finish_list(char *buf, size_t cap, int count) {
  if (count > 8) snprintf(buf + strlen(buf), cap - strlen(buf), " and %d more", count - 8);
}

gr_status ckpt_set_values(gr_resource_mgr *mgr, const gr_ckpt_var *vars, gr_tensor *vals, int n,
                          gr_error *err) {
  for (int i = 0; i < n; i++) {
    gr_var *v = gr_resource_mgr_get_var(mgr, vars[i].name);
    if (!v) return gr_error_set_oom(err);
    gr_var_lock(v);
    gr_tensor *cur = gr_var_value(v);
    gr_tensor_release(cur);
    *cur = vals[i];
    vals[i] = gr_tensor_empty();
    gr_var_unlock(v);
  }
  return GR_OK;
}

gr_status ckpt_read_vars(gr_ckpt *ck, const gr_ckpt_var *vars, int n, int64_t step, bool strict,
                         gr_tensor *vals, int64_t *step_out, gr_error *err) {
  for (int i = 0; i < n; i++) vals[i] = gr_tensor_empty();
  int64_t actual;
  gr_ckpt_tensor_info *infos;
  ckpt_loc *locs;
  int ni;
  GR_TRY(ckpt_tensors_at(ck, step, &infos, &locs, &ni, &actual, err));
  char missing[300] = "", extra[300] = "", differ[400] = "";
  int nmiss = 0, nextra = 0, ndiff = 0;
  char *used = calloc((size_t)ni + 1, 1);
  int *which = gr_alloc_array((size_t)n + 1, sizeof(int));
  gr_status s = GR_OK;
  if (!used || !which) s = gr_error_set_oom(err);
  for (int i = 0; s == GR_OK && i < n; i++) {
    int k;
    const gr_ckpt_tensor_info *t = find_info(infos, ni, vars[i].name, &k);
    if (!t) {
      append(missing, sizeof missing, &nmiss, "%s%s", nmiss ? ", " : "", vars[i].name);
      continue;
    }
    used[k] = 1;
    which[i] = k;
    if (t->dtype != vars[i].dtype || !gr_shape_equal(&t->shape, &vars[i].shape)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      append(differ, sizeof differ, &ndiff, "%s%s (checkpoint %s %s, graph %s %s)",
             ndiff ? ", " : "", vars[i].name, gr_dtype_name(t->dtype), gr_shape_str(&t->shape, a),
             gr_dtype_name(vars[i].dtype), gr_shape_str(&vars[i].shape, b));
    }
  }
  if (s == GR_OK && strict)
    for (int k = 0; k < ni; k++)
      if (!used[k]) append(extra, sizeof extra, &nextra, "%s%s", nextra ? ", " : "", infos[k].name);
  finish_list(missing, sizeof missing, nmiss);
  finish_list(extra, sizeof extra, nextra);
  finish_list(differ, sizeof differ, ndiff);
  if (s == GR_OK && !strict && (nmiss || ndiff))
    s = gr_error_set(
        err, nmiss ? GR_ERR_NOT_FOUND : (ndiff ? GR_ERR_SHAPE : GR_OK),
        "checkpoint file '%s', step %" PRId64 ":%s%s%s%s", ck->path, actual,
        nmiss ? " no tensor for variable(s) " : "", missing,
        ndiff ? (nmiss ? "; dtype or shape differs: " : " dtype or shape differs: ") : "", differ);
  else if (s == GR_OK && (nmiss || nextra || ndiff))
    s = gr_error_set(
        err, GR_ERR_FAILED_PRECONDITION,
        "checkpoint file '%s', step %" PRId64 " was saved from another graph:%s%s%s%s%s%s",
        ck->path, actual, nmiss ? " missing from the checkpoint: " : "", missing,
        nextra ? (nmiss ? "; not in this graph: " : " not in this graph: ") : "", extra,
        ndiff ? (nmiss || nextra ? "; dtype or shape differs: " : " dtype or shape differs: ") : "",
        differ);
  /* read everything first, so a damaged tensor leaves the variables untouched */
  for (int i = 0; s == GR_OK && i < n; i++)
    s = ckpt_read_loc(&locs[which[i]], &infos[which[i]], actual, &vals[i], err);
  if (s != GR_OK)
    for (int i = 0; i < n; i++) gr_tensor_release(&vals[i]);
  free(which);
  free(used);
  ckpt_locs_free(locs, ni);
  gr_ckpt_tensor_infos_free(infos, ni);
  if (s == GR_OK && step_out) *step_out = actual;
  return s;
}
