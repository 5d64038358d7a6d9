/* checkpoints/: the face header. Variables of a session saved into and
 * restored from a SQLite database (schema: docs/checkpoints.md), the `save`
 * and `restore` ops, retention, inspection and verification.
 *
 *   gr_ckpt *ck;
 *   gr_error err;
 *   gr_ckpt_options o = {.max_to_keep = 5};
 *   if (gr_ckpt_open("run.ckpt", &o, &ck, &err) != GR_OK) { puts(err.msg); return 1; }
 *   int64_t step;
 *   gr_status st = gr_ckpt_restore_latest(ck, s, g, &step, &err); // sets the session step
 *   if (st == GR_ERR_NOT_FOUND) gr_session_init_variables(s, &err); // fresh start
 *   for (...) {
 *     gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err);
 *     if (gr_session_step(s) % 100 == 0) gr_ckpt_save_session(ck, s, g, NULL, &err);
 *   }
 *   gr_ckpt_close(ck);
 *
 * A checkpoint is one row of `checkpoints` written in one SQLite transaction
 * (rollback journal, synchronous=FULL): a process killed at any instant
 * leaves every earlier checkpoint intact. The variables of a graph are the
 * names in the "var" attr of its nodes whose op has GR_OP_VARIABLE. A
 * checkpoint records the session step to resume at (gr_session_step: random
 * ops and data readers are pure functions of the step), the graph seed, and
 * a fingerprint of the sorted (name, dtype, shape) of its tensors; restoring
 * a checkpoint of another graph is an error listing the mismatched variables.
 *
 * Ownership: a gr_ckpt is the caller's (gr_ckpt_close). Arrays returned by
 * the list functions are the caller's (gr_ckpt_infos_free /
 * gr_ckpt_tensor_infos_free); tensors read hold one reference each
 * (gr_tensor_release). Nothing keeps pointers to the caller's arguments.
 * One gr_ckpt must not be used by two threads at once. */
#ifndef GR_CHECKPOINTS_H
#define GR_CHECKPOINTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gr_core.h"

/* The newest schema version this graphrun reads. A file is written as
 * version 1 unless it holds slices (a shard with parts of partitioned
 * variables, gr_ckpt_save_shard_slices): the write that stores its first
 * slice adds the slices table and makes it version 2, so an older graphrun
 * refuses it rather than misread it. */
#define GR_CKPT_SCHEMA_VERSION 2
/* PRAGMA application_id of a checkpoint file ("GRCK"). */
#define GR_CKPT_APPLICATION_ID 0x4752434B
/* Largest data row: tensors are split into chunks of at most this size. */
#define GR_CKPT_CHUNK_BYTES (16 * 1024 * 1024)

typedef struct gr_ckpt gr_ckpt;

typedef struct gr_ckpt_options {
  int max_to_keep;            /* keep the newest N checkpoints; 0: keep all */
  int64_t keep_every_n_steps; /* also keep every checkpoint whose step is a multiple of N; 0: off */
  bool read_only;             /* open an existing file for reading only (inspection) */
  bool sharded; /* path is a directory of shards with a manifest (created when missing);
                 * an existing directory is opened as one whatever this says */
  bool lock;    /* one writer at a time: hold the checkpoint's writer lock until
                 * gr_ckpt_close (flock on PATH.lock, for a directory DIR/writer.lock,
                 * holding the writer's host and pid). While another gr_ckpt holds it (in
                 * any process; across hosts where the file system has locks), open fails
                 * with GR_ERR_UNAVAILABLE naming that holder's host and pid. The
                 * lock dies with its process: a lock file left by a killed writer does not
                 * block. Not with read_only. */
} gr_ckpt_options;

/* Opens (and unless read_only, creates) a checkpoint file. A missing file
 * (read_only), a file that is not SQLite, a SQLite file that is not a
 * checkpoint file, a newer schema or a damaged file are errors naming the
 * path. opts may be NULL (keep all, read-write). */
gr_status gr_ckpt_open(const char *path, const gr_ckpt_options *opts, gr_ckpt **out, gr_error *err);
void gr_ckpt_close(gr_ckpt *ck);
/* The file, or for a sharded checkpoint its directory (an absolute path). */
const char *gr_ckpt_path(const gr_ckpt *ck);

