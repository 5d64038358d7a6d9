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

/* Dials every peer a _send of the partitions pushes to, unless connected. */
static gr_status dial_peers(gr_server *s, gr_partitions *ps, gr_error *err) {
  for (int k = 0; k < ps->num_parts; k++) {
    gr_graph *g = ps->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g); id++) {
      gr_node *n = gr_graph_node(g, id);
      if (!(n->op->flags & GR_OP_TRANSFER) || n->num_outputs > 0) continue; /* sends only */
      char task[GR_TASK_NAME_MAX];
      gr_task_of_device(gr_node_attr_string(n, "recv_device", ""), task, sizeof task);
      if (!strcmp(task, s->task)) continue;
      pthread_mutex_lock(&s->mu);
      peer *p = gr_server_find_peer(s, task);
      char address[128] = "";
      bool need = p && (!p->conn || !gr_conn_is_open(p->conn));
      if (p) snprintf(address, sizeof address, "%s", p->address);
      pthread_mutex_unlock(&s->mu);
      if (!p)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                            "node '%s' sends to %s, which the registration does not name", n->name,
                            task);
      if (!need) continue;
      gr_conn *c;
      gr_conn_handler h = {on_peer_message, on_peer_close, s, NULL};
      GR_TRY(gr_conn_dial(s->loop, address, s->secret, s->cluster, 10000, &h, &c, err));
      pthread_mutex_lock(&s->mu);
      p = gr_server_find_peer(s, task);
      gr_conn *old = p->conn;
      p->conn = c;
      pthread_mutex_unlock(&s->mu);
      if (old) gr_conn_unref(old);
    }
  }
  return GR_OK;
}

static gr_status do_register(gr_server *s, gr_conn *c, const gr_inmsg *in, uint64_t *handle,
                             gr_error *err) {
  const msgpack_object *root = &in->msg.root;
  uint64_t inc;
  const msgpack_object_array *parts, *peers;
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
  if (st == GR_OK) st = dial_peers(s, ps, err);
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
  pthread_mutex_lock(&s->mu);
  r->handle = ++s->next_handle;
  r->owner = c;
  /* a client that closed has had its graphs dropped: this one would stay */
  bool open = gr_conn_is_open(c);
  bool ok = open && gr_map_put_u64(&s->graphs, r->handle, r);
  pthread_mutex_unlock(&s->mu);
  if (!ok) {
    gr_server_registered_unref(r);
    return open ? gr_error_set_oom(err)
                : gr_error_set(err, GR_ERR_CANCELLED, "the client's connection closed");
  }
  *handle = r->handle;
  return GR_OK;
}

void gr_server_register(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  uint64_t id = 0, handle = 0;
  gr_status st = gr_msg_u64(&m->msg.root, "id", &id, &e);
  if (st == GR_OK) st = do_register(s, c, m, &handle, &e);
  gr_inmsg_free(m);
  if (st != GR_OK) {
    gr_error_prefix(&e, "%s: registering a graph", s->task);
    gr_server_respond_error(c, id, &e);
    return;
  }
  gr_outmsg *r = gr_server_response(id, 1, NULL);
  if (!r) return;
  gr_outmsg_u64(r, "handle", handle);
  gr_conn_send(c, r, NULL);
}

void gr_server_deregister(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  uint64_t handle;
  if (gr_msg_u64(&m->msg.root, "handle", &handle, &e) == GR_OK) {
    pthread_mutex_lock(&s->mu);
    registered *r = gr_map_get_u64(&s->graphs, handle);
    if (r) gr_map_remove_u64(&s->graphs, handle);
    pthread_mutex_unlock(&s->mu);
    gr_server_registered_unref(r); /* a step running it holds a reference */
  }
  gr_inmsg_free(m);
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
