/* Slices (TensorFlow's save-slice info): a task's shard holds its parts of
 * a partitioned variable NAME as slices of NAME, each a tensors row under
 * the part's own name plus a slices row naming NAME, NAME's full shape and
 * the part's first row. The merged view of a sharded checkpoint shows NAME
 * whole instead, assembled from the slices in its shards once they are
 * checked to cover every row exactly once. A file read on its own shows
 * its rows by their own names. Schema: docs/checkpoints.md. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

static const char slices_sql[] =
    "CREATE TABLE IF NOT EXISTS slices("
    " tensor_id INTEGER PRIMARY KEY REFERENCES tensors(id),"
    " whole TEXT NOT NULL,"
    " full_shape TEXT NOT NULL,"
    " first_row INTEGER NOT NULL);"
    "UPDATE meta SET value = '2' WHERE key = 'schema_version' AND CAST(value AS INTEGER) < 2;"
    "PRAGMA user_version = 2;";

_Static_assert(GR_CKPT_SCHEMA_VERSION == 2, "slices_sql writes schema version 2");

gr_status ckpt_has_slices(gr_ckpt *ck, bool *has, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(
      ck, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'slices'", &st, err));
  int rc = sqlite3_step(st);
  *has = rc == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? GR_OK : ckpt_sql_error(ck, rc, err, "looking for the slices table");
}

gr_status ckpt_prepare_slices(gr_ckpt *ck, gr_error *err) {
  return ckpt_exec(ck, slices_sql, err);
}

gr_status ckpt_insert_slice(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_slice *sl,
                            gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(
      ck, "INSERT INTO slices(tensor_id, whole, full_shape, first_row) VALUES(?1, ?2, ?3, ?4)", &st,
      err));
  char shape[GR_MAX_RANK * 21 + 4];
  ckpt_shape_to_text(&sl->full_shape, shape, sizeof shape);
  sqlite3_bind_int64(st, 1, tensor_id);
  sqlite3_bind_text(st, 2, sl->whole, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, shape, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, sl->first_row);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GR_OK : ckpt_sql_error(ck, rc, err, "writing a slice row");
}

bool ckpt_slice_fits(const gr_shape *shape, const gr_shape *full, int64_t first_row) {
  if (full->rank < 1 || shape->rank != full->rank) return false;
  for (int d = 1; d < full->rank; d++)
    if (shape->dims[d] != full->dims[d]) return false;
  return first_row >= 0 && first_row <= full->dims[0] &&
         shape->dims[0] <= full->dims[0] - first_row;
}

gr_status ckpt_check_slice(const char *name, const gr_tensor *value, const gr_ckpt_slice *sl,
                           gr_error *err) {
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (!sl->whole[0])
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "checkpoint: tensor '%s' is a slice of a tensor without a name", name);
  if (!ckpt_slice_fits(&value->shape, &sl->full_shape, sl->first_row))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "checkpoint: tensor '%s' (%s from row %" PRId64
                        ") does not fit as a slice of '%s' %s",
                        name, gr_shape_str(&value->shape, a), sl->first_row, sl->whole,
                        gr_shape_str(&sl->full_shape, b));
  return GR_OK;
}

static gr_status grow(ckpt_slices *sl, gr_error *err) {
  if (sl->n < sl->cap) return GR_OK;
  int cap = sl->cap ? 2 * sl->cap : 8;
  ckpt_slice *v = gr_realloc_array(sl->v, (size_t)cap, sizeof *v);
  if (!v) return gr_error_set_oom(err);
  sl->v = v;
  sl->cap = cap;
  return GR_OK;
}

void ckpt_slices_free(ckpt_slices *sl) {
  for (int i = 0; i < sl->n; i++) {
    free(sl->v[i].info.name);
    free(sl->v[i].whole);
  }
  free(sl->v);
  *sl = (ckpt_slices){0};
}

void ckpt_locs_free(ckpt_loc *locs, int n) {
  for (int i = 0; locs && i < n; i++) {
    ckpt_slices own = {locs[i].slices, locs[i].num_slices, locs[i].num_slices};
    ckpt_slices_free(&own);
  }
  free(locs);
}

gr_status ckpt_take_slices(gr_ckpt *file, int64_t ck_id, gr_ckpt_tensor_info *infos, int64_t *ids,
                           int *n, ckpt_slices *out, gr_error *err) {
  bool has;
  GR_TRY(ckpt_has_slices(file, &has, err));
  if (!has) return GR_OK;
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(file,
                      "SELECT t.name, s.whole, s.full_shape, s.first_row FROM slices s "
                      "JOIN tensors t ON t.id = s.tensor_id WHERE t.checkpoint_id = ?1 "
                      "ORDER BY t.name",
                      &st, err));
  sqlite3_bind_int64(st, 1, ck_id);
  /* both sorted by name (unique in a checkpoint): one walk pairs them */
  int i = 0, kept = 0, rc = SQLITE_DONE;
  gr_status s = GR_OK;
  while (s == GR_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *whole = (const char *)sqlite3_column_text(st, 1);
    const char *shape = (const char *)sqlite3_column_text(st, 2);
    while (i < *n && name && strcmp(infos[i].name, name) < 0) {
      infos[kept] = infos[i], ids[kept++] = ids[i];
      i++;
    }
    gr_shape full;
    if (!name || i >= *n || strcmp(infos[i].name, name) != 0) continue; /* (the join pairs it) */
    if (!whole || !whole[0] || !ckpt_shape_from_text(shape, &full) || full.rank < 1) {
      s = gr_error_set(err, GR_ERR_DATA_LOSS,
                       "checkpoint file '%s': tensor '%s' has a malformed slice row (whole '%s', "
                       "full shape '%s')",
                       file->path, name, whole ? whole : "(null)", shape ? shape : "(null)");
      break;
    }
    if ((s = grow(out, err)) != GR_OK) break;
    char *w = strdup(whole);
    if (!w) {
      s = gr_error_set_oom(err);
      break;
    }
    out->v[out->n++] = (ckpt_slice){file, ids[i], infos[i], w, full, sqlite3_column_int64(st, 3)};
    i++; /* its info (and name) now belongs to out */
  }
  if (s == GR_OK && rc != SQLITE_DONE) s = ckpt_sql_error(file, rc, err, "listing slices");
  sqlite3_finalize(st);
  while (i < *n) {
    infos[kept] = infos[i], ids[kept++] = ids[i];
    i++;
  }
  *n = kept;
  return s;
}