/* ---- sharded checkpoints (a directory) ---------------------------------------
 *
 * In a cluster each task that holds variables writes its own shard, an
 * ordinary checkpoint file DIR/JOB-TASK.ckpt (a `save` node placed on the
 * task, gr_save_at), and the chief then commits the checkpoint in the
 * manifest DIR/manifest.ckpt: a checkpoint exists exactly when its manifest
 * row does, so a crash between the shards and the manifest leaves the
 * previous checkpoint the newest. Every reading function below (list, read,
 * restore, verify) sees a directory as one checkpoint file holding the
 * merged tensors of the shards. Retention (max_to_keep) applies to the
 * manifest; a shard file's rows that no manifest row names are deleted when
 * its task writes its next shard, and the chief removes the shard files the
 * manifest named before and names no more (never a file it did not
 * name). The shard files must be reachable under the same path by the
 * tasks and the chief (one host, or a shared file system, as for
 * TensorFlow's checkpoint directory).
 *
 * A partitioned variable NAME whose parts live on several tasks is saved
 * as slices (TensorFlow's save-slice info): each task's shard holds its
 * parts, each recorded as rows [first_row, first_row + rows) of NAME of
 * shape full_shape, and every reader of the directory sees NAME whole,
 * assembled from its slices in the shards (which must cover every row of
 * NAME exactly once: else GR_ERR_DATA_LOSS naming NAME and the shards). */

bool gr_ckpt_is_sharded(const gr_ckpt *ck);
/* "JOB-TASK.ckpt", the shard file name of a task. */
void gr_ckpt_shard_name(const char *job, int task, char *buf, size_t cap);
/* DIR/shard as a path (buf of cap bytes); false when it does not fit. */
bool gr_ckpt_shard_path(const gr_ckpt *ck, const char *shard, char *buf, size_t cap);

typedef struct gr_ckpt_shard {
  const char *file; /* shard file name in the directory, e.g. "ps-0.ckpt" */
  const char *task; /* who wrote it, e.g. "/job:ps/task:0" (for messages) */
} gr_ckpt_shard;

/* Commits the checkpoint at step whose shards were written (each holds a
 * checkpoint at step): checks every shard is there, no tensor name is in
 * two and the slices of each partitioned variable cover it, writes the
 * manifest row in one transaction, then applies retention to the manifest
 * and the shards. metadata_json as for gr_ckpt_save_tensors. A missing shard is GR_ERR_DATA_LOSS
 * naming it, and nothing is committed. */
gr_status gr_ckpt_commit_shards(gr_ckpt *ck, int64_t step, const gr_ckpt_shard *shards, int n,
                                const char *metadata_json, gr_error *err);

typedef struct gr_ckpt_shard_info {
  char *file, *task;
  char fingerprint[17];
  int num_tensors;
  int64_t total_bytes;
} gr_ckpt_shard_info;
/* The shards of the checkpoint at step (-1: newest), by file name; a file
 * (not a directory) gives none. */
gr_status gr_ckpt_list_shards(gr_ckpt *ck, int64_t step, gr_ckpt_shard_info **out, int *n,
                              gr_error *err);
void gr_ckpt_shard_infos_free(gr_ckpt_shard_info *infos, int n);

/* ---- saving --------------------------------------------------------------- */

typedef struct gr_ckpt_tensor {
  const char *name;
  const gr_tensor *value; /* borrowed */
} gr_ckpt_tensor;

/* Writes one checkpoint at `step` (replacing one at the same step) in one
 * transaction, then applies retention in the same transaction. Into a
 * directory: as the one shard local.ckpt, then committed in the manifest.
 * metadata_json: a JSON object stored as is (NULL: "{}"); it must be valid JSON. */
gr_status gr_ckpt_save_tensors(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor *tensors, int n,
                               const char *metadata_json, gr_error *err);
/* Saves every variable of g held by session s, at step gr_session_step(s),
 * a replica's copy of a mirrored variable once (below: not the copy, after
 * checking that its bytes are the variable's; else GR_ERR_FAILED_PRECONDITION
 * and nothing saved). A variable without a value is an error naming it. metadata_json as above
 * (the graph seed is added to it). */
