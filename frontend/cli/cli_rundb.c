/* The run database of `graphrun run --epochs` (DIR/runs.db): runs, their
 * per-epoch scalars, weight histograms, step traces, graph and placement.
 * SQLite in WAL mode, so `graphrun board` and the sqlite3 shell read while
 * a run writes; the schema is documented in docs/training.md. One writer
 * per run (the client); several runs may share a directory (each its row
 * in `runs`, and SQLite's lock between their transactions). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_epochs.h"

struct cli_rundb {
  sqlite3 *db;
  char *path;
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "INSERT OR IGNORE INTO meta VALUES('schema_version', '1');"
    "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, started REAL NOT NULL, ended REAL,"
    " status TEXT NOT NULL, command TEXT NOT NULL, file TEXT, ckpt TEXT, host TEXT, pid INTEGER,"
    " epochs INTEGER, steps_per_epoch INTEGER, batch_size INTEGER, first_step INTEGER,"
    " epochs_done INTEGER NOT NULL DEFAULT 0, best_metric TEXT, best_value REAL,"
    " best_epoch INTEGER, best_step INTEGER);"
    "CREATE TABLE IF NOT EXISTS scalars(run INTEGER NOT NULL, tag TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, step INTEGER NOT NULL, wall REAL NOT NULL, value REAL,"
    " PRIMARY KEY(run, tag, epoch));"
    "CREATE TABLE IF NOT EXISTS histograms(run INTEGER NOT NULL, tag TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, step INTEGER NOT NULL, wall REAL NOT NULL, min REAL, max REAL,"
    " count INTEGER NOT NULL, sum REAL, sum_squares REAL, buckets TEXT NOT NULL,"
    " PRIMARY KEY(run, tag, epoch));"
    "CREATE TABLE IF NOT EXISTS traces(run INTEGER NOT NULL, epoch INTEGER NOT NULL,"
    " step INTEGER NOT NULL, trace TEXT NOT NULL, PRIMARY KEY(run, epoch));"
    "CREATE TABLE IF NOT EXISTS graphs(run INTEGER PRIMARY KEY, dot TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS nodes(run INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT NOT "
    "NULL,"
    " op TEXT NOT NULL, device TEXT, PRIMARY KEY(run, id));";

static double wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static gr_status sql_error(cli_rundb *db, gr_error *err, const char *what) {
  return gr_error_set(err, GR_ERR_INTERNAL, "run database %s: %s: %s", db->path, what,
                      sqlite3_errmsg(db->db));
}

/* Prepares sql; binds nothing. */
static gr_status prepare(cli_rundb *db, const char *sql, sqlite3_stmt **st, gr_error *err) {
  if (sqlite3_prepare_v2(db->db, sql, -1, st, NULL) != SQLITE_OK) return sql_error(db, err, sql);
  return GR_OK;
}

/* Steps st to its end and finalizes it. */
static gr_status finish(cli_rundb *db, sqlite3_stmt *st, const char *what, gr_error *err) {
  int rc = sqlite3_step(st);
  gr_status s = rc == SQLITE_DONE || rc == SQLITE_ROW ? GR_OK : sql_error(db, err, what);
  sqlite3_finalize(st);
  return s;
}

/* A double, or NULL for a NaN (SQLite has none). */
static void bind_real(sqlite3_stmt *st, int i, double v) {
  if (isnan(v))
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_double(st, i, v);
}

