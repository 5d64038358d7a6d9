/* Opening a checkpoint file: recognising what the file is (missing, not
 * SQLite, SQLite of something else, a newer schema, damaged), creating the
 * schema and setting the durability pragmas. Schema: docs/checkpoints.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS checkpoints("
    " id INTEGER PRIMARY KEY,"
    " step INTEGER NOT NULL UNIQUE,"
    " time REAL NOT NULL,"
    " fingerprint TEXT NOT NULL,"
    " num_tensors INTEGER NOT NULL,"
    " total_bytes INTEGER NOT NULL,"
    " metadata TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tensors("
    " id INTEGER PRIMARY KEY,"
    " checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),"
    " name TEXT NOT NULL,"
    " dtype TEXT NOT NULL,"
    " shape TEXT NOT NULL,"
    " nbytes INTEGER NOT NULL,"
    " checksum TEXT NOT NULL,"
    " UNIQUE(checkpoint_id, name));"
    "CREATE TABLE IF NOT EXISTS chunks("
    " id INTEGER PRIMARY KEY,"
    " tensor_id INTEGER NOT NULL REFERENCES tensors(id),"
    " seq INTEGER NOT NULL,"
    " data BLOB NOT NULL,"
    " UNIQUE(tensor_id, seq));"
    "INSERT OR IGNORE INTO meta VALUES('format', 'graphrun checkpoints');"
    "INSERT OR IGNORE INTO meta VALUES('schema_version', '1');"; /* CKPT_BASE_VERSION */

void (*ckpt_before_commit_hook)(const char *path, int64_t step); /* tests only */

gr_status ckpt_sql_error(gr_ckpt *ck, int rc, gr_error *err, const char *what) {
  int prim = rc & 0xff;
  gr_status code = GR_ERR_INTERNAL;
  const char *hint = "";
  switch (prim) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = GR_ERR_DATA_LOSS;
      hint = " (the file is damaged or truncated; `graphrun ckpt verify` checks it)";
      break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      code = GR_ERR_UNAVAILABLE;
      break;
    case SQLITE_NOMEM:
    case SQLITE_FULL:
    case SQLITE_TOOBIG:
      code = GR_ERR_RESOURCE_EXHAUSTED;
      break;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      code = GR_ERR_IO;
      break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_ERROR:
      code = GR_ERR_DATA_LOSS;
      break; /* our own SQL: the file is not as written */
    default:
      break;
  }
  const char *msg = ck && ck->db ? sqlite3_errmsg(ck->db) : sqlite3_errstr(rc);
  return gr_error_set(err, code, "checkpoint file '%s': %s: %s%s", ck ? ck->path : "?", what, msg,
                      hint);
}

gr_status ckpt_exec(gr_ckpt *ck, const char *sql, gr_error *err) {
  int rc = sqlite3_exec(ck->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? GR_OK : ckpt_sql_error(ck, rc, err, sql);
}

gr_status ckpt_prepare(gr_ckpt *ck, const char *sql, sqlite3_stmt **st, gr_error *err) {
  int rc = sqlite3_prepare_v2(ck->db, sql, -1, st, NULL);
  if (rc != SQLITE_OK) {
    *st = NULL;
    return ckpt_sql_error(ck, rc, err, "reading the schema");
  }
  return GR_OK;
}

void *ckpt_reserve(void *v, int i, int *cap, size_t size) {
  if (i < *cap) return v;
  int ncap = *cap ? 2 * *cap : 16;
  void *nv = gr_realloc_array(v, (size_t)ncap, size);
  if (nv) *cap = ncap;
  return nv;
}

gr_status ckpt_collect_rows(gr_ckpt *ck, sqlite3_stmt *st, const char *what, size_t size,
                            ckpt_row_fn *row, void *arg, void **out, int *n, gr_error *err) {
  char *v = NULL;
  int cnt = 0, cap = 0, rc;
  gr_status s = GR_OK;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    char *nv = ckpt_reserve(v, cnt, &cap, size);
    if (!nv) {
      s = gr_error_set_oom(err);
      break;
    }
    v = nv;
    void *elem = v + (size_t)cnt * size;
    memset(elem, 0, size);
    cnt++;
    if ((s = row(ck, st, elem, cnt - 1, arg, err)) != GR_OK) break;
  }
  if (s == GR_OK && rc != SQLITE_DONE) s = ckpt_sql_error(ck, rc, err, what);
  sqlite3_finalize(st);
  *out = v;
  *n = cnt;
  return s;
}

