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

/* The tensors.id of each tensor row, as ckpt_list_rows collects them. */
typedef struct row_ids {
  int64_t *v;
  int cap;
} row_ids;

static gr_status tensor_row(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                            gr_error *err) {
  row_ids *ids = arg;
  int64_t *nv = ckpt_reserve(ids->v, i, &ids->cap, sizeof *ids->v);
  if (!nv) return gr_error_set_oom(err);
  ids->v = nv;
  ids->v[i] = sqlite3_column_int64(st, 0);
  gr_ckpt_tensor_info *info = elem;
  const char *name = (const char *)sqlite3_column_text(st, 1);
  GR_TRY(ckpt_parse_tensor_row(
      ck, name, (const char *)sqlite3_column_text(st, 2), (const char *)sqlite3_column_text(st, 3),
      sqlite3_column_int64(st, 4), (const char *)sqlite3_column_text(st, 5), info, err));
  return (info->name = strdup(name)) ? GR_OK : gr_error_set_oom(err);
}

/* Tensor rows of checkpoint id, with their tensors.id in ids (may be NULL). */
gr_status ckpt_list_rows(gr_ckpt *ck, int64_t ck_id, gr_ckpt_tensor_info **out, int64_t **ids,
                         int *n, gr_error *err) {
  *out = NULL;
  *n = 0;
  if (ids) *ids = NULL;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "SELECT id, name, dtype, shape, nbytes, checksum FROM tensors "
                      "WHERE checkpoint_id = ?1 ORDER BY name",
                      &st, err));
  sqlite3_bind_int64(st, 1, ck_id);
  void *v;
  int cnt;
  row_ids rid = {NULL, 0};
  gr_status s =
      ckpt_collect_rows(ck, st, "listing tensors", sizeof **out, tensor_row, &rid, &v, &cnt, err);
  if (s != GR_OK) {
    gr_ckpt_tensor_infos_free(v, cnt);
    free(rid.v);
    return s;
  }
  *out = v;
  *n = cnt;
  if (ids)
    *ids = rid.v;
  else
    free(rid.v);
  return GR_OK;
}

gr_status gr_ckpt_list_tensors(gr_ckpt *ck, int64_t step, gr_ckpt_tensor_info **out, int *n,
                               gr_error *err) {
  return ckpt_tensors_at(ck, step, out, NULL, n, NULL, err);
}

void gr_ckpt_tensor_infos_free(gr_ckpt_tensor_info *infos, int n) {
  for (int i = 0; infos && i < n; i++) free(infos[i].name);
  free(infos);
}

gr_status ckpt_check_data(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                          int64_t step, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck, "SELECT coalesce(sum(length(data)), 0) FROM chunks WHERE tensor_id = ?1",
                      &st, err));
  sqlite3_bind_int64(st, 1, tensor_id);
  int rc = sqlite3_step(st);
  int64_t present = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) {
    gr_status e = ckpt_sql_error(ck, rc, err, "reading tensor data");
    gr_error_prefix(err, "tensor '%s' (step %" PRId64 ")", info->name, step);
    return e;
  }
  if (present != info->nbytes)
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s', step %" PRId64 ": tensor '%s' has %" PRId64
                        " bytes of data, expected %" PRId64,
                        ck->path, step, info->name, present, info->nbytes);
  return GR_OK;
}

gr_status ckpt_read_data(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                         int64_t step, unsigned char *dst, gr_error *err) {
  sqlite3_stmt *st;
  int rc = SQLITE_DONE;
  GR_TRY(ckpt_prepare(
      ck, "SELECT id, seq, length(data) FROM chunks WHERE tensor_id = ?1 ORDER BY seq", &st, err));
  gr_status s = GR_OK;
  sqlite3_bind_int64(st, 1, tensor_id);
  gr_ckpt_hasher h;
  gr_ckpt_hash_init(&h);
  sqlite3_blob *blob = NULL;
  int64_t off = 0, expect_seq = 0;
  while (s == GR_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t row = sqlite3_column_int64(st, 0), seq = sqlite3_column_int64(st, 1);
    int64_t len = sqlite3_column_int64(st, 2);
    if (seq != expect_seq++ || len < 0 || len > info->nbytes - off || len > GR_CKPT_CHUNK_BYTES) {
      s = gr_error_set(
          err, GR_ERR_DATA_LOSS,
          "checkpoint file '%s', step %" PRId64 ": tensor '%s': data chunk %" PRId64 " is %s",
          ck->path, step, info->name, seq, seq != expect_seq - 1 ? "out of sequence" : "too long");
      break;
    }
    if (len == 0) continue;
    rc = blob ? sqlite3_blob_reopen(blob, row)
              : sqlite3_blob_open(ck->db, "main", "chunks", "data", row, 0, &blob);
    /* in 1 MiB pieces, each hashed while it is still in cache */
    for (int64_t at = 0; rc == SQLITE_OK && at < len; at += 1 << 20) {
      int piece = (int)(len - at < (1 << 20) ? len - at : (1 << 20));
      rc = sqlite3_blob_read(blob, dst + off + at, piece, (int)at);
      if (rc == SQLITE_OK) gr_ckpt_hash_update(&h, dst + off + at, (size_t)piece);
    }
    if (rc != SQLITE_OK) {
      s = ckpt_sql_error(ck, rc, err, "reading tensor data");
      gr_error_prefix(err, "tensor '%s' (step %" PRId64 ")", info->name, step);
      break;
    }
    off += len;
  }
  if (s == GR_OK && rc != SQLITE_DONE) {
    s = ckpt_sql_error(ck, rc, err, "reading tensor data");
    gr_error_prefix(err, "tensor '%s' (step %" PRId64 ")", info->name, step);
  }
  sqlite3_blob_close(blob);
  sqlite3_finalize(st);
  if (s == GR_OK && off != info->nbytes)
    s = gr_error_set(err, GR_ERR_DATA_LOSS,
                     "checkpoint file '%s', step %" PRId64 ": tensor '%s' has %" PRId64
                     " bytes of data, expected %" PRId64,
                     ck->path, step, info->name, off, info->nbytes);
  if (s == GR_OK && gr_ckpt_hash_final(&h) != info->checksum)
    s = gr_error_set(err, GR_ERR_DATA_LOSS,
                     "checkpoint file '%s', step %" PRId64 ": tensor '%s' fails its checksum "
                     "(stored %016" PRIx64 ", data %016" PRIx64 "): the data is damaged",
                     ck->path, step, info->name, info->checksum, gr_ckpt_hash_final(&h));
  return s;
}

gr_status ckpt_read_tensor_id(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                              int64_t step, gr_tensor *out, gr_error *err) {
  *out = gr_tensor_empty();
  /* the data must be there before its size is trusted for an allocation */
  GR_TRY(ckpt_check_data(ck, tensor_id, info, step, err));
  GR_TRY(gr_tensor_alloc(out, info->dtype, &info->shape, err));
  gr_status s = ckpt_read_data(ck, tensor_id, info, step, gr_tensor_data(out), err);
  if (s != GR_OK) gr_tensor_release(out);
  return s;
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
