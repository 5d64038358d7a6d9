/* The `save`, `restore` and `checksums` ops. All three name their
 * variables in the string attr "vars" (newline-separated; "" = every
 * variable of the graph; checksums needs names) and reach the values
 * through the step's resource manager. Each run of save or restore opens
 * the file, does its work in one transaction, and closes it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"

static gr_status step_scalar_shape(gr_shape_ctx *ctx) {
  const char *path = gr_node_attr_string(ctx->node, "path", "");
  if (!path[0]) return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr path is empty");
  if (ctx->num_inputs > 0 && (ctx->in_dtypes[0] != GR_I64 || ctx->in_shapes[0].rank != 0))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "input step must be an i64 scalar");
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

/* The variables the node names (all of the graph's when attr vars is ""),
 * with dtypes and shapes from the graph. by_name: a name the graph does not
 * declare is taken by name alone (a save node on a task, whose partition
 * holds no variable node: the values are in the task's container). *out is
 * one malloc'd block (free it), holding the names it does not take from
 * the graph. */
static gr_status node_vars(gr_kernel_ctx *ctx, bool by_name, gr_ckpt_var **out, int *n) {
  gr_ckpt_var *all;
  int na;
  GR_TRY(gr_ckpt_graph_vars(ctx->node->graph, &all, &na, ctx->err));
  const char *list = gr_node_attr_string(ctx->node, "vars", "");
  if (!list[0]) {
    *out = all;
    *n = na;
    return GR_OK;
  }
  size_t cap = 1, len = strlen(list);
  for (const char *p = list; *p; p++) cap += *p == '\n';
  gr_ckpt_var *pick = malloc(sizeof *pick * cap + len + 1);
  if (!pick) {
    free(all);
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  char *names = memcpy((char *)(pick + cap), list, len + 1); /* split in place below */
  int m = 0;
  for (char *p = names; *p;) {
    size_t l = strcspn(p, "\n");
    bool last = p[l] == '\0';
    p[l] = '\0';
    const gr_ckpt_var *f = NULL;
    for (int i = 0; i < na && !f; i++)
      if (strcmp(all[i].name, p) == 0) f = &all[i];
    if (!f && !by_name) {
      free(pick);
      free(all);
      return gr_kernel_error(ctx, GR_ERR_NOT_FOUND, "the graph has no variable named '%s'", p);
    }
    pick[m++] = f ? *f : (gr_ckpt_var){.name = p};
    p += l + !last;
  }
  free(all);
  *out = pick;
  *n = m;
  return GR_OK;
}

static gr_status set_step_output(gr_kernel_ctx *ctx, int64_t step) {
  gr_tensor *o;
  gr_shape sc = gr_shape_scalar();
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &sc, &o));
  *(int64_t *)gr_tensor_data(o) = step;
  return GR_OK;
}

/* The slice info of vars[0..n) for a task's shard: *out (n entries, NULL
 * when none is a part) and *text (what their wholes point into), both
 * malloc'd. From the node's attr slices (one line per variable of attr
 * vars, made by gr_save_at from the variable nodes, which a task's
 * partition does not hold), else from the graph's variable nodes. */
static gr_status node_slices(gr_kernel_ctx *ctx, const gr_ckpt_var *vars, int n,
                             gr_ckpt_slice **out, char **text) {
  *out = NULL;
  *text = NULL;
  const char *spec = gr_node_attr_string(ctx->node, "slices", "");
  gr_ckpt_slice *sl = calloc((size_t)n + 1, sizeof *sl);
  char *t = strdup(spec);
  if (!sl || !t) {
    free(sl), free(t);
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  bool ok = true, any = false;
  if (!spec[0]) {
    for (int i = 0; i < n; i++) {
      int64_t off;
      gr_shape full;
      const char *of = ckpt_part_of(ctx->node->graph, vars[i].name, &off, &full);
      if (of[0]) sl[i] = (gr_ckpt_slice){of, full, off}, any = true;
    }
  } else {
    char *p = t;
    for (int k = 0; ok && k < n; k++) {
      size_t l = strcspn(p, "\n");
      bool last = p[l] == '\0';
      ok = ckpt_parse_slice_spec(p, l, &sl[k]) && last == (k == n - 1);
      any |= sl[k].whole != NULL;
      p += l + !last;
    }
  }
  if (!ok || !any) {
    free(sl), free(t);
    return ok ? GR_OK
              : gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                                "attr slices is not one line (FIRST_ROW [DIMS] WHOLE, or empty) "
                                "per variable of attr vars");
  }
  *out = sl;
  *text = t;
  return GR_OK;
}

