/* Images: PNG and JPEG decoding (libpng, libjpeg-turbo), bilinear resizing
 * as Keras does it, and the image_folder op, which reads a folder of class
 * sub-folders as Keras' image_dataset_from_directory (docs/training.md,
 * "Image folders").
 *
 *   gr_image_folder_options o;
 *   gr_image_folder_options_init(&o);           // Keras' defaults: 256x256, batch 32, rgb, int
 *   o.height = o.width = 180;
 *   o.validation_split = 0.2, o.subset = "training", o.seed = 123;
 *   gr_output b = gr_image_folder(g, gr_global_step(g), "data/train", &o);
 *   gr_output images = gr_output_at(b, 0);      // f32 [32, 180, 180, 3], values 0..255
 *   gr_output labels = gr_output_at(b, 1);      // i32 [32]
 *
 * Ownership: a decoded gr_image owns its pixels (gr_image_free). The
 * decoders are reentrant: any number of threads may decode at once. */
#ifndef GR_IMAGES_H
#define GR_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gr_core.h"

/* The largest image decoded by default: 2^26 pixels (8192 x 8192). A file
 * whose header announces more is refused before any pixel memory is
 * allocated. */
#define GR_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)1 << 26)

/* 8-bit pixels, row-major, channels interleaved (height x width x channels). */
typedef struct gr_image {
  int64_t height, width;
  int channels;    /* 1 gray, 3 RGB, 4 RGBA */
  uint8_t *pixels; /* malloc'd */
} gr_image;

/* Decodes a PNG or JPEG held in data[0..len) (the format from its first
 * bytes) into channels 1, 3 or 4, converting as TensorFlow's decode_image
 * does: gray is repeated to RGB, RGB becomes gray by 0.299 R + 0.587 G +
 * 0.114 B (libpng's and libjpeg's own conversions), alpha is dropped or
 * added opaque; 16-bit PNG samples keep their high byte; palettes and
 * transparency chunks are expanded. A truncated or corrupt file, a CMYK
 * JPEG, an image of more than max_pixels pixels (<= 0: the default) or
 * anything else is an error (GR_ERR_INVALID_ARGUMENT, GR_ERR_DATA_LOSS for a
 * truncated or corrupt file, GR_ERR_RESOURCE_EXHAUSTED for too many pixels)
 * whose message says why; nothing is left allocated then. */
gr_status gr_image_decode(const void *data, size_t len, int channels, int64_t max_pixels,
                          gr_image *out, gr_error *err);
/* The same for a file; messages start with its path. Files over 1 GiB are
 * refused. */
gr_status gr_image_read(const char *path, int channels, int64_t max_pixels, gr_image *out,
                        gr_error *err);
void gr_image_free(gr_image *img);
/* Writes img (1, 3 or 4 channels) as an 8-bit PNG, or as a baseline JPEG of
 * quality 1..100 (alpha dropped), through a temporary file and a rename;
 * errors name path. */
gr_status gr_image_write_png(const char *path, const gr_image *img, gr_error *err);
gr_status gr_image_write_jpeg(const char *path, const gr_image *img, int quality, gr_error *err);

/* Resizes img to out_h x out_w into out (out_h * out_w * channels floats,
 * values 0..255) with bilinear interpolation and half-pixel centres,
 * ignoring the aspect ratio: tf.image.resize(method="bilinear",
 * antialias=False), which Keras' image loaders use. The same size copies. */
void gr_image_resize_bilinear(const gr_image *img, int64_t out_h, int64_t out_w, float *out);

/* ---- image_folder ------------------------------------------------------------ */

