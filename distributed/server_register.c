/* Registration: a master sends the partitions of one prepared signature
 * that run on this task (serialized graphs with their feeds and fetches) and
 * the tasks they push to; the server decodes them through the builder
 * calls, builds an executor per device and answers with a handle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

void gr_server_registered_unref(registered *r) {
  if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  gr_device_plan_free(r->plan);
  gr_server_container_unref(r->box);
  free(r->to);
  free(r->from);
  free(r);
}

/* The endpoints of a partition's graph g. */
static gr_status endpoints(gr_graph *g, const gr_register_endpoint *in, int n, gr_output **eps,
                           int **index, int *num, gr_error *err) {
  *eps = gr_alloc_array((size_t)n + 1, sizeof **eps);
  *index = gr_alloc_array((size_t)n + 1, sizeof **index);
  if (!*eps || !*index) return gr_error_set_oom(err);
  for (int i = 0; i < n; i++) {
    gr_node *node = gr_graph_find_node(g, in[i].node);
    if (!node || in[i].output >= node->num_outputs)
      return gr_error_set(err, GR_ERR_NOT_FOUND, "endpoint '%s:%d' is not in the graph", in[i].node,
                          in[i].output);
    (*eps)[i] = (gr_output){node, in[i].output};
    (*index)[i] = in[i].index;
  }
  *num = n;
  return GR_OK;
}

/* One partition: its graph decoded on one of this task's devices. */
static gr_status part_of(gr_server *s, const gr_register_part *in, gr_partition *p, gr_error *err) {
  for (int k = 0; k < s->num_devices && !p->device; k++)
    if (!strcmp(s->devices[k], in->device)) p->device = s->devices[k];
  if (!p->device)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "device '%s' is not a device of %s",
                        in->device, s->task);
  if (!(p->graph = gr_graph_new())) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  GR_TRY(gr_wire_decode_graph(in->graph, in->graph_size, p->graph, NULL, err));
  GR_TRY(
      endpoints(p->graph, in->feeds, in->num_feeds, &p->feeds, &p->feed_index, &p->num_feeds, err));
  GR_TRY(endpoints(p->graph, in->fetches, in->num_fetches, &p->fetches, &p->fetch_index,
                   &p->num_fetches, err));
  /* every node runs but the feeds' stand-ins; ids are a topological order */
  int total = gr_graph_num_nodes(p->graph);
  p->nodes = gr_alloc_array((size_t)total + 1, sizeof *p->nodes);
  if (!p->nodes) return gr_error_set_oom(err);
  for (int id = 0; id < total; id++) {
    gr_node *n = gr_graph_node(p->graph, id);
    bool fed = false;
    for (int i = 0; i < p->num_feeds && !fed; i++) fed = p->feeds[i].node == n;
    if (!fed) p->nodes[p->num_nodes++] = n;
    n->assigned_device = p->device;
  }
  return GR_OK;
}

/* Adds or updates the tasks this registration names; dials the ones its
 * partitions push to (outside s->mu: dialing blocks). */
static gr_status peers_of(gr_server *s, const gr_register_peer *peers, int n, gr_error *err) {
  for (int i = 0; i < n; i++) {
    const char *task = peers[i].task, *address = peers[i].address;
    uint64_t inc = peers[i].inc;
    if (!strcmp(task, s->task)) continue;
    pthread_mutex_lock(&s->mu);
    peer *p = gr_server_find_peer(s, task);
    gr_conn *old = NULL;
    gr_conn *old_in = NULL;
    if (p && (p->incarnation != inc || strcmp(p->address, address) != 0)) {
      old = p->conn; /* the task restarted or moved: dial again */
      p->conn = NULL;
      old_in = p->in_conn;
      p->in_conn = NULL;
    }
    if (!p && s->num_peers == s->cap_peers) {
      int cap = s->cap_peers ? 2 * s->cap_peers : 8;
      peer *more = cap <= GR_REGISTER_MAX_PEERS
                       ? gr_realloc_array(s->peers, (size_t)cap, sizeof *more)
                       : NULL;
      if (!more) {
        pthread_mutex_unlock(&s->mu);
        return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "too many peers");
      }
      s->peers = more;
      s->cap_peers = cap;
    }
    if (!p) {
      p = &s->peers[s->num_peers++];
      *p = (peer){0};
      snprintf(p->name, sizeof p->name, "%s", task);
    }
    snprintf(p->address, sizeof p->address, "%s", address);
    p->incarnation = inc;
    pthread_mutex_unlock(&s->mu);
    gr_conn_unref(old_in);
    if (old) {
      gr_conn_close(old);
      gr_conn_unref(old);
    }
  }
  return GR_OK;
}

