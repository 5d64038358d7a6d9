/* Internals of checkpoints/: the open file, SQL helpers, shared steps of
 * saving and restoring. Stays inside checkpoints/. */
#ifndef GR_CKPT_INTERNAL_H
#define GR_CKPT_INTERNAL_H

#include <sqlite3.h>

#include "checkpoints/gr_checkpoints.h"

struct gr_ckpt {
  sqlite3 *db;
  char *path;
  gr_ckpt_options opts;
};

/* Maps a SQLite result code to a status and fills err with
 * "checkpoint file 'PATH': WHAT: sqlite message". */
gr_status ckpt_sql_error(gr_ckpt *ck, int rc, gr_error *err, const char *what);
gr_status ckpt_exec(gr_ckpt *ck, const char *sql, gr_error *err);
gr_status ckpt_prepare(gr_ckpt *ck, const char *sql, sqlite3_stmt **st, gr_error *err);

/* The checkpoint at step (-1: the newest, i.e. the last written). Fills id
 * and the actual step. GR_ERR_NOT_FOUND naming the file when there is none. */
gr_status ckpt_find(gr_ckpt *ck, int64_t step, int64_t *id, int64_t *step_out, gr_error *err);

/* Shapes are stored as JSON arrays of dims ("[2,3]", scalar "[]"). */
void ckpt_shape_to_text(const gr_shape *s, char *buf, size_t cap);
bool ckpt_shape_from_text(const char *text, gr_shape *out);
/* Validates a tensors row: dtype known, shape parsed, nbytes consistent. */
gr_status ckpt_parse_tensor_row(gr_ckpt *ck, const char *name, const char *dtype, const char *shape,
                                int64_t nbytes, const char *checksum, gr_ckpt_tensor_info *out,
                                gr_error *err);

/* Reads the tensor whose tensors.id is tensor_id (described by info) into a
 * new tensor, checking sizes and checksum. */
gr_status ckpt_read_tensor_id(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                              int64_t step, gr_tensor *out, gr_error *err);

/* Restores vars (names, dtypes and shapes expected) into mgr from the
 * checkpoint at step (-1 newest). strict: the checkpoint must hold exactly
 * these variables (else an error listing the differences). */
gr_status ckpt_restore_into(gr_ckpt *ck, gr_resource_mgr *mgr, const gr_ckpt_var *vars, int n,
                            int64_t step, bool strict, int64_t *step_out, gr_error *err);
/* Collects the values of vars from mgr (one reference each, in *out). */
gr_status ckpt_collect_values(gr_resource_mgr *mgr, const gr_ckpt_var *vars, int n, gr_tensor *out,
                              gr_error *err);

#endif
