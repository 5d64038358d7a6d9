/* Starting a run and freeing an executor: the one place that knows both
 * run paths. A graph with control flow runs on executor_cf.c, every other
 * graph on executor.c; both sit on exec_core.c. Building is in
 * executor_build.c. */
#include "core/executor_internal.h"
#include "core/executor.h"

#include <stdlib.h>

void gr_executor_free(gr_executor *e) {
  if (!e) return;
  gr_exec_static_free(e);
  for (int i = 0; e->states && i < e->num_real; i++)
    if (e->states[i] && e->nodes[i].node->op->state_free)
      e->nodes[i].node->op->state_free(e->states[i]);
  gr_cf_plan_free(e->cf);
  pthread_mutex_destroy(&e->mu);
  free(e->nodes);
  free(e->edges);
  free(e->ctrl_dsts);
  free(e->feeds);
  free(e->fetches);
  free(e->roots);
  free(e->states);
  free(e);
}

/* Checks the feeds against the graph; fills err on the first bad one. */
static gr_status check_feeds(const gr_executor *e, const gr_tensor *feed_values, gr_error *err) {
  for (int k = 0; k < e->num_feeds; k++) {
    const gr_tensor *v = &feed_values[k];
    gr_output f = e->feeds[k];
    gr_dtype want = f.node->out_dtypes[f.index];
    if (!v->buf)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feed for '%s' is an empty tensor",
                          f.node->name);
    if (v->dtype != want)
      return gr_error_set(err, GR_ERR_DTYPE, "feed for '%s' has dtype %s, expected %s",
                          f.node->name, gr_dtype_name(v->dtype), gr_dtype_name(want));
    if (v->dtype == GR_BOOL) { /* only 0 and 1 are valid bools: anything else is undefined */
      const unsigned char *b = gr_tensor_data(v);
      int64_t n = gr_tensor_num_elements(v);
      for (int64_t i = 0; i < n; i++)
        if (b[i] > 1)
          return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                              "feed for '%s': bool element %lld has byte value %u (must be 0 or 1)",
                              f.node->name, (long long)i, b[i]);
    }
    if (!gr_shape_compatible(&v->shape, &f.node->out_shapes[f.index])) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_error_set(err, GR_ERR_SHAPE, "feed for '%s' has shape %s, expected %s",
                          f.node->name, gr_shape_str(&v->shape, a),
                          gr_shape_str(&f.node->out_shapes[f.index], b));
    }
  }
  return GR_OK;
}

static void start_run(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                      const gr_step_info *step, gr_executor_done_fn done, void *arg, bool wait) {
  for (int k = 0; k < e->num_fetches; k++) fetch_out[k] = gr_tensor_empty();
  gr_error err;
  if (check_feeds(e, feed_values, &err) != GR_OK) {
    done(arg, err.code, &err);
    return;
  }
  if (e->cf)
    gr_cf_run_start(e, feed_values, fetch_out, step, done, arg, wait);
  else
    gr_exec_static_start(e, feed_values, fetch_out, step, done, arg, wait);
}

void gr_executor_run_async(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                           const gr_step_info *step, gr_executor_done_fn done, void *arg) {
  start_run(e, feed_values, fetch_out, step, done, arg, false);
}

typedef struct sync_result {
  gr_status status;
  gr_error *err;
} sync_result;

static void sync_done(void *arg, gr_status status, const gr_error *err) {
  sync_result *r = arg;
  r->status = status;
  if (status != GR_OK && r->err) *r->err = *err;
}

gr_status gr_executor_run(gr_executor *e, const gr_tensor *feed_values, gr_tensor *fetch_out,
                          const gr_step_info *step, gr_error *err) {
  sync_result r = {GR_OK, err};
  start_run(e, feed_values, fetch_out, step, sync_done, &r, true); /* done before it returns */
  return r.status;
}