static void on_peer_message(void *arg, gr_conn *c, gr_inmsg *m) {
  if (m->h.type == GR_MSG_TENSOR) { /* a multi-step RUN's DONE, back over this push connection */
    gr_server_push(arg, c, m);
    return;
  }
  gr_inmsg_free(m); /* nothing else comes back */
}
static void on_peer_close(void *arg, gr_conn *c, const gr_error *why) {}

/* ---- dialing peers without holding a registration's thread ------------------------
 *
 * A registration whose sends push to a peer without a connection waits for
 * it without a thread: each peer being dialed has one dial thread (however
 * many registrations want it), and the registrations that wait for it are
 * listed on the peer; the dial that ends a registration's last wait answers
 * it. So a peer that does not answer (dead, or a black hole that holds each
 * dial for its 10 s) costs one thread, and the registrations and steps of
 * every other client go on meanwhile. */

#define MAX_DIALS 64 /* dial threads at once */

struct reg_wait {
  gr_server *s;
  gr_conn *c; /* a reference */
  uint64_t id;
  registered *r;
  int pending; /* dials it waits for (under s->mu) */
  gr_status st;
  gr_error err; /* the first failed dial's */
};

/* The registration's graph is kept (or it failed): answers it, frees w. */
static void reg_complete(reg_wait *w) {
  gr_server *s = w->s;
  registered *r = w->r;
  gr_status st = w->st;
  gr_error e = w->err;
  uint64_t handle = 0;
  if (st == GR_OK) {
    pthread_mutex_lock(&s->mu);
    r->handle = ++s->next_handle;
    r->owner = w->c;
    /* a client that closed has had its graphs dropped: this one would stay */
    bool open = gr_conn_is_open(w->c);
    bool ok = open && gr_map_put_u64(&s->graphs, r->handle, r);
    pthread_mutex_unlock(&s->mu);
    if (ok)
      handle = r->handle, r = NULL;
    else
      st = open ? gr_error_set_oom(&e)
                : gr_error_set(&e, GR_ERR_CANCELLED, "the client's connection closed");
  }
  gr_server_registered_unref(r);
  gr_outmsg *resp = NULL;
  if (st == GR_OK)
    resp = gr_register_resp_pack(w->id, &(gr_register_resp){handle});
  else
    gr_error_prefix(&e, "%s: registering a graph", s->task);
  gr_server_answer(w->c, w->id, resp, st == GR_OK ? NULL : &e);
  gr_conn_unref(w->c);
  free(w);
}

/* w fails with e (the first failure is kept; under s->mu). */
static void reg_fail(reg_wait *w, gr_status st, const gr_error *e) {
  if (st != GR_OK && w->st == GR_OK) w->st = st, w->err = *e;
}

/* One wait of w ends (under s->mu); true when it was its last. */
static bool reg_wait_end(reg_wait *w, gr_status st, const gr_error *e) {
  reg_fail(w, st, e);
  return --w->pending == 0;
}

typedef struct dial_job {
  gr_server *s;
  char task[GR_TASK_NAME_MAX], address[128];
} dial_job;

