/* Writes the seed corpus of fuzz_image into DIR: small PNG files (gray,
 * RGB, RGBA) and JPEG files (gray, RGB) of a few sizes, written with the
 * library's own writers (gr_image_write_png, gr_image_write_jpeg). */
#include <stdio.h>
#include <stdlib.h>

#include "ops/gr_images.h"

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: gen_image_seeds DIR\n"), 2;
  static const int sizes[][2] = {{1, 1}, {3, 5}, {8, 8}, {17, 9}};
  static const int channels[] = {1, 3, 4};
  int n = 0;
  for (int s = 0; s < 4; s++)
    for (int c = 0; c < 3; c++) {
      gr_image img = {.height = sizes[s][0], .width = sizes[s][1], .channels = channels[c]};
      img.pixels = malloc((size_t)(img.height * img.width * img.channels));
      if (!img.pixels) return 1;
      for (int64_t i = 0; i < img.height * img.width * img.channels; i++)
        img.pixels[i] = (uint8_t)(i * 29 + s * 7);
      char path[4096];
      gr_error err;
      snprintf(path, sizeof path, "%s/seed_%d.png", argv[1], n);
      gr_status st = gr_image_write_png(path, &img, &err);
      if (st == GR_OK && channels[c] != 4) {
        snprintf(path, sizeof path, "%s/seed_%d.jpg", argv[1], n);
        st = gr_image_write_jpeg(path, &img, 50 + 15 * s, &err);
      }
      free(img.pixels);
      if (st != GR_OK) return fprintf(stderr, "%s\n", err.msg), 1;
      n++;
    }
  return 0;
}
