/* DSL built-ins for training on several tasks (docs/strategies.md), all
 * lowered to the graph construction of ops/parallel.c:
 *
 *   ps_variables(2) { w = variable(...) }           variables on /job:ps/task:K
 *   loss = replicas(2, x, y) { loss_of(x, y) }      in-graph replicas on the workers
 *   loss = replicas(2, x, y, all_reduce=true) {...} mirrored variables, ring all-reduce
 *   replicas(..., all_reduce=true, algorithm="hier", bucket=B, piece=P)  its options
 *   loss = replicas(2, x, y, shard_input=true) {...} each replica reads its own rows
 *   loss = micro_batches(4, x, y) { loss_of(x, y) } micro-batches (model parallelism)
 *   a, b = all_reduce(x0, x1, op="mean")            a ring over the inputs' devices
 *   all_reduce(..., algorithm="hier", piece=P, hosts=["a", "a", "b"])  its options
 *   n = num_tasks("worker")                          the cluster's count, at load time
 *   i = task_index()                                 this client's task (run --task I)
 *   n, i = num_replicas(), replica_index()           the training clients, and this one
 *   spread = mirror_spread()                         max |copy - variable|
 *   w = partitioned_variable(init, parts=2)          w/part_K split along axis 0
 *
 * In a replicas or micro_batches block the names given after the count are
 * the replica's slices of those tensors; names bound inside stay inside;
 * the block's value (one tensor, or several `a, b`) is averaged over the
 * replicas. A ps_variables block is a scope: names bound inside stay bound
 * after it, as with `device`. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"
#include "placer/gr_placer.h"

static gr_status oom(gr_dsl_program *p) {
  return gr_error_set_oom(p->err);
}

/* ---- arguments ---------------------------------------------------------------------------- */

static gr_status need_block(const dsl_bargs *a) {
  if (!a->e->call.block)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s needs a block: %s(...) { ... }", a->fn, a->fn);
  return GR_OK;
}

/* The all-reduce's options among a's keywords (algorithm=, bucket=,
 * piece=, hosts=[...] for n members; those absent stay as they are). */
static gr_status all_reduce_options(const dsl_bargs *a, int n, gr_all_reduce_options *o) {
  static const char *const algs[] = {"collective", "ring", "tree", "hier", "graph", NULL};
  int ai = dsl_bargs_kw(a, "algorithm"), bi = dsl_bargs_kw(a, "bucket"),
      pi = dsl_bargs_kw(a, "piece"), hi = dsl_bargs_kw(a, "hosts"), k = 0;
  if (ai >= 0) {
    GR_TRY(dsl_bargs_choice(a, "algorithm", algs,
                            "\"collective\", \"ring\", \"tree\", \"hier\" or \"graph\"", &k));
    o->algorithm = algs[k];
  }
  if (bi >= 0) GR_TRY(dsl_bargs_int(a, bi, "bucket (bytes)", 1, INT64_MAX, &o->bucket_bytes));
  if (pi >= 0) GR_TRY(dsl_bargs_int(a, pi, "piece (bytes)", 1, INT64_MAX, &o->piece_bytes));
  if (hi < 0) return GR_OK;
  const dsl_value *l = &a->v[hi];
  const char **hosts = dsl_alloc(&a->p->temp, sizeof(char *) * (size_t)(n + 1));
  if (!hosts) return oom(a->p);
  for (int d = 0; d < n && l->kind == V_LIST && !l->has_t && l->list.n == n; d++)
    if ((hosts[d] = l->list.items[d].kind == V_STR ? l->list.items[d].str : NULL) == NULL) break;
  if (l->kind != V_LIST || l->has_t || l->list.n != n || (n > 0 && !hosts[n - 1]))
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[hi].pos,
                     "%s: hosts must be a list of %d host names, one per member", a->fn, n);
  o->hosts = hosts;
  return GR_OK;
}

/* ---- ps_variables(num_ps, strategy="round_robin") { ... } --------------------------------- */

