/* See example_runner.h. */
#include "example_runner.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

gr_output gt_same_in(const gr_graph *g, gr_output o) {
  return (gr_output){gr_graph_find_node(g, o.node->name), o.index};
}

bool gt_same_bits(const gr_tensor *a, const gr_tensor *b) {
  return a->dtype == b->dtype && gr_shape_equal(&a->shape, &b->shape) &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a)) == 0;
}

gr_tensor gt_placeholder_value(const gr_node *n, gt_rng *r) {
  gr_shape s = n->out_shapes[0];
  if (s.rank < 0) s = gr_shape_scalar();
  for (int i = 0; i < s.rank; i++)
    if (s.dims[i] < 0) s.dims[i] = 5;
  gr_dtype dt = n->out_dtypes[0];
  bool integer = dt == GR_I32 || dt == GR_I64 || dt == GR_U8;
  return gt_random(r, dt, s, integer ? 0 : -1, integer ? 9 : 1);
}

bool gt_example_load(const char *path, gt_example *ex, gr_error *err) {
  memset(ex, 0, sizeof *ex);
  ex->g = gr_graph_new();
  if (gr_dsl_load_file(path, ex->g, NULL, &ex->p, err) != GR_OK) {
    gt_example_free(ex);
    return false;
  }
  const gr_dsl_program *p = ex->p;
  for (int i = 0; i < gr_dsl_num_fetches(p) && ex->nx < GT_EX_MAX; i++)
    if (gr_dsl_lookup(p, gr_dsl_fetch_name(p, i), &ex->fetch[ex->nx]) &&
        ex->fetch[ex->nx].index >= 0)
      ex->nx++;
  for (int i = 0; i < gr_dsl_num_targets(p) && ex->nt < GT_EX_MAX; i++)
    if (gr_dsl_lookup(p, gr_dsl_target_name(p, i), &ex->target[ex->nt])) ex->nt++;
  gt_rng r = {7};
  for (int i = 0; i < gr_graph_num_nodes(ex->g) && ex->nf < GT_EX_MAX; i++) {
    const gr_node *n = gr_graph_node(ex->g, i);
    if (!(n->op->flags & GR_OP_PLACEHOLDER)) continue;
    ex->values[ex->nf] = gt_placeholder_value(n, &r);
    ex->feeds[ex->nf] = (gr_feed){{(gr_node *)n, 0}, &ex->values[ex->nf]};
    ex->nf++;
  }
  return true;
}

void gt_example_free(gt_example *ex) {
  for (int i = 0; i < ex->nf; i++) gr_tensor_release(&ex->values[i]);
  gr_dsl_program_free(ex->p);
  gr_graph_free(ex->g);
  memset(ex, 0, sizeof *ex);
}

gr_status gt_example_run(const gt_example *ex, gr_graph *g, int steps,
                         gr_tensor results[][GT_EX_MAX], gr_error *err) {
  gr_session_options so = {.inter_op_threads = 1};
  gr_session *s = gr_session_new(g, &so, err);
  if (!s) return err->code;
  gr_output x[GT_EX_MAX], t[GT_EX_MAX];
  gr_feed f[GT_EX_MAX];
  int n = 0;
  for (int i = 0; i < ex->nx; i++) x[i] = gt_same_in(g, ex->fetch[i]);
  for (int i = 0; i < ex->nt; i++) t[i] = gt_same_in(g, ex->target[i]);
  for (int i = 0; i < ex->nf; i++)
    if (gr_graph_find_node(g, ex->feeds[i].output.node->name))
      f[n++] = (gr_feed){gt_same_in(g, ex->feeds[i].output), ex->feeds[i].value};
  gr_status st = GR_OK;
  for (int k = 0; k < steps && st == GR_OK; k++)
    st = gr_session_run(s, f, n, x, ex->nx, results[k], t, ex->nt, err);
  gr_session_free(s);
  return st;
}

bool gt_example_agree(const gt_example *ex, gr_graph *g, const char *file, const char *what,
                      gr_status *st) {
  enum { STEPS = 2 };
  gr_tensor want[STEPS][GT_EX_MAX], got[STEPS][GT_EX_MAX];
  gr_error err, err2;
  gr_status a = gt_example_run(ex, ex->g, STEPS, want, &err);
  gr_status b = g ? gt_example_run(ex, g, STEPS, got, &err2) : a + 1;
  bool ok = a == b && (a == GR_OK || strcmp(err.msg, err2.msg) == 0);
  if (!ok)
    fprintf(stderr, "%s: '%s' vs %s '%s'\n", file, a ? err.msg : "ok", what,
            !g  ? "(none)"
            : b ? err2.msg
                : "ok");
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < ex->nx; k++) {
      if (a == GR_OK && b == GR_OK && !gt_same_bits(&want[s][k], &got[s][k])) {
        fprintf(stderr, "%s step %d fetch '%s': %s differs\n", file, s, ex->fetch[k].node->name,
                what);
        ok = false;
      }
      if (a == GR_OK) gr_tensor_release(&want[s][k]);
      if (b == GR_OK) gr_tensor_release(&got[s][k]);
    }
  *st = a;
  return ok;
}

int gt_for_each_example(void (*fn)(const gt_example *ex, const char *file)) {
  const char *dir = GR_SOURCE_DIR "/examples";
  DIR *dp = opendir(dir);
  if (!dp) return -1;
  int n = 0;
  bool all_loaded = true;
  for (struct dirent *e; (e = readdir(dp));) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".gr") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    gt_example ex;
    gr_error err;
    if (!gt_example_load(path, &ex, &err)) {
      fprintf(stderr, "%s: %s\n", e->d_name, err.msg);
      all_loaded = false;
      continue;
    }
    fn(&ex, e->d_name);
    gt_example_free(&ex);
    n++;
  }
  closedir(dp);
  return all_loaded ? n : -1;
}
