/* docs/dsl.md shows the DSL's built-ins as gr_dsl_print_builtins prints
 * them from the table in frontend/dsl_call.c. */
#include <graphrun.h>
#include <stdlib.h>

#include "gr_test.h"
#include "test_util.h"

static void test_docs_show_the_builtin_table(void) {
  char *doc = gt_read_file(GR_SOURCE_DIR "/docs/dsl.md");
  GR_CHECK(doc != NULL);
  char *table = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&table, &len);
  GR_CHECK(f != NULL);
  if (f) {
    gr_dsl_print_builtins(f);
    fclose(f);
  }
  GR_CHECK(table && len > 0);
  GR_CHECK_MSG(doc && table && strstr(doc, table),
               "docs/dsl.md lacks the table of built-ins as printed by gr_dsl_print_builtins:\n%s",
               table ? table : "");
  free(table);
  free(doc);
}

int main(void) {
  GR_RUN(test_docs_show_the_builtin_table);
  return gr_test_finish();
}
