/* Positive tests of the DSL: parsing and lowering (precedence, scopes, device
 * merging, colocation, control deps, defs, imports, unpacking), default
 * fetches and running the lowered graphs. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

static void test_basics(void) {
  GR_CHECK_NEAR(gt_dsl_value("x = 2; y1 = x + 300; y2 = x - 66; y = y1 + y2", "y"), 238, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = 2\ny1 = x + 300\ny2 = x - 66\ny = y1 + y2\n", "y2"), -64, 0);
}

/* Usual precedence: ** over unary minus over * / @ over + - over comparisons. */
static void test_precedence(void) {
  GR_CHECK_NEAR(gt_dsl_value("a = 2 + 3 * 4 ** 2 - -1", "a"), 51, 0);        /* folded */
  GR_CHECK_NEAR(gt_dsl_value("x = 2\na = x + 3 * x ** 2 - -x", "a"), 16, 0); /* in the graph */
  GR_CHECK_NEAR(gt_dsl_value("x = 3\na = -x ** 2", "a"), -9, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = 8\na = x / 2 / 2", "a"), 2, 0);     /* left-associative */
  GR_CHECK_NEAR(gt_dsl_value("x = 2\na = 2 ** 3 ** x", "a"), 512, 0); /* right-associative */
  GR_CHECK_NEAR(gt_dsl_value("x = 2\na = (x + 1) * 3", "a"), 9, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = 2\na = x * 2 > 3 && x < 3 || false", "a"), 1, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = 2\na = !(x == 2)", "a"), 0, 0);
  GR_CHECK_NEAR(gt_dsl_value("a = [[1, 2]] @ [[3], [4]]", "a"), 11, 0);
  /* numbers take the dtype of the tensor they meet */
  GR_CHECK_NEAR(gt_dsl_value("i = const(7, i64)\na = i / 2", "a"), 3, 0);
}

static void test_ops_generic(void) {
  /* positional attrs are matched by type, keywords by name */
  GR_CHECK_NEAR(gt_dsl_value("x = reduce_sum(ones([2, 3]), axes=[1], keepdims=true)", "x"), 3, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = reduce_sum(ones([2, 3]), 1)", "x"), 3, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = argmax([[1, 5, 2]], axis=1)", "x"), 1, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = fill([2], 4.5)", "x"), 4.5, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = one_hot(const([2], i64), 3)\ny = reduce_sum(x * [0, 0, 7])", "y"),
                7, 0);
  GR_CHECK_NEAR(gt_dsl_value("a = concat([ones([2]), zeros([1])], axis=0)\nb = reduce_sum(a)", "b"),
                2, 0);
  GR_CHECK_NEAR(gt_dsl_value("a = add_n(ones([2]), ones([2]), ones([2]))", "a"), 3, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = matmul([[1, 2]], [[3, 4]], transpose_b=true)", "x"), 11, 0);
  GR_CHECK_NEAR(gt_dsl_value("def sq(v) { return v * v }\nx = sq(sq(3))", "x"), 81, 0);
}

static gr_graph *load(const char *src, gr_dsl_program **p) {
  gr_graph *g = gr_graph_new();
  gr_error err;
  if (gr_dsl_load_string("t.gr", src, g, NULL, p, &err) != GR_OK) {
    fprintf(stderr, "load failed: %s\n", err.msg);
    gr_dsl_program_free(*p);
    *p = NULL;
  }
  return g;
}