gr_status gr_ckpt_save_session(gr_ckpt *ck, gr_session *s, const gr_graph *g,
                               const char *metadata_json, gr_error *err);

/* ---- asynchronous saves ------------------------------------------------------
 *
 * A save that does not hold up training: gr_ckpt_save_session_async takes
 * a snapshot of the session's variables (copies of their bytes, taken
 * between steps, so they are one step's values) and returns; a writer
 * thread then writes the checkpoint (as gr_ckpt_save_session would: one
 * transaction, synchronous=FULL, so fsync'd when it commits; into a
 * directory, the shard first, then the manifest row that commits it) while
 * the next steps run. A checkpoint thus exists only once all of it is
 * durable: a process killed during the write leaves the previous one the
 * newest. Checkpoint contents equal gr_ckpt_save_session's at the same
 * steps, byte for byte.
 *
 *   gr_ckpt_async *a;
 *   gr_ckpt_async_new(ck, &a, &err);
 *   ... each N steps: if (gr_ckpt_save_session_async(a, s, g, NULL, &err)) fail(err.msg);
 *   if (gr_ckpt_async_free(a, &err)) fail(err.msg);  // waits for the last write
 *
 * At most one write is in flight: a save waits for the previous write to
 * end before it takes its snapshot. A write that failed is reported once,
 * by the first of the next save (which then saves nothing),
 * gr_ckpt_async_wait or gr_ckpt_async_free, its message naming the step and
 * the file; never dropped. While a write is in flight, ck belongs to the
 * writer: call no other function on ck until gr_ckpt_async_wait (or _free)
 * returned. Ownership: the gr_ckpt_async is the caller's (gr_ckpt_async_free,
 * before gr_ckpt_close(ck)); it borrows ck. s and g are used only during
 * the call, from the caller's thread, while no step of s runs. */
typedef struct gr_ckpt_async gr_ckpt_async;
gr_status gr_ckpt_async_new(gr_ckpt *ck, gr_ckpt_async **out, gr_error *err);
/* Waits for the write in flight (if any), then snapshots the variables of g
 * held by s at gr_session_step(s) and starts their write. A previous
 * write's failure is returned instead, and nothing is saved. The errors of
 * the snapshot itself (a variable without a value, a mirrored copy that
 * differs) are gr_ckpt_save_session's, returned here. */
gr_status gr_ckpt_save_session_async(gr_ckpt_async *a, gr_session *s, const gr_graph *g,
                                     const char *metadata_json, gr_error *err);
/* Waits until no write is in flight; GR_OK, or the failure of the write
 * that ended (reported once). */
gr_status gr_ckpt_async_wait(gr_ckpt_async *a, gr_error *err);
/* gr_ckpt_async_wait, then frees a (NULL: GR_OK). err may be NULL (the
 * failure, if any, is then dropped: wait first to see it). */
gr_status gr_ckpt_async_free(gr_ckpt_async *a, gr_error *err);

/* A task's shard: writes the checkpoint at step into the shard file at path
 * (DIR/JOB-TASK.ckpt) in one transaction, which also deletes the file's
 * rows of earlier steps that no manifest row names (the manifest in DIR,
 * read then; with none yet, every earlier row). A shard file thus holds at
 * most one row more than the manifest keeps. What the `save` node of
 * gr_save_at runs. */
gr_status gr_ckpt_save_shard(const char *path, int64_t step, const gr_ckpt_tensor *tensors, int n,
                             gr_error *err);

/* Where a tensor of a shard sits in a larger one: rows [first_row,
 * first_row + rows) along axis 0 (rows: the tensor's dims[0]) of the
 * tensor `whole` of shape full_shape; its other dims and its rank are
 * full_shape's. A part of a partitioned variable: whole is the variable's
 * name (the part's attrs partition_of, partition_offset, full_shape). */
typedef struct gr_ckpt_slice {
  const char *whole; /* NULL: the tensor is not a slice */
  gr_shape full_shape;
  int64_t first_row;
} gr_ckpt_slice;