gr_status cli_rundb_open(const char *dir, cli_rundb **out, gr_error *err) {
  *out = NULL;
  struct stat sb;
  if (stat(dir, &sb) != 0 && mkdir(dir, 0755) != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "cannot make the log directory '%s': %s", dir,
                        strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "'%s' is not a directory", dir);
  cli_rundb *db = calloc(1, sizeof *db);
  size_t n = strlen(dir) + sizeof CLI_RUNDB_FILE + 2;
  if (!db || !(db->path = malloc(n))) {
    free(db);
    return gr_error_set_oom(err);
  }
  snprintf(db->path, n, "%s/%s", dir, CLI_RUNDB_FILE);
  char *msg = NULL;
  if (sqlite3_open_v2(db->path, &db->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
          SQLITE_OK ||
      sqlite3_busy_timeout(db->db, 10000) != SQLITE_OK ||
      sqlite3_exec(db->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "run database %s: %s", db->path,
                 msg ? msg : sqlite3_errmsg(db->db));
    sqlite3_free(msg);
    cli_rundb_close(db);
    return GR_ERR_INVALID_ARGUMENT;
  }
  *out = db;
  return GR_OK;
}

void cli_rundb_close(cli_rundb *db) {
  if (!db) return;
  sqlite3_close(db->db);
  free(db->path);
  free(db);
}

gr_status cli_rundb_begin_run(cli_rundb *db, const cli_rundb_run *r, int64_t *id, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(prepare(db,
                 "INSERT INTO runs(started, status, command, file, ckpt, host, pid, epochs,"
                 " steps_per_epoch, batch_size, first_step) VALUES(?1, 'running', ?2, ?3, ?4, ?5,"
                 " ?6, ?7, ?8, ?9, ?10)",
                 &st, err));
  sqlite3_bind_double(st, 1, wall_now());
  const char *text[] = {r->command, r->file, r->ckpt, r->host};
  for (int i = 0; i < 4; i++) sqlite3_bind_text(st, 2 + i, text[i], -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 6, getpid());
  long nums[] = {r->epochs, r->steps_per_epoch, r->batch_size, r->first_step};
  for (int i = 0; i < 4; i++)
    if (nums[i] >= 0) sqlite3_bind_int64(st, 7 + i, nums[i]);
  GR_TRY(finish(db, st, "adding the run", err));
  *id = sqlite3_last_insert_rowid(db->db);
  return GR_OK;
}

gr_status cli_rundb_graph(cli_rundb *db, int64_t run, const char *dot, const gr_graph *g,
                          gr_error *err) {
  GR_TRY(cli_rundb_begin(db, err));
  sqlite3_stmt *st;
  gr_status s = prepare(db, "INSERT OR REPLACE INTO graphs VALUES(?1, ?2)", &st, err);
  if (s == GR_OK) {
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, dot, -1, SQLITE_STATIC);
    s = finish(db, st, "adding the graph", err);
  }
  if (s == GR_OK)
    s = prepare(db, "INSERT OR REPLACE INTO nodes VALUES(?1, ?2, ?3, ?4, ?5)", &st, err);
  for (int i = 0; s == GR_OK && i < gr_graph_num_nodes(g); i++) {
    const gr_node *n = gr_graph_node(g, i);
    const char *dev = n->assigned_device ? n->assigned_device : n->requested_device;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, n->id);
    sqlite3_bind_text(st, 3, n->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, n->op->name, -1, SQLITE_STATIC);
    if (dev && *dev)
      sqlite3_bind_text(st, 5, dev, -1, SQLITE_STATIC);
    else
      sqlite3_bind_null(st, 5);
    if (sqlite3_step(st) != SQLITE_DONE) s = sql_error(db, err, "adding the nodes");
  }
  if (s == GR_OK) sqlite3_finalize(st);
  if (s == GR_OK) return cli_rundb_commit(db, err);
  sqlite3_exec(db->db, "ROLLBACK", NULL, NULL, NULL);
  return s;
}