static void test_scopes_and_devices(void) {
  gr_dsl_program *p = NULL;
  gr_graph *g = load("scope \"outer\" {\n"
                     "  device \"/job:ps\" {\n"
                     "    w = variable(zeros([2]))\n"
                     "    device \"/task:1/device:CPU:0\" { a = w + 1 }\n"
                     "  }\n"
                     "  scope \"inner\" { b = a * 2 }\n"
                     "}\n"
                     "c = b - 1\n",
                     &p);
  GR_CHECK(p != NULL);
  gr_node *w = gr_graph_find_node(g, "outer/w"), *a = gr_graph_find_node(g, "outer/a");
  gr_node *b = gr_graph_find_node(g, "outer/inner/b"), *c = gr_graph_find_node(g, "c");
  GR_CHECK(w && a && b && c);
  if (w && a && b && c) {
    GR_CHECK_STR_CONTAINS(w->requested_device, "/job:ps");
    /* the inner scope merges with the outer one */
    GR_CHECK_STR_CONTAINS(a->requested_device, "/job:ps");
    GR_CHECK_STR_CONTAINS(a->requested_device, "task:1");
    GR_CHECK_STR_CONTAINS(a->requested_device, "CPU:0");
    GR_CHECK(strstr(b->requested_device, "ps") == NULL);
    GR_CHECK_STR_CONTAINS(c->source_loc, "t.gr:8:7");
  }
  gr_output o;
  GR_CHECK(gr_dsl_lookup(p, "b", &o) && o.node == b);             /* by binding */
  GR_CHECK(gr_dsl_lookup(p, "outer/inner/b", &o) && o.node == b); /* by node name */
  GR_CHECK(!gr_dsl_lookup(p, "nope", &o));
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

static void test_colocate_and_deps(void) {
  gr_dsl_program *p = NULL;
  gr_graph *g = load("w = variable(zeros([2]))\n"
                     "colocate_with(w) { u = assign_add(w, ones([2])) }\n"
                     "control_dependencies(u) { r = w * 1 }\n"
                     "fetch r\n",
                     &p);
  GR_CHECK(p != NULL);
  gr_node *u = gr_graph_find_node(g, "u"), *r = gr_graph_find_node(g, "r");
  GR_CHECK(u && r);
  if (u && r) {
    GR_CHECK(u->colocate_with && strcmp(u->colocate_with, "w") == 0);
    GR_CHECK_EQ_INT(r->num_control_inputs, 1);
    GR_CHECK(r->num_control_inputs == 1 && r->control_inputs[0] == u);
  }
  GR_CHECK_EQ_INT(gr_dsl_num_fetches(p), 1);
  GR_CHECK(gr_dsl_fetch_name(p, 0) && strcmp(gr_dsl_fetch_name(p, 0), "r") == 0);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

static void test_defs(void) {
  gr_dsl_program *p = NULL;
  gr_graph *g = load("def dense(x, n) {\n"
                     "  w = variable(ones([dim(x, 1), n]))\n"
                     "  b = variable(zeros([n]))\n"
                     "  return relu(x @ w + b)\n"
                     "}\n"
                     "x = ones([2, 3])\n"
                     "h1 = dense(x, 4)\n"
                     "h2 = dense(h1, n=5)\n"
                     "dense(h2, 1)\n"
                     "dense(h2, 1)\n"
                     "target h2\n",
                     &p);
  GR_CHECK(p != NULL);
  GR_CHECK(gr_graph_find_node(g, "h1/w") && gr_graph_find_node(g, "h2/b"));
  GR_CHECK(gr_graph_find_node(g, "dense/w") && gr_graph_find_node(g, "dense_1/w"));
  gr_node *w2 = gr_graph_find_node(g, "h2/w");
  GR_CHECK(w2 && w2->out_shapes[0].dims[0] == 4 && w2->out_shapes[0].dims[1] == 5);
  GR_CHECK_EQ_INT(gr_dsl_num_targets(p), 1);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  /* each h2 unit sums 4 units of 3: 12 each */
  GR_CHECK_NEAR(gt_dsl_value("def dense(x, n) {\n w = variable(ones([dim(x, 1), n]))\n"
                             " return x @ w\n}\nh = dense(dense(ones([1, 3]), 4), 5)",
                             "h"),
                12, 0);
}

/* gr_dsl_options.record_layers: the bindings in the order lowered, inside
 * defs once per call under the def's name, with both positions and the
 * variables' elements where they are made; nothing without the option. */
static void test_recorded_layers(void) {
  const char *src = "def dense(x, n) {\n"
                    "  w = variable(ones([dim(x, 1), n]))\n"
                    "  b = variable(zeros([n]))\n"
                    "  return relu(x @ w + b)\n"
                    "}\n"
                    "x = ones([2, 3])\n"
                    "h1, h2 = dense(x, 4), 7\n"
                    "dense(h1, 1)\n";
  for (int rec = 0; rec < 2; rec++) {
    gr_graph *g = gr_graph_new();
    gr_dsl_program *p = NULL;
    gr_error err;
    gr_dsl_options o = {.record_layers = rec};
    GR_CHECK_OK(gr_dsl_load_string("t.gr", src, g, &o, &p, &err), err);
    if (!rec) {
      GR_CHECK_EQ_INT(gr_dsl_num_layers(p), 0);
    } else {
      static const struct {
        const char *path;
        int line, call_line;
        int64_t params;
      } want[] = {{"x", 6, 6, 0},  {"dense/w", 2, 7, 12}, {"dense/b", 3, 7, 4}, {"h1", 7, 7, 0},
                  {"h2", 7, 7, 0}, {"dense/w", 2, 8, 4},  {"dense/b", 3, 8, 1}};
      GR_CHECK_EQ_INT(gr_dsl_num_layers(p), (int)(sizeof want / sizeof want[0]));
      for (int i = 0; i < gr_dsl_num_layers(p) && i < (int)(sizeof want / sizeof want[0]); i++) {
        const gr_dsl_layer *l = gr_dsl_layer_at(p, i);
        GR_CHECK_MSG(strcmp(l->path, want[i].path) == 0, "layer %d is %s", i, l->path);
        GR_CHECK_EQ_INT(l->line, want[i].line);
        GR_CHECK_EQ_INT(l->call_line, want[i].call_line);
        GR_CHECK_EQ_INT(l->params, want[i].params);
        GR_CHECK(strcmp(l->file, "t.gr") == 0 && strcmp(l->call_file, "t.gr") == 0);
      }
      const gr_dsl_layer *h1 = gr_dsl_layer_at(p, 3);
      GR_CHECK(h1 && strcmp(h1->value.node->op->name, "relu") == 0);
      GR_CHECK(gr_dsl_layer_at(p, 7) == NULL && gr_dsl_layer_at(p, -1) == NULL);
    }
    gr_dsl_program_free(p);
    gr_graph_free(g);
  }
}

static void test_unpack_and_alias(void) {
  gr_dsl_program *p = NULL;
  gr_graph *g = load("a, b = split([1, 2, 3, 4], 2)\nc = b\nd = 5\n", &p);
  GR_CHECK(p != NULL);
  gr_output o;
  GR_CHECK(gr_dsl_lookup(p, "b", &o) && o.index == 1);
  GR_CHECK(gr_dsl_lookup(p, "c", &o) && strcmp(o.node->op->name, "identity") == 0);
  GR_CHECK(gr_dsl_lookup(p, "d", &o) && strcmp(o.node->name, "d") == 0);
  /* no `fetch`: the last binding is the default */
  GR_CHECK(gr_dsl_num_fetches(p) == 1 && strcmp(gr_dsl_fetch_name(p, 0), "d") == 0);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  GR_CHECK_NEAR(gt_dsl_value("a, b = split([1, 2, 3, 4], 2)\ns = reduce_sum(b)", "s"), 7, 0);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  GR_CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void test_imports(void) {
  char dir[] = "/tmp/gr_dsl_test_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  char lib[128], cyc[128], main_gr[128], bad[128];
  snprintf(lib, sizeof lib, "%s/lib.gr", dir);
  snprintf(cyc, sizeof cyc, "%s/cyc.gr", dir);
  snprintf(main_gr, sizeof main_gr, "%s/main.gr", dir);
  snprintf(bad, sizeof bad, "%s/bad.gr", dir);
  write_file(lib, "import \"cyc.gr\"\ndef twice(x) { return 2 * x }\nunit = 1\n");
  write_file(cyc, "import \"lib.gr\"\ndef thrice(x) { return 3 * x }\n");
  write_file(main_gr, "import \"lib.gr\"\nimport \"lib.gr\"\ny = twice(thrice(unit + 1))\n");
  write_file(bad, "import \"lib.gr\"\ny = twice(\n");
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_file(main_gr, g, NULL, &p, &err), err);
  gr_output o;
  GR_CHECK(gr_dsl_lookup(p, "y", &o));
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor t;
  GR_CHECK(s != NULL);
  if (s && gr_session_run(s, NULL, 0, &o, 1, &t, NULL, 0, &err) == GR_OK) {
    GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 12, 0);
    gr_tensor_release(&t);
  }
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  /* an error inside an import names the imported file */
  g = gr_graph_new();
  write_file(lib, "def twice(x) { return 2 * x +\n");
  GR_CHECK(gr_dsl_load_file(main_gr, g, NULL, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "lib.gr:1:30: error: expected an expression");
  GR_CHECK_STR_CONTAINS(err.msg, "main.gr:1:1: note: imported from here");
  gr_graph_free(g);
  unlink(lib);
  unlink(cyc);
  unlink(main_gr);
  unlink(bad);
  rmdir(dir);
}

/* A string `path` attr written in an imported file is relative to that
 * file, like `import`; one written in the main file and passed into a def
 * of the imported file stays relative to the main file. */
static void test_paths_relative_to_their_file(void) {
  char dir[] = "/tmp/gr_dsl_paths_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  char sub[160], npy[200], lib[200], main_gr[200];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  GR_CHECK(mkdir(sub, 0700) == 0);
  snprintf(npy, sizeof npy, "%s/d.npy", sub);
  snprintf(lib, sizeof lib, "%s/lib.gr", sub);
  snprintf(main_gr, sizeof main_gr, "%s/main.gr", dir);
  /* a .npy of f32 [1.0, 2.0]: data at byte 128 */
  char hdr[128];
  memset(hdr, ' ', sizeof hdr);
  memcpy(hdr, "\x93NUMPY\x01\x00\x76\x00", 10);
  const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  memcpy(hdr + 10, dict, strlen(dict));
  hdr[127] = '\n';
  const float vals[2] = {1.0f, 2.0f};
  FILE *f = fopen(npy, "wb");
  GR_CHECK(f != NULL);
  if (f) {
    fwrite(hdr, 1, sizeof hdr, f);
    fwrite(vals, sizeof vals[0], 2, f);
    fclose(f);
  }
  write_file(lib, "def load(p) { return read_npy(p) }\nown = read_npy(\"d.npy\")\n");
  write_file(main_gr,
             "import \"sub/lib.gr\"\ny = reduce_sum(own) + reduce_sum(load(\"sub/d.npy\"))\n");
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_file(main_gr, g, NULL, &p, &err), err);
  gr_output o;
  if (p && gr_dsl_lookup(p, "y", &o)) {
    gr_session *s = gt_session(g, 1, 1);
    gr_tensor t;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &o, 1, &t, NULL, 0, &err), err);
    if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 6, 0);
    gr_tensor_release(&t);
    gr_session_free(s);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  unlink(npy);
  unlink(lib);
  unlink(main_gr);
  rmdir(sub);
  rmdir(dir);
}

