/* reset: drops one shared container on a task, or every shared one;
 * answered with how many went. */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"id", NULL}, {"container", NULL}};
static const gr_msg_field results[] = {{"dropped", NULL}};
const gr_msg_spec gr_reset_spec = {GR_MSG_RESET, "client → task", GR_MSG_FIELDS(fields),
                                   GR_MSG_FIELDS(results)};

gr_outmsg *gr_reset_req_pack(const gr_reset_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_RESET, 2);
  if (!m) return NULL;
  gr_outmsg_u64(m, "id", q->id);
  gr_outmsg_str(m, "container", q->container);
  return m;
}

gr_status gr_reset_req_unpack(gr_inmsg *in, gr_reset_req *out, gr_error *err) {
  *out = (gr_reset_req){0};
  GR_TRY(gr_request_id(in, &out->id, err));
  return gr_container_field(in, true, &out->container, err);
}

gr_outmsg *gr_reset_resp_pack(uint64_t id, const gr_reset_resp *r) {
  gr_outmsg *m = gr_response_begin(id, 1);
  if (!m) return NULL;
  gr_outmsg_u64(m, "dropped", r->dropped);
  return m;
}

gr_status gr_reset_resp_unpack(const gr_inmsg *in, gr_reset_resp *out, gr_error *err) {
  *out = (gr_reset_resp){0};
  return gr_msg_u64(&in->msg.root, "dropped", &out->dropped, err);
}
