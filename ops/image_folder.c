/* The image_folder op and its builder (gr_images.h): batches of a folder of
 * class sub-folders, as Keras' image_dataset_from_directory. The builder
 * lists the folder and records the listing in the node's attrs (class
 * names, number of files, fingerprint), so shapes and class names come
 * from the attrs alone and a serialized graph carries them without the
 * folder. The kernel lists the folder again when it first runs, checks the
 * fingerprint and hands out batches of its gr_image_feed (image_feed.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/image_internal.h"
#include "ops/ops_internal.h"

static const char *const color_modes[] = {"grayscale", "rgb", "rgba", NULL};
static const int color_channels[] = {1, 3, 4};
static const char *const label_modes[] = {"int", "categorical", "binary", NULL};
static const char *const subsets[] = {"", "training", "validation", NULL};
static const char *const flips[] = {"", "horizontal", "vertical", "horizontal_and_vertical", NULL};

static int find(const char *const *list, const char *s) {
  for (int i = 0; list[i]; i++)
    if (strcmp(list[i], s) == 0) return i;
  return -1;
}

/* Everything the attrs say, checked. */
typedef struct folder_spec {
  const char *path, *class_names;
  int64_t h, w, b, num_files, num_classes, count;
  int64_t slices, slice; /* the node gives rows slice * b / slices ... of batch b */
  int channels, label_mode, flip;
  gr_image_subset_spec subset;
  int64_t max_pixels, threads, prefetch;
  uint64_t fingerprint;
} folder_spec;

static int count_lines(const char *s) {
  int n = *s ? 1 : 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* Reads and checks the attrs of n into *fs; errors into err (code returned). */
static gr_status read_spec(const gr_node *n, folder_spec *fs, gr_error *err) {
  memset(fs, 0, sizeof *fs);
  fs->path = gr_node_attr_string(n, "path", "");
  const gr_attr_value *size = gr_node_attr(n, "size");
  if (!size || size->ints.n != 2 || size->ints.v[0] < 1 || size->ints.v[1] < 1 ||
      size->ints.v[0] > 65536 || size->ints.v[1] > 65536)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "attr 'size' must be [height, width], each from 1 to 65536");
  fs->h = size->ints.v[0], fs->w = size->ints.v[1];
  fs->b = gr_node_attr_int(n, "batch_size", 32);
  if (fs->b < 1 || fs->b > (1 << 20))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "batch_size must be from 1 to 1048576");
  fs->slices = gr_node_attr_int(n, "num_slices", 1);
  fs->slice = gr_node_attr_int(n, "slice_index", 0);
  if (fs->slices < 1 || fs->slice < 0 || fs->slice >= fs->slices || fs->b % fs->slices != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "slice_index %lld of num_slices %lld: needs 0 <= slice_index < "
                        "num_slices and num_slices dividing batch_size %lld",
                        (long long)fs->slice, (long long)fs->slices, (long long)fs->b);
  int cm = find(color_modes, gr_node_attr_string(n, "color_mode", "rgb"));
  if (cm < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "color_mode \"%s\": want \"rgb\", \"grayscale\" or \"rgba\"",
                        gr_node_attr_string(n, "color_mode", ""));
  fs->channels = color_channels[cm];
  if ((double)fs->b * (double)fs->h * (double)fs->w * fs->channels > (double)((int64_t)1 << 34))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "a batch of %lld images of %lld x %lld x %d is too large", (long long)fs->b,
                        (long long)fs->h, (long long)fs->w, fs->channels);
  static const int label_of[] = {GR_LABELS_INT, GR_LABELS_CATEGORICAL, GR_LABELS_BINARY};
  int lm = find(label_modes, gr_node_attr_string(n, "label_mode", "int"));
  if (lm < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "label_mode \"%s\": want \"int\", \"categorical\" or \"binary\"",
                        gr_node_attr_string(n, "label_mode", ""));
  fs->label_mode = label_of[lm];
  int fl = find(flips, gr_node_attr_string(n, "random_flip", ""));
  if (fl < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "random_flip \"%s\": want \"horizontal\", \"vertical\", "
                        "\"horizontal_and_vertical\" or \"\" (none)",
                        gr_node_attr_string(n, "random_flip", ""));
  fs->flip = (int[]){0, GR_FLIP_H, GR_FLIP_V, GR_FLIP_H | GR_FLIP_V}[fl];
  gr_image_subset_spec *s = &fs->subset;
  s->validation_split = gr_node_attr_float(n, "validation_split", 0);
  s->subset = find(subsets, gr_node_attr_string(n, "subset", ""));
  s->seed = (uint64_t)gr_node_attr_int(n, "seed", 0);
  s->shuffle = gr_node_attr_bool(n, "shuffle", true);
  s->num_shards = gr_node_attr_int(n, "num_shards", 1);
  s->shard_index = gr_node_attr_int(n, "shard_index", 0);
  if (s->subset < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "subset \"%s\": want \"training\" or \"validation\"",
                        gr_node_attr_string(n, "subset", ""));
  if (!(s->validation_split >= 0 && s->validation_split < 1))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "validation_split %g is not in [0, 1)",
                        s->validation_split);
  if ((s->validation_split > 0) != (s->subset > 0))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "validation_split and subset go together (Keras): %s",
                        s->subset ? "subset without a validation_split"
                                  : "a validation_split needs subset \"training\" or "
                                    "\"validation\"");
  if (s->num_shards < 1 || s->shard_index < 0 || s->shard_index >= s->num_shards)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "shard_index %lld is not in [0, num_shards = %lld)",
                        (long long)s->shard_index, (long long)s->num_shards);
  fs->max_pixels = gr_node_attr_int(n, "max_pixels", GR_IMAGE_MAX_PIXELS_DEFAULT);
  fs->threads = gr_node_attr_int(n, "threads", 0);
  fs->prefetch = gr_node_attr_int(n, "prefetch", 2);
  if (fs->max_pixels < 1 || fs->threads < 0 || fs->threads > 256 || fs->prefetch < 0 ||
      fs->prefetch > 64)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "need max_pixels >= 1, threads in [0, 256], prefetch in [0, 64]");
  fs->class_names = gr_node_attr_string(n, "class_names", "");
  fs->num_classes = count_lines(fs->class_names);
  fs->num_files = gr_node_attr_int(n, "num_files", 0);
  fs->fingerprint = (uint64_t)gr_node_attr_int(n, "fingerprint", 0);
  if (fs->num_classes < 1 || fs->num_files < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "no listing of the folder in the attrs (class_names, num_files): build "
                        "the node with gr_image_folder or the image_folder(...) call");
  if (fs->label_mode == GR_LABELS_BINARY && fs->num_classes != 2)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "label_mode \"binary\" needs exactly 2 classes, %s has %lld", fs->path,
                        (long long)fs->num_classes);
  fs->count = gr_image_subset_count(fs->num_files, s);
  if (fs->count < fs->b) {
    static const char *const what[] = {"the folder", "the training subset",
                                       "the validation subset"};
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s of %s has %lld images%s, fewer than a batch of %lld", what[s->subset],
                        fs->path, (long long)fs->count, s->num_shards > 1 ? " in this shard" : "",
                        (long long)fs->b);
  }
  return GR_OK;
}

