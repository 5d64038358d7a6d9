/* Internals of checkpoints/: the open file, SQL helpers, shared steps of
 * saving and restoring. Stays inside checkpoints/. */
#ifndef GR_CKPT_INTERNAL_H
#define GR_CKPT_INTERNAL_H

#include <sqlite3.h>

#include "checkpoints/gr_checkpoints.h"

/* A checkpoint file, or a sharded checkpoint directory. For a directory,
 * db is its manifest (the file schema plus a shards table; no tensors),
 * path the directory, and the shard files are opened on demand and kept
 * open until gr_ckpt_close. */
struct gr_ckpt {
  sqlite3 *db;
  char *path;
  gr_ckpt_options opts;
  bool sharded;
  char *lock_path; /* the writer lock held (opts.lock), and its descriptor */
  int lock_fd;
  gr_ckpt **shards; /* open shard files, by file name (shard_names) */
  char **shard_names;
  int num_shards, cap_shards;
};

/* The manifest of a sharded directory: DIR/manifest.ckpt. */
#define CKPT_MANIFEST_NAME "manifest.ckpt"
/* The shard file a sharded gr_ckpt_save_tensors writes (one process's shard). */
#define CKPT_LOCAL_SHARD "local.ckpt"

/* The schema version of a file as created (one that holds slices is
 * made GR_CKPT_SCHEMA_VERSION when its first slice is written). */
#define CKPT_BASE_VERSION 1

/* A tensors row that is a slice of a larger tensor (slices.c): where it
 * lives, its own row, and what it is a slice of. */
typedef struct ckpt_slice {
  gr_ckpt *file;
  int64_t tensor_id;
  gr_ckpt_tensor_info info; /* its own row: its own name, the shape of its rows */
  char *whole;              /* the tensor it is a slice of */
  gr_shape full_shape;
  int64_t first_row;
} ckpt_slice;

/* A growing list of slices (each owning its info.name and whole). */
typedef struct ckpt_slices {
  ckpt_slice *v;
  int n, cap;
} ckpt_slices;

/* Where a listed tensor lives: the file that holds it and its tensors.id;
 * a whole assembled from slices (a partitioned variable of a sharded
 * checkpoint) has file NULL and its slices (owned), in row order. */
typedef struct ckpt_loc {
  gr_ckpt *file;
  int64_t tensor_id;
  ckpt_slice *slices;
  int num_slices;
} ckpt_loc;
/* Frees locs[0..n) and their slices. */
void ckpt_locs_free(ckpt_loc *locs, int n);

/* The writer lock (lock.c): takes it for ck, whose path and sharded are
 * set (a directory exists); ckpt_unlock drops it (none held: nothing). */
gr_status ckpt_lock(gr_ckpt *ck, gr_error *err);
void ckpt_unlock(gr_ckpt *ck);

/* Maps a SQLite result code to a status and fills err with
 * "checkpoint file 'PATH': WHAT: sqlite message". */
gr_status ckpt_sql_error(gr_ckpt *ck, int rc, gr_error *err, const char *what);
gr_status ckpt_exec(gr_ckpt *ck, const char *sql, gr_error *err);
/* Steps st once (a write) and resets it; an error names what. */
gr_status ckpt_step_done(gr_ckpt *ck, sqlite3_stmt *st, const char *what, gr_error *err);
gr_status ckpt_prepare(gr_ckpt *ck, const char *sql, sqlite3_stmt **st, gr_error *err);

/* The array v of *cap elements of `size` bytes with room for element i: v
 * itself, or v moved to twice the capacity (16 at first); NULL when out of
 * memory (v and *cap unchanged). */
void *ckpt_reserve(void *v, int i, int *cap, size_t size);
/* Fills element i (zeroed, of the size given to ckpt_collect_rows) from
 * the current row of st. On failure it may leave allocations in elem: the
 * caller of ckpt_collect_rows frees them with the rest. */
typedef gr_status ckpt_row_fn(gr_ckpt *ck, sqlite3_stmt *st, void *elem, int i, void *arg,
                              gr_error *err);
