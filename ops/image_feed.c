/* The batches of one image_folder node (image_internal.h): decoding on a
 * pool of the feed's own threads, batches made ahead, unreadable files
 * skipped deterministically.
 *
 * Slots: batch k lives in slots[k % nslots] (nslots = prefetch + 1), so
 * memory is bounded by nslots batches. A slot being filled has an atomic
 * counter of images claimed: pool tasks and the kernel thread that waits
 * for the batch claim images from it until none is left, so a batch never
 * waits behind queued work. The thread that finishes the last image fills
 * the places of unreadable files and marks the slot done.
 *
 * Threads: the pool's tasks and kernel calls; everything in a slot but its
 * pixels and the claim counter is under mu. A slot's `workers` counts the
 * threads and queued tasks that may still touch it: it is reused only at
 * zero (after `cancel` made them stop between two images). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/image_internal.h"
#include "ops/ops_internal.h"

#define EPOCH_STREAM 0x65706f6368ull /* "epoch" */
#define FLIP_STREAM  0x666c6970ull   /* "flip" */

enum { FILE_UNKNOWN, FILE_OK, FILE_BAD };
enum { SLOT_IDLE, SLOT_FILLING, SLOT_DONE };

/* An epoch's order of the subset (idx NULL: the identity), shared by slots. */
typedef struct perm_ref {
  int64_t epoch;
  int refs; /* under mu */
  int64_t *idx;
} perm_ref;

typedef struct slot {
  int64_t number; /* the batch it holds or makes; -1 none */
  int state, workers;
  int wanted;    /* kernel calls waiting for this batch: it is not called off */
  bool cancel;   /* atomic (read without mu) */
  int64_t next;  /* atomic: the next image to claim */
  int64_t done;  /* images finished */
  int64_t first; /* epoch position of its first image */
  perm_ref *perm;
  gr_tensor images, labels;
  bool *bad; /* per image: its file could not be read */
  gr_status status;
  gr_error err;
} slot;

struct gr_image_feed {
  gr_image_feed_config c;
  char *root, *node;
  int64_t per_epoch, image_floats;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint8_t *file_state; /* per listed file, atomic */
  int64_t skipped;     /* atomic */
  perm_ref *perms[2];  /* the latest epochs' orders */
  slot *slots;
  int nslots;
  gr_threadpool *pool;
  bool stopping;
};

typedef struct task {
  gr_image_feed *f;
  slot *s;
} task;

/* ---- epochs' orders ------------------------------------------------------------------ */

static void perm_release(perm_ref *p) {
  if (p && --p->refs == 0) {
    free(p->idx);
    free(p);
  }
}

/* The order of epoch e, with a reference for the caller (under mu). */
static perm_ref *perm_get(gr_image_feed *f, int64_t e, gr_error *err) {
  for (int i = 0; i < 2; i++)
    if (f->perms[i] && f->perms[i]->epoch == e) {
      f->perms[i]->refs++;
      return f->perms[i];
    }
  perm_ref *p = calloc(1, sizeof *p);
  if (p && f->c.shuffle && !(p->idx = gr_alloc_array((size_t)f->c.count, sizeof(int64_t)))) {
    free(p);
    p = NULL;
  }
  if (!p) {
    gr_error_set_oom(err);
    return NULL;
  }
  p->epoch = e;
  p->refs = 2; /* the cache's and the caller's */
  if (p->idx) gr_ops_permute(p->idx, f->c.count, f->c.seed, EPOCH_STREAM, (uint64_t)e);
  int old = !f->perms[0] ? 0 : !f->perms[1] ? 1 : f->perms[0]->epoch < f->perms[1]->epoch ? 0 : 1;
  perm_release(f->perms[old]);
  f->perms[old] = p;
  return p;
}

/* The listing index of the file at epoch position pos. */
static int64_t file_at(const gr_image_feed *f, const perm_ref *p, int64_t pos) {
  return f->c.files[p->idx ? p->idx[pos] : pos];
}

/* ---- one image ------------------------------------------------------------------------- */

static void set_label(gr_image_feed *f, slot *s, int64_t j, int32_t label) {
  int64_t k = f->c.list.num_classes;
  if (f->c.label_mode == GR_LABELS_INT) {
    ((int32_t *)gr_tensor_data(&s->labels))[j] = label;
  } else if (f->c.label_mode == GR_LABELS_BINARY) {
    ((float *)gr_tensor_data(&s->labels))[j] = (float)label;
  } else {
    float *row = (float *)gr_tensor_data(&s->labels) + j * k;
    for (int64_t i = 0; i < k; i++) row[i] = i == label ? 1.0f : 0.0f;
  }
}

