/* Bad inputs: every case returns an error with the right code and a message
 * naming the node (or the spec, name or tensor involved) — never a crash. */
#include <graphrun.h>

#include "gr_test.h"

typedef struct outcome {
  gr_status code;
  char msg[GR_ERROR_MSG_MAX];
} outcome;

/* Build-time case: the graph's sticky error. */
static outcome from_graph(gr_graph *g) {
  outcome o = {GR_OK, ""};
  const gr_error *e = gr_graph_error(g);
  if (e) {
    o.code = e->code;
    strcpy(o.msg, e->msg);
  }
  gr_graph_free(g);
  return o;
}

/* Run-time case: run fetches with feeds on a fresh session. */
static outcome from_run(gr_graph *g, const gr_feed *f, int nf, gr_output fetch) {
  outcome o = {GR_OK, ""};
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  if (!s) {
    o.code = err.code;
    strcpy(o.msg, err.msg);
  } else {
    gr_tensor out;
    o.code = gr_session_run(s, f, nf, &fetch, 1, &out, NULL, 0, &err);
    if (o.code == GR_OK)
      gr_tensor_release(&out);
    else
      strcpy(o.msg, err.msg);
    gr_session_free(s);
  }
  gr_graph_free(g);
  return o;
}

static gr_output ph(gr_graph *g, const char *name, gr_dtype t, gr_shape s) {
  return gr_placeholder(g, name, t, s);
}
#define V(n)    ((gr_shape){1, {n}})
#define M(a, b) ((gr_shape){2, {a, b}})