static gr_status folder_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_INDEX));
  if (ctx->in_shapes[0].rank > 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "step must be a scalar");
  folder_spec fs;
  gr_error e;
  if (read_spec(ctx->node, &fs, &e) != GR_OK) return gr_shape_error(ctx, e.code, "%s", e.msg);
  ctx->num_outputs = 3;
  int64_t m = fs.b / fs.slices;
  ctx->out_dtypes[0] = GR_F32;
  ctx->out_shapes[0] = (gr_shape){4, {m, fs.h, fs.w, fs.channels}};
  ctx->out_dtypes[1] = fs.label_mode == GR_LABELS_INT ? GR_I32 : GR_F32;
  ctx->out_shapes[1] = fs.label_mode == GR_LABELS_INT      ? (gr_shape){1, {m}}
                       : fs.label_mode == GR_LABELS_BINARY ? (gr_shape){2, {m, 1}}
                                                           : (gr_shape){2, {m, fs.num_classes}};
  ctx->out_dtypes[2] = GR_I64;
  ctx->out_shapes[2] = (gr_shape){0, {0}};
  return GR_OK;
}

/* The feed of this node, made on first use: lists the folder and checks it
 * is the one the graph was built from. */
static gr_status make_feed(gr_kernel_ctx *ctx, gr_image_feed **out) {
  folder_spec fs;
  if (read_spec(ctx->node, &fs, ctx->err) != GR_OK) return ctx->err->code;
  gr_image_feed_config c = {.root = fs.path,
                            .node = ctx->node->name,
                            .count = fs.count,
                            .batch = fs.b / fs.slices,
                            .global_batch = fs.b,
                            .offset = fs.slice * (fs.b / fs.slices),
                            .height = fs.h,
                            .width = fs.w,
                            .channels = fs.channels,
                            .label_mode = fs.label_mode,
                            .flip = fs.flip,
                            .seed = fs.subset.seed ^ ctx->step->seed,
                            .shuffle = fs.subset.shuffle,
                            .max_pixels = fs.max_pixels,
                            .prefetch = (int)fs.prefetch};
  int cores = gr_num_cores();
  c.threads = fs.threads ? (int)fs.threads : cores < 8 ? cores : 8;
  GR_TRY(gr_image_list_dir(fs.path, &c.list, ctx->err));
  if (c.list.fingerprint != fs.fingerprint || c.list.num_files != fs.num_files ||
      strcmp(c.list.names, fs.class_names) != 0) {
    gr_error_set(ctx->err, GR_ERR_FAILED_PRECONDITION,
                 "%s changed since the graph was built: %lld files in %lld classes then, %lld "
                 "files in %d classes now (or other names): build the graph again",
                 fs.path, (long long)fs.num_files, (long long)fs.num_classes,
                 (long long)c.list.num_files, c.list.num_classes);
    gr_image_list_free(&c.list);
    return GR_ERR_FAILED_PRECONDITION;
  }
  gr_status st = gr_image_subset_files(c.list.num_files, &fs.subset, &c.files, ctx->err);
  if (st != GR_OK) {
    gr_image_list_free(&c.list);
    return st;
  }
  return gr_image_feed_new(&c, out, ctx->err);
}