static void flip(float *img, int64_t h, int64_t w, int64_t c, bool across) {
  if (across) { /* left-right */
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w / 2; x++)
        for (int64_t k = 0; k < c; k++) {
          float *a = img + (y * w + x) * c + k, *b = img + (y * w + w - 1 - x) * c + k, t = *a;
          *a = *b, *b = t;
        }
  } else { /* up-down */
    for (int64_t y = 0; y < h / 2; y++)
      for (int64_t i = 0; i < w * c; i++) {
        float *a = img + y * w * c + i, *b = img + (h - 1 - y) * w * c + i, t = *a;
        *a = *b, *b = t;
      }
  }
}

/* Reports file i as unreadable, once per feed. */
static void mark_bad(gr_image_feed *f, int64_t i, const char *why) {
  uint8_t old = __atomic_load_n(&f->file_state[i], __ATOMIC_ACQUIRE);
  if (old == FILE_BAD || !__atomic_compare_exchange_n(&f->file_state[i], &old, FILE_BAD, false,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  int64_t n = __atomic_add_fetch(&f->skipped, 1, __ATOMIC_ACQ_REL);
  fprintf(stderr,
          "graphrun: warning: image_folder '%s': skipped %s (%lld file%s skipped so far; its "
          "place in the batch goes to the next readable file)\n",
          f->node, why, (long long)n, n == 1 ? "" : "s");
}

/* Decodes listing file i into image j of slot s (and its label); false
 * when the file cannot be read. */
static bool load(gr_image_feed *f, slot *s, int64_t j, int64_t i) {
  if (__atomic_load_n(&f->file_state[i], __ATOMIC_ACQUIRE) == FILE_BAD) return false;
  char path[8300]; /* the listing keeps folder and relative path under 4096 each */
  snprintf(path, sizeof path, "%s/%s", f->root, gr_image_list_path(&f->c.list, i));
  gr_image img;
  gr_error err;
  if (gr_image_read(path, f->c.channels, f->c.max_pixels, &img, &err) != GR_OK) {
    mark_bad(f, i, err.msg);
    return false;
  }
  float *dst = (float *)gr_tensor_data(&s->images) + j * f->image_floats;
  gr_image_resize_bilinear(&img, f->c.height, f->c.width, dst);
  gr_image_free(&img);
  __atomic_store_n(&f->file_state[i], FILE_OK, __ATOMIC_RELEASE);
  if (f->c.flip) { /* Keras' RandomFlip: each direction with probability 1/2 */
    gr_rng r = gr_rng_make(f->c.seed, FLIP_STREAM, (uint64_t)s->number);
    uint32_t w[4];
    gr_rng_block(&r, (uint64_t)(f->c.offset + j), w); /* its place in the whole batch */
    if ((f->c.flip & GR_FLIP_H) && (w[0] & 1)) flip(dst, f->c.height, f->c.width, f->c.channels, 1);
    if ((f->c.flip & GR_FLIP_V) && (w[1] & 1)) flip(dst, f->c.height, f->c.width, f->c.channels, 0);
  }
  set_label(f, s, j, f->c.list.labels[i]);
  return true;
}

/* The places of unreadable files, in order, go to the next readable files
 * after the batch in the epoch's order (wrapping around, never the batch's
 * own). Runs on the thread that finished the batch's last image. */
static gr_status fill_bad(gr_image_feed *f, slot *s) {
  int64_t b = f->c.batch, gb = f->c.global_batch, n = f->c.count, scanned = 0;
  int64_t after = s->first - f->c.offset + gb; /* the whole batch's end */
  for (int64_t j = 0; j < b; j++) {
    if (!s->bad[j]) continue;
    for (;;) {
      if (__atomic_load_n(&s->cancel, __ATOMIC_ACQUIRE)) return GR_OK;
      if (scanned >= n - gb) {
        int64_t bad = __atomic_load_n(&f->skipped, __ATOMIC_ACQUIRE);
        return gr_error_set(&s->err, GR_ERR_DATA_LOSS,
                            "%s: too few readable images for a batch of %lld: %lld of the %lld "
                            "files were skipped (see the warnings above)",
                            f->root, (long long)b, (long long)bad, (long long)n);
      }
      int64_t pos = (after + scanned++) % n;
      if (load(f, s, j, file_at(f, s->perm, pos))) break;
    }
  }
  return GR_OK;
}

/* Claims and decodes images of slot s until none is left or it is called
 * off; the thread that finishes the last one completes the batch. The
 * caller counted itself in s->workers; this drops it. */
static void work(gr_image_feed *f, slot *s) {
  int64_t b = f->c.batch, finished = 0;
  for (;;) {
    if (__atomic_load_n(&s->cancel, __ATOMIC_ACQUIRE)) break;
    int64_t j = __atomic_fetch_add(&s->next, 1, __ATOMIC_ACQ_REL);
    if (j >= b) break;
    s->bad[j] = !load(f, s, j, file_at(f, s->perm, s->first + j));
    finished++;
  }
  pthread_mutex_lock(&f->mu);
  s->done += finished;
  bool last = finished > 0 && s->done == b && !s->cancel;
  pthread_mutex_unlock(&f->mu);
  gr_status st = GR_OK;
  if (last) st = fill_bad(f, s);
  pthread_mutex_lock(&f->mu);
  if (last && !s->cancel) {
    s->status = st;
    s->state = SLOT_DONE;
  }
  s->workers--;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void pool_task(void *arg) {
  task *t = arg;
  gr_image_feed *f = t->f;
  slot *s = t->s;
  free(t);
  pthread_mutex_lock(&f->mu);
  bool stop = f->stopping || s->cancel || s->state != SLOT_FILLING;
  if (stop) {
    s->workers--;
    pthread_cond_broadcast(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
  if (!stop) work(f, s);
}

/* ---- slots ------------------------------------------------------------------------------- */

/* Makes idle slot s (no workers) ready to fill with batch k (under mu). */
static gr_status slot_start(gr_image_feed *f, slot *s, int64_t k, gr_error *err) {
  gr_tensor_release(&s->images);
  gr_tensor_release(&s->labels);
  perm_release(s->perm);
  s->perm = NULL;
  s->number = -1;
  s->state = SLOT_IDLE;
  int64_t b = f->c.batch, classes = f->c.list.num_classes;
  gr_shape is = {4, {b, f->c.height, f->c.width, f->c.channels}};
  gr_shape ls = f->c.label_mode == GR_LABELS_INT      ? (gr_shape){1, {b}}
                : f->c.label_mode == GR_LABELS_BINARY ? (gr_shape){2, {b, 1}}
                                                      : (gr_shape){2, {b, classes}};
  GR_TRY(gr_tensor_alloc(&s->images, GR_F32, &is, err));
  gr_status st =
      gr_tensor_alloc(&s->labels, f->c.label_mode == GR_LABELS_INT ? GR_I32 : GR_F32, &ls, err);
  if (st == GR_OK && !(s->perm = perm_get(f, k / f->per_epoch, err)))
    st = GR_ERR_RESOURCE_EXHAUSTED;
  if (st != GR_OK) {
    gr_tensor_release(&s->images);
    gr_tensor_release(&s->labels);
    return st;
  }
  memset(s->bad, 0, (size_t)b);
  s->number = k;
  s->state = SLOT_FILLING;
  __atomic_store_n(&s->cancel, false, __ATOMIC_RELEASE);
  s->next = 0;
  s->done = 0;
  s->first = (k % f->per_epoch) * f->c.global_batch + f->c.offset;
  s->status = GR_OK;
  return GR_OK;
}

/* Queues the pool's threads on slot s (under mu). */
static void slot_schedule(gr_image_feed *f, slot *s) {
  int n = f->c.threads < f->c.batch ? f->c.threads : (int)f->c.batch;
  for (int i = 0; i < n; i++) {
    task *t = malloc(sizeof *t);
    if (!t) return; /* the kernel thread decodes what nobody claims */
    *t = (task){f, s};
    s->workers++;
    gr_threadpool_schedule(f->pool, pool_task, t);
  }
}

/* Starts batches k + 1 .. k + prefetch in slots nobody uses (under mu). */
static void prefetch(gr_image_feed *f, int64_t k) {
  for (int64_t m = k + 1; m <= k + f->c.prefetch; m++) {
    slot *s = &f->slots[m % f->nslots];
    if (s->number == m || s->workers > 0) continue;
    gr_error err;
    if (slot_start(f, s, m, &err) == GR_OK) slot_schedule(f, s);
  }
}

gr_status gr_image_feed_get(gr_image_feed *f, int64_t k, gr_tensor *images, gr_tensor *labels,
                            int64_t *skipped, gr_error *err) {
  slot *s = &f->slots[k % f->nslots];
  gr_status st = GR_OK;
  pthread_mutex_lock(&f->mu);
  for (;;) {
    if (s->number == k && s->state == SLOT_DONE) {
      if ((st = s->status) != GR_OK) {
        gr_error_set(err, st, "%s", s->err.msg);
      } else {
        *images = s->images, *labels = s->labels;
        s->images = gr_tensor_empty(), s->labels = gr_tensor_empty();
      }
      perm_release(s->perm);
      s->perm = NULL;
      s->number = -1;
      s->state = SLOT_IDLE;
      break;
    }
    if (s->number == k && s->state == SLOT_FILLING && !s->cancel) {
      s->workers++;
      s->wanted++;
      pthread_mutex_unlock(&f->mu);
      work(f, s); /* help: claims what the pool has not started */
      pthread_mutex_lock(&f->mu);
      while (s->number == k && s->state == SLOT_FILLING && !s->cancel)
        pthread_cond_wait(&f->cv, &f->mu);
      s->wanted--;
      continue;
    }
    if (s->workers > 0) {
      /* another batch: one made ahead and not wanted now is called off; one
       * that another step waits for is let finish (and taken) first */
      if (!s->wanted) __atomic_store_n(&s->cancel, true, __ATOMIC_RELEASE);
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    if ((st = slot_start(f, s, k, err)) != GR_OK) break;
  }
  if (st == GR_OK) prefetch(f, k);
  pthread_mutex_unlock(&f->mu);
  *skipped = __atomic_load_n(&f->skipped, __ATOMIC_ACQUIRE);
  return st;
}

/* ---- life ------------------------------------------------------------------------------------ */

void gr_image_feed_free(gr_image_feed *f) {
  if (!f) return;
  if (f->pool) {
    pthread_mutex_lock(&f->mu);
    f->stopping = true;
    for (int i = 0; i < f->nslots; i++)
      __atomic_store_n(&f->slots[i].cancel, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&f->mu);
    gr_threadpool_free(f->pool); /* runs the queued tasks (they return at once), joins */
  }
  for (int i = 0; f->slots && i < f->nslots; i++) {
    gr_tensor_release(&f->slots[i].images);
    gr_tensor_release(&f->slots[i].labels);
    perm_release(f->slots[i].perm);
    free(f->slots[i].bad);
  }
  for (int i = 0; i < 2; i++) perm_release(f->perms[i]);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  gr_image_list_free(&f->c.list);
  free(f->c.files);
  free(f->slots);
  free(f->file_state);
  free(f->root);
  free(f->node);
  free(f);
}

gr_status gr_image_feed_new(gr_image_feed_config *c, gr_image_feed **out, gr_error *err) {
  *out = NULL;
  gr_image_feed *f = calloc(1, sizeof *f);
  if (!f) {
    gr_image_list_free(&c->list);
    free(c->files);
    return gr_error_set_oom(err);
  }
  f->c = *c;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  if (f->c.global_batch < f->c.batch) f->c.global_batch = f->c.batch;
  f->per_epoch = c->count / f->c.global_batch;
  f->image_floats = c->height * c->width * c->channels;
  f->nslots = c->prefetch + 1;
  bool ok = (f->root = strdup(c->root)) && (f->node = strdup(c->node)) &&
            (f->file_state = calloc((size_t)c->list.num_files, 1)) &&
            (f->slots = calloc((size_t)f->nslots, sizeof *f->slots));
  for (int i = 0; ok && i < f->nslots; i++) {
    f->slots[i].number = -1;
    ok = (f->slots[i].bad = calloc((size_t)c->batch, 1)) != NULL;
  }
  if (ok && (f->pool = gr_threadpool_new(c->threads))) gr_threadpool_set_name(f->pool, "gr-images");
  if (!ok || !f->pool) {
    gr_image_feed_free(f);
    return gr_error_set_oom(err);
  }
  *out = f;
  return GR_OK;
}