static gr_status ps_variables(const dsl_bargs *a, const char *name, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"strategy", NULL};
  GR_TRY(need_block(a));
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  if (a->npos != 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "ps_variables takes the number of ps tasks: ps_variables(2) { ... }");
  if (name)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "ps_variables(...) { ... } is a scope and has no value to bind to '%s'", name);
  int64_t num_ps = 0;
  GR_TRY(dsl_bargs_int(a, 0, "the number of ps tasks", 1, GR_PS_MAX_TASKS, &num_ps));
  static const char *const strategies[] = {"round_robin", "greedy", NULL};
  int greedy = 0;
  GR_TRY(dsl_bargs_choice(a, "strategy", strategies, "\"round_robin\" or \"greedy\" (by bytes)",
                          &greedy));
  gr_ps_strategy strategy = greedy ? GR_PS_GREEDY_BYTES : GR_PS_ROUND_ROBIN;
  dsl_set_loc(p, a->e->pos);
  if (gr_graph_push_ps_placement(p->g, (int)num_ps, strategy) != GR_OK)
    return dsl_check_graph(p, a->e->pos);
  p->block_depth++;
  gr_status st = dsl_lower_block(p, a->e->call.block);
  p->block_depth--;
  gr_graph_pop_device_scope(p->g);
  memset(out, 0, sizeof *out);
  return st;
}

/* ---- replicas(n, x, ..., devices=[...], all_reduce=false, algorithm=, bucket=, piece=) ------ */

typedef struct rep_ctx {
  const dsl_bargs *a;
  int ni, nout;
  bool body_failed;
} rep_ctx;

/* The number of values a block gives, from its last statement (`a, b`: 2). */
static int block_values(const dsl_block *b) {
  const dsl_stmt *last = b->n ? b->stmts[b->n - 1] : NULL;
  if (!last || (last->kind != S_EXPR && last->kind != S_RETURN)) return 1;
  return last->expr->kind == E_TUPLE ? last->expr->list.n : 1;
}

static gr_status rep_body(gr_graph *g, void *arg, int k, const gr_output *inputs,
                          gr_output *outputs) {
  rep_ctx *c = arg;
  const dsl_bargs *a = c->a;
  gr_dsl_program *p = a->p;
  (void)g;
  (void)k;
  dsl_frame frame, *saved = p->frame;
  if (!dsl_frame_init(&frame, 16, saved, &p->temp)) return c->body_failed = true, oom(p);
  gr_status st = GR_OK;
  for (int i = 0; i < c->ni && st == GR_OK; i++) { /* the slices under the names given */
    dsl_binding *b = dsl_frame_insert(&frame, a->e->call.args[1 + i].value->str);
    if (!b) {
      st = oom(p);
      break;
    }
    dsl_tensor_value(&b->v, inputs[i]);
    b->pos = a->e->call.args[1 + i].pos;
  }
  p->frame = &frame;
  int nfresh = p->nfresh;
  dsl_value v;
  const dsl_stmt *last = NULL;
  dsl_keras_saved keras; /* the layers are the replicas' shared ones */
  gr_status kst = dsl_keras_enter_replica(p, &keras);
  if (st == GR_OK) st = kst;
  p->block_depth++;
  if (st == GR_OK) st = dsl_block_value(p, a->e->call.block, &v, &last);
  p->block_depth--;
  dsl_keras_leave(p, &keras);
  if (st == GR_OK) {
    int have = v.kind == V_TUPLE ? v.list.n : 1;
    if (have != c->nout)
      st = dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, last->expr->pos,
                     "%s: the block gives %d values; write them as a tuple (`a, b`) as its last "
                     "statement",
                     a->fn, have);
    for (int j = 0; j < c->nout && st == GR_OK; j++) {
      const dsl_expr *x = last->expr;
      dsl_pos at = x->kind == E_TUPLE && j < x->list.n ? x->list.items[j]->pos : x->pos;
      st = dsl_to_tensor(p, v.kind == V_TUPLE ? &v.list.items[j] : &v, at, GR_DTYPE_INVALID,
                         &outputs[j]);
    }
  }
  p->frame = saved;
  p->nfresh = nfresh;
  dsl_frame_free(&frame);
  if (st != GR_OK) c->body_failed = true;
  return st;
}