static void feed_state_free(void *p) {
  gr_image_feed_free(p);
}

static gr_status folder_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *st = &ctx->inputs[0];
  int64_t k = st->dtype == GR_I64 ? *(const int64_t *)gr_tensor_data(st)
                                  : *(const int32_t *)gr_tensor_data(st);
  if (k < 0)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "step %lld is negative", (long long)k);
  if (!*ctx->state) {
    gr_image_feed *f;
    GR_TRY(make_feed(ctx, &f));
    /* two steps of one executor may race here: keep the first */
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(ctx->state, &expected, f, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      gr_image_feed_free(f);
  }
  gr_tensor images, labels, *skipped;
  int64_t n;
  GR_TRY(gr_image_feed_get(*ctx->state, k, &images, &labels, &n, ctx->err));
  gr_tensor_release(&ctx->outputs[0]);
  gr_tensor_release(&ctx->outputs[1]);
  ctx->outputs[0] = images, ctx->outputs[1] = labels;
  GR_TRY(gr_kernel_alloc_output(ctx, 2, GR_I64, &(gr_shape){0, {0}}, &skipped));
  *(int64_t *)gr_tensor_data(skipped) = n;
  return GR_OK;
}

#define STR_DEFAULT(text)                                                                          \
  { .type = GR_ATTR_STRING, .s = text }
#define INT_DEFAULT(value)                                                                         \
  { .type = GR_ATTR_INT, .i = value }

static const gr_attr_spec folder_attrs[] = {
    {"path", GR_ATTR_STRING, true, {0}},
    {"size", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {2, (int64_t[]){256, 256}}}},
    {"batch_size", GR_ATTR_INT, false, INT_DEFAULT(32)},
    {"color_mode", GR_ATTR_STRING, false, STR_DEFAULT("rgb")},
    {"label_mode", GR_ATTR_STRING, false, STR_DEFAULT("int")},
    {"validation_split", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0}},
    {"subset", GR_ATTR_STRING, false, STR_DEFAULT("")},
    {"seed", GR_ATTR_INT, false, INT_DEFAULT(0)},
    {"shuffle", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}},
    {"num_shards", GR_ATTR_INT, false, INT_DEFAULT(1)},
    {"shard_index", GR_ATTR_INT, false, INT_DEFAULT(0)},
    {"num_slices", GR_ATTR_INT, false, INT_DEFAULT(1)},
    {"slice_index", GR_ATTR_INT, false, INT_DEFAULT(0)},
    {"random_flip", GR_ATTR_STRING, false, STR_DEFAULT("")},
    {"max_pixels", GR_ATTR_INT, false, INT_DEFAULT(GR_IMAGE_MAX_PIXELS_DEFAULT)},
    {"threads", GR_ATTR_INT, false, INT_DEFAULT(0)},
    {"prefetch", GR_ATTR_INT, false, INT_DEFAULT(2)},
    {"class_names", GR_ATTR_STRING, false, STR_DEFAULT("")},
    {"num_files", GR_ATTR_INT, false, INT_DEFAULT(0)},
    {"fingerprint", GR_ATTR_INT, false, INT_DEFAULT(0)}};

