/* The master as a session's remote runner: registering a signature's
 * partitions with their tasks, running steps on them, and asking which
 * variables have values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/master_internal.h"

#define REGISTER_TIMEOUT_MS 60000
_Static_assert(GR_RUN_MAX_STEPS == GR_SESSION_MAX_STEPS, "a session's steps fit in a RUN");

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

/* The endpoints of a partition's feeds or fetches, for a REGISTER. */
static gr_register_endpoint *endpoints_of(const gr_output *eps, const int *index, int n) {
  gr_register_endpoint *out = gr_alloc_array((size_t)n + 1, sizeof *out);
  for (int i = 0; out && i < n; i++)
    out[i] = (gr_register_endpoint){eps[i].node->name, eps[i].index, index[i]};
  return out;
}

static void free_parts(gr_register_part *rp, int n) {
  for (int i = 0; rp && i < n; i++) {
    free((void *)rp[i].feeds);
    free((void *)rp[i].fetches);
  }
  free(rp);
}

/* The REGISTER message of task k: every task as a peer, its partitions. */
static gr_status register_msg(gr_master *ms, int k, gr_partitions *parts, const int *part_task,
                              gr_outmsg **out, uint64_t id, gr_error *err) {
  gr_register_req q = {.id = id,
                       .inc = ms->tasks[k].incarnation,
                       .container = gr_master_container_ref(ms),
                       .num_peers = ms->num_tasks};
  gr_register_peer *peers = gr_alloc_array((size_t)ms->num_tasks, sizeof *peers);
  gr_register_part *rp = calloc((size_t)parts->num_parts + 1, sizeof *rp);
  gr_status st = peers && rp ? GR_OK : gr_error_set_oom(err);
  for (int j = 0; j < ms->num_tasks && st == GR_OK; j++)
    peers[j] = (gr_register_peer){.task = ms->tasks[j].name,
                                  .address = ms->tasks[j].address,
                                  .inc = ms->tasks[j].incarnation};
  for (int p = 0; p < parts->num_parts && st == GR_OK; p++) {
    if (part_task[p] != k) continue;
    gr_partition *pt = &parts->parts[p];
    void *data;
    size_t size;
    if (gr_wire_encode_graph(pt->graph, NULL, &data, &size, err) != GR_OK) {
      gr_error_prefix(err, "serializing the partition of %s", pt->device);
      st = err ? err->code : GR_ERR_INTERNAL;
      break;
    }
    gr_register_part *r = &rp[q.num_parts++];
    *r = (gr_register_part){.device = pt->device,
                            .graph = data,
                            .graph_size = size,
                            .feeds = endpoints_of(pt->feeds, pt->feed_index, pt->num_feeds),
                            .num_feeds = pt->num_feeds,
                            .fetches = endpoints_of(pt->fetches, pt->fetch_index, pt->num_fetches),
                            .num_fetches = pt->num_fetches};
    if (!r->feeds || !r->fetches) st = gr_error_set_oom(err);
  }
  *out = NULL;
  if (st == GR_OK) {
    q.peers = peers;
    q.parts = rp;
    if (!(*out = gr_register_req_pack(&q))) st = gr_error_set_oom(err); /* it took the graphs */
  } else {
    for (int i = 0; i < q.num_parts; i++) free((void *)rp[i].graph);
  }
  free_parts(rp, q.num_parts);
  free(peers);
  return st;
}

/* Drops a graph on a task without waiting; its answer is awaited (bounded)
 * by gr_master_drain like an abandoned request's, so that the master never
 * closes a connection with an answer unread (the task would see a reset). */