/* Steps st (prepared and bound; finalized here) through its rows: each
 * adds an element of `size` bytes to the malloc'd array *out (*n of them),
 * which row fills. An element counts from when row is called, so on
 * failure the caller frees (*out)[0..*n), elements row failed on included.
 * what names the listing in an SQLite error. */
gr_status ckpt_collect_rows(gr_ckpt *ck, sqlite3_stmt *st, const char *what, size_t size,
                            ckpt_row_fn *row, void *arg, void **out, int *n, gr_error *err);

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
/* Its two steps: is all its data there (before its size is trusted for an
 * allocation), and reading it into dst (info->nbytes bytes), checking the
 * chunks and the checksum. */
gr_status ckpt_check_data(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                          int64_t step, gr_error *err);
gr_status ckpt_read_data(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_tensor_info *info,
                         int64_t step, unsigned char *dst, gr_error *err);
/* Reads a listed tensor (info, loc: from ckpt_tensors_at) into a new
 * tensor: from its file, or assembled from its slices. */
gr_status ckpt_read_loc(const ckpt_loc *loc, const gr_ckpt_tensor_info *info, int64_t step,
                        gr_tensor *out, gr_error *err);

/* Every tensor of the checkpoint at step (-1: newest), sorted by name, with
 * where each lives (*locs; may be NULL) and the actual step. For a
 * directory: the merged tensors of the checkpoint's shards, each whole of
 * slices assembled; a missing shard file or shard row, a name in two
 * shards, or slices that do not cover their whole exactly is
 * GR_ERR_DATA_LOSS naming the shards. *infos is malloc'd, *locs too
 * (ckpt_locs_free). A file's own listing shows slices by their own names. */
gr_status ckpt_tensors_at(gr_ckpt *ck, int64_t step, gr_ckpt_tensor_info **infos, ckpt_loc **locs,
                          int *n, int64_t *actual, gr_error *err);
/* The tensor rows of one checkpoint (by checkpoints.id) of a file. */
gr_status ckpt_list_rows(gr_ckpt *ck, int64_t ck_id, gr_ckpt_tensor_info **out, int64_t **ids,
                         int *n, gr_error *err);
/* Deletes the checkpoint row id with its tensors and chunks (and, in a
 * manifest, its shard rows), inside the caller's transaction. */
gr_status ckpt_delete_checkpoint(gr_ckpt *ck, int64_t id, gr_error *err);
/* Inserts a checkpoints row (time: now), inside the caller's transaction. */
gr_status ckpt_insert_checkpoint(gr_ckpt *ck, int64_t step, const char *fp, int num_tensors,
                                 int64_t total_bytes, const char *meta, int64_t *id, gr_error *err);
/* Keeps the newest max_to_keep checkpoints (and keep_every_n_steps ones),
 * inside the caller's transaction. */
gr_status ckpt_apply_retention(gr_ckpt *ck, gr_error *err);
/* Writes the checkpoint (rows of a file, not a directory) in one
 * transaction. A shard (nkeep >= 0) also deletes there its rows of earlier
 * steps that are not in keep[0..nkeep) (the steps the manifest names it
 * for): a shard's retention, in its own write. */
gr_status ckpt_write_file(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *tensors,
                          const gr_ckpt_slice *slices, int n, const char *meta, const int64_t *keep,
                          int nkeep, gr_error *err);
/* The steps whose manifest rows name shard `file` (*steps malloc'd). */
gr_status ckpt_shard_steps(gr_ckpt *manifest, const char *file, int64_t **steps, int *n,
                           gr_error *err);
/* Is meta a JSON object? (SQLite's JSON functions decide.) */
gr_status ckpt_check_meta(gr_ckpt *ck, const char *meta, gr_error *err);
/* Opens (or finds already open) the shard file `name` of a directory;
 * writable: opened read-write (created when missing). */
gr_status ckpt_shard(gr_ckpt *ck, const char *name, bool writable, gr_ckpt **out, gr_error *err);
/* Runs PRAGMA integrity_check, calling problem(arg, line) per problem. */
void ckpt_integrity(gr_ckpt *ck, void (*problem)(void *arg, const char *msg), void *arg);

/* Reads vars (names, dtypes and shapes expected) from the checkpoint at
 * step (-1 newest) into vals[0..n) (one new reference each; all empty on
 * error), checking every variable before reading any. strict: the
 * checkpoint must hold exactly these variables (else an error listing the
 * differences). */
