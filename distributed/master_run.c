/* The master as a session's remote runner: registering a signature's
 * partitions with their tasks, running steps on them, and asking which
 * variables have values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/master_internal.h"

#define REGISTER_TIMEOUT_MS 60000

typedef struct task_plan {
  int task;
  uint64_t handle;
  int *feeds; /* caller feed indices its partitions read */
  int num_feeds;
  int *fetches; /* caller fetch indices its partitions fill */
  int num_fetches;
} task_plan;

typedef struct mplan {
  task_plan *t;
  int n;
  int num_fetches;      /* the caller's fetches: the largest fetch_index + 1 */
  gr_partitions *parts; /* kept: a traced step's events point at their nodes */
} mplan;

static void plan_free(mplan *p) {
  if (!p) return;
  gr_partitions_free(p->parts);
  for (int i = 0; i < p->n; i++) free(p->t[i].feeds), free(p->t[i].fetches);
  free(p->t);
  free(p);
}

static void pack_endpoints(msgpack_packer *pk, const gr_output *eps, const int *index, int n) {
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    msgpack_pack_array(pk, 3);
    gr_pack_str(pk, eps[i].node->name);
    msgpack_pack_int(pk, eps[i].index);
    msgpack_pack_int(pk, index[i]);
  }
}

/* The REGISTER message of task k: every task as a peer, its partitions. */
static gr_status register_msg(gr_master *ms, int k, gr_partitions *parts, const int *part_task,
                              gr_outmsg **out, uint64_t id, gr_error *err) {
  int np = 0;
  for (int p = 0; p < parts->num_parts; p++) np += part_task[p] == k;
  gr_outmsg *m = gr_outmsg_new(GR_MSG_REGISTER, 6);
  if (!m) return gr_error_set_oom(err);
  msgpack_packer *pk = gr_outmsg_packer(m);
  gr_outmsg_u64(m, "id", id);
  gr_outmsg_u64(m, "inc", ms->tasks[k].incarnation);
  gr_master_pack_container(ms, m);
  gr_outmsg_key(m, "peers");
  msgpack_pack_array(pk, (size_t)ms->num_tasks);
  for (int j = 0; j < ms->num_tasks; j++) {
    msgpack_pack_array(pk, 3);
    gr_pack_str(pk, ms->tasks[j].name);
    gr_pack_str(pk, ms->tasks[j].address);
    msgpack_pack_uint64(pk, ms->tasks[j].incarnation);
  }
  gr_outmsg_key(m, "parts");
  msgpack_pack_array(pk, (size_t)np);
  for (int p = 0; p < parts->num_parts; p++) {
    if (part_task[p] != k) continue;
    gr_partition *pt = &parts->parts[p];
    void *data;
    size_t size;
    if (gr_wire_encode_graph(pt->graph, NULL, &data, &size, err) != GR_OK) {
      gr_outmsg_free(m);
      gr_error_prefix(err, "serializing the partition of %s", pt->device);
      return err ? err->code : GR_ERR_INTERNAL;
    }
    size_t off = gr_outmsg_add_body(m, data, size, data);
    msgpack_pack_array(pk, 5);
    gr_pack_str(pk, pt->device);
    msgpack_pack_uint64(pk, off);
    msgpack_pack_uint64(pk, size);
    pack_endpoints(pk, pt->feeds, pt->feed_index, pt->num_feeds);
    pack_endpoints(pk, pt->fetches, pt->fetch_index, pt->num_fetches);
  }
  *out = m;
  return GR_OK;
}

/* Drops a graph on a task without waiting; its answer is awaited (bounded)
 * by gr_master_drain like an abandoned request's, so that the master never
 * closes a connection with an answer unread (the task would see a reset). */
static void deregister(gr_master *ms, int k, uint64_t handle) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_DEREGISTER, 2);
  if (!m) return;
  task *t = &ms->tasks[k];
  uint64_t id = gr_master_new_id(ms);
  int64_t deadline = gr_wire_now_ms() + ms->o.connect_timeout_ms;
  gr_outmsg_u64(m, "id", id);
  gr_outmsg_u64(m, "handle", handle);
  pthread_mutex_lock(&ms->mu);
  if (!t->lost && gr_map_put_u64(&t->abandoned, id, ms)) {
    ms->abandoned++;
    if (deadline > ms->abandoned_deadline_ms) ms->abandoned_deadline_ms = deadline;
  }
  pthread_mutex_unlock(&ms->mu);
  gr_conn_send(t->conn, m, NULL);
}