static void deregister(gr_master *ms, int k, uint64_t handle) {
  task *t = &ms->tasks[k];
  uint64_t id = gr_master_new_id(ms);
  gr_outmsg *m = gr_deregister_req_pack(&(gr_deregister_req){id, handle});
  if (!m) return;
  int64_t deadline = gr_wire_now_ms() + ms->o.connect_timeout_ms;
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
  if (st == GR_OK) st = gr_master_collective_hosts(ms, parts, err);
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
    gr_register_resp r;
    if (rs[i].code == GR_OK && gr_register_resp_unpack(rs[i].resp, &r, &e) != GR_OK)
      rs[i].code = e.code, rs[i].err = e;
    else if (rs[i].code == GR_OK)
      p->t[i].handle = r.handle;
    gr_inmsg_free(rs[i].resp);
  }
  /* the root error: a lost task's (others that could not reach it fail
   * too, and later; its own request may have failed first, as a write to a
   * closed connection), else the first */
  pthread_mutex_lock(&ms->mu);
  for (int i = 0; i < n && st == GR_OK; i++)
    if (rs[i].code != GR_OK && (rs[i].lost || ms->tasks[p->t[i].task].lost))
      st = gr_error_set(err, GR_ERR_UNAVAILABLE, "%s", ms->tasks[p->t[i].task].lost_why);
  pthread_mutex_unlock(&ms->mu);
  for (int i = 0; i < n && st == GR_OK; i++)
    if (rs[i].code != GR_OK) {
      st = rs[i].code;
      if (err) *err = rs[i].err;
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
  int64_t abort_from; /* the first step aborted on the tasks (of a multi-step RUN) */
  int64_t num_steps;
} step_ctx;

/* The first failure aborts the step on every other task. A lost task is the
 * root error whatever the others answer: the wait ends there (true), so a
 * task slow to abort (a long kernel running, a loaded machine) does not
 * delay the report; gr_master_drain awaits its answer before the master
 * sends anything else. A multi-step RUN whose task failed at step i is
 * aborted from step i on (the abort names run id run_id + i): every task
 * ends the steps before it, as single steps would have ended; a failure
 * at an earlier step aborts again from there, a lost task or a deadline
 * from the first. */
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
  if (r && r->code == GR_OK) return stop;
  /* a task's word on where it failed, if one of the RUN's steps */
  int64_t from = r && !r->lost && r->code != GR_ERR_DEADLINE_EXCEEDED && r->failed_at >= 0 &&
                         r->failed_at < x->num_steps
                     ? r->failed_at
                     : 0;
  if (x->aborted && from >= x->abort_from) return stop;
  x->aborted = true;
  x->abort_from = from;
  char msg[GR_ERROR_MSG_MAX];
  snprintf(msg, sizeof msg, "step aborted: %s %s", x->ms->tasks[r ? r->task : lost].name,
           r ? "failed" : "was lost");
  for (int i = 0; i < x->p->n; i++) {
    /* the failed task's own step ended, unless it timed out (then it too) */
    if (r && &x->rs[i] == r && r->code != GR_ERR_DEADLINE_EXCEEDED) continue;
    gr_outmsg *m =
        gr_abort_msg_pack(&(gr_abort_msg){x->run_id + (uint64_t)from, GR_ERR_CANCELLED, msg});
    if (!m) continue;
    gr_conn_send(x->ms->tasks[x->p->t[i].task].conn, m, NULL);
  }
  return stop;
}

/* A lost task that ran a member of a collective (GR_OP_COLLECTIVE) in this
 * step: err says which collective lost it, as the other members fail
 * waiting for it. */
static void name_collective(gr_master *ms, const mplan *p, gr_error *err) {
  int lost = -1;
  pthread_mutex_lock(&ms->mu);
  for (int i = 0; i < p->n && lost < 0; i++)
    if (ms->tasks[p->t[i].task].lost) lost = p->t[i].task;
  pthread_mutex_unlock(&ms->mu);
  for (int k = 0; lost >= 0 && k < p->parts->num_parts; k++) {
    const gr_partition *pt = &p->parts->parts[k];
    if (gr_master_task_of(ms, pt->device) != lost) continue;
    for (int id = 0; id < gr_graph_num_nodes(pt->graph); id++) {
      const gr_node *n = gr_graph_node(pt->graph, id);
      if (!(n->op->flags & GR_OP_COLLECTIVE)) continue;
      char was[GR_ERROR_MSG_MAX];
      snprintf(was, sizeof was, "%s", err->msg);
      gr_error_set(err, err->code,
                   "%s; the step's collective '%s' (op %s) lost that member "
                   "(rank %lld of %lld on %s)",
                   was, gr_node_attr_string(n, "group_key", ""), n->op->name,
                   (long long)gr_node_attr_int(n, "rank", 0),
                   (long long)gr_node_attr_int(n, "group_size", 0), pt->device);
      return;
    }
  }
}

