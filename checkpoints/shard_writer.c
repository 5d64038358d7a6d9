/* A cluster's asynchronous shard writes (the save op with attr async, the
 * shard_status op; ckpt_internal.h): per process, a table of the shard
 * files written in the background, each with its write in flight (one at a
 * time) and the outcome of its last one.
 *
 * Threads: a save kernel snapshots the values (copies: the job owns every
 * byte and name) and starts a detached writer thread; the writer alone uses
 * its job. The table, each entry's busy flag and outcome are guarded by
 * `lock`; the writer's end is signalled on `done`. Entries live as long as
 * the process (one per shard file). */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"

typedef struct shard_job {
  int n;
  gr_tensor *vals; /* copies, the job's */
  gr_ckpt_tensor *ts;
  gr_ckpt_slice *sl; /* NULL: no slice */
  char **strs;       /* names and wholes, the job's (2n) */
} shard_job;

typedef struct shard_entry {
  struct shard_entry *next;
  char *path;
  char task[GR_DEVICE_NAME_MAX];
  bool busy, reported; /* a write in flight; the last failure was reported by a save */
  int64_t step;        /* of the last write started (-1: none) */
  gr_status status;    /* its outcome once !busy */
  gr_error err;
  shard_job job;
} shard_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static shard_entry *entries;

static void job_free(shard_job *j) {
  for (int i = 0; j->vals && i < j->n; i++) gr_tensor_release(&j->vals[i]);
  for (int i = 0; j->strs && i < 2 * j->n; i++) free(j->strs[i]);
  free(j->vals), free(j->ts), free(j->sl), free(j->strs);
  *j = (shard_job){0};
}

static char *dup_or_null(const char *s, bool *ok) {
  char *d = s ? strdup(s) : NULL;
  if (s && !d) *ok = false;
  return d;
}

static gr_status job_make(const gr_ckpt_tensor *ts, const gr_ckpt_slice *sl, int n, shard_job *j,
                          gr_error *err) {
  *j = (shard_job){.n = n,
                   .vals = calloc((size_t)n + 1, sizeof *j->vals),
                   .ts = calloc((size_t)n + 1, sizeof *j->ts),
                   .sl = sl ? calloc((size_t)n + 1, sizeof *j->sl) : NULL,
                   .strs = calloc(2 * (size_t)n + 1, sizeof *j->strs)};
  bool ok = j->vals && j->ts && j->strs && (!sl || j->sl);
  for (int i = 0; ok && i < n; i++) {
    gr_tensor c;
    if (gr_tensor_copy(ts[i].value, &c, err) != GR_OK) {
      job_free(j);
      return err ? err->code : GR_ERR_RESOURCE_EXHAUSTED;
    }
    j->vals[i] = c;
    j->ts[i] = (gr_ckpt_tensor){j->strs[2 * i] = dup_or_null(ts[i].name, &ok), &j->vals[i]};
    if (sl) j->sl[i] = sl[i], j->sl[i].whole = j->strs[2 * i + 1] = dup_or_null(sl[i].whole, &ok);
  }
  if (ok) return GR_OK;
  job_free(j);
  return gr_error_set_oom(err);
}

static shard_entry *find(const char *path) {
  for (shard_entry *e = entries; e; e = e->next)
    if (strcmp(e->path, path) == 0) return e;
  return NULL;
}

/* ---- test hooks (ckpt_internal.h) ---- */

static _Thread_local bool in_writer; /* this thread is a background shard writer */

static void die_hook(const char *path, int64_t step) {
  (void)path;
  char *marker; /* STEP:FILE */
  const char *env = getenv("GRAPHRUN_TEST_SHARD_DIE");
  if (!in_writer || strtoll(env, &marker, 10) != step || *marker != ':') return;
  int fd = open(marker + 1, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd >= 0) raise(SIGKILL); /* the first, in the whole cluster: killed mid-write */
}

static void install_hooks(void) {
  if (getenv("GRAPHRUN_TEST_SHARD_DIE")) ckpt_before_commit_hook = die_hook;
}

static gr_status write_shard(shard_entry *e, gr_error *err) {
  const char *fail = getenv("GRAPHRUN_TEST_SHARD_FAIL");
  if (fail && strtoll(fail, NULL, 10) == e->step)
    return gr_error_set(err, GR_ERR_INTERNAL, "failed as GRAPHRUN_TEST_SHARD_FAIL asks");
  in_writer = true;
  return gr_ckpt_save_shard_slices(e->path, e->step, e->job.ts, e->job.sl, e->job.n, err);
}

static void *writer_main(void *arg) {
  shard_entry *e = arg;
  gr_error err;
  gr_status st = write_shard(e, &err);
  pthread_mutex_lock(&lock);
  job_free(&e->job); /* the copies go as soon as they are written */
  e->status = st;
  e->err = err;
  e->reported = false;
  e->busy = false;
  pthread_cond_broadcast(&done);
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* The outcome of e's last write, of step `step` (under lock, not busy). */
static gr_status outcome(const shard_entry *e, int64_t step, gr_error *err) {
  if (e->status == GR_OK) return GR_OK;
  return gr_error_set(err, e->status,
                      "%s: the shard %s of step %" PRId64 ", written in the background, failed: %s",
                      e->task, e->path, step, e->err.msg);
}

gr_status ckpt_shard_write_start(const char *path, const char *task, int64_t step,
                                 const gr_ckpt_tensor *ts, const gr_ckpt_slice *sl, int n,
                                 gr_error *err) {
  static pthread_once_t hooks = PTHREAD_ONCE_INIT;
  pthread_once(&hooks, install_hooks);
  shard_job job;
  GR_TRY(job_make(ts, sl, n, &job, err)); /* the snapshot, before the next step runs */
  pthread_mutex_lock(&lock);
  shard_entry *e = find(path);
  gr_status st = GR_OK;
  if (!e && (e = calloc(1, sizeof *e)) && !(e->path = strdup(path))) free(e), e = NULL;
  if (!e) st = gr_error_set_oom(err);
  if (e && !find(path)) e->next = entries, entries = e, e->step = -1;
  while (st == GR_OK && e->busy) pthread_cond_wait(&done, &lock);
  if (st == GR_OK && e->step >= 0 && !e->reported) { /* the previous write's failure: once */
    st = outcome(e, e->step, err);
    e->reported = true;
  }
  if (st == GR_OK) {
    snprintf(e->task, sizeof e->task, "%s", task);
    e->step = step;
    e->job = job;
    e->busy = true;
    e->status = GR_OK;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, writer_main, e) != 0) {
      e->busy = false;
      e->job = (shard_job){0};
      st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: no thread to write the shard %s", task,
                        path);
    }
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&lock);
  if (st != GR_OK) job_free(&job);
  return st;
}

gr_status ckpt_shard_write_wait(const char *path, const char *task, int64_t step, gr_error *err) {
  pthread_mutex_lock(&lock);
  shard_entry *e = find(path);
  while (e && e->busy) pthread_cond_wait(&done, &lock);
  gr_status st;
  if (!e || e->step != step)
    st = gr_error_set(err, GR_ERR_DATA_LOSS,
                      "%s: no write of the shard %s of step %" PRId64
                      " in this process (the task was restarted?)",
                      task, path, step);
  else
    st = outcome(e, step, err);
  if (e && e->step == step) e->reported = true;
  pthread_mutex_unlock(&lock);
  return st;
}
