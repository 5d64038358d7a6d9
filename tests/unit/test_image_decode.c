/* PNG and JPEG decoding and bilinear resizing (ops/gr_images.h).
 *
 * PNG is lossless: files of every colour type, bit depth and interlacing
 * are written here with libpng from known pixels, and the decoded pixels
 * must be those (converted as TensorFlow's decode_image does). JPEG is
 * lossy: files are written with libjpeg (and made progressive by Debian's
 * cjpeg), and the decoded pixels must equal, byte for byte, what Debian's
 * djpeg (libjpeg-turbo-progs) writes for the same file. Damaged files
 * (every truncation of a PNG, a cut JPEG, flipped bytes, headers that
 * announce 30000 x 30000 pixels) must be refused with a message, never
 * crash, never decode to made-up pixels. Resizing is compared with a plain
 * double-precision reference and with values TensorFlow's resize gives. */
#include <graphrun.h>
#include <jpeglib.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "gr_test.h"
#include "test_util.h"

static char tmpdir[256];

static const char *tmp(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, 512, "%s/%s", tmpdir, name);
  return b;
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
  *len = fread(d, 1, (size_t)n, f);
  fclose(f);
  return d;
}

/* A pattern every pixel of which differs from its neighbours. */
static uint8_t pattern(int64_t y, int64_t x, int k) {
  return (uint8_t)(y * 37 + x * 11 + k * 71 + ((x * y) % 13) * 5);
}

/* ---- PNG files written with libpng ------------------------------------------------------ */

typedef struct png_case {
  const char *name;
  int color_type, bit_depth;
  bool interlace, trns;
} png_case;

/* Writes a w x h PNG of the case; *src gets the samples written (channels
 * of the colour type, 16-bit samples as two bytes big-endian in a uint16). */
static void write_png(const char *path, const png_case *c, int w, int h, uint16_t **src,
                      int *src_channels, png_color *palette) {
  FILE *f = fopen(path, "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, c->bit_depth, c->color_type,
               c->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  int ch = c->color_type == PNG_COLOR_TYPE_GRAY         ? 1
           : c->color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
           : c->color_type == PNG_COLOR_TYPE_RGB        ? 3
           : c->color_type == PNG_COLOR_TYPE_RGBA       ? 4
                                                        : 1; /* palette index */
  if (c->color_type == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < 16; i++)
      palette[i] = (png_color){pattern(i, 0, 0), pattern(i, 1, 1), pattern(i, 2, 2)};
    png_set_PLTE(png, info, palette, 16);
  }
  if (c->trns) {
    png_byte alpha[16];
    for (int i = 0; i < 16; i++) alpha[i] = (png_byte)(i * 17);
    png_set_tRNS(png, info, alpha, 16, NULL);
  }
  png_write_info(png, info);
  int maxv = (1 << c->bit_depth) - 1;
  if (c->color_type == PNG_COLOR_TYPE_PALETTE) maxv = 15;
  *src = malloc(sizeof(uint16_t) * (size_t)(w * h * ch));
  *src_channels = ch;
  size_t rowbytes = png_get_rowbytes(png, info);
  png_bytep *rows = malloc(sizeof(png_bytep) * (size_t)h);
  for (int y = 0; y < h; y++) {
    rows[y] = calloc(rowbytes, 1);
    for (int x = 0; x < w; x++)
      for (int k = 0; k < ch; k++) {
        uint16_t v = c->bit_depth == 16 ? (uint16_t)(pattern(y, x, k) * 257 + (x & 7))
                                        : (uint16_t)(pattern(y, x, k) % (maxv + 1));
        (*src)[(y * w + x) * ch + k] = v;
        if (c->bit_depth == 16) {
          rows[y][2 * (x * ch + k)] = (png_byte)(v >> 8);
          rows[y][2 * (x * ch + k) + 1] = (png_byte)v;
        } else if (c->bit_depth == 8) {
          rows[y][x * ch + k] = (png_byte)v;
        } else { /* packed, most significant bits first */
          int per = 8 / c->bit_depth, bit = 8 - c->bit_depth * (x % per + 1);
          rows[y][x / per] |= (png_byte)(v << bit);
        }
      }
  }
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
  for (int y = 0; y < h; y++) free(rows[y]);
  free(rows);
}