/* A UTF-8 byte-order mark at the start is skipped; columns count after it. */
static void test_byte_order_mark(void) {
  GR_CHECK_NEAR(gt_dsl_value("\xEF\xBB\xBFx = 2\ny = x * 3", "y"), 6, 0);
  gr_error err;
  GR_CHECK(gt_dsl_error("\xEF\xBB\xBFx = $", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:1:5: error: unexpected character '$'\n  x = $\n      ^");
  GR_CHECK(gt_dsl_error("x = 1\n\xEF\xBB\xBFy = 2", &err)); /* only at the start */
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:2:1: error: unexpected character byte 0xef");
}

static void test_gradients(void) {
  GR_CHECK_NEAR(gt_dsl_value("x = variable(const(3.0))\ny = x * x\ng = gradients(y, x)", "g"), 6,
                1e-6);
  GR_CHECK_NEAR(gt_dsl_value("x = variable(const(3.0))\nz = variable(const(2.0))\n"
                             "a, b = gradients(x * z, [x, z])\nc = a + 10 * b",
                             "c"),
                32, 1e-6);
}

static void test_control_flow(void) {
  GR_CHECK_NEAR(gt_dsl_value("x = 3\ny = cond(x > 2) { x * 2 } else { -x }", "y"), 6, 0);
  GR_CHECK_NEAR(gt_dsl_value("x = 1\ny = cond(x > 2) { x * 2 } else { t = -x; t - 1 }", "y"), -2,
                0);
  GR_CHECK_NEAR(gt_dsl_value("i, s = while (i = 0, s = 1; i < 10) { i = i + 1; s = s * 2 }", "s"),
                1024, 0);
  GR_CHECK_NEAR(gt_dsl_value("n = while (n = 0; n < 5) { n = n + 1 }", "n"), 5, 0);
}

int main(void) {
  GR_RUN(test_basics);
  GR_RUN(test_precedence);
  GR_RUN(test_ops_generic);
  GR_RUN(test_scopes_and_devices);
  GR_RUN(test_colocate_and_deps);
  GR_RUN(test_defs);
  GR_RUN(test_recorded_layers);
  GR_RUN(test_unpack_and_alias);
  GR_RUN(test_imports);
  GR_RUN(test_paths_relative_to_their_file);
  GR_RUN(test_byte_order_mark);
  GR_RUN(test_gradients);
  GR_RUN(test_control_flow);
  return gr_test_finish();
}