/* ---- assembling ------------------------------------------------------------------ */

static const char *base_name(const gr_ckpt *f) {
  const char *slash = strrchr(f->path, '/');
  return slash ? slash + 1 : f->path;
}

static int cmp_slice(const void *a, const void *b) {
  const ckpt_slice *x = a, *y = b;
  int c = strcmp(x->whole, y->whole);
  if (c) return c;
  if (x->first_row != y->first_row) return x->first_row < y->first_row ? -1 : 1;
  return strcmp(x->info.name, y->info.name);
}

/* "'w/part_0' rows [0, 6) in ps-0.ckpt, ..." for the slices v[0..n). */
static void describe(const ckpt_slice *v, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len + 1 < cap; i++) {
    if (i == 6) {
      snprintf(buf + len, cap - len, " and %d more", n - i);
      return;
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s'%s' rows [%" PRId64 ", %" PRId64 ") in %s",
                            i ? ", " : "", v[i].info.name, v[i].first_row,
                            v[i].first_row + v[i].info.shape.dims[0], base_name(v[i].file));
  }
}

/* Checks that the slices v[0..n) of one whole (sorted by first row) agree
 * on dtype and full shape, fit it, and cover each row exactly once. */
static gr_status check_cover(gr_ckpt *ck, int64_t step, const ckpt_slice *v, int n, gr_error *err) {
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX], list[600];
  const ckpt_slice *f = &v[0];
  const char *whole = f->whole;
  for (int i = 1; i < n; i++)
    if (v[i].info.dtype != f->info.dtype || !gr_shape_equal(&v[i].full_shape, &f->full_shape))
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint directory '%s', step %" PRId64
                          ": the slices of partitioned variable '%s' disagree: '%s' in %s is of "
                          "%s %s, '%s' in %s of %s %s",
                          ck->path, step, whole, f->info.name, base_name(f->file),
                          gr_dtype_name(f->info.dtype), gr_shape_str(&f->full_shape, a),
                          v[i].info.name, base_name(v[i].file), gr_dtype_name(v[i].info.dtype),
                          gr_shape_str(&v[i].full_shape, b));
  const gr_shape *full = &f->full_shape;
  int64_t next = 0; /* the first row no slice so far covers */
  for (int i = 0; i < n; i++) {
    if (!ckpt_slice_fits(&v[i].info.shape, full, v[i].first_row))
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint directory '%s', step %" PRId64
                          ": partitioned variable '%s' (%s %s): its slice '%s' in %s (%s from "
                          "row %" PRId64 ") does not fit it",
                          ck->path, step, whole, gr_dtype_name(f->info.dtype),
                          gr_shape_str(full, a), v[i].info.name, base_name(v[i].file),
                          gr_shape_str(&v[i].info.shape, b), v[i].first_row);
    int64_t first = v[i].first_row, end = first + v[i].info.shape.dims[0];
    if (first < next) {
      const ckpt_slice *p = &v[i - 1]; /* i > 0: next > 0 only after a slice */
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint directory '%s', step %" PRId64
                          ": partitioned variable '%s': rows [%" PRId64 ", %" PRId64
                          ") are in two slices, '%s' in %s and '%s' in %s",
                          ck->path, step, whole, first, end < next ? end : next, p->info.name,
                          base_name(p->file), v[i].info.name, base_name(v[i].file));
    }
    if (first > next) break;
    next = end;
  }
  if (next != full->dims[0] || n == 0) {
    int64_t gap_end = full->dims[0];
    for (int i = 0; i < n; i++)
      if (v[i].first_row > next) {
        gap_end = v[i].first_row;
        break;
      }
    describe(v, n, list, sizeof list);
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint directory '%s', step %" PRId64
                        ": partitioned variable '%s' (%s %s): rows [%" PRId64 ", %" PRId64
                        ") are in none of its slices (a shard lacks its part?); its slices: %s",
                        ck->path, step, whole, gr_dtype_name(f->info.dtype), gr_shape_str(full, a),
                        next, gap_end, list);
  }
  return GR_OK;
}