/* Adds the caller indices idx[0..n) not in *set yet (of *num) to it. */
static gr_status add_indices(int **set, int *num, const int *idx, int n, gr_error *err) {
  int *more = gr_realloc_array(*set, (size_t)(*num + n + 1), sizeof(int));
  if (!more) return gr_error_set_oom(err);
  *set = more;
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < *num && !seen; j++) seen = more[j] == idx[i];
    if (!seen) more[(*num)++] = idx[i];
  }
  return GR_OK;
}

/* The feeds task plan tp's partition pt reads and the fetches it fills. */
static gr_status add_part(mplan *p, task_plan *tp, const gr_partition *pt, gr_error *err) {
  for (int i = 0; i < pt->num_fetches; i++)
    if (pt->fetch_index[i] >= p->num_fetches) p->num_fetches = pt->fetch_index[i] + 1;
  GR_TRY(add_indices(&tp->feeds, &tp->num_feeds, pt->feed_index, pt->num_feeds, err));
  return add_indices(&tp->fetches, &tp->num_fetches, pt->fetch_index, pt->num_fetches, err);
}

static gr_status prepare(void *self, gr_partitions *parts, void **out, gr_error *err) {
  gr_master *ms = self;
  *out = NULL;
  gr_master_drain(ms);
  int *part_task = calloc((size_t)parts->num_parts + 1, sizeof(int));
  char *used = calloc((size_t)ms->num_tasks, 1);
  mplan *p = calloc(1, sizeof *p);
  rpc *rs = calloc((size_t)ms->num_tasks, sizeof *rs);
  gr_status st =
      part_task && used && p && rs && (p->t = calloc((size_t)ms->num_tasks, sizeof *p->t))
          ? GR_OK
          : gr_error_set_oom(err);
  for (int k = 0; k < parts->num_parts && st == GR_OK; k++) {
    part_task[k] = gr_master_task_of(ms, parts->parts[k].device);
    if (part_task[k] < 0)
      st = gr_error_set(err, GR_ERR_INTERNAL, "device '%s' is in no task of the cluster",
                        parts->parts[k].device);
    else
      used[part_task[k]] = 1;
  }
  rpc_group g;
  gr_rpc_group_init(&g);
  int n = 0;
  for (int k = 0; k < ms->num_tasks && st == GR_OK; k++) {
    if (!used[k]) continue;
    gr_outmsg *m = NULL;
    rs[n].id = gr_master_new_id(ms);
    p->t[n].task = k;
    st = register_msg(ms, k, parts, part_task, &m, rs[n].id, err);
    for (int q = 0; q < parts->num_parts && st == GR_OK; q++)
      if (part_task[q] == k) st = add_part(p, &p->t[n], &parts->parts[q], err);
    if (st != GR_OK) break;
    gr_master_start(ms, k, m, &rs[n], &g);
    p->n = ++n;
  }
  gr_master_wait_all(ms, &g, rs, n, gr_wire_now_ms() + REGISTER_TIMEOUT_MS, NULL, NULL);
  gr_rpc_group_destroy(&g);
  for (int i = 0; i < n; i++) {
    gr_error e;
    if (rs[i].code == GR_OK &&
        gr_msg_u64(&rs[i].resp->msg.root, "handle", &p->t[i].handle, &e) != GR_OK)
      rs[i].code = e.code, rs[i].err = e;
    if (rs[i].code != GR_OK && st == GR_OK) {
      st = rs[i].code;
      if (err) *err = rs[i].err;
    }
    gr_inmsg_free(rs[i].resp);
  }
  if (st != GR_OK && p && p->t)
    for (int i = 0; i < n; i++)
      if (rs[i].code == GR_OK) deregister(ms, p->t[i].task, p->t[i].handle);
  free(rs);
  free(part_task);
  free(used);
  if (p)
    p->parts = parts;
  else
    gr_partitions_free(parts);
  if (st != GR_OK) {
    plan_free(p);
    return st;
  }
  *out = p;
  return GR_OK;
}

static void free_plan(void *self, void *plan) {
  gr_master *ms = self;
  mplan *p = plan;
  for (int i = 0; i < p->n; i++) deregister(ms, p->t[i].task, p->t[i].handle);
  plan_free(p);
}

/* ---- steps ------------------------------------------------------------------------ */

typedef struct step_ctx {
  gr_master *ms;
  mplan *p;
  rpc *rs;
  uint64_t run_id;
  bool aborted;
} step_ctx;

/* The first failure aborts the step on every other task. A lost task is the
 * root error whatever the others answer: the wait ends there (true), so a
 * task slow to abort (a long kernel running, a loaded machine) does not
 * delay the report; gr_master_drain awaits its answer before the master
 * sends anything else. */
