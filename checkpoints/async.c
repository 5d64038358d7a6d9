/* Asynchronous saves (gr_checkpoints.h, "asynchronous saves"): a snapshot
 * of a session's variables taken on the caller's thread, written by a
 * thread of its own, one write at a time.
 *
 * Threads: the caller's thread makes the snapshot (ckpt_save_job_make with
 * copies) and starts the writer; the writer alone uses ck and the job
 * until the caller joins it (gr_ckpt_async_wait), which is the only
 * synchronisation needed: the outcome is read after pthread_join. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "checkpoints/ckpt_internal.h"

struct gr_ckpt_async {
  gr_ckpt *ck;        /* borrowed */
  pthread_t writer;   /* joinable while busy */
  bool busy;          /* a write started and not yet waited for */
  bool failed;        /* write_err holds a failure not yet reported */
  ckpt_save_job job;  /* the write's snapshot (the writer's while busy) */
  gr_status status;   /* the write's outcome, set by the writer */
  gr_error write_err; /* ... and its message */
};

/* The write of a.job, on the writer thread or (when no thread could be
 * started) the caller's. */
static void write_job(gr_ckpt_async *a) {
  ckpt_save_job *j = &a->job;
  a->status = gr_ckpt_save_tensors(a->ck, j->step, j->ts, j->nt, j->meta, &a->write_err);
  if (a->status != GR_OK)
    gr_error_prefix(&a->write_err,
                    "the checkpoint of step %" PRId64 ", written in the background, failed",
                    j->step);
  ckpt_save_job_free(j); /* the copies go as soon as they are written */
}

static void *writer_main(void *arg) {
  write_job(arg);
  return NULL;
}

gr_status gr_ckpt_async_new(gr_ckpt *ck, gr_ckpt_async **out, gr_error *err) {
  *out = NULL;
  if (!ck) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "asynchronous saves: no checkpoint");
  if (ck->opts.read_only)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "checkpoint file '%s' was opened read-only", ck->path);
  gr_ckpt_async *a = calloc(1, sizeof *a);
  if (!a) return gr_error_set_oom(err);
  a->ck = ck;
  *out = a;
  return GR_OK;
}

gr_status gr_ckpt_async_wait(gr_ckpt_async *a, gr_error *err) {
  if (a->busy) {
    pthread_join(a->writer, NULL);
    a->busy = false;
    a->failed = a->status != GR_OK;
  }
  if (!a->failed) return GR_OK;
  a->failed = false; /* reported once, here */
  if (err) *err = a->write_err;
  return a->status;
}

gr_status gr_ckpt_save_session_async(gr_ckpt_async *a, gr_session *s, const gr_graph *g,
                                     const char *metadata_json, gr_error *err) {
  GR_TRY(gr_ckpt_async_wait(a, err));
  GR_TRY(ckpt_save_job_make(s, g, metadata_json, true, &a->job, err));
  a->status = GR_OK;
  if (pthread_create(&a->writer, NULL, writer_main, a) == 0) {
    a->busy = true;
    return GR_OK;
  }
  write_job(a); /* no thread to be had: written now, as a synchronous save */
  a->failed = a->status != GR_OK;
  return gr_ckpt_async_wait(a, err);
}

gr_status gr_ckpt_async_free(gr_ckpt_async *a, gr_error *err) {
  if (!a) return GR_OK;
  gr_status st = gr_ckpt_async_wait(a, err);
  free(a);
  return st;
}
