/* Serialized graphs (distributed/gr_distributed.h): every example and 1,000
 * random graphs survive encode -> decode with the same results bit for bit
 * and encode again to the same bytes; names, fetches and targets of a .gr
 * program come back; malformed input (truncated at every byte, wrong types,
 * bad ids, cycles, unknown ops, huge counts) is refused with a message
 * naming the node and field, never a crash. */

#include <dirent.h>
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"
#include "example_runner.h"
#include "gr_test.h"
#include "random_graph.h"
#include "test_util.h"

/* Encodes g, decodes into a new graph, checks that encoding that gives the
 * same bytes; returns the copy (NULL on failure, checked). */
static gr_graph *round_trip(const gr_graph *g, const char *what) {
  void *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  gr_error err;
  gr_graph *copy = gr_graph_new();
  gr_status st = gr_wire_encode_graph(g, NULL, &a, &na, &err);
  GR_CHECK_MSG(st == GR_OK, "%s: encode: %s", what, err.msg);
  if (st == GR_OK) st = gr_wire_decode_graph(a, na, copy, NULL, &err);
  GR_CHECK_MSG(st == GR_OK, "%s: decode: %s", what, err.msg);
  if (st == GR_OK) st = gr_wire_encode_graph(copy, NULL, &b, &nb, &err);
  GR_CHECK_MSG(st == GR_OK && na == nb && memcmp(a, b, na) == 0,
               "%s: encoding the decoded graph gives other bytes (%zu vs %zu)", what, na, nb);
  GR_CHECK(st != GR_OK || gr_graph_num_nodes(copy) == gr_graph_num_nodes(g));
  free(a);
  free(b);
  if (st != GR_OK) {
    gr_graph_free(copy);
    return NULL;
  }
  return copy;
}

static void test_random_graphs(void) {
  int same = 0;
  for (uint64_t seed = 1; seed <= 1000; seed++) {
    bool with_cf = seed % 2 == 0;
    gt_rgraph rg = gt_random_graph(seed, seed % 3 ? 3 : 0, seed * 31 + 5, with_cf);
    gr_graph *copy = round_trip(rg.g, "random graph");
    if (!copy) {
      gr_graph_free(rg.g);
      continue;
    }
    gt_rgraph rc = rg;
    rc.g = copy;
    rc.x = gt_same_in(copy, rg.x);
    for (int i = 0; i < rg.nf; i++) rc.fetches[i] = gt_same_in(copy, rg.fetches[i]);
    gr_tensor want[6], got[6];
    int devices = seed % 3 ? 3 : 1;
    gt_random_graph_run(&rg, devices, 1, false, want);
    gt_random_graph_run(&rc, devices, 1, false, got);
    bool all = true;
    for (int i = 0; i < rg.nf; i++) {
      all = all && gt_same_bits(&got[i], &want[i]);
      gr_tensor_release(&got[i]);
      gr_tensor_release(&want[i]);
    }
    GR_CHECK_MSG(all, "seed %llu: the decoded graph gives other values", (unsigned long long)seed);
    same += all;
    gr_graph_free(copy);
    gr_graph_free(rg.g);
  }
  GR_CHECK_EQ_INT(same, 1000);
}

/* An example through gr_dsl_export and gr_dsl_load_buffer, as `graphrun
 * export` and `graphrun run FILE.grb` do. */
static void check_example(const gt_example *ex, const char *file) {
  gr_error err;
  void *data = NULL, *again = NULL;
  size_t size = 0, size2 = 0;
  GR_CHECK_OK(gr_dsl_export(ex->p, &data, &size, &err), err);
  gr_graph *g2 = gr_graph_new();
  gr_dsl_program *p2 = NULL;
  GR_CHECK_OK(gr_dsl_load_buffer(file, data, size, g2, NULL, &p2, &err), err);
  if (p2) {
    GR_CHECK_OK(gr_dsl_export(p2, &again, &size2, &err), err);
    GR_CHECK_MSG(size == size2 && memcmp(data, again, size) == 0, "%s: re-export differs", file);
    /* the program's names, fetches and targets come back */
    GR_CHECK_EQ_INT(gr_dsl_num_fetches(p2), gr_dsl_num_fetches(ex->p));
    GR_CHECK_EQ_INT(gr_dsl_num_targets(p2), gr_dsl_num_targets(ex->p));
    for (int i = 0; i < gr_dsl_num_fetches(ex->p) && i < gr_dsl_num_fetches(p2); i++) {
      const char *name = gr_dsl_fetch_name(ex->p, i);
      GR_CHECK(strcmp(name, gr_dsl_fetch_name(p2, i)) == 0);
      gr_output a, b;
      bool la = gr_dsl_lookup(ex->p, name, &a), lb = gr_dsl_lookup(p2, name, &b);
      GR_CHECK_MSG(la == lb &&
                       (!la || (strcmp(a.node->name, b.node->name) == 0 && a.index == b.index)),
                   "%s: name '%s' names another output", file, name);
    }
  }
  gr_status st;
  GR_CHECK_MSG(gt_example_agree(ex, p2 ? g2 : NULL, file, "decoded", &st), "%s", file);
  printf("%-22s %5zu bytes, %4d nodes, %d fetches: %s\n", file, size, gr_graph_num_nodes(ex->g),
         ex->nx, st == GR_OK ? "same values" : "same error");
  free(data);
  free(again);
  gr_dsl_program_free(p2);
  gr_graph_free(g2);
}