static gr_status replicas(const dsl_bargs *a, const char *name, bool micro, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const rep_kw[] = {"devices", "all_reduce", "shard_input", "algorithm",
                                       "bucket",  "piece",      NULL};
  static const char *const micro_kw[] = {NULL};
  GR_TRY(need_block(a));
  GR_TRY(dsl_bargs_only_keywords(a, micro ? micro_kw : rep_kw));
  if (a->npos < 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s takes the number of %s and the names of the batch's tensors: "
                     "%s(%d, images, labels) { ... }",
                     a->fn, micro ? "micro-batches" : "replicas", a->fn, micro ? 4 : 2);
  int64_t n = 0;
  GR_TRY(dsl_bargs_int(a, 0, micro ? "the number of micro-batches" : "the number of replicas", 1,
                       GR_REPLICATE_MAX, &n));
  int ni = a->npos - 1;
  gr_output *inputs = dsl_alloc(&p->temp, sizeof(gr_output) * (size_t)(ni + 1));
  if (!inputs) return oom(p);
  for (int i = 0; i < ni; i++) {
    const dsl_arg *arg = &a->e->call.args[1 + i];
    if (arg->value->kind != E_IDENT || !a->v[1 + i].has_t || !a->v[1 + i].t.node)
      return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, arg->pos,
                       "%s: after the count come names of tensors (the block sees each name as "
                       "its slice of the batch)",
                       a->fn);
    inputs[i] = a->v[1 + i].t;
  }
  const char **devices = NULL;
  bool mirrored = false, sharded = false;
  gr_all_reduce_options ar = {0};
  if (!micro) {
    int di = dsl_bargs_kw(a, "devices"), mi = dsl_bargs_kw(a, "all_reduce"),
        si = dsl_bargs_kw(a, "shard_input");
    if (mi >= 0) GR_TRY(dsl_bargs_bool(a, mi, "all_reduce", &mirrored));
    if (si >= 0) GR_TRY(dsl_bargs_bool(a, si, "shard_input", &sharded));
    GR_TRY(all_reduce_options(a, (int)n, &ar));
    for (int i = 0; i < a->n && !mirrored; i++) {
      const char *kw = a->e->call.args[i].name;
      if (kw && (!strcmp(kw, "algorithm") || !strcmp(kw, "bucket") || !strcmp(kw, "piece")))
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos,
                         "%s: %s= sets the all-reduce of the gradients: it needs all_reduce=true",
                         a->fn, kw);
    }
    devices = dsl_alloc(&p->temp, sizeof(char *) * (size_t)(n + 1));
    if (!devices) return oom(p);
    if (di >= 0) {
      const dsl_value *l = &a->v[di];
      if (l->kind != V_LIST || l->has_t || l->list.n != n)
        return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[di].pos,
                         "%s: devices must be a list of %lld device strings", a->fn, (long long)n);
      for (int k = 0; k < n; k++) {
        if (l->list.items[k].kind != V_STR)
          return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[di].pos,
                           "%s: devices must be a list of %lld device strings", a->fn,
                           (long long)n);
        devices[k] = l->list.items[k].str;
      }
    } else {
      for (int k = 0; k < n; k++) {
        char buf[64];
        snprintf(buf, sizeof buf, "/job:worker/task:%d", k);
        if (!(devices[k] = dsl_strndup(&p->temp, buf, strlen(buf)))) return oom(p);
      }
    }
  }
  int outer = p->replica_copies > 0 ? p->replica_copies : 1;
  if ((int64_t)outer * n > GR_REPLICATE_MAX)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, a->e->pos,
                     "%s: nested blocks would build the body %lld times (at most %d)", a->fn,
                     (long long)(outer * n), GR_REPLICATE_MAX);
  rep_ctx c = {.a = a, .ni = ni, .nout = block_values(a->e->call.block)};
  if (c.nout > GR_REPLICATE_MAX_OUTPUTS)
    return dsl_error(p->err, GR_ERR_OUT_OF_RANGE, a->e->pos, "%s: a block gives at most %d values",
                     a->fn, GR_REPLICATE_MAX_OUTPUTS);
  gr_output outs[GR_REPLICATE_MAX_OUTPUTS];
  gr_replicate_options o = {.num_replicas = (int)n,
                            .devices = devices,
                            .mirror_variables = mirrored,
                            .shard_inputs = sharded,
                            .scope = micro ? "micro_batch" : "replica",
                            .all_reduce = ar};
  dsl_set_loc(p, a->e->pos);
  p->replica_copies = outer * (int)n;
  gr_status st = gr_replicate(p->g, &o, inputs, ni, rep_body, &c, c.nout, outs);
  p->replica_copies = outer;
  if (st != GR_OK) {
    if (c.body_failed) {
      char note[96];
      snprintf(note, sizeof note, "in this %s block", a->fn);
      dsl_error_note(p->err, a->e->pos, note);
      return st;
    }
    return gr_graph_error(p->g) ? dsl_check_graph(p, a->e->pos)
                                : dsl_error(p->err, st, a->e->pos, "%s failed", a->fn);
  }
  dsl_set_loc(p, a->e->pos);
  if (c.nout == 1) {
    gr_output o1 = outs[0];
    if (name)
      o1 = n == 1 ? gr_op(p->g, "identity", name, &o1, 1, NULL, 0) : gr_name(p->g, o1, name);
    GR_TRY(dsl_check_graph(p, a->e->pos));
    dsl_tensor_value(out, o1);
    return GR_OK;
  }
  return dsl_tuple_value(p, outs, c.nout, out);
}

