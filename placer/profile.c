/* Measured op times in a SQLite database: one row per op kind + input shapes
 * with the sample count and the running average, reused by later runs.
 *
 *   CREATE TABLE op_profiles(key TEXT PRIMARY KEY, samples INTEGER NOT NULL,
 *                            mean_seconds REAL NOT NULL);
 */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

struct gr_profile_db {
  sqlite3 *db;
  sqlite3_stmt *record, *lookup;
};

static gr_status db_error(gr_profile_db *p, gr_error *err, const char *what) {
  return gr_error_set(err, GR_ERR_IO, "profile database: %s: %s", what,
                      p && p->db ? sqlite3_errmsg(p->db) : "out of memory");
}

gr_status gr_profile_db_open(const char *path, gr_profile_db **out, gr_error *err) {
  *out = NULL;
  gr_profile_db *p = calloc(1, sizeof *p);
  if (!p) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "profile database: out of memory");
  gr_status s = GR_OK;
  if (sqlite3_open_v2(path, &p->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
      SQLITE_OK) {
    s = gr_error_set(err, GR_ERR_IO, "profile database '%s': %s", path,
                     p->db ? sqlite3_errmsg(p->db) : "out of memory");
    goto fail;
  }
  sqlite3_busy_timeout(p->db, 2000);
  if (sqlite3_exec(p->db,
                   "CREATE TABLE IF NOT EXISTS op_profiles(key TEXT PRIMARY KEY, samples INTEGER "
                   "NOT NULL, mean_seconds REAL NOT NULL)",
                   NULL, NULL, NULL) != SQLITE_OK) {
    s = db_error(p, err, path);
    goto fail;
  }
  if (sqlite3_prepare_v2(p->db,
                         "INSERT INTO op_profiles(key, samples, mean_seconds) VALUES(?1, 1, ?2) "
                         "ON CONFLICT(key) DO UPDATE SET samples = samples + 1, mean_seconds = "
                         "mean_seconds + (excluded.mean_seconds - mean_seconds) / (samples + 1)",
                         -1, &p->record, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(p->db, "SELECT samples, mean_seconds FROM op_profiles WHERE key = ?1", -1,
                         &p->lookup, NULL) != SQLITE_OK) {
    s = db_error(p, err, path);
    goto fail;
  }
  *out = p;
  return GR_OK;
fail:
  gr_profile_db_close(p);
  return s;
}

void gr_profile_db_close(gr_profile_db *p) {
  if (!p) return;
  sqlite3_finalize(p->record);
  sqlite3_finalize(p->lookup);
  sqlite3_close(p->db);
  free(p);
}

gr_status gr_profile_db_record(gr_profile_db *p, const char *key, double seconds, gr_error *err) {
  if (!key || !(seconds >= 0) || !isfinite(seconds))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "profile database: a sample needs a key and a finite time >= 0 (got %g)",
                        seconds);
  sqlite3_reset(p->record);
  sqlite3_bind_text(p->record, 1, key, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(p->record, 2, seconds);
  if (sqlite3_step(p->record) != SQLITE_DONE) return db_error(p, err, "record");
  sqlite3_reset(p->record);
  return GR_OK;
}

gr_status gr_profile_db_exec(gr_profile_db *p, const char *sql, gr_error *err) {
  if (sqlite3_exec(p->db, sql, NULL, NULL, NULL) != SQLITE_OK) return db_error(p, err, sql);
  return GR_OK;
}

gr_status gr_profile_db_lookup(gr_profile_db *p, const char *key, double *mean_seconds,
                               int64_t *samples, gr_error *err) {
  *mean_seconds = 0;
  *samples = 0;
  sqlite3_reset(p->lookup);
  sqlite3_bind_text(p->lookup, 1, key, -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(p->lookup);
  if (rc == SQLITE_ROW) {
    *samples = sqlite3_column_int64(p->lookup, 0);
    *mean_seconds = sqlite3_column_double(p->lookup, 1);
  } else if (rc != SQLITE_DONE) {
    return db_error(p, err, "lookup");
  }
  sqlite3_reset(p->lookup);
  return GR_OK;
}