static void *dial_main(void *arg) {
  dial_job *d = arg;
  pthread_setname_np(pthread_self(), "gr-dial");
  gr_server *s = d->s;
  gr_conn *c = NULL, *old = NULL;
  gr_error e;
  gr_conn_handler h = {on_peer_message, on_peer_close, s, NULL, NULL, NULL};
  gr_status st;
  peer *p;
  for (;;) {
    gr_conn_auth auth = {s->secret, s->cluster, s->tls};
    st = gr_conn_dial(s->loop, d->address, &auth, 10000, &h, &c, &e);
    if (st != GR_OK) gr_error_prefix(&e, "dialing %s", d->task);
    pthread_mutex_lock(&s->mu);
    p = gr_server_find_peer(s, d->task);
    if (!p || !strcmp(p->address, d->address)) break; /* under s->mu */
    /* a later registration moved the task (it restarted elsewhere): its
     * waiters want the new address */
    snprintf(d->address, sizeof d->address, "%s", p->address);
    pthread_mutex_unlock(&s->mu);
    if (c) gr_conn_close(c), gr_conn_unref(c), c = NULL;
  }
  reg_wait **waiters = p ? p->waiters : NULL;
  int n = p ? p->num_waiters : 0;
  if (p) {
    p->waiters = NULL;
    p->num_waiters = p->cap_waiters = 0;
    p->dialing = false;
    if (st == GR_OK) old = p->conn, p->conn = c, c = NULL;
  }
  int done = 0;
  for (int i = 0; i < n; i++)
    if (reg_wait_end(waiters[i], st, &e)) waiters[done++] = waiters[i];
  pthread_mutex_unlock(&s->mu);
  if (old) gr_conn_unref(old);
  if (c) gr_conn_close(c), gr_conn_unref(c);
  for (int i = 0; i < done; i++) reg_complete(waiters[i]);
  free(waiters);
  free(d);
  pthread_mutex_lock(&s->mu); /* last: gr_server_free waits for this before it frees s */
  if (--s->dials == 0) pthread_cond_broadcast(&s->stopped);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void gr_server_dials_wait(gr_server *s) {
  pthread_mutex_lock(&s->mu);
  while (s->dials > 0) pthread_cond_wait(&s->stopped, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* Lists w on peer p (under s->mu; w NULL: nobody waits), starting p's dial
 * when none runs; false (w's error set) when neither can be done. *job: a
 * dial to start once s->mu is released. */
static bool wait_for_peer(gr_server *s, peer *p, reg_wait *w, dial_job **job, gr_error *err) {
  if (w && p->num_waiters == p->cap_waiters) {
    int cap = p->cap_waiters ? 2 * p->cap_waiters : 4;
    reg_wait **more = gr_realloc_array(p->waiters, (size_t)cap, sizeof *more);
    if (!more) return gr_error_set_oom(err), false;
    p->waiters = more;
    p->cap_waiters = cap;
  }
  if (!p->dialing) {
    if (s->dials >= MAX_DIALS) {
      gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED,
                   "%s dials %d peers already: %s must wait (register again later)", s->task,
                   MAX_DIALS, p->name);
      return false;
    }
    if (!(*job = calloc(1, sizeof **job))) return gr_error_set_oom(err), false;
    **job = (dial_job){.s = s};
    snprintf((*job)->task, sizeof(*job)->task, "%s", p->name);
    snprintf((*job)->address, sizeof(*job)->address, "%s", p->address);
    p->dialing = true;
    s->dials++;
  }
  if (w) {
    p->waiters[p->num_waiters++] = w;
    w->pending++;
  }
  return true;
}

/* Starts a dial thread; when it cannot start, ends the dial as failed. */
static void start_dial(dial_job *d) {
  pthread_t t;
  pthread_attr_t a;
  bool ok = pthread_attr_init(&a) == 0;
  ok = ok && pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
       pthread_create(&t, &a, dial_main, d) == 0;
  if (!ok) { /* as a dial that failed at once */
    gr_error e;
    gr_error_set(&e, GR_ERR_RESOURCE_EXHAUSTED, "cannot start a thread to dial %s", d->task);
    gr_server *s = d->s;
    pthread_mutex_lock(&s->mu);
    peer *p = gr_server_find_peer(s, d->task);
    reg_wait **waiters = p ? p->waiters : NULL;
    int n = p ? p->num_waiters : 0, done = 0;
    if (p) p->waiters = NULL, p->num_waiters = p->cap_waiters = 0, p->dialing = false;
    for (int i = 0; i < n; i++)
      if (reg_wait_end(waiters[i], e.code, &e)) waiters[done++] = waiters[i];
    s->dials--;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < done; i++) reg_complete(waiters[i]);
    free(waiters);
    free(d);
  }
  pthread_attr_destroy(&a);
}

/* w waits for a connection to task, which node n pushes to (under s->mu):
 * listed on the peer and its dial started (into jobs) unless connected. */
static void want_peer(gr_server *s, reg_wait *w, const gr_node *n, const char *task,
                      dial_job **jobs, int *njobs) {
  gr_error e;
  if (!strcmp(task, s->task)) return;
  peer *p = gr_server_find_peer(s, task);
  if (!w) { /* a task that sends here: dialed for a multi-step RUN's DONEs, unwaited */
    dial_job *job = NULL;
    if (p && !p->dialing && !(p->conn && gr_conn_is_open(p->conn)) && *njobs < MAX_DIALS &&
        wait_for_peer(s, p, NULL, &job, &e) && job)
      jobs[(*njobs)++] = job;
    return;
  }
  if (!p) {
    reg_fail(w,
             gr_error_set(&e, GR_ERR_INVALID_ARGUMENT,
                          "node '%s' sends to %s, which the registration does not name", n->name,
                          task),
             &e);
    return;
  }
  for (int i = 0; i < p->num_waiters; i++)
    if (p->waiters[i] == w) return; /* once per peer */
  if (p->conn && gr_conn_is_open(p->conn)) return;
  dial_job *job = NULL;
  if (!wait_for_peer(s, p, w, &job, &e)) reg_fail(w, e.code, &e);
  if (job) jobs[(*njobs)++] = job; /* at most MAX_DIALS: wait_for_peer counts them */
}

/* Waits (without a thread) for a connection to every peer a _send of the
 * partitions pushes to, and every task of a collective's members (attr
 * "devices", core/gr_op.h); w is answered by the last dial, or here when no
 * dial is needed. Dials, without waiting, every peer a _recv receives
 * from: a multi-step RUN tells it when a step ended (server_links.c). */
static void await_peers(gr_server *s, reg_wait *w, const gr_partitions *ps) {
  dial_job *jobs[MAX_DIALS];
  int njobs = 0;
  pthread_mutex_lock(&s->mu);
  w->pending = 1; /* this call's own, ended below */
  for (int k = 0; k < ps->num_parts && w->st == GR_OK; k++) {
    gr_graph *g = ps->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g) && w->st == GR_OK; id++) {
      gr_node *n = gr_graph_node(g, id);
      char task[GR_TASK_NAME_MAX];
      if (n->op->flags & GR_OP_COLLECTIVE) {
        const char *d = gr_node_attr_string(n, "devices", "");
        while (*d && w->st == GR_OK) {
          const char *end = strchr(d, ',');
          size_t len = end ? (size_t)(end - d) : strlen(d);
          char dev[GR_DEVICE_NAME_MAX];
          snprintf(dev, sizeof dev, "%.*s", (int)len, d);
          gr_task_of_device(dev, task, sizeof task);
          want_peer(s, w, n, task, jobs, &njobs);
          d += len + (end != NULL);
        }
        continue;
      }
      if (!(n->op->flags & GR_OP_TRANSFER)) continue;
      /* a receive's sender: a multi-step RUN tells it when a step ended
       * (dialed, not waited for: only such a RUN needs it) */
      bool recv = n->num_outputs > 0;
      const char *other = gr_node_attr_string(n, recv ? "send_device" : "recv_device", "");
      if (!strcmp(other, "client")) continue; /* a feed */
      gr_task_of_device(other, task, sizeof task);
      want_peer(s, recv ? NULL : w, n, task, jobs, &njobs);
    }
  }
  bool last = reg_wait_end(w, GR_OK, NULL);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < njobs; i++) start_dial(jobs[i]);
  if (last) reg_complete(w);
}

