/* The fingerprint of a set of variables (names, dtypes and shapes, in
 * order): what a checkpoint row records and a restore compares. */
#include <string.h>

#include "checkpoints/ckpt_internal.h"

uint64_t gr_ckpt_fingerprint(const gr_ckpt_var *vars, int n) {
  gr_ckpt_hasher h;
  gr_ckpt_hash_init(&h);
  for (int i = 0; i < n; i++) {
    char shape[GR_MAX_RANK * 21 + 4];
    ckpt_shape_to_text(&vars[i].shape, shape, sizeof shape);
    const char *dt = gr_dtype_name(vars[i].dtype);
    gr_ckpt_hash_update(&h, vars[i].name, strlen(vars[i].name) + 1);
    gr_ckpt_hash_update(&h, dt, strlen(dt) + 1);
    gr_ckpt_hash_update(&h, shape, strlen(shape) + 1);
  }
  return gr_ckpt_hash_final(&h);
}
