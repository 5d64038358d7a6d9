/* get_status: a task's name, incarnation and devices (the master asks each
 * task once, when it connects); heartbeat: a master's ping, answered at
 * once without results. */
#include "distributed/msg_internal.h"

static const gr_msg_field status_fields[] = {{"id", NULL}};
static const gr_msg_field status_results[] = {
    {"task", NULL}, {"inc", NULL}, {"devices", NULL}, {"threads", NULL}, {"cores", NULL}};
const gr_msg_spec gr_get_status_spec = {GR_MSG_GET_STATUS, "client → task",
                                        GR_MSG_FIELDS(status_fields),
                                        GR_MSG_FIELDS(status_results)};

static const gr_msg_field heartbeat_fields[] = {{"id", NULL}};
const gr_msg_spec gr_heartbeat_spec = {GR_MSG_HEARTBEAT, "peer → server",
                                       GR_MSG_FIELDS(heartbeat_fields), NULL, 0};

/* A request of one field, its id. */
static gr_outmsg *id_only(gr_msg_type type, uint64_t id) {
  gr_outmsg *m = gr_outmsg_new(type, 1);
  if (m) gr_outmsg_u64(m, "id", id);
  return m;
}

gr_outmsg *gr_get_status_req_pack(const gr_get_status_req *q) {
  return id_only(GR_MSG_GET_STATUS, q->id);
}

gr_status gr_get_status_req_unpack(const gr_inmsg *in, gr_get_status_req *out, gr_error *err) {
  *out = (gr_get_status_req){0};
  return gr_request_id(in, &out->id, err);
}

gr_outmsg *gr_get_status_resp_pack(uint64_t id, const gr_get_status_resp *r) {
  gr_outmsg *m = gr_response_begin(id, 5);
  if (!m) return NULL;
  gr_outmsg_str(m, "task", r->task);
  gr_outmsg_u64(m, "inc", r->inc);
  gr_outmsg_u64(m, "threads", (uint64_t)r->threads);
  gr_outmsg_u64(m, "cores", (uint64_t)r->cores);
  gr_outmsg_key(m, "devices");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)r->num_devices);
  for (int i = 0; i < r->num_devices; i++) gr_pack_str(gr_outmsg_packer(m), r->devices[i]);
  return m;
}

gr_status gr_get_status_resp_unpack(gr_inmsg *in, gr_get_status_resp *out, gr_error *err) {
  *out = (gr_get_status_resp){0};
  const msgpack_object *root = &in->msg.root;
  const msgpack_object_array *devs;
  GR_TRY(gr_msg_strz(&in->msg, root, "task", GR_TASK_NAME_MAX - 1, &out->task, err));
  GR_TRY(gr_msg_u64(root, "inc", &out->inc, err));
  int64_t x;
  GR_TRY(gr_msg_i64(root, "threads", 1, 1024, &x, err));
  out->threads = (int)x;
  GR_TRY(gr_msg_i64(root, "cores", 1, 65536, &x, err));
  out->cores = (int)x;
  GR_TRY(gr_msg_array(root, "devices", GR_STATUS_MAX_DEVICES, &devs, err));
  if (devs->size == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "no devices");
  const char **names = gr_msg_zalloc(&in->msg, devs->size * sizeof *names);
  if (!names) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < devs->size; i++) {
    const char *p;
    size_t n;
    GR_TRY(gr_msg_item_str(&devs->ptr[i], "device", &p, &n, err));
    if (!(names[i] = gr_msg_zdup(&in->msg, p, n))) return gr_error_set_oom(err);
  }
  out->devices = names;
  out->num_devices = (int)devs->size;
  return GR_OK;
}

gr_outmsg *gr_heartbeat_req_pack(const gr_heartbeat_req *q) {
  return id_only(GR_MSG_HEARTBEAT, q->id);
}

gr_status gr_heartbeat_req_unpack(const gr_inmsg *in, gr_heartbeat_req *out, gr_error *err) {
  *out = (gr_heartbeat_req){0};
  return gr_request_id(in, &out->id, err);
}
