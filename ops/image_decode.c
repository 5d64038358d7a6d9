/* PNG and JPEG decoding into 8-bit pixels (gr_images.h), with libpng and
 * libjpeg-turbo reading from memory. Both libraries report errors through
 * longjmp: every allocation made before a setjmp point is released on the
 * way out, and the pixel buffer is allocated only after the header's size
 * has been checked against max_pixels. Reentrant: all state is on the
 * caller's stack. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "ops/image_internal.h"

#define MAX_FILE_BYTES ((size_t)1 << 30)

static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static gr_status too_many_pixels(gr_error *err, int64_t w, int64_t h, int64_t max_pixels) {
  return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED,
                      "%lld x %lld pixels is more than the limit of %lld pixels (max_pixels)",
                      (long long)w, (long long)h, (long long)max_pixels);
}

static bool valid_channels(int c) {
  return c == 1 || c == 3 || c == 4;
}

/* ---- PNG ------------------------------------------------------------------------------ */

typedef struct png_src {
  const unsigned char *data;
  size_t len, pos;
  char msg[GR_PNG_MSG_MAX]; /* libpng's error message */
} png_src;

void gr_png_error_fn(png_structp png, png_const_charp msg) {
  snprintf(png_get_error_ptr(png), GR_PNG_MSG_MAX, "%s", msg);
  png_longjmp(png, 1);
}

void gr_png_warning_fn(png_structp png, png_const_charp msg) {
  (void)png, (void)msg; /* benign (an ancillary chunk dropped, ...) */
}

static void png_read_fn(png_structp png, png_bytep dst, size_t n) {
  png_src *s = png_get_io_ptr(png);
  if (n > s->len - s->pos) png_error(png, "the file ends early (truncated)");
  memcpy(dst, s->data + s->pos, n);
  s->pos += n;
}

/* The transforms that make libpng deliver `channels` 8-bit samples. */
static void png_transforms(png_structp png, png_infop info, int channels) {
  int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  bool color = (type & PNG_COLOR_MASK_COLOR) != 0;
  bool alpha = (type & PNG_COLOR_MASK_ALPHA) != 0 || trns;
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (trns) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_strip_16(png);
  if (channels == 1) {
    if (color) png_set_rgb_to_gray(png, PNG_ERROR_ACTION_NONE, 0.299, 0.587);
    if (alpha) png_set_strip_alpha(png);
  } else {
    if (!color) png_set_gray_to_rgb(png);
    if (channels == 3 && alpha) png_set_strip_alpha(png);
    if (channels == 4 && !alpha) png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

static gr_status decode_png(const void *data, size_t len, int channels, int64_t max_pixels,
                            gr_image *out, gr_error *err) {
  png_src src = {.data = data, .len = len};
  /* volatile: changed after setjmp and read after a longjmp */
  uint8_t *volatile pixels = NULL;
  png_bytep *volatile rows = NULL;
  gr_status volatile st = GR_OK;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, src.msg, gr_png_error_fn, gr_png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return gr_error_set_oom(err);
  }
  if (setjmp(png_jmpbuf(png))) {
    if (st == GR_OK)
      st = gr_error_set(err, GR_ERR_DATA_LOSS, "corrupt or truncated PNG: %s", src.msg);
    goto done;
  }
  png_set_read_fn(png, &src, png_read_fn);
  /* libpng's own limits, above ours: it refuses wider headers itself */
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  int64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w * h > max_pixels) {
    st = too_many_pixels(err, w, h, max_pixels);
    goto done;
  }
  png_transforms(png, info, channels);
  size_t row = (size_t)w * (size_t)channels;
  if (png_get_rowbytes(png, info) != row) { /* the transforms above always give this */
    st = gr_error_set(err, GR_ERR_INTERNAL, "PNG: unexpected row size %zu (want %zu)",
                      (size_t)png_get_rowbytes(png, info), row);
    goto done;
  }
  pixels = gr_alloc_array((size_t)h, row ? row : 1);
  rows = gr_alloc_array((size_t)h ? (size_t)h : 1, sizeof(png_bytep));
  if (!pixels || !rows) {
    st = gr_error_set_oom(err);
    goto done;
  }
  for (int64_t y = 0; y < h; y++) rows[y] = pixels + (size_t)y * row;
  png_read_image(png, rows);
  *out = (gr_image){.height = h, .width = w, .channels = channels, .pixels = pixels};
  pixels = NULL;
done:
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  free(pixels);
  return st;
}

/* ---- JPEG ----------------------------------------------------------------------------- */

typedef struct jpeg_err {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
  bool corrupt; /* a warning that the data is damaged (truncated, bad Huffman code, ...) */
} jpeg_err;

static void jpeg_error_exit_fn(j_common_ptr cinfo) {
  jpeg_err *e = (jpeg_err *)cinfo->err;
  cinfo->err->format_message(cinfo, e->msg);
  longjmp(e->jump, 1);
}

/* Warnings (level -1) mean damaged data, except bytes between markers;
 * trace messages (level >= 0) are ignored. */
static void jpeg_emit_fn(j_common_ptr cinfo, int level) {
  jpeg_err *e = (jpeg_err *)cinfo->err;
  if (level >= 0 || cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA || e->corrupt) return;
  e->corrupt = true;
  cinfo->err->format_message(cinfo, e->msg);
}

/* A progressive JPEG may hold any number of scans, each a pass over the
 * whole image: a small hostile file could keep a thread busy for minutes.
 * More than MAX_SCANS (libjpeg-turbo's own fuzzers' limit) is an error. */