/* Checks and builds a registration (q, unpacked from in): its peers noted,
 * its partitions decoded and their executors built (no dial). */
static gr_status build_registration(gr_server *s, gr_conn *c, gr_inmsg *in,
                                    const gr_register_req *q, registered **out, gr_error *err) {
  *out = NULL;
  if (q->inc != s->incarnation)
    return gr_error_set(err, GR_ERR_ABORTED,
                        "%s restarted: the master registers for incarnation %016llx, this is "
                        "%016llx",
                        s->task, (unsigned long long)q->inc, (unsigned long long)s->incarnation);
  GR_TRY(peers_of(s, q->peers, q->num_peers, err));
  gr_partitions *ps = calloc(1, sizeof *ps);
  gr_status st = ps ? GR_OK : gr_error_set_oom(err);
  if (st == GR_OK && !(ps->parts = calloc((size_t)q->num_parts, sizeof *ps->parts)))
    st = gr_error_set_oom(err);
  registered *r = st == GR_OK ? calloc(1, sizeof *r) : NULL;
  if (st == GR_OK && !r) st = gr_error_set_oom(err);
  if (r) r->refs = 1;
  for (int k = 0; k < q->num_parts && st == GR_OK; k++) {
    ps->num_parts++;
    st = part_of(s, &q->parts[k], &ps->parts[k], err);
    if (st != GR_OK) gr_error_prefix(err, "partition %d", k);
    for (int i = 0; st == GR_OK && i < ps->parts[k].num_feeds; i++)
      if (ps->parts[k].feed_index[i] >= r->num_feeds) r->num_feeds = ps->parts[k].feed_index[i] + 1;
    for (int i = 0; st == GR_OK && i < ps->parts[k].num_nodes; i++)
      if (ps->parts[k].nodes[i]->op->flags & GR_OP_STEP_STACKS) r->uses_stacks = true;
  }
  if (st == GR_OK) st = gr_server_container_get(s, c, in, true, &r->box, err);
  if (st == GR_OK) st = gr_server_links_of(s, ps, r, err);
  if (st == GR_OK) {
    st = gr_device_plan_new_from(ps, s->exec_pool, &r->plan, err);
    ps = NULL;
  }
  if (st != GR_OK) {
    gr_partitions_free(ps);
    gr_server_registered_unref(r);
    return st;
  }
  *out = r;
  return GR_OK;
}