static bool on_step_done(void *arg, rpc *r) {
  step_ctx *x = arg;
  int lost = -1;
  if (!r) { /* a task was lost: one of this step's, even if its part answered already? */
    pthread_mutex_lock(&x->ms->mu);
    for (int i = 0; i < x->p->n && lost < 0; i++)
      if (x->ms->tasks[x->p->t[i].task].lost) lost = x->p->t[i].task;
    pthread_mutex_unlock(&x->ms->mu);
    if (lost < 0) return false;
  }
  bool stop = !r || (r->code != GR_OK && r->lost);
  if ((r && r->code == GR_OK) || x->aborted) return stop;
  x->aborted = true;
  char msg[GR_ERROR_MSG_MAX];
  snprintf(msg, sizeof msg, "step aborted: %s %s", x->ms->tasks[r ? r->task : lost].name,
           r ? "failed" : "was lost");
  for (int i = 0; i < x->p->n; i++) {
    /* the failed task's own step ended, unless it timed out (then it too) */
    if (r && &x->rs[i] == r && r->code != GR_ERR_DEADLINE_EXCEEDED) continue;
    gr_outmsg *m = gr_outmsg_new(GR_MSG_ABORT, 3);
    if (!m) continue;
    gr_outmsg_u64(m, "run", x->run_id);
    gr_outmsg_u64(m, "code", GR_ERR_CANCELLED);
    gr_outmsg_str(m, "msg", msg);
    gr_conn_send(x->ms->tasks[x->p->t[i].task].conn, m, NULL);
  }
  return stop;
}

static gr_outmsg *run_msg(gr_master *ms, const task_plan *tp, const gr_tensor *feed_values,
                          const gr_step_info *step, uint64_t run_id, uint64_t id, gr_error *err) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_RUN, step->trace ? 8 : 7);
  if (!m) return NULL;
  if (step->trace) gr_outmsg_bool(m, "trace", true);
  gr_outmsg_u64(m, "id", id);
  gr_outmsg_u64(m, "handle", tp->handle);
  gr_outmsg_u64(m, "inc", ms->tasks[tp->task].incarnation);
  gr_outmsg_u64(m, "step", (uint64_t)step->step_id);
  gr_outmsg_u64(m, "run", run_id);
  gr_outmsg_u64(m, "seed", step->seed);
  gr_outmsg_key(m, "feeds");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)tp->num_feeds);
  for (int i = 0; i < tp->num_feeds; i++) {
    msgpack_pack_array(gr_outmsg_packer(m), 2);
    msgpack_pack_int(gr_outmsg_packer(m), tp->feeds[i]);
    if (gr_outmsg_pack_tensor(m, &feed_values[tp->feeds[i]], false, err) != GR_OK) {
      gr_outmsg_free(m);
      return NULL;
    }
  }
  return m;
}

/* A traced step's events from task response r, onto the client's copies of
 * the partitions' nodes; times shifted from the task's clock to ours by
 * when the request was sent (off by at most the network latency). */
static void take_trace(const mplan *p, rpc *r, int64_t sent_ns, gr_step_trace *trace) {
  const msgpack_object *tr = gr_msg_get(&r->resp->msg.root, "trace");
  if (!tr || tr->type != MSGPACK_OBJECT_ARRAY) return;
  for (uint32_t i = 0; i < tr->via.array.size; i++) {
    const msgpack_object *o = &tr->via.array.ptr[i];
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 6) continue;
    const msgpack_object *f = o->via.array.ptr;
    const char *dev, *name;
    size_t dl, nl;
    int64_t it, t0, t1, bytes;
    char d[GR_DEVICE_NAME_MAX], n[1024];
    if (gr_msg_item_str(&f[0], "device", &dev, &dl, NULL) != GR_OK ||
        gr_msg_item_str(&f[1], "node", &name, &nl, NULL) != GR_OK || dl >= sizeof d ||
        nl >= sizeof n || gr_msg_item_i64(&f[2], "", INT64_MIN, INT64_MAX, &it, NULL) != GR_OK ||
        gr_msg_item_i64(&f[3], "", INT64_MIN, INT64_MAX, &t0, NULL) != GR_OK ||
        gr_msg_item_i64(&f[4], "", INT64_MIN, INT64_MAX, &t1, NULL) != GR_OK ||
        gr_msg_item_i64(&f[5], "", 0, INT64_MAX, &bytes, NULL) != GR_OK)
      continue;
    memcpy(d, dev, dl), d[dl] = '\0';
    memcpy(n, name, nl), n[nl] = '\0';
    for (int k = 0; k < p->parts->num_parts; k++) {
      if (strcmp(p->parts->parts[k].device, d) != 0) continue;
      const gr_node *node = gr_graph_find_node(p->parts->parts[k].graph, n);
      if (node)
        gr_step_trace_add(trace, &(gr_trace_event){node, it, sent_ns + t0, sent_ns + t1, bytes});
      break;
    }
  }
}