#define MAX_SCANS 500

static void jpeg_progress_fn(j_common_ptr cinfo) {
  j_decompress_ptr d = (j_decompress_ptr)cinfo;
  if (cinfo->is_decompressor && d->input_scan_number > MAX_SCANS) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", MAX_SCANS);
    longjmp(e->jump, 1);
  }
}

static gr_status decode_jpeg(const void *data, size_t len, int channels, int64_t max_pixels,
                             gr_image *out, gr_error *err) {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_progress_mgr progress = {.progress_monitor = jpeg_progress_fn};
  jpeg_err jerr;
  uint8_t *volatile pixels = NULL;
  gr_status volatile st = GR_OK;
  memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&jerr.pub);
  jerr.pub.error_exit = jpeg_error_exit_fn;
  jerr.pub.emit_message = jpeg_emit_fn;
  jerr.corrupt = false;
  jerr.msg[0] = '\0';
  if (setjmp(jerr.jump)) {
    if (st == GR_OK)
      st = gr_error_set(err, GR_ERR_DATA_LOSS, "corrupt or truncated JPEG: %s", jerr.msg);
    goto done;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, (unsigned long)len);
  jpeg_read_header(&cinfo, TRUE);
  int64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w * h > max_pixels) {
    st = too_many_pixels(err, w, h, max_pixels);
    goto done;
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "CMYK JPEGs are not supported");
    goto done;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  int comps = cinfo.output_components;
  if ((int64_t)cinfo.output_width != w || (int64_t)cinfo.output_height != h ||
      comps != (channels == 1 ? 1 : 3)) {
    st = gr_error_set(err, GR_ERR_INTERNAL, "JPEG: unexpected output %ux%ux%d", cinfo.output_width,
                      cinfo.output_height, comps);
    goto done;
  }
  size_t row = (size_t)w * (size_t)channels;
  if (!(pixels = gr_alloc_array((size_t)h ? (size_t)h : 1, row ? row : 1))) {
    st = gr_error_set_oom(err);
    goto done;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t *dst = pixels + (size_t)cinfo.output_scanline * row;
    JSAMPROW r = dst;
    jpeg_read_scanlines(&cinfo, &r, 1);
    if (channels == 4) /* RGB -> RGBA in place, from the right */
      for (int64_t x = w - 1; x >= 0; x--) {
        uint8_t R = dst[3 * x], G = dst[3 * x + 1], B = dst[3 * x + 2];
        dst[4 * x] = R, dst[4 * x + 1] = G, dst[4 * x + 2] = B, dst[4 * x + 3] = 0xff;
      }
  }
  jpeg_finish_decompress(&cinfo);
  if (jerr.corrupt) {
    st = gr_error_set(err, GR_ERR_DATA_LOSS, "corrupt or truncated JPEG: %s", jerr.msg);
    goto done;
  }
  *out = (gr_image){.height = h, .width = w, .channels = channels, .pixels = pixels};
  pixels = NULL;
done:
  jpeg_destroy_decompress(&cinfo);
  free(pixels);
  return st;
}

/* ---- the API ------------------------------------------------------------------------------ */

gr_status gr_image_decode(const void *data, size_t len, int channels, int64_t max_pixels,
                          gr_image *out, gr_error *err) {
  memset(out, 0, sizeof *out);
  if (!valid_channels(channels))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "channels must be 1, 3 or 4, not %d",
                        channels);
  if (max_pixels <= 0) max_pixels = GR_IMAGE_MAX_PIXELS_DEFAULT;
  const unsigned char *d = data;
  if (len >= 8 && memcmp(d, png_magic, 8) == 0)
    return decode_png(data, len, channels, max_pixels, out, err);
  if (len >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
    return decode_jpeg(data, len, channels, max_pixels, out, err);
  if (len == 0) return gr_error_set(err, GR_ERR_DATA_LOSS, "the file is empty");
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "not a PNG or JPEG image (its first bytes are neither's signature)");
}

void gr_image_free(gr_image *img) {
  if (!img) return;
  free(img->pixels);
  img->pixels = NULL;
}

/* The whole file into *data (malloc'd). */
static gr_status read_file(const char *path, unsigned char **data, size_t *len, gr_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "%s: cannot open: %s", path, strerror(errno));
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  gr_status st = GR_OK;
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_FILE_BYTES) {
        st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: larger than 1 GiB", path);
        break;
      }
      size_t ncap = cap ? cap * 2 : 1 << 16;
      unsigned char *b = realloc(buf, ncap);
      if (!b) {
        st = gr_error_set_oom(err);
        break;
      }
      buf = b, cap = ncap;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f))
        st = gr_error_set(err, GR_ERR_DATA_LOSS, "%s: read error: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (st != GR_OK) {
    free(buf);
    return st;
  }
  *data = buf, *len = n;
  return GR_OK;
}

gr_status gr_image_read(const char *path, int channels, int64_t max_pixels, gr_image *out,
                        gr_error *err) {
  memset(out, 0, sizeof *out);
  unsigned char *data = NULL;
  size_t len = 0;
  GR_TRY(read_file(path, &data, &len, err));
  gr_status st = gr_image_decode(data, len, channels, max_pixels, out, err);
  free(data);
  if (st != GR_OK) {
    char msg[GR_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    gr_error_set(err, st, "%s: %s", path, msg);
  }
  return st;
}