/* The task a node runs on ("/job:J/task:T", from its device), for messages. */
static void node_task(const gr_kernel_ctx *ctx, char *buf, size_t cap) {
  const char *dev = ctx->node->assigned_device ? ctx->node->assigned_device : "this task";
  const char *d = strstr(dev, "/device:");
  snprintf(buf, cap, "%.*s", d ? (int)(d - dev) : (int)strlen(dev), dev);
}

static gr_status save_kernel(gr_kernel_ctx *ctx) {
  gr_ckpt_var *vars;
  int n;
  GR_TRY(node_vars(ctx, true, &vars, &n));
  gr_ckpt_options o = {.max_to_keep = (int)gr_node_attr_int(ctx->node, "max_to_keep", 0),
                       .keep_every_n_steps = gr_node_attr_int(ctx->node, "keep_every_n_steps", 0)};
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  gr_ckpt_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
  gr_ckpt *ck = NULL;
  /* the step given (a shard of a sharded checkpoint), else this run is done: resume at the next */
  int64_t step = ctx->num_inputs > 0 ? *(const int64_t *)gr_tensor_data(&ctx->inputs[0])
                                     : ctx->step->step_id + 1;
  gr_status s = GR_OK;
  if (!vals || !ts) s = gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (s == GR_OK) s = ckpt_collect_values(ctx->step->resources, vars, n, vals, ctx->err);
  for (int i = 0; s == GR_OK && i < n; i++) ts[i] = (gr_ckpt_tensor){vars[i].name, &vals[i]};
  const char *path = gr_node_attr_string(ctx->node, "path", "");
  gr_tensor *wholes = calloc((size_t)n + 1, sizeof *wholes);
  int nt = n, nw = 0;
  if (s == GR_OK && !wholes) s = gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (s == GR_OK && ctx->num_inputs > 0) { /* a task's shard: its parts as slices */
    gr_ckpt_slice *sl = NULL;
    char *text = NULL;
    s = node_slices(ctx, vars, n, &sl, &text);
    char task[GR_DEVICE_NAME_MAX];
    node_task(ctx, task, sizeof task);
    if (s == GR_OK && gr_node_attr_int(ctx->node, "async", 0)) /* copied, written by a thread */
      s = ckpt_shard_write_start(path, task, step, ts, sl, n, ctx->err);
    else if (s == GR_OK)
      s = gr_ckpt_save_shard_slices(path, step, ts, sl, n, ctx->err);
    free(sl);
    free(text);
  } else if (s == GR_OK) { /* partitioned variables whole */
    s = ckpt_join_parts(ctx->node->graph, vars, vals, n, ts, &nt, wholes, &nw, ctx->err);
    char meta[64];
    snprintf(meta, sizeof meta, "{\"graph_seed\":%" PRIu64 "}", ctx->step->seed);
    if (s == GR_OK) s = gr_ckpt_open(path, &o, &ck, ctx->err);
    if (s == GR_OK) s = gr_ckpt_save_tensors(ck, step, ts, nt, meta, ctx->err);
    gr_ckpt_close(ck);
  }
  for (int i = 0; i < nw; i++) gr_tensor_release(&wholes[i]);
  free(wholes);
  for (int i = 0; vals && i < n; i++) gr_tensor_release(&vals[i]);
  free(vals);
  free(ts);
  free(vars);
  if (s == GR_OK) s = set_step_output(ctx, step);
  return s;
}

