/* register: a master's partitions for one task (serialized graphs in the
 * body, with their feeds and fetches) and every task of the cluster as a
 * peer; answered with a handle. */
#include <stdlib.h>

#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"id", NULL},      {"inc", NULL},   {"container", NULL},
                                      {"private", NULL}, {"peers", NULL}, {"parts", NULL}};
static const gr_msg_field results[] = {{"handle", NULL}};
const gr_msg_spec gr_register_spec = {GR_MSG_REGISTER, "client → task", GR_MSG_FIELDS(fields),
                                      GR_MSG_FIELDS(results)};

static void pack_endpoints(msgpack_packer *pk, const gr_register_endpoint *eps, int n) {
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    msgpack_pack_array(pk, 3);
    gr_pack_str(pk, eps[i].node);
    msgpack_pack_int(pk, eps[i].output);
    msgpack_pack_int(pk, eps[i].index);
  }
}

gr_outmsg *gr_register_req_pack(const gr_register_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_REGISTER, 6);
  if (!m) {
    for (int p = 0; p < q->num_parts; p++) free((void *)q->parts[p].graph);
    return NULL;
  }
  msgpack_packer *pk = gr_outmsg_packer(m);
  gr_outmsg_u64(m, "id", q->id);
  gr_outmsg_u64(m, "inc", q->inc);
  gr_container_ref_pack(m, &q->container);
  gr_outmsg_key(m, "peers");
  msgpack_pack_array(pk, (size_t)q->num_peers);
  for (int j = 0; j < q->num_peers; j++) {
    msgpack_pack_array(pk, 3);
    gr_pack_str(pk, q->peers[j].task);
    gr_pack_str(pk, q->peers[j].address);
    msgpack_pack_uint64(pk, q->peers[j].inc);
  }
  gr_outmsg_key(m, "parts");
  msgpack_pack_array(pk, (size_t)q->num_parts);
  for (int p = 0; p < q->num_parts; p++) {
    const gr_register_part *pt = &q->parts[p];
    /* taken: a piece that cannot be added is freed, and finishing fails */
    size_t off = gr_outmsg_add_body(m, pt->graph, pt->graph_size, (void *)pt->graph);
    msgpack_pack_array(pk, 5);
    gr_pack_str(pk, pt->device);
    msgpack_pack_uint64(pk, off);
    msgpack_pack_uint64(pk, pt->graph_size);
    pack_endpoints(pk, pt->feeds, pt->num_feeds);
    pack_endpoints(pk, pt->fetches, pt->num_fetches);
  }
  return m;
}

/* [task, address, inc] */
static gr_status peer_of(gr_msg *z, const msgpack_object *o, gr_register_peer *out, gr_error *err) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
      o->via.array.ptr[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "a peer must be [task, address, inc]");
  const char *name, *addr;
  size_t nl, al;
  GR_TRY(gr_msg_item_str(&o->via.array.ptr[0], "peer task", &name, &nl, err));
  GR_TRY(gr_msg_item_str(&o->via.array.ptr[1], "peer address", &addr, &al, err));
  if (nl == 0 || nl >= GR_TASK_NAME_MAX || al >= 128)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "peer name or address too long");
  out->inc = o->via.array.ptr[2].via.u64;
  if (!(out->task = gr_msg_zdup(z, name, nl)) || !(out->address = gr_msg_zdup(z, addr, al)))
    return gr_error_set_oom(err);
  return GR_OK;
}

/* [node, output, index] */
static gr_status endpoint_of(gr_msg *z, const msgpack_object *o, gr_register_endpoint *out,
                             gr_error *err) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "an endpoint must be [node, output, index]");
  const char *name;
  size_t n;
  int64_t idx, ci;
  GR_TRY(gr_msg_item_str(&o->via.array.ptr[0], "endpoint node", &name, &n, err));
  GR_TRY(gr_msg_item_i64(&o->via.array.ptr[1], "endpoint output", 0, GR_MAX_OUTPUTS, &idx, err));
  GR_TRY(gr_msg_item_i64(&o->via.array.ptr[2], "endpoint index", 0, GR_MSG_MAX_ITEMS, &ci, err));
  if (n >= 1024) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "endpoint name too long");
  if (!(out->node = gr_msg_zdup(z, name, n))) return gr_error_set_oom(err);
  out->output = (int)idx;
  out->index = (int)ci;
  return GR_OK;
}