const gr_op_def gr_op_image_folder = {
    .name = "image_folder",
    .doc = "batch number `step` of the images of a folder of class sub-folders (attr path), as "
           "Keras' image_dataset_from_directory: images f32 [batch_size, h, w, c] (0..255, "
           "resized bilinearly to attr size), labels (label_mode int: i32 [b]; categorical: f32 "
           "[b, classes]; binary: f32 [b, 1]) and the i64 count of unreadable files skipped; "
           "with num_slices, only rows slice_index * b / num_slices ... of the batch (one "
           "replica's part); attrs class_names, num_files, fingerprint record the listing "
           "(docs/training.md)",
    .min_inputs = 1,
    .max_inputs = 1,
    .input_names = (const char *const[]){"step"},
    .num_outputs = 3,
    .attrs = folder_attrs,
    .num_attrs = sizeof folder_attrs / sizeof folder_attrs[0],
    .shape_fn = folder_shape,
    .kernel = folder_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT | GR_OP_EXPENSIVE,
    .state_free = feed_state_free};

/* ---- the builder -------------------------------------------------------------------------- */

void gr_image_folder_options_init(gr_image_folder_options *o) {
  *o = (gr_image_folder_options){.height = 256,
                                 .width = 256,
                                 .batch_size = 32,
                                 .color_mode = "rgb",
                                 .label_mode = "int",
                                 .shuffle = true,
                                 .num_shards = 1,
                                 .max_pixels = GR_IMAGE_MAX_PIXELS_DEFAULT,
                                 .prefetch = 2};
}

gr_output gr_image_folder(gr_graph *g, gr_output step, const char *dir,
                          const gr_image_folder_options *o) {
  gr_image_folder_options d;
  if (!o) gr_image_folder_options_init(&d), o = &d;
  if (!dir) return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "image_folder: no folder");
  gr_image_list list;
  gr_error err;
  if (gr_image_list_dir(dir, &list, &err) != GR_OK)
    return gr_ops_fail(g, err.code, "image_folder: %s", err.msg);
  int64_t size[2] = {o->height, o->width};
  gr_attr a[] = {gr_attr_string("path", dir),
                 gr_attr_ints("size", 2, size),
                 gr_attr_int("batch_size", o->batch_size),
                 gr_attr_string("color_mode", o->color_mode ? o->color_mode : "rgb"),
                 gr_attr_string("label_mode", o->label_mode ? o->label_mode : "int"),
                 gr_attr_float("validation_split", o->validation_split),
                 gr_attr_string("subset", o->subset ? o->subset : ""),
                 gr_attr_int("seed", o->seed),
                 gr_attr_bool("shuffle", o->shuffle),
                 gr_attr_int("num_shards", o->num_shards),
                 gr_attr_int("shard_index", o->shard_index),
                 gr_attr_string("random_flip", o->random_flip ? o->random_flip : ""),
                 gr_attr_int("max_pixels", o->max_pixels),
                 gr_attr_int("threads", o->threads),
                 gr_attr_int("prefetch", o->prefetch),
                 gr_attr_string("class_names", list.names),
                 gr_attr_int("num_files", list.num_files),
                 gr_attr_int("fingerprint", (int64_t)list.fingerprint)};
  gr_output out = gr_ops_build(g, "image_folder", NULL, &step, 1, a, sizeof a / sizeof a[0]);
  gr_image_list_free(&list);
  return out;
}

char **gr_image_folder_class_names(gr_output o, int *n) {
  *n = 0;
  if (!o.node || (o.node->op != &gr_op_image_folder && o.node->op != &gr_op_image_input))
    return NULL;
  const char *names = gr_node_attr_string(o.node, "class_names", "");
  int k = count_lines(names);
  size_t len = strlen(names) + 1, ptrs = (size_t)(k + 1) * sizeof(char *);
  char **out = malloc(ptrs + len); /* the pointers, then the names they point into */
  if (!out) return NULL;
  char *text = (char *)out + ptrs;
  memcpy(text, names, len);
  for (int i = 0; i < k; i++) {
    out[i] = text;
    text += strcspn(text, "\n");
    if (*text) *text++ = '\0';
  }
  out[k] = NULL;
  *n = k;
  return out;
}

int64_t gr_image_folder_num_images(gr_output o) {
  if (!o.node || o.node->op != &gr_op_image_folder) return -1;
  folder_spec fs;
  gr_error e;
  return read_spec(o.node, &fs, &e) == GR_OK ? fs.count : -1;
}