static gr_status shard_status_kernel(gr_kernel_ctx *ctx) {
  char task[GR_DEVICE_NAME_MAX];
  node_task(ctx, task, sizeof task);
  int64_t step = *(const int64_t *)gr_tensor_data(&ctx->inputs[0]);
  GR_TRY(ckpt_shard_write_wait(gr_node_attr_string(ctx->node, "path", ""), task, step, ctx->err));
  return set_step_output(ctx, step);
}

static gr_status restore_kernel(gr_kernel_ctx *ctx) {
  gr_ckpt_var *vars;
  int n;
  GR_TRY(node_vars(ctx, false, &vars, &n));
  bool all = !gr_node_attr_string(ctx->node, "vars", "")[0];
  gr_ckpt_options o = {.read_only = true};
  gr_ckpt *ck = NULL;
  int64_t step = -1;
  gr_status s = gr_ckpt_open(gr_node_attr_string(ctx->node, "path", ""), &o, &ck, ctx->err);
  if (s == GR_OK)
    s = ckpt_restore_graph(ck, ctx->step->resources, ctx->node->graph, vars, n,
                           gr_node_attr_int(ctx->node, "step", -1), all, &step, ctx->err);
  gr_ckpt_close(ck);
  free(vars);
  if (s == GR_OK) s = set_step_output(ctx, step);
  return s;
}

/* XXH64 of each named variable's bytes in the step's container. */
static gr_status checksums_kernel(gr_kernel_ctx *ctx) {
  gr_ckpt_var *vars;
  int n;
  GR_TRY(node_vars(ctx, true, &vars, &n));
  gr_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
  gr_status s = vals ? GR_OK : gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (s == GR_OK) s = ckpt_collect_values(ctx->step->resources, vars, n, vals, ctx->err);
  gr_shape sh = gr_shape_make(1, (int64_t[]){n});
  gr_tensor *o = NULL;
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 0, GR_I64, &sh, &o);
  for (int i = 0; s == GR_OK && i < n; i++)
    ((int64_t *)gr_tensor_data(o))[i] =
        (int64_t)gr_ckpt_hash64(gr_tensor_data(&vals[i]), gr_tensor_num_bytes(&vals[i]));
  for (int i = 0; vals && i < n; i++) gr_tensor_release(&vals[i]);
  free(vals);
  free(vars);
  return s;
}

static gr_status checksums_shape(gr_shape_ctx *ctx) {
  const char *list = gr_node_attr_string(ctx->node, "vars", "");
  int64_t n = list[0] != '\0';
  for (const char *p = list; *p; p++) n += *p == '\n';
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_make(1, &n);
  return GR_OK;
}

static const gr_attr_spec save_attrs[] = {
    {"path", GR_ATTR_STRING, true, {0}},
    {"vars", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"max_to_keep", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"keep_every_n_steps", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"slices", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"async", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};

static const gr_attr_spec restore_attrs[] = {
    {"path", GR_ATTR_STRING, true, {0}},
    {"vars", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"step", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = -1}}};

const gr_op_def gr_op_save = {
    .name = "save",
    .doc = "writes variables (attr vars, newline-separated; \"\": all) to the checkpoint file "
           "at attr path, at the step given as input (optional; default the run's step + 1); "
           "with a step, a task's shard, its parts of partitioned variables as slices (attr "
           "slices: a line \"FIRST_ROW [DIMS] WHOLE\" or \"\" per variable; attr async 1: the "
           "values copied and the shard written by a thread, after the previous write of the "
           "file, whose failure it reports; shard_status waits for it); returns the step "
           "recorded",
    .min_inputs = 0,
    .max_inputs = 1,
    .input_names = (const char *const[]){"step"},
    .num_outputs = 1,
    .attrs = save_attrs,
    .num_attrs = 6,
    .shape_fn = step_scalar_shape,
    .kernel = save_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_EXPENSIVE | GR_OP_NO_GRADIENT};

