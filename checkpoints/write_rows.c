/* One file's checkpoint rows written and retired: a checkpoint row
 * inserted, one deleted with its tensors, chunks and slices, retention
 * (which to delete), and the metadata check. Above the store and slices;
 * under saving (save.c) and shards (shards.c). */
#include <stdlib.h>
#include <time.h>

#include "checkpoints/ckpt_internal.h"

gr_status ckpt_delete_checkpoint(gr_ckpt *ck, int64_t id, gr_error *err) {
  static const char *const sql[] = {
      "DELETE FROM slices WHERE tensor_id IN (SELECT id FROM tensors WHERE checkpoint_id = ?1)",
      "DELETE FROM chunks WHERE tensor_id IN (SELECT id FROM tensors WHERE checkpoint_id = ?1)",
      "DELETE FROM tensors WHERE checkpoint_id = ?1", "DELETE FROM checkpoints WHERE id = ?1",
      "DELETE FROM shards WHERE checkpoint_id = ?1"};
  bool slices;
  GR_TRY(ckpt_has_slices(ck, &slices, err));
  for (int i = slices ? 0 : 1; i < (ck->sharded ? 5 : 4); i++) {
    sqlite3_stmt *st;
    GR_TRY(ckpt_prepare(ck, sql[i], &st, err));
    sqlite3_bind_int64(st, 1, id);
    gr_status s = ckpt_step_done(ck, st, "deleting an old checkpoint", err);
    sqlite3_finalize(st);
    GR_TRY(s);
  }
  return GR_OK;
}

/* Keeps the newest max_to_keep checkpoints (by write order), those whose
 * step is a multiple of keep_every_n_steps and those whose metadata says
 * "keep": true (not counted among the newest). */
gr_status ckpt_apply_retention(gr_ckpt *ck, gr_error *err) {
  if (ck->opts.max_to_keep <= 0) return GR_OK;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "SELECT id, step, json_extract(metadata, '$.keep') IS 1 FROM checkpoints"
                      " ORDER BY id DESC",
                      &st, err));
  int64_t *doomed = NULL;
  int nd = 0, cap = 0, rank = 0, rc;
  gr_status s = GR_OK;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), step = sqlite3_column_int64(st, 1);
    if (sqlite3_column_int(st, 2)) continue; /* marked to keep */
    if (rank++ < ck->opts.max_to_keep) continue;
    if (ck->opts.keep_every_n_steps > 0 && step % ck->opts.keep_every_n_steps == 0) continue;
    int64_t *more = ckpt_reserve(doomed, nd, &cap, sizeof *doomed);
    if (!more) {
      s = gr_error_set_oom(err);
      break;
    }
    doomed = more;
    doomed[nd++] = id;
  }
  if (s == GR_OK && rc != SQLITE_DONE) s = ckpt_sql_error(ck, rc, err, "listing checkpoints");
  sqlite3_finalize(st);
  for (int i = 0; s == GR_OK && i < nd; i++) s = ckpt_delete_checkpoint(ck, doomed[i], err);
  free(doomed);
  return s;
}

gr_status ckpt_insert_checkpoint(gr_ckpt *ck, int64_t step, const char *fp, int num_tensors,
                                 int64_t total_bytes, const char *meta, int64_t *id,
                                 gr_error *err) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "INSERT INTO checkpoints(step, time, fingerprint, num_tensors, total_bytes, "
                      "metadata) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                      &st, err));
  sqlite3_bind_int64(st, 1, step);
  sqlite3_bind_double(st, 2, (double)now.tv_sec + 1e-9 * (double)now.tv_nsec);
  sqlite3_bind_text(st, 3, fp, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 4, num_tensors);
  sqlite3_bind_int64(st, 5, total_bytes);
  sqlite3_bind_text(st, 6, meta, -1, SQLITE_STATIC);
  gr_status s = ckpt_step_done(ck, st, "writing the checkpoint row", err);
  sqlite3_finalize(st);
  *id = sqlite3_last_insert_rowid(ck->db);
  return s;
}

gr_status ckpt_check_meta(gr_ckpt *ck, const char *meta, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(
      ck, "SELECT CASE WHEN json_valid(?1) THEN json_type(?1) = 'object' ELSE 0 END", &st, err));
  sqlite3_bind_text(st, 1, meta, -1, SQLITE_STATIC);
  int ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (!ok)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "checkpoint metadata is not a JSON object: %.200s", meta);
  return GR_OK;
}