/* Runs a one-integer query. */
static gr_status query_int(gr_ckpt *ck, const char *sql, int64_t *out, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck, sql, &st, err));
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? GR_OK : ckpt_sql_error(ck, rc, err, sql);
}

/* What the first bytes say: 0 empty, 1 SQLite, -1 something else. */
static int sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1; /* let SQLite report the error */
  char head[16];
  size_t n = fread(head, 1, sizeof head, f);
  fclose(f);
  if (n == 0) return 0;
  return n == 16 && memcmp(head, "SQLite format 3", 16) == 0 ? 1 : -1;
}

static gr_status check_or_create(gr_ckpt *ck, bool empty, gr_error *err) {
  int64_t app = 0, ntables = 0;
  GR_TRY(query_int(ck, "PRAGMA application_id", &app, err));
  GR_TRY(query_int(ck, "SELECT count(*) FROM sqlite_schema", &ntables, err));
  if (app == 0 && ntables == 0) {
    if (ck->opts.read_only)
      return gr_error_set(err, GR_ERR_NOT_FOUND,
                          "checkpoint file '%s' is %s: it holds no checkpoint", ck->path,
                          empty ? "empty" : "an empty SQLite database");
    /* page_size only takes effect before the first table exists */
    GR_TRY(ckpt_exec(ck, ck->sharded ? "PRAGMA page_size=4096" : "PRAGMA page_size=65536", err));
    GR_TRY(ckpt_exec(ck, "BEGIN IMMEDIATE", err));
    gr_status s = ckpt_exec(ck, schema_sql, err);
    if (s == GR_OK) {
      char sql[96];
      snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d",
               GR_CKPT_APPLICATION_ID, CKPT_BASE_VERSION);
      s = ckpt_exec(ck, sql, err);
    }
    if (s == GR_OK) s = ckpt_exec(ck, "COMMIT", err);
    if (s != GR_OK) sqlite3_exec(ck->db, "ROLLBACK", NULL, NULL, NULL);
    return s;
  }
  if (app != GR_CKPT_APPLICATION_ID)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "'%s' is a SQLite database but not a graphrun checkpoint file "
                        "(application_id 0x%08" PRIx64 ", expected 0x%08x)",
                        ck->path, (uint64_t)app & 0xffffffffu, GR_CKPT_APPLICATION_ID);
  int64_t version = 0;
  gr_status s = query_int(ck, "SELECT CAST(value AS INTEGER) FROM meta WHERE key='schema_version'",
                          &version, err);
  if (s != GR_OK) return s;
  if (version < 1)
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s' has no schema_version in its meta table (damaged?)",
                        ck->path);
  if (version > GR_CKPT_SCHEMA_VERSION)
    return gr_error_set(err, GR_ERR_UNIMPLEMENTED,
                        "checkpoint file '%s' has schema version %" PRId64
                        ", newer than this graphrun reads (%d)",
                        ck->path, version, GR_CKPT_SCHEMA_VERSION);
  return GR_OK;
}

/* The schema additions of a manifest (a sharded checkpoint's directory). */
static const char manifest_sql[] = "CREATE TABLE IF NOT EXISTS shards("
                                   " checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),"
                                   " file TEXT NOT NULL,"
                                   " task TEXT NOT NULL,"
                                   " fingerprint TEXT NOT NULL,"
                                   " num_tensors INTEGER NOT NULL,"
                                   " total_bytes INTEGER NOT NULL,"
                                   " PRIMARY KEY(checkpoint_id, file));"
                                   "INSERT OR IGNORE INTO meta VALUES('layout', 'sharded');";

