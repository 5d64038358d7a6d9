/* Writing 8-bit images as PNG (libpng) and JPEG (libjpeg-turbo) files
 * (gr_images.h): what tools and tests use to make folders of images. The
 * file is written under a temporary name and renamed, so a failed write
 * leaves nothing under the name. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "ops/image_internal.h"

static gr_status check_image(const gr_image *img, const char *path, gr_error *err) {
  if (!img || !img->pixels || img->height < 1 || img->width < 1 || img->height > 0x7fffffff ||
      img->width > 0x7fffffff || !(img->channels == 1 || img->channels == 3 || img->channels == 4))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s: want an image of 1, 3 or 4 channels and a positive size", path);
  return GR_OK;
}

static bool write_png(FILE *f, const gr_image *img, char *msg, size_t cap) {
  char pmsg[GR_PNG_MSG_MAX] = "";
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, pmsg, gr_png_error_fn, gr_png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_write_struct(png ? &png : NULL, NULL);
    snprintf(msg, cap, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    snprintf(msg, cap, "%s", pmsg);
    return false;
  }
  static const int types[] = {0, PNG_COLOR_TYPE_GRAY, 0, PNG_COLOR_TYPE_RGB,
                              PNG_COLOR_TYPE_RGB_ALPHA};
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8,
               types[img->channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  size_t row = (size_t)img->width * (size_t)img->channels;
  for (int64_t y = 0; y < img->height; y++) png_write_row(png, img->pixels + (size_t)y * row);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return true;
}

typedef struct jpeg_out {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
} jpeg_out;

static void jpeg_err_exit(j_common_ptr c) {
  longjmp(((jpeg_out *)c->err)->jump, 1);
}

static bool write_jpeg(FILE *f, const gr_image *img, int quality, char *msg, size_t cap) {
  struct jpeg_compress_struct c;
  jpeg_out e;
  uint8_t *volatile rgb = NULL;
  memset(&c, 0, sizeof c);
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_err_exit;
  if (setjmp(e.jump)) {
    c.err->format_message((j_common_ptr)&c, msg);
    (void)cap;
    jpeg_destroy_compress(&c);
    free(rgb);
    return false;
  }
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = (JDIMENSION)img->width;
  c.image_height = (JDIMENSION)img->height;
  c.input_components = img->channels == 1 ? 1 : 3;
  c.in_color_space = img->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  if (img->channels == 4 && !(rgb = malloc((size_t)img->width * 3))) {
    snprintf(msg, cap, "out of memory");
    jpeg_destroy_compress(&c);
    return false;
  }
  while (c.next_scanline < c.image_height) {
    uint8_t *src = img->pixels + (size_t)c.next_scanline * (size_t)img->width * img->channels;
    if (img->channels == 4) { /* JPEG has no alpha: dropped */
      for (int64_t x = 0; x < img->width; x++) memcpy(rgb + 3 * x, src + 4 * x, 3);
      src = rgb;
    }
    JSAMPROW r = src;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(rgb);
  return true;
}

static gr_status write_file(const char *path, const gr_image *img, int quality, gr_error *err) {
  GR_TRY(check_image(img, path, err));
  size_t n = strlen(path) + 8;
  char *tmp = malloc(n);
  if (!tmp) return gr_error_set_oom(err);
  snprintf(tmp, n, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    gr_status st =
        gr_error_set(err, GR_ERR_NOT_FOUND, "%s: cannot write: %s", tmp, strerror(errno));
    free(tmp);
    return st;
  }
  char msg[JMSG_LENGTH_MAX > 200 ? JMSG_LENGTH_MAX : 200] = "";
  bool ok = quality > 0 ? write_jpeg(f, img, quality, msg, sizeof msg)
                        : write_png(f, img, msg, sizeof msg);
  if (fclose(f) != 0 && ok) ok = false, snprintf(msg, sizeof msg, "%s", strerror(errno));
  if (ok && rename(tmp, path) != 0) ok = false, snprintf(msg, sizeof msg, "%s", strerror(errno));
  gr_status st = ok ? GR_OK : gr_error_set(err, GR_ERR_DATA_LOSS, "%s: %s", path, msg);
  if (!ok) remove(tmp);
  free(tmp);
  return st;
}

gr_status gr_image_write_png(const char *path, const gr_image *img, gr_error *err) {
  return write_file(path, img, 0, err);
}

gr_status gr_image_write_jpeg(const char *path, const gr_image *img, int quality, gr_error *err) {
  if (quality < 1 || quality > 100)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: JPEG quality %d is not in [1, 100]",
                        path, quality);
  return write_file(path, img, quality, err);
}
