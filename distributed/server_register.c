/* Registration: a master sends the partitions of one prepared signature
 * that run on this task (serialized graphs with their feeds and fetches) and
 * the tasks they push to; the server decodes them through the builder
 * calls, builds an executor per device and answers with a handle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

#define MAX_PARTS 64
#define MAX_PEERS 4096

void gr_server_registered_unref(registered *r) {
  if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  gr_device_plan_free(r->plan);
  gr_server_container_unref(r->box);
  free(r);
}

/* Finds "name" (an output `index` of it) in g; errors name the part. */
static gr_status endpoint(gr_graph *g, const msgpack_object *o, gr_output *out, int *caller,
                          int max_caller, gr_error *err) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "an endpoint must be [node, output, index]");
  const char *name;
  size_t n;
  int64_t idx, ci;
  GR_TRY(gr_msg_item_str(&o->via.array.ptr[0], "endpoint node", &name, &n, err));
  GR_TRY(gr_msg_item_i64(&o->via.array.ptr[1], "endpoint output", 0, GR_MAX_OUTPUTS, &idx, err));
  GR_TRY(gr_msg_item_i64(&o->via.array.ptr[2], "endpoint index", 0, max_caller, &ci, err));
  char buf[1024];
  if (n >= sizeof buf) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "endpoint name too long");
  memcpy(buf, name, n);
  buf[n] = '\0';
  gr_node *node = gr_graph_find_node(g, buf);
  if (!node || idx >= node->num_outputs)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "endpoint '%s:%d' is not in the graph", buf,
                        (int)idx);
  *out = (gr_output){node, (int)idx};
  *caller = (int)ci;
  return GR_OK;
}

static gr_status endpoints(gr_graph *g, const msgpack_object *arr, gr_output **eps, int **index,
                           int *num, gr_error *err) {
  if (arr->type != MSGPACK_OBJECT_ARRAY || arr->via.array.size > (1u << 20))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feeds and fetches must be arrays");
  uint32_t n = arr->via.array.size;
  *eps = gr_alloc_array(n + 1, sizeof **eps);
  *index = gr_alloc_array(n + 1, sizeof **index);
  if (!*eps || !*index) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < n; i++)
    GR_TRY(endpoint(g, &arr->via.array.ptr[i], &(*eps)[i], &(*index)[i], 1 << 20, err));
  *num = (int)n;
  return GR_OK;
}

static bool is_device(const gr_server *s, const char *d, size_t n) {
  for (int k = 0; k < s->num_devices; k++)
    if (strlen(s->devices[k]) == n && !memcmp(s->devices[k], d, n)) return true;
  return false;
}

