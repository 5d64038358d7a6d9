/* libFuzzer harness for serialized graphs (distributed/gr_distributed.h):
 * the msgpack walk, msgpack-c's unpacking, every field check and the
 * rebuild through the graph builder, on arbitrary bytes. A graph that
 * decodes must encode and decode again to the same bytes. Built and run by
 * `make fuzz-graph`; seed corpus: the examples exported as .grb. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  gr_graph *g = gr_graph_new();
  if (!g) return 0;
  gr_graph_names names;
  gr_error err;
  if (gr_wire_decode_graph(data, size, g, &names, &err) == GR_OK) {
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (gr_wire_encode_graph(g, &names, &a, &na, &err) != GR_OK) abort();
    gr_graph *g2 = gr_graph_new();
    gr_graph_names n2;
    if (gr_wire_decode_graph(a, na, g2, &n2, &err) != GR_OK) abort();
    if (gr_wire_encode_graph(g2, &n2, &b, &nb, &err) != GR_OK) abort();
    if (na != nb || memcmp(a, b, na) != 0) abort(); /* not a fixed point */
    gr_graph_names_free(&n2);
    gr_graph_free(g2);
    free(a);
    free(b);
    gr_graph_names_free(&names);
  }
  gr_graph_free(g);
  return 0;
}
