/* Restoring by name into a graph that holds any subset of a checkpoint's
 * variables: which variables of the graph to set (those the checkpoint
 * holds), which the runs to come need (gr_graph_mark_needed from their
 * fetches and targets), and a message listing the needed ones it lacks;
 * the checkpoint's other tensors (an optimizer's slots, the global step,
 * to an inference graph) stay in the file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool listed(const gr_ckpt_tensor_info *infos, int n, const char *name, int *at) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) { /* infos are sorted by name */
    int mid = (lo + hi) / 2, c = strcmp(infos[mid].name, name);
    if (c == 0) return *at = mid, true;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return false;
}

/* Appends name to the list text (cap bytes): the first few, then a count. */
static void add_name(char *buf, size_t cap, int *count, const char *name) {
  size_t len = strlen(buf);
  if (++*count <= 8 && len + strlen(name) + 3 < cap)
    snprintf(buf + len, cap - len, "%s%s", *count > 1 ? ", " : "", name);
}

static void end_list(char *buf, size_t cap, int count) {
  int shown = 0;
  for (const char *p = buf; *p; p++) shown += *p == ',';
  shown += buf[0] != '\0';
  if (count > shown) {
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " and %d more", count - shown);
  }
}

/* The names of the variables the roots need (sorted, pointing into g), or
 * *all when there are no roots. */
static gr_status needed_names(const gr_graph *g, const gr_ckpt_restore_options *o,
                              const char ***out, int *n, bool *all, gr_error *err) {
  *out = NULL;
  *n = 0;
  *all = !o || o->num_roots <= 0;
  if (*all) return GR_OK;
  int total = gr_graph_num_nodes(g);
  unsigned char *mark = malloc((size_t)total + 1);
  if (!mark) return gr_error_set_oom(err);
  gr_prune_request r = {.feeds = o->feeds,
                        .num_feeds = o->num_feeds,
                        .targets = o->roots,
                        .num_targets = o->num_roots,
                        .keep_variables = true};
  gr_status st = gr_graph_mark_needed(g, &r, mark, NULL, err);
  int cap = 16, k = 0;
  const char **v = st == GR_OK ? gr_alloc_array((size_t)cap, sizeof *v) : NULL;
  if (st == GR_OK && !v) st = gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < total; i++) {
    const gr_node *nd = gr_graph_node(g, i);
    if (mark[i] == GR_PRUNE_UNUSED || !(nd->op->flags & GR_OP_VARIABLE)) continue;
    for (int a = 0; st == GR_OK && a < nd->num_attrs; a++) {
      if (!gr_attr_names_variable(&nd->attrs[a])) continue;
      if (k == cap) {
        const char **nv = ckpt_reserve(v, k, &cap, sizeof *v);
        if (!nv) {
          st = gr_error_set_oom(err);
          break;
        }
        v = nv;
      }
      v[k++] = nd->attrs[a].value.s;
    }
  }
  free(mark);
  if (st != GR_OK) {
    free(v);
    return st;
  }
  qsort(v, (size_t)k, sizeof *v, cmp_str);
  *out = v;
  *n = k;
  return GR_OK;
}

static bool is_needed(const char *const *names, int n, const char *name) {
  return bsearch(&name, names, (size_t)n, sizeof *names, cmp_str) != NULL;
}

/* Does the checkpoint hold variable v of g, by its name or (a part of a
 * partitioned variable) its whole's, or (a copy of a mirrored variable
 * saved once) the variable it mirrors, then *whole? *at: its row when by
 * name. */
static bool holds(const gr_graph *g, const gr_ckpt_tensor_info *infos, int ni, const char *name,
                  int *at, const char **whole) {
  int64_t off;
  gr_shape full;
  *at = -1;
  *whole = ckpt_part_of(g, name, &off, &full);
  if (listed(infos, ni, name, at)) return true;
  int w;
  if ((*whole)[0]) return listed(infos, ni, *whole, &w);
  const char *mirrors = gr_ckpt_mirror_source(g, name); /* a copy saved once */
  if (mirrors && listed(infos, ni, mirrors, &w)) *whole = mirrors;
  return (*whole)[0] != '\0';
}

typedef struct plan_lists {
  char missing[300], differ[400];
  int nmiss, ndiff;
} plan_lists;