typedef struct gr_image_folder_options {
  int64_t height, width;           /* the size every image is resized to (default 256 x 256) */
  int64_t batch_size;              /* default 32 */
  const char *color_mode;          /* "rgb" (default), "grayscale" or "rgba" */
  const char *label_mode;          /* "int" (default: i32 [b]), "categorical" (f32 one-hot
                                      [b, classes]) or "binary" (f32 [b, 1]; two classes) */
  double validation_split;         /* 0 (default): no split; else in (0, 1) */
  const char *subset;              /* with a split: "training" or "validation" */
  int64_t seed;                    /* the split and the shuffling (default 0) */
  bool shuffle;                    /* default true */
  int64_t num_shards, shard_index; /* the subset's files i % num_shards == shard_index */
  const char *random_flip;         /* NULL or "": none; "horizontal", "vertical" or
                                      "horizontal_and_vertical" (Keras' RandomFlip), per image */
  int64_t max_pixels; /* larger images are skipped (default GR_IMAGE_MAX_PIXELS_DEFAULT) */
  int64_t threads;    /* decoding threads (0, default: one per core, at most 8) */
  int64_t prefetch;   /* batches decoded ahead (default 2; 0: none) */
} gr_image_folder_options;

void gr_image_folder_options_init(gr_image_folder_options *o);
/* Lists dir (class sub-folders in sorted order, their .png/.jpg/.jpeg files
 * in sorted path order, as Keras) and adds an image_folder node: outputs
 * images f32 [b, h, w, c] (0..255), labels, and the i64 count of files it
 * skipped so far as unreadable. The node's attrs record the listing
 * (class_names: the names, one a line; num_files; fingerprint), so the
 * graph, also serialized, knows its classes without the folder; a run
 * checks that the folder still lists the same files. step: the batch
 * number (i32/i64 scalar), as for gr_batch. */
gr_output gr_image_folder(gr_graph *g, gr_output step, const char *dir,
                          const gr_image_folder_options *o);
/* The class names of the image_folder or image_input node behind o (any
 * of its outputs), in label order: *n names, NULL-terminated, in one
 * malloc'd block (one free() releases it); *n is 0 for an image_input
 * without class names. NULL with *n = 0 when o is not such an output or
 * out of memory. */
char **gr_image_folder_class_names(gr_output o, int *n);
/* The number of images the image_folder node behind o reads per epoch (its
 * subset and shard), from its attrs; -1 when o is not such an output. An
 * epoch is that number divided by the batch size (the rest is dropped). */
int64_t gr_image_folder_num_images(gr_output o);

/* ---- image_input ---------------------------------------------------------------- */

/* The input of an inference graph (graphrun export --inference, graphrun
 * predict): a placeholder (GR_OP_PLACEHOLDER: it must be fed) for a batch
 * of images of pixel values 0..255, that records how pictures are
 * prepared for the model: shape [?, h, w, c] (or [?, h, w], gray) is the
 * size they are resized to (gr_image_resize_bilinear, as image_folder
 * does) and their channels (1 grayscale, 3 rgb, 4 rgba: attr color_mode),
 * and class_names (one a line, in label order; "" when unknown) the names
 * of the model's classes. dtype f32 or u8. */
gr_output gr_image_input(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape,
                         const char *class_names);
/* The pictures node n takes as an input: an image_input node, or a
 * placeholder of dtype f32 or u8 and shape [?, h, w, c] (c 1, 3 or 4) or
 * [?, h, w] (gray), h and w known. Sets *height, *width and *channels and
 * returns true; false (and zeros) when n is neither. */
bool gr_image_input_geometry(const gr_node *n, int64_t *height, int64_t *width, int *channels);
/* Reads the picture at path as such an input wants it, as image_folder
 * prepares its images: decoded into `channels` channels (gr_image_read,
 * PNG or JPEG; max_pixels <= 0: the default), resized to height x width
 * (gr_image_resize_bilinear), stored at dst as height * width * channels
 * elements of dtype (f32: values 0..255; u8: rounded). Errors start with
 * path (a truncated, corrupt, huge or unreadable file: gr_image_read's);
 * dst is unspecified then. */
gr_status gr_image_read_resized(const char *path, int64_t height, int64_t width, int channels,
                                gr_dtype dtype, int64_t max_pixels, void *dst, gr_error *err);

#endif