gr_status ckpt_read_vars(gr_ckpt *ck, const gr_ckpt_var *vars, int n, int64_t step, bool strict,
                         gr_tensor *vals, int64_t *step_out, gr_error *err);
/* Sets the variables vars[0..n) of mgr to vals[0..n), moving the
 * references out of vals (each left empty). */
gr_status ckpt_set_values(gr_resource_mgr *mgr, const gr_ckpt_var *vars, gr_tensor *vals, int n,
                          gr_error *err);
/* Collects the values of vars from mgr (one reference each, in *out). */
gr_status ckpt_collect_values(gr_resource_mgr *mgr, const gr_ckpt_var *vars, int n, gr_tensor *out,
                              gr_error *err);

/* What a session save writes (session.c): the variables of g held by s at
 * its step, a mirrored variable's copies dropped, partitioned ones joined;
 * ts[0..nt) the tensors and names to write, meta the metadata with the
 * graph seed. own: every tensor copied into a buffer of the job's and every
 * name too (a snapshot for a write in the background, async.c); else they
 * borrow the session's values and g's names. On error nothing is held. */
typedef struct ckpt_save_job {
  int64_t step;
  gr_ckpt_var *vars;
  gr_tensor *vals, *wholes;
  int nvals, nwholes;
  gr_ckpt_tensor *ts;
  int nt;
  char **names; /* own: ts's names, owned */
  char *meta;
} ckpt_save_job;
gr_status ckpt_save_job_make(gr_session *s, const gr_graph *g, const char *metadata_json, bool own,
                             ckpt_save_job *job, gr_error *err);
void ckpt_save_job_free(ckpt_save_job *job);

/* For tests only (test_ckpt_async.c), NULL otherwise: called by every
 * write of a checkpoint file (a file, a shard, a manifest) just before its
 * COMMIT, with the file's path and the checkpoint's step, on the writing
 * thread (a background writer's, async.c). A test blocks or slows a write
 * there. */
extern void (*ckpt_before_commit_hook)(const char *path, int64_t step);

/* A cluster's background shard writes (shard_writer.c; the save op with
 * attr async, the shard_status op), per process, keyed by the shard's
 * path; any thread. start: copies ts (names, values) and sl, waits for
 * the path's previous write (its failure, not yet reported, is returned,
 * naming task and file, and nothing starts), then writes it
 * (gr_ckpt_save_shard_slices) on a thread of its own. wait: waits for the
 * path's write of `step` and returns its outcome (GR_ERR_DATA_LOSS when
 * this process has none of that step: a restarted task). Test hooks, read
 * from the environment: GRAPHRUN_TEST_SHARD_DIE=STEP:FILE, the first
 * background write of STEP that creates FILE (O_EXCL) kills its process
 * just before its commit; GRAPHRUN_TEST_SHARD_FAIL=STEP, the write of STEP fails. */
gr_status ckpt_shard_write_start(const char *path, const char *task, int64_t step,
                                 const gr_ckpt_tensor *ts, const gr_ckpt_slice *sl, int n,
                                 gr_error *err);
gr_status ckpt_shard_write_wait(const char *path, const char *task, int64_t step, gr_error *err);

/* Partitioned variables (partitions.c). Saving: out[0..*nout) (room for n)
 * are the tensors to write for vars[0..n) with values vals, every
 * partitioned variable of g whose parts are all among vars written whole
 * under its own name (the parts concatenated along axis 0 into
 * wholes[0..*nwholes), room for n, the caller releases them); out borrows
 * the names and tensors. g may be NULL (no partitions). */
/* A save in one process (gr_ckpt_save_session): removes from vars[0..*n)
 * (sorted by name) and vals every copy of a mirrored variable whose
 * variable is among them, releasing its value, after checking that its
 * bytes are the variable's (gr_ckpt_check_mirrors: else
 * GR_ERR_FAILED_PRECONDITION, nothing removed). mirrors.c. */
gr_status ckpt_drop_mirror_copies(const gr_graph *g, gr_ckpt_var *vars, gr_tensor *vals, int *n,
                                  gr_error *err);