/* Opens the SQLite file at ck->path (file) or db_path (a manifest). */
static gr_status open_db(gr_ckpt *ck, const char *db_path, bool exists, bool empty, gr_error *err) {
  gr_ckpt_options o = ck->opts;
  int flags = SQLITE_OPEN_NOMUTEX;
  if (!o.read_only)
    flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  else if (access(db_path, W_OK) == 0)
    flags |= SQLITE_OPEN_READWRITE; /* may roll back a journal */
  else
    flags |= SQLITE_OPEN_READONLY;
  int rc = sqlite3_open_v2(db_path, &ck->db, flags, NULL);
  if (rc != SQLITE_OK) return ckpt_sql_error(ck, rc, err, "cannot open");
  sqlite3_busy_timeout(ck->db, 10000);
  sqlite3_extended_result_codes(ck->db, 1);
  rc =
      sqlite3_exec(ck->db,
                   "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; PRAGMA secure_delete=OFF; "
                   "PRAGMA cache_size=-16384",
                   NULL, NULL, NULL);
  if (rc != SQLITE_OK) return ckpt_sql_error(ck, rc, err, "opening");
  GR_TRY(check_or_create(ck, exists && empty, err));
  int64_t layout = 0;
  GR_TRY(query_int(ck, "SELECT count(*) FROM meta WHERE key='layout' AND value='sharded'", &layout,
                   err));
  if (ck->sharded && !layout) {
    if (o.read_only)
      return gr_error_set(err, GR_ERR_DATA_LOSS,
                          "checkpoint directory '%s': its %s is not a manifest (no shards table)",
                          ck->path, CKPT_MANIFEST_NAME);
    return ckpt_exec(ck, manifest_sql, err);
  }
  if (!ck->sharded && layout)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "'%s' is the manifest of a sharded checkpoint: open its directory",
                        db_path);
  return GR_OK;
}

gr_status gr_ckpt_open(const char *path, const gr_ckpt_options *opts, gr_ckpt **out,
                       gr_error *err) {
  *out = NULL;
  if (!path || !*path)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint path is empty");
  gr_ckpt_options o = opts ? *opts : (gr_ckpt_options){0};
  if (o.max_to_keep < 0 || o.keep_every_n_steps < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "checkpoint options: max_to_keep and keep_every_n_steps must be >= 0");
  if (o.lock && o.read_only)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "checkpoint options: the writer lock is for writers, not read_only");
  struct stat sb;
  bool exists = stat(path, &sb) == 0;
  bool dir = exists ? S_ISDIR(sb.st_mode) : o.sharded;
  if (exists && !dir && o.sharded)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "'%s' is a file; a sharded checkpoint is a directory (give a new path)",
                        path);
  if (!exists && o.read_only)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "checkpoint file '%s' does not exist", path);
  if (!exists && dir && mkdir(path, 0777) != 0 && errno != EEXIST)
    return gr_error_set(err, GR_ERR_IO, "checkpoint directory '%s': cannot create it: %s", path,
                        strerror(errno));
  char db_path[4096];
  const char *db = path;
  if (dir) { /* the manifest inside */
    if ((size_t)snprintf(db_path, sizeof db_path, "%s/%s", path, CKPT_MANIFEST_NAME) >=
        sizeof db_path)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint directory path is too long");
    db = db_path;
    exists = stat(db, &sb) == 0;
    if (!exists && o.read_only)
      return gr_error_set(err, GR_ERR_NOT_FOUND,
                          "checkpoint directory '%s' holds no %s: it is not a sharded checkpoint "
                          "(or none was committed yet)",
                          path, CKPT_MANIFEST_NAME);
  }
  int kind = exists ? sniff(db) : 0;
  if (kind < 0)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "'%s' is not a SQLite database, so not a graphrun checkpoint file", db);
  gr_ckpt *ck = calloc(1, sizeof *ck);
  /* a directory by its absolute path: shard paths given to tasks work from any cwd */
  char *abs = dir ? realpath(path, NULL) : NULL;
  if (!ck || !(ck->path = abs ? abs : strdup(path))) {
    free(ck);
    return gr_error_set_oom(err);
  }
  ck->opts = o;
  ck->sharded = dir;
  /* before the file is touched: a second writer leaves it alone */
  gr_status s = o.lock ? ckpt_lock(ck, err) : GR_OK;
  if (s == GR_OK) s = open_db(ck, db, exists, exists && sb.st_size == 0, err);
  if (s != GR_OK) {
    gr_ckpt_close(ck);
    return s;
  }
  *out = ck;
  return GR_OK;
}

