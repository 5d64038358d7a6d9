/* run: one step of a registered graph on a task (or several in a row: a
 * multi-step run), with the caller's feeds that its partitions read;
 * answered with the fetches they fill, the tensors the task pushed to
 * others, and the step's node runs when traced. */
#include <stdio.h>

#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"trace", "the step is traced"},
                                      {"id", NULL},
                                      {"handle", NULL},
                                      {"inc", NULL},
                                      {"step", NULL},
                                      {"run", NULL},
                                      {"seed", NULL},
                                      {"steps", "a multi-step run: its iterations"},
                                      {"feeds", NULL}};
static const gr_msg_field results[] = {
    {"fetches", NULL}, {"sends", NULL}, {"bytes", NULL}, {"trace", "the step is traced"}};
const gr_msg_spec gr_run_spec = {GR_MSG_RUN, "client → task", GR_MSG_FIELDS(fields),
                                 GR_MSG_FIELDS(results)};

/* [index, tensor] by reference */
static gr_status pack_item(gr_outmsg *m, int index, const gr_tensor *t) {
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_int(gr_outmsg_packer(m), index);
  return gr_outmsg_pack_tensor(m, t, false, NULL); /* fails only when out of memory */
}

/* Item i of a list of [index, tensor]: its index, in [0, num). */
static gr_status item_index(const msgpack_object_array *items, uint32_t i, const char *what,
                            int num, int64_t *k, gr_error *err) {
  const msgpack_object *o = &items->ptr[i];
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s %u must be [index, tensor]", what, i);
  char w[32];
  snprintf(w, sizeof w, "%s index", what);
  return gr_msg_item_i64(&o->via.array.ptr[0], w, 0, num - 1, k, err);
}

/* Item i's tensor: a view of in's body. */
static gr_status item_tensor(const gr_inmsg *in, const msgpack_object_array *items, uint32_t i,
                             gr_tensor *out, bool *dead, gr_error *err) {
  return gr_msg_tensor_at(&items->ptr[i].via.array.ptr[1], in->body, in->body_off, in->h.body_len,
                          out, dead, err);
}

gr_outmsg *gr_run_req_pack(const gr_run_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_RUN, 7 + q->trace + (q->steps > 1));
  if (!m) return NULL;
  if (q->trace) gr_outmsg_bool(m, "trace", true);
  if (q->steps > 1) gr_outmsg_u64(m, "steps", q->steps);
  gr_outmsg_u64(m, "id", q->id);
  gr_outmsg_u64(m, "handle", q->handle);
  gr_outmsg_u64(m, "inc", q->inc);
  gr_outmsg_u64(m, "step", q->step);
  gr_outmsg_u64(m, "run", q->run);
  gr_outmsg_u64(m, "seed", q->seed);
  gr_outmsg_key(m, "feeds");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)q->num_feeds);
  for (int i = 0; i < q->num_feeds; i++)
    if (pack_item(m, q->feeds[i], &q->values[q->feeds[i]]) != GR_OK) {
      gr_outmsg_free(m);
      return NULL;
    }
  return m;
}

gr_status gr_run_req_unpack(const gr_inmsg *in, gr_run_req *out, gr_error *err) {
  *out = (gr_run_req){0};
  const msgpack_object *root = &in->msg.root;
  GR_TRY(gr_request_id(in, &out->id, err));
  GR_TRY(gr_msg_u64(root, "handle", &out->handle, err));
  GR_TRY(gr_msg_u64(root, "inc", &out->inc, err));
  GR_TRY(gr_msg_u64(root, "step", &out->step, err));
  GR_TRY(gr_msg_u64(root, "run", &out->run, err));
  GR_TRY(gr_msg_u64(root, "seed", &out->seed, err));
  const msgpack_object *tr = gr_msg_get(root, "trace"); /* anything but true: not traced */
  out->trace = tr && tr->type == MSGPACK_OBJECT_BOOLEAN && tr->via.boolean;
  out->steps = 1;
  if (gr_msg_get(root, "steps")) {
    int64_t n;
    GR_TRY(gr_msg_i64(root, "steps", 1, GR_RUN_MAX_STEPS, &n, err));
    out->steps = (uint64_t)n;
  }
  return gr_msg_array(root, "feeds", GR_MSG_MAX_ITEMS, &out->feed_items, err);
}

gr_status gr_run_req_feeds(const gr_inmsg *in, const gr_run_req *q, gr_tensor *values, int num,
                           gr_error *err) {
  for (uint32_t i = 0; i < q->feed_items->size; i++) {
    int64_t k;
    bool dead;
    GR_TRY(item_index(q->feed_items, i, "feed", num, &k, err));
    if (!gr_tensor_is_empty(&values[k]))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feed %lld is given twice", (long long)k);
    GR_TRY(item_tensor(in, q->feed_items, i, &values[k], &dead, err));
    if (dead)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feed %lld has no value", (long long)k);
  }
  return GR_OK;
}