/* ---- all_reduce(x0, x1, ..., op="sum", algorithm=, piece=, hosts=[...]) ------------------- */

static gr_status all_reduce(const dsl_bargs *a, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"op", "algorithm", "piece", "hosts", NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  static const char *const ops[] = {"sum", "mean", NULL};
  int mean = 0;
  GR_TRY(dsl_bargs_choice(a, "op", ops, "\"sum\" or \"mean\"", &mean));
  gr_reduction op = mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM;
  int n = a->npos;
  if (n < 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "all_reduce takes one tensor per device: all_reduce(x0, x1, op=\"mean\")");
  gr_all_reduce_options ar = {0};
  GR_TRY(all_reduce_options(a, n, &ar));
  gr_output *xs = dsl_alloc(&p->temp, sizeof(gr_output) * (size_t)n * 2);
  if (!xs) return oom(p);
  for (int i = 0; i < n; i++)
    GR_TRY(dsl_to_tensor(p, &a->v[i], a->e->call.args[i].pos, GR_DTYPE_INVALID, &xs[i]));
  dsl_set_loc(p, a->e->pos);
  gr_all_reduce_with(p->g, xs, 1, n, NULL, op, 0, &ar, xs + n);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  return dsl_tensors_value(p, xs + n, n, out);
}

/* ---- w = partitioned_variable(initial_value, parts=K) -------------------------------------- */

static gr_status partitioned_variable(const dsl_bargs *a, const char *name, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"parts", NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  int pi = dsl_bargs_kw(a, "parts");
  if (a->npos != 1 || pi < 0)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "partitioned_variable takes an initial value and the number of parts: "
                     "w = partitioned_variable(glorot_uniform([1000, 64]), parts=2)");
  if (!name)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "partitioned_variable needs a name: w = partitioned_variable(...)");
  int64_t parts = 0;
  GR_TRY(dsl_bargs_int(a, pi, "parts", INT32_MIN, INT32_MAX, &parts));
  gr_output init;
  GR_TRY(dsl_to_tensor(p, &a->v[0], a->e->call.args[0].pos, GR_F32, &init));
  dsl_set_loc(p, a->e->pos);
  gr_output w = gr_partitioned_variable(p->g, name, init, (int)parts, NULL);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  dsl_tensor_value(out, w);
  return GR_OK;
}

/* ---- num_tasks(job, default=1), num_replicas() ------------------------------------------ */

/* The cluster the program runs on: the options', else GRAPHRUN_CLUSTER's
 * (*mine: to free), else none (*c NULL). */
static gr_status program_cluster(const dsl_bargs *a, const char *fn, const gr_cluster **c,
                                 gr_cluster **mine) {
  *c = a->p->opts.cluster;
  *mine = NULL;
  const char *env = getenv("GRAPHRUN_CLUSTER");
  if (*c || !env || !*env) return GR_OK;
  gr_error e;
  const char *t = env;
  while (*t == ' ' || *t == '\t' || *t == '\n') t++;
  gr_status st = *t == '{' ? gr_cluster_parse_json(env, strlen(env), "GRAPHRUN_CLUSTER", mine, &e)
                           : gr_cluster_load_json(env, mine, &e);
  if (st != GR_OK)
    return dsl_error(a->p->err, st, a->e->pos, "%s: GRAPHRUN_CLUSTER: %s", fn, e.msg);
  *c = *mine;
  return GR_OK;
}