const gr_op_def gr_op_restore = {
    .name = "restore",
    .doc = "sets variables (attr vars; \"\": all) from the checkpoint file at attr path, at attr "
           "step (-1: newest); returns that step",
    .num_outputs = 1,
    .attrs = restore_attrs,
    .num_attrs = 3,
    .shape_fn = step_scalar_shape,
    .kernel = restore_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_EXPENSIVE};

static const gr_attr_spec shard_status_attrs[] = {{"path", GR_ATTR_STRING, true, {0}}};

const gr_op_def gr_op_shard_status = {
    .name = "shard_status",
    .doc = "waits for the background write (a save node with attr async) of the shard file at "
           "attr path at the step given as input, on this task; fails with its error, naming "
           "the task and the file, if it failed; returns the step",
    .min_inputs = 1,
    .max_inputs = 1,
    .input_names = (const char *const[]){"step"},
    .num_outputs = 1,
    .attrs = shard_status_attrs,
    .num_attrs = 1,
    .shape_fn = step_scalar_shape,
    .kernel = shard_status_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

static const gr_attr_spec checksums_attrs[] = {{"vars", GR_ATTR_STRING, true, {0}}};

const gr_op_def gr_op_checksums = {
    .name = "checksums",
    .doc = "XXH64 of the bytes of each variable named in attr vars (newline-separated), as "
           "i64 bits: what a cluster's save compares across the copies of mirrored variables",
    .num_outputs = 1,
    .attrs = checksums_attrs,
    .num_attrs = 1,
    .shape_fn = checksums_shape,
    .kernel = checksums_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_ops(void) {
  gr_error err;
  /* ours, registered once: a failure is an engine bug */
  if (gr_op_registry_add(&gr_op_save, &err) != GR_OK) gr_assert_fail(err.msg, __FILE__, __LINE__);
  if (gr_op_registry_add(&gr_op_restore, &err) != GR_OK)
    gr_assert_fail(err.msg, __FILE__, __LINE__);
  if (gr_op_registry_add(&gr_op_checksums, &err) != GR_OK)
    gr_assert_fail(err.msg, __FILE__, __LINE__);
  if (gr_op_registry_add(&gr_op_shard_status, &err) != GR_OK)
    gr_assert_fail(err.msg, __FILE__, __LINE__);
}

void gr_ckpt_register_ops(void) {
  pthread_once(&once, register_ops);
}

/* ---- builders ------------------------------------------------------------------ */

static void fail(gr_graph *g, gr_status code, const char *op, const char *msg) {
  gr_error e;
  gr_error_set(&e, code, "%s: %s", op, msg);
  gr_graph_set_error(g, &e);
}

/* Joins the "var" attrs of the variable outputs with newlines (arena memory). */
static const char *var_list(gr_graph *g, const char *op, const gr_output *vars, int n, bool *ok) {
  *ok = false;
  if (n < 0 || (n && !vars)) {
    fail(g, GR_ERR_INVALID_ARGUMENT, op, "bad variable array");
    return NULL;
  }
  size_t len = 1;
  for (int i = 0; i < n; i++) {
    if (!vars[i].node) return NULL; /* a null input: the graph has its error already */
    const char *name = gr_node_attr_string(vars[i].node, "var", NULL);
    if (!(vars[i].node->op->flags & GR_OP_VARIABLE) || !name) {
      gr_error e;
      gr_error_set(&e, GR_ERR_INVALID_ARGUMENT, "%s: '%s' is not a variable", op,
                   vars[i].node->name);
      gr_graph_set_error(g, &e);
      return NULL;
    }
    len += strlen(name) + 1;
  }
  char *s = gr_graph_alloc(g, len);
  if (!s) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, op, "out of memory");
    return NULL;
  }
  s[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(s, "\n");
    strcat(s, gr_node_attr_string(vars[i].node, "var", ""));
  }
  *ok = true;
  return s;
}