/* A source sample as 8 bits: gray of low depth scaled as libpng expands it;
 * 16-bit keeps the high byte. */
static int to8(const png_case *c, uint16_t v) {
  if (c->bit_depth == 16) return v >> 8;
  if (c->color_type == PNG_COLOR_TYPE_PALETTE || c->bit_depth == 8) return v;
  return v * 255 / ((1 << c->bit_depth) - 1);
}

/* The RGBA of source pixel p. */
static void rgba_of(const png_case *c, const uint16_t *src, int ch, const png_color *pal, int p,
                    int out[4]) {
  const uint16_t *s = src + p * ch;
  out[3] = 255;
  switch (c->color_type) {
    case PNG_COLOR_TYPE_PALETTE:
      out[0] = pal[s[0]].red, out[1] = pal[s[0]].green, out[2] = pal[s[0]].blue;
      if (c->trns) out[3] = s[0] * 17;
      break;
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      out[0] = out[1] = out[2] = to8(c, s[0]);
      if (ch == 2) out[3] = to8(c, s[1]);
      break;
    default:
      for (int k = 0; k < 3; k++) out[k] = to8(c, s[k]);
      if (ch == 4) out[3] = to8(c, s[3]);
  }
}

static void test_png_every_kind(void) {
  static const png_case cases[] = {
      {"gray8", PNG_COLOR_TYPE_GRAY, 8, false, false},
      {"gray1", PNG_COLOR_TYPE_GRAY, 1, false, false},
      {"gray2", PNG_COLOR_TYPE_GRAY, 2, false, false},
      {"gray4", PNG_COLOR_TYPE_GRAY, 4, false, false},
      {"gray16", PNG_COLOR_TYPE_GRAY, 16, false, false},
      {"gray_alpha", PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, false},
      {"rgb", PNG_COLOR_TYPE_RGB, 8, false, false},
      {"rgb_interlaced", PNG_COLOR_TYPE_RGB, 8, true, false},
      {"rgb16", PNG_COLOR_TYPE_RGB, 16, false, false},
      {"rgba", PNG_COLOR_TYPE_RGBA, 8, false, false},
      {"rgba16_interlaced", PNG_COLOR_TYPE_RGBA, 16, true, false},
      {"palette", PNG_COLOR_TYPE_PALETTE, 4, false, false},
      {"palette_trns", PNG_COLOR_TYPE_PALETTE, 8, false, true},
  };
  const int w = 13, h = 7; /* odd sizes: packed rows end mid-byte, interlacing has empty passes */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const png_case *c = &cases[i];
    uint16_t *src;
    int ch;
    png_color pal[16];
    const char *path = tmp("t.png");
    write_png(path, c, w, h, &src, &ch, pal);
    for (int want = 1; want <= 4; want++) {
      if (want == 2) continue;
      gr_image img;
      gr_error err;
      gr_status st = gr_image_read(path, want, 0, &img, &err);
      GR_CHECK_MSG(st == GR_OK, "%s -> %d channels: %s", c->name, want, err.msg);
      if (st != GR_OK) continue;
      GR_CHECK(img.width == w && img.height == h && img.channels == want);
      int bad = 0;
      for (int p = 0; p < w * h; p++) {
        int rgba[4];
        rgba_of(c, src, ch, pal, p, rgba);
        const uint8_t *got = img.pixels + p * want;
        if (want == 1) {
          bool gray_src =
              c->color_type == PNG_COLOR_TYPE_GRAY || c->color_type == PNG_COLOR_TYPE_GRAY_ALPHA;
          double y = gray_src ? rgba[0] : 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2];
          if (fabs(got[0] - y) > 1.0) bad++; /* libpng rounds its fixed-point weights */
        } else {
          for (int k = 0; k < want; k++)
            if (got[k] != rgba[k]) bad++;
        }
      }
      GR_CHECK_MSG(bad == 0, "%s -> %d channels: %d samples differ", c->name, want, bad);
      gr_image_free(&img);
    }
    free(src);
  }
}