static int64_t count_job(const gr_cluster *c, const char *job) {
  int64_t n = 0;
  for (int i = 0; i < gr_cluster_num_tasks(c); i++)
    n += strcmp(gr_cluster_task_at(c, i)->job, job) == 0;
  return n;
}

static gr_status num_tasks(const dsl_bargs *a, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {"default", NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  if (a->npos != 1)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "num_tasks takes a job name: num_tasks(\"worker\")");
  const char *job = "";
  GR_TRY(dsl_bargs_string(a, 0, "the job", &job));
  int64_t dflt = 1;
  int di = dsl_bargs_kw(a, "default");
  if (di >= 0) GR_TRY(dsl_bargs_int(a, di, "default", 0, GR_REPLICATE_MAX, &dflt));
  const gr_cluster *c;
  gr_cluster *mine;
  GR_TRY(program_cluster(a, "num_tasks", &c, &mine));
  dsl_int_value(out, c ? count_job(c, job) : dflt);
  gr_cluster_free(mine);
  return GR_OK;
}

/* The clients that train in between-graph training: the chief's (it
 * trains its share, as TensorFlow's chief worker) and the workers'; 1
 * without a cluster. */
static gr_status num_replicas(const dsl_bargs *a, dsl_value *out) {
  if (a->n)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "num_replicas takes no arguments");
  const gr_cluster *c;
  gr_cluster *mine;
  GR_TRY(program_cluster(a, "num_replicas", &c, &mine));
  dsl_int_value(out, c ? count_job(c, "chief") + count_job(c, "worker") : 1);
  gr_cluster_free(mine);
  return GR_OK;
}

/* ---- task_index(), replica_index() ---------------------------------------------------------- */

/* This client's task index (graphrun run --task I; 0 without). */
static gr_status task_index(const dsl_bargs *a, dsl_value *out) {
  if (a->n)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "task_index takes no arguments");
  dsl_int_value(out, a->p->opts.task_index);
  return GR_OK;
}

/* This client's place among num_replicas(): the chief 0, worker I after
 * the chief (I + 1 with a chief, else I); which shard of the data it reads. */
static gr_status replica_index(const dsl_bargs *a, dsl_value *out) {
  if (a->n)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "replica_index takes no arguments");
  int64_t i = a->p->opts.task_index;
  const char *job = a->p->opts.job;
  if (job && !strcmp(job, "worker")) {
    const gr_cluster *c;
    gr_cluster *mine;
    GR_TRY(program_cluster(a, "replica_index", &c, &mine));
    if (c) i += count_job(c, "chief");
    gr_cluster_free(mine);
  }
  dsl_int_value(out, i);
  return GR_OK;
}

/* ---- the handlers of the built-in table (dsl_call.c) ------------------------------------- */

DSL_BUILTIN(ps_variables, ps_variables(&a, name, out))

DSL_BUILTIN(replicas, replicas(&a, name, false, out))

DSL_BUILTIN(micro_batches, replicas(&a, name, true, out))

DSL_BUILTIN(all_reduce, all_reduce(&a, out))

DSL_BUILTIN(num_tasks, num_tasks(&a, out))

DSL_BUILTIN(task_index, task_index(&a, out))

DSL_BUILTIN(num_replicas, num_replicas(&a, out))

DSL_BUILTIN(replica_index, replica_index(&a, out))

DSL_BUILTIN(partitioned_variable, partitioned_variable(&a, name, out))

gr_status dsl_builtin_mirror_spread(gr_dsl_program *p, const char *fn, const dsl_expr *e,
                                    const char *name, dsl_value *v, int nargs, dsl_value *out) {
  if (nargs)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, e->pos, "mirror_spread takes no arguments");
  dsl_set_loc(p, e->pos);
  gr_output o = gr_mirror_spread(p->g);
  if (name && o.node) o = gr_name(p->g, o, name);
  GR_TRY(dsl_check_graph(p, e->pos));
  dsl_tensor_value(out, o);
  return GR_OK;
}
