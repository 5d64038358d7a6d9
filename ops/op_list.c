/* Registers every op of the op list (op_list.h) once per process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/gr_ops.h"
#include "ops/op_list.h"
#include "ops/ops_internal.h"

#define GR_X_DECL(name) extern const gr_op_def gr_op_##name;
GR_OP_LIST(GR_X_DECL)
#undef GR_X_DECL

static const gr_op_def *const all_ops[] = {
#define GR_X_PTR(name) &gr_op_##name,
    GR_OP_LIST(GR_X_PTR)
#undef GR_X_PTR
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_all(void) {
  for (size_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++) {
    gr_error err;
    /* the list is ours: a duplicate is an engine bug */
    if (gr_op_registry_add(all_ops[i], &err) != GR_OK) gr_assert_fail(err.msg, __FILE__, __LINE__);
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