/* The fetches and transfer counts of task plan tp's successful response r:
 * each of tp's fetches exactly once, each an index of the caller's array
 * of p->num_fetches (a response is a peer's input: an index outside what
 * the task was asked for is an error, never a write out of bounds). Errors
 * name the task; what was filled is released by the caller. */
static gr_status take_fetches(const gr_master *ms, const mplan *p, const task_plan *tp, rpc *r,
                              gr_tensor *fetch_out, gr_transfer_stats *moved, gr_error *err) {
  const msgpack_object_array *fx;
  const msgpack_object *root = &r->resp->msg.root;
  const char *name = ms->tasks[tp->task].name;
  int64_t sends = 0, bytes = 0;
  gr_status st = gr_msg_array(root, "fetches", (uint32_t)tp->num_fetches, &fx, err);
  if (st == GR_OK) st = gr_msg_i64(root, "sends", 0, INT64_MAX, &sends, err);
  if (st == GR_OK) st = gr_msg_i64(root, "bytes", 0, INT64_MAX, &bytes, err);
  for (uint32_t i = 0; st == GR_OK && i < fx->size; i++) {
    const msgpack_object *o = &fx->ptr[i];
    int64_t k;
    bool dead, mine = false;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2) {
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "fetch %u must be [index, tensor]", i);
      break;
    }
    st = gr_msg_item_i64(&o->via.array.ptr[0], "fetch index", 0, p->num_fetches - 1, &k, err);
    for (int j = 0; st == GR_OK && j < tp->num_fetches && !mine; j++) mine = tp->fetches[j] == k;
    if (st == GR_OK && (!mine || !gr_tensor_is_empty(&fetch_out[k])))
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        mine ? "fetch %lld is given twice"
                             : "fetch %lld is not one it was asked for",
                        (long long)k);
    if (st == GR_OK)
      st = gr_msg_tensor(&o->via.array.ptr[1], r->resp->body, r->resp->h.body_len, &fetch_out[k],
                         &dead, err);
  }
  for (int j = 0; st == GR_OK && j < tp->num_fetches; j++)
    if (gr_tensor_is_empty(&fetch_out[tp->fetches[j]]))
      st = gr_error_set(err, GR_ERR_INTERNAL, "fetch %d produced no value", tp->fetches[j]);
  if (st != GR_OK) {
    gr_error_prefix(err, "a bad answer from %s", name);
    return st;
  }
  moved->sends += sends;
  moved->bytes += bytes;
  return GR_OK;
}

static gr_status run(void *self, void *plan, const gr_tensor *feed_values, gr_tensor *fetch_out,
                     const gr_step_info *step, gr_transfer_stats *stats, gr_error *err) {
  gr_master *ms = self;
  mplan *p = plan;
  step_ctx x = {.ms = ms, .p = p};
  GR_TRY(gr_auth_random(&x.run_id, sizeof x.run_id, err));
  gr_master_drain(ms); /* the previous step has ended on every task */
  rpc *rs = calloc((size_t)p->n, sizeof *rs);
  if (!rs) return gr_error_set_oom(err);
  x.rs = rs;
  rpc_group g;
  gr_rpc_group_init(&g);
  gr_status st = GR_OK;
  int64_t sent_ns = gr_trace_now_ns();
  for (int i = 0; i < p->n; i++) {
    rs[i].id = gr_master_new_id(ms);
    gr_outmsg *m = run_msg(ms, &p->t[i], feed_values, step, x.run_id, rs[i].id, err);
    if (!m) {
      st = gr_error_set_oom(err);
      break;
    }
    gr_master_start(ms, p->t[i].task, m, &rs[i], &g);
  }
  int started = st == GR_OK ? p->n : 0;
  int64_t deadline = ms->o.step_timeout_ms > 0 ? gr_wire_now_ms() + ms->o.step_timeout_ms : 0;
  gr_master_wait_all(ms, &g, rs, started, deadline, on_step_done, &x);
  gr_rpc_group_destroy(&g);
  /* the root error: a lost task (what the master saw itself), else the
   * first that is not a cancellation it caused (a push to the lost task
   * failing is an effect too) */
  int root = -1;
  for (int i = 0; i < started; i++) {
    if (rs[i].code == GR_OK) continue;
    int rank = rs[i].lost ? 2 : rs[i].code != GR_ERR_CANCELLED ? 1 : 0;
    int best = root < 0 ? -1 : rs[root].lost ? 2 : rs[root].code != GR_ERR_CANCELLED ? 1 : 0;
    if (rank > best) root = i;
  }
  gr_transfer_stats moved = {0, 0};
  if (st == GR_OK && root >= 0) {
    st = rs[root].code;
    if (err) {
      *err = rs[root].err;
      if (!strstr(err->msg, ms->tasks[p->t[root].task].name))
        gr_error_prefix(err, "%s", ms->tasks[p->t[root].task].name);
    }
    /* a task of the step that is lost is the cause, also when its own part
     * had answered before it died (a push to it failed elsewhere) */
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; i < p->n && !rs[root].lost; i++)
      if (ms->tasks[p->t[i].task].lost) {
        st = gr_error_set(err, GR_ERR_UNAVAILABLE, "%s", ms->tasks[p->t[i].task].lost_why);
        break;
      }
    pthread_mutex_unlock(&ms->mu);
  }
  for (int i = 0; i < started && st == GR_OK; i++)
    st = take_fetches(ms, p, &p->t[i], &rs[i], fetch_out, &moved, err);
  if (st != GR_OK) /* what a failed step filled is not the caller's */
    for (int k = 0; k < p->num_fetches; k++) gr_tensor_release(&fetch_out[k]);
  for (int i = 0; i < started && st == GR_OK && step->trace; i++)
    take_trace(p, &rs[i], sent_ns, step->trace);
  for (int i = 0; i < started; i++) gr_inmsg_free(rs[i].resp);
  free(rs);
  if (stats) *stats = moved;
  return st;
}

