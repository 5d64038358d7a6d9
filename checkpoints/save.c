/* Writing a checkpoint: one transaction holding the checkpoint row, its
 * tensors, their data in chunks of at most GR_CKPT_CHUNK_BYTES, and the
 * retention deletes. New rows are written before old ones are deleted, so
 * the pages a delete frees are only reused by a later transaction (SQLite
 * then needs not journal them). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoints/ckpt_internal.h"

static gr_status check_inputs(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *t,
                              const gr_ckpt_slice *slices, int n, gr_error *err) {
  if (ck->opts.read_only)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "checkpoint file '%s' was opened read-only", ck->path);
  if (step < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint step %" PRId64 " is negative",
                        step);
  if (n < 0 || (n && !t))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint: bad tensor array");
  for (int i = 0; i < n; i++) {
    if (!t[i].name || !*t[i].name || !t[i].value)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "checkpoint: tensor %d has no name or value", i);
    if (gr_tensor_is_empty(t[i].value) && gr_tensor_num_bytes(t[i].value) > 0)
      return gr_error_set(err, GR_ERR_FAILED_PRECONDITION, "checkpoint: tensor '%s' has no value",
                          t[i].name);
    for (int j = 0; j < i; j++)
      if (strcmp(t[i].name, t[j].name) == 0)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' given twice",
                            t[i].name);
    if (slices && slices[i].whole) GR_TRY(ckpt_check_slice(t[i].name, t[i].value, &slices[i], err));
  }
  return GR_OK;
}

static int cmp_var(const void *a, const void *b) {
  return strcmp(((const gr_ckpt_var *)a)->name, ((const gr_ckpt_var *)b)->name);
}

static gr_status write_rows(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *t,
                            const gr_ckpt_slice *slices, int n, const char *meta, gr_error *err) {
  int64_t old_id, total = 0;
  gr_error ignore;
  if (ckpt_find(ck, step, &old_id, NULL, &ignore) == GR_OK)
    GR_TRY(ckpt_delete_checkpoint(ck, old_id, err));
  gr_ckpt_var *vars = gr_alloc_array((size_t)n + 1, sizeof *vars);
  if (!vars) return gr_error_set_oom(err);
  for (int i = 0; i < n; i++) {
    vars[i] = (gr_ckpt_var){t[i].name, t[i].value->dtype, t[i].value->shape};
    total += (int64_t)gr_tensor_num_bytes(t[i].value);
  }
  qsort(vars, (size_t)n, sizeof *vars, cmp_var);
  char fp[17];
  snprintf(fp, sizeof fp, "%016" PRIx64, gr_ckpt_fingerprint(vars, n));
  free(vars);
  int64_t ck_id = 0;
  sqlite3_stmt *ins_t = NULL, *ins_c = NULL;
  gr_status s = ckpt_insert_checkpoint(ck, step, fp, n, total, meta, &ck_id, err);
  bool any_slice = false;
  for (int i = 0; slices && i < n; i++) any_slice |= slices[i].whole != NULL;
  if (s == GR_OK && any_slice) s = ckpt_prepare_slices(ck, err);
  if (s == GR_OK)
    s = ckpt_prepare(ck,
                     "INSERT INTO tensors(checkpoint_id, name, dtype, shape, nbytes, checksum) "
                     "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                     &ins_t, err);
  if (s == GR_OK)
    s = ckpt_prepare(ck, "INSERT INTO chunks(tensor_id, seq, data) VALUES(?1, ?2, ?3)", &ins_c,
                     err);
  for (int i = 0; s == GR_OK && i < n; i++) {
    const gr_tensor *v = t[i].value;
    const unsigned char *data = gr_tensor_data(v);
    size_t nbytes = gr_tensor_num_bytes(v);
    char shape[GR_MAX_RANK * 21 + 4], sum[17];
    ckpt_shape_to_text(&v->shape, shape, sizeof shape);
    snprintf(sum, sizeof sum, "%016" PRIx64, gr_ckpt_hash64(data, nbytes));
    sqlite3_bind_int64(ins_t, 1, ck_id);
    sqlite3_bind_text(ins_t, 2, t[i].name, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins_t, 3, gr_dtype_name(v->dtype), -1, SQLITE_STATIC);
    sqlite3_bind_text(ins_t, 4, shape, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins_t, 5, (int64_t)nbytes);
    sqlite3_bind_text(ins_t, 6, sum, -1, SQLITE_TRANSIENT);
    s = ckpt_step_done(ck, ins_t, "writing a tensor row", err);
    int64_t t_id = sqlite3_last_insert_rowid(ck->db);
    if (s == GR_OK && slices && slices[i].whole) s = ckpt_insert_slice(ck, t_id, &slices[i], err);
    size_t off = 0;
    for (int64_t seq = 0; s == GR_OK && (off < nbytes || seq == 0); seq++) {
      size_t len = nbytes - off < GR_CKPT_CHUNK_BYTES ? nbytes - off : GR_CKPT_CHUNK_BYTES;
      sqlite3_bind_int64(ins_c, 1, t_id);
      sqlite3_bind_int64(ins_c, 2, seq);
      if (len)
        sqlite3_bind_blob64(ins_c, 3, data + off, len, SQLITE_STATIC);
      else
        sqlite3_bind_zeroblob(ins_c, 3, 0);
      s = ckpt_step_done(ck, ins_c, "writing tensor data", err);
      off += len;
    }
    if (s != GR_OK) gr_error_prefix(err, "saving tensor '%s'", t[i].name);
  }
  sqlite3_finalize(ins_t);
  sqlite3_finalize(ins_c);
  if (s == GR_OK) s = ckpt_apply_retention(ck, err);
  return s;
}

/* A shard's retention: deletes its rows of steps before `step` that no
 * manifest row names (keep[0..nkeep)), in the caller's transaction. */