gr_output gr_save(gr_graph *g, const char *path, const gr_output *vars, int n, int max_to_keep,
                  int64_t keep_every_n_steps) {
  gr_ckpt_register_ops();
  bool ok;
  const char *list = var_list(g, "save", vars, n, &ok);
  if (!ok) return (gr_output){NULL, 0};
  gr_attr a[] = {gr_attr_string("path", path ? path : ""), gr_attr_string("vars", list),
                 gr_attr_int("max_to_keep", max_to_keep),
                 gr_attr_int("keep_every_n_steps", keep_every_n_steps)};
  return gr_graph_add_node(g, &gr_op_save, NULL, NULL, 0, a, 4);
}

/* The attr slices of a shard's save node: a line per variable of
 * vars[0..n) (ckpt_slice_spec), in g's arena; NULL when none is a part. */
static const char *slice_list(gr_graph *g, const gr_output *vars, int n, bool *ok) {
  *ok = true;
  size_t cap = 1;
  bool any = false;
  for (int i = 0; i < n; i++) {
    int64_t off;
    gr_shape full;
    const char *of = ckpt_part_of(g, gr_node_attr_string(vars[i].node, "var", ""), &off, &full);
    cap += strlen(of) + GR_MAX_RANK * 21 + 32;
    any |= of[0] != '\0';
  }
  if (!any) return NULL;
  char *buf = malloc(cap);
  size_t len = 0;
  for (int i = 0; buf && i < n; i++) {
    if (i) buf[len++] = '\n';
    buf[len] = '\0';
    ckpt_slice_spec(g, gr_node_attr_string(vars[i].node, "var", ""), buf, cap, &len);
  }
  const char *s = buf ? gr_graph_strdup(g, buf) : NULL;
  free(buf);
  if (!s) {
    fail(g, GR_ERR_RESOURCE_EXHAUSTED, "save", "out of memory");
    *ok = false;
  }
  return s;
}

gr_output gr_save_at(gr_graph *g, const char *path, const gr_output *vars, int n, gr_output step) {
  return gr_save_shard(g, path, vars, n, step, false);
}

gr_output gr_save_shard(gr_graph *g, const char *path, const gr_output *vars, int n, gr_output step,
                        bool async) {
  gr_ckpt_register_ops();
  bool ok;
  const char *list = var_list(g, "save", vars, n, &ok);
  if (!ok || !step.node) return (gr_output){NULL, 0};
  const char *slices = slice_list(g, vars, n, &ok);
  if (!ok) return (gr_output){NULL, 0};
  gr_attr a[] = {gr_attr_string("path", path ? path : ""), gr_attr_string("vars", list),
                 gr_attr_int("async", async), gr_attr_string("slices", slices ? slices : "")};
  return gr_graph_add_node(g, &gr_op_save, NULL, &step, 1, a, slices ? 4 : 3);
}

gr_output gr_shard_status(gr_graph *g, const char *path, gr_output step) {
  gr_ckpt_register_ops();
  if (!step.node) return (gr_output){NULL, 0};
  gr_attr a[] = {gr_attr_string("path", path ? path : "")};
  return gr_graph_add_node(g, &gr_op_shard_status, NULL, &step, 1, a, 1);
}

gr_output gr_restore(gr_graph *g, const char *path, const gr_output *vars, int n, int64_t step) {
  gr_ckpt_register_ops();
  bool ok;
  const char *list = var_list(g, "restore", vars, n, &ok);
  if (!ok) return (gr_output){NULL, 0};
  gr_attr a[] = {gr_attr_string("path", path ? path : ""), gr_attr_string("vars", list),
                 gr_attr_int("step", step)};
  return gr_graph_add_node(g, &gr_op_restore, NULL, NULL, 0, a, 3);
}

gr_output gr_ckpt_checksums(gr_graph *g, const gr_output *vars, int n) {
  gr_ckpt_register_ops();
  bool ok;
  const char *list = var_list(g, "checksums", vars, n, &ok);
  if (!ok) return (gr_output){NULL, 0};
  if (n == 0) {
    fail(g, GR_ERR_INVALID_ARGUMENT, "checksums", "no variable");
    return (gr_output){NULL, 0};
  }
  gr_attr a[] = {gr_attr_string("vars", list)};
  return gr_graph_add_node(g, &gr_op_checksums, NULL, NULL, 0, a, 1);
}