/* The trace's events as [[device, node, iteration, start, end, bytes]...],
 * times in ns since t0 (the task's clock). */
static void pack_trace(gr_outmsg *m, const gr_step_trace *t, int64_t t0) {
  msgpack_packer *pk = gr_outmsg_packer(m);
  int n = gr_step_trace_count(t);
  gr_outmsg_key(m, "trace");
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    msgpack_pack_array(pk, 6);
    gr_pack_str(pk, e->node->assigned_device ? e->node->assigned_device : "");
    gr_pack_str(pk, e->node->name);
    msgpack_pack_int64(pk, e->iteration);
    msgpack_pack_int64(pk, e->start_ns - t0);
    msgpack_pack_int64(pk, e->end_ns - t0);
    msgpack_pack_int64(pk, e->out_bytes);
  }
}

gr_outmsg *gr_run_resp_pack(uint64_t id, const gr_run_resp *r) {
  int filled = 0;
  for (int i = 0; i < r->num_fetches; i++) filled += !gr_tensor_is_empty(&r->fetches[i]);
  gr_outmsg *m = gr_response_begin(id, r->trace ? 4 : 3);
  if (!m) return NULL;
  gr_outmsg_key(m, "fetches");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)filled);
  for (int i = 0; i < r->num_fetches; i++)
    if (!gr_tensor_is_empty(&r->fetches[i]) && pack_item(m, i, &r->fetches[i]) != GR_OK) {
      gr_outmsg_free(m);
      return NULL;
    }
  gr_outmsg_i64(m, "sends", r->sends);
  gr_outmsg_i64(m, "bytes", r->bytes);
  if (r->trace) pack_trace(m, r->trace, r->trace_t0);
  return m;
}

/* A well-formed traced event into *e (false: skipped). */
static bool event_of(gr_msg *z, const msgpack_object *o, gr_run_event *e) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 6) return false;
  const msgpack_object *f = o->via.array.ptr;
  const char *dev, *name;
  size_t dl, nl;
  return gr_msg_item_str(&f[0], "device", &dev, &dl, NULL) == GR_OK &&
         gr_msg_item_str(&f[1], "node", &name, &nl, NULL) == GR_OK && dl < GR_DEVICE_NAME_MAX &&
         nl < 1024 &&
         gr_msg_item_i64(&f[2], "", INT64_MIN, INT64_MAX, &e->iteration, NULL) == GR_OK &&
         gr_msg_item_i64(&f[3], "", INT64_MIN, INT64_MAX, &e->start_ns, NULL) == GR_OK &&
         gr_msg_item_i64(&f[4], "", INT64_MIN, INT64_MAX, &e->end_ns, NULL) == GR_OK &&
         gr_msg_item_i64(&f[5], "", 0, INT64_MAX, &e->bytes, NULL) == GR_OK &&
         (e->device = gr_msg_zdup(z, dev, dl)) && (e->node = gr_msg_zdup(z, name, nl));
}

gr_status gr_run_resp_unpack(gr_inmsg *in, uint32_t max_fetches, gr_run_resp *out, gr_error *err) {
  const msgpack_object *root = &in->msg.root;
  *out = (gr_run_resp){0};
  GR_TRY(gr_msg_array(root, "fetches", max_fetches, &out->fetch_items, err));
  GR_TRY(gr_msg_i64(root, "sends", 0, INT64_MAX, &out->sends, err));
  GR_TRY(gr_msg_i64(root, "bytes", 0, INT64_MAX, &out->bytes, err));
  const msgpack_object *tr = gr_msg_get(root, "trace");
  if (!tr || tr->type != MSGPACK_OBJECT_ARRAY) return GR_OK;
  if (!(out->events = gr_msg_zalloc(&in->msg, tr->via.array.size * sizeof *out->events)))
    return gr_error_set_oom(err);
  for (uint32_t i = 0; i < tr->via.array.size; i++)
    out->num_events += event_of(&in->msg, &tr->via.array.ptr[i], &out->events[out->num_events]);
  return GR_OK;
}

gr_status gr_run_resp_fetches(const gr_inmsg *in, const gr_run_resp *r, const int *mine,
                              int num_mine, int num, gr_tensor *out, gr_error *err) {
  for (uint32_t i = 0; i < r->fetch_items->size; i++) {
    int64_t k;
    bool dead, asked = false;
    GR_TRY(item_index(r->fetch_items, i, "fetch", num, &k, err));
    for (int j = 0; j < num_mine && !asked; j++) asked = mine[j] == k;
    if (!asked || !gr_tensor_is_empty(&out[k]))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          asked ? "fetch %lld is given twice"
                                : "fetch %lld is not one it was asked for",
                          (long long)k);
    GR_TRY(item_tensor(in, r->fetch_items, i, &out[k], &dead, err));
  }
  for (int j = 0; j < num_mine; j++)
    if (gr_tensor_is_empty(&out[mine[j]]))
      return gr_error_set(err, GR_ERR_INTERNAL, "fetch %d produced no value", mine[j]);
  return GR_OK;
}