/* gr_ckpt_save_shard where tensors[i] is a slice as slices[i] says (slices
 * may be NULL: none is). A slice is stored under its own name
 * (tensors[i].name, e.g. NAME/part_K) with its slice info; readers of the
 * sharded checkpoint see its whole instead. A slice that does not fit its
 * whole is GR_ERR_INVALID_ARGUMENT naming it, and nothing is written. */
gr_status gr_ckpt_save_shard_slices(const char *path, int64_t step, const gr_ckpt_tensor *tensors,
                                    const gr_ckpt_slice *slices, int n, gr_error *err);

/* ---- restoring ------------------------------------------------------------ */

/* Restoring goes by name, into a graph that holds any subset of the
 * checkpoint's variables: an inference graph without the optimizer's slots
 * and the global step, a model file without the training file's extras.
 * The checkpoint's tensors the graph has no variable for stay in the file
 * (reported); a variable of the graph the checkpoint lacks is an error
 * naming it when the runs to come need it (by default: every variable of
 * the graph), else it is left as it was (its initialiser gives it a value
 * if a later run needs it). */
typedef struct gr_ckpt_restore_options {
  bool at_step; /* the checkpoint at `step`; false: the newest */
  int64_t step;
  /* The runs the session will make: their fetches and targets (a target's
   * index is ignored) and the endpoints they feed. Only the variables these
   * need (gr_graph_mark_needed, with the variables a variable op names)
   * must be in the checkpoint. num_roots 0: every variable of g. */
  const gr_output *roots;
  int num_roots;
  const gr_output *feeds;
  int num_feeds;
} gr_ckpt_restore_options;

/* What a restore did. */
typedef struct gr_ckpt_restore_report {
  int64_t step;           /* the checkpoint's step */
  int restored;           /* variables of g set from it */
  int not_needed;         /* variables of g it lacks that no run needs: left as they were */
  int unused;             /* its tensors g has no variable for: left in the file */
  char unused_names[200]; /* the first of those, ", "-separated, then " and N more" */
} gr_ckpt_restore_report;

/* Restores into session s every variable of g the checkpoint holds (o may
 * be NULL: the newest, every variable needed) and sets the session step to
 * the checkpoint's. GR_ERR_NOT_FOUND (and nothing changed) when the file
 * holds no checkpoint (of that step). Every variable is checked before any
 * is changed: a needed variable it lacks, or one whose dtype or shape
 * differs, is GR_ERR_FAILED_PRECONDITION listing them (and, when it holds
 * tensors the graph lacks, those: a checkpoint of another graph); damaged
 * data is GR_ERR_DATA_LOSS naming the tensor. report may be NULL. */
gr_status gr_ckpt_restore(gr_ckpt *ck, gr_session *s, const gr_graph *g,
                          const gr_ckpt_restore_options *o, gr_ckpt_restore_report *report,
                          gr_error *err);
/* The same check without restoring: *names (malloc'd; the names point into
 * g), *n of them, the variables of g the restore would set; what a
 * cluster's client reads (gr_ckpt_read_vars) and assigns on the tasks. */
gr_status gr_ckpt_restore_plan(gr_ckpt *ck, const gr_graph *g, const gr_ckpt_restore_options *o,
                               const char ***names, int *n, gr_ckpt_restore_report *report,
                               gr_error *err);
/* gr_ckpt_restore from the newest checkpoint, every variable of g needed;
 * *step (may be NULL): the checkpoint's step. */
gr_status gr_ckpt_restore_latest(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t *step,
                                 gr_error *err);
/* The same from the checkpoint at `step` (GR_ERR_NOT_FOUND when none). */
gr_status gr_ckpt_restore_step(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t step,
                               gr_error *err);
/* Restores only the named variables (checked against g's dtype and shape)
 * from the checkpoint at step (-1: newest). Leaves the session step alone. */
gr_status gr_ckpt_restore_vars(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t step,
                               const char *const *names, int n, gr_error *err);
/* Reads the named variables of g (checked against g's dtype and shape)
 * from the checkpoint at step (-1: newest) into out[0..n), one new
 * reference each, as gr_ckpt_restore_vars would set them: a part of a
 * partitioned variable is sliced from its whole. *step_out (may be NULL):
 * the checkpoint's step. On error every out[i] is empty. */