static void test_examples(void) {
  GR_CHECK(gt_for_each_example(check_example) >= 10);
}

/* ---- malformed input ---------------------------------------------------------- */

static const char *small_src = "x = placeholder(f32, [2])\n"
                               "w = variable(const([1.5, -2.0]))\n"
                               "y = while (i = 0; i < 3) { i = i + 1 }\n"
                               "z = reduce_sum(x * w) + cast(y, f32)\n"
                               "fetch z\n";

static void encode_small(void **data, size_t *size) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("small.gr", small_src, g, NULL, &p, &err), err);
  GR_CHECK_OK(gr_dsl_export(p, data, size, &err), err);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* Decodes bytes that must fail; the message into err. */
static bool refused(const void *data, size_t size, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_graph_names nm;
  bool failed = gr_wire_decode_graph(data, size, g, &nm, err) != GR_OK;
  if (!failed) gr_graph_names_free(&nm);
  gr_graph_free(g);
  return failed;
}

static void test_truncated_at_every_byte(void) {
  void *data;
  size_t size;
  encode_small(&data, &size);
  int refusals = 0;
  for (size_t n = 0; n < size; n++) {
    gr_error err;
    bool r = refused(data, n, &err);
    GR_CHECK_MSG(r, "a graph cut to %zu of %zu bytes decoded", n, size);
    refusals += r;
  }
  GR_CHECK_EQ_INT(refusals, size);
  free(data);
}

/* Replaces the first occurrence of `from` in a copy of the encoding (same
 * length) and checks the decoder's message. */
static void check_patched(const void *data, size_t size, const char *from, const char *to,
                          size_t len, const char *want) {
  unsigned char *copy = malloc(size);
  memcpy(copy, data, size);
  unsigned char *at = memmem(copy, size, from, len);
  GR_CHECK_MSG(at != NULL, "pattern for '%s' not found", want);
  if (at) {
    memcpy(at, to, len);
    gr_error err;
    GR_CHECK_MSG(refused(copy, size, &err), "patched graph (%s) decoded", want);
    GR_CHECK_STR_CONTAINS(err.msg, want);
  }
  free(copy);
}

