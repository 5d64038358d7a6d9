/* Internals of the image_folder op (ops/image_folder*.c): the listing of a
 * folder and the subset of it one node reads. Internal to ops/. */
#ifndef GR_IMAGE_INTERNAL_H
#define GR_IMAGE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <png.h>

#include "ops/gr_images.h"

/* libpng's error and warning callbacks (image_decode.c): the error pointer
 * is a char[GR_PNG_MSG_MAX] that gets the message before the longjmp;
 * warnings are ignored. */
#define GR_PNG_MSG_MAX 200
void gr_png_error_fn(png_structp png, png_const_charp msg);
void gr_png_warning_fn(png_structp png, png_const_charp msg);

/* A folder of class sub-folders, as Keras' index_directory lists it: the
 * sub-folders (not starting with '.') in sorted order are the classes;
 * each one's files ending in .png, .jpg or .jpeg (any case), searched
 * recursively without following links to folders, sorted by (folder,
 * name). Immutable once made: any thread may read it. */
typedef struct gr_image_list {
  int num_classes;
  char **class_names; /* one malloc'd block: the pointers, then the names */
  int64_t num_files;
  int64_t *path_at; /* file i's path (relative to the folder) is text + path_at[i] */
  int32_t *labels;  /* its class */
  char *text;
  char *names;          /* class names, one a line (the class_names attr) */
  uint64_t fingerprint; /* of the classes and every path and label */
  int64_t ignored;      /* other files (not an image by their name) */
} gr_image_list;

/* Lists dir; errors name dir or the sub-folder that could not be read. */
gr_status gr_image_list_dir(const char *dir, gr_image_list *out, gr_error *err);
void gr_image_list_free(gr_image_list *l);
static inline const char *gr_image_list_path(const gr_image_list *l, int64_t i) {
  return l->text + l->path_at[i];
}

/* Which files of a listing of n files a node reads (validation split,
 * shard). The split is Keras': the files in a fixed order (shuffled by
 * seed alone when shuffle), the last floor(validation_split * n) of them
 * for "validation", the others for "training"; then the files at
 * positions i % num_shards == shard_index of that subset. */
typedef struct gr_image_subset_spec {
  double validation_split;
  int subset; /* 0 all, 1 training, 2 validation */
  uint64_t seed;
  bool shuffle;
  int64_t num_shards, shard_index;
} gr_image_subset_spec;

/* The number of files of the subset. */
int64_t gr_image_subset_count(int64_t n, const gr_image_subset_spec *s);
/* Its files, in their order (count entries into *out, malloc'd). */
gr_status gr_image_subset_files(int64_t n, const gr_image_subset_spec *s, int64_t **out,
                                gr_error *err);

/* ---- the batches of one node (image_feed.c) ----------------------------------------- */

enum { GR_LABELS_INT, GR_LABELS_CATEGORICAL, GR_LABELS_BINARY };
enum { GR_FLIP_H = 1, GR_FLIP_V = 2 };

typedef struct gr_image_feed_config {
  const char *root;   /* the folder (copied) */
  const char *node;   /* the node's name, for warnings (copied) */
  gr_image_list list; /* taken over (freed with the feed, also on failure) */
  int64_t *files;     /* the subset's listing indices, taken over */
  int64_t count;      /* entries of files */
  int64_t batch, height, width;
  /* a slice (replicas' sharded input): the feed gives images offset ...
   * offset + batch - 1 of batches of global_batch (0: batch) images, the
   * same files and flips as those of the whole batch (an unreadable
   * file's place: the next readable one after the whole batch, counted
   * within the slice) */
  int64_t global_batch, offset;
  int channels, label_mode, flip;
  uint64_t seed; /* of the epochs' order and the flips */
  bool shuffle;
  int64_t max_pixels;
  int threads, prefetch;
} gr_image_feed_config;

/* The batches of one image_folder node in one executor. Batch number k is
 * images [batch, h, w, c] and labels of epoch k / (count / batch): the
 * files at positions (k % per_epoch) * batch ... of the epoch's order (a
 * permutation keyed by (seed, epoch) when shuffle), an unreadable file's
 * place taken by the next readable one after the batch in that order; a
 * pure function of the folder's files, the config and k. Decoding runs on
 * a pool of `threads` threads of its own, `prefetch` batches ahead of the
 * last one asked for. Thread-safe: several steps may ask at once. */
typedef struct gr_image_feed gr_image_feed;

gr_status gr_image_feed_new(gr_image_feed_config *c, gr_image_feed **out, gr_error *err);
/* Batch number k into new references *images, *labels; *skipped: the files
 * found unreadable so far (by this call or decoding ahead). An error when
 * fewer than `batch` files of the subset can be read. */
gr_status gr_image_feed_get(gr_image_feed *f, int64_t k, gr_tensor *images, gr_tensor *labels,
                            int64_t *skipped, gr_error *err);
/* Stops the decoding (waits for the images being decoded) and frees. */
void gr_image_feed_free(gr_image_feed *f);

#endif