gr_status ckpt_join_parts(const gr_graph *g, const gr_ckpt_var *vars, const gr_tensor *vals, int n,
                          gr_ckpt_tensor *out, int *nout, gr_tensor *wholes, int *nwholes,
                          gr_error *err);
/* Reading vars of g (as ckpt_read_vars): a part of a partitioned
 * variable is read from its whole (the checkpoint's tensor of the whole's
 * name, sliced) when the checkpoint holds the whole or lacks the part, so
 * a checkpoint restores into any number of parts. */
gr_status ckpt_read_graph_vars(gr_ckpt *ck, const gr_graph *g, const gr_ckpt_var *vars, int n,
                               int64_t step, bool strict, gr_tensor *vals, int64_t *step_out,
                               gr_error *err);
/* Restoring them into mgr: read, then set (nothing changes on error). */
gr_status ckpt_restore_graph(gr_ckpt *ck, gr_resource_mgr *mgr, const gr_graph *g,
                             const gr_ckpt_var *vars, int n, int64_t step, bool strict,
                             int64_t *step_out, gr_error *err);
/* The whole that variable `name` of g is a part of (its attr
 * partition_of; "" if none, or g NULL), with its first row and the
 * whole's shape. */
const char *ckpt_part_of(const gr_graph *g, const char *name, int64_t *offset, gr_shape *full);
/* A slice as the `slices` attr of a save node writes it, one line per
 * variable: "FIRST_ROW [DIMS] WHOLE", "" for a variable that is not a
 * part. ckpt_slice_spec appends variable `name` of g's to buf (of cap
 * bytes, at *len; false when it does not fit); ckpt_parse_slice_spec
 * reads the line [line, line + len) (whole: points into it, which must
 * stay; a line that ends right after it) into out. */
bool ckpt_slice_spec(const gr_graph *g, const char *name, char *buf, size_t cap, size_t *len);
bool ckpt_parse_slice_spec(char *line, size_t len, gr_ckpt_slice *out);

/* Slices (slices.c). Does ck's file have the slices table? */
gr_status ckpt_has_slices(gr_ckpt *ck, bool *has, gr_error *err);
/* Inside the caller's write transaction: creates the slices table (and
 * makes the file's schema version GR_CKPT_SCHEMA_VERSION), then records
 * tensor row tensor_id as the slice sl. */
gr_status ckpt_prepare_slices(gr_ckpt *ck, gr_error *err);
gr_status ckpt_insert_slice(gr_ckpt *ck, int64_t tensor_id, const gr_ckpt_slice *sl, gr_error *err);
/* Do rows [first_row, first_row + shape->dims[0]) of shape `shape` fit a
 * whole of shape full (rank >= 1 and equal, the other dims, the rows
 * inside)? */
bool ckpt_slice_fits(const gr_shape *shape, const gr_shape *full, int64_t first_row);
/* Is the slice sl a fit for value (rank, other dims, rows inside)?
 * GR_ERR_INVALID_ARGUMENT naming the tensor when not. */
gr_status ckpt_check_slice(const char *name, const gr_tensor *value, const gr_ckpt_slice *sl,
                           gr_error *err);
/* Moves the rows of checkpoint ck_id of file (infos, ids: *n rows sorted
 * by name, as ckpt_list_rows gives) that are slices into out, compacting
 * infos and ids. */
gr_status ckpt_take_slices(gr_ckpt *file, int64_t ck_id, gr_ckpt_tensor_info *infos, int64_t *ids,
                           int *n, ckpt_slices *out, gr_error *err);
void ckpt_slices_free(ckpt_slices *sl);
/* One listed tensor per whole of the slices in sl (of checkpoint directory
 * ck at step), each checked to cover its whole's rows exactly once: new
 * arrays *infos and *locs of *n entries. Empties sl (the locs take its
 * slices). GR_ERR_DATA_LOSS naming the whole and the shards when the
 * slices do not fit together. */
gr_status ckpt_assemble(gr_ckpt *ck, int64_t step, ckpt_slices *sl, gr_ckpt_tensor_info **infos,
                        ckpt_loc **locs, int *n, gr_error *err);

#endif
