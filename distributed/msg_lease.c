/* lease: takes a named lease on a task (or only looks at it); answered
 * with its state (server_lease.c keeps them). */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {
    {"id", NULL}, {"name", NULL}, {"take", NULL}, {"holder", NULL}};
static const gr_msg_field results[] = {
    {"held", NULL}, {"taken", NULL}, {"ago", NULL}, {"holder", NULL}};
const gr_msg_spec gr_lease_spec = {GR_MSG_LEASE, "client → task", GR_MSG_FIELDS(fields),
                                   GR_MSG_FIELDS(results)};

gr_outmsg *gr_lease_req_pack(const gr_lease_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_LEASE, 4);
  if (!m) return NULL;
  gr_outmsg_u64(m, "id", q->id);
  gr_outmsg_str(m, "name", q->name);
  gr_outmsg_bool(m, "take", q->take);
  gr_outmsg_str(m, "holder", q->holder);
  return m;
}

gr_status gr_lease_req_unpack(gr_inmsg *in, gr_lease_req *out, gr_error *err) {
  *out = (gr_lease_req){0};
  const msgpack_object *root = &in->msg.root;
  GR_TRY(gr_request_id(in, &out->id, err));
  GR_TRY(gr_msg_strz(&in->msg, root, "name", GR_LEASE_NAME_MAX, &out->name, err));
  GR_TRY(gr_msg_bool(root, "take", &out->take, err));
  GR_TRY(gr_msg_strz(&in->msg, root, "holder", GR_LEASE_HOLDER_MAX, &out->holder, err));
  if (!out->name[0])
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field 'name': a lease needs a name");
  return GR_OK;
}

gr_outmsg *gr_lease_resp_pack(uint64_t id, const gr_lease_resp *r) {
  gr_outmsg *m = gr_response_begin(id, 4);
  if (!m) return NULL;
  gr_outmsg_bool(m, "held", r->held);
  gr_outmsg_u64(m, "taken", r->taken);
  gr_outmsg_u64(m, "ago", r->ago);
  gr_outmsg_str(m, "holder", r->holder);
  return m;
}

gr_status gr_lease_resp_unpack(gr_inmsg *in, gr_lease_resp *out, gr_error *err) {
  *out = (gr_lease_resp){0};
  const msgpack_object *root = &in->msg.root;
  GR_TRY(gr_msg_bool(root, "held", &out->held, err));
  GR_TRY(gr_msg_u64(root, "taken", &out->taken, err));
  GR_TRY(gr_msg_u64(root, "ago", &out->ago, err));
  return gr_msg_strz(&in->msg, root, "holder", GR_LEASE_HOLDER_MAX, &out->holder, err);
}
