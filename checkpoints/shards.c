/* Sharded checkpoints: a directory of shard files (ordinary checkpoint
 * files, one per task that holds variables) and a manifest that commits a
 * checkpoint once all its shards are written. Reading merges the shards;
 * retention removes old manifest rows, the shard rows no manifest row names
 * and the shard files left with none. Layout: docs/checkpoints.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"

/* A shard file name as graphrun writes them: [A-Za-z0-9._-]+.ckpt, not
 * hidden, not the manifest. Names read from a manifest are checked, so a
 * damaged one cannot make retention delete outside the directory. */
static bool shard_name_ok(const char *f) {
  size_t n = f ? strlen(f) : 0;
  if (n < 6 || n > 200 || f[0] == '.' || strcmp(f + n - 5, ".ckpt") != 0 ||
      strcmp(f, CKPT_MANIFEST_NAME) == 0)
    return false;
  return strspn(f, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

void gr_ckpt_shard_name(const char *job, int task, char *buf, size_t cap) {
  if (!cap) return;
  snprintf(buf, cap, "%s-%d.ckpt", job && *job ? job : "task", task);
  for (char *p = buf; *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *p)) *p = '_';
  if (buf[0] == '.') buf[0] = '_';
}

bool gr_ckpt_shard_path(const gr_ckpt *ck, const char *shard, char *buf, size_t cap) {
  return (size_t)snprintf(buf, cap, "%s/%s", ck->path, shard) < cap;
}

gr_status ckpt_shard(gr_ckpt *ck, const char *name, bool writable, gr_ckpt **out, gr_error *err) {
  *out = NULL;
  if (!shard_name_ok(name))
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint directory '%s': '%s' is not a shard file name", ck->path,
                        name ? name : "(null)");
  for (int i = 0; i < ck->num_shards; i++)
    if (strcmp(ck->shard_names[i], name) == 0) {
      if (writable && ck->shards[i]->opts.read_only)
        return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                            "checkpoint directory '%s' was opened read-only", ck->path);
      *out = ck->shards[i];
      return GR_OK;
    }
  char path[4096];
  struct stat sb;
  if (!gr_ckpt_shard_path(ck, name, path, sizeof path))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
  if (!writable && stat(path, &sb) != 0)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "shard file '%s' is missing: %s", path,
                        strerror(errno));
  if (ck->num_shards == ck->cap_shards) {
    int cap = ck->cap_shards ? 2 * ck->cap_shards : 8;
    gr_ckpt **s = gr_realloc_array(ck->shards, (size_t)cap, sizeof *s);
    if (s) ck->shards = s;
    char **nm = s ? gr_realloc_array(ck->shard_names, (size_t)cap, sizeof *nm) : NULL;
    if (nm) ck->shard_names = nm;
    if (!s || !nm) return gr_error_set_oom(err);
    ck->cap_shards = cap;
  }
  char *copy = strdup(name);
  if (!copy) return gr_error_set_oom(err);
  gr_ckpt_options o = {.read_only = ck->opts.read_only};
  gr_ckpt *sh;
  gr_status s = gr_ckpt_open(path, &o, &sh, err);
  if (s != GR_OK) {
    free(copy);
    if (!writable && s != GR_ERR_RESOURCE_EXHAUSTED) { /* a shard a checkpoint needs */
      s = GR_ERR_DATA_LOSS;
      if (err) err->code = s;
    }
    return s;
  }
  ck->shard_names[ck->num_shards] = copy;
  ck->shards[ck->num_shards++] = sh;
  *out = sh;
  return GR_OK;
}

/* Closes the cached shard `name` (before its file is removed). */
static void forget_shard(gr_ckpt *ck, const char *name) {
  for (int i = 0; i < ck->num_shards; i++)
    if (strcmp(ck->shard_names[i], name) == 0) {
      gr_ckpt_close(ck->shards[i]);
      free(ck->shard_names[i]);
      ck->shards[i] = ck->shards[--ck->num_shards];
      ck->shard_names[i] = ck->shard_names[ck->num_shards];
      return;
    }
}