/* One partition: [device, graph offset, graph bytes, feeds, fetches]. */
static gr_status part_of(gr_server *s, const msgpack_object *o, const gr_inmsg *in, gr_partition *p,
                         gr_error *err) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "a partition must be [device, offset, bytes, feeds, fetches]");
  const msgpack_object *f = o->via.array.ptr;
  const char *dev;
  size_t dl;
  int64_t off, len;
  GR_TRY(gr_msg_item_str(&f[0], "partition device", &dev, &dl, err));
  if (!is_device(s, dev, dl))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "device '%.*s' is not a device of %s",
                        (int)dl, dev, s->task);
  size_t body = in->h.body_len;
  GR_TRY(gr_msg_item_i64(&f[1], "graph offset", 0, (int64_t)body, &off, err));
  GR_TRY(gr_msg_item_i64(&f[2], "graph bytes", 0, (int64_t)body - off, &len, err));
  for (int k = 0; k < s->num_devices; k++)
    if (strlen(s->devices[k]) == dl && !memcmp(s->devices[k], dev, dl)) p->device = s->devices[k];
  if (!(p->graph = gr_graph_new())) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  /* no body (body_len 0): the partition's graph is 0 bytes, which does not decode */
  const char *data = in->body ? (const char *)in->body->data + off : "";
  GR_TRY(gr_wire_decode_graph(data, (size_t)len, p->graph, NULL, err));
  GR_TRY(endpoints(p->graph, &f[3], &p->feeds, &p->feed_index, &p->num_feeds, err));
  GR_TRY(endpoints(p->graph, &f[4], &p->fetches, &p->fetch_index, &p->num_fetches, err));
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
static gr_status peers_of(gr_server *s, const msgpack_object_array *arr, gr_error *err) {
  for (uint32_t i = 0; i < arr->size; i++) {
    const msgpack_object *o = &arr->ptr[i];
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
        o->via.array.ptr[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "a peer must be [task, address, inc]");
    const char *name, *addr;
    size_t nl, al;
    GR_TRY(gr_msg_item_str(&o->via.array.ptr[0], "peer task", &name, &nl, err));
    GR_TRY(gr_msg_item_str(&o->via.array.ptr[1], "peer address", &addr, &al, err));
    if (nl == 0 || nl >= GR_TASK_NAME_MAX || al >= 128)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "peer name or address too long");
    char task[GR_TASK_NAME_MAX], address[128];
    memcpy(task, name, nl), task[nl] = '\0';
    memcpy(address, addr, al), address[al] = '\0';
    uint64_t inc = o->via.array.ptr[2].via.u64;
    if (!strcmp(task, s->task)) continue;
    pthread_mutex_lock(&s->mu);
    peer *p = gr_server_find_peer(s, task);
    gr_conn *old = NULL;
    if (p && (p->incarnation != inc || strcmp(p->address, address) != 0)) {
      old = p->conn; /* the task restarted or moved: dial again */
      p->conn = NULL;
    }
    if (!p && s->num_peers == s->cap_peers) {
      int cap = s->cap_peers ? 2 * s->cap_peers : 8;
      peer *more = cap <= MAX_PEERS ? gr_realloc_array(s->peers, (size_t)cap, sizeof *more) : NULL;
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
    if (old) {
      gr_conn_close(old);
      gr_conn_unref(old);
    }
  }
  return GR_OK;
}

static void on_peer_message(void *arg, gr_conn *c, gr_inmsg *m) {
  gr_inmsg_free(m); /* tasks only push to each other: nothing comes back */
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
  if (st == GR_OK) {
    if ((resp = gr_server_response(w->id, 1, NULL))) gr_outmsg_u64(resp, "handle", handle);
  } else {
    gr_error_prefix(&e, "%s: registering a graph", s->task);
  }
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
  gr_conn_handler h = {on_peer_message, on_peer_close, s, NULL, NULL};
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

/* Lists w on peer p (under s->mu), starting p's dial when none runs; false
 * (w's error set) when neither can be done. *job: a dial to start once
 * s->mu is released. */
static bool wait_for_peer(gr_server *s, peer *p, reg_wait *w, dial_job **job, gr_error *err) {
  if (p->num_waiters == p->cap_waiters) {
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
  p->waiters[p->num_waiters++] = w;
  w->pending++;
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

/* Waits (without a thread) for a connection to every peer a _send of the
 * partitions pushes to; w is answered by the last dial, or here when no
 * dial is needed. */
static void await_peers(gr_server *s, reg_wait *w, const gr_partitions *ps) {
  dial_job *jobs[MAX_DIALS];
  int njobs = 0;
  gr_error e;
  pthread_mutex_lock(&s->mu);
  w->pending = 1; /* this call's own, ended below */
  for (int k = 0; k < ps->num_parts && w->st == GR_OK; k++) {
    gr_graph *g = ps->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g) && w->st == GR_OK; id++) {
      gr_node *n = gr_graph_node(g, id);
      if (!(n->op->flags & GR_OP_TRANSFER) || n->num_outputs > 0) continue; /* sends only */
      char task[GR_TASK_NAME_MAX];
      gr_task_of_device(gr_node_attr_string(n, "recv_device", ""), task, sizeof task);
      if (!strcmp(task, s->task)) continue;
      peer *p = gr_server_find_peer(s, task);
      if (!p) {
        reg_fail(w,
                 gr_error_set(&e, GR_ERR_INVALID_ARGUMENT,
                              "node '%s' sends to %s, which the registration does not name",
                              n->name, task),
                 &e);
        break;
      }
      bool listed = false; /* once per peer */
      for (int i = 0; i < p->num_waiters && !listed; i++) listed = p->waiters[i] == w;
      if (listed || (p->conn && gr_conn_is_open(p->conn))) continue;
      dial_job *job = NULL;
      if (!wait_for_peer(s, p, w, &job, &e)) reg_fail(w, e.code, &e);
      if (job) jobs[njobs++] = job; /* at most MAX_DIALS: wait_for_peer counts them */
    }
  }
  bool last = reg_wait_end(w, GR_OK, NULL);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < njobs; i++) start_dial(jobs[i]);
  if (last) reg_complete(w);
}

