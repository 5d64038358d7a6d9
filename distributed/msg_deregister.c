/* deregister: drops a graph a client registered (by its handle); answered
 * without results, or with an error naming an unknown handle. */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"id", NULL}, {"handle", NULL}};
const gr_msg_spec gr_deregister_spec = {GR_MSG_DEREGISTER, "client → task", GR_MSG_FIELDS(fields),
                                        NULL, 0};

gr_outmsg *gr_deregister_req_pack(const gr_deregister_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_DEREGISTER, 2);
  if (!m) return NULL;
  gr_outmsg_u64(m, "id", q->id);
  gr_outmsg_u64(m, "handle", q->handle);
  return m;
}

gr_status gr_deregister_req_unpack(const gr_inmsg *in, gr_deregister_req *out, gr_error *err) {
  *out = (gr_deregister_req){0};
  GR_TRY(gr_request_id(in, &out->id, err));
  return gr_msg_u64(&in->msg.root, "handle", &out->handle, err);
}