gr_status gr_ckpt_read_vars(gr_ckpt *ck, int64_t step, const gr_graph *g, const char *const *names,
                            int n, gr_tensor *out, int64_t *step_out, gr_error *err);

/* ---- inspection --------------------------------------------------------------- */

typedef struct gr_ckpt_info {
  int64_t id;
  int64_t step;
  double time;          /* seconds since the epoch (UTC) */
  char fingerprint[17]; /* 16 hex digits */
  int num_tensors;
  int64_t total_bytes;
  char *metadata; /* JSON text */
} gr_ckpt_info;

typedef struct gr_ckpt_tensor_info {
  char *name;
  gr_dtype dtype;
  gr_shape shape;
  int64_t nbytes;
  uint64_t checksum; /* XXH64 (seed 0) of the tensor's bytes; of a whole assembled from
                      * slices (a sharded checkpoint): XXH64 of its slices' checksums as
                      * 16 hex digits each, in row order */
} gr_ckpt_tensor_info;

/* Every checkpoint, oldest first. */
gr_status gr_ckpt_list(gr_ckpt *ck, gr_ckpt_info **out, int *n, gr_error *err);
void gr_ckpt_infos_free(gr_ckpt_info *infos, int n);
/* Merges the JSON object patch into the metadata of the checkpoint at step
 * (of a directory: its manifest row), as a JSON merge patch (RFC 7396: a
 * key set to null is removed). A checkpoint whose metadata holds
 * "keep": true is kept by retention whatever max_to_keep says, and not
 * counted among the newest (graphrun run --keep-best marks the best epoch's
 * so). GR_ERR_NOT_FOUND when there is no checkpoint of that step. */
gr_status gr_ckpt_patch_metadata(gr_ckpt *ck, int64_t step, const char *patch_json, gr_error *err);
/* The newest step; GR_ERR_NOT_FOUND when there is none. */
gr_status gr_ckpt_latest_step(gr_ckpt *ck, int64_t *step, gr_error *err);
/* The tensors of the checkpoint at step (-1: newest), sorted by name. */
gr_status gr_ckpt_list_tensors(gr_ckpt *ck, int64_t step, gr_ckpt_tensor_info **out, int *n,
                               gr_error *err);
void gr_ckpt_tensor_infos_free(gr_ckpt_tensor_info *infos, int n);
/* Reads one tensor (step -1: newest) into a new tensor; checks its size and
 * checksum (GR_ERR_DATA_LOSS naming it when they do not match; a whole
 * assembled from slices: each slice's). */
gr_status gr_ckpt_read_tensor(gr_ckpt *ck, int64_t step, const char *name, gr_tensor *out,
                              gr_error *err);

/* Runs PRAGMA integrity_check and re-reads every tensor of every checkpoint
 * comparing sizes and checksums. Calls report (may be NULL) once per
 * problem; returns GR_OK when there is none, GR_ERR_DATA_LOSS otherwise
 * (err: the first problem and the count). *num_checked: tensors checked. */
gr_status gr_ckpt_verify(gr_ckpt *ck, void (*report)(void *arg, const char *problem), void *arg,
                         int *num_checked, gr_error *err);

/* ---- helpers ---------------------------------------------------------------------- */

/* XXH64 with seed 0 (the checksum of tensors and fingerprints), streaming;
 * libxxhash's state, held here so hashing allocates nothing. */
typedef struct gr_ckpt_hasher {
  _Alignas(16) unsigned char state[128];
} gr_ckpt_hasher;
void gr_ckpt_hash_init(gr_ckpt_hasher *h);
void gr_ckpt_hash_update(gr_ckpt_hasher *h, const void *data, size_t n);
uint64_t gr_ckpt_hash_final(const gr_ckpt_hasher *h);
uint64_t gr_ckpt_hash64(const void *data, size_t n);

/* The variables of g as (name, dtype, shape), sorted by name; *out is
 * malloc'd (free it; names point into the graph). Conflicting declarations
 * of one variable are an error naming it. */