static gr_status prune_rows(gr_ckpt *ck, int64_t step, const int64_t *keep, int nkeep,
                            gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck, "SELECT id, step FROM checkpoints WHERE step < ?1", &st, err));
  sqlite3_bind_int64(st, 1, step);
  int64_t doomed[64];
  int nd = 0, rc;
  while (nd < 64 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t old = sqlite3_column_int64(st, 1);
    bool kept = false;
    for (int i = 0; i < nkeep && !kept; i++) kept = keep[i] == old;
    if (!kept) doomed[nd++] = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  for (int i = 0; i < nd; i++) GR_TRY(ckpt_delete_checkpoint(ck, doomed[i], err));
  return GR_OK;
}

gr_status ckpt_write_file(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *tensors,
                          const gr_ckpt_slice *slices, int n, const char *meta, const int64_t *keep,
                          int nkeep, gr_error *err) {
  GR_TRY(ckpt_exec(ck, "BEGIN IMMEDIATE", err));
  gr_status s = write_rows(ck, step, tensors, slices, n, meta, err);
  if (s == GR_OK && nkeep >= 0) s = prune_rows(ck, step, keep, nkeep, err);
  if (s == GR_OK && ckpt_before_commit_hook) ckpt_before_commit_hook(ck->path, step);
  if (s == GR_OK) s = ckpt_exec(ck, "COMMIT", err);
  if (s != GR_OK) sqlite3_exec(ck->db, "ROLLBACK", NULL, NULL, NULL);
  return s;
}

gr_status gr_ckpt_save_tensors(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *tensors, int n,
                               const char *metadata_json, gr_error *err) {
  GR_TRY(check_inputs(ck, step, tensors, NULL, n, err));
  const char *meta = metadata_json ? metadata_json : "{}";
  GR_TRY(ckpt_check_meta(ck, meta, err));
  if (!ck->sharded) return ckpt_write_file(ck, step, tensors, NULL, n, meta, NULL, -1, err);
  /* a directory: this process's shard, then the manifest */
  gr_ckpt *shard;
  int64_t *keep;
  int nkeep;
  GR_TRY(ckpt_shard(ck, CKPT_LOCAL_SHARD, true, &shard, err));
  GR_TRY(ckpt_shard_steps(ck, CKPT_LOCAL_SHARD, &keep, &nkeep, err));
  gr_status s = ckpt_write_file(shard, step, tensors, NULL, n, "{}", keep, nkeep, err);
  free(keep);
  GR_TRY(s);
  gr_ckpt_shard one = {CKPT_LOCAL_SHARD, "this process"};
  return gr_ckpt_commit_shards(ck, step, &one, 1, meta, err);
}

gr_status gr_ckpt_save_shard(const char *path, int64_t step, const gr_ckpt_tensor *tensors, int n,
                             gr_error *err) {
  return gr_ckpt_save_shard_slices(path, step, tensors, NULL, n, err);
}

gr_status gr_ckpt_save_shard_slices(const char *path, int64_t step, const gr_ckpt_tensor *tensors,
                                    const gr_ckpt_slice *slices, int n, gr_error *err) {
  if (!path || !*path)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint path is empty");
  /* the steps the manifest beside it names this shard for: kept */
  char dir[4096];
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 1;
  if (dl >= sizeof dir) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "path is too long");
  memcpy(dir, slash ? path : ".", dl);
  dir[dl ? dl : 1] = '\0';
  if (!dl) dir[0] = '/';
  int64_t *keep = NULL;
  int nkeep = -1; /* -1: the manifest could not be read, so nothing is deleted */
  gr_ckpt *manifest = NULL;
  gr_ckpt_options ro = {.read_only = true};
  gr_error e;
  gr_status ms = gr_ckpt_open(dir, &ro, &manifest, &e);
  if (ms == GR_ERR_NOT_FOUND) nkeep = 0; /* nothing committed yet */
  if (ms == GR_OK &&
      ckpt_shard_steps(manifest, slash ? slash + 1 : path, &keep, &nkeep, &e) != GR_OK)
    nkeep = -1;
  gr_ckpt_close(manifest);
  gr_ckpt *ck;
  gr_status s = gr_ckpt_open(path, NULL, &ck, err);
  if (s == GR_OK) s = check_inputs(ck, step, tensors, slices, n, err);
  if (s == GR_OK) s = ckpt_write_file(ck, step, tensors, slices, n, "{}", keep, nkeep, err);
  gr_ckpt_close(ck);
  free(keep);
  return s;
}

gr_status gr_ckpt_patch_metadata(gr_ckpt *ck, int64_t step, const char *patch_json, gr_error *err) {
  if (ck->opts.read_only)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "checkpoint %s is open read-only: cannot change metadata", ck->path);
  GR_TRY(ckpt_check_meta(ck, patch_json, err));
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(
      ck, "UPDATE checkpoints SET metadata = json_patch(metadata, ?2) WHERE step = ?1", &st, err));
  sqlite3_bind_int64(st, 1, step);
  sqlite3_bind_text(st, 2, patch_json, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return ckpt_sql_error(ck, rc, err, "changing metadata");
  if (sqlite3_changes(ck->db) == 0)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "checkpoint %s has no checkpoint of step %lld",
                        ck->path, (long long)step);
  return GR_OK;
}
