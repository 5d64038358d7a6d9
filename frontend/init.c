/* gr_init: registers every op of the engine, once. */
#include <pthread.h>

#include "checkpoints/gr_checkpoints.h"
#include "core/gr_core.h"
#include "ops/gr_ops.h"
#include "passes/passes_engine.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void) {
  gr_op_registry_count(); /* core's own ops (transfers, const, control flow) */
  gr_ops_register_all();  /* the op list (ops/op_list.h), and core ops' gradients */
  gr_ckpt_register_ops(); /* save, restore */
  /* sessions run chains such as conv2d + bias_add + relu as one node */
  gr_session_set_rewrite_hook(gr_passes_fuse_for_step);
}

void gr_init(void) {
  pthread_once(&once, init_once);
}
