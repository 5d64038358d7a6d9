/* libFuzzer harness for the image decoders (ops/gr_images.h): libpng and
 * libjpeg-turbo behind gr_image_decode, our error paths (longjmp out of
 * either library with everything released), the size check before any
 * pixel allocation and the bilinear resize, on arbitrary bytes, into 1, 3
 * and 4 channels. A decoded image must have the size its header gives and
 * resize without reading outside it (ASan). Built and run by
 * `make fuzz-image`; seed corpus: small PNG and JPEG files of every colour
 * type written by tests/fuzz/gen_image_seeds.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ops/gr_images.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  static const int channels[] = {1, 3, 4};
  for (int i = 0; i < 3; i++) {
    gr_image img;
    gr_error err;
    /* 2^20 pixels at most: a 4 KiB input may announce any size, and the
     * fuzzer's memory limit is not what is being tested */
    if (gr_image_decode(data, size, channels[i], 1 << 20, &img, &err) != GR_OK) {
      if (img.pixels) abort(); /* a failure leaves nothing allocated */
      continue;
    }
    if (img.channels != channels[i] || img.width < 1 || img.height < 1 ||
        img.width * img.height > (1 << 20))
      abort();
    int64_t oh = 1 + (size % 7), ow = 1 + (size % 5);
    float *out = malloc(sizeof(float) * (size_t)(oh * ow * img.channels));
    if (out) {
      gr_image_resize_bilinear(&img, oh, ow, out);
      for (int64_t k = 0; k < oh * ow * img.channels; k++)
        if (!(out[k] >= 0 && out[k] <= 255)) abort();
      free(out);
    }
    gr_image_free(&img);
  }
  return 0;
}