gr_status cli_rundb_begin(cli_rundb *db, gr_error *err) {
  if (sqlite3_exec(db->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
    return sql_error(db, err, "starting a transaction");
  return GR_OK;
}

gr_status cli_rundb_commit(cli_rundb *db, gr_error *err) {
  if (sqlite3_exec(db->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return GR_OK;
  sql_error(db, err, "committing");
  sqlite3_exec(db->db, "ROLLBACK", NULL, NULL, NULL);
  return err->code;
}

gr_status cli_rundb_scalar(cli_rundb *db, int64_t run, long epoch, long step, const char *tag,
                           double value, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(prepare(db, "INSERT OR REPLACE INTO scalars VALUES(?1, ?2, ?3, ?4, ?5, ?6)", &st, err));
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, epoch);
  sqlite3_bind_int64(st, 4, step);
  sqlite3_bind_double(st, 5, wall_now());
  bind_real(st, 6, value);
  return finish(db, st, "adding a scalar", err);
}

/* Element i of t (f32 or f64) as a double. */
static double element(const gr_tensor *t, int64_t i) {
  return gr_tensor_get_f64(t, i);
}

gr_status cli_rundb_histogram(cli_rundb *db, int64_t run, long epoch, long step, const char *tag,
                              const gr_tensor *t, gr_error *err) {
  int64_t n = gr_tensor_num_elements(t), count = 0, buckets[CLI_RUNDB_BUCKETS] = {0};
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum2 = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = element(t, i);
    if (!isfinite(v)) continue; /* NaN and infinities are not counted */
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    sum += v;
    sum2 += v * v;
    count++;
  }
  double width = (hi - lo) / CLI_RUNDB_BUCKETS;
  for (int64_t i = 0; i < n && count; i++) {
    double v = element(t, i);
    if (!isfinite(v)) continue;
    int b = width > 0 ? (int)((v - lo) / width) : 0;
    buckets[b >= CLI_RUNDB_BUCKETS ? CLI_RUNDB_BUCKETS - 1 : b < 0 ? 0 : b]++;
  }
  json_t *arr = json_array();
  bool built = arr != NULL;
  for (int b = 0; b < CLI_RUNDB_BUCKETS && built; b++)
    built = json_array_append_new(arr, json_integer(buckets[b])) == 0;
  char *json = built ? json_dumps(arr, JSON_COMPACT) : NULL;
  json_decref(arr);
  if (!json) return gr_error_set_oom(err);
  sqlite3_stmt *st;
  gr_status s = prepare(db,
                        "INSERT OR REPLACE INTO histograms VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
                        "?9, ?10, ?11)",
                        &st, err);
  if (s != GR_OK) {
    free(json);
    return s;
  }
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, epoch);
  sqlite3_bind_int64(st, 4, step);
  sqlite3_bind_double(st, 5, wall_now());
  if (count) {
    sqlite3_bind_double(st, 6, lo);
    sqlite3_bind_double(st, 7, hi);
  }
  sqlite3_bind_int64(st, 8, count);
  bind_real(st, 9, sum);
  bind_real(st, 10, sum2);
  sqlite3_bind_text(st, 11, json, -1, free);
  return finish(db, st, "adding a histogram", err);
}

gr_status cli_rundb_trace(cli_rundb *db, int64_t run, long epoch, long step, const char *json,
                          gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(prepare(db, "INSERT OR REPLACE INTO traces VALUES(?1, ?2, ?3, ?4)", &st, err));
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_int64(st, 2, epoch);
  sqlite3_bind_int64(st, 3, step);
  sqlite3_bind_text(st, 4, json, -1, SQLITE_STATIC);
  return finish(db, st, "adding a trace", err);
}

gr_status cli_rundb_best(cli_rundb *db, int64_t run, const char *metric, double value, long epoch,
                         long step, gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(prepare(db,
                 "UPDATE runs SET best_metric = ?2, best_value = ?3, best_epoch = ?4,"
                 " best_step = ?5 WHERE id = ?1",
                 &st, err));
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_text(st, 2, metric, -1, SQLITE_STATIC);
  bind_real(st, 3, value);
  sqlite3_bind_int64(st, 4, epoch);
  sqlite3_bind_int64(st, 5, step);
  return finish(db, st, "marking the best epoch", err);
}

gr_status cli_rundb_set_status(cli_rundb *db, int64_t run, const char *status, long epochs_done,
                               gr_error *err) {
  sqlite3_stmt *st;
  GR_TRY(prepare(db,
                 "UPDATE runs SET ended = CASE WHEN ?3 = 'running' THEN NULL ELSE ?2 END,"
                 " status = ?3, epochs_done = ?4 WHERE id = ?1",
                 &st, err));
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_double(st, 2, wall_now());
  sqlite3_bind_text(st, 3, status, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, epochs_done);
  return finish(db, st, "ending the run", err);
}