/* Builds the registration here, then waits for its peers' connections
 * without this thread; answered with its handle once they are up. */
void gr_server_register(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  gr_register_req q;
  registered *r = NULL;
  gr_status st = gr_register_req_unpack(m, &q, &e);
  if (st == GR_OK) st = build_registration(s, c, m, &q, &r, &e);
  uint64_t id = q.id;
  gr_inmsg_free(m); /* q points into m */
  reg_wait *w = st == GR_OK ? calloc(1, sizeof *w) : NULL;
  if (st == GR_OK && !w) st = gr_error_set_oom(&e);
  if (st != GR_OK) {
    gr_server_registered_unref(r);
    gr_error_prefix(&e, "%s: registering a graph", s->task);
    gr_server_respond_error(c, id, &e);
    return;
  }
  gr_conn_ref(c);
  *w = (reg_wait){.s = s, .c = c, .id = id, .r = r};
  await_peers(s, w, gr_device_plan_partitions(r->plan));
}

/* Answered like every request: an error names an unknown handle (or one
 * another client registered, which it may not drop), so a client that
 * waits for the answer is never left waiting. */
void gr_server_deregister(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  uint64_t id = 0, handle = 0;
  registered *r = NULL;
  gr_deregister_req q;
  gr_status st = gr_deregister_req_unpack(m, &q, &e);
  id = q.id;
  handle = q.handle;
  gr_inmsg_free(m);
  if (st == GR_OK) {
    pthread_mutex_lock(&s->mu);
    r = gr_map_get_u64(&s->graphs, handle);
    if (r && r->owner == c)
      gr_map_remove_u64(&s->graphs, handle);
    else
      r = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!r)
      st = gr_error_set(&e, GR_ERR_NOT_FOUND,
                        "%s has no graph %llu of this client (never registered, deregistered "
                        "already, or another client's)",
                        s->task, (unsigned long long)handle);
  }
  gr_server_registered_unref(r); /* a step running it holds a reference */
  gr_server_answer(c, id, st == GR_OK ? gr_response_pack(id, NULL) : NULL, st == GR_OK ? NULL : &e);
}

void gr_server_drop_graphs_of(gr_server *s, const gr_conn *c) {
  for (;;) {
    registered *r = NULL;
    pthread_mutex_lock(&s->mu);
    void *v;
    for (size_t pos = 0; !r && gr_map_next(&s->graphs, &pos, NULL, &v);)
      if (((registered *)v)->owner == c) r = v;
    if (r) gr_map_remove_u64(&s->graphs, r->handle);
    pthread_mutex_unlock(&s->mu);
    if (!r) return;
    gr_server_registered_unref(r); /* a step running it holds a reference */
  }
}