static gr_outmsg *run_msg(gr_master *ms, const task_plan *tp, const gr_tensor *feed_values,
                          const gr_step_info *step, int64_t num_steps, uint64_t run_id,
                          uint64_t id) {
  gr_run_req q = {.id = id,
                  .handle = tp->handle,
                  .inc = ms->tasks[tp->task].incarnation,
                  .step = (uint64_t)step->step_id,
                  .run = run_id,
                  .seed = step->seed,
                  .steps = (uint64_t)num_steps,
                  .trace = step->trace != NULL,
                  .feeds = tp->feeds,
                  .num_feeds = tp->num_feeds,
                  .values = feed_values};
  return gr_run_req_pack(&q);
}

/* A traced step's events from task response r, onto the client's copies of
 * the partitions' nodes; times shifted from the task's clock to ours by
 * when the request was sent (off by at most the network latency). */
static void take_trace(const mplan *p, const gr_run_resp *r, int64_t sent_ns,
                       gr_step_trace *trace) {
  for (int i = 0; i < r->num_events; i++) {
    const gr_run_event *e = &r->events[i];
    for (int k = 0; k < p->parts->num_parts; k++) {
      if (strcmp(p->parts->parts[k].device, e->device) != 0) continue;
      const gr_node *node = gr_graph_find_node(p->parts->parts[k].graph, e->node);
      if (node)
        gr_step_trace_add(trace, &(gr_trace_event){node, e->iteration, sent_ns + e->start_ns,
                                                   sent_ns + e->end_ns, e->bytes});
      break;
    }
  }
}

/* The fetches and transfer counts of task plan tp's successful response
 * (unpacked into *out): each of tp's fetches exactly once, each an index of
 * the caller's array of p->num_fetches (a response is a peer's input: an
 * index outside what the task was asked for is an error, never a write out
 * of bounds). Errors name the task; what was filled is released by the
 * caller. */
static gr_status take_fetches(const gr_master *ms, const mplan *p, const task_plan *tp, rpc *r,
                              gr_run_resp *out, gr_tensor *fetch_out, gr_transfer_stats *moved,
                              gr_error *err) {
  gr_status st = gr_run_resp_unpack(r->resp, (uint32_t)tp->num_fetches, out, err);
  if (st == GR_OK)
    st = gr_run_resp_fetches(r->resp, out, tp->fetches, tp->num_fetches, p->num_fetches, fetch_out,
                             err);
  if (st != GR_OK) {
    gr_error_prefix(err, "a bad answer from %s", ms->tasks[tp->task].name);
    return st;
  }
  moved->sends += out->sends;
  moved->bytes += out->bytes;
  return GR_OK;
}

/* One RUN per task: a multi-step run's tasks loop over their partitions
 * num_steps times without the master between the steps (the run ids
 * run_id + i name them; the abort of run_id ends the whole RUN). */
