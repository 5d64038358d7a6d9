/* Resource containers shared by sessions (core/gr_resource.h): two sessions
 * over different graphs that name the same variable see one value; an
 * update in one is read by the other; the container outlives its sessions
 * and the variables go only with its last reference; a variable already
 * initialised is not initialised again by a later session. */
#include <graphrun.h>

#include "gr_test.h"
#include "test_util.h"

/* A graph with variable "w" (initial value init) and "w += delta". */
static gr_graph *graph_with(float init, float delta, gr_output *w, gr_output *inc) {
  gr_graph *g = gr_graph_new();
  *w = gr_variable(g, "w", gr_const_f32(g, init));
  *inc = gr_assign_add(g, *w, gr_const_f32(g, delta));
  return g;
}

static float run_value(gr_session *s, gr_output o) {
  gr_tensor t;
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &o, 1, &t, NULL, 0, &err), err);
  float v = (float)gr_tensor_get_f64(&t, 0);
  gr_tensor_release(&t);
  return v;
}

static void test_two_sessions_share_a_variable(void) {
  gr_resource_mgr *vars = gr_resource_mgr_new();
  gr_session_options o = {.inter_op_threads = 1, .resources = vars};
  gr_output wa, inca, wb, incb;
  gr_graph *ga = graph_with(1.0f, 10.0f, &wa, &inca), *gb = graph_with(100.0f, 0.5f, &wb, &incb);
  gr_error err;
  gr_session *a = gr_session_new(ga, &o, &err), *b = gr_session_new(gb, &o, &err);
  GR_CHECK(a && b);
  GR_CHECK(run_value(a, inca) == 11.0f); /* a initialises w to 1, adds 10 */
  GR_CHECK(run_value(b, wb) == 11.0f);   /* b's initialiser (100) does not run again */
  GR_CHECK(run_value(b, incb) == 11.5f);
  GR_CHECK(run_value(a, wa) == 11.5f);
  GR_CHECK(gr_session_resources(a) == vars && gr_session_resources(b) == vars);
  gr_session_free(a);
  gr_session_free(b);
  /* the variables outlive the sessions */
  GR_CHECK_EQ_INT(gr_resource_mgr_num_vars(vars), 1);
  gr_var *w = gr_resource_mgr_find_var(vars, "w");
  GR_CHECK(w && gr_var_is_initialized(w));
  if (w) GR_CHECK(gr_tensor_get_f64(gr_var_value(w), 0) == 11.5);
  gr_session *c = gr_session_new(gb, &o, &err);
  GR_CHECK(c && run_value(c, wb) == 11.5f);
  gr_session_free(c);
  gr_resource_mgr_free(vars);
  gr_graph_free(ga);
  gr_graph_free(gb);
}

static void test_own_containers_stay_apart(void) {
  gr_output wa, inca, wb, incb;
  gr_graph *ga = graph_with(1.0f, 10.0f, &wa, &inca), *gb = graph_with(100.0f, 0.5f, &wb, &incb);
  gr_session_options o = {.inter_op_threads = 1};
  gr_error err;
  gr_session *a = gr_session_new(ga, &o, &err), *b = gr_session_new(gb, &o, &err);
  GR_CHECK(run_value(a, inca) == 11.0f);
  GR_CHECK(run_value(b, incb) == 100.5f);
  GR_CHECK(gr_session_resources(a) != gr_session_resources(b));
  gr_session_free(a);
  gr_session_free(b);
  gr_graph_free(ga);
  gr_graph_free(gb);
}

int main(void) {
  GR_RUN(test_two_sessions_share_a_variable);
  GR_RUN(test_own_containers_stay_apart);
  return gr_test_finish();
}
