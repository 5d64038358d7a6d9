/* Makes a folder of PNG images from Fashion-MNIST, for image_folder(...)
 * (docs/training.md, "Image folders"):
 *
 *   build/examples/fashion_to_png DIR N            DIR/footwear/ and DIR/other/
 *   build/examples/fashion_to_png DIR N --all      one sub-folder per class: DIR/t-shirt/, ...
 *   build/examples/fashion_to_png DIR N --test     from the test set (pictures a model
 *                                                  trained on the others has not seen)
 *
 * N images of the training set (or the test set), in its order, each
 * DIR/CLASS/IIIII.png (28 x 28, gray). footwear: sandals, sneakers and
 * ankle boots; other: the rest. Data: the Debian package
 * dataset-fashion-mnist. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DATA "/usr/share/datasets/fashion-mnist/"

static const char *const names[10] = {"t-shirt", "trouser", "pullover", "dress", "coat",
                                      "sandal",  "shirt",   "sneaker",  "bag",   "ankle-boot"};

static int fail(const gr_error *err) {
  fprintf(stderr, "fashion_to_png: %s\n", err->msg);
  return 1;
}

int main(int argc, char **argv) {
  bool all = false, test = false, ok = argc >= 3;
  for (int i = 3; i < argc && ok; i++) {
    if (strcmp(argv[i], "--all") == 0)
      all = true;
    else if (strcmp(argv[i], "--test") == 0)
      test = true;
    else
      ok = false;
  }
  if (!ok) {
    fprintf(stderr, "usage: fashion_to_png DIR N [--all] [--test]\n");
    return 2;
  }
  const char *dir = argv[1];
  long n = strtol(argv[2], NULL, 10);
  gr_tensor x, y;
  gr_error err;
  const char *images = test ? DATA "t10k-images-idx3-ubyte.gz" : DATA "train-images-idx3-ubyte.gz";
  const char *labels = test ? DATA "t10k-labels-idx1-ubyte.gz" : DATA "train-labels-idx1-ubyte.gz";
  if (gr_data_load_idx(images, &x, &err) != GR_OK) return fail(&err);
  if (gr_data_load_idx(labels, &y, &err) != GR_OK) return gr_tensor_release(&x), fail(&err);
  if (n < 1 || n > x.shape.dims[0]) {
    fprintf(stderr, "fashion_to_png: N must be from 1 to %lld\n", (long long)x.shape.dims[0]);
    return 2;
  }
  mkdir(dir, 0777);
  for (int c = 0; c < (all ? 10 : 2); c++) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", dir, all ? names[c] : c ? "other" : "footwear");
    mkdir(sub, 0777);
  }
  const uint8_t *px = gr_tensor_data(&x), *lb = gr_tensor_data(&y);
  int rc = 0;
  for (long i = 0; i < n && !rc; i++) {
    int l = lb[i];
    bool foot = l == 5 || l == 7 || l == 9;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/%05ld.png", dir,
             all    ? names[l]
             : foot ? "footwear"
                    : "other",
             i);
    gr_image img = {.height = 28, .width = 28, .channels = 1, .pixels = (uint8_t *)px + i * 784};
    if (gr_image_write_png(path, &img, &err) != GR_OK) rc = fail(&err);
  }
  if (!rc) printf("fashion_to_png: %ld images in %s\n", n, dir);
  gr_tensor_release(&x);
  gr_tensor_release(&y);
  return rc;
}