/* The checkpoints row of a shard file at step: id, fingerprint, counts. */
static gr_status shard_row(gr_ckpt *sh, int64_t step, int64_t *id, char fp[17], int *num_tensors,
                           int64_t *total, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(sh,
                      "SELECT id, fingerprint, num_tensors, total_bytes FROM checkpoints "
                      "WHERE step = ?1",
                      &st, err));
  sqlite3_bind_int64(st, 1, step);
  int rc = sqlite3_step(st);
  gr_status s = GR_OK;
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    const char *f = (const char *)sqlite3_column_text(st, 1);
    snprintf(fp, 17, "%s", f ? f : "");
    *num_tensors = sqlite3_column_int(st, 2);
    *total = sqlite3_column_int64(st, 3);
  } else if (rc == SQLITE_DONE) {
    s = gr_error_set(err, GR_ERR_DATA_LOSS, "shard file '%s' has no checkpoint at step %" PRId64,
                     sh->path, step);
  } else {
    s = ckpt_sql_error(sh, rc, err, "finding a checkpoint");
  }
  sqlite3_finalize(st);
  return s;
}

/* ---- the merged view ---------------------------------------------------------- */

/* The tensors of a checkpoint's shards: whole ones (infos, locs), and
 * slices, assembled into their wholes by merge_finish. */
typedef struct merged {
  gr_ckpt_tensor_info *infos;
  ckpt_loc *locs;
  int n, cap;
  ckpt_slices slices;
} merged;

static void merge_free(merged *m) {
  gr_ckpt_tensor_infos_free(m->infos, m->n);
  ckpt_locs_free(m->locs, m->n);
  ckpt_slices_free(&m->slices);
}

/* Appends infos[0..n) (their names now m's) at locs (or, locs NULL, in
 * file at tensors.id ids[i]). */
static gr_status merge_add(merged *m, gr_ckpt *file, gr_ckpt_tensor_info *infos, int64_t *ids,
                           const ckpt_loc *locs, int n, gr_error *err) {
  if (m->n + n > m->cap) {
    int cap = m->cap ? m->cap : 16;
    while (cap < m->n + n) cap *= 2;
    gr_ckpt_tensor_info *ni = gr_realloc_array(m->infos, (size_t)cap, sizeof *ni);
    if (ni) m->infos = ni;
    ckpt_loc *nl = ni ? gr_realloc_array(m->locs, (size_t)cap, sizeof *nl) : NULL;
    if (nl) m->locs = nl;
    if (!ni || !nl) return gr_error_set_oom(err);
    m->cap = cap;
  }
  for (int i = 0; i < n; i++) {
    m->infos[m->n] = infos[i];
    m->locs[m->n++] = locs ? locs[i] : (ckpt_loc){file, ids[i], NULL, 0};
  }
  return GR_OK;
}

static int cmp_index_name(const void *a, const void *b, void *arg) {
  const gr_ckpt_tensor_info *v = arg;
  return strcmp(v[*(const int *)a].name, v[*(const int *)b].name);
}

/* Sorts m by name; a name twice is an error naming both files. */
static gr_status merge_sort(gr_ckpt *ck, int64_t step, merged *m, gr_error *err) {
  int *idx = gr_alloc_array((size_t)m->n + 1, sizeof *idx);
  gr_ckpt_tensor_info *si = gr_alloc_array((size_t)m->n + 1, sizeof *si);
  ckpt_loc *sl = gr_alloc_array((size_t)m->n + 1, sizeof *sl);
  if (!idx || !si || !sl) {
    free(idx), free(si), free(sl);
    return gr_error_set_oom(err);
  }
  for (int i = 0; i < m->n; i++) idx[i] = i;
  qsort_r(idx, (size_t)m->n, sizeof *idx, cmp_index_name, m->infos);
  for (int i = 0; i < m->n; i++) si[i] = m->infos[idx[i]], sl[i] = m->locs[idx[i]];
  free(idx);
  free(m->infos);
  free(m->locs);
  m->infos = si;
  m->locs = sl;
  for (int i = 1; i < m->n; i++) {
    if (strcmp(si[i - 1].name, si[i].name) != 0) continue;
    const ckpt_loc *a = &sl[i - 1], *b = &sl[i];
    if (a->file && b->file)
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint directory '%s', step %" PRId64
                          ": tensor '%s' is in two shards, '%s' and '%s'",
                          ck->path, step, si[i].name, a->file->path, b->file->path);
    if (!a->file) a = b, b = &sl[i - 1]; /* a: the tensor, b: the slices */
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint directory '%s', step %" PRId64
                        ": '%s' is both a tensor in shard '%s' and a partitioned variable whose "
                        "slices are in shards (one: '%s')",
                        ck->path, step, si[i].name, a->file ? a->file->path : "?",
                        b->slices[0].file->path);
  }
  return GR_OK;
}