static gr_status endpoints_of(gr_msg *z, const msgpack_object *arr,
                              const gr_register_endpoint **out, int *num, gr_error *err) {
  if (arr->type != MSGPACK_OBJECT_ARRAY || arr->via.array.size > GR_MSG_MAX_ITEMS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feeds and fetches must be arrays");
  uint32_t n = arr->via.array.size;
  gr_register_endpoint *eps = gr_msg_zalloc(z, n * sizeof *eps);
  if (!eps) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < n; i++) GR_TRY(endpoint_of(z, &arr->via.array.ptr[i], &eps[i], err));
  *out = eps;
  *num = (int)n;
  return GR_OK;
}

/* [device, graph offset, graph bytes, feeds, fetches] */
static gr_status part_of(gr_inmsg *in, const msgpack_object *o, gr_register_part *out,
                         gr_error *err) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "a partition must be [device, offset, bytes, feeds, fetches]");
  const msgpack_object *f = o->via.array.ptr;
  const char *dev;
  size_t dl, body = in->h.body_len;
  int64_t off, len;
  GR_TRY(gr_msg_item_str(&f[0], "partition device", &dev, &dl, err));
  GR_TRY(gr_msg_item_i64(&f[1], "graph offset", 0, (int64_t)body, &off, err));
  GR_TRY(gr_msg_item_i64(&f[2], "graph bytes", 0, (int64_t)body - off, &len, err));
  if (!(out->device = gr_msg_zdup(&in->msg, dev, dl))) return gr_error_set_oom(err);
  /* no body (body_len 0): the graph is 0 bytes, which does not decode */
  out->graph = in->body ? (const char *)in->body->data + off : "";
  out->graph_size = (size_t)len;
  GR_TRY(endpoints_of(&in->msg, &f[3], &out->feeds, &out->num_feeds, err));
  return endpoints_of(&in->msg, &f[4], &out->fetches, &out->num_fetches, err);
}

gr_status gr_register_req_unpack(gr_inmsg *in, gr_register_req *out, gr_error *err) {
  *out = (gr_register_req){0};
  const msgpack_object *root = &in->msg.root;
  const msgpack_object_array *parts, *peers;
  GR_TRY(gr_request_id(in, &out->id, err));
  GR_TRY(gr_msg_u64(root, "inc", &out->inc, err));
  GR_TRY(gr_msg_array(root, "peers", GR_REGISTER_MAX_PEERS, &peers, err));
  GR_TRY(gr_msg_array(root, "parts", GR_REGISTER_MAX_PARTS, &parts, err));
  if (parts->size == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "no partitions");
  gr_register_peer *pe = gr_msg_zalloc(&in->msg, peers->size * sizeof *pe);
  gr_register_part *pa = gr_msg_zalloc(&in->msg, parts->size * sizeof *pa);
  if (!pe || !pa) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < peers->size; i++) GR_TRY(peer_of(&in->msg, &peers->ptr[i], &pe[i], err));
  for (uint32_t k = 0; k < parts->size; k++) {
    gr_status st = part_of(in, &parts->ptr[k], &pa[k], err);
    if (st != GR_OK) {
      gr_error_prefix(err, "partition %u", k);
      return st;
    }
  }
  out->peers = pe;
  out->num_peers = (int)peers->size;
  out->parts = pa;
  out->num_parts = (int)parts->size;
  return GR_OK;
}

gr_outmsg *gr_register_resp_pack(uint64_t id, const gr_register_resp *r) {
  gr_outmsg *m = gr_response_begin(id, 1);
  if (!m) return NULL;
  gr_outmsg_u64(m, "handle", r->handle);
  return m;
}

gr_status gr_register_resp_unpack(const gr_inmsg *in, gr_register_resp *out, gr_error *err) {
  *out = (gr_register_resp){0};
  return gr_msg_u64(&in->msg.root, "handle", &out->handle, err);
}