/* The listing of the whole of slices v[0..n) (checked): its name, dtype,
 * full shape, bytes (their sum) and checksum (of theirs). */
static gr_status whole_info(const ckpt_slice *v, int n, gr_ckpt_tensor_info *out, gr_error *err) {
  gr_ckpt_hasher h;
  gr_ckpt_hash_init(&h);
  int64_t nbytes = 0;
  for (int i = 0; i < n; i++) {
    char sum[17];
    snprintf(sum, sizeof sum, "%016" PRIx64, v[i].info.checksum);
    gr_ckpt_hash_update(&h, sum, 16);
    if (v[i].info.nbytes > INT64_MAX - nbytes)
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint file '%s': partitioned variable '%s' is too large",
                          v[i].file->path, v[i].whole);
    nbytes += v[i].info.nbytes;
  }
  *out = (gr_ckpt_tensor_info){strdup(v[0].whole), v[0].info.dtype, v[0].full_shape, nbytes,
                               gr_ckpt_hash_final(&h)};
  return out->name ? GR_OK : gr_error_set_oom(err);
}

gr_status ckpt_assemble(gr_ckpt *ck, int64_t step, ckpt_slices *sl, gr_ckpt_tensor_info **infos,
                        ckpt_loc **locs, int *n, gr_error *err) {
  *infos = NULL;
  *locs = NULL;
  *n = 0;
  if (sl->n == 0) return GR_OK;
  qsort(sl->v, (size_t)sl->n, sizeof *sl->v, cmp_slice);
  gr_ckpt_tensor_info *vi = gr_alloc_array((size_t)sl->n, sizeof *vi);
  ckpt_loc *vl = gr_alloc_array((size_t)sl->n, sizeof *vl);
  gr_status s = vi && vl ? GR_OK : gr_error_set_oom(err);
  int cnt = 0;
  for (int a = 0, b; s == GR_OK && a < sl->n; a = b) {
    for (b = a + 1; b < sl->n && strcmp(sl->v[b].whole, sl->v[a].whole) == 0;) b++;
    s = check_cover(ck, step, &sl->v[a], b - a, err);
    ckpt_slice *own = s == GR_OK ? gr_alloc_array((size_t)(b - a), sizeof *own) : NULL;
    if (s == GR_OK && !own) s = gr_error_set_oom(err);
    if (s == GR_OK) s = whole_info(&sl->v[a], b - a, &vi[cnt], err);
    if (s != GR_OK) {
      free(own);
      break;
    }
    memcpy(own, &sl->v[a], sizeof *own * (size_t)(b - a));
    vl[cnt++] = (ckpt_loc){NULL, 0, own, b - a};
  }
  if (s != GR_OK) { /* the slices not yet taken stay in sl for its owner to free */
    int taken = 0;
    for (int i = 0; i < cnt; i++) taken += vl[i].num_slices;
    memmove(sl->v, sl->v + taken, sizeof *sl->v * (size_t)(sl->n - taken));
    sl->n -= taken;
    gr_ckpt_tensor_infos_free(vi, cnt);
    ckpt_locs_free(vl, cnt);
    return s;
  }
  free(sl->v);
  *sl = (ckpt_slices){0};
  *infos = vi;
  *locs = vl;
  *n = cnt;
  return GR_OK;
}

/* ---- reading -------------------------------------------------------------------------- */

gr_status ckpt_read_loc(const ckpt_loc *loc, const gr_ckpt_tensor_info *info, int64_t step,
                        gr_tensor *out, gr_error *err) {
  if (loc->file) return ckpt_read_tensor_id(loc->file, loc->tensor_id, info, step, out, err);
  *out = gr_tensor_empty();
  /* every slice's data there before the whole's size is trusted */
  for (int i = 0; i < loc->num_slices; i++) {
    const ckpt_slice *p = &loc->slices[i];
    GR_TRY(ckpt_check_data(p->file, p->tensor_id, &p->info, step, err));
  }
  GR_TRY(gr_tensor_alloc(out, info->dtype, &info->shape, err));
  size_t row = gr_dtype_size(info->dtype);
  for (int d = 1; d < info->shape.rank; d++) row *= (size_t)info->shape.dims[d];
  gr_status s = GR_OK;
  for (int i = 0; s == GR_OK && i < loc->num_slices; i++) {
    const ckpt_slice *p = &loc->slices[i];
    unsigned char *dst = (unsigned char *)gr_tensor_data(out) + (size_t)p->first_row * row;
    s = ckpt_read_data(p->file, p->tensor_id, &p->info, step, dst, err);
  }
  if (s != GR_OK) {
    gr_error_prefix(err, "partitioned variable '%s'", info->name);
    gr_tensor_release(out);
  }
  return s;
}