/* Assembles the wholes of m's slices into m, then sorts m by name (an
 * error for a name twice). */
static gr_status merge_finish(gr_ckpt *ck, int64_t step, merged *m, gr_error *err) {
  gr_ckpt_tensor_info *infos;
  ckpt_loc *locs;
  int n;
  GR_TRY(ckpt_assemble(ck, step, &m->slices, &infos, &locs, &n, err));
  gr_status s = merge_add(m, NULL, infos, NULL, locs, n, err);
  if (s != GR_OK) {
    gr_ckpt_tensor_infos_free(infos, n);
    ckpt_locs_free(locs, n);
    return s;
  }
  free(infos); /* their names and slices now m's */
  free(locs);
  return merge_sort(ck, step, m, err);
}

/* The shards of a manifest row as (file, task, fingerprint). */
typedef struct shard_ref {
  char file[208], task[GR_DEVICE_NAME_MAX], fp[17];
} shard_ref;

static gr_status shard_ref_row(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                               gr_error *err) {
  shard_ref *r = elem;
  const char *f = (const char *)sqlite3_column_text(st, 0);
  const char *t = (const char *)sqlite3_column_text(st, 1);
  const char *fp = (const char *)sqlite3_column_text(st, 2);
  if (!shard_name_ok(f))
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint directory '%s': the manifest names a shard '%s', which is not "
                        "a shard file name (damaged manifest?)",
                        ck->path, f ? f : "(null)");
  snprintf(r->file, sizeof r->file, "%s", f);
  snprintf(r->task, sizeof r->task, "%s", t ? t : "?");
  snprintf(r->fp, sizeof r->fp, "%s", fp ? fp : "");
  return GR_OK;
}

static gr_status shard_refs(gr_ckpt *ck, int64_t ck_id, shard_ref **out, int *n, gr_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(
      ck, "SELECT file, task, fingerprint FROM shards WHERE checkpoint_id = ?1 ORDER BY file", &st,
      err));
  sqlite3_bind_int64(st, 1, ck_id);
  void *v;
  int cnt;
  gr_status s =
      ckpt_collect_rows(ck, st, "listing shards", sizeof **out, shard_ref_row, NULL, &v, &cnt, err);
  if (s != GR_OK) {
    free(v);
    return s;
  }
  *out = v;
  *n = cnt;
  return GR_OK;
}

/* What a shard's row at a step records. */
typedef struct shard_stat {
  char fp[17];
  int num_tensors;
  int64_t total;
} shard_stat;

/* The tensors of one shard at step, appended to m (its row in *stat); the
 * shard's row must carry the fingerprint the manifest recorded (want_fp
 * NULL: any). */