/* ---- JPEG against djpeg ---------------------------------------------------------------- */

/* Runs a shell command; its exit status. */
static int sh(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A binary PPM (P6) or PGM (P5) as written by djpeg. */
static uint8_t *read_pnm(const char *path, int *w, int *h, int *ch) {
  size_t len;
  uint8_t *d = read_all(path, &len);
  if (!d) return NULL;
  int maxv, off = 0;
  char magic[3] = {0};
  if (sscanf((char *)d, "%2s %d %d %d%n", magic, w, h, &maxv, &off) != 4 || maxv != 255) {
    free(d);
    return NULL;
  }
  *ch = magic[1] == '6' ? 3 : 1;
  off++; /* the one whitespace after maxval */
  uint8_t *px = malloc((size_t)(*w * *h * *ch));
  memcpy(px, d + off, (size_t)(*w * *h * *ch));
  free(d);
  return px;
}

static void write_test_jpeg(const char *path, int w, int h, int comps, J_COLOR_SPACE cs, int q) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  FILE *f = fopen(path, "wb");
  jpeg_stdio_dest(&c, f);
  c.image_width = w, c.image_height = h, c.input_components = comps, c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, q, TRUE);
  jpeg_start_compress(&c, TRUE);
  uint8_t *row = malloc((size_t)(w * comps));
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < w; x++)
      for (int k = 0; k < comps; k++) row[x * comps + k] = pattern(c.next_scanline, x, k);
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  fclose(f);
  free(row);
}

/* Decodes path into `channels` and compares with djpeg's output (flags). */
static void check_against_djpeg(const char *path, int channels, const char *flags) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "djpeg %s -pnm -outfile %s %s", flags, tmp("ref.pnm"), path);
  GR_CHECK_MSG(sh(cmd) == 0, "%s failed", cmd);
  int w, h, ch;
  uint8_t *ref = read_pnm(tmp("ref.pnm"), &w, &h, &ch);
  GR_CHECK(ref != NULL);
  gr_image img;
  gr_error err;
  GR_CHECK_OK(gr_image_read(path, channels, 0, &img, &err), err);
  if (!ref || !img.pixels) return free(ref), gr_image_free(&img);
  GR_CHECK(img.width == w && img.height == h);
  int bad = 0;
  for (int p = 0; p < w * h; p++) {
    for (int k = 0; k < ch && k < channels; k++)
      if (img.pixels[p * channels + k] != ref[p * ch + k]) bad++;
    if (channels == 4 && img.pixels[p * 4 + 3] != 255) bad++;
    if (channels == 3 && ch == 1) /* a gray JPEG as RGB: the gray repeated */
      bad += img.pixels[p * 3 + 1] != ref[p] || img.pixels[p * 3 + 2] != ref[p];
  }
  GR_CHECK_MSG(bad == 0, "%s (%d channels, djpeg %s): %d samples differ from djpeg", path, channels,
               flags, bad);
  free(ref);
  gr_image_free(&img);
}

static void test_jpeg_equals_djpeg(void) {
  if (sh("command -v djpeg >/dev/null && command -v cjpeg >/dev/null") != 0) {
    GR_CHECK_MSG(0, "djpeg/cjpeg missing: apt-get install libjpeg-turbo-progs (make deps)");
    return;
  }
  /* baseline colour (4:2:0 subsampling: fancy upsampling matters), odd size */
  write_test_jpeg(tmp("c.jpg"), 37, 23, 3, JCS_RGB, 85);
  check_against_djpeg(tmp("c.jpg"), 3, "");
  check_against_djpeg(tmp("c.jpg"), 1, "-grayscale");
  check_against_djpeg(tmp("c.jpg"), 4, "");
  /* grayscale */
  write_test_jpeg(tmp("g.jpg"), 19, 31, 1, JCS_GRAYSCALE, 70);
  check_against_djpeg(tmp("g.jpg"), 1, "");
  check_against_djpeg(tmp("g.jpg"), 3, "");
  /* progressive, made by Debian's cjpeg from the colour file's pixels */
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "djpeg -pnm -outfile %s %s && cjpeg -progressive -quality 60 -outfile %s %s",
           tmp("c.ppm"), tmp("c.jpg"), tmp("p.jpg"), tmp("c.ppm"));
  GR_CHECK(sh(cmd) == 0);
  check_against_djpeg(tmp("p.jpg"), 3, "");
  /* 4:4:4 */
  snprintf(cmd, sizeof cmd, "cjpeg -sample 1x1 -quality 95 -outfile %s %s", tmp("s.jpg"),
           tmp("c.ppm"));
  GR_CHECK(sh(cmd) == 0);
  check_against_djpeg(tmp("s.jpg"), 3, "");
}