static gr_status run(void *self, void *plan, const gr_tensor *feed_values, gr_tensor *fetch_out,
                     const gr_step_info *step, int64_t num_steps, gr_transfer_stats *stats,
                     gr_error *err) {
  gr_master *ms = self;
  mplan *p = plan;
  step_ctx x = {.ms = ms, .p = p, .num_steps = num_steps};
  if (num_steps < 1 || num_steps > GR_RUN_MAX_STEPS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "a run has 1 to %d steps, not %lld",
                        GR_RUN_MAX_STEPS, (long long)num_steps);
  GR_TRY(gr_auth_random(&x.run_id, sizeof x.run_id, err));
  x.run_id &= ~(1ULL << 63); /* room for the run ids of its steps */
  gr_master_drain(ms);       /* the previous step has ended on every task */
  rpc *rs = calloc((size_t)p->n, sizeof *rs);
  gr_run_resp *rr = calloc((size_t)p->n, sizeof *rr);
  if (!rs || !rr) {
    free(rs);
    free(rr);
    return gr_error_set_oom(err);
  }
  x.rs = rs;
  rpc_group g;
  gr_rpc_group_init(&g);
  gr_status st = GR_OK;
  int64_t sent_ns = gr_trace_now_ns();
  for (int i = 0; i < p->n; i++) {
    rs[i].id = gr_master_new_id(ms);
    gr_outmsg *m = run_msg(ms, &p->t[i], feed_values, step, num_steps, x.run_id, rs[i].id);
    if (!m) {
      st = gr_error_set_oom(err);
      break;
    }
    gr_master_start(ms, p->t[i].task, m, &rs[i], &g);
  }
  int started = st == GR_OK ? p->n : 0;
  int64_t deadline =
      ms->o.step_timeout_ms > 0 ? gr_wire_now_ms() + ms->o.step_timeout_ms * num_steps : 0;
  gr_master_wait_all(ms, &g, rs, started, deadline, on_step_done, &x);
  gr_rpc_group_destroy(&g);
  /* the root error: a lost task (what the master saw itself), else the
   * first that is not a cancellation it caused (a push to the lost task
   * failing is an effect too); of a multi-step RUN, at the earliest step */
  int root = -1;
  for (int i = 0; i < started; i++) {
    if (rs[i].code == GR_OK) continue;
    int rank = rs[i].lost ? 2 : rs[i].code != GR_ERR_CANCELLED ? 1 : 0;
    int best = root < 0 ? -1 : rs[root].lost ? 2 : rs[root].code != GR_ERR_CANCELLED ? 1 : 0;
    if (rank > best ||
        (rank == best && rank == 1 && rs[i].failed_at >= 0 && rs[i].failed_at < rs[root].failed_at))
      root = i;
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
    if (err) name_collective(ms, p, err);
  }
  for (int i = 0; i < started && st == GR_OK; i++)
    st = take_fetches(ms, p, &p->t[i], &rs[i], &rr[i], fetch_out, &moved, err);
  if (st != GR_OK) /* what a failed step filled is not the caller's */
    for (int k = 0; k < p->num_fetches; k++) gr_tensor_release(&fetch_out[k]);
  for (int i = 0; i < started && st == GR_OK && step->trace; i++)
    take_trace(p, &rr[i], sent_ns, step->trace);
  for (int i = 0; i < started; i++) gr_inmsg_free(rs[i].resp); /* rr points into them */
  free(rs);
  free(rr);
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
    rs[n].id = gr_master_new_id(ms);
    gr_vars_req q = {rs[n].id, &name, 1, gr_master_container_ref(ms)};
    gr_outmsg *m = gr_vars_req_pack(&q);
    if (!m) break;
    gr_master_start(ms, k, m, &rs[n++], &g);
  }
  gr_master_wait_all(ms, &g, rs, n, gr_wire_now_ms() + ms->o.connect_timeout_ms, NULL, NULL);
  gr_rpc_group_destroy(&g);
  gr_status st = n == want ? GR_OK : gr_error_set_oom(err);
  for (int i = 0; i < n; i++) {
    gr_vars_resp r;
    if (rs[i].code != GR_OK && st == GR_OK) {
      st = rs[i].code;
      if (err) *err = rs[i].err;
    } else if (rs[i].code == GR_OK && gr_vars_resp_unpack(rs[i].resp, 1, &r, NULL) == GR_OK &&
               r.num_init == 1 && r.init[0]) {
      *out = true; /* a bad answer reads as "no value" */
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