static gr_status add_shard(gr_ckpt *ck, const char *file, const char *task, int64_t step,
                           const char *want_fp, merged *m, shard_stat *stat, gr_error *err) {
  gr_ckpt *sh = NULL;
  int64_t id = 0;
  const char *fp = stat->fp;
  gr_status s = ckpt_shard(ck, file, false, &sh, err);
  if (s == GR_OK) s = shard_row(sh, step, &id, stat->fp, &stat->num_tensors, &stat->total, err);
  if (s == GR_OK && want_fp && strcmp(fp, want_fp) != 0)
    s = gr_error_set(err, GR_ERR_DATA_LOSS,
                     "shard file '%s' at step %" PRId64
                     " has fingerprint %s but the manifest recorded %s (a shard of another run?)",
                     sh->path, step, fp, want_fp);
  if (s != GR_OK) {
    if (s != GR_ERR_RESOURCE_EXHAUSTED) {
      s = GR_ERR_DATA_LOSS;
      if (err) err->code = s;
    }
    gr_error_prefix(err, "checkpoint directory '%s', step %" PRId64 ": shard of %s", ck->path, step,
                    task);
    return s;
  }
  gr_ckpt_tensor_info *infos;
  int64_t *ids;
  int n;
  GR_TRY(ckpt_list_rows(sh, id, &infos, &ids, &n, err));
  s = ckpt_take_slices(sh, id, infos, ids, &n, &m->slices, err);
  if (s == GR_OK) s = merge_add(m, sh, infos, ids, NULL, n, err);
  if (s != GR_OK) {
    gr_ckpt_tensor_infos_free(infos, n);
  } else {
    free(infos); /* the names now belong to m */
  }
  free(ids);
  return s;
}

gr_status ckpt_tensors_at(gr_ckpt *ck, int64_t step, gr_ckpt_tensor_info **infos, ckpt_loc **locs,
                          int *n, int64_t *actual, gr_error *err) {
  *infos = NULL;
  if (locs) *locs = NULL;
  *n = 0;
  int64_t id, at;
  GR_TRY(ckpt_find(ck, step, &id, &at, err));
  if (actual) *actual = at;
  merged m = {0};
  gr_status s = GR_OK;
  if (!ck->sharded) {
    int64_t *ids;
    GR_TRY(ckpt_list_rows(ck, id, &m.infos, &ids, &m.n, err));
    m.locs = gr_alloc_array((size_t)m.n + 1, sizeof *m.locs);
    if (!m.locs) s = gr_error_set_oom(err);
    for (int i = 0; s == GR_OK && i < m.n; i++) m.locs[i] = (ckpt_loc){ck, ids[i], NULL, 0};
    free(ids);
  } else {
    shard_ref *refs;
    int nr;
    GR_TRY(shard_refs(ck, id, &refs, &nr, err));
    shard_stat stat;
    for (int i = 0; s == GR_OK && i < nr; i++)
      s = add_shard(ck, refs[i].file, refs[i].task, at, refs[i].fp, &m, &stat, err);
    free(refs);
    if (s == GR_OK) s = merge_finish(ck, at, &m, err);
  }
  if (s != GR_OK) {
    merge_free(&m);
    return s;
  }
  *infos = m.infos;
  *n = m.n;
  if (locs)
    *locs = m.locs;
  else
    ckpt_locs_free(m.locs, m.n);
  return GR_OK;
}

/* ---- committing ------------------------------------------------------------------ */

static gr_status check_shards(gr_ckpt *ck, int64_t step, const gr_ckpt_shard *shards, int n,
                              shard_stat *stats, char fp[17], int *num_tensors, int64_t *total,
                              gr_error *err) {
  merged m = {0};
  gr_status s = GR_OK;
  *num_tensors = 0;
  *total = 0;
  for (int i = 0; s == GR_OK && i < n; i++) {
    for (int j = 0; s == GR_OK && j < i; j++)
      if (strcmp(shards[i].file, shards[j].file) == 0)
        s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "shard file '%s' is given twice",
                         shards[i].file);
    if (s == GR_OK)
      s = add_shard(ck, shards[i].file, shards[i].task ? shards[i].task : shards[i].file, step,
                    NULL, &m, &stats[i], err);
    *total += stats[i].total;
  }
  if (s == GR_OK) s = merge_finish(ck, step, &m, err);
  if (s == GR_OK) { /* the merged tensors, the wholes of slices counted once */
    *num_tensors = m.n;
    gr_ckpt_var *vars = gr_alloc_array((size_t)m.n + 1, sizeof *vars);
    if (!vars) {
      s = gr_error_set_oom(err);
    } else {
      for (int i = 0; i < m.n; i++)
        vars[i] = (gr_ckpt_var){m.infos[i].name, m.infos[i].dtype, m.infos[i].shape};
      snprintf(fp, 17, "%016" PRIx64, gr_ckpt_fingerprint(vars, m.n));
      free(vars);
    }
  }
  merge_free(&m);
  return s;
}