typedef struct gr_ckpt_var {
  const char *name;
  gr_dtype dtype;
  gr_shape shape;
} gr_ckpt_var;
gr_status gr_ckpt_graph_vars(const gr_graph *g, gr_ckpt_var **out, int *n, gr_error *err);
/* Fingerprint of sorted (name, dtype, shape) triples: what a checkpoint records. */
uint64_t gr_ckpt_fingerprint(const gr_ckpt_var *vars, int n);

/* ---- mirrored variables: saved once ------------------------------------------------
 *
 * A replica's copy of a mirrored variable (replicas with all_reduce=true:
 * VAR/replica_K, attr mirror_of VAR) and the variables made under it (its
 * optimizer slots: VAR/replica_K/adam_m) equal VAR (VAR/adam_m) bit for bit
 * by construction, so a checkpoint holds VAR alone: graphrun run on a
 * cluster saves no copy, and checks in the same run that each copy's
 * checksum (gr_ckpt_checksums on its task) is VAR's; gr_ckpt_save_session
 * (graphrun run in one process) does the same with the values it holds. Every restore
 * (gr_ckpt_restore*, gr_ckpt_read_vars) sets a copy the checkpoint has no tensor for from VAR; a
 * checkpoint that holds the copies (written before) restores them by name. */

/* The variable of g that variable `name` mirrors (VAR for VAR/replica_K,
 * VAR/adam_m for VAR/replica_K/adam_m), when g has it with the same dtype
 * and shape; NULL when `name` is no copy. Points into g. */
const char *gr_ckpt_mirror_source(const gr_graph *g, const char *name);
/* Checks checksums taken in one run (sums[i]: XXH64 of variable names[i]'s
 * bytes, taken where[i], a task): a copy whose variable is among the names
 * too must have its checksum. Else GR_ERR_FAILED_PRECONDITION naming the
 * variable, the copy, both tasks and both checksums. */
gr_status gr_ckpt_check_mirrors(const gr_graph *g, const char *const *names,
                                const char *const *where, const uint64_t *sums, int n,
                                gr_error *err);

/* ---- ops ------------------------------------------------------------------------------ */

/* Registers the `save`, `restore` and `checksums` ops (idempotent, thread-safe; the
 * builders call it). */
void gr_ckpt_register_ops(void);

/* A `save` node: when run, writes the variables named in vars (variable
 * outputs; n == 0: every variable of the graph) held by the session into
 * the file at path, at step (the run's step + 1, the step to resume at),
 * with retention max_to_keep / keep_every_n_steps. Output: that step (i64). */
gr_output gr_save(gr_graph *g, const char *path, const gr_output *vars, int n, int max_to_keep,
                  int64_t keep_every_n_steps);
/* The same at the step given by `step`, an i64 scalar (a placeholder the
 * caller feeds, say), and without retention: a task's shard of a sharded
 * checkpoint, which the chief commits with gr_ckpt_commit_shards. */
gr_output gr_save_at(gr_graph *g, const char *path, const gr_output *vars, int n, gr_output step);
/* gr_save_at; async: the node copies the values and a thread of the task's
 * process writes the shard (after the file's previous write, whose failure
 * the node reports, once), so the step goes on at once; a `shard_status`
 * node (gr_shard_status, the same path, fed the same step) waits for that
 * write and fails with its error, naming the task and the file. The chief
 * commits the manifest only after every shard's status is OK. */
gr_output gr_save_shard(gr_graph *g, const char *path, const gr_output *vars, int n, gr_output step,
                        bool async);
gr_output gr_shard_status(gr_graph *g, const char *path, gr_output step);
/* A `checksums` node: when run, the XXH64 (gr_ckpt_hash64, as i64 bits) of
 * the bytes of each variable in vars held by the session (or, placed on a
 * task, by the task's container), an i64 vector of n. What a cluster's save
 * compares across the copies of mirrored variables. */
gr_output gr_ckpt_checksums(gr_graph *g, const gr_output *vars, int n);
/* A `restore` node: when run, sets the variables named in vars (n == 0:
 * every variable of the graph) from the checkpoint at step (-1: newest),
 * checking dtypes and shapes. Output: the checkpoint's step (i64), which
 * the caller may give to gr_session_set_step. */
gr_output gr_restore(gr_graph *g, const char *path, const gr_output *vars, int n, int64_t step);

#endif
