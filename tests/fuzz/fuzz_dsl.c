/* libFuzzer harness for the DSL front end: lexer, parser and lowering (and
 * with them the builder's shape functions) on arbitrary bytes. Imports are
 * disabled so the input cannot make the harness read files. Built and run
 * by `make fuzz-dsl` (clang -fsanitize=fuzzer,address); seed corpus: the
 * .gr files of examples/. */
#include <stddef.h>
#include <stdint.h>

#include "gr_dsl.h"
#include "ops/gr_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  gr_graph *g = gr_graph_new();
  if (!g) return 0;
  gr_dsl_options opts = {.no_imports = true};
  gr_dsl_program *p = NULL;
  gr_error err;
  gr_dsl_load_buffer("fuzz.gr", (const char *)data, size, g, &opts, &p, &err);
  gr_output o;
  if (p) {
    for (int i = 0; i < gr_dsl_num_fetches(p); i++) gr_dsl_lookup(p, gr_dsl_fetch_name(p, i), &o);
    gr_dsl_lookup(p, "x:1", &o);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return 0;
}