/* Checks and builds a registration: its peers noted, its partitions decoded
 * and their executors built (no dial). */
static gr_status build_registration(gr_server *s, gr_conn *c, const gr_inmsg *in, registered **out,
                                    gr_error *err) {
  const msgpack_object *root = &in->msg.root;
  uint64_t inc;
  const msgpack_object_array *parts, *peers;
  *out = NULL;
  GR_TRY(gr_msg_u64(root, "inc", &inc, err));
  if (inc != s->incarnation)
    return gr_error_set(err, GR_ERR_ABORTED,
                        "%s restarted: the master registers for incarnation %016llx, this is "
                        "%016llx",
                        s->task, (unsigned long long)inc, (unsigned long long)s->incarnation);
  GR_TRY(gr_msg_array(root, "peers", MAX_PEERS, &peers, err));
  GR_TRY(gr_msg_array(root, "parts", MAX_PARTS, &parts, err));
  if (parts->size == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "no partitions");
  GR_TRY(peers_of(s, peers, err));
  gr_partitions *ps = calloc(1, sizeof *ps);
  gr_status st = ps ? GR_OK : gr_error_set_oom(err);
  if (st == GR_OK && !(ps->parts = calloc(parts->size, sizeof *ps->parts)))
    st = gr_error_set_oom(err);
  registered *r = st == GR_OK ? calloc(1, sizeof *r) : NULL;
  if (st == GR_OK && !r) st = gr_error_set_oom(err);
  if (r) r->refs = 1;
  for (uint32_t k = 0; k < parts->size && st == GR_OK; k++) {
    ps->num_parts++;
    st = part_of(s, &parts->ptr[k], in, &ps->parts[k], err);
    if (st != GR_OK) gr_error_prefix(err, "partition %u", k);
    for (int i = 0; st == GR_OK && i < ps->parts[k].num_feeds; i++)
      if (ps->parts[k].feed_index[i] >= r->num_feeds) r->num_feeds = ps->parts[k].feed_index[i] + 1;
    for (int i = 0; st == GR_OK && i < ps->parts[k].num_nodes; i++)
      if (ps->parts[k].nodes[i]->op->flags & GR_OP_STEP_STACKS) r->uses_stacks = true;
  }
  if (st == GR_OK) st = gr_server_container_get(s, c, root, true, &r->box, err);
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
  uint64_t id = 0;
  registered *r = NULL;
  gr_status st = gr_msg_u64(&m->msg.root, "id", &id, &e);
  if (st == GR_OK) st = build_registration(s, c, m, &r, &e);
  gr_inmsg_free(m);
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
  gr_status st = gr_msg_u64(&m->msg.root, "id", &id, &e);
  if (st == GR_OK) st = gr_msg_u64(&m->msg.root, "handle", &handle, &e);
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
  gr_server_answer(c, id, st == GR_OK ? gr_server_response(id, 0, NULL) : NULL,
                   st == GR_OK ? NULL : &e);
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