static gr_status write_manifest(gr_ckpt *ck, int64_t step, const gr_ckpt_shard *shards, int n,
                                const shard_stat *stats, const char *fp, int num_tensors,
                                int64_t total, const char *meta, gr_error *err) {
  int64_t old;
  gr_error ignore;
  if (ckpt_find(ck, step, &old, NULL, &ignore) == GR_OK)
    GR_TRY(ckpt_delete_checkpoint(ck, old, err));
  int64_t id;
  GR_TRY(ckpt_insert_checkpoint(ck, step, fp, num_tensors, total, meta, &id, err));
  sqlite3_stmt *st;
  int rc;
  GR_TRY(ckpt_prepare(ck,
                      "INSERT INTO shards(checkpoint_id, file, task, fingerprint, num_tensors, "
                      "total_bytes) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                      &st, err));
  gr_status s = GR_OK;
  for (int i = 0; s == GR_OK && i < n; i++) {
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, shards[i].file, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, shards[i].task ? shards[i].task : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, stats[i].fp, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, stats[i].num_tensors);
    sqlite3_bind_int64(st, 6, stats[i].total);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) s = ckpt_sql_error(ck, rc, err, "writing a shard row");
  }
  sqlite3_finalize(st);
  if (s == GR_OK) s = ckpt_apply_retention(ck, err);
  return s;
}

static gr_status step_row(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                          gr_error *err) {
  *(int64_t *)elem = sqlite3_column_int64(st, 0);
  return GR_OK;
}

gr_status ckpt_shard_steps(gr_ckpt *manifest, const char *file, int64_t **steps, int *n,
                           gr_error *err) {
  *steps = NULL;
  *n = 0;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(manifest,
                      "SELECT c.step FROM shards s JOIN checkpoints c ON c.id = s.checkpoint_id "
                      "WHERE s.file = ?1",
                      &st, err));
  sqlite3_bind_text(st, 1, file, -1, SQLITE_STATIC);
  void *v;
  int cnt;
  gr_status s = ckpt_collect_rows(manifest, st, "listing shards", sizeof **steps, step_row, NULL,
                                  &v, &cnt, err);
  if (s != GR_OK) {
    free(v);
    return s;
  }
  *steps = v;
  *n = cnt;
  return GR_OK;
}

/* The shard files the manifest names now (at most cap; names[i] of 208
 * bytes): the only files retention may remove later, so a file of the
 * user's in the directory is never touched. */
static int named_files(gr_ckpt *ck, char (*names)[208], int cap) {
  sqlite3_stmt *st;
  gr_error e;
  if (ckpt_prepare(ck, "SELECT DISTINCT file FROM shards", &st, &e) != GR_OK) return 0;
  int n = 0;
  while (n < cap && sqlite3_step(st) == SQLITE_ROW) {
    const char *f = (const char *)sqlite3_column_text(st, 0);
    if (shard_name_ok(f)) snprintf(names[n++], 208, "%s", f);
  }
  sqlite3_finalize(st);
  return n;
}

/* Removes the shard files among names[0..n) (files the manifest named
 * before this commit) that no manifest row names any more: their rows went
 * with retention, or a task of an earlier cluster shape wrote them. A
 * shard's own old rows go when its task writes its next shard
 * (gr_ckpt_save_shard), in that write's transaction. */
static void remove_unused_shards(gr_ckpt *ck, char (*names)[208], int n) {
  for (int i = 0; i < n; i++) {
    int64_t *steps;
    int ns;
    gr_error e;
    if (ckpt_shard_steps(ck, names[i], &steps, &ns, &e) != GR_OK) continue;
    free(steps);
    char path[4096];
    if (ns > 0 || !gr_ckpt_shard_path(ck, names[i], path, sizeof path)) continue;
    forget_shard(ck, names[i]);
    unlink(path);
  }
}