static gr_status var_initialized(void *self, const char *name, const char *device, bool *out,
                                 gr_error *err) {
  gr_master *ms = self;
  *out = false;
  gr_master_drain(ms);
  int only = device ? gr_master_task_of(ms, device) : -1; /* -1: ask every task */
  rpc *rs = calloc((size_t)ms->num_tasks, sizeof *rs);
  if (!rs) return gr_error_set_oom(err);
  rpc_group g;
  gr_rpc_group_init(&g);
  int n = 0;
  int want = only >= 0 ? 1 : ms->num_tasks;
  for (int k = 0; k < ms->num_tasks; k++) {
    if (only >= 0 && k != only) continue;
    gr_outmsg *m = gr_outmsg_new(GR_MSG_VARS, 4);
    if (!m) break;
    rs[n].id = gr_master_new_id(ms);
    gr_outmsg_u64(m, "id", rs[n].id);
    gr_master_pack_container(ms, m);
    gr_outmsg_key(m, "names");
    msgpack_pack_array(gr_outmsg_packer(m), 1);
    gr_pack_str(gr_outmsg_packer(m), name);
    gr_master_start(ms, k, m, &rs[n++], &g);
  }
  gr_master_wait_all(ms, &g, rs, n, gr_wire_now_ms() + ms->o.connect_timeout_ms, NULL, NULL);
  gr_rpc_group_destroy(&g);
  gr_status st = n == want ? GR_OK : gr_error_set_oom(err);
  for (int i = 0; i < n; i++) {
    const msgpack_object_array *init;
    gr_error e;
    if (rs[i].code != GR_OK && st == GR_OK) {
      st = rs[i].code;
      if (err) *err = rs[i].err;
    } else if (rs[i].code == GR_OK &&
               gr_msg_array(&rs[i].resp->msg.root, "init", 1, &init, &e) == GR_OK &&
               init->size == 1 && init->ptr[0].type == MSGPACK_OBJECT_BOOLEAN &&
               init->ptr[0].via.boolean) {
      *out = true;
    }
    gr_inmsg_free(rs[i].resp);
  }
  free(rs);
  return st;
}

gr_session *gr_master_session_new(gr_master *ms, gr_graph *g, const gr_session_options *base,
                                  gr_error *err) {
  gr_session_options o = base ? *base : (gr_session_options){0};
  ms->runner = (gr_remote_runner){ms, prepare, run, free_plan, var_initialized};
  o.num_devices = ms->num_devices;
  o.device_names = ms->device_names;
  o.remote = &ms->runner;
  if (!o.inter_op_threads) o.inter_op_threads = 1; /* the tasks run the nodes */
  /* the master keeps the deadline: no kernel runs here for a watchdog to see */
  if (o.step_timeout_ms > 0 && ms->o.step_timeout_ms == 0)
    ms->o.step_timeout_ms = o.step_timeout_ms;
  o.step_timeout_ms = 0;
  return gr_session_new(g, &o, err);
}