static outcome add_shape_mismatch(void) {
  gr_graph *g = gr_graph_new();
  gr_name(g, gr_add(g, ph(g, "a", GR_F32, V(3)), ph(g, "b", GR_F32, V(4))), "x");
  return from_graph(g);
}
static outcome matmul_inner_mismatch(void) {
  gr_graph *g = gr_graph_new();
  gr_matmul(g, ph(g, "a", GR_F32, M(2, 3)), ph(g, "b", GR_F32, M(4, 5)), false, false);
  return from_graph(g);
}
static outcome unknown_attr(void) {
  gr_graph *g = gr_graph_new();
  gr_output in[2] = {ph(g, "a", GR_F32, M(2, 3)), ph(g, "b", GR_F32, M(3, 5))};
  gr_attr a = gr_attr_bool("transpose_c", true);
  gr_op(g, "matmul", "mm", in, 2, &a, 1);
  return from_graph(g);
}
static outcome attr_wrong_type(void) {
  gr_graph *g = gr_graph_new();
  gr_output in[2] = {ph(g, "a", GR_F32, M(2, 3)), ph(g, "b", GR_F32, M(3, 5))};
  gr_attr a = gr_attr_string("transpose_a", "yes");
  gr_op(g, "matmul", "mm", in, 2, &a, 1);
  return from_graph(g);
}
static outcome attr_given_twice(void) {
  gr_graph *g = gr_graph_new();
  gr_output in[2] = {ph(g, "a", GR_F32, M(2, 3)), ph(g, "b", GR_F32, M(3, 5))};
  gr_attr a[2] = {gr_attr_bool("transpose_a", true), gr_attr_bool("transpose_a", false)};
  gr_op(g, "matmul", "mm", in, 2, a, 2);
  return from_graph(g);
}
static outcome missing_required_attr(void) {
  gr_graph *g = gr_graph_new();
  gr_op(g, "const", "c", NULL, 0, NULL, 0);
  return from_graph(g);
}
static outcome dtype_mismatch(void) {
  gr_graph *g = gr_graph_new();
  gr_name(g, gr_add(g, ph(g, "a", GR_F32, V(3)), ph(g, "b", GR_I32, V(3))), "mixed");
  return from_graph(g);
}
static outcome matmul_int(void) {
  gr_graph *g = gr_graph_new();
  gr_matmul(g, ph(g, "a", GR_I32, M(2, 3)), ph(g, "b", GR_I32, M(3, 5)), false, false);
  return from_graph(g);
}
static outcome logical_on_float(void) {
  gr_graph *g = gr_graph_new();
  gr_logical_and(g, ph(g, "a", GR_F32, V(3)), ph(g, "b", GR_F32, V(3)));
  return from_graph(g);
}
static outcome duplicate_name(void) {
  gr_graph *g = gr_graph_new();
  gr_name(g, gr_const_f32(g, 1), "w");
  gr_name(g, gr_const_f32(g, 2), "w");
  return from_graph(g);
}
static outcome duplicate_variable(void) {
  gr_graph *g = gr_graph_new();
  gr_variable(g, "w", gr_const_f32(g, 1));
  gr_variable(g, "w", gr_const_f32(g, 2));
  return from_graph(g);
}
static outcome unknown_op(void) {
  gr_graph *g = gr_graph_new();
  gr_op(g, "frobnicate", "f", NULL, 0, NULL, 0);
  return from_graph(g);
}
static outcome wrong_input_count(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = ph(g, "a", GR_F32, V(3));
  gr_op(g, "add", "lonely", &a, 1, NULL, 0);
  return from_graph(g);
}
static outcome input_index_out_of_range(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = ph(g, "a", GR_F32, V(3));
  gr_name(g, gr_neg(g, gr_output_at(a, 3)), "n");
  return from_graph(g);
}
static outcome input_from_other_graph(void) {
  gr_graph *g = gr_graph_new(), *h = gr_graph_new();
  gr_output a = ph(h, "elsewhere", GR_F32, V(3));
  gr_name(g, gr_add(g, ph(g, "a", GR_F32, V(3)), a), "y");
  gr_graph_free(h);
  return from_graph(g);
}
static outcome invalid_node_name(void) {
  gr_graph *g = gr_graph_new();
  gr_name(g, gr_const_f32(g, 1), "bad name!");
  return from_graph(g);
}
static outcome malformed_device(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/tsk:1");
  return from_graph(g);
}
static outcome unsatisfiable_device(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:ps/task:0");
  gr_output c = gr_name(g, gr_const_f32(g, 1), "on_ps");
  gr_graph_pop_device_scope(g);
  return from_run(g, NULL, 0, c);
}
static outcome invalid_dtype_attr(void) {
  gr_graph *g = gr_graph_new();
  gr_placeholder(g, "p", (gr_dtype)99, V(1));
  return from_graph(g);
}
static outcome assign_wrong_shape(void) {
  gr_graph *g = gr_graph_new();
  gr_output v = gr_variable(g, "w", gr_const_data(g, GR_F32, V(2), (float[]){1, 2}));
  gr_assign(g, v, gr_const_data(g, GR_F32, V(3), (float[]){1, 2, 3}));
  return from_graph(g);
}
static outcome assign_to_non_variable(void) {
  gr_graph *g = gr_graph_new();
  gr_assign(g, gr_name(g, gr_const_f32(g, 1), "not_a_var"), gr_const_f32(g, 2));
  return from_graph(g);
}
static outcome control_cycle(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_name(g, gr_const_f32(g, 1), "early");
  gr_output b = gr_name(g, gr_neg(g, a), "late");
  gr_graph_add_control_input(g, a.node, b.node); /* early would wait for late, which needs early */
  return from_graph(g);
}
static outcome null_input(void) {
  gr_graph *g = gr_graph_new();
  gr_output nothing = {NULL, 0};
  gr_op(g, "neg", "n", &nothing, 1, NULL, 0);
  return from_graph(g);
}
static outcome unfed_placeholder(void) {
  gr_graph *g = gr_graph_new();
  gr_output y = gr_name(g, gr_neg(g, ph(g, "input", GR_F32, V(3))), "y");
  return from_run(g, NULL, 0, y);
}
static outcome feed_wrong_dtype(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = ph(g, "images", GR_F32, V(1));
  gr_output y = gr_neg(g, x);
  gr_tensor t = gr_tensor_scalar_i32(1), r;
  gr_tensor_reshape(&t, &(gr_shape){1, {1}}, &r, NULL);
  gr_feed f = {x, &r};
  outcome o = from_run(g, &f, 1, y);
  gr_tensor_release(&r);
  gr_tensor_release(&t);
  return o;
}
static outcome feed_wrong_shape(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = ph(g, "images", GR_F32, M(-1, 784));
  gr_output y = gr_neg(g, x);
  float data[10] = {0};
  gr_tensor t;
  gr_tensor_from_data(&t, GR_F32, &(gr_shape){2, {2, 5}}, data, NULL);
  gr_feed f = {x, &t};
  outcome o = from_run(g, &f, 1, y);
  gr_tensor_release(&t);
  return o;
}
static outcome fetch_output_out_of_range(void) {
  gr_graph *g = gr_graph_new();
  gr_output c = gr_name(g, gr_const_f32(g, 1), "single");
  return from_run(g, NULL, 0, gr_output_at(c, 2));
}
static outcome fetch_from_other_graph(void) {
  gr_graph *g = gr_graph_new(), *h = gr_graph_new();
  gr_const_f32(g, 1);
  gr_output foreign = gr_name(h, gr_const_f32(h, 1), "foreign");
  outcome o = from_run(g, NULL, 0, foreign);
  gr_graph_free(h);
  return o;
}
static outcome uninitialised_variable(void) {
  gr_graph *g = gr_graph_new();
  gr_output v = gr_variable(g, "weights", gr_const_f32(g, 1));
  gr_error err;
  gr_session_options opts = {.no_auto_init = true};
  gr_session *s = gr_session_new(g, &opts, &err);
  gr_tensor out;
  outcome o = {gr_session_run(s, NULL, 0, &v, 1, &out, NULL, 0, &err), ""};
  strcpy(o.msg, err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  return o;
}
static outcome bad_session_options(void) {
  gr_graph *g = gr_graph_new();
  gr_error err;
  gr_session_options opts = {.inter_op_threads = -3};
  outcome o = {GR_OK, ""};
  if (!gr_session_new(g, &opts, &err)) {
    o.code = err.code;
    strcpy(o.msg, err.msg);
  }
  gr_graph_free(g);
  return o;
}

static const struct {
  const char *name;
  outcome (*fn)(void);
  gr_status code;
  const char *phrase1, *phrase2;
} cases[] = {
    {"add_shape_mismatch", add_shape_mismatch, GR_ERR_SHAPE, "node 'add'", "[3] and [4]"},
    {"matmul_inner_mismatch", matmul_inner_mismatch, GR_ERR_SHAPE, "node 'matmul'", "3 vs 4"},
    {"unknown_attr", unknown_attr, GR_ERR_INVALID_ARGUMENT, "node 'mm'", "'transpose_c'"},
    {"attr_wrong_type", attr_wrong_type, GR_ERR_INVALID_ARGUMENT, "node 'mm'", "must be bool"},
    {"attr_given_twice", attr_given_twice, GR_ERR_INVALID_ARGUMENT, "node 'mm'", "twice"},
    {"missing_required_attr", missing_required_attr, GR_ERR_INVALID_ARGUMENT, "node 'c'",
     "'value'"},
    {"dtype_mismatch", dtype_mismatch, GR_ERR_DTYPE, "node 'add'", "f32"},
    {"matmul_int", matmul_int, GR_ERR_DTYPE, "node 'matmul'", "i32"},
    {"logical_on_float", logical_on_float, GR_ERR_DTYPE, "node 'logical_and'", "bool"},
    {"duplicate_name", duplicate_name, GR_ERR_ALREADY_EXISTS, "'w'", "duplicate"},
    {"duplicate_variable", duplicate_variable, GR_ERR_ALREADY_EXISTS, "'w'", "duplicate"},
    {"unknown_op", unknown_op, GR_ERR_NOT_FOUND, "'frobnicate'", "unknown op"},
    {"wrong_input_count", wrong_input_count, GR_ERR_INVALID_ARGUMENT, "node 'lonely'", "expects 2"},
    {"input_index_out_of_range", input_index_out_of_range, GR_ERR_OUT_OF_RANGE, "node 'neg'",
     "'a'"},
    {"input_from_other_graph", input_from_other_graph, GR_ERR_INVALID_ARGUMENT, "node 'add'",
     "another graph"},
    {"invalid_node_name", invalid_node_name, GR_ERR_INVALID_ARGUMENT, "'bad name!'",
     "node 'const'"},
    {"malformed_device", malformed_device, GR_ERR_INVALID_ARGUMENT, "/job:worker/tsk:1", "'tsk:1'"},
    {"unsatisfiable_device", unsatisfiable_device, GR_ERR_INVALID_ARGUMENT, "node 'on_ps'",
     "/job:ps/task:0"},
    {"invalid_dtype_attr", invalid_dtype_attr, GR_ERR_DTYPE, "node 'p'", "dtype"},
    {"assign_wrong_shape", assign_wrong_shape, GR_ERR_SHAPE, "node 'assign'", "'w'"},
    {"assign_to_non_variable", assign_to_non_variable, GR_ERR_INVALID_ARGUMENT, "'not_a_var'",
     "not a variable"},
    {"control_cycle", control_cycle, GR_ERR_INVALID_ARGUMENT, "'late' depends on 'early'", "cycle"},
    {"null_input", null_input, GR_ERR_INVALID_ARGUMENT, "'n'", "null output"},
    {"unfed_placeholder", unfed_placeholder, GR_ERR_INVALID_ARGUMENT, "'input'", "needed by 'y'"},
    {"feed_wrong_dtype", feed_wrong_dtype, GR_ERR_DTYPE, "'images'", "i32"},
    {"feed_wrong_shape", feed_wrong_shape, GR_ERR_SHAPE, "'images'", "[2, 5]"},
    {"fetch_output_out_of_range", fetch_output_out_of_range, GR_ERR_OUT_OF_RANGE, "'single'",
     "no output 2"},
    {"fetch_from_other_graph", fetch_from_other_graph, GR_ERR_NOT_FOUND, "'foreign'", "not a node"},
    {"uninitialised_variable", uninitialised_variable, GR_ERR_FAILED_PRECONDITION, "'weights'",
     "not initialised"},
    {"bad_session_options", bad_session_options, GR_ERR_INVALID_ARGUMENT, "options", "range"},
};

static void test_bad_inputs(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    outcome o = cases[i].fn();
    GR_CHECK_MSG(o.code == cases[i].code, "%s: got %s (%s), want %s", cases[i].name,
                 gr_status_name(o.code), o.msg, gr_status_name(cases[i].code));
    GR_CHECK_MSG(strstr(o.msg, cases[i].phrase1) != NULL, "%s: '%s' lacks '%s'", cases[i].name,
                 o.msg, cases[i].phrase1);
    GR_CHECK_MSG(strstr(o.msg, cases[i].phrase2) != NULL, "%s: '%s' lacks '%s'", cases[i].name,
                 o.msg, cases[i].phrase2);
  }
  GR_CHECK(sizeof cases / sizeof cases[0] >= 20);
}

int main(void) {
  GR_RUN(test_bad_inputs);
  return gr_test_finish();
}