void gr_ckpt_close(gr_ckpt *ck) {
  if (!ck) return;
  for (int i = 0; i < ck->num_shards; i++) {
    gr_ckpt_close(ck->shards[i]);
    free(ck->shard_names[i]);
  }
  free(ck->shards);
  free(ck->shard_names);
  sqlite3_close_v2(ck->db);
  ckpt_unlock(ck); /* after the file is closed */
  free(ck->path);
  free(ck);
}

const char *gr_ckpt_path(const gr_ckpt *ck) {
  return ck->path;
}

bool gr_ckpt_is_sharded(const gr_ckpt *ck) {
  return ck->sharded;
}

gr_status ckpt_find(gr_ckpt *ck, int64_t step, int64_t *id, int64_t *step_out, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(ckpt_prepare(ck,
                      step < 0 ? "SELECT id, step FROM checkpoints ORDER BY id DESC LIMIT 1"
                               : "SELECT id, step FROM checkpoints WHERE step = ?1",
                      &st, err));
  if (step >= 0) sqlite3_bind_int64(st, 1, step);
  int rc = sqlite3_step(st);
  gr_status s = GR_OK;
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    if (step_out) *step_out = sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    if (step < 0)
      s = gr_error_set(err, GR_ERR_NOT_FOUND, "checkpoint file '%s' holds no checkpoint", ck->path);
    else
      s = gr_error_set(err, GR_ERR_NOT_FOUND,
                       "checkpoint file '%s' has no checkpoint at step %" PRId64, ck->path, step);
  } else {
    s = ckpt_sql_error(ck, rc, err, "finding a checkpoint");
  }
  sqlite3_finalize(st);
  return s;
}

void ckpt_shape_to_text(const gr_shape *s, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < s->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", s->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

bool ckpt_shape_from_text(const char *text, gr_shape *out) {
  const char *p = text;
  if (!p || *p++ != '[') return false;
  out->rank = 0;
  while (*p == ' ') p++;
  if (*p == ']') return p[1] == '\0';
  for (;;) {
    if (out->rank >= GR_MAX_RANK || *p < '0' || *p > '9') return false;
    int64_t d = 0;
    while (*p >= '0' && *p <= '9') {
      if (d > (INT64_MAX - 9) / 10) return false;
      d = d * 10 + (*p++ - '0');
    }
    out->dims[out->rank++] = d;
    while (*p == ' ') p++;
    if (*p == ']') return p[1] == '\0';
    if (*p++ != ',') return false;
    while (*p == ' ') p++;
  }
}

gr_status ckpt_parse_tensor_row(gr_ckpt *ck, const char *name, const char *dtype, const char *shape,
                                int64_t nbytes, const char *checksum, gr_ckpt_tensor_info *out,
                                gr_error *err) {
  memset(out, 0, sizeof *out);
  if (!name)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "checkpoint file '%s': a tensor has no name",
                        ck->path);
  if (!dtype || !gr_dtype_from_name(dtype, &out->dtype))
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s': tensor '%s' has unknown dtype '%s'", ck->path, name,
                        dtype ? dtype : "(null)");
  if (!ckpt_shape_from_text(shape, &out->shape))
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s': tensor '%s' has a malformed shape '%s'", ck->path,
                        name, shape ? shape : "(null)");
  int64_t ne = gr_shape_num_elements(&out->shape);
  size_t es = gr_dtype_size(out->dtype);
  if (ne < 0 || ne == INT64_MAX || (uint64_t)ne > (uint64_t)INT64_MAX / es ||
      ne * (int64_t)es != nbytes)
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s': tensor '%s' records %" PRId64
                        " bytes, which does not match %s %s",
                        ck->path, name, nbytes, dtype, shape);
  char *end = NULL;
  errno = 0;
  out->checksum = checksum ? strtoull(checksum, &end, 16) : 0;
  if (!checksum || strlen(checksum) != 16 || strspn(checksum, "0123456789abcdef") != 16 || *end ||
      errno)
    return gr_error_set(err, GR_ERR_DATA_LOSS,
                        "checkpoint file '%s': tensor '%s' has a malformed checksum", ck->path,
                        name);
  out->nbytes = nbytes;
  return GR_OK;
}

gr_status ckpt_step_done(gr_ckpt *ck, sqlite3_stmt *st, const char *what, gr_error *err) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? GR_OK : ckpt_sql_error(ck, rc, err, what);
}
