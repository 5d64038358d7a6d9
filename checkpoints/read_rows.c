/* One file's tensor rows read: listing a checkpoint's rows, checking and
 * reading a tensor's chunks (incremental blob I/O, its checksum computed as
 * the bytes arrive). Above the store (store.c); under slices, shards and
 * loading. A damaged file gives GR_ERR_DATA_LOSS naming the tensor. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

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
