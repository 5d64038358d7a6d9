/* Verifying a checkpoint file: SQLite's integrity_check, then every tensor
 * of every checkpoint re-read and compared with its size and checksum, and
 * the bookkeeping columns (tensor counts, byte totals, fingerprints). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

typedef struct problems {
  void (*report)(void *, const char *);
  void *arg;
  int count;
  gr_error first;
} problems;

static void problem(problems *p, const char *msg) {
  if (p->count++ == 0) gr_error_set(&p->first, GR_ERR_DATA_LOSS, "%s", msg);
  if (p->report) p->report(p->arg, msg);
}

static void check_checkpoint(gr_ckpt *ck, const gr_ckpt_info *c, problems *p, int *checked) {
  gr_ckpt_tensor_info *infos;
  int n;
  gr_error e;
  char msg[GR_ERROR_MSG_MAX + 64];
  if (gr_ckpt_list_tensors(ck, c->step, &infos, &n, &e) != GR_OK) {
    problem(p, e.msg);
    return;
  }
  int64_t total = 0;
  gr_ckpt_var *vars = gr_alloc_array((size_t)n + 1, sizeof *vars);
  for (int i = 0; i < n; i++) {
    gr_tensor t;
    if (gr_ckpt_read_tensor(ck, c->step, infos[i].name, &t, &e) != GR_OK)
      problem(p, e.msg);
    else
      gr_tensor_release(&t);
    (*checked)++;
    total += infos[i].nbytes;
    if (vars) vars[i] = (gr_ckpt_var){infos[i].name, infos[i].dtype, infos[i].shape};
  }
  if (n != c->num_tensors || total != c->total_bytes) {
    snprintf(msg, sizeof msg,
             "checkpoint at step %" PRId64 " records %d tensors of %" PRId64
             " bytes but holds %d of %" PRId64,
             c->step, c->num_tensors, c->total_bytes, n, total);
    problem(p, msg);
  }
  char fp[17];
  if (vars) {
    snprintf(fp, sizeof fp, "%016" PRIx64, gr_ckpt_fingerprint(vars, n));
    if (strcmp(fp, c->fingerprint) != 0) {
      snprintf(msg, sizeof msg,
               "checkpoint at step %" PRId64 " records fingerprint %s but its tensors give %s",
               c->step, c->fingerprint, fp);
      problem(p, msg);
    }
  }
  free(vars);
  gr_ckpt_tensor_infos_free(infos, n);
}

void ckpt_integrity(gr_ckpt *ck, void (*problem)(void *arg, const char *msg), void *arg) {
  sqlite3_stmt *st;
  gr_error e;
  char msg[GR_ERROR_MSG_MAX + 300];
  if (ckpt_prepare(ck, "PRAGMA integrity_check", &st, &e) != GR_OK) {
    problem(arg, e.msg);
    return;
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *line = (const char *)sqlite3_column_text(st, 0);
    if (line && strcmp(line, "ok") != 0) {
      snprintf(msg, sizeof msg, "%s: integrity_check: %s", ck->path, line);
      problem(arg, msg);
    }
  }
  if (rc != SQLITE_DONE) {
    ckpt_sql_error(ck, rc, &e, "integrity_check");
    problem(arg, e.msg);
  }
  sqlite3_finalize(st);
}

static void problem_cb(void *arg, const char *msg) {
  problem(arg, msg);
}

/* integrity_check of every shard file a manifest row names (once each). */
static void check_shard_files(gr_ckpt *ck, problems *p) {
  sqlite3_stmt *st;
  gr_error e;
  if (ckpt_prepare(ck, "SELECT DISTINCT file FROM shards ORDER BY file", &st, &e) != GR_OK) {
    problem(p, e.msg);
    return;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    gr_ckpt *sh;
    /* a missing or unreadable shard is reported with the checkpoints that need it */
    if (ckpt_shard(ck, (const char *)sqlite3_column_text(st, 0), false, &sh, &e) == GR_OK)
      ckpt_integrity(sh, problem_cb, p);
  }
  sqlite3_finalize(st);
}

gr_status gr_ckpt_verify(gr_ckpt *ck, void (*report)(void *arg, const char *problem), void *arg,
                         int *num_checked, gr_error *err) {
  problems p = {report, arg, 0, {0}};
  int checked = 0;
  sqlite3_stmt *st;
  int rc;
  char msg[GR_ERROR_MSG_MAX];
  ckpt_integrity(ck, problem_cb, &p);
  if (ck->sharded) check_shard_files(ck, &p);
  gr_ckpt_info *cks = NULL;
  int n = 0;
  gr_error e;
  if (gr_ckpt_list(ck, &cks, &n, &e) != GR_OK) problem(&p, e.msg);
  for (int i = 0; i < n; i++) check_checkpoint(ck, &cks[i], &p, &checked);
  gr_ckpt_infos_free(cks, n);
  /* rows that belong to no checkpoint (never written by graphrun) */
  static const char *const orphans[] = {
      "SELECT count(*) FROM tensors WHERE checkpoint_id NOT IN (SELECT id FROM checkpoints)",
      "SELECT count(*) FROM chunks WHERE tensor_id NOT IN (SELECT id FROM tensors)",
      "SELECT count(*) FROM slices WHERE tensor_id NOT IN (SELECT id FROM tensors)"};
  static const char *const what[][2] = {
      {"tensors", "checkpoint"}, {"chunks", "tensor"}, {"slices", "tensor"}};
  bool slices = false;
  if (ckpt_has_slices(ck, &slices, &e) != GR_OK) problem(&p, e.msg);
  for (int i = 0; i < (slices ? 3 : 2); i++) {
    if (ckpt_prepare(ck, orphans[i], &st, &e) != GR_OK) {
      problem(&p, e.msg);
      continue;
    }
    if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0) {
      snprintf(msg, sizeof msg, "%" PRId64 " %s rows belong to no %s",
               (int64_t)sqlite3_column_int64(st, 0), what[i][0], what[i][1]);
      problem(&p, msg);
    } else if (rc != SQLITE_ROW) {
      ckpt_sql_error(ck, rc, &e, "looking for orphan rows");
      problem(&p, e.msg);
    }
    sqlite3_finalize(st);
  }
  if (num_checked) *num_checked = checked;
  if (p.count == 0) return GR_OK;
  if (err) {
    *err = p.first;
    if (p.count > 1) gr_error_prefix(err, "%d problems, the first", p.count);
  }
  return GR_ERR_DATA_LOSS;
}
