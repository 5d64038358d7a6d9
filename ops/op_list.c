/* Registers every op of the op list (op_list.h), and the gradients of
 * core's own ops, once per process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/gr_ops.h"
#include "ops/op_list.h"
#include "ops/ops_internal.h"

static const gr_op_def *const all_ops[] = {
#define GR_X_PTR(name) &gr_op_##name,
    GR_OP_LIST(GR_X_PTR)
#undef GR_X_PTR
};

#define GR_X_GRAD_DECL(name, fn) gr_status fn(gr_grad_ctx *c);
GR_CORE_OP_GRADIENT_LIST(GR_X_GRAD_DECL)
#undef GR_X_GRAD_DECL

static const struct {
  const gr_op_def *op;
  gr_grad_fn fn;
} core_op_gradients[] = {
#define GR_X_GRAD(name, fn) {&gr_op_##name, fn},
    GR_CORE_OP_GRADIENT_LIST(GR_X_GRAD)
#undef GR_X_GRAD
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_all(void) {
  for (size_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++) {
    gr_error err;
    /* the list is ours: a duplicate is an engine bug */
    if (gr_op_registry_add(all_ops[i], &err) != GR_OK) gr_assert_fail(err.msg, __FILE__, __LINE__);
  }
  for (size_t i = 0; i < sizeof core_op_gradients / sizeof core_op_gradients[0]; i++) {
    gr_error err;
    if (gr_op_registry_add_gradient(core_op_gradients[i].op, core_op_gradients[i].fn, &err) !=
        GR_OK)
      gr_assert_fail(err.msg, __FILE__, __LINE__);
  }
  gr_session_set_intra_op_hook(gr_ops_set_intra_op_threads);
}

void gr_ops_register_all(void) {
  pthread_once(&once, register_all);
}

const gr_op_def *gr_ops_find(const char *name) {
  gr_ops_register_all();
  return gr_op_registry_find(name);
}