/* ---- damaged and hostile files ------------------------------------------------------- */

static void expect_refused(const uint8_t *d, size_t len, gr_status code, const char *text,
                           const char *what) {
  gr_image img;
  gr_error err;
  gr_status st = gr_image_decode(d, len, 3, 0, &img, &err);
  GR_CHECK_MSG(st != GR_OK, "%s: decoded", what);
  if (st == GR_OK) return gr_image_free(&img);
  GR_CHECK_MSG(img.pixels == NULL, "%s", what);
  if (code != GR_OK) GR_CHECK_MSG(st == code, "%s: %s: %s", what, gr_status_name(st), err.msg);
  if (text) GR_CHECK_MSG(strstr(err.msg, text), "%s: '%s' lacks '%s'", what, err.msg, text);
}

static void test_truncated_and_corrupt(void) {
  png_case c = {"rgb", PNG_COLOR_TYPE_RGB, 8, false, false};
  uint16_t *src;
  int ch;
  png_color pal[16];
  write_png(tmp("t.png"), &c, 16, 16, &src, &ch, pal);
  free(src);
  size_t len;
  uint8_t *d = read_all(tmp("t.png"), &len);
  /* every prefix that cuts the image data is refused; a cut after the data
   * (in IEND) loses no pixel, which libpng does not read */
  int refused = 0;
  for (size_t n = 0; n < len - 12; n++) {
    gr_image img;
    gr_error err;
    if (gr_image_decode(d, n, 3, 0, &img, &err) == GR_OK)
      gr_image_free(&img);
    else
      refused++;
  }
  GR_CHECK_EQ_INT(refused, (int)(len - 12));
  expect_refused(d, len / 2, GR_ERR_DATA_LOSS, "truncated", "half a PNG");
  /* a flipped byte in the image data: the zlib stream or CRC check fails */
  uint8_t *bad = malloc(len);
  memcpy(bad, d, len);
  bad[len - 20] ^= 0x55;
  expect_refused(bad, len, GR_ERR_DATA_LOSS, "corrupt", "PNG with a flipped byte");
  free(bad);
  free(d);
  /* a JPEG cut in its scan: libjpeg would fill gray; it is refused */
  write_test_jpeg(tmp("c.jpg"), 64, 48, 3, JCS_RGB, 90);
  d = read_all(tmp("c.jpg"), &len);
  expect_refused(d, len * 2 / 3, GR_ERR_DATA_LOSS, "JPEG", "two thirds of a JPEG");
  expect_refused(d, 200, GR_ERR_DATA_LOSS, NULL, "a JPEG header only");
  free(d);
  expect_refused((const uint8_t *)"", 0, GR_ERR_DATA_LOSS, "empty", "empty file");
  expect_refused((const uint8_t *)"GIF89a....", 10, GR_ERR_INVALID_ARGUMENT, "not a PNG or JPEG",
                 "a GIF");
  expect_refused((const uint8_t *)"hello, world\n", 13, GR_ERR_INVALID_ARGUMENT, NULL, "text");
  /* a CMYK JPEG */
  write_test_jpeg(tmp("k.jpg"), 8, 8, 4, JCS_CMYK, 90);
  d = read_all(tmp("k.jpg"), &len);
  expect_refused(d, len, GR_ERR_INVALID_ARGUMENT, "CMYK", "CMYK JPEG");
  free(d);
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Headers announcing 30000 x 30000 pixels are refused before any pixel
 * memory is allocated: the files carry a few bytes of image data only, so
 * a decoder that allocated and read first would report bad data instead. */
static void test_huge_headers(void) {
  uint8_t png[8 + 25 + 16 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t *ihdr = png + 8;
  put32(ihdr, 13);
  memcpy(ihdr + 4, "IHDR", 4);
  put32(ihdr + 8, 30000);
  put32(ihdr + 12, 30000);
  ihdr[16] = 8, ihdr[17] = 2, ihdr[18] = 0, ihdr[19] = 0, ihdr[20] = 0; /* 8-bit RGB */
  put32(ihdr + 21, (uint32_t)crc32(0, ihdr + 4, 17));
  uint8_t *idat = png + 8 + 25; /* 4 bytes that are no zlib stream */
  put32(idat, 4);
  memcpy(idat + 4, "IDAT", 4);
  memcpy(idat + 8, "\x01\x02\x03\x04", 4);
  put32(idat + 12, (uint32_t)crc32(0, idat + 4, 8));
  uint8_t *iend = png + 8 + 25 + 16;
  put32(iend, 0);
  memcpy(iend + 4, "IEND", 4);
  put32(iend + 8, (uint32_t)crc32(0, iend + 4, 4));
  expect_refused(png, sizeof png, GR_ERR_RESOURCE_EXHAUSTED, "30000 x 30000 pixels", "huge PNG");
  /* a JPEG whose frame header (SOF0) says 30000 x 30000 */
  write_test_jpeg(tmp("c.jpg"), 16, 16, 3, JCS_RGB, 90);
  size_t len;
  uint8_t *d = read_all(tmp("c.jpg"), &len);
  for (size_t i = 0; i + 8 < len; i++)
    if (d[i] == 0xff && d[i + 1] == 0xc0) {
      d[i + 5] = 30000 >> 8, d[i + 6] = 30000 & 0xff, d[i + 7] = 30000 >> 8,
            d[i + 8] = 30000 & 0xff;
      break;
    }
  expect_refused(d, len, GR_ERR_RESOURCE_EXHAUSTED, "30000 x 30000 pixels", "huge JPEG");
  /* a lower limit of the caller's */
  gr_image img;
  gr_error err;
  GR_CHECK(gr_image_decode(d, len, 3, 100, &img, &err) == GR_ERR_RESOURCE_EXHAUSTED);
  free(d);
  d = read_all(tmp("t.png"), &len); /* 16 x 16 */
  GR_CHECK(gr_image_decode(d, len, 3, 255, &img, &err) == GR_ERR_RESOURCE_EXHAUSTED);
  GR_CHECK_OK(gr_image_decode(d, len, 3, 256, &img, &err), err);
  gr_image_free(&img);
  free(d);
}

/* ---- resizing -------------------------------------------------------------------------- */

/* TensorFlow's bilinear resize with half-pixel centres, in double. */
static double ref_sample(const gr_image *img, double y, double x, int k) {
  int64_t h = img->height, w = img->width;
  double fy = floor(y), fx = floor(x);
  int64_t y0 = fy < 0 ? 0 : (int64_t)fy, x0 = fx < 0 ? 0 : (int64_t)fx;
  int64_t y1 = (int64_t)ceil(y) > h - 1 ? h - 1 : (int64_t)ceil(y);
  int64_t x1 = (int64_t)ceil(x) > w - 1 ? w - 1 : (int64_t)ceil(x);
  double ly = y - fy, lx = x - fx;
#define P(yy, xx) ((double)img->pixels[((yy)*w + (xx)) * img->channels + k])
  double top = P(y0, x0) + (P(y0, x1) - P(y0, x0)) * lx;
  double bot = P(y1, x0) + (P(y1, x1) - P(y1, x0)) * lx;
#undef P
  return top + (bot - top) * ly;
}

static void test_resize(void) {
  /* TensorFlow: tf.image.resize([[0, 10], [20, 30]], [4, 4]) */
  uint8_t px[4] = {0, 10, 20, 30};
  gr_image two = {.height = 2, .width = 2, .channels = 1, .pixels = px};
  float out[16];
  gr_image_resize_bilinear(&two, 4, 4, out);
  static const float tf[16] = {0,  2.5f,  7.5f,  10, 5,  7.5f,  12.5f, 15,
                               15, 17.5f, 22.5f, 25, 20, 22.5f, 27.5f, 30};
  for (int i = 0; i < 16; i++) GR_CHECK_NEAR(out[i], tf[i], 1e-5);
  /* halving averages pairs */
  uint8_t row[4] = {0, 10, 100, 200};
  gr_image wide = {.height = 1, .width = 4, .channels = 1, .pixels = row};
  gr_image_resize_bilinear(&wide, 1, 2, out);
  GR_CHECK_NEAR(out[0], 5, 1e-5);
  GR_CHECK_NEAR(out[1], 150, 1e-5);
  /* random sizes and channels against the reference */
  gt_rng r = {12345};
  for (int t = 0; t < 60; t++) {
    gr_image img = {.height = gt_int(&r, 1, 40),
                    .width = gt_int(&r, 1, 40),
                    .channels = (int[]){1, 3, 4}[gt_int(&r, 0, 2)]};
    int64_t oh = gt_int(&r, 1, 50), ow = gt_int(&r, 1, 50);
    if (t == 0) ow = 1500; /* wider than the weight table: computed as it goes */
    img.pixels = malloc((size_t)(img.height * img.width * img.channels));
    for (int64_t i = 0; i < img.height * img.width * img.channels; i++)
      img.pixels[i] = (uint8_t)gt_int(&r, 0, 255);
    float *o = malloc(sizeof(float) * (size_t)(oh * ow * img.channels));
    gr_image_resize_bilinear(&img, oh, ow, o);
    double worst = 0;
    for (int64_t y = 0; y < oh; y++)
      for (int64_t x = 0; x < ow; x++)
        for (int k = 0; k < img.channels; k++) {
          double sy = (y + 0.5) * img.height / (double)oh - 0.5;
          double sx = (x + 0.5) * img.width / (double)ow - 0.5;
          double d = fabs(o[(y * ow + x) * img.channels + k] - ref_sample(&img, sy, sx, k));
          if (d > worst) worst = d;
        }
    GR_CHECK_MSG(worst < 2e-3, "%lldx%lldx%d -> %lldx%lld: off by %g", (long long)img.height,
                 (long long)img.width, img.channels, (long long)oh, (long long)ow, worst);
    if (oh == img.height && ow == img.width) /* the same size copies */
      for (int64_t i = 0; i < oh * ow * img.channels; i++) GR_CHECK(o[i] == img.pixels[i]);
    free(o);
    free(img.pixels);
  }
}

/* PNG and JPEG written by the library's own writers read back. */
static void test_writers_round_trip(void) {
  gr_image img = {.height = 9, .width = 11, .channels = 3};
  img.pixels = malloc(9 * 11 * 3);
  for (int i = 0; i < 9 * 11 * 3; i++) img.pixels[i] = pattern(i / 33, i % 33, 0);
  gr_error err;
  GR_CHECK_OK(gr_image_write_png(tmp("w.png"), &img, &err), err);
  gr_image back;
  GR_CHECK_OK(gr_image_read(tmp("w.png"), 3, 0, &back, &err), err);
  GR_CHECK(back.pixels && !memcmp(back.pixels, img.pixels, 9 * 11 * 3));
  gr_image_free(&back);
  GR_CHECK_OK(gr_image_write_jpeg(tmp("w.jpg"), &img, 95, &err), err);
  check_against_djpeg(tmp("w.jpg"), 3, "");
  GR_CHECK(gr_image_write_jpeg(tmp("w.jpg"), &img, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_image_read(tmp("missing.png"), 3, 0, &back, &err) == GR_ERR_NOT_FOUND);
  GR_CHECK_STR_CONTAINS(err.msg, "missing.png");
  free(img.pixels);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/gr_test_image_decode_XXXXXX");
  if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
  GR_RUN(test_png_every_kind);
  GR_RUN(test_jpeg_equals_djpeg);
  GR_RUN(test_truncated_and_corrupt);
  GR_RUN(test_huge_headers);
  GR_RUN(test_resize);
  GR_RUN(test_writers_round_trip);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  sh(cmd);
  return gr_test_finish();
}
