/* gr_init: every op registered, once, from any number of threads. */
#include <graphrun.h>
#include <pthread.h>

#include "gr_test.h"

static void *init_thread(void *arg) {
  (void)arg;
  gr_init();
  return NULL;
}

static void test_init_registers_everything_once(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) GR_CHECK(pthread_create(&t[i], NULL, init_thread, NULL) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  /* one op of each registrar: core, ops/, checkpoints/ */
  const char *names[] = {"_send", "switch", "const", "matmul", "apply_adam", "save", "restore"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    GR_CHECK_MSG(gr_op_registry_find(names[i]) != NULL, "op %s", names[i]);
  int n = gr_op_registry_count();
  gr_init();
  GR_CHECK_EQ_INT(gr_op_registry_count(), n);
  /* the gradients of core's ops come from ops/ */
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("switch")) == GR_OP_GRADIENT_DEFINED);
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("identity")) == GR_OP_GRADIENT_DEFINED);
}

int main(void) {
  GR_RUN(test_init_registers_everything_once);
  return gr_test_finish();
}