gr_status gr_ckpt_commit_shards(gr_ckpt *ck, int64_t step, const gr_ckpt_shard *shards, int n,
                                const char *metadata_json, gr_error *err) {
  if (!ck->sharded)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "checkpoint file '%s' is not a sharded checkpoint directory", ck->path);
  if (ck->opts.read_only)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "checkpoint directory '%s' was opened read-only", ck->path);
  if (step < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint step %" PRId64 " is negative",
                        step);
  if (n < 1 || !shards)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "committing a checkpoint: no shards given");
  for (int i = 0; i < n; i++)
    if (!shard_name_ok(shards[i].file))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "'%s' is not a shard file name (want NAME.ckpt of letters, digits, "
                          "'.', '_' and '-')",
                          shards[i].file ? shards[i].file : "(null)");
  const char *meta = metadata_json ? metadata_json : "{}";
  GR_TRY(ckpt_check_meta(ck, meta, err));
  shard_stat *stats = calloc((size_t)n, sizeof *stats);
  if (!stats) return gr_error_set_oom(err);
  char fp[17] = "";
  int num_tensors;
  int64_t total;
  static _Thread_local char before[256][208];
  int nbefore = named_files(ck, before, 256);
  gr_status s = check_shards(ck, step, shards, n, stats, fp, &num_tensors, &total, err);
  if (s == GR_OK) s = ckpt_exec(ck, "BEGIN IMMEDIATE", err);
  if (s == GR_OK) {
    s = write_manifest(ck, step, shards, n, stats, fp, num_tensors, total, meta, err);
    if (s == GR_OK && ckpt_before_commit_hook) ckpt_before_commit_hook(ck->path, step);
    if (s == GR_OK) s = ckpt_exec(ck, "COMMIT", err);
    if (s != GR_OK) sqlite3_exec(ck->db, "ROLLBACK", NULL, NULL, NULL);
  }
  free(stats);
  if (s == GR_OK) remove_unused_shards(ck, before, nbefore);
  return s;
}

/* ---- listing ---------------------------------------------------------------------- */

static gr_status shard_info_row(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                                gr_error *err) {
  gr_ckpt_shard_info *info = elem;
  const char *f = (const char *)sqlite3_column_text(st, 0);
  const char *t = (const char *)sqlite3_column_text(st, 1);
  const char *fp = (const char *)sqlite3_column_text(st, 2);
  info->file = strdup(f ? f : "");
  info->task = strdup(t ? t : "");
  snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp ? fp : "");
  info->num_tensors = sqlite3_column_int(st, 3);
  info->total_bytes = sqlite3_column_int64(st, 4);
  return info->file && info->task ? GR_OK : gr_error_set_oom(err);
}

gr_status gr_ckpt_list_shards(gr_ckpt *ck, int64_t step, gr_ckpt_shard_info **out, int *n,
                              gr_error *err) {
  *out = NULL;
  *n = 0;
  if (!ck->sharded) return GR_OK;
  int64_t id;
  GR_TRY(ckpt_find(ck, step, &id, NULL, err));
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      "SELECT file, task, fingerprint, num_tensors, total_bytes FROM shards "
                      "WHERE checkpoint_id = ?1 ORDER BY file",
                      &st, err));
  sqlite3_bind_int64(st, 1, id);
  void *v;
  int cnt;
  gr_status s = ckpt_collect_rows(ck, st, "listing shards", sizeof **out, shard_info_row, NULL, &v,
                                  &cnt, err);
  if (s != GR_OK) {
    gr_ckpt_shard_infos_free(v, cnt);
    return s;
  }
  *out = v;
  *n = cnt;
  return GR_OK;
}

void gr_ckpt_shard_infos_free(gr_ckpt_shard_info *infos, int n) {
  for (int i = 0; infos && i < n; i++) {
    free(infos[i].file);
    free(infos[i].task);
  }
  free(infos);
}