static void test_malformed(void) {
  void *data;
  size_t size;
  encode_small(&data, &size);
  gr_error err;
  /* an unknown op, a misspelt field, a wrong type */
  check_patched(data, size, "\xa2op\xaareduce_sum", "\xa2op\xaareduce_suX", 14,
                "unknown op 'reduce_suX'");
  check_patched(data, size,
                "\xa4"
                "ctrl",
                "\xa4"
                "ctrX",
                5, "ctrl: missing");
  check_patched(data, size,
                "\xa7"
                "version\x01",
                "\xa7"
                "version\x02",
                9, "version 2; this graphrun reads version 1");
  check_patched(data, size,
                "\xa6"
                "format",
                "\xa6"
                "formaX",
                7, "format: missing");
  check_patched(data, size,
                "\xa3"
                "f32",
                "\xa3"
                "f33",
                4, "unknown dtype 'f33'");
  /* a node's map with "name" twice (its "ctrl" renamed): refused before the
   * decoder could take either */
  check_patched(data, size,
                "\xa4"
                "ctrl",
                "\xa4"
                "name",
                5, "msgpack: a map gives key 'name' twice");
  /* the first node with one input: its source id past the last node */
  unsigned char *copy = malloc(size);
  memcpy(copy, data, size);
  unsigned char *in1 = memmem(copy, size, "\xa2in\x91\x92", 5);
  GR_CHECK(in1 != NULL);
  if (in1) {
    in1[5] = 0x7f;
    GR_CHECK(refused(copy, size, &err));
    GR_CHECK_STR_CONTAINS(err.msg, "in: 127 is out of range");
  }
  free(copy);
  /* not msgpack at all, trailing bytes, an ext type, nesting, huge counts */
  GR_CHECK(refused("hello", 5, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "msgpack");
  unsigned char *more = malloc(size + 1);
  memcpy(more, data, size);
  more[size] = 0xc0;
  GR_CHECK(refused(more, size + 1, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "1 bytes after the end");
  free(more);
  GR_CHECK(refused("\xd4\x01\x02", 3, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "not accepted");
  unsigned char deep[64];
  memset(deep, 0x91, sizeof deep);
  deep[63] = 0xc0;
  GR_CHECK(refused(deep, sizeof deep, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "nested too deeply");
  GR_CHECK(refused("\xdd\xff\xff\xff\xff\x00", 6, &err)); /* 4 billion items in 1 byte */
  GR_CHECK_STR_CONTAINS(err.msg, "only 1 bytes follow");
  GR_CHECK(refused("\xdb\xff\xff\xff\xf0", 5, &err)); /* a string longer than the input */
  GR_CHECK_STR_CONTAINS(err.msg, "runs past the end");
  GR_CHECK(refused("\x91\x01", 2, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "an array, want a map");
  free(data);
}

/* Graphs that decode node by node but break the builder's rules: a cycle
 * outside loops, a tensor attr whose bytes do not match its shape, a bool
 * that is neither 0 nor 1. Built by hand with msgpack-c. */
static void test_cycles_and_tensors(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, gr_shape_make(1, (int64_t[]){2}));
  gr_output b = gr_neg(g, a);
  gr_output c = gr_neg(g, b);
  (void)c;
  void *data;
  size_t size;
  gr_error err;
  GR_CHECK_OK(gr_wire_encode_graph(g, NULL, &data, &size, &err), err);
  /* c's input is b (node 1); point b's input at c (node 2): a cycle */
  unsigned char *copy = malloc(size);
  memcpy(copy, data, size);
  const char pat[] = "\xa2"
                     "in\x91\x92\x00\x00"; /* b's input: [[0, 0]] */
  unsigned char *at = memmem(copy, size, pat, sizeof pat - 1);
  GR_CHECK(at != NULL);
  if (at) {
    at[5] = 0x02;
    GR_CHECK(refused(copy, size, &err));
    GR_CHECK_STR_CONTAINS(err.msg, "every input comes from a later node");
  }
  free(copy);
  free(data);
  gr_graph_free(g);

  g = gr_graph_new();
  gr_tensor t = gt_random(&(gt_rng){3}, GR_BOOL, gr_shape_make(1, (int64_t[]){4}), 0, 1);
  gr_const(g, &t);
  gr_tensor_release(&t);
  GR_CHECK_OK(gr_wire_encode_graph(g, NULL, &data, &size, &err), err);
  copy = malloc(size);
  memcpy(copy, data, size);
  at = memmem(copy, size, "\xc4\x04", 2); /* the bool tensor's bytes */
  GR_CHECK(at != NULL);
  if (at) {
    at[2] = 7;
    GR_CHECK(refused(copy, size, &err));
    GR_CHECK_STR_CONTAINS(err.msg, "bool element 0 is not 0 or 1");
    at[2] = 0;
    at[1] = 0x03; /* 3 bytes for 4 elements: the length no longer fits the message */
    GR_CHECK(refused(copy, size, &err));
  }
  free(copy);
  free(data);
  gr_graph_free(g);
}

static void test_encode_refuses_broken_graph(void) {
  gr_graph *g = gr_graph_new();
  gr_add(g, gr_const_f32(g, 1), gr_const_i64(g, 1)); /* a dtype error */
  void *data = (void *)1;
  size_t size = 1;
  gr_error err;
  GR_CHECK(gr_wire_encode_graph(g, NULL, &data, &size, &err) != GR_OK);
  GR_CHECK(data == NULL && size == 0);
  GR_CHECK_STR_CONTAINS(err.msg, "build error");
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_examples);
  GR_RUN(test_random_graphs);
  GR_RUN(test_truncated_at_every_byte);
  GR_RUN(test_malformed);
  GR_RUN(test_cycles_and_tensors);
  GR_RUN(test_encode_refuses_broken_graph);
  return gr_test_finish();
}