gr_status gr_ckpt_restore_plan(gr_ckpt *ck, const gr_graph *g, const gr_ckpt_restore_options *o,
                               const char ***names, int *n, gr_ckpt_restore_report *report,
                               gr_error *err) {
  *names = NULL;
  *n = 0;
  gr_ckpt_restore_report rep = {.step = -1};
  gr_ckpt_var *vars = NULL;
  int nv = 0, ni = 0, nneed = 0;
  gr_ckpt_tensor_info *infos = NULL;
  const char **need = NULL;
  bool all;
  GR_TRY(gr_ckpt_graph_vars(g, &vars, &nv, err));
  gr_status st =
      ckpt_tensors_at(ck, o && o->at_step ? o->step : -1, &infos, NULL, &ni, &rep.step, err);
  if (st == GR_OK) st = needed_names(g, o, &need, &nneed, &all, err);
  const char **pick = st == GR_OK ? gr_alloc_array((size_t)nv + 1, sizeof *pick) : NULL;
  char *used = st == GR_OK ? calloc((size_t)ni + 1, 1) : NULL;
  if (st == GR_OK && (!pick || !used)) st = gr_error_set_oom(err);
  plan_lists l = {.missing = "", .differ = ""};
  for (int i = 0; st == GR_OK && i < nv; i++) {
    int at;
    const char *whole;
    if (!holds(g, infos, ni, vars[i].name, &at, &whole)) {
      if (all || is_needed(need, nneed, vars[i].name))
        add_name(l.missing, sizeof l.missing, &l.nmiss, vars[i].name);
      else
        rep.not_needed++;
      continue;
    }
    if (at >= 0) used[at] = 1;
    int w;
    if (whole[0] && listed(infos, ni, whole, &w)) used[w] = 1;
    if (at >= 0 && !whole[0] &&
        (infos[at].dtype != vars[i].dtype || !gr_shape_equal(&infos[at].shape, &vars[i].shape))) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX], item[600];
      snprintf(item, sizeof item, "%s (checkpoint %s %s, graph %s %s)", vars[i].name,
               gr_dtype_name(infos[at].dtype), gr_shape_str(&infos[at].shape, a),
               gr_dtype_name(vars[i].dtype), gr_shape_str(&vars[i].shape, b));
      add_name(l.differ, sizeof l.differ, &l.ndiff, item);
    }
    pick[rep.restored++] = vars[i].name;
  }
  for (int k = 0; st == GR_OK && k < ni; k++)
    if (!used[k]) add_name(rep.unused_names, sizeof rep.unused_names, &rep.unused, infos[k].name);
  end_list(rep.unused_names, sizeof rep.unused_names, rep.unused);
  end_list(l.missing, sizeof l.missing, l.nmiss);
  end_list(l.differ, sizeof l.differ, l.ndiff);
  if (st == GR_OK && (l.nmiss || l.ndiff)) {
    char other[sizeof rep.unused_names + 80] = "";
    if (l.nmiss && rep.unused) /* a hint: the names may differ (another graph, another scope) */
      snprintf(other, sizeof other, "; not in this graph: %s (a checkpoint of another graph?)",
               rep.unused_names);
    st = gr_error_set(
        err, GR_ERR_FAILED_PRECONDITION,
        "checkpoint file '%s', step %" PRId64 " does not fit this graph:%s%s%s%s%s%s", ck->path,
        rep.step, l.nmiss ? " missing from the checkpoint: " : "", l.missing,
        l.nmiss ? " (needed by this graph)" : "", other,
        l.ndiff ? (l.nmiss ? "; dtype or shape differs: " : " dtype or shape differs: ") : "",
        l.differ);
  }
  free(used);
  free(need);
  free(vars);
  gr_ckpt_tensor_infos_free(infos, ni);
  if (st != GR_OK) {
    free(pick);
    return st;
  }
  *names = pick;
  *n = rep.restored;
  if (report) *report = rep;
  return GR_OK;
}

gr_status gr_ckpt_restore(gr_ckpt *ck, gr_session *s, const gr_graph *g,
                          const gr_ckpt_restore_options *o, gr_ckpt_restore_report *report,
                          gr_error *err) {
  const char **names;
  int n;
  gr_ckpt_restore_report rep;
  GR_TRY(gr_ckpt_restore_plan(ck, g, o, &names, &n, &rep, err));
  gr_status st = gr_ckpt_restore_vars(ck, s, g, rep.step, names, n, err);
  free(names);
  if (st != GR_OK) return st;
  gr_session_set_step(s, rep.step);
  if (report) *report = rep;
  return GR_OK;
}

gr_status gr_ckpt_restore_latest(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t *step,
                                 gr_error *err) {
  gr_ckpt_restore_report rep;
  GR_TRY(gr_ckpt_restore(ck, s, g, NULL, &rep, err));
  if (step) *step = rep.step;
  return GR_OK;
}

gr_status gr_ckpt_restore_step(gr_ckpt *ck, gr_session *s, const gr_graph *g, int64_t step,
                               gr_error *err) {
  if (step < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint step %" PRId64 " is negative",
                        step);
  gr_ckpt_restore_options o = {.at_step = true, .step = step};
  return gr_ckpt_restore(ck, s, g, &o, NULL, err);
}
